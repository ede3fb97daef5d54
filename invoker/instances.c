/* SPDX-License-Identifier: MIT */
/*
 * Restored instances of a function, and scheduling calls onto them (the
 * picture is in invoker.h). An instance serves one call at a time; it is
 * restored stop-the-world, each on a warm executor of the pool when one is
 * free (phos_restore_pooled), else on an executor of its own (phos_restore_start).
 *
 * Liveness: an instance holds pidfds of its function and its executor. A call
 * polls the executor's beside the function's pipes, so an executor that dies
 * mid-call fails that call at once (502) instead of leaving a function whose
 * every CUDA call fails; the reaper drops idle instances and parked processes
 * that died; a call never takes a dead instance, and one that failed before
 * any byte reached the function is tried once more on a fresh instance.
 * Dropping an instance reaps both processes and gives the executor slot back
 * to the pool, which replaces a dead executor.
 *
 * The forwarding guard: every instance runs with the guard's audit module,
 * which refuses a real CUDA library loaded through the loader; what the loader
 * does not see (a driver mapped by hand, an open /dev/nvidia*) the reaper
 * looks for every INV_GUARD_SCAN_MS in /proc of each running function and its
 * descendants (runtime/guard/guard.h), as `phos-fn run` does, and kills the
 * instance that did it: it never runs natively under phos-fn's name.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/pidfd.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "guard.h"
#include "image.h"
#include "invoker.h"
#include "log.h"

void inv_result_error(struct inv_result *res, int http, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	json_t *j;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (strchr(msg, '/')) {
		phos_warn("call answered %d: %s", http, msg);   /* the full message, for the operator */
		inv_redact_paths(msg);
	}
	j = json_pack("{s:s}", "error", msg);
	free(res->body);
	res->body = json_dumps(j, JSON_COMPACT);
	res->len = res->body ? strlen(res->body) : 0;
	json_decref(j);
	res->http = http;
	snprintf(res->content_type, sizeof(res->content_type), "application/json");
}

/* ---- stderr ring ---- */

static void *log_thread(void *arg)
{
	struct inv_instance *in = arg;
	char buf[4096];
	ssize_t n;

	while ((n = read(in->err_fd, buf, sizeof(buf))) != 0) {
		if (n < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		pthread_mutex_lock(&in->log_lock);
		for (ssize_t i = 0; i < n; i++) {
			in->ring[(in->ring_head + in->ring_len) % INV_LOG_RING] = buf[i];
			if (in->ring_len < INV_LOG_RING)
				in->ring_len++;
			else
				in->ring_head = (in->ring_head + 1) % INV_LOG_RING;
		}
		pthread_mutex_unlock(&in->log_lock);
	}
	return NULL;
}

/* ---- liveness ---- */

/* True once pid (a child of ours, or pidfd's process) has exited; never reaps it. */
static bool proc_dead(int pidfd, pid_t pid)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };
	siginfo_t si = { 0 };

	if (pidfd >= 0)
		return poll(&p, 1, 0) > 0;
	if (pid <= 0)
		return false;
	return waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid;
}

/* True when the main thread of the process whose /proc/PID/task/PID/stat is
 * open at statfd has exited (a zombie) while its other threads may still be
 * on their way out: its pidfd turns readable only after them. A pread of the
 * open file costs about 5 us (an open+read+close of it 14 us). */
