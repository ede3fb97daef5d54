/* SPDX-License-Identifier: MIT */
/*
 * The NCCL stand-in (libnccl.so.2): communicators and collectives forwarded to
 * the executor, which owns the device (ctxpool/calls/exec_nccl.c).
 *
 *   forwarded   ncclGetVersion, ncclGetUniqueId, ncclCommInitRank[Config],
 *               ncclCommInitAll (one device), ncclCommSplit, ncclCommFinalize,
 *               ncclCommDestroy, ncclCommAbort, ncclCommCount, ncclCommCuDevice,
 *               ncclCommUserRank, ncclCommGetAsyncError, ncclAllReduce,
 *               ncclBroadcast, ncclBcast, ncclReduce, ncclAllGather,
 *               ncclReduceScatter, ncclSend, ncclRecv, ncclGroupStart/End
 *   here        ncclGetErrorString, ncclGetLastError, ncclMemAlloc/Free (the
 *               stand-in cudaMalloc: device memory from the arena)
 *   refused     every other export (generated stubs): ncclInvalidUsage, the
 *               name logged once
 *
 * Communicators are ids chosen here (PHOS_H_NCCL), wrapped as the other
 * handles are. Arguments are checked as NCCL checks them before anything is
 * sent (ncclInvalidArgument); the executor checks the buffers against the
 * live allocations. Every record is synchronous: the reply carries the
 * ncclResult_t.
 *
 * Threads: NCCL's groups are per thread, and ranks may be threads (one per
 * GPU). All of them share one executor and its one dispatcher, so
 *   - a thread's group is kept here and sent whole at its outermost
 *     ncclGroupEnd (GROUP start, its records, GROUP end under the lock that
 *     every NCCL record takes): no other thread's record lands in it;
 *   - a record the executor answers with ncclInProgress (the communicators it
 *     makes nonblocking: exec_nccl.c) is waited for here, polling the
 *     communicator's async error with the channel free in between, so that
 *     the peer threads' records get through; the function sees the end
 *     result, as from a blocking communicator;
 *   - once two threads made ranks of one communicator, the runtime's waits
 *     for the device (stream, event and device synchronisation, synchronous
 *     copies) poll too (phos_preload_nccl_threads): a rank's kernel may wait
 *     for a peer whose launch is behind the wait in another thread.
 *
 * Snapshots: a communicator records its creation parameters. After a restore
 * (phos_preload_on_restore) a single-rank communicator is made again in the
 * new executor under the same id, with a fresh unique id. One of several ranks
 * is made again at its first use, when its peers (restored too) meet it
 * through a file named by the old id (comm_reinit); if they do not come that
 * use fails and later ones answer ncclInvalidUsage.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "internal.h"
#include "log.h"
#include "nccl_api.h"

struct ncomm {
	uint32_t id;
	pid_t tid;                    /* the thread that made it */
	int32_t nranks, rank, device;
	struct phos_nccl_init init;   /* how it was made (INIT, or its split's result) */
	uint32_t splits;              /* ncclCommSplit calls on it (every rank makes the same) */
	bool reinit;                  /* restored: made again at its first use */
	bool broken;                  /* could not be made again after a restore */
};

static nccl_result comm_reinit(struct ncomm *c);

static __thread char last_error[256];

/* Records the thread's last error message and returns res. */
__attribute__((format(printf, 2, 3))) static nccl_result fail(nccl_result res, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	phos_debug("nccl: %s", last_error);
	return res;
}

/* Called by every generated stub (stubs_nccl.c). */
int phos_nccl_stub(const char *name, int *logged);
int phos_nccl_stub(const char *name, int *logged)
{
	if (!__atomic_exchange_n(logged, 1, __ATOMIC_RELAXED))
		phos_warn("NCCL API %s is not forwarded by phos-fn: ncclInvalidUsage", name);
	snprintf(last_error, sizeof(last_error), "%s is not supported by phos-fn", name);
	return PHOS_NCCL_INVALID_USAGE;
}

/* cudaError_t of the channel → ncclResult_t. */
static nccl_result status_of(int cuda_err)
{
	switch (cuda_err) {
	case cudaSuccess:
		return PHOS_NCCL_SUCCESS;
	case cudaErrorInvalidValue:
		return PHOS_NCCL_INVALID_ARGUMENT;
	case cudaErrorDevicesUnavailable:
	case cudaErrorInitializationError:
		return PHOS_NCCL_SYSTEM_ERROR;
	default:
		return PHOS_NCCL_UNHANDLED_CUDA_ERROR;
	}
}

/* Every NCCL record goes out under it, and a thread's group (group_flush)
 * holds it from its GROUP start to its GROUP end: no other thread's record
 * lands inside that group in the executor. */
static pthread_mutex_t records_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

/* A synchronous NCCL record: the executor's ncclResult_t (ncclInProgress
 * too: see wait_comms), or the channel's error. */
static nccl_result call(uint32_t op, const void *body, size_t len, void *out, size_t cap, size_t *ret_len)
{
	int ns = 0, r;

	if (phos_preload_connect())
		return fail(PHOS_NCCL_SYSTEM_ERROR, "no executor");
	pthread_mutex_lock(&records_lock);
	r = phos_preload_call(op, body, len, NULL, 0, out, cap, ret_len, &ns);
	pthread_mutex_unlock(&records_lock);
	if (r && !ns)
		return fail(status_of(r), "%s failed: cuda error %d", phos_op_name(op), r);
	if (ns == PHOS_NCCL_IN_PROGRESS)
		return ns;
	if (ns)
		return fail(ns, "%s failed in the executor (ncclResult_t %d)", phos_op_name(op), ns);
	return PHOS_NCCL_SUCCESS;
}

