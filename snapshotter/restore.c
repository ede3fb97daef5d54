/* SPDX-License-Identifier: MIT */
/* Starting an instance from a snapshot (see snapshotter.h). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "control.h"
#include "criu.h"
#include "image.h"
#include "log.h"
#include "internal.h"

static const struct phos_image_fd *find_fd(const struct phos_image *img, int fd)
{
	for (uint32_t i = 0; i < img->nfds; i++)
		if (img->fds[i].fd == fd)
			return &img->fds[i];
	return NULL;
}

int restore_plan(const char *dir, const int stdio[3], struct phos_image **ret_img,
		 struct phos_criu_inherit inh[4], char *err, size_t errlen)
{
	struct phos_image *img;
	char line[1024];
	int r;

	r = phos_image_read(dir, &img, line, sizeof(line));
	if (r < 0) {
		phos_errf(err, errlen, "%s: %s", dir, line);
		return r;
	}
	/* before every CRIU restore (a parked process: once, when it is parked) */
	r = phos_image_cpu_verify(dir, img, line, sizeof(line));
	if (r < 0) {
		phos_errf(err, errlen, "%s: %s", dir, line);
		phos_image_free(img);
		return r;
	}
	for (int fd = 0; fd < 4; fd++) {
		const struct phos_image_fd *f = find_fd(img, fd);

		if (!f) {
			phos_errf(err, errlen, "%s: the manifest does not say how fd %d was opened", dir, fd);
			phos_image_free(img);
			return -EBADMSG;
		}
		inh[fd] = (struct phos_criu_inherit){ .fd = fd < 3 ? stdio[fd] : -1, .target = fd, .key = f->key };
	}
	*ret_img = img;
	return 0;
}

int restore_criu(const char *criu, const char *dir, const struct phos_image *img, struct phos_criu_inherit inh[4],
		 int channel, const struct phos_restore_bound *bound, pid_t *ret_fn, struct phos_restore_stats *st,
		 char *err, size_t errlen)
{
	char line[1024], cpu[4200];
	double t = phos_now();
	int r;

	/* The restored function waits in phos_channel_await until the executor's
	 * new channel arrives on its socket. */
	inh[3].fd = channel;
	snprintf(cpu, sizeof(cpu), "%s/%s", dir, img->criu_dir);
	/* A checkpoint's program goes on at once wherever it was, CPU code
	 * included: it waits stopped until its executor has adopted its channel. */
	r = phos_criu_restore(criu, cpu, inh, 4, img->checkpoint.present ? PHOS_CRIU_STOPPED : 0,
			      bound ? bound->deadline : 0, bound ? bound->cancel_fd : -1, ret_fn, line, sizeof(line));
	if (r < 0) {
		phos_errf(err, errlen, "CRIU could not restore %s: %s", dir, line);
		return r;
	}
	st->cpu_restore_s = phos_now() - t;
	return 0;
}

/* Waits for fd to turn readable within bound: 0, -ETIMEDOUT or -ECANCELED. */
static int bound_wait(int fd, const struct phos_restore_bound *bound)
{
	for (;;) {
		struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = bound->cancel_fd, .events = POLLIN } };
		double left = bound->deadline > 0 ? bound->deadline - phos_now() : -1;
		int r;

		if (bound->deadline > 0 && left <= 0)
			return -ETIMEDOUT;
		r = poll(p, 2, left < 0 ? -1 : (int)(left * 1e3) + 1);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r > 0 && p[1].revents)
			return -ECANCELED;
		if (r > 0 && p[0].revents)
			return 0;
	}
}

/* One control message within bound. */
static int ready_recv(int ctl, const struct phos_restore_bound *bound, struct phos_ctl_msg *m, char *why, size_t len)
{
	int r = bound ? bound_wait(ctl, bound) : 0;

	if (r == -ETIMEDOUT)
		phos_errf(why, len, "no answer by the restore's deadline");
	else if (r == -ECANCELED)
		phos_errf(why, len, "cancelled");
	return r < 0 ? r : phos_ctl_recv(ctl, -1, m, why, len);
}

