/* SPDX-License-Identifier: MIT */
/*
 * The driver API stand-in, part one (libcuda_internal.h has the picture):
 * initialisation, devices, the primary context, memory, streams, events,
 * pointer attributes and error names.
 *
 * Names are written as the driver exports them (cuMemAlloc_v2, not the
 * cuMemAlloc that cuda.h turns into it); the per-thread-stream forms
 * (_ptds, _ptsz) are the same functions, since the executor runs the legacy
 * and per-thread default streams as one stream (proto.h).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libcuda_internal.h"
#include "log.h"

/* cuda.h turns these into their _v2 names; we export both forms under their own names. */
#undef cuStreamDestroy
#undef cuEventDestroy
#undef cuEventElapsedTime
#undef cuCtxPushCurrent
#undef cuCtxPopCurrent
#undef cuCtxDestroy
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxReset
#undef cuDevicePrimaryCtxSetFlags
#undef cuDeviceGetUuid
#undef cuMemHostRegister
#undef cuMemGetAddressRange

#define CTX_STACK 16

static int initialized;                  /* cuInit succeeded */
static int primary_refs[PHOS_MAX_DEVICES];  /* cuDevicePrimaryCtxRetain - Release, per device */

/* The calling thread's context stack. `touched`: the thread set or popped a
 * context itself; before that its current context is the one the runtime
 * would have made current (the primary, once connected). */
static __thread CUcontext ctx_stack[CTX_STACK];
static __thread unsigned ctx_depth;
static __thread bool ctx_touched;

CUresult cu_result(int err)
{
	switch (err) {
	case cudaSuccess:
		return CUDA_SUCCESS;
	case cudaErrorMemoryAllocation:
		return CUDA_ERROR_OUT_OF_MEMORY;
	case cudaErrorInitializationError:
		return CUDA_ERROR_NOT_INITIALIZED;
	case cudaErrorCudartUnloading:
		return CUDA_ERROR_DEINITIALIZED;
	case cudaErrorDevicesUnavailable:
		return CUDA_ERROR_DEVICE_UNAVAILABLE;
	case cudaErrorInvalidSymbol:
		return CUDA_ERROR_NOT_FOUND;
	case cudaErrorInvalidDeviceFunction:
	case cudaErrorInvalidResourceHandle:
		return CUDA_ERROR_INVALID_HANDLE;
	case cudaErrorInvalidKernelImage:
		return CUDA_ERROR_INVALID_IMAGE;
	case cudaErrorNotPermitted:
		return CUDA_ERROR_NOT_PERMITTED;
	case cudaErrorNotSupported:
		return CUDA_ERROR_NOT_SUPPORTED;
	default:
		/* Below 100 the runtime's codes are its own (configuration, pitch,
		 * direction...): arguments the driver calls invalid. From 100 on they
		 * are the driver's numbers (device, image, handle, not ready, launch). */
		return err < 100 ? CUDA_ERROR_INVALID_VALUE : (CUresult)err;
	}
}

/* Says "this libcuda.so.1 is phos-fn's": the executor's cuda backend refuses
 * to drive the GPU through it (runtime/device/cuda/device_cuda.c). */
PHOS_EXPORT const int phos_cuda_standin = 1;
PHOS_EXPORT_NAMES(phos_cuda_standin)

/* This library has its own copy of the log (runtime/log.c is linked in hidden). */
__attribute__((constructor)) static void driver_init(void)
{
	phos_log_init("phos-preload-cuda", PHOS_LOG_OFF);
}

/* Every export we do not forward: logged once, refused. */
int phos_cuda_stub(const char *name, int *logged);
int phos_cuda_stub(const char *name, int *logged)
{
	phos_log_once("CUDA driver API", name, logged);
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* NVIDIA's private tables between its static runtime (cudart_static, which
 * cuDNN and other libraries link in) and the driver: undocumented, so not
 * forwarded. Said once on stderr whatever PHOS_LOG, since the library that
 * asked then fails in its own words (cuDNN: CUDNN_STATUS_NOT_INITIALIZED). */
PHOS_EXPORT CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
	static int said;

	if (table)
		*table = NULL;
	if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		fprintf(stderr, "phos-fn: cuGetExportTable is not available: a library that links NVIDIA's static CUDA "
				"runtime (cuDNN, for one) cannot initialise under phos-fn\n");
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* --- initialisation, version, devices --- */

/* cuInit was called, or the runtime connected (it initialises the driver
 * itself: a driver entry point from cudaGetDriverEntryPoint works without cuInit). */
CUresult cu_initialized(void)
{
	if (__atomic_load_n(&initialized, __ATOMIC_ACQUIRE) || phos_preload_hello()->device_count > 0)
		return CUDA_SUCCESS;
	return CUDA_ERROR_NOT_INITIALIZED;
}

PHOS_EXPORT CUresult cuInit(unsigned int Flags)
{
	CUresult r;

	if (Flags)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_result(phos_preload_connect());
	if (r == CUDA_SUCCESS)
		__atomic_store_n(&initialized, 1, __ATOMIC_RELEASE);
	return r;
}

PHOS_EXPORT CUresult cuDriverGetVersion(int *driverVersion)
{
	/* needs no cuInit, as in CUDA */
	return CU_RUN(cudaDriverGetVersion(driverVersion));
}

static CUresult check_device(CUdevice dev)
{
	int n = 0;
	CUresult r = CU_RUN(cudaGetDeviceCount(&n));

	if (r)
		return r;
	return dev >= 0 && dev < n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

PHOS_EXPORT CUresult cuDeviceGetCount(int *count)
{
	NEED_INIT();
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	return CU_RUN(cudaGetDeviceCount(count));
}

PHOS_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	CUresult r;

	NEED_INIT();
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	r = check_device(ordinal);
	if (r == CUDA_SUCCESS)
		*device = ordinal;
	return r;
}

static CUresult device_prop(CUdevice dev, struct cudaDeviceProp *prop)
{
	NEED_INIT();
	return CU_RUN(cudaGetDeviceProperties(prop, dev));
}

PHOS_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	struct cudaDeviceProp prop;
	CUresult r;

	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	r = device_prop(dev, &prop);
	if (r == CUDA_SUCCESS) {
		strncpy(name, prop.name, (size_t)len - 1);
		name[len - 1] = '\0';
	}
	return r;
}

PHOS_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	struct cudaDeviceProp prop;
	CUresult r;

	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	r = device_prop(dev, &prop);
	if (r == CUDA_SUCCESS)
		*bytes = prop.totalGlobalMem;
	return r;
}

PHOS_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	struct cudaDeviceProp prop;
	CUresult r;

	if (!uuid)
		return CUDA_ERROR_INVALID_VALUE;
	r = device_prop(dev, &prop);
	if (r == CUDA_SUCCESS)
		memcpy(uuid->bytes, prop.uuid.bytes, sizeof(uuid->bytes));
	return r;
}
PHOS_ALIAS(cuDeviceGetUuid, cuDeviceGetUuid_v2);

/* CUdevice_attribute and cudaDeviceAttr share their numbers. */
PHOS_EXPORT CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	NEED_INIT();
	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	return CU_RUN(cudaDeviceGetAttribute(pi, (enum cudaDeviceAttr)attrib, dev));
}

/* "dddd:bb:dd.f", as the driver writes it */
PHOS_EXPORT CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
	struct cudaDeviceProp prop;
	CUresult r;

	if (!pciBusId || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	r = device_prop(dev, &prop);
	if (r == CUDA_SUCCESS)
		snprintf(pciBusId, (size_t)len, "%04x:%02x:%02x.0", (unsigned)prop.pciDomainID,
			 (unsigned)prop.pciBusID, (unsigned)prop.pciDeviceID);
	return r;
}

PHOS_EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
	CUresult r;

	if (!major || !minor)
		return CUDA_ERROR_INVALID_VALUE;
	r = cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
	return r ? r : cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
}

/* --- the primary context --- */

PHOS_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	CUresult r;

	NEED_INIT();
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	r = check_device(dev);
	if (r)
		return r;
	if (dev >= PHOS_MAX_DEVICES)
		return CUDA_ERROR_INVALID_DEVICE;
	__atomic_add_fetch(&primary_refs[dev], 1, __ATOMIC_ACQ_REL);
	*pctx = CU_PRIMARY_CTX_OF(dev);
	return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	int refs;
	CUresult r;

	NEED_INIT();
	r = check_device(dev);
	if (r)
		return r;
	if (dev >= PHOS_MAX_DEVICES)
		return CUDA_ERROR_INVALID_DEVICE;
	refs = __atomic_load_n(&primary_refs[dev], __ATOMIC_ACQUIRE);
	do {
		if (refs <= 0)
			return CUDA_ERROR_INVALID_CONTEXT;
	} while (!__atomic_compare_exchange_n(&primary_refs[dev], &refs, refs - 1, false, __ATOMIC_ACQ_REL,
					      __ATOMIC_ACQUIRE));
	/* The context lives on in the executor: the runtime stand-in uses it too. */
	return CUDA_SUCCESS;
}
PHOS_ALIAS(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease_v2);