/* Polls the async error of communicators ids[0..n) until none is in
 * progress; the first failure, else ncclSuccess. */
static nccl_result wait_comms(const uint32_t *ids, size_t n)
{
	nccl_result first = PHOS_NCCL_SUCCESS;

	for (size_t i = 0; i < n; i++) {
		struct phos_reply_nccl_comm q = { 0 };
		struct phos_handle h = { .id = ids[i] };
		unsigned us = 5;
		nccl_result r;

		for (;;) {
			r = call(PHOS_OP_NCCL_QUERY, &h, sizeof(h), &q, sizeof(q), NULL);
			if (r || q.async_error != PHOS_NCCL_IN_PROGRESS)
				break;
			usleep(us);
			if (us < 200)
				us *= 2;
		}
		if (r == 0 && q.async_error)
			r = fail(q.async_error, "communicator %u failed (ncclResult_t %d)", ids[i], q.async_error);
		if (r && !first)
			first = r;
	}
	return first;
}

/* call() of a record on communicator comm, waited for to its end. */
static nccl_result call_comm(uint32_t op, const void *body, size_t len, uint32_t comm)
{
	nccl_result r = call(op, body, len, NULL, 0, NULL);

	return r == PHOS_NCCL_IN_PROGRESS ? wait_comms(&comm, 1) : r;
}

/* --- this thread's group --- */

#define GROUP_MAX_RECORDS 65536

struct grec {
	uint32_t op;                  /* PHOS_OP_NCCL_INIT or _COLL */
	union {
		struct phos_nccl_init in;
		struct phos_nccl_coll k;
	} u;
};

static __thread struct {
	int depth;
	struct grec *recs;
	size_t n, cap;
	nccl_result err;              /* of keeping a record: the group end's result */
} tgroup;

/* A thread's kept records go with the thread. */
static pthread_key_t recs_key;
static pthread_once_t recs_once = PTHREAD_ONCE_INIT;
static bool recs_key_ok;

static void recs_key_make(void)
{
	recs_key_ok = pthread_key_create(&recs_key, free) == 0;
	if (!recs_key_ok)
		phos_warn("nccl: no thread key: a thread's group records stay allocated after it ends");
}

/* Keeps a record for the group's end: ncclSuccess, or the failure (also
 * the group end's). */
static nccl_result group_keep(uint32_t op, const void *body, size_t len)
{
	struct grec *g;

	if (tgroup.n == tgroup.cap) {
		size_t cap = tgroup.cap ? tgroup.cap * 2 : 16;

		if (cap > GROUP_MAX_RECORDS || !(g = realloc(tgroup.recs, cap * sizeof(*g)))) {
			tgroup.err = fail(PHOS_NCCL_INVALID_USAGE, "more than %d calls in one NCCL group",
					  GROUP_MAX_RECORDS);
			return tgroup.err;
		}
		pthread_once(&recs_once, recs_key_make);
		if (recs_key_ok)
			pthread_setspecific(recs_key, g);
		tgroup.recs = g;
		tgroup.cap = cap;
	}
	g = &tgroup.recs[tgroup.n++];
	g->op = op;
	memcpy(&g->u, body, len);
	return PHOS_NCCL_SUCCESS;
}

/* A communicator record: kept in this thread's group, else sent and waited
 * for. */
static nccl_result send_rec(uint32_t op, const void *body, size_t len, uint32_t comm)
{
	if (tgroup.depth > 0)
		return tgroup.err ? tgroup.err : group_keep(op, body, len);
	return call_comm(op, body, len, comm);
}

static struct ncomm *comm_get(phos_nccl_comm_t comm)
{
	uint32_t id = phos_handle_unwrap(comm, PHOS_H_NCCL);

	return id ? phos_ids_get(PHOS_H_NCCL, id) : NULL;
}

/* The communicator for a call that uses it, or NULL with the result in *ret. */
static struct ncomm *comm_use(phos_nccl_comm_t comm, nccl_result *ret)
{
	struct ncomm *c = comm_get(comm);

	if (!c) {
		*ret = fail(PHOS_NCCL_INVALID_ARGUMENT, "invalid communicator %p", (void *)comm);
		return NULL;
	}
	if (c->reinit && (*ret = comm_reinit(c)) != 0)
		return NULL;
	if (c->broken) {
		*ret = fail(PHOS_NCCL_INVALID_USAGE,
			    "communicator of %d ranks could not be re-created after a restore (its peers did not "
			    "re-initialise with it)", c->nranks);
		return NULL;
	}
	return c;
}

/* --- version, ids, errors --- */

PHOS_EXPORT nccl_result ncclGetVersion(int *version)
{
	int32_t v = 0;
	size_t n = 0;
	nccl_result r;

	if (!version)
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "version argument is NULL");
	r = call(PHOS_OP_NCCL_VERSION, NULL, 0, &v, sizeof(v), &n);
	if (r == 0 && n == sizeof(v))
		*version = v;
	return r;
}
PHOS_ALIAS(pncclGetVersion, ncclGetVersion);

static nccl_result unique_id(phos_nccl_unique_id *id)
{
	size_t n = 0;
	nccl_result r = call(PHOS_OP_NCCL_UNIQUE_ID, NULL, 0, id, sizeof(*id), &n);

	if (r == 0 && n != sizeof(*id))
		return fail(PHOS_NCCL_INTERNAL_ERROR, "short unique id from the executor");
	return r;
}

PHOS_EXPORT nccl_result ncclGetUniqueId(phos_nccl_unique_id *uniqueId)
{
	if (!uniqueId)
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "uniqueId argument is NULL");
	return unique_id(uniqueId);
}
PHOS_ALIAS(pncclGetUniqueId, ncclGetUniqueId);

