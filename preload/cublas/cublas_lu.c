/* SPDX-License-Identifier: MIT */
/*
 * Batched LU and QR routines on device arrays of matrix pointers, S and D:
 * getrfBatched, getriBatched, getrsBatched, matinvBatched, geqrfBatched,
 * gelsBatched. One record (PHOS_OP_BLAS_LU) for all of them; the executor
 * reads the pointer arrays to put every matrix they name in the call's
 * read/write set, as for the pointer-array GEMMs. Arguments are checked as
 * cuBLAS does; getrsBatched, geqrfBatched and gelsBatched report a bad
 * argument in their host *info as -(its position, counted from the parameter
 * after the handle).
 */
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "cublas_internal.h"
#include "internal.h"

static int max1(int v)
{
	return v > 1 ? v : 1;
}

static cublasStatus_t lu_post(cublasHandle_t handle, struct phos_blas_lu *op)
{
	struct blas *b = blas_get(handle);

	if (!b)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (op->batch == 0 || op->n == 0)
		return CUBLAS_STATUS_SUCCESS;
	op->handle = b->id;
	return blas_post_on(b, PHOS_OP_BLAS_LU, op, sizeof(*op));
}

static cublasStatus_t getrf(cublasHandle_t h, int type, int n, void *const A[], int lda, int *P, int *info, int batch)
{
	struct phos_blas_lu op = { .fn = PHOS_BLAS_GETRF, .type = type, .n = n, .lda = lda, .batch = batch,
				   .a = (uintptr_t)A, .pivots = (uintptr_t)P, .info = (uintptr_t)info };

	if (n < 0 || lda < max1(n) || batch < 0 || (batch && n && (!A || !info)))
		return CUBLAS_STATUS_INVALID_VALUE;
	return lu_post(h, &op);
}

static cublasStatus_t getri(cublasHandle_t h, int type, int n, const void *const A[], int lda, const int *P,
			    void *const C[], int ldc, int *info, int batch)
{
	struct phos_blas_lu op = { .fn = PHOS_BLAS_GETRI, .type = type, .n = n, .lda = lda, .ldc = ldc,
				   .batch = batch, .a = (uintptr_t)A, .c = (uintptr_t)C, .pivots = (uintptr_t)P,
				   .info = (uintptr_t)info };

	if (n < 0 || lda < max1(n) || ldc < max1(n) || batch < 0 || (batch && n && (!A || !C || !info)))
		return CUBLAS_STATUS_INVALID_VALUE;
	return lu_post(h, &op);
}

static cublasStatus_t getrs(cublasHandle_t h, int type, cublasOperation_t trans, int n, int nrhs,
			    const void *const A[], int lda, const int *P, void *const B[], int ldb, int *info,
			    int batch)
{
	struct phos_blas_lu op = { .fn = PHOS_BLAS_GETRS, .type = type, .n = n, .nrhs = nrhs, .trans = trans,
				   .lda = lda, .ldc = ldb, .batch = batch, .a = (uintptr_t)A, .c = (uintptr_t)B,
				   .pivots = (uintptr_t)P };
	int bad = 0;

	if (!info)
		return CUBLAS_STATUS_INVALID_VALUE;
	/* cuBLAS counts the parameters after the handle: trans is 1, nrhs 3
	 * (an H100 reported info -3 for nrhs < 0) */
	if (trans != CUBLAS_OP_N && trans != CUBLAS_OP_T && trans != CUBLAS_OP_C)
		bad = 1;
	else if (n < 0)
		bad = 2;
	else if (nrhs < 0)
		bad = 3;
	else if (lda < max1(n))
		bad = 5;
	else if (ldb < max1(n))
		bad = 8;
	else if (batch < 0)
		bad = 10;
	*info = -bad;
	if (bad)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (nrhs == 0)
		return blas_get(h) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
	return lu_post(h, &op);
}

static cublasStatus_t matinv(cublasHandle_t h, int type, int n, const void *const A[], int lda, void *const Ainv[],
			     int lda_inv, int *info, int batch)
{
	struct phos_blas_lu op = { .fn = PHOS_BLAS_MATINV, .type = type, .n = n, .lda = lda, .ldc = lda_inv,
				   .batch = batch, .a = (uintptr_t)A, .c = (uintptr_t)Ainv, .info = (uintptr_t)info };

	if (n < 0 || n > 32 || lda < max1(n) || lda_inv < max1(n) || batch < 0 ||
	    (batch && n && (!A || !Ainv || !info)))
		return CUBLAS_STATUS_INVALID_VALUE;
	return lu_post(h, &op);
}

/* Householder QR of each m x n Aarray[i] (any shape: tau gets min(m, n)
 * elements). info is the host's and says only whether the arguments are
 * good, so it is written here and the call stays asynchronous. */
static cublasStatus_t geqrf(cublasHandle_t h, int type, int m, int n, void *const A[], int lda, void *const Tau[],
			    int *info, int batch)
{
	struct phos_blas_lu op = { .fn = PHOS_BLAS_GEQRF, .type = type, .m = m, .n = n, .lda = lda, .batch = batch,
				   .a = (uintptr_t)A, .c = (uintptr_t)Tau };
	int bad = 0;

	if (!info)
		return CUBLAS_STATUS_INVALID_VALUE;
	/* m is 1, Aarray 3, lda 4, TauArray 5, batchSize 7 */
	if (m < 0)
		bad = 1;
	else if (n < 0)
		bad = 2;
	else if (lda < max1(m))
		bad = 4;
	else if (batch < 0)
		bad = 7;
	else if (batch && m && n && !A)
		bad = 3;
	else if (batch && m && n && !Tau)
		bad = 5;
	*info = -bad;
	if (bad)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (m == 0)
		return blas_get(h) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
	return lu_post(h, &op);
}

