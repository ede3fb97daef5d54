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
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

#define CHANNEL_FD 3

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

static pid_t spawn_program(char **argv, const char *preload_dir, int sock)
{
	pid_t pid = fork();

	if (pid != 0)
		return pid;
	if (place_fd(sock, CHANNEL_FD) < 0)
		_exit(127);
	const char *old = getenv("LD_LIBRARY_PATH");
	char *ld;

	if (asprintf(&ld, "%s%s%s", preload_dir, old && *old ? ":" : "", old && *old ? old : "") < 0)
		_exit(127);
	setenv("LD_LIBRARY_PATH", ld, 1);
	setenv("PHOS_CHANNEL_FD", "3", 1);
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
	char exe[PATH_MAX], preload[PATH_MAX], twins_buf[PATH_MAX];
	int sv[2], c, status, est, code;
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
	prog = spawn_program(argv + optind, preload, sv[1]);
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
	while (waitpid(prog, &status, 0) < 0 && errno == EINTR)
		;
	code = exit_code(status);
	while (waitpid(execr, &est, 0) < 0 && errno == EINTR)
		;
	if (exit_code(est) != 0) {
		fprintf(stderr, "phos-fn: the executor failed (status %d)\n", exit_code(est));
		if (code == 0)
			code = 1;
	}
	return code;
}
