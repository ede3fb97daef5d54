/* SPDX-License-Identifier: MIT */
/*
 * The driver's virtual memory management (cuMemAddressReserve, cuMemCreate,
 * cuMemMap, ...), as PyTorch's expandable segments use it
 * (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): reserve a large range,
 * map physical chunks into it as the pool grows, unmap and release them as it
 * shrinks.
 *
 *   cuMemAddressReserve / Free ── sync VMM_RESERVE / VMM_FREE: a range of the
 *        executor's arena that no allocation takes (runtime/device/bufmap.h)
 *   cuMemCreate / Release ─────── kept here: a handle is a size, a device and
 *        where it is mapped; no memory exists until it is mapped
 *   cuMemMap / Unmap ──────────── sync VMM_MAP / VMM_UNMAP: the mapping is an
 *        ordinary buffer of the arena at that address from then on (sets,
 *        snapshots, on-demand restore: as for cudaMalloc); mappings side by
 *        side in one reservation count as one range for read/write sets
 *   cuMemSetAccess / GetAccess ── the device's own memory is read-write: the
 *        range must be mapped
 *
 * What phos-fn does not give: a handle's memory lives where it was first
 * mapped, and is gone when unmapped (phos-fn has no memory apart from a
 * mapping), so mapping a handle twice, at an offset, in part, or again after
 * an unmap answers CUDA_ERROR_NOT_SUPPORTED with one line on stderr
 * (PyTorch maps each handle once, whole, and releases it right after its
 * unmap). Shareable handles (IPC) are not supported either.
 *
 * Snapshots: handles are this process's memory; the mappings are buffers of
 * the snapshot; the reservations are made again at the same addresses after
 * a restore (a restore hook), around the restored mappings.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcuda_internal.h"

#define VMM_GRANULARITY (2ull << 20)   /* PHOS_CHUNK: the arena's unit */
#define VMM_MAX_HANDLES 16384
#define VMM_MAX_RESV 256

struct vmm_handle {
	uint64_t size;
	int device;
	bool live;         /* created, not released */
	bool used;         /* mapped once: its memory is gone once unmapped */
	unsigned refs;     /* cuMemCreate and each cuMemRetainAllocationHandle */
	CUdeviceptr at;    /* where it is mapped, 0: nowhere */
};

static struct vmm_handle handles[VMM_MAX_HANDLES];   /* index = handle value - 1 */
static struct { CUdeviceptr addr; uint64_t size; } resv[VMM_MAX_RESV];
static unsigned nresv;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult refuse(const char *what)
{
	phos_refuse_once("the driver's virtual memory", what, ": CUDA_ERROR_NOT_SUPPORTED");
	return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult vmm_call(uint32_t op, CUdeviceptr addr, uint64_t size, uint64_t align, bool at, CUdeviceptr *ret)
{
	struct phos_vmm v = { .addr = addr, .size = size, .align = align, .at = at };
	uint64_t out = 0;
	size_t len = 0;
	int r = phos_preload_call(op, &v, sizeof(v), NULL, 0, &out, sizeof(out), &len, NULL);

	if (r == 0 && ret)
		*ret = (CUdeviceptr)out;
	return r == cudaErrorMemoryAllocation ? CUDA_ERROR_OUT_OF_MEMORY : cu_result(r);
}

static struct vmm_handle *handle_of(CUmemGenericAllocationHandle h)
{
	return h >= 1 && h <= VMM_MAX_HANDLES && handles[h - 1].live ? &handles[h - 1] : NULL;
}

/* The reservation index holding [addr, addr + size), or -1. Lock held. */
static int resv_of(CUdeviceptr addr, uint64_t size)
{
	for (unsigned i = 0; i < nresv; i++)
		if (addr >= resv[i].addr && addr - resv[i].addr < resv[i].size && size <= resv[i].size - (addr - resv[i].addr))
			return (int)i;
	return -1;
}

/* After a restore: the reservations again, at their addresses. */
static int resv_restore(void)
{
	int err = 0;

	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < nresv; i++)
		if (vmm_call(PHOS_OP_VMM_RESERVE, resv[i].addr, resv[i].size, 0, true, NULL) != CUDA_SUCCESS) {
			fprintf(stderr, "phos-fn: a reserved range (cuMemAddressReserve, %llu bytes at 0x%llx) could not "
					"be reserved again after the restore\n", (unsigned long long)resv[i].size,
				(unsigned long long)resv[i].addr);
			err = cudaErrorMemoryAllocation;
		}
	pthread_mutex_unlock(&lock);
	return err;
}

