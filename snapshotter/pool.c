/* SPDX-License-Identifier: MIT */
/*
 * The warm executor pool (see snapshotter.h).
 *
 *   phos_pool_new ──spawns──▶ phos-executor --pool  (x n, each: context, cuBLAS, arena)
 *                              │ HELLO, then IDLE on its control socket (runtime/proto/control.h)
 *   phos_restore_pooled ──▶ takes an idle one, sends RESTORE {dir} + a channel socket,
 *                            CRIU-restores the function beside it, reads READY
 *   phos_instance_wait  ──▶ function gone → executor scrubs itself → IDLE → back
 *   phos_pool_hot       ──▶ the keeper thread gives every idle executor the hot
 *                            list (HOT {dirs}) until each has the newest
 *   phos_pool_lend      ──▶ takes an idle one, sends SERVE + a channel socket,
 *                            hands the other end out (a program started
 *                            elsewhere: phos-fn run, lend.c); phos_pool_lend_end
 *                            waits for its IDLE once that program is gone
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel.h"
#include "control.h"
#include "criu.h"
#include "image.h"
#include "log.h"
#include "internal.h"

#define POOL_MAX 64
#define POOL_SHARE_MAX 64
#define POOL_SHARE_FDS_MAX 4096u   /* descriptors the shared entries hold, all together */

/* A snapshot whose buffers the pool's instances share (phos_pool_share;
 * ctxpool/state/exec_share.c): filled by the first restore of it, handed to
 * every later one (SHARE + descriptor each). Holding the descriptors keeps
 * the memory on the GPU between instances. */
struct pool_share {
	char *dir;                    /* NULL: a free entry */
	struct stat manifest;         /* of the snapshot the buffers are of */
	bool filling;                 /* a restore fills it now */
	bool filled;                  /* filled: bufs is what is shared (maybe none) */
	struct restore_shared bufs;   /* less those found written (phos_pool_share_private) */
};

/* What one restore does about sharing (share_begin, share_end). */
struct share_job {
	int entry;                    /* -1: not shared */
	bool fill;                    /* this restore fills the entry */
	struct restore_shared offer;  /* use: the entry's buffers, descriptors dup'd */
	struct restore_shared got;    /* fill: what the executor shared */
};

struct pool_exec {
	pid_t pid;
	int ctl;        /* -1: not running */
	bool hello;     /* said HELLO (its first message) */
	bool idle;      /* said IDLE and is not taken */
	bool taken;
	unsigned hot_gen;   /* the hot list it has (0: none yet) */
};

struct phos_pool {
	struct phos_runtime_paths paths;
	char *strs[6];
	pthread_mutex_t lock;
	pthread_cond_t freed, wake;
	unsigned n;
	struct pool_exec ex[POOL_MAX];

	char **hot;                 /* snapshot directories to keep hot */
	size_t nhot;
	unsigned hot_gen;           /* bumped by each phos_pool_hot */
	pthread_t keeper;
	bool keeper_running, stopping;

	struct pool_share shares[POOL_SHARE_MAX];
	size_t share_fds;   /* held by the entries' buffers */
};

/* The next message of executor e within timeout_ms (see phos_ctl_recv),
 * taking its HELLO first when it has not said it yet: a HELLO of another
 * protocol version, or anything else first, is an error. */
static int exec_recv(struct pool_exec *e, int timeout_ms, struct phos_ctl_msg *ret, char *err, size_t errlen)
{
	int r;

	if (!e->hello) {
		r = phos_ctl_recv(e->ctl, timeout_ms, ret, err, errlen);
		if (r < 0)
			return r;
		if (ret->type != PHOS_CTL_HELLO) {
			phos_errf(err, errlen, "it said %s before hello", phos_ctl_type_name(ret->type));
			phos_ctl_msg_exit(ret);
			return -EPROTO;
		}
		phos_ctl_msg_exit(ret);
		e->hello = true;
	}
	return phos_ctl_recv(e->ctl, timeout_ms, ret, err, errlen);
}

/* A reason for a failed exec_recv. */
static const char *recv_why(int r, const char *err)
{
	return err[0] ? err : r == -EPIPE ? "gone" : strerror(-r);
}

/* Starts executor i; it is idle once it said so (pool_settle). */
static int spawn_one(struct phos_pool *p, unsigned i)
{
	int ctl[2], dummy[2], r;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) < 0)
		return -errno;
	/* --pool takes its channels on the control socket; fd 3 is a placeholder. */
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, dummy) < 0) {
		r = -errno;
		close(ctl[0]);
		close(ctl[1]);
		return r;
	}
	r = phos_executor_spawn(&p->paths, dummy[0], ctl[1], (const char *const[]){ "--pool", NULL }, &p->ex[i].pid);
	close(dummy[0]);
	close(dummy[1]);
	close(ctl[1]);
	if (r < 0) {
		close(ctl[0]);
		return r;
	}
	p->ex[i].ctl = ctl[0];
	p->ex[i].hello = false;
	p->ex[i].idle = false;
	p->ex[i].taken = false;
	p->ex[i].hot_gen = 0;
	return 0;
}

