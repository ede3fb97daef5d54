/* SPDX-License-Identifier: MIT */
/*
 * Launches: kernel<<<g, b, s, st>>>(args) through nvcc's call configuration,
 * cudaLaunchKernel and its Ex, cooperative and cluster forms, the driver
 * API's (phos_launch_args, phos_launch_packed), a kernel's attributes and
 * occupancy. A kernel's registration, its FUNC_INFO and its packed
 * parameters are kernels.c's; a launch on a capturing stream becomes a graph
 * node (graph_capture.c).
 *
 *   kernel<<<g, b, s, st>>>(args):
 *     __cudaPushCallConfiguration(g, b, s, st)
 *     stub: __cudaGetKernel(&h, stub) once; __cudaPopCallConfiguration(...)
 *           __cudaLaunchKernel(h, g, b, args, s, st)
 *   every launch: arguments packed at their offsets, LAUNCH posted.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "kernels.h"
#include "log.h"

#define CONFIG_DEPTH 16

int phos_launch_post(const struct phos_launch_ex *lx, const void *stream, const void *params)
{
	struct phos_launch_ex l = *lx;
	int r = phos_preload_stream_id(stream, &l.l.stream);

	if (r)
		return r;
	if (l.flags)
		return phos_preload_post(PHOS_OP_LAUNCH_EX, &l, sizeof(l), params, l.l.param_bytes);
	return phos_preload_post(PHOS_OP_LAUNCH, &l.l, sizeof(l.l), params, l.l.param_bytes);
}

/* A cooperative grid must be resident at once: CUDA refuses more blocks than
 * the device holds (cudaErrorCooperativeLaunchTooLarge), and so do we, from
 * the same occupancy figure, before anything is sent. */
static int cooperative_check(struct func *f, const struct phos_launch_ex *l)
{
	struct phos_occupancy o = { .func = f->id, .dyn_shared = l->l.shared };
	int32_t per_sm = 0;
	int sms = 0, coop = 0, r;
	size_t len = 0;

	r = phos_device_attr(cudaDevAttrCooperativeLaunch, &coop);
	if (r == cudaSuccess && !coop)
		return cudaErrorNotSupported;
	if (r == cudaSuccess)
		r = phos_device_attr(cudaDevAttrMultiProcessorCount, &sms);
	o.block = (int32_t)((uint64_t)l->l.block[0] * l->l.block[1] * l->l.block[2]);
	if (r == cudaSuccess)
		r = phos_preload_call(PHOS_OP_OCCUPANCY, &o, sizeof(o), NULL, 0, &per_sm, sizeof(per_sm), &len, NULL);
	if (r == cudaSuccess && len != sizeof(per_sm))
		r = cudaErrorUnknown;
	if (r)
		return r;
	if ((uint64_t)l->l.grid[0] * l->l.grid[1] * l->l.grid[2] > (uint64_t)per_sm * (uint64_t)sms)
		return cudaErrorCooperativeLaunchTooLarge;
	return cudaSuccess;
}

/* A launch into a capturing stream whose kernel has no host stub (the
 * driver API's: Triton's, torch.compile's): its record is the node
 * (graph_capture.c, phos_graph_capture_record), posted again at each launch
 * of the graph, on the launch stream. */
static int capture_record(const struct phos_launch_ex *lx, const void *stream, const void *params)
{
	size_t head = lx->flags ? sizeof(*lx) : sizeof(lx->l);
	uint8_t *buf = malloc(head + lx->l.param_bytes);
	int r;

	if (!buf)
		return cudaErrorMemoryAllocation;
	memcpy(buf, lx->flags ? (const void *)lx : (const void *)&lx->l, head);
	memcpy(buf + head, params, lx->l.param_bytes);
	r = phos_graph_capture_record(stream, lx->flags ? PHOS_OP_LAUNCH_EX : PHOS_OP_LAUNCH, buf,
				      head + lx->l.param_bytes,
				      (uint32_t)((lx->flags ? offsetof(struct phos_launch_ex, l) : 0) +
						 offsetof(struct phos_launch, stream)));
	free(buf);
	return r;
}

