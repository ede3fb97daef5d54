// SPDX-License-Identifier: MIT
// A __managed__ variable: natively host and device share it; phos-fn cannot
// forward it and must refuse the program clearly (every CUDA call fails)
// rather than let it read a variable that host and device do not share.
#include <cstdio>
#include <cuda_runtime.h>

__managed__ int mg_value;

__global__ void mg_set(int v)
{
	mg_value = v;
}

int main()
{
	mg_value = 1;
	mg_set<<<1, 1>>>(42);
	cudaError_t e = cudaDeviceSynchronize();
	if (e != cudaSuccess) {
		fprintf(stderr, "managed_var: %s\n", cudaGetErrorString(e));
		return 2;
	}
	if (mg_value != 42) {
		fprintf(stderr, "managed_var: %d, want 42\n", mg_value);
		return 1;
	}
	printf("managed_var: ok\n");
	return 0;
}
