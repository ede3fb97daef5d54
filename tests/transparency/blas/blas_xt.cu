// SPDX-License-Identifier: MIT
// cublasXt, as a program that wants BLAS on host memory calls it: S, D and Z
// gemms on host matrices (transposed, leading dimensions wider than the
// rows, beta used and beta zero over a C of NaNs) and an S gemm on device
// matrices, each checked against a CPU reference; then syrk, which phos-fn
// does not run: it must be refused with CUBLAS_STATUS_NOT_SUPPORTED, or
// (natively) answer right. Prints "xt: ok"; exits 1 on a wrong answer or an
// unexpected status.
//
//   blas_xt refused   only cublasXtCreate, a syrk and Destroy: no forwarded
//                     call at all (the program never takes its channel);
//                     prints "xt: refused" when the syrk was refused
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstring>
#include <vector>

#include <cublasXt.h>
#include <cuda_runtime.h>

template <typename T> static T at(const std::vector<T> &m, int ld, int r, int c, bool t)
{
	return t ? m[(size_t)r * ld + c] : m[(size_t)c * ld + r];   // op(M)[r][c]
}

// C = alpha op(A) op(B) + beta C, column-major, on the CPU
template <typename T>
static void ref_gemm(bool ta, bool tb, int m, int n, int k, T alpha, const std::vector<T> &A, int lda,
		     const std::vector<T> &B, int ldb, T beta, std::vector<T> &C, int ldc)
{
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			T s = 0;
			for (int p = 0; p < k; p++)
				s += at(A, lda, i, p, ta) * at(B, ldb, p, j, tb);
			C[(size_t)j * ldc + i] = alpha * s + (beta == T(0) ? T(0) : beta * C[(size_t)j * ldc + i]);
		}
}

static double mag(double v) { return std::fabs(v); }
static double mag(std::complex<double> v) { return std::abs(v); }

template <typename T> static bool close(const std::vector<T> &got, const std::vector<T> &want, const char *what)
{
	for (size_t i = 0; i < got.size(); i++)
		if (!(mag(got[i] - want[i]) <= 1e-3 * (1 + mag(want[i])))) {
			printf("FAIL: %s [%zu] differs from the reference\n", what, i);
			return false;
		}
	return true;
}

template <typename T> static std::vector<T> fill(size_t n, int seed)
{
	std::vector<T> v(n);
	for (size_t i = 0; i < n; i++)
		v[i] = T((int)((i * 7 + seed * 13) % 17) - 8) / T(4);
	return v;
}

static bool check(cublasStatus_t s, const char *what)
{
	if (s != CUBLAS_STATUS_SUCCESS)
		printf("FAIL: %s -> status %d\n", what, (int)s);
	return s == CUBLAS_STATUS_SUCCESS;
}

// syrk: refused under phos-fn, right natively
static int syrk(cublasXtHandle_t h, bool *refused)
{
	const int n = 8, k = 4;
	std::vector<float> a = fill<float>((size_t)n * k, 3), c(n * n, 0.0f), want(n * n, 0.0f);
	float one = 1, zero = 0;
	cublasStatus_t s = cublasXtSsyrk(h, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, n, k, &one, a.data(), n, &zero,
					 c.data(), n);
	*refused = s == CUBLAS_STATUS_NOT_SUPPORTED;
	if (*refused)
		return 0;
	if (!check(s, "cublasXtSsyrk"))
		return 1;
	ref_gemm(false, true, n, n, k, 1.0f, a, n, a, n, 0.0f, want, n);
	for (int j = 0; j < n; j++)
		for (int i = j; i < n; i++)   // the lower triangle is the answer
			if (std::fabs(c[(size_t)j * n + i] - want[(size_t)j * n + i]) > 1e-3f) {
				printf("FAIL: cublasXtSsyrk [%d,%d] differs from the reference\n", i, j);
				return 1;
			}
	return 0;
}

