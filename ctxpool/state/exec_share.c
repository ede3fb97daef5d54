/* SPDX-License-Identifier: MIT */
/*
 * Buffers shared between the instances of one snapshot on one GPU (issue 42).
 *
 *   first instance (RESTORE share, no SHAREs before it: a fill)
 *     every buffer restored as usual, all of it before READY; then each big
 *     buffer (whole 2 MiB chunks of its own) moves into shareable memory
 *     mapped read-only (device.h share_out) and goes to the controller as
 *     SHARED {id, addr, size, hash} + its descriptor
 *   later instances (SHAREs, then RESTORE share: a use)
 *     each SHARE that is exactly a buffer of the snapshot is mapped read-only
 *     at its address (share_in) in place of new memory, and the restore
 *     engine leaves it out: nothing to read, nothing to copy
 *   every instance, before a call writes (spec_commit)
 *     each shared buffer in the call's write set (every one, for an opaque
 *     kernel or an overflowing set) becomes the instance's own copy first
 *     (share_own, the device drained): copy on write at buffer granularity;
 *     its id is kept for COPIED, from which the invoker learns the buffers
 *     that an instance's first call writes (no longer shared from then on)
 *
 * The device maps shared memory read-only, so a write that this file missed
 * faults the instance that made it; no other instance can see it. A
 * shared mapping is dropped by the unmap of its buffer like any other, and
 * the memory lives while any instance maps it or the controller holds its
 * descriptor. Checkpoints read shared buffers as any other, so a checkpoint
 * holds one copy of each. Only the dispatcher calls in here, except the
 * counters, which the control thread reads.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "executor.h"
#include "image.h"
#include "log.h"

static uint64_t chunks_of(uint64_t size)
{
	return (size + PHOS_CHUNK - 1) / PHOS_CHUNK * PHOS_CHUNK;
}

int exec_share_pending_add(struct executor *ex, const struct phos_ctl_msg *m)
{
	struct exec_share_in *p;

	if (ex->nshare_pending >= EXEC_SHARE_MAX) {
		close(m->fd);
		return -E2BIG;
	}
	p = realloc(ex->share_pending, (ex->nshare_pending + 1) * sizeof(*p));
	if (!p) {
		close(m->fd);
		return -ENOMEM;
	}
	ex->share_pending = p;
	p[ex->nshare_pending++] = (struct exec_share_in){ m->share.id, m->share.addr, m->share.size, m->share.hash,
							  m->fd, false };
	return 0;
}

void exec_share_pending_clear(struct executor *ex)
{
	for (size_t i = 0; i < ex->nshare_pending; i++)
		if (ex->share_pending[i].fd >= 0)
			close(ex->share_pending[i].fd);
	free(ex->share_pending);
	ex->share_pending = NULL;
	ex->nshare_pending = 0;
}

uint64_t exec_share_match(struct executor *ex, const struct phos_image *img)
{
	uint64_t bytes = 0;

	for (size_t i = 0; i < ex->nshare_pending; i++) {
		struct exec_share_in *s = &ex->share_pending[i];
		uint32_t at = phos_image_buf_at(img, s->addr);
		const struct phos_image_buf *b = at < img->nbufs ? &img->bufs[at] : NULL;

		s->use = b && ex->ndevs == 1 && !img->checkpoint.present && b->id == s->id && b->size == s->size &&
			 b->hash == s->hash && b->size >= PHOS_CHUNK && ex->dev_ops->share_in;
		if (!s->use) {
			phos_warn("share: buffer %llu at %#llx is not this snapshot's as offered; restored privately",
				  (unsigned long long)s->id, (unsigned long long)s->addr);
			close(s->fd);
			s->fd = -1;
			continue;
		}
		bytes += chunks_of(s->size);
	}
	return bytes;
}

/* Keeps [addr, addr+len) (buffer id) in the sorted list of shared mappings. */
static int shared_add(struct executor *ex, uint64_t addr, uint64_t len, uint64_t id)
{
	struct exec_shared *p = realloc(ex->shared, (ex->nshared + 1) * sizeof(*p));
	size_t at = ex->nshared;

	if (!p)
		return -ENOMEM;
	ex->shared = p;
	while (at > 0 && p[at - 1].addr > addr)
		at--;
	memmove(&p[at + 1], &p[at], (ex->nshared - at) * sizeof(*p));
	p[at] = (struct exec_shared){ addr, len, id };
	ex->nshared++;
	atomic_fetch_add(&ex->shared_bytes, len);
	return 0;
}

static void shared_drop(struct executor *ex, size_t i)
{
	atomic_fetch_sub(&ex->shared_bytes, ex->shared[i].len);
	memmove(&ex->shared[i], &ex->shared[i + 1], (ex->nshared - i - 1) * sizeof(*ex->shared));
	ex->nshared--;
}

int exec_share_map(struct executor *ex, uint64_t addr, uint64_t len)
{
	for (size_t i = 0; i < ex->nshare_pending; i++) {
		struct exec_share_in *s = &ex->share_pending[i];
		int r;

		if (!s->use || s->addr != addr || chunks_of(s->size) != len)
			continue;
		r = ex->dev_ops->share_in(ex->devs[0], addr, len, s->fd);
		close(s->fd);
		s->fd = -1;
		s->use = false;
		if (r < 0)
			return r;
		r = shared_add(ex, addr, len, s->id);
		if (r < 0) {
			ex->dev_ops->unmap(ex->devs[0], addr, len);
			return -PHOS_CUDA_MEMORY_ALLOCATION;
		}
		return 1;
	}
	return 0;
}

