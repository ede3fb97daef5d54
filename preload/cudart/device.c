/* SPDX-License-Identifier: MIT */
/*
 * Devices: count and selection, properties and attributes (one DEVICE_INFO per
 * device, cached), synchronisation, reset, versions, flags and limits.
 *
 * The executor serves the GPUs it was given (phos-executor --gpu N: one,
 * --gpus A,B,...: several), and HELLO reports how many: the program sees them
 * as devices 0, 1, ..., as a container given those GPUs sees them. Selecting
 * any other is cudaErrorInvalidDevice. The device is per host thread; the
 * channel tells the executor when a record comes from a thread on another
 * device than the last one (conn.c, PHOS_OP_SET_DEVICE).
 *
 * Peer access: the executor lets every device reach every other's arena
 * memory when the hardware allows (HELLO's PHOS_HELLO_PEERS), so enabling it
 * here is bookkeeping, checked as CUDA checks it, and a peer copy is a copy
 * between unified addresses.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "internal.h"
#include "log.h"

#define MAX_DEVICES 16

static unsigned device_flags;

PHOS_EXPORT cudaError_t cudaGetDeviceCount(int *count)
{
	int r;

	if (!count)
		return phos_set_error(cudaErrorInvalidValue);
	r = phos_device_count(count);
	if (r)
		*count = 0;
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaSetDevice(int device)
{
	int r = phos_device_check(device);

	if (r == cudaSuccess)
		phos_current_device_set(device);
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaGetDevice(int *device)
{
	int r;

	if (!device)
		return phos_set_error(cudaErrorInvalidValue);
	r = phos_preload_connect();
	if (r == cudaSuccess)
		*device = phos_current_device();
	return phos_set_error(r);
}

/* Peers enabled: bit p of peers_on[d] (device d reaches device p). */
static unsigned peers_on[MAX_DEVICES];

static int peer_check(int device, int peer)
{
	int r = phos_device_check(device);

	if (r == cudaSuccess)
		r = phos_device_check(peer);
	return r;
}

PHOS_EXPORT cudaError_t cudaDeviceCanAccessPeer(int *canAccessPeer, int device, int peerDevice)
{
	int r;

	if (!canAccessPeer)
		return phos_set_error(cudaErrorInvalidValue);
	r = peer_check(device, peerDevice);
	if (r == cudaSuccess)
		*canAccessPeer = device != peerDevice && (phos_preload_hello()->flags & PHOS_HELLO_PEERS);
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
	int can = 0, r;

	if (flags)
		return phos_set_error(cudaErrorInvalidValue);
	r = peer_check(phos_current_device(), peerDevice);
	if (r)
		return phos_set_error(r);
	if (peerDevice == phos_current_device())
		return phos_set_error(cudaErrorInvalidDevice);
	cudaDeviceCanAccessPeer(&can, phos_current_device(), peerDevice);
	if (!can)
		return phos_set_error(cudaErrorPeerAccessUnsupported);
	if (__atomic_fetch_or(&peers_on[phos_current_device()], 1u << peerDevice, __ATOMIC_RELAXED) & (1u << peerDevice))
		return phos_set_error(cudaErrorPeerAccessAlreadyEnabled);
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaDeviceDisablePeerAccess(int peerDevice)
{
	int r = peer_check(phos_current_device(), peerDevice);

	if (r)
		return phos_set_error(r);
	if (!(__atomic_fetch_and(&peers_on[phos_current_device()], ~(1u << peerDevice), __ATOMIC_RELAXED) &
	      (1u << peerDevice)))
		return phos_set_error(cudaErrorPeerAccessNotEnabled);
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t count,
					    cudaStream_t stream)
{
	int r = peer_check(dstDevice, srcDevice);

	if (r)
		return phos_set_error(r);
	return cudaMemcpyAsync(dst, src, count, cudaMemcpyDeviceToDevice, stream);
}

PHOS_EXPORT cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice, size_t count)
{
	int r = peer_check(dstDevice, srcDevice);

	if (r)
		return phos_set_error(r);
	return cudaMemcpy(dst, src, count, cudaMemcpyDeviceToDevice);
}

