/* SPDX-License-Identifier: MIT */
/*
 * cuBLAS level 1-3 routines of every precision (S, D, C, Z): axpy, scal,
 * dot/dotu/dotc, nrm2, asum, amax/amin, copy, swap, rot (and csrot, zdrot),
 * gemv, symv, hemv, ger/geru/gerc, syrk, herk, trsm and trsmBatched. Each entry point checks its arguments as cuBLAS does and fills one
 * PHOS_OP_BLAS_CALL record (proto.h, phos_blas_op) whose type field says the
 * precision, so the executor and both device backends have one path per
 * routine, not one per precision.
 *
 * Pointer mode (the handle's, cublasSetPointerMode): in host mode scalars are
 * read here and travel by value, and a routine that returns a result (dot,
 * nrm2, asum, amax, amin) is a synchronous call whose reply is the result; in
 * device mode the scalar and result addresses travel, the executor reads the
 * scalars after the work queued before the call and writes the result on the
 * handle's stream, and the call is asynchronous as in cuBLAS.
 *
 * Increments of 0 in routines that read two vectors are refused with
 * CUBLAS_STATUS_INVALID_VALUE (as the S forms did before); scal, nrm2, asum,
 * amax and amin do nothing (result 0) for incx <= 0, as cuBLAS does.
 */
#include <string.h>

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "cublas_internal.h"
#include "internal.h"

static int max1(int v)
{
	return v > 1 ? v : 1;
}

static int real_of(int type)
{
	return type == CUDA_C_32F ? CUDA_R_32F : type == CUDA_C_64F ? CUDA_R_64F : type;
}

static size_t type_bytes(int type)
{
	switch (type) {
	case CUDA_R_32F: return 4;
	case CUDA_R_64F: return 8;
	case CUDA_C_32F: return 8;
	default: return 16;
	}
}

/* Sends op: scalars by the handle's pointer mode, and a result of rsize
 * bytes (0: none) to *result. alpha/beta may be NULL when the routine has none. */
static cublasStatus_t run(struct blas *b, struct phos_blas_op *op, const void *alpha, const void *beta, void *result,
			  size_t rsize)
{
	bool dev = b->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
	uint8_t out[16];
	size_t got = 0;
	cublasStatus_t s;

	op->handle = b->id;
	if (dev) {
		op->dev_scalars = alpha || beta;
		op->alpha_addr = (uint64_t)(uintptr_t)alpha;
		op->beta_addr = (uint64_t)(uintptr_t)beta;
	} else {
		if (alpha)
			blas_scalar_read(alpha, op->scal_type, op->alpha);
		if (beta)
			blas_scalar_read(beta, op->scal_type, op->beta);
	}
	if (!rsize)
		return blas_post_on(b, PHOS_OP_BLAS_CALL, op, sizeof(*op));
	if (dev) {
		op->dev_result = 1;
		op->result = (uint64_t)(uintptr_t)result;
		return blas_post_on(b, PHOS_OP_BLAS_CALL, op, sizeof(*op));
	}
	/* the executor waits for the handle's stream to read the result: NCCL
	 * ranks as threads poll for it first (internal.h) */
	if (phos_preload_drain(b->sid) != cudaSuccess)
		return CUBLAS_STATUS_EXECUTION_FAILED;
	s = blas_call_on(b, PHOS_OP_BLAS_CALL, op, sizeof(*op), out, sizeof(out), &got);
	if (s == CUBLAS_STATUS_SUCCESS && got != rsize)
		s = CUBLAS_STATUS_INTERNAL_ERROR;
	if (s == CUBLAS_STATUS_SUCCESS)
		memcpy(result, out, rsize);
	return s;
}

/* A result of rsize bytes that is zero without a call (n <= 0 and the like):
 * written here in host mode, by the executor in device mode. */
static cublasStatus_t zero_result(struct blas *b, struct phos_blas_op *op, void *result, size_t rsize)
{
	if (b->pointer_mode == CUBLAS_POINTER_MODE_DEVICE) {
		op->n = 0;
		return run(b, op, NULL, NULL, result, rsize);
	}
	memset(result, 0, rsize);
	return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t axpy(cublasHandle_t handle, int type, int n, const void *alpha, const void *x, int incx,
			   void *y, int incy)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_op op = { .fn = PHOS_BLAS_AXPY, .type = type, .scal_type = type, .n = n, .incx = incx,
				   .incy = incy, .x = (uintptr_t)x, .y = (uintptr_t)y };

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!alpha)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (n <= 0)
		return CUBLAS_STATUS_SUCCESS;
	if (incx == 0 || incy == 0)
		return CUBLAS_STATUS_INVALID_VALUE;
	return run(b, &op, alpha, NULL, NULL, 0);
}

static cublasStatus_t scal(cublasHandle_t handle, int type, int scal_type, int n, const void *alpha, void *x,
			   int incx)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_op op = { .fn = PHOS_BLAS_SCAL, .type = type, .scal_type = scal_type, .n = n,
				   .incx = incx, .x = (uintptr_t)x };

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!alpha)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (n <= 0 || incx <= 0)
		return CUBLAS_STATUS_SUCCESS;
	return run(b, &op, alpha, NULL, NULL, 0);
}

