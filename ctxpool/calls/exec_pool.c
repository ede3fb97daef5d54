/* SPDX-License-Identifier: MIT */
/*
 * Memory pools and stream-ordered allocation (cudaMallocAsync, cudaFreeAsync,
 * cudaMemPool*), served from the deterministic arena.
 *
 *   pool ── live blocks:   handed out, each a bufmap buffer like a cudaMalloc one
 *       └─ cached blocks:  freed on a stream, still mapped and still buffers,
 *                          with the event recorded on that stream at the free:
 *
 *   POOL_MALLOC(pool, stream T, size): a cached block of the pool that fits
 *     (size <= block <= 2 * size) is reused when
 *       - it was freed on T (T's order puts the new work after the free), or
 *       - its free event completed (any stream), or
 *       - internal dependencies are allowed: T waits on the free event first;
 *     else a new block comes from the arena (first fit, deterministic).
 *   POOL_FREE(addr, stream S): the block becomes cached behind an event on S.
 *   Synchronising calls (stream, event, device) release cached blocks whose
 *   free completed while the pool holds more than its release threshold;
 *   cudaMemPoolTrimTo does the same down to its argument.
 *
 * cudaMemPoolReuseFollowEventDependencies is kept and reported, but reuse
 * does not follow event dependencies between streams (a valid, more cautious
 * allocator: such a block is reused behind a stream wait or once free).
 *
 * A block is only ever given back to the arena once its free event completed,
 * so no queued work uses memory that a later allocation got. Snapshots: at
 * phos_fn_serve the device is idle and every cached block is released first
 * (exec_pool_release_all), so the image holds the live blocks only, as
 * ordinary buffers; the preload re-creates its pools in the restored executor
 * and hands their live blocks back (POOL_ADOPT). Checkpoints of a running
 * program: the same release at the stop, and the image also lists the pools
 * and their live blocks (exec_pool_to_image), which the restoring executor
 * makes again itself (exec_pool_from_image): the restored program goes on
 * mid-call, without a restore at phos_fn_serve to re-create them, and calls
 * it had queued may already use them.
 */
#include <stdlib.h>
#include <string.h>

#include "executor.h"
#include "image.h"
#include "engine.h"
#include "log.h"

#define EVENT_DISABLE_TIMING 2u   /* cudaEventDisableTiming */

struct pool_block {
	uint64_t addr, size;
	uint32_t stream;          /* cached: the stream it was freed on */
	void *event;              /* cached: recorded at the free; NULL once it completed */
	struct exec_pool *pool;
	struct pool_block *next;
};

struct exec_pool {
	uint64_t max_size;        /* 0: no limit */
	uint64_t threshold;       /* cudaMemPoolAttrReleaseThreshold */
	bool reuse[4];            /* indexed by PHOS_POOL_REUSE_* */
	uint64_t reserved, used, reserved_high, used_high;
	struct pool_block *live, *cached;
	bool destroyed;           /* gone from the table; freed with its last live block */
	struct exec_pool *next_gone;   /* on ex->pools_gone */
};

/* The driver rounds a pool's maxSize up to its alignment ("may be higher than
 * what was passed", the driver API says): an H100 gave an 8 MiB block from a
 * pool of maxSize 4 MiB. Its stream-ordered pools reserve memory in chunks of
 * 32 MiB; we round to that (the H100 run shows only that the rounding is at
 * least 8 MiB). */
#define POOL_MAX_ALIGN (32ull << 20)

static struct exec_pool *pool_new(uint64_t max_size)
{
	struct exec_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	if (max_size > UINT64_MAX - (POOL_MAX_ALIGN - 1))
		max_size = 0; /* no limit anyway */
	p->max_size = (max_size + POOL_MAX_ALIGN - 1) & ~(POOL_MAX_ALIGN - 1);
	p->reuse[PHOS_POOL_REUSE_FOLLOW_EVENTS] = true;
	p->reuse[PHOS_POOL_REUSE_OPPORTUNISTIC] = true;
	p->reuse[PHOS_POOL_REUSE_INTERNAL_DEPS] = true;
	return p;
}