PHOS_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	CUresult r;

	NEED_INIT();
	if (!flags || !active)
		return CUDA_ERROR_INVALID_VALUE;
	r = check_device(dev);
	if (r)
		return r;
	/* the runtime's device flags are the primary context's (CU_CTX_* are cudaDevice*) */
	r = CU_RUN(cudaGetDeviceFlags(flags));
	if (r == CUDA_SUCCESS)
		*active = (dev < PHOS_MAX_DEVICES && __atomic_load_n(&primary_refs[dev], __ATOMIC_ACQUIRE) > 0) ||
			  phos_preload_hello()->device_count > 0;
	return r;
}

PHOS_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
	CUresult r;

	NEED_INIT();
	r = check_device(dev);
	if (r)
		return r;
	/* the flags the runtime takes (cudaSetDeviceFlags, same bits) */
	if (flags & ~(unsigned)(CU_CTX_SCHED_MASK | CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_MAP_HOST))
		return CUDA_ERROR_INVALID_VALUE;
	return CU_RUN(cudaSetDeviceFlags(flags));
}
PHOS_ALIAS(cuDevicePrimaryCtxSetFlags, cuDevicePrimaryCtxSetFlags_v2);

/* Frees every allocation, module, stream and event of the function: the
 * runtime's cudaDeviceReset, as on a real primary context. */
PHOS_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	CUresult r;

	NEED_INIT();
	r = check_device(dev);
	if (r)
		return r;
	return CU_RUN(cudaDeviceReset());
}
PHOS_ALIAS(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset_v2);

/* The device of a context we handed out, or -1. */
static int ctx_device(CUcontext ctx)
{
	uint32_t id = phos_handle_unwrap(ctx, PHOS_H_CONTEXT);

	return id >= 1 && id <= phos_preload_hello()->device_count ? (int)id - 1 : -1;
}

static CUresult check_ctx(CUcontext ctx)
{
	return ctx_device(ctx) >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

static CUcontext current_ctx(void)
{
	if (ctx_depth)
		return ctx_stack[ctx_depth - 1];
	if (!ctx_touched && phos_preload_hello()->device_count > 0)
		return CU_PRIMARY_CTX_OF(phos_current_device());
	return NULL;
}

/* The runtime stand-in follows the current context's device. */
static void ctx_follow(void)
{
	CUcontext cur = current_ctx();

	if (cur && ctx_device(cur) != phos_current_device())
		cudaSetDevice(ctx_device(cur));
}

PHOS_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	NEED_INIT();
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = current_ctx();
	return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
	NEED_INIT();
	if (ctx && check_ctx(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	ctx_touched = true;
	if (!ctx) {
		if (ctx_depth)
			ctx_depth--;
		return CUDA_SUCCESS;
	}
	if (ctx_depth)
		ctx_stack[ctx_depth - 1] = ctx;
	else
		ctx_stack[ctx_depth++] = ctx;
	ctx_follow();
	return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
	NEED_INIT();
	if (check_ctx(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth == CTX_STACK)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ctx_touched = true;
	ctx_stack[ctx_depth++] = ctx;
	ctx_follow();
	return CUDA_SUCCESS;
}
PHOS_ALIAS(cuCtxPushCurrent, cuCtxPushCurrent_v2);

PHOS_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
	CUcontext cur;

	NEED_INIT();
	cur = current_ctx();
	if (!cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth)
		ctx_depth--;
	ctx_touched = true;
	if (pctx)
		*pctx = cur;
	ctx_follow();
	return CUDA_SUCCESS;
}
PHOS_ALIAS(cuCtxPopCurrent, cuCtxPopCurrent_v2);

/* The calls below act on the current context, which must exist. */
#define NEED_CTX()                                      \
	do {                                            \
		NEED_INIT();                            \
		if (!current_ctx())                     \
			return CUDA_ERROR_INVALID_CONTEXT; \
	} while (0)

PHOS_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
	NEED_CTX();
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	*device = ctx_device(current_ctx());
	return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuCtxSynchronize(void)
{
	NEED_CTX();
	return CU_RUN(cudaDeviceSynchronize());
}

PHOS_EXPORT CUresult cuCtxGetFlags(unsigned int *flags)
{
	NEED_CTX();
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	return CU_RUN(cudaGetDeviceFlags(flags));
}

PHOS_EXPORT CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
	NEED_INIT();
	if (!version || (ctx && check_ctx(ctx)))
		return ctx && check_ctx(ctx) ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_VALUE;
	*version = 3020;   /* what the driver reports for every context made since CUDA 3.2 */
	return CUDA_SUCCESS;
}

/* Cache preferences are hints: taken, not forwarded (as cudaFuncSetCacheConfig). */
PHOS_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
	NEED_CTX();
	return (unsigned)config <= CU_FUNC_CACHE_PREFER_EQUAL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

PHOS_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
	NEED_CTX();
	if (!pconfig)
		return CUDA_ERROR_INVALID_VALUE;
	*pconfig = CU_FUNC_CACHE_PREFER_NONE;
	return CUDA_SUCCESS;
}

/* CUlimit and cudaLimit share their numbers. */
PHOS_EXPORT CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
	NEED_CTX();
	return CU_RUN(cudaDeviceGetLimit(pvalue, (enum cudaLimit)limit));
}

PHOS_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
	NEED_CTX();
	return CU_RUN(cudaDeviceSetLimit((enum cudaLimit)limit, value));
}

PHOS_EXPORT CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
	NEED_CTX();
	return CU_RUN(cudaDeviceGetStreamPriorityRange(leastPriority, greatestPriority));
}

/* One context per function: a new context is the primary one, retained.
 * (cuda.h of CUDA 13 declares only the _v4 form.) */
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
PHOS_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	CUresult r = cuDevicePrimaryCtxRetain(pctx, dev);

	if (r == CUDA_SUCCESS)
		r = cuCtxPushCurrent_v2(*pctx);
	return r;
}

PHOS_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
{
	/* execution affinity and CIG parameters would need a context of their own */
	if (params && (params->execAffinityParams || params->numExecAffinityParams || params->cigParams))
		return CUDA_ERROR_NOT_SUPPORTED;
	return cuCtxCreate_v2(pctx, flags, dev);
}

PHOS_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	NEED_INIT();
	if (check_ctx(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	for (unsigned i = ctx_depth; i > 0; i--)
		if (ctx_stack[i - 1] == ctx) {
			memmove(&ctx_stack[i - 1], &ctx_stack[i], (ctx_depth - i) * sizeof(ctx));
			ctx_depth--;
		}
	return cuDevicePrimaryCtxRelease_v2(0);
}
PHOS_ALIAS(cuCtxDestroy, cuCtxDestroy_v2);

/* --- memory --- */

#define DPTR(p) ((void *)(uintptr_t)(p))

PHOS_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	void *p = NULL;
	CUresult r;

	NEED_CTX();
	if (!dptr || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	r = CU_RUN(cudaMalloc(&p, bytesize));
	if (r == CUDA_SUCCESS)
		*dptr = (CUdeviceptr)(uintptr_t)p;
	return r;
}

PHOS_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	NEED_CTX();
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;   /* the driver's rule; cudaFree(NULL) is a no-op */
	return CU_RUN(cudaFree(DPTR(dptr)));
}

PHOS_EXPORT CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	NEED_CTX();
	if (!free || !total)
		return CUDA_ERROR_INVALID_VALUE;
	return CU_RUN(cudaMemGetInfo(free, total));
}

PHOS_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	NEED_CTX();
	return CU_RUN(cudaMallocHost(pp, bytesize));
}

/* CU_MEM_ATTACH_* and cudaMemAttach* share their values. */
PHOS_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	NEED_CTX();
	return CU_RUN(cudaMallocManaged((void **)dptr, bytesize, flags));
}

/* CU_MEMHOSTALLOC_* and cudaHostAlloc* share their bits. */
PHOS_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	NEED_CTX();
	return CU_RUN(cudaHostAlloc(pp, bytesize, Flags));
}

PHOS_EXPORT CUresult cuMemFreeHost(void *p)
{
	NEED_CTX();
	return CU_RUN(cudaFreeHost(p));
}

PHOS_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
	void *d = NULL;
	CUresult r;

	NEED_CTX();
	if (!pdptr)
		return CUDA_ERROR_INVALID_VALUE;
	r = CU_RUN(cudaHostGetDevicePointer(&d, p, Flags));
	if (r == CUDA_SUCCESS)
		*pdptr = (CUdeviceptr)(uintptr_t)d;
	return r;
}

