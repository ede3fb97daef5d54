/* SPDX-License-Identifier: MIT */
/*
 * Device memory, copies, memsets, and pinned host memory.
 *
 * Copies go by direction:
 *   H2D   from a shared host region  → MEMCPY_H2D_SHM (zero-copy: the executor
 *                                      DMAs straight from the region)
 *         from any other host memory → MEMCPY_H2D records carrying the bytes, in
 *                                      chunks of PHOS_REC_MAX_PAYLOAD; a synchronous
 *                                      copy sends its last chunk synchronously
 *   D2H   into a shared host region  → MEMCPY_D2H_SHM
 *         into other host memory     → pipelined through two staging halves of a
 *                                      shared region (below), or, for small copies
 *                                      or without staging, a synchronous MEMCPY_D2H
 *                                      per PHOS_REPLY_MAX chunk (asynchronous copies
 *                                      to pageable memory are synchronous, as CUDA's
 *                                      are)
 *   D2D                              → MEMCPY_D2D
 *   cudaMemcpyDefault infers the direction from the arena (HELLO) and the module
 *   variables we know of.
 *
 * cudaMallocHost / cudaHostAlloc memory is a memfd mapped here and in the
 * executor (HOSTMEM_ADD after the fd travelled on the socket), so copies from
 * and to it are truly asynchronous. It is placed in the host window (below,
 * and proto.h) as managed memory is, so that the executor maps it at the
 * same address: the function's kernels take its host pointers as device
 * pointers (unified addressing), and a restored function's new executor
 * must map it there again. Placed anywhere, that address was sometimes
 * taken in the new executor (a checkpoint of train refused on an H200:
 * "host region 1 cannot be mapped at 0x7f64806e2000"). When the window is
 * full or cannot be reserved, it is mapped anywhere, as before.
 *
 * cudaHostRegister makes existing memory such a region: the pages holding
 * [ptr, ptr+size) are copied into a memfd, which is then mapped over them
 * (MAP_FIXED: one atomic replacement, same addresses, same contents), and the
 * executor maps and pins the memfd. Copies from registered memory then run at
 * DMA speed instead of through the call channel (issue 12: 64x slower). The
 * pages stay shared after cudaHostUnregister (only the executor forgets them).
 * Writes by other threads to those pages while they are copied would be lost:
 * like CUDA, registering memory that another thread is writing is the
 * caller's race.
 *
 * cudaMallocManaged memory (issue 12) is such a region too, placed in the
 * host window (proto.h), which the executor maps at the very same address,
 * pinned and mapped for the device: host code and kernels then use one
 * pointer, and every access is coherent (the GPU reads and writes the host's
 * pages over the bus, as zero-copy memory does). Nothing migrates: a kernel
 * reaches managed memory at the bus's speed, not HBM's; correct first (a
 * faster path would copy ranges in on cudaMemPrefetchAsync and track them
 * back). Every executor reserves the window before its driver starts, so the
 * address is free there, in a restored function's new executor too (mapping
 * anywhere the function happened to have it clashed with the driver's own
 * mappings on an H200). If it still cannot be mapped there, the allocation
 * fails with cudaErrorMemoryAllocation rather than hand out a pointer that
 * kernels could not use; a restored executor that cannot is a failed
 * restore. cudaMemset on it, and a copy between it and other host
 * memory, first wait for the stream's work (a kernel may be writing it), then
 * run on the host. cudaMemPrefetchAsync, cudaMemAdvise and
 * cudaStreamAttachMemAsync are checked and do nothing else (hints). A
 * __managed__ variable is refused (kernels.c).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "bufmap.h"
#include "internal.h"
#include "log.h"

/* --- shared host regions --- */

struct region {
	uint8_t *base;
	size_t size;     /* mapped bytes (page-rounded) */
	size_t asked;    /* what the user asked for */
	uint32_t id;     /* 0 once the executor forgot it (device reset) */
	unsigned flags;
	bool registered; /* cudaHostRegister'ed memory (not cudaFreeHost's to free) */
	bool managed;    /* cudaMallocManaged memory (cudaFree's to free) */
	bool windowed;   /* placed in the host window (given back there) */
	uint64_t dev;    /* its device address (the executor's mapping; base when it could map it there) */
	int fd;
};


bool (*phos_free_graph_hook)(const void *ptr, int *ret_err);
void (*phos_free_pool_hook)(uint64_t addr);

static pthread_mutex_t regions_lock = PTHREAD_MUTEX_INITIALIZER;
static struct region *regions;
static size_t nregions, cap_regions;