static bool proc_exiting(int statfd)
{
	char buf[512], *paren;
	ssize_t n;

	if (statfd < 0)
		return false;
	n = pread(statfd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return n < 0 && errno == ESRCH;
	buf[n] = '\0';
	paren = strrchr(buf, ')');
	return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X' || paren[2] == 'x');
}

/* True when the function or its executor of in has exited, or its executor is
 * exiting (a call would reach a function whose device is gone). */
static bool instance_dead(const struct inv_instance *in)
{
	/* on every warm call, under the function's lock: one poll for both pidfds */
	if (in->exe_pidfd >= 0 && in->fn_pidfd >= 0) {
		struct pollfd p[2] = { { .fd = in->exe_pidfd, .events = POLLIN }, { .fd = in->fn_pidfd, .events = POLLIN } };

		if (poll(p, 2, 0) > 0)
			return true;
	} else if (proc_dead(in->exe_pidfd, in->proc.executor_pid) || proc_dead(in->fn_pidfd, in->proc.fn_pid)) {
		return true;
	}
	return proc_exiting(in->exe_statfd);
}

static void instance_free(struct inv_instance *in)
{
	if (!in)
		return;
	if (in->fn_pidfd >= 0)
		close(in->fn_pidfd);
	if (in->exe_pidfd >= 0)
		close(in->exe_pidfd);
	if (in->exe_statfd >= 0)
		close(in->exe_statfd);
	if (in->in_fd >= 0)
		close(in->in_fd);
	if (in->out_fd >= 0)
		close(in->out_fd);
	if (in->log_started)
		pthread_join(in->log_thread, NULL);
	if (in->err_fd >= 0)
		close(in->err_fd);
	if (in->ckpt_evfd >= 0)
		close(in->ckpt_evfd);
	if (in->ckpt_dir) {
		phos_image_dir_remove(in->ckpt_dir);
		free(in->ckpt_dir);
	}
	pthread_mutex_destroy(&in->log_lock);
	pthread_mutex_destroy(&in->ctl_lock);
	free(in->mig_dir);
	free(in->ring);
	free(in);
}

/* The last text of in's ring (at most `tail` lines), malloc'ed; log_lock held. */
static char *ring_tail(struct inv_instance *in, unsigned tail)
{
	size_t start = in->ring_len, lines = 0;
	char *text;

	/* back from the end over `tail` newlines (a trailing one does not count) */
	while (start > 0) {
		char c = in->ring[(in->ring_head + start - 1) % INV_LOG_RING];

		if (c == '\n' && start != in->ring_len && ++lines >= tail)
			break;
		start--;
	}
	text = malloc(in->ring_len - start + 1);
	if (text) {
		for (size_t i = start; i < in->ring_len; i++)
			text[i - start] = in->ring[(in->ring_head + i) % INV_LOG_RING];
		text[in->ring_len - start] = '\0';
	}
	return text;
}

/* Waits until no other thread uses in's processes (inv_instance_borrow). */
static void instance_unborrowed(struct inv_function *f, struct inv_instance *in)
{
	pthread_mutex_lock(&f->lock);
	while (in->borrowed)
		pthread_cond_wait(&f->cond, &f->lock);
	pthread_mutex_unlock(&f->lock);
}

/* Kills (or asks to exit, closing its stdin) and reaps the instance, which is
 * out of f's list already; its log is kept as f's last exited one. No lock
 * held. Returns the function's exit status. */
static int instance_stop(struct inv_function *f, struct inv_instance *in, bool kill_it)
{
	int code;
	char *log;

	if (inv_instance_hooks.stopping)
		inv_instance_hooks.stopping(f, in);
	if (kill_it && in->proc.fn_pid > 0)
		kill(in->proc.fn_pid, SIGKILL);
	if (in->in_fd >= 0) {
		close(in->in_fd);
		in->in_fd = -1;
	}
	/* (no processes: a resume that failed after the old ones were reaped) */
	instance_unborrowed(f, in);   /* a move's checkpoint ends on its death first */
	code = in->proc.fn_pid > 0 ? phos_instance_wait(&in->proc) : 128 + SIGKILL;
	if (in->log_started) {
		pthread_join(in->log_thread, NULL);
		in->log_started = false;
	}
	log = ring_tail(in, UINT32_MAX);
	pthread_mutex_lock(&f->lock);
	free(f->last_log);
	f->last_log = log;
	f->last_id = in->id;
	f->last_exit = code;
	pthread_mutex_unlock(&f->lock);
	instance_free(in);
	return code;
}

/* A function process's stdin, stdout and stderr pipes: 0 or -errno. */
static int stdio_pipes(int pin[2], int pout[2], int perr[2])
{
	return pipe2(pin, O_CLOEXEC) < 0 || pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0 ? -errno : 0;
}

/* Closes what is left of them (-1: taken over or never made). */
static void stdio_pipes_close(int pin[2], int pout[2], int perr[2])
{
	for (int i = 0; i < 2; i++) {
		if (pin[i] >= 0)
			close(pin[i]);
		if (pout[i] >= 0)
			close(pout[i]);
		if (perr[i] >= 0)
			close(perr[i]);
	}
}

/* ---- standby: a parked process per function ---- */

static bool standby_wanted(const struct inv_function *f)
{
	/* parked processes take the default pool's executors, which own one GPU */
	return inv_cfg.standby && inv_cfg.pool && f->ready && !f->removed && !inv_draining &&
	       !strcmp(f->device, inv_cfg.device) && f->gpus <= 1;
}

static void standby_clear(struct inv_standby *sb)
{
	phos_parked_drop(&sb->parked);
	for (int *fd = &sb->in_fd; fd <= &sb->err_fd; fd++) {
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
	}
	sb->valid = false;
}

/* Takes f's standby out (invalid one when there is none for its snapshot). */
static struct inv_standby standby_take(struct inv_function *f)
{
	struct inv_standby sb = { .parked = { .channel = -1 }, .in_fd = -1, .out_fd = -1, .err_fd = -1 };

	pthread_mutex_lock(&f->lock);
	if (f->standby.valid) {
		sb = f->standby;
		f->standby.valid = false;
		if (sb.generation != f->generation || proc_dead(-1, sb.parked.fn_pid)) {
			pthread_mutex_unlock(&f->lock);
			if (sb.generation == f->generation)
				phos_warn("%s: standby process %d died; restoring without it", f->name,
					  (int)sb.parked.fn_pid);
			standby_clear(&sb);   /* reaps it */
			return sb;
		}
	}
	pthread_mutex_unlock(&f->lock);
	return sb;
}

/* Keeps one parked process of f's current snapshot (the reaper calls it). */
static void standby_upkeep(struct inv_function *f)
{
	int pin[2] = { -1, -1 }, pout[2] = { -1, -1 }, perr[2] = { -1, -1 };
	struct inv_standby sb = { .parked = { .channel = -1 }, .in_fd = -1, .out_fd = -1, .err_fd = -1 };
	struct phos_runtime_paths p = inv_cfg.paths;
	char err[1024];
	unsigned gen;
	bool need;
	int r;

	pthread_mutex_lock(&f->lock);
	if (f->standby.valid && (f->standby.generation != f->generation || !standby_wanted(f) ||
				 proc_dead(-1, f->standby.parked.fn_pid))) {
		sb = f->standby;
		f->standby.valid = false;
	}
	need = !f->standby.valid && standby_wanted(f) && phos_now() >= f->standby_retry;
	gen = f->generation;
	pthread_mutex_unlock(&f->lock);
	if (sb.valid)
		standby_clear(&sb);
	if (!need)
		return;
	if ((r = stdio_pipes(pin, pout, perr)) < 0) {
		snprintf(err, sizeof(err), "pipe: %s", strerror(-r));
	} else {
		p.device = f->device;
		pthread_rwlock_rdlock(&f->snap_lock);
		r = phos_park(&p, f->snapshot_dir, pin[0], pout[1], perr[1],
			      &(struct phos_restore_bound){ .cancel_fd = inv_drain_abort_fd }, &sb.parked, err, sizeof(err));
		pthread_rwlock_unlock(&f->snap_lock);
	}
	if (pin[0] >= 0)
		close(pin[0]);
	if (pout[1] >= 0)
		close(pout[1]);
	if (perr[1] >= 0)
		close(perr[1]);
	sb.in_fd = pin[1];
	sb.out_fd = pout[0];
	sb.err_fd = perr[0];
	if (r < 0) {
		phos_warn("%s: no standby process (retrying in 5 s): %s", f->name, err);
		standby_clear(&sb);
		pthread_mutex_lock(&f->lock);
		f->standby_retry = phos_now() + 5;
		pthread_mutex_unlock(&f->lock);
		return;
	}
	sb.generation = gen;
	sb.valid = true;
	pthread_mutex_lock(&f->lock);
	if (gen == f->generation && !f->standby.valid && standby_wanted(f)) {
		f->standby = sb;
		sb.valid = false;
	}
	pthread_mutex_unlock(&f->lock);
	if (sb.valid)
		standby_clear(&sb);
	else
		phos_debug("%s: standby process %d parked (CRIU %.1f ms)", f->name, (int)f->standby.parked.fn_pid,
			   f->standby.parked.criu_s * 1e3);
}

/* Takes over our ends of in's new process's stdio pipes, watches it and its
 * executor, and starts reading its stderr. */
static void instance_attach(struct inv_instance *in, int in_fd, int out_fd, int err_fd)
{
	char path[64];

	in->in_fd = in_fd;
	in->out_fd = out_fd;
	in->err_fd = err_fd;
	/* Both are our children (the invoker is their subreaper): not reaped
	 * before instance_stop, so the pids cannot be reused under the pidfds. */
	in->fn_pidfd = pidfd_open(in->proc.fn_pid, 0);
	in->exe_pidfd = pidfd_open(in->proc.executor_pid, 0);
	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)in->proc.executor_pid, (int)in->proc.executor_pid);
	in->exe_statfd = open(path, O_RDONLY | O_CLOEXEC);
	fcntl(in->in_fd, F_SETFL, O_NONBLOCK);
	fcntl(in->out_fd, F_SETFL, O_NONBLOCK);
	in->log_started = pthread_create(&in->log_thread, NULL, log_thread, in) == 0;
}

/* Restores in (no processes: new, or its old ones reaped) from dir through
 * phos_restore (snapshotter.h: a parked process, the executor prep holds,
 * a pooled one, one of its own; sb and prep may be NULL), with fresh stdio
 * pipes or the parked process's own, and watches it (instance_attach).
 * 0, *where and *st, or -errno with err (in has no processes then). */
static int instance_restore(struct inv_function *f, struct inv_instance *in, const char *dir, bool on_demand,
			    const struct phos_restore_bound *bound, struct inv_standby *sb, struct inv_prepared *prep,
			    enum phos_restore_where *where, struct phos_restore_stats *st, char *err, size_t errlen)
{
	int pin[2] = { -1, -1 }, pout[2] = { -1, -1 }, perr[2] = { -1, -1 };
	struct phos_runtime_paths p = inv_cfg.paths;
	char gpu_list[64];
	int r;

