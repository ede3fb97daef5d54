// SPDX-License-Identifier: MIT
// Symmetric and Hermitian cuBLAS routines and plane rotations, every
// precision, as an ordinary CUDA program uses them: symv (S, D, C, Z), hemv
// (C, Z), syrk (S, D, C, Z; N and T), herk (C, Z; N and C), symm and hemm
// (both sides), syr2k and her2k, trmm (every side, triangle, transpose and
// diagonal, out of place and in place), syr, her, syr2, her2, trmv and trsv,
// rot (srot, drot, crot, zrot, csrot,
// zdrot) with strided vectors, in host pointer mode, and symv and srot in
// device pointer mode too. Only the referenced triangle of
// A is filled with meaning (the other holds garbage that must be ignored);
// syrk/herk must leave the other triangle of C alone. Exits 1 on a wrong answer.
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

typedef std::complex<double> zd;
static int failures;

#define CK(call)                                                                              \
	do {                                                                                  \
		cublasStatus_t s_ = (call);                                                   \
		if (s_ != CUBLAS_STATUS_SUCCESS) {                                            \
			printf("FAIL %s:%d %s -> %d\n", __FILE__, __LINE__, #call, (int)s_); \
			exit(1);                                                              \
		}                                                                             \
	} while (0)
#define CU(call)                                                                                        \
	do {                                                                                            \
		cudaError_t e_ = (call);                                                                \
		if (e_ != cudaSuccess) {                                                                \
			printf("FAIL %s:%d %s -> %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); \
			exit(1);                                                                        \
		}                                                                                       \
	} while (0)

template <class T> struct Tr;
template <> struct Tr<float> {
	typedef float R;
	static const bool cplx = false;
	static constexpr double tol = 1e-3;
	static zd get(float v) { return v; }
	static float make(zd c) { return (float)c.real(); }
};
template <> struct Tr<double> {
	typedef double R;
	static const bool cplx = false;
	static constexpr double tol = 1e-10;
	static zd get(double v) { return v; }
	static double make(zd c) { return c.real(); }
};
template <> struct Tr<cuComplex> {
	typedef float R;
	static const bool cplx = true;
	static constexpr double tol = 1e-3;
	static zd get(cuComplex v) { return zd(v.x, v.y); }
	static cuComplex make(zd c) { return make_cuComplex((float)c.real(), (float)c.imag()); }
};
template <> struct Tr<cuDoubleComplex> {
	typedef double R;
	static const bool cplx = true;
	static constexpr double tol = 1e-10;
	static zd get(cuDoubleComplex v) { return zd(v.x, v.y); }
	static cuDoubleComplex make(zd c) { return make_cuDoubleComplex(c.real(), c.imag()); }
};

#define SYM(P, T)                                                                                              \
	static cublasStatus_t symv(cublasHandle_t h, cublasFillMode_t u, int n, const T *a, const T *A, int lda, \
				   const T *x, int ix, const T *b, T *y, int iy)                               \
	{ return cublas##P##symv(h, u, n, a, A, lda, x, ix, b, y, iy); }                                        \
	static cublasStatus_t syrk(cublasHandle_t h, cublasFillMode_t u, cublasOperation_t t, int n, int k,     \
				   const T *a, const T *A, int lda, const T *b, T *C, int ldc)                 \
	{ return cublas##P##syrk(h, u, t, n, k, a, A, lda, b, C, ldc); }                                        \
	static cublasStatus_t symm(cublasHandle_t h, cublasSideMode_t sd, cublasFillMode_t u, int m, int n,     \
				   const T *a, const T *A, int lda, const T *B, int ldb, const T *b, T *C,     \
				   int ldc)                                                                    \
	{ return cublas##P##symm(h, sd, u, m, n, a, A, lda, B, ldb, b, C, ldc); }                               \
	static cublasStatus_t syr2k(cublasHandle_t h, cublasFillMode_t u, cublasOperation_t t, int n, int k,    \
				    const T *a, const T *A, int lda, const T *B, int ldb, const T *b, T *C,    \
				    int ldc)                                                                   \
	{ return cublas##P##syr2k(h, u, t, n, k, a, A, lda, B, ldb, b, C, ldc); }                               \
	static cublasStatus_t syr(cublasHandle_t h, cublasFillMode_t u, int n, const T *a, const T *x, int ix,  \
				  T *A, int lda)                                                               \
	{ return cublas##P##syr(h, u, n, a, x, ix, A, lda); }                                                   \
	static cublasStatus_t syr2(cublasHandle_t h, cublasFillMode_t u, int n, const T *a, const T *x, int ix, \
				   const T *y, int iy, T *A, int lda)                                          \
	{ return cublas##P##syr2(h, u, n, a, x, ix, y, iy, A, lda); }                                           \
	static cublasStatus_t trmv(cublasHandle_t h, cublasFillMode_t u, cublasOperation_t t,                   \
				   cublasDiagType_t dg, int n, const T *A, int lda, T *x, int ix)              \
	{ return cublas##P##trmv(h, u, t, dg, n, A, lda, x, ix); }                                              \
	static cublasStatus_t trsv(cublasHandle_t h, cublasFillMode_t u, cublasOperation_t t,                   \
				   cublasDiagType_t dg, int n, const T *A, int lda, T *x, int ix)              \
	{ return cublas##P##trsv(h, u, t, dg, n, A, lda, x, ix); }                                              \
	static cublasStatus_t trmm(cublasHandle_t h, cublasSideMode_t sd, cublasFillMode_t u,                   \
				   cublasOperation_t t, cublasDiagType_t dg, int m, int n, const T *a,         \
				   const T *A, int lda, const T *B, int ldb, T *C, int ldc)                    \
	{ return cublas##P##trmm(h, sd, u, t, dg, m, n, a, A, lda, B, ldb, C, ldc); }
SYM(S, float)
SYM(D, double)
SYM(C, cuComplex)
SYM(Z, cuDoubleComplex)
static cublasStatus_t hemv(cublasHandle_t h, cublasFillMode_t u, int n, const cuComplex *a, const cuComplex *A, int lda,
			   const cuComplex *x, int ix, const cuComplex *b, cuComplex *y, int iy)
{ return cublasChemv(h, u, n, a, A, lda, x, ix, b, y, iy); }
static cublasStatus_t hemv(cublasHandle_t h, cublasFillMode_t u, int n, const cuDoubleComplex *a,
			   const cuDoubleComplex *A, int lda, const cuDoubleComplex *x, int ix,
			   const cuDoubleComplex *b, cuDoubleComplex *y, int iy)
{ return cublasZhemv(h, u, n, a, A, lda, x, ix, b, y, iy); }
static cublasStatus_t herk(cublasHandle_t h, cublasFillMode_t u, cublasOperation_t t, int n, int k, const float *a,
			   const cuComplex *A, int lda, const float *b, cuComplex *C, int ldc)
{ return cublasCherk(h, u, t, n, k, a, A, lda, b, C, ldc); }
static cublasStatus_t herk(cublasHandle_t h, cublasFillMode_t u, cublasOperation_t t, int n, int k, const double *a,
			   const cuDoubleComplex *A, int lda, const double *b, cuDoubleComplex *C, int ldc)
{ return cublasZherk(h, u, t, n, k, a, A, lda, b, C, ldc); }

static cublasStatus_t hemm(cublasHandle_t h, cublasSideMode_t sd, cublasFillMode_t u, int m, int n, const cuComplex *a,
			   const cuComplex *A, int lda, const cuComplex *B, int ldb, const cuComplex *b, cuComplex *C,
			   int ldc)
{ return cublasChemm(h, sd, u, m, n, a, A, lda, B, ldb, b, C, ldc); }
static cublasStatus_t hemm(cublasHandle_t h, cublasSideMode_t sd, cublasFillMode_t u, int m, int n,
			   const cuDoubleComplex *a, const cuDoubleComplex *A, int lda, const cuDoubleComplex *B, int ldb,
			   const cuDoubleComplex *b, cuDoubleComplex *C, int ldc)
{ return cublasZhemm(h, sd, u, m, n, a, A, lda, B, ldb, b, C, ldc); }
static cublasStatus_t her2k(cublasHandle_t h, cublasFillMode_t u, cublasOperation_t t, int n, int k, const cuComplex *a,
			    const cuComplex *A, int lda, const cuComplex *B, int ldb, const float *b, cuComplex *C, int ldc)
{ return cublasCher2k(h, u, t, n, k, a, A, lda, B, ldb, b, C, ldc); }
static cublasStatus_t her2k(cublasHandle_t h, cublasFillMode_t u, cublasOperation_t t, int n, int k,
			    const cuDoubleComplex *a, const cuDoubleComplex *A, int lda, const cuDoubleComplex *B, int ldb,
			    const double *b, cuDoubleComplex *C, int ldc)
{ return cublasZher2k(h, u, t, n, k, a, A, lda, B, ldb, b, C, ldc); }

static cublasStatus_t her(cublasHandle_t h, cublasFillMode_t u, int n, const float *a, const cuComplex *x, int ix,
			  cuComplex *A, int lda)
{ return cublasCher(h, u, n, a, x, ix, A, lda); }
static cublasStatus_t her(cublasHandle_t h, cublasFillMode_t u, int n, const double *a, const cuDoubleComplex *x, int ix,
			  cuDoubleComplex *A, int lda)
{ return cublasZher(h, u, n, a, x, ix, A, lda); }
static cublasStatus_t her2(cublasHandle_t h, cublasFillMode_t u, int n, const cuComplex *a, const cuComplex *x, int ix,
			   const cuComplex *y, int iy, cuComplex *A, int lda)
{ return cublasCher2(h, u, n, a, x, ix, y, iy, A, lda); }
static cublasStatus_t her2(cublasHandle_t h, cublasFillMode_t u, int n, const cuDoubleComplex *a,
			   const cuDoubleComplex *x, int ix, const cuDoubleComplex *y, int iy, cuDoubleComplex *A, int lda)
{ return cublasZher2(h, u, n, a, x, ix, y, iy, A, lda); }

template <class T> static T *dev_copy(const std::vector<T> &h)
{
	T *d;
	CU(cudaMalloc(&d, h.size() * sizeof(T)));
	CU(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
	return d;
}

template <class T> static std::vector<T> host_copy(const T *d, size_t n)
{
	std::vector<T> h(n);
	CU(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
	return h;
}

static unsigned seed = 12345;
static double rnd()
{
	seed = seed * 1103515245u + 12345u;
	return (double)((seed >> 8) % 2001) / 1000.0 - 1.0;
}

template <class T> static T rnd_val()
{
	return Tr<T>::make(zd(rnd(), Tr<T>::cplx ? rnd() : 0));
}

template <class T> static void expect(const char *what, zd got, zd want)
{
	if (std::abs(got - want) > Tr<T>::tol * (1 + std::abs(want))) {
		if (failures++ < 10)
			printf("FAIL %s: got (%g, %g), want (%g, %g)\n", what, got.real(), got.imag(), want.real(),
			       want.imag());
	}
}

// A(i, j) of a symmetric (Hermitian) matrix stored in the uplo triangle.
template <class T> static zd sym_at(const std::vector<T> &A, int lda, bool upper, bool herm, int i, int j)
{
	bool stored = upper ? i <= j : i >= j;
	zd v = Tr<T>::get(stored ? A[i + j * lda] : A[j + i * lda]);
	if (herm)
		v = i == j ? zd(v.real(), 0) : stored ? v : std::conj(v);
	return v;
}

template <class T> static void test_symv(cublasHandle_t h, bool herm, bool device_mode)
{
	const int n = 37, lda = 41, ix = 2, iy = 3;
	for (int up = 0; up < 2; up++) {
		std::vector<T> A(lda * n), x(n * ix), y(n * iy);
		for (auto &v : A) v = rnd_val<T>();
		for (auto &v : x) v = rnd_val<T>();
		for (auto &v : y) v = rnd_val<T>();
		T alpha = rnd_val<T>(), beta = rnd_val<T>();
		T *dA = dev_copy(A), *dx = dev_copy(x), *dy = dev_copy(y), *ds = nullptr;
		cublasFillMode_t u = up ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
		const T *pa = &alpha, *pb = &beta;
		if (device_mode) {
			ds = dev_copy(std::vector<T>{ alpha, beta });
			CK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
			pa = ds, pb = ds + 1;
		}
		if constexpr (Tr<T>::cplx) {
			if (herm)
				CK(hemv(h, u, n, pa, dA, lda, dx, ix, pb, dy, iy));
			else
				CK(symv(h, u, n, pa, dA, lda, dx, ix, pb, dy, iy));
		} else {
			CK(symv(h, u, n, pa, dA, lda, dx, ix, pb, dy, iy));
		}
		CK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
		std::vector<T> got = host_copy(dy, y.size());
		for (int i = 0; i < n; i++) {
			zd s = 0;
			for (int j = 0; j < n; j++)
				s += sym_at(A, lda, up, herm, i, j) * Tr<T>::get(x[j * ix]);
			expect<T>(herm ? "hemv" : "symv", Tr<T>::get(got[i * iy]),
				  Tr<T>::get(alpha) * s + Tr<T>::get(beta) * Tr<T>::get(y[i * iy]));
		}
		cudaFree(dA), cudaFree(dx), cudaFree(dy), cudaFree(ds);
	}
}

// C = alpha op(A) op(A)^T (^H) + beta C on one triangle; the other must stay.
template <class T, class S> static void test_rank_k(cublasHandle_t h, bool herm)
{
	const int n = 23, k = 17, ldc = 29;
	for (int up = 0; up < 2; up++)
		for (int tr = 0; tr < 2; tr++) {
			cublasOperation_t t = tr == 0 ? CUBLAS_OP_N : herm ? CUBLAS_OP_C : CUBLAS_OP_T;
			int rows = tr ? k : n, cols = tr ? n : k, lda = rows + 3;
			std::vector<T> A(lda * cols), C(ldc * n);
			for (auto &v : A) v = rnd_val<T>();
			for (auto &v : C) v = rnd_val<T>();
			if (herm)
				for (int i = 0; i < n; i++)
					C[i + i * ldc] = Tr<T>::make(zd(Tr<T>::get(C[i + i * ldc]).real(), 0));
			S alpha, beta;
			if constexpr (sizeof(S) == sizeof(T)) {
				alpha = rnd_val<T>(), beta = rnd_val<T>();
			} else {
				alpha = (S)rnd(), beta = (S)rnd();
			}
			T *dA = dev_copy(A), *dC = dev_copy(C);
			cublasFillMode_t u = up ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
			if constexpr (sizeof(S) == sizeof(T))
				CK(syrk(h, u, t, n, k, &alpha, dA, lda, &beta, dC, ldc));
			else
				CK(herk(h, u, t, n, k, &alpha, dA, lda, &beta, dC, ldc));
			std::vector<T> got = host_copy(dC, C.size());
			zd za, zb;
			if constexpr (sizeof(S) == sizeof(T))
				za = Tr<T>::get(alpha), zb = Tr<T>::get(beta);
			else
				za = alpha, zb = beta;
			for (int j = 0; j < n; j++)
				for (int i = 0; i < n; i++) {
					bool in = up ? i <= j : i >= j;
					if (!in) {   // untouched
						expect<T>("syrk: the other triangle", Tr<T>::get(got[i + j * ldc]),
							  Tr<T>::get(C[i + j * ldc]));
						continue;
					}
					zd s = 0;
					for (int p = 0; p < k; p++) {
						zd ai = Tr<T>::get(tr ? A[p + i * lda] : A[i + p * lda]);
						zd aj = Tr<T>::get(tr ? A[p + j * lda] : A[j + p * lda]);
						if (tr && herm)
							ai = std::conj(ai), aj = std::conj(aj);
						s += ai * (herm ? std::conj(aj) : aj);
					}
					expect<T>(herm ? "herk" : "syrk", Tr<T>::get(got[i + j * ldc]),
						  za * s + zb * Tr<T>::get(C[i + j * ldc]));
				}
			cudaFree(dA), cudaFree(dC);
		}
}

template <class T> static void test_symm(cublasHandle_t h, bool herm)
{
	const int m = 19, n = 13, ldb = 23, ldc = 21;
	for (int side = 0; side < 2; side++)
		for (int up = 0; up < 2; up++) {
			int ka = side ? n : m, lda = ka + 2;
			std::vector<T> A(lda * ka), B(ldb * n), C(ldc * n);
			for (auto &v : A) v = rnd_val<T>();
			for (auto &v : B) v = rnd_val<T>();
			for (auto &v : C) v = rnd_val<T>();
			T alpha = rnd_val<T>(), beta = rnd_val<T>();
			T *dA = dev_copy(A), *dB = dev_copy(B), *dC = dev_copy(C);
			cublasSideMode_t sd = side ? CUBLAS_SIDE_RIGHT : CUBLAS_SIDE_LEFT;
			cublasFillMode_t u = up ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
			if constexpr (Tr<T>::cplx) {
				if (herm)
					CK(hemm(h, sd, u, m, n, &alpha, dA, lda, dB, ldb, &beta, dC, ldc));
				else
					CK(symm(h, sd, u, m, n, &alpha, dA, lda, dB, ldb, &beta, dC, ldc));
			} else {
				CK(symm(h, sd, u, m, n, &alpha, dA, lda, dB, ldb, &beta, dC, ldc));
			}
			std::vector<T> got = host_copy(dC, C.size());
			for (int j = 0; j < n; j++)
				for (int i = 0; i < m; i++) {
					zd s = 0;
					for (int p = 0; p < ka; p++)
						s += side ? Tr<T>::get(B[i + p * ldb]) * sym_at(A, lda, up, herm, p, j)
							  : sym_at(A, lda, up, herm, i, p) * Tr<T>::get(B[p + j * ldb]);
					expect<T>(herm ? "hemm" : "symm", Tr<T>::get(got[i + j * ldc]),
						  Tr<T>::get(alpha) * s + Tr<T>::get(beta) * Tr<T>::get(C[i + j * ldc]));
				}
			cudaFree(dA), cudaFree(dB), cudaFree(dC);
		}
}

// syr2k (S: real beta = Tr<T>::R for her2k)
template <class T, class S> static void test_rank_2k(cublasHandle_t h, bool herm)
{
	const int n = 17, k = 11, ldc = 19;
	for (int up = 0; up < 2; up++)
		for (int tr = 0; tr < 2; tr++) {
			cublasOperation_t t = tr == 0 ? CUBLAS_OP_N : herm ? CUBLAS_OP_C : CUBLAS_OP_T;
			int rows = tr ? k : n, cols = tr ? n : k, lda = rows + 1, ldb = rows + 2;
			std::vector<T> A(lda * cols), B(ldb * cols), C(ldc * n);
			for (auto &v : A) v = rnd_val<T>();
			for (auto &v : B) v = rnd_val<T>();
			for (auto &v : C) v = rnd_val<T>();
			if (herm)
				for (int i = 0; i < n; i++)
					C[i + i * ldc] = Tr<T>::make(zd(Tr<T>::get(C[i + i * ldc]).real(), 0));
			T alpha = rnd_val<T>();
			S beta;
			if constexpr (sizeof(S) == sizeof(T))
				beta = rnd_val<T>();
			else
				beta = (S)rnd();
			T *dA = dev_copy(A), *dB = dev_copy(B), *dC = dev_copy(C);
			cublasFillMode_t u = up ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
			if constexpr (sizeof(S) == sizeof(T))
				CK(syr2k(h, u, t, n, k, &alpha, dA, lda, dB, ldb, &beta, dC, ldc));
			else
				CK(her2k(h, u, t, n, k, &alpha, dA, lda, dB, ldb, &beta, dC, ldc));
			std::vector<T> got = host_copy(dC, C.size());
			zd za = Tr<T>::get(alpha), zb;
			if constexpr (sizeof(S) == sizeof(T))
				zb = Tr<T>::get(beta);
			else
				zb = beta;
			auto op = [&](const std::vector<T> &X, int ld, int r, int p) {
				zd v = Tr<T>::get(tr ? X[p + r * ld] : X[r + p * ld]);
				return tr && herm ? std::conj(v) : v;
			};
			for (int j = 0; j < n; j++)
				for (int i = 0; i < n; i++) {
					bool in = up ? i <= j : i >= j;
					if (!in) {
						expect<T>("syr2k: the other triangle", Tr<T>::get(got[i + j * ldc]),
							  Tr<T>::get(C[i + j * ldc]));
						continue;
					}
					zd s1 = 0, s2 = 0;
					for (int p = 0; p < k; p++) {
						zd bj = op(B, ldb, j, p), aj = op(A, lda, j, p);
						s1 += op(A, lda, i, p) * (herm ? std::conj(bj) : bj);
						s2 += op(B, ldb, i, p) * (herm ? std::conj(aj) : aj);
					}
					expect<T>(herm ? "her2k" : "syr2k", Tr<T>::get(got[i + j * ldc]),
						  za * s1 + (herm ? std::conj(za) : za) * s2 + zb * Tr<T>::get(C[i + j * ldc]));
				}
			cudaFree(dA), cudaFree(dB), cudaFree(dC);
		}
}

// C = alpha op(A) B or alpha B op(A), A triangular; out of place, then in place
template <class T> static void test_trmm(cublasHandle_t h)
{
	const int m = 12, n = 9, ldb = 14, ldc = 15;
	for (int side = 0; side < 2; side++)
		for (int up = 0; up < 2; up++)
			for (int tr = 0; tr < 3; tr++)
				for (int dg = 0; dg < 2; dg++) {
					if (tr == 2 && !Tr<T>::cplx && side)
						continue;   // C = T for a real type: covered by tr 1
					int ka = side ? n : m, lda = ka + 1;
					std::vector<T> A(lda * ka), B(ldb * n), C(ldc * n);
					for (auto &v : A) v = rnd_val<T>();
					for (auto &v : B) v = rnd_val<T>();
					T alpha = rnd_val<T>();
					T *dA = dev_copy(A), *dB = dev_copy(B), *dC = dev_copy(C);
					cublasOperation_t t = tr == 0 ? CUBLAS_OP_N : tr == 1 ? CUBLAS_OP_T : CUBLAS_OP_C;
					cublasSideMode_t sd = side ? CUBLAS_SIDE_RIGHT : CUBLAS_SIDE_LEFT;
					cublasFillMode_t u = up ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
					cublasDiagType_t d = dg ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT;
					auto opa = [&](int r, int q) {
						int ar = tr ? q : r, ac = tr ? r : q;
						bool in = up ? ar <= ac : ar >= ac;
						zd v = !in ? zd(0) : (ar == ac && dg) ? zd(1) : Tr<T>::get(A[ar + ac * lda]);
						return tr == 2 ? std::conj(v) : v;
					};
					for (int inplace = 0; inplace < 2; inplace++) {
						T *out = inplace ? dB : dC;
						CK(trmm(h, sd, u, t, d, m, n, &alpha, dA, lda, dB, ldb, out, inplace ? ldb : ldc));
						std::vector<T> got = host_copy(out, inplace ? B.size() : C.size());
						int ld = inplace ? ldb : ldc;
						for (int j = 0; j < n; j++)
							for (int i = 0; i < m; i++) {
								zd s = 0;
								for (int p = 0; p < ka; p++)
									s += side ? Tr<T>::get(B[i + p * ldb]) * opa(p, j)
										  : opa(i, p) * Tr<T>::get(B[p + j * ldb]);
								expect<T>(inplace ? "trmm in place" : "trmm", Tr<T>::get(got[i + j * ld]),
									  Tr<T>::get(alpha) * s);
							}
					}
					cudaFree(dA), cudaFree(dB), cudaFree(dC);
				}
}

// syr (her: herm), syr2 (her2: herm), on one triangle of A; the other stays
template <class T> static void test_rank_update(cublasHandle_t h, bool herm, bool two)
{
	const int n = 21, lda = 24, ix = 2, iy = 3;
	for (int up = 0; up < 2; up++) {
		std::vector<T> A(lda * n), x(n * ix), y(n * iy);
		for (auto &v : A) v = rnd_val<T>();
		for (auto &v : x) v = rnd_val<T>();
		for (auto &v : y) v = rnd_val<T>();
		if (herm)
			for (int i = 0; i < n; i++)
				A[i + i * lda] = Tr<T>::make(zd(Tr<T>::get(A[i + i * lda]).real(), 0));
		T alpha = rnd_val<T>();
		typename Tr<T>::R ralpha = (typename Tr<T>::R)rnd();
		T *dA = dev_copy(A), *dx = dev_copy(x), *dy = dev_copy(y);
		cublasFillMode_t u = up ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
		if constexpr (Tr<T>::cplx) {
			if (herm && two)
				CK(her2(h, u, n, &alpha, dx, ix, dy, iy, dA, lda));
			else if (herm)
				CK(her(h, u, n, &ralpha, dx, ix, dA, lda));
			else if (two)
				CK(syr2(h, u, n, &alpha, dx, ix, dy, iy, dA, lda));
			else
				CK(syr(h, u, n, &alpha, dx, ix, dA, lda));
		} else if (two) {
			CK(syr2(h, u, n, &alpha, dx, ix, dy, iy, dA, lda));
		} else {
			CK(syr(h, u, n, &alpha, dx, ix, dA, lda));
		}
		std::vector<T> got = host_copy(dA, A.size());
		zd za = herm && !two ? zd(ralpha) : Tr<T>::get(alpha);
		for (int j = 0; j < n; j++)
			for (int i = 0; i < n; i++) {
				zd old = Tr<T>::get(A[i + j * lda]);
				bool in = up ? i <= j : i >= j;
				if (!in) {
					expect<T>("syr: the other triangle", Tr<T>::get(got[i + j * lda]), old);
					continue;
				}
				zd xi = Tr<T>::get(x[i * ix]), xj = Tr<T>::get(x[j * ix]);
				zd yi = Tr<T>::get(y[i * iy]), yj = Tr<T>::get(y[j * iy]), d;
				if (two)
					d = herm ? za * xi * std::conj(yj) + std::conj(za) * yi * std::conj(xj) : za * (xi * yj + yi * xj);
				else
					d = za * xi * (herm ? std::conj(xj) : xj);
				if (herm && i == j)
					d = zd(d.real(), 0);
				expect<T>(two ? (herm ? "her2" : "syr2") : (herm ? "her" : "syr"), Tr<T>::get(got[i + j * lda]),
					  old + d);
			}
		cudaFree(dA), cudaFree(dx), cudaFree(dy);
	}
}

// trmv x = op(A) x, and trsv undoing it (x back, for a well-conditioned A)
template <class T> static void test_trmv(cublasHandle_t h)
{
	const int n = 16, lda = 18, ix = 2;
	for (int up = 0; up < 2; up++)
		for (int tr = 0; tr < 3; tr++)
			for (int dg = 0; dg < 2; dg++) {
				std::vector<T> A(lda * n), x(n * ix);
				for (auto &v : A) v = Tr<T>::make(Tr<T>::get(rnd_val<T>()) * 0.1);
				for (int i = 0; i < n; i++)   // a dominant diagonal: trsv is well conditioned
					A[i + i * lda] = Tr<T>::make(zd(2.0 + rnd(), Tr<T>::cplx ? 0.5 : 0));
				for (auto &v : x) v = rnd_val<T>();
				T *dA = dev_copy(A), *dx = dev_copy(x);
				cublasFillMode_t u = up ? CUBLAS_FILL_MODE_UPPER : CUBLAS_FILL_MODE_LOWER;
				cublasOperation_t t = tr == 0 ? CUBLAS_OP_N : tr == 1 ? CUBLAS_OP_T : CUBLAS_OP_C;
				cublasDiagType_t d = dg ? CUBLAS_DIAG_UNIT : CUBLAS_DIAG_NON_UNIT;
				auto opa = [&](int r, int c) {
					int ar = tr ? c : r, ac = tr ? r : c;
					bool in = up ? ar <= ac : ar >= ac;
					zd v = !in ? zd(0) : (ar == ac && dg) ? zd(1) : Tr<T>::get(A[ar + ac * lda]);
					return tr == 2 ? std::conj(v) : v;
				};
				CK(trmv(h, u, t, d, n, dA, lda, dx, ix));
				std::vector<T> got = host_copy(dx, x.size());
				for (int i = 0; i < n; i++) {
					zd s = 0;
					for (int c = 0; c < n; c++)
						s += opa(i, c) * Tr<T>::get(x[c * ix]);
					expect<T>("trmv", Tr<T>::get(got[i * ix]), s);
				}
				CK(trsv(h, u, t, d, n, dA, lda, dx, ix));
				got = host_copy(dx, x.size());
				for (int i = 0; i < n; i++)
					expect<T>("trsv (back to x)", Tr<T>::get(got[i * ix]), Tr<T>::get(x[i * ix]));
				cudaFree(dA), cudaFree(dx);
			}
}

// (x, y) = (c x + s y, c y - conj(s) x)
template <class T, class Sv, class F> static void test_rot(cublasHandle_t h, const char *name, F call, Sv s, bool dev)
{
	const int n = 51, ix = 2, iy = 3;
	std::vector<T> x(n * ix), y(n * iy);
	for (auto &v : x) v = rnd_val<T>();
	for (auto &v : y) v = rnd_val<T>();
	typename Tr<T>::R c = (typename Tr<T>::R)0.6;
	T *dx = dev_copy(x), *dy = dev_copy(y);
	if (dev) {
		typename Tr<T>::R *dc;
		Sv *dsv;
		CU(cudaMalloc(&dc, sizeof(c)));
		CU(cudaMalloc(&dsv, sizeof(s)));
		CU(cudaMemcpy(dc, &c, sizeof(c), cudaMemcpyHostToDevice));
		CU(cudaMemcpy(dsv, &s, sizeof(s), cudaMemcpyHostToDevice));
		CK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
		CK(call(h, n, dx, ix, dy, iy, dc, dsv));
		CK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
		cudaFree(dc), cudaFree(dsv);
	} else {
		CK(call(h, n, dx, ix, dy, iy, &c, &s));
	}
	std::vector<T> gx = host_copy(dx, x.size()), gy = host_copy(dy, y.size());
	zd zs;
	if constexpr (sizeof(Sv) == sizeof(T))
		zs = Tr<T>::get(s);
	else
		zs = s;
	for (int i = 0; i < n; i++) {
		zd xv = Tr<T>::get(x[i * ix]), yv = Tr<T>::get(y[i * iy]);
		expect<T>(name, Tr<T>::get(gx[i * ix]), (double)c * xv + zs * yv);
		expect<T>(name, Tr<T>::get(gy[i * iy]), (double)c * yv - std::conj(zs) * xv);
	}
	cudaFree(dx), cudaFree(dy);
}

int main()
{
	cublasHandle_t h;
	CK(cublasCreate(&h));
	test_symv<float>(h, false, false);
	test_symv<double>(h, false, false);
	test_symv<cuComplex>(h, false, false);
	test_symv<cuDoubleComplex>(h, false, false);
	test_symv<float>(h, false, true);
	test_symv<cuComplex>(h, true, false);
	test_symv<cuDoubleComplex>(h, true, false);
	test_symv<cuDoubleComplex>(h, true, true);
	test_rank_k<float, float>(h, false);
	test_rank_k<double, double>(h, false);
	test_rank_k<cuComplex, cuComplex>(h, false);
	test_rank_k<cuDoubleComplex, cuDoubleComplex>(h, false);
	test_rank_k<cuComplex, float>(h, true);
	test_rank_k<cuDoubleComplex, double>(h, true);
	test_symm<float>(h, false);
	test_symm<double>(h, false);
	test_symm<cuComplex>(h, false);
	test_symm<cuDoubleComplex>(h, false);
	test_symm<cuComplex>(h, true);
	test_symm<cuDoubleComplex>(h, true);
	test_rank_2k<float, float>(h, false);
	test_rank_2k<double, double>(h, false);
	test_rank_2k<cuComplex, cuComplex>(h, false);
	test_rank_2k<cuDoubleComplex, cuDoubleComplex>(h, false);
	test_rank_2k<cuComplex, float>(h, true);
	test_rank_2k<cuDoubleComplex, double>(h, true);
	test_rank_update<float>(h, false, false);
	test_rank_update<double>(h, false, true);
	test_rank_update<cuComplex>(h, false, false);
	test_rank_update<cuDoubleComplex>(h, false, true);
	test_rank_update<cuComplex>(h, true, false);
	test_rank_update<cuComplex>(h, true, true);
	test_rank_update<cuDoubleComplex>(h, true, false);
	test_rank_update<cuDoubleComplex>(h, true, true);
	test_rank_update<float>(h, false, true);
	test_trmv<float>(h);
	test_trmv<double>(h);
	test_trmv<cuComplex>(h);
	test_trmv<cuDoubleComplex>(h);
	test_trmm<float>(h);
	test_trmm<double>(h);
	test_trmm<cuComplex>(h);
	test_trmm<cuDoubleComplex>(h);
	test_rot<float>(h, "srot", cublasSrot, 0.8f, false);
	test_rot<float>(h, "srot (device scalars)", cublasSrot, 0.8f, true);
	test_rot<double>(h, "drot", cublasDrot, 0.8, false);
	test_rot<cuComplex>(h, "crot", cublasCrot, make_cuComplex(0.48f, 0.64f), false);
	test_rot<cuDoubleComplex>(h, "zrot", cublasZrot, make_cuDoubleComplex(0.48, 0.64), false);
	test_rot<cuComplex>(h, "csrot", cublasCsrot, 0.8f, false);
	test_rot<cuDoubleComplex>(h, "zdrot", cublasZdrot, 0.8, true);
	CK(cublasDestroy(h));
	if (failures) {
		printf("blas_sym: %d wrong\n", failures);
		return 1;
	}
	printf("blas_sym: ok\n");
	return 0;
}
