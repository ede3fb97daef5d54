/* SPDX-License-Identifier: MIT */
/* Taking a snapshot (see snapshotter.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "control.h"
#include "criu.h"
#include "fault.h"
#include "guard.h"
#include "image.h"
#include "log.h"
#include "snapshotter.h"

/* Copies what is readable on from to to (the function's init output to the log). */
static void pump(int from, int to)
{
	char buf[4096];
	ssize_t n = read(from, buf, sizeof(buf));

	if (n > 0 && to >= 0)
		(void)!write(to, buf, (size_t)n);
}

static bool cancelled(int cancel_fd)
{
	struct pollfd p = { .fd = cancel_fd, .events = POLLIN };

	return cancel_fd >= 0 && poll(&p, 1, 0) > 0;
}

static void phase_set(const struct phos_snapshot_ctl *ctl, const char *phase)
{
	if (ctl->phase)
		ctl->phase(ctl->arg, phase);
}

/* Waits for the executor's answer (DUMPED or ERROR, after its HELLO) on its
 * control socket into *ret, forwarding the function's output meanwhile.
 * Returns 0, -ETIMEDOUT, -ECANCELED (cancel_fd readable), -ECHILD when the
 * function or the executor ended first (*ret_status tells how; *fn is -1 once
 * the function was reaped), or -EPROTO / -EPROTONOSUPPORT with why set when
 * the executor's messages do not read. */
static int await_answer(int ctl, int out, int errp, int log_fd, pid_t *fn, pid_t exe, double deadline, int cancel_fd,
			struct phos_ctl_msg *ret, char *why, size_t whylen, int *ret_status)
{
	bool hello = false;

	for (;;) {
		struct pollfd p[4] = { { .fd = ctl, .events = POLLIN }, { .fd = out, .events = POLLIN },
				       { .fd = errp, .events = POLLIN }, { .fd = cancel_fd, .events = POLLIN } };
		int left = (int)((deadline - phos_now()) * 1000), status, r;

		if (left <= 0)
			return -ETIMEDOUT;
		if (poll(p, 4, left < 200 ? left : 200) < 0 && errno != EINTR)
			return -errno;
		if (p[3].revents & POLLIN)
			return -ECANCELED;
		if (p[1].revents & POLLIN)
			pump(out, log_fd);
		if (p[2].revents & POLLIN)
			pump(errp, log_fd);
		if (p[0].revents & (POLLIN | POLLHUP)) {
			r = phos_ctl_recv(ctl, 0, ret, why, whylen);
			if (r == 0 && !hello) {
				hello = ret->type == PHOS_CTL_HELLO;
				if (!hello) {
					phos_errf(why, whylen, "it said %s before hello", phos_ctl_type_name(ret->type));
					phos_ctl_msg_exit(ret);
					return -EPROTO;
				}
				phos_ctl_msg_exit(ret);
				continue;
			}
			if (r == 0)
				return 0;
			if (r == -EPIPE) {
				/* the executor ends when the function does: say how the
				 * function ended when it did (within a second) */
				*ret_status = -1;
				for (int i = 0; i < 100; i++) {
					if (waitpid(*fn, &status, WNOHANG) == *fn) {
						*ret_status = status;
						*fn = -1;
						break;
					}
					usleep(10000);
				}
				return -ECHILD;
			}
			if (r != -ETIMEDOUT)
				return r;
		}
		if (waitpid(*fn, &status, WNOHANG) == *fn) {
			*ret_status = status;
			*fn = -1;   /* reaped */
			return -ECHILD;
		}
		if (waitpid(exe, &status, WNOHANG) == exe) {
			*ret_status = -1;   /* not the function's status */
			return -ECHILD;
		}
	}
}

/* The descriptors a restore hands in fresh, with CRIU's keys for them. */
static int record_fds(struct phos_image *img, const int ours[4], const int theirs[4])
{
	img->nfds = 0;
	for (int i = 0; i < 4; i++) {
		struct phos_image_fd *f = &img->fds[img->nfds];

		f->fd = theirs[i];
		if (phos_criu_fd_key(getpid(), ours[i], f->key, sizeof(f->key)) < 0)
			return -EBADF;
		img->nfds++;
	}
	return 0;
}

/* Whether a failure reported as text (the executor's ERROR, CRIU's log)
 * was a full disk: they report errno by its strerror only. */
static bool disk_full(const char *why)
{
	return strstr(why, strerror(ENOSPC)) || strstr(why, strerror(EDQUOT));
}

