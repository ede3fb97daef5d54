/* SPDX-License-Identifier: MIT */
/*
 * Memory pools and stream-ordered allocation: cudaMallocAsync, cudaFreeAsync,
 * cudaMallocFromPoolAsync, cudaMemPool*, cudaDevice{Get,Set}MemPool and their
 * location forms cudaMem{GetDefault,Get,Set}MemPool.
 *
 * The pools live in the executor (ctxpool/calls/exec_pool.c) over the deterministic
 * arena; this side chooses pool ids, checks arguments, and remembers what a
 * restored executor must be told again: every pool with its settings and every
 * live block with its pool (phos_pool_resend, after phos_fn_serve returns in a
 * restored process; the blocks themselves are snapshot buffers at their
 * addresses). Pool handles are wrapped ids (internal.h); id 1 is the default
 * pool of device 0.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <cuda_runtime_api.h>

#include "internal.h"
#include "log.h"

struct pool {
	uint32_t id;
	uint64_t max_size;
	uint64_t threshold;
	int reuse[4];              /* indexed by cudaMemPoolReuse* */
	struct pool *next;
};

struct block {
	uint64_t addr, size;
	uint32_t pool;             /* 0: its pool was destroyed */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct pool default_pool = { .id = PHOS_POOL_DEFAULT, .reuse = { 0, 1, 1, 1 } };
static struct pool *pools = &default_pool;   /* default first, then created ones */
static uint32_t current = PHOS_POOL_DEFAULT; /* device 0's current pool */
static struct block *blocks;
static size_t nblocks, cap_blocks;

/* --- bookkeeping (under lock) --- */

static struct pool *pool_find(uint32_t id)
{
	for (struct pool *p = pools; p; p = p->next)
		if (p->id == id)
			return p;
	return NULL;
}

static struct pool *pool_of(cudaMemPool_t h)
{
	uint32_t id = phos_handle_unwrap(h, PHOS_H_POOL);

	return id ? pool_find(id) : NULL;
}

static ssize_t block_find(uint64_t addr)
{
	for (size_t i = 0; i < nblocks; i++)
		if (blocks[i].addr == addr)
			return (ssize_t)i;
	return -1;
}

static int block_add(uint64_t addr, uint64_t size, uint32_t pool)
{
	if (nblocks == cap_blocks) {
		size_t cap = cap_blocks ? cap_blocks * 2 : 64;
		struct block *b = realloc(blocks, cap * sizeof(*b));

		if (!b)
			return cudaErrorMemoryAllocation;
		blocks = b;
		cap_blocks = cap;
	}
	blocks[nblocks++] = (struct block){ .addr = addr, .size = size, .pool = pool };
	return cudaSuccess;
}

static void block_drop(size_t i)
{
	blocks[i] = blocks[--nblocks];
}

static int device_check(int device)
{
	int r = phos_preload_connect();

	if (r)
		return r;
	return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

/* --- devices' pools --- */

PHOS_EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
	int r = memPool ? device_check(device) : cudaErrorInvalidValue;

	if (r == cudaSuccess)
		*memPool = phos_handle_wrap(PHOS_H_POOL, PHOS_POOL_DEFAULT);
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device)
{
	int r = memPool ? device_check(device) : cudaErrorInvalidValue;

	if (r == cudaSuccess) {
		pthread_mutex_lock(&lock);
		*memPool = phos_handle_wrap(PHOS_H_POOL, current);
		pthread_mutex_unlock(&lock);
	}
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool)
{
	int r = device_check(device);
	struct pool *p;

	if (r)
		return phos_set_error(r);
	pthread_mutex_lock(&lock);
	p = pool_of(memPool);
	if (p)
		current = p->id;
	pthread_mutex_unlock(&lock);
	return phos_set_error(p ? cudaSuccess : cudaErrorInvalidValue);
}

/* The location forms (CUDA 13): device 0's pinned pools only. */
static int location_check(const struct cudaMemLocation *location, enum cudaMemAllocationType type)
{
	if (!location || type != cudaMemAllocationTypePinned)
		return cudaErrorInvalidValue;
	if (location->type != cudaMemLocationTypeDevice)
		return cudaErrorNotSupported;   /* host and NUMA pools are not forwarded */
	return device_check(location->id);
}

PHOS_EXPORT cudaError_t cudaMemGetDefaultMemPool(cudaMemPool_t *memPool, struct cudaMemLocation *location,
						 enum cudaMemAllocationType type)
{
	int r = location_check(location, type);

	return r ? (cudaError_t)phos_set_error(r) : cudaDeviceGetDefaultMemPool(memPool, location->id);
}

PHOS_EXPORT cudaError_t cudaMemGetMemPool(cudaMemPool_t *memPool, struct cudaMemLocation *location,
					  enum cudaMemAllocationType type)
{
	int r = location_check(location, type);