PHOS_EXPORT cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags)
{
	return phos_set_error(phos_device_check(device));
}

static void fill_prop(struct cudaDeviceProp *p, const struct phos_reply_device *di)
{
	const int32_t *a = di->attr;

	memset(p, 0, sizeof(*p));
	memcpy(p->name, di->name, sizeof(p->name) < sizeof(di->name) ? sizeof(p->name) : sizeof(di->name));
	p->name[sizeof(p->name) - 1] = '\0';
	memcpy(&p->uuid, di->uuid, sizeof(p->uuid) < sizeof(di->uuid) ? sizeof(p->uuid) : sizeof(di->uuid));
	p->totalGlobalMem = di->total_mem;
	p->sharedMemPerBlock = (size_t)a[cudaDevAttrMaxSharedMemoryPerBlock];
	p->regsPerBlock = a[cudaDevAttrMaxRegistersPerBlock];
	p->warpSize = a[cudaDevAttrWarpSize];
	p->memPitch = (size_t)a[cudaDevAttrMaxPitch];
	p->maxThreadsPerBlock = a[cudaDevAttrMaxThreadsPerBlock];
	p->maxThreadsDim[0] = a[cudaDevAttrMaxBlockDimX];
	p->maxThreadsDim[1] = a[cudaDevAttrMaxBlockDimY];
	p->maxThreadsDim[2] = a[cudaDevAttrMaxBlockDimZ];
	p->maxGridSize[0] = a[cudaDevAttrMaxGridDimX];
	p->maxGridSize[1] = a[cudaDevAttrMaxGridDimY];
	p->maxGridSize[2] = a[cudaDevAttrMaxGridDimZ];
	p->totalConstMem = (size_t)a[cudaDevAttrTotalConstantMemory];
	p->major = a[cudaDevAttrComputeCapabilityMajor];
	p->minor = a[cudaDevAttrComputeCapabilityMinor];
	p->textureAlignment = (size_t)a[cudaDevAttrTextureAlignment];
	p->texturePitchAlignment = (size_t)a[cudaDevAttrTexturePitchAlignment];
	p->multiProcessorCount = a[cudaDevAttrMultiProcessorCount];
	p->integrated = a[cudaDevAttrIntegrated];
	p->canMapHostMemory = a[cudaDevAttrCanMapHostMemory];
	p->maxTexture1D = a[cudaDevAttrMaxTexture1DWidth];
	p->maxTexture2D[0] = a[cudaDevAttrMaxTexture2DWidth];
	p->maxTexture2D[1] = a[cudaDevAttrMaxTexture2DHeight];
	p->maxTexture3D[0] = a[cudaDevAttrMaxTexture3DWidth];
	p->maxTexture3D[1] = a[cudaDevAttrMaxTexture3DHeight];
	p->maxTexture3D[2] = a[cudaDevAttrMaxTexture3DDepth];
	p->surfaceAlignment = (size_t)a[cudaDevAttrSurfaceAlignment];
	p->concurrentKernels = a[cudaDevAttrConcurrentKernels];
	p->ECCEnabled = a[cudaDevAttrEccEnabled];
	p->pciBusID = a[cudaDevAttrPciBusId];
	p->pciDeviceID = a[cudaDevAttrPciDeviceId];
	p->pciDomainID = a[cudaDevAttrPciDomainId];
	p->tccDriver = a[cudaDevAttrTccDriver];
	p->asyncEngineCount = a[cudaDevAttrAsyncEngineCount];
	p->unifiedAddressing = a[cudaDevAttrUnifiedAddressing];
	p->memoryBusWidth = a[cudaDevAttrGlobalMemoryBusWidth];
	p->l2CacheSize = a[cudaDevAttrL2CacheSize];
	p->persistingL2CacheMaxSize = a[cudaDevAttrMaxPersistingL2CacheSize];
	p->maxThreadsPerMultiProcessor = a[cudaDevAttrMaxThreadsPerMultiProcessor];
	p->streamPrioritiesSupported = a[cudaDevAttrStreamPrioritiesSupported];
	p->globalL1CacheSupported = a[cudaDevAttrGlobalL1CacheSupported];
	p->localL1CacheSupported = a[cudaDevAttrLocalL1CacheSupported];
	p->sharedMemPerMultiprocessor = (size_t)a[cudaDevAttrMaxSharedMemoryPerMultiprocessor];
	p->regsPerMultiprocessor = a[cudaDevAttrMaxRegistersPerMultiprocessor];
	/* Managed memory (memory.c) is one coherent mapping for host and device:
	 * either side may touch it while the other runs, as cudaDeviceGetAttribute
	 * says too. Pageable memory is not reachable from kernels. */
	p->managedMemory = 1;
	p->isMultiGpuBoard = a[cudaDevAttrIsMultiGpuBoard];
	p->multiGpuBoardGroupID = a[cudaDevAttrMultiGpuBoardGroupID];
	p->hostNativeAtomicSupported = a[cudaDevAttrHostNativeAtomicSupported];
	p->pageableMemoryAccess = 0;
	p->concurrentManagedAccess = 1;
	p->computePreemptionSupported = a[cudaDevAttrComputePreemptionSupported];
	p->canUseHostPointerForRegisteredMem = 0;
	p->cooperativeLaunch = a[cudaDevAttrCooperativeLaunch];
	p->sharedMemPerBlockOptin = (size_t)a[cudaDevAttrMaxSharedMemoryPerBlockOptin];
	p->maxBlocksPerMultiProcessor = a[cudaDevAttrMaxBlocksPerMultiprocessor];
	p->accessPolicyMaxWindowSize = a[cudaDevAttrMaxAccessPolicyWindowSize];
	p->reservedSharedMemPerBlock = (size_t)a[cudaDevAttrReservedSharedMemoryPerBlock];
	p->hostRegisterSupported = a[cudaDevAttrHostRegisterSupported];
	p->sparseCudaArraySupported = a[cudaDevAttrSparseCudaArraySupported];
	p->memoryPoolsSupported = 1;
	p->memoryPoolSupportedHandleTypes = 0;
	p->gpuDirectRDMASupported = a[cudaDevAttrGPUDirectRDMASupported];
	p->clusterLaunch = a[cudaDevAttrClusterLaunch];
	p->deviceNumaConfig = a[cudaDevAttrNumaConfig];
	p->deviceNumaId = a[cudaDevAttrNumaId];
	p->mpsEnabled = a[cudaDevAttrMpsEnabled];
	p->hostNumaId = a[cudaDevAttrHostNumaId];
	p->gpuPciDeviceID = (unsigned)a[cudaDevAttrGpuPciDeviceId];
	p->gpuPciSubsystemID = (unsigned)a[cudaDevAttrGpuPciSubsystemId];
}