static void stop_one(struct pool_exec *e)
{
	if (e->ctl >= 0)
		close(e->ctl);
	if (e->pid > 0) {
		kill(e->pid, SIGTERM);
		waitpid(e->pid, NULL, 0);
	}
	e->ctl = -1;
	e->pid = 0;
	e->hello = e->idle = e->taken = false;
}

/* True when idle executor e died (its control socket hung up) or said
 * something unasked: an idle executor is silent until it is given work. */
static bool idle_broken(const struct pool_exec *e)
{
	struct pollfd pfd = { .fd = e->ctl, .events = POLLIN | POLLRDHUP };

	return poll(&pfd, 1, 0) > 0;
}

/* Collects the IDLE of executors that are starting up (non-blocking),
 * replacing any that died, idle ones included (reaped, so no zombie stays
 * counted idle until a restore trips over it). Called with the lock held. */
static void pool_settle(struct phos_pool *p, int timeout_ms)
{
	for (unsigned i = 0; i < p->n; i++) {
		struct pool_exec *e = &p->ex[i];
		struct phos_ctl_msg m;
		char err[512] = "";
		int r;

		if (e->idle && idle_broken(e)) {
			phos_warn("pool: idle executor %d died; replacing it", (int)e->pid);
			stop_one(e);
		}
		if (e->taken || e->idle)
			continue;
		if (e->ctl < 0 && spawn_one(p, i) < 0)
			continue;
		r = exec_recv(e, timeout_ms, &m, err, sizeof(err));
		if (r == 0 && m.type == PHOS_CTL_IDLE) {
			e->idle = true;
		} else if (r != -ETIMEDOUT) {
			phos_warn("pool: executor %d failed to start (%s); replacing it", (int)e->pid,
				  r < 0 ? recv_why(r, err) : m.type == PHOS_CTL_ERROR ? m.error.reason
											: phos_ctl_type_name(m.type));
			stop_one(e);
		}
		if (r == 0)
			phos_ctl_msg_exit(&m);
	}
}

/* Sends executor e (taken, idle) the hot list; true when it came back idle. */
static bool send_hot(struct pool_exec *e, char **dirs, size_t n)
{
	struct phos_ctl_msg m = { .type = PHOS_CTL_HOT, .fd = -1, .hot = { .dirs = dirs, .n = n } };
	char err[512] = "";
	bool idle;

	if (phos_ctl_send(e->ctl, &m) < 0)
		return false;
	/* Pinning takes about 35 ms per GiB, and the checksums are verified. */
	if (exec_recv(e, 600000, &m, err, sizeof(err)) < 0)
		return false;
	if (m.type == PHOS_CTL_ERROR)
		phos_warn("pool: executor %d: %s", (int)e->pid, m.error.reason);
	phos_ctl_msg_exit(&m);
	if (exec_recv(e, 30000, &m, err, sizeof(err)) < 0)
		return false;
	idle = m.type == PHOS_CTL_IDLE;
	phos_ctl_msg_exit(&m);
	return idle;
}

/* Keeps the pool full and every idle executor's hot list current, off the
 * path of any restore. */
static void *keeper_main(void *arg)
{
	struct phos_pool *p = arg;

	pthread_mutex_lock(&p->lock);
	while (!p->stopping) {
		struct timespec ts;
		int stale = -1;

		pool_settle(p, 0);
		for (unsigned i = 0; i < p->n && stale < 0; i++)
			if (p->ex[i].idle && p->ex[i].hot_gen != p->hot_gen)
				stale = (int)i;
		if (stale >= 0) {
			struct pool_exec *e = &p->ex[stale];
			unsigned gen = p->hot_gen;
			char **dirs = calloc(p->nhot + 1, sizeof(*dirs));
			size_t n = 0;
			bool ok;

			for (size_t k = 0; dirs && k < p->nhot; k++)
				if ((dirs[n] = strdup(p->hot[k])))
					n++;
			e->idle = false;
			e->taken = true;
			pthread_mutex_unlock(&p->lock);
			ok = dirs && send_hot(e, dirs, n);
			for (size_t k = 0; k < n; k++)
				free(dirs[k]);
			free(dirs);
			pthread_mutex_lock(&p->lock);
			e->taken = false;
			if (ok) {
				e->idle = true;
				e->hot_gen = gen;
			} else {
				phos_warn("pool: executor %d did not take its hot list; replacing it", (int)e->pid);
				stop_one(e);
				spawn_one(p, (unsigned)stale);
			}
			pthread_cond_broadcast(&p->freed);
			continue;
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&p->wake, &p->lock, &ts);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

int phos_pool_hot(struct phos_pool *p, const char *const dirs[], size_t n)
{
	char **copy;

	if (n > PHOS_POOL_HOT_MAX)
		return -E2BIG;
	copy = calloc(n + 1, sizeof(*copy));
	if (!copy)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (!dirs[i] || !*dirs[i] || strlen(dirs[i]) > 4000 || strchr(dirs[i], '\n') ||
		    !(copy[i] = strdup(dirs[i]))) {
			for (size_t k = 0; k <= i; k++)
				free(copy[k]);
			free(copy);
			return -EINVAL;
		}
	}
	pthread_mutex_lock(&p->lock);
	for (size_t i = 0; i < p->nhot; i++)
		free(p->hot[i]);
	free(p->hot);
	p->hot = copy;
	p->nhot = n;
	p->hot_gen++;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);
	return 0;
}