PHOS_EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
						   CUmemAllocationGranularity_flags option)
{
	(void)option;
	if (!granularity || !prop)
		return CUDA_ERROR_INVALID_VALUE;
	if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return refuse("memory other than the device's own (cuMemCreate's type and location)");
	*granularity = VMM_GRANULARITY;
	return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
					 unsigned long long flags)
{
	static bool hooked;
	CUresult r;

	if (cu_initialized() != CUDA_SUCCESS)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ptr || !size || size % VMM_GRANULARITY || (alignment & (alignment - 1)) || flags)
		return CUDA_ERROR_INVALID_VALUE;
	(void)addr;   /* a hint, as the driver takes it */
	pthread_mutex_lock(&lock);
	if (!hooked && phos_preload_on_restore(resv_restore) == 0)
		hooked = true;
	if (nresv == VMM_MAX_RESV) {
		pthread_mutex_unlock(&lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	r = vmm_call(PHOS_OP_VMM_RESERVE, 0, size, alignment > VMM_GRANULARITY ? alignment : 0, false, ptr);
	if (r == CUDA_SUCCESS) {
		resv[nresv].addr = *ptr;
		resv[nresv].size = size;
		nresv++;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

PHOS_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	CUresult r;
	int i;

	pthread_mutex_lock(&lock);
	i = resv_of(ptr, size);
	if (i < 0 || resv[i].addr != ptr || resv[i].size != size) {
		pthread_mutex_unlock(&lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	r = vmm_call(PHOS_OP_VMM_FREE, ptr, size, 0, false, NULL);
	if (r == CUDA_SUCCESS)
		resv[i] = resv[--nresv];
	pthread_mutex_unlock(&lock);
	return r;
}

PHOS_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
				 unsigned long long flags)
{
	int device = 0;

	if (cu_initialized() != CUDA_SUCCESS)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!handle || !prop || !size || size % VMM_GRANULARITY || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return refuse("memory other than the device's own (cuMemCreate's type and location)");
	/* (gpuDirectRDMACapable and requestedHandleTypes are accepted: PyTorch asks
	 * for them where the device can; a function reaches no RDMA device, and
	 * exporting a handle is refused where it is tried) */
	if (prop->allocFlags.compressionType || prop->allocFlags.usage)
		return refuse("compressible or tile-pool memory (cuMemCreate's allocFlags)");
	if (CU_RUN(cudaGetDevice(&device)) != CUDA_SUCCESS || prop->location.id != device)
		return prop->location.id < 0 ? CUDA_ERROR_INVALID_DEVICE
					     : refuse("memory of a device other than the calling thread's");
	pthread_mutex_lock(&lock);
	for (uint32_t i = 0; i < VMM_MAX_HANDLES; i++)
		if (!handles[i].live && !handles[i].at) {
			handles[i] = (struct vmm_handle){ .size = size, .device = device, .live = true, .refs = 1 };
			*handle = i + 1;
			pthread_mutex_unlock(&lock);
			return CUDA_SUCCESS;
		}
	pthread_mutex_unlock(&lock);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

PHOS_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	struct vmm_handle *h;

	pthread_mutex_lock(&lock);
	h = handle_of(handle);
	if (!h) {
		pthread_mutex_unlock(&lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (--h->refs == 0)
		h->live = false;   /* (its mapping, if any, stays until unmapped, as the driver's) */
	pthread_mutex_unlock(&lock);
	return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
			      unsigned long long flags)
{
	struct vmm_handle *h;
	CUresult r;

	pthread_mutex_lock(&lock);
	h = handle_of(handle);
	r = !h || flags || !size || ptr % VMM_GRANULARITY ? CUDA_ERROR_INVALID_VALUE
	    : resv_of(ptr, size) < 0 ? CUDA_ERROR_INVALID_VALUE
	    : offset || size != h->size ? refuse("a partial mapping of a handle (cuMemMap at an offset or in part)")
	    : h->at || h->used ? refuse("a handle mapped twice, or again after an unmap")
			       : CUDA_SUCCESS;
	if (r == CUDA_SUCCESS)
		r = vmm_call(PHOS_OP_VMM_MAP, ptr, size, 0, false, NULL);
	if (r == CUDA_SUCCESS) {
		h->at = ptr;
		h->used = true;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

PHOS_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	CUresult r;

	pthread_mutex_lock(&lock);
	r = !size || resv_of(ptr, size) < 0 ? CUDA_ERROR_INVALID_VALUE
					    : vmm_call(PHOS_OP_VMM_UNMAP, ptr, size, 0, false, NULL);
	if (r == CUDA_SUCCESS)
		for (uint32_t i = 0; i < VMM_MAX_HANDLES; i++)
			if (handles[i].at >= ptr && handles[i].at - ptr < size)
				handles[i].at = 0;   /* (a released one is free again now) */
	pthread_mutex_unlock(&lock);
	return r;
}

/* Whether [ptr, ptr + size) is mapped, handle after handle. Lock held. */
static bool mapped(CUdeviceptr ptr, size_t size)
{
	CUdeviceptr at = ptr;

	while (at < ptr + size) {
		uint32_t i;

		for (i = 0; i < VMM_MAX_HANDLES; i++)
			if (handles[i].at && at >= handles[i].at && at - handles[i].at < handles[i].size)
				break;
		if (i == VMM_MAX_HANDLES)
			return false;
		at = handles[i].at + handles[i].size;
	}
	return true;
}

PHOS_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	CUresult r = CUDA_SUCCESS;
	int device = 0;

	if (!desc || !count || !size)
		return CUDA_ERROR_INVALID_VALUE;
	if (CU_RUN(cudaGetDevice(&device)) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_CONTEXT;
	for (size_t i = 0; i < count && r == CUDA_SUCCESS; i++)
		if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id != device ||
		    desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			r = refuse("access for another device, or other than read-write (cuMemSetAccess)");
	pthread_mutex_lock(&lock);
	if (r == CUDA_SUCCESS && !mapped(ptr, size))
		r = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&lock);
	return r;
}

PHOS_EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
	int device = 0;
	bool m;

	if (!flags || !location)
		return CUDA_ERROR_INVALID_VALUE;
	if (CU_RUN(cudaGetDevice(&device)) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&lock);
	m = mapped(ptr, 1);
	pthread_mutex_unlock(&lock);
	if (!m)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = location->type == CU_MEM_LOCATION_TYPE_DEVICE && location->id == device ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
											      : CU_MEM_ACCESS_FLAGS_PROT_NONE;
	return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
							    CUmemGenericAllocationHandle handle)
{
	struct vmm_handle *h;

	if (!prop)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	h = handle_of(handle);
	if (h) {
		memset(prop, 0, sizeof(*prop));
		prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
		prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		prop->location.id = h->device;
	}
	pthread_mutex_unlock(&lock);
	return h ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

PHOS_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	CUdeviceptr a = (CUdeviceptr)(uintptr_t)addr;
	CUresult r = CUDA_ERROR_INVALID_VALUE;

	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	for (uint32_t i = 0; i < VMM_MAX_HANDLES; i++)
		if (handles[i].live && handles[i].at && a >= handles[i].at && a - handles[i].at < handles[i].size) {
			handles[i].refs++;
			*handle = i + 1;
			r = CUDA_SUCCESS;
			break;
		}
	pthread_mutex_unlock(&lock);
	return r;
}