	if ((r = stdio_pipes(pin, pout, perr)) < 0) {
		phos_errf(err, errlen, "pipe: %s", strerror(-r));
		goto out;
	}
	p.device = f->device;
	p.gpus = inv_gpu_list(f, gpu_list, sizeof(gpu_list));
	if (strcmp(p.device, "sim"))
		p.sim_twins = NULL;
	/* (on or off each time: a deploy over the name may have changed it) */
	if (inv_pool_for(f) && !strcmp(dir, f->snapshot_dir) && phos_pool_share(inv_pool_for(f), dir, f->share) < 0)
		phos_warn("%s: more snapshots shared than the pool keeps; this one is not", f->name);
	r = phos_restore(&(struct phos_restore_req){
				 .dir = dir, .on_demand = on_demand, .bound = *bound,
				 .stdin_fd = pin[0], .stdout_fd = pout[1], .stderr_fd = perr[1],
				 /* parked processes are the default pool's: one GPU */
				 .parked = sb && sb->valid ? &sb->parked : NULL,
				 .prepared_pool = prep ? prep->pool : NULL, .prepared_slot = prep ? &prep->slot : NULL,
				 .pool = inv_pool_for(f), .paths = &p },
			 where, &in->proc, st, err, errlen);
	if (prep)
		prep->used = r == 0 && *where == PHOS_ON_PREPARED;
	if (r < 0) {
		in->proc = (struct phos_instance){ .control_fd = -1 };   /* nothing to stop */
		goto out;
	}
	/* The fill of a shared snapshot is done: the pool's executors let its
	 * gpu.data go (inv_hot_update's hot_pick leaves it out from now on). */
	if (f->share && f->hot && inv_pool_for(f) && phos_pool_shared_bytes(inv_pool_for(f), f->snapshot_dir) > 0)
		inv_hot_update();
	if (*where == PHOS_ON_PARKED) {   /* its stdio is the parked process's */
		instance_attach(in, sb->in_fd, sb->out_fd, sb->err_fd);
		sb->in_fd = sb->out_fd = sb->err_fd = -1;
	} else {
		instance_attach(in, pin[1], pout[0], perr[0]);
		pin[1] = pout[0] = perr[0] = -1;
	}
out:
	/* ours are set to -1 once taken over; theirs (0 of pin, 1 of pout, perr) always go */
	stdio_pipes_close(pin, pout, perr);
	return r;
}

/* Restores a new instance of f from its snapshot (no lock held), within the
 * call's deadline: -ETIMEDOUT when that is not done by then, -ECANCELED when
 * a drain ran out first. */
static int instance_start(struct inv_function *f, struct inv_instance *in, double deadline, double *ret_s,
			  char *err, size_t errlen)
{
	const struct phos_restore_bound bound = { .deadline = deadline, .cancel_fd = inv_drain_abort_fd };
	struct phos_restore_stats st;
	struct inv_standby sb = standby_take(f);
	enum phos_restore_where where = PHOS_ON_OWN;
	double t0 = phos_now();
	int r;

	pthread_rwlock_rdlock(&f->snap_lock);
	r = instance_restore(f, in, f->snapshot_dir, !inv_cfg.stop_the_world, &bound, &sb, NULL, &where, &st, err,
			     errlen);
	pthread_rwlock_unlock(&f->snap_lock);
	if (r < 0 || where != PHOS_ON_PARKED)
		standby_clear(&sb);   /* (a parked process not taken over is of no more use) */
	if (r < 0)
		return r;
	*ret_s = phos_now() - t0;
	inv_metrics_restore(st.gpu_bytes, *ret_s, where == PHOS_ON_PARKED);
	phos_info("%s: instance %u restored in %.1f ms (%s; CRIU %.1f ms%s, executor %.1f ms of which GPU data "
		  "%.1f ms; %.1f MiB)", f->name, in->id, *ret_s * 1e3,
		  st.on_demand ? "on demand" : "stop-the-world", st.cpu_restore_s * 1e3,
		  where == PHOS_ON_PARKED ? " ahead (standby)" : " in parallel", (st.open_s + st.load_s) * 1e3,
		  st.data_s * 1e3, (double)st.gpu_bytes / (1 << 20));
	return 0;
}

/* Restores in from the checkpoint at dir (on_demand: its buffers stream in
 * while it runs, from dir, which must stay; else stop-the-world), on the
 * executor prep holds for it (a move's target) when there is one. */
static int instance_from_checkpoint(struct inv_function *f, struct inv_instance *in, const char *dir,
				    bool on_demand, struct inv_prepared *prep, struct phos_restore_stats *st, char *err,
				    size_t errlen)
{
	const struct phos_restore_bound bound = { .cancel_fd = inv_drain_abort_fd };
	enum phos_restore_where where;

	return instance_restore(f, in, dir, on_demand, &bound, NULL, prep, &where, st, err, errlen);
}

/* The call running on in lost its instance after a checkpoint taken during
 * it: the old processes are reaped (its executor slot goes back to the pool)
 * and in goes on as a copy restored from that checkpoint, on an executor of
 * its own, in the middle of the call. 0, or -errno with err. */
static int instance_resume(struct inv_function *f, struct inv_instance *in, char *err, size_t errlen)
{
	int *const old[] = { &in->in_fd, &in->out_fd, &in->err_fd, &in->fn_pidfd, &in->exe_pidfd, &in->exe_statfd };
	struct phos_restore_stats st;
	double t0 = phos_now();
	int r;

	kill(in->proc.fn_pid, SIGKILL);
	instance_unborrowed(f, in);
	phos_instance_wait(&in->proc);
	if (in->log_started) {
		pthread_join(in->log_thread, NULL);   /* the old stderr pipe is at its end */
		in->log_started = false;
	}
	for (unsigned i = 0; i < sizeof(old) / sizeof(old[0]); i++) {
		if (*old[i] >= 0)
			close(*old[i]);
		*old[i] = -1;
	}
	r = instance_from_checkpoint(f, in, in->ckpt_dir, false, NULL, &st, err, errlen);
	if (r < 0)
		return r;
	in->resumes++;
	phos_warn("%s: instance %u resumed its call from its checkpoint of %s mode in %.1f ms on %s (%.1f MiB)",
		  f->name, in->id, in->ckpt_mode, (phos_now() - t0) * 1e3,
		  in->proc.pool ? "a pooled executor" : "an executor of its own", (double)st.gpu_bytes / (1 << 20));
	return 0;
}

/* ---- talking to an instance ---- */

__thread struct inv_async_ctx inv_async_ctx;
struct inv_instance_hooks inv_instance_hooks;

/* Waits for ev on fd (a pipe of in's function) until deadline: 0, -ETIMEDOUT,
 * -ECONNRESET when in's executor died (the function cannot answer rightly any
 * more), -ECANCELED when the drain limit ran out. */