/* The pool of an id; the default pool exists from its first use. */
static struct exec_pool *pool_get(struct executor *ex, uint32_t id)
{
	struct exec_pool *p = handle_get(&ex->pools, id);

	if (!p && id == PHOS_POOL_DEFAULT && (p = pool_new(0)) && handle_put(&ex->pools, id, p) < 0) {
		free(p);
		p = NULL;
	}
	return p;
}

static void unlink_block(struct pool_block **list, struct pool_block *b)
{
	for (; *list; list = &(*list)->next)
		if (*list == b) {
			*list = b->next;
			return;
		}
}

static void push_block(struct pool_block **list, struct pool_block *b)
{
	b->next = *list;
	*list = b;
}

/* Whether a cached block's free completed (its event is then dropped). */
static bool free_completed(struct executor *ex, struct pool_block *b)
{
	if (b->event && ex->dev_ops->event_query(ex->dev, b->event) == 0) {
		ex->dev_ops->event_destroy(ex->dev, b->event);
		b->event = NULL;
	}
	return !b->event;
}

/* Gives a cached block back to the arena. Its free must have completed. */
static void release_block(struct executor *ex, struct pool_block *b)
{
	struct exec_pool *p = b->pool;

	unlink_block(&p->cached, b);
	if (b->event) {
		ex->dev_ops->event_sync(ex->dev, b->event);
		ex->dev_ops->event_destroy(ex->dev, b->event);
	}
	if (ex->loader)
		loader_settle(ex->loader, b->addr, b->size);
	phos_bufmap_release(ex->bufs, b->addr);
	p->reserved -= b->size;
	free(b);
}

/* Releases the completed cached blocks of p while it holds more than keep
 * bytes; with wait, also those whose free is still running (after it). */
static void pool_shrink(struct executor *ex, struct exec_pool *p, uint64_t keep, bool wait)
{
	struct pool_block *b = p->cached, *next;

	for (; b && p->reserved > keep; b = next) {
		next = b->next;
		if (wait || free_completed(ex, b))
			release_block(ex, b);
	}
}

static void pool_free(struct executor *ex, struct exec_pool *p)
{
	if (!p)
		return;
	while (p->cached)
		release_block(ex, p->cached);
	while (p->live) {   /* a reset or scrub: the buffers go with the bufmap */
		struct pool_block *b = p->live;

		p->live = b->next;
		free(b);
	}
	free(p);
}

static struct pool_block *find_in(struct exec_pool *p, uint64_t addr)
{
	for (struct pool_block *b = p ? p->live : NULL; b; b = b->next)
		if (b->addr == addr)
			return b;
	return NULL;
}

/* The live block at addr, of a pool in the table or of a destroyed one. */
static struct pool_block *find_live(struct executor *ex, uint64_t addr)
{
	struct pool_block *b;

	for (uint32_t i = 0; i < ex->pools.cap; i++)
		if ((b = find_in(ex->pools.slot[i], addr)))
			return b;
	for (struct exec_pool *p = ex->pools_gone; p; p = p->next_gone)
		if ((b = find_in(p, addr)))
			return b;
	return NULL;
}

static void note_used(struct exec_pool *p)
{
	if (p->used > p->used_high)
		p->used_high = p->used;
	if (p->reserved > p->reserved_high)
		p->reserved_high = p->reserved;
}

/* A cached block of p that stream may use at once, or NULL. */
static struct pool_block *reusable(struct executor *ex, struct exec_pool *p, uint32_t stream, uint64_t size)
{
	struct pool_block *best = NULL, *dep = NULL;

	for (struct pool_block *b = p->cached; b; b = b->next) {
		if (b->size < size || b->size / 2 > size)
			continue;
		if (b->stream == stream || (p->reuse[PHOS_POOL_REUSE_OPPORTUNISTIC] && free_completed(ex, b))) {
			if (!best || b->size < best->size)
				best = b;
		} else if (!dep || b->size < dep->size) {
			dep = b;
		}
	}
	if (best || !dep || !p->reuse[PHOS_POOL_REUSE_INTERNAL_DEPS])
		return best;
	/* The new owner's stream waits for the free: work queued on it next cannot
	 * overlap what the old owner's stream still does with the block. (With
	 * opportunistic reuse off, a free that completed still gets here, with its
	 * event: the wait is then immediate.) */
	if (dep->event) {
		void *s;

		if (exec_stream(ex, stream, &s) < 0 || ex->dev_ops->stream_wait_event(ex->dev, s, dep->event) < 0)
			return NULL;
	}
	return dep;
}

