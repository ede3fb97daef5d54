// SPDX-License-Identifier: MIT
// cuSOLVER's dense API as torch.linalg calls it (issue 38): a handle (on a
// stream of its own), every matrix and every workspace (of the size its
// _bufferSize gave) made at init, before phos_fn_serve, so a snapshot
// restored in a new executor must go on with them; each request factors
// and solves fresh matrices, each answer checked here against a plain
// reference in double. In order:
//
//   getrf     LU of a 6 x 6 float A (lda 8), pivots and info
//   getrs_n   A X = B, 2 right-hand sides (ldb 7)
//   getrs_t   A^T X = B
//   potrf_l   Cholesky of a 5 x 5 SPD double (lda 6), lower
//   potrs_l   A X = B, 3 right-hand sides
//   potrf_u   Cholesky of a 5 x 5 SPD float, upper: U^T U = A, the lower
//             triangle left as it was
//   geqrf     QR of a 7 x 4 double (lda 9): R, reflectors, tau
//   ormqr     Q^T C for a 7 x 2 C, from geqrf's reflectors
//   orgqr     Q's 4 columns from a copy of geqrf's output: Q R = A, Q^T Q = I,
//             and ormqr's Q^T C is Q^T C
//   syevd_v   eigenvalues and vectors of a 6 x 6 symmetric double, upper:
//             A v = w v, w ascending, V orthonormal
//   syevd_n   eigenvalues only of a 4 x 4 symmetric float (lda 5), lower:
//             their sum the trace, their squares' sum A's Frobenius norm
//   singular  getrf of a double 3 x 3 with a zero column 2: info 2
//   xgetrf, xgetrs   the 64-bit API (int64_t pivots) on a 5 x 5 double (lda 6)
//   xpotrf, xpotrs   ... Cholesky of a 4 x 4 SPD float, lower
//   xgeqrf    ... QR of a 6 x 3 double: R^T R = A^T A
//   xsyevd    ... eigenvalues and vectors of a 5 x 5 symmetric float, lower
//   (each with a params object made at init, and the device and host
//   workspaces their _bufferSize gave)
//   syevj     Jacobi eigenvalues and vectors of a 5 x 5 symmetric double
//             (tolerance 1e-12 and 50 sweeps set on its info)
//   syevjb    syevjBatched of two 3 x 3 symmetric floats, unsorted (sort 0)
//   gesvdj    Jacobi SVD of a 5 x 3 double, economy: U S V^T = A, U^T U = I,
//             V^T V = I, S descending
//   gesvdjb   gesvdjBatched of two 3 x 4 floats, full U (3 x 3) and V (4 x 4)
//   potrfb    potrfBatched of two 4 x 4 SPD doubles (upper) named by a device
//             array of pointers (in reverse order of their allocation)
//   potrsb    potrsBatched of them with one right-hand side each
//   xsyevb    XsyevBatched (64-bit API) of three 4 x 4 symmetric doubles (lda
//             5, upper; the padding 1e30): eigenvalues and vectors of each,
//             info per matrix (torch.linalg.eigh of a batch calls it)
//
// argv[1] "pointers": the buffers' device addresses and the workspace
// sizes as JSON on stderr (the test holds the executor's read/write sets
// against them); "refused": calls what phos-fn does not forward (a stub
// twice, a complex call, an algorithm other than the default) and prints
// their statuses as JSON; "loop N": N requests' work in a row, a JSON line
// every 100 and a last one with the count of wrong answers. At start it
// says on stderr which file serves cusolverDnCreate ("cusolver: PATH"):
// the build gives the program an RPATH to a copy of NVIDIA's library in
// nvidia/cu13/lib beside it, as PyTorch's wheels are laid out.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <cusolverDn.h>
#include <phos/fn.h>

#define CK(call)                                                                                          \
	do {                                                                                              \
		cudaError_t e_ = (call);                                                                  \
		if (e_ != cudaSuccess) {                                                                  \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
			exit(1);                                                                          \
		}                                                                                         \
	} while (0)
#define SK(call)                                                                              \
	do {                                                                                  \
		cusolverStatus_t s_ = (call);                                                 \
		if (s_ != CUSOLVER_STATUS_SUCCESS) {                                          \
			fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #call,  \
				(int)s_);                                                     \
			exit(1);                                                      \
		}                                                                             \
	} while (0)

enum { LU_N = 6, LU_LDA = 8, LU_RHS = 2, LU_LDB = 7, CH_N = 5, CH_LDA = 6, CH_RHS = 3, QR_M = 7, QR_N = 4,
       QR_LDA = 9, QR_C = 2, EV_N = 6, EN_N = 4, EN_LDA = 5, SG_N = 3, XL_N = 5, XL_LDA = 6, XL_RHS = 2, XC_N = 4,
       XQ_M = 6, XQ_N = 3, XE_N = 5, JE_N = 5, JB_N = 3, JB_B = 2, SV_M = 5, SV_N = 3, SB_M = 3, SB_N = 4, SB_B = 2, PB_N = 4, PB_B = 2,
       EB_N = 4, EB_LDA = 5, EB_B = 3 };
enum { GETRF, GETRS_N, GETRS_T, POTRF_L, POTRS_L, POTRF_U, GEQRF, ORMQR, ORGQR, SYEVD_V, SYEVD_N, SINGULAR, XGETRF,
       XGETRS, XPOTRF, XPOTRS, XGEQRF, XSYEVD, SYEVJ, SYEVJB, GESVDJ, GESVDJB, POTRFB, POTRSB, XSYEVB, CALLS };

static const char *const call_names[CALLS] = { "getrf", "getrs_n", "getrs_t", "potrf_l", "potrs_l", "potrf_u",
					       "geqrf", "ormqr", "orgqr", "syevd_v", "syevd_n", "singular",
					       "xgetrf", "xgetrs", "xpotrf", "xpotrs", "xgeqrf", "xsyevd", "syevj",
					       "syevjb", "gesvdj", "gesvdjb", "potrfb", "potrsb", "xsyevb" };