static CUresult copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, CUstream stream, bool async)
{
	NEED_CTX();
	return async ? CU_RUN(cudaMemcpyAsync(dst, src, n, kind, (cudaStream_t)stream))
		     : CU_RUN(cudaMemcpy(dst, src, n, kind));
}

PHOS_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	return copy(DPTR(dstDevice), srcHost, ByteCount, cudaMemcpyHostToDevice, NULL, false);
}
PHOS_ALIAS(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD_v2);

PHOS_EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	return copy(dstHost, DPTR(srcDevice), ByteCount, cudaMemcpyDeviceToHost, NULL, false);
}
PHOS_ALIAS(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH_v2);

PHOS_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
	return copy(DPTR(dstDevice), DPTR(srcDevice), ByteCount, cudaMemcpyDeviceToDevice, NULL, false);
}
PHOS_ALIAS(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD_v2);

PHOS_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	return copy(DPTR(dst), DPTR(src), ByteCount, cudaMemcpyDefault, NULL, false);
}
PHOS_ALIAS(cuMemcpy_ptds, cuMemcpy);

PHOS_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
					  CUstream hStream)
{
	return copy(DPTR(dstDevice), srcHost, ByteCount, cudaMemcpyHostToDevice, hStream, true);
}
PHOS_ALIAS(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync_v2);

PHOS_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
	return copy(dstHost, DPTR(srcDevice), ByteCount, cudaMemcpyDeviceToHost, hStream, true);
}
PHOS_ALIAS(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync_v2);

PHOS_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
					  CUstream hStream)
{
	return copy(DPTR(dstDevice), DPTR(srcDevice), ByteCount, cudaMemcpyDeviceToDevice, hStream, true);
}
PHOS_ALIAS(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync_v2);

PHOS_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	return copy(DPTR(dst), DPTR(src), ByteCount, cudaMemcpyDefault, hStream, true);
}
PHOS_ALIAS(cuMemcpyAsync_ptsz, cuMemcpyAsync);

/*
 * cuMemsetD16/D32 with a pattern whose bytes differ: the executor's memset
 * sets bytes, so the pattern is written by a copy of up to 64 KiB, then
 * doubled by device-to-device copies of what is already there (log2 copies,
 * each with its exact ranges), all on the stream, in order.
 */
#define PATTERN_BYTES 65536u

static CUresult memset_pattern(CUdeviceptr dst, uint32_t value, unsigned width, size_t n, CUstream stream)
{
	uint8_t pat[PATTERN_BYTES];
	size_t total, first, done;
	CUresult r;

	NEED_CTX();
	if (n > SIZE_MAX / width)
		return CUDA_ERROR_INVALID_VALUE;
	total = n * width;
	if (!total)
		return CUDA_SUCCESS;
	if (dst % width)
		return CUDA_ERROR_INVALID_VALUE;   /* the driver's alignment rule */
	for (size_t i = 0; i < PATTERN_BYTES; i += width)
		memcpy(pat + i, &value, width);
	first = total < PATTERN_BYTES ? total : PATTERN_BYTES;
	r = CU_RUN(cudaMemcpyAsync(DPTR(dst), pat, first, cudaMemcpyHostToDevice, (cudaStream_t)stream));
	for (done = first; r == CUDA_SUCCESS && done < total; done *= 2) {
		size_t len = done < total - done ? done : total - done;

		r = CU_RUN(cudaMemcpyAsync(DPTR(dst + done), DPTR(dst), len, cudaMemcpyDeviceToDevice,
					   (cudaStream_t)stream));
	}
	return r;
}

static CUresult memset_n(CUdeviceptr dst, uint32_t value, unsigned width, size_t n, CUstream stream, bool async)
{
	uint8_t b = (uint8_t)value;
	bool uniform = width == 1 || (width == 2 && (value & 0xffff) == b * 0x0101u) ||
		       (width == 4 && value == b * 0x01010101u);

	NEED_CTX();
	if (uniform && n <= SIZE_MAX / width)
		return async ? CU_RUN(cudaMemsetAsync(DPTR(dst), b, n * width, (cudaStream_t)stream))
			     : CU_RUN(cudaMemset(DPTR(dst), b, n * width));
	return memset_pattern(dst, value, width, n, async ? stream : NULL);
}

PHOS_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	return memset_n(dstDevice, uc, 1, N, NULL, false);
}
PHOS_ALIAS(cuMemsetD8_v2_ptds, cuMemsetD8_v2);

PHOS_EXPORT CUresult cuMemsetD16_v2(CUdeviceptr dstDevice, unsigned short us, size_t N)
{
	return memset_n(dstDevice, us, 2, N, NULL, false);
}
PHOS_ALIAS(cuMemsetD16_v2_ptds, cuMemsetD16_v2);

PHOS_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
	return memset_n(dstDevice, ui, 4, N, NULL, false);
}
PHOS_ALIAS(cuMemsetD32_v2_ptds, cuMemsetD32_v2);

PHOS_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
	return memset_n(dstDevice, uc, 1, N, hStream, true);
}
PHOS_ALIAS(cuMemsetD8Async_ptsz, cuMemsetD8Async);

PHOS_EXPORT CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream)
{
	return memset_n(dstDevice, us, 2, N, hStream, true);
}
PHOS_ALIAS(cuMemsetD16Async_ptsz, cuMemsetD16Async);

PHOS_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream)
{
	return memset_n(dstDevice, ui, 4, N, hStream, true);
}
PHOS_ALIAS(cuMemsetD32Async_ptsz, cuMemsetD32Async);

/* ---- pitched copies and 2D sets ----------------------------------------------
 *
 * cuMemcpy2D/3D(Async) become the runtime's cudaMemcpy3D(Async) (memory_2d.c:
 * its checks, its records): each side's base pointer, pitch and rows per
 * slice, its position (x in bytes, y, z). Host, device and unified sides are
 * forwarded; an array side (CUarray: the runtime stand-in's cudaArray_t) is
 * a 3D copy in the array's elements, as the runtime counts them. cuMemsetD2D8
 * is one cudaMemset2D; a 16- or 32-bit value whose
 * bytes differ is written into the first row (memset_pattern) and the rows
 * doubled by 2D device-to-device copies: about log2(height) records. */

/* Bytes per element of an array (0: not an array of ours). */
static size_t array_elem(CUarray a)
{
	struct cudaChannelFormatDesc d;

	if (!a || CU_RUN(cudaArrayGetInfo(&d, NULL, NULL, (cudaArray_t)a)) != CUDA_SUCCESS)
		return 0;
	return (size_t)(d.x + d.y + d.z + d.w) / 8;
}

/* One side of a driver copy as the runtime's pitched pointer and position. */
static CUresult copy_side(CUmemorytype type, const void *host, CUdeviceptr dev, CUarray array, size_t pitch,
			  size_t rows, size_t x, size_t y, size_t z, size_t width, size_t height, size_t depth,
			  struct cudaPitchedPtr *ret_ptr, struct cudaPos *ret_pos, bool *ret_host)
{
	void *base;

