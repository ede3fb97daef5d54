// SPDX-License-Identifier: MIT
// Level 1-3 cuBLAS routines in every precision (S, D, C, Z), as an ordinary
// CUDA program uses them: axpy, scal, dot/dotu/dotc, nrm2, asum, amax/amin,
// copy, swap, gemv, ger/geru/gerc, gemm, gemmStridedBatched, gemmBatched and
// trsm, with strided vectors and transposes, in host and device pointer mode.
// Every result is checked against a CPU reference; exits 1 on a wrong answer.
#include <complex>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
	static constexpr double tol = 2e-4;
	static zd get(float v) { return v; }
	static float make(zd c) { return (float)c.real(); }
	static const char *name() { return "S"; }
};
template <> struct Tr<double> {
	typedef double R;
	static const bool cplx = false;
	static constexpr double tol = 1e-10;
	static zd get(double v) { return v; }
	static double make(zd c) { return c.real(); }
	static const char *name() { return "D"; }
};
template <> struct Tr<cuComplex> {
	typedef float R;
	static const bool cplx = true;
	static constexpr double tol = 2e-4;
	static zd get(cuComplex v) { return zd(v.x, v.y); }
	static cuComplex make(zd c) { return make_cuComplex((float)c.real(), (float)c.imag()); }
	static const char *name() { return "C"; }
};
template <> struct Tr<cuDoubleComplex> {
	typedef double R;
	static const bool cplx = true;
	static constexpr double tol = 1e-10;
	static zd get(cuDoubleComplex v) { return zd(v.x, v.y); }
	static cuDoubleComplex make(zd c) { return make_cuDoubleComplex(c.real(), c.imag()); }
	static const char *name() { return "Z"; }
};

