// SPDX-License-Identifier: MIT
// Mapped (zero-copy) host memory as a user writes it: cudaHostAlloc with
// cudaHostAllocMapped and cudaHostRegister with cudaHostRegisterMapped; a
// kernel writes host memory through the pointer cudaHostGetDevicePointer gives
// and (unified addressing) through the host pointer itself; the host reads the
// results after a synchronize, with no copy.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "%s:%d: FAIL %s: ", __FILE__, __LINE__, #cond); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

__global__ void hm_fill(int *p, int n, int v)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] = v + i;
}

static int wrong(const int *p, int n, int v)
{
	for (int i = 0; i < n; i++)
		if (p[i] != v + i)
			return i;
	return -1;
}

int main()
{
	const int n = 1 << 18;
	int *a = nullptr, *da = nullptr, *dr = nullptr, *r = (int *)calloc(n, sizeof(int));
	int attr = 0;
	bool same = false;

	CHECK(cudaSetDeviceFlags(cudaDeviceMapHost) == cudaSuccess, "map host flag");
	CHECK(cudaDeviceGetAttribute(&attr, cudaDevAttrCanMapHostMemory, 0) == cudaSuccess && attr == 1, "can map");
	CHECK(cudaHostAlloc((void **)&a, n * sizeof(int), cudaHostAllocMapped) == cudaSuccess, "host alloc");
	CHECK(cudaHostGetDevicePointer((void **)&da, a, 0) == cudaSuccess && da, "device pointer");
	CHECK(cudaHostGetDevicePointer((void **)&dr, a, 1) == cudaErrorInvalidValue, "flags must be 0");
	cudaGetLastError();
	memset(a, 0, n * sizeof(int));
	hm_fill<<<(n + 255) / 256, 256>>>(da, n, 7);
	CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");
	CHECK(wrong(a, n, 7) < 0, "through the device pointer: element %d", wrong(a, n, 7));
	// the host pointer itself works in kernels when the device pointer equals it
	same = da == a;
	if (same) {
		hm_fill<<<(n + 255) / 256, 256>>>(a, n, 11);
		CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");
		CHECK(wrong(a, n, 11) < 0, "through the host pointer: element %d", wrong(a, n, 11));
	}
	// registered memory, mapped
	CHECK(r && cudaHostRegister(r, n * sizeof(int), cudaHostRegisterMapped) == cudaSuccess, "register");
	CHECK(cudaHostGetDevicePointer((void **)&dr, r, 0) == cudaSuccess && dr, "registered device pointer");
	hm_fill<<<(n + 255) / 256, 256>>>(dr, n, 3);
	CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");
	CHECK(wrong(r, n, 3) < 0, "registered memory through its device pointer: element %d", wrong(r, n, 3));
	CHECK(cudaHostUnregister(r) == cudaSuccess, "unregister");
	CHECK(cudaFreeHost(a) == cudaSuccess, "free host");
	free(r);
	if (failures)
		return 1;
	printf("mapped: ok (%s)\n", same ? "the device pointer is the host pointer" : "the device pointer differs");
	return 0;
}
