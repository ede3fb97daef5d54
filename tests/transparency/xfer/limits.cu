// SPDX-License-Identifier: MIT
// Device attributes, limits and kernel attributes as a program reads and sets
// them: cudaDeviceGetAttribute agrees with cudaGetDeviceProperties, the
// persisting-L2 limit round-trips (capped by the device), and
// cudaFuncSetAttribute / cudaFuncGetAttributes accept what an H100 accepts and
// refuse the rest. Exits 1 on a wrong answer.
//
//   limits [phos]
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

__global__ void xfer_attr_kernel(float *x)
{
	extern __shared__ float s[];
	s[threadIdx.x] = x[threadIdx.x];
	__syncthreads();
	x[threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
}

static int failures;
#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                      \
			fprintf(stderr, "\n");                             \
			failures++;                                        \
		}                                                          \
	} while (0)
#define OK(call)                                                                                  \
	do {                                                                                      \
		cudaError_t e_ = (call);                                                          \
		if (e_ != cudaSuccess) {                                                          \
			fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call,       \
				cudaGetErrorName(e_));                                             \
			exit(1);                                                                  \
		}                                                                                 \
	} while (0)
#define ERR(call, want)                                                                            \
	do {                                                                                       \
		cudaError_t e_ = (call);                                                           \
		CHECK(e_ == (want), "%s = %s, want %s", #call, cudaGetErrorName(e_), cudaGetErrorName(want)); \
		cudaGetLastError();                                                                \
	} while (0)

static int attr(cudaDeviceAttr a)
{
	int v = -12345;
	OK(cudaDeviceGetAttribute(&v, a, 0));
	return v;
}

int main(int argc, char **argv)
{
	/* "phos": also check what phos-fn promises beyond CUDA */
	const bool phos = argc > 1 && strcmp(argv[1], "phos") == 0;
	cudaDeviceProp p;
	OK(cudaGetDeviceProperties(&p, 0));

	/* attributes and properties agree, and say a Hopper-class device */
	CHECK(attr(cudaDevAttrWarpSize) == p.warpSize && p.warpSize == 32, "warp size %d", p.warpSize);
	CHECK(attr(cudaDevAttrMaxThreadsPerBlock) == p.maxThreadsPerBlock && p.maxThreadsPerBlock == 1024, "threads");
	CHECK(attr(cudaDevAttrMultiProcessorCount) == p.multiProcessorCount && p.multiProcessorCount > 0, "SMs");
	CHECK(attr(cudaDevAttrComputeCapabilityMajor) == p.major && p.major >= 9, "major %d", p.major);
	CHECK(attr(cudaDevAttrMaxSharedMemoryPerBlockOptin) == (int)p.sharedMemPerBlockOptin &&
	      p.sharedMemPerBlockOptin > p.sharedMemPerBlock, "opt-in shared %zu", p.sharedMemPerBlockOptin);
	CHECK(attr(cudaDevAttrL2CacheSize) == p.l2CacheSize && p.l2CacheSize > 0, "L2 %d", p.l2CacheSize);
	CHECK(attr(cudaDevAttrMaxPersistingL2CacheSize) == p.persistingL2CacheMaxSize &&
	      p.persistingL2CacheMaxSize > 0, "persisting L2 max %d", p.persistingL2CacheMaxSize);
	CHECK(attr(cudaDevAttrMaxAccessPolicyWindowSize) == p.accessPolicyMaxWindowSize &&
	      p.accessPolicyMaxWindowSize > 0, "access policy window %d", p.accessPolicyMaxWindowSize);
	CHECK(attr(cudaDevAttrMaxPitch) == (int)p.memPitch && p.memPitch > 0, "max pitch");
	CHECK(attr(cudaDevAttrClusterLaunch) == p.clusterLaunch && p.clusterLaunch == 1, "cluster launch");
	CHECK(attr(cudaDevAttrMaxBlocksPerMultiprocessor) == p.maxBlocksPerMultiProcessor, "blocks per SM");
	{
		int v;
		ERR(cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, 99), cudaErrorInvalidDevice);
		ERR(cudaDeviceGetAttribute(nullptr, cudaDevAttrWarpSize, 0), cudaErrorInvalidValue);
		ERR(cudaDeviceGetAttribute(&v, (cudaDeviceAttr)0, 0), cudaErrorInvalidValue);
		ERR(cudaDeviceGetAttribute(&v, cudaDevAttrMax, 0), cudaErrorInvalidValue);
	}
	/* a few more that an H100 reports non-zero, which a device table that
	 * forgot them would answer 0 */
	CHECK(attr(cudaDevAttrMaxSurface2DWidth) > 0 && attr(cudaDevAttrMaxTexture2DLayeredWidth) > 0,
	      "surface / layered texture limits");
	CHECK(attr(cudaDevAttrReservedSharedMemoryPerBlock) > 0, "reserved shared memory per block");
	CHECK(attr(cudaDevAttrMaxRegistersPerMultiprocessor) == p.regsPerMultiprocessor && p.regsPerMultiprocessor > 0,
	      "registers per SM");
	CHECK(attr(cudaDevAttrGpuPciDeviceId) != 0, "PCI device id");

	/* limits: the persisting L2 set-aside round-trips and is capped by the device */
	size_t max = (size_t)p.persistingL2CacheMaxSize, v = 1;
	OK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, max / 2));
	OK(cudaDeviceGetLimit(&v, cudaLimitPersistingL2CacheSize));
	CHECK(v > 0 && v <= max, "persisting L2 after setting %zu: %zu", max / 2, v);
	OK(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0));
	OK(cudaDeviceGetLimit(&v, cudaLimitPersistingL2CacheSize));
	CHECK(v == 0, "persisting L2 after setting 0: %zu", v);
	OK(cudaDeviceGetLimit(&v, cudaLimitStackSize));
	CHECK(v > 0, "stack size %zu", v);
	ERR(cudaDeviceGetLimit(nullptr, cudaLimitStackSize), cudaErrorInvalidValue);
	/* an id CUDA does not know: an invalid value, not an unsupported limit (H100) */
	ERR(cudaDeviceGetLimit(&v, (cudaLimit)0x40), cudaErrorInvalidValue);

	/* limits the driver keeps: a bigger stack and heap read back at least as set */
	OK(cudaDeviceSetLimit(cudaLimitStackSize, 4096));
	OK(cudaDeviceGetLimit(&v, cudaLimitStackSize));
	CHECK(v >= 4096, "stack size after setting 4096: %zu", v);
	OK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 64u << 20));
	OK(cudaDeviceGetLimit(&v, cudaLimitMallocHeapSize));
	CHECK(v >= (64u << 20), "malloc heap after setting 64 MiB: %zu", v);

	/* stream attributes: an access policy window, the priority, the sync policy */
	{
		cudaStream_t s;
		int *buf;
		int lo, hi, prio = 1;
		OK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
		OK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, lo));
		OK(cudaMalloc(&buf, 1 << 20));
		cudaStreamAttrValue a = {}, b = {};
		a.accessPolicyWindow.base_ptr = buf;
		a.accessPolicyWindow.num_bytes = 1 << 20;
		a.accessPolicyWindow.hitRatio = 0.6f;
		a.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
		a.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
		OK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &a));
		OK(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &b));
		CHECK(b.accessPolicyWindow.base_ptr == buf && b.accessPolicyWindow.num_bytes == (1 << 20) &&
		      b.accessPolicyWindow.hitRatio == 0.6f &&
		      b.accessPolicyWindow.hitProp == cudaAccessPropertyPersisting &&
		      b.accessPolicyWindow.missProp == cudaAccessPropertyStreaming,
		      "access policy window read back: %p %zu %f %d %d", b.accessPolicyWindow.base_ptr,
		      b.accessPolicyWindow.num_bytes, b.accessPolicyWindow.hitRatio, (int)b.accessPolicyWindow.hitProp,
		      (int)b.accessPolicyWindow.missProp);
		cudaStreamAttrValue bad = a;
		bad.accessPolicyWindow.hitRatio = 1.5f;
		ERR(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &bad), cudaErrorInvalidValue);
		bad = a;
		bad.accessPolicyWindow.num_bytes = (size_t)p.accessPolicyMaxWindowSize + 1;
		ERR(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &bad), cudaErrorInvalidValue);
		OK(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &b));
		CHECK(b.accessPolicyWindow.hitRatio == 0.6f, "a refused window replaced the set one");

		OK(cudaStreamGetAttribute(s, cudaStreamAttributePriority, &b));
		CHECK(b.priority == lo, "priority attribute %d, created with %d", b.priority, lo);
		a = {};
		a.priority = hi;
		OK(cudaStreamSetAttribute(s, cudaStreamAttributePriority, &a));
		OK(cudaStreamGetAttribute(s, cudaStreamAttributePriority, &b));
		OK(cudaStreamGetPriority(s, &prio));
		CHECK(b.priority == hi && prio == hi, "priority after setting %d: attribute %d, cudaStreamGetPriority %d",
		      hi, b.priority, prio);

		a = {};
		a.syncPolicy = cudaSyncPolicyBlockingSync;
		OK(cudaStreamSetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &a));
		OK(cudaStreamGetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &b));
		CHECK(b.syncPolicy == cudaSyncPolicyBlockingSync, "sync policy %d", (int)b.syncPolicy);
		/* Real CUDA does not check the value pointer: natively this call
		 * crashed the program (SIGSEGV on an H100). phos-fn refuses it. */
		if (phos)
			ERR(cudaStreamGetAttribute(s, cudaStreamAttributePriority, nullptr), cudaErrorInvalidValue);

		/* the stream still works */
		OK(cudaMemsetAsync(buf, 1, 1 << 20, s));
		OK(cudaStreamSynchronize(s));
		OK(cudaStreamDestroy(s));
		OK(cudaFree(buf));
	}

	/* kernel attributes */
	cudaFuncAttributes fa;
	OK(cudaFuncGetAttributes(&fa, xfer_attr_kernel));
	CHECK(fa.maxThreadsPerBlock > 0 && fa.maxThreadsPerBlock <= 1024, "kernel max threads %d", fa.maxThreadsPerBlock);
	int optin = (int)p.sharedMemPerBlockOptin - (int)fa.sharedSizeBytes;
	OK(cudaFuncSetAttribute(xfer_attr_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
	OK(cudaFuncGetAttributes(&fa, xfer_attr_kernel));
	CHECK(fa.maxDynamicSharedSizeBytes == optin, "max dynamic shared %d, want %d", fa.maxDynamicSharedSizeBytes, optin);
	ERR(cudaFuncSetAttribute(xfer_attr_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin + 1),
	    cudaErrorInvalidValue);
	OK(cudaFuncGetAttributes(&fa, xfer_attr_kernel));
	CHECK(fa.maxDynamicSharedSizeBytes == optin, "a refused value changed it: %d", fa.maxDynamicSharedSizeBytes);
	OK(cudaFuncSetAttribute(xfer_attr_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 50));
	ERR(cudaFuncSetAttribute(xfer_attr_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, 101),
	    cudaErrorInvalidValue);
	OK(cudaFuncSetAttribute(xfer_attr_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
	OK(cudaFuncSetAttribute(xfer_attr_kernel, cudaFuncAttributeRequiredClusterWidth, 2));
	OK(cudaFuncSetAttribute(xfer_attr_kernel, cudaFuncAttributeRequiredClusterHeight, 1));
	OK(cudaFuncSetAttribute(xfer_attr_kernel, cudaFuncAttributeRequiredClusterDepth, 1));
	OK(cudaFuncGetAttributes(&fa, xfer_attr_kernel));
	CHECK(fa.preferredShmemCarveout == 50, "carveout %d, want 50", fa.preferredShmemCarveout);
	CHECK(fa.nonPortableClusterSizeAllowed == 1, "non-portable cluster size %d", fa.nonPortableClusterSizeAllowed);
	CHECK(fa.requiredClusterWidth == 2 && fa.requiredClusterHeight == 1 && fa.requiredClusterDepth == 1,
	      "required cluster %dx%dx%d, want 2x1x1", fa.requiredClusterWidth, fa.requiredClusterHeight,
	      fa.requiredClusterDepth);

	if (failures) {
		printf("limits: %d failure(s)\n", failures);
		return 1;
	}
	printf("limits: ok\n");
	return 0;
}
