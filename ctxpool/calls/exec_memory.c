/* SPDX-License-Identifier: MIT */
/* Device memory, copies, memsets, shared host regions and device queries. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "executor.h"
#include "image.h"
#include "engine.h"
#include "log.h"


static int do_malloc(struct executor *ex, const void *body, uint32_t len, void *out, uint32_t *out_len)
{
	BODY(struct phos_malloc, m);
	uint64_t addr;
	int r;

	if (m->size == 0) {
		memset(out, 0, 8);
		*out_len = 8;
		return 0;
	}
	r = phos_bufmap_alloc(ex->bufs, m->size, &addr);
	if (r < 0)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	memcpy(out, &addr, 8);
	*out_len = 8;
	return 0;
}

int exec_sync_function(struct executor *ex)
{
	int r;

	if (!ex->loader || loader_done(ex->loader))
		return ex->dev_ops->synchronize(ex->dev);
	/* A context-wide synchronize would wait for the whole background restore. */
	r = ex->dev_ops->stream_sync(ex->dev, NULL);
	for (uint32_t i = 0; i < ex->streams.cap && r == 0; i++) {
		struct exec_stream_obj *s = ex->streams.slot[i];

		if (s)
			r = ex->dev_ops->stream_sync(ex->dev, s->dev);
	}
	return r;
}

static int do_free(struct executor *ex, const void *body, uint32_t len)
{
	BODY(struct phos_free, f);

	if (f->addr == 0)
		return 0;
	if (exec_pool_owns(ex, f->addr)) {
		/* cudaFree of a stream-ordered allocation: back to its pool, then wait */
		struct phos_pool_free pf = { .addr = f->addr };
		uint32_t none = 0;

		TRY(exec_pool_handle(ex, PHOS_OP_POOL_FREE, &pf, sizeof(pf), NULL, &none));
		TRY(exec_sync_function(ex));
		exec_pool_after_sync(ex);
		return 0;
	}
	if (!phos_bufmap_find(ex->bufs, f->addr) || phos_bufmap_find(ex->bufs, f->addr)->addr != f->addr ||
	    !phos_bufmap_in_arena(ex->bufs, f->addr))
		return -PHOS_CUDA_INVALID_VALUE;
	/* cudaFree waits for the device, so that no queued work still uses the buffer
	 * (and the restore engine no longer writes to it). */
	if (ex->loader)
		TRY(loader_settle(ex->loader, f->addr, phos_bufmap_find(ex->bufs, f->addr)->size));
	exec_sync_function(ex);
	return phos_bufmap_release(ex->bufs, f->addr) < 0 ? -PHOS_CUDA_INVALID_VALUE : 0;
}

const struct exec_region *exec_region_at(struct executor *ex, uint32_t id, uint64_t off, uint64_t len)
{
	const struct exec_region *reg = handle_get(&ex->regions, id);

	if (!reg || off > reg->size || len > reg->size - off)
		return NULL;
	return reg;
}

static int copy(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		uint32_t *out_len)
{
	BODY(struct phos_memcpy, c);
	struct spec_set set;
	void *stream;
	int r;

	spec_clear(&set);
	TRY(exec_stream(ex, c->stream, &stream));
	switch (op) {
	case PHOS_OP_MEMCPY_H2D:
		if (c->len != len - sizeof(*c))
			return -PHOS_CUDA_INVALID_VALUE;
		TRY(spec_range(ex, &set, c->dst, c->len, SPEC_WRITE));
		TRY(spec_commit(ex, "memcpy_h2d", NULL, c->stream, &set));
		return c->len ? ex->dev_ops->memcpy_h2d(ex->dev, c->dst, c + 1, c->len, stream) : 0;
	case PHOS_OP_MEMCPY_D2H:
		if (c->len > PHOS_REPLY_MAX)
			return -PHOS_CUDA_INVALID_VALUE;
		TRY(spec_range(ex, &set, c->src, c->len, SPEC_READ));
		TRY(spec_commit(ex, "memcpy_d2h", NULL, c->stream, &set));
		r = c->len ? ex->dev_ops->memcpy_d2h(ex->dev, out, c->src, c->len, stream) : 0;
		if (r == 0)
			*out_len = (uint32_t)c->len;
		return r;
	default: /* D2D */
		TRY(spec_range(ex, &set, c->src, c->len, SPEC_READ));
		TRY(spec_range(ex, &set, c->dst, c->len, SPEC_WRITE));
		TRY(spec_commit(ex, "memcpy_d2d", NULL, c->stream, &set));
		return c->len ? ex->dev_ops->memcpy_d2d(ex->dev, c->dst, c->src, c->len, stream) : 0;
	}
}

