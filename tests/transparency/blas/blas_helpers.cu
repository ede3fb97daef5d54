// SPDX-License-Identifier: MIT
// cublasSetVector/GetVector/SetMatrix/GetMatrix and their Async forms, as a
// public CUDA program uses them: contiguous and strided vectors, matrices
// with host and device leading dimensions, element sizes 4, 8, 12 and 16,
// transfers bigger than one forwarded record, pinned and pageable host
// memory, and the argument errors cuBLAS returns. The device side is read
// back whole, so elements between the strides must be left untouched.
// Exits 1 on a wrong answer.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

static int failures;

#define CU(call)                                                                                        \
	do {                                                                                            \
		cudaError_t e_ = (call);                                                                \
		if (e_ != cudaSuccess) {                                                                \
			printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); \
			exit(1);                                                                        \
		}                                                                                       \
	} while (0)
#define EXPECT(call, want)                                                                                        \
	do {                                                                                                      \
		cublasStatus_t s_ = (call);                                                                       \
		if (s_ != (want)) {                                                                               \
			printf("FAIL %s:%d %s -> %s, want %s\n", __FILE__, __LINE__, #call, cublasGetStatusName(s_), \
			       cublasGetStatusName(want));                                                        \
			failures++;                                                                               \
		}                                                                                                 \
	} while (0)

static void fill(std::vector<unsigned char> &v, unsigned seed)
{
	for (auto &b : v)
		b = (unsigned char)((seed = seed * 1103515245u + 12345u) >> 16);
}

static void same(const char *what, const void *got, const void *want, size_t bytes)
{
	if (memcmp(got, want, bytes)) {
		size_t i = 0;
		while (((const unsigned char *)got)[i] == ((const unsigned char *)want)[i])
			i++;
		printf("FAIL %s: byte %zu of %zu differs\n", what, i, bytes);
		failures++;
	}
}

// rows x cols of elem bytes: host columns lda apart, device ldb apart; set,
// check the whole device span (gaps keep their 0x5a), get back into a host
// buffer with another leading dimension, check.
static void matrix_case(int rows, int cols, int elem, int lda, int ldb, int ldc, cudaStream_t stream, bool vector)
{
	size_t dev_bytes = ((size_t)(cols - 1) * ldb + rows) * elem;
	std::vector<unsigned char> host((size_t)lda * cols * elem), dev_img(dev_bytes, 0x5a), back((size_t)ldc * cols * elem, 0x33),
		back_want(back);
	fill(host, rows * 31 + cols);
	for (int j = 0; j < cols; j++)
		for (int i = 0; i < rows; i++) {
			memcpy(&dev_img[((size_t)j * ldb + i) * elem], &host[((size_t)j * lda + i) * elem], elem);
			memcpy(&back_want[((size_t)j * ldc + i) * elem], &host[((size_t)j * lda + i) * elem], elem);
		}
	unsigned char *d;
	CU(cudaMalloc(&d, dev_bytes));
	CU(cudaMemset(d, 0x5a, dev_bytes));
	char what[160];
	snprintf(what, sizeof(what), "%s %dx%d elem %d ld %d/%d/%d%s", vector ? "vector" : "matrix", rows, cols, elem, lda,
		 ldb, ldc, stream ? " async" : "");
	if (vector) {   // rows == 1: increments are the leading dimensions
		if (stream) {
			EXPECT(cublasSetVectorAsync(cols, elem, host.data(), lda, d, ldb, stream), CUBLAS_STATUS_SUCCESS);
			CU(cudaStreamSynchronize(stream));
		} else {
			EXPECT(cublasSetVector(cols, elem, host.data(), lda, d, ldb), CUBLAS_STATUS_SUCCESS);
		}
	} else if (stream) {
		EXPECT(cublasSetMatrixAsync(rows, cols, elem, host.data(), lda, d, ldb, stream), CUBLAS_STATUS_SUCCESS);
		CU(cudaStreamSynchronize(stream));
	} else {
		EXPECT(cublasSetMatrix(rows, cols, elem, host.data(), lda, d, ldb), CUBLAS_STATUS_SUCCESS);
	}
	std::vector<unsigned char> got(dev_bytes);
	CU(cudaMemcpy(got.data(), d, dev_bytes, cudaMemcpyDeviceToHost));
	std::string w = std::string(what) + " (set)";
	same(w.c_str(), got.data(), dev_img.data(), dev_bytes);
	if (vector) {
		if (stream) {
			EXPECT(cublasGetVectorAsync(cols, elem, d, ldb, back.data(), ldc, stream), CUBLAS_STATUS_SUCCESS);
			CU(cudaStreamSynchronize(stream));
		} else {
			EXPECT(cublasGetVector(cols, elem, d, ldb, back.data(), ldc), CUBLAS_STATUS_SUCCESS);
		}
	} else if (stream) {
		EXPECT(cublasGetMatrixAsync(rows, cols, elem, d, ldb, back.data(), ldc, stream), CUBLAS_STATUS_SUCCESS);
		CU(cudaStreamSynchronize(stream));
	} else {
		EXPECT(cublasGetMatrix(rows, cols, elem, d, ldb, back.data(), ldc), CUBLAS_STATUS_SUCCESS);
	}
	w = std::string(what) + " (get)";
	same(w.c_str(), back.data(), back_want.data(), back.size());
	CU(cudaFree(d));
}

