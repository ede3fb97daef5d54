/* SPDX-License-Identifier: MIT */
/*
 * What the sim backend's own files share beyond device_sim.h: the device and
 * stream structs, and the core (device_sim_core.c) that keeps the object list,
 * checks streams and checks ranges. device_sim.c (the ops table, memory,
 * streams, events, modules, twins) and the sub-files (cuBLAS, graphs,
 * textures, ...) call down into the core; the core calls none of them.
 */
#pragma once

#include <pthread.h>

#include "device_sim.h"

#define SIM_CHUNK (2ull << 20)
#define SIM_MAX_PLUGINS 64u

/* Stream attributes sim keeps (CUlaunchAttributeID 1..10; those valid for
 * streams: access policy window, synchronization policy, priority, memory
 * sync domain map and domain). */
#define SIM_STREAM_ATTRS 11
#define SIM_LIMITS 7                     /* CU_LIMIT_STACK_SIZE .. PERSISTING_L2_CACHE_SIZE */

struct sim_stream_attrs {
	uint8_t v[SIM_STREAM_ATTRS][PHOS_STREAM_ATTR_BYTES];
};

#define SIM_MAX_SCRATCH 4096

struct sim_device {
	pthread_mutex_t lock;            /* chunk_bits, counters, var region, object list */
	struct sim_stream_attrs default_attrs;   /* of the NULL stream */
	uint64_t limits[SIM_LIMITS];
	uint64_t base, size, nchunks;
	uint64_t *chunk_bits;
	uint64_t mapped_bytes;
	uint64_t total_mem;              /* SIM_TOTAL_MEM, or PHOS_SIM_MEMORY (tests) */
	unsigned copy_delay_us;          /* PHOS_SIM_COPY_DELAY_US (tests): before each host copy */
	unsigned map_delay_us;           /* PHOS_SIM_MAP_DELAY_US (tests): before each mapping */
	uint64_t var_base, var_used, var_rw;
	struct { uint64_t addr, len; } scratch[SIM_MAX_SCRATCH];   /* scratch_alloc's, addr 0: free */
	struct phos_sim_obj objs;        /* list head */
	struct sim_twin_entry *twins;    /* sorted by name */
	size_t ntwins;
	void *plugins[SIM_MAX_PLUGINS];
	size_t nplugins;
	struct sim_device *peers[8];     /* devices whose memory this one reaches (peer_add) */
	size_t npeers;
	/* host callbacks (sim_stream_host_func): cb_lock guards these and the
	 * streams' counts; cb_cond tells of a callback's end */
	pthread_mutex_t cb_lock;
	pthread_cond_t cb_cond;
	uint64_t null_issued, null_done; /* the NULL stream's callbacks */
	/* the order of the callbacks of the NULL stream and of blocking streams
	 * (which wait for each other's work): one sequence for all of them */
	uint64_t legacy_issued, legacy_done;
	unsigned cb_out;                 /* out, all of them (also read without the lock) */
	/* pinned host ranges (host_register), as the driver keeps them: no two
	 * overlap, and a copy may not straddle one's edge */
	pthread_mutex_t reg_lock;
	struct { uintptr_t addr, len; } *regs;
	size_t nregs, regs_cap;
};

struct sim_stream {
	struct phos_sim_obj obj;
	uint32_t flags;
	int priority;
	struct sim_stream_attrs attrs;
	uint64_t cb_issued, cb_done;     /* its host callbacks (under the device's cb_lock) */
};

/* The handle device.h passes around is opaque; each backend converts it to its
 * own struct at the boundary, once per op. */
static inline struct sim_device *sim_dev(struct phos_device *dev)
{
	return (struct sim_device *)(void *)dev;
}

/* Whether chunk c of the arena is mapped. With dev->lock held. */
static inline bool chunk_test(const struct sim_device *dev, uint64_t c)
{
	return dev->chunk_bits[c / 64] >> (c % 64) & 1;
}

/* Unlinks o from its device's object list and clears its magic, with the
 * device's lock held. */
static inline void obj_unlink_locked(struct phos_sim_obj *o)
{
	o->prev->next = o->next;
	o->next->prev = o->prev;
	o->magic = 0;
}

/* Whether work on s (NULL: the legacy default stream) must still wait for
 * host callbacks: its own, and between the legacy stream and blocking
 * streams each other's. With cb_lock held. */
bool phos_sim_callbacks_ahead(const struct sim_device *dev, const struct sim_stream *s);
/* Returns once no host callback that work on s (NULL: the legacy default
 * stream) must wait for is still out: its own, and between the legacy stream
 * and blocking streams each other's. Takes cb_lock only while some are out. */
void phos_sim_callbacks_wait(struct sim_device *dev, const struct sim_stream *s);

/* Memory shared between executors (device.h share_out, share_in, share_own;
 * device_sim_share.c): a sealed memfd mapped read-only. */
int phos_sim_share_out(struct phos_device *pdev, uint64_t addr, uint64_t len, int *ret_fd);
int phos_sim_share_in(struct phos_device *pdev, uint64_t addr, uint64_t len, int fd);
int phos_sim_share_own(struct phos_device *pdev, uint64_t addr, uint64_t len);
