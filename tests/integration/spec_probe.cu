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
	/* Pointer-array batched GEMM: the arrays live in device memory (p).
	 * C0 = a * c, C1 = b * d (16x16 each), into m at +1 KiB and +2 KiB. */
	const float *arr[6] = { a, b, c, d, m + 256, m + 512 };
	float **p;
	float c0[256], c1[256], hb[256], hd[256];

	CK(cudaMalloc(&p, sizeof(arr)));
	CK(cudaMemcpy(p, arr, sizeof(arr), cudaMemcpyHostToDevice));
	if (cublasSgemmBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, 16, 16, 16, &one, (const float **)p, 16,
			       (const float **)p + 2, 16, &zero, p + 4, 16, 2) != CUBLAS_STATUS_SUCCESS)
		return 1;
	CK(cudaMemcpy(c0, m + 256, sizeof(c0), cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(c1, m + 512, sizeof(c1), cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(hb, b, sizeof(hb), cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(hd, d, sizeof(hd), cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(host, c, 64 * sizeof(float), cudaMemcpyDeviceToHost));
	CK(cudaDeviceSynchronize());
	cublasDestroy(h);
	/* a[i] = i, c[i] = 2i + 1 (checked below), column-major */
	for (int i = 0; i < 16; i++)
		for (int j = 0; j < 16; j++) {
			float r0 = 0, r1 = 0;

			for (int t = 0; t < 16; t++) {
				r0 += (float)(t * 16 + i) * (2.0f * (j * 16 + t) + 1.0f);
				r1 += hb[t * 16 + i] * hd[j * 16 + t];
			}
			if (c0[j * 16 + i] != r0 || c1[j * 16 + i] != r1) {
				fprintf(stderr, "batched gemm (%d,%d): %f %f, want %f %f\n", i, j, c0[j * 16 + i],
					c1[j * 16 + i], r0, r1);
				return 1;
			}
		}
	/* c[i] = 2*i + 1 */
	for (int i = 0; i < 64; i++)
		if (host[i] != 2.0f * i + 1.0f) {
			fprintf(stderr, "c[%d] = %f\n", i, host[i]);
			return 1;
		}
	printf("{\"a\":%llu,\"b\":%llu,\"c\":%llu,\"d\":%llu,\"m\":%llu,\"p\":%llu,\"n\":%d}\n",
	       (unsigned long long)a, (unsigned long long)b, (unsigned long long)c, (unsigned long long)d,
	       (unsigned long long)m, (unsigned long long)p, n);
	return 0;
}