int phos_snapshot_take(const struct phos_runtime_paths *paths, char *const argv[], const char *out_dir,
		       int log_fd, unsigned init_timeout_s, struct phos_snapshot_stats *ret_stats, char *err,
		       size_t errlen)
{
	unsigned s = init_timeout_s ? init_timeout_s : 600;
	const struct phos_snapshot_ctl sc = { .timeout_ms = (s < 4000000 ? s : 4000000) * 1000, .cancel_fd = -1 };

	return phos_snapshot_run(paths, argv, out_dir, log_fd, &sc, ret_stats, err, errlen);
}

/* One snapshot being taken (phos_snapshot_run's steps share it). */
struct snap_run {
	const struct phos_runtime_paths *paths;
	char *const *argv;
	const struct phos_snapshot_ctl *sc;
	char tmp[4096], cpu[4200], line[1024];
	int ch[2], ctl[2], in[2], out[2], errp[2];   /* channel, control, the function's stdio */
	pid_t exe, fn;
	char **env;
	int status;
};

/* The temporary snapshot directory, the executor (dumping to it) and the
 * function, started on the channel between them. 0 or -errno with err. */
static int snap_start(struct snap_run *s, const char *out_dir, char *err, size_t errlen)
{
	int r;

	phos_image_dir_sweep(out_dir);
	r = phos_image_dir_begin(out_dir, s->tmp, sizeof(s->tmp));
	if (r < 0) {
		s->tmp[0] = '\0';
		return phos_errf_rc(err, errlen, r, "cannot create a snapshot beside %s: %s", out_dir, strerror(-r));
	}
	snprintf(s->cpu, sizeof(s->cpu), "%s/cpu", s->tmp);
	if (mkdir(s->cpu, 0700) < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s->ch) < 0 ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s->ctl) < 0 || pipe2(s->in, O_CLOEXEC) < 0 ||
	    pipe2(s->out, O_CLOEXEC) < 0 || pipe2(s->errp, O_CLOEXEC) < 0)
		return phos_errf_rc(err, errlen, -errno, "setting up: %s", strerror(errno));
	r = phos_executor_spawn(s->paths, s->ch[0], s->ctl[1], (const char *const[]){ "--snapshot-to", s->tmp, NULL },
				&s->exe);
	if (r < 0)
		return phos_errf_rc(err, errlen, r, "cannot start the executor: %s", strerror(-r));
	close(s->ch[0]);
	close(s->ctl[1]);
	s->ch[0] = s->ctl[1] = -1;
	s->env = phos_function_env(s->paths);
	if (!s->env)
		return phos_errf_rc(err, errlen, -ENOMEM, "out of memory");
	{
		struct phos_fd_map fds[] = { { s->in[0], 0 }, { s->out[1], 1 }, { s->errp[1], 2 }, { s->ch[1], 3 } };

		r = phos_criu_spawn(s->argv, s->env, fds, 4, s->paths->run_as, &s->fn);
	}
	if (r < 0)
		return phos_errf_rc(err, errlen, r, "cannot start %s: %s", s->argv[0], strerror(-r));
	return 0;
}

/* Waits (until deadline) for the executor's DUMPED: the function reached
 * phos_fn_serve and its GPU state is in the directory. 0 with *ret_gpu_s,
 * or -errno with err (the function's own end, a timeout, a cancel, the
 * executor's refusal). */
static int snap_await(struct snap_run *s, int log_fd, double deadline, unsigned timeout_ms, double *ret_gpu_s,
		      char *err, size_t errlen)
{
	struct phos_ctl_msg answer = { .fd = -1 };
	const char *prog = s->argv[0];
	int r;

	r = await_answer(s->ctl[0], s->out[0], s->errp[0], log_fd, &s->fn, s->exe, deadline, s->sc->cancel_fd, &answer,
			 s->line, sizeof(s->line), &s->status);
	if (r == -ETIMEDOUT)
		return phos_errf_rc(err, errlen, r, "%s did not reach phos_fn_serve within %u ms", prog, timeout_ms);
	if (r == -ECANCELED)
		return phos_errf_rc(err, errlen, r, "cancelled while %s was initialising", prog);
	if (r == -ECHILD) {
		/* the preload makes an abort() of the function (the init of its pid
		 * namespace, which its own SIGABRT cannot kill) exit with 128 + SIGABRT */
		int status = s->status, code = status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
		const char *sig = code == 128 + SIGABRT ? "ABRT" :
				  status >= 0 && WIFSIGNALED(status) ? sigabbrev_np(WTERMSIG(status)) : NULL;

		if (sig)
			phos_errf(err, errlen, "%s was killed by SIG%s before reaching phos_fn_serve", prog, sig);
		else if (code >= 0)
			phos_errf(err, errlen, "%s exited with status %d before reaching phos_fn_serve", prog, code);
		else
			phos_errf(err, errlen, "the executor stopped before %s reached phos_fn_serve", prog);
		return r;
	}
	if (r < 0 || answer.type != PHOS_CTL_DUMPED) {
		const char *why = r < 0 ? s->line : answer.type == PHOS_CTL_ERROR ? answer.error.reason
									    : phos_ctl_type_name(answer.type);

		phos_errf(err, errlen, "the executor could not dump the GPU state: %s", why);
		r = disk_full(why) ? -ENOSPC : -EIO;
		phos_ctl_msg_exit(&answer);
		return r;
	}
	*ret_gpu_s = answer.dumped.gpu_dump_s;
	return 0;
}