unsigned phos_pool_hot_pending(struct phos_pool *p)
{
	unsigned k = 0;

	pthread_mutex_lock(&p->lock);
	for (unsigned i = 0; i < p->n; i++)
		k += p->ex[i].ctl >= 0 && p->ex[i].hot_gen != p->hot_gen;
	pthread_mutex_unlock(&p->lock);
	return k;
}

int phos_pool_new(const struct phos_runtime_paths *paths, unsigned n, struct phos_pool **ret_pool)
{
	struct phos_pool *p;

	if (n == 0 || n > POOL_MAX)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->paths = *paths;
	p->strs[0] = p->paths.executor ? strdup(p->paths.executor) : NULL;
	p->strs[1] = p->paths.preload_dir ? strdup(p->paths.preload_dir) : NULL;
	p->strs[2] = p->paths.sim_twins ? strdup(p->paths.sim_twins) : NULL;
	p->strs[3] = p->paths.criu ? strdup(p->paths.criu) : NULL;
	p->strs[4] = p->paths.device ? strdup(p->paths.device) : NULL;
	p->strs[5] = p->paths.gpus ? strdup(p->paths.gpus) : NULL;
	p->paths.gpus = p->strs[5];
	p->paths.executor = p->strs[0];
	p->paths.preload_dir = p->strs[1];
	p->paths.sim_twins = p->strs[2];
	p->paths.criu = p->strs[3];
	p->paths.device = p->strs[4];
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->freed, NULL);
	pthread_cond_init(&p->wake, NULL);
	p->n = n;
	for (unsigned i = 0; i < n; i++) {   /* generation 0: the empty hot list */
		p->ex[i].ctl = -1;
		spawn_one(p, i);
	}
	p->keeper_running = pthread_create(&p->keeper, NULL, keeper_main, p) == 0;
	*ret_pool = p;
	return 0;
}

void phos_pool_free(struct phos_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);
	if (p->keeper_running)
		pthread_join(p->keeper, NULL);
	for (unsigned i = 0; i < p->n; i++)
		stop_one(&p->ex[i]);
	for (size_t i = 0; i < p->nhot; i++)
		free(p->hot[i]);
	free(p->hot);
	for (unsigned i = 0; i < POOL_SHARE_MAX; i++) {
		restore_shared_clear(&p->shares[i].bufs);
		free(p->shares[i].dir);
	}
	for (unsigned i = 0; i < 5; i++)
		free(p->strs[i]);
	pthread_cond_destroy(&p->freed);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

unsigned phos_pool_idle(struct phos_pool *p)
{
	unsigned k = 0;

	pthread_mutex_lock(&p->lock);
	pool_settle(p, 0);
	for (unsigned i = 0; i < p->n; i++)
		k += p->ex[i].idle;
	pthread_mutex_unlock(&p->lock);
	return k;
}

void phos_pool_counts(struct phos_pool *p, unsigned *ret_idle, unsigned *ret_busy, unsigned *ret_starting)
{
	unsigned idle = 0, busy = 0;

	pthread_mutex_lock(&p->lock);
	pool_settle(p, 0);
	for (unsigned i = 0; i < p->n; i++) {
		idle += p->ex[i].idle;
		busy += p->ex[i].taken;
	}
	pthread_mutex_unlock(&p->lock);
	*ret_idle = idle;
	*ret_busy = busy;
	*ret_starting = p->n - idle - busy;
}