/* Checks, packs, then captures (stream capturing) or posts the launch. */
static int launch_flags(struct func *f, dim3 grid, dim3 block, void **args, size_t shmem, const void *stream,
			uint32_t flags, const uint32_t cluster[3])
{
	struct phos_reply_func_info fi;
	struct phos_launch_ex l;
	void *params = NULL;
	int r;

	r = phos_func_prepare(f, (const uint32_t[3]){ grid.x, grid.y, grid.z },
			   (const uint32_t[3]){ block.x, block.y, block.z }, shmem, args, &l, &params, &fi);
	if (r)
		return r;
	l.flags = flags;
	if (cluster)
		memcpy(l.cluster, cluster, sizeof(l.cluster));
	if ((flags & PHOS_LAUNCH_CLUSTER) &&
	    (!l.cluster[0] || !l.cluster[1] || !l.cluster[2] || grid.x % l.cluster[0] || grid.y % l.cluster[1] ||
	     grid.z % l.cluster[2]))
		r = cudaErrorInvalidValue; /* the grid must be a whole number of clusters */
	if (r == cudaSuccess && (flags & PHOS_LAUNCH_COOPERATIVE))
		r = cooperative_check(f, &l);
	if (r == cudaSuccess) {
		if (phos_graph_capturing(stream))   /* a driver-API kernel has no host stub: a record node */
			r = f->host ? phos_graph_capture_kernel(stream, f->host, &l, params, fi.offset, fi.nparams)
				    : capture_record(&l, stream, params);
		else
			r = phos_launch_post(&l, stream, params);
	}
	free(params);
	return r;
}

static int launch(struct func *f, dim3 grid, dim3 block, void **args, size_t shmem, const void *stream)
{
	return launch_flags(f, grid, block, args, shmem, stream, 0, NULL);
}

/* A launch whose parameters come packed (cuLaunchKernel's forms, libcuda.c):
 * checked as any launch, then posted, or captured as a record node. */
static int launch_post(const struct func *f, const struct phos_reply_func_info *fi, dim3 grid, dim3 block,
		       const void *params, size_t shmem, const void *stream)
{
	struct phos_launch_ex l = { 0 };
	int max_threads = 1024;

	if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z ||
	    (uint64_t)block.x * block.y * block.z > (uint64_t)(fi->max_threads > 0 ? fi->max_threads : max_threads) ||
	    shmem > UINT32_MAX)
		return cudaErrorInvalidConfiguration;
	l.l.func = f->id;
	l.l.grid[0] = grid.x;
	l.l.grid[1] = grid.y;
	l.l.grid[2] = grid.z;
	l.l.block[0] = block.x;
	l.l.block[1] = block.y;
	l.l.block[2] = block.z;
	l.l.shared = (uint32_t)shmem;
	l.l.param_bytes = fi->param_bytes;
	if (phos_graph_capturing(stream))
		return capture_record(&l, stream, params);
	return phos_launch_post(&l, stream, params);
}

struct call_config {
	dim3 grid, block;
	size_t shmem;
	void *stream;
};

static __thread struct call_config configs[CONFIG_DEPTH];
static __thread unsigned nconfigs;

PHOS_EXPORT unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
						 struct CUstream_st *stream)
{
	if (nconfigs == CONFIG_DEPTH)
		return 1;
	configs[nconfigs].grid = gridDim;
	configs[nconfigs].block = blockDim;
	configs[nconfigs].shmem = sharedMem;
	configs[nconfigs].stream = stream;
	nconfigs++;
	return 0;
}

PHOS_EXPORT cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
						   void *stream)
{
	if (!nconfigs)
		return phos_set_error(cudaErrorMissingConfiguration);
	nconfigs--;
	*gridDim = configs[nconfigs].grid;
	*blockDim = configs[nconfigs].block;
	*sharedMem = configs[nconfigs].shmem;
	*(void **)stream = configs[nconfigs].stream;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
{
	struct func *f = phos_func_of_stub(hostFun);

	if (!kernel)
		return phos_set_error(cudaErrorInvalidValue);
	if (!f)
		return phos_set_error(cudaErrorInvalidDeviceFunction);
	*kernel = phos_handle_wrap(PHOS_H_FUNC, f->id);
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr)
{
	return __cudaGetKernel(kernelPtr, entryFuncAddr);
}

PHOS_EXPORT cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
					   size_t sharedMem, cudaStream_t stream)
{
	return phos_set_error(launch(phos_func_lookup(kernel), gridDim, blockDim, args, sharedMem, stream));
}

PHOS_EXPORT cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
					 size_t sharedMem, cudaStream_t stream)
{
	return phos_set_error(launch(phos_func_lookup(func), gridDim, blockDim, args, sharedMem, stream));
}

static int launch_ex(const cudaLaunchConfig_t *config, const void *func, void **args)
{
	uint32_t flags = 0, cluster[3] = { 0 };

	if (!config || (config->numAttrs && !config->attrs))
		return cudaErrorInvalidValue;
	for (unsigned i = 0; i < config->numAttrs; i++) {
		int r = phos_launch_attr_apply(config->attrs[i].id, &config->attrs[i].val, &flags, cluster);

		if (r)
			return r;
	}
	return launch_flags(phos_func_lookup(func), config->gridDim, config->blockDim, args, config->dynamicSmemBytes,
			    config->stream, flags, cluster);
}