/* The CPU side, the function parked inside phos_fn_serve: checked for
 * what reaches the driver by hand, dumped by CRIU (which ends it), the
 * executor's own end checked. 0 or -errno with err. */
static int snap_cpu(struct snap_run *s, char *err, size_t errlen)
{
	const char *prog = s->argv[0];
	struct stat sb;
	int status = 0, r;

	if (phos_fault("snapshot_executor_kill")) {
		kill(s->exe, SIGKILL);   /* it dies between its GPU dump and CRIU's */
		waitpid(s->exe, NULL, 0);
		s->exe = -1;
	}
	if (s->exe < 0 || waitpid(s->exe, &status, WNOHANG) != 0) {
		s->exe = -1;
		return phos_errf_rc(err, errlen, -EIO, "the executor ended (%s %d) before %s was dumped (its channel "
				    "was cut)", WIFSIGNALED(status) ? "signal" : "status",
				    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), prog);
	}
	if (fstat(s->ch[1], &sb) < 0)
		return phos_errf_rc(err, errlen, -errno, "the channel: %s", strerror(errno));
	/* Nothing that reached the driver behind the stand-ins' back (a driver
	 * mapped by hand, an open /dev/nvidia*: runtime/guard/guard.h) is snapshotted:
	 * the audit module refuses loads, this finds the rest, in the function
	 * and its descendants, as phos-fn run's scan does. */
	if (s->paths->preload_dir) {
		char what[PATH_MAX];
		pid_t bad = 0;

		if (phos_guard_scan(s->fn, s->paths->preload_dir, &bad, what, sizeof(what)) == 1)
			return phos_errf_rc(err, errlen, -EPERM, "refusing to snapshot %s: it mapped or opened %s, which "
					    "reaches the GPU driver directly instead of being forwarded", prog, what);
	}
	{
		uint64_t ino = (uint64_t)sb.st_ino;

		r = phos_criu_dump(s->paths->criu, s->fn, s->cpu, &ino, 1, s->sc->cancel_fd, s->line, sizeof(s->line));
	}
	if (r == -ECANCELED)
		return phos_errf_rc(err, errlen, r, "cancelled while %s was being dumped", prog);
	if (r < 0) {
		phos_errf(err, errlen, "CRIU could not dump %s: %s", prog, s->line);
		return disk_full(s->line) ? -ENOSPC : r;
	}
	waitpid(s->fn, &status, 0);
	s->fn = -1;
	/* The channel must have been whole at the dump: with the executor gone,
	 * CRIU saved a half-closed socket (no peer, not external), and CRIU 4.1.1
	 * restoring that image hangs in "unix: Opening standalone" until its
	 * timeout, with the snapshot's lock held (a remove of the function waits
	 * behind it). The executor was alive when CRIU began (checked above);
	 * CRIU ends the function when done, and the executor then ends by itself
	 * with status 0 on the channel's EOF. Any other end (a signal, an error)
	 * may have come during the dump: refused. */
	if (waitpid(s->exe, &status, WNOHANG) == s->exe) {
		s->exe = -1;   /* reaped */
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			return phos_errf_rc(err, errlen, -EIO, "the executor ended (%s %d) while %s was being dumped (its "
					    "channel was cut); nothing was committed",
					    WIFSIGNALED(status) ? "signal" : "status",
					    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), prog);
	}
	return 0;
}

/* The new snapshot read back, its CPU image checksummed, its manifest
 * written, and the directory committed as out_dir. 0 or -errno with err. */
