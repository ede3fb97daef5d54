/* SPDX-License-Identifier: MIT */
/*
 * cublasXt on one device, on top of the forwarded cuBLAS (issue 38).
 *
 * cublasXt runs level-3 BLAS on matrices in host (or device) memory, tiled
 * over the GPUs a program selects. Here every call runs whole on the first
 * selected device: its matrices are copied into device buffers
 * (cudaMemcpyDefault: host or device pointers alike), the forwarded
 * cublas<t>gemm computes, C is copied back, and the call returns when C is
 * there, as cublasXt's do. The answer is cuBLAS's; the block dimension and
 * pinning are kept for their getters, a CPU routine and ratio are checked
 * and left out (every call runs on the GPU): none changes a result.
 *
 *   cublasXtCreate        a handle; no forwarded call until the first gemm,
 *                         which makes its cuBLAS handle on the device
 *   cublasXtDeviceSelect  the devices (one used; more: said once on stderr)
 *   cublasXt{S,D,C,Z}gemm whole on that device; sizes over INT_MAX refused
 *
 * The other cublasXt routines (syrk, trsm, symm, ...) are still refused with
 * CUBLAS_STATUS_NOT_SUPPORTED and one stderr line each (gen_stubs.py's loud
 * stubs, phos_cublas_xt_stub).
 */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <cublasXt.h>
#include <cuda_runtime_api.h>

#include "cublas_internal.h"
#include "internal.h"

#define XT_MAGIC 0x70685874u   /* "tXhp" */

struct cublasXtContext {
	uint32_t magic;
	int device;                    /* -1 until DeviceSelect */
	int block_dim;
	cublasXtPinnedMemMode_t pinning;
	cublasHandle_t blas;           /* made at the first gemm, on device */
};

static struct cublasXtContext *xt(cublasXtHandle_t h)
{
	return h && h->magic == XT_MAGIC ? h : NULL;
}