PHOS_EXPORT const char *ncclGetErrorString(nccl_result result)
{
	switch (result) {
	case PHOS_NCCL_SUCCESS: return "no error";
	case PHOS_NCCL_UNHANDLED_CUDA_ERROR: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case PHOS_NCCL_SYSTEM_ERROR: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case PHOS_NCCL_INTERNAL_ERROR: return "internal error - please report this issue to the NCCL developers";
	case PHOS_NCCL_INVALID_ARGUMENT: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case PHOS_NCCL_INVALID_USAGE: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case PHOS_NCCL_REMOTE_ERROR: return "remote process exited or there was a network error";
	case PHOS_NCCL_IN_PROGRESS: return "NCCL operation in progress";
	default: return "unknown result code";
	}
}
PHOS_ALIAS(pncclGetErrorString, ncclGetErrorString);

PHOS_EXPORT const char *ncclGetLastError(phos_nccl_comm_t comm)
{
	(void)comm;   /* NCCL keeps one last error per thread as well */
	return last_error;
}
PHOS_ALIAS(pncclGetLastError, ncclGetLastError);

PHOS_EXPORT nccl_result ncclMemAlloc(void **ptr, size_t size)
{
	if (!ptr)
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "ptr argument is NULL");
	if (size == 0) {
		*ptr = NULL;
		return PHOS_NCCL_SUCCESS;
	}
	if (cudaMalloc(ptr, size) != cudaSuccess)
		return fail(PHOS_NCCL_UNHANDLED_CUDA_ERROR, "ncclMemAlloc of %zu bytes failed", size);
	return PHOS_NCCL_SUCCESS;
}
PHOS_ALIAS(pncclMemAlloc, ncclMemAlloc);

PHOS_EXPORT nccl_result ncclMemFree(void *ptr)
{
	if (ptr && cudaFree(ptr) != cudaSuccess)
		return fail(PHOS_NCCL_UNHANDLED_CUDA_ERROR, "ncclMemFree of %p failed", ptr);
	return PHOS_NCCL_SUCCESS;
}
PHOS_ALIAS(pncclMemFree, ncclMemFree);

/* --- communicators --- */

struct same_id {
	const struct ncomm *c;
	bool other_thread;
};

static void same_id_cb(uint32_t id, void *obj, void *arg)
{
	const struct ncomm *o = obj;
	struct same_id *s = arg;

	(void)id;
	if (o != s->c && o->tid != s->c->tid && o->nranks == s->c->nranks &&
	    !memcmp(o->init.id, s->c->init.id, sizeof(o->init.id)))
		s->other_thread = true;
}

static nccl_result comm_new(struct phos_nccl_init *in, phos_nccl_comm_t *ret_comm)
{
	struct ncomm *c = calloc(1, sizeof(*c));
	struct same_id s = { c, false };
	nccl_result r;

	if (!c)
		return fail(PHOS_NCCL_SYSTEM_ERROR, "out of memory");
	if (phos_ids_add(PHOS_H_NCCL, c, &c->id)) {
		free(c);
		return fail(PHOS_NCCL_SYSTEM_ERROR, "too many communicators");
	}
	in->comm = c->id;
	if (in->nranks > 1 && tgroup.depth == 0)
		in->flags |= PHOS_NCCL_INIT_APART;   /* in a group: decided at its end (group_flush) */
	c->init = *in;
	c->tid = gettid();
	c->nranks = in->nranks;
	c->rank = in->rank;
	c->device = in->device;
	/* Ranks of one communicator made by two threads: from now on the
	 * runtime's waits poll (see the top). Said before the init, which the
	 * other rank's thread may be polling for already. */
	if (c->nranks > 1) {
		phos_ids_each(PHOS_H_NCCL, same_id_cb, &s);
		if (s.other_thread)
			phos_preload_nccl_threads();
	}
	r = send_rec(PHOS_OP_NCCL_INIT, in, sizeof(*in), c->id);
	if (r) {
		free(phos_ids_take(PHOS_H_NCCL, c->id));
		return r;
	}
	*ret_comm = phos_handle_wrap(PHOS_H_NCCL, c->id);
	return PHOS_NCCL_SUCCESS;
}

static nccl_result init_rank(phos_nccl_comm_t *comm, int nranks, const phos_nccl_unique_id *id, int rank,
			     const struct phos_nccl_config *config)
{
	struct phos_nccl_init in = { .blocking = -1, .cga_cluster_size = PHOS_NCCL_CONFIG_UNDEF_INT,
				     .min_ctas = PHOS_NCCL_CONFIG_UNDEF_INT, .max_ctas = PHOS_NCCL_CONFIG_UNDEF_INT };
	int dev = 0;

	if (!comm)
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "comm argument is NULL");
	if (nranks < 1 || rank < 0 || rank >= nranks)
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "rank %d or nranks %d invalid", rank, nranks);
	if (config) {
		if (config->magic != PHOS_NCCL_CONFIG_MAGIC || config->size < offsetof(struct phos_nccl_config, net_name))
			return fail(PHOS_NCCL_INVALID_ARGUMENT, "config is not initialized (NCCL_CONFIG_INITIALIZER)");
		in.blocking = config->blocking;
		in.cga_cluster_size = config->cga_cluster_size;
		in.min_ctas = config->min_ctas;
		in.max_ctas = config->max_ctas;
	}
	if (cudaGetDevice(&dev) != cudaSuccess)
		dev = 0;
	in.device = dev;
	in.nranks = nranks;
	in.rank = rank;
	memcpy(in.id, id->internal, sizeof(in.id));
	return comm_new(&in, comm);
}

