/* SPDX-License-Identifier: MIT */
/*
 * The staging pipeline between device memory and a snapshot's gpu.data.
 *
 *   dump:  device ──D2H──▶ pinned slot ──hash──▶ io_uring write ──▶ gpu.data
 *   load:  gpu.data ──io_uring read──▶ pinned slot ──hash──▶ H2D ──▶ device
 *
 * A ring of STAGE_SLOTS pinned slots of PHOS_IMAGE_HASH_CHUNK bytes (64 MiB,
 * DESIGN.md's staging budget) keeps disk and copy engine busy at once: each
 * slot moves one 4 MiB chunk and is reused once its write completed (dump) or
 * its copy event fired (load). Chunk hashes are combined per item into the
 * image checksum (image.h). Reads are IOSQE_ASYNC so that page-cache hits are
 * served in parallel.
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
	uint64_t hash;   /* dump: filled in; load: expected */
};

/* Copies every item from the device into fd, filling in their hashes. */
int stage_dump(struct executor *ex, int fd, struct stage_item *items, size_t n, char *err, size_t errlen);

/* Copies every item from fd to the device and verifies its hash; on a mismatch
 * returns -EBADMSG with the item named in err. Returns once the data is on the
 * device. */
int stage_load(struct executor *ex, int fd, const struct stage_item *items, size_t n, char *err,
	       size_t errlen);

/* The same from a pinned mapping of the page cache (see staging.c); for an
 * image that is in the page cache. */
int stage_load_mapped(struct executor *ex, int fd, const struct stage_item *items, size_t n, char *err,
		      size_t errlen);
