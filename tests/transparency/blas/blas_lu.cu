// SPDX-License-Identifier: MIT
// Batched LU as programs use it: cublas{S,D}getrfBatched (with and without
// pivoting), getriBatched, getrsBatched (N and T) and matinvBatched on
// device arrays of matrix pointers. Checked by residuals: A inv(A) = I and
// op(A) X = B, and info = k for a matrix whose U(k, k) is exactly zero.
// Least squares as HeCBench uses it: cublas{S,D}gelsBatched (m > n and
// m == n, one and three right-hand sides), the solution checked against the
// normal equations solved here in double, the R left in A against A^T A =
// R^T R, devInfo 0 (1 for a zero first column), and the statuses and infos
// cuBLAS documents for bad arguments. Exits 1 on a wrong answer.
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

static cublasStatus_t gels(cublasHandle_t h, cublasOperation_t t, int m, int n, int nrhs, float *const A[], int lda, float *const C[], int ldc, int *info, int *dev_info, int b) { return cublasSgelsBatched(h, t, m, n, nrhs, A, lda, C, ldc, info, dev_info, b); }
static cublasStatus_t gels(cublasHandle_t h, cublasOperation_t t, int m, int n, int nrhs, double *const A[], int lda, double *const C[], int ldc, int *info, int *dev_info, int b) { return cublasDgelsBatched(h, t, m, n, nrhs, A, lda, C, ldc, info, dev_info, b); }

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

// x (n x nrhs, ld n) = the least-squares solution of a (m x n, ld lda) x = c
// (m x nrhs, ld ldc) from the normal equations a^T a x = a^T c, solved in
// double by Gaussian elimination with partial pivoting
template <class T> static std::vector<double> normal_solve(const T *a, int lda, const T *c, int ldc, int m, int n, int nrhs)
{
	std::vector<double> g((size_t)n * n), x((size_t)n * nrhs);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++)
			for (int p = 0; p < m; p++)
				g[i + (size_t)j * n] += (double)a[p + (size_t)i * lda] * a[p + (size_t)j * lda];
	for (int i = 0; i < n; i++)
		for (int j = 0; j < nrhs; j++)
			for (int p = 0; p < m; p++)
				x[i + (size_t)j * n] += (double)a[p + (size_t)i * lda] * c[p + (size_t)j * ldc];
	for (int k = 0; k < n; k++) {
		int piv = k;
		for (int i = k + 1; i < n; i++)
			if (std::fabs(g[i + (size_t)k * n]) > std::fabs(g[piv + (size_t)k * n]))
				piv = i;
		for (int j = 0; j < n; j++)
			std::swap(g[k + (size_t)j * n], g[piv + (size_t)j * n]);
		for (int j = 0; j < nrhs; j++)
			std::swap(x[k + (size_t)j * n], x[piv + (size_t)j * n]);
		for (int i = k + 1; i < n; i++) {
			double f = g[i + (size_t)k * n] / g[k + (size_t)k * n];
			for (int j = k; j < n; j++)
				g[i + (size_t)j * n] -= f * g[k + (size_t)j * n];
			for (int j = 0; j < nrhs; j++)
				x[i + (size_t)j * n] -= f * x[k + (size_t)j * n];
		}
	}
	for (int j = 0; j < nrhs; j++)
		for (int i = n - 1; i >= 0; i--) {
			double v = x[i + (size_t)j * n];
			for (int p = i + 1; p < n; p++)
				v -= g[i + (size_t)p * n] * x[p + (size_t)j * n];
			x[i + (size_t)j * n] = v / g[i + (size_t)i * n];
		}
	return x;
}