PHOS_EXPORT cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
	return phos_set_error(launch_ex(config, func, args));
}

PHOS_EXPORT cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
						    size_t sharedMem, cudaStream_t stream)
{
	return phos_set_error(launch_flags(phos_func_lookup(func), gridDim, blockDim, args, sharedMem, stream,
					   PHOS_LAUNCH_COOPERATIVE, NULL));
}

/* --- kernel attributes and occupancy --- */

static int func_get(const void *func, struct func **ret_f, struct phos_reply_func_info *ret_info)
{
	struct func *f = phos_func_lookup(func);
	int r = phos_preload_connect();

	if (r)
		return r;
	if (!f)
		return cudaErrorInvalidDeviceFunction;
	*ret_f = f;
	return ret_info ? phos_func_info(f, ret_info) : cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
	struct phos_reply_func_info fi;
	struct func *f;
	int r;

	if (!attr)
		return phos_set_error(cudaErrorInvalidValue);
	r = func_get(func, &f, &fi);
	if (r)
		return phos_set_error(r);
	memset(attr, 0, sizeof(*attr));
	attr->sharedSizeBytes = (size_t)fi.shared_bytes;
	attr->constSizeBytes = (size_t)fi.const_bytes;
	attr->localSizeBytes = (size_t)fi.local_bytes;
	attr->maxThreadsPerBlock = fi.max_threads;
	attr->numRegs = fi.num_regs;
	attr->ptxVersion = fi.ptx_version;
	attr->binaryVersion = fi.binary_version;
	attr->maxDynamicSharedSizeBytes = fi.max_dynamic_shared;
	attr->preferredShmemCarveout = fi.carveout;
	attr->clusterDimMustBeSet = fi.cluster_must_be_set;
	attr->requiredClusterWidth = fi.cluster_dim[0];
	attr->requiredClusterHeight = fi.cluster_dim[1];
	attr->requiredClusterDepth = fi.cluster_dim[2];
	attr->nonPortableClusterSizeAllowed = fi.cluster_non_portable;
	attr->clusterSchedulingPolicyPreference = fi.cluster_policy;
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
	struct phos_func_attr a = { .attr = (int32_t)attr, .value = value };
	struct func *f;
	int r = func_get(func, &f, NULL);

	if (r)
		return phos_set_error(r);
	r = phos_func_ensure(f);
	if (r)
		return phos_set_error(r);
	a.func = f->id;
	/* Synchronous, so that a refused value is this call's error. */
	r = phos_preload_call(PHOS_OP_FUNC_SET_ATTR, &a, sizeof(a), NULL, 0, NULL, 0, NULL, NULL);
	if (r == cudaSuccess)
		__atomic_store_n(&f->have_info, false, __ATOMIC_RELEASE); /* limits changed */
	return phos_set_error(r);
}

/* Cache preferences are hints: accepted for a known kernel, not forwarded. */
PHOS_EXPORT cudaError_t cudaFuncSetCacheConfig(const void *func, enum cudaFuncCache cacheConfig)
{
	struct func *f;

	return phos_set_error(func_get(func, &f, NULL));
}

PHOS_EXPORT cudaError_t cudaFuncGetName(const char **name, const void *func)
{
	struct func *f;
	int r;

	if (!name)
		return phos_set_error(cudaErrorInvalidValue);
	r = func_get(func, &f, NULL);
	if (r == cudaSuccess)
		*name = f->name;
	return phos_set_error(r);
}

PHOS_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, const void *func,
									   int blockSize, size_t dynamicSMemSize,
									   unsigned int flags)
{
	struct phos_occupancy o = { .block = blockSize, .dyn_shared = dynamicSMemSize };
	struct func *f;
	int32_t blocks = 0;
	size_t len = 0;
	int r;

	if (!numBlocks || blockSize <= 0)
		return phos_set_error(cudaErrorInvalidValue);
	r = func_get(func, &f, NULL);
	if (r)
		return phos_set_error(r);
	r = phos_func_ensure(f);
	if (r)
		return phos_set_error(r);
	o.func = f->id;
	r = phos_preload_call(PHOS_OP_OCCUPANCY, &o, sizeof(o), NULL, 0, &blocks, sizeof(blocks), &len, NULL);
	if (r == cudaSuccess && len != sizeof(blocks))
		r = cudaErrorUnknown;
	if (r == cudaSuccess)
		*numBlocks = blocks;
	return phos_set_error(r);
}

