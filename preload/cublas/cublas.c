/* SPDX-License-Identifier: MIT */
/*
 * The cuBLAS stand-in: handles and the GEMMs (level 1-3 routines of every
 * precision are in cublas_level.c, the Set/Get helpers in cublas_matrix.c,
 * cublasXt in cublas_xt.c).
 *
 * Handles are ids chosen here (BLAS_CREATE is posted, no round trip); their
 * settings are also kept locally for the getters. Arguments are validated the
 * way cuBLAS does before anything is posted, so that asynchronous errors stay
 * rare. In host pointer mode scalars are read here by the compute type and
 * widened to double; in device pointer mode their addresses travel and the
 * executor reads them after the work queued before the call.
 *
 * The channel is libcudart's: this library reaches it through the PHOS_PRIVATE
 * symbols (phos_preload_*), so one process has one connection.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "blas_status.h"
#include "cublas_internal.h"
#include "internal.h"
#include "log.h"

/* The handle behind a cublasHandle_t, or NULL (CUBLAS_STATUS_NOT_INITIALIZED). */
static struct blas *blas_get_raw(cublasHandle_t handle)
{
	uint32_t id = phos_handle_unwrap(handle, PHOS_H_BLAS);

	return id ? phos_ids_get(PHOS_H_BLAS, id) : NULL;
}

/* The handle of a cuBLAS call. A handle set to cudaStreamPerThread runs on
 * the calling thread's stream, as in CUDA: it is bound again when another
 * thread calls, and after a graph launch posted calls of its own. On a
 * capturing stream it is not bound: its call is captured (blas_post_on). */
struct blas *blas_get(cublasHandle_t handle)
{
	struct blas *b = blas_get_raw(handle);
	uint32_t sid, epoch;
	int r;

	if (!b)
		return NULL;
	if (phos_preload_capturing(b->stream))
		return b;
	r = phos_preload_stream_id(b->stream, &sid);
	if (r == cudaErrorStreamCaptureUnsupported)
		return NULL;
	epoch = phos_graph_record_epoch();
	if (r == cudaSuccess && (sid != b->sid || epoch != b->epoch)) {
		struct phos_blas_set s = { .handle = b->id, .value = (int32_t)sid };

		if (blas_post(PHOS_OP_BLAS_SET_STREAM, &s, sizeof(s)) != CUBLAS_STATUS_SUCCESS)
			return NULL;
		b->sid = sid;
		b->epoch = epoch;
	}
	return b;
}