static int snap_commit(struct snap_run *s, const char *out_dir, struct phos_snapshot_stats *st, char *err,
		       size_t errlen)
{
	struct phos_image *img = NULL;
	int r;

	r = phos_image_read(s->tmp, &img, s->line, sizeof(s->line));
	if (r < 0)
		return phos_errf_rc(err, errlen, r, "the new snapshot does not read back: %s", s->line);
	snprintf(img->function, sizeof(img->function), "%s", s->argv[0]);
	r = phos_image_cpu_hash(s->tmp, img, s->line, sizeof(s->line));
	if (r < 0) {
		phos_errf(err, errlen, "checksumming the CRIU image: %s", s->line);
		goto out;
	}
	r = record_fds(img, (const int[]){ s->in[1], s->out[0], s->errp[0], s->ch[1] }, (const int[]){ 0, 1, 2, 3 });
	if (r == 0)
		r = phos_image_write_manifest(s->tmp, img);
	if (r < 0) {
		phos_errf(err, errlen, "writing the manifest: %s", strerror(-r));
		goto out;
	}
	st->gpu_bytes = img->gpu_bytes;
	st->data_bytes = img->data_bytes;
	if (phos_fault("snapshot_kill"))
		raise(SIGKILL);
	/* The last point of no return: a cancel after the commit is the caller's to undo. */
	if (cancelled(s->sc->cancel_fd)) {
		r = phos_errf_rc(err, errlen, -ECANCELED, "cancelled while %s was being dumped", s->argv[0]);
		goto out;
	}
	phase_set(s->sc, "committing");
	r = phos_image_dir_commit(s->tmp, out_dir);
	if (r < 0)
		phos_errf(err, errlen, "committing %s: %s", out_dir, strerror(-r));
out:
	phos_image_free(img);
	return r;
}

int phos_snapshot_run(const struct phos_runtime_paths *paths, char *const argv[], const char *out_dir, int log_fd,
		      const struct phos_snapshot_ctl *sc, struct phos_snapshot_stats *ret_stats, char *err,
		      size_t errlen)
{
	unsigned timeout_ms = sc->timeout_ms ? sc->timeout_ms : 600000;
	struct snap_run s = { .paths = paths, .argv = argv, .sc = sc, .ch = { -1, -1 }, .ctl = { -1, -1 },
			      .in = { -1, -1 }, .out = { -1, -1 }, .errp = { -1, -1 }, .exe = -1, .fn = -1 };
	struct phos_snapshot_stats st = { 0 };
	double t0 = phos_now(), t;
	bool reached = false;   /* the function got to phos_fn_serve */
	int r;

	*err = '\0';
	phase_set(sc, "starting");
	r = snap_start(&s, out_dir, err, errlen);
	if (r == 0) {
		phase_set(sc, "init");
		r = snap_await(&s, log_fd, t0 + timeout_ms / 1000.0, timeout_ms, &st.gpu_dump_s, err, errlen);
	}
	if (r == 0) {
		reached = true;
		st.init_s = phos_now() - t0 - st.gpu_dump_s;
		phase_set(sc, "dumping");
		t = phos_now();
		r = snap_cpu(&s, err, errlen);
		st.cpu_dump_s = phos_now() - t;
	}
	if (r == 0) {
		t = phos_now();
		r = snap_commit(&s, out_dir, &st, err, errlen);
		st.commit_s = phos_now() - t;
		st.total_s = phos_now() - t0;
	}
	if (r == 0 && ret_stats)
		*ret_stats = st;
	/* past phos_fn_serve a failure is ours (or the disk's), whatever its errno */
	if (r < 0 && reached && r != -ENOSPC && r != -EDQUOT && r != -ENOMEM && r != -ECANCELED)
		r = -EIO;
	if (s.fn > 0) {
		kill(s.fn, SIGKILL);
		waitpid(s.fn, NULL, 0);
	}
	for (int i = 0; i < 2; i++) {
		int *fds[] = { &s.ch[i], &s.ctl[i], &s.in[i], &s.out[i], &s.errp[i] };

		for (unsigned k = 0; k < 5; k++)
			if (*fds[k] >= 0)
				close(*fds[k]);
	}
	/* The control socket is closed: the executor ends. */
	if (s.exe > 0)
		waitpid(s.exe, NULL, 0);
	if (r < 0 && s.tmp[0])
		phos_image_dir_abort(s.tmp);
	phos_env_free(s.env);
	return r;
}