/* Takes an idle executor, waiting up to timeout_ms; its index or -EBUSY. */
static int pool_take(struct phos_pool *p, unsigned timeout_ms)
{
	double deadline = phos_now() + timeout_ms / 1000.0;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		pool_settle(p, 0);
		/* One with the current hot list first: it restores hot snapshots
		 * from the pinned page cache. */
		for (int pass = 0; pass < 2; pass++) {
			for (unsigned i = 0; i < p->n; i++) {
				if (p->ex[i].idle && (pass || p->ex[i].hot_gen == p->hot_gen)) {
					p->ex[i].idle = false;
					p->ex[i].taken = true;
					pthread_mutex_unlock(&p->lock);
					return (int)i;
				}
			}
		}
		if (phos_now() >= deadline)
			break;
		/* Executors still starting say "idle" soon; returned ones signal. */
		pthread_mutex_unlock(&p->lock);
		usleep(2000);
		pthread_mutex_lock(&p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	return -EBUSY;
}

/* Gives executor i back unused: taken, it was sent nothing, and it still
 * waits for a job (its IDLE was read). */
static void pool_untake(struct phos_pool *p, unsigned i)
{
	pthread_mutex_lock(&p->lock);
	p->ex[i].taken = false;
	p->ex[i].idle = true;
	pthread_cond_broadcast(&p->wake);
	pthread_cond_broadcast(&p->freed);
	pthread_mutex_unlock(&p->lock);
}

/* Whether a message left unread by a finished instance may come before its
 * executor's IDLE: the answer to a restore, a failure report, or a late answer
 * to a question (phos_instance_touched, phos_instance_fallbacks). */
static bool stale_reply(enum phos_ctl_type t)
{
	return t == PHOS_CTL_READY || t == PHOS_CTL_ERROR || t == PHOS_CTL_TOUCHED || t == PHOS_CTL_FALLBACKS ||
	       t == PHOS_CTL_SHARED || t == PHOS_CTL_COPIED;
}

/* Gives executor i back once it reported IDLE after its scrub; replaces it otherwise. */
static void pool_give(struct phos_pool *p, unsigned i)
{
	struct pool_exec *e = &p->ex[i];
	struct phos_ctl_msg m;
	char err[512] = "";
	bool idle = false;
	int r;

	/* A failed start may leave its READY or ERROR unread before the IDLE. */
	while ((r = exec_recv(e, 30000, &m, err, sizeof(err))) == 0) {
		enum phos_ctl_type t = m.type;

		phos_ctl_msg_exit(&m);
		if (!stale_reply(t)) {
			idle = t == PHOS_CTL_IDLE;
			if (!idle)
				phos_errf(err, sizeof(err), "it said %s", phos_ctl_type_name(t));
			break;
		}
	}

	pthread_mutex_lock(&p->lock);
	e->taken = false;
	if (idle) {
		e->idle = true;
		pthread_cond_broadcast(&p->wake);
	} else {
		phos_warn("pool: executor %d did not come back (%s); replacing it", (int)e->pid,
			  r < 0 ? recv_why(r, err) : err);
		stop_one(e);
		spawn_one(p, i);
	}
	pthread_cond_broadcast(&p->freed);
	pthread_mutex_unlock(&p->lock);
}

/* The pooled half of phos_instance_wait (phos_instance.give_back): the
 * executor scrubs itself and comes back to its pool (or is replaced). */
static void pool_return(struct phos_instance *inst)
{
	pool_give(inst->pool, inst->slot);
}

/* Takes back executor i that did not answer in time: killed, then replaced
 * (pool_give finds it gone). */
static void pool_kill(struct phos_pool *p, unsigned i)
{
	if (p->ex[i].pid > 0)
		kill(p->ex[i].pid, SIGKILL);
	pool_give(p, i);
}

/* --- shared buffers (issue 42) --- */

static bool manifest_stat(const char *dir, struct stat *st)
{
	char path[PHOS_CTL_PATH_MAX + 32];

	snprintf(path, sizeof(path), "%s/manifest.json", dir);
	return stat(path, st) == 0;
}

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* The entry of dir, or -1. Called locked. */
static int share_find(const struct phos_pool *p, const char *dir)
{
	for (int i = 0; i < POOL_SHARE_MAX; i++)
		if (p->shares[i].dir && !strcmp(p->shares[i].dir, dir))
			return i;
	return -1;
}

int phos_pool_share(struct phos_pool *p, const char *dir, bool on)
{
	int i, r = 0;

	pthread_mutex_lock(&p->lock);
	i = share_find(p, dir);
	if (!on && i >= 0) {
		/* instances that map the buffers keep them until they end */
		p->share_fds -= p->shares[i].bufs.n;
		restore_shared_clear(&p->shares[i].bufs);
		free(p->shares[i].dir);
		p->shares[i] = (struct pool_share){ 0 };
	} else if (on && i < 0) {
		for (i = 0; i < POOL_SHARE_MAX && p->shares[i].dir; i++)
			;
		if (i == POOL_SHARE_MAX)
			r = -ENOSPC;
		else if (!(p->shares[i].dir = strdup(dir)))
			r = -ENOMEM;
	}
	pthread_mutex_unlock(&p->lock);
	return r;
}

uint64_t phos_pool_shared_bytes(struct phos_pool *p, const char *dir)
{
	uint64_t bytes = 0;
	int i;

	pthread_mutex_lock(&p->lock);
	i = share_find(p, dir);
	for (size_t k = 0; i >= 0 && k < p->shares[i].bufs.n; k++)
		bytes += (p->shares[i].bufs.bufs[k].size + (2ull << 20) - 1) / (2ull << 20) * (2ull << 20);
	pthread_mutex_unlock(&p->lock);
	return bytes;
}

int phos_pool_share_private(struct phos_pool *p, const char *dir, const uint64_t *ids, size_t n)
{
	struct pool_share *e;
	int i, dropped = 0;

	pthread_mutex_lock(&p->lock);
	i = share_find(p, dir);
	e = i >= 0 && p->shares[i].filled ? &p->shares[i] : NULL;
	for (size_t k = 0; e && k < e->bufs.n;) {
		bool hit = false;

		for (size_t q = 0; q < n && !hit; q++)
			hit = e->bufs.bufs[k].id == ids[q];
		if (!hit) {
			k++;
			continue;
		}
		close(e->bufs.bufs[k].fd);   /* the memory goes once no instance maps it */
		e->bufs.bufs[k] = e->bufs.bufs[--e->bufs.n];
		p->share_fds--;
		dropped++;
	}
	pthread_mutex_unlock(&p->lock);
	return dropped;
}

/* A snapshot restore of dir: when its buffers are shared, either this
 * restore fills the entry (the first), or it gets the entry's buffers to
 * offer; a restore while another fills it shares nothing. */
static void share_begin(struct phos_pool *p, const char *dir, struct share_job *j)
{
	struct pool_share *e;
	struct stat st;
	int i;

	*j = (struct share_job){ .entry = -1 };
	pthread_mutex_lock(&p->lock);
	i = share_find(p, dir);
	e = i >= 0 ? &p->shares[i] : NULL;
	if (e && !manifest_stat(dir, &st))
		e = NULL;
	if (e && e->filled && !same_file(&e->manifest, &st)) {
		p->share_fds -= e->bufs.n;
		restore_shared_clear(&e->bufs);   /* another snapshot there now */
		e->filled = false;
	}
	if (e && e->filled && !e->bufs.n) {
		j->entry = -1;   /* every buffer was found written: nothing shared */
	} else if (e && e->filled) {
		j->offer.bufs = calloc(e->bufs.n, sizeof(*j->offer.bufs));
		for (size_t k = 0; j->offer.bufs && k < e->bufs.n; k++) {
			j->offer.bufs[k] = e->bufs.bufs[k];
			j->offer.bufs[k].fd = fcntl(e->bufs.bufs[k].fd, F_DUPFD_CLOEXEC, 0);
			if (j->offer.bufs[k].fd < 0)
				break;
			j->offer.n = k + 1;
		}
		j->entry = j->offer.n == e->bufs.n ? i : -1;
		if (j->entry < 0)
			restore_shared_clear(&j->offer);
	} else if (e && !e->filling) {
		e->filling = true;
		e->manifest = st;
		j->entry = i;
		j->fill = true;
	}
	pthread_mutex_unlock(&p->lock);
}

/* The restore is over (ok: it succeeded): a fill's buffers go into the entry. */
static void share_end(struct phos_pool *p, const char *dir, struct share_job *j, bool ok)
{
	struct pool_share *e;

	restore_shared_clear(&j->offer);
	if (!j->fill) {
		restore_shared_clear(&j->got);
		return;
	}
	pthread_mutex_lock(&p->lock);
	e = &p->shares[j->entry];
	if (e->dir && !strcmp(e->dir, dir)) {
		e->filling = false;
		if (ok && j->got.n && !e->filled && p->share_fds + j->got.n <= POOL_SHARE_FDS_MAX) {
			p->share_fds += j->got.n;
			e->bufs = j->got;
			e->filled = true;
			j->got = (struct restore_shared){ 0 };
		} else if (ok && j->got.n && !e->filled) {
			phos_warn("%s: %zu shared buffers would pass the pool's %u descriptors; not shared", dir,
				  j->got.n, POOL_SHARE_FDS_MAX);
		}
	}
	pthread_mutex_unlock(&p->lock);
	restore_shared_clear(&j->got);
}

/* Sends executor slot the job to restore dir (RESTORE) with the function's
 * channel socket; 0 or -errno. adopt_pid: a checkpoint's restored program,
 * whose channel memfd is its descriptor adopt_fd; 0: a snapshot's, served on
 * a new channel. */
static int send_restore(struct phos_pool *p, int slot, int channel, const char *dir, bool on_demand, pid_t adopt_pid,
			int adopt_fd, const struct share_job *j)
{
	struct phos_ctl_msg m = { .type = PHOS_CTL_RESTORE, .fd = channel };

	/* the shared buffers first: the executor keeps them for this RESTORE */
	for (size_t k = 0; j && j->entry >= 0 && k < j->offer.n; k++) {
		const struct restore_shared_buf *b = &j->offer.bufs[k];
		int r = phos_ctl_send(p->ex[slot].ctl, &(struct phos_ctl_msg){
			.type = PHOS_CTL_SHARE, .fd = b->fd, .share = { b->id, b->addr, b->size, b->hash } });

		if (r < 0)
			return r;
	}
	m.restore.share = j && j->entry >= 0;

	m.restore.on_demand = on_demand;
	m.restore.adopt.pid = adopt_pid > 0 ? (uint32_t)adopt_pid : 0;
	m.restore.adopt.fd = adopt_pid > 0 ? adopt_fd : 0;
	snprintf(m.restore.dir, sizeof(m.restore.dir), "%s", dir);
	return phos_ctl_send(p->ex[slot].ctl, &m);
}

/* A checkpoint of a running program on executor slot: CRIU first (the
 * program restored stopped, at its call boundary, keeping its channel), then
 * the executor restores the device state and adopts that channel, then the
 * program goes on; as restore_checkpoint in restore.c, with no context to
 * create. On failure the program is gone again. */
static int pooled_checkpoint(struct phos_pool *p, int slot, const char *dir, const struct phos_image *img,
			     struct phos_criu_inherit inh[4], int ch[2], bool on_demand,
			     const struct phos_restore_bound *bound, bool *sent, pid_t *ret_fn,
			     struct phos_restore_stats *st, char *err, size_t errlen)
{
	pid_t fn;
	int r;

	r = restore_criu(p->paths.criu, dir, img, inh, ch[1], bound, &fn, st, err, errlen);
	if (r < 0)
		return r;
	close(ch[1]);
	ch[1] = -1;
	*sent = true;
	r = send_restore(p, slot, ch[0], dir, on_demand, fn, (int)img->checkpoint.channel_fd, NULL);
	close(ch[0]);
	ch[0] = -1;
	if (r < 0)
		phos_errf(err, errlen, "the pooled executor is gone");
	else
		r = restore_ready(p->ex[slot].ctl, false, bound, st, NULL, err, errlen);
	if (r < 0) {
		kill(fn, SIGKILL);
		waitpid(fn, NULL, 0);
		return r;
	}
	phos_criu_continue(fn);
	*ret_fn = fn;
	return 0;
}

/* phos_restore_pooled on executor given (held by the caller: a prepared
 * one), or on one taken now (given < 0). */
static int restore_pooled_at(struct phos_pool *p, int given, const char *dir, int stdin_fd, int stdout_fd,
			     int stderr_fd, unsigned timeout_ms, bool on_demand, const struct phos_restore_bound *bound,
			     struct phos_instance *ret_inst, struct phos_restore_stats *ret_stats, char *err,
			     size_t errlen)
{
	struct phos_restore_stats st = { 0 };
	struct phos_image *img = NULL;
	struct phos_criu_inherit inh[4];
	const int stdio[3] = { stdin_fd, stdout_fd, stderr_fd };
	int ch[2] = { -1, -1 }, slot = -1, r;
	double t0 = phos_now();
	pid_t fn = -1;
	size_t dlen = strlen(dir);
	bool sent = false;   /* the executor has a job (else it still waits for one) */
	struct share_job sj;

	*err = '\0';
	memset(ret_inst, 0, sizeof(*ret_inst));
	if (dlen == 0 || dlen >= PHOS_CTL_PATH_MAX || strchr(dir, '\n')) {
		phos_errf(err, errlen, "bad snapshot path");
		r = -EINVAL;
		goto out;
	}
	r = restore_plan(dir, stdio, &img, inh, err, errlen);
	if (r < 0)
		goto out;
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	slot = given >= 0 ? given : pool_take(p, timeout_ms);
	if (slot < 0) {
		phos_errf(err, errlen, "no warm executor free within %u ms", timeout_ms);
		r = -EBUSY;
		goto out;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ch) < 0) {
		r = -errno;
		phos_errf(err, errlen, "socketpair: %s", strerror(errno));
		goto out;
	}
	if (img->checkpoint.present) {
		r = pooled_checkpoint(p, slot, dir, img, inh, ch, on_demand, bound, &sent, &fn, &st, err, errlen);
		if (r < 0)
			goto out;
		goto started;
	}
	sent = true;
	share_begin(p, dir, &sj);
	r = send_restore(p, slot, ch[0], dir, on_demand, 0, 0, &sj);
	close(ch[0]);
	ch[0] = -1;
	if (r < 0) {
		share_end(p, dir, &sj, false);
		phos_errf(err, errlen, "the pooled executor is gone");
		goto out;
	}
	/* CRIU beside the GPU load, as in phos_restore_start. */
	r = restore_cpu(p->paths.criu, dir, img, inh, ch[1], p->ex[slot].ctl, false, bound, &fn, &st,
			sj.fill ? &sj.got : NULL, err, errlen);
	share_end(p, dir, &sj, r == 0);
	if (r < 0)
		goto out;
started:
	st.gpu_restore_s = st.ready_s = phos_now() - t0;
	ret_inst->fn_pid = fn;
	ret_inst->executor_pid = p->ex[slot].pid;
	ret_inst->control_fd = p->ex[slot].ctl;   /* the pool's: not closed by the instance */
	ret_inst->pool = p;
	ret_inst->slot = (unsigned)slot;
	ret_inst->give_back = pool_return;
	if (ret_stats)
		*ret_stats = st;
	r = 0;
out:
	for (int i = 0; i < 2; i++)
		if (ch[i] >= 0)
			close(ch[i]);
	if (r == -ETIMEDOUT && sent)
		pool_kill(p, (unsigned)slot);   /* it may be what hangs: replaced */
	else if (r < 0 && sent)
		pool_give(p, (unsigned)slot);   /* back once it has scrubbed itself */
	else if (r < 0 && given >= 0)
		phos_pool_unprepare(p, given);   /* nothing sent: it still holds the pre-copy */
	else if (r < 0 && slot >= 0)
		pool_untake(p, (unsigned)slot);  /* nothing sent: idle as it was */
	phos_image_free(img);
	return r;
}

