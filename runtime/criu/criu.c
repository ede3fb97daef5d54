/* SPDX-License-Identifier: MIT */
#include "criu.h"

#include <dirent.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <linux/capability.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fault.h"
#include "log.h"
#include "rundir.h"

extern char **environ;

#define CRIU_MAX_EXT      64          /* --external unix[] / --inherit-fd entries */
#define CRIU_MAX_SPAWN_FD 64
#define CRIU_INHERIT_BASE 100         /* --inherit-fd fd[100 + i] in CRIU's process */
#define CRIU_LOG_MAX      (16 << 20)  /* bytes of a CRIU log we read for reasons */
#define SPAWN_STACK       (256 << 10)
#define CRIU_TIMEOUT_S    300         /* default of $PHOS_CRIU_TIMEOUT */
#define CRIU_VERSION_TIMEOUT_S 5      /* criu --version (a hung CRIU must not hang its finding) */
#define CRIU_RESTORE_FSIZE (64 << 20) /* soft RLIMIT_FSIZE of a restoring CRIU */
#define CRIU_MAX_KIDS     64

static int wait_exit(pid_t pid, int *ret_status)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	*ret_status = st;
	return 0;
}

static void status_str(int st, char *buf, size_t len)
{
	if (WIFEXITED(st))
		snprintf(buf, len, "exit status %d", WEXITSTATUS(st));
	else if (WIFSIGNALED(st))
		snprintf(buf, len, "killed by signal %d", WTERMSIG(st));
	else
		snprintf(buf, len, "wait status %#x", st);
}

/* In a child after fork/clone, before exec: async-signal-safe calls only.
 * Every signal back to its default and none blocked, so that neither the
 * function nor CRIU inherits an ignored SIGPIPE or a blocked SIGCHLD. */
static void child_reset_signals(void)
{
	struct sigaction sa = { .sa_handler = SIG_DFL };
	sigset_t none;

	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
			sigaction(s, &sa, NULL);   /* fails harmlessly for glibc's reserved ones */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/* In a child: puts from[i] at to[i] (overlaps allowed) and keep (if >= 0) at
 * some high number, closes every other descriptor. Returns keep's new number
 * (0 without keep), or -1. Async-signal-safe. */
static int child_place_fds(const int *from, const int *to, int *tmp, unsigned n, int keep)
{
	int top = keep, maxto = -1, kept = -1;

	for (unsigned i = 0; i < n; i++) {
		if (from[i] > top)
			top = from[i];
		if (to[i] > top)
			top = to[i];
		if (to[i] > maxto)
			maxto = to[i];
	}
	/* 1. everything up above any number involved, so that no dup2 below
	 *    overwrites a source that is still needed */
	for (unsigned i = 0; i < n; i++)
		if ((tmp[i] = fcntl(from[i], F_DUPFD, top + 1)) < 0)
			return -1;
	if (keep >= 0 && (kept = fcntl(keep, F_DUPFD_CLOEXEC, top + 1)) < 0)
		return -1;
	/* 2. the targets (dup2 clears close-on-exec) */
	for (unsigned i = 0; i < n; i++)
		if (dup2(tmp[i], to[i]) < 0)
			return -1;
	/* 3. all the rest */
	for (int fd = 0; fd <= maxto; fd++) {
		bool target = false;

		for (unsigned i = 0; i < n; i++)
			target |= to[i] == fd;
		if (!target)
			close(fd);
	}
	if (kept >= 0) {
		if (kept > maxto + 1)
			close_range((unsigned)maxto + 1, (unsigned)kept - 1, 0);
		close_range((unsigned)kept + 1, ~0u, 0);
	} else {
		close_range((unsigned)maxto + 1, ~0u, 0);
	}
	return keep >= 0 ? kept : 0;
}

/* CRIU's log level: -v$PHOS_CRIU_LOG_LEVEL (0-4), else -v4, every step
 * (a dump of a running program logs about a thousand lines while it is
 * frozen; -v3 keeps the steps and their times without the page lists). */
static const char *criu_verbosity(void)
{
	static const char *const v[] = { "-v0", "-v1", "-v2", "-v3", "-v4" };
	const char *env = getenv("PHOS_CRIU_LOG_LEVEL");

	return env && env[0] >= '0' && env[0] <= '4' && !env[1] ? v[env[0] - '0'] : "-v4";
}

/* What every dump adds to CRIU's environment, unless
 * PHOS_CRIU_BREAKPOINTS=1. At the end of a dump CRIU stops its parasite at
 * the task's last sigreturn; by default with a hardware breakpoint, and
 * setting the first one in a task costs the kernel a long wait: 16-24 ms of
 * a 40-50 ms freeze of the program (CRIU's logs of checkpoints on the H100,
 * the H200 and the sim here, between "Sent msg to daemon" and "was
 * trapped"). Stepping through the parasite's two last system calls instead
 * (PTRACE_SYSCALL) takes well under a millisecond: the first checkpoint of a
 * fresh train froze it 9.0-11.8 ms instead of 18.6-28.6 ms (sim, this
 * machine, 2026-11-27). CRIU has no option for it; it reads its
 * fault-injection knob CRIU_FAULT=130 (FI_NO_BREAKPOINTS, "not fatal"), the
 * path it takes by itself where breakpoints are missing or slow (Xen), which
 * changes nothing else. A CRIU_FAULT of our own environment never reaches
 * CRIU (criu_start). Restores keep CRIU's default: a plain CRIU restore
 * stepped was 14-16 ms faster here, but phos's restores were not (48 and 51
 * ms, the sim's cold starts), so nothing shows it is worth the change. */
static const char *criu_env_stepping(void)
{
	const char *env = getenv("PHOS_CRIU_BREAKPOINTS");

	return env && strcmp(env, "1") == 0 ? NULL : "CRIU_FAULT=130";
}

/* Seconds CRIU may run: $PHOS_CRIU_TIMEOUT, else CRIU_TIMEOUT_S. */
static int criu_timeout_s(void)
{
	const char *env = getenv("PHOS_CRIU_TIMEOUT");
	long v = env ? strtol(env, NULL, 10) : 0;

	return v > 0 && v < 86400 ? (int)v : CRIU_TIMEOUT_S;
}

/* The children of pid, by a scan of /proc (this kernel has no
 * /proc/PID/task/TID/children). Returns how many went into kids. */
static unsigned children_of(pid_t pid, pid_t *kids, unsigned max)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	unsigned n = 0;

	while (d && n < max && (de = readdir(d))) {
		char path[64], buf[512], *paren;
		int ppid, fd;
		ssize_t len;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%.20s/stat", de->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		len = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (len <= 0)
			continue;
		buf[len] = '\0';
		paren = strrchr(buf, ')');   /* "pid (comm) S ppid ..." */
		if (paren && sscanf(paren + 1, " %*c %d", &ppid) == 1 && ppid == pid)
			kids[n++] = (pid_t)atoi(de->d_name);
	}
	if (d)
		closedir(d);
	return n;
}

/* CRIU ran out of time: stop it (so that it forks no more), kill what it was
 * restoring (its children: the root of a restored tree is the init of its pid
 * namespace, so its whole tree goes), then CRIU. The children are reaped here
 * when they come to us (a subreaper caller). */