PHOS_EXPORT cublasStatus_t cublasXtCreate(cublasXtHandle_t *handle)
{
	struct cublasXtContext *h;

	if (!handle)
		return CUBLAS_STATUS_INVALID_VALUE;
	h = calloc(1, sizeof(*h));
	if (!h)
		return CUBLAS_STATUS_ALLOC_FAILED;
	*h = (struct cublasXtContext){ .magic = XT_MAGIC, .device = -1, .block_dim = 4096,
				      .pinning = CUBLASXT_PINNING_DISABLED };
	*handle = h;
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasXtDestroy(cublasXtHandle_t handle)
{
	struct cublasXtContext *h = xt(handle);

	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (h->blas)
		cublasDestroy_v2(h->blas);
	h->magic = 0;
	free(h);
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasXtGetNumBoards(int nbDevices, int deviceId[], int *nbBoards)
{
	if (nbDevices < 0 || (nbDevices && !deviceId) || !nbBoards)
		return CUBLAS_STATUS_INVALID_VALUE;
	*nbBoards = nbDevices;   /* each a board of its own */
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasXtMaxBoards(int *nbGpuBoards)
{
	int n = 0;

	if (!nbGpuBoards)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (cudaGetDeviceCount(&n) != cudaSuccess)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	*nbGpuBoards = n;
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasXtDeviceSelect(cublasXtHandle_t handle, int nbDevices, int deviceId[])
{
	static int said;
	struct cublasXtContext *h = xt(handle);
	int count = 0;

	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (nbDevices < 1 || !deviceId)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (cudaGetDeviceCount(&count) != cudaSuccess)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	for (int i = 0; i < nbDevices; i++)
		if (deviceId[i] < 0 || deviceId[i] >= count)
			return CUBLAS_STATUS_INVALID_VALUE;
	if (h->blas && deviceId[0] != h->device) {   /* its cuBLAS handle was made on the other one */
		cublasDestroy_v2(h->blas);
		h->blas = NULL;
	}
	h->device = deviceId[0];
	if (nbDevices > 1 && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		fprintf(stderr, "phos-fn: cublasXt runs each call on device %d alone (of the %d selected): the same "
			"answers, one GPU's speed\n", h->device, nbDevices);
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasXtSetBlockDim(cublasXtHandle_t handle, int blockDim)
{
	struct cublasXtContext *h = xt(handle);

	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (blockDim <= 0)
		return CUBLAS_STATUS_INVALID_VALUE;
	h->block_dim = blockDim;
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasXtGetBlockDim(cublasXtHandle_t handle, int *blockDim)
{
	struct cublasXtContext *h = xt(handle);

	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!blockDim)
		return CUBLAS_STATUS_INVALID_VALUE;
	*blockDim = h->block_dim;
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasXtGetPinningMemMode(cublasXtHandle_t handle, cublasXtPinnedMemMode_t *mode)
{
	struct cublasXtContext *h = xt(handle);

	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!mode)
		return CUBLAS_STATUS_INVALID_VALUE;
	*mode = h->pinning;
	return CUBLAS_STATUS_SUCCESS;
}

PHOS_EXPORT cublasStatus_t cublasXtSetPinningMemMode(cublasXtHandle_t handle, cublasXtPinnedMemMode_t mode)
{
	struct cublasXtContext *h = xt(handle);

	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (mode != CUBLASXT_PINNING_DISABLED && mode != CUBLASXT_PINNING_ENABLED)
		return CUBLAS_STATUS_INVALID_VALUE;
	h->pinning = mode;
	return CUBLAS_STATUS_SUCCESS;
}

static bool op_ok(cublasXtBlasOp_t op, cublasXtOpType_t type)
{
	return (unsigned)op < CUBLASXT_ROUTINE_MAX && (unsigned)type <= CUBLASXT_DOUBLECOMPLEX;
}

/* A CPU routine for part of the work: kept out (every call runs on the GPU). */
PHOS_EXPORT cublasStatus_t cublasXtSetCpuRoutine(cublasXtHandle_t handle, cublasXtBlasOp_t blasOp,
						 cublasXtOpType_t type, void *blasFunctor)
{
	(void)blasFunctor;
	if (!xt(handle))
		return CUBLAS_STATUS_NOT_INITIALIZED;
	return op_ok(blasOp, type) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

PHOS_EXPORT cublasStatus_t cublasXtSetCpuRatio(cublasXtHandle_t handle, cublasXtBlasOp_t blasOp,
					       cublasXtOpType_t type, float ratio)
{
	if (!xt(handle))
		return CUBLAS_STATUS_NOT_INITIALIZED;
	return op_ok(blasOp, type) && ratio >= 0.0f && ratio <= 1.0f ? CUBLAS_STATUS_SUCCESS
								      : CUBLAS_STATUS_INVALID_VALUE;
}

/* --- gemm --- */

typedef cublasStatus_t (*gemm_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
				  const void *, int, const void *, int, const void *, void *, int);

static bool op_valid(cublasOperation_t t)
{
	return t == CUBLAS_OP_N || t == CUBLAS_OP_T || t == CUBLAS_OP_C;
}

/* bytes = ld x cols x esize, or false when it does not fit a size_t. */
static bool extent(size_t ld, size_t cols, size_t esize, size_t *bytes)
{
	return !__builtin_mul_overflow(ld, cols, bytes) && !__builtin_mul_overflow(*bytes, esize, bytes);
}

static cublasStatus_t copy_in(void **dev, const void *src, size_t bytes, bool fill)
{
	if (cudaMalloc(dev, bytes ? bytes : 1) != cudaSuccess)
		return CUBLAS_STATUS_ALLOC_FAILED;
	if (fill && bytes && cudaMemcpy(*dev, src, bytes, cudaMemcpyDefault) != cudaSuccess)
		return CUBLAS_STATUS_EXECUTION_FAILED;
	return CUBLAS_STATUS_SUCCESS;
}

/* C = alpha op(A) op(B) + beta C on the handle's device; esize: the element's bytes. */
static cublasStatus_t xt_gemm(const char *name, cublasXtHandle_t handle, cublasOperation_t ta, cublasOperation_t tb,
			      size_t m, size_t n, size_t k, const void *alpha, const void *A, size_t lda,
			      const void *B, size_t ldb, const void *beta, void *C, size_t ldc, size_t esize,
			      gemm_fn gemm, bool beta_zero)
{
	static int refused_big;
	struct cublasXtContext *h = xt(handle);
	size_t ba, bb, bc;
	void *da = NULL, *db = NULL, *dc = NULL;
	int prev = 0;
	cublasStatus_t s;

	if (!h || h->device < 0)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!op_valid(ta) || !op_valid(tb) || !alpha || !beta || lda < (ta == CUBLAS_OP_N ? m : k) || lda < 1 ||
	    ldb < (tb == CUBLAS_OP_N ? k : n) || ldb < 1 || ldc < m || ldc < 1)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (m == 0 || n == 0)
		return CUBLAS_STATUS_SUCCESS;
	if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX ||
	    !extent(lda, ta == CUBLAS_OP_N ? k : m, esize, &ba) || !extent(ldb, tb == CUBLAS_OP_N ? n : k, esize, &bb) ||
	    !extent(ldc, n, esize, &bc)) {
		if (!__atomic_exchange_n(&refused_big, 1, __ATOMIC_RELAXED))
			fprintf(stderr, "phos-fn: %s with a dimension over 2^31-1 is not supported: "
				"CUBLAS_STATUS_NOT_SUPPORTED\n", name);
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	if (!A || !B || !C)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (cudaGetDevice(&prev) != cudaSuccess || cudaSetDevice(h->device) != cudaSuccess)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	s = h->blas ? CUBLAS_STATUS_SUCCESS : cublasCreate_v2(&h->blas);
	if (!s)
		s = copy_in(&da, A, ba, k > 0);
	if (!s)
		s = copy_in(&db, B, bb, k > 0);
	if (!s)   /* with beta 0, C is written only (BLAS) */
		s = copy_in(&dc, C, bc, !beta_zero);
	if (!s)
		s = gemm(h->blas, ta, tb, (int)m, (int)n, (int)k, alpha, da, (int)lda, db, (int)ldb, beta, dc, (int)ldc);
	if (!s && cudaMemcpy(C, dc, bc, cudaMemcpyDefault) != cudaSuccess)
		s = CUBLAS_STATUS_EXECUTION_FAILED;
	cudaFree(da);
	cudaFree(db);
	cudaFree(dc);
	cudaSetDevice(prev);
	return s;
}

/* One gemm per type: cublasXt<t>gemm, and the forwarded cublas<t>gemm_v2 it
 * calls through gemm_fn (a wrapper of the same type, not a cast). */
#define XT_GEMM(t, T, zero)                                                                                \
	static cublasStatus_t t##gemm_dev(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, \
					  int n, int k, const void *alpha, const void *A, int lda, const void *B, \
					  int ldb, const void *beta, void *C, int ldc)                          \
	{                                                                                                      \
		return cublas##t##gemm_v2(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);            \
	}                                                                                                      \
	PHOS_EXPORT cublasStatus_t cublasXt##t##gemm(cublasXtHandle_t handle, cublasOperation_t transa,        \
						     cublasOperation_t transb, size_t m, size_t n, size_t k,     \
						     const T *alpha, const T *A, size_t lda, const T *B,         \
						     size_t ldb, const T *beta, T *C, size_t ldc)                \
	{                                                                                                      \
		return xt_gemm("cublasXt" #t "gemm", handle, transa, transb, m, n, k, alpha, A, lda, B, ldb,   \
			       beta, C, ldc, sizeof(T), t##gemm_dev, beta && (zero));                          \
	}

XT_GEMM(S, float, *beta == 0.0f)
XT_GEMM(D, double, *beta == 0.0)
XT_GEMM(C, cuComplex, beta->x == 0.0f && beta->y == 0.0f)
XT_GEMM(Z, cuDoubleComplex, beta->x == 0.0 && beta->y == 0.0)
PHOS_EXPORT_NAMES(cublasXtSgemm cublasXtDgemm cublasXtCgemm cublasXtZgemm)