cublasStatus_t blas_call_on(struct blas *b, uint32_t op, const void *body, size_t len, void *out, size_t out_cap,
			    size_t *ret_len)
{
	int bs = 0, r;
	uint32_t sid;

	if (phos_preload_capturing(b->stream)) {
		phos_preload_stream_id(b->stream, &sid);   /* invalidates the capture */
		phos_refuse_once("cuBLAS", "a call whose result the host reads, on a capturing stream",
				 ": CUBLAS_STATUS_NOT_SUPPORTED");
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	r = phos_preload_call(op, body, len, NULL, 0, out, out_cap, ret_len, &bs);
	if (r == cudaSuccess)
		return CUBLAS_STATUS_SUCCESS;
	return bs ? (cublasStatus_t)bs : phos_blas_status_of(r);
}

cublasStatus_t blas_post_on(struct blas *b, uint32_t op, const void *body, size_t len)
{
	if (phos_preload_capturing(b->stream)) {
		/* each launch of the graph: the handle bound to the launch stream, then the call */
		struct phos_blas_set s = { .handle = b->id };
		int r = phos_graph_capture_record(b->stream, PHOS_OP_BLAS_SET_STREAM, &s, sizeof(s),
						  offsetof(struct phos_blas_set, value));

		if (r == cudaSuccess)
			r = phos_graph_capture_record(b->stream, op, body, len, UINT32_MAX);
		return phos_blas_status_of(r);
	}
	return blas_post(op, body, len);
}

cublasStatus_t blas_post(uint32_t op, const void *body, size_t len)
{
	return phos_blas_status_of(phos_preload_post(op, body, len, NULL, 0));
}

/* Called by every generated stub (stubs_cublas.c). */
int phos_cublas_stub(const char *name, int *logged);
int phos_cublas_stub(const char *name, int *logged)
{
	phos_log_once("cuBLAS API", name, logged);
	return CUBLAS_STATUS_NOT_SUPPORTED;
}

/* Called by the generated stubs of the cublasXt* names cublas_xt.c does not
 * run (all but the handle calls and the gemms). Refused with
 * CUBLAS_STATUS_NOT_SUPPORTED and one line on stderr per name, whatever
 * PHOS_LOG says, so that the refusal is never silent. */
int phos_cublas_xt_stub(const char *name, int *logged);
int phos_cublas_xt_stub(const char *name, int *logged)
{
	if (!__atomic_exchange_n(logged, 1, __ATOMIC_RELAXED))
		fprintf(stderr, "phos-fn: %s is not supported (of cublasXt, phos-fn runs the gemms only): "
			"CUBLAS_STATUS_NOT_SUPPORTED\n",
			name);
	return CUBLAS_STATUS_NOT_SUPPORTED;
}

/* --- handles --- */

PHOS_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
	struct phos_handle h = { 0 };
	struct blas *b;
	int r;

	if (!handle)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (phos_preload_connect())
		return CUBLAS_STATUS_NOT_INITIALIZED;
	b = calloc(1, sizeof(*b));
	if (!b)
		return CUBLAS_STATUS_ALLOC_FAILED;
	b->math = CUBLAS_DEFAULT_MATH;
	b->atomics = CUBLAS_ATOMICS_NOT_ALLOWED;
	if (phos_ids_add(PHOS_H_BLAS, b, &b->id)) {
		free(b);
		return CUBLAS_STATUS_ALLOC_FAILED;
	}
	h.id = b->id;
	r = phos_preload_post(PHOS_OP_BLAS_CREATE, &h, sizeof(h), NULL, 0);
	if (r) {
		free(phos_ids_take(PHOS_H_BLAS, b->id));
		return phos_blas_status_of(r) == CUBLAS_STATUS_EXECUTION_FAILED ? CUBLAS_STATUS_NOT_INITIALIZED
									 : phos_blas_status_of(r);
	}
	*handle = phos_handle_wrap(PHOS_H_BLAS, b->id);
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
	struct blas *b = blas_get_raw(handle);
	struct phos_handle h = { 0 };
	cublasStatus_t s;

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	h.id = b->id;
	s = blas_post(PHOS_OP_BLAS_DESTROY, &h, sizeof(h));
	free(phos_ids_take(PHOS_H_BLAS, b->id));
	return s;
}

PHOS_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId)
{
	struct blas *b = blas_get_raw(handle);
	struct phos_blas_set s = { 0 };
	uint32_t sid;
	cublasStatus_t st;

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (phos_preload_capturing(streamId)) {
		/* bound for each captured call (blas_post); eager calls bind it again */
		b->stream = streamId;
		b->sid = BLAS_UNBOUND;
		return CUBLAS_STATUS_SUCCESS;
	}
	if (phos_preload_stream_id(streamId, &sid))
		return CUBLAS_STATUS_INVALID_VALUE;
	s.handle = b->id;
	s.value = (int32_t)sid;
	st = blas_post(PHOS_OP_BLAS_SET_STREAM, &s, sizeof(s));
	if (st == CUBLAS_STATUS_SUCCESS) {
		b->stream = streamId;
		b->sid = sid;
	}
	return st;
}

PHOS_EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *streamId)
{
	struct blas *b = blas_get_raw(handle);

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!streamId)
		return CUBLAS_STATUS_INVALID_VALUE;
	*streamId = b->stream;
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_set s = { 0 };
	cublasStatus_t st;

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	s.handle = b->id;
	s.value = (int32_t)mode;
	st = blas_post(PHOS_OP_BLAS_SET_MATH, &s, sizeof(s));
	if (st == CUBLAS_STATUS_SUCCESS)
		b->math = mode;
	return st;
}

PHOS_EXPORT cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode)
{
	struct blas *b = blas_get(handle);

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!mode)
		return CUBLAS_STATUS_INVALID_VALUE;
	*mode = b->math;
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t workspaceSizeInBytes)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_workspace w = { 0 };
	cublasStatus_t st;

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (workspaceSizeInBytes && !workspace)
		return CUBLAS_STATUS_INVALID_VALUE;
	w.handle = b->id;
	w.addr = (uint64_t)(uintptr_t)workspace;
	w.size = workspaceSizeInBytes;
	st = blas_post(PHOS_OP_BLAS_SET_WORKSPACE, &w, sizeof(w));
	if (st == CUBLAS_STATUS_SUCCESS) {
		b->workspace = workspace;
		b->workspace_size = workspaceSizeInBytes;
	}
	return st;
}