int phos_restore_pooled(struct phos_pool *p, const char *dir, int stdin_fd, int stdout_fd, int stderr_fd,
			unsigned timeout_ms, bool on_demand, const struct phos_restore_bound *bound,
			struct phos_instance *ret_inst, struct phos_restore_stats *ret_stats, char *err, size_t errlen)
{
	return restore_pooled_at(p, -1, dir, stdin_fd, stdout_fd, stderr_fd, timeout_ms, on_demand, bound, ret_inst,
				 ret_stats, err, errlen);
}

int phos_pool_prepare(struct phos_pool *p, const char *dir, unsigned timeout_ms, int *ret_slot, uint64_t *ret_bytes,
		      uint64_t *ret_free, char *err, size_t errlen)
{
	struct phos_ctl_msg m = { .type = PHOS_CTL_PREPARE, .fd = -1 };
	struct pool_exec *e;
	char why[512] = "";
	int slot, r;

	*err = '\0';
	if (!dir[0] || strlen(dir) >= PHOS_CTL_PATH_MAX) {
		phos_errf(err, errlen, "bad pre-copy path");
		return -EINVAL;
	}
	slot = pool_take(p, timeout_ms);
	if (slot < 0) {
		phos_errf(err, errlen, "no warm executor free within %u ms", timeout_ms);
		return -EBUSY;
	}
	e = &p->ex[slot];
	snprintf(m.prepare.dir, sizeof(m.prepare.dir), "%s", dir);
	r = phos_ctl_send(e->ctl, &m);
	/* Pinning takes about 35 ms per GiB. */
	if (r == 0)
		r = exec_recv(e, 600000, &m, why, sizeof(why));
	if (r < 0) {
		phos_errf(err, errlen, "the pooled executor: %s", recv_why(r, why));
	} else {
		if (m.type != PHOS_CTL_PREPARED) {
			phos_errf(err, errlen, "%s", m.type == PHOS_CTL_ERROR ? m.error.reason : phos_ctl_type_name(m.type));
			r = -EIO;
		} else {
			*ret_bytes = m.prepared.bytes;
			*ret_free = m.prepared.free;
		}
		phos_ctl_msg_exit(&m);
	}
	/* then its IDLE: it waits for the restore (or UNPREPARE), held for us */
	if (r == 0 && (r = exec_recv(e, 30000, &m, why, sizeof(why))) == 0) {
		if (m.type != PHOS_CTL_IDLE) {
			phos_errf(err, errlen, "the pooled executor said %s after prepared", phos_ctl_type_name(m.type));
			r = -EPROTO;
		}
		phos_ctl_msg_exit(&m);
	}
	if (r < 0) {
		pool_give(p, (unsigned)slot);   /* reads on to its IDLE, or replaces it */
		return r;
	}
	*ret_slot = slot;
	return 0;
}