	return r ? (cudaError_t)phos_set_error(r) : cudaDeviceGetMemPool(memPool, location->id);
}

PHOS_EXPORT cudaError_t cudaMemSetMemPool(struct cudaMemLocation *location, enum cudaMemAllocationType type,
					  cudaMemPool_t memPool)
{
	int r = location_check(location, type);

	return r ? (cudaError_t)phos_set_error(r) : cudaDeviceSetMemPool(location->id, memPool);
}

/* --- pools --- */

PHOS_EXPORT cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *props)
{
	struct phos_pool_create c = { 0 };
	struct pool *p;
	int r;

	if (!memPool || !props || props->allocType != cudaMemAllocationTypePinned ||
	    props->location.type != cudaMemLocationTypeDevice)
		return phos_set_error(cudaErrorInvalidValue);
	r = device_check(props->location.id);
	if (r)
		return phos_set_error(r);
	/* No IPC between function processes: shareable handles are refused. */
	if (props->handleTypes != cudaMemHandleTypeNone || props->win32SecurityAttributes)
		return phos_set_error(cudaErrorNotSupported);
	p = calloc(1, sizeof(*p));
	if (!p)
		return phos_set_error(cudaErrorMemoryAllocation);
	p->max_size = c.max_size = props->maxSize;
	p->reuse[1] = p->reuse[2] = p->reuse[3] = 1;
	r = phos_ids_add(PHOS_H_POOL, p, &c.pool);
	if (r) {
		free(p);
		return phos_set_error(r);
	}
	p->id = c.pool;
	r = phos_preload_post(PHOS_OP_POOL_CREATE, &c, sizeof(c), NULL, 0);
	if (r) {
		free(phos_ids_take(PHOS_H_POOL, c.pool));
		return phos_set_error(r);
	}
	pthread_mutex_lock(&lock);
	p->next = default_pool.next;
	default_pool.next = p;
	pthread_mutex_unlock(&lock);
	*memPool = phos_handle_wrap(PHOS_H_POOL, c.pool);
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool)
{
	struct phos_handle h = { 0 };
	struct pool *p, **pp;
	int r;

	pthread_mutex_lock(&lock);
	p = pool_of(memPool);
	if (!p || p == &default_pool) {
		pthread_mutex_unlock(&lock);
		return phos_set_error(cudaErrorInvalidValue);
	}
	h.id = p->id;
	/* The record goes first, so that the id is never reused before it. */
	r = phos_preload_post(PHOS_OP_POOL_DESTROY, &h, sizeof(h), NULL, 0);
	for (pp = &default_pool.next; *pp != p; pp = &(*pp)->next)
		;
	*pp = p->next;
	for (size_t i = 0; i < nblocks; i++)
		if (blocks[i].pool == h.id)
			blocks[i].pool = 0;
	if (current == h.id)
		current = PHOS_POOL_DEFAULT;   /* as CUDA: the device falls back to its default pool */
	pthread_mutex_unlock(&lock);
	phos_ids_take(PHOS_H_POOL, h.id);
	free(p);
	return phos_set_error(r);
}

static bool attr_is_int(int attr)
{
	return attr >= cudaMemPoolReuseFollowEventDependencies && attr <= cudaMemPoolReuseAllowInternalDependencies;
}

PHOS_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
	struct phos_pool_attr a = { .attr = attr };
	struct pool *p;
	int r;

	if (!value || attr < cudaMemPoolReuseFollowEventDependencies || attr > cudaMemPoolAttrUsedMemHigh)
		return phos_set_error(cudaErrorInvalidValue);
	a.value = attr_is_int(attr) ? (uint64_t)(*(int *)value != 0) : *(uint64_t *)value;
	pthread_mutex_lock(&lock);
	p = pool_of(memPool);
	if (p)
		a.pool = p->id;
	pthread_mutex_unlock(&lock);
	if (!p)
		return phos_set_error(cudaErrorInvalidValue);
	r = phos_preload_call(PHOS_OP_POOL_SET_ATTR, &a, sizeof(a), NULL, 0, NULL, 0, NULL, NULL);
	if (r == cudaSuccess) {
		pthread_mutex_lock(&lock);
		if ((p = pool_find(a.pool))) {   /* kept for a restored executor */
			if (attr_is_int(attr))
				p->reuse[attr] = (int)a.value;
			else if (attr == cudaMemPoolAttrReleaseThreshold)
				p->threshold = a.value;
		}
		pthread_mutex_unlock(&lock);
	}
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
	struct phos_pool_attr a = { .attr = attr };
	uint64_t v = 0;
	size_t len = 0;
	bool known;
	int r;

	if (!value || attr < cudaMemPoolReuseFollowEventDependencies || attr > cudaMemPoolAttrUsedMemHigh)
		return phos_set_error(cudaErrorInvalidValue);
	pthread_mutex_lock(&lock);
	known = pool_of(memPool) != NULL;
	a.pool = phos_handle_unwrap(memPool, PHOS_H_POOL);
	pthread_mutex_unlock(&lock);
	if (!known)
		return phos_set_error(cudaErrorInvalidValue);
	r = phos_preload_call(PHOS_OP_POOL_GET_ATTR, &a, sizeof(a), NULL, 0, &v, sizeof(v), &len, NULL);
	if (r == cudaSuccess && len != sizeof(v))
		r = cudaErrorUnknown;
	if (r == cudaSuccess) {
		if (attr_is_int(attr))
			*(int *)value = (int)v;
		else
			*(uint64_t *)value = v;
	}
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
	struct phos_pool_attr a = { .value = minBytesToKeep };
	bool known;

	pthread_mutex_lock(&lock);
	known = pool_of(memPool) != NULL;
	a.pool = phos_handle_unwrap(memPool, PHOS_H_POOL);
	pthread_mutex_unlock(&lock);
	if (!known)
		return phos_set_error(cudaErrorInvalidValue);
	return phos_set_error(phos_preload_call(PHOS_OP_POOL_TRIM, &a, sizeof(a), NULL, 0, NULL, 0, NULL, NULL));
}

