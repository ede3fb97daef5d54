/* SPDX-License-Identifier: MIT */
/*
 * NCCL on the sim device (nccl_dev.h): host-memory collectives between the
 * executors of several function processes, one rank each.
 *
 * The segment of a communicator (shm_open, named from a hash of its unique id):
 *
 *   +--------+-------------------+------------------------+----------------------+
 *   | header | rank[n]: pid,     | slot[2][n]             | pipe[n][n]           |
 *   | magic, | state, color, key | SIM_SLOT bytes each    | (from, to): head,    |
 *   | barrier|                   | (collective steps,     | tail, SIM_PIPE bytes |
 *   | failed |                   |  halves alternate)     | (send/recv, in order)|
 *   +--------+-------------------+------------------------+----------------------+
 *
 * Device memory on sim is host memory at the arena addresses of this process,
 * so buffers are read and written directly. Work is done when the call
 * returns (sim device semantics), so streams play no part.
 *
 * Nonblocking communicators (params.blocking == 0: the executor makes every
 * communicator of several ranks so, since ranks that are threads of one
 * function share its one dispatcher): their join outside a group, each
 * collective outside a group and each group end that involves them run on a
 * thread of their own and answer ncclInProgress at once; async_error answers
 * ncclInProgress until that work is done, then its result (the function's
 * stand-in polls it). One such call at a time per communicator.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "nccl_dev.h"
#include "nccl_sim_reduce.h"

#define SIM_MAX_RANKS 8
#define SIM_SLOT (256u << 10)
#define SIM_PIPE (64u << 10)
#define SIM_MAGIC 0x70686e63u          /* "phnc" */
static const char sim_id_magic[8] = "phosncl1";

enum { RANK_ABSENT = 0, RANK_JOINED = 1, RANK_LEFT = 2 };

struct sim_rank {
	_Atomic int32_t pid;
	_Atomic uint32_t state;
	_Atomic int32_t color, key;      /* split: published before its barrier */
};

struct sim_pipe {
	_Atomic uint64_t head, tail;     /* bytes written, read */
};

struct sim_seg {
	_Atomic uint32_t magic;          /* set last by the creator */
	uint32_t nranks;
	_Atomic uint32_t joined;         /* ranks that attached */
	_Atomic uint32_t attached;       /* ranks still attached */
	_Atomic uint32_t arrived, gen;   /* the barrier */
	_Atomic int32_t failed;          /* ncclResult_t every later call gets */
	uint32_t _pad;
	struct sim_rank rank[SIM_MAX_RANKS];
	struct sim_pipe pipe[SIM_MAX_RANKS][SIM_MAX_RANKS];
	/* then slot[2][nranks][SIM_SLOT], pipe data[nranks][nranks][SIM_PIPE] */
};

struct sim_comm {
	struct sim_seg *seg;
	size_t len;
	int nranks, rank;
	uint8_t id[PHOS_NCCL_ID_BYTES];
	uint64_t steps;                  /* barriers passed: the half a step uses */
	uint32_t splits;                 /* splits made from it: the children's ids */
	_Atomic int error;               /* sticky */
	bool nb;                         /* nonblocking (above) */
	_Atomic int busy;                /* threads at work on it (nonblocking) */
	atomic_bool cancel;              /* aborted: its waits end at once */
};

static size_t seg_len(int nranks)
{
	return sizeof(struct sim_seg) + 2ull * nranks * SIM_SLOT + (size_t)nranks * nranks * SIM_PIPE;
}

static uint8_t *slot(struct sim_comm *c, unsigned half, int rank)
{
	return (uint8_t *)(c->seg + 1) + ((size_t)half * c->nranks + rank) * SIM_SLOT;
}

static uint8_t *pipe_data(struct sim_comm *c, int from, int to)
{
	return (uint8_t *)(c->seg + 1) + 2ull * c->nranks * SIM_SLOT + ((size_t)from * c->nranks + to) * SIM_PIPE;
}