struct state {
	cusolverDnHandle_t h;
	cusolverDnParams_t params;
	double *xl, *xb, *xq, *xtau;
	float *xc, *xcb, *xe, *xew;
	int64_t *xpiv;
	syevjInfo_t ej, ejb;
	gesvdjInfo_t gj;
	double *je, *jew, *sv, *svs, *svu, *svv;
	float *jb, *jbw, *sb, *sbs, *sbu, *sbv;
	int *binfo;   // the batched calls' infos: JB_B for syevjb, then SB_B for gesvdjb, then PB_B for potrfb
	double *pba[PB_B], *pbb[PB_B], **pbaa, **pbba;   // potrfb's matrices and right-hand sides, their arrays
	double *xeb, *xebw;   // xsyevb's matrices and eigenvalues
	int *xebinfo;         // ... its infos
	size_t xwork[CALLS], xhost[CALLS];   // the 64-bit API's workspaces, bytes
	void *xhw[CALLS];                    // its host workspaces
	cudaStream_t s;
	float *lu, *bn, *bt, *chu, *en, *enw;
	double *ch, *cb, *qr, *tau, *qc, *q, *ev, *evw, *sg;
	int *ipiv, *sgpiv, *info;
	void *work[CALLS];
	int lwork[CALLS];   // elements (0: the call takes no workspace; the 64-bit API's: xwork)
	int requests, failures;
};

template <typename T> static T *dev_alloc(size_t n)
{
	void *p;

	CK(cudaMalloc(&p, n * sizeof(T)));
	return (T *)p;
}

