// SPDX-License-Identifier: MIT
//
// A CUDA runtime program that reaches the driver API the way libraries do
// without linking libcuda: through cudaGetDriverEntryPoint(ByVersion). It
// allocates and sets memory through those entry points, runs a kernel on it
// with <<<>>>, reads it back through them, asks a runtime allocation's
// memory type through cuPointerGetAttribute, and checks that a failing
// driver call leaves cudaGetLastError alone.
//
//   entry_point [phos]   "phos": the entry points must be phos-fn's driver
//                        stand-in's exports themselves
//
// Prints "entry_point: ok" and exits 0 when every check passed.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

static int failures;

#define CHECK(cond, ...)                                                           \
	do {                                                                       \
		if (!(cond)) {                                                     \
			fprintf(stderr, "entry_point: %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                              \
			fprintf(stderr, "\n");                                     \
			failures++;                                                \
		}                                                                  \
	} while (0)

#define RT(call)                                                                                \
	do {                                                                                    \
		cudaError_t rt_e_ = (call);                                                     \
		if (rt_e_ != cudaSuccess) {                                                     \
			fprintf(stderr, "entry_point: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
				cudaGetErrorName(rt_e_));                                       \
			return 1;                                                               \
		}                                                                               \
	} while (0)

#define CU(call)                                                                                   \
	do {                                                                                       \
		CUresult cu_e_ = (call);                                                           \
		if (cu_e_ != CUDA_SUCCESS) {                                                       \
			fprintf(stderr, "entry_point: %s:%d: %s: %d\n", __FILE__, __LINE__, #call, (int)cu_e_); \
			return 1;                                                                  \
		}                                                                                  \
	} while (0)

__global__ void ep_scale(int *p, int k, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] *= k;
}

enum { N = 4096 };

int main(int argc, char **argv)
{
	bool phos = argc > 1 && !strcmp(argv[1], "phos");
	PFN_cuMemAlloc_v3020 alloc;
	PFN_cuMemsetD32_v3020 set32;
	PFN_cuMemcpyDtoH_v3020 dtoh;
	PFN_cuMemFree_v3020 mfree;
	PFN_cuPointerGetAttribute_v4000 ptr_attr;
	cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
	void *p = NULL, *rt = NULL;
	CUdeviceptr d;
	static int host[N];
	unsigned type = 0;

	RT(cudaFree(0));   // the runtime initialises the driver and the primary context
	RT(cudaGetDriverEntryPointByVersion("cuMemAlloc", (void **)&alloc, 13000, cudaEnableDefault, &q));
	CHECK(q == cudaDriverEntryPointSuccess && alloc, "cuMemAlloc: status %d", (int)q);
	RT(cudaGetDriverEntryPointByVersion("cuMemsetD32", (void **)&set32, 13000, cudaEnableDefault, &q));
	RT(cudaGetDriverEntryPointByVersion("cuMemcpyDtoH", (void **)&dtoh, 13000, cudaEnableDefault, &q));
	RT(cudaGetDriverEntryPointByVersion("cuMemFree", (void **)&mfree, 13000, cudaEnableDefault, &q));
	RT(cudaGetDriverEntryPointByVersion("cuPointerGetAttribute", (void **)&ptr_attr, 13000, cudaEnableDefault, &q));
	// a missing entry point is told by the status (phos-fn returns cudaSuccess;
	// the call's own code is not checked natively), and leaves no error behind
	cudaError_t miss = cudaGetDriverEntryPointByVersion("cuNoSuchEntryPoint", &p, 13000, cudaEnableDefault, &q);
	CHECK(q == cudaDriverEntryPointSymbolNotFound && !p, "a missing entry point: status %d, %p", (int)q, p);
	if (phos)
		CHECK(miss == cudaSuccess, "a missing entry point: %s", cudaGetErrorName(miss));
	(void)cudaGetLastError();

	CU(alloc(&d, sizeof(host)));
	CU(set32(d, 3, N));
	ep_scale<<<N / 256, 256>>>((int *)d, 5, N);
	RT(cudaGetLastError());
	RT(cudaDeviceSynchronize());
	CU(dtoh(host, d, sizeof(host)));
	for (int i = 0; i < N; i++)
		if (host[i] != 15) {
			CHECK(0, "element %d = %d, want 15", i, host[i]);
			break;
		}
	CU(mfree(d));

	RT(cudaMalloc(&rt, 256));
	CU(ptr_attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)rt));
	CHECK(type == CU_MEMORYTYPE_DEVICE, "a cudaMalloc'd pointer has memory type %u", type);
	RT(cudaFree(rt));

	// a driver error is the driver call's alone
	CHECK(alloc(&d, 0) != CUDA_SUCCESS, "cuMemAlloc of 0 bytes succeeded");
	CHECK(cudaGetLastError() == cudaSuccess, "a failed driver call set the runtime's last error");

	if (phos) {
		void *ours = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");

		CHECK(ours && (void *)alloc == ours, "cuMemAlloc is %p, the stand-in's cuMemAlloc_v2 %p", (void *)alloc,
		      ours);
	}
	if (failures) {
		fprintf(stderr, "entry_point: %d checks failed\n", failures);
		return 1;
	}
	printf("entry_point: ok\n");
	return 0;
}