static void seg_name(const uint8_t id[PHOS_NCCL_ID_BYTES], char *name, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a */

	for (int i = 0; i < PHOS_NCCL_ID_BYTES; i++)
		h = (h ^ id[i]) * 0x100000001b3ull;
	snprintf(name, len, "/phos-nccl-%016llx", (unsigned long long)h);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double timeout_s(void)
{
	const char *e = getenv("PHOS_NCCL_TIMEOUT_MS");
	long ms = e && *e ? strtol(e, NULL, 10) : 0;

	return (ms > 0 ? ms : 60000) / 1000.0;
}

/* Whether process pid still runs (a zombie does not). */
static bool pid_alive(int pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	if (pid <= 0)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno != ENOENT;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return true;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return !(p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
}

/* The failure every rank sees from now on. */
static int seg_fail(struct sim_comm *c, int res)
{
	int32_t none = 0;

	if (!c->seg)
		return c->error = c->error ? c->error : res;
	atomic_compare_exchange_strong(&c->seg->failed, &none, res);
	c->error = atomic_load(&c->seg->failed);
	return c->error;
}

/* Waits for cond(arg) while every peer that needs(arg, rank) says the wait
 * still depends on lives (needs NULL: every peer), nobody failed or aborted
 * and the deadline is ahead. Returns 0 or an ncclResult_t. */
static int sim_wait_on(struct sim_comm *c, bool (*cond)(struct sim_comm *, void *), void *arg, const char *what,
		       bool (*needs)(void *, int rank))
{
	double start = now_s(), limit = timeout_s(), last_check = start;
	unsigned spins = 0;

	for (;;) {
		double t;

		if (cond(c, arg))
			return 0;
		if (atomic_load(&c->seg->failed))
			return seg_fail(c, 0);
		if (atomic_load(&c->cancel))
			return seg_fail(c, PHOS_NCCL_REMOTE_ERROR);
		if (spins < 64) {
			spins++;
			sched_yield();
			continue;
		}
		t = now_s();
		if (t - last_check > 0.005) {
			last_check = t;
			for (int r = 0; r < c->nranks; r++) {
				uint32_t st = atomic_load(&c->seg->rank[r].state);

				if (r == c->rank || (needs && !needs(arg, r)))
					continue;
				if (st == RANK_LEFT || (st == RANK_JOINED && !pid_alive(atomic_load(&c->seg->rank[r].pid)))) {
					phos_warn("nccl sim: rank %d of %d is gone (%s) while rank %d waits in %s", r,
						  c->nranks, st == RANK_LEFT ? "left" : "its executor exited", c->rank, what);
					return seg_fail(c, PHOS_NCCL_REMOTE_ERROR);
				}
			}
		}
		if (t - start > limit) {
			phos_warn("nccl sim: rank %d of %d waited %.0f s in %s: giving up", c->rank, c->nranks, limit, what);
			return seg_fail(c, PHOS_NCCL_SYSTEM_ERROR);
		}
		{
			struct timespec ts = { 0, 50000 };

			nanosleep(&ts, NULL);
		}
	}
}

static int sim_wait(struct sim_comm *c, bool (*cond)(struct sim_comm *, void *), void *arg, const char *what)
{
	return sim_wait_on(c, cond, arg, what, NULL);
}

static bool gen_moved(struct sim_comm *c, void *arg)
{
	return atomic_load_explicit(&c->seg->gen, memory_order_acquire) != *(uint32_t *)arg;
}

/* Every rank arrives before any leaves. */
static int barrier(struct sim_comm *c, const char *what)
{
	struct sim_seg *s = c->seg;
	uint32_t g = atomic_load_explicit(&s->gen, memory_order_acquire);
	int r;

	if (c->error)
		return c->error;
	if (atomic_fetch_add(&s->arrived, 1) == (uint32_t)c->nranks - 1) {
		atomic_store(&s->arrived, 0);
		atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);
		r = 0;
	} else {
		r = sim_wait(c, gen_moved, &g, what);
	}
	if (r == 0)
		c->steps++;
	return r;
}

/* --- ids, init, teardown --- */

static int sim_version(int *ret_version)
{
	*ret_version = PHOS_NCCL_VERSION_CODE;
	return 0;
}

static int sim_unique_id(uint8_t ret_id[PHOS_NCCL_ID_BYTES])
{
	memset(ret_id, 0, PHOS_NCCL_ID_BYTES);
	memcpy(ret_id, sim_id_magic, sizeof(sim_id_magic));
	if (getrandom(ret_id + 8, 16, 0) != 16)
		return PHOS_NCCL_SYSTEM_ERROR;
	return 0;
}

static bool all_joined(struct sim_comm *c, void *arg)
{
	(void)arg;
	return atomic_load(&c->seg->joined) == (uint32_t)c->nranks;
}

/* Drops what comm_join mapped (c stays allocated). */
static void seg_drop(struct sim_comm *c)
{
	if (c->seg)
		munmap(c->seg, c->len);
	c->seg = NULL;
}

static void comm_unmap(struct sim_comm *c)
{
	seg_drop(c);
	free(c);
}

/* Joins the communicator of id as rank c->rank of c->nranks: creates or maps
 * its segment and waits until every rank joined. On failure c->seg is NULL. */
static int comm_join(struct sim_comm *c, const uint8_t id[PHOS_NCCL_ID_BYTES])
{
	char name[64];
	double deadline = now_s() + timeout_s();
	int fd = -1, r;
	uint32_t absent = RANK_ABSENT;

	seg_name(id, name, sizeof(name));
	if (c->rank == 0) {
		fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0) {
			phos_warn("nccl sim: cannot create %s: %s (unique id used twice?)", name, strerror(errno));
			return errno == EEXIST ? PHOS_NCCL_INVALID_USAGE : PHOS_NCCL_SYSTEM_ERROR;
		}
		if (ftruncate(fd, (off_t)c->len) < 0)
			goto sys_fail;
	} else {
		struct stat st;

		for (;;) {   /* rank 0 may come later */
			fd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
			if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size >= c->len)
				break;
			if (fd >= 0)
				close(fd);
			fd = -1;
			if (now_s() > deadline || atomic_load(&c->cancel)) {
				phos_warn("nccl sim: rank %d: rank 0 never created the communicator", c->rank);
				return PHOS_NCCL_SYSTEM_ERROR;
			}
			usleep(1000);
		}
	}
	c->seg = mmap(NULL, c->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (c->seg == MAP_FAILED) {
		c->seg = NULL;
		goto sys_fail;
	}
	close(fd);
	fd = -1;
	if (c->rank == 0) {
		c->seg->nranks = (uint32_t)c->nranks;
		atomic_store_explicit(&c->seg->magic, SIM_MAGIC, memory_order_release);
	} else {
		while (atomic_load_explicit(&c->seg->magic, memory_order_acquire) != SIM_MAGIC) {
			if (now_s() > deadline || atomic_load(&c->cancel))
				goto sys_fail;
			usleep(1000);
		}
		if (c->seg->nranks != (uint32_t)c->nranks) {
			phos_warn("nccl sim: rank %d says %d ranks, rank 0 said %u", c->rank, c->nranks, c->seg->nranks);
			seg_drop(c);
			return PHOS_NCCL_INVALID_ARGUMENT;
		}
	}
	atomic_store(&c->seg->rank[c->rank].pid, (int32_t)getpid());
	if (!atomic_compare_exchange_strong(&c->seg->rank[c->rank].state, &absent, RANK_JOINED)) {
		phos_warn("nccl sim: rank %d joined twice", c->rank);
		seg_drop(c);
		return PHOS_NCCL_INVALID_USAGE;
	}
	atomic_fetch_add(&c->seg->attached, 1);
	/* Everyone has it mapped once the last rank joined: the name can go. */
	if (atomic_fetch_add(&c->seg->joined, 1) == (uint32_t)c->nranks - 1)
		shm_unlink(name);
	r = sim_wait(c, all_joined, NULL, "ncclCommInitRank");
	if (r) {
		/* A failed init leaves no name behind: it may still be there if some
		 * rank never joined. */
		shm_unlink(name);
		atomic_store(&c->seg->rank[c->rank].state, RANK_LEFT);
		seg_drop(c);
		return r;
	}
	return 0;

sys_fail:
	phos_warn("nccl sim: communicator segment %s: %s", name, strerror(errno));
	if (fd >= 0)
		close(fd);
	if (c->rank == 0)
		shm_unlink(name);
	seg_drop(c);
	return PHOS_NCCL_SYSTEM_ERROR;
}