	switch (type) {
	case CU_MEMORYTYPE_HOST:
		base = (void *)(uintptr_t)host;
		*ret_host = true;
		break;
	case CU_MEMORYTYPE_DEVICE:
	case CU_MEMORYTYPE_UNIFIED:   /* a unified address: the runtime tells host from device */
		base = DPTR(dev);
		*ret_host = false;
		break;
	case CU_MEMORYTYPE_ARRAY:   /* (copy_3d converts to elements) */
		if (!array)
			return CUDA_ERROR_INVALID_VALUE;
		*ret_ptr = (struct cudaPitchedPtr){ 0 };
		*ret_pos = (struct cudaPos){ .x = x, .y = y, .z = z };
		*ret_host = false;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (!base)
		return CUDA_ERROR_INVALID_VALUE;
	/* a single row needs no pitch (the driver ignores it then) */
	if (height <= 1 && pitch < x + width)
		pitch = x + width;
	*ret_ptr = (struct cudaPitchedPtr){ .ptr = base, .pitch = pitch, .xsize = pitch,
					    /* rows per slice: only a 3D copy needs them given */
					    .ysize = rows || depth > 1 ? rows : y + height };
	*ret_pos = (struct cudaPos){ .x = x, .y = y, .z = z };
	return CUDA_SUCCESS;
}

static CUresult copy_3d(const CUDA_MEMCPY3D *c, CUstream stream, bool async)
{
	struct cudaMemcpy3DParms p = { 0 };
	bool dh = false, sh = false;
	CUresult r;

	NEED_CTX();
	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	if (c->srcLOD || c->dstLOD || c->reserved0 || c->reserved1)
		return CUDA_ERROR_INVALID_VALUE;   /* as the driver: mipmap levels are for arrays */
	r = copy_side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcPitch, c->srcHeight,
		      c->srcXInBytes, c->srcY, c->srcZ, c->WidthInBytes, c->Height, c->Depth, &p.srcPtr, &p.srcPos, &sh);
	if (r == CUDA_SUCCESS)
		r = copy_side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstPitch, c->dstHeight,
			      c->dstXInBytes, c->dstY, c->dstZ, c->WidthInBytes, c->Height, c->Depth, &p.dstPtr, &p.dstPos,
			      &dh);
	if (r != CUDA_SUCCESS)
		return r;
	p.extent = (struct cudaExtent){ .width = c->WidthInBytes, .height = c->Height, .depth = c->Depth };
	if (c->srcMemoryType == CU_MEMORYTYPE_ARRAY || c->dstMemoryType == CU_MEMORYTYPE_ARRAY) {
		/* the runtime counts x and the width of a copy with an array in the array's
		 * elements, on the pointer side too (array.c: as CUDA does, whatever its
		 * documentation says); the driver counts bytes */
		size_t elem = array_elem(c->dstMemoryType == CU_MEMORYTYPE_ARRAY ? c->dstArray : c->srcArray);

		if (!elem || c->WidthInBytes % elem || c->srcXInBytes % elem || c->dstXInBytes % elem ||
		    (c->srcMemoryType == CU_MEMORYTYPE_ARRAY && c->dstMemoryType == CU_MEMORYTYPE_ARRAY &&
		     array_elem(c->srcArray) != elem))
			return CUDA_ERROR_INVALID_VALUE;
		p.extent.width /= elem;
		p.srcPos.x /= elem;
		p.dstPos.x /= elem;
		if (c->srcMemoryType == CU_MEMORYTYPE_ARRAY)
			p.srcArray = (cudaArray_t)c->srcArray;
		if (c->dstMemoryType == CU_MEMORYTYPE_ARRAY)
			p.dstArray = (cudaArray_t)c->dstArray;
	}
	p.kind = c->srcMemoryType == CU_MEMORYTYPE_UNIFIED || c->dstMemoryType == CU_MEMORYTYPE_UNIFIED
			 ? cudaMemcpyDefault
			 : sh ? (dh ? cudaMemcpyHostToHost : cudaMemcpyHostToDevice)
			      : (dh ? cudaMemcpyDeviceToHost : cudaMemcpyDeviceToDevice);
	return async ? CU_RUN(cudaMemcpy3DAsync(&p, (cudaStream_t)stream)) : CU_RUN(cudaMemcpy3D(&p));
}

/* A 2D copy is a 3D one of depth 1. */
static CUresult copy_2d(const CUDA_MEMCPY2D *c, CUstream stream, bool async)
{
	CUDA_MEMCPY3D t;

	if (!c) {
		NEED_CTX();
		return CUDA_ERROR_INVALID_VALUE;
	}
	memset(&t, 0, sizeof(t));
	t.srcXInBytes = c->srcXInBytes;
	t.srcY = c->srcY;
	t.srcMemoryType = c->srcMemoryType;
	t.srcHost = c->srcHost;
	t.srcDevice = c->srcDevice;
	t.srcArray = c->srcArray;
	t.srcPitch = c->srcPitch;
	t.dstXInBytes = c->dstXInBytes;
	t.dstY = c->dstY;
	t.dstMemoryType = c->dstMemoryType;
	t.dstHost = c->dstHost;
	t.dstDevice = c->dstDevice;
	t.dstArray = c->dstArray;
	t.dstPitch = c->dstPitch;
	t.WidthInBytes = c->WidthInBytes;
	t.Height = c->Height;
	t.Depth = 1;
	return copy_3d(&t, stream, async);
}

PHOS_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy)
{
	return copy_2d(pCopy, NULL, false);
}
PHOS_ALIAS(cuMemcpy2D_v2_ptds, cuMemcpy2D_v2);
PHOS_ALIAS(cuMemcpy2DUnaligned_v2, cuMemcpy2D_v2);
PHOS_ALIAS(cuMemcpy2DUnaligned_v2_ptds, cuMemcpy2D_v2);

PHOS_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
	return copy_2d(pCopy, hStream, true);
}
PHOS_ALIAS(cuMemcpy2DAsync_v2_ptsz, cuMemcpy2DAsync_v2);

PHOS_EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *pCopy)
{
	return copy_3d(pCopy, NULL, false);
}
PHOS_ALIAS(cuMemcpy3D_v2_ptds, cuMemcpy3D_v2);

PHOS_EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
	return copy_3d(pCopy, hStream, true);
}
PHOS_ALIAS(cuMemcpy3DAsync_v2_ptsz, cuMemcpy3DAsync_v2);

/* ---- arrays: the runtime stand-in's (array.c); CUarray is its cudaArray_t ---- */

static int cu_formats_named;

/* A driver array format as the runtime's channel description: 0, or
 * CUDA_ERROR_NOT_SUPPORTED for the packed, normalized and compressed ones. */
static CUresult desc_of(CUarray_format f, unsigned channels, struct cudaChannelFormatDesc *d)
{
	int bits;
	enum cudaChannelFormatKind kind;

	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8: bits = 8; kind = cudaChannelFormatKindUnsigned; break;
	case CU_AD_FORMAT_UNSIGNED_INT16: bits = 16; kind = cudaChannelFormatKindUnsigned; break;
	case CU_AD_FORMAT_UNSIGNED_INT32: bits = 32; kind = cudaChannelFormatKindUnsigned; break;
	case CU_AD_FORMAT_SIGNED_INT8: bits = 8; kind = cudaChannelFormatKindSigned; break;
	case CU_AD_FORMAT_SIGNED_INT16: bits = 16; kind = cudaChannelFormatKindSigned; break;
	case CU_AD_FORMAT_SIGNED_INT32: bits = 32; kind = cudaChannelFormatKindSigned; break;
	case CU_AD_FORMAT_HALF: bits = 16; kind = cudaChannelFormatKindFloat; break;
	case CU_AD_FORMAT_FLOAT: bits = 32; kind = cudaChannelFormatKindFloat; break;
	default:
		phos_log_once("array format of the driver API", "(packed, normalized or block-compressed)",
			      &cu_formats_named);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (channels != 1 && channels != 2 && channels != 4)
		return CUDA_ERROR_INVALID_VALUE;
	*d = (struct cudaChannelFormatDesc){ .x = bits, .y = channels > 1 ? bits : 0, .z = channels > 2 ? bits : 0,
					     .w = channels > 2 ? bits : 0, .f = kind };
	return CUDA_SUCCESS;
}

/* ... and back. */
static CUresult format_of(const struct cudaChannelFormatDesc *d, CUarray_format *f, unsigned *channels)
{
	int bits = d->x;

	*channels = 1 + (d->y > 0) + 2 * (d->z > 0);
	if (d->f == cudaChannelFormatKindFloat)
		*f = bits == 16 ? CU_AD_FORMAT_HALF : CU_AD_FORMAT_FLOAT;
	else if (d->f == cudaChannelFormatKindSigned)
		*f = bits == 8 ? CU_AD_FORMAT_SIGNED_INT8 : bits == 16 ? CU_AD_FORMAT_SIGNED_INT16 : CU_AD_FORMAT_SIGNED_INT32;
	else if (d->f == cudaChannelFormatKindUnsigned)
		*f = bits == 8 ? CU_AD_FORMAT_UNSIGNED_INT8 : bits == 16 ? CU_AD_FORMAT_UNSIGNED_INT16
									: CU_AD_FORMAT_UNSIGNED_INT32;
	else
		return CUDA_ERROR_NOT_SUPPORTED;
	return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	struct cudaChannelFormatDesc cd;
	cudaArray_t a = NULL;
	CUresult r;

	NEED_CTX();
	if (!pHandle || !d)
		return CUDA_ERROR_INVALID_VALUE;
	r = desc_of(d->Format, d->NumChannels, &cd);
	if (r != CUDA_SUCCESS)
		return r;
	/* CUDA_ARRAY3D_LAYERED, _SURFACE_LDST, _CUBEMAP, _TEXTURE_GATHER are the runtime's bits */
	r = CU_RUN(cudaMalloc3DArray(&a, &cd, (struct cudaExtent){ d->Width, d->Height, d->Depth }, d->Flags));
	if (r == CUDA_SUCCESS)
		*pHandle = (CUarray)a;
	return r;
}

PHOS_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
	CUDA_ARRAY3D_DESCRIPTOR d3;

	if (!d) {
		NEED_CTX();
		return CUDA_ERROR_INVALID_VALUE;
	}
	d3 = (CUDA_ARRAY3D_DESCRIPTOR){ .Width = d->Width, .Height = d->Height, .Depth = 0, .Format = d->Format,
					.NumChannels = d->NumChannels, .Flags = 0 };
	return cuArray3DCreate_v2(pHandle, &d3);
}

