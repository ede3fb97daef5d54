// SPDX-License-Identifier: MIT
// Shared by the pool and callback test programs: an error check and the one
// kernel they use (its sim twin is in tests/integration/test_twins.c).
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#define CK(x)                                                                                      \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,                 \
				cudaGetErrorString(e_));                                           \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static int failures;

#define EXPECT(cond, ...)                                                                          \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: FAIL %s: ", __FILE__, __LINE__, #cond);            \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

// x[i] = base + i
__global__ void pools_iota(int *x, int n, int base)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		x[i] = base + i;
}

static void iota(int *x, int n, int base, cudaStream_t s)
{
	pools_iota<<<(n + 255) / 256, 256, 0, s>>>(x, n, base);
}

// Whether host[0..n) == base + i; reports the first mismatch.
static bool is_iota(const int *host, int n, int base, const char *what)
{
	for (int i = 0; i < n; i++)
		if (host[i] != base + i) {
			fprintf(stderr, "%s: [%d] = %d, want %d\n", what, i, host[i], base + i);
			return false;
		}
	return true;
}