/* Kept here only: every record says where its scalars and results are. */
PHOS_EXPORT cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode)
{
	struct blas *b = blas_get(handle);

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
		return CUBLAS_STATUS_INVALID_VALUE;
	b->pointer_mode = mode;
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t *mode)
{
	struct blas *b = blas_get(handle);

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!mode)
		return CUBLAS_STATUS_INVALID_VALUE;
	*mode = b->pointer_mode;
	return CUBLAS_STATUS_SUCCESS;
}

/* Atomics only allow cuBLAS to pick other kernels: remembered, not forwarded. */
PHOS_EXPORT cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t mode)
{
	struct blas *b = blas_get(handle);

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	b->atomics = mode;
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasGetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t *mode)
{
	struct blas *b = blas_get(handle);

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!mode)
		return CUBLAS_STATUS_INVALID_VALUE;
	*mode = b->atomics;
	return CUBLAS_STATUS_SUCCESS;
}

/* --- versions and statuses --- */

PHOS_EXPORT cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int *version)
{
	if (!version)
		return CUBLAS_STATUS_INVALID_VALUE;
	*version = CUBLAS_VERSION;
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasGetProperty(libraryPropertyType type, int *value)
{
	return phos_blas_property(type, value);
}

PHOS_EXPORT size_t cublasGetCudartVersion(void)
{
	return CUDART_VERSION;
}

PHOS_EXPORT const char *cublasGetStatusName(cublasStatus_t status)
{
	return phos_blas_status_name(status);
}

PHOS_EXPORT const char *cublasGetStatusString(cublasStatus_t status)
{
	return phos_blas_status_string(status);
}

/* --- scalars --- */

static double half_to_double(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double v;

	if (e == 0)
		v = ldexp(m, -24);
	else if (e == 31)
		v = m ? NAN : INFINITY;
	else
		v = ldexp(m | 0x400, e - 25);
	return (h & 0x8000) ? -v : v;
}

enum scalar_kind { SCALAR_NONE, SCALAR_F16, SCALAR_F32, SCALAR_F64, SCALAR_I32 };

/* The scalar type of a compute type (legacy cudaDataType values accepted). */
static enum scalar_kind scalar_of(int compute, int *ret_compute)
{
	switch (compute) {
	case CUDA_R_16F:
	case CUBLAS_COMPUTE_16F:
	case CUBLAS_COMPUTE_16F_PEDANTIC:
		*ret_compute = compute == CUDA_R_16F ? CUBLAS_COMPUTE_16F : compute;
		return SCALAR_F16;
	case CUDA_R_32F:
	case CUBLAS_COMPUTE_32F:
	case CUBLAS_COMPUTE_32F_PEDANTIC:
	case CUBLAS_COMPUTE_32F_FAST_16F:
	case CUBLAS_COMPUTE_32F_FAST_16BF:
	case CUBLAS_COMPUTE_32F_FAST_TF32:
	case CUBLAS_COMPUTE_32F_EMULATED_16BFX9:
		*ret_compute = compute == CUDA_R_32F ? CUBLAS_COMPUTE_32F : compute;
		return SCALAR_F32;
	case CUDA_R_64F:
	case CUBLAS_COMPUTE_64F:
	case CUBLAS_COMPUTE_64F_PEDANTIC:
	case CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT:
		*ret_compute = compute == CUDA_R_64F ? CUBLAS_COMPUTE_64F : compute;
		return SCALAR_F64;
	case CUDA_R_32I:
	case CUBLAS_COMPUTE_32I:
	case CUBLAS_COMPUTE_32I_PEDANTIC:
		*ret_compute = compute == CUDA_R_32I ? CUBLAS_COMPUTE_32I : compute;
		return SCALAR_I32;
	default:
		return SCALAR_NONE;
	}
}

static double scalar_read(const void *p, enum scalar_kind k)
{
	uint16_t h;
	float f;
	double d;
	int32_t i;

	switch (k) {
	case SCALAR_F16:
		memcpy(&h, p, sizeof(h));
		return half_to_double(h);
	case SCALAR_F32:
		memcpy(&f, p, sizeof(f));
		return f;
	case SCALAR_F64:
		memcpy(&d, p, sizeof(d));
		return d;
	case SCALAR_I32:
		memcpy(&i, p, sizeof(i));
		return i;
	default:
		return 0;
	}
}

void blas_scalar_read(const void *p, int type, double ret[2])
{
	float f[2] = { 0, 0 };
	double d[2] = { 0, 0 };

	switch (type) {
	case CUDA_R_32F:
	case CUDA_C_32F:
		memcpy(f, p, type == CUDA_C_32F ? 2 * sizeof(float) : sizeof(float));
		ret[0] = f[0];
		ret[1] = f[1];
		break;
	default:
		memcpy(d, p, type == CUDA_C_64F ? 2 * sizeof(double) : sizeof(double));
		ret[0] = d[0];
		ret[1] = d[1];
		break;
	}
}

/* Real types of GEMM operands (complex ones are checked on their own). */
static bool real_type(int t)
{
	switch (t) {
	case CUDA_R_32F: case CUDA_R_64F: case CUDA_R_16F: case CUDA_R_16BF:
	case CUDA_R_8I: case CUDA_R_8U: case CUDA_R_32I:
		return true;
	default:
		return false;
	}
}

/* --- GEMM --- */

static bool op_valid(cublasOperation_t op)
{
	return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

static int max1(int v)
{
	return v > 1 ? v : 1;
}

static cublasStatus_t gemm_post(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
				int n, int k, const void *alpha, const void *A, int atype, int lda, long long sa,
				const void *B, int btype, int ldb, long long sb, const void *beta, void *C, int ctype,
				int ldc, long long sc, int batch, int compute, int algo, bool arrays)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_gemm g = { 0 };
	enum scalar_kind sk;
	bool cplx;

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	sk = scalar_of(compute, &g.compute);
	cplx = ctype == CUDA_C_32F || ctype == CUDA_C_64F;
	if (sk == SCALAR_NONE || (cplx ? atype != ctype || btype != ctype
				  : !real_type(atype) || !real_type(btype) || !real_type(ctype)))
		return CUBLAS_STATUS_NOT_SUPPORTED;
	if (!op_valid(transa) || !op_valid(transb) || m < 0 || n < 0 || k < 0 || batch < 0 ||
	    lda < max1(transa == CUBLAS_OP_N ? m : k) || ldb < max1(transb == CUBLAS_OP_N ? k : n) ||
	    ldc < max1(m) || !alpha || !beta || sa < 0 || sb < 0 || sc < 0)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (m == 0 || n == 0 || batch == 0)
		return CUBLAS_STATUS_SUCCESS;
	g.handle = b->id;
	g.transa = transa;
	g.transb = transb;
	g.m = m;
	g.n = n;
	g.k = k;
	g.atype = atype;
	g.btype = btype;
	g.ctype = ctype;
	g.algo = algo;
	g.lda = lda;
	g.ldb = ldb;
	g.ldc = ldc;
	g.batch = batch;
	g.arrays = arrays;
	g.stride_a = sa;
	g.stride_b = sb;
	g.stride_c = sc;
	g.a = (uint64_t)(uintptr_t)A;
	g.b = (uint64_t)(uintptr_t)B;
	g.c = (uint64_t)(uintptr_t)C;
	if (b->pointer_mode == CUBLAS_POINTER_MODE_DEVICE) {
		g.dev_scalars = 1;
		g.alpha_addr = (uint64_t)(uintptr_t)alpha;
		g.beta_addr = (uint64_t)(uintptr_t)beta;
	} else if (cplx) {
		double a[2], be[2];

		blas_scalar_read(alpha, ctype, a);
		blas_scalar_read(beta, ctype, be);
		g.alpha = a[0], g.alpha_im = a[1];
		g.beta = be[0], g.beta_im = be[1];
	} else {
		g.alpha = scalar_read(alpha, sk);
		g.beta = scalar_read(beta, sk);
	}
	return blas_post_on(b, PHOS_OP_BLAS_GEMM, &g, sizeof(g));
}

static cublasStatus_t gemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,
			   int n, int k, const void *alpha, const void *A, int atype, int lda, long long sa,
			   const void *B, int btype, int ldb, long long sb, const void *beta, void *C, int ctype,
			   int ldc, long long sc, int batch, int compute, int algo)
{
	return gemm_post(handle, transa, transb, m, n, k, alpha, A, atype, lda, sa, B, btype, ldb, sb, beta, C,
			 ctype, ldc, sc, batch, compute, algo, false);
}