/* One device: it always has read and write access to its pools' memory. */
PHOS_EXPORT cudaError_t cudaMemPoolGetAccess(enum cudaMemAccessFlags *flags, cudaMemPool_t memPool,
					     struct cudaMemLocation *location)
{
	bool known;

	pthread_mutex_lock(&lock);
	known = pool_of(memPool) != NULL;
	pthread_mutex_unlock(&lock);
	if (!flags || !location || !known || location->type != cudaMemLocationTypeDevice)
		return phos_set_error(cudaErrorInvalidValue);
	if (location->id != 0)
		return phos_set_error(cudaErrorInvalidDevice);
	*flags = cudaMemAccessFlagsProtReadWrite;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool, const struct cudaMemAccessDesc *descList,
					     size_t count)
{
	bool known;

	pthread_mutex_lock(&lock);
	known = pool_of(memPool) != NULL;
	pthread_mutex_unlock(&lock);
	if (!known || (count && !descList))
		return phos_set_error(cudaErrorInvalidValue);
	for (size_t i = 0; i < count; i++) {
		if (descList[i].location.type != cudaMemLocationTypeDevice)
			return phos_set_error(cudaErrorInvalidValue);
		if (descList[i].location.id != 0)
			return phos_set_error(cudaErrorInvalidDevice);
		if (descList[i].flags != cudaMemAccessFlagsProtReadWrite)
			return phos_set_error(cudaErrorNotSupported);   /* the owner keeps full access */
	}
	return cudaSuccess;
}

/* --- stream-ordered allocation --- */

static int malloc_from(void **devPtr, size_t size, uint32_t pool, cudaStream_t stream)
{
	struct phos_pool_malloc m = { .pool = pool, .size = size };
	uint64_t addr = 0;
	size_t len = 0;
	int r;

	if (!devPtr)
		return cudaErrorInvalidValue;
	r = phos_preload_stream_id(stream, &m.stream);
	if (r == cudaSuccess)
		r = phos_preload_connect();
	if (r)
		return r;
	r = phos_preload_call(PHOS_OP_POOL_MALLOC, &m, sizeof(m), NULL, 0, &addr, sizeof(addr), &len, NULL);
	if (r == cudaSuccess && len != sizeof(addr))
		r = cudaErrorUnknown;
	if (r == cudaSuccess && addr) {
		pthread_mutex_lock(&lock);
		r = block_add(addr, size, pool);
		pthread_mutex_unlock(&lock);
		if (r) {   /* cannot track it: give it back rather than lose it at a restore */
			struct phos_pool_free f = { .addr = addr, .stream = m.stream };

			phos_preload_post(PHOS_OP_POOL_FREE, &f, sizeof(f), NULL, 0);
			return r;
		}
	}
	if (r == cudaSuccess)
		*devPtr = (void *)(uintptr_t)addr;
	return r;
}

PHOS_EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
	uint32_t pool;

	if (phos_graph_capturing(hStream))   /* an allocation node (graph_mem.c) */
		return phos_set_error(phos_graph_capture_mem_alloc(hStream, devPtr, size, phos_current_device()));
	pthread_mutex_lock(&lock);
	pool = current;
	pthread_mutex_unlock(&lock);
	return phos_set_error(malloc_from(devPtr, size, pool, hStream));
}