void phos_pool_unprepare(struct phos_pool *p, int slot)
{
	if (slot < 0 || (unsigned)slot >= p->n)
		return;
	if (phos_ctl_send(p->ex[slot].ctl, &(struct phos_ctl_msg){ .type = PHOS_CTL_UNPREPARE, .fd = -1 }) < 0)
		phos_warn("pool: executor %d is gone", (int)p->ex[slot].pid);
	pool_give(p, (unsigned)slot);   /* reads its IDLE, or replaces it */
}

int phos_restore_prepared(struct phos_pool *p, int slot, const char *dir, int stdin_fd, int stdout_fd, int stderr_fd,
			  bool on_demand, const struct phos_restore_bound *bound, struct phos_instance *ret_inst,
			  struct phos_restore_stats *ret_stats, char *err, size_t errlen)
{
	if (slot < 0 || (unsigned)slot >= p->n) {
		phos_errf(err, errlen, "no such prepared executor");
		return -EINVAL;
	}
	return restore_pooled_at(p, slot, dir, stdin_fd, stdout_fd, stderr_fd, 0, on_demand, bound, ret_inst,
				 ret_stats, err, errlen);
}

int phos_restore_parked(struct phos_pool *p, const char *dir, struct phos_parked *parked, unsigned timeout_ms,
			bool on_demand, const struct phos_restore_bound *bound, struct phos_instance *ret_inst,
			struct phos_restore_stats *ret_stats, char *err, size_t errlen)
{
	struct phos_restore_stats st = { 0 };
	double t0 = phos_now();
	size_t dlen = strlen(dir);
	struct share_job sj;
	int slot, r;