/* The region holding [p, p+len), copied to *ret; false if none. */
static bool region_find(const void *p, size_t len, struct region *ret)
{
	uintptr_t a = (uintptr_t)p;
	bool found = false;

	pthread_mutex_lock(&regions_lock);
	for (size_t i = 0; i < nregions; i++) {
		struct region *r = &regions[i];

		if (a >= (uintptr_t)r->base && a - (uintptr_t)r->base <= r->size &&
		    len <= r->size - (a - (uintptr_t)r->base)) {
			*ret = *r;
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&regions_lock);
	return found && ret->id != 0;
}

bool phos_mem_region_at(const void *p, size_t len, uint32_t *ret_id, uint64_t *ret_offset)
{
	struct region reg;

	if (!region_find(p, len, &reg) || reg.managed)
		return false;
	*ret_id = reg.id;
	*ret_offset = (uint64_t)((const uint8_t *)p - reg.base);
	return true;
}

/* Tells the executor about reg (its fd travels on the socket) and adds it to
 * the table; on failure nothing is left but what the caller made. */
static int region_publish(struct region *reg)
{
	struct phos_hostmem hm = { 0 };
	int r = phos_ids_add(PHOS_H_REGION, (void *)1, &reg->id);

	/* The id only marks the table slot; the region object lives in `regions`. */
	if (r)
		return r;
	hm.region = reg->id;
	hm.size = reg->size;
	hm.addr = (uint64_t)(uintptr_t)reg->base;
	reg->dev = 0;
	r = phos_preload_call_fd(reg->fd, PHOS_OP_HOSTMEM_ADD, &hm, sizeof(hm), &reg->dev, sizeof(reg->dev));
	if (r)
		goto err_id;
	pthread_mutex_lock(&regions_lock);
	if (nregions == cap_regions) {
		size_t cap = cap_regions ? cap_regions * 2 : 16;
		struct region *n = realloc(regions, cap * sizeof(*n));

		if (!n) {
			pthread_mutex_unlock(&regions_lock);
			phos_preload_call(PHOS_OP_HOSTMEM_REMOVE, &hm, sizeof(hm), NULL, 0, NULL, 0, NULL, NULL);
			r = cudaErrorMemoryAllocation;
			goto err_id;
		}
		regions = n;
		cap_regions = cap;
	}
	regions[nregions++] = *reg;
	pthread_mutex_unlock(&regions_lock);
	return cudaSuccess;

err_id:
	phos_ids_take(PHOS_H_REGION, reg->id);
	reg->id = 0;
	return r;
}

static int region_unpublish(struct region *reg);

/* --- the host window (managed memory): first fit over its used ranges --- */

static struct {
	uint64_t base;            /* 0 until reserved here */
	struct { uint64_t addr, len; } used[4096];   /* sorted by addr */
	size_t n;
	bool warned;              /* that it could not be reserved */
} window;

/* A window address for len bytes (a page multiple), reserving the window in
 * this process first; 0 when none (regions_lock held). */
static uint64_t window_take(uint64_t len)
{
	const struct phos_reply_hello *h = phos_preload_hello();
	uint64_t at;

	if (!window.base) {
		uint64_t base = phos_host_window_base(h->arena_base, h->arena_size);
		void *p = mmap((void *)(uintptr_t)base, PHOS_HOST_WINDOW_SIZE, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);

		if (!h->arena_size || p == MAP_FAILED || (uint64_t)(uintptr_t)p != base) {
			if (p != MAP_FAILED)
				munmap(p, PHOS_HOST_WINDOW_SIZE);
			if (!window.warned)
				phos_warn("the host window at %#llx is taken in this process: no managed memory, and "
					  "pinned memory placed anywhere (a checkpoint of it may not restore)",
					  (unsigned long long)base);
			window.warned = true;
			return 0;
		}
		window.base = base;
	}
	if (window.n == sizeof(window.used) / sizeof(window.used[0]))
		return 0;
	at = window.base;
	for (size_t i = 0; i <= window.n; i++) {
		uint64_t end = i < window.n ? window.used[i].addr : window.base + PHOS_HOST_WINDOW_SIZE;

		if (end - at >= len) {
			memmove(&window.used[i + 1], &window.used[i], (window.n - i) * sizeof(window.used[0]));
			window.used[i].addr = at;
			window.used[i].len = len;
			window.n++;
			return at;
		}
		if (i < window.n)
			at = window.used[i].addr + window.used[i].len;
	}
	return 0;
}

/* Gives [addr, addr+len) back to the window, reserved again (regions_lock held). */
static void window_give(uint64_t addr, uint64_t len)
{
	for (size_t i = 0; i < window.n; i++)
		if (window.used[i].addr == addr) {
			memmove(&window.used[i], &window.used[i + 1], (window.n - i - 1) * sizeof(window.used[0]));
			window.n--;
			break;
		}
	mmap((void *)(uintptr_t)addr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

static int host_alloc(void **ptr, size_t size, unsigned flags, bool managed)
{
	long page = sysconf(_SC_PAGESIZE);
	struct region reg = { .fd = -1, .flags = flags, .asked = size, .managed = managed };
	uint64_t at;
	int r;

	if (!ptr)
		return cudaErrorInvalidValue;
	if (size == 0) {
		*ptr = NULL;
		return cudaSuccess;
	}
	r = phos_preload_connect();
	if (r)
		return r;
	if (size > SIZE_MAX - (size_t)page)
		return cudaErrorMemoryAllocation;
	reg.size = (size + (size_t)page - 1) & ~((size_t)page - 1);
	reg.fd = memfd_create("phos-hostmem", MFD_CLOEXEC);
	if (reg.fd < 0 || ftruncate(reg.fd, (off_t)reg.size) < 0) {
		r = cudaErrorMemoryAllocation;
		goto err_fd;
	}
	pthread_mutex_lock(&regions_lock);
	at = window_take(reg.size);
	pthread_mutex_unlock(&regions_lock);
	reg.base = at ? mmap((void *)(uintptr_t)at, reg.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, reg.fd, 0)
		      : MAP_FAILED;
	if (reg.base == MAP_FAILED && at) {
		pthread_mutex_lock(&regions_lock);
		window_give(at, reg.size);
		pthread_mutex_unlock(&regions_lock);
	}
	reg.windowed = reg.base != MAP_FAILED;
	if (reg.base == MAP_FAILED && !managed)   /* pinned memory: anywhere, as a last resort */
		reg.base = mmap(NULL, reg.size, PROT_READ | PROT_WRITE, MAP_SHARED, reg.fd, 0);
	if (reg.base == MAP_FAILED) {
		r = cudaErrorMemoryAllocation;
		goto err_fd;
	}
	r = region_publish(&reg);
	if (r)
		goto err_map;
	if (managed && reg.dev != (uint64_t)(uintptr_t)reg.base) {
		phos_warn("cudaMallocManaged: the executor cannot map %zu bytes at %p, where the function has them",
			  reg.size, (void *)reg.base);
		region_unpublish(&reg);
		r = cudaErrorMemoryAllocation;
		goto err_map;
	}
	*ptr = reg.base;
	return cudaSuccess;

err_map:
	if (reg.windowed) {
		pthread_mutex_lock(&regions_lock);
		window_give((uint64_t)(uintptr_t)reg.base, reg.size);
		pthread_mutex_unlock(&regions_lock);
	} else {
		munmap(reg.base, reg.size);
	}
err_fd:
	if (reg.fd >= 0)
		close(reg.fd);
	return r;
}

PHOS_EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size)
{
	return phos_set_error(host_alloc(ptr, size, cudaHostAllocDefault, false));
}

PHOS_EXPORT cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	if (flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined))
		return phos_set_error(cudaErrorInvalidValue);
	return phos_set_error(host_alloc(pHost, size, flags, false));
}

