// SPDX-License-Identifier: MIT
// cuSPARSE's generic API as PyTorch's sparse CSR paths call it (issue 38):
// a handle and every descriptor made at init, before phos_fn_serve (so a
// snapshot restored in a new executor must go on with them), and each
// request runs every call on fresh values, each answer checked against a
// plain product computed here in double. A is 7 x 5 with 10 nonzeros (row 6
// empty); S is the same pattern with values of its own.
//
//   spmv      SpMV y = 1.5 A x (float, 32-bit CSR, CSR_ALG1, beta 0)
//   spmv_t    SpMV y = A^T x + 0.5 y (beta read)
//   spmv_d    SpMV in double on a one-based 64-bit CSR copy, alpha and beta
//             in device memory (pointer mode device)
//   spmv_coo  SpMV y = 2 A x on the COO form (COO_ALG1)
//   spmm      SpMM_preprocess, then C = A B (B 5 x 3 column-major, ld 7:
//             rows 5 and 6 of each column are gaps left alone)
//   spmm_row  SpMM C = 0.5 A B + 2 C in double, row-major B and C
//   spmm_tt   SpMM C = A^T B^T (B^T stored 3 x 7 column-major)
//   spmm_b    SpMM of two batches (CsrSetStridedBatch, DnMatSetStridedBatch)
//   sddmm     SDDMM_preprocess, then S = (X Y) o spy(S), X 7 x 4 and Y 4 x 5
//             row-major
//   dense     SparseToDense of A, column-major
//   coo2csr   Xcoo2csr of the COO row indices: A's row offsets again
//   identity  CreateIdentityPermutation of nnz entries
//   coosort   XcoosortByRow of A's COO entries given rows last first (each
//             row's columns ascending): A's COO form again, P with it
//   csrsort   Xcsrsort of A's CSR with each row's columns reversed (a legacy
//             MatDescr), P from the identity: A's columns again
//   spgemm    SpGEMM C = 2 A G (G 5 x 4 CSR of its own pattern): work
//             estimation, compute, C's nnz from SpMatGetSize, CsrSetPointers,
//             copy, a new SpGEMM descriptor each request (buffers made at
//             init of the sizes asked then)
//
// argv[1] "pointers": the buffers' device addresses and the buffer sizes as
// JSON on stderr (the test holds the executor's read/write sets against
// them); "refused": calls what phos-fn does not forward (SpSV's stub twice, a
// complex matrix) and prints their statuses as JSON; "loop N": N requests'
// work in a row, a JSON line every 100 and a last one with the count of
// wrong answers. At start it says on stderr which file serves
// cusparseCreate ("cusparse: PATH"): the build gives the program an RPATH
// to a copy of NVIDIA's library in nvidia/cu13/lib beside it, as PyTorch's
// wheels are laid out.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <cusparse.h>
#include <phos/fn.h>

// (cusparseCreateIdentityPermutation is marked deprecated in cuSPARSE 12: PyTorch still calls it)
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define CK(call)                                                                                          \
	do {                                                                                              \
		cudaError_t e_ = (call);                                                                  \
		if (e_ != cudaSuccess) {                                                                  \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
			exit(1);                                                                          \
		}                                                                                         \
	} while (0)
#define SK(call)                                                                                  \
	do {                                                                                      \
		cusparseStatus_t s_ = (call);                                                     \
		if (s_ != CUSPARSE_STATUS_SUCCESS) {                                              \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,             \
				cusparseGetErrorName(s_));                                        \
			exit(1);                                                                  \
		}                                                                                 \
	} while (0)

enum { M = 7, K = 5, N = 3, L = 4, LDB = 7, BATCH = 2 };
enum { SPMV, SPMV_T, SPMV_D, SPMV_COO, SPMM_PRE, SPMM, SPMM_ROW, SPMM_TT, SPMM_B, SDDMM_PRE, SDDMM, DENSE, COOSORT,
       CSRSORT, CALLS };

static const char *const call_names[CALLS] = { "spmv", "spmv_t", "spmv_d", "spmv_coo", "spmm_pre", "spmm",
					       "spmm_row", "spmm_tt", "spmm_b", "sddmm_pre", "sddmm", "dense",
					       "coosort", "csrsort" };

// The pattern: (i, j) is a nonzero when (i + 2 j) % 3 == 0 and i < 6.
static std::vector<int> rows_of, cols_of, offsets_of;   // COO rows, columns, CSR offsets

static void pattern(void)
{
	offsets_of.push_back(0);
	for (int i = 0; i < M; i++) {
		for (int j = 0; j < K; j++)
			if (i < 6 && (i + 2 * j) % 3 == 0) {
				rows_of.push_back(i);
				cols_of.push_back(j);
			}
		offsets_of.push_back((int)cols_of.size());
	}
}

static int nnz(void)
{
	return (int)cols_of.size();
}

// Fresh data for request r: values in [-1, 1], different each request.
static double datum(int r, int i, int which)
{
	return std::sin(0.37 * i + 1.3 * r + 0.71 * which) * std::cos(0.11 * i * which + r);
}

