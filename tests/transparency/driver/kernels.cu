// SPDX-License-Identifier: MIT
// The kernels driver.cpp loads through the driver API, built by meson.build
// into PTX text, a fatbin (sm_90 + PTX) and a cubin, each embedded in the
// program (embed.py). sim twins: tests/transparency/twins.c.

__device__ int drv_table[16];   // cuModuleGetGlobal: 64 bytes

__global__ void drv_saxpy(float a, const float *x, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] = a * x[i] + y[i];
}

// extern "C": no parameter types in the name, every argument opaque to phos-fn
extern "C" __global__ void drv_fill(unsigned *out, unsigned v, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		out[i] = v + (unsigned)i;
}