PHOS_EXPORT cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	if (!devPtr || (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost))
		return phos_set_error(cudaErrorInvalidValue);
	/* size 0: success and NULL, as an H200 answers */
	return phos_set_error(host_alloc(devPtr, size, cudaHostAllocMapped, true));
}

/* The executor forgets reg (a live, published region). */
static int region_unpublish(struct region *reg)
{
	struct phos_hostmem hm = { .region = reg->id, .size = reg->size };
	int r;

	/* Synchronous: the executor finishes every copy that uses it first. */
	r = phos_preload_call(PHOS_OP_HOSTMEM_REMOVE, &hm, sizeof(hm), NULL, 0, NULL, 0, NULL, NULL);
	phos_ids_take(PHOS_H_REGION, reg->id);
	reg->id = 0;
	return r;
}

/* Frees the region that starts at ptr if it is one of ours of that kind
 * (managed: cudaFree's; else cudaFreeHost's). cudaErrorInvalidValue if not. */
static int region_free(void *ptr, bool managed)
{
	struct region reg;
	bool found = false;
	int r = cudaSuccess;

	pthread_mutex_lock(&regions_lock);
	for (size_t i = 0; i < nregions; i++) {
		if (regions[i].base == ptr && !regions[i].registered && regions[i].managed == managed) {
			reg = regions[i];
			regions[i] = regions[--nregions];
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&regions_lock);
	if (!found)
		return cudaErrorInvalidValue;
	if (reg.id)
		r = region_unpublish(&reg);
	if (reg.windowed) {
		pthread_mutex_lock(&regions_lock);
		window_give((uint64_t)(uintptr_t)reg.base, reg.size);
		pthread_mutex_unlock(&regions_lock);
	} else {
		munmap(reg.base, reg.size);
	}
	close(reg.fd);
	return r;
}

PHOS_EXPORT cudaError_t cudaFreeHost(void *ptr)
{
	return phos_set_error(ptr ? region_free(ptr, false) : cudaSuccess);
}

/* Whether [p, p+len) lies in managed memory. */
static bool managed_range(const void *p, size_t len)
{
	struct region reg;

	return region_find(p, len, &reg) && reg.managed;
}

bool phos_mem_is_managed(const void *p, size_t len)
{
	return managed_range(p, len);
}

/* Pinned host memory's device address: with unified addressing the executor's
 * mapping of the region, which is the host address itself when the executor
 * could map the region there (usually). */
PHOS_EXPORT cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags)
{
	struct region reg;

	if (!pDevice || flags || !region_find(pHost, 0, &reg) || !reg.dev)
		return phos_set_error(cudaErrorInvalidValue);
	*pDevice = (void *)(uintptr_t)(reg.dev + ((uintptr_t)pHost - (uintptr_t)reg.base));
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaHostGetFlags(unsigned int *pFlags, void *pHost)
{
	struct region reg;

	if (!pFlags || !region_find(pHost, 0, &reg))
		return phos_set_error(cudaErrorInvalidValue);
	*pFlags = reg.flags;
	return cudaSuccess;
}

/* Whether any region overlaps [a, a+len). */
static bool region_overlaps(uintptr_t a, size_t len)
{
	bool hit = false;

	pthread_mutex_lock(&regions_lock);
	for (size_t i = 0; i < nregions && !hit; i++)
		hit = a < (uintptr_t)regions[i].base + regions[i].size && (uintptr_t)regions[i].base < a + len;
	pthread_mutex_unlock(&regions_lock);
	return hit;
}

/* Writes the whole pages [base, base+size) into fd from offset 0. The pages
 * hold more than the caller's buffer (its neighbours in the first and last
 * page): the kernel reads them (a raw pwrite64), not a memcpy, which a
 * sanitizer would rightly call an overflow of the buffer. */
static int pages_to_file(int fd, const uint8_t *base, size_t size)
{
	for (size_t off = 0; off < size;) {
		long n = syscall(SYS_pwrite64, fd, base + off, size - off, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EFAULT)
			return cudaErrorInvalidValue;   /* unreadable pages */
		if (n <= 0)
			return cudaErrorMemoryAllocation;
		off += (size_t)n;
	}
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
	const unsigned known = cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterIoMemory |
			       cudaHostRegisterReadOnly;
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)ptr, lo, hi;
	struct region reg = { .fd = -1, .flags = flags, .registered = true };
	int prot = flags & cudaHostRegisterReadOnly ? PROT_READ : PROT_READ | PROT_WRITE, r;

	if (!ptr || !size || (flags & ~known) || size > UINTPTR_MAX - a - page)
		return phos_set_error(cudaErrorInvalidValue);
	if (flags & cudaHostRegisterIoMemory)    /* device memory mapped into the process: not ours to copy */
		return phos_set_error(cudaErrorNotSupported);
	r = phos_preload_connect();
	if (r)
		return phos_set_error(r);
	lo = a & ~(page - 1);
	hi = (a + size + page - 1) & ~(page - 1);
	if (region_overlaps(lo, hi - lo))
		return phos_set_error(cudaErrorHostMemoryAlreadyRegistered);
	reg.base = (uint8_t *)lo;
	reg.size = hi - lo;
	reg.asked = size;
	reg.fd = memfd_create("phos-hostreg", MFD_CLOEXEC);
	if (reg.fd < 0 || ftruncate(reg.fd, (off_t)reg.size) < 0)
		goto fail;
	/* Unmapped pages: refused, as CUDA refuses them. */
	if (msync(reg.base, reg.size, MS_ASYNC) < 0) {
		close(reg.fd);
		return phos_set_error(cudaErrorInvalidValue);
	}
	r = pages_to_file(reg.fd, reg.base, reg.size);
	if (r) {
		close(reg.fd);
		return phos_set_error(r);
	}
	if (mmap(reg.base, reg.size, prot, MAP_SHARED | MAP_FIXED, reg.fd, 0) == MAP_FAILED)
		goto fail;
	r = region_publish(&reg);
	if (r) {
		/* The pages keep their contents in the memfd mapping: only the fast
		 * path is lost. The mapping holds its own reference to the file. */
		close(reg.fd);
		return phos_set_error(r);
	}
	return cudaSuccess;

fail:
	if (reg.fd >= 0)
		close(reg.fd);
	return phos_set_error(cudaErrorMemoryAllocation);
}

