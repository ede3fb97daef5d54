// SPDX-License-Identifier: MIT
// Kernels with large parameter blocks (CUDA 12.1+ allows 32,764 bytes on Volta
// and later): just over 4 KiB, 20,000 bytes (nvcc then describes the
// parameters differently in the cubin) and the most there is. Each kernel
// writes what it was given; the program checks every word. Exits 1 on a wrong
// answer.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

struct p4k { int v[1030]; };            /* 4,120 bytes */
struct p20k { int v[5000]; };           /* 20,000 bytes */
struct p32k { int v[8188]; };           /* 32,752 bytes: with the pointer, 32,760 */

__global__ void xfer_p4k(int *out, p4k a, int k)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < 1030; i += gridDim.x * blockDim.x)
		out[i] = a.v[i] * k;
}

__global__ void xfer_p20k(const int *base, p20k a, double scale, int *out)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < 5000; i += gridDim.x * blockDim.x)
		out[i] = base[i] + (int)(a.v[i] * scale);
}

__global__ void xfer_p32k(p32k a, int *out)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < 8188; i += gridDim.x * blockDim.x)
		out[i] = a.v[i] ^ 0x5a5a;
}

static int failures;
#define OK(call)                                                                                  \
	do {                                                                                      \
		cudaError_t e_ = (call);                                                          \
		if (e_ != cudaSuccess) {                                                          \
			fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call,       \
				cudaGetErrorName(e_));                                             \
			exit(1);                                                                  \
		}                                                                                 \
	} while (0)

static void expect(const char *what, const int *got, const int *want, int n)
{
	for (int i = 0; i < n; i++)
		if (got[i] != want[i]) {
			fprintf(stderr, "FAIL %s: word %d = %d, want %d\n", what, i, got[i], want[i]);
			failures++;
			return;
		}
}

int main()
{
	static p4k a4;
	static p20k a20;
	static p32k a32;
	static int base[5000], want[8188], got[8188];
	int *d_out, *d_base;

	for (int i = 0; i < 1030; i++)
		a4.v[i] = i * 7 - 3;
	for (int i = 0; i < 5000; i++) {
		a20.v[i] = 5000 - i;
		base[i] = i * 11;
	}
	for (int i = 0; i < 8188; i++)
		a32.v[i] = i * 2654435761u;
	OK(cudaMalloc(&d_out, sizeof(got)));
	OK(cudaMalloc(&d_base, sizeof(base)));
	OK(cudaMemcpy(d_base, base, sizeof(base), cudaMemcpyHostToDevice));

	OK(cudaMemset(d_out, 0, sizeof(got)));
	xfer_p4k<<<4, 128>>>(d_out, a4, 3);
	OK(cudaGetLastError());
	OK(cudaMemcpy(got, d_out, 1030 * sizeof(int), cudaMemcpyDeviceToHost));
	for (int i = 0; i < 1030; i++)
		want[i] = a4.v[i] * 3;
	expect("4 KiB parameters", got, want, 1030);

	OK(cudaMemset(d_out, 0, sizeof(got)));
	xfer_p20k<<<8, 128>>>(d_base, a20, 2.0, d_out);
	OK(cudaGetLastError());
	OK(cudaMemcpy(got, d_out, 5000 * sizeof(int), cudaMemcpyDeviceToHost));
	for (int i = 0; i < 5000; i++)
		want[i] = base[i] + a20.v[i] * 2;
	expect("20,000-byte parameters", got, want, 5000);

	/* through cudaLaunchKernel too, as libraries launch */
	OK(cudaMemset(d_out, 0, sizeof(got)));
	void *args[] = { &a32, &d_out };
	OK(cudaLaunchKernel((const void *)xfer_p32k, dim3(16), dim3(128), args, 0, 0));
	OK(cudaMemcpy(got, d_out, sizeof(got), cudaMemcpyDeviceToHost));
	for (int i = 0; i < 8188; i++)
		want[i] = a32.v[i] ^ 0x5a5a;
	expect("32,760-byte parameters", got, want, 8188);

	OK(cudaFree(d_out));
	OK(cudaFree(d_base));
	if (failures) {
		printf("bigparams: %d failure(s)\n", failures);
		return 1;
	}
	printf("bigparams: ok\n");
	return 0;
}