static int copy_shm(struct executor *ex, uint32_t op, const void *body, uint32_t len)
{
	BODY(struct phos_memcpy_shm, c);
	const struct exec_region *reg = exec_region_at(ex, c->region, c->offset, c->len);
	struct spec_set set = { 0 };
	void *stream;
	bool h2d = op == PHOS_OP_MEMCPY_H2D_SHM;

	if (!reg)
		return -PHOS_CUDA_INVALID_VALUE;
	TRY(exec_stream(ex, c->stream, &stream));
	TRY(spec_range(ex, &set, c->dev, c->len, h2d ? SPEC_WRITE : SPEC_READ));
	TRY(spec_commit(ex, h2d ? "memcpy_h2d" : "memcpy_d2h", NULL, c->stream, &set));
	if (!c->len)
		return 0;
	/* The region is the user's pinned memory: like CUDA, the copy runs
	 * asynchronously and the user synchronises before touching it; a
	 * synchronous cudaMemcpy waits here for its stream. */
	if (h2d)
		TRY(ex->dev_ops->memcpy_h2d_async(ex->dev, c->dev, (uint8_t *)reg->ptr + c->offset, c->len, stream));
	else
		TRY(ex->dev_ops->memcpy_d2h_async(ex->dev, (uint8_t *)reg->ptr + c->offset, c->dev, c->len, stream));
	return ex->sync ? ex->dev_ops->stream_sync(ex->dev, stream) : 0;
}

static int do_memset(struct executor *ex, const void *body, uint32_t len)
{
	BODY(struct phos_memset, m);
	struct spec_set set = { 0 };
	void *stream;

	TRY(exec_stream(ex, m->stream, &stream));
	TRY(spec_range(ex, &set, m->dst, m->len, SPEC_WRITE));
	TRY(spec_commit(ex, "memset", NULL, m->stream, &set));
	return m->len ? ex->dev_ops->memset(ex->dev, m->dst, (uint8_t)m->value, m->len, stream) : 0;
}

/*
 * Pitched copies and sets. Each device side's set is its bounding range, from
 * the first byte of its first row to the last byte of its last row, which must
 * lie inside one live buffer (else cudaErrorInvalidValue, before anything is
 * touched): a superset of the bytes touched only where the pitch leaves gaps.
 */

/* -INVALID_VALUE for a geometry phos_pitched_extent refuses. */
static int pitched_extent(uint64_t pitch, uint64_t slice, uint64_t width, uint64_t height, uint64_t depth,
			  uint64_t *ret_extent)
{
	return phos_pitched_extent(pitch, slice, width, height, depth, ret_extent) ? 0 : -PHOS_CUDA_INVALID_VALUE;
}

static int copy_2d(struct executor *ex, const void *body, uint32_t len, void *out, uint32_t *out_len)
{
	BODY(struct phos_memcpy_2d, c);
	uint64_t dext = 0, sext = 0, packed, slice_packed;
	const uint8_t *payload = (const uint8_t *)(c + 1);
	struct spec_set set;
	void *stream;

	spec_clear(&set);
	TRY(exec_stream(ex, c->stream, &stream));
	if (c->dir < PHOS_COPY_H2D || c->dir > PHOS_COPY_D2D)
		return -PHOS_CUDA_INVALID_VALUE;
	if (c->dir != PHOS_COPY_H2D)
		TRY(pitched_extent(c->spitch, c->sslice, c->width, c->height, c->depth, &sext));
	if (c->dir != PHOS_COPY_D2H)
		TRY(pitched_extent(c->dpitch, c->dslice, c->width, c->height, c->depth, &dext));
	/* The packed host side: width * height * depth bytes (the extents fit, so
	 * only the product needs checking). */
	if (c->height && c->width > UINT64_MAX / c->height)
		return -PHOS_CUDA_INVALID_VALUE;
	slice_packed = c->width * c->height;
	if (c->depth && slice_packed > UINT64_MAX / c->depth)
		return -PHOS_CUDA_INVALID_VALUE;
	packed = slice_packed * c->depth;
	if (c->dir == PHOS_COPY_H2D && packed != len - sizeof(*c))
		return -PHOS_CUDA_INVALID_VALUE;
	if (c->dir == PHOS_COPY_D2H && packed > PHOS_REPLY_MAX)
		return -PHOS_CUDA_INVALID_VALUE;
	TRY(spec_range(ex, &set, c->src, sext, SPEC_READ));
	TRY(spec_range(ex, &set, c->dst, dext, SPEC_WRITE));
	TRY(spec_commit(ex, "memcpy_2d", NULL, c->stream, &set));
	if (packed == 0)
		return 0;
	for (uint64_t z = 0; z < c->depth; z++) {
		struct phos_copy_2d k = { .dst = c->dst + z * c->dslice, .src = c->src + z * c->sslice,
					  .dpitch = c->dpitch, .spitch = c->spitch,
					  .width = c->width, .height = c->height };

		/* one row: its pitch is unused, but the driver wants pitch >= width */
		if (k.height == 1)
			k.dpitch = k.spitch = k.width;
		if (c->dir == PHOS_COPY_H2D) {
			k.src_host = payload + z * slice_packed;
			k.spitch = c->width;
		} else if (c->dir == PHOS_COPY_D2H) {
			k.dst_host = (uint8_t *)out + z * slice_packed;
			k.dpitch = c->width;
		}
		TRY(ex->dev_ops->memcpy_2d(ex->dev, &k, stream));
	}
	if (c->dir == PHOS_COPY_D2H)
		*out_len = (uint32_t)packed;
	return 0;
}