template <class T> static void gels_check(cublasHandle_t h, const char *name, double tol)
{
	const int shapes[][3] = { { 9, 4, 1 }, { 9, 4, 3 }, { 5, 5, 3 }, { 6, 6, 1 } };   // m, n, nrhs
	const int count = 3;
	int *dinfo;
	CU(cudaMalloc(&dinfo, count * sizeof(int)));
	for (auto &sh : shapes) {
		const int m = sh[0], n = sh[1], nrhs = sh[2], lda = m + 1, ldc = m + 2;
		Batch<T> A(n, lda, count), C(nrhs, ldc, count);
		for (int b = 0; b < count; b++) {
			for (int j = 0; j < n; j++)
				for (int i = 0; i < m; i++)   // a strong diagonal keeps the square ones well conditioned
					A.at(b, i, j) = (T)(rnd() + (i == j ? 3 : 0));
			for (int j = 0; j < nrhs; j++)
				for (int i = 0; i < m; i++)
					C.at(b, i, j) = (T)rnd();
		}
		// the last matrix's first column is zero: R(1, 1) is zero, devInfo 1
		for (int i = 0; i < m; i++)
			A.at(count - 1, i, 0) = 0;
		A.up();
		C.up();
		std::vector<T> a0 = A.host, c0 = C.host;
		CU(cudaMemset(dinfo, 0x7f, count * sizeof(int)));
		int info = 99;
		bool with_info = &sh != &shapes[1];   // devInfoArray is optional
		CK(gels(h, CUBLAS_OP_N, m, n, nrhs, A.ptrs, lda, C.ptrs, ldc, &info, with_info ? dinfo : nullptr, count));
		std::vector<int> hinfo(count);
		CU(cudaMemcpy(hinfo.data(), dinfo, count * sizeof(int), cudaMemcpyDeviceToHost));
		A.down();
		C.down();
		if (info != 0)
			printf("FAIL %sgelsBatched %dx%d nrhs %d: info %d\n", name, m, n, nrhs, info), failures++;
		for (int b = 0; b < count; b++)
			if (with_info && hinfo[b] != (b == count - 1 ? 1 : 0))
				printf("FAIL %sgelsBatched %dx%d nrhs %d: devInfo[%d] = %d\n", name, m, n, nrhs, b,
				       hinfo[b]), failures++;
		double worst = 0, worst_r = 0;
		for (int b = 0; b < count - 1; b++) {
			const T *a = a0.data() + (size_t)b * lda * n, *c = c0.data() + (size_t)b * ldc * nrhs;
			std::vector<double> x = normal_solve(a, lda, c, ldc, m, n, nrhs);
			for (int j = 0; j < nrhs; j++)
				for (int i = 0; i < n; i++)
					worst = std::max(worst, std::fabs(C.at(b, i, j) - x[i + (size_t)j * n]));
			// A^T A = R^T R with R the upper triangle left in A
			for (int j = 0; j < n; j++)
				for (int i = 0; i <= j; i++) {
					double ata = 0, rtr = 0;
					for (int p = 0; p < m; p++)
						ata += (double)a[p + (size_t)i * lda] * a[p + (size_t)j * lda];
					for (int p = 0; p <= i; p++)
						rtr += (double)A.at(b, p, i) * A.at(b, p, j);
					worst_r = std::max(worst_r, std::fabs(ata - rtr) / (1 + std::fabs(ata)));
				}
		}
		if (!(worst <= tol) || !(worst_r <= tol))
			printf("FAIL %sgelsBatched %dx%d nrhs %d: |x - x_ref| %g, |A^T A - R^T R| %g\n", name, m, n, nrhs,
			       worst, worst_r), failures++;
	}
	// bad arguments: info -(position, counted from m: cuBLAS's gels leaves
	// trans out, H100 2026-12-05); cuBLAS documents NOT_SUPPORTED for m < n
	// and trans other than N
	Batch<T> A(4, 8, 1), C(1, 8, 1);
	struct {
		cublasOperation_t t;
		int m, n, lda, ldc, want_info;
		cublasStatus_t want;
	} bad[] = { { CUBLAS_OP_N, 6, 4, 5, 8, -5, CUBLAS_STATUS_INVALID_VALUE },
		    { CUBLAS_OP_N, 6, 4, 8, 5, -7, CUBLAS_STATUS_INVALID_VALUE },
		    { CUBLAS_OP_N, 3, 4, 8, 8, 0, CUBLAS_STATUS_NOT_SUPPORTED },
		    { CUBLAS_OP_T, 6, 4, 8, 8, 0, CUBLAS_STATUS_NOT_SUPPORTED } };
	for (auto &c : bad) {
		int info = 99;
		cublasStatus_t st = gels(h, c.t, c.m, c.n, 1, A.ptrs, c.lda, C.ptrs, c.ldc, &info, dinfo, 1);
		if (st != c.want || (c.want_info && info != c.want_info))
			printf("FAIL %sgelsBatched trans %d m %d n %d lda %d ldc %d: status %d info %d, want %d and %d\n",
			       name, (int)c.t, c.m, c.n, c.lda, c.ldc, (int)st, info, (int)c.want, c.want_info), failures++;
	}
	cudaFree(dinfo);
	printf("%s gels: checked\n", name);
}

int main()
{
	cublasHandle_t h;
	CK(cublasCreate(&h));
	run<float>(h, "S", 1e-3);
	run<double>(h, "D", 1e-10);
	gels_check<float>(h, "S", 1e-3);
	gels_check<double>(h, "D", 1e-10);
	cublasDestroy(h);
	if (failures) {
		printf("blas_lu: %d failure(s)\n", failures);
		return 1;
	}
	printf("blas_lu: ok\n");
	return 0;
}