int main(int argc, char **argv)
{
	cublasXtHandle_t h = nullptr;
	bool refused = false;

	if (!check(cublasXtCreate(&h), "cublasXtCreate"))
		return 1;
	if (argc > 1 && !strcmp(argv[1], "refused")) {
		int r = syrk(h, &refused);
		cublasXtDestroy(h);
		if (r)
			return r;
		printf("%s\n", refused ? "xt: refused" : "xt: syrk ran");
		return 0;
	}
	int dev[1] = { 0 }, bd = 0;
	if (!check(cublasXtDeviceSelect(h, 1, dev), "cublasXtDeviceSelect") ||
	    !check(cublasXtSetBlockDim(h, 32), "cublasXtSetBlockDim") || !check(cublasXtGetBlockDim(h, &bd), "GetBlockDim"))
		return 1;
	if (bd != 32 || cublasXtSetBlockDim(h, 0) != CUBLAS_STATUS_INVALID_VALUE) {
		printf("FAIL: block dimension %d, or 0 accepted\n", bd);
		return 1;
	}

	// S: op(A) = A^T (k x m stored, lda = k + 3), B plain (ldb = k + 1), beta 0.5
	{
		const int m = 37, n = 45, k = 29, lda = k + 3, ldb = k + 1, ldc = m + 2;
		std::vector<float> a = fill<float>((size_t)lda * m, 1), b = fill<float>((size_t)ldb * n, 2);
		std::vector<float> c = fill<float>((size_t)ldc * n, 5), want = c;
		float alpha = 1.5f, beta = 0.5f;
		ref_gemm(true, false, m, n, k, alpha, a, lda, b, ldb, beta, want, ldc);
		if (!check(cublasXtSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, a.data(), lda, b.data(), ldb, &beta,
					 c.data(), ldc), "cublasXtSgemm") || !close(c, want, "cublasXtSgemm"))
			return 1;
	}
	// D: beta 0 over a C of NaNs (C is only written), B transposed
	{
		const int m = 40, n = 33, k = 50;
		std::vector<double> a = fill<double>((size_t)m * k, 3), b = fill<double>((size_t)n * k, 4);
		std::vector<double> c((size_t)m * n, NAN), want((size_t)m * n, 0.0);
		double alpha = -2, beta = 0;
		ref_gemm(false, true, m, n, k, alpha, a, m, b, n, beta, want, m);
		if (!check(cublasXtDgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha, a.data(), m, b.data(), n, &beta,
					 c.data(), m), "cublasXtDgemm") || !close(c, want, "cublasXtDgemm"))
			return 1;
	}
	// Z: complex double, plain
	{
		typedef std::complex<double> Z;
		const int m = 12, n = 9, k = 7;
		std::vector<Z> a((size_t)m * k), b((size_t)k * n), c = fill<Z>((size_t)m * n, 6), want;
		for (size_t i = 0; i < a.size(); i++)
			a[i] = Z((double)(i % 5) - 2, (double)(i % 3));
		for (size_t i = 0; i < b.size(); i++)
			b[i] = Z((double)(i % 4), -(double)(i % 7) / 2);
		want = c;
		Z alpha(1, 1), beta(0.5, -1);
		ref_gemm(false, false, m, n, k, alpha, a, m, b, k, beta, want, m);
		if (!check(cublasXtZgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, (cuDoubleComplex *)&alpha,
					 (cuDoubleComplex *)a.data(), m, (cuDoubleComplex *)b.data(), k,
					 (cuDoubleComplex *)&beta, (cuDoubleComplex *)c.data(), m), "cublasXtZgemm") ||
		    !close(c, want, "cublasXtZgemm"))
			return 1;
	}
	// S on device memory
	{
		const int n = 64;
		std::vector<float> a = fill<float>((size_t)n * n, 7), b = fill<float>((size_t)n * n, 8), c(n * n, 0.0f);
		std::vector<float> want(n * n, 0.0f);
		float alpha = 1, beta = 0, *da, *db, *dc;
		if (cudaMalloc(&da, a.size() * 4) || cudaMalloc(&db, b.size() * 4) || cudaMalloc(&dc, c.size() * 4) ||
		    cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice) ||
		    cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice)) {
			printf("FAIL: device matrices\n");
			return 1;
		}
		ref_gemm(false, false, n, n, n, alpha, a, n, b, n, beta, want, n);
		if (!check(cublasXtSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, da, n, db, n, &beta, dc, n),
			   "cublasXtSgemm (device)") ||
		    cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost) || !close(c, want, "cublasXtSgemm (device)"))
			return 1;
		cudaFree(da);
		cudaFree(db);
		cudaFree(dc);
	}
	// bad arguments: lda below the rows
	{
		float x = 1;
		if (cublasXtSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &x, &x, 2, &x, 4, &x, &x, 4) !=
		    CUBLAS_STATUS_INVALID_VALUE) {
			printf("FAIL: lda 2 < m 4 accepted\n");
			return 1;
		}
	}
	if (syrk(h, &refused))
		return 1;
	if (!check(cublasXtDestroy(h), "cublasXtDestroy"))
		return 1;
	printf("xt: ok%s\n", refused ? " (syrk refused)" : "");
	return 0;
}
