// SPDX-License-Identifier: MIT
// Batched triangular solve and QR as PyTorch uses them (MultivariateNormal,
// batched torch.linalg.qr): cublas{S,D}trsmBatched and cublas{S,D}geqrfBatched
// on device arrays of matrix pointers. Checked against references written
// here: op(A) X = alpha B (or X op(A) = alpha B) with A's other triangle (and
// a unit diagonal) NaN, so reading them shows; H(1)..H(k) R = A with each
// H = I - tau v v^T orthogonal; the bytes past each matrix and tau vector
// untouched; cuBLAS's statuses and infos for bad arguments. Exits 1 on a
// wrong answer.
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

static cublasStatus_t trsm(cublasHandle_t h, cublasSideMode_t s, cublasFillMode_t u, cublasOperation_t t, cublasDiagType_t d, int m, int n, const float *al, const float *const A[], int lda, float *const B[], int ldb, int b) { return cublasStrsmBatched(h, s, u, t, d, m, n, al, A, lda, B, ldb, b); }
static cublasStatus_t trsm(cublasHandle_t h, cublasSideMode_t s, cublasFillMode_t u, cublasOperation_t t, cublasDiagType_t d, int m, int n, const double *al, const double *const A[], int lda, double *const B[], int ldb, int b) { return cublasDtrsmBatched(h, s, u, t, d, m, n, al, A, lda, B, ldb, b); }
static cublasStatus_t geqrf(cublasHandle_t h, int m, int n, float *const A[], int lda, float *const T[], int *info, int b) { return cublasSgeqrfBatched(h, m, n, A, lda, T, info, b); }
static cublasStatus_t geqrf(cublasHandle_t h, int m, int n, double *const A[], int lda, double *const T[], int *info, int b) { return cublasDgeqrfBatched(h, m, n, A, lda, T, info, b); }

static unsigned seed = 7;
static double rnd()
{
	seed = seed * 1103515245u + 12345u;
	return ((seed >> 8) % 2001) / 1000.0 - 1.0;
}

// count blocks of size elements, one after another on the device, each with
// `pad` sentinel elements behind it, and the device array of their pointers
template <class T> struct Batch {
	int size, pad, count;
	std::vector<T> host;
	T *dev = nullptr;
	T **ptrs = nullptr;
	Batch(int size_, int count_, int pad_ = 3) : size(size_), pad(pad_), count(count_), host((size_t)(size_ + pad_) * count_, (T)-77)
	{
		CU(cudaMalloc(&dev, host.size() * sizeof(T)));
		std::vector<T *> p(count);
		for (int i = 0; i < count; i++)
			p[i] = dev + (size_t)i * (size + pad);
		CU(cudaMalloc(&ptrs, count * sizeof(T *)));
		CU(cudaMemcpy(ptrs, p.data(), count * sizeof(T *), cudaMemcpyHostToDevice));
	}
	~Batch() { cudaFree(dev), cudaFree(ptrs); }
	T *of(int b) { return host.data() + (size_t)b * (size + pad); }
	void up() { CU(cudaMemcpy(dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice)); }
	void down() { CU(cudaMemcpy(host.data(), dev, host.size() * sizeof(T), cudaMemcpyDeviceToHost)); }
};

// op(A)[i][j] of a triangular A as BLAS defines it: the uplo triangle, a unit
// diagonal when diag is unit, zero elsewhere (what is stored there is not read)
template <class T> static double tri(const T *a, int lda, bool upper, bool trans, bool unit, int i, int j)
{
	if (trans) {
		int t = i;
		i = j, j = t;
	}
	if (i == j)
		return unit ? 1.0 : (double)a[i + (size_t)j * lda];
	if (upper ? i > j : i < j)
		return 0;
	return (double)a[i + (size_t)j * lda];
}