static void criu_kill(pid_t pid, int *ret_status)
{
	pid_t kids[CRIU_MAX_KIDS];
	unsigned n;

	kill(pid, SIGSTOP);
	n = children_of(pid, kids, CRIU_MAX_KIDS);
	for (unsigned i = 0; i < n; i++)
		kill(kids[i], SIGKILL);
	kill(pid, SIGKILL);
	wait_exit(pid, ret_status);
	for (unsigned i = 0; i < n; i++)
		while (waitpid(kids[i], NULL, 0) < 0 && errno == EINTR)   /* ECHILD: not ours */
			;
}

static long ms_left(const struct timespec *end)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (end->tv_sec - now.tv_sec) * 1000 + (end->tv_nsec - now.tv_nsec) / 1000000;
}

/* Waits for CRIU at most timeout_s seconds, and past deadline (a phos_now()
 * time; 0: none) not at all; -ETIMEDOUT after killing it, or -ECANCELED
 * after killing it as soon as cancel_fd (>= 0) turns readable (a remove of
 * the function being deployed, a drain: CRIU can hang for its whole timeout).
 * A pidfd tells when it ends; without one (valgrind knows no pidfd_open) it is
 * polled every 5 ms. */
static int criu_wait(pid_t pid, int timeout_s, double deadline, int cancel_fd, int *ret_status)
{
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0), st, r;
	bool cancel = false;
	struct timespec end;
	long ms;

	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += timeout_s;
	if (deadline > 0) {
		double left = deadline - phos_now();
		long long left_ms = left > 0 ? (long long)(left * 1e3) : 0;

		if (left_ms < (long long)timeout_s * 1000) {
			clock_gettime(CLOCK_MONOTONIC, &end);
			end.tv_sec += left_ms / 1000;
			end.tv_nsec += (left_ms % 1000) * 1000000;
			if (end.tv_nsec >= 1000000000) {
				end.tv_sec++;
				end.tv_nsec -= 1000000000;
			}
		}
	}
	while ((ms = ms_left(&end)) > 0) {
		struct pollfd p[2] = { { .fd = pidfd, .events = POLLIN }, { .fd = cancel_fd, .events = POLLIN } };

		if (pidfd < 0) {
			r = waitpid(pid, &st, WNOHANG);
			if (r == pid) {
				*ret_status = st;
				return 0;
			}
			if (r < 0 && errno != EINTR)
				return -errno;
		}
		/* a negative fd is ignored by poll */
		r = poll(p, 2, pidfd >= 0 ? (int)ms : 5);
		if (r > 0 && (p[1].revents & (POLLIN | POLLERR | POLLHUP))) {
			cancel = true;
			break;
		}
		if (pidfd >= 0 && (r > 0 || (r < 0 && errno != EINTR)))
			break;   /* it ended (or we cannot poll: wait below) */
	}
	if (pidfd >= 0)
		close(pidfd);
	if (cancel || ms <= 0) {
		criu_kill(pid, ret_status);
		return cancel ? -ECANCELED : -ETIMEDOUT;
	}
	return wait_exit(pid, ret_status);
}

/* The calling thread becomes user (no supplementary groups), by raw system
 * calls: glibc's setgroups/setresgid/setresuid change every thread of the
 * process through its thread list and its lock, which a child of clone()
 * (no fork handlers) inherits from a multithreaded parent as they were: held
 * by another thread at the clone, the lock is never released and the child
 * waits on its futex forever (seen under concurrent deploys). */
static int creds_set(const struct phos_criu_user *user)
{
	if (syscall(SYS_setgroups, 0, NULL) < 0 || syscall(SYS_setresgid, user->gid, user->gid, user->gid) < 0 ||
	    syscall(SYS_setresuid, user->uid, user->uid, user->uid) < 0)
		return -errno;
	return 0;
}

/* In a child about to exec CRIU: become as->uid/gid (no supplementary
 * groups) and keep every capability we had, across the exec (ambient). CRIU
 * dumps a task of another user this way: as root it needs CAP_SYS_RESOURCE
 * for prlimit() on the task, which a container's root often lacks (this
 * machine's), while the task's own user needs nothing for it. */
static int become_keeping_caps(const struct phos_criu_user *as)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct d[2];

	if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0)
		return -errno;
	if (creds_set(as) < 0)
		return -errno;
	if (syscall(SYS_capget, &h, d) < 0)
		return -errno;
	for (int i = 0; i < 2; i++)
		d[i].effective = d[i].inheritable = d[i].permitted;
	if (syscall(SYS_capset, &h, d) < 0)
		return -errno;
	for (unsigned cap = 0; cap < 64; cap++)
		if (d[cap / 32].permitted & (1u << (cap % 32)))
			(void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0);
	return 0;
}

/* Starts CRIU: argv with fds placed per from/to, stdin and stdout on
 * /dev/null (or stdout on out_fd), stderr on err_fd, and extra_env (a
 * NULL-terminated list, or NULL) added to its environment. fsize (> 0) is a soft RLIMIT_FSIZE for
 * CRIU, which bounds its log (a restore writes nothing else; the restored
 * tasks get their own limits back from the image). With as, CRIU runs as that
 * user keeping our capabilities. Returns 0 and its pid, or -errno. */
static int criu_start(char *const argv[], const int *from, const int *to, unsigned n, int out_fd, int err_fd,
		      rlim_t fsize, const struct phos_criu_user *as, const char *const *extra_env, pid_t *ret_pid)
{
	int f[CRIU_MAX_EXT + 3], t[CRIU_MAX_EXT + 3], tmp[CRIU_MAX_EXT + 3];
	int null_fd, r;
	char **env;
	pid_t pid;

	if (n > CRIU_MAX_EXT)
		return -E2BIG;
	null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null_fd < 0)
		return -errno;
	f[0] = null_fd, t[0] = 0;
	f[1] = out_fd >= 0 ? out_fd : null_fd, t[1] = 1;
	f[2] = err_fd >= 0 ? err_fd : null_fd, t[2] = 2;
	for (unsigned i = 0; i < n; i++)
		f[3 + i] = from[i], t[3 + i] = to[i];

	/* CRIU runs with its own libraries only (sanitizer builds preload
	 * theirs) and the settings we give it: its environment is ours without
	 * LD_PRELOAD and CRIU_FAULT, made before the fork (the child of a
	 * threaded process may not take libc's locks). */
	{
		size_t ne = 0, nx = 0, k = 0;

		while (environ && environ[ne])
			ne++;
		while (extra_env && extra_env[nx])
			nx++;
		env = malloc((ne + nx + 1) * sizeof(*env));
		if (!env) {
			close(null_fd);
			return -ENOMEM;
		}
		for (size_t i = 0; i < ne; i++)
			if (strncmp(environ[i], "LD_PRELOAD=", 11) && strncmp(environ[i], "CRIU_FAULT=", 11))
				env[k++] = environ[i];
		for (size_t i = 0; i < nx; i++)
			env[k++] = (char *)extra_env[i];
		env[k] = NULL;
	}
	pid = fork();
	if (pid < 0) {
		r = -errno;
		close(null_fd);
		free(env);
		return r;
	}
	if (pid == 0) {
		struct rlimit rl;

		child_reset_signals();
		if (fsize && getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur > fsize) {
			rl.rlim_cur = fsize;   /* soft only: the hard limit stays for the restored tasks */
			setrlimit(RLIMIT_FSIZE, &rl);
		}
		if (child_place_fds(f, t, tmp, n + 3, -1) < 0)
			_exit(126);
		if (as && become_keeping_caps(as) < 0)
			_exit(126);
		execve(argv[0], argv, env);
		_exit(127);
	}
	free(env);
	close(null_fd);
	*ret_pid = pid;
	return 0;
}