PHOS_EXPORT nccl_result ncclCommInitRank(phos_nccl_comm_t *comm, int nranks, phos_nccl_unique_id commId, int rank)
{
	return init_rank(comm, nranks, &commId, rank, NULL);
}
PHOS_ALIAS(pncclCommInitRank, ncclCommInitRank);

PHOS_EXPORT nccl_result ncclCommInitRankConfig(phos_nccl_comm_t *comm, int nranks, phos_nccl_unique_id commId,
					       int rank, struct phos_nccl_config *config)
{
	return init_rank(comm, nranks, &commId, rank, config);
}
PHOS_ALIAS(pncclCommInitRankConfig, ncclCommInitRankConfig);

/* ncclCommInitAll of several devices, as NCCL makes it: one unique id, and
 * in one group a rank per device, each made with its device current. The
 * executor must own them all (phos-executor --gpus). */
static nccl_result init_all(phos_nccl_comm_t *comms, int ndev, const int *devlist)
{
	phos_nccl_unique_id id;
	int count = 0, saved = 0;
	nccl_result r, r2;

	if (cudaGetDeviceCount(&count) != cudaSuccess)
		count = 0;
	if (ndev > count) {
		/* Said whatever PHOS_LOG is: a program that needs several GPUs in
		 * one process must not fail without a reason. */
		fprintf(stderr, "phos-fn: ncclCommInitAll of %d devices refused: the executor owns %d "
				"(phos-fn run --gpus): ncclInvalidArgument\n", ndev, count);
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "ncclCommInitAll of %d devices: the executor owns %d", ndev,
			    count);
	}
	for (int i = 0; i < ndev; i++) {
		int d = devlist ? devlist[i] : i;

		if (d < 0 || d >= count)
			return fail(PHOS_NCCL_INVALID_ARGUMENT, "device %d invalid: the executor owns %d", d, count);
		for (int j = 0; j < i; j++) {
			if (devlist && devlist[j] == d)
				return fail(PHOS_NCCL_INVALID_ARGUMENT, "device %d is in devlist twice", d);
		}
	}
	r = unique_id(&id);
	if (r)
		return r;
	if (cudaGetDevice(&saved) != cudaSuccess)
		saved = 0;
	r = ncclGroupStart();
	for (int i = 0; r == 0 && i < ndev; i++) {
		if (cudaSetDevice(devlist ? devlist[i] : i) != cudaSuccess)
			r = fail(PHOS_NCCL_UNHANDLED_CUDA_ERROR, "cudaSetDevice(%d) failed", devlist ? devlist[i] : i);
		else
			r = init_rank(&comms[i], ndev, &id, i, NULL);
	}
	r2 = ncclGroupEnd();
	cudaSetDevice(saved);
	return r ? r : r2;
}

PHOS_EXPORT nccl_result ncclCommInitAll(phos_nccl_comm_t *comms, int ndev, const int *devlist)
{
	phos_nccl_unique_id id;
	nccl_result r;

	if (!comms)
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "comms argument is NULL");
	if (ndev < 1)
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "ndev %d invalid", ndev);
	if (ndev > 1)
		return init_all(comms, ndev, devlist);
	if (devlist && devlist[0] != 0)
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "device %d invalid: the executor owns device 0", devlist[0]);
	r = unique_id(&id);
	if (r)
		return r;
	return init_rank(comms, 1, &id, 0, NULL);
}
PHOS_ALIAS(pncclCommInitAll, ncclCommInitAll);

PHOS_EXPORT nccl_result ncclCommSplit(phos_nccl_comm_t comm, int color, int key, phos_nccl_comm_t *newcomm,
				      struct phos_nccl_config *config)
{
	struct phos_nccl_split s = { .color = color, .key = key };
	struct phos_reply_nccl_comm q = { 0 };
	struct phos_handle h = { 0 };
	struct ncomm *c, *n;
	nccl_result r;

	(void)config;
	if (!(c = comm_use(comm, &r)))
		return r;
	if (!newcomm)
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "newcomm argument is NULL");
	if (color < 0 && color != PHOS_NCCL_SPLIT_NOCOLOR)
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "color %d invalid", color);
	n = calloc(1, sizeof(*n));
	if (!n)
		return fail(PHOS_NCCL_SYSTEM_ERROR, "out of memory");
	if (phos_ids_add(PHOS_H_NCCL, n, &n->id)) {
		free(n);
		return fail(PHOS_NCCL_SYSTEM_ERROR, "too many communicators");
	}
	s.comm = c->id;
	s.newcomm = n->id;
	r = call(PHOS_OP_NCCL_SPLIT, &s, sizeof(s), NULL, 0, NULL);
	if (r == 0 && color == PHOS_NCCL_SPLIT_NOCOLOR) {
		c->splits++;
		free(phos_ids_take(PHOS_H_NCCL, n->id));
		*newcomm = NULL;
		return PHOS_NCCL_SUCCESS;
	}
	h.id = n->id;
	if (r == 0)
		r = call(PHOS_OP_NCCL_QUERY, &h, sizeof(h), &q, sizeof(q), NULL);
	if (r) {
		free(phos_ids_take(PHOS_H_NCCL, n->id));
		return r;
	}
	n->nranks = q.nranks;
	n->rank = q.rank;
	n->device = q.device;
	/* The child's "id" for a restore (reinit_path): the parent's, with the
	 * split's number and the color, the same on every rank of the child. */
	c->splits++;
	n->init = c->init;
	memcpy(n->init.id + 112, &c->splits, sizeof(c->splits));
	memcpy(n->init.id + 116, &color, sizeof(color));
	n->init.comm = n->id;
	n->init.nranks = q.nranks;
	n->init.rank = q.rank;
	*newcomm = phos_handle_wrap(PHOS_H_NCCL, n->id);
	return PHOS_NCCL_SUCCESS;
}
PHOS_ALIAS(pncclCommSplit, ncclCommSplit);