template <class T> static void trsm_check(cublasHandle_t h, const char *name, double tol)
{
	const int m = 5, n = 4, count = 3;
	const double alpha = 0.5;
	for (int side = 0; side < 2; side++)
		for (int upper = 0; upper < 2; upper++)
			for (int trans = 0; trans < 2; trans++)
				for (int unit = 0; unit < 2; unit++) {
					const int ka = side ? n : m, lda = ka + 2, ldb = m + 1;
					Batch<T> A(lda * ka, count), B(ldb * n, count);
					for (int b = 0; b < count; b++) {
						T *a = A.of(b);
						for (int j = 0; j < ka; j++)
							for (int i = 0; i < lda; i++) {
								bool in = i < ka && (i == j || (upper ? i < j : i > j));
								// unread parts NaN: the other triangle, the
								// diagonal when unit, the rows past ka
								a[i + j * lda] = in && !(unit && i == j) ? (T)(rnd() + (i == j ? 4 : 0)) : (T)NAN;
							}
						for (int k = 0; k < ldb * n; k++)
							B.of(b)[k] = (T)rnd();
					}
					A.up();
					B.up();
					std::vector<T> b0 = B.host;
					T al = (T)alpha;
					CK(trsm(h, side ? CUBLAS_SIDE_RIGHT : CUBLAS_SIDE_LEFT,
						upper ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER,
						trans ? CUBLAS_OP_T : CUBLAS_OP_N, unit ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT,
						m, n, &al, (const T *const *)A.ptrs, lda, B.ptrs, ldb, count));
					B.down();
					double worst = 0;
					bool kept = true;
					for (int b = 0; b < count; b++) {
						const T *a = A.of(b), *x = B.of(b), *x0 = b0.data() + (size_t)b * (ldb * n + B.pad);
						for (int j = 0; j < n; j++) {
							kept = kept && x[m + j * ldb] == x0[m + j * ldb];   // the row past m
							for (int i = 0; i < m; i++) {
								double s = 0;   // (op(A) X)[i][j] or (X op(A))[i][j]
								for (int k = 0; k < ka; k++)
									s += side ? (double)x[i + k * ldb] * tri(a, lda, upper, trans, unit, k, j)
										  : tri(a, lda, upper, trans, unit, i, k) * (double)x[k + j * ldb];
								double d = std::fabs(s - alpha * (double)x0[i + j * ldb]);
								worst = std::isnan(d) ? INFINITY : std::max(worst, d);
							}
						}
						for (int k = 0; k < B.pad; k++)
							kept = kept && x[ldb * n + k] == (T)-77;
					}
					if (worst > tol || !kept)
						printf("FAIL %strsmBatched side %c uplo %c trans %c diag %c: residual %g%s\n", name,
						       side ? 'R' : 'L', upper ? 'U' : 'L', trans ? 'T' : 'N', unit ? 'U' : 'N',
						       worst, kept ? "" : ", bytes past B changed"), failures++;
				}
	// alpha read from device memory (pointer mode device), and 0 matrices
	{
		const int lda = m, ldb = m;
		Batch<T> A(lda * m, 2), B(ldb * n, 2);
		for (int b = 0; b < 2; b++)
			for (int j = 0; j < m; j++)
				for (int i = 0; i < m; i++)
					A.of(b)[i + j * lda] = i == j ? (T)2 : i < j ? (T)rnd() : (T)NAN;
		for (int b = 0; b < 2; b++)
			for (int k = 0; k < ldb * n; k++)
				B.of(b)[k] = (T)rnd();
		A.up();
		B.up();
		std::vector<T> b0 = B.host;
		T *dal, three = 3;
		CU(cudaMalloc(&dal, sizeof(T)));
		CU(cudaMemcpy(dal, &three, sizeof(T), cudaMemcpyHostToDevice));
		CK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
		CK(trsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, m, n, dal,
			(const T *const *)A.ptrs, lda, B.ptrs, ldb, 0));
		CK(trsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, m, n, dal,
			(const T *const *)A.ptrs, lda, B.ptrs, ldb, 2));
		CK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
		B.down();
		double worst = 0;
		for (int b = 0; b < 2; b++)
			for (int j = 0; j < n; j++)
				for (int i = 0; i < m; i++) {
					double s = 0;
					for (int k = 0; k < m; k++)
						s += tri(A.of(b), lda, true, false, false, i, k) * (double)B.of(b)[k + j * ldb];
					double d = std::fabs(s - 3 * (double)b0[(size_t)b * (ldb * n + B.pad) + i + j * ldb]);
					worst = std::isnan(d) ? INFINITY : std::max(worst, d);
				}
		if (worst > tol * 3)
			printf("FAIL %strsmBatched device alpha: residual %g\n", name, worst), failures++;
		cudaFree(dal);
	}
	// bad arguments: INVALID_VALUE, as trsm's and for batchCount < 0
	T one = 1;
	if (trsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, m, n, &one, nullptr, m, nullptr,
		 m, -1) != CUBLAS_STATUS_INVALID_VALUE ||
	    trsm(h, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, m, n, &one, nullptr, n - 1,
		 nullptr, m, 1) != CUBLAS_STATUS_INVALID_VALUE ||
	    trsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, m, n, &one, nullptr, m, nullptr,
		 m - 1, 1) != CUBLAS_STATUS_INVALID_VALUE)
		printf("FAIL %strsmBatched argument errors\n", name), failures++;
}

