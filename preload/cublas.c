/* SPDX-License-Identifier: MIT */
/*
 * The cuBLAS stand-in: handles and the calls we forward (GEMMs, gemv, level-1).
 *
 * Handles are ids chosen here (BLAS_CREATE is posted, no round trip); their
 * settings are also kept locally for the getters. Arguments are validated the
 * way cuBLAS does before anything is posted, so that asynchronous errors stay
 * rare. Scalars are read from host pointers (the only pointer mode supported)
 * by the compute type and widened to double. Dot and nrm2 return a host scalar
 * and are synchronous; everything else is asynchronous.
 *
 * The channel is libcudart's: this library reaches it through the PHOS_PRIVATE
 * symbols (phos_preload_*), so one process has one connection.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "internal.h"
#include "log.h"

struct blas {
	uint32_t id;
	cudaStream_t stream;
	cublasMath_t math;
	cublasAtomicsMode_t atomics;
	void *workspace;
	size_t workspace_size;
};

/* The handle behind a cublasHandle_t, or NULL (CUBLAS_STATUS_NOT_INITIALIZED). */
static struct blas *blas_get(cublasHandle_t handle)
{
	uint32_t id = phos_handle_unwrap(handle, PHOS_H_BLAS);

	return id ? phos_ids_get(PHOS_H_BLAS, id) : NULL;
}

/* cudaError_t of posting/calling → cublasStatus_t. */
static cublasStatus_t blas_status(int cuda_err)
{
	switch (cuda_err) {
	case cudaSuccess:
		return CUBLAS_STATUS_SUCCESS;
	case cudaErrorInitializationError:
		return CUBLAS_STATUS_NOT_INITIALIZED;
	case cudaErrorMemoryAllocation:
		return CUBLAS_STATUS_ALLOC_FAILED;
	case cudaErrorInvalidValue:
		return CUBLAS_STATUS_INVALID_VALUE;
	case cudaErrorNotSupported:
		return CUBLAS_STATUS_NOT_SUPPORTED;
	default:
		return CUBLAS_STATUS_EXECUTION_FAILED;
	}
}

/* A synchronous cuBLAS call: the executor's cuBLAS status when it gave one. */
static cublasStatus_t blas_call(uint32_t op, const void *body, size_t len, void *out, size_t out_cap,
				size_t *ret_len)
{
	int bs = 0, r = phos_preload_call(op, body, len, NULL, 0, out, out_cap, ret_len, &bs);

	if (r == cudaSuccess)
		return CUBLAS_STATUS_SUCCESS;
	return bs ? (cublasStatus_t)bs : blas_status(r);
}

static cublasStatus_t blas_post(uint32_t op, const void *body, size_t len)
{
	return blas_status(phos_preload_post(op, body, len, NULL, 0));
}

/* Called by every generated stub (stubs_cublas.c). */
int phos_cublas_stub(const char *name, int *logged);
int phos_cublas_stub(const char *name, int *logged)
{
	phos_log_once("cuBLAS API", name, logged);
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
		return blas_status(r) == CUBLAS_STATUS_EXECUTION_FAILED ? CUBLAS_STATUS_NOT_INITIALIZED
									 : blas_status(r);
	}
	*handle = phos_handle_wrap(PHOS_H_BLAS, b->id);
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
	struct blas *b = blas_get(handle);
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
	struct blas *b = blas_get(handle);
	struct phos_blas_set s = { 0 };
	uint32_t sid;
	cublasStatus_t st;

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (phos_preload_stream_id(streamId, &sid))
		return CUBLAS_STATUS_INVALID_VALUE;
	s.handle = b->id;
	s.value = (int32_t)sid;
	st = blas_post(PHOS_OP_BLAS_SET_STREAM, &s, sizeof(s));
	if (st == CUBLAS_STATUS_SUCCESS)
		b->stream = streamId;
	return st;
}

PHOS_EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *streamId)
{
	struct blas *b = blas_get(handle);

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

PHOS_EXPORT cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode)
{
	if (!blas_get(handle))
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (mode == CUBLAS_POINTER_MODE_HOST)
		return CUBLAS_STATUS_SUCCESS;
	return mode == CUBLAS_POINTER_MODE_DEVICE ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_INVALID_VALUE;
}

PHOS_EXPORT cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t *mode)
{
	if (!blas_get(handle))
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!mode)
		return CUBLAS_STATUS_INVALID_VALUE;
	*mode = CUBLAS_POINTER_MODE_HOST;
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
	if (!value)
		return CUBLAS_STATUS_INVALID_VALUE;
	switch (type) {
	case MAJOR_VERSION:
		*value = CUBLAS_VER_MAJOR;
		return CUBLAS_STATUS_SUCCESS;
	case MINOR_VERSION:
		*value = CUBLAS_VER_MINOR;
		return CUBLAS_STATUS_SUCCESS;
	case PATCH_LEVEL:
		*value = CUBLAS_VER_PATCH;
		return CUBLAS_STATUS_SUCCESS;
	default:
		return CUBLAS_STATUS_INVALID_VALUE;
	}
}

PHOS_EXPORT size_t cublasGetCudartVersion(void)
{
	return CUDART_VERSION;
}