static int pool_malloc(struct executor *ex, const struct phos_pool_malloc *m, uint64_t *ret_addr)
{
	struct exec_pool *p = pool_get(ex, m->pool);
	struct pool_block *b;
	void *s;
	uint64_t addr;

	if (!p)
		return -PHOS_CUDA_INVALID_VALUE;
	TRY(exec_stream(ex, m->stream, &s));
	if (m->size == 0) {
		*ret_addr = 0;
		return 0;
	}
	b = reusable(ex, p, m->stream, m->size);
	if (b) {
		unlink_block(&p->cached, b);
		/* Same stream, or behind a stream wait: the event is not needed any more. */
		if (b->event) {
			ex->dev_ops->event_destroy(ex->dev, b->event);
			b->event = NULL;
		}
	} else {
		if (p->max_size && m->size > p->max_size)
			return -PHOS_CUDA_MEMORY_ALLOCATION;
		if (p->max_size && p->reserved > p->max_size - m->size)
			pool_shrink(ex, p, p->max_size - m->size, false);
		if (p->max_size && p->reserved > p->max_size - m->size)
			return -PHOS_CUDA_MEMORY_ALLOCATION;
		if (phos_bufmap_alloc(ex->bufs, m->size, &addr) < 0) {
			/* cached memory of this pool that is no longer in use goes back first */
			pool_shrink(ex, p, 0, false);
			if (phos_bufmap_alloc(ex->bufs, m->size, &addr) < 0)
				return -PHOS_CUDA_MEMORY_ALLOCATION;
		}
		b = calloc(1, sizeof(*b));
		if (!b) {
			phos_bufmap_release(ex->bufs, addr);
			return -PHOS_CUDA_MEMORY_ALLOCATION;
		}
		b->addr = addr;
		b->size = m->size;
		b->pool = p;
		p->reserved += b->size;
	}
	push_block(&p->live, b);
	p->used += b->size;
	note_used(p);
	*ret_addr = b->addr;
	return 0;
}

static int pool_free_block(struct executor *ex, const struct phos_pool_free *f)
{
	struct pool_block *b = find_live(ex, f->addr);
	struct exec_pool *p;
	void *s;
	int r;

	if (!b)
		return -PHOS_CUDA_INVALID_VALUE;
	TRY(exec_stream(ex, f->stream, &s));
	/* A block of the snapshot still streaming in (on-demand restore) is
	 * resident before anyone can get it again: the engine never writes into
	 * a new owner's data. */
	if (ex->loader)
		TRY(loader_settle(ex->loader, b->addr, b->size));
	p = b->pool;
	r = ex->dev_ops->event_create(ex->dev, EVENT_DISABLE_TIMING, &b->event);
	if (r == 0 && (r = ex->dev_ops->event_record(ex->dev, b->event, s)) < 0) {
		ex->dev_ops->event_destroy(ex->dev, b->event);
		b->event = NULL;
	}
	if (r < 0) {   /* no event: order the free by waiting for the stream */
		b->event = NULL;
		TRY(ex->dev_ops->stream_sync(ex->dev, s));
	}
	unlink_block(&p->live, b);
	p->used -= b->size;
	b->stream = f->stream;
	push_block(&p->cached, b);
	if (p->destroyed)
		release_block(ex, b);   /* the pool itself goes in gone_prune */
	return 0;
}