/* Runs CRIU (criu_start) and waits for it, at most criu_timeout_s() and
 * until deadline (0: none; see criu_wait).
 * Returns 0 and the wait status, or -errno (-ETIMEDOUT, -ECANCELED: see
 * criu_wait) when it could not be run or was killed. */
static int criu_run(char *const argv[], const int *from, const int *to, unsigned n, int out_fd, int err_fd,
		    rlim_t fsize, const struct phos_criu_user *as, const char *const *extra_env, double deadline,
		    int cancel_fd, int *ret_status)
{
	pid_t pid;
	int r = criu_start(argv, from, to, n, out_fd, err_fd, fsize, as, extra_env, &pid);

	if (r < 0)
		return r;
	r = criu_wait(pid, criu_timeout_s(), deadline, cancel_fd, ret_status);
	if (r == 0 && WIFEXITED(*ret_status) && WEXITSTATUS(*ret_status) == 127)
		return -ENOEXEC;
	return r;
}

/* ---- finding CRIU ---- */

bool phos_criu_is_executable(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

int phos_criu_version_ok(const char *criu, char *err, size_t errlen)
{
	char *argv[] = { (char *)criu, "--version", NULL };
	char out[512] = "";
	int fd, st, major = 0, minor = 0, r;
	const char *v;
	ssize_t len;

	fd = memfd_create("criu-version", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = criu_run(argv, NULL, NULL, 0, fd, fd, 0, NULL, NULL, phos_now() + CRIU_VERSION_TIMEOUT_S, -1, &st);
	if (r == -ETIMEDOUT) {
		phos_errf(err, errlen, "%s --version did not answer in %d s: this CRIU hangs on this machine", criu,
			CRIU_VERSION_TIMEOUT_S);
		goto out;
	}
	if (r < 0) {
		phos_errf(err, errlen, "%s: cannot run: %s", criu, strerror(-r));
		goto out;
	}
	len = pread(fd, out, sizeof(out) - 1, 0);
	out[len > 0 ? len : 0] = '\0';
	v = strstr(out, "Version:");
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !v || sscanf(v, "Version: %d.%d", &major, &minor) != 2) {
		phos_errf(err, errlen, "%s --version: no \"Version: X.Y\" in its output", criu);
		r = -ENOENT;
	} else if (major < 4 || (major == 4 && minor < 1)) {
		phos_errf(err, errlen, "%s is CRIU %d.%d; phos-fn needs 4.1 or newer", criu, major, minor);
		r = -ENOENT;
	}
out:
	close(fd);
	return r;
}

/* ---- spawning the function as a pid namespace init ---- */

struct spawn_args {
	char *const *argv;
	char *const *envp;
	const int *from, *to;
	int *tmp;
	unsigned n;
	int err_fd;   /* close-on-exec pipe: errno on failure, EOF on exec */
	const struct phos_criu_user *user;
};

static int spawn_child(void *arg)
{
	struct spawn_args *a = arg;
	int e, efd;

	child_reset_signals();
	efd = child_place_fds(a->from, a->to, a->tmp, a->n, a->err_fd);
	if (efd < 0) {
		e = errno;
		(void)!write(a->err_fd, &e, sizeof(e));
		_exit(126);
	}
	/* a fresh session: CRIU's --shell-job restores it as is; no parent-death
	 * signal (CRIU warns about one and the restored root would be killed) */
	if (setsid() < 0)
		goto fail;
	/* Another user: a mount namespace of its own (mounts still following
	 * ours) with a /proc of its pid namespace, so that CRIU's parasite, which
	 * runs with the task's credentials, finds its /proc there instead of
	 * mounting one (which that user may not); then the user. */
	if (a->user && (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0 ||
			mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 ||
			creds_set(a->user) < 0))
		goto fail;
	execvpe(a->argv[0], a->argv, a->envp);
fail:
	e = errno;
	(void)!write(efd, &e, sizeof(e));
	_exit(127);
}

int phos_criu_spawn(char *const argv[], char *const envp[], const struct phos_fd_map *fds, unsigned nfds,
		    const struct phos_criu_user *user, pid_t *ret_pid)
{
	int from[CRIU_MAX_SPAWN_FD], to[CRIU_MAX_SPAWN_FD], tmp[CRIU_MAX_SPAWN_FD], pfd[2], e = 0, st, r;
	struct spawn_args a;
	void *stack;
	ssize_t got;
	pid_t pid;

	if (!argv || !argv[0] || (nfds && !fds) || !ret_pid)
		return -EINVAL;
	if (nfds > CRIU_MAX_SPAWN_FD)
		return -E2BIG;
	for (unsigned i = 0; i < nfds; i++) {
		if (fds[i].from < 0 || fds[i].to < 0 || fds[i].to >= 1024)
			return -EINVAL;
		for (unsigned j = 0; j < i; j++)
			if (fds[j].to == fds[i].to)
				return -EINVAL;   /* two descriptors for one number */
		from[i] = fds[i].from, to[i] = fds[i].to;
	}
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	a = (struct spawn_args){ argv, envp ? envp : environ, from, to, tmp, nfds, pfd[1], user };

	stack = mmap(NULL, SPAWN_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED) {
		r = -errno;
		goto out_pipe;
	}
	/* like fork (own copy of memory, SIGCHLD to us), but the child is pid 1
	 * of a new pid namespace; our pid for it is the host pid */
	pid = clone(spawn_child, (char *)stack + SPAWN_STACK, CLONE_NEWPID | (user ? CLONE_NEWNS : 0) | SIGCHLD, &a);
	r = pid < 0 ? -errno : 0;
	munmap(stack, SPAWN_STACK);   /* our copy; the child has its own */
	if (r < 0)
		goto out_pipe;
	close(pfd[1]);
	pfd[1] = -1;
	do
		got = read(pfd[0], &e, sizeof(e));
	while (got < 0 && errno == EINTR);
	if (got == sizeof(e)) {   /* setup or exec failed: reap it */
		wait_exit(pid, &st);
		r = -(e ? e : EIO);
		goto out_pipe;
	}
	*ret_pid = pid;
out_pipe:
	close(pfd[0]);
	if (pfd[1] >= 0)
		close(pfd[1]);
	return r;
}

/* ---- CRIU's reasons ---- */

struct reason {
	char *err;
	size_t len, used;
	unsigned n;            /* specific Error lines put in err */
	char generic[128];     /* the first "Dumping FAILED."-style line */
};

static void reason_add(struct reason *rs, const char *text)
{
	if (rs->used >= rs->len)
		return;
	rs->used += (size_t)snprintf(rs->err + rs->used, rs->len - rs->used, "%s%s", rs->n++ ? "; " : ": ", text);
}

/* Takes the "Error" lines of a CRIU log or of its stderr. The harmless
 * RLIMIT_NOFILE one is skipped; the closing "Dumping FAILED." /
 * "Restoring FAILED." says nothing new and is kept only for want of others. */
static void reason_scan(struct reason *rs, FILE *f)
{
	char *line = NULL;
	size_t cap = 0, total = 0;
	ssize_t n;

	while (rs->used < rs->len && total < CRIU_LOG_MAX && (n = getline(&line, &cap, f)) > 0) {
		char *e = strstr(line, "Error");

		total += (size_t)n;
		if (!e || strstr(e, "RLIMIT_NOFILE"))
			continue;
		/* "(00.001) Error (criu/x.c:12): reason" -> "Error (criu/x.c:12): reason" */
		e[strcspn(e, "\n")] = '\0';
		if (strstr(e, " FAILED.")) {
			if (!rs->generic[0])
				snprintf(rs->generic, sizeof(rs->generic), "%s", e);
			continue;
		}
		reason_add(rs, e);
	}
	free(line);
}

/* Puts into err "<what> failed (<why, or the status>): <CRIU's Error lines>", taken from
 * its log (log in log_dirfd), else from its stderr (the memfd err_fd). */
static void criu_reason(const char *what, const char *why, int log_dirfd, const char *log, int err_fd, int st,
			char *err, size_t errlen)
{
	struct reason rs = { .err = err, .len = errlen };
	char stat_buf[64];
	FILE *f;
	int fd;

	if (!err || !errlen)
		return;
	status_str(st, stat_buf, sizeof(stat_buf));
	rs.used = (size_t)snprintf(err, errlen, "%s failed (%s)", what, why ? why : stat_buf);

	fd = openat(log_dirfd, log, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		if ((f = fdopen(fd, "r"))) {
			reason_scan(&rs, f);
			fclose(f);
		} else {
			close(fd);
		}
	}
	/* CRIU writes to stderr what happens before its log is open */
	if (!rs.n && err_fd >= 0 && lseek(err_fd, 0, SEEK_SET) == 0 && (fd = dup(err_fd)) >= 0) {
		if ((f = fdopen(fd, "r"))) {
			reason_scan(&rs, f);
			fclose(f);
		} else {
			close(fd);
		}
	}
	if (!rs.n && rs.generic[0])
		reason_add(&rs, rs.generic);
	if (!rs.n)
		reason_add(&rs, "no error in CRIU's log or output");
	/* A function of another user keeps a mount namespace that follows ours:
	 * its image names every mount of the host at its dump, and one unmounted
	 * since cannot be restored */
	if (strstr(err, "Can't stat mountpoint"))
		reason_add(&rs, "a mount that this host had when the snapshot was taken is gone: snapshot the function again");
}

/* ---- dump ---- */

/*
 * CRIU's parasite needs a /proc of the dumped task's pid namespace. Ours is
 * the init of its own namespace, whose /proc (the host's) is not that, so the
 * parasite mkdirs "proc.crtools" in the task's working directory, mounts a
 * proc there, detaches and removes it. Two dumps of tasks that share a working
 * directory (every function deployed by one invoker, or by two invokers
 * started in one directory) at once collide there: the second mkdir fails
 * ("Can't create a directory (-17)", "Can't get /proc fd"), and a dump killed
 * in between leaves the directory behind for every later dump. So dumps are
 * serialized per working directory, across our processes, by an flock on a
 * file named after the directory's device and inode, in our private runtime
 * directory (rundir.h: whatever their TMPDIR; in /tmp, any local user could
 * take the lock first and hold every dump), and an empty leftover is removed
 * under it.
 * Returns the lock's fd (close it to unlock), or -errno: then the dump goes on
 * unlocked, as before.
 */
/* A parasite killed between its mount and its umount leaves a proc mounted at
 * proc.crtools, and every later dump in that directory fails ("Can't create
 * a directory (-17)", "Can't get /proc fd" in parasite-syscall.c). Detaches
 * it, when it is a proc (nothing else is ours to unmount), and removes the
 * directory. Under the dump lock. */
static void leftover_proc_unmount(const char *path)
{
	struct statfs sf;

	if (statfs(path, &sf) < 0 || sf.f_type != PROC_SUPER_MAGIC)
		return;
	if (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) < 0)
		return;
	rmdir(path);
}

