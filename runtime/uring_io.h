/* SPDX-License-Identifier: MIT */
/*
 * io_uring I/O with a bounded number of operations in flight (liburing).
 *
 *   queue read/write(fd, buf, len, off, tag) ─▶ SQ ─▶ kernel ─▶ CQ ─▶ complete() → tag, result
 *
 * Used by the snapshot writer (pinned staging → gpu.data) and the restore
 * reader (gpu.data → pinned staging). Short transfers are resubmitted for the
 * rest internally, so a completion means the whole range moved or failed.
 * PHOS_UIO_ASYNC sets IOSQE_ASYNC: page-cache hits are then served by io_uring
 * workers in parallel instead of inline (5 GB/s inline vs 42 GB/s with 64 in
 * flight on the GPU machine; docs/design.md). Buffers for O_DIRECT files must be
 * 4 KiB aligned, as must offsets and lengths (except at the end of the file for
 * reads).
 *
 * Fault injection (runtime/fault.h): the points "uio_write" and "uio_read"
 * make an operation complete with -ENOSPC / -EIO.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum phos_uio_flags {
	PHOS_UIO_ASYNC = 1u << 0,
};

struct phos_uio;

/* An io_uring with up to depth (1..4096) operations in flight. */
int phos_uio_new(unsigned depth, struct phos_uio **ret_uio);
void phos_uio_free(struct phos_uio *uio); /* waits for in-flight ops; accepts NULL */

/* Queue an operation; when depth ops are in flight, first waits for one to
 * complete (its completion is kept for phos_uio_complete). Returns 0 or -errno. */
int phos_uio_read(struct phos_uio *uio, int fd, void *buf, size_t len, uint64_t off, void *tag,
		  unsigned flags);
int phos_uio_write(struct phos_uio *uio, int fd, const void *buf, size_t len, uint64_t off, void *tag,
		   unsigned flags);

/* Submits what is queued and returns one finished operation: 1 with its tag and
 * its result (0, or -errno; a read past EOF gives -ENODATA), or 0 when nothing
 * finished and wait is false or nothing is in flight. */
int phos_uio_complete(struct phos_uio *uio, bool wait, void **ret_tag, int *ret_result);

/* Operations queued or in flight. */
unsigned phos_uio_inflight(const struct phos_uio *uio);