static int group_queue_init(struct sim_comm *c);
static int bg_join(struct sim_comm *c);

/* Inside a group (ncclGroupStart), the join waits for ncclGroupEnd, which
 * joins every queued rank at once: one process may so make every rank of a
 * communicator (ncclCommInitAll, or InitRank per device in a group). A
 * nonblocking one outside a group joins on a thread of its own. */
static int sim_init(const uint8_t id[PHOS_NCCL_ID_BYTES], const struct phos_nccl_params *p, void **ret_comm)
{
	struct sim_comm *c;
	int r;

	if (memcmp(id, sim_id_magic, sizeof(sim_id_magic)) != 0) {
		phos_warn("nccl sim: the unique id was not made by ncclGetUniqueId of a sim executor");
		return PHOS_NCCL_INVALID_ARGUMENT;
	}
	if (p->nranks > SIM_MAX_RANKS) {
		phos_warn("nccl sim: %d ranks: the sim device has at most %d", p->nranks, SIM_MAX_RANKS);
		return PHOS_NCCL_INVALID_ARGUMENT;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return PHOS_NCCL_SYSTEM_ERROR;
	c->nranks = p->nranks;
	c->rank = p->rank;
	c->len = seg_len(p->nranks);
	memcpy(c->id, id, PHOS_NCCL_ID_BYTES);
	c->nb = p->blocking == 0;
	r = group_queue_init(c);
	if (r == 1) {
		*ret_comm = c;
		return 0;
	}
	if (r == 0 && c->nb) {
		r = bg_join(c);
		if (r == 0) {
			*ret_comm = c;
			return PHOS_NCCL_IN_PROGRESS;
		}
	} else if (r == 0) {
		r = comm_join(c, id);
	}
	if (r) {
		free(c);
		return r;
	}
	*ret_comm = c;
	return 0;
}

static void leave(struct sim_comm *c)
{
	if (c->seg) {   /* not a rank whose join failed or never ran */
		atomic_store(&c->seg->rank[c->rank].state, RANK_LEFT);
		atomic_fetch_sub(&c->seg->attached, 1);
	}
	comm_unmap(c);
}

/* Ends the work of c's threads (cancelled: their waits fail at once). */
static void bg_end(struct sim_comm *c)
{
	atomic_store(&c->cancel, true);
	while (atomic_load(&c->busy))
		usleep(100);
}

static int sim_finalize(void *comm)
{
	struct sim_comm *c = comm;

	if (atomic_load(&c->busy))
		return PHOS_NCCL_IN_PROGRESS;
	return c->error;   /* sim work is done when its call returns */
}

static int sim_destroy(void *comm)
{
	struct sim_comm *c = comm;

	if (atomic_load(&c->busy)) {
		phos_warn("nccl sim: rank %d of %d destroyed while a call on it is in progress: aborted", c->rank,
			  c->nranks);
		bg_end(c);
	}
	leave(c);
	return 0;
}

static int sim_abort(void *comm)
{
	struct sim_comm *c = comm;

	bg_end(c);
	/* Peers waiting on this rank get ncclRemoteError now rather than later. */
	seg_fail(c, PHOS_NCCL_REMOTE_ERROR);
	leave(c);
	return 0;
}

static int sim_async_error(void *comm, int *ret_error)
{
	struct sim_comm *c = comm;

	/* What this rank met (a failed wait copies the segment's failure here),
	 * as NCCL reports what its own operations met: a peer that ended after
	 * the last collective is no error of this one. */
	if (atomic_load(&c->busy))
		*ret_error = PHOS_NCCL_IN_PROGRESS;
	else
		*ret_error = c->error ? c->error : c->seg ? 0 : PHOS_NCCL_INVALID_USAGE;
	return 0;
}

/* --- collectives --- */

static int collective(struct sim_comm *c, const struct phos_nccl_coll *k)
{
	size_t ts = phos_nccl_type_size(k->type);
	bool reduces = k->kind == PHOS_NCCL_ALL_REDUCE || k->kind == PHOS_NCCL_REDUCE ||
		       k->kind == PHOS_NCCL_REDUCE_SCATTER;
	size_t per = SIM_SLOT / ts / (k->kind == PHOS_NCCL_REDUCE_SCATTER ? c->nranks : 1);
	const uint8_t *send = (const uint8_t *)(uintptr_t)k->send;
	uint8_t *recv = (uint8_t *)(uintptr_t)k->recv;
	int n = c->nranks, me = c->rank, root = k->peer;

	if (c->error)
		return c->error;
	if (reduces && (k->type == PHOS_NCCL_FLOAT8E4M3 || k->type == PHOS_NCCL_FLOAT8E5M2)) {
		phos_warn("nccl sim: reductions of 8-bit floats are not simulated");
		return PHOS_NCCL_INVALID_USAGE;
	}
	for (uint64_t off = 0; off < k->count; off += per) {
		size_t cnt = k->count - off < per ? (size_t)(k->count - off) : per, bytes = cnt * ts;
		unsigned half = c->steps & 1;
		int r;

		/* publish */
		switch (k->kind) {
		case PHOS_NCCL_BROADCAST:
			if (me == root)
				memcpy(slot(c, half, me), send + off * ts, bytes);
			break;
		case PHOS_NCCL_REDUCE_SCATTER:
			for (int d = 0; d < n; d++)
				memcpy(slot(c, half, me) + d * bytes, send + ((uint64_t)d * k->count + off) * ts, bytes);
			break;
		default:
			memcpy(slot(c, half, me), send + off * ts, bytes);
			break;
		}
		r = barrier(c, "a collective");
		if (r)
			return r;
		/* consume, in rank order on every rank (same rounding everywhere) */
		switch (k->kind) {
		case PHOS_NCCL_BROADCAST:
			memcpy(recv + off * ts, slot(c, half, root), bytes);
			break;
		case PHOS_NCCL_ALL_GATHER:
			for (int s = 0; s < n; s++)
				memcpy(recv + ((uint64_t)s * k->count + off) * ts, slot(c, half, s), bytes);
			break;
		case PHOS_NCCL_REDUCE:
			if (me != root)
				break;
			/* fall through */
		case PHOS_NCCL_ALL_REDUCE:
		case PHOS_NCCL_REDUCE_SCATTER: {
			size_t at = k->kind == PHOS_NCCL_REDUCE_SCATTER ? (size_t)me * bytes : 0;
			uint8_t *out = recv + off * ts;

			memcpy(out, slot(c, half, 0) + at, bytes);
			for (int s = 1; s < n; s++)
				phos_nccl_reduce_into(k->type, k->op, out, slot(c, half, s) + at, cnt);
			phos_nccl_reduce_finish(k->type, k->op, out, cnt, n);
			break;
		}
		default:
			break;
		}
	}
	return 0;
}

/* --- send/recv: progressed together, as a group's are --- */

struct p2p {
	struct sim_comm *c;
	const struct phos_nccl_coll *k;
	uint64_t done, total;
};

/* Moves what the pipe allows; returns whether anything moved. */
static bool p2p_progress(struct p2p *p)
{
	struct sim_comm *c = p->c;
	bool send = p->k->kind == PHOS_NCCL_SEND;
	int from = send ? c->rank : p->k->peer, to = send ? p->k->peer : c->rank;
	struct sim_pipe *pp = &c->seg->pipe[from][to];
	uint8_t *data = pipe_data(c, from, to);
	uint64_t head = atomic_load_explicit(&pp->head, memory_order_acquire);
	uint64_t tail = atomic_load_explicit(&pp->tail, memory_order_acquire);
	uint64_t can = send ? SIM_PIPE - (head - tail) : head - tail, n = p->total - p->done;
	uint64_t pos = send ? head : tail;
	uint8_t *buf = (uint8_t *)(uintptr_t)(send ? p->k->send : p->k->recv) + p->done;

	if (n > can)
		n = can;
	if (n == 0)
		return false;
	for (uint64_t moved = 0; moved < n;) {
		uint64_t at = (pos + moved) % SIM_PIPE, run = SIM_PIPE - at;

		if (run > n - moved)
			run = n - moved;
		if (send)
			memcpy(data + at, buf + moved, run);
		else
			memcpy(buf + moved, data + at, run);
		moved += run;
	}
	if (send)
		atomic_store_explicit(&pp->head, head + n, memory_order_release);
	else
		atomic_store_explicit(&pp->tail, tail + n, memory_order_release);
	p->done += n;
	return true;
}

struct p2p_set {
	struct p2p *ops;
	size_t n;
};

static bool p2p_all_moved(struct sim_comm *c, void *arg)
{
	struct p2p_set *set = arg;
	bool all = true;

	(void)c;
	for (size_t i = 0; i < set->n; i++) {
		while (set->ops[i].done < set->ops[i].total && p2p_progress(&set->ops[i]))
			;
		all = all && set->ops[i].done == set->ops[i].total;
	}
	return all;
}

/* Whether an op of the first one's communicator still waits on rank. */
static bool p2p_needs(void *arg, int rank)
{
	struct p2p_set *set = arg;

	for (size_t i = 0; i < set->n; i++)
		if (set->ops[i].c == set->ops[0].c && set->ops[i].k->peer == rank &&
		    set->ops[i].done < set->ops[i].total)
			return true;
	return false;
}

static int p2p_run(struct p2p *ops, size_t n)
{
	struct p2p_set set = { ops, n };
	int r;

	if (n == 0)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (ops[i].c->error)
			return ops[i].c->error;
		ops[i].total = ops[i].k->count * phos_nccl_type_size(ops[i].k->type);
	}
	/* Waits on the first op's communicator for the peers of its ops not done
	 * yet (a peer that finished its part and left is no failure); the others'
	 * failures show through their failed flags as soon as their ops cannot
	 * move. */
	r = sim_wait_on(ops[0].c, p2p_all_moved, &set, "send/recv", p2p_needs);
	for (size_t i = 1; r == 0 && i < n; i++)
		r = atomic_load(&ops[i].c->seg->failed);
	return r;
}

