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
 * guard as audit module (runtime/guard/guard.h), which makes every libcudart load
 * the stand-in's, refuses a real CUDA library as the loader opens it and
 * writes it to a report file; phos-fn also scans /proc/PID/maps and fds
 * (every GUARD_SCAN_MS while the program starts and loads its libraries, then
 * every GUARD_SCAN_SLOW_MS, so that a long benchmark pays almost nothing) for
 * a real CUDA library mapped by other means or an open /dev/nvidia*, in the
 * program and its descendants, and kills the offender and the program when
 * it finds one. Either way the run fails with PHOS_GUARD_EXIT and says which
 * library or device. Between scans phos-fn waits on a pidfd, so the
 * program's exit is seen at once.
 *
 * --checkpointable (issue 11): the program starts as the init of its own pid
 * namespace and a session leader (runtime/criu/criu.h, phos_criu_spawn), as CRIU
 * needs to restore it under the same pids, and the executor gets a control
 * socket. phos-fn then listens on RUNDIR/run-PID.sock (cli_checkpoint.c) and
 * takes `phos-fn checkpoint` requests between its guard scans. As the init of
 * a pid namespace the program ignores signals it has no handler for (but
 * SIGKILL); phos-fn passes SIGINT and SIGTERM on as SIGKILL.
 *
 * A warm executor (issue 12): unless --executor fresh, or options that only a
 * fresh executor takes (--trace, --validate-spec, --checkpointable, periodic
 * checkpoints), phos-fn asks a lending socket (snapshotter.h: `phos-fn pool`,
 * or an invoker's STATE/executors.sock) for an executor that already has its
 * CUDA context, and runs the program on the channel it gets; the connection
 * stays open until the program has ended, then the executor goes back to its
 * pool. With none there (or none free, or another device or GPU), it starts
 * its own as before; --executor PATH insists on that socket.
 *
 * Periodic checkpoints (--checkpoint-every, cli_periodic.c) are taken between
 * the same scans; with --restart-on-failure the executor is watched too, and
 * if it dies while the program runs, the program is killed and restored from
 * the latest checkpoint (cli_restore_run), which goes on where it was.
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
#include "control.h"
#include "criu.h"
#include "guard.h"
#include "snapshotter.h"
#include "token.h"

extern char **environ;

#define CHANNEL_FD 3
#define GUARD_SCAN_MS 10
#define GUARD_SCAN_SLOW_MS 100
#define GUARD_SCAN_FAST_FOR 100   /* scans, about 1 s */

/* The function was given our stdio (checkpoint keys, snapshotter.h). */
static const int own_stdio[3] = { 0, 1, 2 };

static void usage(FILE *f)
{
	fprintf(f, "usage: phos-fn run [--device auto|cuda|sim] [--gpu N | --gpus A,B,...] [--trace FILE]\n"
		   "                  [--validate-spec off|always]\n"
		   "                  [--executor auto|fresh|SOCKET] [--checkpointable] [periodic options]\n"
		   "                  -- PROGRAM [ARGS...]\n"
		   "  --executor auto         a warm executor of `phos-fn pool` or of an invoker on this machine\n"
		   "                          when one is free (default: $PHOS_RUN_EXECUTOR, else auto), else a fresh\n"
		   "                          one; fresh: always a fresh one; SOCKET: from that lending socket,\n"
		   "                          or fail\n"
		   "  --gpu N                 the host GPU its executor owns (default PHOS_GPU, else 0); the\n"
		   "                          program sees it as device 0, and no other device\n"
		   "  --gpus A,B,...          several host GPUs, one executor over them all (a program that\n"
		   "                          drives several GPUs): the program sees them as devices 0, 1, ...\n"
		   "                          (default PHOS_GPUS); not with --checkpointable yet\n"
		   "  --checkpointable        phos-fn checkpoint PID (this phos-fn's pid) may checkpoint it\n"
		   CLI_PERIODIC_USAGE
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
	/* the stand-ins preloaded and the guard as audit module (runtime/guard/guard.h) */
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
static int wait_guarded(pid_t prog, const char *name, const char *preload, const char *report, int listen_fd,
			const struct phos_checkpoint_target *ckpt, struct cli_periodic *per, bool *ret_refused,
			bool *ret_exec_died)
{
	const struct timespec fast = { 0, GUARD_SCAN_MS * 1000000L }, slow = { 0, GUARD_SCAN_SLOW_MS * 1000000L };
	unsigned scans = 0;
	int pidfd = (int)syscall(SYS_pidfd_open, prog, 0);   /* -1 before Linux 5.3: sleep instead */
	int exefd = per && per->restart ? (int)syscall(SYS_pidfd_open, ckpt->executor_pid, 0) : -1;
	char what[PATH_MAX];
	int status = 0;
	pid_t w, bad = 0;

	*ret_refused = false;
	*ret_exec_died = false;
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
			struct pollfd pfd[3] = { { .fd = pidfd, .events = POLLIN }, { .fd = listen_fd, .events = POLLIN },
						 { .fd = exefd, .events = POLLIN } };
			int ms = (int)(tick->tv_nsec / 1000000L), due = cli_periodic_wait_ms(per);

			/* readable once it exited; a checkpoint request; the executor gone */
			if (poll(pfd, 3, due >= 0 && due < ms ? due : ms) > 0) {
				if (pfd[1].revents)
					cli_run_serve_checkpoint(listen_fd, ckpt);
				if (pfd[2].revents) {
					close(exefd);
					exefd = -1;
					if (cli_executor_failed(ckpt->executor_pid)) {
						/* Its GPU state is gone; the caller restarts it. */
						kill(prog, SIGKILL);
						*ret_exec_died = true;
					}
				}
			}
			if (ckpt && !*ret_exec_died)
				cli_periodic_tick(per, ckpt);
		} else {
			nanosleep(tick, NULL);
		}
	}
	if (pidfd >= 0)
		close(pidfd);
	if (exefd >= 0)
		close(exefd);
	read_report(report, what, sizeof(what));
	if (what[0]) {   /* the guard printed why on the program's stderr */
		*ret_refused = true;
		return PHOS_GUARD_EXIT;
	}
	return exit_code(status);
}

/* --checkpointable: what phos_checkpoint_take needs, and how it started. */
struct ckpt_run {
	int control;                 /* the executor's control socket, ours */
	int listen_fd;               /* RUNDIR/run-PID.sock */
	char sock_path[PATH_MAX];
	char criu[PATH_MAX];
	struct phos_checkpoint_target target;
};

static pid_t forward_to;

static void forward_kill(int sig)
{
	(void)sig;
	if (forward_to > 0)
		kill(forward_to, SIGKILL);
}

/* Starts the executor (with a control socket) and the program (the init of a
 * new pid namespace) on the channel pair sv, and the checkpoint endpoint.
 * Returns 0, or 1 after saying why. */
static int start_checkpointable(char **prog_argv, const char *exe, const char *device, const char *trace,
				const char *twins, const char *preload, const char *report, int sv[2],
				struct ckpt_run *c, pid_t *ret_exec, pid_t *ret_prog)
{
	char report_env[PATH_MAX + 64], why[256];
	char *const fn_env[] = { report_env, NULL };
	struct phos_runtime_paths paths = { .executor = exe, .preload_dir = preload, .sim_twins = twins,
					    .device = device, .fn_env = fn_env };
	struct phos_ctl_msg hello;
	int ctl[2], r;
	char **env;

	c->control = c->listen_fd = -1;
	if (phos_criu_find(c->criu, sizeof(c->criu), why, sizeof(why)) < 0) {
		fprintf(stderr, "phos-fn: --checkpointable needs CRIU: %s\n", why);
		return 1;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) < 0) {
		fprintf(stderr, "phos-fn: socketpair: %s\n", strerror(errno));
		return 1;
	}
	r = phos_executor_spawn(&paths, sv[0], ctl[1],
				trace ? (const char *const[]){ "--trace", trace, NULL } : NULL, ret_exec);
	close(ctl[1]);
	if (r < 0) {
		fprintf(stderr, "phos-fn: cannot start the executor: %s\n", strerror(-r));
		close(ctl[0]);
		return 1;
	}
	c->control = ctl[0];
	r = phos_ctl_recv(c->control, 60000, &hello, why, sizeof(why));
	if (r < 0 || hello.type != PHOS_CTL_HELLO) {
		fprintf(stderr, "phos-fn: the executor did not start: %s\n", r < 0 && why[0] ? why : "no hello");
		if (r == 0)
			phos_ctl_msg_exit(&hello);
		return 1;
	}
	snprintf(report_env, sizeof(report_env), "PHOS_GUARD_REPORT=%s", report);
	env = phos_function_env(&paths);
	if (!env) {
		fprintf(stderr, "phos-fn: out of memory\n");
		return 1;
	}
	{
		struct phos_fd_map fds[] = { { 0, 0 }, { 1, 1 }, { 2, 2 }, { sv[1], CHANNEL_FD } };

		r = phos_criu_spawn(prog_argv, env, fds, 4, NULL, ret_prog);
	}
	phos_env_free(env);
	if (r < 0) {
		fprintf(stderr, "phos-fn: cannot run %s: %s\n", prog_argv[0], strerror(-r));
		return 1;
	}
	c->listen_fd = cli_run_listen(c->sock_path, sizeof(c->sock_path));
	if (c->listen_fd < 0) {
		fprintf(stderr, "phos-fn: cannot listen for checkpoints at %s: %s\n", c->sock_path,
			strerror(-c->listen_fd));
		kill(*ret_prog, SIGKILL);
		return 1;
	}
	c->target = (struct phos_checkpoint_target){ .fn_pid = *ret_prog, .channel_fd = CHANNEL_FD,
						     .control_fd = c->control, .executor_pid = *ret_exec,
						     .criu = c->criu,
						     .function = prog_argv[0], .stdio_fds = own_stdio };
	forward_to = *ret_prog;
	signal(SIGINT, forward_kill);
	signal(SIGTERM, forward_kill);
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

/* A warm executor from a lending socket (the top of the file): the channel
 * for the program and the connection to keep open while it runs, or -1 and
 * why (only said when the socket was named). */
static int borrow_executor(const char *want, const char *device, int *ret_conn, int *ret_channel)
{
	char paths[2][PATH_MAX], state[PATH_MAX], err[256];
	const char *gpu_env = getenv("PHOS_GPU");
	int gpu = gpu_env && *gpu_env ? atoi(gpu_env) : 0, n = 0;
	pid_t pid;

	if (strcmp(want, "auto")) {
		snprintf(paths[n++], PATH_MAX, "%s", want);
	} else {
		if (cli_executor_socket_default(paths[n], PATH_MAX, false) == 0)
			n++;
		if (inv_state_dir_default(state, sizeof(state), false) == 0 &&
		    (size_t)snprintf(paths[n], PATH_MAX, "%s/executors.sock", state) < PATH_MAX)
			n++;
	}
	for (int i = 0; i < n; i++) {
		err[0] = '\0';
		if (phos_lender_borrow(paths[i], device, gpu, 5000, ret_conn, ret_channel, &pid, err, sizeof(err)) == 0)
			return 0;
		if (strcmp(want, "auto"))
			fprintf(stderr, "phos-fn: no executor from %s: %s\n", paths[i], err[0] ? err : strerror(errno));
	}
	return -1;
}

/* The rest of cli_run with --checkpointable. */
static int run_checkpointable(char **prog_argv, const char *exe, const char *device, const char *trace,
			      const char *twins, const char *preload, int sv[2], struct ckpt_run *ck,
			      struct cli_periodic *per)
{
	char report_dir[PATH_MAX], report[PATH_MAX + 16];
	const char *tmpdir = getenv("TMPDIR");
	pid_t prog = -1, execr = -1;
	int code = 1, est = 0, r;
	bool refused = false, died = false;

	snprintf(report_dir, sizeof(report_dir), "%s/phos-run-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
	if (!mkdtemp(report_dir)) {
		fprintf(stderr, "phos-fn: mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	snprintf(report, sizeof(report), "%s/refused", report_dir);
	r = start_checkpointable(prog_argv, exe, device, trace, twins, preload, report, sv, ck, &execr, &prog);
	close(sv[0]);
	close(sv[1]);
	if (r == 0)
		code = wait_guarded(prog, prog_argv[0], preload, report, ck->listen_fd, &ck->target, per, &refused,
				    &died);
	else if (prog > 0)
		waitpid(prog, NULL, 0);
	if (ck->listen_fd >= 0) {
		close(ck->listen_fd);
		unlink(ck->sock_path);
	}
	if (ck->control >= 0)
		close(ck->control);   /* the executor ends with its function, or now */
	if (execr > 0) {
		if (refused || r)
			kill(execr, SIGTERM);
		while (waitpid(execr, &est, 0) < 0 && errno == EINTR)
			;
	}
	unlink(report);
	rmdir(report_dir);
	if (refused)
		return PHOS_GUARD_EXIT;
	/* The program may have failed on its own first, its calls cut off. */
	if (r == 0 && per->restart && code != 0 && cli_executor_status_failed(est))
		died = true;
	if (died) {
		char latest[PATH_MAX], why[64];

		if (exit_code(est) == 76)   /* EXEC_EXIT_GPU_FATAL (ctxpool/executor/executor.h) */
			snprintf(why, sizeof(why), "the GPU context failed for good (a fatal CUDA error)");
		else
			snprintf(why, sizeof(why), "the executor died (status %d)", exit_code(est));
		if (cli_periodic_restart(per, why, latest, sizeof(latest)) < 0)
			return code;
		return cli_restore_run(device, latest, false, NULL, per);
	}
	if (r == 0 && exit_code(est) != 0) {
		fprintf(stderr, "phos-fn: the executor failed (status %d)\n", exit_code(est));
		if (code == 0)
			code = 1;
	}
	return code;
}

struct run_opts {
	const char *device, *trace, *executor;
	bool checkpointable;
	bool own_options;   /* the run needs its own executor (--gpus, --trace, --validate-spec) */
	struct cli_periodic per;
};

/* phos-fn run's options into o (optind: the program): -1 to go on, or the
 * exit status (0 after --help, 2 for a bad option). */
static int run_options(int argc, char **argv, struct run_opts *o)
{
	static const struct option opts[] = {
		{ "device", required_argument, NULL, 'd' },
		{ "gpu", required_argument, NULL, 'g' },
		{ "gpus", required_argument, NULL, 'G' },
		{ "trace", required_argument, NULL, 't' },
		{ "validate-spec", required_argument, NULL, 'V' },
		{ "checkpointable", no_argument, NULL, 'C' },
		{ "executor", required_argument, NULL, 'E' },
		{ "help", no_argument, NULL, 'h' },
		CLI_PERIODIC_OPTIONS,
		{ 0 },
	};
	int c;

	o->executor = getenv("PHOS_RUN_EXECUTOR");   /* auto when unset */
	if (!o->executor || !*o->executor)
		o->executor = "auto";
	optind = 1;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		switch (c) {
		case 'd': o->device = optarg; break;
		case 'g':   /* the executor checks it */
			setenv("PHOS_GPU", optarg, 1);
			unsetenv("PHOS_GPUS");
			break;
		case 'G':   /* the same; executors of several GPUs are not lent */
			setenv("PHOS_GPUS", optarg, 1);
			unsetenv("PHOS_GPU");
			o->own_options = true;
			break;
		case 't': o->trace = optarg; o->own_options = true; break;
		case 'E': o->executor = optarg; break;
		case 'V':
			o->own_options = true;
			/* the executor reads it from its environment (exec_validate.c) */
			if ((strcmp(optarg, "off") && strcmp(optarg, "always")) ||
			    setenv("PHOS_VALIDATE_SPEC", optarg, 1) < 0) {
				fprintf(stderr, "phos-fn: --validate-spec takes off or always\n");
				return 2;
			}
			break;
		case 'C': o->checkpointable = true; break;
		case 'h': usage(stdout); return 0;
		default:
			if (cli_periodic_option(&o->per, c, optarg) == 0)
				break;
			if (c < CLI_OPT_CKPT_DIR)
				usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	if (cli_periodic_check(&o->per) < 0)
		return 2;
	if (o->per.dir[0])
		o->checkpointable = true;
	return -1;
}

/* The run's executor: a lent one (its channel into sv[1], *ret_lease the
 * lease's connection) when the options allow and one is lent, else a fresh
 * one on sv[0] (*ret_pid). -1 to go on, or the exit status. */
static int run_executor(const struct run_opts *o, const char *exe, const char *twins, int sv[2], int *ret_lease,
			pid_t *ret_pid)
{
	if (strcmp(o->executor, "fresh") && !o->own_options) {
		int channel;

		if (borrow_executor(o->executor, o->device, ret_lease, &channel) == 0) {
			/* the program takes the lent channel; ours is not needed */
			close(sv[0]);
			close(sv[1]);
			sv[0] = -1;
			sv[1] = channel;
		} else if (strcmp(o->executor, "auto")) {
			close(sv[0]);
			close(sv[1]);
			return 1;
		}
	} else if (strcmp(o->executor, "fresh") && strcmp(o->executor, "auto")) {
		fprintf(stderr, "phos-fn: --executor SOCKET does not go with --trace or --validate-spec\n");
		return 2;
	}
	*ret_pid = *ret_lease >= 0 ? 0 : spawn_executor(exe, o->device, o->trace, twins, sv[0]);
	if (*ret_pid < 0) {
		fprintf(stderr, "phos-fn: fork: %s\n", strerror(errno));
		return 1;
	}
	return -1;
}

int cli_run(int argc, char **argv)
{
	struct run_opts o = { .device = "auto", .per = CLI_PERIODIC_INIT };
	const char *twins = NULL;
	char exe[PATH_MAX], preload[PATH_MAX], twins_buf[PATH_MAX], report[PATH_MAX + 16];
	char report_dir[PATH_MAX];
	int sv[2], est, code;
	bool refused, exec_died;
	int lease_conn = -1;
	struct ckpt_run ck = { .control = -1, .listen_fd = -1 };
	pid_t prog, execr = 0;

	if ((code = run_options(argc, argv, &o)) >= 0)
		return code;
	o.device = cli_resolve_device(o.device);
	if (!o.device) {
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
	if (!strcmp(o.device, "sim") && cli_find_sim_twins(twins_buf, sizeof(twins_buf)) == 0)
		twins = twins_buf;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		fprintf(stderr, "phos-fn: socketpair: %s\n", strerror(errno));
		return 1;
	}
	if (o.checkpointable)
		return run_checkpointable(argv + optind, exe, o.device, o.trace, twins, preload, sv, &ck, &o.per);
	if ((code = run_executor(&o, exe, twins, sv, &lease_conn, &execr)) >= 0)
		return code;
	const char *tmpdir = getenv("TMPDIR");

	snprintf(report_dir, sizeof(report_dir), "%s/phos-run-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
	if (!mkdtemp(report_dir)) {
		fprintf(stderr, "phos-fn: mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	snprintf(report, sizeof(report), "%s/refused", report_dir);
	prog = spawn_program(argv + optind, preload, report, sv[1]);
	if (sv[0] >= 0)
		close(sv[0]);
	close(sv[1]);
	if (prog < 0) {
		fprintf(stderr, "phos-fn: fork: %s\n", strerror(errno));
		if (execr > 0) {
			kill(execr, SIGTERM);
			waitpid(execr, NULL, 0);
		}
		return 1;
	}
	/* Signals for the group (Ctrl-C) reach both children; phos-fn waits them out. */
	signal(SIGINT, SIG_IGN);
	code = wait_guarded(prog, argv[optind], preload, report, -1, NULL, NULL, &refused, &exec_died);
	if (lease_conn >= 0) {
		/* the lent executor goes back to its pool (scrubbed) once we hang up */
		close(lease_conn);
		est = 0;
	} else {
		if (refused)
			kill(execr, SIGTERM);
		while (waitpid(execr, &est, 0) < 0 && errno == EINTR)
			;
	}
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
