/* SPDX-License-Identifier: MIT */
/*
 * NCCL behind the executor: the same two backends as the device interface.
 *
 *             ctxpool/calls/exec_nccl.c  (communicators by id, read/write sets, groups)
 *                   │ struct phos_nccl_ops
 *        ┌──────────┴────────────────────┐
 *   nccl_cuda.c                      nccl_sim.c
 *   the real libnccl.so.2,           host-memory collectives between the executors
 *   dlopen'ed once (PHOS_NCCL_LIB,   of several function processes, one rank each,
 *   the loader path, pip's           through a shared-memory segment named from the
 *   nvidia/nccl/lib, the toolkit);   unique id:
 *   NCCL_NVLS_ENABLE=0 is set
 *   before it initialises (no            rank 0 ──creates──▶ /dev/shm/phos-nccl-<hash>
 *   NVLink multicast objects)            rank k ──joins───▶   (unlinked once all joined)
 *
 *                                    Collectives go in steps: each rank publishes a
 *                                    chunk into its slot, a generation-counted
 *                                    barrier, each computes its output from all the
 *                                    slots (two halves alternate, so one barrier a
 *                                    step suffices). Send/recv go through a byte
 *                                    pipe per (from, to) pair, in order.
 *
 * Results: unlike the device interface these return the ncclResult_t the
 * function gets (0 success, 2 system error, 4 invalid argument, 5 invalid
 * usage, 6 remote error, ...: runtime/libs/nccl_abi.h), converted from CUDA or
 * errno at this boundary by the backend.
 *
 * sim: a rank whose executor is gone (its pid no longer runs), that left or
 * aborted, makes every other rank's waiting call fail with ncclRemoteError at
 * once; any wait ends after PHOS_NCCL_TIMEOUT_MS (default 60000) with
 * ncclSystemError. A failed communicator stays failed (as NCCL's: abort it).
 */
#pragma once

#include <stdint.h>

#include "nccl_abi.h"
#include "proto.h"

struct phos_nccl_params {
	int32_t nranks, rank, device;
	int32_t blocking;                         /* -1: not given; 0: nonblocking (init above) */
	int32_t cga_cluster_size, min_ctas, max_ctas; /* PHOS_NCCL_CONFIG_UNDEF_INT: not given */
};

struct phos_nccl_ops {
	const char *name;                          /* "cuda" or "sim" */
	int (*version)(int *ret_version);
	int (*unique_id)(uint8_t ret_id[PHOS_NCCL_ID_BYTES]);
	/* Blocks until every rank joined (NCCL's ncclCommInitRank); with
	 * p->blocking 0 (nonblocking) may answer PHOS_NCCL_IN_PROGRESS at once
	 * with *ret_comm set: async_error then answers IN_PROGRESS until it is
	 * made. A nonblocking communicator's collectives and the group ends that
	 * involve it may answer IN_PROGRESS the same way. */
	int (*init)(const uint8_t id[PHOS_NCCL_ID_BYTES], const struct phos_nccl_params *p, void **ret_comm);
	/* Blocks until made; the child is blocking whatever the parent is.
	 * *ret_comm is NULL for color PHOS_NCCL_SPLIT_NOCOLOR. */
	int (*split)(void *comm, int color, int key, void **ret_comm, int *ret_nranks, int *ret_rank);
	int (*finalize)(void *comm);
	/* Both free comm, whatever they return. */
	int (*destroy)(void *comm);
	int (*abort)(void *comm);
	int (*async_error)(void *comm, int *ret_error);
	/* Groups are the calling thread's (the executor's one dispatcher). */
	int (*group_start)(void);
	int (*group_end)(void);
	/* One collective or send/recv (c->comm, c->stream are the caller's ids and
	 * unused here) on stream (a stream of the device backend, NULL: default).
	 * Inside a group it may only be queued: its error comes at group_end. */
	int (*coll)(void *comm, const struct phos_nccl_coll *c, void *stream);
};

extern const struct phos_nccl_ops phos_nccl_sim;
extern const struct phos_nccl_ops phos_nccl_cuda;