/* The files CRIU wrote into dir_fd (flat) as another user become ours again:
 * that user (a function's) must not own another function's image. */
static void files_chown_back(int dir_fd)
{
	int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			(void)!fchownat(dir_fd, de->d_name, geteuid(), getegid(), AT_SYMLINK_NOFOLLOW);
	closedir(d);
}

/* pid is in our namespace of this kind ("mnt", "pid"...); true when unknown. */
static bool same_ns(pid_t pid, const char *kind)
{
	char path[64];
	struct stat a, b;

	snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, kind);
	if (stat(path, &a) < 0)
		return true;
	snprintf(path, sizeof(path), "/proc/self/ns/%s", kind);
	if (stat(path, &b) < 0)
		return true;
	return a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

/* The effective user and group of pid (the owner of /proc/PID). */
static int task_user(pid_t pid, struct phos_criu_user *ret)
{
	char path[32];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	if (stat(path, &st) < 0)
		return -errno;
	ret->uid = st.st_uid;
	ret->gid = st.st_gid;
	return 0;
}

/* Takes the dump lock (waiting for the dumps it excludes, as long as
 * cancel_fd stays quiet: -ECANCELED). Returns its fd.
 *
 * CRIU's parasite mounts /proc at proc.crtools in its task's cwd when the
 * task has no /proc of its own pid namespace to use: a function that runs as
 * we do, in our mount namespace. That mount shows up in the mount namespace
 * of every function of another user (whose mounts follow ours, MS_SLAVE, and
 * which has a /proc of its own, so that its dumps mount nothing), wherever
 * its cwd is: a dump of one of those at that moment found a mount point that
 * the other dump then took away ("mnt-v2: Can't stat mountpoint
 * proc.crtools", once in CI under ASan). And two dumps mounting it in one
 * cwd collide (EEXIST). A restore of such a function (mnt-v2) meets the
 * same vanishing mount point (CI10, ASan, test_body_memory). So one lock for
 * this user's invokers: exclusive for a dump of a task in our mount
 * namespace, shared for the other dumps and for restores of a mount
 * namespace, which run side by side. A restore in our mount namespace
 * restores no mounts: it takes no lock (a cold start never waits for
 * another function's snapshot). */
/* The lock of the comment above, taken how (LOCK_EX, LOCK_SH) while
 * cancel_fd stays quiet (-ECANCELED) and before deadline (a phos_now() time,
 * 0: none; -ETIMEDOUT). Returns its fd. */
