/* SPDX-License-Identifier: MIT */
/*
 * NCCL on the cuda device (nccl_dev.h): the real libnccl.so.2, loaded once.
 *
 * Where it is looked for: runtime/device/cuda/libfind.h, with $PHOS_NCCL_LIB and pip's
 * nvidia-nccl-cu13 (nvidia/nccl/lib).
 *
 * NCCL_NVLS_ENABLE=0 is put in the environment before the library is loaded,
 * so before NCCL reads it: executors never create NVLink multicast objects.
 *
 * The executor thread has the device's primary context current
 * (device_cuda.c), which the runtime inside NCCL adopts.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libfind.h"
#include "log.h"
#include "nccl_dev.h"

typedef void *ncomm;

static struct {
	int (*GetVersion)(int *);
	int (*GetUniqueId)(void *);
	int (*CommInitRank)(ncomm *, int, phos_nccl_unique_id, int);
	int (*CommInitRankConfig)(ncomm *, int, phos_nccl_unique_id, int, struct phos_nccl_config *);
	int (*CommSplit)(ncomm, int, int, ncomm *, struct phos_nccl_config *);
	int (*CommFinalize)(ncomm);
	int (*CommDestroy)(ncomm);
	int (*CommAbort)(ncomm);
	int (*CommGetAsyncError)(ncomm, int *);
	int (*CommCount)(ncomm, int *);
	int (*CommUserRank)(ncomm, int *);
	int (*AllReduce)(const void *, void *, size_t, int, int, ncomm, void *);
	int (*Broadcast)(const void *, void *, size_t, int, int, ncomm, void *);
	int (*Reduce)(const void *, void *, size_t, int, int, int, ncomm, void *);
	int (*AllGather)(const void *, void *, size_t, int, ncomm, void *);
	int (*ReduceScatter)(const void *, void *, size_t, int, int, ncomm, void *);
	int (*Send)(const void *, size_t, int, int, ncomm, void *);
	int (*Recv)(void *, size_t, int, int, ncomm, void *);
	int (*GroupStart)(void);
	int (*GroupEnd)(void);
	const char *(*GetLastError)(ncomm);
} nccl;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_status = PHOS_NCCL_SYSTEM_ERROR;


#define SYM(field, name) { #name, offsetof(__typeof__(nccl), field) }
static const struct { const char *name; size_t offset; } syms[] = {
	SYM(GetVersion, ncclGetVersion), SYM(GetUniqueId, ncclGetUniqueId),
	SYM(CommInitRank, ncclCommInitRank), SYM(CommInitRankConfig, ncclCommInitRankConfig),
	SYM(CommSplit, ncclCommSplit),
	SYM(CommFinalize, ncclCommFinalize), SYM(CommDestroy, ncclCommDestroy), SYM(CommAbort, ncclCommAbort),
	SYM(CommGetAsyncError, ncclCommGetAsyncError), SYM(CommCount, ncclCommCount),
	SYM(CommUserRank, ncclCommUserRank), SYM(AllReduce, ncclAllReduce), SYM(Broadcast, ncclBroadcast),
	SYM(Reduce, ncclReduce), SYM(AllGather, ncclAllGather), SYM(ReduceScatter, ncclReduceScatter),
	SYM(Send, ncclSend), SYM(Recv, ncclRecv), SYM(GroupStart, ncclGroupStart), SYM(GroupEnd, ncclGroupEnd),
	SYM(GetLastError, ncclGetLastError),
};

static void load(void)
{
	void *lib;

	/* Before NCCL reads its environment: no NVLink multicast (NVLS). */
	setenv("NCCL_NVLS_ENABLE", "0", 1);
	lib = phos_lib_find("NCCL", "PHOS_NCCL_LIB", "libnccl.so.2", "nccl");
	if (!lib) {
		phos_err("cuda: cannot load libnccl.so.2 (PHOS_NCCL_LIB, the loader path, pip's nvidia/nccl/lib, "
			 "$CUDA_HOME/lib64 and /usr/local/cuda/lib64 tried)");
		return;
	}
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *p = dlsym(lib, syms[i].name);

		if (!p) {
			phos_err("cuda: libnccl.so.2 lacks %s", syms[i].name);
			return;
		}
		memcpy((char *)&nccl + syms[i].offset, &p, sizeof(p));
	}
	load_status = 0;
}