PHOS_EXPORT cudaError_t cudaHostUnregister(void *ptr)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = (uintptr_t)ptr & ~(page - 1);
	struct region reg;
	bool found = false;
	int r;

	if (!ptr)
		return phos_set_error(cudaErrorInvalidValue);
	r = phos_preload_connect();
	if (r)
		return phos_set_error(r);
	pthread_mutex_lock(&regions_lock);
	for (size_t i = 0; i < nregions; i++) {
		if (regions[i].registered && (uintptr_t)regions[i].base == lo) {
			reg = regions[i];
			regions[i] = regions[--nregions];
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&regions_lock);
	if (!found)
		return phos_set_error(cudaErrorHostMemoryNotRegistered);
	if (reg.id) {
		struct phos_hostmem hm = { .region = reg.id, .size = reg.size };

		/* Synchronous: the executor finishes every copy that uses it first. */
		r = phos_preload_call(PHOS_OP_HOSTMEM_REMOVE, &hm, sizeof(hm), NULL, 0, NULL, 0, NULL, NULL);
		phos_ids_take(PHOS_H_REGION, reg.id);
	}
	/* The pages stay mapped from the memfd, with the program's data. */
	close(reg.fd);
	return phos_set_error(r);
}

int phos_mem_regions_resend(void)
{
	int r = 0;

	pthread_mutex_lock(&regions_lock);
	for (size_t i = 0; i < nregions && r == 0; i++) {
		struct phos_hostmem hm = { .region = regions[i].id, .size = regions[i].size,
					   .addr = (uint64_t)(uintptr_t)regions[i].base };

		/* a new executor: the device address may differ from the last one's */
		if (regions[i].id)
			r = phos_preload_call_fd(regions[i].fd, PHOS_OP_HOSTMEM_ADD, &hm, sizeof(hm), &regions[i].dev,
						 sizeof(regions[i].dev));
		/* ... but not for managed memory, whose one pointer kernels use */
		if (r == 0 && regions[i].id && regions[i].managed && regions[i].dev != hm.addr) {
			phos_err("the restored executor cannot map managed memory at %p, where the function has it",
				 (void *)regions[i].base);
			r = cudaErrorMemoryAllocation;
		}
	}
	pthread_mutex_unlock(&regions_lock);
	return r;
}

void phos_mem_reset(void)
{
	/* The executor dropped every region: keep the mappings (the program may
	 * still hold them) but stop using the shared path for them. */
	pthread_mutex_lock(&regions_lock);
	for (size_t i = 0; i < nregions; i++)
		regions[i].id = 0;
	pthread_mutex_unlock(&regions_lock);
	phos_ids_clear(PHOS_H_REGION, NULL);
}

/* --- device memory --- */

PHOS_EXPORT int phos_mem_range(uint64_t addr, uint64_t *ret_base, uint64_t *ret_size)
{
	struct phos_free a = { .addr = addr };
	struct phos_reply_range rr;
	size_t len = 0;
	int r;

	r = phos_preload_call(PHOS_OP_ADDR_RANGE, &a, sizeof(a), NULL, 0, &rr, sizeof(rr), &len, NULL);
	if (r == cudaSuccess && len != sizeof(rr))
		r = cudaErrorUnknown;
	if (r == cudaSuccess) {
		*ret_base = rr.base;
		*ret_size = rr.size;
	}
	return r;
}

