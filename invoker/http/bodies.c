/* SPDX-License-Identifier: MIT */
/*
 * Request bodies being received, under two budgets shared by all requests:
 *
 *                 Content-Length (or, chunked, the bytes so far)
 *                    │
 *        ≤ --body-spill, or not spillable       > --body-spill, spillable
 *                    ▼                                   ▼
 *   heap buffer, --body-memory (512 MiB)   an unlinked file in STATE/bodies,
 *                                          --body-disk (4 GiB), written as
 *                                          it arrives; mapped read-only when
 *                                          whole, so the call sends it from
 *                                          the page cache, not the heap
 *
 * A body is admitted by its Content-Length before a byte of it is buffered,
 * and a chunked one takes its budget as it grows (moving to a file once it
 * passes --body-spill). Over a budget is -EAGAIN (the caller answers 503 with
 * Retry-After), over the route's limit -EFBIG (413), over a whole budget
 * -E2BIG (413: it could never be taken), a full disk -ENOSPC (507). Only invocation bodies spill: they are the large ones, and they are
 * handed on as one (pointer, length) to the function, the async store and a
 * forward to a migrated instance alike.
 *
 * Why a file rather than streaming to the function as bytes arrive: a call
 * holds an instance (a function process and its GPU executor) while its body
 * is sent, so a slow upload streamed straight through would pin an instance
 * for as long as the client takes; spilled, it pins only disk.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdio.h"
#include "invoker.h"
#include "log.h"

#define SPILL_STEP (4u << 20)   /* a chunked spilled body takes disk budget in such steps */

static _Atomic uint64_t mem_reserved, disk_reserved;
static _Atomic uint64_t bodies_now, bodies_most;   /* bodies holding budget */

/* b holds budget from now on: counted once. */
static void counted(struct inv_body *b)
{
	uint64_t now, most;

	if (b->counted)
		return;
	b->counted = true;
	now = atomic_fetch_add(&bodies_now, 1) + 1;
	most = atomic_load(&bodies_most);
	while (now > most && !atomic_compare_exchange_weak(&bodies_most, &most, now))
		;
}

void inv_bodies_admitted(uint64_t *ret_now, uint64_t *ret_most)
{
	*ret_now = atomic_load(&bodies_now);
	*ret_most = atomic_load(&bodies_most);
}
static int bodies_dir = -1;

int inv_bodies_init(void)
{
	char path[PATH_MAX];
	DIR *d;
	struct dirent *de;

	if ((size_t)snprintf(path, sizeof(path), "%s/bodies", inv_cfg.state_dir) >= sizeof(path))
		return -ENAMETOOLONG;
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return -errno;
	bodies_dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (bodies_dir < 0)
		return -errno;
	/* named files exist only where O_TMPFILE is not supported, and only
	 * between their creation and unlink: any found now is a crash's */
	d = fdopendir(dup(bodies_dir));
	if (!d)
		return -errno;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.' && unlinkat(bodies_dir, de->d_name, 0) == 0)
			phos_warn("removed %s/%s, a request body left by a crash", path, de->d_name);
	closedir(d);
	return 0;
}

static bool reserve(_Atomic uint64_t *pool, uint64_t limit, uint64_t n)
{
	uint64_t cur = atomic_load(pool);

	do {
		if (cur + n > limit || cur + n < cur)
			return false;
	} while (!atomic_compare_exchange_weak(pool, &cur, cur + n));
	return true;
}

static bool mem_take(struct inv_body *b, uint64_t n)
{
	if (!reserve(&mem_reserved, inv_cfg.body_memory, n))
		return false;
	b->mem_reserved += n;
	counted(b);
	return true;
}

static bool disk_take(struct inv_body *b, uint64_t n)
{
	if (!reserve(&disk_reserved, inv_cfg.body_disk, n))
		return false;
	b->disk_reserved += n;
	counted(b);
	return true;
}