static int criu_lock(int how, int cancel_fd, double deadline)
{
	char path[PATH_MAX], dir[PATH_MAX - 64];
	int fd;

	fd = phos_rundir(dir, sizeof(dir));
	if (fd < 0)
		return fd;
	snprintf(path, sizeof(path), "%s/criu-dump.lock", dir);
	fd = open(path, O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	while (flock(fd, how | LOCK_NB) < 0) {
		struct pollfd p = { .fd = cancel_fd, .events = POLLIN };

		if (errno != EINTR && errno != EWOULDBLOCK) {
			int r = -errno;

			close(fd);
			return r;
		}
		if (poll(&p, 1, 10) > 0) {
			close(fd);
			return -ECANCELED;
		}
		if (deadline > 0 && phos_now() >= deadline) {
			close(fd);
			return -ETIMEDOUT;
		}
	}
	return fd;
}

static int dump_lock_take(pid_t pid, int cancel_fd)
{
	char path[PATH_MAX];
	int fd = criu_lock(same_ns(pid, "mnt") ? LOCK_EX : LOCK_SH, cancel_fd, 0);

	if (fd < 0)
		return fd;
	/* an earlier dump killed half-way; rmdir refuses one still mounted or not
	 * empty. A task in a mount namespace of its own (a function of another
	 * user, whose mounts follow ours) has its cwd at the same path in ours,
	 * where the leftover must go: an unmount inside its namespace would not
	 * come back to ours. */
	snprintf(path, sizeof(path), "/proc/%d/cwd/proc.crtools", (int)pid);
	if (!same_ns(pid, "mnt")) {
		char cwd[PATH_MAX - 16];
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/%d/cwd", (int)pid);
		n = readlink(path, cwd, sizeof(cwd) - 1);
		if (n <= 0 || cwd[0] != '/')
			return fd;
		cwd[n] = '\0';
		snprintf(path, sizeof(path), "%s/proc.crtools", cwd);
	}
	if (rmdir(path) < 0 && errno == EBUSY)
		leftover_proc_unmount(path);
	return fd;
}

int phos_criu_dump(const char *criu, pid_t pid, const char *dir, const uint64_t *ext_unix, unsigned next,
		   int cancel_fd, char *err, size_t errlen)
{
	return phos_criu_dump_flags(criu, pid, dir, ext_unix, next, 0, cancel_fd, err, errlen);
}

/* One dump, being made ready or run. */
struct phos_criu_ahead {
	pid_t criu_pid;     /* 0: not started */
	pid_t pid;          /* the task */
	unsigned flags;
	int dir_fd, err_fd, lock_fd;
	int gate_fd;        /* ours of the gate's socket pair; -1: no gate */
	int listen_fd;      /* the gate's socket, for its word at post-dump; -1: none */
	bool as_other;      /* CRIU runs as the task's user: chown the files back */
	char dir[PATH_MAX];
	char gate[PATH_MAX];   /* absolute: CRIU runs it from its own cwd */
	char pid_s[16], ext_s[CRIU_MAX_EXT][40];
	char *argv[28 + 2 * CRIU_MAX_EXT];
	char preload_env[PATH_MAX + 16], sockdiag_env[48], gate_env[128];
	const char *env[6];    /* what CRIU's environment gets (criu_start), NULL-terminated */
	struct phos_criu_user as;
};

static void ahead_free(struct phos_criu_ahead *a)
{
	if (a->lock_fd >= 0)
		close(a->lock_fd);
	if (a->gate_fd >= 0)
		close(a->gate_fd);
	if (a->listen_fd >= 0)
		close(a->listen_fd);
	if (a->err_fd >= 0)
		close(a->err_fd);
	if (a->dir_fd >= 0)
		close(a->dir_fd);
	free(a);
}

/* CRIU's environment for a's dump: the stepping knob (criu_env_stepping)
 * and the socket-table shim (phos_criu_sockdiag_find), when there is one. */
static void dump_env(struct phos_criu_ahead *a)
{
	const char *step = criu_env_stepping();
	char so[PATH_MAX];
	unsigned n = 0;

	if (step)
		a->env[n++] = step;
	if (phos_criu_sockdiag_find(so, sizeof(so)) == 0) {
		snprintf(a->preload_env, sizeof(a->preload_env), "LD_PRELOAD=%s", so);
		snprintf(a->sockdiag_env, sizeof(a->sockdiag_env), "PHOS_CRIU_SOCKDIAG_PID=%d", (int)a->pid);
		a->env[n++] = a->preload_env;
		a->env[n++] = a->sockdiag_env;
	}
	a->env[n] = NULL;
}

/* The dump's arguments, its stderr and the image folder, in a (not started):
 * 0, or -errno with err. gate: the path of the gate program, or NULL. */
static int dump_prepare(struct phos_criu_ahead *a, const char *criu, pid_t pid, const char *dir,
			const uint64_t *ext_unix, unsigned next, unsigned flags, const char *gate, char *err,
			size_t errlen)
{
	int argc = 0, r;

	a->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (a->dir_fd < 0) {
		r = -errno;
		phos_errf(err, errlen, "criu dump: %s: %s", dir, strerror(-r));
		return r;
	}
	a->err_fd = memfd_create("criu-stderr", MFD_CLOEXEC);
	if (a->err_fd < 0)
		return -errno;
	a->pid = pid;
	a->flags = flags;
	snprintf(a->dir, sizeof(a->dir), "%s", dir);
	snprintf(a->pid_s, sizeof(a->pid_s), "%d", (int)pid);
	a->argv[argc++] = (char *)criu;
	a->argv[argc++] = "dump";
	a->argv[argc++] = "-t";
	a->argv[argc++] = a->pid_s;
	a->argv[argc++] = "-D";
	a->argv[argc++] = a->dir;
	a->argv[argc++] = "--shell-job";
	a->argv[argc++] = "--ext-unix-sk";
	if (flags & PHOS_CRIU_LEAVE_RUNNING)
		a->argv[argc++] = "--leave-running";
	if (!same_ns(pid, "mnt")) {   /* phos_criu_spawn with a user: its mounts follow ours */
		a->argv[argc++] = "--ext-mount-map";
		a->argv[argc++] = "auto";
		a->argv[argc++] = "--enable-external-sharing";
		a->argv[argc++] = "--enable-external-masters";
	}
	a->as_other = task_user(pid, &a->as) == 0 && a->as.uid != geteuid();
	if (a->as_other)
		a->argv[argc++] = "--unprivileged";   /* CRIU runs as the task's user (criu_run) */
	for (unsigned i = 0; i < next; i++) {
		snprintf(a->ext_s[i], sizeof(a->ext_s[i]), "unix[%llu]", (unsigned long long)ext_unix[i]);
		a->argv[argc++] = "--external";
		a->argv[argc++] = a->ext_s[i];
	}
	if (gate) {
		if (!realpath(gate, a->gate)) {
			r = -errno;
			phos_errf(err, errlen, "criu dump: the gate %s: %s", gate, strerror(-r));
			return r;
		}
		a->argv[argc++] = "--action-script";
		a->argv[argc++] = a->gate;
	}
	a->argv[argc++] = "-o";
	a->argv[argc++] = "dump.log";   /* relative: in dir */
	a->argv[argc++] = (char *)criu_verbosity();
	a->argv[argc] = NULL;
	dump_env(a);
	return 0;
}

/* What an ended dump (r: criu_wait's, st its status) comes to: 0, or -errno
 * with err. */
static int dump_finish(struct phos_criu_ahead *a, int r, int st, char *err, size_t errlen)
{
	if (a->as_other)
		files_chown_back(a->dir_fd);
	if (r == -ECANCELED) {
		phos_errf(err, errlen, "criu dump: cancelled");
		return r;
	}
	if (r == -ETIMEDOUT) {
		phos_errf(err, errlen, "criu dump: killed after %d s (PHOS_CRIU_TIMEOUT); log in %s/dump.log",
			criu_timeout_s(), a->dir);
		return r;
	}
	if (r == 0 && WIFEXITED(st) && WEXITSTATUS(st) == 127)
		r = -ENOEXEC;
	if (r < 0) {
		phos_errf(err, errlen, "criu dump: cannot run %s: %s", a->argv[0], strerror(-r));
		return r;
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		criu_reason("criu dump", NULL, a->dir_fd, "dump.log", a->err_fd, st, err, errlen);
		return kill(a->pid, 0) < 0 && errno == ESRCH ? -ESRCH : -EIO;
	}
	/* CRIU killed it; when it is our child (phos_criu_spawn), reap it too */
	while (!(a->flags & PHOS_CRIU_LEAVE_RUNNING) && waitpid(a->pid, &st, 0) < 0 && errno == EINTR)
		;
	return 0;
}

static int dump_check(const char *criu, pid_t pid, const char *dir, const uint64_t *ext_unix, unsigned next,
		      unsigned flags, char *err, size_t errlen)
{
	if (!criu || !dir || (next && !ext_unix) || pid <= 0 || (flags & ~(PHOS_CRIU_LEAVE_RUNNING | PHOS_CRIU_UNFAULTED)))
		return -EINVAL;
	if (next > CRIU_MAX_EXT)
		return -E2BIG;
	if (!(flags & PHOS_CRIU_UNFAULTED) && phos_fault("criu_dump")) {
		phos_errf(err, errlen, "injected fault: criu_dump");
		return -EIO;
	}
	return 0;
}

static struct phos_criu_ahead *ahead_new(void)
{
	struct phos_criu_ahead *a = calloc(1, sizeof(*a));

	if (a)
		a->dir_fd = a->err_fd = a->lock_fd = a->gate_fd = a->listen_fd = -1;
	return a;
}

int phos_criu_dump_flags(const char *criu, pid_t pid, const char *dir, const uint64_t *ext_unix, unsigned next,
			 unsigned flags, int cancel_fd, char *err, size_t errlen)
{
	struct phos_criu_ahead *a;
	int st = 0, r = dump_check(criu, pid, dir, ext_unix, next, flags, err, errlen);

	if (r < 0)
		return r;
	a = ahead_new();
	if (!a)
		return -ENOMEM;
	r = dump_prepare(a, criu, pid, dir, ext_unix, next, flags, NULL, err, errlen);
	if (r < 0)
		goto out;
	a->lock_fd = dump_lock_take(pid, cancel_fd);
	if (a->lock_fd == -ECANCELED)
		r = -ECANCELED;
	else
		r = criu_run(a->argv, NULL, NULL, 0, -1, a->err_fd, 0, a->as_other ? &a->as : NULL, a->env, 0, cancel_fd,
			     &st);
	r = dump_finish(a, r, st, err, errlen);
out:
	ahead_free(a);
	return r;
}

/* ---- dumps made ready ahead (the gate) ---- */

/* path, when it is an executable file, made absolute into buf. */
static int helper_found(const char *path, bool exec, char *buf, size_t len)
{
	char abs[PATH_MAX];

	if ((exec ? !phos_criu_is_executable(path) : access(path, R_OK) < 0) || !realpath(path, abs))
		return -ENOENT;
	if (strlen(abs) >= len)
		return -ENAMETOOLONG;
	strcpy(buf, abs);
	return 0;
}

/* A helper file of ours: $env_name when set, else name beside the calling
 * binary, in ../runtime (the build tree) or in ../libexec/phos-fn. */
static int helper_find(const char *name, const char *env_name, bool exec, char *buf, size_t len)
{
	static const char *const rel[] = { "", "../runtime/", "../libexec/phos-fn/", NULL };
	const char *env = getenv(env_name);
	char exe[PATH_MAX], cand[PATH_MAX + 64], *slash;
	ssize_t n;

	if (env && *env)
		return helper_found(env, exec, buf, len);
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return -ENOENT;
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (!slash)
		return -ENOENT;
	*slash = '\0';
	for (const char *const *r = rel; *r; r++) {
		snprintf(cand, sizeof(cand), "%s/%s%s", exe, *r, name);
		if (helper_found(cand, exec, buf, len) == 0)
			return 0;
	}
	return -ENOENT;
}

int phos_criu_gate_find(char *buf, size_t len)
{
	return helper_find("phos-criu-gate", "PHOS_CRIU_GATE", true, buf, len);
}

int phos_criu_sockdiag_find(char *buf, size_t len)
{
	const char *env = getenv("PHOS_CRIU_SOCKDIAG");

	if (env && strcmp(env, "0") == 0)
		return -ENOENT;
	return helper_find("phos-criu-sockdiag.so", "PHOS_CRIU_SOCKDIAG", false, buf, len);
}

/* The parent of pid (0: unknown). */
static pid_t parent_of(pid_t pid)
{
	char path[64], buf[512], *paren;
	int ppid = 0, fd;
	ssize_t len;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	len = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (len <= 0)
		return 0;
	buf[len] = '\0';
	paren = strrchr(buf, ')');
	if (!paren || sscanf(paren + 1, " %*c %d", &ppid) != 1)
		return 0;
	return (pid_t)ppid;
}

/* A listening abstract unix socket of a name no one can guess into name
 * (without the leading NUL): its fd, or -errno. */
static int gate_listen(char *name, size_t len)
{
	static unsigned seq;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	unsigned long long rnd = 0;
	int fd, n;

	if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd)) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		rnd ^= (unsigned long long)ts.tv_nsec * 0x9e3779b97f4a7c15ull;
	}
	n = snprintf(name, len, "phos-criu-gate-%d-%u-%016llx", (int)getpid(),
		     __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED), rnd);
	if (n < 0 || (size_t)n >= len || (size_t)n >= sizeof(sa.sun_path) - 1)
		return -ENAMETOOLONG;
	memcpy(sa.sun_path + 1, name, (size_t)n);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) < 0 ||
	    listen(fd, 4) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	return fd;
}