static int memset_2d(struct executor *ex, const void *body, uint32_t len)
{
	BODY(struct phos_memset_2d, m);
	struct spec_set set;
	uint64_t ext;
	void *stream;

	spec_clear(&set);
	TRY(exec_stream(ex, m->stream, &stream));
	TRY(pitched_extent(m->pitch, m->slice, m->width, m->height, m->depth, &ext));
	TRY(spec_range(ex, &set, m->dst, ext, SPEC_WRITE));
	TRY(spec_commit(ex, "memset_2d", NULL, m->stream, &set));
	for (uint64_t z = 0; ext && z < m->depth; z++)
		TRY(ex->dev_ops->memset_2d(ex->dev, m->dst + z * m->slice, m->height == 1 ? m->width : m->pitch,
					   (uint8_t)m->value, m->width, m->height, stream));
	return 0;
}

/* A shared host region: the preload sent its memfd on the socket just before. */
/* Whether [addr, addr+size) lies in the host window this executor reserved. */
static bool in_window(const struct executor *ex, uint64_t addr, uint64_t size)
{
	uint64_t base = phos_host_window_base(ex->arena_base, ex->arena_size);

	return ex->window && addr >= base && size <= PHOS_HOST_WINDOW_SIZE && addr - base <= PHOS_HOST_WINDOW_SIZE - size;
}

int exec_window_reserve(struct executor *ex)
{
	uint64_t base = phos_host_window_base(ex->arena_base, ex->arena_size);
	void *p = mmap((void *)(uintptr_t)base, PHOS_HOST_WINDOW_SIZE, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);

	if (p == MAP_FAILED || (uint64_t)(uintptr_t)p != base) {
		if (p != MAP_FAILED)
			munmap(p, PHOS_HOST_WINDOW_SIZE);
		phos_warn("the host window at %#llx is taken: managed memory cannot be mapped",
			  (unsigned long long)base);
		return -EEXIST;
	}
	ex->window = true;
	return 0;
}