/* dot, dotu, dotc, copy, swap: two vectors */
static cublasStatus_t two(cublasHandle_t handle, int fn, int type, int n, const void *x, int incx, const void *y,
			  int incy, void *result)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_op op = { .fn = fn, .type = type, .scal_type = type, .n = n, .incx = incx, .incy = incy,
				   .x = (uintptr_t)x, .y = (uintptr_t)y };
	size_t rsize = fn == PHOS_BLAS_DOT || fn == PHOS_BLAS_DOTC ? type_bytes(type) : 0;

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (rsize && !result)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (n <= 0)
		return rsize ? zero_result(b, &op, result, rsize) : CUBLAS_STATUS_SUCCESS;
	if (incx == 0 || incy == 0)
		return CUBLAS_STATUS_INVALID_VALUE;
	return run(b, &op, NULL, NULL, result, rsize);
}

/* nrm2, asum, amax, amin: one vector, one result */
static cublasStatus_t reduce(cublasHandle_t handle, int fn, int type, int n, const void *x, int incx, void *result)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_op op = { .fn = fn, .type = type, .scal_type = type, .n = n, .incx = incx,
				   .x = (uintptr_t)x };
	size_t rsize = fn == PHOS_BLAS_AMAX || fn == PHOS_BLAS_AMIN ? sizeof(int) : type_bytes(real_of(type));

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!result)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (n <= 0 || incx <= 0)
		return zero_result(b, &op, result, rsize);
	return run(b, &op, NULL, NULL, result, rsize);
}

static bool op_ok(cublasOperation_t t)
{
	return t == CUBLAS_OP_N || t == CUBLAS_OP_T || t == CUBLAS_OP_C;
}

static cublasStatus_t gemv(cublasHandle_t handle, int type, cublasOperation_t trans, int m, int n, const void *alpha,
			   const void *A, int lda, const void *x, int incx, const void *beta, void *y, int incy)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_op op = { .fn = PHOS_BLAS_GEMV, .type = type, .scal_type = type, .m = m, .n = n,
				   .lda = lda, .incx = incx, .incy = incy, .trans = trans, .a = (uintptr_t)A,
				   .x = (uintptr_t)x, .y = (uintptr_t)y };

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!op_ok(trans) || m < 0 || n < 0 || lda < max1(m) || incx == 0 || incy == 0 || !alpha || !beta)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (m == 0 || n == 0)
		return CUBLAS_STATUS_SUCCESS;
	return run(b, &op, alpha, beta, NULL, 0);
}

static cublasStatus_t ger(cublasHandle_t handle, int fn, int type, int m, int n, const void *alpha, const void *x,
			  int incx, const void *y, int incy, void *A, int lda)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_op op = { .fn = fn, .type = type, .scal_type = type, .m = m, .n = n, .lda = lda,
				   .incx = incx, .incy = incy, .a = (uintptr_t)A, .x = (uintptr_t)x,
				   .y = (uintptr_t)y };

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (m < 0 || n < 0 || incx == 0 || incy == 0 || lda < max1(m) || !alpha)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (m == 0 || n == 0)
		return CUBLAS_STATUS_SUCCESS;
	return run(b, &op, alpha, NULL, NULL, 0);
}

static cublasStatus_t trsm(cublasHandle_t handle, int type, cublasSideMode_t side, cublasFillMode_t uplo,
			   cublasOperation_t trans, cublasDiagType_t diag, int m, int n, const void *alpha,
			   const void *A, int lda, void *B, int ldb)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_op op = { .fn = PHOS_BLAS_TRSM, .type = type, .scal_type = type, .m = m, .n = n,
				   .lda = lda, .ldb = ldb, .trans = trans, .side = side, .uplo = uplo,
				   .diag = diag, .a = (uintptr_t)A, .b = (uintptr_t)B };

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if ((side != CUBLAS_SIDE_LEFT && side != CUBLAS_SIDE_RIGHT) ||
	    (uplo != CUBLAS_FILL_MODE_LOWER && uplo != CUBLAS_FILL_MODE_UPPER) || !op_ok(trans) ||
	    (diag != CUBLAS_DIAG_NON_UNIT && diag != CUBLAS_DIAG_UNIT) || m < 0 || n < 0 ||
	    lda < max1(side == CUBLAS_SIDE_LEFT ? m : n) || ldb < max1(m) || !alpha)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (m == 0 || n == 0)
		return CUBLAS_STATUS_SUCCESS;
	return run(b, &op, alpha, NULL, NULL, 0);
}

/* trsm on batch pairs of matrices named by device arrays of pointers (A[i],
 * B[i]); the executor reads the arrays to put each matrix in the call's set.
 * Arguments as trsm's, and batchCount < 0 refused as cuBLAS does. */