template <typename T> static void up(T *dst, const std::vector<double> &src)
{
	std::vector<T> v(src.begin(), src.end());

	CK(cudaMemcpy(dst, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
}

template <typename T> static std::vector<double> down(const T *src, size_t n)
{
	std::vector<T> v(n);

	CK(cudaMemcpy(v.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost));
	return std::vector<double>(v.begin(), v.end());
}

// Fresh data for request r: values in [-1, 1], different each request.
static double datum(int r, int i, int which)
{
	return std::sin(0.37 * i + 1.3 * r + 0.71 * which) * std::cos(0.11 * i * which + r);
}

// A rows x cols matrix with leading dimension ld (the gaps 1e30: never read).
static std::vector<double> matrix(int r, int which, int rows, int cols, int ld)
{
	std::vector<double> a((size_t)ld * cols, 1e30);

	for (int j = 0; j < cols; j++)
		for (int i = 0; i < rows; i++)
			a[i + j * ld] = datum(r, i + j * rows, which) + (i == j ? 2.0 : 0.0);
	return a;
}

// A symmetric n x n (ld), positive definite when spd (M M^T + n I).
static std::vector<double> symmetric(int r, int which, int n, int ld, bool spd)
{
	std::vector<double> m = matrix(r, which, n, n, n), a((size_t)ld * n, 1e30);

	for (int j = 0; j < n; j++)
		for (int i = 0; i < n; i++) {
			double v = 0;

			if (spd) {
				for (int k = 0; k < n; k++)
					v += m[i + k * n] * m[j + k * n];
				v += i == j ? n : 0;
			} else {
				v = (m[i + j * n] + m[j + i * n]) / 2;
			}
			a[i + j * ld] = v;
		}
	return a;
}

// The values as a float buffer holds them (what the reference must start from).
static std::vector<double> as_float(std::vector<double> v)
{
	for (double &x : v)
		x = (float)x;
	return v;
}

static bool near(double got, double want, double tol, const char *what, int i, char *why, size_t len)
{
	if (std::fabs(got - want) <= tol * (1 + std::fabs(want)))
		return true;
	snprintf(why, len, "%s[%d]: got %.9g, want %.9g", what, i, got, want);
	return false;
}

static const double FT = 2e-3, DT = 1e-9;

// The 64-bit API's operands, params and workspaces (device and host).
static void make_x(struct state *st)
{
	size_t *w = st->xwork, *hw = st->xhost;

	SK(cusolverDnCreateParams(&st->params));
	st->xl = dev_alloc<double>(XL_LDA * XL_N);
	st->xb = dev_alloc<double>(XL_N * XL_RHS);
	st->xpiv = dev_alloc<int64_t>(XL_N);
	st->xc = dev_alloc<float>(XC_N * XC_N);
	st->xcb = dev_alloc<float>(XC_N);
	st->xq = dev_alloc<double>(XQ_M * XQ_N);
	st->xtau = dev_alloc<double>(XQ_N);
	st->xe = dev_alloc<float>(XE_N * XE_N);
	st->xew = dev_alloc<float>(XE_N);
	st->xeb = dev_alloc<double>(EB_LDA * EB_N * EB_B);
	st->xebw = dev_alloc<double>(EB_N * EB_B);
	st->xebinfo = dev_alloc<int>(EB_B);
	SK(cusolverDnXgetrf_bufferSize(st->h, st->params, XL_N, XL_N, CUDA_R_64F, st->xl, XL_LDA, CUDA_R_64F, &w[XGETRF],
				       &hw[XGETRF]));
	SK(cusolverDnXpotrf_bufferSize(st->h, st->params, CUBLAS_FILL_MODE_LOWER, XC_N, CUDA_R_32F, st->xc, XC_N,
				       CUDA_R_32F, &w[XPOTRF], &hw[XPOTRF]));
	// geqrf with NULL params (the default algorithm), as PyTorch's calls it
	SK(cusolverDnXgeqrf_bufferSize(st->h, NULL, XQ_M, XQ_N, CUDA_R_64F, st->xq, XQ_M, CUDA_R_64F, st->xtau,
				       CUDA_R_64F, &w[XGEQRF], &hw[XGEQRF]));
	SK(cusolverDnXsyevd_bufferSize(st->h, st->params, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, XE_N,
				       CUDA_R_32F, st->xe, XE_N, CUDA_R_32F, st->xew, CUDA_R_32F, &w[XSYEVD],
				       &hw[XSYEVD]));
	SK(cusolverDnXsyevBatched_bufferSize(st->h, st->params, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, EB_N,
					     CUDA_R_64F, st->xeb, EB_LDA, CUDA_R_64F, st->xebw, CUDA_R_64F, &w[XSYEVB],
					     &hw[XSYEVB], EB_B));
	for (int i = XGETRF; i < CALLS; i++) {
		if (w[i])
			CK(cudaMalloc(&st->work[i], w[i]));
		st->xhw[i] = hw[i] ? malloc(hw[i]) : NULL;
	}
}

// The Jacobi calls' operands, info objects and workspaces.
static void make_j(struct state *st)
{
	int *lw = st->lwork;

	SK(cusolverDnCreateSyevjInfo(&st->ej));
	SK(cusolverDnXsyevjSetTolerance(st->ej, 1e-12));
	SK(cusolverDnXsyevjSetMaxSweeps(st->ej, 50));
	SK(cusolverDnCreateSyevjInfo(&st->ejb));
	SK(cusolverDnXsyevjSetSortEig(st->ejb, 0));
	SK(cusolverDnCreateGesvdjInfo(&st->gj));
	st->je = dev_alloc<double>(JE_N * JE_N);
	st->jew = dev_alloc<double>(JE_N);
	st->jb = dev_alloc<float>(JB_N * JB_N * JB_B);
	st->jbw = dev_alloc<float>(JB_N * JB_B);
	st->sv = dev_alloc<double>(SV_M * SV_N);
	st->svs = dev_alloc<double>(SV_N);
	st->svu = dev_alloc<double>(SV_M * SV_N);
	st->svv = dev_alloc<double>(SV_N * SV_N);
	st->sb = dev_alloc<float>(SB_M * SB_N * SB_B);
	st->sbs = dev_alloc<float>(SB_M * SB_B);
	st->sbu = dev_alloc<float>(SB_M * SB_M * SB_B);
	st->sbv = dev_alloc<float>(SB_N * SB_N * SB_B);
	st->binfo = dev_alloc<int>(JB_B + SB_B + PB_B);
	for (int b = 0; b < PB_B; b++) {
		st->pba[b] = dev_alloc<double>(PB_N * PB_N);
		st->pbb[b] = dev_alloc<double>(PB_N);
	}
	st->pbaa = dev_alloc<double *>(PB_B);
	st->pbba = dev_alloc<double *>(PB_B);
	double *ra[PB_B] = { st->pba[1], st->pba[0] }, *rb[PB_B] = { st->pbb[1], st->pbb[0] };
	CK(cudaMemcpy(st->pbaa, ra, sizeof(ra), cudaMemcpyHostToDevice));
	CK(cudaMemcpy(st->pbba, rb, sizeof(rb), cudaMemcpyHostToDevice));
	SK(cusolverDnDsyevj_bufferSize(st->h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, JE_N, st->je, JE_N,
				       st->jew, &lw[SYEVJ], st->ej));
	SK(cusolverDnSsyevjBatched_bufferSize(st->h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, JB_N, st->jb,
					      JB_N, st->jbw, &lw[SYEVJB], st->ejb, JB_B));
	SK(cusolverDnDgesvdj_bufferSize(st->h, CUSOLVER_EIG_MODE_VECTOR, 1, SV_M, SV_N, st->sv, SV_M, st->svs, st->svu,
					SV_M, st->svv, SV_N, &lw[GESVDJ], st->gj));
	SK(cusolverDnSgesvdjBatched_bufferSize(st->h, CUSOLVER_EIG_MODE_VECTOR, SB_M, SB_N, st->sb, SB_M, st->sbs,
					       st->sbu, SB_M, st->sbv, SB_N, &lw[GESVDJB], st->gj, SB_B));
	for (int i = SYEVJ; i < CALLS; i++)
		if (lw[i] > 0)
			CK(cudaMalloc(&st->work[i], (size_t)lw[i] * (i == SYEVJ || i == GESVDJ ? 8 : 4)));
}

static void make(struct state *st)
{
	SK(cusolverDnCreate(&st->h));
	CK(cudaStreamCreate(&st->s));
	SK(cusolverDnSetStream(st->h, st->s));
	st->lu = dev_alloc<float>(LU_LDA * LU_N);
	st->bn = dev_alloc<float>(LU_LDB * LU_RHS);
	st->bt = dev_alloc<float>(LU_LDB * LU_RHS);
	st->ipiv = dev_alloc<int>(LU_N);
	st->ch = dev_alloc<double>(CH_LDA * CH_N);
	st->cb = dev_alloc<double>(CH_N * CH_RHS);
	st->chu = dev_alloc<float>(CH_N * CH_N);
	st->qr = dev_alloc<double>(QR_LDA * QR_N);
	st->tau = dev_alloc<double>(QR_N);
	st->qc = dev_alloc<double>(QR_M * QR_C);
	st->q = dev_alloc<double>(QR_LDA * QR_N);
	st->ev = dev_alloc<double>(EV_N * EV_N);
	st->evw = dev_alloc<double>(EV_N);
	st->en = dev_alloc<float>(EN_LDA * EN_N);
	st->enw = dev_alloc<float>(EN_N);
	st->sg = dev_alloc<double>(SG_N * SG_N);
	st->sgpiv = dev_alloc<int>(SG_N);
	st->info = dev_alloc<int>(CALLS);
	int *lw = st->lwork;

	SK(cusolverDnSgetrf_bufferSize(st->h, LU_N, LU_N, st->lu, LU_LDA, &lw[GETRF]));
	SK(cusolverDnDpotrf_bufferSize(st->h, CUBLAS_FILL_MODE_LOWER, CH_N, st->ch, CH_LDA, &lw[POTRF_L]));
	SK(cusolverDnSpotrf_bufferSize(st->h, CUBLAS_FILL_MODE_UPPER, CH_N, st->chu, CH_N, &lw[POTRF_U]));
	SK(cusolverDnDgeqrf_bufferSize(st->h, QR_M, QR_N, st->qr, QR_LDA, &lw[GEQRF]));
	SK(cusolverDnDormqr_bufferSize(st->h, CUBLAS_SIDE_LEFT, CUBLAS_OP_T, QR_M, QR_C, QR_N, st->qr, QR_LDA, st->tau,
				       st->qc, QR_M, &lw[ORMQR]));
	SK(cusolverDnDorgqr_bufferSize(st->h, QR_M, QR_N, QR_N, st->q, QR_LDA, st->tau, &lw[ORGQR]));
	SK(cusolverDnDsyevd_bufferSize(st->h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, EV_N, st->ev, EV_N,
				       st->evw, &lw[SYEVD_V]));
	SK(cusolverDnSsyevd_bufferSize(st->h, CUSOLVER_EIG_MODE_NOVECTOR, CUBLAS_FILL_MODE_LOWER, EN_N, st->en, EN_LDA,
				       st->enw, &lw[SYEVD_N]));
	SK(cusolverDnDgetrf_bufferSize(st->h, SG_N, SG_N, st->sg, SG_N, &lw[SINGULAR]));
	for (int i = 0; i < CALLS; i++) {
		bool dbl = i != GETRF && i != POTRF_U && i != SYEVD_N;

		if (lw[i] > 0)
			CK(cudaMalloc(&st->work[i], (size_t)lw[i] * (dbl ? 8 : 4)));
	}
	make_x(st);
	make_j(st);
}

// The 64-bit API's calls.
static void calls_x(struct state *st)
{
	size_t *w = st->xwork, *hw = st->xhost;
	int *in = st->info;

	SK(cusolverDnXgetrf(st->h, st->params, XL_N, XL_N, CUDA_R_64F, st->xl, XL_LDA, st->xpiv, CUDA_R_64F,
			    st->work[XGETRF], w[XGETRF], st->xhw[XGETRF], hw[XGETRF], in + XGETRF));
	SK(cusolverDnXgetrs(st->h, st->params, CUBLAS_OP_N, XL_N, XL_RHS, CUDA_R_64F, st->xl, XL_LDA, st->xpiv,
			    CUDA_R_64F, st->xb, XL_N, in + XGETRS));
	SK(cusolverDnXpotrf(st->h, st->params, CUBLAS_FILL_MODE_LOWER, XC_N, CUDA_R_32F, st->xc, XC_N, CUDA_R_32F,
			    st->work[XPOTRF], w[XPOTRF], st->xhw[XPOTRF], hw[XPOTRF], in + XPOTRF));
	SK(cusolverDnXpotrs(st->h, st->params, CUBLAS_FILL_MODE_LOWER, XC_N, 1, CUDA_R_32F, st->xc, XC_N, CUDA_R_32F,
			    st->xcb, XC_N, in + XPOTRS));
	SK(cusolverDnXgeqrf(st->h, NULL, XQ_M, XQ_N, CUDA_R_64F, st->xq, XQ_M, CUDA_R_64F, st->xtau, CUDA_R_64F,
			    st->work[XGEQRF], w[XGEQRF], st->xhw[XGEQRF], hw[XGEQRF], in + XGEQRF));
	SK(cusolverDnXsyevd(st->h, st->params, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, XE_N, CUDA_R_32F,
			    st->xe, XE_N, CUDA_R_32F, st->xew, CUDA_R_32F, st->work[XSYEVD], w[XSYEVD], st->xhw[XSYEVD],
			    hw[XSYEVD], in + XSYEVD));
}

// The Jacobi calls.
static void calls_j(struct state *st)
{
	int *lw = st->lwork, *in = st->info;

	SK(cusolverDnDsyevj(st->h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, JE_N, st->je, JE_N, st->jew,
			    (double *)st->work[SYEVJ], lw[SYEVJ], in + SYEVJ, st->ej));
	SK(cusolverDnSsyevjBatched(st->h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, JB_N, st->jb, JB_N, st->jbw,
				   (float *)st->work[SYEVJB], lw[SYEVJB], st->binfo, st->ejb, JB_B));
	SK(cusolverDnDgesvdj(st->h, CUSOLVER_EIG_MODE_VECTOR, 1, SV_M, SV_N, st->sv, SV_M, st->svs, st->svu, SV_M,
			     st->svv, SV_N, (double *)st->work[GESVDJ], lw[GESVDJ], in + GESVDJ, st->gj));
	SK(cusolverDnSgesvdjBatched(st->h, CUSOLVER_EIG_MODE_VECTOR, SB_M, SB_N, st->sb, SB_M, st->sbs, st->sbu, SB_M,
				    st->sbv, SB_N, (float *)st->work[GESVDJB], lw[GESVDJB], st->binfo + JB_B, st->gj,
				    SB_B));
	SK(cusolverDnDpotrfBatched(st->h, CUBLAS_FILL_MODE_UPPER, PB_N, st->pbaa, PB_N, st->binfo + JB_B + SB_B, PB_B));
	SK(cusolverDnDpotrsBatched(st->h, CUBLAS_FILL_MODE_UPPER, PB_N, 1, st->pbaa, PB_N, st->pbba, PB_N,
				   in + POTRSB, PB_B));
	SK(cusolverDnXsyevBatched(st->h, st->params, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, EB_N, CUDA_R_64F,
				  st->xeb, EB_LDA, CUDA_R_64F, st->xebw, CUDA_R_64F, st->work[XSYEVB], st->xwork[XSYEVB],
				  st->xhw[XSYEVB], st->xhost[XSYEVB], st->xebinfo, EB_B));
}

// Every call of one request on fresh values of request r, in order.
static void calls(struct state *st)
{
	int *lw = st->lwork, *in = st->info;

	SK(cusolverDnSgetrf(st->h, LU_N, LU_N, st->lu, LU_LDA, (float *)st->work[GETRF], st->ipiv, in + GETRF));
	SK(cusolverDnSgetrs(st->h, CUBLAS_OP_N, LU_N, LU_RHS, st->lu, LU_LDA, st->ipiv, st->bn, LU_LDB, in + GETRS_N));
	SK(cusolverDnSgetrs(st->h, CUBLAS_OP_T, LU_N, LU_RHS, st->lu, LU_LDA, st->ipiv, st->bt, LU_LDB, in + GETRS_T));
	SK(cusolverDnDpotrf(st->h, CUBLAS_FILL_MODE_LOWER, CH_N, st->ch, CH_LDA, (double *)st->work[POTRF_L],
			    lw[POTRF_L], in + POTRF_L));
	SK(cusolverDnDpotrs(st->h, CUBLAS_FILL_MODE_LOWER, CH_N, CH_RHS, st->ch, CH_LDA, st->cb, CH_N, in + POTRS_L));
	SK(cusolverDnSpotrf(st->h, CUBLAS_FILL_MODE_UPPER, CH_N, st->chu, CH_N, (float *)st->work[POTRF_U],
			    lw[POTRF_U], in + POTRF_U));
	SK(cusolverDnDgeqrf(st->h, QR_M, QR_N, st->qr, QR_LDA, st->tau, (double *)st->work[GEQRF], lw[GEQRF],
			    in + GEQRF));
	SK(cusolverDnDormqr(st->h, CUBLAS_SIDE_LEFT, CUBLAS_OP_T, QR_M, QR_C, QR_N, st->qr, QR_LDA, st->tau, st->qc,
			    QR_M, (double *)st->work[ORMQR], lw[ORMQR], in + ORMQR));
	CK(cudaMemcpyAsync(st->q, st->qr, sizeof(double) * QR_LDA * QR_N, cudaMemcpyDeviceToDevice, st->s));
	SK(cusolverDnDorgqr(st->h, QR_M, QR_N, QR_N, st->q, QR_LDA, st->tau, (double *)st->work[ORGQR], lw[ORGQR],
			    in + ORGQR));
	SK(cusolverDnDsyevd(st->h, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_UPPER, EV_N, st->ev, EV_N, st->evw,
			    (double *)st->work[SYEVD_V], lw[SYEVD_V], in + SYEVD_V));
	SK(cusolverDnSsyevd(st->h, CUSOLVER_EIG_MODE_NOVECTOR, CUBLAS_FILL_MODE_LOWER, EN_N, st->en, EN_LDA, st->enw,
			    (float *)st->work[SYEVD_N], lw[SYEVD_N], in + SYEVD_N));
	SK(cusolverDnDgetrf(st->h, SG_N, SG_N, st->sg, SG_N, (double *)st->work[SINGULAR], st->sgpiv, in + SINGULAR));
	calls_x(st);
	calls_j(st);
	CK(cudaStreamSynchronize(st->s));
}

// max over (i, j) of |op(A) X - B| against its scale: the residual of a solve
static bool solved(const std::vector<double> &a, int lda, bool trans, const std::vector<double> &x,
		   const std::vector<double> &b, int n, int nrhs, int ldb, double tol, const char *what, char *why,
		   size_t len)
{
	for (int r = 0; r < nrhs; r++)
		for (int i = 0; i < n; i++) {
			double v = 0, scale = 1;

			for (int k = 0; k < n; k++) {
				double e = (trans ? a[k + i * lda] : a[i + k * lda]) * x[k + r * ldb];

				v += e;
				scale += std::fabs(e);
			}
			if (std::fabs(v - b[i + r * ldb]) > tol * scale) {
				snprintf(why, len, "%s: residual (%d, %d) %.3g", what, i, r, v - b[i + r * ldb]);
				return false;
			}
		}
	return true;
}

// Cholesky: the factor's product is A, the other triangle as it was (but
// for potrfBatched, which CUDA 13 writes there too: H200, 2026-12-04,
// natively; its set is each whole matrix).
static bool cholesky_ok(const std::vector<double> &a0, const std::vector<double> &f, int n, int ld, bool lower,
			double tol, const char *what, char *why, size_t len, bool other_kept = true)
{
	for (int j = 0; j < n; j++)
		for (int i = 0; i < n; i++) {
			double s = 0;

			if (lower ? i < j : i > j) {
				if (other_kept && f[i + j * ld] != a0[i + j * ld]) {
					snprintf(why, len, "%s: (%d, %d) of the other triangle changed", what, i, j);
					return false;
				}
				continue;
			}
			for (int k = 0; k <= (i < j ? i : j); k++)
				s += lower ? f[i + k * ld] * f[j + k * ld] : f[k + i * ld] * f[k + j * ld];
			if (!near(s, a0[i + j * ld], tol, what, i + j * ld, why, len))
				return false;
		}
	return true;
}

// QR: Q^T Q = I, Q R = A, and ormqr's Q^T C has Q^T C on top.
static bool qr_ok(const std::vector<double> &a0, const std::vector<double> &rf, const std::vector<double> &q,
		  const std::vector<double> &c0, const std::vector<double> &qtc, char *why, size_t len)
{
	for (int i = 0; i < QR_N; i++)
		for (int j = 0; j < QR_N; j++) {
			double d = 0;

			for (int k = 0; k < QR_M; k++)
				d += q[k + i * QR_LDA] * q[k + j * QR_LDA];
			if (!near(d, i == j, DT, "orgqr Q^T Q", i + j * QR_N, why, len))
				return false;
		}
	for (int i = 0; i < QR_M; i++)
		for (int j = 0; j < QR_N; j++) {
			double v = 0;

			for (int k = 0; k <= j; k++)
				v += q[i + k * QR_LDA] * rf[k + j * QR_LDA];
			if (!near(v, a0[i + j * QR_LDA], DT, "geqrf Q R", i + j * QR_LDA, why, len))
				return false;
		}
	for (int i = 0; i < QR_N; i++)
		for (int j = 0; j < QR_C; j++) {
			double v = 0;

			for (int k = 0; k < QR_M; k++)
				v += q[k + i * QR_LDA] * c0[k + j * QR_M];
			if (!near(qtc[i + j * QR_M], v, DT, "ormqr Q^T C", i + j * QR_M, why, len))
				return false;
		}
	return true;
}

// Eigen: w ascending; with vectors A v = w v and V^T V = I, without them
// sum w = trace and sum w^2 = |A|_F^2 (uplo's triangle read).
static bool eigen_ok(const std::vector<double> &a0, const std::vector<double> &v, const std::vector<double> &w, int n,
		     int ld, bool vectors, double tol, const char *what, char *why, size_t len)
{
	double tr = 0, fro = 0, sw = 0, sw2 = 0;

	for (int j = 1; j < n; j++)
		if (w[j - 1] > w[j]) {
			snprintf(why, len, "%s: w not ascending at %d", what, j);
			return false;
		}
	for (int j = 0; j < n; j++) {
		tr += a0[j + j * ld];
		sw += w[j];
		sw2 += w[j] * w[j];
		for (int i = 0; i < n; i++) {
			double av = 0, d = 0;

			fro += a0[i + j * ld] * a0[i + j * ld];
			for (int k = 0; vectors && k < n; k++) {
				av += a0[i + k * ld] * v[k + j * ld];
				d += v[k + i * ld] * v[k + j * ld];
			}
			if (vectors && (!near(av, w[j] * v[i + j * ld], tol, what, i + j * ld, why, len) ||
					!near(d, i == j, tol, what, i + j * ld, why, len)))
				return false;
		}
	}
	return near(sw, tr, tol, what, -1, why, len) && near(sw2, fro, tol, what, -2, why, len);
}

// The 64-bit API's inputs of request r, uploaded: A, B of the LU; A, b of
// the Cholesky; the QR's A; the eigenproblem's A.
struct x_inputs {
	std::vector<double> l, b, c, cb, q, e, eb;
};

static x_inputs x_up(struct state *st, int r)
{
	x_inputs x = { matrix(r, 11, XL_N, XL_N, XL_LDA), matrix(r, 12, XL_N, XL_RHS, XL_N),
		       as_float(symmetric(r, 13, XC_N, XC_N, true)), as_float(matrix(r, 14, XC_N, 1, XC_N)),
		       matrix(r, 15, XQ_M, XQ_N, XQ_M), as_float(symmetric(r, 16, XE_N, XE_N, false)) };

	up(st->xl, x.l);
	up(st->xb, x.b);
	up(st->xc, x.c);
	up(st->xcb, x.cb);
	up(st->xq, x.q);
	up(st->xe, x.e);
	for (int b = 0; b < EB_B; b++) {
		std::vector<double> one = symmetric(r, 17 + b, EB_N, EB_LDA, false);

		x.eb.insert(x.eb.end(), one.begin(), one.end());
	}
	up(st->xeb, x.eb);
	return x;
}

// R^T R = A^T A for geqrf's R of the m x n a0 (both ld m).
static bool r_ok(const std::vector<double> &a0, const std::vector<double> &rf, int m, int n, char *why, size_t len)
{
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			double rr = 0, aa = 0;

			for (int k = 0; k <= (i < j ? i : j); k++)
				rr += rf[k + i * m] * rf[k + j * m];
			for (int k = 0; k < m; k++)
				aa += a0[k + i * m] * a0[k + j * m];
			if (!near(rr, aa, DT, "xgeqrf R^T R", i + j * n, why, len))
				return false;
		}
	return true;
}

// Each of xsyevb's matrices: its eigenpairs, its info 0.
static bool xsyevb_ok(struct state *st, const x_inputs &x, char *why, size_t len)
{
	const size_t one = (size_t)EB_LDA * EB_N;
	std::vector<double> v = down(st->xeb, one * EB_B), w = down(st->xebw, EB_N * EB_B),
			    info = down(st->xebinfo, EB_B);

	for (int b = 0; b < EB_B; b++) {
		std::vector<double> a0(x.eb.begin() + b * one, x.eb.begin() + (b + 1) * one),
				    vb(v.begin() + b * one, v.begin() + (b + 1) * one),
				    wb(w.begin() + b * EB_N, w.begin() + (b + 1) * EB_N);

		if (info[b] != 0) {
			snprintf(why, len, "xsyevb: info[%d] %g", b, info[b]);
			return false;
		}
		if (!eigen_ok(a0, vb, wb, EB_N, EB_LDA, true, DT, "xsyevb", why, len))
			return false;
	}
	return true;
}

static bool x_ok(struct state *st, const x_inputs &x, char *why, size_t len)
{
	std::vector<int64_t> piv(XL_N);

	CK(cudaMemcpy(piv.data(), st->xpiv, sizeof(int64_t) * XL_N, cudaMemcpyDeviceToHost));
	for (int i = 0; i < XL_N; i++)
		if (piv[i] < i + 1 || piv[i] > XL_N) {
			snprintf(why, len, "xgetrf: ipiv[%d] = %lld", i, (long long)piv[i]);
			return false;
		}
	return solved(x.l, XL_LDA, false, down(st->xb, XL_N * XL_RHS), x.b, XL_N, XL_RHS, XL_N, 1e-12, "xgetrs", why,
		      len) &&
	       cholesky_ok(x.c, down(st->xc, XC_N * XC_N), XC_N, XC_N, true, FT, "xpotrf", why, len) &&
	       solved(x.c, XC_N, false, down(st->xcb, XC_N), x.cb, XC_N, 1, XC_N, 1e-4, "xpotrs", why, len) &&
	       r_ok(x.q, down(st->xq, XQ_M * XQ_N), XQ_M, XQ_N, why, len) &&
	       eigen_ok(x.e, down(st->xe, XE_N * XE_N), down(st->xew, XE_N), XE_N, XE_N, true, FT, "xsyevd", why, len) &&
	       xsyevb_ok(st, x, why, len);
}

// An SVD: s descending, U S V^T = A (m x n), U's uc and V's vc columns
// orthonormal (lds m and n).
static bool svd_ok(const std::vector<double> &a0, int m, int n, const double *s, const double *u, int uc,
		   const double *v, int vc, double tol, const char *what, char *why, size_t len)
{
	int k = m < n ? m : n;

	for (int j = 1; j < k; j++)
		if (s[j - 1] < s[j] || s[j] < 0) {
			snprintf(why, len, "%s: s not descending at %d", what, j);
			return false;
		}
	for (int i = 0; i < m; i++)
		for (int j = 0; j < n; j++) {
			double x = 0;

			for (int q = 0; q < k; q++)
				x += u[i + q * m] * s[q] * v[j + q * n];
			if (!near(x, a0[i + j * m], tol, what, i + j * m, why, len))
				return false;
		}
	for (int side = 0; side < 2; side++) {
		const double *q = side ? v : u;
		int rows = side ? n : m, cols = side ? vc : uc;

		for (int i = 0; i < cols; i++)
			for (int j = 0; j < cols; j++) {
				double d = 0;

				for (int p = 0; p < rows; p++)
					d += q[p + i * rows] * q[p + j * rows];
				if (!near(d, i == j, tol, what, 1000 * side + i + j * cols, why, len))
					return false;
			}
	}
	return true;
}

// The Jacobi calls' inputs of request r, uploaded.
struct j_inputs {
	std::vector<double> e, b, s, sb;
	std::vector<double> pa[PB_B], pb[PB_B];   // potrfb's matrices and right-hand sides
};

static j_inputs j_up(struct state *st, int r)
{
	j_inputs x = { symmetric(r, 17, JE_N, JE_N, false), {}, matrix(r, 19, SV_M, SV_N, SV_M),
		       as_float(matrix(r, 20, SB_M, SB_N * SB_B, SB_M)) };

	for (int b = 0; b < JB_B; b++) {
		std::vector<double> one = as_float(symmetric(r, 18 + 10 * b, JB_N, JB_N, false));

		x.b.insert(x.b.end(), one.begin(), one.end());
	}
	up(st->je, x.e);
	up(st->jb, x.b);
	up(st->sv, x.s);
	up(st->sb, x.sb);
	for (int b = 0; b < PB_B; b++) {
		x.pa[b] = symmetric(r, 21 + b, PB_N, PB_N, true);
		x.pb[b] = matrix(r, 23 + b, PB_N, 1, PB_N);
		up(st->pba[b], x.pa[b]);
		up(st->pbb[b], x.pb[b]);
	}
	return x;
}

static bool j_ok(struct state *st, const j_inputs &x, char *why, size_t len)
{
	std::vector<double> binfo = down(st->binfo, JB_B + SB_B + PB_B), jb = down(st->jb, JB_N * JB_N * JB_B);
	std::vector<double> jbw = down(st->jbw, JB_N * JB_B), s = down(st->svs, SV_N), u = down(st->svu, SV_M * SV_N);
	std::vector<double> v = down(st->svv, SV_N * SV_N), sbs = down(st->sbs, SB_M * SB_B);
	std::vector<double> sbu = down(st->sbu, SB_M * SB_M * SB_B), sbv = down(st->sbv, SB_N * SB_N * SB_B);

	for (int i = 0; i < JB_B + SB_B + PB_B; i++)
		if (binfo[i] != 0) {
			snprintf(why, len, "batched info[%d]: %g", i, binfo[i]);
			return false;
		}
	if (!eigen_ok(x.e, down(st->je, JE_N * JE_N), down(st->jew, JE_N), JE_N, JE_N, true, DT, "syevj", why, len) ||
	    !svd_ok(x.s, SV_M, SV_N, s.data(), u.data(), SV_N, v.data(), SV_N, DT, "gesvdj", why, len))
		return false;
	for (int b = 0; b < JB_B; b++) {   // (unsorted: w sorted here, vectors with them)
		std::vector<double> a0(x.b.begin() + b * JB_N * JB_N, x.b.begin() + (b + 1) * JB_N * JB_N);
		std::vector<double> vec(jb.begin() + b * JB_N * JB_N, jb.begin() + (b + 1) * JB_N * JB_N);
		std::vector<double> w(jbw.begin() + b * JB_N, jbw.begin() + (b + 1) * JB_N), order(JB_N * JB_N);

		for (int i = 0; i < JB_N; i++)
			for (int j = i + 1; j < JB_N; j++)
				if (w[j] < w[i]) {
					std::swap(w[i], w[j]);
					for (int k = 0; k < JB_N; k++)
						std::swap(vec[k + i * JB_N], vec[k + j * JB_N]);
				}
		if (!eigen_ok(a0, vec, w, JB_N, JB_N, true, FT, "syevjb", why, len))
			return false;
	}
	for (int b = 0; b < SB_B; b++) {
		std::vector<double> a0(x.sb.begin() + b * SB_M * SB_N, x.sb.begin() + (b + 1) * SB_M * SB_N);

		if (!svd_ok(a0, SB_M, SB_N, sbs.data() + b * SB_M, sbu.data() + b * SB_M * SB_M, SB_M,
			    sbv.data() + b * SB_N * SB_N, SB_N, FT, "gesvdjb", why, len))
			return false;
	}
	for (int b = 0; b < PB_B; b++)
		if (!cholesky_ok(x.pa[b], down(st->pba[b], PB_N * PB_N), PB_N, PB_N, false, DT, "potrfb", why, len,
				 false) ||
		    !solved(x.pa[b], PB_N, false, down(st->pbb[b], PB_N), x.pb[b], PB_N, 1, PB_N, 1e-12, "potrsb", why,
			    len))
			return false;
	return true;
}

// Runs request r's calls and checks every answer.
static bool run_all(struct state *st, int r, char *why, size_t len)
{
	std::vector<double> lu0 = as_float(matrix(r, 1, LU_N, LU_N, LU_LDA));
	std::vector<double> bn0 = as_float(matrix(r, 2, LU_N, LU_RHS, LU_LDB)), bt0 = as_float(matrix(r, 3, LU_N, LU_RHS, LU_LDB));
	std::vector<double> ch0 = symmetric(r, 4, CH_N, CH_LDA, true), cb0 = matrix(r, 5, CH_N, CH_RHS, CH_N);
	std::vector<double> chu0 = as_float(symmetric(r, 6, CH_N, CH_N, true));
	std::vector<double> qr0 = matrix(r, 7, QR_M, QR_N, QR_LDA), qc0 = matrix(r, 8, QR_M, QR_C, QR_M);
	std::vector<double> ev0 = symmetric(r, 9, EV_N, EV_N, false), en0 = as_float(symmetric(r, 10, EN_N, EN_LDA, false));
	std::vector<double> sg0 = { 1, 2, 3, 0, 0, 0, 4, 5, 7 };

	up(st->lu, lu0);
	up(st->bn, bn0);
	up(st->bt, bt0);
	up(st->ch, ch0);
	up(st->cb, cb0);
	up(st->chu, chu0);
	up(st->qr, qr0);
	up(st->qc, qc0);
	up(st->ev, ev0);
	up(st->en, en0);
	up(st->sg, sg0);
	x_inputs x = x_up(st, r);
	j_inputs j = j_up(st, r);
	CK(cudaMemset(st->info, 0x7f, sizeof(int) * CALLS));
	calls(st);
	std::vector<double> info = down(st->info, CALLS), piv = down(st->ipiv, LU_N);
	for (int i = 0; i < CALLS; i++)
		if (i != SYEVJB && i != GESVDJB && i != POTRFB && i != XSYEVB && info[i] != (i == SINGULAR ? 2 : 0)) {
			snprintf(why, len, "%s: info %g", call_names[i], info[i]);
			return false;
		}
	for (int i = 0; i < LU_N; i++)
		if (piv[i] < i + 1 || piv[i] > LU_N) {
			snprintf(why, len, "getrf: ipiv[%d] = %g", i, piv[i]);
			return false;
		}
	return solved(lu0, LU_LDA, false, down(st->bn, LU_LDB * LU_RHS), bn0, LU_N, LU_RHS, LU_LDB, 1e-5, "getrs_n",
		      why, len) &&
	       solved(lu0, LU_LDA, true, down(st->bt, LU_LDB * LU_RHS), bt0, LU_N, LU_RHS, LU_LDB, 1e-5, "getrs_t", why,
		      len) &&
	       cholesky_ok(ch0, down(st->ch, CH_LDA * CH_N), CH_N, CH_LDA, true, DT, "potrf_l", why, len) &&
	       solved(ch0, CH_LDA, false, down(st->cb, CH_N * CH_RHS), cb0, CH_N, CH_RHS, CH_N, 1e-12, "potrs_l", why,
		      len) &&
	       cholesky_ok(chu0, down(st->chu, CH_N * CH_N), CH_N, CH_N, false, FT, "potrf_u", why, len) &&
	       qr_ok(qr0, down(st->qr, QR_LDA * QR_N), down(st->q, QR_LDA * QR_N), qc0, down(st->qc, QR_M * QR_C), why,
		     len) &&
	       eigen_ok(ev0, down(st->ev, EV_N * EV_N), down(st->evw, EV_N), EV_N, EV_N, true, DT, "syevd_v", why, len) &&
	       eigen_ok(en0, {}, down(st->enw, EN_N), EN_N, EN_LDA, false, FT, "syevd_n", why, len) && x_ok(st, x, why, len) &&
	       j_ok(st, j, why, len);
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	struct state *st = (struct state *)arg;
	char why[256] = "", out[512];
	bool ok;

	(void)req;
	st->requests++;
	ok = run_all(st, st->requests, why, sizeof(why));
	if (!ok) {
		fprintf(stderr, "cusolver_serve: %s\n", why);
		st->failures++;
	}
	snprintf(out, sizeof(out), "{\"ok\": %s, \"requests\": %d, \"why\": \"%s\"}", ok ? "true" : "false",
		 st->requests, why);
	resp->body = strdup(out);
	resp->len = strlen(out);
	return 0;
}

static void destroy(struct state *st)
{
	SK(cusolverDnDestroySyevjInfo(st->ej));
	SK(cusolverDnDestroySyevjInfo(st->ejb));
	SK(cusolverDnDestroyGesvdjInfo(st->gj));
	SK(cusolverDnDestroyParams(st->params));
	SK(cusolverDnDestroy(st->h));
}

// What phos-fn does not forward answers CUSOLVER_STATUS_NOT_SUPPORTED: a
// stub (twice: its log line comes once), a complex call, an algorithm other
// than the default, potrsBatched of two right-hand sides.
static int refused(void)
{
	cusolverDnHandle_t h;
	cusolverDnParams_t params;
	int lw = 0;
	void *p;

	CK(cudaMalloc(&p, 256));
	SK(cusolverDnCreate(&h));
	SK(cusolverDnCreateParams(&params));
	cusolverStatus_t a = cusolverDnSgesvd_bufferSize(h, 4, 4, &lw), b = cusolverDnSgesvd_bufferSize(h, 4, 4, &lw);
	cusolverStatus_t c = cusolverDnCgetrf_bufferSize(h, 2, 2, (cuComplex *)p, 2, &lw);
	cusolverStatus_t d = cusolverDnSetAdvOptions(params, CUSOLVERDN_GETRF, CUSOLVER_ALG_1);
	cusolverStatus_t e = cusolverDnSetAdvOptions(params, CUSOLVERDN_GETRF, CUSOLVER_ALG_0);
	cusolverStatus_t f = cusolverDnDpotrsBatched(h, CUBLAS_FILL_MODE_LOWER, 2, 2, (double **)p, 2, (double **)p, 2,
						     (int *)p, 1);
	printf("{\"gesvd\": %d, \"again\": %d, \"complex\": %d, \"alg\": %d, \"default\": %d, \"nrhs\": %d}\n",
	       (int)a, (int)b, (int)c, (int)d, (int)e, (int)f);
	SK(cusolverDnDestroyParams(params));
	SK(cusolverDnDestroy(h));
	return 0;
}

int main(int argc, char **argv)
{
	static struct state st;
	Dl_info info;
	int version = 0;

	if (dladdr((void *)cusolverDnCreate, &info) && info.dli_fname)
		fprintf(stderr, "cusolver: %s\n", info.dli_fname);
	if (argc > 1 && !strcmp(argv[1], "refused"))
		return refused();
	make(&st);
	SK(cusolverGetVersion(&version));
	if (version < 12000) {
		fprintf(stderr, "cuSOLVER 12 needed, got %d\n", version);
		return 1;
	}
	if (argc > 1 && !strcmp(argv[1], "pointers")) {
		std::string s = "pointers {";
		char one[160];
		const void *ptrs[] = { st.lu, st.bn, st.bt, st.ipiv, st.ch, st.cb, st.chu, st.qr, st.tau, st.qc, st.q,
				       st.ev, st.evw, st.en, st.enw, st.sg, st.sgpiv, st.info, st.xl, st.xb, st.xpiv,
				       st.xc, st.xcb, st.xq, st.xtau, st.xe, st.xew, st.je, st.jew, st.jb, st.jbw,
				       st.sv, st.svs, st.svu, st.svv, st.sb, st.sbs, st.sbu, st.sbv, st.binfo, st.pba[0],
				       st.pba[1], st.pbb[0], st.pbb[1], st.pbaa, st.pbba, st.xeb, st.xebw,
				       st.xebinfo };
		const char *names[] = { "lu", "bn", "bt", "ipiv", "ch", "cb", "chu", "qr", "tau", "qc", "q", "ev", "evw",
					"en", "enw", "sg", "sgpiv", "info", "xl", "xb", "xpiv", "xc", "xcb", "xq", "xtau",
					"xe", "xew", "je", "jew", "jb", "jbw", "sv", "svs", "svu", "svv", "sb", "sbs",
					"sbu", "sbv", "binfo", "pba0", "pba1", "pbb0", "pbb1", "pbaa", "pbba",
					"xeb", "xebw", "xebinfo" };
		for (size_t i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++) {
			snprintf(one, sizeof(one), "\"%s\": %llu, ", names[i], (unsigned long long)(uintptr_t)ptrs[i]);
			s += one;
		}
		for (int i = 0; i < CALLS; i++) {
			snprintf(one, sizeof(one), "\"work_%s\": %llu, \"lwork_%s\": %d, \"xwork_%s\": %zu, ",
				 call_names[i], (unsigned long long)(uintptr_t)st.work[i], call_names[i], st.lwork[i],
				 call_names[i], st.xwork[i]);
			s += one;
		}
		s += "\"calls\": " + std::to_string(CALLS) + "}";
		fprintf(stderr, "%s\n", s.c_str());
	}
	if (argc > 2 && !strcmp(argv[1], "loop")) {
		int n = atoi(argv[2]);

		for (int i = 1; i <= n; i++) {
			char why[256] = "";

			if (!run_all(&st, i, why, sizeof(why))) {
				fprintf(stderr, "cusolver_serve: step %d: %s\n", i, why);
				st.failures++;
			}
			if (i % 100 == 0 || i == n) {
				printf("{\"step\": %d, \"failures\": %d, \"done\": %s}\n", i, st.failures,
				       i == n ? "true" : "false");
				fflush(stdout);
			}
		}
		destroy(&st);
		return st.failures ? 1 : 0;
	}
	int r = phos_fn_serve(handle, &st);

	destroy(&st);
	return r ? r : st.failures ? 1 : 0;   // (a wrong answer fails the run too)
}
