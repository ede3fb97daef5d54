// SPDX-License-Identifier: MIT
// Shared by the graph, launch and per-thread stream programs: error checks and
// the kernels they use (sim twins in tests/transparency/twins.c).
#pragma once

#include <cmath>
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

// y[i] = a * x[i] + y[i]
__global__ void graphs_saxpy(float a, const float *x, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] = a * x[i] + y[i];
}

// x[i] = x[i] * s + i
__global__ void graphs_scale_add(float *x, float s, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		x[i] = x[i] * s + (float)i;
}

// z[i] = x[i] + y[i]
__global__ void graphs_add(const float *x, const float *y, float *z, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		z[i] = x[i] + y[i];
}

// Whether got[0..n) equals want[0..n) (exact: every step is one rounding the
// CPU reference makes the same way); reports the first mismatch.
static bool same(const float *got, const float *want, int n, const char *what)
{
	for (int i = 0; i < n; i++)
		if (got[i] != want[i]) {
			fprintf(stderr, "%s: [%d] = %g, want %g\n", what, i, got[i], want[i]);
			failures++;
			return false;
		}
	return true;
}