static int device_malloc(void **devPtr, size_t size)
{
	struct phos_malloc m = { .size = size };
	uint64_t addr = 0;
	size_t len = 0;
	int r;

	if (!devPtr)
		return cudaErrorInvalidValue;
	r = phos_preload_call(PHOS_OP_MALLOC, &m, sizeof(m), NULL, 0, &addr, sizeof(addr), &len, NULL);
	if (r)
		return r;
	if (len != sizeof(addr))
		return cudaErrorUnknown;
	*devPtr = (void *)(uintptr_t)addr;
	return cudaSuccess;
}

static int device_free(void *devPtr)
{
	struct phos_free f = { .addr = (uint64_t)(uintptr_t)devPtr };
	int r = phos_preload_connect();

	if (r)
		return r;
	if (!devPtr)
		return cudaSuccess;
	if (phos_free_graph_hook && phos_free_graph_hook(devPtr, &r))   /* a graph's allocation (graph_mem.c) */
		return r;
	if (managed_range(devPtr, 1))
		return region_free(devPtr, true);
	if (phos_free_pool_hook)
		phos_free_pool_hook(f.addr);   /* a pool block: the executor frees it to its pool */
	/* the executor waits for the device before freeing: NCCL ranks as
	 * threads poll for it first (internal.h) */
	r = phos_preload_drain_device();
	if (r)
		return r;
	return phos_preload_call(PHOS_OP_FREE, &f, sizeof(f), NULL, 0, NULL, 0, NULL, NULL);
}

PHOS_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	return phos_set_error(device_malloc(devPtr, size));
}

PHOS_EXPORT cudaError_t cudaFree(void *devPtr)
{
	return phos_set_error(device_free(devPtr));
}

/* cudaMallocAsync, cudaFreeAsync: pool.c */

PHOS_EXPORT cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
	size_t p;
	int r;

	if (!devPtr || !pitch)
		return phos_set_error(cudaErrorInvalidValue);
	p = (width + 511) & ~(size_t)511;
	if (p < width || (height && p > SIZE_MAX / height))
		return phos_set_error(cudaErrorMemoryAllocation);
	r = device_malloc(devPtr, p * height);
	if (r == cudaSuccess)
		*pitch = p;
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
	struct phos_reply_meminfo mi = { 0 };
	int r;

	if (!free || !total)
		return phos_set_error(cudaErrorInvalidValue);
	r = phos_preload_call(PHOS_OP_MEM_GET_INFO, NULL, 0, NULL, 0, &mi, sizeof(mi), NULL, NULL);
	if (r == cudaSuccess) {
		*free = mi.free;
		*total = mi.total;
	}
	return phos_set_error(r);
}

/* --- copies --- */

/*
 * Large copies between the device and pageable memory are staged through the
 * two halves of a pinned region shared with the executor, pipelined the way
 * the driver stages pageable copies:
 *   D2H: the executor DMAs chunk k+1 into one half while we copy chunk k out
 *        of the other (one chunk at a time, DMA then memcpy then a round trip,
 *        was 0.46x of a native pageable D2H on an H100: bench/hostcopy.py);
 *   H2D: we copy chunk k+1 into one half while the executor DMAs chunk k from
 *        the other (records through the call ring were 0.8-1.0x).
 * The copies in and out of the halves run on a few threads (phos_par_memcpy).
 * Waiting for a chunk is a stream synchronisation, which CUDA also allows
 * itself for pageable copies; every staged copy ends with its stream drained,
 * so that the next one (of any thread, on any stream) finds both halves free.
 * The region is made on first use, shared by the threads of the process (one
 * staged copy at a time), and made again when a device reset made the
 * executor forget it.
 */
#define STAGE_CHUNK (8u << 20)
#define STAGE_MIN (2u << 20)   /* below this one round trip is cheaper */

static pthread_mutex_t stage_lock = PTHREAD_MUTEX_INITIALIZER;
static void *stage;                 /* 2 x STAGE_CHUNK, a region of ours */

/* The staging region, valid with stage_lock held; NULL when none can be had. */
static void *stage_get(void)
{
	struct region reg;

	if (stage && region_find(stage, 2 * (size_t)STAGE_CHUNK, &reg))
		return stage;
	if (stage) {
		cudaFreeHost(stage);   /* forgotten by a reset executor */
		stage = NULL;
	}
	if (host_alloc(&stage, 2 * (size_t)STAGE_CHUNK, cudaHostAllocDefault, false) != cudaSuccess) {
		phos_set_error(cudaSuccess);
		stage = NULL;
	}
	return stage;
}

/* Posts a copy between device address dev and staging half (op: MEMCPY_D2H_SHM
 * or MEMCPY_H2D_SHM). */
static int stage_post(uint32_t op, uint64_t dev, size_t n, unsigned half, uint32_t stream)
{
	struct region reg;
	struct phos_memcpy_shm c = { .dev = dev, .stream = stream, .len = n };

	if (!region_find((uint8_t *)stage + (size_t)half * STAGE_CHUNK, n, &reg))
		return cudaErrorUnknown;
	c.region = reg.id;
	c.offset = (uint64_t)((uint8_t *)stage - reg.base) + (uint64_t)half * STAGE_CHUNK;
	return phos_preload_post(op, &c, sizeof(c), NULL, 0);
}

static int stage_sync(uint32_t stream)
{
	struct phos_handle h = { .id = stream };

	return phos_preload_call(PHOS_OP_STREAM_SYNC, &h, sizeof(h), NULL, 0, NULL, 0, NULL, NULL);
}

/* Copies count bytes from pageable src to device dst through the staging
 * halves; -1 when there is no staging (the caller takes the plain path). */