struct state {
	cusparseHandle_t h;
	cudaStream_t s;
	cusparseSpMatDescr_t a, a64, coo, at_b, sp;
	cusparseDnVecDescr_t x, y, xt, yt, xd, yd, xc, yc;
	cusparseDnMatDescr_t b, c, br, cr, bt, ct, bb, cb, dx, dy, dense;
	// device memory
	cusparseMatDescr_t legacy;
	int *off, *col, *row, *csr2, *offb, *colb, *perm, *perm2, *rsh, *csh, *colr;
	int64_t *off64, *col64;
	float *val, *valb, *sval, *vx, *vy, *vxt, *vyt, *vxc, *vyc, *mb, *mc, *mbt, *mct, *mbb, *mcb, *mdx, *mdy, *md;
	double *val64, *vxd, *vyd, *mbr, *mcr, *scal;
	void *buf[CALLS];
	size_t bufsize[CALLS];
	// SpGEMM: G (K x L, its own pattern) and C = A G (M x L), room for every entry
	cusparseSpMatDescr_t g, cg;
	int *offg, *colg, *offc, *colc;
	float *valg, *valc;
	void *gbuf1, *gbuf2;
	size_t gsize1, gsize2;
	int requests, failures;
};

// G's pattern: (k, l) when (k + l) % 2 == 0: 10 entries.
static std::vector<int> g_offsets, g_cols;

static void g_pattern(void)
{
	g_offsets.push_back(0);
	for (int k = 0; k < K; k++) {
		for (int l = 0; l < L; l++)
			if ((k + l) % 2 == 0)
				g_cols.push_back(l);
		g_offsets.push_back((int)g_cols.size());
	}
}

template <typename T> static T *dev_alloc(size_t n)
{
	void *p;

	CK(cudaMalloc(&p, n * sizeof(T)));
	return (T *)p;
}

template <typename T> static void up(T *dst, const std::vector<T> &src)
{
	CK(cudaMemcpy(dst, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice));
}

template <typename T> static std::vector<T> down(const T *src, size_t n)
{
	std::vector<T> v(n);

	CK(cudaMemcpy(v.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost));
	return v;
}

static bool near(double got, double want, double tol, const char *what, int i, char *why, size_t len)
{
	if (std::fabs(got - want) <= tol * (1 + std::fabs(want)))
		return true;
	snprintf(why, len, "%s[%d]: got %.9g, want %.9g", what, i, got, want);
	return false;
}

static const double FT = 1e-5, DT = 1e-12;

