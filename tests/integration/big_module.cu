// A fatbin bigger than one channel record (its initialised device array alone
// is 3 MiB): it travels through a shared host region, and its kernels launch.
#include <cstdio>
#include <cuda_runtime.h>

__device__ unsigned char blob[3 << 20] = { 7 };

__global__ void mark(int *out)
{
	out[0] = 42;
}

int main()
{
	int *d, h = 0;
	size_t size = 0;

	if (cudaMalloc(&d, sizeof(int)) != cudaSuccess)
		return 1;
	mark<<<1, 1>>>(d);
	cudaError_t e = cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost);
	if (e != cudaSuccess || h != 42) {
		fprintf(stderr, "launch from the big module: %s, value %d\n", cudaGetErrorString(e), h);
		return 1;
	}
	e = cudaGetSymbolSize(&size, blob);
	if (e != cudaSuccess || size != (3u << 20)) {
		fprintf(stderr, "cudaGetSymbolSize(blob): %s, %zu\n", cudaGetErrorString(e), size);
		return 1;
	}
	printf("{\"ok\":true}\n");
	return 0;
}
