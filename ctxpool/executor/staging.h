/* SPDX-License-Identifier: MIT */
/*
 * The staging pipeline from device memory to a snapshot's gpu.data (the way
 * back is the restore engine, restore/engine.h, with the same slot ring size):
 *
 *   dump:  device ──D2H──▶ pinned slot ──hash──▶ io_uring write ──▶ gpu.data
 *
 * A ring of STAGE_SLOTS pinned slots of PHOS_IMAGE_HASH_CHUNK bytes (64 MiB,
 * docs/design.md's staging budget) keeps disk and copy engine busy at once: each
 * slot moves one 4 MiB chunk and is reused once its write completed. Chunk
 * hashes are combined per item into the image checksum (image.h).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "executor.h"

#define STAGE_SLOTS 16
#define STAGE_SLOTS_MAX 64  /* PHOS_STAGE_SLOTS may choose 4..64 (16..256 MiB) */

struct stage_item {
	uint64_t dev;    /* device address */
	uint64_t len;    /* bytes */
	uint64_t off;    /* in gpu.data, 4 KiB aligned */
	uint64_t hash;   /* filled in */
	uint64_t *chunk_hashes;   /* NULL, or where stage_dump also puts the
				   * hashes of its 4 MiB chunks (a piece of a
				   * bigger item: exec_recopy.c) */
};

/* Copies every item from the device into fd, filling in their hashes, through
 * the executor's ring (made at the first dump; taken down after a failed one).
 * The dispatcher's: one dump at a time. */
int stage_dump(struct executor *ex, int fd, struct stage_item *items, size_t n, char *err, size_t errlen);
/* Takes the executor's ring down (its pinned slots, workers, stream); accepts none. */
void stage_ring_free(struct executor *ex);

/*
 * Checkpoints through memory (issue 11): the whole of gpu.data's image in
 * pinned host memory, so that a stop-the-world checkpoint holds the function
 * only while the copy engine moves its buffers (pinned D2H rate), and the
 * hashing and the writing come after, while it runs again:
 *
 *   ask (control thread)   stage_host_new: mapped, populated and pinned
 *                          (the function runs meanwhile)
 *   the stop (dispatcher)  stw: stage_host_copy, every item at its gpu.data
 *                          offset, returns when all have landed; cow:
 *                          stage_host_enqueue per item (exec_checkpoint.c)
 *   after RESUME (thread)  stage_host_write: hashes and writes it, in
 *                          parallel, filling in the items' hashes
 *
 * Its size is capped by PHOS_HOST_COPY_MAX (bytes; 0 turns it off), by
 * default half of the host's available memory: a bigger state is dumped
 * through the ring (stage_dump): stw holds the function until it is
 * written, cow copies buffer by buffer between records.
 */
struct stage_host {
	uint8_t *buf;
	uint64_t len;
	uint64_t piece;            /* pinned in pieces of this (staging.c, HOST_PIN_PIECE) */
	uint64_t pinned_len;       /* pinned from buf on */
	uint64_t released;         /* unpinned and unmapped from buf on (stage_host_reap) */
	struct stage_host *next;   /* on the executor's list to give back (stage_host_free) */
};

/* A pinned host image of at least bytes, or NULL (over the cap, no memory:
 * why is logged). Any thread. */
struct stage_host *stage_host_new(struct executor *ex, uint64_t bytes);
/* Whether every item ends inside h. */
bool stage_host_holds(const struct stage_host *h, const struct stage_item *items, size_t n);
/* Queues the copy of it from the device to h->buf + it->off on stream
 * (-ENOSPC when it does not end inside h). The dispatcher's. */
int stage_host_enqueue(struct executor *ex, struct stage_host *h, const struct stage_item *it, void *stream, char *err,
		       size_t errlen);
/* Copies every item from the device to h->buf + item.off and waits for all
 * of them. Every item must end inside h. The dispatcher's. */
int stage_host_copy(struct executor *ex, struct stage_host *h, const struct stage_item *items, size_t n, char *err,
		    size_t errlen);
/* Writes the items' bytes from h into fd at their offsets and fills in their
 * hashes, with up to 16 threads; no device call. Any thread. */
int stage_host_write(const struct stage_host *h, int fd, struct stage_item *items, size_t n, char *err,
		     size_t errlen);
/* Unmaps h, or, when pinned, puts it on the executor's list for
 * stage_host_reap; accepts NULL. Any thread. Unpinning waits for the
 * device's host callbacks, and the driver holds the other threads' calls
 * meanwhile: with a callback out that waits for the program's next call, the
 * program, the callback and the dispatcher would wait for each other (on
 * the H100 a host copy unpinned by the checkpoint's writer held the program
 * until the callback gave up). */
void stage_host_free(struct executor *ex, struct stage_host *h);
/* Unpins and unmaps the host copies stage_host_free put aside: all of them,
 * or (all false) one piece, only where no host callback of the function is
 * out and paced so that the program's records take at least two thirds of
 * the dispatcher's time (each piece holds the program's copies for a few
 * milliseconds: staging.c, HOST_PIN_PIECE). The dispatcher's, between
 * records (no callback can be queued meanwhile). */
void stage_host_reap(struct executor *ex, bool all);