static void make(struct state *st)
{
	int z = nnz();

	pattern();
	z = nnz();
	SK(cusparseCreate(&st->h));
	CK(cudaStreamCreate(&st->s));
	SK(cusparseSetStream(st->h, st->s));
	st->off = dev_alloc<int>(M + 1);
	st->col = dev_alloc<int>(z);
	st->row = dev_alloc<int>(z);
	st->csr2 = dev_alloc<int>(M + 1);
	st->val = dev_alloc<float>(z);
	st->sval = dev_alloc<float>(z);
	st->off64 = dev_alloc<int64_t>(M + 1);
	st->col64 = dev_alloc<int64_t>(z);
	st->val64 = dev_alloc<double>(z);
	st->offb = dev_alloc<int>(BATCH * (M + 1));
	st->colb = dev_alloc<int>(BATCH * z);
	st->valb = dev_alloc<float>(BATCH * z);
	st->vx = dev_alloc<float>(K);
	st->vy = dev_alloc<float>(M);
	st->vxt = dev_alloc<float>(M);
	st->vyt = dev_alloc<float>(K);
	st->vxc = dev_alloc<float>(K);
	st->vyc = dev_alloc<float>(M);
	st->vxd = dev_alloc<double>(K);
	st->vyd = dev_alloc<double>(M);
	st->scal = dev_alloc<double>(2);
	st->mb = dev_alloc<float>(LDB * N);
	st->mc = dev_alloc<float>(M * N);
	st->mbr = dev_alloc<double>(K * N);
	st->mcr = dev_alloc<double>(M * N);
	st->mbt = dev_alloc<float>(N * M);
	st->mct = dev_alloc<float>(K * N);
	st->mbb = dev_alloc<float>(BATCH * K * N);
	st->mcb = dev_alloc<float>(BATCH * M * N);
	st->mdx = dev_alloc<float>(M * L);
	st->mdy = dev_alloc<float>(L * K);
	st->md = dev_alloc<float>(M * K);
	st->perm = dev_alloc<int>(z);
	st->perm2 = dev_alloc<int>(z);
	st->rsh = dev_alloc<int>(z);
	st->csh = dev_alloc<int>(z);
	st->colr = dev_alloc<int>(z);
	SK(cusparseCreateMatDescr(&st->legacy));
	SK(cusparseSetMatType(st->legacy, CUSPARSE_MATRIX_TYPE_GENERAL));
	SK(cusparseSetMatIndexBase(st->legacy, CUSPARSE_INDEX_BASE_ZERO));
	if (cusparseGetMatIndexBase(st->legacy) != CUSPARSE_INDEX_BASE_ZERO ||
	    cusparseGetMatType(st->legacy) != CUSPARSE_MATRIX_TYPE_GENERAL) {
		fprintf(stderr, "the legacy descriptor's getters\n");
		exit(1);
	}

	// the structure, once; one-based 64-bit copy; two batches of the pattern
	std::vector<int64_t> off64(M + 1), col64(z);
	std::vector<int> offb, colb;
	for (int i = 0; i <= M; i++)
		off64[i] = offsets_of[i] + 1;
	for (int p = 0; p < z; p++)
		col64[p] = cols_of[p] + 1;
	for (int b = 0; b < BATCH; b++) {
		offb.insert(offb.end(), offsets_of.begin(), offsets_of.end());
		colb.insert(colb.end(), cols_of.begin(), cols_of.end());
	}
	up(st->off, offsets_of);
	up(st->col, cols_of);
	up(st->row, rows_of);
	up(st->off64, off64);
	up(st->col64, col64);
	up(st->offb, offb);
	up(st->colb, colb);

	SK(cusparseCreateCsr(&st->a, M, K, z, st->off, st->col, st->val, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
			     CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
	SK(cusparseCreateCsr(&st->a64, M, K, z, st->off64, st->col64, st->val64, CUSPARSE_INDEX_64I,
			     CUSPARSE_INDEX_64I, CUSPARSE_INDEX_BASE_ONE, CUDA_R_64F));
	SK(cusparseCreateCoo(&st->coo, M, K, z, st->row, st->col, st->val, CUSPARSE_INDEX_32I,
			     CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
	// made with NULL pointers, set later (as PyTorch does for an empty result)
	SK(cusparseCreateCsr(&st->at_b, M, K, z, nullptr, nullptr, nullptr, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
			     CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
	SK(cusparseCsrSetPointers(st->at_b, st->offb, st->colb, st->valb));
	SK(cusparseCsrSetStridedBatch(st->at_b, BATCH, M + 1, z));
	SK(cusparseCreateCsr(&st->sp, M, K, z, st->off, st->col, st->sval, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
			     CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
	// an attribute set and read back, on a descriptor of its own: CUDA 13's
	// SDDMM refuses a matC with triangular properties (H200, 2026-12-04)
	cusparseSpMatDescr_t tri;
	int fill = CUSPARSE_FILL_MODE_UPPER, got = -1;
	SK(cusparseCreateCsr(&tri, M, K, z, st->off, st->col, st->sval, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
			     CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
	SK(cusparseSpMatSetAttribute(tri, CUSPARSE_SPMAT_FILL_MODE, &fill, sizeof(fill)));
	SK(cusparseSpMatGetAttribute(tri, CUSPARSE_SPMAT_FILL_MODE, &got, sizeof(got)));
	SK(cusparseDestroySpMat(tri));
	int64_t r = 0, c = 0, n = 0;
	SK(cusparseSpMatGetSize(st->a64, &r, &c, &n));
	if (got != fill || r != M || c != K || n != z) {
		fprintf(stderr, "descriptor queries: fill %d, size %lld x %lld, nnz %lld\n", got, (long long)r,
			(long long)c, (long long)n);
		exit(1);
	}

	SK(cusparseCreateDnVec(&st->x, K, st->vx, CUDA_R_32F));
	SK(cusparseCreateDnVec(&st->y, M, st->vy, CUDA_R_32F));
	SK(cusparseCreateDnVec(&st->xt, M, st->vxt, CUDA_R_32F));
	SK(cusparseCreateDnVec(&st->yt, K, st->vyt, CUDA_R_32F));
	SK(cusparseCreateDnVec(&st->xc, K, st->vxc, CUDA_R_32F));
	SK(cusparseCreateDnVec(&st->yc, M, st->vyc, CUDA_R_32F));
	SK(cusparseCreateDnVec(&st->xd, K, st->vxd, CUDA_R_64F));
	SK(cusparseCreateDnVec(&st->yd, M, st->vyd, CUDA_R_64F));
	SK(cusparseCreateDnMat(&st->b, K, N, LDB, st->mb, CUDA_R_32F, CUSPARSE_ORDER_COL));
	SK(cusparseCreateDnMat(&st->c, M, N, M, st->mc, CUDA_R_32F, CUSPARSE_ORDER_COL));
	SK(cusparseCreateDnMat(&st->br, K, N, N, st->mbr, CUDA_R_64F, CUSPARSE_ORDER_ROW));
	SK(cusparseCreateDnMat(&st->cr, M, N, N, st->mcr, CUDA_R_64F, CUSPARSE_ORDER_ROW));
	SK(cusparseCreateDnMat(&st->bt, N, M, N, st->mbt, CUDA_R_32F, CUSPARSE_ORDER_COL));
	SK(cusparseCreateDnMat(&st->ct, K, N, K, st->mct, CUDA_R_32F, CUSPARSE_ORDER_COL));
	SK(cusparseCreateDnMat(&st->bb, K, N, K, st->mbb, CUDA_R_32F, CUSPARSE_ORDER_COL));
	SK(cusparseDnMatSetStridedBatch(st->bb, BATCH, K * N));
	SK(cusparseCreateDnMat(&st->cb, M, N, M, st->mcb, CUDA_R_32F, CUSPARSE_ORDER_COL));
	SK(cusparseDnMatSetStridedBatch(st->cb, BATCH, M * N));
	SK(cusparseCreateDnMat(&st->dx, M, L, L, st->mdx, CUDA_R_32F, CUSPARSE_ORDER_ROW));
	SK(cusparseCreateDnMat(&st->dy, L, K, K, st->mdy, CUDA_R_32F, CUSPARSE_ORDER_ROW));
	SK(cusparseCreateDnMat(&st->dense, M, K, M, st->md, CUDA_R_32F, CUSPARSE_ORDER_COL));

	// buffers of the sizes cuSPARSE asks (on the handle's stream, host scalars)
	float one = 1, half = 0.5f, zero = 0, onehalf = 1.5f, two = 2;
	double dhalf = 0.5, dtwo = 2;
	size_t *bs = st->bufsize;
	SK(cusparseSpMV_bufferSize(st->h, CUSPARSE_OPERATION_NON_TRANSPOSE, &onehalf, st->a, st->x, &zero, st->y,
				   CUDA_R_32F, CUSPARSE_SPMV_CSR_ALG1, &bs[SPMV]));
	SK(cusparseSpMV_bufferSize(st->h, CUSPARSE_OPERATION_TRANSPOSE, &one, st->a, st->xt, &half, st->yt, CUDA_R_32F,
				   CUSPARSE_SPMV_ALG_DEFAULT, &bs[SPMV_T]));
	SK(cusparseSpMV_bufferSize(st->h, CUSPARSE_OPERATION_NON_TRANSPOSE, &dhalf, st->a64, st->xd, &dtwo, st->yd,
				   CUDA_R_64F, CUSPARSE_SPMV_ALG_DEFAULT, &bs[SPMV_D]));
	SK(cusparseSpMV_bufferSize(st->h, CUSPARSE_OPERATION_NON_TRANSPOSE, &two, st->coo, st->xc, &zero, st->yc,
				   CUDA_R_32F, CUSPARSE_SPMV_COO_ALG1, &bs[SPMV_COO]));
	SK(cusparseSpMM_bufferSize(st->h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &one,
				   st->a, st->b, &zero, st->c, CUDA_R_32F, CUSPARSE_SPMM_CSR_ALG1, &bs[SPMM]));
	bs[SPMM_PRE] = bs[SPMM];
	SK(cusparseSpMM_bufferSize(st->h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &dhalf,
				   st->a64, st->br, &dtwo, st->cr, CUDA_R_64F, CUSPARSE_SPMM_ALG_DEFAULT,
				   &bs[SPMM_ROW]));
	SK(cusparseSpMM_bufferSize(st->h, CUSPARSE_OPERATION_TRANSPOSE, CUSPARSE_OPERATION_TRANSPOSE, &one, st->a,
				   st->bt, &zero, st->ct, CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, &bs[SPMM_TT]));
	SK(cusparseSpMM_bufferSize(st->h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &one,
				   st->at_b, st->bb, &zero, st->cb, CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, &bs[SPMM_B]));
	SK(cusparseSDDMM_bufferSize(st->h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &one,
				    st->dx, st->dy, &zero, st->sp, CUDA_R_32F, CUSPARSE_SDDMM_ALG_DEFAULT, &bs[SDDMM]));
	bs[SDDMM_PRE] = bs[SDDMM];
	SK(cusparseSparseToDense_bufferSize(st->h, st->a, st->dense, CUSPARSE_SPARSETODENSE_ALG_DEFAULT, &bs[DENSE]));
	SK(cusparseXcoosort_bufferSizeExt(st->h, M, K, z, st->rsh, st->csh, &bs[COOSORT]));
	SK(cusparseXcsrsort_bufferSizeExt(st->h, M, K, z, st->off, st->colr, &bs[CSRSORT]));
	for (int i = 0; i < CALLS; i++)
		if (i != SPMM_PRE && i != SDDMM_PRE)
			CK(cudaMalloc(&st->buf[i], bs[i] ? bs[i] : 1));
	st->buf[SPMM_PRE] = st->buf[SPMM];   // (a preprocess shares the buffer of the call it prepares)
	st->buf[SDDMM_PRE] = st->buf[SDDMM];

	// SpGEMM's operands and the buffers its phases ask for (nothing computed here)
	g_pattern();
	st->offg = dev_alloc<int>(K + 1);
	st->colg = dev_alloc<int>(g_cols.size());
	st->valg = dev_alloc<float>(g_cols.size());
	st->offc = dev_alloc<int>(M + 1);
	st->colc = dev_alloc<int>(M * L);
	st->valc = dev_alloc<float>(M * L);
	up(st->offg, g_offsets);
	up(st->colg, g_cols);
	std::vector<float> g0(g_cols.size(), 1.0f);
	up(st->valg, g0);
	SK(cusparseCreateCsr(&st->g, K, L, (int64_t)g_cols.size(), st->offg, st->colg, st->valg, CUSPARSE_INDEX_32I,
			     CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
	SK(cusparseCreateCsr(&st->cg, M, L, 0, nullptr, nullptr, nullptr, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
			     CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
	std::vector<float> a0(z, 1.0f);
	up(st->val, a0);
	cusparseSpGEMMDescr_t d;
	SK(cusparseSpGEMM_createDescr(&d));
	SK(cusparseSpGEMM_workEstimation(st->h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE,
					 &two, st->a, st->g, &zero, st->cg, CUDA_R_32F, CUSPARSE_SPGEMM_DEFAULT, d,
					 &st->gsize1, nullptr));
	CK(cudaMalloc(&st->gbuf1, st->gsize1 ? st->gsize1 : 1));
	SK(cusparseSpGEMM_workEstimation(st->h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE,
					 &two, st->a, st->g, &zero, st->cg, CUDA_R_32F, CUSPARSE_SPGEMM_DEFAULT, d,
					 &st->gsize1, st->gbuf1));
	SK(cusparseSpGEMM_compute(st->h, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &two,
				  st->a, st->g, &zero, st->cg, CUDA_R_32F, CUSPARSE_SPGEMM_DEFAULT, d, &st->gsize2,
				  nullptr));
	CK(cudaMalloc(&st->gbuf2, st->gsize2 ? st->gsize2 : 1));
	SK(cusparseSpGEMM_destroyDescr(d));
	CK(cudaStreamSynchronize(st->s));
}

// SpGEMM C = 2 A G on request r's values (A's dense copy given), checked
// row by row against the product here (the columns of a row in any order).
static bool spgemm_step(struct state *st, int r, const double (*A)[K], char *why, size_t len)
{
	const cusparseOperation_t NT = CUSPARSE_OPERATION_NON_TRANSPOSE;
	const float two = 2, zero = 0;
	const int zg = (int)g_cols.size();
	std::vector<float> valg(zg);
	double G[K][L] = {};
	cusparseSpGEMMDescr_t d;
	size_t s1 = 0, s2 = 0;
	int64_t rows = 0, cols = 0, nnz = 0;

	for (int k = 0, p = 0; k < K; k++)
		for (; p < g_offsets[k + 1]; p++) {
			valg[p] = (float)datum(r, p, 9);
			G[k][g_cols[p]] = valg[p];
		}
	up(st->valg, valg);
	SK(cusparseSpGEMM_createDescr(&d));
	SK(cusparseSpGEMM_workEstimation(st->h, NT, NT, &two, st->a, st->g, &zero, st->cg, CUDA_R_32F,
					 CUSPARSE_SPGEMM_DEFAULT, d, &s1, nullptr));
	if (s1 > st->gsize1) {
		snprintf(why, len, "spgemm: work estimation asks %zu bytes now, %zu at init", s1, st->gsize1);
		return false;
	}
	SK(cusparseSpGEMM_workEstimation(st->h, NT, NT, &two, st->a, st->g, &zero, st->cg, CUDA_R_32F,
					 CUSPARSE_SPGEMM_DEFAULT, d, &s1, st->gbuf1));
	SK(cusparseSpGEMM_compute(st->h, NT, NT, &two, st->a, st->g, &zero, st->cg, CUDA_R_32F,
				  CUSPARSE_SPGEMM_DEFAULT, d, &s2, nullptr));
	if (s2 > st->gsize2) {
		snprintf(why, len, "spgemm: compute asks %zu bytes now, %zu at init", s2, st->gsize2);
		return false;
	}
	SK(cusparseSpGEMM_compute(st->h, NT, NT, &two, st->a, st->g, &zero, st->cg, CUDA_R_32F,
				  CUSPARSE_SPGEMM_DEFAULT, d, &s2, st->gbuf2));
	SK(cusparseSpMatGetSize(st->cg, &rows, &cols, &nnz));
	SK(cusparseCsrSetPointers(st->cg, st->offc, st->colc, st->valc));
	SK(cusparseSpGEMM_copy(st->h, NT, NT, &two, st->a, st->g, &zero, st->cg, CUDA_R_32F, CUSPARSE_SPGEMM_DEFAULT,
			       d));
	SK(cusparseSpGEMM_destroyDescr(d));
	CK(cudaStreamSynchronize(st->s));

	// the structure of A G: (i, l) when some k has A(i, k) and G(k, l) in the patterns
	int want_nnz = 0;
	for (int i = 0; i < M; i++)
		for (int l = 0; l < L; l++) {
			bool any = false;

			for (int p = offsets_of[i]; p < offsets_of[i + 1] && !any; p++)
				any = (cols_of[p] + l) % 2 == 0;
			want_nnz += any;
		}
	if (rows != M || cols != L || nnz != want_nnz) {
		snprintf(why, len, "spgemm: C is %lld x %lld with %lld entries, want %d x %d with %d", (long long)rows,
			 (long long)cols, (long long)nnz, M, L, want_nnz);
		return false;
	}
	std::vector<int> offc = down(st->offc, M + 1), colc = down(st->colc, nnz);
	std::vector<float> valc = down(st->valc, nnz);
	if (offc[0] != 0 || offc[M] != nnz) {
		snprintf(why, len, "spgemm: C's offsets run %d..%d, want 0..%lld", offc[0], offc[M], (long long)nnz);
		return false;
	}
	for (int i = 0; i < M; i++) {
		bool seen[L] = {};

		if (offc[i + 1] < offc[i]) {
			snprintf(why, len, "spgemm: C's offsets fall at row %d", i);
			return false;
		}
		for (int p = offc[i]; p < offc[i + 1]; p++) {
			int l = colc[p];
			double want = 0;

			if (l < 0 || l >= L || seen[l]) {
				snprintf(why, len, "spgemm: row %d has column %d (again, or out of range)", i, l);
				return false;
			}
			seen[l] = true;
			for (int k = 0; k < K; k++)
				want += 2 * A[i][k] * G[k][l];
			if (!near(valc[p], want, FT, "spgemm", p, why, len))
				return false;
		}
	}
	return true;
}

// Every call once on request r's data; false (and why) at the first wrong answer.
static bool run_all(struct state *st, int r, char *why, size_t len)
{
	const int z = nnz();
	const float one = 1, half = 0.5f, zero = 0, onehalf = 1.5f, two = 2;
	const double dhalf = 0.5, dtwo = 2;
	const float GARBAGE = 1e3f, GAP = 99.0f;
	std::vector<float> val(z), valb(BATCH * z), sval(z, 7.0f), vx(K), vxt(M), vyt(K), vxc(K), mb(LDB * N),
		mbt(N * M), mbb(BATCH * K * N), mdx(M * L), mdy(L * K);
	std::vector<double> val64(z), vxd(K), vyd(M), mbr(K * N), mcr(M * N), scal = { dhalf, dtwo };
	std::vector<float> garbage_m(M, GARBAGE), garbage_mn(M * N, GARBAGE), garbage_kn(K * N, GARBAGE),
		garbage_b(BATCH * M * N, GARBAGE), garbage_mk(M * K, GARBAGE);
	std::vector<int> garbage_csr(M + 1, -7), rsh, csh, colr(z), ident(z), garbage_z(z, -7);
	std::vector<int> shuffled;   // the COO entries, rows last first
	for (int i = M - 1; i >= 0; i--)
		for (int p = 0; p < z; p++)
			if (rows_of[p] == i)
				shuffled.push_back(p);
	for (int t = 0; t < z; t++) {
		rsh.push_back(rows_of[shuffled[t]]);
		csh.push_back(cols_of[shuffled[t]]);
		ident[t] = t;
	}
	for (int i = 0; i < M; i++)   // each row's columns reversed
		for (int p = offsets_of[i]; p < offsets_of[i + 1]; p++)
			colr[p] = cols_of[offsets_of[i] + offsets_of[i + 1] - 1 - p];
	double A[M][K] = {}, A64[M][K] = {}, Ab[BATCH][M][K] = {};

	for (int p = 0; p < z; p++) {
		val[p] = (float)datum(r, p, 1);
		val64[p] = datum(r, p, 2);
		A[rows_of[p]][cols_of[p]] = val[p];
		A64[rows_of[p]][cols_of[p]] = val64[p];
		for (int b = 0; b < BATCH; b++) {
			valb[b * z + p] = (float)datum(r, b * z + p, 3);
			Ab[b][rows_of[p]][cols_of[p]] = valb[b * z + p];
		}
	}
	for (int j = 0; j < K; j++) {
		vx[j] = (float)datum(r, j, 4);
		vyt[j] = (float)datum(r, j, 6);
		vxd[j] = datum(r, j, 7);
		vxc[j] = (float)datum(r, j, 9);
	}
	for (int i = 0; i < M; i++) {
		vxt[i] = (float)datum(r, i, 5);
		vyd[i] = datum(r, i, 8);
	}
	for (int i = 0; i < LDB * N; i++)
		mb[i] = i % LDB < K ? (float)datum(r, i, 10) : GAP;
	for (int i = 0; i < K * N; i++)
		mbr[i] = datum(r, i, 11);
	for (int i = 0; i < M * N; i++)
		mcr[i] = datum(r, i, 12);
	for (int i = 0; i < N * M; i++)
		mbt[i] = (float)datum(r, i, 15);
	for (int i = 0; i < BATCH * K * N; i++)
		mbb[i] = (float)datum(r, i, 16);
	for (int i = 0; i < M * L; i++)
		mdx[i] = (float)datum(r, i, 13);
	for (int i = 0; i < L * K; i++)
		mdy[i] = (float)datum(r, i, 14);
	up(st->val, val);
	up(st->val64, val64);
	up(st->valb, valb);
	up(st->sval, sval);
	up(st->vx, vx);
	up(st->vy, garbage_m);
	up(st->vxt, vxt);
	up(st->vyt, vyt);
	up(st->vxc, vxc);
	up(st->vyc, garbage_m);
	up(st->vxd, vxd);
	up(st->vyd, vyd);
	up(st->scal, scal);
	up(st->mb, mb);
	up(st->mc, garbage_mn);
	up(st->mbr, mbr);
	up(st->mcr, mcr);
	up(st->mbt, mbt);
	up(st->mct, garbage_kn);
	up(st->mbb, mbb);
	up(st->mcb, garbage_b);
	up(st->mdx, mdx);
	up(st->mdy, mdy);
	up(st->md, garbage_mk);
	up(st->csr2, garbage_csr);
	up(st->perm, garbage_z);
	up(st->perm2, ident);
	up(st->rsh, rsh);
	up(st->csh, csh);
	up(st->colr, colr);

	cusparseOperation_t NT = CUSPARSE_OPERATION_NON_TRANSPOSE, TR = CUSPARSE_OPERATION_TRANSPOSE;
	void **buf = st->buf;
	SK(cusparseSpMV(st->h, NT, &onehalf, st->a, st->x, &zero, st->y, CUDA_R_32F, CUSPARSE_SPMV_CSR_ALG1, buf[SPMV]));
	SK(cusparseSpMV(st->h, TR, &one, st->a, st->xt, &half, st->yt, CUDA_R_32F, CUSPARSE_SPMV_ALG_DEFAULT,
			buf[SPMV_T]));
	SK(cusparseSetPointerMode(st->h, CUSPARSE_POINTER_MODE_DEVICE));
	SK(cusparseSpMV(st->h, NT, st->scal, st->a64, st->xd, st->scal + 1, st->yd, CUDA_R_64F,
			CUSPARSE_SPMV_ALG_DEFAULT, buf[SPMV_D]));
	SK(cusparseSetPointerMode(st->h, CUSPARSE_POINTER_MODE_HOST));
	SK(cusparseSpMV(st->h, NT, &two, st->coo, st->xc, &zero, st->yc, CUDA_R_32F, CUSPARSE_SPMV_COO_ALG1,
			buf[SPMV_COO]));
	SK(cusparseSpMM_preprocess(st->h, NT, NT, &one, st->a, st->b, &zero, st->c, CUDA_R_32F, CUSPARSE_SPMM_CSR_ALG1,
				   buf[SPMM_PRE]));
	SK(cusparseSpMM(st->h, NT, NT, &one, st->a, st->b, &zero, st->c, CUDA_R_32F, CUSPARSE_SPMM_CSR_ALG1, buf[SPMM]));
	SK(cusparseSpMM(st->h, NT, NT, &dhalf, st->a64, st->br, &dtwo, st->cr, CUDA_R_64F, CUSPARSE_SPMM_ALG_DEFAULT,
			buf[SPMM_ROW]));
	SK(cusparseSpMM(st->h, TR, TR, &one, st->a, st->bt, &zero, st->ct, CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT,
			buf[SPMM_TT]));
	SK(cusparseSpMM(st->h, NT, NT, &one, st->at_b, st->bb, &zero, st->cb, CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT,
			buf[SPMM_B]));
	SK(cusparseSDDMM_preprocess(st->h, NT, NT, &one, st->dx, st->dy, &zero, st->sp, CUDA_R_32F,
				    CUSPARSE_SDDMM_ALG_DEFAULT, buf[SDDMM_PRE]));
	SK(cusparseSDDMM(st->h, NT, NT, &one, st->dx, st->dy, &zero, st->sp, CUDA_R_32F, CUSPARSE_SDDMM_ALG_DEFAULT,
			 buf[SDDMM]));
	SK(cusparseSparseToDense(st->h, st->a, st->dense, CUSPARSE_SPARSETODENSE_ALG_DEFAULT, buf[DENSE]));
	SK(cusparseXcoo2csr(st->h, st->row, z, M, st->csr2, CUSPARSE_INDEX_BASE_ZERO));
	SK(cusparseCreateIdentityPermutation(st->h, z, st->perm));
	SK(cusparseXcoosortByRow(st->h, M, K, z, st->rsh, st->csh, st->perm, buf[COOSORT]));
	SK(cusparseXcsrsort(st->h, M, K, z, st->legacy, st->off, st->colr, st->perm2, buf[CSRSORT]));
	CK(cudaStreamSynchronize(st->s));

	std::vector<float> y = down(st->vy, M), yt = down(st->vyt, K), yc = down(st->vyc, M), c = down(st->mc, M * N),
			   ct = down(st->mct, K * N), cb = down(st->mcb, BATCH * M * N), sv = down(st->sval, z),
			   md = down(st->md, M * K), b_after = down(st->mb, LDB * N);
	std::vector<double> yd = down(st->vyd, M), cr = down(st->mcr, M * N);
	std::vector<int> csr2 = down(st->csr2, M + 1), perm = down(st->perm, z), perm2 = down(st->perm2, z),
			 rs = down(st->rsh, z), cs = down(st->csh, z), cr2 = down(st->colr, z);

	for (int i = 0; i < M; i++) {
		double s = 0, sd = 0, sc = 0;

		for (int j = 0; j < K; j++) {
			s += A[i][j] * vx[j];
			sd += A64[i][j] * vxd[j];
			sc += A[i][j] * vxc[j];
		}
		if (!near(y[i], 1.5 * s, FT, "spmv", i, why, len) ||
		    !near(yd[i], 0.5 * sd + 2 * vyd[i], DT, "spmv_d", i, why, len) ||
		    !near(yc[i], 2 * sc, FT, "spmv_coo", i, why, len))
			return false;
	}
	for (int j = 0; j < K; j++) {
		double s = 0;

		for (int i = 0; i < M; i++)
			s += A[i][j] * vxt[i];
		if (!near(yt[j], s + 0.5 * vyt[j], FT, "spmv_t", j, why, len))
			return false;
	}
	for (int i = 0; i < M; i++)
		for (int n = 0; n < N; n++) {
			double s = 0, sr = 0;

			for (int k = 0; k < K; k++) {
				s += A[i][k] * mb[k + n * LDB];
				sr += A64[i][k] * mbr[k * N + n];
			}
			if (!near(c[i + n * M], s, FT, "spmm", i + n * M, why, len) ||
			    !near(cr[i * N + n], 0.5 * sr + 2 * mcr[i * N + n], DT, "spmm_row", i * N + n, why, len))
				return false;
			for (int b = 0; b < BATCH; b++) {
				double sb = 0;

				for (int k = 0; k < K; k++)
					sb += Ab[b][i][k] * mbb[b * K * N + k + n * K];
				if (!near(cb[b * M * N + i + n * M], sb, FT, "spmm_b", b * M * N + i + n * M, why, len))
					return false;
			}
		}
	for (int i = 0; i < LDB * N; i++)
		if (i % LDB >= K && b_after[i] != GAP) {
			snprintf(why, len, "spmm: B's gap %d was written: %g", i, b_after[i]);
			return false;
		}
	for (int k = 0; k < K; k++)   // C = A^T (bt)^T: C(k, n) = sum_i A(i, k) bt(n, i)
		for (int n = 0; n < N; n++) {
			double s = 0;

			for (int i = 0; i < M; i++)
				s += A[i][k] * mbt[n + i * N];
			if (!near(ct[k + n * K], s, FT, "spmm_tt", k + n * K, why, len))
				return false;
		}
	for (int p = 0; p < z; p++) {
		double s = 0;

		for (int l = 0; l < L; l++)
			s += mdx[rows_of[p] * L + l] * mdy[l * K + cols_of[p]];
		if (!near(sv[p], s, FT, "sddmm", p, why, len))
			return false;
	}
	for (int i = 0; i < M; i++)
		for (int j = 0; j < K; j++)
			if (!near(md[i + j * M], A[i][j], 0, "dense", i + j * M, why, len))
				return false;
	for (int i = 0; i <= M; i++)
		if (csr2[i] != offsets_of[i]) {
			snprintf(why, len, "coo2csr[%d]: got %d, want %d", i, csr2[i], offsets_of[i]);
			return false;
		}
	for (int p = 0; p < z; p++) {
		int from = offsets_of[rows_of[p]] + offsets_of[rows_of[p] + 1] - 1 - p;   // (csrsort: its place before)

		if (rs[p] != rows_of[p] || cs[p] != cols_of[p] || perm[p] < 0 || perm[p] >= z || shuffled[perm[p]] != p) {
			snprintf(why, len, "coosort[%d]: row %d col %d P %d, want row %d col %d", p, rs[p], cs[p], perm[p],
				 rows_of[p], cols_of[p]);
			return false;
		}
		if (cr2[p] != cols_of[p] || perm2[p] != from) {
			snprintf(why, len, "csrsort[%d]: col %d P %d, want col %d P %d", p, cr2[p], perm2[p], cols_of[p],
				 from);
			return false;
		}
	}
	return spgemm_step(st, r, A, why, len);
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
		fprintf(stderr, "cusparse_serve: %s\n", why);
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
	for (cusparseSpMatDescr_t m : { st->a, st->a64, st->coo, st->at_b, st->sp, st->g, st->cg })
		SK(cusparseDestroySpMat(m));
	for (cusparseDnVecDescr_t v : { st->x, st->y, st->xt, st->yt, st->xd, st->yd, st->xc, st->yc })
		SK(cusparseDestroyDnVec(v));
	for (cusparseDnMatDescr_t m : { st->b, st->c, st->br, st->cr, st->bt, st->ct, st->bb, st->cb, st->dx, st->dy,
					st->dense })
		SK(cusparseDestroyDnMat(m));
	SK(cusparseDestroyMatDescr(st->legacy));
	SK(cusparseDestroy(st->h));
}

// What phos-fn does not forward answers CUSPARSE_STATUS_NOT_SUPPORTED: a
// stub (twice: its log line comes once), and a matrix of complex values.
static int refused(void)
{
	cusparseSpSVDescr_t g;
	cusparseSpMatDescr_t m;
	void *p;

	CK(cudaMalloc(&p, 256));
	cusparseStatus_t a = cusparseSpSV_createDescr(&g), b = cusparseSpSV_createDescr(&g);
	cusparseStatus_t c = cusparseCreateCsr(&m, 2, 2, 1, p, p, p, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
					       CUSPARSE_INDEX_BASE_ZERO, CUDA_C_32F);
	printf("{\"spsv\": %d, \"again\": %d, \"complex\": %d}\n", (int)a, (int)b, (int)c);
	return 0;
}

int main(int argc, char **argv)
{
	static struct state st;
	Dl_info info;
	int version = 0;

	if (dladdr((void *)cusparseCreate, &info) && info.dli_fname)
		fprintf(stderr, "cusparse: %s\n", info.dli_fname);
	if (argc > 1 && !strcmp(argv[1], "refused"))
		return refused();
	make(&st);
	SK(cusparseGetVersion(st.h, &version));
	if (version < 12000) {
		fprintf(stderr, "cuSPARSE 12 needed, got %d\n", version);
		return 1;
	}
	if (argc > 1 && !strcmp(argv[1], "pointers")) {
		std::string s = "pointers {";
		char one[160];
		const void *ptrs[] = { st.off, st.col, st.row, st.csr2, st.val, st.sval, st.off64, st.col64, st.val64,
				       st.offb, st.colb, st.valb, st.vx, st.vy, st.vxt, st.vyt, st.vxc, st.vyc, st.vxd,
				       st.vyd, st.scal, st.mb, st.mc, st.mbr, st.mcr, st.mbt, st.mct, st.mbb, st.mcb,
				       st.mdx, st.mdy, st.md, st.perm, st.perm2, st.rsh, st.csh, st.colr, st.offg,
				       st.colg, st.valg, st.offc, st.colc, st.valc };
		const char *names[] = { "off", "col", "row", "csr2", "val", "sval", "off64", "col64", "val64", "offb",
					"colb", "valb", "vx", "vy", "vxt", "vyt", "vxc", "vyc", "vxd", "vyd", "scal",
					"mb", "mc", "mbr", "mcr", "mbt", "mct", "mbb", "mcb", "mdx", "mdy", "md",
					"perm", "perm2", "rsh", "csh", "colr", "offg", "colg", "valg", "offc", "colc",
					"valc" };
		for (size_t i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++) {
			snprintf(one, sizeof(one), "\"%s\": %llu, ", names[i], (unsigned long long)(uintptr_t)ptrs[i]);
			s += one;
		}
		for (int i = 0; i < CALLS; i++) {
			snprintf(one, sizeof(one), "\"buf_%s\": %llu, \"size_%s\": %zu, ", call_names[i],
				 (unsigned long long)(uintptr_t)st.buf[i], call_names[i], st.bufsize[i]);
			s += one;
		}
		snprintf(one, sizeof(one), "\"nnz_g\": %zu, \"nnz\": %d}", g_cols.size(), nnz());
		s += one;
		fprintf(stderr, "%s\n", s.c_str());
	}
	if (argc > 2 && !strcmp(argv[1], "loop")) {
		int n = atoi(argv[2]);

		for (int i = 1; i <= n; i++) {
			char why[256] = "";

			if (!run_all(&st, i, why, sizeof(why))) {
				fprintf(stderr, "cusparse_serve: step %d: %s\n", i, why);
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
