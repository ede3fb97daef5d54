// SPDX-License-Identifier: MIT
// Batched LU as programs use it: cublas{S,D}getrfBatched (with and without
// pivoting), getriBatched, getrsBatched (N and T) and matinvBatched on
// device arrays of matrix pointers. Checked by residuals: A inv(A) = I and
// op(A) X = B, and info = k for a matrix whose U(k, k) is exactly zero.
// Exits 1 on a wrong answer.
#include <cmath>
#include <cstdio>
#include <cstdlib>
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
#define CK(call)                                                                              \
	do {                                                                                  \
		cublasStatus_t s_ = (call);                                                   \
		if (s_ != CUBLAS_STATUS_SUCCESS) {                                            \
			printf("FAIL %s:%d %s -> %d\n", __FILE__, __LINE__, #call, (int)s_); \
			exit(1);                                                              \
		}                                                                             \
	} while (0)

static cublasStatus_t getrf(cublasHandle_t h, int n, float *const A[], int lda, int *P, int *info, int b) { return cublasSgetrfBatched(h, n, A, lda, P, info, b); }
static cublasStatus_t getrf(cublasHandle_t h, int n, double *const A[], int lda, int *P, int *info, int b) { return cublasDgetrfBatched(h, n, A, lda, P, info, b); }
static cublasStatus_t getri(cublasHandle_t h, int n, const float *const A[], int lda, const int *P, float *const C[], int ldc, int *info, int b) { return cublasSgetriBatched(h, n, A, lda, P, C, ldc, info, b); }
static cublasStatus_t getri(cublasHandle_t h, int n, const double *const A[], int lda, const int *P, double *const C[], int ldc, int *info, int b) { return cublasDgetriBatched(h, n, A, lda, P, C, ldc, info, b); }
static cublasStatus_t getrs(cublasHandle_t h, cublasOperation_t t, int n, int nrhs, const float *const A[], int lda, const int *P, float *const B[], int ldb, int *info, int b) { return cublasSgetrsBatched(h, t, n, nrhs, A, lda, P, B, ldb, info, b); }
static cublasStatus_t getrs(cublasHandle_t h, cublasOperation_t t, int n, int nrhs, const double *const A[], int lda, const int *P, double *const B[], int ldb, int *info, int b) { return cublasDgetrsBatched(h, t, n, nrhs, A, lda, P, B, ldb, info, b); }
static cublasStatus_t matinv(cublasHandle_t h, int n, const float *const A[], int lda, float *const C[], int ldc, int *info, int b) { return cublasSmatinvBatched(h, n, A, lda, C, ldc, info, b); }
static cublasStatus_t matinv(cublasHandle_t h, int n, const double *const A[], int lda, double *const C[], int ldc, int *info, int b) { return cublasDmatinvBatched(h, n, A, lda, C, ldc, info, b); }

static unsigned seed = 99;
static double rnd()
{
	seed = seed * 1103515245u + 12345u;
	return ((seed >> 8) % 2001) / 1000.0 - 1.0;
}

// batch matrices of n x n (ld lda) stored one after another, and the device
// array of their pointers
template <class T> struct Batch {
	int n, ld, count;
	std::vector<T> host;
	T *dev = nullptr;
	T **ptrs = nullptr;
	Batch(int n_, int ld_, int count_) : n(n_), ld(ld_), count(count_), host((size_t)ld_ * n_ * count_, 0)
	{
		CU(cudaMalloc(&dev, host.size() * sizeof(T)));
		std::vector<T *> p(count);
		for (int i = 0; i < count; i++)
			p[i] = dev + (size_t)i * ld * n;
		CU(cudaMalloc(&ptrs, count * sizeof(T *)));
		CU(cudaMemcpy(ptrs, p.data(), count * sizeof(T *), cudaMemcpyHostToDevice));
	}
	~Batch() { cudaFree(dev), cudaFree(ptrs); }
	T &at(int b, int i, int j) { return host[(size_t)b * ld * n + i + (size_t)j * ld]; }
	void up() { CU(cudaMemcpy(dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice)); }
	void down() { CU(cudaMemcpy(host.data(), dev, host.size() * sizeof(T), cudaMemcpyDeviceToHost)); }
};

template <class T> static void run(cublasHandle_t h, const char *name, double tol)
{
	const int n = 12, lda = 14, count = 4, nrhs = 3;
	// B: n x nrhs right-hand sides with ld n + 2 (Batch's n is its column count)
	Batch<T> A(n, lda, count), F(n, lda, count), C(n, n + 1, count), B(nrhs, n + 2, count);
	for (int b = 0; b < count; b++)
		for (int j = 0; j < n; j++)
			for (int i = 0; i < n; i++)
				A.at(b, i, j) = F.at(b, i, j) = (T)rnd();
	A.up();
	F.up();
	int *piv, *info;
	CU(cudaMalloc(&piv, n * count * sizeof(int)));
	CU(cudaMalloc(&info, count * sizeof(int)));
	for (bool pivot : { true, false }) {
		if (!pivot) {   // no pivoting needs a dominant diagonal
			for (int b = 0; b < count; b++)
				for (int i = 0; i < n; i++)
					A.at(b, i, i) = F.at(b, i, i) = A.at(b, i, i) + (T)n;
			A.up();
		}
		F.up();
		CK(getrf(h, n, F.ptrs, lda, pivot ? piv : nullptr, info, count));
		std::vector<int> hinfo(count), hpiv(n * count);
		CU(cudaMemcpy(hinfo.data(), info, count * sizeof(int), cudaMemcpyDeviceToHost));
		CU(cudaMemcpy(hpiv.data(), piv, n * count * sizeof(int), cudaMemcpyDeviceToHost));
		for (int b = 0; b < count; b++) {
			if (hinfo[b] != 0)
				printf("FAIL %sgetrf info[%d] = %d\n", name, b, hinfo[b]), failures++;
			for (int k = 0; pivot && k < n; k++)
				if (hpiv[b * n + k] < k + 1 || hpiv[b * n + k] > n)
					printf("FAIL %sgetrf pivot %d = %d\n", name, k, hpiv[b * n + k]), failures++;
		}
		// inverse from the factors: A C = I
		CK(getri(h, n, (const T *const *)F.ptrs, lda, pivot ? piv : nullptr, C.ptrs, n + 1, info, count));
		C.down();
		double worst = 0;
		for (int b = 0; b < count; b++)
			for (int j = 0; j < n; j++)
				for (int i = 0; i < n; i++) {
					double s = 0;
					for (int p = 0; p < n; p++)
						s += (double)A.at(b, i, p) * C.at(b, p, j);
					worst = std::max(worst, std::fabs(s - (i == j)));
				}
		if (worst > tol)
			printf("FAIL %sgetri%s: |A inv(A) - I| = %g\n", name, pivot ? "" : " (no pivoting)", worst), failures++;
		// solve op(A) X = B for both ops
		for (cublasOperation_t t : { CUBLAS_OP_N, CUBLAS_OP_T }) {
			for (auto &v : B.host)
				v = (T)rnd();
			std::vector<T> b0 = B.host;
			B.up();
			int hi = 99;
			CK(getrs(h, t, n, nrhs, (const T *const *)F.ptrs, lda, pivot ? piv : nullptr, B.ptrs, n + 2, &hi, count));
			if (hi != 0)
				printf("FAIL %sgetrs info %d\n", name, hi), failures++;
			B.down();
			worst = 0;
			for (int b = 0; b < count; b++)
				for (int j = 0; j < nrhs; j++)
					for (int i = 0; i < n; i++) {
						double s = 0;
						for (int p = 0; p < n; p++)
							s += (t == CUBLAS_OP_N ? (double)A.at(b, i, p) : (double)A.at(b, p, i)) *
							     B.host[(size_t)b * (n + 2) * nrhs + p + (size_t)j * (n + 2)];
						worst = std::max(worst, std::fabs(s - b0[(size_t)b * (n + 2) * nrhs + i + (size_t)j * (n + 2)]));
					}
			if (worst > tol)
				printf("FAIL %sgetrs %s%s: residual %g\n", name, t == CUBLAS_OP_N ? "N" : "T",
				       pivot ? "" : " (no pivoting)", worst), failures++;
		}
	}
	// matinv: A unchanged, A C = I
	for (auto &v : C.host)
		v = 0;
	C.up();
	CK(matinv(h, n, (const T *const *)A.ptrs, lda, C.ptrs, n + 1, info, count));
	std::vector<T> before = A.host;
	A.down();
	C.down();
	if (before != A.host)
		printf("FAIL %smatinv changed A\n", name), failures++;
	double worst = 0;
	for (int b = 0; b < count; b++)
		for (int j = 0; j < n; j++)
			for (int i = 0; i < n; i++) {
				double s = 0;
				for (int p = 0; p < n; p++)
					s += (double)A.at(b, i, p) * C.at(b, p, j);
				worst = std::max(worst, std::fabs(s - (i == j)));
			}
	if (worst > tol)
		printf("FAIL %smatinv: |A inv(A) - I| = %g\n", name, worst), failures++;
	// a singular matrix: its first column is zero, so U(1, 1) is exactly zero: info = 1
	for (int b = 0; b < count; b++)
		for (int j = 0; j < n; j++)
			for (int i = 0; i < n; i++)
				F.at(b, i, j) = j == 0 ? (T)0 : A.at(b, i, j);
	F.up();
	CK(getrf(h, n, F.ptrs, lda, piv, info, count));
	std::vector<int> hinfo(count);
	CU(cudaMemcpy(hinfo.data(), info, count * sizeof(int), cudaMemcpyDeviceToHost));
	for (int b = 0; b < count; b++)
		if (hinfo[b] != 1)
			printf("FAIL %sgetrf of a singular matrix: info[%d] = %d, want 1\n", name, b, hinfo[b]), failures++;
	// argument errors: getrs counts its parameters from the one after the
	// handle, so nrhs is the third (info -3 on an H100)
	int hi = 0;
	cublasStatus_t st = getrs(h, CUBLAS_OP_N, n, -1, (const T *const *)F.ptrs, lda, piv, B.ptrs, n + 2, &hi, count);
	if (st != CUBLAS_STATUS_INVALID_VALUE || hi != -3)
		printf("FAIL %sgetrs nrhs < 0: status %d, info %d\n", name, (int)st, hi), failures++;
	if (getrf(h, n, F.ptrs, n - 1, piv, info, count) != CUBLAS_STATUS_INVALID_VALUE ||
	    matinv(h, 33, (const T *const *)A.ptrs, 40, C.ptrs, 40, info, count) != CUBLAS_STATUS_INVALID_VALUE)
		printf("FAIL %s argument errors\n", name), failures++;
	cudaFree(piv), cudaFree(info);
	printf("%s: checked\n", name);
}

int main()
{
	cublasHandle_t h;
	CK(cublasCreate(&h));
	run<float>(h, "S", 1e-3);
	run<double>(h, "D", 1e-10);
	cublasDestroy(h);
	if (failures) {
		printf("blas_lu: %d failure(s)\n", failures);
		return 1;
	}
	printf("blas_lu: ok\n");
	return 0;
}