static int loaded(void)
{
	pthread_once(&load_once, load);
	return load_status;
}

/* Logs NCCL's own message for a failure (the function gets the result). */
static int check(int r, const char *what, ncomm comm)
{
	if (r != 0 && r != PHOS_NCCL_IN_PROGRESS)
		phos_debug("cuda: %s: ncclResult_t %d (%s)", what, r, nccl.GetLastError ? nccl.GetLastError(comm) : "");
	return r;
}
#define TRY_LOAD() do { int l_ = loaded(); if (l_) return l_; } while (0)

static int cuda_version(int *ret_version)
{
	TRY_LOAD();
	return check(nccl.GetVersion(ret_version), "ncclGetVersion", NULL);
}

static int cuda_unique_id(uint8_t ret_id[PHOS_NCCL_ID_BYTES])
{
	TRY_LOAD();
	return check(nccl.GetUniqueId(ret_id), "ncclGetUniqueId", NULL);
}

/* The function's ncclConfig_t settings that the executor passes on, and
 * blocking as the executor asks (p->blocking 0: nonblocking, else blocking;
 * the function's own choice is not passed on: its stand-in waits for every
 * call's end either way). The struct is the 2.28 layout; an older library
 * gets its own version number in it (NCCL reads the fields its version
 * knows). */
static void config_of(const struct phos_nccl_params *p, struct phos_nccl_config *cfg)
{
	int version = PHOS_NCCL_VERSION_CODE;

	memset(cfg, 0, sizeof(*cfg));
	cfg->size = sizeof(*cfg);
	cfg->magic = PHOS_NCCL_CONFIG_MAGIC;
	nccl.GetVersion(&version);
	cfg->version = version < PHOS_NCCL_VERSION_CODE ? (unsigned)version : PHOS_NCCL_VERSION_CODE;
	cfg->blocking = p->blocking == 0 ? 0 : 1;
	cfg->cga_cluster_size = p->cga_cluster_size;
	cfg->min_ctas = p->min_ctas;
	cfg->max_ctas = p->max_ctas;
	cfg->split_share = cfg->traffic_class = cfg->collnet_enable = cfg->cta_policy = PHOS_NCCL_CONFIG_UNDEF_INT;
	cfg->shrink_share = cfg->nvls_ctas = cfg->nchannels_per_net_peer = PHOS_NCCL_CONFIG_UNDEF_INT;
	cfg->nvlink_centric_sched = PHOS_NCCL_CONFIG_UNDEF_INT;
}

static int cuda_init(const uint8_t id[PHOS_NCCL_ID_BYTES], const struct phos_nccl_params *p, void **ret_comm)
{
	struct phos_nccl_config cfg;
	phos_nccl_unique_id uid;

	TRY_LOAD();
	memcpy(uid.internal, id, sizeof(uid.internal));
	/* No setting that needs a config: the plain call, as the function made it. */
	if (p->blocking != 0 && p->cga_cluster_size == PHOS_NCCL_CONFIG_UNDEF_INT &&
	    p->min_ctas == PHOS_NCCL_CONFIG_UNDEF_INT && p->max_ctas == PHOS_NCCL_CONFIG_UNDEF_INT)
		return check(nccl.CommInitRank(ret_comm, p->nranks, uid, p->rank), "ncclCommInitRank", NULL);
	config_of(p, &cfg);
	return check(nccl.CommInitRankConfig(ret_comm, p->nranks, uid, p->rank, &cfg), "ncclCommInitRankConfig",
		     NULL);
}

/* A blocking child (config blocking 1: the parent may be nonblocking); its
 * other settings are NCCL's defaults. */