/* --- groups --- */

/* A queued call: a collective or send/recv, or the join of a rank made by
 * ncclCommInitRank inside the group (init). */
struct queued {
	struct sim_comm *c;
	struct phos_nccl_coll k;
	bool init;
};

static struct {
	int depth;
	struct queued *q;
	size_t n, cap;
	int error;   /* of queuing */
} group;

static int sim_group_start(void)
{
	group.depth++;
	return 0;
}

static int group_push(struct queued one)
{
	if (group.n == group.cap) {
		size_t cap = group.cap ? group.cap * 2 : 16;
		struct queued *q = realloc(group.q, cap * sizeof(*q));

		if (!q)
			return group.error = PHOS_NCCL_SYSTEM_ERROR;
		group.q = q;
		group.cap = cap;
	}
	group.q[group.n++] = one;
	return 0;
}

/* 1 when c's join is queued for the group's end, 0 when there is no group. */
static int group_queue_init(struct sim_comm *c)
{
	if (group.depth == 0)
		return 0;
	return group_push((struct queued){ .c = c, .init = true }) ? group.error : 1;
}

static int run_ops(struct queued *q, size_t n)
{
	struct p2p *p2p = calloc(n ? n : 1, sizeof(*p2p));
	size_t np = 0;
	int r = 0;

	if (!p2p)
		return PHOS_NCCL_SYSTEM_ERROR;
	/* Collectives in issue order (every rank issues them in the same order),
	 * then every send and receive together. */
	for (size_t i = 0; i < n && r == 0; i++) {
		if (!q[i].c->seg)   /* a rank whose join failed */
			r = q[i].c->error ? q[i].c->error : PHOS_NCCL_INVALID_USAGE;
		else if (q[i].k.kind == PHOS_NCCL_SEND || q[i].k.kind == PHOS_NCCL_RECV)
			p2p[np++] = (struct p2p){ .c = q[i].c, .k = &q[i].k };
		else
			r = collective(q[i].c, &q[i].k);
	}
	if (r == 0)
		r = p2p_run(p2p, np);
	free(p2p);
	return r;
}