int main()
{
	cudaStream_t s;
	CU(cudaStreamCreate(&s));
	cublasHandle_t h;
	if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
		return 1;

	for (cudaStream_t st : { (cudaStream_t)0, s }) {
		// vectors: rows = 1, the increments as leading dimensions
		matrix_case(1, 1000, 4, 1, 1, 1, st, true);
		matrix_case(1, 1000, 8, 2, 3, 1, st, true);
		matrix_case(1, 333, 16, 1, 5, 2, st, true);
		matrix_case(1, 77, 12, 4, 1, 3, st, true);
		matrix_case(1, 300000, 4, 1, 2, 1, st, true);       // strided, more than one record
		// matrices
		matrix_case(17, 9, 4, 17, 17, 17, st, false);
		matrix_case(17, 9, 8, 20, 23, 18, st, false);
		matrix_case(31, 7, 16, 31, 40, 33, st, false);
		matrix_case(5, 3, 12, 6, 5, 9, st, false);
		matrix_case(700, 500, 8, 701, 703, 700, st, false); // 2.8 MB: blocks of columns
		matrix_case(300000, 3, 4, 300001, 300002, 300000, st, false); // a column over 1 MiB
	}
	// pinned host memory, contiguous: the shared-region path
	{
		const int n = 1 << 18;
		float *hp, *d;
		CU(cudaMallocHost(&hp, n * sizeof(float)));
		CU(cudaMalloc(&d, n * sizeof(float)));
		for (int i = 0; i < n; i++)
			hp[i] = (float)i * 0.5f;
		EXPECT(cublasSetVector(n, sizeof(float), hp, 1, d, 1), CUBLAS_STATUS_SUCCESS);
		memset(hp, 0, n * sizeof(float));
		EXPECT(cublasGetVectorAsync(n, sizeof(float), d, 1, hp, 1, s), CUBLAS_STATUS_SUCCESS);
		CU(cudaStreamSynchronize(s));
		for (int i = 0; i < n; i++)
			if (hp[i] != (float)i * 0.5f) {
				printf("FAIL pinned vector: element %d is %g\n", i, hp[i]);
				failures++;
				break;
			}
		CU(cudaFreeHost(hp));
		CU(cudaFree(d));
	}
	// argument errors (nothing is copied)
	{
		float hbuf[64] = { 0 }, *d;
		CU(cudaMalloc(&d, 64 * sizeof(float)));
		EXPECT(cublasSetVector(8, 4, hbuf, 0, d, 1), CUBLAS_STATUS_INVALID_VALUE);
		EXPECT(cublasSetVector(8, 4, hbuf, 1, d, -1), CUBLAS_STATUS_INVALID_VALUE);
		EXPECT(cublasGetVector(8, 0, d, 1, hbuf, 1), CUBLAS_STATUS_INVALID_VALUE);
		// cuBLAS does not check n < 0 or a leading dimension below rows
		// itself: its copy fails (as an H100 answered)
		EXPECT(cublasSetVector(-1, 4, hbuf, 1, d, 1), CUBLAS_STATUS_MAPPING_ERROR);
		EXPECT(cublasSetMatrix(8, 2, 4, hbuf, 7, d, 8), CUBLAS_STATUS_MAPPING_ERROR);
		EXPECT(cublasGetMatrix(8, 2, 4, d, 8, hbuf, 4), CUBLAS_STATUS_MAPPING_ERROR);
		EXPECT(cublasSetMatrix(-1, 2, 4, hbuf, 8, d, 8), CUBLAS_STATUS_INVALID_VALUE);
		EXPECT(cublasSetMatrixAsync(8, 2, -4, hbuf, 8, d, 8, s), CUBLAS_STATUS_INVALID_VALUE);
		EXPECT(cublasGetVectorAsync(8, 4, d, 1, hbuf, 0, s), CUBLAS_STATUS_INVALID_VALUE);
		// empty transfers succeed
		EXPECT(cublasSetVector(0, 4, hbuf, 1, d, 1), CUBLAS_STATUS_SUCCESS);
		EXPECT(cublasGetMatrix(0, 5, 4, d, 1, hbuf, 1), CUBLAS_STATUS_SUCCESS);
		CU(cudaFree(d));
	}
	// the set data is what the next cuBLAS call sees
	{
		const int n = 64;
		std::vector<float> x(n), y(n, 0);
		for (int i = 0; i < n; i++)
			x[i] = (float)(i % 7) - 3;
		float *d, r = 0, want = 0;
		CU(cudaMalloc(&d, 2 * n * sizeof(float)));
		EXPECT(cublasSetVector(n, sizeof(float), x.data(), 1, d, 2), CUBLAS_STATUS_SUCCESS);
		EXPECT(cublasSdot(h, n, d, 2, d, 2, &r), CUBLAS_STATUS_SUCCESS);
		for (float v : x)
			want += v * v;
		if (r != want) {
			printf("FAIL dot of a set vector: %g want %g\n", r, want);
			failures++;
		}
		CU(cudaFree(d));
	}
	cublasDestroy(h);
	CU(cudaStreamDestroy(s));
	if (failures) {
		printf("blas_helpers: %d failure(s)\n", failures);
		return 1;
	}
	printf("blas_helpers: ok\n");
	return 0;
}