static nccl_result comm_end(phos_nccl_comm_t comm, uint32_t how)
{
	struct phos_nccl_end e = { .how = how };
	struct ncomm *c = comm_get(comm);
	nccl_result r;

	if (!c)
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "invalid communicator %p", (void *)comm);
	if (c->broken || c->reinit) {   /* the executor never knew it */
		if (how != PHOS_NCCL_FINALIZE)
			free(phos_ids_take(PHOS_H_NCCL, c->id));
		return PHOS_NCCL_SUCCESS;
	}
	e.comm = c->id;
	if (how == PHOS_NCCL_FINALIZE)
		r = call_comm(PHOS_OP_NCCL_END, &e, sizeof(e), c->id);
	else if ((r = call(PHOS_OP_NCCL_END, &e, sizeof(e), NULL, 0, NULL)) == PHOS_NCCL_IN_PROGRESS)
		r = PHOS_NCCL_SUCCESS;   /* gone from the executor: nothing to poll */
	/* Destroy and abort free the handle even when the executor reports an
	 * error (a peer gone): the communicator is unusable either way. */
	if (how != PHOS_NCCL_FINALIZE)
		free(phos_ids_take(PHOS_H_NCCL, c->id));
	return r;
}

PHOS_EXPORT nccl_result ncclCommFinalize(phos_nccl_comm_t comm)
{
	return comm_end(comm, PHOS_NCCL_FINALIZE);
}
PHOS_ALIAS(pncclCommFinalize, ncclCommFinalize);

PHOS_EXPORT nccl_result ncclCommDestroy(phos_nccl_comm_t comm)
{
	if (!comm)   /* NCCL: destroying NULL is a no-op */
		return PHOS_NCCL_SUCCESS;
	return comm_end(comm, PHOS_NCCL_DESTROY);
}
PHOS_ALIAS(pncclCommDestroy, ncclCommDestroy);

PHOS_EXPORT nccl_result ncclCommAbort(phos_nccl_comm_t comm)
{
	if (!comm)
		return PHOS_NCCL_SUCCESS;
	return comm_end(comm, PHOS_NCCL_ABORT);
}
PHOS_ALIAS(pncclCommAbort, ncclCommAbort);

/* Count, device and rank are known here: no round trip. */
PHOS_EXPORT nccl_result ncclCommCount(const phos_nccl_comm_t comm, int *count)
{
	struct ncomm *c = comm_get(comm);

	if (!c || !count)
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "comm or count argument invalid");
	*count = c->nranks;
	return PHOS_NCCL_SUCCESS;
}
PHOS_ALIAS(pncclCommCount, ncclCommCount);

PHOS_EXPORT nccl_result ncclCommCuDevice(const phos_nccl_comm_t comm, int *device)
{
	struct ncomm *c = comm_get(comm);

	if (!c || !device)
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "comm or device argument invalid");
	*device = c->device;
	return PHOS_NCCL_SUCCESS;
}
PHOS_ALIAS(pncclCommCuDevice, ncclCommCuDevice);

PHOS_EXPORT nccl_result ncclCommUserRank(const phos_nccl_comm_t comm, int *rank)
{
	struct ncomm *c = comm_get(comm);

	if (!c || !rank)
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "comm or rank argument invalid");
	*rank = c->rank;
	return PHOS_NCCL_SUCCESS;
}
PHOS_ALIAS(pncclCommUserRank, ncclCommUserRank);

PHOS_EXPORT nccl_result ncclCommGetAsyncError(phos_nccl_comm_t comm, nccl_result *asyncError)
{
	struct phos_reply_nccl_comm q = { 0 };
	struct phos_handle h = { 0 };
	struct ncomm *c;
	nccl_result r;

	if (!asyncError)
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "asyncError argument is NULL");
	c = comm_get(comm);
	if (c && c->reinit && !c->broken) {   /* polling must not wait for the peers */
		*asyncError = PHOS_NCCL_SUCCESS;
		return PHOS_NCCL_SUCCESS;
	}
	if (!(c = comm_use(comm, &r)))
		return r;
	h.id = c->id;
	r = call(PHOS_OP_NCCL_QUERY, &h, sizeof(h), &q, sizeof(q), NULL);
	if (r == 0)
		*asyncError = q.async_error;
	return r;
}
PHOS_ALIAS(pncclCommGetAsyncError, ncclCommGetAsyncError);

/* --- collectives and point-to-point --- */

static const char *const kind_names[] = {
	[PHOS_NCCL_ALL_REDUCE] = "AllReduce", [PHOS_NCCL_BROADCAST] = "Broadcast", [PHOS_NCCL_REDUCE] = "Reduce",
	[PHOS_NCCL_ALL_GATHER] = "AllGather", [PHOS_NCCL_REDUCE_SCATTER] = "ReduceScatter",
	[PHOS_NCCL_SEND] = "Send", [PHOS_NCCL_RECV] = "Recv",
};