/* Takes a connection waiting on the gate's socket lfd: its connected fd when
 * its writer is a child of a's CRIU (the gate) and its first byte, within
 * ms, is want; else -1 (the connection closed). */
static int gate_word(struct phos_criu_ahead *a, int lfd, char want, int ms)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	struct pollfd q = { .fd = fd, .events = POLLIN };
	socklen_t cl = sizeof(struct ucred);
	struct ucred cred;
	char c = 0;

	if (fd < 0)
		return -1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) == 0 && parent_of(cred.pid) == a->criu_pid &&
	    poll(&q, 1, ms) == 1 && read(fd, &c, 1) == 1 && c == want)
		return fd;
	close(fd);
	return -1;
}

/* Waits for CRIU's gate to connect to lfd and say it is there: 0 with
 * a->gate_fd; 1 when CRIU ended first (its status in *st); -ETIMEDOUT.
 * Only a child of CRIU is believed. */
static int gate_accept(struct phos_criu_ahead *a, int lfd, int *st)
{
	struct timespec end;

	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += criu_timeout_s();
	for (;;) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		long ms = ms_left(&end);
		int fd, r;

		if (ms <= 0)
			return -ETIMEDOUT;
		r = waitpid(a->criu_pid, st, WNOHANG);
		if (r == a->criu_pid)
			return 1;
		r = poll(&p, 1, ms < 20 ? (int)ms : 20);   /* and every 20 ms: has CRIU ended? */
		if (r <= 0)
			continue;
		fd = gate_word(a, lfd, 'r', 10000);
		if (fd >= 0) {
			a->gate_fd = fd;
			return 0;
		}
	}
}

