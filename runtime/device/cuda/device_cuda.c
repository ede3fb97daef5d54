/* SPDX-License-Identifier: MIT */
/*
 * The cuda device backend: the driver API, reached through dlopen (see
 * device_cuda_syms.h), one primary context per open device.
 *
 *   open(ordinal, base, size, warm)
 *     cuInit → cuDevicePrimaryCtxRetain → cuCtxSetCurrent
 *     cuMemAddressReserve(base, size, 2 MiB)   refused unless placed at base
 *     warm: cuBLAS handles + a first SGEMM each (device_cuda_blas.c)
 *
 *   map(addr, len)    one cuMemCreate (pinned, this device) + cuMemMap +
 *                     cuMemSetAccess(RW) per call, recorded in a table with one
 *                     "in use" bit per 2 MiB chunk
 *   unmap(addr, len)  clears the chunks' bits; an allocation whose chunks are
 *                     all unused is unmapped and released. Unmapping part of
 *                     what one map call mapped therefore keeps that physical
 *                     memory until the rest goes too (cuMemUnmap cannot split
 *                     a mapping), and a later map of such a chunk reuses it.
 *
 * Every thread that calls in makes the context current once (cuda_current());
 * the tables are behind one mutex, since the dispatcher and a restore thread
 * may both call.
 */
#include "device_cuda_syms.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bufmap.h"
#include "log.h"

/* ------------------------------------------------------------------------ */
/* Context                                                                    */

/* Common entry of every op: a device that was opened, and its context current. */
#define DEV_ENTER(d, dev)                                  \
	struct cuda_dev *d = cuda_dev(dev);                \
	do {                                               \
		int enter_r_;                              \
		if (!d)                                    \
			return -PHOS_CUDA_INVALID_VALUE;   \
		enter_r_ = cuda_current(d);                \
		if (enter_r_ < 0)                          \
			return enter_r_;                   \
	} while (0)

static CUstream cu_stream(void *stream)
{
	return stream ? (CUstream)stream : CU_STREAM_LEGACY;
}

/* ------------------------------------------------------------------------ */
/* Arena mappings                                                             */

struct cuda_map {
	uint64_t addr, len;
	CUmemGenericAllocationHandle handle;
	uint64_t live;        /* chunks in use */
	uint64_t *bits;       /* one bit per chunk: in use */
	bool fresh;           /* created by the map call in progress */
};

static bool chunk_live(const struct cuda_map *m, uint64_t addr)
{
	uint64_t k = (addr - m->addr) / PHOS_CHUNK;

	return m->bits[k / 64] >> (k % 64) & 1;
}

static void chunk_set(struct cuda_map *m, uint64_t addr, bool live)
{
	uint64_t k = (addr - m->addr) / PHOS_CHUNK;

	if (live)
		m->bits[k / 64] |= 1ull << (k % 64);
	else
		m->bits[k / 64] &= ~(1ull << (k % 64));
}