/* One thread of a group's end: a rank's join, or every call of one
 * communicator (ranks of one process progress together, as NCCL's do). */
struct group_part {
	pthread_t th;
	struct queued *q;
	size_t n;
	bool init;
	int r;
};

static void *group_part_main(void *arg)
{
	struct group_part *g = arg;

	if (g->init) {
		g->r = comm_join(g->q->c, g->q->c->id);
		if (g->r)
			g->q->c->error = g->r;
	} else {
		g->r = run_ops(g->q, g->n);
	}
	return NULL;
}

/* Runs parts[0..n) each on a thread of its own (the first on this one);
 * returns the first failure. */
static int run_parts(struct group_part *parts, size_t n)
{
	int r = 0;

	for (size_t i = 1; i < n; i++) {
		if (pthread_create(&parts[i].th, NULL, group_part_main, &parts[i])) {
			parts[i].r = PHOS_NCCL_SYSTEM_ERROR;
			parts[i].n = (size_t)-1;   /* not started */
		}
	}
	if (n)
		group_part_main(&parts[0]);
	for (size_t i = 0; i < n; i++) {
		if (i && parts[i].n != (size_t)-1)
			pthread_join(parts[i].th, NULL);
		if (parts[i].init && parts[i].r)
			parts[i].q->c->error = parts[i].r;
		if (!r)
			r = parts[i].r;
	}
	return r;
}