static int copy_h2d_staged(uint64_t dst, const void *src, size_t count, uint32_t stream)
{
	size_t off = 0;
	unsigned half = 0;
	int r = cudaSuccess;

	pthread_mutex_lock(&stage_lock);
	if (!stage_get()) {
		pthread_mutex_unlock(&stage_lock);
		return -1;
	}
	while (off < count && r == cudaSuccess) {
		size_t n = count - off < STAGE_CHUNK ? count - off : STAGE_CHUNK;

		/* this half's last chunk is done: the previous wait was for it */
		phos_par_memcpy((uint8_t *)stage + (size_t)half * STAGE_CHUNK, (const uint8_t *)src + off, n);
		/* the chunk in the other half is done before that half is filled again */
		if (off)
			r = stage_sync(stream);
		if (r == cudaSuccess)
			r = stage_post(PHOS_OP_MEMCPY_H2D_SHM, dst + off, n, half, stream);
		off += n;
		half ^= 1;
	}
	if (r == cudaSuccess)
		r = stage_sync(stream);
	pthread_mutex_unlock(&stage_lock);
	return r;
}

/* Copies count bytes from device src to pageable dst through the staging
 * halves; -1 when there is no staging (the caller takes the plain path). */
static int copy_d2h_staged(void *dst, uint64_t src, size_t count, uint32_t stream)
{
	size_t off = 0, n;
	unsigned half = 0;
	int r;

	pthread_mutex_lock(&stage_lock);
	if (!stage_get()) {
		pthread_mutex_unlock(&stage_lock);
		return -1;
	}
	n = count < STAGE_CHUNK ? count : STAGE_CHUNK;
	r = stage_post(PHOS_OP_MEMCPY_D2H_SHM, src, n, 0, stream);
	if (r == cudaSuccess)
		r = stage_sync(stream);
	while (r == cudaSuccess) {
		size_t next = off + n, m = 0;

		/* Chunk off is in stage[half]: start the next one into the other half. */
		if (next < count) {
			m = count - next < STAGE_CHUNK ? count - next : STAGE_CHUNK;
			r = stage_post(PHOS_OP_MEMCPY_D2H_SHM, src + next, m, half ^ 1, stream);
			if (r)
				break;
		}
		phos_par_memcpy((uint8_t *)dst + off, (uint8_t *)stage + (size_t)half * STAGE_CHUNK, n);
		if (!m)
			break;
		r = stage_sync(stream);
		off = next;
		n = m;
		half ^= 1;
	}
	pthread_mutex_unlock(&stage_lock);
	return r;
}

static int copy_h2d(uint64_t dst, const void *src, size_t count, uint32_t stream, bool sync)
{
	struct region reg;
	size_t off = 0;
	int r;

	if (region_find(src, count, &reg)) {
		struct phos_memcpy_shm c = { .dev = dst, .region = reg.id, .stream = stream,
					     .offset = (uint64_t)((const uint8_t *)src - reg.base),
					     .len = count };

		if (sync)
			return phos_preload_call(PHOS_OP_MEMCPY_H2D_SHM, &c, sizeof(c), NULL, 0, NULL, 0, NULL, NULL);
		return phos_preload_post(PHOS_OP_MEMCPY_H2D_SHM, &c, sizeof(c), NULL, 0);
	}
	/* from pageable memory the executor may wait for the stream, async or not */
	if (!sync && (r = phos_preload_drain(stream)))
		return r;
	if (count >= STAGE_MIN) {
		r = copy_h2d_staged(dst, src, count, stream);
		if (r >= 0)
			return r;
	}
	while (off < count) {
		size_t n = count - off < PHOS_REC_MAX_PAYLOAD ? count - off : PHOS_REC_MAX_PAYLOAD;
		struct phos_memcpy c = { .dst = dst + off, .len = n, .stream = stream };
		const uint8_t *p = (const uint8_t *)src + off;

		if (sync && off + n == count)
			r = phos_preload_call(PHOS_OP_MEMCPY_H2D, &c, sizeof(c), p, n, NULL, 0, NULL, NULL);
		else
			r = phos_preload_post(PHOS_OP_MEMCPY_H2D, &c, sizeof(c), p, n);
		if (r)
			return r;
		off += n;
	}
	return cudaSuccess;
}

static int copy_d2h(void *dst, uint64_t src, size_t count, uint32_t stream, bool sync)
{
	struct region reg;
	size_t off = 0;
	int r;

	if (region_find(dst, count, &reg)) {
		struct phos_memcpy_shm c = { .dev = src, .region = reg.id, .stream = stream,
					     .offset = (uint64_t)((uint8_t *)dst - reg.base),
					     .len = count };

		if (sync)
			return phos_preload_call(PHOS_OP_MEMCPY_D2H_SHM, &c, sizeof(c), NULL, 0, NULL, 0, NULL, NULL);
		return phos_preload_post(PHOS_OP_MEMCPY_D2H_SHM, &c, sizeof(c), NULL, 0);
	}
	/* into pageable memory the executor waits for the stream, async or not */
	if (!sync && (r = phos_preload_drain(stream)))
		return r;
	if (count >= STAGE_MIN) {
		r = copy_d2h_staged(dst, src, count, stream);
		if (r >= 0)
			return r;
	}
	while (off < count) {
		size_t n = count - off < PHOS_REPLY_MAX ? count - off : PHOS_REPLY_MAX;
		struct phos_memcpy c = { .src = src + off, .len = n, .stream = stream };
		size_t got = 0;

		r = phos_preload_call(PHOS_OP_MEMCPY_D2H, &c, sizeof(c), NULL, 0, (uint8_t *)dst + off, n, &got,
				      NULL);
		if (r)
			return r;
		if (got != n)
			return cudaErrorUnknown;
		off += n;
	}
	return cudaSuccess;
}