PHOS_EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
					  int m, int n, int k, const float *alpha, const float *A, int lda,
					  const float *B, int ldb, const float *beta, float *C, int ldc)
{
	return gemm(handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0, beta, C,
		    CUDA_R_32F, ldc, 0, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

PHOS_EXPORT cublasStatus_t cublasDgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
					  int m, int n, int k, const double *alpha, const double *A, int lda,
					  const double *B, int ldb, const double *beta, double *C, int ldc)
{
	return gemm(handle, transa, transb, m, n, k, alpha, A, CUDA_R_64F, lda, 0, B, CUDA_R_64F, ldb, 0, beta, C,
		    CUDA_R_64F, ldc, 0, 1, CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT);
}

PHOS_EXPORT cublasStatus_t cublasCgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
					  int m, int n, int k, const cuComplex *alpha, const cuComplex *A, int lda,
					  const cuComplex *B, int ldb, const cuComplex *beta, cuComplex *C, int ldc)
{
	return gemm(handle, transa, transb, m, n, k, alpha, A, CUDA_C_32F, lda, 0, B, CUDA_C_32F, ldb, 0, beta, C,
		    CUDA_C_32F, ldc, 0, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

PHOS_EXPORT cublasStatus_t cublasZgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
					  int m, int n, int k, const cuDoubleComplex *alpha, const cuDoubleComplex *A,
					  int lda, const cuDoubleComplex *B, int ldb, const cuDoubleComplex *beta,
					  cuDoubleComplex *C, int ldc)
{
	return gemm(handle, transa, transb, m, n, k, alpha, A, CUDA_C_64F, lda, 0, B, CUDA_C_64F, ldb, 0, beta, C,
		    CUDA_C_64F, ldc, 0, 1, CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT);
}

/* __half is a C++ type; in C its bits are enough (cublas_api.h declares
 * the half routines only for C++, so their prototypes are given here). */
typedef uint16_t phos_half;
cublasStatus_t cublasHgemm(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const phos_half *,
			   const phos_half *, int, const phos_half *, int, const phos_half *, phos_half *, int);
cublasStatus_t cublasHgemmStridedBatched(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
					 const phos_half *, const phos_half *, int, long long int, const phos_half *,
					 int, long long int, const phos_half *, phos_half *, int, long long int, int);
cublasStatus_t cublasHgemmBatched(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
				  const phos_half *, const phos_half *const[], int, const phos_half *const[], int,
				  const phos_half *, phos_half *const[], int, int);

PHOS_EXPORT cublasStatus_t cublasHgemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
				       int m, int n, int k, const phos_half *alpha, const phos_half *A, int lda,
				       const phos_half *B, int ldb, const phos_half *beta, phos_half *C, int ldc)
{
	return gemm(handle, transa, transb, m, n, k, alpha, A, CUDA_R_16F, lda, 0, B, CUDA_R_16F, ldb, 0, beta, C,
		    CUDA_R_16F, ldc, 0, 1, CUBLAS_COMPUTE_16F, CUBLAS_GEMM_DEFAULT);
}