static int pool_set_attr(struct exec_pool *p, const struct phos_pool_attr *a)
{
	switch (a->attr) {
	case PHOS_POOL_REUSE_FOLLOW_EVENTS:
	case PHOS_POOL_REUSE_OPPORTUNISTIC:
	case PHOS_POOL_REUSE_INTERNAL_DEPS:
		p->reuse[a->attr] = a->value != 0;
		return 0;
	case PHOS_POOL_RELEASE_THRESHOLD:
		p->threshold = a->value;
		return 0;
	case PHOS_POOL_RESERVED_HIGH:   /* only 0: the high mark restarts from now */
		if (a->value)
			return -PHOS_CUDA_INVALID_VALUE;
		p->reserved_high = p->reserved;
		return 0;
	case PHOS_POOL_USED_HIGH:
		if (a->value)
			return -PHOS_CUDA_INVALID_VALUE;
		p->used_high = p->used;
		return 0;
	default:
		return -PHOS_CUDA_INVALID_VALUE;
	}
}

static int pool_get_attr(struct exec_pool *p, int32_t attr, uint64_t *ret_value)
{
	switch (attr) {
	case PHOS_POOL_REUSE_FOLLOW_EVENTS:
	case PHOS_POOL_REUSE_OPPORTUNISTIC:
	case PHOS_POOL_REUSE_INTERNAL_DEPS:
		*ret_value = p->reuse[attr];
		return 0;
	case PHOS_POOL_RELEASE_THRESHOLD: *ret_value = p->threshold; return 0;
	case PHOS_POOL_RESERVED_CURRENT: *ret_value = p->reserved; return 0;
	case PHOS_POOL_RESERVED_HIGH: *ret_value = p->reserved_high; return 0;
	case PHOS_POOL_USED_CURRENT: *ret_value = p->used; return 0;
	case PHOS_POOL_USED_HIGH: *ret_value = p->used_high; return 0;
	default:
		return -PHOS_CUDA_INVALID_VALUE;
	}
}

/* A pool destroyed with live blocks stays on ex->pools_gone until its last
 * block is freed (find_live looks there too). */
static int pool_destroy(struct executor *ex, uint32_t id)
{
	struct exec_pool *p;

	if (id == PHOS_POOL_DEFAULT)
		return -PHOS_CUDA_INVALID_VALUE;
	p = handle_take(&ex->pools, id);
	if (!p)
		return -PHOS_CUDA_INVALID_VALUE;
	pool_shrink(ex, p, 0, true);
	if (!p->live) {
		pool_free(ex, p);
		return 0;
	}
	/* As CUDA: the pool goes once its outstanding allocations are freed. */
	p->destroyed = true;
	p->next_gone = ex->pools_gone;
	ex->pools_gone = p;
	return 0;
}

static void gone_prune(struct executor *ex)
{
	struct exec_pool **pp = &ex->pools_gone;

	while (*pp) {
		struct exec_pool *p = *pp;

		if (!p->live && !p->cached) {
			*pp = p->next_gone;
			free(p);
		} else {
			pp = &p->next_gone;
		}
	}
}

/* The buffer at addr (a restored image's) becomes a live block of p: 0,
 * -EINVAL (no such buffer, or one of a pool already), -ENOMEM. */
static int block_adopt(struct executor *ex, struct exec_pool *p, uint64_t addr)
{
	const struct phos_buf *buf = phos_bufmap_find(ex->bufs, addr);
	struct pool_block *b;

	if (!buf || buf->addr != addr || buf->is_extern || find_live(ex, addr))
		return -EINVAL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->addr = buf->addr;
	b->size = buf->size;
	b->pool = p;
	push_block(&p->live, b);
	p->reserved += b->size;
	p->used += b->size;
	note_used(p);
	return 0;
}

static int pool_adopt(struct executor *ex, const struct phos_pool_adopt *a)
{
	struct exec_pool *p = pool_get(ex, a->pool);
	int r = p ? block_adopt(ex, p, a->addr) : -EINVAL;

	return r == -ENOMEM ? -PHOS_CUDA_MEMORY_ALLOCATION : r < 0 ? -PHOS_CUDA_INVALID_VALUE : 0;
}

