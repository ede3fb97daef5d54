/* SPDX-License-Identifier: MIT */
/*
 * cublasSetVector/GetVector/SetMatrix/GetMatrix and their Async forms: copies
 * between host memory and (strided) device memory.
 *
 * A vector is a matrix of one row whose columns are inc elements apart, so
 * every form is one 2-D copy: rows x cols elements of elemSize bytes, columns
 * lda apart on the host and ldb apart on the device. The host side is packed
 * here (column after column) into PHOS_OP_BLAS_SET_MATRIX records, or
 * unpacked from PHOS_OP_BLAS_GET_MATRIX replies; the executor writes or reads
 * the device columns. A transfer bigger than one record goes as blocks of
 * whole columns (or, for a column bigger than a record, of rows). When both
 * sides are contiguous the copy is a plain cudaMemcpy, which takes the
 * shared-memory region path for pinned host memory.
 *
 * Errors as cuBLAS returns them (checked on an H100):
 * CUBLAS_STATUS_INVALID_VALUE for rows or cols < 0, elemSize <= 0, an
 * increment or leading dimension <= 0, or a NULL pointer; and
 * CUBLAS_STATUS_MAPPING_ERROR when the copy fails, which is also what cuBLAS
 * answers for a vector of n < 0 and for a leading dimension below rows: it
 * does not check those itself, the 2-D copy it makes refuses them. The synchronous forms return once the copy is complete (the legacy
 * default stream, as cudaMemcpy); the Async forms queue on their stream.
 */
#include <stdlib.h>
#include <string.h>

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "cublas_internal.h"
#include "internal.h"

/* cuBLAS returns MAPPING_ERROR for a failed copy, NOT_INITIALIZED before the
 * runtime connects. */
static cublasStatus_t copy_status(int cuda_err)
{
	if (cuda_err == cudaSuccess)
		return CUBLAS_STATUS_SUCCESS;
	if (cuda_err == cudaErrorInitializationError || cuda_err == PHOS_ERR_GONE)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	return CUBLAS_STATUS_MAPPING_ERROR;
}

/* The block of nr rows from row r0 and nc columns from column c0. */
struct block {
	int r0, nr, c0, nc;
};

/* Splits rows x cols into blocks that fit max bytes: whole columns when one
 * column fits, else parts of one column. Calls fn per block; stops at the first error. */
static int blocks_each(int rows, int cols, size_t elem, size_t max, int (*fn)(const struct block *, void *), void *ctx)
{
	size_t col = (size_t)rows * elem;
	struct block bl;
	int r;

	if (col <= max) {
		int per = (int)(max / col);

		for (bl.c0 = 0; bl.c0 < cols; bl.c0 += per) {
			bl.r0 = 0;
			bl.nr = rows;
			bl.nc = cols - bl.c0 < per ? cols - bl.c0 : per;
			if ((r = fn(&bl, ctx)))
				return r;
		}
		return 0;
	}
	for (bl.c0 = 0; bl.c0 < cols; bl.c0++) {
		int per = (int)(max / elem);

		for (bl.r0 = 0; bl.r0 < rows; bl.r0 += per) {
			bl.nc = 1;
			bl.nr = rows - bl.r0 < per ? rows - bl.r0 : per;
			if ((r = fn(&bl, ctx)))
				return r;
		}
	}
	return 0;
}

struct xfer {
	int rows, cols, elem, lda, ldb;
	const uint8_t *src;   /* host (set) */
	uint8_t *dst;         /* host (get) */
	uint64_t dev;
	uint32_t stream;
	bool sync;
	uint8_t *buf;         /* one block, packed */
};

static struct phos_blas_matrix block_body(const struct xfer *x, const struct block *bl)
{
	struct phos_blas_matrix m = { 0 };

	m.dev = x->dev + ((uint64_t)bl->r0 + (uint64_t)bl->c0 * (uint64_t)x->ldb) * (uint64_t)x->elem;
	m.rows = bl->nr;
	m.cols = bl->nc;
	m.elem = x->elem;
	m.ld = x->ldb;
	m.stream = x->stream;
	return m;
}

static int set_block(const struct block *bl, void *ctx)
{
	struct xfer *x = ctx;
	struct phos_blas_matrix m = block_body(x, bl);
	size_t col = (size_t)bl->nr * (size_t)x->elem;

	for (int j = 0; j < bl->nc; j++)
		memcpy(x->buf + (size_t)j * col,
		       x->src + ((size_t)bl->r0 + (size_t)(bl->c0 + j) * (size_t)x->lda) * (size_t)x->elem, col);
	return phos_preload_post(PHOS_OP_BLAS_SET_MATRIX, &m, sizeof(m), x->buf, col * (size_t)bl->nc);
}

static int get_block(const struct block *bl, void *ctx)
{
	struct xfer *x = ctx;
	struct phos_blas_matrix m = block_body(x, bl);
	size_t col = (size_t)bl->nr * (size_t)x->elem, got = 0;
	int r;

	r = phos_preload_call(PHOS_OP_BLAS_GET_MATRIX, &m, sizeof(m), NULL, 0, x->buf, col * (size_t)bl->nc, &got,
			      NULL);
	if (r)
		return r;
	if (got != col * (size_t)bl->nc)
		return cudaErrorUnknown;
	for (int j = 0; j < bl->nc; j++)
		memcpy(x->dst + ((size_t)bl->r0 + (size_t)(bl->c0 + j) * (size_t)x->lda) * (size_t)x->elem,
		       x->buf + (size_t)j * col, col);
	return 0;
}