/* An unlinked, private file in STATE/bodies: its fd, or -errno. */
static int spill_open(void)
{
	int fd = openat(bodies_dir, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR))
		return fd < 0 ? -errno : fd;
	for (int tries = 0; tries < 16; tries++) {   /* no O_TMPFILE here: a random name, unlinked at once */
		char name[32];

		snprintf(name, sizeof(name), "body-%08x%08x", (unsigned)random(), (unsigned)random());
		fd = openat(bodies_dir, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0) {
			unlinkat(bodies_dir, name, 0);
			return fd;
		}
		if (errno != EEXIST)
			break;
	}
	return -errno;
}

/* Moves b to a file, its disk budget n bytes (0: as it grows). */
static int spill(struct inv_body *b, uint64_t n)
{
	int fd;

	if (n && !disk_take(b, n))
		return -EAGAIN;
	fd = spill_open();
	if (fd < 0) {
		phos_err("cannot keep a request body in %s/bodies: %s", inv_cfg.state_dir, strerror(-fd));
		return fd;
	}
	if (b->len) {
		int r = phos_write_all(fd, b->data, b->len);

		if (r < 0) {
			close(fd);
			return r;
		}
	}
	free(b->data);
	b->data = NULL;
	b->cap = 0;
	atomic_fetch_sub(&mem_reserved, b->mem_reserved);
	b->mem_reserved = 0;
	b->fd = fd;
	return 0;
}

void inv_body_init(struct inv_body *b, size_t limit, bool spillable)
{
	*b = (struct inv_body){ .limit = limit, .spillable = spillable && inv_cfg.body_spill > 0, .fd = -1 };
}

int inv_body_admit(struct inv_body *b, uint64_t length)
{
	if (!length)
		return 0;
	if (length > b->limit)
		return -EFBIG;
	if (b->spillable && length > inv_cfg.body_spill)
		return length + 1 > inv_cfg.body_disk ? -E2BIG : spill(b, length + 1);
	if (length + 1 > inv_cfg.body_memory)
		return -E2BIG;
	return mem_take(b, length + 1) ? 0 : -EAGAIN;
}

int inv_body_add(struct inv_body *b, const char *p, size_t n)
{
	if (b->len + n > b->limit || b->len + n < b->len)
		return -EFBIG;
	if (b->fd < 0 && b->spillable && b->len + n > inv_cfg.body_spill) {
		int r = spill(b, 0);   /* a chunked body past the threshold */

		if (r < 0)
			return r;
	}
	if (b->fd >= 0) {
		int r;

		if (b->len + n + 1 > b->disk_reserved &&
		    !disk_take(b, b->len + n + 1 - b->disk_reserved + SPILL_STEP))
			return -EAGAIN;
		r = phos_write_all(b->fd, p, n);
		if (r < 0)
			return r;
		b->len += n;
		return 0;
	}
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : b->mem_reserved ? b->mem_reserved : 4096;
		char *d;

		while (cap < b->len + n + 1)
			cap *= 2;
		if (cap > b->mem_reserved && !mem_take(b, cap - b->mem_reserved))
			return -EAGAIN;   /* a chunked body takes its budget as it grows */
		if (!(d = realloc(b->data, cap)))
			return -ENOMEM;
		b->data = d;
		b->cap = cap;
	}
	memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

int inv_body_finish(struct inv_body *b)
{
	void *m;
	int r;

	if (b->fd < 0) {
		b->bytes = b->data ? b->data : "";
		return 0;
	}
	if (b->map)
		return 0;
	/* a NUL after the body, as a body in memory has */
	if ((r = phos_write_all(b->fd, "", 1)) < 0)
		return r;
	m = mmap(NULL, b->len + 1, PROT_READ, MAP_PRIVATE, b->fd, 0);
	if (m == MAP_FAILED)
		return -errno;
	madvise(m, b->len + 1, MADV_SEQUENTIAL);
	b->map = m;
	b->bytes = m;
	return 0;
}

void inv_body_exit(struct inv_body *b)
{
	if (b->map)
		munmap(b->map, b->len + 1);
	free(b->data);
	if (b->fd >= 0)
		close(b->fd);
	atomic_fetch_sub(&mem_reserved, b->mem_reserved);
	atomic_fetch_sub(&disk_reserved, b->disk_reserved);
	if (b->counted)
		atomic_fetch_sub(&bodies_now, 1);
	*b = (struct inv_body){ .fd = -1 };
}
