/* SPDX-License-Identifier: MIT */
/*
 * Whole reads and writes: what a short write or a signal leaves undone is
 * done, or the error says why.
 */
#ifndef PHOS_FDIO_H
#define PHOS_FDIO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Writes all len bytes of p to fd (retrying short writes and EINTR): 0, or
 * -errno of the write that failed (some bytes may be written then). */
int phos_write_all(int fd, const void *p, size_t len);
/* The same at offset off (pwrite), the file position untouched. A write of
 * nothing where bytes remain is -EIO. */
int phos_pwrite_all(int fd, const void *p, size_t len, uint64_t off);

/* Reads up to len bytes of fd into buf (retrying short reads and EINTR):
 * how many (fewer only at end of file), or -errno. */
ssize_t phos_read_full(int fd, void *buf, size_t len);
/* The first size bytes of the file at path in a new buffer (malloc; the
 * caller frees it): 0, or -errno (-ENODATA when the file is shorter). */
int phos_read_file(const char *path, uint64_t size, void **ret_data);

#endif
