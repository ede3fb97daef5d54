/* SPDX-License-Identifier: MIT */
/*
 * phos-fn checkpoint: checkpoint a running `phos-fn run --checkpointable`.
 *
 *   phos-fn checkpoint [--mode stw] -o DIR PID
 *        │ connect RUNDIR/run-PID.sock (cli_run_socket_path)
 *        ▼
 *   phos-fn run (PID) ── HELLO {its pid} ──▶ checkpoint
 *                     ◀── CHECKPOINT {mode, DIR} ──
 *                     phos_checkpoint_take (snapshotter/checkpoint.c) with its
 *                     executor and program
 *                     ── CHECKPOINTED {stats} | ERROR {reason} ──▶
 *
 * The endpoint speaks the control protocol (runtime/proto/control.h), so that a
 * phos-fn of another version is refused by name. RUNDIR is $PHOS_RUN_DIR, else
 * our private runtime directory (runtime/rundir.h).
 *
 * DIR is replaced atomically; an existing DIR must be a checkpoint (or a
 * snapshot) already: any other directory is refused, never replaced.
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
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cli.h"
#include "rundir.h"
#include "control.h"
#include "image.h"
#include "snapshotter.h"

#define USAGE "usage: phos-fn checkpoint [--mode stw|cow|recopy] -o DIR PID\n" \
	      "  stw: stop, copy every buffer, go on; cow: stop only for the CPU dump, copy buffers while\n" \
	      "  the program runs (a buffer it is about to write first); recopy: copy buffers while the\n" \
	      "  program runs, again those it wrote since, in rounds while they shrink, then stop to copy\n" \
	      "  the rest\n"

int cli_run_socket_path(pid_t pid, bool make_dir, char *buf, size_t len)
{
	const char *env = getenv("PHOS_RUN_DIR");
	char dir[PATH_MAX - 32];
	int r;

	if (env && *env) {
		snprintf(dir, sizeof(dir), "%s", env);
		if (make_dir && mkdir(dir, 0700) < 0 && errno != EEXIST)
			return -errno;
	} else if ((r = phos_rundir(dir, sizeof(dir))) < 0) {
		return r;
	}
	if ((size_t)snprintf(buf, len, "%s/run-%d.sock", dir, (int)pid) >= len ||
	    strlen(buf) >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return -ENAMETOOLONG;
	return 0;
}

int cli_run_listen(char *path, size_t len)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd, r = cli_run_socket_path(getpid(), true, path, len);

	if (r < 0)
		return r;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	memcpy(a.sun_path, path, strlen(path) + 1);   /* fits: cli_run_socket_path checked */
	unlink(path);   /* an earlier process of this pid is gone */
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || chmod(path, 0600) < 0 || listen(fd, 4) < 0) {
		r = -errno;
		close(fd);
		unlink(path);
		return r;
	}
	return fd;
}