PHOS_EXPORT cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	const struct phos_reply_device *di;
	int r;

	if (!prop)
		return phos_set_error(cudaErrorInvalidValue);
	r = phos_device_info(device, &di);
	if (r == cudaSuccess)
		fill_prop(prop, di);
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
	const struct phos_reply_device *di;
	int r;

	/* cudaDevAttrMax: what this runtime knows; DEVICE_INFO has room for more */
	if (!value || (int)attr < 1 || (int)attr >= (int)cudaDevAttrMax || (int)attr >= PHOS_DEVICE_ATTR_MAX)
		return phos_set_error(cudaErrorInvalidValue);
	r = phos_device_info(device, &di);
	if (r)
		return phos_set_error(r);
	switch (attr) {
	case cudaDevAttrManagedMemory:
	case cudaDevAttrConcurrentManagedAccess:
		*value = 1; /* memory.c: one coherent mapping for host and device */
		break;
	case cudaDevAttrPageableMemoryAccess:
		*value = 0; /* not forwarded */
		break;
	case cudaDevAttrMemoryPoolsSupported:
		*value = 1; /* pool.c, served from the arena */
		break;
	case cudaDevAttrMemoryPoolSupportedHandleTypes:
		*value = 0; /* no IPC handles */
		break;
	default:
		*value = di->attr[attr];
	}
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaDeviceSynchronize(void)
{
	int r = phos_preload_drain_device();

	if (r == cudaSuccess)
		r = phos_preload_call(PHOS_OP_DEVICE_SYNC, NULL, 0, NULL, 0, NULL, 0, NULL, NULL);
	return phos_set_error(r);
}