/* A group's end: queued joins all at once, then the calls, one thread per
 * communicator when there are several (one process driving several ranks;
 * on one thread they would wait for each other). */
static int run_group(struct queued *q, size_t n)
{
	struct group_part *parts = calloc(n ? n : 1, sizeof(*parts));
	struct queued *sorted = calloc(n ? n : 1, sizeof(*sorted));
	size_t np = 0, nops = 0;
	int r = 0;

	if (!parts || !sorted) {
		free(parts);
		free(sorted);
		return PHOS_NCCL_SYSTEM_ERROR;
	}
	for (size_t i = 0; i < n; i++) {
		if (q[i].init)
			parts[np++] = (struct group_part){ .q = &q[i], .n = 1, .init = true };
	}
	r = run_parts(parts, np);
	/* the calls, grouped by communicator, each group in issue order */
	np = 0;
	for (size_t i = 0; r == 0 && i < n; i++) {
		bool seen = false;

		if (q[i].init)
			continue;
		for (size_t j = 0; j < i && !seen; j++)
			seen = !q[j].init && q[j].c == q[i].c;
		if (seen)
			continue;
		parts[np] = (struct group_part){ .q = &sorted[nops] };
		for (size_t j = i; j < n; j++) {
			if (!q[j].init && q[j].c == q[i].c)
				sorted[nops++] = q[j];
		}
		parts[np].n = (size_t)(&sorted[nops] - parts[np].q);
		np++;
	}
	if (r == 0)
		r = np <= 1 ? run_ops(sorted, nops) : run_parts(parts, np);
	free(parts);
	free(sorted);
	return r;
}