#define STRIDED(name, T, type, compute)                                                                          \
	PHOS_EXPORT cublasStatus_t name(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, \
					int m, int n, int k, const T *alpha, const T *A, int lda, long long int sA, \
					const T *B, int ldb, long long int sB, const T *beta, T *C, int ldc,     \
					long long int sC, int batchCount)                                       \
	{                                                                                                        \
		return gemm(handle, transa, transb, m, n, k, alpha, A, type, lda, sA, B, type, ldb, sB, beta, C,  \
			    type, ldc, sC, batchCount, compute, CUBLAS_GEMM_DEFAULT);                            \
	}
STRIDED(cublasDgemmStridedBatched, double, CUDA_R_64F, CUBLAS_COMPUTE_64F)
STRIDED(cublasCgemmStridedBatched, cuComplex, CUDA_C_32F, CUBLAS_COMPUTE_32F)
STRIDED(cublasZgemmStridedBatched, cuDoubleComplex, CUDA_C_64F, CUBLAS_COMPUTE_64F)
STRIDED(cublasHgemmStridedBatched, phos_half, CUDA_R_16F, CUBLAS_COMPUTE_16F)

#define BATCHED(name, T, type, compute)                                                                          \
	PHOS_EXPORT cublasStatus_t name(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, \
					int m, int n, int k, const T *alpha, const T *const Aarray[], int lda,   \
					const T *const Barray[], int ldb, const T *beta, T *const Carray[],      \
					int ldc, int batchCount)                                                \
	{                                                                                                        \
		if (!Aarray || !Barray || !Carray)                                                               \
			return CUBLAS_STATUS_INVALID_VALUE;                                                      \
		return gemm_post(handle, transa, transb, m, n, k, alpha, Aarray, type, lda, 0, Barray, type, ldb, \
				 0, beta, (void *)Carray, type, ldc, 0, batchCount, compute, CUBLAS_GEMM_DEFAULT, \
				 true);                                                                          \
	}