static nccl_result coll(int kind, const void *send, void *recv, size_t count, int type, int op, int peer,
			phos_nccl_comm_t comm, cudaStream_t stream)
{
	struct phos_nccl_coll c = { .kind = kind, .type = type, .op = op, .peer = peer, .count = count };
	const char *what = kind_names[kind];
	bool reduces = kind == PHOS_NCCL_ALL_REDUCE || kind == PHOS_NCCL_REDUCE || kind == PHOS_NCCL_REDUCE_SCATTER;
	bool rooted = kind == PHOS_NCCL_BROADCAST || kind == PHOS_NCCL_REDUCE;
	bool p2p = kind == PHOS_NCCL_SEND || kind == PHOS_NCCL_RECV;
	size_t ts = phos_nccl_type_size(type);
	struct ncomm *cm;
	nccl_result r;

	if (!comm)
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "%s: comm argument is NULL", what);
	if (!(cm = comm_use(comm, &r)))
		return r;
	if (ts == 0)
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "%s: invalid type %d", what, type);
	if (reduces && (op < 0 || op >= PHOS_NCCL_NUM_OPS))
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "%s: invalid reduction operation %d", what, op);
	if ((rooted || p2p) && (peer < 0 || peer >= cm->nranks))
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "%s: invalid %s %d (nranks %d)", what, p2p ? "peer" : "root",
			    peer, cm->nranks);
	/* The largest buffer of the call: count x type x ranks for the gathers. */
	if (count > SIZE_MAX / ts / (size_t)cm->nranks || count > INT64_MAX / ts / (size_t)cm->nranks)
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "%s: count %zu overflows", what, count);
	if (count > 0) {
		bool need_send = kind != PHOS_NCCL_RECV && !(kind == PHOS_NCCL_BROADCAST && cm->rank != peer);
		bool need_recv = kind != PHOS_NCCL_SEND && !(kind == PHOS_NCCL_REDUCE && cm->rank != peer);

		if ((need_send && !send) || (need_recv && !recv))
			return fail(PHOS_NCCL_INVALID_ARGUMENT, "%s: %s argument is NULL", what,
				    need_send && !send ? "sendbuff" : "recvbuff");
	}
	if (phos_preload_stream_id(stream, &c.stream))
		return fail(PHOS_NCCL_INVALID_ARGUMENT, "%s: invalid stream", what);
	c.comm = cm->id;
	c.send = (uint64_t)(uintptr_t)send;
	c.recv = (uint64_t)(uintptr_t)recv;
	return send_rec(PHOS_OP_NCCL_COLL, &c, sizeof(c), cm->id);
}

PHOS_EXPORT nccl_result ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op,
				      phos_nccl_comm_t comm, cudaStream_t stream)
{
	return coll(PHOS_NCCL_ALL_REDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}
PHOS_ALIAS(pncclAllReduce, ncclAllReduce);

PHOS_EXPORT nccl_result ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, int datatype, int root,
				      phos_nccl_comm_t comm, cudaStream_t stream)
{
	return coll(PHOS_NCCL_BROADCAST, sendbuff, recvbuff, count, datatype, 0, root, comm, stream);
}
PHOS_ALIAS(pncclBroadcast, ncclBroadcast);

PHOS_EXPORT nccl_result ncclBcast(void *buff, size_t count, int datatype, int root, phos_nccl_comm_t comm,
				  cudaStream_t stream)
{
	return coll(PHOS_NCCL_BROADCAST, buff, buff, count, datatype, 0, root, comm, stream);
}
PHOS_ALIAS(pncclBcast, ncclBcast);

PHOS_EXPORT nccl_result ncclReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op,
				   int root, phos_nccl_comm_t comm, cudaStream_t stream)
{
	return coll(PHOS_NCCL_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}
PHOS_ALIAS(pncclReduce, ncclReduce);

PHOS_EXPORT nccl_result ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, int datatype,
				      phos_nccl_comm_t comm, cudaStream_t stream)
{
	return coll(PHOS_NCCL_ALL_GATHER, sendbuff, recvbuff, sendcount, datatype, 0, 0, comm, stream);
}
PHOS_ALIAS(pncclAllGather, ncclAllGather);

PHOS_EXPORT nccl_result ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, int datatype,
					  int op, phos_nccl_comm_t comm, cudaStream_t stream)
{
	return coll(PHOS_NCCL_REDUCE_SCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream);
}
PHOS_ALIAS(pncclReduceScatter, ncclReduceScatter);

PHOS_EXPORT nccl_result ncclSend(const void *sendbuff, size_t count, int datatype, int peer, phos_nccl_comm_t comm,
				 cudaStream_t stream)
{
	return coll(PHOS_NCCL_SEND, sendbuff, NULL, count, datatype, 0, peer, comm, stream);
}
PHOS_ALIAS(pncclSend, ncclSend);

PHOS_EXPORT nccl_result ncclRecv(void *recvbuff, size_t count, int datatype, int peer, phos_nccl_comm_t comm,
				 cudaStream_t stream)
{
	return coll(PHOS_NCCL_RECV, NULL, recvbuff, count, datatype, 0, peer, comm, stream);
}
PHOS_ALIAS(pncclRecv, ncclRecv);

static void mark_broken(const struct grec *recs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct ncomm *c = recs[i].op == PHOS_OP_NCCL_INIT ? phos_ids_get(PHOS_H_NCCL, recs[i].u.in.comm) : NULL;

		if (c)
			c->broken = true;
	}
}

/* An init of the group whose communicator's other ranks are not all made in
 * it is PHOS_NCCL_INIT_APART (exec_nccl.c). */
static void mark_apart(struct grec *recs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		struct phos_nccl_init *in = &recs[i].u.in;
		int have = 0;

		if (recs[i].op != PHOS_OP_NCCL_INIT || in->nranks < 2)
			continue;
		for (size_t j = 0; j < n; j++) {
			have += recs[j].op == PHOS_OP_NCCL_INIT && recs[j].u.in.nranks == in->nranks &&
				!memcmp(recs[j].u.in.id, in->id, sizeof(in->id));
		}
		if (have < in->nranks)
			in->flags |= PHOS_NCCL_INIT_APART;
	}
}

/* The outermost ncclGroupEnd of this thread: its records, sent together
 * (GROUP start, each record, GROUP end) under records_lock, then waited for.
 * On failure the communicators it was to make are broken. */