static cublasStatus_t trsm_batched(cublasHandle_t handle, int type, cublasSideMode_t side, cublasFillMode_t uplo,
				   cublasOperation_t trans, cublasDiagType_t diag, int m, int n, const void *alpha,
				   const void *const A[], int lda, void *const B[], int ldb, int batch)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_op op = { .fn = PHOS_BLAS_TRSM_BATCHED, .type = type, .scal_type = type, .m = m, .n = n,
				   .lda = lda, .ldb = ldb, .trans = trans, .side = side, .uplo = uplo,
				   .diag = diag, .a = (uintptr_t)A, .b = (uintptr_t)B, .batch = batch };

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if ((side != CUBLAS_SIDE_LEFT && side != CUBLAS_SIDE_RIGHT) ||
	    (uplo != CUBLAS_FILL_MODE_LOWER && uplo != CUBLAS_FILL_MODE_UPPER) || !op_ok(trans) ||
	    (diag != CUBLAS_DIAG_NON_UNIT && diag != CUBLAS_DIAG_UNIT) || m < 0 || n < 0 ||
	    lda < max1(side == CUBLAS_SIDE_LEFT ? m : n) || ldb < max1(m) || batch < 0 || !alpha)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (m == 0 || n == 0 || batch == 0)
		return CUBLAS_STATUS_SUCCESS;
	return run(b, &op, alpha, NULL, NULL, 0);
}

static bool uplo_ok(cublasFillMode_t u)
{
	return u == CUBLAS_FILL_MODE_LOWER || u == CUBLAS_FILL_MODE_UPPER;
}

/* symv, hemv */
static cublasStatus_t symv(cublasHandle_t handle, int fn, int type, cublasFillMode_t uplo, int n, const void *alpha,
			   const void *A, int lda, const void *x, int incx, const void *beta, void *y, int incy)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_op op = { .fn = fn, .type = type, .scal_type = type, .m = n, .n = n, .lda = lda,
				   .incx = incx, .incy = incy, .uplo = uplo, .a = (uintptr_t)A, .x = (uintptr_t)x,
				   .y = (uintptr_t)y };

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!uplo_ok(uplo) || n < 0 || lda < max1(n) || incx == 0 || incy == 0 || !alpha || !beta)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (n == 0)
		return CUBLAS_STATUS_SUCCESS;
	return run(b, &op, alpha, beta, NULL, 0);
}

/* syrk, herk (alpha, beta of scal_type: real for herk) */
static cublasStatus_t syrk(cublasHandle_t handle, int fn, int type, int scal_type, cublasFillMode_t uplo,
			   cublasOperation_t trans, int n, int k, const void *alpha, const void *A, int lda,
			   const void *beta, void *C, int ldc)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_op op = { .fn = fn, .type = type, .scal_type = scal_type, .m = k, .n = n, .lda = lda,
				   .ldb = ldc, .uplo = uplo, .trans = trans, .a = (uintptr_t)A, .b = (uintptr_t)C };
	/* syrk takes N or T (real: C too), herk N or C */
	bool trans_ok = trans == CUBLAS_OP_N || (fn == PHOS_BLAS_HERK ? trans == CUBLAS_OP_C
						   : trans == CUBLAS_OP_T || (trans == CUBLAS_OP_C && scal_type == type &&
									      (type == CUDA_R_32F || type == CUDA_R_64F)));

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!uplo_ok(uplo) || !trans_ok || n < 0 || k < 0 || lda < max1(trans == CUBLAS_OP_N ? n : k) ||
	    ldc < max1(n) || !alpha || !beta)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (n == 0)
		return CUBLAS_STATUS_SUCCESS;
	return run(b, &op, alpha, beta, NULL, 0);
}

/* rot: c always real; s real (scal_type real) or complex (crot, zrot: only in
 * host pointer mode, the two scalars being of two types) */
static cublasStatus_t rot(cublasHandle_t handle, int type, int s_type, int n, void *x, int incx, void *y, int incy,
			  const void *c, const void *s)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_op op = { .fn = PHOS_BLAS_ROT, .type = type, .scal_type = s_type, .n = n, .incx = incx,
				   .incy = incy, .x = (uintptr_t)x, .y = (uintptr_t)y };
	static int logged;

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!c || !s)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (n <= 0)
		return CUBLAS_STATUS_SUCCESS;
	if (incx == 0 || incy == 0)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (s_type != real_of(type)) {
		double cv[2];

		if (b->pointer_mode == CUBLAS_POINTER_MODE_DEVICE) {
			phos_log_once("device pointer mode in", type == CUDA_C_32F ? "cublasCrot" : "cublasZrot", &logged);
			return CUBLAS_STATUS_NOT_SUPPORTED;
		}
		blas_scalar_read(c, real_of(type), cv);
		blas_scalar_read(s, type, op.beta);
		op.alpha[0] = cv[0];
		op.handle = b->id;
		return blas_post_on(b, PHOS_OP_BLAS_CALL, &op, sizeof(op));
	}
	return run(b, &op, c, s, NULL, 0);
}

static bool side_ok(cublasSideMode_t s)
{
	return s == CUBLAS_SIDE_LEFT || s == CUBLAS_SIDE_RIGHT;
}