static int cuda_split(void *comm, int color, int key, void **ret_comm, int *ret_nranks, int *ret_rank)
{
	struct phos_nccl_params p = { .blocking = 1, .cga_cluster_size = PHOS_NCCL_CONFIG_UNDEF_INT,
				      .min_ctas = PHOS_NCCL_CONFIG_UNDEF_INT, .max_ctas = PHOS_NCCL_CONFIG_UNDEF_INT };
	struct phos_nccl_config cfg;
	int r;

	*ret_comm = NULL;
	config_of(&p, &cfg);
	r = check(nccl.CommSplit(comm, color, key, ret_comm, &cfg), "ncclCommSplit", comm);
	while (r == PHOS_NCCL_IN_PROGRESS && *ret_comm) {   /* a library that keeps the parent's mode */
		int e = 0;

		usleep(50);
		r = nccl.CommGetAsyncError(*ret_comm, &e);
		if (r == 0)
			r = e;
	}
	if (r == 0 && *ret_comm) {
		nccl.CommCount(*ret_comm, ret_nranks);
		nccl.CommUserRank(*ret_comm, ret_rank);
	}
	return r;
}

static int cuda_finalize(void *comm)
{
	return check(nccl.CommFinalize(comm), "ncclCommFinalize", comm);
}

static int cuda_destroy(void *comm)
{
	return check(nccl.CommDestroy(comm), "ncclCommDestroy", NULL);
}

static int cuda_abort(void *comm)
{
	return check(nccl.CommAbort(comm), "ncclCommAbort", NULL);
}

static int cuda_async_error(void *comm, int *ret_error)
{
	return check(nccl.CommGetAsyncError(comm, ret_error), "ncclCommGetAsyncError", comm);
}

static int cuda_group_start(void)
{
	TRY_LOAD();
	return check(nccl.GroupStart(), "ncclGroupStart", NULL);
}

static int cuda_group_end(void)
{
	TRY_LOAD();
	return check(nccl.GroupEnd(), "ncclGroupEnd", NULL);
}

static int cuda_coll(void *comm, const struct phos_nccl_coll *k, void *stream)
{
	const void *s = (const void *)(uintptr_t)k->send;
	void *d = (void *)(uintptr_t)k->recv;
	size_t n = (size_t)k->count;

	switch (k->kind) {
	case PHOS_NCCL_ALL_REDUCE:
		return check(nccl.AllReduce(s, d, n, k->type, k->op, comm, stream), "ncclAllReduce", comm);
	case PHOS_NCCL_BROADCAST:
		return check(nccl.Broadcast(s, d, n, k->type, k->peer, comm, stream), "ncclBroadcast", comm);
	case PHOS_NCCL_REDUCE:
		return check(nccl.Reduce(s, d, n, k->type, k->op, k->peer, comm, stream), "ncclReduce", comm);
	case PHOS_NCCL_ALL_GATHER:
		return check(nccl.AllGather(s, d, n, k->type, comm, stream), "ncclAllGather", comm);
	case PHOS_NCCL_REDUCE_SCATTER:
		return check(nccl.ReduceScatter(s, d, n, k->type, k->op, comm, stream), "ncclReduceScatter", comm);
	case PHOS_NCCL_SEND:
		return check(nccl.Send(s, n, k->type, k->peer, comm, stream), "ncclSend", comm);
	case PHOS_NCCL_RECV:
		return check(nccl.Recv(d, n, k->type, k->peer, comm, stream), "ncclRecv", comm);
	default:
		return PHOS_NCCL_INVALID_ARGUMENT;
	}
}

const struct phos_nccl_ops phos_nccl_cuda = {
	.name = "cuda",
	.version = cuda_version,
	.unique_id = cuda_unique_id,
	.init = cuda_init,
	.split = cuda_split,
	.finalize = cuda_finalize,
	.destroy = cuda_destroy,
	.abort = cuda_abort,
	.async_error = cuda_async_error,
	.group_start = cuda_group_start,
	.group_end = cuda_group_end,
	.coll = cuda_coll,
};