PHOS_EXPORT cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
{
	struct pool *p;
	uint32_t id = 0;

	pthread_mutex_lock(&lock);
	p = pool_of(memPool);
	if (p)
		id = p->id;
	pthread_mutex_unlock(&lock);
	if (!p)
		return phos_set_error(cudaErrorInvalidValue);
	if (phos_graph_capturing(stream))   /* (pools are device 0's) */
		return phos_set_error(phos_graph_capture_mem_alloc(stream, ptr, size, 0));
	return phos_set_error(malloc_from(ptr, size, id, stream));
}

PHOS_EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	struct phos_pool_free f = { .addr = (uint64_t)(uintptr_t)devPtr };
	ssize_t i;
	int r;

	if (phos_graph_capturing(hStream))   /* a free node (graph_mem.c) */
		return phos_set_error(phos_graph_capture_mem_free(hStream, devPtr));
	if (phos_graph_mem_release(devPtr, &r))   /* a graph's allocation, outside its graph */
		return phos_set_error(r);
	r = phos_preload_stream_id(hStream, &f.stream);
	if (r == cudaSuccess)
		r = phos_preload_connect();
	if (r || !devPtr)
		return phos_set_error(r);
	pthread_mutex_lock(&lock);
	i = block_find(f.addr);
	if (i >= 0) {
		block_drop((size_t)i);
		r = phos_preload_post(PHOS_OP_POOL_FREE, &f, sizeof(f), NULL, 0);
	}
	pthread_mutex_unlock(&lock);
	if (i >= 0)
		return phos_set_error(r);
	/* cudaMalloc memory: cudaFree waits for the device, a valid order for it. */
	if (phos_mem_is_device(devPtr, 1))
		return cudaFree(devPtr);
	return phos_set_error(cudaErrorInvalidValue);
}

void phos_pool_forget(uint64_t addr)
{
	ssize_t i;

	pthread_mutex_lock(&lock);
	i = block_find(addr);
	if (i >= 0)
		block_drop((size_t)i);
	pthread_mutex_unlock(&lock);
}

int phos_pool_resend(void)
{
	int r = 0;

	pthread_mutex_lock(&lock);
	for (struct pool *p = pools; p && r == 0; p = p->next) {
		struct phos_pool_create c = { .pool = p->id, .max_size = p->max_size };
		struct phos_pool_attr a = { .pool = p->id, .attr = cudaMemPoolAttrReleaseThreshold,
					    .value = p->threshold };

		if (p != &default_pool)
			r = phos_preload_post(PHOS_OP_POOL_CREATE, &c, sizeof(c), NULL, 0);
		if (r == 0)
			r = phos_preload_call(PHOS_OP_POOL_SET_ATTR, &a, sizeof(a), NULL, 0, NULL, 0, NULL, NULL);
		for (int k = cudaMemPoolReuseFollowEventDependencies; k <= cudaMemPoolReuseAllowInternalDependencies &&
		     r == 0; k++) {
			a.attr = k;
			a.value = (uint64_t)p->reuse[k];
			r = phos_preload_call(PHOS_OP_POOL_SET_ATTR, &a, sizeof(a), NULL, 0, NULL, 0, NULL, NULL);
		}
	}
	/* Blocks of a destroyed pool stay plain buffers; cudaFreeAsync frees them as cudaFree. */
	for (size_t i = 0; i < nblocks && r == 0; i++) {
		struct phos_pool_adopt a = { .pool = blocks[i].pool, .addr = blocks[i].addr };

		if (blocks[i].pool)
			r = phos_preload_call(PHOS_OP_POOL_ADOPT, &a, sizeof(a), NULL, 0, NULL, 0, NULL, NULL);
	}
	for (size_t i = 0; i < nblocks;)
		if (!blocks[i].pool)
			block_drop(i);
		else
			i++;
	pthread_mutex_unlock(&lock);
	if (r)
		phos_err("a restored executor refused the pools (%d)", r);
	return r;
}

void phos_pool_reset(void)
{
	pthread_mutex_lock(&lock);
	while (default_pool.next) {
		struct pool *p = default_pool.next;

		default_pool.next = p->next;
		free(phos_ids_take(PHOS_H_POOL, p->id));
	}
	default_pool.threshold = 0;
	default_pool.reuse[1] = default_pool.reuse[2] = default_pool.reuse[3] = 1;
	current = PHOS_POOL_DEFAULT;
	nblocks = 0;
	pthread_mutex_unlock(&lock);
}

/* What a restored connection does (conn.c): the pools go to the new
 * executor; what cudaFree does (memory.c): a block freed leaves its pool. */
__attribute__((constructor)) static void pool_steps_init(void)
{
	phos_restore_steps[PHOS_STEP_POOLS] = phos_pool_resend;
	phos_free_pool_hook = phos_pool_forget;   /* (a cudaFree of a block) */
}