static nccl_result group_flush(void)
{
	struct phos_nccl_group start = { .start = 1 }, end = { .start = 0 };
	size_t n = tgroup.n;
	nccl_result r = tgroup.err, e;
	bool waiting = false;
	uint32_t *ids;

	tgroup.err = PHOS_NCCL_SUCCESS;
	tgroup.n = 0;
	if (r || n == 0) {
		mark_broken(tgroup.recs, n);
		return r;
	}
	ids = malloc(n * sizeof(*ids));
	if (!ids) {
		mark_broken(tgroup.recs, n);
		return fail(PHOS_NCCL_SYSTEM_ERROR, "out of memory");
	}
	mark_apart(tgroup.recs, n);
	pthread_mutex_lock(&records_lock);
	r = call(PHOS_OP_NCCL_GROUP, &start, sizeof(start), NULL, 0, NULL);
	if (r == 0) {
		for (size_t i = 0; i < n && r == 0; i++) {
			const struct grec *g = &tgroup.recs[i];

			e = call(g->op, &g->u, g->op == PHOS_OP_NCCL_INIT ? sizeof(g->u.in) : sizeof(g->u.k), NULL, 0,
				 NULL);
			if (e == PHOS_NCCL_IN_PROGRESS)
				waiting = true;
			else
				r = e;
		}
		/* the group is closed whatever failed in it */
		e = call(PHOS_OP_NCCL_GROUP, &end, sizeof(end), NULL, 0, NULL);
		if (e == PHOS_NCCL_IN_PROGRESS)
			waiting = true;
		else if (e && !r)
			r = e;
	}
	pthread_mutex_unlock(&records_lock);
	for (size_t i = 0; i < n; i++)
		ids[i] = tgroup.recs[i].op == PHOS_OP_NCCL_INIT ? tgroup.recs[i].u.in.comm : tgroup.recs[i].u.k.comm;
	if (waiting && (e = wait_comms(ids, n)) && !r)
		r = e;
	free(ids);
	if (r)
		mark_broken(tgroup.recs, n);
	return r;
}

PHOS_EXPORT nccl_result ncclGroupStart(void)
{
	if (phos_preload_connect())
		return fail(PHOS_NCCL_SYSTEM_ERROR, "no executor");
	tgroup.depth++;
	return PHOS_NCCL_SUCCESS;
}
PHOS_ALIAS(pncclGroupStart, ncclGroupStart);

PHOS_EXPORT nccl_result ncclGroupEnd(void)
{
	if (tgroup.depth == 0)
		return fail(PHOS_NCCL_INVALID_USAGE, "ncclGroupEnd without ncclGroupStart");
	if (--tgroup.depth > 0)
		return PHOS_NCCL_SUCCESS;
	return group_flush();
}
PHOS_ALIAS(pncclGroupEnd, ncclGroupEnd);

/* --- after a restore --- */

/* Waits for PHOS_NCCL_TIMEOUT_MS (default 60 s), as the executor's sim does. */
static double reinit_timeout_s(void)
{
	const char *e = getenv("PHOS_NCCL_TIMEOUT_MS");
	long ms = e && *e ? strtol(e, NULL, 10) : 0;

	return (ms > 0 ? ms : 60000) / 1000.0;
}

static void reinit_path(const struct ncomm *c, char *path, size_t len)
{
	const char *dir = getenv("PHOS_NCCL_REINIT_DIR");
	uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a of the old unique id */

	for (size_t i = 0; i < sizeof(c->init.id); i++)
		h = (h ^ c->init.id[i]) * 0x100000001b3ull;
	snprintf(path, len, "%s/phos-nccl-%016llx.id", dir && *dir ? dir : "/tmp", (unsigned long long)h);
}

static bool id_write(const char *path, const phos_nccl_unique_id *id)
{
	char tmp[4200];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
	f = fopen(tmp, "wbe");
	if (!f)
		return false;
	if (fwrite(id, sizeof(*id), 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
		unlink(tmp);
		return false;
	}
	return true;
}

static bool id_read(const char *path, phos_nccl_unique_id *id)
{
	double waited = 0, limit = reinit_timeout_s();

	for (;; waited += 0.002) {
		FILE *f = fopen(path, "rbe");

		if (f) {
			size_t n = fread(id, sizeof(*id), 1, f);

			fclose(f);
			if (n == 1)
				return true;
		}
		if (waited > limit)
			return false;
		usleep(2000);
	}
}

/*
 * A communicator of several ranks after a restore, at its first use: the
 * ranks meet again through a file named by the old unique id
 *
 *   rank 0:  fresh id from its new executor ──▶ DIR/phos-nccl-<hash>.id
 *   rank k:  reads it (waits up to PHOS_NCCL_TIMEOUT_MS)
 *   all:     INIT with the fresh id under the same handle (returns once every
 *            rank joined); rank 0 then removes the file
 *
 * DIR is PHOS_NCCL_REINIT_DIR, else /tmp (the environment the function had
 * when it was snapshotted). Every rank must be restored (snapshots of the
 * ranks taken together); two restores of one set at once must use different
 * folders. On failure the communicator is broken: this call gets the
 * failure, later ones ncclInvalidUsage.
 */
static nccl_result comm_reinit(struct ncomm *c)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	phos_nccl_unique_id uid;
	char path[4096];
	nccl_result r = PHOS_NCCL_SUCCESS;

	pthread_mutex_lock(&lock);
	if (!c->reinit)   /* another thread did it */
		goto out;
	c->reinit = false;
	reinit_path(c, path, sizeof(path));
	if (c->rank == 0) {
		r = unique_id(&uid);
		if (r == 0 && !id_write(path, &uid))
			r = fail(PHOS_NCCL_SYSTEM_ERROR, "cannot write %s: %s", path, strerror(errno));
	} else if (!id_read(path, &uid)) {
		r = fail(PHOS_NCCL_SYSTEM_ERROR, "rank %d: no new unique id from rank 0 in %s", c->rank, path);
	}
	if (r == 0) {
		memcpy(c->init.id, uid.internal, sizeof(c->init.id));
		c->init.comm = c->id;
		c->init.flags = PHOS_NCCL_INIT_APART;   /* its peers are other processes */
		r = call_comm(PHOS_OP_NCCL_INIT, &c->init, sizeof(c->init), c->id);
	}
	if (c->rank == 0)
		unlink(path);
	if (r) {
		c->broken = true;
		phos_warn("nccl: communicator %u (rank %d of %d) could not be re-created after the restore (%d)",
			  c->id, c->rank, c->nranks, r);
	}
out:
	pthread_mutex_unlock(&lock);
	return r;
}