/* The executor frees everything the function made; we forget our side of it
 * and re-send the modules, which CUDA keeps across a reset. */
/* The limits the function set (cudaDeviceSetLimit, below). */
#define LIMIT_IDS 16
static pthread_mutex_t limits_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t limits_set;
static size_t limit_values[LIMIT_IDS];

PHOS_EXPORT cudaError_t cudaDeviceReset(void)
{
	int r = phos_preload_call(PHOS_OP_DEVICE_RESET, NULL, 0, NULL, 0, NULL, 0, NULL, NULL);

	if (r == cudaSuccess) {
		pthread_mutex_lock(&limits_lock);
		limits_set = 0;
		pthread_mutex_unlock(&limits_lock);
		phos_stream_reset();
		phos_mem_reset();
		phos_pool_reset();
		phos_graph_mem_reset();
		phos_array_reset();
		phos_launch_reset();
	}
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
	if (!runtimeVersion)
		return phos_set_error(cudaErrorInvalidValue);
	*runtimeVersion = CUDART_VERSION;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaDriverGetVersion(int *driverVersion)
{
	if (!driverVersion)
		return phos_set_error(cudaErrorInvalidValue);
	/* HELLO does not carry the driver's version; the toolkit's is a floor. */
	*driverVersion = CUDART_VERSION;
	return cudaSuccess;
}

/*
 * Driver entry points are those of the driver stand-in beside this library
 * (preload/driver/libcuda.c's cuGetProcAddress), never the real driver's: loaded
 * by its path on first use (libcuda needs libcudart, not the other way).
 */
typedef int (*get_proc_fn)(const char *, void **, int, unsigned long long, int *);
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static get_proc_fn driver_get_proc;

static void driver_open(void)
{
	char path[PATH_MAX];
	Dl_info self;
	const char *slash;
	void *lib, *p;

	if (!dladdr((void *)driver_open, &self) || !self.dli_fname || !(slash = strrchr(self.dli_fname, '/')) ||
	    snprintf(path, sizeof(path), "%.*s/libcuda.so.1", (int)(slash - self.dli_fname), self.dli_fname) >=
		    (int)sizeof(path))
		return;
	lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	p = lib ? dlsym(lib, "cuGetProcAddress_v2") : NULL;
	if (!p || !dlsym(lib, "phos_cuda_standin")) {
		phos_warn("the driver stand-in %s cannot be loaded: %s", path, lib ? "not ours" : dlerror());
		return;
	}
	memcpy(&driver_get_proc, &p, sizeof(p));
}

PHOS_EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
							 unsigned long long flags,
							 enum cudaDriverEntryPointQueryResult *driverStatus)
{
	int status = cudaDriverEntryPointSymbolNotFound, r;

	if (!symbol || !funcPtr)
		return phos_set_error(cudaErrorInvalidValue);
	pthread_once(&driver_once, driver_open);
	if (!driver_get_proc)
		return phos_set_error(cudaErrorNotSupported);
	r = driver_get_proc(symbol, funcPtr, (int)cudaVersion, flags, &status);
	if (driverStatus)
		*driverStatus = (enum cudaDriverEntryPointQueryResult)status;
	/* the runtime reports a missing symbol in the status, not as an error */
	return r == 0 || r == 500 /* CUDA_ERROR_NOT_FOUND */ ? cudaSuccess : phos_set_error(cudaErrorInvalidValue);
}
PHOS_ALIAS(cudaGetDriverEntryPointByVersion_ptsz, cudaGetDriverEntryPointByVersion);