int phos_criu_dump_ahead(const char *criu, const char *gate, pid_t pid, const char *dir, const uint64_t *ext_unix,
			 unsigned next, unsigned flags, struct phos_criu_ahead **ret, char *err, size_t errlen)
{
	struct phos_criu_ahead *a;
	int lfd = -1, st = 0, r = dump_check(criu, pid, dir, ext_unix, next, flags, err, errlen);
	char name[80];
	unsigned n;

	*ret = NULL;
	if (r < 0)
		return r;
	if (!gate)
		return -EINVAL;
	a = ahead_new();
	if (!a)
		return -ENOMEM;
	r = dump_prepare(a, criu, pid, dir, ext_unix, next, flags, gate, err, errlen);
	if (r < 0)
		goto fail;
	lfd = gate_listen(name, sizeof(name));
	if (lfd < 0) {
		r = lfd;
		phos_errf(err, errlen, "criu dump: the gate's socket: %s", strerror(-r));
		goto fail;
	}
	if (kill(pid, 0) < 0 && errno == ESRCH) {
		r = -ESRCH;
		phos_errf(err, errlen, "criu dump: no such process");
		goto fail;
	}
	snprintf(a->gate_env, sizeof(a->gate_env), "PHOS_CRIU_GATE_SOCK=%s", name);
	for (n = 0; a->env[n]; n++)
		;
	a->env[n] = a->gate_env;
	a->env[n + 1] = NULL;
	r = criu_start(a->argv, NULL, NULL, 0, -1, a->err_fd, 0, a->as_other ? &a->as : NULL, a->env, &a->criu_pid);
	if (r < 0) {
		phos_errf(err, errlen, "criu dump: cannot run %s: %s", criu, strerror(-r));
		goto fail;
	}

	/* CRIU's start-up, up to its pre-dump action, where the gate says 'r'.
	 * CRIU ending before is CRIU's to explain. */
	r = gate_accept(a, lfd, &st);
	if (r == -ETIMEDOUT) {
		criu_kill(a->criu_pid, &st);
		a->criu_pid = 0;
		r = dump_finish(a, -ETIMEDOUT, st, err, errlen);
		goto fail;
	}
	if (r == 1) {
		a->criu_pid = 0;
		r = dump_finish(a, 0, st, err, errlen);
		if (r == 0) {   /* it dumped without its gate: not what was asked */
			phos_errf(err, errlen, "criu dump: the gate %s was not run", gate);
			r = -EIO;
		}
		goto fail;
	}
	a->listen_fd = lfd;   /* the gate says 'd' on it at post-dump */
	*ret = a;
	return 0;
fail:
	if (lfd >= 0)
		close(lfd);
	if (a->criu_pid > 0) {
		criu_kill(a->criu_pid, &st);
		a->criu_pid = 0;
	}
	ahead_free(a);
	return r < 0 ? r : -EIO;
}

/* Waits for the gate's word at CRIU's post-dump action ('d': the image is
 * whole, the tree not let go yet) and calls dumped(arg) then. Returns
 * without calling it when CRIU ends first, or at criu_timeout_s: CRIU's end
 * is waited for after, as without it. */
static void gate_await_dumped(struct phos_criu_ahead *a, void (*dumped)(void *), void *arg)
{
	int pidfd = (int)syscall(SYS_pidfd_open, a->criu_pid, 0);
	struct timespec end;
	long ms;

	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += criu_timeout_s();
	while ((ms = ms_left(&end)) > 0) {
		struct pollfd p[2] = { { .fd = a->listen_fd, .events = POLLIN }, { .fd = pidfd, .events = POLLIN } };
		siginfo_t si = { 0 };
		int fd, r;

		/* without a pidfd, every 20 ms: has CRIU ended? (not reaped here) */
		if (pidfd < 0 && waitid(P_PID, (id_t)a->criu_pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
		    si.si_pid == a->criu_pid)
			break;
		r = poll(p, 2, pidfd >= 0 ? (int)ms : ms < 20 ? (int)ms : 20);
		if (r < 0 && errno != EINTR)
			break;
		if (r <= 0)
			continue;
		if (p[1].revents)
			break;   /* CRIU ended before its post-dump action: it failed */
		/* The gate waits for this close: dumped runs while CRIU still
		 * holds the tree. */
		fd = gate_word(a, a->listen_fd, 'd', 1000);
		if (fd >= 0) {
			dumped(arg);
			close(fd);
			break;
		}
	}
	if (pidfd >= 0)
		close(pidfd);
}

int phos_criu_dump_go(struct phos_criu_ahead *a, char *err, size_t errlen)
{
	return phos_criu_dump_go_then(a, NULL, NULL, err, errlen);
}

int phos_criu_dump_go_then(struct phos_criu_ahead *a, void (*dumped)(void *arg), void *arg, char *err, size_t errlen)
{
	int st = 0, r;

	if (!a)
		return -EINVAL;
	/* the dump lock only now: CRIU at its gate has not touched the task's
	 * working directory, and other dumps there need not wait for our stop */
	a->lock_fd = dump_lock_take(a->pid, -1);
	r = write(a->gate_fd, "g", 1) == 1 ? 0 : -EPIPE;
	close(a->gate_fd);
	a->gate_fd = -1;
	if (r == 0 && dumped)
		gate_await_dumped(a, dumped, arg);
	if (r == 0)
		r = criu_wait(a->criu_pid, criu_timeout_s(), 0, -1, &st);
	else
		(void)criu_wait(a->criu_pid, criu_timeout_s(), 0, -1, &st);   /* it ends on its own */
	a->criu_pid = 0;
	if (r == -EPIPE) {
		phos_errf(err, errlen, "criu dump: CRIU ended at its gate");
		r = -EIO;
	} else {
		r = dump_finish(a, r, st, err, errlen);
	}
	ahead_free(a);
	return r;
}

void phos_criu_dump_drop(struct phos_criu_ahead *a)
{
	int st;

	if (!a)
		return;
	/* The gate reads EOF and fails: CRIU ends before it touched the task
	 * (bounded: killed after 10 s, still before it touches the task). */
	close(a->gate_fd);
	a->gate_fd = -1;
	if (criu_wait(a->criu_pid, 10, 0, -1, &st) == 0 && a->as_other)
		files_chown_back(a->dir_fd);
	ahead_free(a);
}

/* ---- restore ---- */

/* Empties and removes a flat directory we made. */
static void remove_tmp_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;

	if (d) {
		while ((de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				unlinkat(dirfd(d), de->d_name, 0);
		closedir(d);
	}
	rmdir(path);
}

unsigned phos_criu_sweep(void)
{
	const char *tmp = getenv("TMPDIR");
	char dir[PATH_MAX], path[PATH_MAX + 300];
	struct dirent *de;
	unsigned n = 0;
	DIR *d;

	snprintf(dir, sizeof(dir), "%s", tmp && *tmp ? tmp : "/tmp");
	d = opendir(dir);
	while (d && (de = readdir(d))) {
		struct stat st;
		int pid = 0, end = 0;

		/* phos-criu-PID-XXXXXX, a directory of ours, PID gone */
		if (sscanf(de->d_name, "phos-criu-%d-%*6[A-Za-z0-9]%n", &pid, &end) != 1 || end == 0 ||
		    de->d_name[end] || pid <= 0 || (kill(pid, 0) == 0 || errno != ESRCH))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode) ||
		    st.st_uid != geteuid())
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		remove_tmp_dir(path);
		n++;
	}
	if (d)
		closedir(d);
	return n;
}