/* Index of the first mapping that ends after addr (mappings are sorted and disjoint). */
static size_t map_first_after(const struct cuda_dev *d, uint64_t addr)
{
	size_t lo = 0, hi = d->nmaps;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (d->maps[mid].addr + d->maps[mid].len <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int arena_check(const struct cuda_dev *d, uint64_t addr, uint64_t len, const char *what)
{
	if (len == 0 || addr % PHOS_CHUNK || len % PHOS_CHUNK || addr < d->arena ||
	    addr - d->arena > d->arena_size || len > d->arena_size - (addr - d->arena)) {
		phos_err("cuda: %s [0x%llx, +0x%llx) is not 2 MiB aligned inside the arena [0x%llx, +0x%llx)",
			 what, (unsigned long long)addr, (unsigned long long)len,
			 (unsigned long long)d->arena, (unsigned long long)d->arena_size);
		return -PHOS_CUDA_INVALID_VALUE;
	}
	return 0;
}

/* The access of this device and its peers to [addr, addr+len): read/write, or
 * read only (a shared buffer: a kernel's write there faults). */
static CUresult set_access(struct cuda_dev *d, uint64_t addr, uint64_t len, bool writable)
{
	CUmemAccessDesc access[CUDA_MAX_PEERS + 1];

	for (unsigned i = 0; i <= d->npeers; i++) {
		memset(&access[i], 0, sizeof(access[i]));
		access[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		access[i].location.id = i == 0 ? d->ordinal : d->peers[i - 1];
		access[i].flags = writable ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_READ;
	}
	return cuda_drv.MemSetAccess((CUdeviceptr)addr, len, access, d->npeers + 1);
}

/* Room for one more mapping in the table: 0 or -PHOS_CUDA_MEMORY_ALLOCATION. Called locked. */
static int maps_room(struct cuda_dev *d)
{
	size_t cap = d->maps_cap ? 2 * d->maps_cap : 64;
	struct cuda_map *maps;

	if (d->nmaps < d->maps_cap)
		return 0;
	maps = realloc(d->maps, cap * sizeof(*maps));
	if (!maps)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	d->maps = maps;
	d->maps_cap = cap;
	return 0;
}

/* The "in use" bits of len bytes of chunks, every one set, or NULL. */
static uint64_t *bits_all(uint64_t len)
{
	uint64_t nchunks = len / PHOS_CHUNK, *bits = calloc((nchunks + 63) / 64, sizeof(*bits));

	for (uint64_t k = 0; bits && k < nchunks; k++)
		bits[k / 64] |= 1ull << (k % 64);
	return bits;
}

/* Records the mapping of handle at [addr, addr+len), every chunk in use, at
 * index at (maps_room made room). Called locked. */
static void map_insert(struct cuda_dev *d, size_t at, uint64_t addr, uint64_t len,
		       CUmemGenericAllocationHandle handle, uint64_t *bits, bool fresh)
{
	memmove(&d->maps[at + 1], &d->maps[at], (d->nmaps - at) * sizeof(*d->maps));
	d->maps[at] = (struct cuda_map){
		.addr = addr, .len = len, .handle = handle, .live = len / PHOS_CHUNK, .bits = bits, .fresh = fresh,
	};
	d->nmaps++;
}

/* Creates physical memory for [addr, addr+len), maps it there with read/write
 * access for this device, and records it at index at. Called locked. */
static int map_create(struct cuda_dev *d, size_t at, uint64_t addr, uint64_t len)
{
	CUmemAllocationProp prop;
	CUmemGenericAllocationHandle handle;
	uint64_t *bits;
	CUresult r;

	if (maps_room(d) < 0)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	bits = bits_all(len);
	if (!bits)
		return -PHOS_CUDA_MEMORY_ALLOCATION;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = d->ordinal;
	r = cuda_drv.MemCreate(&handle, len, &prop, 0);
	if (r != CUDA_SUCCESS) {
		free(bits);
		if (r == CUDA_ERROR_OUT_OF_MEMORY) {
			phos_warn("cuda: out of device memory mapping 0x%llx bytes at 0x%llx",
				  (unsigned long long)len, (unsigned long long)addr);
			return -PHOS_CUDA_MEMORY_ALLOCATION;
		}
		return cu_fail(r, "cuMemCreate", __FILE__, __LINE__);
	}
	r = cuda_drv.MemMap((CUdeviceptr)addr, len, 0, handle, 0);
	if (r != CUDA_SUCCESS) {
		cuda_drv.MemRelease(handle);
		free(bits);
		return cu_fail(r, "cuMemMap", __FILE__, __LINE__);
	}
	/* this device, and the peers of a function over several GPUs */
	r = set_access(d, addr, len, true);
	if (r != CUDA_SUCCESS) {
		cuda_drv.MemUnmap((CUdeviceptr)addr, len);
		cuda_drv.MemRelease(handle);
		free(bits);
		return cu_fail(r, "cuMemSetAccess", __FILE__, __LINE__);
	}
	map_insert(d, at, addr, len, handle, bits, true);
	return 0;
}

/* Unmaps and releases mapping i and drops it from the table. Called locked. */
static void map_release(struct cuda_dev *d, size_t i)
{
	struct cuda_map *m = &d->maps[i];
	CUresult r;

	r = cuda_drv.MemUnmap((CUdeviceptr)m->addr, m->len);
	if (r != CUDA_SUCCESS)
		cu_fail(r, "cuMemUnmap", __FILE__, __LINE__);
	r = cuda_drv.MemRelease(m->handle);
	if (r != CUDA_SUCCESS)
		cu_fail(r, "cuMemRelease", __FILE__, __LINE__);
	free(m->bits);
	memmove(&d->maps[i], &d->maps[i + 1], (d->nmaps - i - 1) * sizeof(*d->maps));
	d->nmaps--;
}

static int map_locked(struct cuda_dev *d, uint64_t addr, uint64_t len)
{
	uint64_t end = addr + len, pos, c, lo, hi;
	size_t i, first = map_first_after(d, addr);
	int r = 0;

	/* 1. Nothing in the range may be in use already. */
	for (i = first; i < d->nmaps && d->maps[i].addr < end; i++) {
		struct cuda_map *m = &d->maps[i];

		lo = addr > m->addr ? addr : m->addr;
		hi = end < m->addr + m->len ? end : m->addr + m->len;
		for (c = lo; c < hi; c += PHOS_CHUNK) {
			if (chunk_live(m, c)) {
				phos_err("cuda: map of [0x%llx, +0x%llx): 0x%llx is mapped already",
					 (unsigned long long)addr, (unsigned long long)len,
					 (unsigned long long)c);
				return -PHOS_CUDA_INVALID_VALUE;
			}
		}
	}

	/* 2. New physical memory for every gap between the mappings that remain. */
	pos = addr;
	i = first;
	while (pos < end) {
		uint64_t gap_end;

		if (i < d->nmaps && d->maps[i].addr <= pos) {
			pos = d->maps[i].addr + d->maps[i].len;
			i++;
			continue;
		}
		gap_end = i < d->nmaps && d->maps[i].addr < end ? d->maps[i].addr : end;
		r = map_create(d, i, pos, gap_end - pos);
		if (r < 0)
			break;
		i++;
		pos = gap_end;
	}

	/* 3. Unused chunks of earlier mappings are used again; or, on failure,
	 *    what step 2 created goes. */
	i = map_first_after(d, addr);
	while (i < d->nmaps && d->maps[i].addr < end) {
		struct cuda_map *m = &d->maps[i];

		if (m->fresh) {
			m->fresh = false;
			if (r < 0) {
				map_release(d, i);
				continue;
			}
		} else if (r == 0) {
			lo = addr > m->addr ? addr : m->addr;
			hi = end < m->addr + m->len ? end : m->addr + m->len;
			for (c = lo; c < hi; c += PHOS_CHUNK) {
				chunk_set(m, c, true);
				m->live++;
			}
		}
		i++;
	}
	return r;
}

static int cuda_map(struct phos_device *dev, uint64_t addr, uint64_t len)
{
	int r;
	DEV_ENTER(d, dev);

	r = arena_check(d, addr, len, "map");
	if (r < 0)
		return r;
	pthread_mutex_lock(&d->lock);
	r = map_locked(d, addr, len);
	pthread_mutex_unlock(&d->lock);
	return r;
}

static void cuda_unmap(struct phos_device *dev, uint64_t addr, uint64_t len)
{
	struct cuda_dev *d = cuda_dev(dev);
	uint64_t end = addr + len, c, lo, hi;
	bool synced = false;
	size_t i;

	if (!d || cuda_current(d) < 0 || arena_check(d, addr, len, "unmap") < 0)
		return;
	pthread_mutex_lock(&d->lock);
	i = map_first_after(d, addr);
	while (i < d->nmaps && d->maps[i].addr < end) {
		struct cuda_map *m = &d->maps[i];

		lo = addr > m->addr ? addr : m->addr;
		hi = end < m->addr + m->len ? end : m->addr + m->len;
		for (c = lo; c < hi; c += PHOS_CHUNK) {
			if (chunk_live(m, c)) {
				chunk_set(m, c, false);
				m->live--;
			}
		}
		if (m->live == 0) {
			/* Like cudaFree: work still in flight may use the memory. */
			if (!synced) {
				CUresult r = cuda_drv.CtxSynchronize();

				if (r != CUDA_SUCCESS)
					cu_fail(r, "cuCtxSynchronize", __FILE__, __LINE__);
				synced = true;
			}
			map_release(d, i);
			continue;
		}
		i++;
	}
	pthread_mutex_unlock(&d->lock);
}

/* ------------------------------------------------------------------------ */
/* Shared mappings (device.h share_out, share_in, share_own; issue 42)        */

/* The mapping that covers exactly [addr, addr+len) with every chunk in use,
 * or -1. Called locked. */
static ssize_t map_exact(const struct cuda_dev *d, uint64_t addr, uint64_t len)
{
	size_t i = map_first_after(d, addr);

	if (i < d->nmaps && d->maps[i].addr == addr && d->maps[i].len == len &&
	    d->maps[i].live == len / PHOS_CHUNK)
		return (ssize_t)i;
	return -1;
}

/* Mapping i's memory replaced by a new allocation holding the same contents
 * (shareable: one another process may import), mapped with that access.
 * The old allocation is released. Called locked, with nothing in flight. */
static int map_replace(struct cuda_dev *d, size_t i, bool shareable, bool writable)
{
	struct cuda_map *m = &d->maps[i];
	CUmemAllocationProp prop;
	CUmemGenericAllocationHandle handle;
	CUdeviceptr tmp = 0;
	CUresult r;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = d->ordinal;
	if (shareable)
		prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
	r = cuda_drv.MemCreate(&handle, m->len, &prop, 0);
	if (r != CUDA_SUCCESS)
		return r == CUDA_ERROR_OUT_OF_MEMORY ? -PHOS_CUDA_MEMORY_ALLOCATION
						     : cu_fail(r, "cuMemCreate", __FILE__, __LINE__);
	/* the copy: the new memory at a spare address beside the old */
	r = cuda_drv.MemAddressReserve(&tmp, m->len, PHOS_CHUNK, 0, 0);
	if (r == CUDA_SUCCESS && (r = cuda_drv.MemMap(tmp, m->len, 0, handle, 0)) == CUDA_SUCCESS) {
		CUmemAccessDesc a = { .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = d->ordinal },
				      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };

		r = cuda_drv.MemSetAccess(tmp, m->len, &a, 1);
		if (r == CUDA_SUCCESS)
			r = cuda_drv.MemcpyDtoDAsync(tmp, (CUdeviceptr)m->addr, m->len, CU_STREAM_LEGACY);
		if (r == CUDA_SUCCESS)
			r = cuda_drv.CtxSynchronize();
		cuda_drv.MemUnmap(tmp, m->len);
	}
	if (tmp)
		cuda_drv.MemAddressFree(tmp, m->len);
	if (r != CUDA_SUCCESS) {
		cuda_drv.MemRelease(handle);
		return cu_fail(r, "copying a buffer into new memory", __FILE__, __LINE__);
	}
	/* then it takes the old memory's place */
	r = cuda_drv.MemUnmap((CUdeviceptr)m->addr, m->len);
	if (r == CUDA_SUCCESS)
		r = cuda_drv.MemMap((CUdeviceptr)m->addr, m->len, 0, handle, 0);
	if (r == CUDA_SUCCESS)
		r = set_access(d, m->addr, m->len, writable);
	if (r != CUDA_SUCCESS) {
		/* the range has nothing behind it now: the instance cannot go on */
		cuda_drv.MemUnmap((CUdeviceptr)m->addr, m->len);
		cuda_drv.MemRelease(handle);
		return cu_fail(r, "mapping a buffer's new memory", __FILE__, __LINE__);
	}
	cuda_drv.MemRelease(m->handle);
	m->handle = handle;
	return 0;
}

static int cuda_share_out(struct phos_device *dev, uint64_t addr, uint64_t len, int *ret_fd)
{
	ssize_t i;
	int r, fd = -1;
	DEV_ENTER(d, dev);

	*ret_fd = -1;
	if ((r = arena_check(d, addr, len, "share")) < 0)
		return r;
	pthread_mutex_lock(&d->lock);
	i = map_exact(d, addr, len);
	r = i < 0 ? -PHOS_CUDA_INVALID_VALUE : map_replace(d, (size_t)i, true, false);
	if (r == 0) {
		CUresult cr = cuda_drv.MemExportToShareableHandle(&fd, d->maps[i].handle,
								 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);

		if (cr != CUDA_SUCCESS)
			r = cu_fail(cr, "cuMemExportToShareableHandle", __FILE__, __LINE__);
	}
	pthread_mutex_unlock(&d->lock);
	*ret_fd = r == 0 ? fd : -1;
	return r;
}

static int cuda_share_in(struct phos_device *dev, uint64_t addr, uint64_t len, int fd)
{
	CUmemGenericAllocationHandle handle;
	CUmemAllocationProp prop;
	uint64_t *bits;
	size_t at;
	CUresult cr;
	int r;
	DEV_ENTER(d, dev);

	if ((r = arena_check(d, addr, len, "share")) < 0)
		return r;
	cr = cuda_drv.MemImportFromShareableHandle(&handle, (void *)(uintptr_t)fd,
						   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	if (cr != CUDA_SUCCESS)
		return cu_fail(cr, "cuMemImportFromShareableHandle", __FILE__, __LINE__);
	memset(&prop, 0, sizeof(prop));
	cr = cuda_drv.MemGetAllocationPropertiesFromHandle(&prop, handle);
	if (cr != CUDA_SUCCESS || prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop.location.id != d->ordinal) {
		cuda_drv.MemRelease(handle);
		phos_err("cuda: a shared buffer at 0x%llx lives on another device", (unsigned long long)addr);
		return -PHOS_CUDA_INVALID_VALUE;
	}
	bits = bits_all(len);
	pthread_mutex_lock(&d->lock);
	at = map_first_after(d, addr);
	if (!bits || maps_room(d) < 0) {
		r = -PHOS_CUDA_MEMORY_ALLOCATION;
		goto fail;
	}
	if (at < d->nmaps && d->maps[at].addr < addr + len) {
		r = -PHOS_CUDA_INVALID_VALUE;   /* something is mapped there */
		goto fail;
	}
	cr = cuda_drv.MemMap((CUdeviceptr)addr, len, 0, handle, 0);
	if (cr == CUDA_SUCCESS && (cr = set_access(d, addr, len, false)) != CUDA_SUCCESS)
		cuda_drv.MemUnmap((CUdeviceptr)addr, len);
	if (cr != CUDA_SUCCESS) {
		r = cu_fail(cr, "mapping a shared buffer", __FILE__, __LINE__);
		goto fail;
	}
	map_insert(d, at, addr, len, handle, bits, false);
	pthread_mutex_unlock(&d->lock);
	return 0;
fail:
	pthread_mutex_unlock(&d->lock);
	free(bits);
	cuda_drv.MemRelease(handle);
	return r;
}

static int cuda_share_own(struct phos_device *dev, uint64_t addr, uint64_t len)
{
	ssize_t i;
	int r;
	DEV_ENTER(d, dev);

	if ((r = arena_check(d, addr, len, "share")) < 0)
		return r;
	pthread_mutex_lock(&d->lock);
	i = map_exact(d, addr, len);
	r = i < 0 ? -PHOS_CUDA_INVALID_VALUE : map_replace(d, (size_t)i, false, true);
	pthread_mutex_unlock(&d->lock);
	return r;
}

/* ------------------------------------------------------------------------ */
/* Open, close, device queries                                                */

static void cuda_close(struct phos_device *dev);

static int open_steps(struct cuda_dev *d, uint64_t arena_base, bool warm)
{
	CUmemAllocationProp prop;
	CUdeviceptr base = 0;
	size_t granularity = 0;
	int version = 0, r;

	CU_CHECK(cuda_drv.DriverGetVersion(&version));
	if (version < CUDA_VERSION)
		phos_warn("cuda: the driver supports CUDA %d.%d; libcublas.so.13 needs %d.%d or newer",
			  version / 1000, version % 1000 / 10, CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
	CU_CHECK(cuda_drv.DeviceGet(&d->cudev, d->ordinal));
	CU_CHECK(cuda_drv.DevicePrimaryCtxRetain(&d->ctx, d->cudev));
	d->ctx_retained = true;
	d->gen = cuda_gen_next();
	r = cuda_current(d);
	if (r < 0)
		return r;

	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = d->ordinal;
	CU_CHECK(cuda_drv.MemGetAllocationGranularity(&granularity, &prop,
						      CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	if (granularity == 0 || PHOS_CHUNK % granularity) {
		phos_err("cuda: device %d maps memory in units of %zu bytes, which do not divide 2 MiB",
			 d->ordinal, granularity);
		return -PHOS_CUDA_NOT_SUPPORTED;
	}

	CU_CHECK(cuda_drv.MemAddressReserve(&base, d->arena_size, PHOS_CHUNK, (CUdeviceptr)arena_base, 0));
	if (base != (CUdeviceptr)arena_base) {
		phos_err("cuda: the arena was asked for at 0x%llx (0x%llx bytes) but the driver placed it "
			 "at 0x%llx; refusing, since device addresses must be the same in every executor",
			 (unsigned long long)arena_base, (unsigned long long)d->arena_size,
			 (unsigned long long)base);
		cuda_drv.MemAddressFree(base, d->arena_size);
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	}
	d->arena = base;
	d->arena_reserved = true;

	if (warm)
		return cuda_blas_warm(d);
	return 0;
}

static int cuda_warm(struct phos_device *dev)
{
	DEV_ENTER(d, dev);

	return cuda_blas_warm(d);
}

static int cuda_open(int ordinal, uint64_t arena_base, uint64_t arena_size, bool warm,
		     struct phos_device **ret_dev)
{
	struct cuda_dev *d;
	int r;

	if (!ret_dev || ordinal < 0)
		return -PHOS_CUDA_INVALID_VALUE;
	if (arena_size == 0 || arena_base == 0 || arena_base % PHOS_CHUNK || arena_size % PHOS_CHUNK ||
	    arena_base + arena_size < arena_base) {
		phos_err("cuda: arena [0x%llx, +0x%llx) must be non-empty and 2 MiB aligned",
			 (unsigned long long)arena_base, (unsigned long long)arena_size);
		return -PHOS_CUDA_INVALID_VALUE;
	}
	r = cuda_syms_load();
	if (r < 0)
		return r;
	CU_CHECK(cuda_drv.Init(0));

	d = calloc(1, sizeof(*d));
	if (!d)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	pthread_mutex_init(&d->lock, NULL);
	d->ordinal = ordinal;
	d->arena_size = arena_size;
	r = open_steps(d, arena_base, warm);
	if (r < 0) {
		cuda_close((struct phos_device *)(void *)d);
		return r;
	}
	phos_info("cuda: device %d open, arena [0x%llx, +%llu GiB)%s", ordinal,
		  (unsigned long long)arena_base, (unsigned long long)(arena_size >> 30),
		  warm ? ", cuBLAS warm" : "");
	*ret_dev = (struct phos_device *)(void *)d;
	return 0;
}

struct cuda_hostreg {
	uintptr_t start;
	size_t len;
};

static void cuda_close(struct phos_device *dev)
{
	struct cuda_dev *d = cuda_dev(dev);
	size_t i;

	if (!d)
		return;
	if (d->ctx_retained && cuda_current(d) == 0) {
		/* Work in flight may still use what is released below; errors of it are moot now. */
		(void)cuda_drv.CtxSynchronize();
		cuda_blas_release_warm(d);
		cuda_blaslt_release(d);
		cuda_sparse_release(d);
		cuda_solver_release(d);
		pthread_mutex_lock(&d->lock);
		while (d->nmaps)
			map_release(d, d->nmaps - 1);
		for (i = 0; i < d->nhostregs; i++)
			(void)cuda_drv.MemHostUnregister((void *)d->hostregs[i].start);
		d->nhostregs = 0;
		pthread_mutex_unlock(&d->lock);
		if (d->arena_reserved) {
			CUresult r = cuda_drv.MemAddressFree(d->arena, d->arena_size);

			if (r != CUDA_SUCCESS)
				cu_fail(r, "cuMemAddressFree", __FILE__, __LINE__);
		}
	}
	if (d->ctx_retained) {
		CUresult r = cuda_drv.DevicePrimaryCtxRelease(d->cudev);

		if (r != CUDA_SUCCESS)
			cu_fail(r, "cuDevicePrimaryCtxRelease", __FILE__, __LINE__);
	}
	cuda_current_forget(d);
	for (i = 0; i < d->nmaps; i++)
		free(d->maps[i].bits);
	free(d->maps);
	free(d->hostregs);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

static int cuda_enter(struct phos_device *dev)
{
	DEV_ENTER(d, dev);
	return 0;
}

static int cuda_peer_add(struct phos_device *dev, struct phos_device *peer)
{
	struct cuda_dev *p = cuda_dev(peer);
	int can = 0;
	DEV_ENTER(d, dev);

	if (!p || p == d)
		return -PHOS_CUDA_INVALID_VALUE;
	if (d->npeers == CUDA_MAX_PEERS)
		return -PHOS_CUDA_NOT_SUPPORTED;
	CU_CHECK(cuda_drv.DeviceCanAccessPeer(&can, p->cudev, d->cudev));
	if (!can) {
		phos_warn("cuda: device %d cannot reach device %d's memory (no P2P between them)", p->ordinal,
			  d->ordinal);
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
	pthread_mutex_lock(&d->lock);
	d->peers[d->npeers++] = p->ordinal;
	pthread_mutex_unlock(&d->lock);
	return 0;
}

static int cuda_device_count(struct phos_device *dev, int *ret_count)
{
	int n = 0, r;

	(void)dev; /* counts every device; works before open too */
	if (!ret_count)
		return -PHOS_CUDA_INVALID_VALUE;
	r = cuda_driver_syms_load();
	if (r < 0)
		return r;
	CU_CHECK(cuda_drv.Init(0));
	CU_CHECK(cuda_drv.DeviceGetCount(&n));
	*ret_count = n;
	return 0;
}

static int cuda_info(struct phos_device *dev, struct phos_reply_device *ret_info)
{
	struct cuda_dev *d = cuda_dev(dev);
	struct phos_reply_device info;
	CUuuid uuid;
	size_t total = 0;
	int a;

	if (!d || !ret_info)
		return -PHOS_CUDA_INVALID_VALUE;
	memset(&info, 0, sizeof(info));
	CU_CHECK(cuda_drv.DeviceGetName(info.name, (int)sizeof(info.name), d->cudev));
	info.name[sizeof(info.name) - 1] = '\0';
	CU_CHECK(cuda_drv.DeviceGetUuid(&uuid, d->cudev));
	memcpy(info.uuid, uuid.bytes, sizeof(info.uuid));
	CU_CHECK(cuda_drv.DeviceTotalMem(&total, d->cudev));
	info.total_mem = total;
	/* Attributes this driver does not know (or retired ones) stay 0. */
	for (a = 1; a < PHOS_DEVICE_ATTR_MAX; a++) {
		int v = 0;

		if (cuda_drv.DeviceGetAttribute(&v, (CUdevice_attribute)a, d->cudev) == CUDA_SUCCESS)
			info.attr[a] = v;
	}
	*ret_info = info;
	return 0;
}

static int cuda_mem_info(struct phos_device *dev, uint64_t *ret_free, uint64_t *ret_total)
{
	size_t free_bytes = 0, total = 0;
	DEV_ENTER(d, dev);

	CU_CHECK(cuda_drv.MemGetInfo(&free_bytes, &total));
	if (ret_free)
		*ret_free = free_bytes;
	if (ret_total)
		*ret_total = total;
	return 0;
}

static int cuda_synchronize(struct phos_device *dev)
{
	DEV_ENTER(d, dev);

	(void)d;
	CU_CHECK(cuda_drv.CtxSynchronize());
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Host memory                                                                */

static uintptr_t page_size(void)
{
	long p = sysconf(_SC_PAGESIZE);

	return p > 0 ? (uintptr_t)p : 4096;
}

static int cuda_host_register(struct phos_device *dev, void *ptr, size_t len)
{
	uintptr_t page = page_size(), start, end;
	CUresult r, r2;
	DEV_ENTER(d, dev);

	if (!ptr || !len || (uintptr_t)ptr + len < (uintptr_t)ptr)
		return -PHOS_CUDA_INVALID_VALUE;
	start = (uintptr_t)ptr & ~(page - 1);
	end = ((uintptr_t)ptr + len + page - 1) & ~(page - 1);

	/* Pinning takes about 35 ms per GiB: not under the lock. */
	/* DEVICEMAP: kernels may dereference it (mapped host memory, issue 12). */
	r = cuda_drv.MemHostRegister((void *)start, end - start, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
	if (r != CUDA_SUCCESS && r != CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
		/* A read-only mapping (a page-cache file mapping) can only be pinned read-only. */
		r2 = cuda_drv.MemHostRegister((void *)start, end - start,
					      CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
						      CU_MEMHOSTREGISTER_READ_ONLY);
		if (r2 == CUDA_SUCCESS) {
			phos_info("cuda: host range %p (+%zu) pinned read-only", (void *)start,
				  (size_t)(end - start));
			r = CUDA_SUCCESS;
		}
	}
	if (r != CUDA_SUCCESS)
		return cu_fail(r, "cuMemHostRegister_v2", __FILE__, __LINE__);

	pthread_mutex_lock(&d->lock);
	if (d->nhostregs == d->hostregs_cap) {
		size_t cap = d->hostregs_cap ? 2 * d->hostregs_cap : 16;
		struct cuda_hostreg *regs = realloc(d->hostregs, cap * sizeof(*regs));

		if (!regs) {
			pthread_mutex_unlock(&d->lock);
			cuda_drv.MemHostUnregister((void *)start);
			return -PHOS_CUDA_MEMORY_ALLOCATION;
		}
		d->hostregs = regs;
		d->hostregs_cap = cap;
	}
	d->hostregs[d->nhostregs++] = (struct cuda_hostreg){ .start = start, .len = end - start };
	pthread_mutex_unlock(&d->lock);
	return 0;
}

static void cuda_host_unregister(struct phos_device *dev, void *ptr)
{
	struct cuda_dev *d = cuda_dev(dev);
	uintptr_t start = (uintptr_t)ptr & ~(page_size() - 1);
	bool found = false;
	CUresult r;
	size_t i;

	if (!d || !ptr || cuda_current(d) < 0)
		return;
	pthread_mutex_lock(&d->lock);
	for (i = 0; i < d->nhostregs; i++) {
		if (d->hostregs[i].start == start) {
			d->hostregs[i] = d->hostregs[--d->nhostregs];
			found = true;
			break;
		}
	}
	pthread_mutex_unlock(&d->lock);
	if (!found) {
		phos_warn("cuda: host_unregister(%p): not registered here", ptr);
		return;
	}
	r = cuda_drv.MemHostUnregister((void *)start);
	if (r != CUDA_SUCCESS)
		cu_fail(r, "cuMemHostUnregister", __FILE__, __LINE__);
}

/* Whether [ptr, ptr+len) lies inside one range pinned by host_register. */
static bool host_is_registered(struct cuda_dev *d, const void *ptr, size_t len)
{
	uintptr_t p = (uintptr_t)ptr;
	bool found = false;
	size_t i;

	pthread_mutex_lock(&d->lock);
	for (i = 0; i < d->nhostregs && !found; i++)
		found = p >= d->hostregs[i].start && p - d->hostregs[i].start <= d->hostregs[i].len &&
			len <= d->hostregs[i].len - (p - d->hostregs[i].start);
	pthread_mutex_unlock(&d->lock);
	return found;
}

/* ------------------------------------------------------------------------ */
/* Streams and events                                                         */

static int cuda_stream_create(struct phos_device *dev, uint32_t flags, int priority, void **ret_stream)
{
	CUstream s;
	DEV_ENTER(d, dev);

	(void)d;
	if (!ret_stream || (flags & ~(uint32_t)CU_STREAM_NON_BLOCKING))
		return -PHOS_CUDA_INVALID_VALUE;
	/* cudaStreamNonBlocking == CU_STREAM_NON_BLOCKING == 1; the driver clamps the priority. */
	CU_CHECK(cuda_drv.StreamCreateWithPriority(&s, flags, priority));
	*ret_stream = s;
	return 0;
}

static int cuda_stream_destroy(struct phos_device *dev, void *stream)
{
	DEV_ENTER(d, dev);

	(void)d;
	if (!stream)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	CU_CHECK(cuda_drv.StreamDestroy((CUstream)stream));
	return 0;
}

static int cuda_stream_sync(struct phos_device *dev, void *stream)
{
	DEV_ENTER(d, dev);

	(void)d;
	CU_CHECK(cuda_drv.StreamSynchronize(cu_stream(stream)));
	return 0;
}

struct host_func {
	void (*fn)(void *arg, int status);
	void *arg;
};

static void CUDA_CB host_func_run(CUstream stream, CUresult status, void *data)
{
	struct host_func hf = *(struct host_func *)data;

	(void)stream;
	free(data);
	hf.fn(hf.arg, status == CUDA_SUCCESS ? 0 : -cu_to_phos(status));
}

static int cuda_stream_host_func(struct phos_device *dev, void *stream, void (*fn)(void *arg, int status), void *arg)
{
	struct host_func *hf;
	CUresult r;
	DEV_ENTER(d, dev);

	(void)d;
	hf = malloc(sizeof(*hf));
	if (!hf)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	*hf = (struct host_func){ .fn = fn, .arg = arg };
	r = cuda_drv.StreamAddCallback(cu_stream(stream), host_func_run, hf, 0);
	if (r != CUDA_SUCCESS)
		free(hf);
	CU_CHECK_RESULT(r, "cuStreamAddCallback");
	return 0;
}

static int cuda_stream_query(struct phos_device *dev, void *stream)
{
	CUresult r;
	DEV_ENTER(d, dev);

	(void)d;
	r = cuda_drv.StreamQuery(cu_stream(stream));
	if (r == CUDA_ERROR_NOT_READY)
		return -PHOS_CUDA_NOT_READY;
	CU_CHECK_RESULT(r, "cuStreamQuery");
	return 0;
}

static int cuda_stream_wait_event(struct phos_device *dev, void *stream, void *event)
{
	DEV_ENTER(d, dev);

	(void)d;
	if (!event)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	CU_CHECK(cuda_drv.StreamWaitEvent(cu_stream(stream), (CUevent)event, 0));
	return 0;
}

static int cuda_flags_alloc(struct phos_device *dev, uint32_t n, uint64_t *ret_addr)
{
	CUdeviceptr p;
	CUresult r;
	DEV_ENTER(d, dev);

	(void)d;
	if (!n || !ret_addr)
		return -PHOS_CUDA_INVALID_VALUE;
	CU_CHECK(cuda_drv.MemAlloc(&p, (size_t)n * 4));
	r = cuda_drv.MemsetD32(p, 0, n);
	if (r != CUDA_SUCCESS) {
		cuda_drv.MemFree(p);
		return cu_fail(r, "cuMemsetD32_v2", __FILE__, __LINE__);
	}
	*ret_addr = (uint64_t)p;
	return 0;
}

static int cuda_scratch_alloc(struct phos_device *dev, uint64_t len, uint64_t *ret_addr)
{
	CUdeviceptr p;
	DEV_ENTER(d, dev);

	(void)d;
	if (!len || !ret_addr)
		return -PHOS_CUDA_INVALID_VALUE;
	CU_CHECK(cuda_drv.MemAlloc(&p, (size_t)len));
	*ret_addr = (uint64_t)p;
	return 0;
}

static void cuda_flags_free(struct phos_device *dev, uint64_t addr)
{
	struct cuda_dev *d = cuda_dev(dev);

	if (d && addr && cuda_current(d) == 0)
		cuda_drv.MemFree((CUdeviceptr)addr);
}

static int cuda_flag_write(struct phos_device *dev, void *stream, uint64_t addr, uint32_t value)
{
	DEV_ENTER(d, dev);

	(void)d;
	/* The default flags order the write after the stream's earlier writes. */
	CU_CHECK(cuda_drv.StreamWriteValue32(cu_stream(stream), (CUdeviceptr)addr, value, CU_STREAM_WRITE_VALUE_DEFAULT));
	return 0;
}

static int cuda_flag_wait(struct phos_device *dev, void *stream, uint64_t addr, uint32_t value)
{
	DEV_ENTER(d, dev);

	(void)d;
	CU_CHECK(cuda_drv.StreamWaitValue32(cu_stream(stream), (CUdeviceptr)addr, value, CU_STREAM_WAIT_VALUE_GEQ));
	return 0;
}

static int cuda_event_create(struct phos_device *dev, uint32_t flags, void **ret_event)
{
	const uint32_t known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
	CUevent e;
	DEV_ENTER(d, dev);

	(void)d;
	/* cudaEventBlockingSync 1, cudaEventDisableTiming 2, cudaEventInterprocess 4: the driver's values. */
	if (!ret_event || (flags & ~known))
		return -PHOS_CUDA_INVALID_VALUE;
	CU_CHECK(cuda_drv.EventCreate(&e, flags));
	*ret_event = e;
	return 0;
}

static int cuda_event_destroy(struct phos_device *dev, void *event)
{
	DEV_ENTER(d, dev);

	(void)d;
	if (!event)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	CU_CHECK(cuda_drv.EventDestroy((CUevent)event));
	return 0;
}

static int cuda_event_record(struct phos_device *dev, void *event, void *stream)
{
	DEV_ENTER(d, dev);

	(void)d;
	if (!event)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	CU_CHECK(cuda_drv.EventRecord((CUevent)event, cu_stream(stream)));
	return 0;
}

static int cuda_event_sync(struct phos_device *dev, void *event)
{
	DEV_ENTER(d, dev);

	(void)d;
	if (!event)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	CU_CHECK(cuda_drv.EventSynchronize((CUevent)event));
	return 0;
}

static int cuda_event_query(struct phos_device *dev, void *event)
{
	CUresult r;
	DEV_ENTER(d, dev);

	(void)d;
	if (!event)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	r = cuda_drv.EventQuery((CUevent)event);
	if (r == CUDA_ERROR_NOT_READY)
		return -PHOS_CUDA_NOT_READY;
	CU_CHECK_RESULT(r, "cuEventQuery");
	return 0;
}

static int cuda_event_elapsed(struct phos_device *dev, void *start, void *end, float *ret_ms)
{
	float ms = 0;
	CUresult r;
	DEV_ENTER(d, dev);

	(void)d;
	if (!start || !end || !ret_ms)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	r = cuda_drv.EventElapsedTime(&ms, (CUevent)start, (CUevent)end);
	if (r == CUDA_ERROR_NOT_READY)
		return -PHOS_CUDA_NOT_READY;
	CU_CHECK_RESULT(r, "cuEventElapsedTime_v2");
	*ret_ms = ms;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Copies                                                                     */

/*
 * When may the caller reuse the host buffer? The executor copies from its
 * channel ring (pinned by host_register) and recycles that space as soon as
 * the record has been consumed, so an H2D copy must have read its source
 * before memcpy_h2d returns:
 *
 *   - pageable (unregistered) source: cuMemcpyHtoDAsync copies the bytes into a
 *     driver staging buffer before it returns (the DMA to the device may still
 *     be pending), so the host buffer is free on return without waiting;
 *   - pinned (registered) source: the copy engine reads the host memory by DMA
 *     whenever the stream reaches the copy, so we wait for the stream (which is
 *     what an event recorded after the copy would wait for) before returning.
 *
 * Memory pinned any other way than host_register must not be passed in: it
 * would be taken for pageable memory and read after return.
 *
 * D2H always completes before returning (cuStreamSynchronize on the stream):
 * the executor reads the bytes right after the call, and for pageable
 * destinations the driver would otherwise only guarantee it after a sync.
 *
 * D2D copies and memsets are fully asynchronous on their stream.
 */
static int cuda_memcpy_h2d(struct phos_device *dev, uint64_t dst, const void *host, size_t len, void *stream)
{
	CUstream s = cu_stream(stream);
	DEV_ENTER(d, dev);

	if (len == 0)
		return 0;
	if (!host)
		return -PHOS_CUDA_INVALID_VALUE;
	CU_CHECK(cuda_drv.MemcpyHtoDAsync((CUdeviceptr)dst, host, len, s));
	if (host_is_registered(d, host, len))
		CU_CHECK(cuda_drv.StreamSynchronize(s));
	return 0;
}

static int cuda_memcpy_d2h(struct phos_device *dev, void *host, uint64_t src, size_t len, void *stream)
{
	CUstream s = cu_stream(stream);
	DEV_ENTER(d, dev);

	(void)d;
	if (len == 0)
		return 0;
	if (!host)
		return -PHOS_CUDA_INVALID_VALUE;
	CU_CHECK(cuda_drv.MemcpyDtoHAsync(host, (CUdeviceptr)src, len, s));
	CU_CHECK(cuda_drv.StreamSynchronize(s));
	return 0;
}

static int cuda_memcpy_h2d_async(struct phos_device *dev, uint64_t dst, const void *host, size_t len,
				 void *stream)
{
	DEV_ENTER(d, dev);

	(void)d;
	if (len == 0)
		return 0;
	if (!host)
		return -PHOS_CUDA_INVALID_VALUE;
	CU_CHECK(cuda_drv.MemcpyHtoDAsync((CUdeviceptr)dst, host, len, cu_stream(stream)));
	return 0;
}

static int cuda_memcpy_d2h_async(struct phos_device *dev, void *host, uint64_t src, size_t len, void *stream)
{
	DEV_ENTER(d, dev);

	(void)d;
	if (len == 0)
		return 0;
	if (!host)
		return -PHOS_CUDA_INVALID_VALUE;
	CU_CHECK(cuda_drv.MemcpyDtoHAsync(host, (CUdeviceptr)src, len, cu_stream(stream)));
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Stream attributes and context limits                                       */

static int cuda_stream_set_attr(struct phos_device *dev, void *stream, int attr, const void *value)
{
	CUstreamAttrValue v;
	DEV_ENTER(d, dev);

	(void)d;
	_Static_assert(sizeof(v) == PHOS_STREAM_ATTR_BYTES, "CUstreamAttrValue is not 64 bytes");
	if (!value)
		return -PHOS_CUDA_INVALID_VALUE;
	memcpy(&v, value, sizeof(v));
	CU_CHECK(cuda_drv.StreamSetAttribute(cu_stream(stream), (CUstreamAttrID)attr, &v));
	return 0;
}

static int cuda_stream_get_attr(struct phos_device *dev, void *stream, int attr, void *ret_value)
{
	CUstreamAttrValue v;
	DEV_ENTER(d, dev);

	(void)d;
	if (!ret_value)
		return -PHOS_CUDA_INVALID_VALUE;
	memset(&v, 0, sizeof(v));
	CU_CHECK(cuda_drv.StreamGetAttribute(cu_stream(stream), (CUstreamAttrID)attr, &v));
	memcpy(ret_value, &v, sizeof(v));
	return 0;
}

static int cuda_limit_set(struct phos_device *dev, int limit, uint64_t value)
{
	DEV_ENTER(d, dev);

	(void)d;
	CU_CHECK(cuda_drv.CtxSetLimit((CUlimit)limit, (size_t)value));
	return 0;
}

static int cuda_limit_get(struct phos_device *dev, int limit, uint64_t *ret_value)
{
	size_t v = 0;
	DEV_ENTER(d, dev);

	(void)d;
	CU_CHECK(cuda_drv.CtxGetLimit(&v, (CUlimit)limit));
	*ret_value = v;
	return 0;
}

/* Host sides follow cuda_memcpy_h2d / cuda_memcpy_d2h's rules (above). */
static int cuda_memcpy_2d(struct phos_device *dev, const struct phos_copy_2d *c, void *stream)
{
	CUstream s = cu_stream(stream);
	CUDA_MEMCPY2D m;
	DEV_ENTER(d, dev);

	if (!c || (c->src_host && c->dst_host))
		return -PHOS_CUDA_INVALID_VALUE;
	if (c->width == 0 || c->height == 0)
		return 0;
	memset(&m, 0, sizeof(m));
	if (c->src_host) {
		m.srcMemoryType = CU_MEMORYTYPE_HOST;
		m.srcHost = c->src_host;
	} else {
		m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
		m.srcDevice = (CUdeviceptr)c->src;
	}
	if (c->dst_host) {
		m.dstMemoryType = CU_MEMORYTYPE_HOST;
		m.dstHost = c->dst_host;
	} else {
		m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
		m.dstDevice = (CUdeviceptr)c->dst;
	}
	m.srcPitch = c->spitch;
	m.dstPitch = c->dpitch;
	m.WidthInBytes = c->width;
	m.Height = c->height;
	CU_CHECK(cuda_drv.Memcpy2DAsync(&m, s));
	if (c->dst_host || (c->src_host && host_is_registered(d, c->src_host, (c->height - 1) * c->spitch + c->width)))
		CU_CHECK(cuda_drv.StreamSynchronize(s));
	return 0;
}

/* ---- CUDA arrays, texture and surface objects ---- */

#define TRY_CU_FORMAT(expr)              \
	do {                             \
		int fmt_r_ = (expr);     \
		if (fmt_r_ < 0)          \
			return fmt_r_;   \
	} while (0)

/* The driver's format of a runtime channel format (phos_channel_format). */
static int cu_format(const int32_t bits[4], int32_t kind, CUarray_format *ret_fmt, unsigned *ret_channels)
{
	uint32_t channels, bytes;

	if (phos_channel_format(bits, kind, &channels, &bytes) < 0)
		return -PHOS_CUDA_INVALID_VALUE;
	if (kind == 2)
		*ret_fmt = bytes == 2 ? CU_AD_FORMAT_HALF : CU_AD_FORMAT_FLOAT;
	else if (kind == 0)
		*ret_fmt = bytes == 1 ? CU_AD_FORMAT_SIGNED_INT8 : bytes == 2 ? CU_AD_FORMAT_SIGNED_INT16
									: CU_AD_FORMAT_SIGNED_INT32;
	else
		*ret_fmt = bytes == 1 ? CU_AD_FORMAT_UNSIGNED_INT8 : bytes == 2 ? CU_AD_FORMAT_UNSIGNED_INT16
									  : CU_AD_FORMAT_UNSIGNED_INT32;
	*ret_channels = channels;
	return 0;
}

static int cuda_array_create(struct phos_device *dev, const struct phos_array_create *a, void **ret_array)
{
	CUDA_ARRAY3D_DESCRIPTOR d = { 0 };
	CUarray arr;
	DEV_ENTER(dd, dev);

	(void)dd;
	TRY_CU_FORMAT(cu_format(a->bits, a->kind, &d.Format, &d.NumChannels));
	/* cudaArrayLayered, SurfaceLoadStore, Cubemap, TextureGather: the
	 * driver's CUDA_ARRAY3D_* flags have the same values */
	if (a->flags & ~0x0fu)
		return -PHOS_CUDA_NOT_SUPPORTED;
	d.Width = a->width;
	d.Height = a->height;
	d.Depth = a->depth;
	d.Flags = a->flags;
	CU_CHECK(cuda_drv.Array3DCreate(&arr, &d));
	*ret_array = arr;
	return 0;
}

static int cuda_array_destroy(struct phos_device *dev, void *array)
{
	DEV_ENTER(d, dev);

	(void)d;
	CU_CHECK(cuda_drv.ArrayDestroy((CUarray)array));
	return 0;
}

static void cu_side(const struct phos_copy_side *s, uint64_t z, CUmemorytype *type, CUarray *arr, CUdeviceptr *devp,
		    void **host, size_t *x, size_t *y, size_t *zz, size_t *pitch)
{
	if (s->array) {
		*type = CU_MEMORYTYPE_ARRAY;
		*arr = (CUarray)s->array;
		*x = s->x;
		*y = s->y;
		*zz = s->z + z;
	} else if (s->host) {
		*type = CU_MEMORYTYPE_HOST;
		*host = (uint8_t *)s->host + z * s->slice;
		*pitch = s->pitch;
	} else {
		*type = CU_MEMORYTYPE_DEVICE;
		*devp = (CUdeviceptr)(s->addr + z * s->slice);
		*pitch = s->pitch;
	}
}

/* One 3D copy per slice, so that a side's slice stride need not be a whole
 * number of its rows. Host sides complete before return. */
static int cuda_array_copy(struct phos_device *dev, const struct phos_copy_side *dst, const struct phos_copy_side *src,
			   uint64_t width, uint64_t height, uint64_t depth, void *stream)
{
	CUstream s = cu_stream(stream);
	DEV_ENTER(d, dev);

	(void)d;
	for (uint64_t z = 0; z < depth; z++) {
		CUDA_MEMCPY3D m;

		memset(&m, 0, sizeof(m));
		cu_side(src, z, &m.srcMemoryType, &m.srcArray, &m.srcDevice, (void **)&m.srcHost, &m.srcXInBytes,
			&m.srcY, &m.srcZ, &m.srcPitch);
		cu_side(dst, z, &m.dstMemoryType, &m.dstArray, &m.dstDevice, &m.dstHost, &m.dstXInBytes, &m.dstY,
			&m.dstZ, &m.dstPitch);
		m.srcHeight = m.dstHeight = height;
		if (m.srcMemoryType != CU_MEMORYTYPE_ARRAY && height == 1 && m.srcPitch < width)
			m.srcPitch = width;   /* one row: its pitch is unused, the driver wants >= width */
		if (m.dstMemoryType != CU_MEMORYTYPE_ARRAY && height == 1 && m.dstPitch < width)
			m.dstPitch = width;
		m.WidthInBytes = width;
		m.Height = height;
		m.Depth = 1;
		CU_CHECK(cuda_drv.Memcpy3DAsync(&m, s));
	}
	if (dst->host || src->host)
		CU_CHECK(cuda_drv.StreamSynchronize(s));
	return 0;
}

static int cuda_tex_create(struct phos_device *dev, const struct phos_tex_create *t, void *array, uint64_t *ret_handle)
{
	CUDA_RESOURCE_DESC r;
	CUDA_TEXTURE_DESC td;
	DEV_ENTER(d, dev);

	(void)d;
	memset(&r, 0, sizeof(r));
	memset(&td, 0, sizeof(td));
	switch (t->res_type) {
	case PHOS_RES_ARRAY:
		r.resType = CU_RESOURCE_TYPE_ARRAY;
		r.res.array.hArray = (CUarray)array;
		break;
	case PHOS_RES_LINEAR:
		r.resType = CU_RESOURCE_TYPE_LINEAR;
		r.res.linear.devPtr = (CUdeviceptr)t->ptr;
		r.res.linear.sizeInBytes = t->size;
		TRY_CU_FORMAT(cu_format(t->bits, t->kind, &r.res.linear.format, &r.res.linear.numChannels));
		break;
	case PHOS_RES_PITCH2D:
		r.resType = CU_RESOURCE_TYPE_PITCH2D;
		r.res.pitch2D.devPtr = (CUdeviceptr)t->ptr;
		r.res.pitch2D.width = t->width;
		r.res.pitch2D.height = t->height;
		r.res.pitch2D.pitchInBytes = t->pitch;
		TRY_CU_FORMAT(cu_format(t->bits, t->kind, &r.res.pitch2D.format, &r.res.pitch2D.numChannels));
		break;
	default:
		return -PHOS_CUDA_INVALID_VALUE;
	}
	if (t->surface) {
		CUsurfObject h;

		if (t->res_type != PHOS_RES_ARRAY)
			return -PHOS_CUDA_INVALID_VALUE;
		CU_CHECK(cuda_drv.SurfObjectCreate(&h, &r));
		*ret_handle = h;
		return 0;
	}
	for (int i = 0; i < 3; i++)
		td.addressMode[i] = (CUaddress_mode)t->address[i];
	td.filterMode = (CUfilter_mode)t->filter;
	/* the runtime's cudaReadModeElementType reads 8- and 16-bit integers as
	 * integers (the flag means nothing for other formats) */
	if (t->read_mode == 0)
		td.flags |= CU_TRSF_READ_AS_INTEGER;
	if (t->normalized_coords)
		td.flags |= CU_TRSF_NORMALIZED_COORDINATES;
	if (t->srgb)
		td.flags |= CU_TRSF_SRGB;
	if (t->no_trilinear_opt)
		td.flags |= CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION;
	if (t->seamless_cubemap)
		td.flags |= CU_TRSF_SEAMLESS_CUBEMAP;
	td.maxAnisotropy = (unsigned)t->max_anisotropy;
	td.mipmapFilterMode = (CUfilter_mode)t->mip_filter;
	td.mipmapLevelBias = t->mip_bias;
	td.minMipmapLevelClamp = t->min_mip_clamp;
	td.maxMipmapLevelClamp = t->max_mip_clamp;
	memcpy(td.borderColor, t->border, sizeof(td.borderColor));
	CUtexObject h;
	CU_CHECK(cuda_drv.TexObjectCreate(&h, &r, &td, NULL));
	*ret_handle = h;
	return 0;
}

static int cuda_tex_destroy(struct phos_device *dev, uint64_t handle, bool surface)
{
	DEV_ENTER(d, dev);

	(void)d;
	if (surface)
		CU_CHECK(cuda_drv.SurfObjectDestroy((CUsurfObject)handle));
	else
		CU_CHECK(cuda_drv.TexObjectDestroy((CUtexObject)handle));
	return 0;
}

static int cuda_memset_2d(struct phos_device *dev, uint64_t dst, uint64_t pitch, uint8_t value, uint64_t width,
			  uint64_t height, void *stream)
{
	DEV_ENTER(d, dev);

	(void)d;
	if (width == 0 || height == 0)
		return 0;
	CU_CHECK(cuda_drv.MemsetD2D8Async((CUdeviceptr)dst, pitch, value, width, height, cu_stream(stream)));
	return 0;
}

static int cuda_memcpy_d2d(struct phos_device *dev, uint64_t dst, uint64_t src, size_t len, void *stream)
{
	DEV_ENTER(d, dev);

	(void)d;
	if (len == 0)
		return 0;
	CU_CHECK(cuda_drv.MemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, len, cu_stream(stream)));
	return 0;
}

static int cuda_memset(struct phos_device *dev, uint64_t dst, uint8_t value, size_t len, void *stream)
{
	DEV_ENTER(d, dev);

	(void)d;
	if (len == 0)
		return 0;
	CU_CHECK(cuda_drv.MemsetD8Async((CUdeviceptr)dst, value, len, cu_stream(stream)));
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Modules, functions, launches                                               */

#define FATBIN_MAGIC 0xBA55ED50u

/* A loaded module keeps its own copy of the image: the driver may read it
 * after cuModuleLoadData returns (lazy loading), and the caller's copy lives in
 * the channel ring. malloc's alignment also satisfies the fatbin's. */
struct cuda_module {
	CUmodule mod;
	void *image;
};

static uint64_t le_read(const uint8_t *p, unsigned n)
{
	uint64_t v = 0;

	while (n--)
		v = v << 8 | p[n];
	return v;
}

/* Bytes of the image at data: a fatbin (header + payload, bounded by len) or an ELF cubin. */
static int image_size(const void *data, size_t len, size_t *ret_size)
{
	const uint8_t *p = data;

	if (len >= 16 && le_read(p, 4) == FATBIN_MAGIC) {
		uint64_t header = le_read(p + 6, 2), payload = le_read(p + 8, 8);

		if (header < 16 || header > len || payload > len - header)
			return -PHOS_CUDA_INVALID_KERNEL_IMAGE;
		*ret_size = header + payload;
		return 0;
	}
	if (len >= 4 && memcmp(p, "\177ELF", 4) == 0) {
		*ret_size = len;
		return 0;
	}
	/* PTX text, NUL-terminated (validation twins, ctxpool/calls/exec_validate.c):
	 * the driver JIT-compiles it */
	if (len >= 16 && p[len - 1] == 0 && memmem(p, len, ".version", 8) && memmem(p, len, ".target", 7)) {
		*ret_size = len;
		return 0;
	}
	return -PHOS_CUDA_INVALID_KERNEL_IMAGE;
}

static int cuda_module_load(struct phos_device *dev, const void *image, size_t len, void **ret_module)
{
	struct cuda_module *m;
	size_t size = 0;
	CUresult r;
	int err;
	DEV_ENTER(d, dev);

	(void)d;
	if (!image || !ret_module)
		return -PHOS_CUDA_INVALID_VALUE;
	err = image_size(image, len, &size);
	if (err < 0) {
		phos_err("cuda: module image of %zu bytes is neither a fatbin, a cubin nor PTX text", len);
		return err;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	m->image = malloc(size);
	if (!m->image) {
		free(m);
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	}
	memcpy(m->image, image, size);

	r = cuda_drv.ModuleLoadData(&m->mod, m->image);
	if (r != CUDA_SUCCESS) {
		err = cu_fail(r, "cuModuleLoadData", __FILE__, __LINE__);
		switch (r) {
		case CUDA_ERROR_INVALID_IMAGE:
		case CUDA_ERROR_NO_BINARY_FOR_GPU:
		case CUDA_ERROR_INVALID_PTX:
		case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
		case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
		case CUDA_ERROR_INVALID_SOURCE:
			err = -PHOS_CUDA_INVALID_KERNEL_IMAGE;
			break;
		default:
			break;
		}
		free(m->image);
		free(m);
		return err;
	}
	*ret_module = m;
	return 0;
}

static int cuda_module_unload(struct phos_device *dev, void *module)
{
	struct cuda_module *m = module;
	CUresult r;
	DEV_ENTER(d, dev);

	(void)d;
	if (!m)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	r = cuda_drv.ModuleUnload(m->mod);
	free(m->image);
	free(m);
	CU_CHECK_RESULT(r, "cuModuleUnload");
	return 0;
}

static int cuda_module_function(struct phos_device *dev, void *module, const char *name, void **ret_func)
{
	struct cuda_module *m = module;
	CUfunction f;
	CUresult r;
	DEV_ENTER(d, dev);

	(void)d;
	if (!m || !name || !ret_func)
		return -PHOS_CUDA_INVALID_VALUE;
	r = cuda_drv.ModuleGetFunction(&f, m->mod, name);
	if (r == CUDA_ERROR_NOT_FOUND) {
		phos_debug("cuda: no kernel %s in the module", name);
		return -PHOS_CUDA_INVALID_DEVICE_FUNCTION;
	}
	CU_CHECK_RESULT(r, "cuModuleGetFunction");
	*ret_func = f;
	return 0;
}

static int cuda_module_global(struct phos_device *dev, void *module, const char *name, uint64_t *ret_addr,
			      uint64_t *ret_size)
{
	struct cuda_module *m = module;
	CUdeviceptr addr = 0;
	size_t size = 0;
	CUresult r;
	DEV_ENTER(d, dev);

	(void)d;
	if (!m || !name || !ret_addr)
		return -PHOS_CUDA_INVALID_VALUE;
	/* The size comes from the module; any hint in *ret_size is ignored. */
	r = cuda_drv.ModuleGetGlobal(&addr, &size, m->mod, name);
	if (r == CUDA_ERROR_NOT_FOUND) {
		phos_debug("cuda: no variable %s in the module", name);
		return -PHOS_CUDA_SYMBOL_NOT_FOUND;
	}
	CU_CHECK_RESULT(r, "cuModuleGetGlobal_v2");
	*ret_addr = addr;
	if (ret_size)
		*ret_size = size;
	return 0;
}

static int cuda_func_attrs(struct phos_device *dev, void *func, struct phos_reply_func_info *info)
{
	static const CUfunction_attribute attrs[8] = {
		CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, CU_FUNC_ATTRIBUTE_NUM_REGS,
		CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,     CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES,
		CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES,      CU_FUNC_ATTRIBUTE_PTX_VERSION,
		CU_FUNC_ATTRIBUTE_BINARY_VERSION,        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
	};
	int v[8], i;
	DEV_ENTER(d, dev);

	(void)d;
	if (!func || !info)
		return -PHOS_CUDA_INVALID_VALUE;
	for (i = 0; i < 8; i++)
		CU_CHECK(cuda_drv.FuncGetAttribute(&v[i], attrs[i], (CUfunction)func));
	info->max_threads = v[0];
	info->num_regs = v[1];
	info->shared_bytes = v[2];
	info->const_bytes = v[3];
	info->local_bytes = v[4];
	info->ptx_version = v[5];
	info->binary_version = v[6];
	info->max_dynamic_shared = v[7];
	/* Carveout and cluster attributes (CUDA 11.8+, Hopper): a driver that does
	 * not know one leaves its default (-1 carveout, 0 otherwise). */
	{
		int32_t *out[7] = { &info->carveout, &info->cluster_must_be_set, &info->cluster_dim[0],
				    &info->cluster_dim[1], &info->cluster_dim[2], &info->cluster_non_portable,
				    &info->cluster_policy };

		info->carveout = -1;
		for (i = 0; i < 7; i++) {
			int x = 0;

			if (cuda_drv.FuncGetAttribute(&x, (CUfunction_attribute)(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT + i),
						      (CUfunction)func) == CUDA_SUCCESS)
				*out[i] = x;
		}
	}
	return 0;
}

static int cuda_func_set_attr(struct phos_device *dev, void *func, int attr, int value)
{
	DEV_ENTER(d, dev);

	(void)d;
	if (!func)
		return -PHOS_CUDA_INVALID_DEVICE_FUNCTION;
	/* The settable cudaFuncAttribute values (8 MaxDynamicSharedMemorySize, 9
	 * PreferredSharedMemoryCarveout, 10..15 cluster ones) equal CUfunction_attribute's. */
	if (attr < CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ||
	    attr > CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE)
		return -PHOS_CUDA_INVALID_VALUE;
	CU_CHECK(cuda_drv.FuncSetAttribute((CUfunction)func, (CUfunction_attribute)attr, value));
	return 0;
}

static int cuda_occupancy(struct phos_device *dev, void *func, int block, size_t dyn_shared, int *ret_blocks)
{
	int n = 0;
	DEV_ENTER(d, dev);

	(void)d;
	if (!func || !ret_blocks)
		return -PHOS_CUDA_INVALID_VALUE;
	CU_CHECK(cuda_drv.OccupancyMaxActiveBlocksPerMultiprocessor(&n, (CUfunction)func, block, dyn_shared));
	*ret_blocks = n;
	return 0;
}

static int cuda_occupancy_cluster(struct phos_device *dev, void *func, const uint32_t grid[3], const uint32_t block[3],
				  uint32_t shared, const uint32_t cluster[3], bool potential, int *ret)
{
	CUlaunchAttribute attr;
	CUlaunchConfig cfg = { 0 };
	int n = 0;
	DEV_ENTER(d, dev);

	(void)d;
	if (!func || !ret || !grid || !block || !cluster)
		return -PHOS_CUDA_INVALID_VALUE;
	memset(&attr, 0, sizeof(attr));
	cfg.gridDimX = grid[0];
	cfg.gridDimY = grid[1];
	cfg.gridDimZ = grid[2];
	cfg.blockDimX = block[0];
	cfg.blockDimY = block[1];
	cfg.blockDimZ = block[2];
	cfg.sharedMemBytes = shared;
	if (cluster[0] || cluster[1] || cluster[2]) {
		attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
		attr.value.clusterDim.x = cluster[0];
		attr.value.clusterDim.y = cluster[1];
		attr.value.clusterDim.z = cluster[2];
		cfg.attrs = &attr;
		cfg.numAttrs = 1;
	}
	if (potential)
		CU_CHECK(cuda_drv.OccupancyMaxPotentialClusterSize(&n, (CUfunction)func, &cfg));
	else
		CU_CHECK(cuda_drv.OccupancyMaxActiveClusters(&n, (CUfunction)func, &cfg));
	*ret = n;
	return 0;
}

static int cuda_launch(struct phos_device *dev, void *func, const struct phos_kernel_info *ki,
		       const uint32_t grid[3], const uint32_t block[3], uint32_t shared, void *stream,
		       const void *params, uint32_t param_bytes)
{
	size_t size = param_bytes;
	void *extra[] = {
		CU_LAUNCH_PARAM_BUFFER_POINTER, (void *)params,
		CU_LAUNCH_PARAM_BUFFER_SIZE,    &size,
		CU_LAUNCH_PARAM_END,
	};
	CUresult r;
	DEV_ENTER(d, dev);

	(void)d;
	(void)ki; /* the driver knows the layout; params is already packed by it */
	if (!func)
		return -PHOS_CUDA_INVALID_DEVICE_FUNCTION;
	if (!grid || !block || (param_bytes && !params))
		return -PHOS_CUDA_INVALID_VALUE;
	/* The driver copies the parameter buffer before returning. */
	r = cuda_drv.LaunchKernel((CUfunction)func, grid[0], grid[1], grid[2], block[0], block[1], block[2],
				  shared, cu_stream(stream), NULL, param_bytes ? extra : NULL);
	if (r == CUDA_ERROR_INVALID_VALUE) {
		/* What the runtime reports for a grid, block or shared size the device cannot run. */
		cu_fail(r, "cuLaunchKernel", __FILE__, __LINE__);
		return -PHOS_CUDA_INVALID_CONFIGURATION;
	}
	CU_CHECK_RESULT(r, "cuLaunchKernel");
	return 0;
}

/* A cooperative and/or clustered launch (cudaLaunchKernelEx,
 * cudaLaunchCooperativeKernel): cuLaunchKernelEx with those attributes. */
static int cuda_launch_ex(struct phos_device *dev, void *func, const struct phos_kernel_info *ki,
			  const uint32_t grid[3], const uint32_t block[3], uint32_t shared, void *stream,
			  const void *params, uint32_t param_bytes, uint32_t flags, const uint32_t cluster[3])
{
	size_t size = param_bytes;
	void *extra[] = {
		CU_LAUNCH_PARAM_BUFFER_POINTER, (void *)params,
		CU_LAUNCH_PARAM_BUFFER_SIZE,    &size,
		CU_LAUNCH_PARAM_END,
	};
	CUlaunchAttribute attrs[2];
	CUlaunchConfig cfg = { 0 };
	CUresult r;
	DEV_ENTER(d, dev);

	(void)d;
	(void)ki;
	if (!func)
		return -PHOS_CUDA_INVALID_DEVICE_FUNCTION;
	if (!grid || !block || !cluster || (param_bytes && !params))
		return -PHOS_CUDA_INVALID_VALUE;
	memset(attrs, 0, sizeof(attrs));
	cfg.gridDimX = grid[0];
	cfg.gridDimY = grid[1];
	cfg.gridDimZ = grid[2];
	cfg.blockDimX = block[0];
	cfg.blockDimY = block[1];
	cfg.blockDimZ = block[2];
	cfg.sharedMemBytes = shared;
	cfg.hStream = cu_stream(stream);
	cfg.attrs = attrs;
	if (flags & PHOS_LAUNCH_COOPERATIVE) {
		attrs[cfg.numAttrs].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
		attrs[cfg.numAttrs++].value.cooperative = 1;
	}
	if (flags & PHOS_LAUNCH_CLUSTER) {
		attrs[cfg.numAttrs].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
		attrs[cfg.numAttrs].value.clusterDim.x = cluster[0];
		attrs[cfg.numAttrs].value.clusterDim.y = cluster[1];
		attrs[cfg.numAttrs++].value.clusterDim.z = cluster[2];
	}
	r = cuda_drv.LaunchKernelEx(&cfg, (CUfunction)func, NULL, param_bytes ? extra : NULL);
	if (r == CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)
		return -PHOS_CUDA_COOPERATIVE_LAUNCH_TOO_LARGE;
	if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_INVALID_CLUSTER_SIZE) {
		cu_fail(r, "cuLaunchKernelEx", __FILE__, __LINE__);
		return -PHOS_CUDA_INVALID_CONFIGURATION;
	}
	CU_CHECK_RESULT(r, "cuLaunchKernelEx");
	return 0;
}

const struct phos_device_ops phos_device_cuda = {
	.name = "cuda",
	.open = cuda_open,
	.close = cuda_close,
	.enter = cuda_enter,
	.peer_add = cuda_peer_add,
	.device_count = cuda_device_count,
	.info = cuda_info,
	.mem_info = cuda_mem_info,
	.synchronize = cuda_synchronize,
	.map = cuda_map,
	.unmap = cuda_unmap,
	.share_out = cuda_share_out,
	.share_in = cuda_share_in,
	.share_own = cuda_share_own,
	.host_register = cuda_host_register,
	.host_unregister = cuda_host_unregister,
	.stream_create = cuda_stream_create,
	.stream_destroy = cuda_stream_destroy,
	.stream_sync = cuda_stream_sync,
	.stream_host_func = cuda_stream_host_func,
	.stream_query = cuda_stream_query,
	.stream_wait_event = cuda_stream_wait_event,
	.flags_alloc = cuda_flags_alloc,
	.flags_free = cuda_flags_free,
	.scratch_alloc = cuda_scratch_alloc,
	.scratch_free = cuda_flags_free,   /* the same cuMemFree */
	.flag_write = cuda_flag_write,
	.flag_wait = cuda_flag_wait,
	.event_create = cuda_event_create,
	.event_destroy = cuda_event_destroy,
	.event_record = cuda_event_record,
	.event_sync = cuda_event_sync,
	.event_query = cuda_event_query,
	.event_elapsed = cuda_event_elapsed,
	.warm = cuda_warm,
	.memcpy_h2d = cuda_memcpy_h2d,
	.memcpy_d2h = cuda_memcpy_d2h,
	.memcpy_h2d_async = cuda_memcpy_h2d_async,
	.memcpy_d2h_async = cuda_memcpy_d2h_async,
	.memcpy_d2d = cuda_memcpy_d2d,
	.memcpy_2d = cuda_memcpy_2d,
	.stream_set_attr = cuda_stream_set_attr,
	.stream_get_attr = cuda_stream_get_attr,
	.limit_set = cuda_limit_set,
	.limit_get = cuda_limit_get,
	.memset_2d = cuda_memset_2d,
	.array_create = cuda_array_create,
	.array_destroy = cuda_array_destroy,
	.array_copy = cuda_array_copy,
	.tex_create = cuda_tex_create,
	.tex_destroy = cuda_tex_destroy,
	.memset = cuda_memset,
	.module_load = cuda_module_load,
	.module_unload = cuda_module_unload,
	.module_function = cuda_module_function,
	.module_global = cuda_module_global,
	.func_attrs = cuda_func_attrs,
	.func_set_attr = cuda_func_set_attr,
	.occupancy = cuda_occupancy,
	.occupancy_cluster = cuda_occupancy_cluster,
	.launch = cuda_launch,
	.launch_ex = cuda_launch_ex,
	.graph_make = cuda_graph_make,
	.graph_launch = cuda_graph_launch,
	.graph_destroy = cuda_graph_destroy,
	.blas_create = cuda_blas_create,
	.blas_destroy = cuda_blas_destroy,
	.blas_set_stream = cuda_blas_set_stream,
	.blas_set_math = cuda_blas_set_math,
	.blas_set_workspace = cuda_blas_set_workspace,
	.blas_gemm = cuda_blas_gemm,
	.blas_l1 = cuda_blas_l1,
	.blas_gemv = cuda_blas_gemv,
	.blas_call = cuda_blas_call,
	.blas_lu = cuda_blas_lu,
	.blaslt_matmul = cuda_blaslt_matmul,
	.blaslt_heuristic = cuda_blaslt_heuristic,
};