void exec_regions_hold(struct executor *ex, const struct phos_image *img)
{
	long page = sysconf(_SC_PAGESIZE);

	free(ex->held);
	ex->nheld = 0;
	ex->held = img->nregions ? calloc(img->nregions, sizeof(*ex->held)) : NULL;
	for (uint32_t i = 0; ex->held && i < img->nregions; i++) {
		const struct phos_image_region *g = &img->regions[i];
		void *p;

		/* a checkpoint is outside input: only user-space, page-aligned ranges */
		if (in_window(ex, g->exec_addr, g->size) || g->exec_addr % (uint64_t)page || g->size % (uint64_t)page ||
		    g->exec_addr >= 1ull << 47 || g->size > (1ull << 47) - g->exec_addr)
			continue;
		p = mmap((void *)(uintptr_t)g->exec_addr, g->size, PROT_NONE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
		if (p == MAP_FAILED)
			continue;
		if ((uint64_t)(uintptr_t)p != g->exec_addr) {   /* a kernel that took it as a hint */
			munmap(p, g->size);
			continue;
		}
		ex->held[ex->nheld].addr = g->exec_addr;
		ex->held[ex->nheld++].size = g->size;
	}
}

/* Whether [addr, addr+size) lies in a range exec_regions_hold reserved; that
 * range is then the caller's to map over (it leaves the list). */
static bool held_take(struct executor *ex, uint64_t addr, uint64_t size)
{
	for (uint32_t i = 0; i < ex->nheld; i++)
		if (addr >= ex->held[i].addr && size <= ex->held[i].size &&
		    addr - ex->held[i].addr <= ex->held[i].size - size) {
			ex->held[i] = ex->held[--ex->nheld];
			return true;
		}
	return false;
}

int exec_region_map(struct executor *ex, uint32_t id, int fd, uint64_t size, uint64_t want,
		    struct exec_region **ret_reg)
{
	void *at = (void *)(uintptr_t)want;
	struct exec_region *reg;
	struct stat st;
	int r;

	if (fstat(fd, &st) < 0 || size == 0 || (uint64_t)st.st_size < size) {
		close(fd);
		return -PHOS_CUDA_INVALID_VALUE;
	}
	reg = calloc(1, sizeof(*reg));
	if (!reg) {
		close(fd);
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	}
	reg->size = size;
	reg->fn_addr = want;
	/* At the function's address when that is free here (MAP_FIXED_NOREPLACE;
	 * an older kernel takes it as a hint): its host pointers then work in
	 * kernels. Elsewhere only cudaHostGetDevicePointer's pointer does. */
	reg->ptr = MAP_FAILED;
	if (at && (in_window(ex, want, size) || held_take(ex, want, size))) {
		/* managed and pinned memory, or a restore's region: over our own
		 * reservation, always at its address */
		reg->ptr = mmap(at, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
	} else if (at) {
		reg->ptr = mmap(at, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
		if (reg->ptr != MAP_FAILED && reg->ptr != at) {
			munmap(reg->ptr, size);
			reg->ptr = MAP_FAILED;
		}
	}
	if (reg->ptr == MAP_FAILED)
		reg->ptr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (reg->ptr == MAP_FAILED) {
		free(reg);
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	}
	/* Pinning makes copies from it DMA; failing to pin only makes them slower. */
	if (ex->dev_ops->host_register(ex->dev, reg->ptr, reg->size) < 0)
		phos_warn("could not pin a %llu-byte host region", (unsigned long long)reg->size);
	r = handle_put(&ex->regions, id, reg);
	if (r < 0) {
		exec_region_free(ex, reg);
		return r;
	}
	*ret_reg = reg;
	return 0;
}

static int hostmem_add(struct executor *ex, const void *body, uint32_t len, void *out, uint32_t *out_len)
{
	BODY(struct phos_hostmem, h);
	struct exec_region *reg;
	uint64_t dev;
	int fd, r;

	r = phos_recv_fd(phos_channel_socket(ex->ch), &fd);
	if (r < 0)
		return -PHOS_CUDA_INVALID_VALUE;
	r = exec_region_map(ex, h->region, fd, h->size, h->addr, &reg);
	if (r < 0)
		return r;
	/* Unified addressing (every device we serve): pinned host memory has the
	 * same address on the device. */
	dev = (uint64_t)(uintptr_t)reg->ptr;
	memcpy(out, &dev, sizeof(dev));
	*out_len = sizeof(dev);
	return 0;
}

void exec_region_free(struct executor *ex, struct exec_region *reg)
{
	if (!reg)
		return;
	ex->dev_ops->host_unregister(ex->dev, reg->ptr);
	if (in_window(ex, (uint64_t)(uintptr_t)reg->ptr, reg->size))   /* the window stays reserved */
		mmap(reg->ptr, reg->size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
	else
		munmap(reg->ptr, reg->size);
	free(reg);
}

static int hostmem_remove(struct executor *ex, const void *body, uint32_t len)
{
	BODY(struct phos_hostmem, h);
	struct exec_region *reg = handle_take(&ex->regions, h->region);

	if (!reg)
		return -PHOS_CUDA_INVALID_VALUE;
	exec_sync_function(ex);
	exec_region_free(ex, reg);
	return 0;
}

/* --- the driver's virtual memory management: reservations and mappings --- */

struct unmap_walk {
	uint64_t lo, hi;
	uint64_t addrs[64];
	int n;
};

static int unmap_collect(const struct phos_buf *b, void *ctx)
{
	struct unmap_walk *w = ctx;

	if (b->is_extern || b->addr + b->size > w->hi || w->n == 64)
		return -1;   /* a mapping that sticks out: the driver refuses a partial unmap */
	w->addrs[w->n++] = b->addr;
	return 0;
}

static int vmm(struct executor *ex, uint32_t op, const struct phos_vmm *v, void *out, uint32_t *out_len)
{
	uint64_t addr = 0, base, size;
	struct unmap_walk w = { .lo = v->addr, .hi = v->addr + v->size };
	int r;

	switch (op) {
	case PHOS_OP_VMM_RESERVE:
		if (v->at) {
			r = phos_bufmap_reserve_at(ex->bufs, v->addr, v->size);
			addr = v->addr;
		} else {
			r = phos_bufmap_reserve(ex->bufs, v->size, v->align, &addr);
		}
		if (r < 0)
			return r == -ENOMEM ? -PHOS_CUDA_MEMORY_ALLOCATION : -PHOS_CUDA_INVALID_VALUE;
		memcpy(out, &addr, 8);
		*out_len = 8;
		return 0;
	case PHOS_OP_VMM_FREE:
		return phos_bufmap_unreserve(ex->bufs, v->addr) < 0 ? -PHOS_CUDA_INVALID_VALUE : 0;
	case PHOS_OP_VMM_MAP:
		r = phos_bufmap_map_at(ex->bufs, v->addr, v->size);
		return r == -EINVAL || r == -EEXIST ? -PHOS_CUDA_INVALID_VALUE : r < 0 ? -PHOS_CUDA_MEMORY_ALLOCATION : 0;
	case PHOS_OP_VMM_UNMAP:
		/* every mapping of the range, wholly inside one reservation */
		if (!v->size || w.hi < w.lo || !phos_bufmap_reservation(ex->bufs, v->addr, &base, &size) ||
		    w.hi > base + size || !phos_bufmap_covered(ex->bufs, v->addr, v->size) ||
		    phos_bufmap_foreach_in(ex->bufs, w.lo, w.hi, unmap_collect, &w) != 0 || w.addrs[0] != v->addr)
			return -PHOS_CUDA_INVALID_VALUE;
		/* as cudaFree: queued work and the restore engine are done with them first */
		if (ex->loader)
			TRY(loader_settle(ex->loader, v->addr, v->size));
		exec_sync_function(ex);
		for (int i = 0; i < w.n; i++)
			phos_bufmap_release(ex->bufs, w.addrs[i]);
		return 0;
	default:
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
}

int exec_memory_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		       uint32_t *out_len)
{
	switch (op) {
	case PHOS_OP_VMM_RESERVE ... PHOS_OP_VMM_UNMAP: {
		BODY(struct phos_vmm, v);

		return vmm(ex, op, v, out, out_len);
	}
	case PHOS_OP_MALLOC:
		return do_malloc(ex, body, len, out, out_len);
	case PHOS_OP_ADDR_RANGE: {
		BODY(struct phos_free, a);
		const struct phos_buf *b = phos_bufmap_find(ex->bufs, a->addr);
		struct phos_reply_range *rr = out;

		if (!b)
			return -PHOS_CUDA_INVALID_VALUE;
		rr->base = b->addr;
		rr->size = b->size;
		*out_len = sizeof(*rr);
		return 0;
	}
	case PHOS_OP_FREE:
		return do_free(ex, body, len);
	case PHOS_OP_MEMCPY_H2D:
	case PHOS_OP_MEMCPY_D2H:
	case PHOS_OP_MEMCPY_D2D:
		return copy(ex, op, body, len, out, out_len);
	case PHOS_OP_MEMCPY_H2D_SHM:
	case PHOS_OP_MEMCPY_D2H_SHM:
		return copy_shm(ex, op, body, len);
	case PHOS_OP_MEMSET:
		return do_memset(ex, body, len);
	case PHOS_OP_MEMCPY_2D:
		return copy_2d(ex, body, len, out, out_len);
	case PHOS_OP_MEMSET_2D:
		return memset_2d(ex, body, len);
	case PHOS_OP_MEM_GET_INFO: {
		struct phos_reply_meminfo *mi = out;

		*out_len = sizeof(*mi);
		return ex->dev_ops->mem_info(ex->dev, &mi->free, &mi->total);
	}
	case PHOS_OP_HOSTMEM_ADD:
		return hostmem_add(ex, body, len, out, out_len);
	case PHOS_OP_HOSTMEM_REMOVE:
		return hostmem_remove(ex, body, len);
	case PHOS_OP_DEVICE_INFO: {
		BODY(struct phos_device_query, d);

		if (d->device < 0 || d->device >= ex->ndevs)
			return -PHOS_CUDA_INVALID_DEVICE;
		*out_len = sizeof(struct phos_reply_device);
		return ex->dev_ops->info(ex->devs[d->device], out);
	}
	case PHOS_OP_DEVICE_SYNC:
		TRY(exec_sync_function(ex));
		exec_pool_after_sync(ex);
		return 0;
	default:
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
}