BATCHED(cublasDgemmBatched, double, CUDA_R_64F, CUBLAS_COMPUTE_64F)
BATCHED(cublasCgemmBatched, cuComplex, CUDA_C_32F, CUBLAS_COMPUTE_32F)
BATCHED(cublasZgemmBatched, cuDoubleComplex, CUDA_C_64F, CUBLAS_COMPUTE_64F)
BATCHED(cublasHgemmBatched, phos_half, CUDA_R_16F, CUBLAS_COMPUTE_16F)
PHOS_EXPORT_NAMES(cublasDgemmStridedBatched cublasCgemmStridedBatched cublasZgemmStridedBatched
		  cublasHgemmStridedBatched cublasDgemmBatched cublasCgemmBatched cublasZgemmBatched
		  cublasHgemmBatched)

PHOS_EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
					int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
					int lda, const void *B, cudaDataType Btype, int ldb, const void *beta, void *C,
					cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
					cublasGemmAlgo_t algo)
{
	return gemm(handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C, Ctype, ldc,
		    0, 1, computeType, algo);
}

PHOS_EXPORT cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
						     cublasOperation_t transb, int m, int n, int k,
						     const float *alpha, const float *A, int lda, long long int strideA,
						     const float *B, int ldb, long long int strideB, const float *beta,
						     float *C, int ldc, long long int strideC, int batchCount)
{
	return gemm(handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F, lda, strideA, B, CUDA_R_32F, ldb,
		    strideB, beta, C, CUDA_R_32F, ldc, strideC, batchCount, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

PHOS_EXPORT cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
						      cublasOperation_t transb, int m, int n, int k, const void *alpha,
						      const void *A, cudaDataType Atype, int lda, long long int strideA,
						      const void *B, cudaDataType Btype, int ldb, long long int strideB,
						      const void *beta, void *C, cudaDataType Ctype, int ldc,
						      long long int strideC, int batchCount,
						      cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
	return gemm(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb, strideB, beta, C,
		    Ctype, ldc, strideC, batchCount, computeType, algo);
}

/* Pointer-array batched forms: the arrays live in device memory; the executor
 * reads them to know which matrices the call touches (speculation). */
PHOS_EXPORT cublasStatus_t cublasSgemmBatched(cublasHandle_t handle, cublasOperation_t transa,
					      cublasOperation_t transb, int m, int n, int k, const float *alpha,
					      const float *const Aarray[], int lda, const float *const Barray[],
					      int ldb, const float *beta, float *const Carray[], int ldc,
					      int batchCount)
{
	if (!Aarray || !Barray || !Carray)
		return CUBLAS_STATUS_INVALID_VALUE;
	return gemm_post(handle, transa, transb, m, n, k, alpha, Aarray, CUDA_R_32F, lda, 0, Barray, CUDA_R_32F,
			 ldb, 0, beta, (void *)Carray, CUDA_R_32F, ldc, 0, batchCount, CUBLAS_COMPUTE_32F,
			 CUBLAS_GEMM_DEFAULT, true);
}

PHOS_EXPORT cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
					       cublasOperation_t transb, int m, int n, int k, const void *alpha,
					       const void *const Aarray[], cudaDataType Atype, int lda,
					       const void *const Barray[], cudaDataType Btype, int ldb,
					       const void *beta, void *const Carray[], cudaDataType Ctype, int ldc,
					       int batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
	if (!Aarray || !Barray || !Carray)
		return CUBLAS_STATUS_INVALID_VALUE;
	return gemm_post(handle, transa, transb, m, n, k, alpha, Aarray, Atype, lda, 0, Barray, Btype, ldb, 0,
			 beta, (void *)Carray, Ctype, ldc, 0, batchCount, computeType, algo, true);
}

__attribute__((constructor)) static void cublas_init(void)
{
	phos_log_init("phos-preload-cublas", PHOS_LOG_OFF);
}