/* --- nonblocking communicators: their work on a thread of its own --- */

struct bg {
	struct sim_comm **comms;     /* those it works for, each counted busy once */
	size_t ncomms;
	struct queued *q;            /* owned */
	size_t n;
	enum { BG_JOIN, BG_OPS, BG_GROUP } what;
};

static void bg_free(struct bg *b)
{
	if (b) {
		free(b->comms);
		free(b->q);
		free(b);
	}
}

static void *bg_main(void *arg)
{
	struct bg *b = arg;
	int r;

	if (b->what == BG_JOIN)
		r = comm_join(b->comms[0], b->comms[0]->id);
	else if (b->what == BG_GROUP)
		r = run_group(b->q, b->n);
	else
		r = run_ops(b->q, b->n);
	for (size_t i = 0; i < b->ncomms; i++) {
		if (r && !b->comms[i]->error)
			b->comms[i]->error = r;   /* what async_error answers from now on */
	}
	/* the last touch of the communicators: after it they may be freed */
	for (size_t i = 0; i < b->ncomms; i++)
		atomic_fetch_sub(&b->comms[i]->busy, 1);
	b->ncomms = 0;
	bg_free(b);
	return NULL;
}

/* Starts b (taken over) on a detached thread; 0 or an ncclResult_t. A
 * communicator with work in progress is refused (ncclInvalidUsage), as NCCL
 * wants a nonblocking call polled to its end before the next. */
static int bg_start(struct bg *b)
{
	pthread_attr_t attr;
	pthread_t th;
	int r;

	for (size_t i = 0; i < b->ncomms; i++) {
		if (atomic_load(&b->comms[i]->busy)) {
			phos_warn("nccl sim: a call on rank %d of %d while its last one is still in progress",
				  b->comms[i]->rank, b->comms[i]->nranks);
			bg_free(b);
			return PHOS_NCCL_INVALID_USAGE;
		}
	}
	for (size_t i = 0; i < b->ncomms; i++)
		atomic_fetch_add(&b->comms[i]->busy, 1);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&th, &attr, bg_main, b);
	pthread_attr_destroy(&attr);
	if (r) {
		for (size_t i = 0; i < b->ncomms; i++)
			atomic_fetch_sub(&b->comms[i]->busy, 1);
		bg_free(b);
		return PHOS_NCCL_SYSTEM_ERROR;
	}
	return 0;
}

/* A bg for q[0..n) (copied) and the distinct communicators of it. */
static struct bg *bg_new(const struct queued *q, size_t n, int what)
{
	struct bg *b = calloc(1, sizeof(*b));

	if (!b || !(b->comms = calloc(n ? n : 1, sizeof(*b->comms))) || !(b->q = calloc(n ? n : 1, sizeof(*b->q)))) {
		bg_free(b);
		return NULL;
	}
	memcpy(b->q, q, n * sizeof(*q));
	b->n = n;
	b->what = what;
	for (size_t i = 0; i < n; i++) {
		bool seen = false;

		for (size_t j = 0; j < b->ncomms && !seen; j++)
			seen = b->comms[j] == q[i].c;
		if (!seen)
			b->comms[b->ncomms++] = q[i].c;
	}
	return b;
}