// Checks one factored a (m x n, lda) and tau against the original a0:
// H(1) .. H(k) R = A0, with R a's upper triangle, H(j) = I - tau[j] v v^T, v(j) = 1,
// v below it a's column j; each H orthogonal (tau (v^T v) = 2, or tau = 0).
template <class T> static double qr_residual(const T *a, const T *a0, const T *tau, int m, int n, int lda)
{
	int k = std::min(m, n);
	std::vector<double> q((size_t)m * n, 0);   // q = R (m x n), then H(j) q for j = k .. 1
	double worst = 0;
	for (int j = 0; j < n; j++)
		for (int i = 0; i <= std::min(j, m - 1); i++)
			q[i + (size_t)j * m] = (double)a[i + (size_t)j * lda];
	for (int r = k - 1; r >= 0; r--) {
		double t = (double)tau[r], vv = 1;
		for (int i = r + 1; i < m; i++)
			vv += (double)a[i + (size_t)r * lda] * (double)a[i + (size_t)r * lda];
		if (t != 0)
			worst = std::max(worst, std::fabs(t * vv - 2));
		for (int j = 0; j < n; j++) {
			double w = q[r + (size_t)j * m];
			for (int i = r + 1; i < m; i++)
				w += (double)a[i + (size_t)r * lda] * q[i + (size_t)j * m];
			q[r + (size_t)j * m] -= t * w;
			for (int i = r + 1; i < m; i++)
				q[i + (size_t)j * m] -= t * (double)a[i + (size_t)r * lda] * w;
		}
	}
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			double d = std::fabs(q[i + (size_t)j * m] - (double)a0[i + (size_t)j * lda]);
			worst = std::isnan(d) ? INFINITY : std::max(worst, d);
		}
	return worst;
}

template <class T> static void geqrf_check(cublasHandle_t h, const char *name, double tol)
{
	const int shapes[][2] = { { 6, 4 }, { 4, 4 }, { 3, 5 }, { 1, 1 } };
	const int count = 3;
	for (auto &sh : shapes) {
		const int m = sh[0], n = sh[1], lda = m + 1, k = std::min(m, n);
		Batch<T> A(lda * n, count), Tau(k, count);
		for (int b = 0; b < count; b++)
			for (int j = 0; j < n; j++)
				for (int i = 0; i < m; i++)
					A.of(b)[i + j * lda] = (T)rnd();
		// the second matrix's first column already has zeros under the diagonal: tau 0
		for (int i = 1; i < m; i++)
			A.of(1)[i] = 0;
		A.up();
		Tau.up();
		std::vector<T> a0 = A.host;
		int info = 99;
		CK(geqrf(h, m, n, A.ptrs, lda, Tau.ptrs, &info, count));
		if (info != 0)
			printf("FAIL %sgeqrfBatched %dx%d: info %d\n", name, m, n, info), failures++;
		A.down();
		Tau.down();
		double worst = 0;
		bool kept = true;
		for (int b = 0; b < count; b++) {
			const T *a = A.of(b), *o = a0.data() + (size_t)b * (lda * n + A.pad);
			worst = std::max(worst, qr_residual(a, o, Tau.of(b), m, n, lda));
			for (int j = 0; j < n; j++)   // the row past m of each column
				kept = kept && a[m + j * lda] == o[m + j * lda];
			for (int p = 0; p < A.pad; p++)
				kept = kept && a[lda * n + p] == (T)-77;
			for (int p = 0; p < Tau.pad; p++)
				kept = kept && Tau.of(b)[k + p] == (T)-77;
		}
		if (m > 1 && Tau.of(1)[0] != 0)
			printf("FAIL %sgeqrfBatched %dx%d: tau %g for a column already reduced\n", name, m, n,
			       (double)Tau.of(1)[0]), failures++;
		if (worst > tol || !kept)
			printf("FAIL %sgeqrfBatched %dx%d: |H R - A| %g%s\n", name, m, n, worst,
			       kept ? "" : ", bytes past A or tau changed"), failures++;
	}
	// bad arguments: INVALID_VALUE and info -(position, counted after the handle)
	Batch<T> A(16, 1), Tau(4, 1);
	struct {
		int m, n, lda, batch, want;
	} bad[] = { { -1, 2, 4, 1, -1 }, { 4, -1, 4, 1, -2 }, { 4, 2, 3, 1, -4 }, { 4, 2, 4, -1, -7 } };
	for (auto &c : bad) {
		int info = 99;
		cublasStatus_t st = geqrf(h, c.m, c.n, A.ptrs, c.lda, Tau.ptrs, &info, c.batch);
		if (st != CUBLAS_STATUS_INVALID_VALUE || info != c.want)
			printf("FAIL %sgeqrfBatched m %d n %d lda %d batch %d: status %d info %d, want %d\n", name, c.m, c.n,
			       c.lda, c.batch, (int)st, info, c.want), failures++;
	}
}

int main()
{
	cublasHandle_t h;
	CK(cublasCreate(&h));
	trsm_check<float>(h, "S", 1e-4);
	trsm_check<double>(h, "D", 1e-12);
	geqrf_check<float>(h, "S", 1e-4);
	geqrf_check<double>(h, "D", 1e-13);
	printf("checked\n");
	cublasDestroy(h);
	if (failures) {
		printf("blas_batched: %d failure(s)\n", failures);
		return 1;
	}
	printf("blas_batched: ok\n");
	return 0;
}