static int copy_d2d(uint64_t dst, uint64_t src, size_t count, uint32_t stream, bool sync)
{
	struct phos_memcpy c = { .dst = dst, .src = src, .len = count, .stream = stream };

	if (sync)
		return phos_preload_call(PHOS_OP_MEMCPY_D2D, &c, sizeof(c), NULL, 0, NULL, 0, NULL, NULL);
	return phos_preload_post(PHOS_OP_MEMCPY_D2D, &c, sizeof(c), NULL, 0);
}

static int copy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, const void *stream,
		bool sync)
{
	uint32_t sid;
	int r;

	if (count == 0)
		return phos_preload_connect();
	if (!dst || !src)
		return cudaErrorInvalidValue;
	r = phos_preload_stream_id(stream, &sid);
	if (r == cudaSuccess && sync)
		r = phos_preload_drain(sid);   /* NCCL ranks as threads: internal.h */
	if (r)
		return r;
	if (kind == cudaMemcpyDefault) {
		bool dd = phos_mem_is_device(dst, count), sd = phos_mem_is_device(src, count);

		kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
			  : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
	}
	/* managed memory is host memory here, whatever the kind says of it */
	if (kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToHost) {
		bool dm = managed_range(dst, count), sm = managed_range(src, count);

		if (dm || sm)
			kind = dm ? (sm ? cudaMemcpyHostToHost : kind == cudaMemcpyHostToDevice ? cudaMemcpyHostToHost
										       : cudaMemcpyDeviceToHost)
				  : kind == cudaMemcpyDeviceToHost ? cudaMemcpyHostToHost : cudaMemcpyHostToDevice;
	}
	switch (kind) {
	case cudaMemcpyHostToHost: {
		struct region reg;

		/* pinned or managed memory may be written by work queued before */
		if (region_find(dst, count, &reg) || region_find(src, count, &reg)) {
			r = cudaStreamSynchronize((cudaStream_t)(uintptr_t)stream);
			if (r)
				return r;
		}
		memmove(dst, src, count);
		return phos_preload_connect();
	}
	case cudaMemcpyHostToDevice:
		return copy_h2d((uint64_t)(uintptr_t)dst, src, count, sid, sync);
	case cudaMemcpyDeviceToHost:
		return copy_d2h(dst, (uint64_t)(uintptr_t)src, count, sid, sync);
	case cudaMemcpyDeviceToDevice:
		return copy_d2d((uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src, count, sid, sync);
	default:
		return cudaErrorInvalidMemcpyDirection;
	}
}

PHOS_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	return phos_set_error(copy(dst, src, count, kind, NULL, true));
}

PHOS_EXPORT cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
					cudaStream_t stream)
{
	if (phos_graph_capturing(stream))
		return phos_set_error(phos_graph_capture_memcpy(stream, dst, src, count, kind));
	return phos_set_error(copy(dst, src, count, kind, stream, false));
}

static int memset_dev(void *devPtr, int value, size_t count, const void *stream)
{
	struct phos_memset m = { .dst = (uint64_t)(uintptr_t)devPtr, .len = count,
				 .value = (uint32_t)(value & 0xff) };
	int r = phos_preload_connect();

	if (r)
		return r;
	if (count == 0)
		return cudaSuccess;
	r = phos_preload_stream_id(stream, &m.stream);
	if (r)
		return r;
	/* managed memory: after the stream's work, on the host */
	if (devPtr && managed_range(devPtr, count)) {
		r = cudaStreamSynchronize((cudaStream_t)(uintptr_t)stream);
		if (r == cudaSuccess)
			memset(devPtr, value, count);
		return r;
	}
	/* Refuse what cannot be device memory now rather than as a later async error. */
	if (!devPtr || !phos_mem_is_device(devPtr, count))
		return cudaErrorInvalidValue;
	return phos_preload_post(PHOS_OP_MEMSET, &m, sizeof(m), NULL, 0);
}

PHOS_EXPORT cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
	return phos_set_error(memset_dev(devPtr, value, count, NULL));
}

PHOS_EXPORT cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	if (phos_graph_capturing(stream))
		return phos_set_error(phos_graph_capture_memset(stream, devPtr, value, count));
	return phos_set_error(memset_dev(devPtr, value, count, stream));
}

/* --- module variables --- */

static int symbol_copy(const void *symbol, void *host, size_t count, size_t offset, enum cudaMemcpyKind kind,
		       bool to_symbol, const void *stream, bool sync)
{
	uint64_t addr, size;
	int r = phos_var_lookup(symbol, &addr, &size);

	if (r)
		return r;
	if (offset > size || count > size - offset)
		return cudaErrorInvalidValue;
	if (kind == cudaMemcpyDefault)
		kind = phos_mem_is_device(host, count) ? cudaMemcpyDeviceToDevice
						       : (to_symbol ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
	if (to_symbol && kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice)
		return cudaErrorInvalidMemcpyDirection;
	if (!to_symbol && kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice)
		return cudaErrorInvalidMemcpyDirection;
	if (to_symbol)
		return copy((void *)(uintptr_t)(addr + offset), host, count, kind, stream, sync);
	return copy(host, (const void *)(uintptr_t)(addr + offset), count, kind, stream, sync);
}

PHOS_EXPORT cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count, size_t offset,
					   enum cudaMemcpyKind kind)
{
	return phos_set_error(symbol_copy(symbol, (void *)(uintptr_t)src, count, offset, kind, true, NULL, true));
}