static void comm_remake(uint32_t id, void *obj, void *arg)
{
	struct ncomm *c = obj;
	int *ret = arg;
	phos_nccl_unique_id uid;

	(void)id;
	if (c->broken)
		return;
	if (c->nranks > 1) {   /* its peers must come too: at its first use */
		c->reinit = true;
		return;
	}
	/* One rank: a fresh id from the new executor, the same communicator id. */
	if (unique_id(&uid) != 0) {
		c->broken = true;
		*ret = cudaErrorUnknown;
		return;
	}
	memcpy(c->init.id, uid.internal, sizeof(c->init.id));
	c->init.comm = c->id;
	if (call(PHOS_OP_NCCL_INIT, &c->init, sizeof(c->init), NULL, 0, NULL) != 0) {
		c->broken = true;
		phos_warn("nccl: communicator %u could not be re-created after the restore", c->id);
		*ret = cudaErrorUnknown;
	}
}

/* The communicators that wait for their first use to be made again. */
struct pending {
	struct ncomm *c[64];
	size_t n;
};

static void pending_add(uint32_t id, void *obj, void *arg)
{
	struct ncomm *c = obj;
	struct pending *p = arg;

	(void)id;
	if (c->reinit && !c->broken && p->n < sizeof(p->c) / sizeof(p->c[0]))
		p->c[p->n++] = c;
}

/*
 * Every rank of a communicator in this process (ncclCommInitAll, or InitRank
 * per device in a group: one process driving several GPUs): made again now,
 * together, as they were made: a fresh unique id, one group, each rank on its
 * device. Waiting for a first use would deadlock, since the first rank used
 * would wait for the others on the same thread.
 */
static void local_sets_remake(void)
{
	struct pending p = { .n = 0 };
	bool done[64] = { false };
	int saved = 0;

	phos_ids_each(PHOS_H_NCCL, pending_add, &p);
	if (cudaGetDevice(&saved) != cudaSuccess)
		saved = 0;
	for (size_t i = 0; i < p.n; i++) {
		struct ncomm *set[64];
		unsigned have = 0, ranks = 0;   /* bit r: rank r is here */
		phos_nccl_unique_id uid;
		nccl_result r, end;
		bool started;

		if (done[i])
			continue;
		for (size_t j = i; j < p.n; j++) {
			if (!done[j] && p.c[j]->nranks == p.c[i]->nranks &&
			    !memcmp(p.c[j]->init.id, p.c[i]->init.id, sizeof(p.c[i]->init.id)) &&
			    !(ranks & (1u << p.c[j]->rank)) && p.c[j]->rank < 32) {
				ranks |= 1u << p.c[j]->rank;
				set[have++] = p.c[j];
				done[j] = true;
			}
		}
		if ((int)have != p.c[i]->nranks)
			continue;   /* some ranks live in other processes: at first use */
		r = unique_id(&uid);
		started = r == 0 && (r = ncclGroupStart()) == 0;
		for (unsigned k = 0; r == 0 && k < have; k++) {
			memcpy(set[k]->init.id, uid.internal, sizeof(set[k]->init.id));
			set[k]->init.comm = set[k]->id;
			/* all made here in one group; ranks that threads made are
			 * used from threads again */
			set[k]->init.flags = 0;
			for (unsigned j = 0; j < have; j++) {
				if (set[j]->tid != set[k]->tid)
					set[k]->init.flags = PHOS_NCCL_INIT_THREADS;
			}
			if (cudaSetDevice(set[k]->device) != cudaSuccess)
				r = PHOS_NCCL_UNHANDLED_CUDA_ERROR;
			else
				r = send_rec(PHOS_OP_NCCL_INIT, &set[k]->init, sizeof(set[k]->init), set[k]->id);
		}
		if (started && (end = ncclGroupEnd()) != 0 && r == 0)
			r = end;   /* the group is closed whatever failed in it */
		for (unsigned k = 0; k < have; k++) {
			set[k]->reinit = false;
			set[k]->broken = r != 0;
		}
		if (r)
			phos_warn("nccl: the %u ranks of a communicator of this process could not be re-created after "
				  "the restore (%d)", have, r);
	}
	cudaSetDevice(saved);
}

static int nccl_resend(void)
{
	int r = 0;

	phos_ids_each(PHOS_H_NCCL, comm_remake, &r);
	local_sets_remake();
	/* A single-rank communicator that failed to come back is broken, not a
	 * failed restore: the rest of the function may not use NCCL again. */
	return 0;
}

__attribute__((constructor)) static void nccl_init(void)
{
	if (phos_preload_on_restore(nccl_resend) < 0)
		phos_warn("nccl: no room for the restore hook: communicators will not come back after a restore");
}

__attribute__((constructor)) static void log_init(void)
{
	phos_log_init("phos-preload-nccl", PHOS_LOG_OFF);
}