/* Least squares min ||C[i] - A[i] X|| of each overdetermined m x n A[i]
 * (m >= n, trans N: all cuBLAS solves). A[i] gets its QR factors, the first n
 * rows of C[i] the solution; devInfo (optional) gets 0 or the index of a zero
 * diagonal of R. The host info, as geqrf's, is written here. cuBLAS documents
 * NOT_SUPPORTED for trans other than N and for m < n, INVALID_VALUE for the
 * other bad sizes. */
static cublasStatus_t gels(cublasHandle_t h, int type, cublasOperation_t trans, int m, int n, int nrhs,
			   void *const A[], int lda, void *const C[], int ldc, int *info, int *dev_info, int batch)
{
	struct phos_blas_lu op = { .fn = PHOS_BLAS_GELS, .type = type, .trans = trans, .m = m, .n = n,
				   .nrhs = nrhs, .lda = lda, .ldc = ldc, .batch = batch, .a = (uintptr_t)A,
				   .c = (uintptr_t)C, .info = (uintptr_t)dev_info };
	int bad = 0;

	if (!info)
		return CUBLAS_STATUS_INVALID_VALUE;
	/* cuBLAS's gels counts from m, leaving trans out (an H100 gave -5 for
	 * lda and -7 for ldc, 2026-12-05): m is 1, n 2, nrhs 3, Aarray 4,
	 * lda 5, Carray 6, ldc 7, batchSize 10; a trans other than N is
	 * NOT_SUPPORTED, as m < n is */
	if (trans != CUBLAS_OP_N)
		bad = -1;
	else if (m < 0)
		bad = 1;
	else if (n < 0 || n > m)
		bad = 2;
	else if (nrhs < 0)
		bad = 3;
	else if (lda < max1(m))
		bad = 5;
	else if (ldc < max1(m))
		bad = 7;
	else if (batch < 0)
		bad = 10;
	else if (batch && n && !A)
		bad = 4;
	else if (batch && n && nrhs && !C)
		bad = 6;
	*info = bad < 0 ? 0 : -bad;
	if (bad < 0 || (bad == 2 && n > m))
		return CUBLAS_STATUS_NOT_SUPPORTED;
	if (bad)
		return CUBLAS_STATUS_INVALID_VALUE;
	return lu_post(h, &op);
}

#define LU(P, T, TYPE)                                                                                            \
	PHOS_EXPORT cublasStatus_t cublas##P##getrfBatched(cublasHandle_t h, int n, T *const A[], int lda, int *P_, \
							   int *info, int batch)                                    \
	{                                                                                                           \
		return getrf(h, TYPE, n, (void *const *)A, lda, P_, info, batch);                                   \
	}                                                                                                           \
	PHOS_EXPORT cublasStatus_t cublas##P##getriBatched(cublasHandle_t h, int n, const T *const A[], int lda,    \
							   const int *P_, T *const C[], int ldc, int *info,         \
							   int batch)                                               \
	{                                                                                                           \
		return getri(h, TYPE, n, (const void *const *)A, lda, P_, (void *const *)C, ldc, info, batch);       \
	}                                                                                                           \
	PHOS_EXPORT cublasStatus_t cublas##P##getrsBatched(cublasHandle_t h, cublasOperation_t trans, int n,        \
							   int nrhs, const T *const A[], int lda, const int *P_,    \
							   T *const B[], int ldb, int *info, int batch)             \
	{                                                                                                           \
		return getrs(h, TYPE, trans, n, nrhs, (const void *const *)A, lda, P_, (void *const *)B, ldb, info,  \
			     batch);                                                                                \
	}                                                                                                           \
	PHOS_EXPORT cublasStatus_t cublas##P##matinvBatched(cublasHandle_t h, int n, const T *const A[], int lda,   \
							    T *const Ainv[], int lda_inv, int *info, int batch)     \
	{                                                                                                           \
		return matinv(h, TYPE, n, (const void *const *)A, lda, (void *const *)Ainv, lda_inv, info, batch);   \
	}                                                                                                           \
	PHOS_EXPORT cublasStatus_t cublas##P##geqrfBatched(cublasHandle_t h, int m, int n, T *const A[], int lda,   \
							   T *const Tau[], int *info, int batch)                    \
	{                                                                                                           \
		return geqrf(h, TYPE, m, n, (void *const *)A, lda, (void *const *)Tau, info, batch);                \
	}                                                                                                           \
	PHOS_EXPORT cublasStatus_t cublas##P##gelsBatched(cublasHandle_t h, cublasOperation_t trans, int m, int n,  \
							  int nrhs, T *const A[], int lda, T *const C[], int ldc,   \
							  int *info, int *devInfo, int batch)                       \
	{                                                                                                           \
		return gels(h, TYPE, trans, m, n, nrhs, (void *const *)A, lda, (void *const *)C, ldc, info, devInfo, \
			    batch);                                                                                 \
	}
LU(S, float, CUDA_R_32F)
LU(D, double, CUDA_R_64F)
PHOS_EXPORT_NAMES(cublasSgetrfBatched cublasSgetriBatched cublasSgetrsBatched cublasSmatinvBatched
		  cublasDgetrfBatched cublasDgetriBatched cublasDgetrsBatched cublasDmatinvBatched
		  cublasSgeqrfBatched cublasDgeqrfBatched cublasSgelsBatched cublasDgelsBatched)