int exec_pool_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		     uint32_t *out_len)
{
	switch (op) {
	case PHOS_OP_POOL_CREATE: {
		BODY(struct phos_pool_create, c);
		struct exec_pool *p;
		int r;

		if (c->pool == PHOS_POOL_DEFAULT)
			return -PHOS_CUDA_INVALID_VALUE;
		p = pool_new(c->max_size);
		if (!p)
			return -PHOS_CUDA_MEMORY_ALLOCATION;
		r = handle_put(&ex->pools, c->pool, p);
		if (r < 0)
			free(p);
		return r;
	}
	case PHOS_OP_POOL_DESTROY: {
		BODY(struct phos_handle, h);

		return pool_destroy(ex, h->id);
	}
	case PHOS_OP_POOL_MALLOC: {
		BODY(struct phos_pool_malloc, m);
		uint64_t addr = 0;

		TRY(pool_malloc(ex, m, &addr));
		memcpy(out, &addr, sizeof(addr));
		*out_len = sizeof(addr);
		return 0;
	}
	case PHOS_OP_POOL_FREE: {
		BODY(struct phos_pool_free, f);
		int r = pool_free_block(ex, f);

		gone_prune(ex);
		return r;
	}
	case PHOS_OP_POOL_SET_ATTR: {
		BODY(struct phos_pool_attr, a);
		struct exec_pool *p = pool_get(ex, a->pool);

		return p ? pool_set_attr(p, a) : -PHOS_CUDA_INVALID_VALUE;
	}
	case PHOS_OP_POOL_GET_ATTR: {
		BODY(struct phos_pool_attr, a);
		struct exec_pool *p = pool_get(ex, a->pool);
		uint64_t v = 0;

		if (!p)
			return -PHOS_CUDA_INVALID_VALUE;
		TRY(pool_get_attr(p, a->attr, &v));
		memcpy(out, &v, sizeof(v));
		*out_len = sizeof(v);
		return 0;
	}
	case PHOS_OP_POOL_TRIM: {
		BODY(struct phos_pool_attr, a);
		struct exec_pool *p = pool_get(ex, a->pool);

		if (!p)
			return -PHOS_CUDA_INVALID_VALUE;
		pool_shrink(ex, p, a->value, false);
		return 0;
	}
	case PHOS_OP_POOL_ADOPT: {
		BODY(struct phos_pool_adopt, a);

		return pool_adopt(ex, a);
	}
	default:
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
}

/* Ids of pools destroyed with live blocks, in images (their own ids may be
 * taken by new pools since): from here up, never a live pool's. */
#define GONE_IMAGE_ID 0x80000000u

static bool pool_pristine(uint32_t id, const struct exec_pool *p)
{
	return id == PHOS_POOL_DEFAULT && !p->live && !p->cached && !p->reserved && !p->threshold &&
	       p->reuse[PHOS_POOL_REUSE_FOLLOW_EVENTS] && p->reuse[PHOS_POOL_REUSE_OPPORTUNISTIC] &&
	       p->reuse[PHOS_POOL_REUSE_INTERNAL_DEPS];
}

static int pool_to_image(struct phos_image *img, uint32_t id, const struct exec_pool *p)
{
	struct phos_image_pool ip = { .id = id, .gone = p->destroyed, .max_size = p->max_size,
				      .threshold = p->threshold,
				      .reuse = { p->reuse[PHOS_POOL_REUSE_FOLLOW_EVENTS],
						 p->reuse[PHOS_POOL_REUSE_OPPORTUNISTIC],
						 p->reuse[PHOS_POOL_REUSE_INTERNAL_DEPS] } };
	int r = phos_image_add_pool(img, &ip);

	for (const struct pool_block *b = p->live; r == 0 && b; b = b->next)
		r = phos_image_add_pool_block(img, &(struct phos_image_pool_block){ .pool = id, .addr = b->addr });
	return r;
}

int exec_pool_to_image(struct executor *ex, struct phos_image *img)
{
	uint32_t gone = GONE_IMAGE_ID;
	int r = 0;

	for (uint32_t i = 0; r == 0 && i < ex->pools.cap; i++) {
		const struct exec_pool *p = ex->pools.slot[i];

		if (p && !pool_pristine(i, p))
			r = pool_to_image(img, i, p);
	}
	for (const struct exec_pool *p = ex->pools_gone; r == 0 && p; p = p->next_gone)
		r = pool_to_image(img, gone++, p);
	return r;
}

int exec_pool_from_image(struct executor *ex, const struct phos_image *img, char *err, size_t errlen)
{
	for (uint32_t i = 0; i < img->npools; i++) {
		const struct phos_image_pool *ip = &img->pools[i];
		struct exec_pool *p;

		if (ip->gone || ip->id != PHOS_POOL_DEFAULT) {
			if (!ip->gone && (ip->id >= GONE_IMAGE_ID || handle_get(&ex->pools, ip->id))) {
				phos_errf(err, errlen, "pool %u of the image cannot be made again here", ip->id);
				return -EINVAL;
			}
			p = pool_new(0);
		} else {
			p = pool_get(ex, PHOS_POOL_DEFAULT);
		}
		if (!p) {
			phos_errf(err, errlen, "out of memory for the image's pools");
			return -ENOMEM;
		}
		p->max_size = ip->max_size;
		p->threshold = ip->threshold;
		p->reuse[PHOS_POOL_REUSE_FOLLOW_EVENTS] = ip->reuse[0];
		p->reuse[PHOS_POOL_REUSE_OPPORTUNISTIC] = ip->reuse[1];
		p->reuse[PHOS_POOL_REUSE_INTERNAL_DEPS] = ip->reuse[2];
		if (ip->gone) {
			p->destroyed = true;
			p->next_gone = ex->pools_gone;
			ex->pools_gone = p;
		} else if (ip->id != PHOS_POOL_DEFAULT && handle_put(&ex->pools, ip->id, p) < 0) {
			free(p);
			phos_errf(err, errlen, "pool %u of the image cannot be made again here", ip->id);
			return -EINVAL;
		}
		for (uint32_t k = 0; k < img->npool_blocks; k++) {
			const struct phos_image_pool_block *ib = &img->pool_blocks[k];
			int r = ib->pool == ip->id ? block_adopt(ex, p, ib->addr) : 0;

			if (r < 0) {
				phos_errf(err, errlen, "block %#llx of pool %u: %s", (unsigned long long)ib->addr, ip->id,
					  r == -ENOMEM ? "out of memory" : "no buffer of the image");
				return r;
			}
		}
	}
	return 0;
}

unsigned exec_pool_in_use(struct executor *ex)
{
	unsigned n = 0;

	for (uint32_t i = 0; i < ex->pools.cap; i++) {
		const struct exec_pool *p = ex->pools.slot[i];

		/* the default pool as every executor has it: nothing to carry */
		if (p && !pool_pristine(i, p))
			n++;
	}
	for (const struct exec_pool *p = ex->pools_gone; p; p = p->next_gone)
		n++;
	return n;
}

bool exec_pool_owns(struct executor *ex, uint64_t addr)
{
	return find_live(ex, addr) != NULL;
}

void exec_pool_stream_gone(struct executor *ex, uint32_t stream)
{
	for (uint32_t i = 0; i < ex->pools.cap; i++) {
		struct exec_pool *p = ex->pools.slot[i];

		for (struct pool_block *b = p ? p->cached : NULL; b; b = b->next)
			if (b->stream == stream)
				b->stream = UINT32_MAX;   /* never a stream id (< EXEC_MAX_HANDLES) */
	}
}

void exec_pool_after_sync(struct executor *ex)
{
	for (uint32_t i = 0; i < ex->pools.cap; i++) {
		struct exec_pool *p = ex->pools.slot[i];

		if (p)
			pool_shrink(ex, p, p->threshold, false);
	}
}

void exec_pool_release_all(struct executor *ex)
{
	for (uint32_t i = 0; i < ex->pools.cap; i++) {
		struct exec_pool *p = ex->pools.slot[i];

		if (p)
			pool_shrink(ex, p, 0, true);
	}
}

void exec_pool_clear(struct executor *ex)
{
	for (uint32_t i = 0; i < ex->pools.cap; i++)
		pool_free(ex, handle_take(&ex->pools, i));
	while (ex->pools_gone) {
		struct exec_pool *p = ex->pools_gone;

		ex->pools_gone = p->next_gone;
		pool_free(ex, p);
	}
}