/* Deprecated in CUDA 13 but still exported, so still served. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
PHOS_EXPORT cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
						enum cudaDriverEntryPointQueryResult *driverStatus)
{
	/* the version this runtime was built for, as CUDA's does */
	return cudaGetDriverEntryPointByVersion(symbol, funcPtr, CUDART_VERSION, flags, driverStatus);
}
PHOS_ALIAS(cudaGetDriverEntryPoint_ptsz, cudaGetDriverEntryPoint);
#pragma GCC diagnostic pop

PHOS_EXPORT cudaError_t cudaSetDeviceFlags(unsigned int flags)
{
	int r = phos_preload_connect();

	if (r == cudaSuccess)
		__atomic_store_n(&device_flags, flags, __ATOMIC_RELAXED);
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaGetDeviceFlags(unsigned int *flags)
{
	int r;

	if (!flags)
		return phos_set_error(cudaErrorInvalidValue);
	r = phos_preload_connect();
	if (r == cudaSuccess)
		*flags = __atomic_load_n(&device_flags, __ATOMIC_RELAXED) | cudaDeviceMapHost;
	return phos_set_error(r);
}

/* Limits live in the executor's context (cuCtxSetLimit / cuCtxGetLimit), which
 * puts them back when the function is done; the driver checks, rounds and caps
 * the values. The values the function set are kept here (bit i of limits_set:
 * cudaLimit i, declared with the device's state above) and set again in a
 * restored executor (phos_device_limits_resend): a snapshot does not carry them. */

static int device_limit(enum cudaLimit limit, bool set, size_t value, size_t *ret_value)
{
	struct phos_device_limit l = { .limit = (int32_t)limit, .set = set, .value = value };
	uint64_t now = 0;
	size_t len = 0;
	int r;

	/* an id CUDA does not know is an invalid value, not an unsupported
	 * limit (cudaDeviceGetLimit of 0x40 on an H100) */
	if ((int)limit < 0)
		return cudaErrorInvalidValue;
	r = phos_preload_call(PHOS_OP_DEVICE_LIMIT, &l, sizeof(l), NULL, 0, &now, sizeof(now), &len, NULL);
	if (r)
		return r;
	if (len != sizeof(now))
		return cudaErrorUnknown;
	if (ret_value)
		*ret_value = (size_t)now;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value)
{
	int r = device_limit(limit, true, value, NULL);

	if (r == cudaSuccess && (unsigned)limit < LIMIT_IDS) {
		pthread_mutex_lock(&limits_lock);
		limits_set |= 1u << limit;
		limit_values[limit] = value;
		pthread_mutex_unlock(&limits_lock);
	}
	return phos_set_error(r);
}

int phos_device_limits_resend(void)
{
	int r = cudaSuccess;

	pthread_mutex_lock(&limits_lock);
	for (unsigned i = 0; i < LIMIT_IDS && r == cudaSuccess; i++)
		if (limits_set & (1u << i))
			r = device_limit((enum cudaLimit)i, true, limit_values[i], NULL);
	pthread_mutex_unlock(&limits_lock);
	return r;
}

PHOS_EXPORT cudaError_t cudaDeviceGetLimit(size_t *pValue, enum cudaLimit limit)
{
	if (!pValue)
		return phos_set_error(cudaErrorInvalidValue);
	return phos_set_error(device_limit(limit, false, 0, pValue));
}

PHOS_EXPORT cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
	int r = phos_preload_connect();

	if (r)
		return phos_set_error(r);
	/* The range of every GPU since Volta. */
	if (leastPriority)
		*leastPriority = 0;
	if (greatestPriority)
		*greatestPriority = -5;
	return cudaSuccess;
}

PHOS_EXPORT struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w,
								enum cudaChannelFormatKind f)
{
	struct cudaChannelFormatDesc d = { .x = x, .y = y, .z = z, .w = w, .f = f };

	return d;
}

/* What a restored connection does (conn.c): the function's limits set again. */
__attribute__((constructor)) static void device_steps_init(void)
{
	phos_restore_steps[PHOS_STEP_LIMITS] = phos_device_limits_resend;
}