PHOS_EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
	NEED_CTX();
	if (!hArray)
		return CUDA_ERROR_INVALID_VALUE;
	return CU_RUN(cudaFreeArray((cudaArray_t)hArray));
}

PHOS_EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray hArray)
{
	struct cudaChannelFormatDesc cd;
	struct cudaExtent e;
	unsigned flags, channels;
	CUarray_format f;
	CUresult r;

	NEED_CTX();
	if (!d || !hArray)
		return CUDA_ERROR_INVALID_VALUE;
	r = CU_RUN(cudaArrayGetInfo(&cd, &e, &flags, (cudaArray_t)hArray));
	if (r == CUDA_SUCCESS)
		r = format_of(&cd, &f, &channels);
	if (r == CUDA_SUCCESS)
		*d = (CUDA_ARRAY3D_DESCRIPTOR){ .Width = e.width, .Height = e.height, .Depth = e.depth, .Format = f,
						.NumChannels = channels, .Flags = flags };
	return r;
}

PHOS_EXPORT CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *d, CUarray hArray)
{
	CUDA_ARRAY3D_DESCRIPTOR d3;
	CUresult r;

	if (!d) {
		NEED_CTX();
		return CUDA_ERROR_INVALID_VALUE;
	}
	r = cuArray3DGetDescriptor_v2(&d3, hArray);
	if (r == CUDA_SUCCESS)
		*d = (CUDA_ARRAY_DESCRIPTOR){ .Width = d3.Width, .Height = d3.Height, .Format = d3.Format,
					      .NumChannels = d3.NumChannels };
	return r;
}

/* The 1D forms (cuMemcpyHtoA, AtoH, AtoD, DtoA, AtoA): offsets and counts in
 * bytes along the array's first row: a copy of one row. */
static CUresult copy_row(CUmemorytype dt, void *dh, CUdeviceptr dd, CUarray da, size_t doff, CUmemorytype st,
			 const void *sh, CUdeviceptr sd, CUarray sa, size_t soff, size_t bytes, CUstream stream,
			 bool async)
{
	CUDA_MEMCPY2D c;

	memset(&c, 0, sizeof(c));
	c.dstMemoryType = dt;
	c.dstHost = dh;
	c.dstDevice = dd;
	c.dstArray = da;
	c.dstXInBytes = doff;
	c.srcMemoryType = st;
	c.srcHost = sh;
	c.srcDevice = sd;
	c.srcArray = sa;
	c.srcXInBytes = soff;
	c.WidthInBytes = bytes;
	c.Height = 1;
	return copy_2d(&c, stream, async);
}

PHOS_EXPORT CUresult cuMemcpyHtoA_v2(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount)
{
	return copy_row(CU_MEMORYTYPE_ARRAY, NULL, 0, dstArray, dstOffset, CU_MEMORYTYPE_HOST, srcHost, 0, NULL, 0,
			ByteCount, NULL, false);
}
PHOS_ALIAS(cuMemcpyHtoA_v2_ptds, cuMemcpyHtoA_v2);

PHOS_EXPORT CUresult cuMemcpyHtoAAsync_v2(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount,
					  CUstream hStream)
{
	return copy_row(CU_MEMORYTYPE_ARRAY, NULL, 0, dstArray, dstOffset, CU_MEMORYTYPE_HOST, srcHost, 0, NULL, 0,
			ByteCount, hStream, true);
}
PHOS_ALIAS(cuMemcpyHtoAAsync_v2_ptsz, cuMemcpyHtoAAsync_v2);

PHOS_EXPORT CUresult cuMemcpyAtoH_v2(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount)
{
	return copy_row(CU_MEMORYTYPE_HOST, dstHost, 0, NULL, 0, CU_MEMORYTYPE_ARRAY, NULL, 0, srcArray, srcOffset,
			ByteCount, NULL, false);
}
PHOS_ALIAS(cuMemcpyAtoH_v2_ptds, cuMemcpyAtoH_v2);

PHOS_EXPORT CUresult cuMemcpyAtoHAsync_v2(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount,
					  CUstream hStream)
{
	return copy_row(CU_MEMORYTYPE_HOST, dstHost, 0, NULL, 0, CU_MEMORYTYPE_ARRAY, NULL, 0, srcArray, srcOffset,
			ByteCount, hStream, true);
}
PHOS_ALIAS(cuMemcpyAtoHAsync_v2_ptsz, cuMemcpyAtoHAsync_v2);

PHOS_EXPORT CUresult cuMemcpyDtoA_v2(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount)
{
	return copy_row(CU_MEMORYTYPE_ARRAY, NULL, 0, dstArray, dstOffset, CU_MEMORYTYPE_DEVICE, NULL, srcDevice, NULL,
			0, ByteCount, NULL, false);
}
PHOS_ALIAS(cuMemcpyDtoA_v2_ptds, cuMemcpyDtoA_v2);

PHOS_EXPORT CUresult cuMemcpyAtoD_v2(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount)
{
	return copy_row(CU_MEMORYTYPE_DEVICE, NULL, dstDevice, NULL, 0, CU_MEMORYTYPE_ARRAY, NULL, 0, srcArray,
			srcOffset, ByteCount, NULL, false);
}
PHOS_ALIAS(cuMemcpyAtoD_v2_ptds, cuMemcpyAtoD_v2);

PHOS_EXPORT CUresult cuMemcpyAtoA_v2(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset,
				     size_t ByteCount)
{
	return copy_row(CU_MEMORYTYPE_ARRAY, NULL, 0, dstArray, dstOffset, CU_MEMORYTYPE_ARRAY, NULL, 0, srcArray,
			srcOffset, ByteCount, NULL, false);
}
PHOS_ALIAS(cuMemcpyAtoA_v2_ptds, cuMemcpyAtoA_v2);

/* Texture and surface objects: the runtime stand-in's (array.c). The driver's
 * descriptors become the runtime's: an 8- or 16-bit integer format reads as
 * normalized float unless CU_TRSF_READ_AS_INTEGER (32-bit and float formats
 * read as they are), the other flags are the runtime's fields. Resource views
 * and mipmapped arrays are refused (CUDA_ERROR_NOT_SUPPORTED) as the runtime
 * refuses them. */