int restore_ready(int ctl, bool hello, const struct phos_restore_bound *bound, struct phos_restore_stats *st,
		  struct restore_shared *shared, char *err, size_t errlen)
{
	struct phos_ctl_msg m;
	char why[512] = "";
	int r = ready_recv(ctl, bound, &m, why, sizeof(why));

	/* a fill's shared buffers, before its READY */
	while (r == 0 && m.type == PHOS_CTL_SHARED) {
		struct restore_shared_buf *b = NULL;

		if (shared && shared->n < RESTORE_SHARED_MAX &&
		    (b = realloc(shared->bufs, (shared->n + 1) * sizeof(*b)))) {
			shared->bufs = b;
			b[shared->n++] = (struct restore_shared_buf){ m.share.id, m.share.addr, m.share.size,
								      m.share.hash, m.fd };
			m.fd = -1;
		}
		phos_ctl_msg_exit(&m);
		r = ready_recv(ctl, bound, &m, why, sizeof(why));
	}

	if (r == 0 && hello) {
		if (m.type != PHOS_CTL_HELLO) {
			phos_errf(why, sizeof(why), "it said %s before hello", phos_ctl_type_name(m.type));
			r = -EPROTO;
		}
		phos_ctl_msg_exit(&m);
		if (r == 0)
			r = ready_recv(ctl, bound, &m, why, sizeof(why));
	}
	if (r == -ETIMEDOUT || r == -ECANCELED) {
		phos_errf(err, errlen, "the executor did not restore the device state in time: %s", why);
		return r;
	}
	if (r < 0) {
		if (r == -EPIPE)   /* it died: what it printed is in its log */
			phos_errf(err, errlen, "the executor failed");
		else
			phos_errf(err, errlen, "the executor failed: %s", why[0] ? why : strerror(-r));
		return -EIO;
	}
	if (m.type != PHOS_CTL_READY) {
		bool error = m.type == PHOS_CTL_ERROR;

		if (error)
			phos_errf(err, errlen, "%s", m.error.reason);
		else
			phos_errf(err, errlen, "the executor failed: it said %s", phos_ctl_type_name(m.type));
		/* a corrupt image is the caller's to tell apart (the executor says it in words) */
		r = error && strstr(m.error.reason, "checksum mismatch") ? -EBADMSG : -EIO;
		phos_ctl_msg_exit(&m);
		return r;
	}
	st->open_s = m.ready.open_s;
	st->load_s = m.ready.load_s;
	st->data_s = m.ready.data_s;
	st->on_demand = m.ready.on_demand;
	st->gpu_bytes = m.ready.data_bytes;
	return 0;
}

void restore_shared_clear(struct restore_shared *s)
{
	for (size_t i = 0; i < s->n; i++)
		close(s->bufs[i].fd);
	free(s->bufs);
	s->bufs = NULL;
	s->n = 0;
}

int restore_cpu(const char *criu, const char *dir, const struct phos_image *img, struct phos_criu_inherit inh[4],
		int channel, int ctl, bool hello, const struct phos_restore_bound *bound, pid_t *ret_fn,
		struct phos_restore_stats *st, struct restore_shared *shared, char *err, size_t errlen)
{
	pid_t fn;
	int r;

	r = restore_criu(criu, dir, img, inh, channel, bound, &fn, st, err, errlen);
	if (r < 0)
		return r;
	r = restore_ready(ctl, hello, bound, st, shared, err, errlen);
	if (r < 0) {
		kill(fn, SIGKILL);
		waitpid(fn, NULL, 0);
		return r;
	}
	*ret_fn = fn;
	return 0;
}

/* phos_park's bound: the caller's, and PHOS_PARK_BOUND_S plus a second per
 * PHOS_PARK_BOUND_MIB of the CPU image from now. */
static struct phos_restore_bound park_bound(const struct phos_image *img, const struct phos_restore_bound *bound)
{
	struct phos_restore_bound b = { .cancel_fd = bound ? bound->cancel_fd : -1 };
	uint64_t bytes = 0;

