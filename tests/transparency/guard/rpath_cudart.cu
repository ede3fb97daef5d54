// SPDX-License-Identifier: MIT
// A CUDA program built as some frameworks ship: linked with an RPATH (here a
// RUNPATH, -Xlinker -rpath) to a folder holding its own copy of the real
// libcudart.so.13. Natively that copy serves it; under phos-fn the stand-in
// must (issue 12). Prints which file serves cudaMalloc, then adds two vectors.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

__global__ void guard_add(const float *x, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] += x[i];
}

#define CHECK(call)                                                                      \
	do {                                                                             \
		cudaError_t e_ = (call);                                                 \
		if (e_ != cudaSuccess) {                                                 \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,  \
				cudaGetErrorString(e_));                                 \
			return 1;                                                        \
		}                                                                        \
	} while (0)

int main(void)
{
	const int n = 1000;
	float hx[n], hy[n], *x, *y;

	print_cudart((void *)(cudaError_t (*)(void **, size_t))cudaMalloc);
	for (int i = 0; i < n; i++) {
		hx[i] = (float)i;
		hy[i] = 2.0f * i;
	}
	CHECK(cudaMalloc(&x, n * sizeof(float)));
	CHECK(cudaMalloc(&y, n * sizeof(float)));
	CHECK(cudaMemcpy(x, hx, sizeof(hx), cudaMemcpyHostToDevice));
	CHECK(cudaMemcpy(y, hy, sizeof(hy), cudaMemcpyHostToDevice));
	guard_add<<<(n + 255) / 256, 256>>>(x, y, n);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpy(hy, y, sizeof(hy), cudaMemcpyDeviceToHost));
	for (int i = 0; i < n; i++) {
		if (hy[i] != 3.0f * i) {
			fprintf(stderr, "y[%d] = %g, want %g\n", i, hy[i], 3.0f * i);
			return 1;
		}
	}
	CHECK(cudaFree(x));
	CHECK(cudaFree(y));
	printf("rpath_cudart: ok\n");
	return 0;
}