static CUresult res_to_rt(const CUDA_RESOURCE_DESC *r, struct cudaResourceDesc *rd, bool *promotable)
{
	CUresult e;

	memset(rd, 0, sizeof(*rd));
	*promotable = false;
	if (r->flags)
		return CUDA_ERROR_INVALID_VALUE;
	switch (r->resType) {
	case CU_RESOURCE_TYPE_ARRAY: {
		struct cudaChannelFormatDesc d;

		if (!r->res.array.hArray)
			return CUDA_ERROR_INVALID_VALUE;
		rd->resType = cudaResourceTypeArray;
		rd->res.array.array = (cudaArray_t)r->res.array.hArray;
		if (CU_RUN(cudaArrayGetInfo(&d, NULL, NULL, rd->res.array.array)) != CUDA_SUCCESS)
			return CUDA_ERROR_INVALID_VALUE;
		*promotable = d.f != cudaChannelFormatKindFloat && d.x < 32;
		return CUDA_SUCCESS;
	}
	case CU_RESOURCE_TYPE_LINEAR:
		e = desc_of(r->res.linear.format, r->res.linear.numChannels, &rd->res.linear.desc);
		if (e != CUDA_SUCCESS)
			return e;
		rd->resType = cudaResourceTypeLinear;
		rd->res.linear.devPtr = DPTR(r->res.linear.devPtr);
		rd->res.linear.sizeInBytes = r->res.linear.sizeInBytes;
		*promotable = rd->res.linear.desc.f != cudaChannelFormatKindFloat && rd->res.linear.desc.x < 32;
		return CUDA_SUCCESS;
	case CU_RESOURCE_TYPE_PITCH2D:
		e = desc_of(r->res.pitch2D.format, r->res.pitch2D.numChannels, &rd->res.pitch2D.desc);
		if (e != CUDA_SUCCESS)
			return e;
		rd->resType = cudaResourceTypePitch2D;
		rd->res.pitch2D.devPtr = DPTR(r->res.pitch2D.devPtr);
		rd->res.pitch2D.width = r->res.pitch2D.width;
		rd->res.pitch2D.height = r->res.pitch2D.height;
		rd->res.pitch2D.pitchInBytes = r->res.pitch2D.pitchInBytes;
		*promotable = rd->res.pitch2D.desc.f != cudaChannelFormatKindFloat && rd->res.pitch2D.desc.x < 32;
		return CUDA_SUCCESS;
	case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
		phos_log_once("texture resource of the driver API", "CU_RESOURCE_TYPE_MIPMAPPED_ARRAY", &cu_formats_named);
		return CUDA_ERROR_NOT_SUPPORTED;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static CUresult res_from_rt(const struct cudaResourceDesc *rd, CUDA_RESOURCE_DESC *r)
{
	CUresult e = CUDA_SUCCESS;

	memset(r, 0, sizeof(*r));
	switch (rd->resType) {
	case cudaResourceTypeArray:
		r->resType = CU_RESOURCE_TYPE_ARRAY;
		r->res.array.hArray = (CUarray)rd->res.array.array;
		break;
	case cudaResourceTypeLinear:
		r->resType = CU_RESOURCE_TYPE_LINEAR;
		r->res.linear.devPtr = (CUdeviceptr)(uintptr_t)rd->res.linear.devPtr;
		r->res.linear.sizeInBytes = rd->res.linear.sizeInBytes;
		e = format_of(&rd->res.linear.desc, &r->res.linear.format, &r->res.linear.numChannels);
		break;
	case cudaResourceTypePitch2D:
		r->resType = CU_RESOURCE_TYPE_PITCH2D;
		r->res.pitch2D.devPtr = (CUdeviceptr)(uintptr_t)rd->res.pitch2D.devPtr;
		r->res.pitch2D.width = rd->res.pitch2D.width;
		r->res.pitch2D.height = rd->res.pitch2D.height;
		r->res.pitch2D.pitchInBytes = rd->res.pitch2D.pitchInBytes;
		e = format_of(&rd->res.pitch2D.desc, &r->res.pitch2D.format, &r->res.pitch2D.numChannels);
		break;
	default:
		e = CUDA_ERROR_NOT_SUPPORTED;
	}
	return e;
}

PHOS_EXPORT CUresult cuTexObjectCreate(CUtexObject *pTexObject, const CUDA_RESOURCE_DESC *pResDesc,
				       const CUDA_TEXTURE_DESC *pTexDesc, const CUDA_RESOURCE_VIEW_DESC *pResViewDesc)
{
	struct cudaResourceDesc rd;
	struct cudaTextureDesc td;
	cudaTextureObject_t t = 0;
	bool promotable;
	CUresult r;

	NEED_CTX();
	if (!pTexObject || !pResDesc || !pTexDesc)
		return CUDA_ERROR_INVALID_VALUE;
	if (pResViewDesc) {
		phos_log_once("texture resource of the driver API", "a resource view", &cu_formats_named);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	r = res_to_rt(pResDesc, &rd, &promotable);
	if (r != CUDA_SUCCESS)
		return r;
	memset(&td, 0, sizeof(td));
	for (int i = 0; i < 3; i++)
		td.addressMode[i] = (enum cudaTextureAddressMode)pTexDesc->addressMode[i];
	td.filterMode = (enum cudaTextureFilterMode)pTexDesc->filterMode;
	td.readMode = promotable && !(pTexDesc->flags & CU_TRSF_READ_AS_INTEGER) ? cudaReadModeNormalizedFloat
										  : cudaReadModeElementType;
	td.sRGB = (pTexDesc->flags & CU_TRSF_SRGB) != 0;
	td.normalizedCoords = (pTexDesc->flags & CU_TRSF_NORMALIZED_COORDINATES) != 0;
	td.disableTrilinearOptimization = (pTexDesc->flags & CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION) != 0;
	td.seamlessCubemap = (pTexDesc->flags & CU_TRSF_SEAMLESS_CUBEMAP) != 0;
	td.maxAnisotropy = pTexDesc->maxAnisotropy;
	td.mipmapFilterMode = (enum cudaTextureFilterMode)pTexDesc->mipmapFilterMode;
	td.mipmapLevelBias = pTexDesc->mipmapLevelBias;
	td.minMipmapLevelClamp = pTexDesc->minMipmapLevelClamp;
	td.maxMipmapLevelClamp = pTexDesc->maxMipmapLevelClamp;
	memcpy(td.borderColor, pTexDesc->borderColor, sizeof(td.borderColor));
	r = CU_RUN(cudaCreateTextureObject(&t, &rd, &td, NULL));
	if (r == CUDA_SUCCESS)
		*pTexObject = (CUtexObject)t;
	return r;
}

PHOS_EXPORT CUresult cuTexObjectDestroy(CUtexObject texObject)
{
	NEED_CTX();
	return CU_RUN(cudaDestroyTextureObject((cudaTextureObject_t)texObject));
}

PHOS_EXPORT CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc, CUtexObject texObject)
{
	struct cudaResourceDesc rd;
	CUresult r;

	NEED_CTX();
	if (!pResDesc)
		return CUDA_ERROR_INVALID_VALUE;
	r = CU_RUN(cudaGetTextureObjectResourceDesc(&rd, (cudaTextureObject_t)texObject));
	return r == CUDA_SUCCESS ? res_from_rt(&rd, pResDesc) : r;
}

PHOS_EXPORT CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *pTexDesc, CUtexObject texObject)
{
	struct cudaTextureDesc td;
	struct cudaResourceDesc rd;
	CUDA_RESOURCE_DESC cr;
	bool promotable = false;
	CUresult r;

	NEED_CTX();
	if (!pTexDesc)
		return CUDA_ERROR_INVALID_VALUE;
	r = CU_RUN(cudaGetTextureObjectTextureDesc(&td, (cudaTextureObject_t)texObject));
	if (r == CUDA_SUCCESS)
		r = CU_RUN(cudaGetTextureObjectResourceDesc(&rd, (cudaTextureObject_t)texObject));
	if (r == CUDA_SUCCESS && res_from_rt(&rd, &cr) == CUDA_SUCCESS)
		(void)res_to_rt(&cr, &rd, &promotable);
	if (r != CUDA_SUCCESS)
		return r;
	memset(pTexDesc, 0, sizeof(*pTexDesc));
	for (int i = 0; i < 3; i++)
		pTexDesc->addressMode[i] = (CUaddress_mode)td.addressMode[i];
	pTexDesc->filterMode = (CUfilter_mode)td.filterMode;
	/* (READ_AS_INTEGER says something of the formats that are promoted only) */
	pTexDesc->flags = (promotable && td.readMode == cudaReadModeElementType ? CU_TRSF_READ_AS_INTEGER : 0) |
			  (td.sRGB ? CU_TRSF_SRGB : 0) | (td.normalizedCoords ? CU_TRSF_NORMALIZED_COORDINATES : 0) |
			  (td.disableTrilinearOptimization ? CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION : 0) |
			  (td.seamlessCubemap ? CU_TRSF_SEAMLESS_CUBEMAP : 0);
	pTexDesc->maxAnisotropy = td.maxAnisotropy;
	pTexDesc->mipmapFilterMode = (CUfilter_mode)td.mipmapFilterMode;
	pTexDesc->mipmapLevelBias = td.mipmapLevelBias;
	pTexDesc->minMipmapLevelClamp = td.minMipmapLevelClamp;
	pTexDesc->maxMipmapLevelClamp = td.maxMipmapLevelClamp;
	memcpy(pTexDesc->borderColor, td.borderColor, sizeof(pTexDesc->borderColor));
	return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuSurfObjectCreate(CUsurfObject *pSurfObject, const CUDA_RESOURCE_DESC *pResDesc)
{
	struct cudaResourceDesc rd;
	cudaSurfaceObject_t s = 0;
	bool promotable;
	CUresult r;

	NEED_CTX();
	if (!pSurfObject || !pResDesc)
		return CUDA_ERROR_INVALID_VALUE;
	if (pResDesc->resType != CU_RESOURCE_TYPE_ARRAY)
		return CUDA_ERROR_INVALID_VALUE;   /* surfaces are of arrays */
	r = res_to_rt(pResDesc, &rd, &promotable);
	if (r == CUDA_SUCCESS)
		r = CU_RUN(cudaCreateSurfaceObject(&s, &rd));
	if (r == CUDA_SUCCESS)
		*pSurfObject = (CUsurfObject)s;
	return r;
}

PHOS_EXPORT CUresult cuSurfObjectDestroy(CUsurfObject surfObject)
{
	NEED_CTX();
	return CU_RUN(cudaDestroySurfaceObject((cudaSurfaceObject_t)surfObject));
}

PHOS_EXPORT CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc, CUsurfObject surfObject)
{
	struct cudaResourceDesc rd;
	CUresult r;

	NEED_CTX();
	if (!pResDesc)
		return CUDA_ERROR_INVALID_VALUE;
	r = CU_RUN(cudaGetSurfaceObjectResourceDesc(&rd, (cudaSurfaceObject_t)surfObject));
	return r == CUDA_SUCCESS ? res_from_rt(&rd, pResDesc) : r;
}

/* width elements of `elem` bytes in each of height rows, pitch apart. */
static CUresult memset_2d(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned elem, size_t width, size_t height,
			  CUstream stream, bool async)
{
	uint8_t b = (uint8_t)value;
	bool uniform = elem == 1 || (elem == 2 && (value & 0xffff) == b * 0x0101u) ||
		       (elem == 4 && value == b * 0x01010101u);
	size_t row;
	CUresult r;

	NEED_CTX();
	if (width > SIZE_MAX / elem)
		return CUDA_ERROR_INVALID_VALUE;
	row = width * elem;
	if (height > 1 && pitch < row)
		return CUDA_ERROR_INVALID_VALUE;
	if (uniform)
		return async ? CU_RUN(cudaMemset2DAsync(DPTR(dst), pitch, b, row, height, (cudaStream_t)stream))
			     : CU_RUN(cudaMemset2D(DPTR(dst), pitch, b, row, height));
	if (!height || !row)
		return CUDA_SUCCESS;
	if (pitch % elem)
		return CUDA_ERROR_INVALID_VALUE;   /* every row aligned as the first */
	r = memset_pattern(dst, value, elem, width, async ? stream : NULL);
	for (size_t done = 1; r == CUDA_SUCCESS && done < height; done *= 2) {
		size_t n = done < height - done ? done : height - done;

		r = CU_RUN(cudaMemcpy2DAsync(DPTR(dst + done * pitch), pitch, DPTR(dst), pitch, row, n,
					     cudaMemcpyDeviceToDevice, (cudaStream_t)(async ? stream : NULL)));
	}
	return r;
}

PHOS_EXPORT CUresult cuMemsetD2D8_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
				     size_t Height)
{
	return memset_2d(dstDevice, dstPitch, uc, 1, Width, Height, NULL, false);
}
PHOS_ALIAS(cuMemsetD2D8_v2_ptds, cuMemsetD2D8_v2);