	for (uint32_t i = 0; i < img->ncpu_files; i++)
		bytes += img->cpu_files[i].size;
	b.deadline = phos_now() + PHOS_PARK_BOUND_S + (double)bytes / ((double)PHOS_PARK_BOUND_MIB * (1 << 20));
	if (bound && bound->deadline > 0 && bound->deadline < b.deadline)
		b.deadline = bound->deadline;
	return b;
}

int phos_park(const struct phos_runtime_paths *paths, const char *dir, int stdin_fd, int stdout_fd, int stderr_fd,
	      const struct phos_restore_bound *bound, struct phos_parked *ret, char *err, size_t errlen)
{
	struct phos_restore_bound pb;
	struct phos_restore_stats st = { 0 };
	struct phos_image *img = NULL;
	struct phos_criu_inherit inh[4];
	const int stdio[3] = { stdin_fd, stdout_fd, stderr_fd };
	int ch[2] = { -1, -1 }, r;

	memset(ret, 0, sizeof(*ret));
	ret->channel = -1;
	*err = '\0';
	r = restore_plan(dir, stdio, &img, inh, err, errlen);
	if (r < 0)
		return r;
	if (img->checkpoint.present) {
		phos_errf(err, errlen, "%s is a checkpoint of a running program, which cannot be parked", dir);
		phos_image_free(img);
		return -EINVAL;
	}
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ch) < 0) {
		r = -errno;
		phos_errf(err, errlen, "socketpair: %s", strerror(errno));
		goto out;
	}
	pb = park_bound(img, bound);
	r = restore_criu(paths->criu, dir, img, inh, ch[1], &pb, &ret->fn_pid, &st, err, errlen);
	if (r < 0)
		goto out;
	ret->channel = ch[0];
	ch[0] = -1;
	ret->criu_s = st.cpu_restore_s;
out:
	for (int i = 0; i < 2; i++)
		if (ch[i] >= 0)
			close(ch[i]);
	phos_image_free(img);
	return r;
}