/* symm, hemm: C = alpha A B + beta C (left) or alpha B A + beta C (right) */
static cublasStatus_t symm(cublasHandle_t handle, int fn, int type, cublasSideMode_t side, cublasFillMode_t uplo,
			   int m, int n, const void *alpha, const void *A, int lda, const void *B, int ldb,
			   const void *beta, void *C, int ldc)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_op op = { .fn = fn, .type = type, .scal_type = type, .m = m, .n = n, .lda = lda, .ldb = ldb,
				   .ldc = ldc, .side = side, .uplo = uplo, .a = (uintptr_t)A, .b = (uintptr_t)B,
				   .c = (uintptr_t)C };

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!side_ok(side) || !uplo_ok(uplo) || m < 0 || n < 0 || lda < max1(side == CUBLAS_SIDE_LEFT ? m : n) ||
	    ldb < max1(m) || ldc < max1(m) || !alpha || !beta)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (m == 0 || n == 0)
		return CUBLAS_STATUS_SUCCESS;
	return run(b, &op, alpha, beta, NULL, 0);
}

/* syr2k, her2k (beta real: its two scalars have two types, so it runs in
 * host pointer mode only, as crot does) */
static cublasStatus_t syr2k(cublasHandle_t handle, int fn, int type, cublasFillMode_t uplo, cublasOperation_t trans,
			    int n, int k, const void *alpha, const void *A, int lda, const void *B, int ldb,
			    const void *beta, void *C, int ldc)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_op op = { .fn = fn, .type = type, .scal_type = type, .n = n, .k = k, .lda = lda, .ldb = ldb,
				   .ldc = ldc, .uplo = uplo, .trans = trans, .a = (uintptr_t)A, .b = (uintptr_t)B,
				   .c = (uintptr_t)C };
	bool herm = fn == PHOS_BLAS_HER2K, real = type == CUDA_R_32F || type == CUDA_R_64F;
	bool trans_ok = trans == CUBLAS_OP_N || (herm ? trans == CUBLAS_OP_C : trans == CUBLAS_OP_T ||
						 (real && trans == CUBLAS_OP_C));
	static int logged;

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!uplo_ok(uplo) || !trans_ok || n < 0 || k < 0 || lda < max1(trans == CUBLAS_OP_N ? n : k) ||
	    ldb < max1(trans == CUBLAS_OP_N ? n : k) || ldc < max1(n) || !alpha || !beta)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (n == 0)
		return CUBLAS_STATUS_SUCCESS;
	if (herm) {
		double bv[2];

		if (b->pointer_mode == CUBLAS_POINTER_MODE_DEVICE) {
			phos_log_once("device pointer mode in", type == CUDA_C_32F ? "cublasCher2k" : "cublasZher2k",
				      &logged);
			return CUBLAS_STATUS_NOT_SUPPORTED;
		}
		blas_scalar_read(alpha, type, op.alpha);
		blas_scalar_read(beta, real_of(type), bv);
		op.beta[0] = bv[0];
		op.handle = b->id;
		return blas_post_on(b, PHOS_OP_BLAS_CALL, &op, sizeof(op));
	}
	return run(b, &op, alpha, beta, NULL, 0);
}

/* trmm: C = alpha op(A) B (left) or alpha B op(A) (right), out of place */
static cublasStatus_t trmm(cublasHandle_t handle, int type, cublasSideMode_t side, cublasFillMode_t uplo,
			   cublasOperation_t trans, cublasDiagType_t diag, int m, int n, const void *alpha,
			   const void *A, int lda, const void *B, int ldb, void *C, int ldc)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_op op = { .fn = PHOS_BLAS_TRMM, .type = type, .scal_type = type, .m = m, .n = n,
				   .lda = lda, .ldb = ldb, .ldc = ldc, .trans = trans, .side = side, .uplo = uplo,
				   .diag = diag, .a = (uintptr_t)A, .b = (uintptr_t)B, .c = (uintptr_t)C };

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!side_ok(side) || !uplo_ok(uplo) || !op_ok(trans) ||
	    (diag != CUBLAS_DIAG_NON_UNIT && diag != CUBLAS_DIAG_UNIT) || m < 0 || n < 0 ||
	    lda < max1(side == CUBLAS_SIDE_LEFT ? m : n) || ldb < max1(m) || ldc < max1(m) || !alpha)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (m == 0 || n == 0)
		return CUBLAS_STATUS_SUCCESS;
	return run(b, &op, alpha, NULL, NULL, 0);
}

/* syr, her (alpha real), syr2, her2: rank-1 and rank-2 updates of A's uplo triangle */
static cublasStatus_t syr(cublasHandle_t handle, int fn, int type, int scal_type, cublasFillMode_t uplo, int n,
			  const void *alpha, const void *x, int incx, const void *y, int incy, void *A, int lda)
{
	struct blas *b = blas_get(handle);
	bool two = fn == PHOS_BLAS_SYR2 || fn == PHOS_BLAS_HER2;
	struct phos_blas_op op = { .fn = fn, .type = type, .scal_type = scal_type, .m = n, .n = n, .lda = lda,
				   .incx = incx, .incy = two ? incy : 1, .uplo = uplo, .a = (uintptr_t)A,
				   .x = (uintptr_t)x, .y = (uintptr_t)(two ? y : NULL) };

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!uplo_ok(uplo) || n < 0 || incx == 0 || (two && incy == 0) || lda < max1(n) || !alpha)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (n == 0)
		return CUBLAS_STATUS_SUCCESS;
	return run(b, &op, alpha, NULL, NULL, 0);
}

