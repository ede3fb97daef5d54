/* SPDX-License-Identifier: MIT */
/*
 * phos-fn run: runs any CUDA program under forwarding.
 *
 *   phos-fn ──fork/exec──▶ phos-executor --fd 3 --device D      (owns the context)
 *      │                         ▲ socketpair
 *      └──fork/exec──▶ PROGRAM ──┘ PHOS_CHANNEL_FD=3, LD_LIBRARY_PATH=<preload>
 *
 * The program inherits stdin/stdout: a function that calls phos_fn_serve reads
 * one request per line and writes one response per line. The exit status is
 * the program's (128+N when killed by signal N); a failed executor is reported.
 *
 * Forwarded or refused, never native (issue 12): the program runs with the
 * guard as audit module (runtime/guard.h), which makes every libcudart load
 * the stand-in's, refuses a real CUDA library as the loader opens it and
 * writes it to a report file; phos-fn also scans /proc/PID/maps and fds
 * (every GUARD_SCAN_MS while the program starts and loads its libraries, then
 * every GUARD_SCAN_SLOW_MS, so that a long benchmark pays almost nothing) for
 * a real CUDA library mapped by other means or an open /dev/nvidia*, in the
 * program and its descendants, and kills the offender and the program when
 * it finds one. Either way the run fails with PHOS_GUARD_EXIT and says which
 * library or device. Between scans phos-fn waits on a pidfd, so the
 * program's exit is seen at once.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdbool.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "guard.h"
#include "snapshotter.h"

extern char **environ;

#define CHANNEL_FD 3
#define GUARD_SCAN_MS 10
#define GUARD_SCAN_SLOW_MS 100
#define GUARD_SCAN_FAST_FOR 100   /* scans, about 1 s */

static void usage(FILE *f)
{
	fprintf(f, "usage: phos-fn run [--device auto|cuda|sim] [--trace FILE] [--validate-spec off|always]\n"
		   "                  -- PROGRAM [ARGS...]\n"
		   "  --validate-spec always  every launch of an exact kernel runs as its validation twin, which\n"
		   "                          checks each access against the launch's proven read/write set\n");
}

/* Moves fd to want (clearing close-on-exec there). */
static int place_fd(int fd, int want)
{
	if (fd == want)
		return fcntl(fd, F_SETFD, 0);
	if (dup2(fd, want) < 0)
		return -1;
	close(fd);
	return 0;
}

static pid_t spawn_executor(const char *exe, const char *device, const char *trace, const char *twins, int sock)
{
	pid_t pid = fork();

	if (pid != 0)
		return pid;
	if (place_fd(sock, CHANNEL_FD) < 0)
		_exit(127);
	if (twins)
		setenv("PHOS_SIM_TWINS", twins, 1);
	char fdbuf[16];

	snprintf(fdbuf, sizeof(fdbuf), "%d", CHANNEL_FD);
	if (trace)
		execl(exe, exe, "--fd", fdbuf, "--device", device, "--trace", trace, (char *)NULL);
	else
		execl(exe, exe, "--fd", fdbuf, "--device", device, (char *)NULL);
	fprintf(stderr, "phos-fn: cannot run %s: %s\n", exe, strerror(errno));
	_exit(127);
}