void phos_parked_drop(struct phos_parked *p)
{
	if (p->fn_pid > 0) {
		kill(p->fn_pid, SIGKILL);
		while (waitpid(p->fn_pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	if (p->channel >= 0)
		close(p->channel);
	p->fn_pid = 0;
	p->channel = -1;
}

/*
 * A checkpoint of a running program (issue 11): the program resumes where it
 * was stopped, wherever that is, with the channel it had (channel.h,
 * "adopting"). So the CPU side comes first: CRIU restores the program,
 * stopped, with the fresh channel socket ch[1]; then the executor rebuilds
 * the device state and adopts the restored memfd (fd
 * img->checkpoint.channel_fd of the program) with ch[0], and takes the
 * records from where the old one stopped; then the program runs. Let go
 * earlier, a program stopped in CPU code (a serving loop waiting for its
 * next request) could end before the adoption.
 */
static int restore_checkpoint(const struct phos_runtime_paths *paths, const char *dir, const struct phos_image *img,
			      bool on_demand, struct phos_criu_inherit inh[4], int ch[2], int ctl[2],
			      const struct phos_restore_bound *bound, pid_t *ret_exe, pid_t *ret_fn,
			      struct phos_restore_stats *st, char *err, size_t errlen)
{
	char adopt[48];
	pid_t fn, exe;
	int r;

	r = restore_criu(paths->criu, dir, img, inh, ch[1], bound, &fn, st, err, errlen);
	if (r < 0)
		return r;
	close(ch[1]);
	ch[1] = -1;
	snprintf(adopt, sizeof(adopt), "%d:%d", (int)fn, img->checkpoint.channel_fd);
	r = phos_executor_spawn(paths, ch[0], ctl[1],
				(const char *const[]){ "--restore-from", dir, "--adopt-channel", adopt,
							on_demand ? "--on-demand" : NULL, NULL }, &exe);
	if (r < 0) {
		phos_errf(err, errlen, "cannot start the executor: %s", strerror(-r));
		goto err_fn;
	}
	close(ctl[1]);
	ctl[1] = -1;
	r = restore_ready(ctl[0], true, bound, st, NULL, err, errlen);
	if (r < 0) {
		kill(exe, r == -ETIMEDOUT || r == -ECANCELED ? SIGKILL : SIGTERM);
		waitpid(exe, NULL, 0);
		goto err_fn;
	}
	phos_criu_continue(fn);
	*ret_exe = exe;
	*ret_fn = fn;
	return 0;

err_fn:
	kill(fn, SIGKILL);
	waitpid(fn, NULL, 0);
	return r;
}

int phos_restore_start(const struct phos_runtime_paths *paths, const char *dir, int stdin_fd, int stdout_fd,
		       int stderr_fd, bool on_demand, const struct phos_restore_bound *bound,
		       struct phos_instance *ret_inst, struct phos_restore_stats *ret_stats, char *err, size_t errlen)
{
	struct phos_restore_stats st = { 0 };
	struct phos_image *img = NULL;
	struct phos_criu_inherit inh[4];
	const int stdio[3] = { stdin_fd, stdout_fd, stderr_fd };
	int ch[2] = { -1, -1 }, ctl[2] = { -1, -1 }, r;
	pid_t exe = -1, fn = -1;
	double t0 = phos_now();

	memset(ret_inst, 0, sizeof(*ret_inst));
	*err = '\0';
	r = restore_plan(dir, stdio, &img, inh, err, errlen);
	if (r < 0)
		return r;
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ch) < 0 ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) < 0) {
		r = -errno;
		phos_errf(err, errlen, "socketpair: %s", strerror(errno));
		goto out;
	}
	if (img->checkpoint.present) {
		r = restore_checkpoint(paths, dir, img, on_demand, inh, ch, ctl, bound, &exe, &fn, &st, err, errlen);
		if (r < 0)
			goto out;
		goto started;
	}
	r = phos_executor_spawn(paths, ch[0], ctl[1],
				(const char *const[]){ "--restore-from", dir, on_demand ? "--on-demand" : NULL, NULL }, &exe);
	if (r < 0) {
		phos_errf(err, errlen, "cannot start the executor: %s", strerror(-r));
		goto out;
	}
	close(ctl[1]);
	ctl[1] = -1;
	/* CRIU restores the CPU side while the executor loads the GPU side. */
	r = restore_cpu(paths->criu, dir, img, inh, ch[1], ctl[0], true, bound, &fn, &st, NULL, err, errlen);
	if (r < 0)
		goto out;
started:
	st.gpu_restore_s = st.ready_s = phos_now() - t0;
	ret_inst->fn_pid = fn;
	ret_inst->executor_pid = exe;
	ret_inst->control_fd = ctl[0];
	ctl[0] = -1;
	exe = -1;
	if (ret_stats)
		*ret_stats = st;
	r = 0;
out:
	for (int i = 0; i < 2; i++) {
		if (ch[i] >= 0)
			close(ch[i]);
		if (ctl[i] >= 0)
			close(ctl[i]);
	}
	if (exe > 0) {
		kill(exe, r == -ETIMEDOUT || r == -ECANCELED ? SIGKILL : SIGTERM);   /* it may not answer */
		waitpid(exe, NULL, 0);
	}
	phos_image_free(img);
	return r;
}

/* Asks the executor a question (ASK_*) and receives its answer, which must be
 * of type answer, into *ret (the caller calls phos_ctl_msg_exit). Returns 0,
 * -ENOTCONN without a control socket, -EPIPE, -ETIMEDOUT after 5 s, or
 * -EPROTO for a malformed or unexpected answer. */
static int control_ask(struct phos_instance *inst, enum phos_ctl_type ask, enum phos_ctl_type answer,
		       struct phos_ctl_msg *ret)
{
	char err[256];
	int r;