static int read_pid_file(int dir_fd, const char *name, pid_t *ret_pid)
{
	char buf[32];
	ssize_t n;
	long v;
	int fd;

	fd = openat(dir_fd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EIO;
	buf[n] = '\0';
	v = strtol(buf, NULL, 10);
	if (v <= 0 || v > INT_MAX)
		return -EIO;
	*ret_pid = (pid_t)v;
	return 0;
}

/* CRIU wrote a mount namespace into dir (mountpoints-ID.img). */
static bool image_has_mntns(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	bool found = false;

	while (d && !found && (de = readdir(d)))
		found = !strncmp(de->d_name, "mountpoints-", 12);
	if (d)
		closedir(d);
	return found;
}

/* CRIU's restore command line into argv (NULL-terminated; room for
 * 28 + 2 * CRIU_MAX_EXT): the image dir read only, the log and pid file in
 * work, each inherited fd as fd[CRIU_INHERIT_BASE + i] (from[i] -> to[i],
 * inh_s[i] its argument). True when the image has its own mount namespace. */
static bool restore_argv(const char *criu, const char *dir, const char *work, const char *pidfile,
			 const struct phos_criu_inherit *inh, unsigned ninh, unsigned flags, char **argv, int *from,
			 int *to, char (*inh_s)[80])
{
	int argc = 0;
	bool mntns;

	argv[argc++] = (char *)criu;
	argv[argc++] = "restore";
	argv[argc++] = "-D";
	argv[argc++] = (char *)dir;
	argv[argc++] = "--work-dir";
	argv[argc++] = (char *)work;
	argv[argc++] = "--shell-job";
	argv[argc++] = "-d";
	argv[argc++] = "--pidfile";
	argv[argc++] = (char *)pidfile;
	if (flags & PHOS_CRIU_STOPPED)
		argv[argc++] = "--leave-stopped";
	mntns = image_has_mntns(dir);
	if (mntns) {   /* dumped with its own mount namespace (phos_criu_dump) */
		argv[argc++] = "--root";
		argv[argc++] = "/";
		argv[argc++] = "--ext-mount-map";
		argv[argc++] = "auto";
		argv[argc++] = "--enable-external-sharing";
		argv[argc++] = "--enable-external-masters";
	}
	for (unsigned i = 0; i < ninh; i++) {
		from[i] = inh[i].fd;
		to[i] = CRIU_INHERIT_BASE + (int)i;
		snprintf(inh_s[i], sizeof(inh_s[i]), "fd[%d]:%s", to[i], inh[i].key);
		argv[argc++] = "--inherit-fd";
		argv[argc++] = inh_s[i];
	}
	argv[argc++] = "-o";
	argv[argc++] = "restore.log";   /* relative: in the work dir */
	argv[argc++] = (char *)criu_verbosity();
	argv[argc] = NULL;
	return mntns;
}

int phos_criu_restore(const char *criu, const char *dir, const struct phos_criu_inherit *inh, unsigned ninh,
		      unsigned flags, double deadline, int cancel_fd, pid_t *ret_pid, char *err, size_t errlen)
{
	char work[PATH_MAX], pidfile[PATH_MAX + 8], inh_s[CRIU_MAX_EXT][80];
	int from[CRIU_MAX_EXT], to[CRIU_MAX_EXT];
	char *argv[28 + 2 * CRIU_MAX_EXT];
	const char *tmp = getenv("TMPDIR");
	int err_fd = -1, work_fd = -1, lock_fd = -1, st, r;
	bool mntns;
	pid_t pid = 0;

	if (!criu || !dir || (ninh && !inh) || !ret_pid)
		return -EINVAL;
	if (ninh > CRIU_MAX_EXT)
		return -E2BIG;
	for (unsigned i = 0; i < ninh; i++)
		if (inh[i].fd < 0 || !inh[i].key || !*inh[i].key || strchr(inh[i].key, ','))
			return -EINVAL;
	if (!(flags & PHOS_CRIU_UNFAULTED) && phos_fault("criu_restore")) {
		phos_errf(err, errlen, "injected fault: criu_restore");
		return -EIO;
	}

	/* a private work dir for the log and pid file: the image dir is only
	 * read, so that concurrent restores of one image never collide; named
	 * after us, so that phos_criu_sweep finds it after our SIGKILL */
	snprintf(work, sizeof(work), "%s/phos-criu-%d-XXXXXX", tmp && *tmp ? tmp : "/tmp", (int)getpid());
	if (!mkdtemp(work)) {
		r = -errno;
		phos_errf(err, errlen, "criu restore: mkdtemp %s: %s", work, strerror(-r));
		return r;
	}
	snprintf(pidfile, sizeof(pidfile), "%s/pid", work);
	work_fd = open(work, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	err_fd = memfd_create("criu-stderr", MFD_CLOEXEC);
	if (work_fd < 0 || err_fd < 0) {
		r = -errno;
		goto out;
	}

	mntns = restore_argv(criu, dir, work, pidfile, inh, ninh, flags, argv, from, to, inh_s);

	double t0 = phos_now();

	/* A restore of its own mount namespace (mnt-v2) is not run beside a
	 * dump that mounts proc.crtools (criu_lock); one in ours restores no
	 * mounts and never waits for a dump. Without a lock file (a runtime
	 * directory that is not ours: rundir.h) it goes on unlocked, as dumps
	 * do then. */
	lock_fd = mntns ? criu_lock(LOCK_SH, cancel_fd, deadline) : -ENOENT;
	if (lock_fd == -ECANCELED || lock_fd == -ETIMEDOUT) {
		r = lock_fd;
		phos_errf(err, errlen, "criu restore: %s waiting for a dump to end",
			r == -ECANCELED ? "cancelled" : "deadline passed");
		goto out;
	}
	r = criu_run(argv, from, to, ninh, -1, err_fd, CRIU_RESTORE_FSIZE, NULL, NULL, deadline, cancel_fd, &st);
	if (r == -ECANCELED) {
		phos_errf(err, errlen, "criu restore: cancelled");
		goto out;
	}
	if (r == -ETIMEDOUT) {
		char why[64];

		if (deadline > 0 && phos_now() >= deadline - 0.05)
			snprintf(why, sizeof(why), "killed after %.0f ms, its deadline", (phos_now() - t0) * 1e3);
		else
			snprintf(why, sizeof(why), "killed after %d s, PHOS_CRIU_TIMEOUT", criu_timeout_s());
		criu_reason("criu restore", why, work_fd, "restore.log", err_fd, st, err, errlen);
		goto out;
	}
	if (r < 0) {
		phos_errf(err, errlen, "criu restore: cannot run %s: %s", criu, strerror(-r));
		goto out;
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		criu_reason("criu restore", NULL, work_fd, "restore.log", err_fd, st, err, errlen);
		r = -EIO;
		goto out;
	}
	r = read_pid_file(work_fd, "pid", &pid);
	if (r < 0) {
		phos_errf(err, errlen, "criu restore: no pid in %s", pidfile);
		goto out;
	}
	*ret_pid = pid;
out:
	if (lock_fd >= 0)
		close(lock_fd);
	if (err_fd >= 0)
		close(err_fd);
	if (work_fd >= 0)
		close(work_fd);
	remove_tmp_dir(work);
	return r;
}

void phos_criu_continue(pid_t pid)
{
	pid_t todo[256];
	unsigned n = 0;

	if (pid <= 0)
		return;
	todo[n++] = pid;
	/* parents first: a child that runs may not fork before its parent does */
	for (unsigned i = 0; i < n; i++) {
		kill(todo[i], SIGCONT);
		n += children_of(todo[i], todo + n, (unsigned)(sizeof(todo) / sizeof(todo[0])) - n);
	}
}

/* ---- keys ---- */

int phos_criu_fd_key(pid_t pid, int fd, char *buf, size_t len)
{
	char link[64], target[PATH_MAX];
	ssize_t n;

	if (!buf || !len || fd < 0)
		return -EINVAL;
	if (pid > 0)
		snprintf(link, sizeof(link), "/proc/%d/fd/%d", (int)pid, fd);
	else
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, target, sizeof(target));
	if (n < 0)
		return -errno;
	if ((size_t)n >= len || n == sizeof(target))
		return -ENAMETOOLONG;
	memcpy(buf, target, (size_t)n);
	buf[n] = '\0';
	return 0;
}
