/* SPDX-License-Identifier: MIT */
/* Starting executors and building function environments. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guard.h"
#include "snapshotter.h"

extern char **environ;

static int place_fd(int fd, int want)
{
	if (fd == want)
		return fcntl(fd, F_SETFD, 0);
	return dup2(fd, want) < 0 ? -1 : 0;
}

/* environ with PHOS_EXECUTOR_PARENT and PHOS_SIM_TWINS (when not NULL) set
 * to the given "NAME=value" strings: a malloc'd array of borrowed strings. */
static char **exec_env(char *parent, char *twins)
{
	size_t n = 0, k = 0;
	char **env;

	while (environ && environ[n])
		n++;
	env = malloc((n + 3) * sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "PHOS_EXECUTOR_PARENT=", 21) &&
		    !(twins && !strncmp(environ[i], "PHOS_SIM_TWINS=", 15)))
			env[k++] = environ[i];
	env[k++] = parent;
	if (twins)
		env[k++] = twins;
	env[k] = NULL;
	return env;
}

int phos_executor_spawn(const struct phos_runtime_paths *paths, int channel, int control,
			const char *const extra[], pid_t *ret_pid)
{
	const char *argv[32];
	unsigned n = 0;
	char parent[48], *twins = NULL, **env;
	pid_t pid;
	int r = 0;

	argv[n++] = paths->executor;
	argv[n++] = "--fd";
	argv[n++] = "3";
	argv[n++] = "--device";
	argv[n++] = paths->device;
	if (control >= 0) {
		argv[n++] = "--control-fd";
		argv[n++] = "4";
	}
	if (paths->gpus && *paths->gpus) {
		argv[n++] = "--gpus";
		argv[n++] = paths->gpus;
	}
	for (unsigned i = 0; extra && extra[i]; i++) {
		if (n >= 31)
			return -E2BIG;
		argv[n++] = extra[i];
	}
	argv[n] = NULL;
	/* it ends when we do (ctxpool/executor/main.c, parent_watch) */
	snprintf(parent, sizeof(parent), "PHOS_EXECUTOR_PARENT=%d", (int)getpid());
	if (paths->sim_twins && asprintf(&twins, "PHOS_SIM_TWINS=%s", paths->sim_twins) < 0)
		return -ENOMEM;
	/* The environment is made before the fork: the child of a process with
	 * other threads may only make async-signal-safe calls until it execs
	 * (a setenv there, whose malloc waited for a lock another thread held
	 * at the fork, hung a deploy under ASan). */
	env = exec_env(parent, twins);
	if (!env) {
		free(twins);
		return -ENOMEM;
	}
	pid = fork();
	if (pid < 0) {
		r = -errno;
		goto out;
	}
	if (pid == 0) {
		static const char msg[] = "phos: cannot run the executor\n";
		/* Move both out of the way first: 3 and 4 may be taken by either. */
		int ch = fcntl(channel, F_DUPFD_CLOEXEC, 10), ctl = control >= 0 ? fcntl(control, F_DUPFD_CLOEXEC, 10) : -1;

		if (ch < 0 || place_fd(ch, 3) < 0 || (control >= 0 && (ctl < 0 || place_fd(ctl, 4) < 0)))
			_exit(127);
		signal(SIGPIPE, SIG_DFL);
		execve(paths->executor, (char *const *)argv, env);
		(void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
		_exit(127);
	}
	*ret_pid = pid;
out:
	free(env);
	free(twins);
	return r;
}

/* True when one of list[0..n) sets the variable that var ("NAME=...") sets. */
static bool env_named(char *const *list, size_t n, const char *var)
{
	size_t len = strcspn(var, "=");

	for (size_t i = 0; i < n; i++)
		if (!strncmp(list[i], var, len) && list[i][len] == '=')
			return true;
	return false;
}

/* The value of the last of list[0..n) that sets name (NAME=...), or dflt. */
static const char *env_value(char *const *list, size_t n, const char *name, const char *dflt)
{
	size_t len = strlen(name);
	const char *v = dflt;

	for (size_t i = 0; i < n; i++)
		if (!strncmp(list[i], name, len) && list[i][len] == '=')
			v = list[i] + len + 1;
	return v;
}

/* The variables phos_function_env sets itself (merging the old values in). */
static bool env_ours(const char *var)
{
	static const char *const ours[] = { "LD_LIBRARY_PATH=", "LD_AUDIT=", "PHOS_CHANNEL_FD=" };

	for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
		if (!strncmp(var, ours[i], strlen(ours[i])))
			return true;
	return false;
}

/* "NAME=first:old", or "NAME=first" when old is unset or empty; NULL on ENOMEM. */
static char *env_join(const char *name, const char *first, const char *old)
{
	char *v;
	bool has = old && *old;

	if (asprintf(&v, "%s=%s%s%s", name, first, has ? ":" : "", has ? old : "") < 0)
		return NULL;
	return v;
}

char **phos_function_env(const struct phos_runtime_paths *paths)
{
	size_t n = 0, k = 0, nx = 0, owner_len = strlen(PHOS_OWNER_ENV "=");
	const char *ld, *aud;
	char guard[PATH_MAX + 64];
	char **env;

	while (environ[n])
		n++;
	while (paths->fn_env && paths->fn_env[nx])
		nx++;
	/* the function's own values (the invoker's "env") replace the caller's */
	ld = env_value(paths->fn_env, nx, "LD_LIBRARY_PATH", getenv("LD_LIBRARY_PATH"));
	aud = env_value(paths->fn_env, nx, "LD_AUDIT", getenv("LD_AUDIT"));
	snprintf(guard, sizeof(guard), "%s/" PHOS_GUARD_LIB, paths->preload_dir);
	env = calloc(n + nx + 4, sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		/* the invoker's owner mark (PHOS_OWNER_ENV) is kept over a function's own */
		if (env_ours(environ[i]) ||
		    (env_named(paths->fn_env, nx, environ[i]) && strncmp(environ[i], PHOS_OWNER_ENV "=", owner_len)))
			continue;
		if (!(env[k++] = strdup(environ[i])))
			goto fail;
	}
	/* the function's own variables, ours below still win */
	for (size_t i = 0; i < nx; i++) {
		if (env_ours(paths->fn_env[i]) || !strncmp(paths->fn_env[i], PHOS_OWNER_ENV "=", owner_len) ||
		    env_named(paths->fn_env + i + 1, nx - i - 1, paths->fn_env[i]))
			continue;
		if (!(env[k++] = strdup(paths->fn_env[i])))
			goto fail;
	}
	/*
	 * The stand-ins first in the library path, and the guard as audit module
	 * (preload/guard/guard.c): it resolves every libcudart/libcublas load to the
	 * stand-ins, whatever RPATH or path the program gives, and refuses the
	 * real driver. Not LD_PRELOAD: processes that never load libcudart (a
	 * shell that starts the program) must not become channel clients.
	 */
	if (!(env[k++] = env_join("LD_LIBRARY_PATH", paths->preload_dir, ld)) ||
	    !(env[k++] = env_join("LD_AUDIT", guard, aud)) ||
	    !(env[k++] = strdup("PHOS_CHANNEL_FD=3")))
		goto fail;
	return env;
fail:
	phos_env_free(env);
	return NULL;
}

void phos_env_free(char **env)
{
	if (!env)
		return;
	for (char **e = env; *e; e++)
		free(*e);
	free(env);
}