/* The index of the shared mapping that overlaps [addr, addr+len) first, or nshared. */
static size_t shared_first(const struct executor *ex, uint64_t addr, uint64_t len)
{
	size_t lo = 0, hi = ex->nshared;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ex->shared[mid].addr + ex->shared[mid].len <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < ex->nshared && ex->shared[lo].addr < addr + len ? lo : ex->nshared;
}

bool exec_share_is_shared(const struct executor *ex, uint64_t addr, uint64_t len)
{
	return ex->nshared && shared_first(ex, addr, len) < ex->nshared;
}

size_t exec_share_publish(struct executor *ex, const struct phos_image *img)
{
	size_t n = 0;

	if (!ex->dev_ops->share_out || ex->ndevs != 1 || img->checkpoint.present)
		return 0;
	for (uint32_t i = 0; i < img->nbufs; i++) {
		const struct phos_image_buf *b = &img->bufs[i];
		struct phos_ctl_msg m = { .type = PHOS_CTL_SHARED, .fd = -1 };
		uint64_t len = chunks_of(b->size);
		int fd = -1;

		/* (a cuBLAS workspace: written by calls whose sets do not name it) */
		if (b->size < PHOS_CHUNK || b->addr % PHOS_CHUNK || phos_image_buf_holds_workspace(img, b))
			continue;
		if (ex->dev_ops->share_out(ex->devs[0], b->addr, len, &fd) < 0)
			continue;   /* (stays as it was: private, read/write) */
		if (shared_add(ex, b->addr, len, b->id) < 0) {
			close(fd);
			/* mapped read-only now: only a private copy can be written */
			if (ex->dev_ops->share_own(ex->devs[0], b->addr, len) < 0)
				phos_err("share: buffer %#llx is left read-only", (unsigned long long)b->addr);
			continue;
		}
		m.fd = fd;
		m.share.id = b->id;
		m.share.addr = b->addr;
		m.share.size = b->size;
		m.share.hash = b->hash;
		exec_control_send(ex, &m);
		close(fd);
		n++;
	}
	return n;
}

/* Keeps id among the buffers copied on write (at most EXEC_SHARE_MAX: the
 * rest are not told). */
static void copied_add(struct executor *ex, uint64_t id)
{
	uint32_t n = atomic_load(&ex->ncopied);

	if (!ex->copied && !(ex->copied = calloc(EXEC_SHARE_MAX, sizeof(*ex->copied))))
		return;
	if (n == EXEC_SHARE_MAX)
		return;
	ex->copied[n] = id;
	atomic_store_explicit(&ex->ncopied, n + 1, memory_order_release);
}

uint32_t exec_share_copied(struct executor *ex, uint64_t *ret_ids, uint32_t max)
{
	uint32_t n = atomic_load_explicit(&ex->ncopied, memory_order_acquire);

	if (n > max)
		n = max;
	if (n)
		memcpy(ret_ids, ex->copied, n * sizeof(*ret_ids));
	return n;
}

/* Mapping i becomes the instance's own copy. */
static int own(struct executor *ex, size_t i)
{
	uint64_t addr = ex->shared[i].addr, len = ex->shared[i].len;
	int r;

	r = ex->dev_ops->share_own(ex->devs[0], addr, len);
	if (r < 0) {
		phos_err("share: a private copy of %#llx+%#llx failed (cuda error %d)", (unsigned long long)addr,
			 (unsigned long long)len, -r);
		return r;
	}
	copied_add(ex, ex->shared[i].id);
	shared_drop(ex, i);
	atomic_fetch_add(&ex->cow_bytes, len);
	return 0;
}

int exec_share_before_write(struct executor *ex, const struct spec_set *s)
{
	bool drained = false;
	int r;

	if (!ex->nshared)
		return 0;
	for (size_t i = 0; i < ex->nshared;) {
		bool hit = s->opaque || s->overflow;

		for (uint32_t k = 0; k < s->n && !hit; k++)
			hit = s->r[k].access & SPEC_WRITE && s->r[k].addr < ex->shared[i].addr + ex->shared[i].len &&
			      ex->shared[i].addr < s->r[k].addr + s->r[k].len;
		if (!hit) {
			i++;
			continue;
		}
		/* work in flight may still read the shared memory */
		if (!drained && (r = exec_drain_all(ex)) < 0)
			return r;
		drained = true;
		r = own(ex, i);   /* (drops entry i: the next is at i now) */
		if (r < 0)
			return r;
	}
	return 0;
}

void exec_share_unmapped(struct executor *ex, uint64_t addr, uint64_t len)
{
	size_t i;

	while (ex->nshared && (i = shared_first(ex, addr, len)) < ex->nshared)
		shared_drop(ex, i);
}

void exec_share_forget(struct executor *ex)
{
	free(ex->shared);
	ex->shared = NULL;
	ex->nshared = 0;
	atomic_store(&ex->shared_bytes, 0);
	atomic_store(&ex->cow_bytes, 0);
	atomic_store(&ex->ncopied, 0);   /* (the array stays for the next function) */
	ex->share_mode = EXEC_SHARE_NONE;
	exec_share_pending_clear(ex);
}