/* A directory that may be replaced: absent, or a phos-fn image already. */
static int check_out_dir(const char *dir)
{
	char man[PATH_MAX + 32];
	struct stat st;

	if (stat(dir, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	snprintf(man, sizeof(man), "%s/%s", dir, "manifest.json");
	return access(man, F_OK) == 0 ? 0 : -EEXIST;
}

void cli_run_serve_checkpoint(int listen_fd, const struct phos_checkpoint_target *t)
{
	struct phos_checkpoint_stats st;
	struct phos_ctl_msg m, answer;
	char err[1024], why[256];
	int c = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC), r;

	if (c < 0)
		return;
	if (phos_ctl_send(c, &(struct phos_ctl_msg){ .type = PHOS_CTL_HELLO, .fd = -1,
						      .hello = { .pid = (uint32_t)getpid() } }) < 0 ||
	    phos_ctl_recv(c, 5000, &m, why, sizeof(why)) < 0) {
		close(c);
		return;
	}
	if (m.type != PHOS_CTL_CHECKPOINT) {
		phos_ctl_error_set(&answer, "expected a checkpoint request, got %s", phos_ctl_type_name(m.type));
		phos_ctl_send(c, &answer);
		phos_ctl_msg_exit(&m);
		close(c);
		return;
	}
	/* The client checked too; a peer that speaks the protocol by hand must
	 * not make us replace a directory that is not a checkpoint either. */
	if (m.checkpoint.dir[0] != '/')
		r = -EINVAL, snprintf(err, sizeof(err), "%.900s: not an absolute path", m.checkpoint.dir);
	else if ((r = check_out_dir(m.checkpoint.dir)) < 0)
		snprintf(err, sizeof(err), "%.900s exists and is not a checkpoint; it is not replaced", m.checkpoint.dir);
	else
		r = phos_checkpoint_take(t, m.checkpoint.mode, m.checkpoint.dir, &st, err, sizeof(err));
	if (r < 0) {
		phos_ctl_error_set(&answer, "%s", err);
	} else {
		answer = (struct phos_ctl_msg){ .type = PHOS_CTL_CHECKPOINTED, .fd = -1 };
		answer.checkpointed.mode = st.mode;
		answer.checkpointed.seq = st.seq;
		answer.checkpointed.data_bytes = st.data_bytes;
		answer.checkpointed.stall_s = st.stall_s;
		answer.checkpointed.total_s = st.total_s;
		answer.checkpointed.early = st.early;
		answer.checkpointed.rounds = st.rounds;
		answer.checkpointed.precopy_bytes = st.precopy_bytes;
		answer.checkpointed.stop_bytes = st.stop_bytes;
		answer.checkpointed.reserve_copies = st.reserve_copies;
	}
	phos_ctl_send(c, &answer);
	phos_ctl_msg_exit(&m);
	close(c);
}

/* Asks the phos-fn run of process pid (its control socket) for a
 * checkpoint of the given mode into out: 0 with CHECKPOINTED in *ret_m, or
 * 1 with the reason on stderr. */
static int ask_run(long pid, enum phos_ckpt_mode mode, const char *out, struct phos_ctl_msg *ret_m)
{
	struct phos_ctl_msg m = { .type = PHOS_CTL_CHECKPOINT, .fd = -1 };
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char path[PATH_MAX], why[256] = "";
	int fd, r;

	if (cli_run_socket_path((pid_t)pid, false, path, sizeof(path)) < 0) {
		fprintf(stderr, "phos-fn: the run directory's path is too long\n");
		return 1;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	memcpy(a.sun_path, path, strlen(path) + 1);   /* fits: cli_run_socket_path checked */
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		fprintf(stderr, "phos-fn: process %ld takes no checkpoints (%s): it is not a phos-fn run started with "
				"--checkpointable, or it has ended\n", pid, strerror(errno));
		if (fd >= 0)
			close(fd);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	r = phos_ctl_recv(fd, 10000, &m, why, sizeof(why));
	if (r < 0 || m.type != PHOS_CTL_HELLO || m.hello.pid != (uint32_t)pid) {
		fprintf(stderr, "phos-fn: process %ld does not answer as a phos-fn run: %s\n", pid,
			r < 0 ? (why[0] ? why : strerror(-r)) : "unexpected greeting");
		close(fd);
		return 1;
	}
	m = (struct phos_ctl_msg){ .type = PHOS_CTL_CHECKPOINT, .fd = -1 };
	m.checkpoint.mode = mode;
	memcpy(m.checkpoint.dir, out, strlen(out) + 1);
	r = phos_ctl_send(fd, &m);
	if (r == 0)
		r = phos_ctl_recv(fd, -1, &m, why, sizeof(why));
	close(fd);
	if (r < 0) {
		fprintf(stderr, "phos-fn: process %ld ended during the checkpoint (%s)\n", pid, why[0] ? why : strerror(-r));
		return 1;
	}
	if (m.type != PHOS_CTL_CHECKPOINTED) {
		fprintf(stderr, "phos-fn: checkpoint failed: %s\n",
			m.type == PHOS_CTL_ERROR ? m.error.reason : phos_ctl_type_name(m.type));
		return 1;
	}
	*ret_m = m;
	return 0;
}

int cli_checkpoint(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "mode", required_argument, NULL, 'm' },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct phos_ctl_msg m = { .type = PHOS_CTL_CHECKPOINT, .fd = -1 };
	enum phos_ckpt_mode mode = PHOS_CKPT_STW;
	char abs[PATH_MAX], *end;
	const char *out = NULL;
	long pid;
	int c, r;

	optind = 1;
	while ((c = getopt_long(argc, argv, "+ho:", opts, NULL)) != -1) {
		switch (c) {
		case 'm':
			if (phos_ckpt_mode_parse(optarg, &mode) < 0) {
				fprintf(stderr, "phos-fn: unknown checkpoint mode '%s' (stw, cow or recopy)\n", optarg);
				return 2;
			}
			break;
		case 'o': out = optarg; break;
		case 'h': printf(USAGE); return 0;
		default: fprintf(stderr, USAGE); return 2;
		}
	}
	if (!out || !*out || optind != argc - 1) {
		fprintf(stderr, "%s%s", !out || !*out ? "phos-fn: checkpoint needs -o DIR\n" :
						     "phos-fn: checkpoint takes exactly one PID\n", USAGE);
		return 2;
	}
	errno = 0;
	pid = strtol(argv[optind], &end, 10);
	if (errno || end == argv[optind] || *end || pid <= 0 || pid > INT_MAX) {
		fprintf(stderr, "phos-fn: '%s' is not a process id\n", argv[optind]);
		return 2;
	}
	if (kill((pid_t)pid, 0) < 0 && errno == ESRCH) {
		fprintf(stderr, "phos-fn: no process %ld\n", pid);
		return 1;
	}
	/* The run process has its own working directory: an absolute path. */
	if (out[0] != '/') {
		if (!getcwd(abs, sizeof(abs)) || strlen(abs) + 1 + strlen(out) >= sizeof(abs)) {
			fprintf(stderr, "phos-fn: cannot make %s an absolute path\n", out);
			return 1;
		}
		strcat(strcat(abs, "/"), out);
		out = abs;
	}
	if (strlen(out) + 32 >= PHOS_CTL_PATH_MAX) {
		fprintf(stderr, "phos-fn: %s: the path is too long\n", out);
		return 2;
	}
	r = check_out_dir(out);
	if (r < 0) {
		fprintf(stderr, "phos-fn: %s %s; it is not replaced by a checkpoint\n", out,
			r == -EEXIST ? "exists and is not a checkpoint" : r == -ENOTDIR ? "is not a directory" :
			strerror(-r));
		return 1;
	}
	r = ask_run(pid, mode, out, &m);
	if (r != 0)
		return r;
	fprintf(stderr, "phos-fn: checkpoint (%s) of %ld in %s: %.1f MiB of GPU data, stall %.3f s, total %.3f s, "
		"%llu buffer(s) copied ahead of a write (%llu into the device reserve), %u round(s) copying %.1f MiB "
		"while it ran, %.1f MiB while it was held\n", phos_ckpt_mode_name(m.checkpointed.mode), pid, out,
		(double)m.checkpointed.data_bytes / (1 << 20), m.checkpointed.stall_s, m.checkpointed.total_s,
		(unsigned long long)m.checkpointed.early, (unsigned long long)m.checkpointed.reserve_copies,
		m.checkpointed.rounds,
		(double)m.checkpointed.precopy_bytes / (1 << 20), (double)m.checkpointed.stop_bytes / (1 << 20));
	return 0;
}