static int occupancy_cluster(int *ret, const void *func, const cudaLaunchConfig_t *config, bool potential)
{
	struct phos_occupancy_cluster o = { .potential = potential };
	uint32_t flags = 0;
	struct func *f;
	int32_t n = 0;
	size_t len = 0;
	int r;

	if (!ret || !config || (config->numAttrs && !config->attrs))
		return cudaErrorInvalidValue;
	for (unsigned i = 0; i < config->numAttrs; i++) {
		r = phos_launch_attr_apply(config->attrs[i].id, &config->attrs[i].val, &flags, o.cluster);
		if (r)
			return r;
	}
	r = func_get(func, &f, NULL);
	if (r)
		return r;
	r = phos_func_ensure(f);
	if (r)
		return r;
	o.func = f->id;
	o.grid[0] = config->gridDim.x;
	o.grid[1] = config->gridDim.y;
	o.grid[2] = config->gridDim.z;
	o.block[0] = config->blockDim.x;
	o.block[1] = config->blockDim.y;
	o.block[2] = config->blockDim.z;
	if (config->dynamicSmemBytes > UINT32_MAX)
		return cudaErrorInvalidValue;
	o.shared = (uint32_t)config->dynamicSmemBytes;
	r = phos_preload_call(PHOS_OP_OCCUPANCY_CLUSTER, &o, sizeof(o), NULL, 0, &n, sizeof(n), &len, NULL);
	if (r == cudaSuccess && len != sizeof(n))
		r = cudaErrorUnknown;
	if (r == cudaSuccess)
		*ret = n;
	return r;
}

PHOS_EXPORT cudaError_t cudaOccupancyMaxActiveClusters(int *numClusters, const void *func,
						       const cudaLaunchConfig_t *launchConfig)
{
	return phos_set_error(occupancy_cluster(numClusters, func, launchConfig, false));
}

PHOS_EXPORT cudaError_t cudaOccupancyMaxPotentialClusterSize(int *clusterSize, const void *func,
							     const cudaLaunchConfig_t *launchConfig)
{
	return phos_set_error(occupancy_cluster(clusterSize, func, launchConfig, true));
}

PHOS_EXPORT cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func,
								      int blockSize, size_t dynamicSMemSize)
{
	return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize,
								      cudaOccupancyDefault);
}

/* Shared memory left per block when numBlocks blocks share an SM, from the
 * device's limits and the kernel's static use (the driver's rule). */
PHOS_EXPORT cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, const void *func,
								  int numBlocks, int blockSize)
{
	struct phos_reply_func_info fi;
	struct func *f;
	int per_sm = 0, optin = 0, reserved = 0, r;
	int64_t avail;

	if (!dynamicSmemSize || numBlocks <= 0 || blockSize <= 0)
		return phos_set_error(cudaErrorInvalidValue);
	r = func_get(func, &f, &fi);
	if (r == cudaSuccess)
		r = phos_device_attr(cudaDevAttrMaxSharedMemoryPerMultiprocessor, &per_sm);
	if (r == cudaSuccess)
		r = phos_device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin, &optin);
	if (r == cudaSuccess)
		r = phos_device_attr(cudaDevAttrReservedSharedMemoryPerBlock, &reserved);
	if (r)
		return phos_set_error(r);
	avail = (int64_t)per_sm / numBlocks - reserved - fi.shared_bytes;
	if (avail > (int64_t)optin - fi.shared_bytes)
		avail = (int64_t)optin - fi.shared_bytes;
	if (avail > fi.max_dynamic_shared && fi.max_dynamic_shared > 0)
		avail = fi.max_dynamic_shared;
	*dynamicSmemSize = avail > 0 ? (size_t)avail : 0;
	return cudaSuccess;
}

#define DIM3(v) ((dim3){ (v)[0], (v)[1], (v)[2] })

PHOS_EXPORT int phos_launch_args(const void *func, const uint32_t grid[3], const uint32_t block[3], void **args,
				 size_t shmem, const void *stream)
{
	return launch(phos_func_lookup(func), DIM3(grid), DIM3(block), args, shmem, stream);
}

PHOS_EXPORT int phos_launch_packed(const void *func, const uint32_t grid[3], const uint32_t block[3],
				   const void *params, size_t len, size_t shmem, const void *stream)
{
	struct phos_reply_func_info fi;
	struct func *f = phos_func_lookup(func);
	int r;

	if (!f)
		return phos_preload_connect() ? phos_preload_connect() : cudaErrorInvalidDeviceFunction;
	r = phos_func_info(f, &fi);
	if (r)
		return r;
	/* The buffer is exactly the kernel's parameters: a longer one (the
	 * struct's size padded to 8 for a 28-byte layout) was refused on an H100
	 * with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES. */
	if (len > fi.param_bytes)
		return cudaErrorLaunchOutOfResources;
	if (len < fi.param_bytes || (fi.param_bytes && !params))
		return cudaErrorInvalidValue;
	return launch_post(f, &fi, DIM3(grid), DIM3(block), params, shmem, stream);
}