static int bg_join(struct sim_comm *c)
{
	struct queued one = { .c = c, .init = true };
	struct bg *b = bg_new(&one, 1, BG_JOIN);

	return b ? bg_start(b) : PHOS_NCCL_SYSTEM_ERROR;
}

/* Runs q[0..n) (run_ops or run_group) on a thread when a nonblocking
 * communicator is in it: 1 then, with the result in *ret (ncclInProgress, or
 * the failure to start); 0 when the caller runs them itself. */
static int bg_maybe(const struct queued *q, size_t n, int what, int *ret)
{
	struct bg *b;
	bool nb = false;

	for (size_t i = 0; i < n && !nb; i++)
		nb = q[i].c->nb;
	if (!nb)
		return 0;
	b = bg_new(q, n, what);
	*ret = b ? bg_start(b) : PHOS_NCCL_SYSTEM_ERROR;
	if (*ret == 0)
		*ret = PHOS_NCCL_IN_PROGRESS;
	return 1;
}

static int sim_group_end(void)
{
	int r;

	if (group.depth == 0)
		return PHOS_NCCL_INVALID_USAGE;
	if (--group.depth > 0)
		return 0;
	if (group.error)
		r = group.error;
	else if (!bg_maybe(group.q, group.n, BG_GROUP, &r))
		r = run_group(group.q, group.n);
	group.n = 0;
	group.error = 0;
	return r;
}

static int sim_coll(void *comm, const struct phos_nccl_coll *k, void *stream)
{
	struct queued one = { .c = comm, .k = *k };
	int r;

	(void)stream;
	if (group.depth > 0)
		return group_push(one);
	if (atomic_load(&one.c->busy))
		return PHOS_NCCL_INVALID_USAGE;
	if (!one.c->seg)
		return one.c->error ? one.c->error : PHOS_NCCL_INVALID_USAGE;
	if (bg_maybe(&one, 1, BG_OPS, &r))
		return r;
	return run_ops(&one, 1);
}

/* --- split --- */

struct member { int color, key, rank; };

static int member_cmp(const void *a, const void *b)
{
	const struct member *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->rank - y->rank;
}

static int sim_split(void *comm, int color, int key, void **ret_comm, int *ret_nranks, int *ret_rank)
{
	struct sim_comm *c = comm;
	struct member m[SIM_MAX_RANKS];
	struct phos_nccl_params p = { 0 };
	uint8_t id[PHOS_NCCL_ID_BYTES];
	int n = 0, me = -1, r;

	if (c->error)
		return c->error;
	if (atomic_load(&c->busy) || !c->seg)
		return PHOS_NCCL_INVALID_USAGE;
	atomic_store(&c->seg->rank[c->rank].color, color);
	atomic_store(&c->seg->rank[c->rank].key, key);
	r = barrier(c, "ncclCommSplit");
	if (r)
		return r;
	for (int i = 0; i < c->nranks; i++) {
		int ci = atomic_load(&c->seg->rank[i].color);

		if (ci == color && color != PHOS_NCCL_SPLIT_NOCOLOR)
			m[n++] = (struct member){ ci, atomic_load(&c->seg->rank[i].key), i };
	}
	/* Everyone has read the colors before anyone's next split writes them. */
	r = barrier(c, "ncclCommSplit");
	if (r)
		return r;
	c->splits++;
	if (color == PHOS_NCCL_SPLIT_NOCOLOR) {
		*ret_comm = NULL;
		return 0;
	}
	qsort(m, n, sizeof(m[0]), member_cmp);
	for (int i = 0; i < n; i++)
		if (m[i].rank == c->rank)
			me = i;
	/* The child's id: the parent's, the split's number and the color. */
	memcpy(id, c->id, sizeof(id));
	memcpy(id + 24, &c->splits, sizeof(c->splits));
	memcpy(id + 28, &color, sizeof(color));
	p.nranks = n;
	p.rank = me;
	p.blocking = -1;   /* the child is made here and now */
	r = sim_init(id, &p, ret_comm);
	if (r == 0) {
		*ret_nranks = n;
		*ret_rank = me;
	}
	return r;
}

const struct phos_nccl_ops phos_nccl_sim = {
	.name = "sim",
	.version = sim_version,
	.unique_id = sim_unique_id,
	.init = sim_init,
	.split = sim_split,
	.finalize = sim_finalize,
	.destroy = sim_destroy,
	.abort = sim_abort,
	.async_error = sim_async_error,
	.group_start = sim_group_start,
	.group_end = sim_group_end,
	.coll = sim_coll,
};