PHOS_EXPORT cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count, size_t offset,
					     enum cudaMemcpyKind kind)
{
	return phos_set_error(symbol_copy(symbol, dst, count, offset, kind, false, NULL, true));
}

PHOS_EXPORT cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t count,
						size_t offset, enum cudaMemcpyKind kind, cudaStream_t stream)
{
	if (phos_graph_capturing(stream))
		return phos_set_error(phos_graph_capture_symbol(stream, symbol, (void *)(uintptr_t)src, count, offset,
								kind, true));
	return phos_set_error(symbol_copy(symbol, (void *)(uintptr_t)src, count, offset, kind, true, stream, false));
}

PHOS_EXPORT cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t count, size_t offset,
						  enum cudaMemcpyKind kind, cudaStream_t stream)
{
	if (phos_graph_capturing(stream))
		return phos_set_error(phos_graph_capture_symbol(stream, symbol, dst, count, offset, kind, false));
	return phos_set_error(symbol_copy(symbol, dst, count, offset, kind, false, stream, false));
}

PHOS_EXPORT cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol)
{
	uint64_t addr;
	int r;

	if (!devPtr)
		return phos_set_error(cudaErrorInvalidValue);
	r = phos_var_address(symbol, &addr);
	if (r == cudaSuccess)
		*devPtr = (void *)(uintptr_t)addr;
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaGetSymbolSize(size_t *sz, const void *symbol)
{
	uint64_t addr, size;
	int r;

	if (!sz)
		return phos_set_error(cudaErrorInvalidValue);
	r = phos_var_lookup(symbol, &addr, &size);
	if (r == cudaSuccess)
		*sz = (size_t)size;
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
	struct region reg;
	int r;

	if (!attributes)
		return phos_set_error(cudaErrorInvalidValue);
	r = phos_preload_connect();
	if (r)
		return phos_set_error(r);
	memset(attributes, 0, sizeof(*attributes));
	if (ptr && phos_mem_is_device(ptr, 1)) {
		const struct phos_reply_hello *h = phos_preload_hello();
		uint64_t stride, span, at = (uintptr_t)ptr;

		attributes->type = cudaMemoryTypeDevice;
		attributes->devicePointer = (void *)(uintptr_t)ptr;
		/* the device whose part of the arena holds it (bufmap.h) */
		if (h->device_count > 1 && at >= h->arena_base &&
		    phos_arena_parts(h->arena_size, (int)h->device_count, &stride, &span) &&
		    (at - h->arena_base) / stride < h->device_count)
			attributes->device = (int)((at - h->arena_base) / stride);
		else
			attributes->device = phos_current_device();
	} else if (ptr && region_find(ptr, 0, &reg) && reg.managed) {
		attributes->type = cudaMemoryTypeManaged;
		attributes->devicePointer = attributes->hostPointer = (void *)(uintptr_t)ptr;
	} else if (ptr && region_find(ptr, 0, &reg)) {
		attributes->type = cudaMemoryTypeHost;
		attributes->hostPointer = (void *)(uintptr_t)ptr;
	} else {
		attributes->type = cudaMemoryTypeUnregistered;
		attributes->device = -2; /* what CUDA reports for unregistered memory */
	}
	return cudaSuccess;
}

/* --- managed memory hints: checked, then nothing to do (see the top) --- */

static int managed_hint_check(const void *ptr, size_t count)
{
	int r = phos_preload_connect();

	if (r)
		return r;
	if (!ptr || !count)
		return cudaErrorInvalidValue;
	/* CUDA takes device memory too (the hint is then moot) */
	return managed_range(ptr, count) || phos_mem_is_device(ptr, count) ? cudaSuccess : cudaErrorInvalidValue;
}

PHOS_EXPORT cudaError_t cudaMemPrefetchAsync(const void *devPtr, size_t count, struct cudaMemLocation location,
					     unsigned int flags, cudaStream_t stream)
{
	uint32_t sid;
	int r = managed_hint_check(devPtr, count);

	(void)location;
	if (r == cudaSuccess && flags)
		r = cudaErrorInvalidValue;
	if (r == cudaSuccess)
		r = phos_preload_stream_id(stream, &sid);
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaMemAdvise(const void *devPtr, size_t count, enum cudaMemoryAdvise advice,
				      struct cudaMemLocation location)
{
	int r = managed_hint_check(devPtr, count);

	(void)location;
	if (r == cudaSuccess && (advice < cudaMemAdviseSetReadMostly || advice > cudaMemAdviseUnsetAccessedBy))
		r = cudaErrorInvalidValue;
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaStreamAttachMemAsync(cudaStream_t stream, void *devPtr, size_t length, unsigned int flags)
{
	uint32_t sid;
	int r = phos_preload_connect();

	/* cudaMemAttachSingle names one stream: not the legacy one (an H200 refuses it) */
	if (r == cudaSuccess && (!devPtr || !managed_range(devPtr, length ? length : 1) ||
				 (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost &&
				  flags != cudaMemAttachSingle) ||
				 (flags == cudaMemAttachSingle && (!stream || stream == cudaStreamLegacy))))
		r = cudaErrorInvalidValue;
	if (r == cudaSuccess)
		r = phos_preload_stream_id(stream, &sid);
	return phos_set_error(r);
}

/* What a restored connection does (conn.c): the host regions go to the new executor. */
__attribute__((constructor)) static void memory_steps_init(void)
{
	phos_restore_steps[PHOS_STEP_REGIONS] = phos_mem_regions_resend;
}
