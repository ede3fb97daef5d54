// Speculation probe: launches kernels of every parameter kind and library calls
// whose read/write sets are known, and prints the device pointers it used as
// one JSON line so that the test can match them against the executor's trace.
#include <cstdio>
#include <cstdlib>
#include <cublas_v2.h>
#include <cuda_runtime.h>

struct pair_args {
	const float *src;
	float *dst;
	int n;
};

__global__ void k_const_mix(const float *in, float *out, int n)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		out[i] = in[i] * 2.0f;
}

__global__ void k_struct(pair_args p)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < p.n; i += gridDim.x * blockDim.x)
		p.dst[i] = p.src[i] + 1.0f;
}

extern "C" __global__ void k_extern(float *x, const float *y, int n)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		x[i] += y[i];
}

#define CK(x)                                                                          \
	do {                                                                           \
		cudaError_t e_ = (x);                                                  \
		if (e_ != cudaSuccess) {                                               \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,     \
				cudaGetErrorString(e_));                               \
			exit(1);                                                       \
		}                                                                      \
	} while (0)

int main()
{
	const int n = 1024;
	float *a, *b, *c, *d, *m;
	float host[1024];
	cublasHandle_t h;
	const float one = 1.0f, zero = 0.0f;

	CK(cudaMalloc(&a, n * sizeof(float)));
	CK(cudaMalloc(&b, n * sizeof(float)));
	CK(cudaMalloc(&c, n * sizeof(float)));
	CK(cudaMalloc(&d, n * sizeof(float)));
	CK(cudaMalloc(&m, 3u << 20)); /* a big buffer: its own 2 MiB chunks */
	for (int i = 0; i < n; i++)
		host[i] = (float)i;
	CK(cudaMemcpy(a, host, sizeof(host), cudaMemcpyHostToDevice));
	CK(cudaMemset(b, 0, sizeof(host)));
	k_const_mix<<<4, 256>>>(a, b, n);
	k_struct<<<4, 256>>>(pair_args{ b, c, n });
	k_extern<<<4, 256>>>(d, a, n);
	CK(cudaGetLastError());
	CK(cudaMemcpy(d, c, 256 * sizeof(float), cudaMemcpyDeviceToDevice));
	if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
		return 1;
	/* 16x16 = a(16x16) * b(16x16) into m */
	if (cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 16, 16, 16, &one, a, 16, b, 16, &zero, m, 16) !=
	    CUBLAS_STATUS_SUCCESS)
		return 1;
	CK(cudaMemcpy(host, c, 64 * sizeof(float), cudaMemcpyDeviceToHost));
	CK(cudaDeviceSynchronize());
	cublasDestroy(h);
	/* c[i] = 2*i + 1 */
	for (int i = 0; i < 64; i++)
		if (host[i] != 2.0f * i + 1.0f) {
			fprintf(stderr, "c[%d] = %f\n", i, host[i]);
			return 1;
		}
	printf("{\"a\":%llu,\"b\":%llu,\"c\":%llu,\"d\":%llu,\"m\":%llu,\"n\":%d}\n",
	       (unsigned long long)a, (unsigned long long)b, (unsigned long long)c, (unsigned long long)d,
	       (unsigned long long)m, n);
	return 0;
}