	*err = '\0';
	memset(ret_inst, 0, sizeof(*ret_inst));
	if (dlen == 0 || dlen >= PHOS_CTL_PATH_MAX || strchr(dir, '\n') || parked->fn_pid <= 0 || parked->channel < 0) {
		phos_errf(err, errlen, "bad snapshot path or parked process");
		return -EINVAL;
	}
	slot = pool_take(p, timeout_ms);
	if (slot < 0) {
		phos_errf(err, errlen, "no warm executor free within %u ms", timeout_ms);
		return -EBUSY;   /* the parked process stays parked */
	}
	share_begin(p, dir, &sj);
	r = send_restore(p, slot, parked->channel, dir, on_demand, 0, 0, &sj);
	close(parked->channel);
	parked->channel = -1;
	if (r < 0)
		phos_errf(err, errlen, "the pooled executor is gone");
	else
		r = restore_ready(p->ex[slot].ctl, false, bound, &st, sj.fill ? &sj.got : NULL, err, errlen);
	share_end(p, dir, &sj, r == 0);
	if (r < 0) {
		phos_parked_drop(parked);
		if (r == -ETIMEDOUT)
			pool_kill(p, (unsigned)slot);   /* it may be what hangs: replaced */
		else
			pool_give(p, (unsigned)slot);
		return r;
	}
	st.cpu_restore_s = parked->criu_s;   /* done ahead, off this path */
	st.gpu_restore_s = st.ready_s = phos_now() - t0;
	ret_inst->fn_pid = parked->fn_pid;
	ret_inst->executor_pid = p->ex[slot].pid;
	ret_inst->control_fd = p->ex[slot].ctl;
	ret_inst->pool = p;
	ret_inst->slot = (unsigned)slot;
	ret_inst->give_back = pool_return;
	parked->fn_pid = 0;
	if (ret_stats)
		*ret_stats = st;
	return 0;
}

int phos_pool_lend(struct phos_pool *p, unsigned timeout_ms, int *ret_channel, struct phos_lease *ret_lease)
{
	struct phos_ctl_msg m = { .type = PHOS_CTL_SERVE };
	int ch[2], slot, r;

	slot = pool_take(p, timeout_ms);
	if (slot < 0)
		return -EBUSY;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ch) < 0) {
		r = -errno;
		pool_give(p, (unsigned)slot);
		return r;
	}
	m.fd = ch[0];
	r = phos_ctl_send(p->ex[slot].ctl, &m);
	close(ch[0]);
	if (r < 0) {
		close(ch[1]);
		pool_give(p, (unsigned)slot);
		return r;
	}
	*ret_channel = ch[1];
	*ret_lease = (struct phos_lease){ .pool = p, .slot = (unsigned)slot, .executor_pid = p->ex[slot].pid };
	return 0;
}

void phos_pool_lend_end(struct phos_lease *lease)
{
	if (lease->pool)
		pool_give(lease->pool, lease->slot);
	lease->pool = NULL;
}