/* trmv, trsv: x = op(A) x, x = op(A)^-1 x */
static cublasStatus_t trmv(cublasHandle_t handle, int fn, int type, cublasFillMode_t uplo, cublasOperation_t trans,
			   cublasDiagType_t diag, int n, const void *A, int lda, void *x, int incx)
{
	struct blas *b = blas_get(handle);
	struct phos_blas_op op = { .fn = fn, .type = type, .scal_type = type, .m = n, .n = n, .lda = lda,
				   .incx = incx, .incy = 1, .uplo = uplo, .trans = trans, .diag = diag,
				   .a = (uintptr_t)A, .x = (uintptr_t)x };

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!uplo_ok(uplo) || !op_ok(trans) || (diag != CUBLAS_DIAG_NON_UNIT && diag != CUBLAS_DIAG_UNIT) || n < 0 ||
	    lda < max1(n) || incx == 0)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (n == 0)
		return CUBLAS_STATUS_SUCCESS;
	return run(b, &op, NULL, NULL, NULL, 0);
}

/* --- the entry points, per precision --- */

#define LEVEL1(P, p, T, TYPE)                                                                                    \
	PHOS_EXPORT cublasStatus_t cublas##P##axpy_v2(cublasHandle_t h, int n, const T *alpha, const T *x, int incx, \
						      T *y, int incy)                                              \
	{                                                                                                          \
		return axpy(h, TYPE, n, alpha, x, incx, y, incy);                                                  \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##scal_v2(cublasHandle_t h, int n, const T *alpha, T *x, int incx)   \
	{                                                                                                          \
		return scal(h, TYPE, TYPE, n, alpha, x, incx);                                                     \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##copy_v2(cublasHandle_t h, int n, const T *x, int incx, T *y,       \
						      int incy)                                                    \
	{                                                                                                          \
		return two(h, PHOS_BLAS_COPY, TYPE, n, x, incx, y, incy, NULL);                                    \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##swap_v2(cublasHandle_t h, int n, T *x, int incx, T *y, int incy)   \
	{                                                                                                          \
		return two(h, PHOS_BLAS_SWAP, TYPE, n, x, incx, y, incy, NULL);                                    \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublasI##p##amax_v2(cublasHandle_t h, int n, const T *x, int incx, int *result) \
	{                                                                                                          \
		return reduce(h, PHOS_BLAS_AMAX, TYPE, n, x, incx, result);                                        \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublasI##p##amin_v2(cublasHandle_t h, int n, const T *x, int incx, int *result) \
	{                                                                                                          \
		return reduce(h, PHOS_BLAS_AMIN, TYPE, n, x, incx, result);                                        \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##gemv_v2(cublasHandle_t h, cublasOperation_t trans, int m, int n,   \
						      const T *alpha, const T *A, int lda, const T *x, int incx,   \
						      const T *beta, T *y, int incy)                               \
	{                                                                                                          \
		return gemv(h, TYPE, trans, m, n, alpha, A, lda, x, incx, beta, y, incy);                          \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##trsm_v2(cublasHandle_t h, cublasSideMode_t side,                   \
						      cublasFillMode_t uplo, cublasOperation_t trans,              \
						      cublasDiagType_t diag, int m, int n, const T *alpha,         \
						      const T *A, int lda, T *B, int ldb)                          \
	{                                                                                                          \
		return trsm(h, TYPE, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb);                        \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##trsmBatched(cublasHandle_t h, cublasSideMode_t side,               \
							  cublasFillMode_t uplo, cublasOperation_t trans,          \
							  cublasDiagType_t diag, int m, int n, const T *alpha,     \
							  const T *const A[], int lda, T *const B[], int ldb,      \
							  int batch)                                               \
	{                                                                                                          \
		return trsm_batched(h, TYPE, side, uplo, trans, diag, m, n, alpha, (const void *const *)A, lda,  \
				    (void *const *)B, ldb, batch);                                           \
	}

#define SYM(P, T, TYPE)                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##symv_v2(cublasHandle_t h, cublasFillMode_t uplo, int n, const T *alpha, \
						      const T *A, int lda, const T *x, int incx, const T *beta,    \
						      T *y, int incy)                                              \
	{                                                                                                          \
		return symv(h, PHOS_BLAS_SYMV, TYPE, uplo, n, alpha, A, lda, x, incx, beta, y, incy);              \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##syrk_v2(cublasHandle_t h, cublasFillMode_t uplo,                   \
						      cublasOperation_t trans, int n, int k, const T *alpha,       \
						      const T *A, int lda, const T *beta, T *C, int ldc)           \
	{                                                                                                          \
		return syrk(h, PHOS_BLAS_SYRK, TYPE, TYPE, uplo, trans, n, k, alpha, A, lda, beta, C, ldc);        \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##symm_v2(cublasHandle_t h, cublasSideMode_t side,                   \
						      cublasFillMode_t uplo, int m, int n, const T *alpha,         \
						      const T *A, int lda, const T *B, int ldb, const T *beta,     \
						      T *C, int ldc)                                               \
	{                                                                                                          \
		return symm(h, PHOS_BLAS_SYMM, TYPE, side, uplo, m, n, alpha, A, lda, B, ldb, beta, C, ldc);       \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##syr2k_v2(cublasHandle_t h, cublasFillMode_t uplo,                  \
						       cublasOperation_t trans, int n, int k, const T *alpha,      \
						       const T *A, int lda, const T *B, int ldb, const T *beta,    \
						       T *C, int ldc)                                              \
	{                                                                                                          \
		return syr2k(h, PHOS_BLAS_SYR2K, TYPE, uplo, trans, n, k, alpha, A, lda, B, ldb, beta, C, ldc);    \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##syr_v2(cublasHandle_t h, cublasFillMode_t uplo, int n,             \
						     const T *alpha, const T *x, int incx, T *A, int lda)          \
	{                                                                                                          \
		return syr(h, PHOS_BLAS_SYR, TYPE, TYPE, uplo, n, alpha, x, incx, NULL, 0, A, lda);                \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##syr2_v2(cublasHandle_t h, cublasFillMode_t uplo, int n,            \
						      const T *alpha, const T *x, int incx, const T *y, int incy,  \
						      T *A, int lda)                                               \
	{                                                                                                          \
		return syr(h, PHOS_BLAS_SYR2, TYPE, TYPE, uplo, n, alpha, x, incx, y, incy, A, lda);               \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##trmv_v2(cublasHandle_t h, cublasFillMode_t uplo,                   \
						      cublasOperation_t trans, cublasDiagType_t diag, int n,       \
						      const T *A, int lda, T *x, int incx)                         \
	{                                                                                                          \
		return trmv(h, PHOS_BLAS_TRMV, TYPE, uplo, trans, diag, n, A, lda, x, incx);                       \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##trsv_v2(cublasHandle_t h, cublasFillMode_t uplo,                   \
						      cublasOperation_t trans, cublasDiagType_t diag, int n,       \
						      const T *A, int lda, T *x, int incx)                         \
	{                                                                                                          \
		return trmv(h, PHOS_BLAS_TRSV, TYPE, uplo, trans, diag, n, A, lda, x, incx);                       \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##trmm_v2(cublasHandle_t h, cublasSideMode_t side,                   \
						      cublasFillMode_t uplo, cublasOperation_t trans,              \
						      cublasDiagType_t diag, int m, int n, const T *alpha,         \
						      const T *A, int lda, const T *B, int ldb, T *C, int ldc)     \
	{                                                                                                          \
		return trmm(h, TYPE, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb, C, ldc);                \
	}
SYM(S, float, CUDA_R_32F)
SYM(D, double, CUDA_R_64F)
SYM(C, cuComplex, CUDA_C_32F)
SYM(Z, cuDoubleComplex, CUDA_C_64F)

/* hemv, herk (real alpha and beta), and rot of every form */
#define HERM(P, T, R, TYPE, RTYPE)                                                                               \
	PHOS_EXPORT cublasStatus_t cublas##P##hemv_v2(cublasHandle_t h, cublasFillMode_t uplo, int n, const T *alpha, \
						      const T *A, int lda, const T *x, int incx, const T *beta,    \
						      T *y, int incy)                                              \
	{                                                                                                          \
		return symv(h, PHOS_BLAS_HEMV, TYPE, uplo, n, alpha, A, lda, x, incx, beta, y, incy);              \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##herk_v2(cublasHandle_t h, cublasFillMode_t uplo,                   \
						      cublasOperation_t trans, int n, int k, const R *alpha,       \
						      const T *A, int lda, const R *beta, T *C, int ldc)           \
	{                                                                                                          \
		return syrk(h, PHOS_BLAS_HERK, TYPE, RTYPE, uplo, trans, n, k, alpha, A, lda, beta, C, ldc);       \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##rot_v2(cublasHandle_t h, int n, T *x, int incx, T *y, int incy,    \
						     const R *c, const T *s)                                       \
	{                                                                                                          \
		return rot(h, TYPE, TYPE, n, x, incx, y, incy, c, s);                                              \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##hemm_v2(cublasHandle_t h, cublasSideMode_t side,                   \
						      cublasFillMode_t uplo, int m, int n, const T *alpha,         \
						      const T *A, int lda, const T *B, int ldb, const T *beta,     \
						      T *C, int ldc)                                               \
	{                                                                                                          \
		return symm(h, PHOS_BLAS_HEMM, TYPE, side, uplo, m, n, alpha, A, lda, B, ldb, beta, C, ldc);       \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##her_v2(cublasHandle_t h, cublasFillMode_t uplo, int n,             \
						     const R *alpha, const T *x, int incx, T *A, int lda)          \
	{                                                                                                          \
		return syr(h, PHOS_BLAS_HER, TYPE, RTYPE, uplo, n, alpha, x, incx, NULL, 0, A, lda);               \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##her2_v2(cublasHandle_t h, cublasFillMode_t uplo, int n,            \
						      const T *alpha, const T *x, int incx, const T *y, int incy,  \
						      T *A, int lda)                                               \
	{                                                                                                          \
		return syr(h, PHOS_BLAS_HER2, TYPE, TYPE, uplo, n, alpha, x, incx, y, incy, A, lda);               \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##her2k_v2(cublasHandle_t h, cublasFillMode_t uplo,                  \
						       cublasOperation_t trans, int n, int k, const T *alpha,      \
						       const T *A, int lda, const T *B, int ldb, const R *beta,    \
						       T *C, int ldc)                                              \
	{                                                                                                          \
		return syr2k(h, PHOS_BLAS_HER2K, TYPE, uplo, trans, n, k, alpha, A, lda, B, ldb, beta, C, ldc);    \
	}
HERM(C, cuComplex, float, CUDA_C_32F, CUDA_R_32F)
HERM(Z, cuDoubleComplex, double, CUDA_C_64F, CUDA_R_64F)

PHOS_EXPORT cublasStatus_t cublasSrot_v2(cublasHandle_t h, int n, float *x, int incx, float *y, int incy,
					 const float *c, const float *s)
{
	return rot(h, CUDA_R_32F, CUDA_R_32F, n, x, incx, y, incy, c, s);
}

PHOS_EXPORT cublasStatus_t cublasDrot_v2(cublasHandle_t h, int n, double *x, int incx, double *y, int incy,
					 const double *c, const double *s)
{
	return rot(h, CUDA_R_64F, CUDA_R_64F, n, x, incx, y, incy, c, s);
}

PHOS_EXPORT cublasStatus_t cublasCsrot_v2(cublasHandle_t h, int n, cuComplex *x, int incx, cuComplex *y, int incy,
					  const float *c, const float *s)
{
	return rot(h, CUDA_C_32F, CUDA_R_32F, n, x, incx, y, incy, c, s);
}

PHOS_EXPORT cublasStatus_t cublasZdrot_v2(cublasHandle_t h, int n, cuDoubleComplex *x, int incx, cuDoubleComplex *y,
					  int incy, const double *c, const double *s)
{
	return rot(h, CUDA_C_64F, CUDA_R_64F, n, x, incx, y, incy, c, s);
}

LEVEL1(S, s, float, CUDA_R_32F)
LEVEL1(D, d, double, CUDA_R_64F)
LEVEL1(C, c, cuComplex, CUDA_C_32F)
LEVEL1(Z, z, cuDoubleComplex, CUDA_C_64F)

/* dot, nrm2, asum and ger, whose names differ between real and complex */
#define REAL(P, T, TYPE)                                                                                         \
	PHOS_EXPORT cublasStatus_t cublas##P##dot_v2(cublasHandle_t h, int n, const T *x, int incx, const T *y,  \
						     int incy, T *result)                                          \
	{                                                                                                          \
		return two(h, PHOS_BLAS_DOT, TYPE, n, x, incx, y, incy, result);                                   \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##nrm2_v2(cublasHandle_t h, int n, const T *x, int incx, T *result)  \
	{                                                                                                          \
		return reduce(h, PHOS_BLAS_NRM2, TYPE, n, x, incx, result);                                        \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##asum_v2(cublasHandle_t h, int n, const T *x, int incx, T *result)  \
	{                                                                                                          \
		return reduce(h, PHOS_BLAS_ASUM, TYPE, n, x, incx, result);                                        \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##ger_v2(cublasHandle_t h, int m, int n, const T *alpha, const T *x,  \
						     int incx, const T *y, int incy, T *A, int lda)                \
	{                                                                                                          \
		return ger(h, PHOS_BLAS_GER, TYPE, m, n, alpha, x, incx, y, incy, A, lda);                         \
	}
REAL(S, float, CUDA_R_32F)
REAL(D, double, CUDA_R_64F)

/* PR: prefix of the real-result names (Sc, Dz); PS: real-scalar scal (Cs, Zd) */
#define COMPLEX(P, PR, T, R, TYPE, RTYPE)                                                                        \
	PHOS_EXPORT cublasStatus_t cublas##P##dotu_v2(cublasHandle_t h, int n, const T *x, int incx, const T *y, \
						      int incy, T *result)                                         \
	{                                                                                                          \
		return two(h, PHOS_BLAS_DOT, TYPE, n, x, incx, y, incy, result);                                   \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##dotc_v2(cublasHandle_t h, int n, const T *x, int incx, const T *y, \
						      int incy, T *result)                                         \
	{                                                                                                          \
		return two(h, PHOS_BLAS_DOTC, TYPE, n, x, incx, y, incy, result);                                  \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##PR##nrm2_v2(cublasHandle_t h, int n, const T *x, int incx, R *result) \
	{                                                                                                          \
		return reduce(h, PHOS_BLAS_NRM2, TYPE, n, x, incx, result);                                        \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##PR##asum_v2(cublasHandle_t h, int n, const T *x, int incx, R *result) \
	{                                                                                                          \
		return reduce(h, PHOS_BLAS_ASUM, TYPE, n, x, incx, result);                                        \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##geru_v2(cublasHandle_t h, int m, int n, const T *alpha,            \
						      const T *x, int incx, const T *y, int incy, T *A, int lda)   \
	{                                                                                                          \
		return ger(h, PHOS_BLAS_GER, TYPE, m, n, alpha, x, incx, y, incy, A, lda);                         \
	}                                                                                                          \
	PHOS_EXPORT cublasStatus_t cublas##P##gerc_v2(cublasHandle_t h, int m, int n, const T *alpha,            \
						      const T *x, int incx, const T *y, int incy, T *A, int lda)   \
	{                                                                                                          \
		return ger(h, PHOS_BLAS_GERC, TYPE, m, n, alpha, x, incx, y, incy, A, lda);                        \
	}
COMPLEX(C, Sc, cuComplex, float, CUDA_C_32F, CUDA_R_32F)
COMPLEX(Z, Dz, cuDoubleComplex, double, CUDA_C_64F, CUDA_R_64F)

PHOS_EXPORT cublasStatus_t cublasCsscal_v2(cublasHandle_t h, int n, const float *alpha, cuComplex *x, int incx)
{
	return scal(h, CUDA_C_32F, CUDA_R_32F, n, alpha, x, incx);
}

PHOS_EXPORT cublasStatus_t cublasZdscal_v2(cublasHandle_t h, int n, const double *alpha, cuDoubleComplex *x, int incx)
{
	return scal(h, CUDA_C_64F, CUDA_R_64F, n, alpha, x, incx);
}

/* The names the macros above define, for gen_stubs.py (which reads no macros):
 * a name missing here or defined twice fails the link. */
PHOS_EXPORT_NAMES(
	cublasSaxpy_v2 cublasSscal_v2 cublasScopy_v2 cublasSswap_v2 cublasIsamax_v2 cublasIsamin_v2 cublasSgemv_v2
	cublasStrsm_v2 cublasDaxpy_v2 cublasDscal_v2 cublasDcopy_v2 cublasDswap_v2 cublasIdamax_v2 cublasIdamin_v2
	cublasDgemv_v2 cublasDtrsm_v2 cublasCaxpy_v2 cublasCscal_v2 cublasCcopy_v2 cublasCswap_v2 cublasIcamax_v2
	cublasIcamin_v2 cublasCgemv_v2 cublasCtrsm_v2 cublasZaxpy_v2 cublasZscal_v2 cublasZcopy_v2 cublasZswap_v2
	cublasIzamax_v2 cublasIzamin_v2 cublasZgemv_v2 cublasZtrsm_v2 cublasSdot_v2 cublasSnrm2_v2 cublasSasum_v2
	cublasSger_v2 cublasDdot_v2 cublasDnrm2_v2 cublasDasum_v2 cublasDger_v2 cublasCdotu_v2 cublasCdotc_v2
	cublasScnrm2_v2 cublasScasum_v2 cublasCgeru_v2 cublasCgerc_v2 cublasZdotu_v2 cublasZdotc_v2 cublasDznrm2_v2
	cublasDzasum_v2 cublasZgeru_v2 cublasZgerc_v2
	cublasSsymv_v2 cublasSsyrk_v2 cublasDsymv_v2 cublasDsyrk_v2 cublasCsymv_v2 cublasCsyrk_v2 cublasZsymv_v2
	cublasZsyrk_v2 cublasChemv_v2 cublasCherk_v2 cublasCrot_v2 cublasZhemv_v2 cublasZherk_v2 cublasZrot_v2
	cublasSsymm_v2 cublasSsyr2k_v2 cublasStrmm_v2 cublasDsymm_v2 cublasDsyr2k_v2 cublasDtrmm_v2 cublasCsymm_v2
	cublasCsyr2k_v2 cublasCtrmm_v2 cublasZsymm_v2 cublasZsyr2k_v2 cublasZtrmm_v2 cublasChemm_v2 cublasCher2k_v2
	cublasZhemm_v2 cublasZher2k_v2
	cublasSsyr_v2 cublasSsyr2_v2 cublasStrmv_v2 cublasStrsv_v2 cublasDsyr_v2 cublasDsyr2_v2 cublasDtrmv_v2
	cublasDtrsv_v2 cublasCsyr_v2 cublasCsyr2_v2 cublasCtrmv_v2 cublasCtrsv_v2 cublasZsyr_v2 cublasZsyr2_v2
	cublasZtrmv_v2 cublasZtrsv_v2 cublasCher_v2 cublasCher2_v2 cublasZher_v2 cublasZher2_v2
	cublasStrsmBatched cublasDtrsmBatched cublasCtrsmBatched cublasZtrsmBatched
)