static int wait_fd(const struct inv_instance *in, int fd, short ev, double deadline)
{
	for (;;) {
		double left = deadline - phos_now();
		struct pollfd p[3] = { { .fd = fd, .events = ev }, { .fd = in->exe_pidfd, .events = POLLIN },
				       { .fd = inv_drain_abort_fd, .events = POLLIN } };
		int r;

		if (left <= 0)
			return -ETIMEDOUT;
		r = poll(p, 3, (int)(left * 1000) + 1);
		if (r > 0 && p[1].revents)
			return -ECONNRESET;
		if (r > 0 && p[2].revents)
			return -ECANCELED;
		if (r > 0)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

/* Writes the frame line and the body to in's stdin with as few writev calls
 * as the pipe allows (one for a small request: the function wakes once, not
 * once for the line and again for the body); *sent counts the bytes that
 * went. */
static int write_frame(const struct inv_instance *in, const char *head, size_t hl, const char *body, size_t len,
		       double deadline, size_t *sent)
{
	struct iovec v[2] = { { (void *)head, hl }, { (void *)body, len } };
	unsigned i = 0;

	while (i < 2) {
		ssize_t w;

		if (v[i].iov_len == 0) {
			i++;
			continue;
		}
		w = writev(in->in_fd, v + i, (int)(2 - i));
		if (w > 0) {
			*sent += (size_t)w;
			while (w > 0 && i < 2) {
				size_t k = (size_t)w < v[i].iov_len ? (size_t)w : v[i].iov_len;

				v[i].iov_base = (char *)v[i].iov_base + k;
				v[i].iov_len -= k;
				w -= (ssize_t)k;
				if (v[i].iov_len == 0)
					i++;
			}
			continue;
		}
		if (w < 0 && errno != EAGAIN && errno != EINTR)
			return -EPIPE;
		PHOS_CHECK(wait_fd(in, in->in_fd, POLLOUT, deadline));
	}
	return 0;
}

/* Reads from in's stdout: exactly len bytes, or (line) until buf holds a
 * newline, in as few reads as the pipe allows; *ret_n is what buf holds. A
 * line read may take bytes past the newline (the start of the body): the
 * caller moves them on. */
static int read_some(const struct inv_instance *in, char *buf, size_t len, bool line, size_t *ret_n,
		     double deadline)
{
	int fd = in->out_fd;

	size_t n = 0;

	while (n < len) {
		ssize_t r = read(fd, buf + n, len - n);

		if (r > 0) {
			n += (size_t)r;
			if (line && memchr(buf + n - (size_t)r, '\n', (size_t)r))
				break;
			continue;
		}
		if (r == 0)
			return -EPIPE;
		if (errno != EAGAIN && errno != EINTR)
			return -EPIPE;
		PHOS_CHECK(wait_fd(in, fd, POLLIN, deadline));
	}
	*ret_n = n;
	return 0;
}

/* Waits for the start of in's answer to the call of f running on it, as
 * wait_fd does, and meanwhile takes its checkpoints: one asked through the
 * endpoint, and every limits.checkpoint_ms (cow). */
static int wait_answer(struct inv_function *f, struct inv_instance *in, double deadline)
{
	unsigned every = f->limits.checkpoint_ms;

	for (;;) {
		double now = phos_now(), until = every && in->ckpt_next < deadline ? in->ckpt_next : deadline;
		struct pollfd p[4] = { { .fd = in->out_fd, .events = POLLIN }, { .fd = in->exe_pidfd, .events = POLLIN },
				       { .fd = inv_drain_abort_fd, .events = POLLIN },
				       { .fd = in->ckpt_evfd, .events = POLLIN } };
		int r = poll(p, 4, until > now ? (int)((until - now) * 1000) + 1 : 0);

		if (r < 0 && errno != EINTR)
			return -errno;
		if (r > 0 && p[0].revents)
			return 0;
		if (r > 0 && p[1].revents)
			return -ECONNRESET;
		if (r > 0 && p[2].revents)
			return -ECANCELED;
		if (r > 0 && p[3].revents) {
			if (inv_instance_hooks.idle)
				inv_instance_hooks.idle(f, in);
			continue;
		}
		now = phos_now();
		if (now >= deadline)
			return -ETIMEDOUT;
		if (every && now >= in->ckpt_next) {
			if (inv_instance_hooks.periodic)
				inv_instance_hooks.periodic(f, in);
			else
				in->ckpt_next = deadline;   /* (nobody takes checkpoints) */
		}
	}
}

/* Reads the answer to the call running on in (see exchange). */
static int receive(struct inv_function *f, struct inv_instance *in, double deadline, struct inv_result *res)
{
	char head[256], rtype[128] = "", *nl;
	unsigned long long rlen;
	int status;
	size_t n, extra;

	/* the answer cannot be there yet: wait before reading (a read first
	 * would almost always say EAGAIN, one syscall per call for nothing) */
	PHOS_CHECK(wait_answer(f, in, deadline));
	PHOS_CHECK(read_some(in, head, sizeof(head) - 1, true, &n, deadline));
	head[n] = '\0';
	nl = memchr(head, '\n', n);
	if (!nl)
		return -EPROTO;
	*nl = '\0';
	extra = n - (size_t)(nl + 1 - head);     /* body bytes read with the line */
	if (strncmp(head, "PHOS-FRAME ", 11) || sscanf(head + 11, "%llu %d %127s", &rlen, &status, rtype) < 2)
		return -EPROTO;
	if (rlen > INV_MAX_RESPONSE) {
		res->len = rlen;
		return -EFBIG;
	}
	if (extra > rlen)
		return -EPROTO;         /* more than one answer: out of step */
	res->body = malloc(rlen + 1);
	if (!res->body)
		return -ENOMEM;
	memcpy(res->body, nl + 1, extra);
	PHOS_CHECK(read_some(in, res->body + extra, rlen - extra, false, &n, deadline));
	res->body[rlen] = '\0';
	res->len = rlen;
	res->http = status == 0 ? 200 : (status >= 400 && status <= 599 ? status : 500);
	/* the preload sends only a plain token; anything else is not trusted into a header */
	snprintf(res->content_type, sizeof(res->content_type), "%s",
		 rtype[0] && strspn(rtype, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
				    "!#$%&'*+-.^_`|~/;=\"") == strlen(rtype) ? rtype : "application/json");
	/* An answer written after the executor went is the function's view of a
	 * lost device (cudaErrorDevicesUnavailable), not a result. The function
	 * may see its channel close a moment before the executor's pidfd turns
	 * readable (its other threads still exiting), so a 5xx answer, what such
	 * a function gives, waits a few ms for that; others only look. */
	if (in->exe_pidfd >= 0 && res->http >= 500) {
		struct pollfd p = { .fd = in->exe_pidfd, .events = POLLIN };

		if (poll(&p, 1, 5) > 0)
			return -ECONNRESET;
	}
	if (proc_dead(in->exe_pidfd, in->proc.executor_pid))
		return -ECONNRESET;
	return 0;
}

/* One request/response of f on in: 0, or -ETIMEDOUT, -EPIPE (crashed),
 * -EPROTO (not a frame: out of step), -EFBIG (an answer over
 * INV_MAX_RESPONSE, its size in res->len), -ECONNRESET (its executor died),
 * -ECANCELED (drain limit); *ret_sent: the bytes of the request that reached
 * the function's stdin. The answer's frame line is
 * "PHOS-FRAME <len> <status> [<type>]". */
static int exchange(struct inv_function *f, struct inv_instance *in, const char *body, size_t len,
		    const char *ctype, double deadline, struct inv_result *res, size_t *ret_sent)
{
	char head[256];
	int k;

	*ret_sent = 0;
	k = snprintf(head, sizeof(head), "PHOS-FRAME %zu %s\n", len, ctype);
	PHOS_CHECK(write_frame(in, head, (size_t)k, body, len, deadline, ret_sent));
	return receive(f, in, deadline, res);
}

/* "exited with status N" or "was killed by SIGNAME" for a code of phos_instance_wait
 * (128 + N for signal N, the shell's convention). */
static void exit_describe(int code, char *buf, size_t len)
{
	const char *sig = code > 128 && code < 128 + NSIG ? sigabbrev_np(code - 128) : NULL;

	if (sig)
		snprintf(buf, len, "was killed by SIG%s (exit status %d)", sig, code);
	else
		snprintf(buf, len, "exited with status %d", code);
}

/* ---- scheduling ---- */

/* Instances of all functions together, against --max-instances: each holds an
 * executor (a GPU context and its memory) and a process. */
static atomic_uint live_instances;

static bool live_take(void)
{
	unsigned n = atomic_load(&live_instances);

	while (n < inv_cfg.max_instances)
		if (atomic_compare_exchange_weak(&live_instances, &n, n + 1))
			return true;
	return false;
}

static void live_give(void)
{
	atomic_fetch_sub(&live_instances, 1);
}

static void unlink_instance(struct inv_function *f, struct inv_instance *in)
{
	for (struct inv_instance **p = &f->instances; *p; p = &(*p)->next)
		if (*p == in) {
			*p = in->next;
			f->n_instances--;
			live_give();
			f->shared_mapped -= in->fb_seen.shared_bytes;   /* (its mappings end with it) */
			in->fb_seen.shared_bytes = 0;
			break;
		}
	pthread_cond_broadcast(&f->cond);
}

/* A new instance of f, STARTING, in f's list (f->lock held; the caller took
 * its live_take), or NULL when out of memory. */
static struct inv_instance *instance_new(struct inv_function *f)
{
	struct inv_instance *in = calloc(1, sizeof(*in));

	if (!in || !(in->ring = malloc(INV_LOG_RING))) {
		free(in);
		return NULL;
	}
	pthread_mutex_init(&in->log_lock, NULL);
	pthread_mutex_init(&in->ctl_lock, NULL);
	in->ckpt_evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	in->in_fd = in->out_fd = in->err_fd = -1;
	in->fn_pidfd = in->exe_pidfd = in->exe_statfd = -1;
	in->state = INV_INST_STARTING;
	in->id = ++f->next_inst_id;
	in->generation = f->generation;
	in->next = f->instances;
	f->instances = in;
	f->n_instances++;
	return in;
}

/* Takes an instance of f for one call (f->lock held, dropped on return):
 * 0 with *ret_in BUSY (warm) or STARTING (res->cold: the caller restores it),
 * 1 when f's instance moved to another invoker (the call goes there), or -1
 * with res filled with the error. Dead idle instances met on the way are
 * dropped, never used. */
static int instance_take(struct inv_function *f, double deadline, bool fresh, struct inv_result *res,
			 struct inv_instance **ret_in)
{
	struct inv_instance *in;

	for (;;) {
		if (f->removed || inv_draining) {
			pthread_mutex_unlock(&f->lock);
			inv_result_error(res, 503, "%s", f->removed ? "the function was removed" : "shutting down");
			return -1;
		}
		if (f->moved_to && !f->instances && !fresh) {
			pthread_mutex_unlock(&f->lock);
			return 1;   /* forwarded: its state is over there */
		}
		for (in = fresh ? NULL : f->instances; in; in = in->next)
			if (in->state == INV_INST_IDLE && in->generation == f->generation && !in->hold_wanted)
				break;
		if (in && instance_dead(in)) {
			unlink_instance(f, in);
			pthread_mutex_unlock(&f->lock);
			phos_warn("%s: instance %u died while idle; replacing it", f->name, in->id);
			instance_stop(f, in, true);
			pthread_mutex_lock(&f->lock);
			continue;
		}
		if (in) {
			in->state = INV_INST_BUSY;
			break;
		}
		if (f->n_instances < f->limits.max_instances) {
			if (!live_take()) {
				pthread_mutex_unlock(&f->lock);
				inv_result_error(res, 503, "no capacity: %u instances run across all functions "
					     "(--max-instances)", inv_cfg.max_instances);
				res->at_capacity = true;
				return -1;
			}
			in = instance_new(f);
			if (!in) {
				pthread_mutex_unlock(&f->lock);
				live_give();
				inv_result_error(res, 503, "out of memory");
				return -1;
			}
			res->cold = true;
			break;
		}
		if (f->waiting >= f->limits.max_instances * f->limits.max_inflight) {
			pthread_mutex_unlock(&f->lock);
			inv_result_error(res, 429, "all %u instances busy and %u calls queued (max_inflight %u)",
				     f->limits.max_instances, f->waiting, f->limits.max_inflight);
			res->at_capacity = true;
			return -1;
		}
		double left = deadline - phos_now();
		if (left <= 0) {
			pthread_mutex_unlock(&f->lock);
			inv_result_error(res, 429, "no instance became free within timeout_ms (%u)", f->limits.timeout_ms);
			return -1;
		}
		struct timespec abs;
		clock_gettime(CLOCK_REALTIME, &abs);
		long long ns = abs.tv_nsec + (long long)(left * 1e9);
		abs.tv_sec += ns / 1000000000LL;
		abs.tv_nsec = ns % 1000000000LL;
		f->waiting++;
		pthread_cond_timedwait(&f->cond, &f->lock, &abs);
		f->waiting--;
	}
	pthread_mutex_unlock(&f->lock);
	*ret_in = in;
	return 0;
}

/* The end of a call that was answered, in (BUSY) ours: a checkpoint asked
 * while it ran, then idle again (or stopped, when its function goes). */
static void call_finish(struct inv_function *f, struct inv_instance *in)
{
	bool stop;

	if (inv_instance_hooks.idle)
		inv_instance_hooks.idle(f, in);
	pthread_mutex_lock(&f->lock);
	stop = f->removed || inv_draining || in->generation != f->generation;
	if (stop) {
		unlink_instance(f, in);
	} else {
		in->state = INV_INST_IDLE;
		in->idle_since = phos_now();
	}
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
	if (stop)
		instance_stop(f, in, false);
}

/* Brings in, just taken (res->cold, or resume_dir), to a running instance
 * that is BUSY for this call: restored from the checkpoint at resume_dir,
 * or from f's snapshot. 0, or -1 with the error answer in res (in freed).
 * *deadline is reset for a cold start: the run gets its whole time. */
static int call_instance_up(struct inv_function *f, struct inv_instance *in, const char *resume_dir, double t0,
			    double *deadline, struct inv_result *res)
{
	char err[1024];
	int r;

	if (resume_dir) {
		struct phos_restore_stats st;

		r = instance_from_checkpoint(f, in, resume_dir, false, NULL, &st, err, sizeof(err));
		if (r == 0 && !(in->ckpt_dir = strdup(resume_dir)))   /* removed with the instance */
			phos_warn("%s: out of memory: %s stays", f->name, resume_dir);
		res->restore_s = phos_now() - t0;
		if (r < 0) {
			pthread_mutex_lock(&f->lock);
			unlink_instance(f, in);
			pthread_mutex_unlock(&f->lock);
			instance_free(in);
			phos_image_dir_remove(resume_dir);
			phos_err("%s: cannot resume a call of an earlier invoker from %s: %s", f->name, resume_dir, err);
			inv_result_error(res, 503, "the invoker stopped while the call ran, and its checkpoint could "
				     "not be restored: %s", err);
			return -1;
		}
		phos_warn("%s: instance %u resumed a call of an earlier invoker from its checkpoint in %.1f ms "
			  "(%.1f MiB)", f->name, in->id, res->restore_s * 1e3, (double)st.gpu_bytes / (1 << 20));
	} else if (res->cold) {
		r = instance_start(f, in, *deadline, &res->restore_s, err, sizeof(err));
		if (r < 0) {
			pthread_mutex_lock(&f->lock);
			unlink_instance(f, in);
			pthread_mutex_unlock(&f->lock);
			instance_free(in);
			phos_err("%s: restore failed: %s", f->name, err);
			if (r == -EBADMSG)   /* a corrupt snapshot: as when found on demand */
				inv_result_error(res, 502, "cannot start an instance: %s", err);
			else if (r == -ETIMEDOUT)
				inv_result_error(res, 503, "cannot start an instance within timeout_ms (%u): %s",
						 f->limits.timeout_ms, err);
			else
				inv_result_error(res, 503, "cannot start an instance: %s", err);
			return -1;
		}
		*deadline = phos_now() + f->limits.timeout_ms / 1000.0; /* the run gets its whole time */
	} else {
		return 0;   /* (a warm instance: BUSY already) */
	}
	pthread_mutex_lock(&f->lock);
	in->state = INV_INST_BUSY;
	pthread_mutex_unlock(&f->lock);
	return 0;
}

/* Runs the call on in (resume_dir: the restored call's answer only) until
 * its answer, resuming it from its own checkpoints when it is lost after
 * one. 0 or -errno (exchange's); *ret_sent: the request's bytes sent. */
static int call_run(struct inv_function *f, struct inv_instance *in, const char *body, size_t len, const char *ctype,
		    const char *resume_dir, double deadline, struct inv_result *res, size_t *ret_sent)
{
	double t_run = phos_now();
	char err[1024];
	int r;

	in->ckpt_of_call = resume_dir != NULL;   /* (lost again: resumes from there) */
	in->resumes = 0;
	in->ckpt_next = t_run + f->limits.checkpoint_ms / 1000.0;
	if (resume_dir) {   /* the function has its request: its answer comes */
		*ret_sent = 1;   /* (never "as new": see call_lost) */
		r = receive(f, in, deadline, res);
	} else {
		r = exchange(f, in, body, len, ctype, deadline, res, ret_sent);
	}
	/* Lost after a checkpoint of this call: it goes on from there on a
	 * restored copy (a crash of the function itself may well come again:
	 * a few times only). */
	while ((r == -ECONNRESET || r == -EPIPE) && in->ckpt_of_call && in->resumes < INV_MAX_RESUMES &&
	       !inv_draining && !f->removed && phos_now() < deadline) {
		free(res->body);
		res->body = NULL;
		r = instance_resume(f, in, err, sizeof(err));
		if (r < 0) {
			phos_err("%s: instance %u could not resume its call from its checkpoint: %s", f->name, in->id, err);
			r = -ECONNRESET;
			break;
		}
		r = receive(f, in, deadline, res);
	}
	res->run_s = phos_now() - t_run;
	return r;
}

/* An answered call: the prefetch order's file and a checkpoint to take
 * wait until the answer is on its way (inv_invoke_done); without a
 * checkpoint the instance is idle again before it goes, ready for the
 * caller's next call. */
static void call_answered(struct inv_function *f, struct inv_instance *in, const char *resume_dir,
			  struct inv_result *res)
{
	struct inv_prefetch pf = { 0 }, copied = { 0 };
	bool ckpt;

	if (res->cold && res->http == 200 && !resume_dir) {
		inv_prefetch_take(f, in, &pf);
		inv_share_copied_take(f, in, &copied);
	}
	inv_metrics_fallbacks(f, in);   /* counted by the time the answer is read */
	pthread_mutex_lock(&f->lock);
	ckpt = in->ckpt_req != NULL;
	if (ckpt || pf.ids || copied.ids)
		f->refs++;
	pthread_mutex_unlock(&f->lock);
	if (!ckpt)
		call_finish(f, in);
	if (ckpt || pf.ids || copied.ids)
		res->after = (struct inv_after){ .f = f, .in = ckpt ? in : NULL, .prefetch = pf, .copied = copied };
}

/* A call that failed with r (timed out, crashed, its executor died, or the
 * drain limit): in is replaced (the next call restores a fresh one) and res
 * says why. True when nothing reached the function and the call may run
 * again, as new, on a fresh instance (once: retried). */
static bool call_lost(struct inv_function *f, struct inv_instance *in, int r, size_t sent, bool retried,
		      struct inv_result *res)
{
	int unread = 0;

	/* What the function never read of the request is still in its stdin
	 * pipe (empty at every call's start). */
	if (sent && ioctl(in->in_fd, FIONREAD, &unread) == 0 && unread >= 0 && (size_t)unread >= sent)
		sent = 0;
	pthread_mutex_lock(&f->lock);
	unlink_instance(f, in);
	pthread_mutex_unlock(&f->lock);
	free(res->body);
	res->body = NULL;
	if (r == -ETIMEDOUT) {
		instance_stop(f, in, true);
		inv_result_error(res, 504, "the call ran over timeout_ms (%u): instance killed", f->limits.timeout_ms);
	} else if (r == -ECANCELED) {
		instance_stop(f, in, true);
		inv_result_error(res, 503, "shutting down: the call was still running when the drain limit "
			     "(--drain-timeout) ran out");
	} else if (r == -ECONNRESET && (sent || retried)) {
		phos_warn("%s: the executor of instance %u died during a call; replacing the instance", f->name,
			  in->id);
		instance_stop(f, in, true);
		inv_result_error(res, 502, "the instance's executor died during the call; instance replaced");
	} else if (r == -EFBIG) {
		size_t big = res->len;

		instance_stop(f, in, true); /* the rest of its answer is still in the pipe */
		inv_result_error(res, 502, "the function's response of %zu bytes is over the limit of %u MiB; "
			     "instance replaced", big, INV_MAX_RESPONSE >> 20);
	} else if (r == -EPROTO) {
		instance_stop(f, in, true);
		inv_result_error(res, 502, "the function answered out of protocol (not a response frame); "
			     "instance replaced");
	} else {
		unsigned id = in->id;
		int code = instance_stop(f, in, true); /* out of step or dead: make sure; frees in */
		char how[96];

		/* Nothing reached the function: the call is as new, once. */
		if (sent == 0 && !retried && (r == -EPIPE || r == -ECONNRESET)) {
			phos_warn("%s: instance %u was dead before the call (exit status %d); retrying on a "
				  "fresh one", f->name, id, code);
			return true;
		}
		exit_describe(code, how, sizeof(how));
		inv_result_error(res, 502, "the function crashed (it %s); instance replaced", how);
	}
	return false;
}

/* A call of f: with body, or (resume_dir) the call that the checkpoint at
 * resume_dir was running, on a new instance restored from it. */
static void invoke(struct inv_function *f, const char *body, size_t len, const char *ctype, const char *resume_dir,
		   struct inv_result *res)
{
	double t0 = phos_now(), deadline = t0 + f->limits.timeout_ms / 1000.0;
	struct inv_instance *in = NULL;
	bool retried = resume_dir != NULL;   /* a resumed call is never as new */
	char err[1024];
	size_t sent = 0;
	int r;

	memset(res, 0, sizeof(*res));
	for (;;) {
		pthread_mutex_lock(&f->lock);
		r = instance_take(f, deadline, resume_dir != NULL, res, &in);
		if (r > 0 && inv_instance_hooks.forward)
			inv_instance_hooks.forward(f, body, len, ctype, res);
		else if (r > 0)
			inv_result_error(res, 503, "function %s moved away and this invoker cannot forward its calls",
					 f->name);
		if (r != 0 || call_instance_up(f, in, resume_dir, t0, &deadline, res) < 0)
			break;
		r = call_run(f, in, body, len, ctype, resume_dir, deadline, res, &sent);
		/* An on-demand restore that failed (a checksum mismatch, a read
		 * error) ends the executor, and the function's next CUDA call fails
		 * with an error of its own: the restore's report, written before
		 * the executor exits, is the answer. It is looked for on failures
		 * (briefly waited for) and, without waiting, on every answer. */
		if (phos_instance_failed(&in->proc, r < 0 || res->http >= 500 ? 50 : 0, err, sizeof(err))) {
			pthread_mutex_lock(&f->lock);
			unlink_instance(f, in);
			pthread_mutex_unlock(&f->lock);
			phos_err("%s: instance %u ended by its executor: %s", f->name, in->id, err);
			inv_metrics_instance_failed(f, err);
			instance_stop(f, in, true);
			inv_result_error(res, 502, "the instance's restore failed: %s; instance replaced", err);
			break;
		}
		if (r == 0) {
			call_answered(f, in, resume_dir, res);
			break;
		}
		if (!call_lost(f, in, r, sent, retried, res))
			break;
		retried = true;
		res->cold = false;
		res->restore_s = 0;
	}
	inv_metrics_record(f, res->http, phos_now() - t0, res->cold);
}

void inv_invoke_done(struct inv_after *after)
{
	struct inv_function *f = after->f;

	if (!f)
		return;
	inv_prefetch_store(f, &after->prefetch);
	inv_share_learn(f, &after->copied);
	if (after->in)
		call_finish(f, after->in);
	*after = (struct inv_after){ 0 };
	inv_function_unref(f);
}

void inv_invoke(struct inv_function *f, const char *body, size_t len, const char *ctype, struct inv_result *res)
{
	invoke(f, body, len, ctype, NULL, res);
}

void inv_invoke_resume(struct inv_function *f, const char *dir, struct inv_result *res)
{
	invoke(f, NULL, 0, NULL, dir, res);
}

/* ---- instances held outside a call (checkpoints.c, migrate.c) ---- */

static struct inv_instance *find_instance(struct inv_function *f, unsigned id)
{
	struct inv_instance *in;

	for (in = f->instances; in && in->id != id; in = in->next)
		;
	return in;
}

int inv_instance_hold(struct inv_function *f, unsigned id, unsigned wait_ms, struct inv_instance **ret, char *err,
		      size_t errlen)
{
	double until = phos_now() + wait_ms / 1000.0;
	struct inv_instance *in;
	int r = 0;

	pthread_mutex_lock(&f->lock);
	in = find_instance(f, id);
	/* a busy one: the next idle moment is ours, not the next call's */
	while (in && in->state == INV_INST_BUSY && !in->ckpt_req && !in->hold_wanted && phos_now() < until &&
	       !inv_draining && !f->removed) {
		struct timespec abs;
		double left = until - phos_now();

		in->hold_wanted = true;
		clock_gettime(CLOCK_REALTIME, &abs);
		long long ns = abs.tv_nsec + (long long)((left < 0.05 ? left : 0.05) * 1e9);
		abs.tv_sec += ns / 1000000000LL;
		abs.tv_nsec = ns % 1000000000LL;
		pthread_cond_timedwait(&f->cond, &f->lock, &abs);
		in = find_instance(f, id);   /* (it may have gone meanwhile) */
		if (in)
			in->hold_wanted = false;
	}
	if (!in) {
		phos_errf(err, errlen, "function %s has no instance %u", f->name, id);
		r = -ENOENT;
	} else if (inv_draining || f->removed) {
		phos_errf(err, errlen, "%s", inv_draining ? "shutting down" : "the function was removed");
		r = -ESHUTDOWN;
	} else if (in->state != INV_INST_IDLE || in->ckpt_req) {
		phos_errf(err, errlen, "instance %u is %s", id, in->state == INV_INST_BUSY ? "running a call" :
			 in->state == INV_INST_STARTING ? "still starting" : "stopping");
		r = -EBUSY;
	} else if (instance_dead(in)) {
		phos_errf(err, errlen, "instance %u died; it will be replaced", id);
		r = -ESRCH;
	} else {
		in->state = INV_INST_BUSY;   /* as a call takes it */
		*ret = in;
	}
	pthread_mutex_unlock(&f->lock);
	return r;
}

struct inv_instance *inv_instance_borrow(struct inv_function *f, unsigned id, char *err, size_t errlen)
{
	struct inv_instance *in;

	pthread_mutex_lock(&f->lock);
	in = find_instance(f, id);
	if (in && (in->state == INV_INST_IDLE || in->state == INV_INST_BUSY) && !inv_draining && !f->removed &&
	    !instance_dead(in))
		in->borrowed++;
	else {
		if (in)
			phos_errf(err, errlen, "instance %u is not serving", id);
		else
			phos_errf(err, errlen, "function %s has no instance %u", f->name, id);
		in = NULL;
	}
	pthread_mutex_unlock(&f->lock);
	return in;
}

void inv_instance_unborrow(struct inv_function *f, struct inv_instance *in)
{
	pthread_mutex_lock(&f->lock);
	in->borrowed--;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

void inv_instance_release(struct inv_function *f, struct inv_instance *in)
{
	bool stop;

	if (inv_instance_hooks.idle)   /* a checkpoint asked meanwhile saw it busy */
		inv_instance_hooks.idle(f, in);
	pthread_mutex_lock(&f->lock);
	stop = f->removed || inv_draining || in->generation != f->generation;
	if (stop) {
		unlink_instance(f, in);
	} else {
		in->state = INV_INST_IDLE;
		pthread_cond_signal(&f->cond);
	}
	pthread_mutex_unlock(&f->lock);
	if (stop)
		instance_stop(f, in, false);
}

void inv_instance_retire(struct inv_function *f, struct inv_instance *in)
{
	pthread_mutex_lock(&f->lock);
	unlink_instance(f, in);
	pthread_mutex_unlock(&f->lock);
	instance_stop(f, in, true);
}

int inv_instance_reserve(struct inv_function *f, struct inv_instance **ret, char *err, size_t errlen)
{
	struct inv_instance *in;

	pthread_mutex_lock(&f->lock);
	if (!f->ready || f->removed || inv_draining) {
		pthread_mutex_unlock(&f->lock);
		phos_errf(err, errlen, "function %s is %s", f->name, inv_draining ? "shutting down with the invoker" :
			 f->removed ? "being removed" : "being deployed");
		return -ESHUTDOWN;
	}
	if (f->n_instances >= f->limits.max_instances || !live_take()) {
		unsigned n = f->n_instances;

		pthread_mutex_unlock(&f->lock);
		phos_errf(err, errlen, "no room for another instance (%u of max_instances %u here, %u across functions)",
			 n, f->limits.max_instances, inv_cfg.max_instances);
		return -EBUSY;
	}
	in = instance_new(f);
	if (!in) {
		live_give();
		pthread_mutex_unlock(&f->lock);
		phos_errf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	pthread_mutex_unlock(&f->lock);
	*ret = in;
	return 0;
}

void inv_instance_unreserve(struct inv_function *f, struct inv_instance *in)
{
	pthread_mutex_lock(&f->lock);
	unlink_instance(f, in);
	pthread_mutex_unlock(&f->lock);
	instance_free(in);
}

int inv_instance_adopt(struct inv_function *f, struct inv_instance *in, const char *dir, struct inv_prepared *prep,
		       double *ret_s, char *err, size_t errlen)
{
	struct phos_restore_stats st;
	double t0 = phos_now();
	/* on demand (unless --restore stop-the-world): the moved instance serves
	 * at once, its buffers streaming in from dir, which stays its own */
	int r = instance_from_checkpoint(f, in, dir, !inv_cfg.stop_the_world, prep, &st, err, errlen);

	if (r < 0)
		return r;
	if (!in->ckpt_dir)
		in->ckpt_dir = strdup(dir);   /* removed with the instance */
	*ret_s = phos_now() - t0;
	pthread_mutex_lock(&f->lock);
	in->state = INV_INST_IDLE;
	in->idle_since = phos_now();
	pthread_cond_signal(&f->cond);
	pthread_mutex_unlock(&f->lock);
	phos_info("%s: instance %u restored from a checkpoint in %.1f ms on %s (CRIU %.1f ms, executor %.1f ms; "
		  "%.1f MiB)", f->name, in->id, *ret_s * 1e3, prep && prep->used ? "the executor prepared for it"
		  : in->proc.pool ? "a pooled executor" : "an executor of its own",
		  st.cpu_restore_s * 1e3, (st.open_s + st.load_s) * 1e3, (double)st.gpu_bytes / (1 << 20));
	return 0;
}

static void stop_list(struct inv_function *f, struct inv_instance *list, bool kill_it)
{
	while (list) {
		struct inv_instance *next = list->next;

		instance_stop(f, list, kill_it);
		list = next;
	}
}

/* Takes idle instances out of the list (all, or those idle over idle_ms) and stops them. */
void inv_instances_stop_idle(struct inv_function *f, bool all)
{
	struct inv_instance *stop = NULL;
	double now = phos_now();

	pthread_mutex_lock(&f->lock);
	for (struct inv_instance **p = &f->instances; *p;) {
		struct inv_instance *in = *p;

		if (in->state == INV_INST_IDLE && (all || now - in->idle_since >= f->limits.idle_ms / 1000.0)) {
			*p = in->next;
			f->n_instances--;
			live_give();
			in->next = stop;
			stop = in;
			continue;
		}
		p = &in->next;
	}
	if (stop)
		pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
	stop_list(f, stop, false);
}

/* Drops idle instances whose function or executor died (reaping both, the
 * executor slot back to its pool), so that no call meets them. */
static void instances_drop_dead(struct inv_function *f)
{
	struct inv_instance *stop = NULL;

	pthread_mutex_lock(&f->lock);
	for (struct inv_instance **p = &f->instances; *p;) {
		struct inv_instance *in = *p;

		if (in->state == INV_INST_IDLE && instance_dead(in)) {
			*p = in->next;
			f->n_instances--;
			live_give();
			in->next = stop;
			stop = in;
			phos_warn("%s: instance %u died while idle; dropped", f->name, in->id);
			continue;
		}
		p = &in->next;
	}
	if (stop)
		pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
	stop_list(f, stop, true);
}

void inv_instances_stop_all(struct inv_function *f)
{
	struct inv_standby sb;

	pthread_mutex_lock(&f->lock);
	f->removed = true; /* busy instances are stopped when their call ends */
	pthread_cond_broadcast(&f->cond);
	sb = f->standby;
	f->standby.valid = false;
	pthread_mutex_unlock(&f->lock);
	if (sb.valid)
		standby_clear(&sb);
	inv_instances_stop_idle(f, true);
	pthread_mutex_lock(&f->lock);
	while (f->n_instances) {
		struct timespec abs;

		clock_gettime(CLOCK_REALTIME, &abs);
		abs.tv_sec += 1;
		pthread_cond_timedwait(&f->cond, &f->lock, &abs);
	}
	pthread_mutex_unlock(&f->lock);
}

void inv_instances_count(struct inv_function *f, unsigned counts[4])
{
	memset(counts, 0, 4 * sizeof(unsigned));
	pthread_mutex_lock(&f->lock);
	for (struct inv_instance *in = f->instances; in; in = in->next)
		counts[in->state]++;
	pthread_mutex_unlock(&f->lock);
}

json_t *inv_instances_logs(struct inv_function *f, unsigned tail)
{
	json_t *a = json_array();
	static const char *const names[] = { "starting", "idle", "busy", "stopping" };

	pthread_mutex_lock(&f->lock);
	for (struct inv_instance *in = f->instances; in; in = in->next) {
		char *text;

		pthread_mutex_lock(&in->log_lock);
		text = ring_tail(in, tail);
		pthread_mutex_unlock(&in->log_lock);
		json_array_append_new(a, json_pack("{s:i,s:s,s:i,s:i,s:i,s:s,s:i,s:s?}", "instance", in->id, "state",
						   names[in->state], "pid", (int)in->proc.fn_pid, "executor_pid",
						   (int)in->proc.executor_pid, "checkpoints", (int)in->checkpoints,
						   "checkpoint_mode", in->ckpt_mode, "resumes", (int)in->resumes,
						   "log", text));
		free(text);
	}
	if (f->last_log) {
		struct inv_instance tmp = { .ring = f->last_log, .ring_len = strlen(f->last_log) };
		char *text = ring_tail(&tmp, tail);

		json_array_append_new(a, json_pack("{s:i,s:s,s:i,s:s?}", "instance", f->last_id, "state", "exited",
						   "exit_status", f->last_exit, "log", text));
		free(text);
	}
	pthread_mutex_unlock(&f->lock);
	return a;
}

/* ---- the idle reaper ---- */

static pthread_t reaper;
static volatile int reaper_stop;

static void reap_one(struct inv_function *f, void *arg)
{
	struct inv_function **list = arg;

	for (unsigned i = 0; i < 1024; i++)
		if (!list[i]) {
			pthread_mutex_lock(&f->lock);
			f->refs++;
			pthread_mutex_unlock(&f->lock);
			list[i] = f;
			return;
		}
}

#define INV_GUARD_SCAN_MS 250
#define GUARD_BATCH 64

/* The guard's scan of f's running instances (the file header). */
static void guard_scan(struct inv_function *f)
{
	struct { pid_t pid; int pidfd; unsigned id; } run[GUARD_BATCH];
	unsigned n = 0;

	/* a pidfd of its own for each: the pid is checked alive around the scan,
	 * and the kill goes to that process, never to a reused pid */
	pthread_mutex_lock(&f->lock);
	for (struct inv_instance *in = f->instances; in && n < GUARD_BATCH; in = in->next)
		if ((in->state == INV_INST_IDLE || in->state == INV_INST_BUSY) && in->fn_pidfd >= 0 &&
		    (run[n].pidfd = fcntl(in->fn_pidfd, F_DUPFD_CLOEXEC, 0)) >= 0) {
			run[n].pid = in->proc.fn_pid;
			run[n].id = in->id;
			n++;
		}
	pthread_mutex_unlock(&f->lock);
	for (unsigned i = 0; i < n; i++) {
		char what[4096];
		pid_t bad = 0;

		if (phos_guard_scan(run[i].pid, inv_cfg.paths.preload_dir, &bad, what, sizeof(what)) == 1 &&
		    pidfd_send_signal(run[i].pidfd, 0, NULL, 0) == 0) {
			if (bad != run[i].pid)
				kill(bad, SIGKILL);   /* a descendant: it would outlive the function */
			pidfd_send_signal(run[i].pidfd, SIGKILL, NULL, 0);
			phos_err("%s: instance %u mapped or opened %s, which reaches the GPU driver directly instead of "
				 "being forwarded: killed", f->name, run[i].id, what);
		}
		close(run[i].pidfd);
	}
}

static void *reaper_main(void *arg)
{
	double t0 = phos_now(), t_scan = 0;

	while (!reaper_stop) {
		struct inv_function *list[1025] = { 0 };
		bool scan = phos_now() - t_scan >= INV_GUARD_SCAN_MS / 1e3;

		usleep(50 * 1000);
		inv_orphans_late_sweep(phos_now() - t0);
		if (inv_instance_hooks.tick)
			inv_instance_hooks.tick();
		inv_function_foreach(reap_one, list);
		if (scan)
			t_scan = phos_now();
		for (unsigned i = 0; list[i]; i++) {
			if (scan)
				guard_scan(list[i]);
			instances_drop_dead(list[i]);
			inv_instances_stop_idle(list[i], false);
			standby_upkeep(list[i]);
			inv_function_unref(list[i]);
		}
	}
	return NULL;
}

int inv_reaper_start(void)
{
	return -pthread_create(&reaper, NULL, reaper_main, NULL);
}

void inv_reaper_stop(void)
{
	reaper_stop = 1;
	pthread_join(reaper, NULL);
}