static const struct {
	cublasStatus_t status;
	const char *name, *desc;
} statuses[] = {
	{ CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS", "success" },
	{ CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED", "the library was not initialized" },
	{ CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED", "the resource allocation failed" },
	{ CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE", "an invalid numeric value was used as an argument" },
	{ CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH", "an absent device architectural feature is required" },
	{ CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR", "an access to GPU memory space failed" },
	{ CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED", "the GPU program failed to execute" },
	{ CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR", "an internal operation failed" },
	{ CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED", "the functionality requested is not supported" },
	{ CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR", "the functionality requested requires some license and an error was detected when trying to check the current licensing" },
};

PHOS_EXPORT const char *cublasGetStatusName(cublasStatus_t status)
{
	for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
		if (statuses[i].status == status)
			return statuses[i].name;
	return "CUBLAS_STATUS_UNKNOWN";
}

PHOS_EXPORT const char *cublasGetStatusString(cublasStatus_t status)
{
	for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
		if (statuses[i].status == status)
			return statuses[i].desc;
	return "unknown error";
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

/* Real types only: the record has no room for complex scalars. */
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

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	sk = scalar_of(compute, &g.compute);
	if (sk == SCALAR_NONE || !real_type(atype) || !real_type(btype) || !real_type(ctype))
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
	g.alpha = scalar_read(alpha, sk);
	g.beta = scalar_read(beta, sk);
	return blas_post(PHOS_OP_BLAS_GEMM, &g, sizeof(g));
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

/* --- gemv and level 1 --- */

PHOS_EXPORT cublasStatus_t cublasSgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m, int n,
					  const float *alpha, const float *A, int lda, const float *x, int incx,
					  const float *beta, float *y, int incy)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_gemv g = { 0 };

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!op_valid(trans) || m < 0 || n < 0 || lda < max1(m) || incx == 0 || incy == 0 || !alpha || !beta)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (m == 0 || n == 0)
		return CUBLAS_STATUS_SUCCESS;
	g.handle = b->id;
	g.trans = trans;
	g.m = m;
	g.n = n;
	g.lda = lda;
	g.incx = incx;
	g.incy = incy;
	g.a = (uint64_t)(uintptr_t)A;
	g.x = (uint64_t)(uintptr_t)x;
	g.y = (uint64_t)(uintptr_t)y;
	g.alpha = *alpha;
	g.beta = *beta;
	return blas_post(PHOS_OP_BLAS_GEMV, &g, sizeof(g));
}

static struct phos_blas_l1 l1_body(const struct blas *b, int kind, int n, const void *x, int incx, const void *y,
				   int incy)
{
	struct phos_blas_l1 l = { .handle = b->id, .kind = kind, .n = n, .incx = incx, .incy = incy };

	l.x = (uint64_t)(uintptr_t)x;
	l.y = (uint64_t)(uintptr_t)y;
	return l;
}

PHOS_EXPORT cublasStatus_t cublasSaxpy_v2(cublasHandle_t handle, int n, const float *alpha, const float *x, int incx,
					  float *y, int incy)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_l1 l;

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!alpha)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (n <= 0)
		return CUBLAS_STATUS_SUCCESS;
	if (incx == 0 || incy == 0)
		return CUBLAS_STATUS_INVALID_VALUE;
	l = l1_body(b, PHOS_BLAS_SAXPY, n, x, incx, y, incy);
	l.alpha = *alpha;
	return blas_post(PHOS_OP_BLAS_L1, &l, sizeof(l));
}

PHOS_EXPORT cublasStatus_t cublasSscal_v2(cublasHandle_t handle, int n, const float *alpha, float *x, int incx)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_l1 l;

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!alpha)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (n <= 0 || incx <= 0)
		return CUBLAS_STATUS_SUCCESS;
	l = l1_body(b, PHOS_BLAS_SSCAL, n, x, incx, NULL, 0);
	l.alpha = *alpha;
	return blas_post(PHOS_OP_BLAS_L1, &l, sizeof(l));
}

/* Synchronous: the result is a host scalar. */
static cublasStatus_t l1_result(struct blas *b, int kind, int n, const float *x, int incx, const float *y, int incy,
				float *result)
{
	struct phos_blas_l1 l = l1_body(b, kind, n, x, incx, y, incy);
	float v = 0;
	size_t len = 0;
	cublasStatus_t s = blas_call(PHOS_OP_BLAS_L1, &l, sizeof(l), &v, sizeof(v), &len);

	if (s == CUBLAS_STATUS_SUCCESS && len != sizeof(v))
		s = CUBLAS_STATUS_INTERNAL_ERROR;
	if (s == CUBLAS_STATUS_SUCCESS)
		*result = v;
	return s;
}

PHOS_EXPORT cublasStatus_t cublasSdot_v2(cublasHandle_t handle, int n, const float *x, int incx, const float *y,
					 int incy, float *result)
{
	struct blas *b = blas_get(handle);

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!result)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (n <= 0) {
		*result = 0;
		return CUBLAS_STATUS_SUCCESS;
	}
	if (incx == 0 || incy == 0)
		return CUBLAS_STATUS_INVALID_VALUE;
	return l1_result(b, PHOS_BLAS_SDOT, n, x, incx, y, incy, result);
}

PHOS_EXPORT cublasStatus_t cublasSnrm2_v2(cublasHandle_t handle, int n, const float *x, int incx, float *result)
{
	struct blas *b = blas_get(handle);

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!result)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (n <= 0 || incx <= 0) {
		*result = 0;
		return CUBLAS_STATUS_SUCCESS;
	}
	return l1_result(b, PHOS_BLAS_SNRM2, n, x, incx, NULL, 0, result);
}

__attribute__((constructor)) static void cublas_init(void)
{
	phos_log_init("phos-preload-cublas", PHOS_LOG_OFF);
}
