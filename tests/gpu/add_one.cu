// SPDX-License-Identifier: MIT
// Kernel for tests/gpu/test_cuda_device.c, loaded from a fatbin through the
// cuda device backend:  nvcc -fatbin -gencode arch=compute_90,code=[sm_90,compute_90] add_one.cu
// extern "C" so that the test looks both names up unmangled.

extern "C" {
__device__ int add_one_calls;   // counts the elements add_one touched

__global__ void add_one(float *x, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n) {
		x[i] += 1.0f;
		atomicAdd(&add_one_calls, 1);
	}
}
}