static pid_t spawn_program(char **argv, const char *preload_dir, const char *report, int sock)
{
	struct phos_runtime_paths paths = { .preload_dir = preload_dir };
	pid_t pid = fork();

	if (pid != 0)
		return pid;
	if (place_fd(sock, CHANNEL_FD) < 0)
		_exit(127);
	/* the stand-ins preloaded and the guard as audit module (runtime/guard.h) */
	char **env = phos_function_env(&paths);

	if (!env)
		_exit(127);
	environ = env;
	setenv("PHOS_GUARD_REPORT", report, 1);
	execvp(argv[0], argv);
	fprintf(stderr, "phos-fn: cannot run %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

static int exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

/* The guard's report: the libraries it refused, or "" (none, or no file). */
static void read_report(const char *report, char *buf, size_t len)
{
	FILE *f = fopen(report, "re");
	size_t n = 0;

	buf[0] = '\0';
	if (!f)
		return;
	n = fread(buf, 1, len - 1, f);
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	fclose(f);
}

/*
 * Waits for the program, scanning it (guard.h) as the top of the file says; returns
 * its exit code and sets *ret_refused when the guard refused it (the audit
 * module's report, or the scan, which kills it).
 */
static int wait_guarded(pid_t prog, const char *name, const char *preload, const char *report, bool *ret_refused)
{
	const struct timespec fast = { 0, GUARD_SCAN_MS * 1000000L }, slow = { 0, GUARD_SCAN_SLOW_MS * 1000000L };
	unsigned scans = 0;
	int pidfd = (int)syscall(SYS_pidfd_open, prog, 0);   /* -1 before Linux 5.3: sleep instead */
	char what[PATH_MAX];
	int status = 0;
	pid_t w, bad = 0;

	*ret_refused = false;
	for (;;) {
		w = waitpid(prog, &status, WNOHANG);
		if (w == prog || (w < 0 && errno != EINTR))
			break;
		if (w == 0 && phos_guard_scan(prog, preload, &bad, what, sizeof(what)) == 1) {
			if (pidfd >= 0)
				close(pidfd);
			if (bad != prog)
				kill(bad, SIGKILL);   /* a descendant: it would outlive the program */
			kill(prog, SIGKILL);
			while (waitpid(prog, &status, 0) < 0 && errno == EINTR)
				;
			fprintf(stderr, "phos-fn: refusing to run %s: it mapped or opened %s, which reaches the GPU "
					"driver directly instead of being forwarded; killed\n", name, what);
			*ret_refused = true;
			return PHOS_GUARD_EXIT;
		}
		const struct timespec *tick = ++scans < GUARD_SCAN_FAST_FOR ? &fast : &slow;

		if (pidfd >= 0) {
			struct pollfd pfd = { .fd = pidfd, .events = POLLIN };

			poll(&pfd, 1, (int)(tick->tv_nsec / 1000000L));   /* readable once it exited */
		} else {
			nanosleep(tick, NULL);
		}
	}
	if (pidfd >= 0)
		close(pidfd);
	read_report(report, what, sizeof(what));
	if (what[0]) {   /* the guard printed why on the program's stderr */
		*ret_refused = true;
		return PHOS_GUARD_EXIT;
	}
	return exit_code(status);
}

int cli_run(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "device", required_argument, NULL, 'd' },
		{ "trace", required_argument, NULL, 't' },
		{ "validate-spec", required_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *device = "auto", *trace = NULL, *twins = NULL;
	char exe[PATH_MAX], preload[PATH_MAX], twins_buf[PATH_MAX], report[PATH_MAX + 16];
	char report_dir[PATH_MAX];
	int sv[2], c, est, code;
	bool refused;
	pid_t prog, execr;

	optind = 1;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': device = optarg; break;
		case 't': trace = optarg; break;
		case 'V':
			/* the executor reads it from its environment (exec_validate.c) */
			if ((strcmp(optarg, "off") && strcmp(optarg, "always")) ||
			    setenv("PHOS_VALIDATE_SPEC", optarg, 1) < 0) {
				fprintf(stderr, "phos-fn: --validate-spec takes off or always\n");
				return 2;
			}
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	device = cli_resolve_device(device);
	if (!device) {
		fprintf(stderr, "phos-fn: unknown device (use auto, cuda or sim)\n");
		return 2;
	}
	if (cli_find_executor(exe, sizeof(exe)) < 0) {
		fprintf(stderr, "phos-fn: phos-executor not found (set PHOS_EXECUTOR)\n");
		return 1;
	}
	if (cli_find_preload_dir(preload, sizeof(preload)) < 0) {
		fprintf(stderr, "phos-fn: the preload libraries (libcudart.so.13) were not found (set PHOS_PRELOAD_DIR)\n");
		return 1;
	}
	if (!strcmp(device, "sim") && cli_find_sim_twins(twins_buf, sizeof(twins_buf)) == 0)
		twins = twins_buf;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		fprintf(stderr, "phos-fn: socketpair: %s\n", strerror(errno));
		return 1;
	}
	execr = spawn_executor(exe, device, trace, twins, sv[0]);
	if (execr < 0) {
		fprintf(stderr, "phos-fn: fork: %s\n", strerror(errno));
		return 1;
	}
	const char *tmpdir = getenv("TMPDIR");

	snprintf(report_dir, sizeof(report_dir), "%s/phos-run-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
	if (!mkdtemp(report_dir)) {
		fprintf(stderr, "phos-fn: mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	snprintf(report, sizeof(report), "%s/refused", report_dir);
	prog = spawn_program(argv + optind, preload, report, sv[1]);
	close(sv[0]);
	close(sv[1]);
	if (prog < 0) {
		fprintf(stderr, "phos-fn: fork: %s\n", strerror(errno));
		kill(execr, SIGTERM);
		waitpid(execr, NULL, 0);
		return 1;
	}
	/* Signals for the group (Ctrl-C) reach both children; phos-fn waits them out. */
	signal(SIGINT, SIG_IGN);
	code = wait_guarded(prog, argv[optind], preload, report, &refused);
	if (refused)
		kill(execr, SIGTERM);
	while (waitpid(execr, &est, 0) < 0 && errno == EINTR)
		;
	unlink(report);
	rmdir(report_dir);
	if (refused)
		return PHOS_GUARD_EXIT;
	if (exit_code(est) != 0) {
		fprintf(stderr, "phos-fn: the executor failed (status %d)\n", exit_code(est));
		if (code == 0)
			code = 1;
	}
	return code;
}
