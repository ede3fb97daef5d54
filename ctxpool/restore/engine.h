/* SPDX-License-Identifier: MIT */
/*
 * The restore engine: moves a snapshot's buffer contents onto the device, either
 * before the function runs (stop-the-world) or while it runs (soft on-demand
 * restore, docs/design.md "Restore", steps 4 and 5).
 *
 *   cold:  gpu.data ─io_uring read─▶ pinned slot ─H2D─▶ device     (O_DIRECT when the
 *                                       └─ hash (workers) ─┘        image is not cached)
 *   hot:   pinned, verified mapping of gpu.data ─────H2D─────▶ device   (exec_hot.c)
 *          (a chunk of zero bytes only, as its verification found: a device
 *           memset instead, no bus transfer)
 *
 * Order: promoted items first, then the order the items were given in (the
 * snapshot's recorded first-touch order, then address order). At most
 * STAGE_SLOTS chunks of 4 MiB are in flight, so a promoted item waits for at
 * most that much data ahead of it.
 *
 * Gates: item i has a readiness flag (device.h, flags_alloc). Once all of its
 * bytes are queued and its checksum matched, the engine sets flag i on the
 * restore stream, behind its copies. A forwarded call whose read/write set
 * touches an item not yet resident promotes the item, and its stream waits for
 * that flag (loader_gate): no call ever sees bytes that were not verified, and
 * the function's CPU side does not wait (its calls are asynchronous). The
 * dispatcher itself waits until the item's copies and flag write are queued
 * (its bytes read and verified) before it queues the wait: a stream must never
 * wait for work that is not queued yet, because CUDA's lazy module loading may
 * synchronize the context at a kernel's first launch, and that would deadlock
 * with the engine (seen on the H100). In-flight depth is bounded, so that wait
 * is short for a promoted item.
 *
 * Failure (read error, short file, checksum mismatch): with background set, the
 * engine logs why, reports ERROR on the control socket (runtime/proto/control.h) and ends the
 * executor process, so the function's gated work never runs and the invoker
 * fails that cold start; without it, loader_wait returns the error.
 *
 * PHOS_RESTORE_THROTTLE_MIBPS caps the engine's rate: tests use it to hold a
 * restore open long enough to watch promotions. Never set in production.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "executor.h"

struct loader_item {
	uint64_t dev;    /* device address */
	uint64_t len;    /* bytes */
	uint64_t off;    /* in gpu.data, 4 KiB aligned */
	uint64_t hash;   /* expected checksum (image.h) */
	uint64_t id;     /* buffer id in the snapshot (for the trace and the touch order) */
	int32_t device;  /* the executor device that holds dev (0 over one GPU) */
};

struct loader_source {
	int fd;                /* gpu.data, for reading; the loader closes it */
	bool direct;           /* fd was opened with O_DIRECT */
	const uint8_t *map;    /* hot: a pinned mapping of gpu.data whose checksums were
				* verified when it was pinned, or NULL */
	const struct exec_zero_run *zeros;   /* with map: its runs of zero bytes (sorted);
					      * chunks inside one are set, not copied */
	size_t nzeros;
	bool background;       /* on-demand: a failure ends the process (above) */
	bool unplaced;         /* the buffers are being mapped: the engine moves item k
				* only once loader_placed said so */
};

struct loader;

/* Starts moving items (in this order) from src onto the device, whose buffers
 * must be mapped already, or (src->unplaced) mapped in this order while it
 * runs. Returns at once; src->fd is taken over either way. */
int loader_start(struct executor *ex, const struct loader_item *items, size_t n, const struct loader_source *src,
		 struct loader **ret_loader, char *err, size_t errlen);

/* src->unplaced: the buffers of items [0, k) are mapped now (k only grows;
 * every item must be placed before the function runs). */
void loader_placed(struct loader *l, size_t k);

/* Waits until every item is resident and verified (stop-the-world). */
int loader_wait(struct loader *l, char *err, size_t errlen);

/* Whether every item is resident (no gate needed any more). */
bool loader_done(const struct loader *l);

/* Before a call on stream (of executor device sdev) touches [addr, addr+len):
 * every item it overlaps that is not resident yet is promoted, and stream waits
 * for its flag; for an item on another device (peer access) the caller waits on
 * the CPU until it is resident instead. Records first touches. Returns 0 or a
 * negated cudaError_t. */
int loader_gate(struct loader *l, int sdev, void *stream, uint64_t addr, uint64_t len);

/* The same for a call whose set is not known (overflowed): waits for every item. */
int loader_gate_all(struct loader *l, int sdev, void *stream);

/* Blocks the caller until the items overlapping [addr, addr+len) are resident
 * (cudaFree of a buffer still being restored). */
int loader_settle(struct loader *l, uint64_t addr, uint64_t len);

/* The ids of the items touched so far, in first-touch order; returns how many
 * (up to max). */
size_t loader_touched(struct loader *l, uint64_t *ret_ids, size_t max);

/* Stops the engine (releasing any stream still waiting for a flag: call it only
 * when the function is gone or reset) and frees everything; accepts NULL. */
void loader_free(struct loader *l);