// cuBLAS by overloading, one set per precision.
#define L1(P, T, R, DOT)                                                                                          \
	static cublasStatus_t axpy(cublasHandle_t h, int n, const T *a, const T *x, int ix, T *y, int iy)         \
	{ return cublas##P##axpy(h, n, a, x, ix, y, iy); }                                                        \
	static cublasStatus_t scal(cublasHandle_t h, int n, const T *a, T *x, int ix)                             \
	{ return cublas##P##scal(h, n, a, x, ix); }                                                               \
	static cublasStatus_t copy(cublasHandle_t h, int n, const T *x, int ix, T *y, int iy)                     \
	{ return cublas##P##copy(h, n, x, ix, y, iy); }                                                           \
	static cublasStatus_t swap(cublasHandle_t h, int n, T *x, int ix, T *y, int iy)                           \
	{ return cublas##P##swap(h, n, x, ix, y, iy); }                                                           \
	static cublasStatus_t dotu(cublasHandle_t h, int n, const T *x, int ix, const T *y, int iy, T *r)        \
	{ return cublas##P##DOT(h, n, x, ix, y, iy, r); }                                                         \
	static cublasStatus_t gemv(cublasHandle_t h, cublasOperation_t t, int m, int n, const T *a, const T *A,  \
				   int lda, const T *x, int ix, const T *b, T *y, int iy)                          \
	{ return cublas##P##gemv(h, t, m, n, a, A, lda, x, ix, b, y, iy); }                                       \
	static cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,  \
				   int k, const T *a, const T *A, int lda, const T *B, int ldb, const T *b, T *C,   \
				   int ldc)                                                                        \
	{ return cublas##P##gemm(h, ta, tb, m, n, k, a, A, lda, B, ldb, b, C, ldc); }                             \
	static cublasStatus_t gemm_sb(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, \
				      int k, const T *a, const T *A, int lda, long long sa, const T *B, int ldb,  \
				      long long sb, const T *b, T *C, int ldc, long long sc, int bc)              \
	{ return cublas##P##gemmStridedBatched(h, ta, tb, m, n, k, a, A, lda, sa, B, ldb, sb, b, C, ldc, sc, bc); } \
	static cublasStatus_t gemm_b(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, \
				     int k, const T *a, const T *const *A, int lda, const T *const *B, int ldb,   \
				     const T *b, T *const *C, int ldc, int bc)                                    \
	{ return cublas##P##gemmBatched(h, ta, tb, m, n, k, a, A, lda, B, ldb, b, C, ldc, bc); }                  \
	static cublasStatus_t trsm(cublasHandle_t h, cublasSideMode_t s, cublasFillMode_t u, cublasOperation_t t, \
				   cublasDiagType_t d, int m, int n, const T *a, const T *A, int lda, T *B, int ldb) \
	{ return cublas##P##trsm(h, s, u, t, d, m, n, a, A, lda, B, ldb); }
L1(S, float, float, dot)
L1(D, double, double, dot)
L1(C, cuComplex, float, dotu)
L1(Z, cuDoubleComplex, double, dotu)

#define REDUCE(P, PR, T, R)                                                                                        \
	static cublasStatus_t nrm2(cublasHandle_t h, int n, const T *x, int ix, R *r) { return cublas##PR##nrm2(h, n, x, ix, r); } \
	static cublasStatus_t asum(cublasHandle_t h, int n, const T *x, int ix, R *r) { return cublas##PR##asum(h, n, x, ix, r); } \
	static cublasStatus_t amax(cublasHandle_t h, int n, const T *x, int ix, int *r) { return cublasI##P##amax(h, n, x, ix, r); } \
	static cublasStatus_t amin(cublasHandle_t h, int n, const T *x, int ix, int *r) { return cublasI##P##amin(h, n, x, ix, r); }
REDUCE(s, S, float, float)
REDUCE(d, D, double, double)
REDUCE(c, Sc, cuComplex, float)
REDUCE(z, Dz, cuDoubleComplex, double)

static cublasStatus_t geru(cublasHandle_t h, int m, int n, const float *a, const float *x, int ix, const float *y, int iy, float *A, int lda) { return cublasSger(h, m, n, a, x, ix, y, iy, A, lda); }
static cublasStatus_t geru(cublasHandle_t h, int m, int n, const double *a, const double *x, int ix, const double *y, int iy, double *A, int lda) { return cublasDger(h, m, n, a, x, ix, y, iy, A, lda); }
static cublasStatus_t geru(cublasHandle_t h, int m, int n, const cuComplex *a, const cuComplex *x, int ix, const cuComplex *y, int iy, cuComplex *A, int lda) { return cublasCgeru(h, m, n, a, x, ix, y, iy, A, lda); }
static cublasStatus_t geru(cublasHandle_t h, int m, int n, const cuDoubleComplex *a, const cuDoubleComplex *x, int ix, const cuDoubleComplex *y, int iy, cuDoubleComplex *A, int lda) { return cublasZgeru(h, m, n, a, x, ix, y, iy, A, lda); }
static cublasStatus_t gerc(cublasHandle_t h, int m, int n, const cuComplex *a, const cuComplex *x, int ix, const cuComplex *y, int iy, cuComplex *A, int lda) { return cublasCgerc(h, m, n, a, x, ix, y, iy, A, lda); }
static cublasStatus_t gerc(cublasHandle_t h, int m, int n, const cuDoubleComplex *a, const cuDoubleComplex *x, int ix, const cuDoubleComplex *y, int iy, cuDoubleComplex *A, int lda) { return cublasZgerc(h, m, n, a, x, ix, y, iy, A, lda); }
static cublasStatus_t dotc(cublasHandle_t h, int n, const cuComplex *x, int ix, const cuComplex *y, int iy, cuComplex *r) { return cublasCdotc(h, n, x, ix, y, iy, r); }
static cublasStatus_t dotc(cublasHandle_t h, int n, const cuDoubleComplex *x, int ix, const cuDoubleComplex *y, int iy, cuDoubleComplex *r) { return cublasZdotc(h, n, x, ix, y, iy, r); }

static unsigned seed = 12345;
static double rnd()
{
	seed = seed * 1103515245u + 12345u;
	return ((seed >> 8) % 2001) / 1000.0 - 1.0;   // [-1, 1]
}

template <class T> static std::vector<T> random_vec(size_t n)
{
	std::vector<T> v(n);
	for (auto &e : v)
		e = Tr<T>::make(Tr<T>::cplx ? zd(rnd(), rnd()) : zd(rnd(), 0));
	return v;
}

template <class T> static T *to_dev(const std::vector<T> &h)
{
	T *d;
	CU(cudaMalloc(&d, h.size() * sizeof(T)));
	CU(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
	return d;
}

template <class T> static std::vector<T> from_dev(const T *d, size_t n)
{
	std::vector<T> h(n);
	CU(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
	return h;
}

static void expect(bool ok, const char *p, const char *what, double got, double want)
{
	if (!ok) {
		printf("FAIL %s%s: got %.10g want %.10g\n", p, what, got, want);
		failures++;
	}
}

template <class T> static void near(const char *what, zd got, zd want, double scale = 1)
{
	double err = std::abs(got - want), tol = Tr<T>::tol * (1 + std::abs(want)) * scale;
	expect(err <= tol, Tr<T>::name(), what, std::abs(got), std::abs(want));
}

template <class T> static void near_all(const char *what, const std::vector<T> &got, const std::vector<zd> &want,
					double scale = 1)
{
	double worst = 0;
	size_t at = 0;
	for (size_t i = 0; i < got.size(); i++) {
		double err = std::abs(Tr<T>::get(got[i]) - want[i]) / (Tr<T>::tol * (1 + std::abs(want[i])) * scale);
		if (err > worst)
			worst = err, at = i;
	}
	if (worst > 1) {
		printf("FAIL %s%s: element %zu got (%g,%g) want (%g,%g)\n", Tr<T>::name(), what, at,
		       Tr<T>::get(got[at]).real(), Tr<T>::get(got[at]).imag(), want[at].real(), want[at].imag());
		failures++;
	}
}

template <class T> static std::vector<zd> widen(const std::vector<T> &v)
{
	std::vector<zd> w(v.size());
	for (size_t i = 0; i < v.size(); i++)
		w[i] = Tr<T>::get(v[i]);
	return w;
}

static zd opa(const std::vector<zd> &A, int lda, cublasOperation_t t, int i, int j)
{
	return t == CUBLAS_OP_N ? A[i + (size_t)j * lda] : t == CUBLAS_OP_T ? A[j + (size_t)i * lda] : std::conj(A[j + (size_t)i * lda]);
}

template <class T> static void level1(cublasHandle_t h)
{
	const int n = 37, ix = 2, iy = 3;
	auto hx = random_vec<T>(n * ix), hy = random_vec<T>(n * iy);
	auto wx = widen(hx), wy = widen(hy);
	T *x = to_dev(hx), *y = to_dev(hy);
	zd alpha = Tr<T>::cplx ? zd(0.5, -1.25) : zd(0.75, 0);
	T a = Tr<T>::make(alpha);

	// axpy: y[i*iy] += alpha x[i*ix]
	CK(axpy(h, n, &a, x, ix, y, iy));
	for (int i = 0; i < n; i++)
		wy[(size_t)i * iy] += alpha * wx[(size_t)i * ix];
	near_all("axpy", from_dev(y, hy.size()), wy);

	// dot(u) and dotc, host result
	T r;
	zd want = 0, wantc = 0;
	CK(dotu(h, n, x, ix, y, iy, &r));
	for (int i = 0; i < n; i++) {
		want += wx[(size_t)i * ix] * wy[(size_t)i * iy];
		wantc += std::conj(wx[(size_t)i * ix]) * wy[(size_t)i * iy];
	}
	near<T>("dot", Tr<T>::get(r), want, n);
	if constexpr (Tr<T>::cplx) {
		CK(dotc(h, n, x, ix, y, iy, &r));
		near<T>("dotc", Tr<T>::get(r), wantc, n);
	}

	// nrm2, asum, amax, amin over x with stride ix
	typename Tr<T>::R rr;
	double ss = 0, sa = 0, best = -1, worst = 1e300;
	int imax = 0, imin = 0, ir;
	for (int i = 0; i < n; i++) {
		zd v = wx[(size_t)i * ix];
		double a1 = std::fabs(v.real()) + std::fabs(v.imag());
		ss += std::norm(v);
		sa += a1;
		if (a1 > best) best = a1, imax = i + 1;
		if (a1 < worst) worst = a1, imin = i + 1;
	}
	CK(nrm2(h, n, x, ix, &rr));
	near<T>("nrm2", rr, std::sqrt(ss), n);
	CK(asum(h, n, x, ix, &rr));
	near<T>("asum", rr, sa, n);
	CK(amax(h, n, x, ix, &ir));
	expect(ir == imax, Tr<T>::name(), "amax", ir, imax);
	CK(amin(h, n, x, ix, &ir));
	expect(ir == imin, Tr<T>::name(), "amin", ir, imin);
	// incx <= 0: result 0 without touching x
	ir = 99;
	CK(amax(h, n, x, 0, &ir));
	expect(ir == 0, Tr<T>::name(), "amax incx=0", ir, 0);

	// scal
	CK(scal(h, n, &a, x, ix));
	for (int i = 0; i < n; i++)
		wx[(size_t)i * ix] *= alpha;
	near_all("scal", from_dev(x, hx.size()), wx);

	// swap then copy
	CK(swap(h, n, x, ix, y, iy));
	for (int i = 0; i < n; i++)
		std::swap(wx[(size_t)i * ix], wy[(size_t)i * iy]);
	near_all("swap x", from_dev(x, hx.size()), wx);
	near_all("swap y", from_dev(y, hy.size()), wy);
	CK(copy(h, n, x, ix, y, iy));
	for (int i = 0; i < n; i++)
		wy[(size_t)i * iy] = wx[(size_t)i * ix];
	near_all("copy", from_dev(y, hy.size()), wy);

	// device pointer mode: scalars and results in device memory
	T *dev_a, *dev_r;
	typename Tr<T>::R *dev_rr;
	CU(cudaMalloc(&dev_a, sizeof(T)));
	CU(cudaMalloc(&dev_r, sizeof(T)));
	CU(cudaMalloc(&dev_rr, sizeof(typename Tr<T>::R)));
	CU(cudaMemcpy(dev_a, &a, sizeof(T), cudaMemcpyHostToDevice));
	CK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
	CK(axpy(h, n, dev_a, x, ix, y, iy));
	CK(dotu(h, n, x, ix, y, iy, dev_r));
	CK(nrm2(h, n, y, iy, dev_rr));
	CK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
	for (int i = 0; i < n; i++)
		wy[(size_t)i * iy] += alpha * wx[(size_t)i * ix];
	want = 0, ss = 0;
	for (int i = 0; i < n; i++) {
		want += wx[(size_t)i * ix] * wy[(size_t)i * iy];
		ss += std::norm(wy[(size_t)i * iy]);
	}
	CU(cudaMemcpy(&r, dev_r, sizeof(T), cudaMemcpyDeviceToHost));
	CU(cudaMemcpy(&rr, dev_rr, sizeof(rr), cudaMemcpyDeviceToHost));
	near_all("axpy (device mode)", from_dev(y, hy.size()), wy);
	near<T>("dot (device mode)", Tr<T>::get(r), want, n);
	near<T>("nrm2 (device mode)", rr, std::sqrt(ss), n);
	cudaFree(dev_a), cudaFree(dev_r), cudaFree(dev_rr), cudaFree(x), cudaFree(y);
}

template <class T> static void level2(cublasHandle_t h)
{
	const int m = 23, n = 17, lda = 29, ix = 2, iy = 3;
	zd alpha = Tr<T>::cplx ? zd(1.5, 0.5) : zd(1.5, 0), beta = Tr<T>::cplx ? zd(-0.5, 0.25) : zd(-0.5, 0);
	T a = Tr<T>::make(alpha), b = Tr<T>::make(beta);
	auto hA = random_vec<T>((size_t)lda * n);
	T *A = to_dev(hA);
	auto wA = widen(hA);

	for (cublasOperation_t t : { CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C }) {
		int lx = t == CUBLAS_OP_N ? n : m, ly = t == CUBLAS_OP_N ? m : n;
		auto hx = random_vec<T>((size_t)lx * ix), hy = random_vec<T>((size_t)ly * iy);
		auto wx = widen(hx), wy = widen(hy);
		T *x = to_dev(hx), *y = to_dev(hy);
		CK(gemv(h, t, m, n, &a, A, lda, x, ix, &b, y, iy));
		for (int i = 0; i < ly; i++) {
			zd s = 0;
			for (int j = 0; j < lx; j++)
				s += opa(wA, lda, t, i, j) * wx[(size_t)j * ix];
			wy[(size_t)i * iy] = alpha * s + beta * wy[(size_t)i * iy];
		}
		near_all(t == CUBLAS_OP_N ? "gemv N" : t == CUBLAS_OP_T ? "gemv T" : "gemv C", from_dev(y, hy.size()),
			 wy, m);
		cudaFree(x), cudaFree(y);
	}
	// ger / geru, gerc
	auto hx = random_vec<T>((size_t)m * ix), hy = random_vec<T>((size_t)n * iy);
	auto wx = widen(hx), wy = widen(hy);
	T *x = to_dev(hx), *y = to_dev(hy);
	CK(geru(h, m, n, &a, x, ix, y, iy, A, lda));
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++)
			wA[i + (size_t)j * lda] += alpha * wx[(size_t)i * ix] * wy[(size_t)j * iy];
	near_all("ger", from_dev(A, hA.size()), wA);
	if constexpr (Tr<T>::cplx) {
		CK(gerc(h, m, n, &a, x, ix, y, iy, A, lda));
		for (int j = 0; j < n; j++)
			for (int i = 0; i < m; i++)
				wA[i + (size_t)j * lda] += alpha * wx[(size_t)i * ix] * std::conj(wy[(size_t)j * iy]);
		near_all("gerc", from_dev(A, hA.size()), wA);
	}
	cudaFree(x), cudaFree(y), cudaFree(A);
}

template <class T> static void gemm_ref(std::vector<zd> &C, const std::vector<zd> &A, const std::vector<zd> &B,
					cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, zd alpha,
					int lda, int ldb, int ldc, zd beta, size_t oa = 0, size_t ob = 0, size_t oc = 0)
{
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			zd s = 0;
			for (int p = 0; p < k; p++)
				s += (ta == CUBLAS_OP_N ? A[oa + i + (size_t)p * lda] : ta == CUBLAS_OP_T ? A[oa + p + (size_t)i * lda] : std::conj(A[oa + p + (size_t)i * lda])) *
				     (tb == CUBLAS_OP_N ? B[ob + p + (size_t)j * ldb] : tb == CUBLAS_OP_T ? B[ob + j + (size_t)p * ldb] : std::conj(B[ob + j + (size_t)p * ldb]));
			C[oc + i + (size_t)j * ldc] = alpha * s + beta * C[oc + i + (size_t)j * ldc];
		}
}

template <class T> static void level3(cublasHandle_t h)
{
	const int m = 19, n = 13, k = 11, batch = 3;
	zd alpha = Tr<T>::cplx ? zd(0.75, -0.5) : zd(0.75, 0), beta = Tr<T>::cplx ? zd(0.25, 1) : zd(0.25, 0);
	T a = Tr<T>::make(alpha), b = Tr<T>::make(beta);
	cublasOperation_t ta = CUBLAS_OP_T, tb = Tr<T>::cplx ? CUBLAS_OP_C : CUBLAS_OP_N;
	int lda = k + 2, ldb = (tb == CUBLAS_OP_N ? k : n) + 1, ldc = m + 3;
	long long sa = (long long)lda * m + 5, sb = (long long)ldb * (tb == CUBLAS_OP_N ? n : k) + 7,
		  sc = (long long)ldc * n + 1;
	auto hA = random_vec<T>(sa * batch), hB = random_vec<T>(sb * batch), hC = random_vec<T>(sc * batch);
	auto wA = widen(hA), wB = widen(hB), wC = widen(hC);
	T *A = to_dev(hA), *B = to_dev(hB), *C = to_dev(hC);

	CK(gemm(h, ta, tb, m, n, k, &a, A, lda, B, ldb, &b, C, ldc));
	gemm_ref<T>(wC, wA, wB, ta, tb, m, n, k, alpha, lda, ldb, ldc, beta);
	near_all("gemm", from_dev(C, hC.size()), wC, k);

	CK(gemm_sb(h, ta, tb, m, n, k, &a, A, lda, sa, B, ldb, sb, &b, C, ldc, sc, batch));
	for (int i = 0; i < batch; i++)
		gemm_ref<T>(wC, wA, wB, ta, tb, m, n, k, alpha, lda, ldb, ldc, beta, sa * i, sb * i, sc * i);
	near_all("gemmStridedBatched", from_dev(C, hC.size()), wC, k);

	// pointer arrays in device memory, batches in reverse order
	std::vector<const T *> pa(batch), pb(batch);
	std::vector<T *> pc(batch);
	for (int i = 0; i < batch; i++)
		pa[i] = A + sa * (batch - 1 - i), pb[i] = B + sb * i, pc[i] = C + sc * i;
	const T **dA;
	const T **dB;
	T **dC;
	CU(cudaMalloc(&dA, batch * sizeof(void *)));
	CU(cudaMalloc(&dB, batch * sizeof(void *)));
	CU(cudaMalloc(&dC, batch * sizeof(void *)));
	CU(cudaMemcpy(dA, pa.data(), batch * sizeof(void *), cudaMemcpyHostToDevice));
	CU(cudaMemcpy(dB, pb.data(), batch * sizeof(void *), cudaMemcpyHostToDevice));
	CU(cudaMemcpy(dC, pc.data(), batch * sizeof(void *), cudaMemcpyHostToDevice));
	CK(gemm_b(h, ta, tb, m, n, k, &a, dA, lda, dB, ldb, &b, dC, ldc, batch));
	for (int i = 0; i < batch; i++)
		gemm_ref<T>(wC, wA, wB, ta, tb, m, n, k, alpha, lda, ldb, ldc, beta, sa * (batch - 1 - i), sb * i, sc * i);
	near_all("gemmBatched", from_dev(C, hC.size()), wC, k);

	// device pointer mode gemm
	T *dab;
	CU(cudaMalloc(&dab, 2 * sizeof(T)));
	CU(cudaMemcpy(dab, &a, sizeof(T), cudaMemcpyHostToDevice));
	CU(cudaMemcpy(dab + 1, &b, sizeof(T), cudaMemcpyHostToDevice));
	CK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE));
	CK(gemm(h, ta, tb, m, n, k, dab, A, lda, B, ldb, dab + 1, C, ldc));
	CK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
	gemm_ref<T>(wC, wA, wB, ta, tb, m, n, k, alpha, lda, ldb, ldc, beta);
	near_all("gemm (device mode)", from_dev(C, hC.size()), wC, k);
	cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dab), cudaFree(A), cudaFree(B), cudaFree(C);
}

// trsm: A triangular and well conditioned (dominant diagonal); solve, then
// check op(A) X = alpha B (left) or X op(A) = alpha B (right) by multiplying back.
template <class T> static void trsm_check(cublasHandle_t h)
{
	const int m = 14, n = 9;
	zd alpha = Tr<T>::cplx ? zd(2, -1) : zd(2, 0);
	T a = Tr<T>::make(alpha);
	for (cublasSideMode_t side : { CUBLAS_SIDE_LEFT, CUBLAS_SIDE_RIGHT })
		for (cublasFillMode_t uplo : { CUBLAS_FILL_MODE_LOWER, CUBLAS_FILL_MODE_UPPER })
			for (cublasOperation_t t : { CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C })
				for (cublasDiagType_t diag : { CUBLAS_DIAG_NON_UNIT, CUBLAS_DIAG_UNIT }) {
					int ka = side == CUBLAS_SIDE_LEFT ? m : n, lda = ka + 1, ldb = m + 2;
					auto hA = random_vec<T>((size_t)lda * ka), hB = random_vec<T>((size_t)ldb * n);
					for (int i = 0; i < ka; i++)
						hA[i + (size_t)i * lda] = Tr<T>::make(Tr<T>::get(hA[i + (size_t)i * lda]) + zd(ka, 0));
					auto wA = widen(hA), wB = widen(hB);
					// the triangle cuBLAS uses, with the unit diagonal when asked
					std::vector<zd> tri((size_t)lda * ka, 0);
					for (int j = 0; j < ka; j++)
						for (int i = 0; i < ka; i++)
							if (i == j)
								tri[i + (size_t)j * lda] = diag == CUBLAS_DIAG_UNIT ? 1 : wA[i + (size_t)j * lda];
							else if ((uplo == CUBLAS_FILL_MODE_UPPER) == (i < j))
								tri[i + (size_t)j * lda] = wA[i + (size_t)j * lda];
					T *A = to_dev(hA), *B = to_dev(hB);
					CK(trsm(h, side, uplo, t, diag, m, n, &a, A, lda, B, ldb));
					auto X = widen(from_dev(B, hB.size()));
					double worst = 0;
					for (int j = 0; j < n; j++)
						for (int i = 0; i < m; i++) {
							zd s = 0;
							if (side == CUBLAS_SIDE_LEFT)
								for (int p = 0; p < m; p++)
									s += opa(tri, lda, t, i, p) * X[p + (size_t)j * ldb];
							else
								for (int p = 0; p < n; p++)
									s += X[i + (size_t)p * ldb] * opa(tri, lda, t, p, j);
							zd want = alpha * wB[i + (size_t)j * ldb];
							worst = std::max(worst, std::abs(s - want) / (1 + std::abs(want)));
						}
					if (worst > Tr<T>::tol * 100) {
						printf("FAIL %strsm side %d uplo %d trans %d diag %d: residual %g\n", Tr<T>::name(),
						       side, uplo, t, diag, worst);
						failures++;
					}
					cudaFree(A), cudaFree(B);
				}
}

template <class T> static void all(cublasHandle_t h)
{
	level1<T>(h);
	level2<T>(h);
	level3<T>(h);
	trsm_check<T>(h);
	printf("%s: checked\n", Tr<T>::name());
}

int main()
{
	cublasHandle_t h;
	CK(cublasCreate(&h));
	all<float>(h);
	all<double>(h);
	all<cuComplex>(h);
	all<cuDoubleComplex>(h);

	// Csscal / Zdscal: a real alpha
	{
		std::vector<cuComplex> hx = random_vec<cuComplex>(8);
		cuComplex *x = to_dev(hx);
		float a = -1.5f;
		CK(cublasCsscal(h, 8, &a, x, 1));
		auto got = from_dev(x, 8);
		std::vector<zd> want = widen(hx);
		for (auto &w : want)
			w *= a;
		near_all("sscal", got, want);
		cudaFree(x);
	}
	// argument errors as cuBLAS returns them
	{
		float *d;
		float one = 1, r;
		CU(cudaMalloc(&d, 64 * sizeof(float)));
		if (cublasSgemv(h, CUBLAS_OP_N, 4, 4, &one, d, 3, d, 1, &one, d, 1) != CUBLAS_STATUS_INVALID_VALUE ||
		    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 4, &one, d, 4, d, 4, &one, d, 4) != CUBLAS_STATUS_INVALID_VALUE ||
		    cublasDtrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, 4, 4, (double *)&one, (double *)d, 2, (double *)d, 4) != CUBLAS_STATUS_INVALID_VALUE ||
		    cublasSger(h, 4, 4, &one, d, 0, d, 1, d, 4) != CUBLAS_STATUS_INVALID_VALUE ||
		    cublasSnrm2(h, 4, d, 1, NULL) != CUBLAS_STATUS_INVALID_VALUE ||
		    cublasSetPointerMode(h, (cublasPointerMode_t)7) != CUBLAS_STATUS_INVALID_VALUE) {
			printf("FAIL argument errors\n");
			failures++;
		}
		// n = 0: result 0
		r = 5;
		CK(cublasSdot(h, 0, d, 1, d, 1, &r));
		if (r != 0) {
			printf("FAIL sdot n=0 gave %g\n", r);
			failures++;
		}
		cudaFree(d);
	}
	CK(cublasDestroy(h));
	if (failures) {
		printf("blas_level: %d failure(s)\n", failures);
		return 1;
	}
	printf("blas_level: all precisions ok\n");
	return 0;
}