PHOS_EXPORT CUresult cuMemsetD2D16_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
				      size_t Height)
{
	return memset_2d(dstDevice, dstPitch, us, 2, Width, Height, NULL, false);
}
PHOS_ALIAS(cuMemsetD2D16_v2_ptds, cuMemsetD2D16_v2);

PHOS_EXPORT CUresult cuMemsetD2D32_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
				      size_t Height)
{
	return memset_2d(dstDevice, dstPitch, ui, 4, Width, Height, NULL, false);
}
PHOS_ALIAS(cuMemsetD2D32_v2_ptds, cuMemsetD2D32_v2);

PHOS_EXPORT CUresult cuMemsetD2D8Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
				       size_t Height, CUstream hStream)
{
	return memset_2d(dstDevice, dstPitch, uc, 1, Width, Height, hStream, true);
}
PHOS_ALIAS(cuMemsetD2D8Async_ptsz, cuMemsetD2D8Async);

PHOS_EXPORT CUresult cuMemsetD2D16Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned short us, size_t Width,
					size_t Height, CUstream hStream)
{
	return memset_2d(dstDevice, dstPitch, us, 2, Width, Height, hStream, true);
}
PHOS_ALIAS(cuMemsetD2D16Async_ptsz, cuMemsetD2D16Async);

PHOS_EXPORT CUresult cuMemsetD2D32Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
					size_t Height, CUstream hStream)
{
	return memset_2d(dstDevice, dstPitch, ui, 4, Width, Height, hStream, true);
}
PHOS_ALIAS(cuMemsetD2D32Async_ptsz, cuMemsetD2D32Async);

/* CU_MEMHOSTREGISTER_* and cudaHostRegister* share their bits. */
PHOS_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
	NEED_CTX();
	return CU_RUN(cudaHostRegister(p, bytesize, Flags));
}
PHOS_ALIAS(cuMemHostRegister, cuMemHostRegister_v2);

PHOS_EXPORT CUresult cuMemHostUnregister(void *p)
{
	NEED_CTX();
	return CU_RUN(cudaHostUnregister(p));
}

/* --- stream-ordered allocation: the runtime's pools (pool.c), same handles --- */

_Static_assert(sizeof(CUmemPoolProps) == sizeof(struct cudaMemPoolProps), "CUmemPoolProps is cudaMemPoolProps");

PHOS_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	void *p = NULL;
	CUresult r;

	NEED_CTX();
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	r = CU_RUN(cudaMallocAsync(&p, bytesize, (cudaStream_t)hStream));
	if (r == CUDA_SUCCESS)
		*dptr = (CUdeviceptr)(uintptr_t)p;
	return r;
}
PHOS_ALIAS(cuMemAllocAsync_ptsz, cuMemAllocAsync);

PHOS_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
	void *p = NULL;
	CUresult r;

	NEED_CTX();
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	r = CU_RUN(cudaMallocFromPoolAsync(&p, bytesize, (cudaMemPool_t)pool, (cudaStream_t)hStream));
	if (r == CUDA_SUCCESS)
		*dptr = (CUdeviceptr)(uintptr_t)p;
	return r;
}
PHOS_ALIAS(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync);

PHOS_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	NEED_CTX();
	return CU_RUN(cudaFreeAsync(DPTR(dptr), (cudaStream_t)hStream));
}
PHOS_ALIAS(cuMemFreeAsync_ptsz, cuMemFreeAsync);

PHOS_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
	NEED_INIT();
	return CU_RUN(cudaDeviceGetDefaultMemPool((cudaMemPool_t *)pool_out, dev));
}

PHOS_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	NEED_INIT();
	return CU_RUN(cudaDeviceGetMemPool((cudaMemPool_t *)pool, dev));
}

PHOS_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
	NEED_INIT();
	return CU_RUN(cudaDeviceSetMemPool(dev, (cudaMemPool_t)pool));
}

PHOS_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
	NEED_INIT();
	return CU_RUN(cudaMemPoolCreate((cudaMemPool_t *)pool, (const struct cudaMemPoolProps *)poolProps));
}

PHOS_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	NEED_INIT();
	return CU_RUN(cudaMemPoolDestroy((cudaMemPool_t)pool));
}

/* CUmemPool_attribute and cudaMemPoolAttr share their numbers. */
PHOS_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	NEED_INIT();
	return CU_RUN(cudaMemPoolSetAttribute((cudaMemPool_t)pool, (enum cudaMemPoolAttr)attr, value));
}

PHOS_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	NEED_INIT();
	return CU_RUN(cudaMemPoolGetAttribute((cudaMemPool_t)pool, (enum cudaMemPoolAttr)attr, value));
}

PHOS_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	NEED_INIT();
	return CU_RUN(cudaMemPoolTrimTo((cudaMemPool_t)pool, minBytesToKeep));
}

/* The allocation (or module variable) holding dptr, from the executor's buffer table. */
PHOS_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	uint64_t base = 0, size = 0;
	CUresult r;

	NEED_CTX();
	if (!pbase && !psize)
		return CUDA_ERROR_INVALID_VALUE;
	r = CU_RUN(phos_mem_range(dptr, &base, &size));
	if (r == CUDA_ERROR_INVALID_VALUE)
		return CUDA_ERROR_NOT_FOUND;   /* the driver's word for an address in no allocation */
	if (r)
		return r;
	if (pbase)
		*pbase = (CUdeviceptr)base;
	if (psize)
		*psize = (size_t)size;
	return CUDA_SUCCESS;
}

/* --- pointer attributes --- */

static CUresult pointer_attr(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	struct cudaPointerAttributes pa;
	CUresult r = CU_RUN(cudaPointerGetAttributes(&pa, DPTR(ptr)));
	bool known = pa.type == cudaMemoryTypeDevice || pa.type == cudaMemoryTypeHost;

	if (r)
		return r;
	switch (attribute) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		if (!known)
			return CUDA_ERROR_INVALID_VALUE;
		*(CUcontext *)data = CU_PRIMARY_CTX_OF(pa.type == cudaMemoryTypeDevice ? pa.device : phos_current_device());
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		if (!known)
			return CUDA_ERROR_INVALID_VALUE;
		*(unsigned int *)data = pa.type == cudaMemoryTypeDevice ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		if (pa.type == cudaMemoryTypeDevice) {
			*(CUdeviceptr *)data = ptr;
			return CUDA_SUCCESS;
		}
		if (pa.type == cudaMemoryTypeHost) {
			void *d = NULL;

			/* mapped host memory is reached at its own address (docs/compatibility.md) */
			r = CU_RUN(cudaHostGetDevicePointer(&d, DPTR(ptr), 0));
			if (r == CUDA_SUCCESS)
				*(CUdeviceptr *)data = (CUdeviceptr)(uintptr_t)d;
			return r;
		}
		return CUDA_ERROR_INVALID_VALUE;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		if (pa.type != cudaMemoryTypeHost)
			return CUDA_ERROR_INVALID_VALUE;
		*(void **)data = DPTR(ptr);
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
		if (!known)
			return CUDA_ERROR_INVALID_VALUE;
		*(int *)data = 0;   /* managed memory is not forwarded */
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		if (!known)
			return CUDA_ERROR_INVALID_VALUE;
		*(int *)data = pa.type == cudaMemoryTypeDevice ? pa.device : phos_current_device();
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE: {
		uint64_t base = 0, size = 0;

		if (pa.type != cudaMemoryTypeDevice)
			return CUDA_ERROR_INVALID_VALUE;
		r = CU_RUN(phos_mem_range(ptr, &base, &size));
		if (r)
			return r;
		if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR)
			*(CUdeviceptr *)data = (CUdeviceptr)base;
		else
			*(size_t *)data = (size_t)size;
		return CUDA_SUCCESS;
	}
	default: {
		static int logged;

		phos_log_once("CUDA driver API", "cuPointerGetAttribute of this attribute", &logged);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	}
}

