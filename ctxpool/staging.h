/* SPDX-License-Identifier: MIT */
/*
 * The staging pipeline from device memory to a snapshot's gpu.data (the way
 * back is the restore engine, loader.h, with the same slot ring size):
 *
 *   dump:  device ──D2H──▶ pinned slot ──hash──▶ io_uring write ──▶ gpu.data
 *
 * A ring of STAGE_SLOTS pinned slots of PHOS_IMAGE_HASH_CHUNK bytes (64 MiB,
 * DESIGN.md's staging budget) keeps disk and copy engine busy at once: each
 * slot moves one 4 MiB chunk and is reused once its write completed. Chunk
 * hashes are combined per item into the image checksum (image.h).
 */
#pragma once

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
};

/* Copies every item from the device into fd, filling in their hashes, through
 * the executor's ring (made at the first dump; taken down after a failed one).
 * The dispatcher's: one dump at a time. */
int stage_dump(struct executor *ex, int fd, struct stage_item *items, size_t n, char *err, size_t errlen);
/* Takes the executor's ring down (its pinned slots, workers, stream); accepts none. */
void stage_ring_free(struct executor *ex);