/* rows x cols elements between host (columns lda apart) and device (ldb apart). */
static cublasStatus_t matrix_copy(bool set, int rows, int cols, int elem, const void *host_src, void *host_dst,
				  int lda, const void *dev, int ldb, cudaStream_t stream, bool sync)
{
	struct xfer x = { .rows = rows, .cols = cols, .elem = elem, .lda = lda, .ldb = ldb, .src = host_src,
			  .dst = host_dst, .dev = (uint64_t)(uintptr_t)dev, .sync = sync };
	size_t max = set ? PHOS_REC_MAX_PAYLOAD : PHOS_REPLY_MAX;
	int r;

	if (rows < 0 || cols < 0 || elem <= 0 || lda <= 0 || ldb <= 0 || !dev || !(set ? host_src : host_dst))
		return CUBLAS_STATUS_INVALID_VALUE;
	if (lda < rows || ldb < rows)
		return CUBLAS_STATUS_MAPPING_ERROR; /* the copy's pitch below its width */
	if ((r = phos_preload_connect()))
		return copy_status(r);
	if (rows == 0 || cols == 0)
		return CUBLAS_STATUS_SUCCESS;
	/* both sides contiguous: a plain copy (zero-copy from a pinned region) */
	if ((lda == rows && ldb == rows) || cols == 1) {
		size_t bytes = (size_t)rows * (size_t)cols * (size_t)elem;

		if (sync)
			r = set ? cudaMemcpy((void *)dev, host_src, bytes, cudaMemcpyHostToDevice)
				: cudaMemcpy(host_dst, dev, bytes, cudaMemcpyDeviceToHost);
		else
			r = set ? cudaMemcpyAsync((void *)dev, host_src, bytes, cudaMemcpyHostToDevice, stream)
				: cudaMemcpyAsync(host_dst, dev, bytes, cudaMemcpyDeviceToHost, stream);
		return copy_status(r);
	}
	if ((r = phos_preload_stream_id(stream, &x.stream)))
		return CUBLAS_STATUS_INVALID_VALUE;
	x.buf = malloc(max < (size_t)rows * (size_t)cols * (size_t)elem ? max
								    : (size_t)rows * (size_t)cols * (size_t)elem);
	if (!x.buf)
		return CUBLAS_STATUS_ALLOC_FAILED;
	r = blocks_each(rows, cols, (size_t)elem, max, set ? set_block : get_block, &x);
	free(x.buf);
	/* The synchronous set returns once the data is on the device (a
	 * cudaMemcpy from pageable memory does the same). */
	if (r == 0 && set && sync)
		r = cudaStreamSynchronize(NULL);
	return copy_status(r);
}

PHOS_EXPORT cublasStatus_t cublasSetMatrix(int rows, int cols, int elemSize, const void *A, int lda, void *B, int ldb)
{
	return matrix_copy(true, rows, cols, elemSize, A, NULL, lda, B, ldb, NULL, true);
}

PHOS_EXPORT cublasStatus_t cublasGetMatrix(int rows, int cols, int elemSize, const void *A, int lda, void *B, int ldb)
{
	return matrix_copy(false, rows, cols, elemSize, NULL, B, ldb, A, lda, NULL, true);
}

PHOS_EXPORT cublasStatus_t cublasSetMatrixAsync(int rows, int cols, int elemSize, const void *A, int lda, void *B,
						int ldb, cudaStream_t stream)
{
	return matrix_copy(true, rows, cols, elemSize, A, NULL, lda, B, ldb, stream, false);
}

PHOS_EXPORT cublasStatus_t cublasGetMatrixAsync(int rows, int cols, int elemSize, const void *A, int lda, void *B,
						int ldb, cudaStream_t stream)
{
	return matrix_copy(false, rows, cols, elemSize, NULL, B, ldb, A, lda, stream, false);
}

/* A vector of n elements, inc apart, is one row of n columns with ld = inc. */
static cublasStatus_t vector_copy(bool set, int n, int elem, const void *x, int incx, void *y, int incy,
				  cudaStream_t stream, bool sync)
{
	if (elem <= 0 || incx <= 0 || incy <= 0 || !x || !y)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (n < 0)
		return CUBLAS_STATUS_MAPPING_ERROR; /* as cuBLAS: the copy of a negative size fails */
	if (set)
		return matrix_copy(true, 1, n, elem, x, NULL, incx, y, incy, stream, sync);
	return matrix_copy(false, 1, n, elem, NULL, y, incy, x, incx, stream, sync);
}

PHOS_EXPORT cublasStatus_t cublasSetVector(int n, int elemSize, const void *x, int incx, void *devicePtr, int incy)
{
	return vector_copy(true, n, elemSize, x, incx, devicePtr, incy, NULL, true);
}

PHOS_EXPORT cublasStatus_t cublasGetVector(int n, int elemSize, const void *x, int incx, void *y, int incy)
{
	return vector_copy(false, n, elemSize, x, incx, y, incy, NULL, true);
}

PHOS_EXPORT cublasStatus_t cublasSetVectorAsync(int n, int elemSize, const void *hostPtr, int incx, void *devicePtr,
						int incy, cudaStream_t stream)
{
	return vector_copy(true, n, elemSize, hostPtr, incx, devicePtr, incy, stream, false);
}

PHOS_EXPORT cublasStatus_t cublasGetVectorAsync(int n, int elemSize, const void *devicePtr, int incx, void *hostPtr,
						int incy, cudaStream_t stream)
{
	return vector_copy(false, n, elemSize, devicePtr, incx, hostPtr, incy, stream, false);
}