PHOS_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	NEED_INIT();
	if (!data || !ptr)
		return CUDA_ERROR_INVALID_VALUE;
	return pointer_attr(data, attribute, ptr);
}

/* CUDA's rules for the many-attribute form: unregistered memory is no error,
 * its memory type reads 0 and its context NULL. */
PHOS_EXPORT CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
					    void **data, CUdeviceptr ptr)
{
	NEED_INIT();
	if (!numAttributes || !attributes || !data)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < numAttributes; i++) {
		CUresult r;

		if (!data[i])
			return CUDA_ERROR_INVALID_VALUE;
		r = pointer_attr(data[i], attributes[i], ptr);
		if (r == CUDA_ERROR_INVALID_VALUE) {
			switch (attributes[i]) {
			case CU_POINTER_ATTRIBUTE_CONTEXT:
			case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
			case CU_POINTER_ATTRIBUTE_HOST_POINTER:
				*(void **)data[i] = NULL;
				break;
			case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
				*(int *)data[i] = -2;
				break;
			default:
				*(unsigned int *)data[i] = 0;
				break;
			}
			r = CUDA_SUCCESS;
		}
		if (r)
			return r;
	}
	return CUDA_SUCCESS;
}

/* --- streams and events: the runtime's handles --- */

PHOS_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	NEED_CTX();
	return CU_RUN(cudaStreamCreateWithFlags((cudaStream_t *)phStream, Flags));
}

PHOS_EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
	NEED_CTX();
	return CU_RUN(cudaStreamCreateWithPriority((cudaStream_t *)phStream, flags, priority));
}

PHOS_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
	NEED_CTX();
	return CU_RUN(cudaStreamDestroy((cudaStream_t)hStream));
}
PHOS_ALIAS(cuStreamDestroy, cuStreamDestroy_v2);

PHOS_EXPORT CUresult cuStreamSynchronize(CUstream hStream)
{
	NEED_CTX();
	return CU_RUN(cudaStreamSynchronize((cudaStream_t)hStream));
}
PHOS_ALIAS(cuStreamSynchronize_ptsz, cuStreamSynchronize);

PHOS_EXPORT CUresult cuStreamQuery(CUstream hStream)
{
	NEED_CTX();
	return CU_RUN(cudaStreamQuery((cudaStream_t)hStream));
}
PHOS_ALIAS(cuStreamQuery_ptsz, cuStreamQuery);

PHOS_EXPORT CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	NEED_CTX();
	return CU_RUN(cudaStreamWaitEvent((cudaStream_t)hStream, (cudaEvent_t)hEvent, Flags));
}
PHOS_ALIAS(cuStreamWaitEvent_ptsz, cuStreamWaitEvent);

PHOS_EXPORT CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
	NEED_CTX();
	return CU_RUN(cudaStreamGetFlags((cudaStream_t)hStream, flags));
}
PHOS_ALIAS(cuStreamGetFlags_ptsz, cuStreamGetFlags);

PHOS_EXPORT CUresult cuStreamGetPriority(CUstream hStream, int *priority)
{
	NEED_CTX();
	return CU_RUN(cudaStreamGetPriority((cudaStream_t)hStream, priority));
}
PHOS_ALIAS(cuStreamGetPriority_ptsz, cuStreamGetPriority);

PHOS_EXPORT CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
	uint32_t id;
	int dev = 0;

	NEED_CTX();
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (phos_preload_stream_id(hStream, &id) || cudaStreamGetDevice((cudaStream_t)hStream, &dev))
		return CUDA_ERROR_INVALID_HANDLE;
	*pctx = CU_PRIMARY_CTX_OF(dev);
	return CUDA_SUCCESS;
}
PHOS_ALIAS(cuStreamGetCtx_ptsz, cuStreamGetCtx);

/* Host functions run on the runtime stand-in's callback thread (callback.c).
 * CUhostFn is cudaHostFn_t; CUstreamCallback differs from cudaStreamCallback_t
 * only in the names of its handle and status types. */
PHOS_EXPORT CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
	NEED_CTX();
	return CU_RUN(cudaLaunchHostFunc((cudaStream_t)hStream, (cudaHostFn_t)fn, userData));
}
PHOS_ALIAS(cuLaunchHostFunc_ptsz, cuLaunchHostFunc);

PHOS_EXPORT CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData,
					 unsigned int flags)
{
	NEED_CTX();
	return CU_RUN(cudaStreamAddCallback((cudaStream_t)hStream, (cudaStreamCallback_t)(void (*)(void))callback,
					    userData, flags));
}
PHOS_ALIAS(cuStreamAddCallback_ptsz, cuStreamAddCallback);

/* CU_EVENT_* and cudaEvent* share their bits. */
PHOS_EXPORT CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	NEED_CTX();
	return CU_RUN(cudaEventCreateWithFlags((cudaEvent_t *)phEvent, Flags));
}

PHOS_EXPORT CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	NEED_CTX();
	return CU_RUN(cudaEventRecord((cudaEvent_t)hEvent, (cudaStream_t)hStream));
}
PHOS_ALIAS(cuEventRecord_ptsz, cuEventRecord);

PHOS_EXPORT CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
	NEED_CTX();
	return CU_RUN(cudaEventRecordWithFlags((cudaEvent_t)hEvent, (cudaStream_t)hStream, flags));
}
PHOS_ALIAS(cuEventRecordWithFlags_ptsz, cuEventRecordWithFlags);

PHOS_EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
	NEED_CTX();
	return CU_RUN(cudaEventSynchronize((cudaEvent_t)hEvent));
}

PHOS_EXPORT CUresult cuEventQuery(CUevent hEvent)
{
	NEED_CTX();
	return CU_RUN(cudaEventQuery((cudaEvent_t)hEvent));
}

PHOS_EXPORT CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	NEED_CTX();
	return CU_RUN(cudaEventElapsedTime(pMilliseconds, (cudaEvent_t)hStart, (cudaEvent_t)hEnd));
}
PHOS_ALIAS(cuEventElapsedTime, cuEventElapsedTime_v2);

PHOS_EXPORT CUresult cuEventDestroy_v2(CUevent hEvent)
{
	NEED_CTX();
	return CU_RUN(cudaEventDestroy((cudaEvent_t)hEvent));
}
PHOS_ALIAS(cuEventDestroy, cuEventDestroy_v2);

/* --- error names --- */

static const struct {
	int value;
	const char *name, *desc;
} errors[] = {
#include "cu_errors_table.h"
};

/* CUDA's own short strings for the common codes (cuda.h's comments are long). */
static const char *short_string(CUresult e)
{
	switch (e) {
	case CUDA_SUCCESS: return "no error";
	case CUDA_ERROR_INVALID_VALUE: return "invalid argument";
	case CUDA_ERROR_OUT_OF_MEMORY: return "out of memory";
	case CUDA_ERROR_NOT_INITIALIZED: return "initialization error";
	case CUDA_ERROR_DEINITIALIZED: return "driver shutting down";
	case CUDA_ERROR_NO_DEVICE: return "no CUDA-capable device is detected";
	case CUDA_ERROR_INVALID_DEVICE: return "invalid device ordinal";
	case CUDA_ERROR_INVALID_IMAGE: return "device kernel image is invalid";
	case CUDA_ERROR_INVALID_CONTEXT: return "invalid device context";
	case CUDA_ERROR_INVALID_HANDLE: return "invalid resource handle";
	case CUDA_ERROR_NOT_FOUND: return "named symbol not found";
	case CUDA_ERROR_NOT_READY: return "device not ready";
	case CUDA_ERROR_NOT_SUPPORTED: return "operation not supported";
	default: return NULL;
	}
}

PHOS_EXPORT CUresult cuGetErrorName(CUresult error, const char **pStr)
{
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].value == (int)error) {
			*pStr = errors[i].name;
			return CUDA_SUCCESS;
		}
	*pStr = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

PHOS_EXPORT CUresult cuGetErrorString(CUresult error, const char **pStr)
{
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = short_string(error);
	if (*pStr)
		return CUDA_SUCCESS;
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].value == (int)error) {
			*pStr = errors[i].desc;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_VALUE;
}