	if (inst->control_fd < 0)
		return -ENOTCONN;
	r = phos_ctl_send(inst->control_fd, &(struct phos_ctl_msg){ .type = ask, .fd = -1 });
	if (r < 0)
		return -EPIPE;
	r = phos_ctl_recv(inst->control_fd, 5000, ret, err, sizeof(err));
	if (r == -EPROTONOSUPPORT)
		r = -EPROTO;
	if (r == 0 && ret->type != answer) {
		phos_ctl_msg_exit(ret);
		r = -EPROTO;
	}
	return r;
}

/* A question whose answer is a list of buffer ids (TOUCHED, COPIED): up to
 * max of them into ret_ids. */
static int ask_ids(struct phos_instance *inst, enum phos_ctl_type ask, enum phos_ctl_type answer, uint64_t *ret_ids,
		   size_t max, size_t *ret_n)
{
	struct phos_ctl_msg m;
	int r = control_ask(inst, ask, answer, &m);

	*ret_n = 0;
	if (r < 0)
		return r;
	*ret_n = m.touched.n < max ? m.touched.n : max;
	memcpy(ret_ids, m.touched.ids, *ret_n * sizeof(*ret_ids));
	phos_ctl_msg_exit(&m);
	return 0;
}

int phos_instance_touched(struct phos_instance *inst, uint64_t *ret_ids, size_t max, size_t *ret_n)
{
	return ask_ids(inst, PHOS_CTL_ASK_TOUCHED, PHOS_CTL_TOUCHED, ret_ids, max, ret_n);
}

int phos_instance_copied(struct phos_instance *inst, uint64_t *ret_ids, size_t max, size_t *ret_n)
{
	return ask_ids(inst, PHOS_CTL_ASK_COPIED, PHOS_CTL_COPIED, ret_ids, max, ret_n);
}

int phos_instance_fallbacks(struct phos_instance *inst, struct phos_spec_fallbacks *ret)
{
	struct phos_ctl_msg m;
	int r = control_ask(inst, PHOS_CTL_ASK_FALLBACKS, PHOS_CTL_FALLBACKS, &m);

	if (r < 0)
		return r;
	*ret = (struct phos_spec_fallbacks){ .opaque = m.fallbacks.opaque, .overflow = m.fallbacks.overflow,
					     .validate_miss = m.fallbacks.validate_miss,
					     .restoring = m.fallbacks.restoring,
					     .shared_bytes = m.fallbacks.shared_bytes,
					     .cow_bytes = m.fallbacks.cow_bytes };
	phos_ctl_msg_exit(&m);
	return 0;
}

int phos_instance_failed(const struct phos_instance *inst, unsigned wait_ms, char *why, size_t len)
{
	struct pollfd p = { .fd = inst->control_fd, .events = POLLIN };
	struct phos_ctl_msg m;
	char err[256];
	int failed;

	if (inst->control_fd < 0 || !len)
		return 0;
	if (wait_ms && poll(&p, 1, (int)wait_ms) <= 0)
		return 0;
	/* After READY the executor says nothing unasked but ERROR just before
	 * it exits, so a peek at the front is enough (and leaves it there for
	 * the pool, which skips it on the way to IDLE). */
	if (phos_ctl_peek(inst->control_fd, &m, err, sizeof(err)) < 0)
		return 0;
	failed = m.type == PHOS_CTL_ERROR;
	if (failed)
		snprintf(why, len, "%s", m.error.reason);
	phos_ctl_msg_exit(&m);
	return failed;
}

static int exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

int phos_instance_wait(struct phos_instance *inst)
{
	int status = 0, code;

	while (waitpid(inst->fn_pid, &status, 0) < 0 && errno == EINTR)
		;
	code = exit_code(status);
	if (inst->pool) {
		/* The executor saw the function go, scrubs itself and says IDLE. */
		inst->give_back(inst);
		inst->pool = NULL;
		return code;
	}
	if (inst->control_fd >= 0)
		close(inst->control_fd);
	inst->control_fd = -1;
	while (waitpid(inst->executor_pid, &status, 0) < 0 && errno == EINTR)
		;
	inst->executor_status = status;
	return code;
}
