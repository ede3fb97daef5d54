/* SPDX-License-Identifier: MIT */
/* cuBLAS: handles and the calls we forward, with their exact read/write ranges. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "executor.h"
#include "engine.h"
#include "log.h"

#define BLAS_INVALID_VALUE 7
#define BLAS_NOT_INITIALIZED 1
#define BLAS_NOT_SUPPORTED 15

uint64_t exec_blas_elem_size(int type)
{
	switch (type) {
	case 0: return 4;   /* CUDA_R_32F */
	case 1: return 8;   /* CUDA_R_64F */
	case 2: return 2;   /* CUDA_R_16F */
	case 3: return 1;   /* CUDA_R_8I */
	case 4: return 8;   /* CUDA_C_32F */
	case 5: return 16;  /* CUDA_C_64F */
	case 6: return 4;   /* CUDA_C_16F */
	case 8: return 1;   /* CUDA_R_8U */
	case 10: return 4;  /* CUDA_R_32I */
	case 14: return 2;  /* CUDA_R_16BF */
	default: return 0;
	}
}

/* Bytes spanned by a column-major rows x cols matrix with leading dimension ld,
 * repeated batch times stride elements apart. */
static int matrix_span(int rows, int cols, int ld, int batch, int64_t stride, uint64_t esize,
		       uint64_t *ret_bytes)
{
	if (rows < 0 || cols < 0 || ld < (rows > 1 ? rows : 1) || batch < 1 || stride < 0 || !esize)
		return -1;
	if (rows == 0 || cols == 0) {
		*ret_bytes = 0;
		return 0;
	}
	*ret_bytes = ((uint64_t)(batch - 1) * (uint64_t)stride + (uint64_t)ld * (uint64_t)(cols - 1) +
		      (uint64_t)rows) * esize;
	return 0;
}

static int vector_span(int n, int inc, uint64_t *ret_bytes)
{
	if (n <= 0) {
		*ret_bytes = 0;
		return 0;
	}
	if (inc == 0)
		return -1;
	*ret_bytes = (1 + (uint64_t)(n - 1) * (uint64_t)(inc < 0 ? -(int64_t)inc : inc)) * 4;
	return 0;
}

/* Bytes of one scalar of a cudaDataType used for alpha/beta/results. */
static uint64_t scalar_size(int type)
{
	return exec_blas_elem_size(type);
}

/* The scalar type of a GEMM compute type (cublasComputeType_t or a legacy
 * cudaDataType); complex GEMMs pass their cudaDataType. */
static int scal_type_of_compute(int compute)
{
	switch (compute) {
	case 64: case 65: case 2: return 2;             /* 16F */
	case 70: case 71: case 1: return 1;             /* 64F */
	case 72: case 73: case 10: return 10;           /* 32I */
	case 4: case 5: return compute;                 /* complex */
	default: return 0;                              /* 32F and its fast forms */
	}
}

static double half_value(uint16_t h)
{
	int e = (h >> 10) & 0x1f, m = h & 0x3ff;
	double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m | 0x400, e - 25);

	return (h & 0x8000) ? -v : v;
}

/* One scalar of type at host memory p, widened to re, im. */
static void scalar_widen(const void *p, int type, double ret[2])
{
	float f[2];
	double d[2];
	int32_t i;
	uint16_t h;

	ret[1] = 0;
	switch (type) {
	case 0: case 4:
		memcpy(f, p, type == 4 ? 8 : 4);
		ret[0] = f[0];
		ret[1] = type == 4 ? f[1] : 0;
		break;
	case 1: case 5:
		memcpy(d, p, type == 5 ? 16 : 8);
		ret[0] = d[0];
		ret[1] = type == 5 ? d[1] : 0;
		break;
	case 2:
		memcpy(&h, p, 2);
		ret[0] = half_value(h);
		break;
	case 10:
		memcpy(&i, p, 4);
		ret[0] = i;
		break;
	default:
		ret[0] = 0;
	}
}

/* Device pointer mode: alpha and beta (beta_addr 0: none) are read from
 * device memory after the work queued before them, and join the set. */
static int scalars_read(struct executor *ex, struct spec_set *set, int type, uint64_t alpha_addr,
			uint64_t beta_addr, double alpha[2], double beta[2])
{
	const uint64_t addr[2] = { alpha_addr, beta_addr };
	double *dst[2] = { alpha, beta };
	uint64_t size = scalar_size(type);
	uint8_t buf[16];

	if (!size)
		return -PHOS_CUDA_NOT_SUPPORTED;
	for (int i = 0; i < 2; i++) {
		if (!addr[i])
			continue;
		if (spec_range(ex, set, addr[i], size, SPEC_READ) < 0)
			return -PHOS_CUDA_INVALID_VALUE;
		if (ex->loader)
			TRY(loader_settle(ex->loader, addr[i], size));
		TRY(ex->dev_ops->synchronize(ex->dev));
		TRY(ex->dev_ops->memcpy_d2h(ex->dev, buf, addr[i], size, NULL));
		scalar_widen(buf, type, dst[i]);
	}
	return 0;
}

#define MAX_BATCH_ARRAY EXEC_MAX_BATCH_ARRAY

int exec_arrays_set(struct executor *ex, int n, const uint64_t *arr, const uint64_t *span, const uint8_t *access,
		    int32_t batch, struct spec_set *set)
{
	uint64_t bytes = (uint64_t)batch * 8;
	uint64_t *ptrs;
	int r = 0;

	if (batch > MAX_BATCH_ARRAY)
		return -PHOS_CUDA_INVALID_VALUE;
	for (int i = 0; i < n; i++)
		TRY(spec_range(ex, set, arr[i], bytes, SPEC_READ));
	ptrs = malloc(bytes);
	if (!ptrs)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	if (ex->loader)
		for (int i = 0; i < n && r == 0; i++)
			r = loader_settle(ex->loader, arr[i], bytes);
	if (r == 0)
		r = ex->dev_ops->synchronize(ex->dev);
	for (int i = 0; i < n && r == 0; i++) {
		r = ex->dev_ops->memcpy_d2h(ex->dev, ptrs, arr[i], bytes, NULL);
		for (int32_t j = 0; j < batch && r == 0 && span[i]; j++)
			if (spec_range(ex, set, ptrs[j], span[i], access[i]) < 0)
				r = -PHOS_CUDA_ILLEGAL_ADDRESS;
	}
	free(ptrs);
	return r;
}

/* A pointer-array batched GEMM: A and B read, C written (and read unless beta is 0). */
static int gemm_arrays_set(struct executor *ex, const struct phos_blas_gemm *g, uint64_t sa, uint64_t sb,
			   uint64_t sc, struct spec_set *set)
{
	const uint64_t arr[3] = { g->a, g->b, g->c }, span[3] = { sa, sb, sc };
	const uint8_t access[3] = { SPEC_READ, SPEC_READ,
				    g->beta != 0 || g->beta_im != 0 ? SPEC_READ | SPEC_WRITE : SPEC_WRITE };

	return exec_arrays_set(ex, 3, arr, span, access, g->batch, set);
}

static int gemm(struct executor *ex, struct exec_blas *b, const struct phos_blas_gemm *gin, int *blas_status)
{
	struct spec_set set = { 0 };
	struct phos_blas_gemm local = *gin, *g = &local;
	bool complex_type = g->ctype == 4 || g->ctype == 5;
	int scal_type = g->compute == 4 || g->compute == 5 ? g->compute : complex_type ? g->ctype : g->compute;
	uint64_t sa, sb, sc;
	int arows = g->transa ? g->k : g->m, acols = g->transa ? g->m : g->k;
	int brows = g->transb ? g->n : g->k, bcols = g->transb ? g->k : g->n;

	if (!exec_blas_elem_size(g->atype) || !exec_blas_elem_size(g->btype) || !exec_blas_elem_size(g->ctype)) {
		*blas_status = BLAS_NOT_SUPPORTED;
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
	/* one matrix of each when a, b, c are pointer arrays */
	int spans = g->arrays ? 1 : g->batch;

	if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 1 ||
	    matrix_span(arows, acols, g->lda, spans, g->stride_a, exec_blas_elem_size(g->atype), &sa) < 0 ||
	    matrix_span(brows, bcols, g->ldb, spans, g->stride_b, exec_blas_elem_size(g->btype), &sb) < 0 ||
	    matrix_span(g->m, g->n, g->ldc, spans, g->stride_c, exec_blas_elem_size(g->ctype), &sc) < 0) {
		*blas_status = BLAS_INVALID_VALUE;
		return -PHOS_CUDA_INVALID_VALUE;
	}
	if (g->dev_scalars) {
		double al[2] = { 0 }, be[2] = { 0 };
		int r = scalars_read(ex, &set, scal_type_of_compute(scal_type), g->alpha_addr, g->beta_addr, al, be);

		if (r < 0) {
			*blas_status = BLAS_INVALID_VALUE;
			return r;
		}
		g->alpha = al[0];
		g->alpha_im = al[1];
		g->beta = be[0];
		g->beta_im = be[1];
		g->dev_scalars = 0;
	}
	if (g->arrays) {
		int r = gemm_arrays_set(ex, g, sa, sb, sc, &set);

		if (r < 0) {
			*blas_status = BLAS_INVALID_VALUE;
			return r;
		}
	} else if (spec_range(ex, &set, g->a, sa, SPEC_READ) < 0 || spec_range(ex, &set, g->b, sb, SPEC_READ) < 0 ||
		   spec_range(ex, &set, g->c, sc, g->beta != 0 || g->beta_im != 0 ? SPEC_READ | SPEC_WRITE : SPEC_WRITE) < 0) {
		*blas_status = BLAS_INVALID_VALUE;
		return -PHOS_CUDA_ILLEGAL_ADDRESS;
	}
	TRY(spec_commit(ex, "blas_gemm", NULL, b->stream, &set));
	return ex->dev_ops->blas_gemm(ex->dev, b->dev_handle, g, blas_status);
}

static int l1(struct executor *ex, struct exec_blas *b, const struct phos_blas_l1 *op, void *out,
	      uint32_t *out_len, int *blas_status)
{
	struct spec_set set = { 0 };
	uint64_t sx, sy = 0;
	bool has_y = op->kind == PHOS_BLAS_SAXPY || op->kind == PHOS_BLAS_SDOT;
	bool writes_x = op->kind == PHOS_BLAS_SSCAL;
	float result = 0;
	int r;

	if (vector_span(op->n, op->incx, &sx) < 0 || (has_y && vector_span(op->n, op->incy, &sy) < 0) ||
	    op->kind < PHOS_BLAS_SAXPY || op->kind > PHOS_BLAS_SNRM2) {
		*blas_status = BLAS_INVALID_VALUE;
		return -PHOS_CUDA_INVALID_VALUE;
	}
	if (spec_range(ex, &set, op->x, sx, writes_x ? SPEC_READ | SPEC_WRITE : SPEC_READ) < 0 ||
	    (has_y && spec_range(ex, &set, op->y, sy,
				 op->kind == PHOS_BLAS_SAXPY ? SPEC_READ | SPEC_WRITE : SPEC_READ) < 0)) {
		*blas_status = BLAS_INVALID_VALUE;
		return -PHOS_CUDA_ILLEGAL_ADDRESS;
	}
	TRY(spec_commit(ex, "blas_l1", NULL, b->stream, &set));
	r = ex->dev_ops->blas_l1(ex->dev, b->dev_handle, op, &result, blas_status);
	if (r == 0 && (op->kind == PHOS_BLAS_SDOT || op->kind == PHOS_BLAS_SNRM2)) {
		memcpy(out, &result, sizeof(result));
		*out_len = sizeof(result);
	}
	return r;
}

static int gemv(struct executor *ex, struct exec_blas *b, const struct phos_blas_gemv *op, int *blas_status)
{
	struct spec_set set = { 0 };
	uint64_t sa, sx, sy;
	int xn = op->trans ? op->m : op->n, yn = op->trans ? op->n : op->m;

	if (matrix_span(op->m, op->n, op->lda, 1, 0, 4, &sa) < 0 || vector_span(xn, op->incx, &sx) < 0 ||
	    vector_span(yn, op->incy, &sy) < 0) {
		*blas_status = BLAS_INVALID_VALUE;
		return -PHOS_CUDA_INVALID_VALUE;
	}
	if (spec_range(ex, &set, op->a, sa, SPEC_READ) < 0 || spec_range(ex, &set, op->x, sx, SPEC_READ) < 0 ||
	    spec_range(ex, &set, op->y, sy, op->beta != 0 ? SPEC_READ | SPEC_WRITE : SPEC_WRITE) < 0) {
		*blas_status = BLAS_INVALID_VALUE;
		return -PHOS_CUDA_ILLEGAL_ADDRESS;
	}
	TRY(spec_commit(ex, "blas_gemv", NULL, b->stream, &set));
	return ex->dev_ops->blas_gemv(ex->dev, b->dev_handle, op, blas_status);
}

/* cublasSetMatrix/GetMatrix (and the vector forms, rows = 1): a block of
 * rows x cols elements, columns ld apart; the set is its span. Contiguous
 * columns go as one copy, others column by column. */
static int matrix_copy(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		       uint32_t *out_len)
{
	BODY(struct phos_blas_matrix, mx);
	bool set_op = op == PHOS_OP_BLAS_SET_MATRIX;
	struct spec_set set = { 0 };
	uint64_t span, col_bytes, packed;
	void *stream;
	int r = 0;

	if (mx->elem <= 0 || mx->rows < 0 || mx->cols < 0 ||
	    matrix_span(mx->rows, mx->cols, mx->ld, 1, 0, (uint64_t)mx->elem, &span) < 0)
		return -PHOS_CUDA_INVALID_VALUE;
	col_bytes = (uint64_t)mx->rows * (uint64_t)mx->elem;
	packed = col_bytes * (uint64_t)mx->cols;
	if (set_op ? packed != len - sizeof(*mx) : packed > PHOS_REPLY_MAX)
		return -PHOS_CUDA_INVALID_VALUE;
	TRY(exec_stream(ex, mx->stream, &stream));
	TRY(spec_range(ex, &set, mx->dev, span, set_op ? SPEC_WRITE : SPEC_READ));
	TRY(spec_commit(ex, set_op ? "blas_set_matrix" : "blas_get_matrix", NULL, mx->stream, &set));
	if (!packed)
		return 0;
	if (mx->ld == mx->rows || mx->cols == 1) {
		r = set_op ? ex->dev_ops->memcpy_h2d(ex->dev, mx->dev, mx + 1, packed, stream)
			   : ex->dev_ops->memcpy_d2h(ex->dev, out, mx->dev, packed, stream);
	} else {
		uint64_t pitch = (uint64_t)mx->ld * (uint64_t)mx->elem;

		for (int32_t j = 0; j < mx->cols && r == 0; j++)
			r = set_op ? ex->dev_ops->memcpy_h2d(ex->dev, mx->dev + j * pitch,
							     (const uint8_t *)(mx + 1) + j * col_bytes, col_bytes, stream)
				   : ex->dev_ops->memcpy_d2h(ex->dev, (uint8_t *)out + j * col_bytes,
							     mx->dev + j * pitch, col_bytes, stream);
	}
	if (r == 0 && !set_op)
		*out_len = (uint32_t)packed;
	return r;
}

/* Bytes of a strided vector of n elements (n <= 0: none). */
static int vec_bytes(int n, int inc, uint64_t esize, uint64_t *ret_bytes)
{
	if (n <= 0) {
		*ret_bytes = 0;
		return 0;
	}
	if (inc == 0)
		return -1;
	*ret_bytes = (1 + (uint64_t)(n - 1) * (uint64_t)(inc < 0 ? -(int64_t)inc : inc)) * esize;
	return 0;
}

/* Size of the result a routine returns (0: none). */
static uint64_t call_result_size(const struct phos_blas_op *op)
{
	uint64_t e = exec_blas_elem_size(op->type);

	switch (op->fn) {
	case PHOS_BLAS_DOT:
	case PHOS_BLAS_DOTC:
		return e;
	case PHOS_BLAS_NRM2:
	case PHOS_BLAS_ASUM:
		return op->type == 4 || op->type == 5 ? e / 2 : e;
	case PHOS_BLAS_AMAX:
	case PHOS_BLAS_AMIN:
		return 4;
	default:
		return 0;
	}
}

/* The read/write set of a routine on matrices only (and trmv, trsv,
 * syr/her: a matrix and a vector), from its API semantics: 0, -1 (a bad
 * shape, or no room in set), or 1 when op is not one of them. */
static int matrix_routine_set(struct executor *ex, const struct phos_blas_op *op, struct spec_set *set)
{
	uint64_t e = exec_blas_elem_size(op->type), sx = 0, sy = 0, sa = 0, sb = 0;
	const uint8_t R = SPEC_READ, RW = SPEC_READ | SPEC_WRITE;

	switch (op->fn) {
	case PHOS_BLAS_SYRK:
	case PHOS_BLAS_HERK: {
		bool n_form = op->trans == 0;   /* op(A) n x k: A is n x k, else k x n */

		/* C whole (a triangle is written, the other kept: read and written) */
		if (matrix_span(n_form ? op->n : op->m, n_form ? op->m : op->n, op->lda, 1, 0, e, &sa) < 0 ||
		    matrix_span(op->n, op->n, op->ldb, 1, 0, e, &sb) < 0)
			return -1;
		if (spec_range(ex, set, op->a, sa, R) < 0 || spec_range(ex, set, op->b, sb, RW) < 0)
			return -1;
		return 0;
	}
	case PHOS_BLAS_SYR:
	case PHOS_BLAS_HER:
	case PHOS_BLAS_SYR2:
	case PHOS_BLAS_HER2: {
		bool two = op->fn == PHOS_BLAS_SYR2 || op->fn == PHOS_BLAS_HER2;

		if (matrix_span(op->n, op->n, op->lda, 1, 0, e, &sa) < 0 || vec_bytes(op->n, op->incx, e, &sx) < 0 ||
		    (two && vec_bytes(op->n, op->incy, e, &sy) < 0))
			return -1;
		if (spec_range(ex, set, op->x, sx, R) < 0 || (two && spec_range(ex, set, op->y, sy, R) < 0) ||
		    spec_range(ex, set, op->a, sa, RW) < 0)
			return -1;
		return 0;
	}
	case PHOS_BLAS_TRMV:
	case PHOS_BLAS_TRSV:
		if (matrix_span(op->n, op->n, op->lda, 1, 0, e, &sa) < 0 || vec_bytes(op->n, op->incx, e, &sx) < 0)
			return -1;
		return spec_range(ex, set, op->a, sa, R) < 0 || spec_range(ex, set, op->x, sx, RW) < 0 ? -1 : 0;
	case PHOS_BLAS_SYMM:
	case PHOS_BLAS_HEMM:
	case PHOS_BLAS_TRMM: {
		int ka = op->side == 0 ? op->m : op->n;
		uint64_t sc;

		/* C read and written whole (beta, or C being B for trmm) */
		if (matrix_span(ka, ka, op->lda, 1, 0, e, &sa) < 0 || matrix_span(op->m, op->n, op->ldb, 1, 0, e, &sb) < 0 ||
		    matrix_span(op->m, op->n, op->ldc, 1, 0, e, &sc) < 0)
			return -1;
		if (spec_range(ex, set, op->a, sa, R) < 0 || spec_range(ex, set, op->b, sb, R) < 0 ||
		    spec_range(ex, set, op->c, sc, RW) < 0)
			return -1;
		return 0;
	}
	case PHOS_BLAS_SYR2K:
	case PHOS_BLAS_HER2K: {
		bool n_form = op->trans == 0;   /* op(A), op(B) n x k */
		uint64_t sc;

		if (matrix_span(n_form ? op->n : op->k, n_form ? op->k : op->n, op->lda, 1, 0, e, &sa) < 0 ||
		    matrix_span(n_form ? op->n : op->k, n_form ? op->k : op->n, op->ldb, 1, 0, e, &sb) < 0 ||
		    matrix_span(op->n, op->n, op->ldc, 1, 0, e, &sc) < 0)
			return -1;
		if (spec_range(ex, set, op->a, sa, R) < 0 || spec_range(ex, set, op->b, sb, R) < 0 ||
		    spec_range(ex, set, op->c, sc, RW) < 0)
			return -1;
		return 0;
	}
	case PHOS_BLAS_TRSM: {
		int ka = op->side == 0 ? op->m : op->n;

		if (matrix_span(ka, ka, op->lda, 1, 0, e, &sa) < 0 ||
		    matrix_span(op->m, op->n, op->ldb, 1, 0, e, &sb) < 0)
			return -1;
		if (spec_range(ex, set, op->a, sa, R) < 0 || spec_range(ex, set, op->b, sb, RW) < 0)
			return -1;
		return 0;
	}
	case PHOS_BLAS_TRSM_BATCHED: {   /* each A[i] as trsm's A, each B[i] as its B */
		int ka = op->side == 0 ? op->m : op->n;
		const uint64_t arr[2] = { op->a, op->b };
		const uint8_t access[2] = { R, RW };
		uint64_t span[2];

		if (op->batch < 0 || matrix_span(ka, ka, op->lda, 1, 0, e, &span[0]) < 0 ||
		    matrix_span(op->m, op->n, op->ldb, 1, 0, e, &span[1]) < 0)
			return -1;
		if (op->batch == 0 || !span[1])
			return 0;
		return exec_arrays_set(ex, 2, arr, span, access, op->batch, set) < 0 ? -1 : 0;
	}
	default:
		return 1;
	}
}

/* The read/write set of a level 1-3 routine, from its API semantics. */
static int call_set(struct executor *ex, const struct phos_blas_op *op, struct spec_set *set)
{
	uint64_t e = exec_blas_elem_size(op->type), sx = 0, sy = 0, sa = 0;
	const uint8_t R = SPEC_READ, RW = SPEC_READ | SPEC_WRITE;
	int lenx = op->n, leny = op->n, r = matrix_routine_set(ex, op, set);
	bool beta_zero = op->beta[0] == 0 && op->beta[1] == 0 && !op->dev_scalars;

	if (r <= 0)
		return r;
	/* the vector routines, and gemv, ger, symv with their matrix */
	switch (op->fn) {
	case PHOS_BLAS_GEMV:
		lenx = op->trans ? op->m : op->n;
		leny = op->trans ? op->n : op->m;
		if (matrix_span(op->m, op->n, op->lda, 1, 0, e, &sa) < 0)
			return -1;
		break;
	case PHOS_BLAS_GER:
	case PHOS_BLAS_GERC:
		lenx = op->m;
		if (matrix_span(op->m, op->n, op->lda, 1, 0, e, &sa) < 0)
			return -1;
		break;
	case PHOS_BLAS_SYMV:
	case PHOS_BLAS_HEMV:
		if (matrix_span(op->n, op->n, op->lda, 1, 0, e, &sa) < 0)
			return -1;
		break;
	default:
		break;
	}
	if (vec_bytes(lenx, op->incx, e, &sx) < 0)
		return -1;
	switch (op->fn) {
	case PHOS_BLAS_SCAL:
		return spec_range(ex, set, op->x, sx, RW) < 0 ? -1 : 0;
	case PHOS_BLAS_NRM2:
	case PHOS_BLAS_ASUM:
	case PHOS_BLAS_AMAX:
	case PHOS_BLAS_AMIN:
		return spec_range(ex, set, op->x, sx, R) < 0 ? -1 : 0;
	default:
		break;
	}
	if (vec_bytes(leny, op->incy, e, &sy) < 0)
		return -1;
	switch (op->fn) {
	case PHOS_BLAS_AXPY:
		return spec_range(ex, set, op->x, sx, R) < 0 || spec_range(ex, set, op->y, sy, RW) < 0 ? -1 : 0;
	case PHOS_BLAS_DOT:
	case PHOS_BLAS_DOTC:
		return spec_range(ex, set, op->x, sx, R) < 0 || spec_range(ex, set, op->y, sy, R) < 0 ? -1 : 0;
	case PHOS_BLAS_COPY:
		return spec_range(ex, set, op->x, sx, R) < 0 || spec_range(ex, set, op->y, sy, SPEC_WRITE) < 0 ? -1 : 0;
	case PHOS_BLAS_SWAP:
	case PHOS_BLAS_ROT:
		return spec_range(ex, set, op->x, sx, RW) < 0 || spec_range(ex, set, op->y, sy, RW) < 0 ? -1 : 0;
	case PHOS_BLAS_GEMV:
	case PHOS_BLAS_SYMV:
	case PHOS_BLAS_HEMV:
		return spec_range(ex, set, op->a, sa, R) < 0 || spec_range(ex, set, op->x, sx, R) < 0 ||
		       spec_range(ex, set, op->y, sy, beta_zero ? SPEC_WRITE : RW) < 0 ? -1 : 0;
	case PHOS_BLAS_GER:
	case PHOS_BLAS_GERC:
		return spec_range(ex, set, op->x, sx, R) < 0 || spec_range(ex, set, op->y, sy, R) < 0 ||
		       spec_range(ex, set, op->a, sa, RW) < 0 ? -1 : 0;
	default:
		return -1;
	}
}

/* The routine's cuBLAS name without its prefix ("Daxpy", "Zdotc"), for the trace. */
static const char *call_name(const struct phos_blas_op *op, char name[16])
{
	static const char *const fn[PHOS_BLAS_FN__COUNT] = {
		"axpy", "scal", "dot", "dotc", "nrm2", "asum", "amax", "amin", "copy", "swap", "gemv", "ger", "gerc", "trsm",
		"symv", "hemv", "syrk", "herk", "rot", "symm", "hemm", "syr2k", "her2k", "trmm",
		"syr", "her", "syr2", "her2", "trmv", "trsv", "trsmBatched",
	};
	char p = op->type == 0 ? 'S' : op->type == 1 ? 'D' : op->type == 4 ? 'C' : 'Z';

	snprintf(name, 16, "%c%s", p, fn[op->fn]);
	return name;
}

static int call(struct executor *ex, struct exec_blas *b, const struct phos_blas_op *in, void *out,
		uint32_t *out_len, int *blas_status)
{
	struct phos_blas_op op = *in;
	struct spec_set set = { 0 };
	uint64_t rsize = call_result_size(&op);
	uint8_t result[16] = { 0 };
	char name[16];
	void *stream;
	int r;

	if (op.fn < 0 || op.fn >= PHOS_BLAS_FN__COUNT || !exec_blas_elem_size(op.type) || !exec_blas_elem_size(op.scal_type)) {
		*blas_status = BLAS_INVALID_VALUE;
		return -PHOS_CUDA_INVALID_VALUE;
	}
	/* scalars first: gemv's set depends on beta */
	if (op.dev_scalars) {
		bool has_alpha = op.fn == PHOS_BLAS_AXPY || op.fn == PHOS_BLAS_SCAL || op.fn >= PHOS_BLAS_GEMV;
		/* rot's s travels as beta */
		bool has_beta = op.fn == PHOS_BLAS_GEMV || (op.fn >= PHOS_BLAS_SYMV && op.fn <= PHOS_BLAS_HER2K);

		r = scalars_read(ex, &set, op.scal_type, has_alpha ? op.alpha_addr : 0, has_beta ? op.beta_addr : 0,
				 op.alpha, op.beta);
		if (r < 0) {
			*blas_status = BLAS_INVALID_VALUE;
			return r;
		}
		op.dev_scalars = 0;
	}
	if (call_set(ex, &op, &set) < 0 ||
	    (op.dev_result && rsize && spec_range(ex, &set, op.result, rsize, SPEC_WRITE) < 0)) {
		*blas_status = BLAS_INVALID_VALUE;
		return -PHOS_CUDA_ILLEGAL_ADDRESS;
	}
	TRY(spec_commit(ex, "blas_call", call_name(&op, name), b->stream, &set));
	r = ex->dev_ops->blas_call(ex->dev, b->dev_handle, &op, result, blas_status);
	if (r < 0 || !rsize)
		return r;
	if (op.dev_result) {   /* device pointer mode: the result lands on the handle's stream */
		TRY(exec_stream(ex, b->stream, &stream));
		return ex->dev_ops->memcpy_h2d(ex->dev, op.result, result, rsize, stream);
	}
	memcpy(out, result, rsize);
	*out_len = (uint32_t)rsize;
	return 0;
}

/* The bytes of each tau vector of a batched geqrf: min(m, n) elements. */
static int tau_span(int m, int n, uint64_t esize, uint64_t *ret_bytes)
{
	if (m < 0 || n < 0)
		return -1;
	*ret_bytes = (uint64_t)(m < n ? m : n) * esize;
	return 0;
}

/* The routine's cuBLAS name without its prefix and suffix ("Sgetrf"), for
 * the trace; fn is known to be in range. */
static const char *lu_name(const struct phos_blas_lu *op, char name[16])
{
	static const char *const fn[] = { "getrf", "getri", "getrs", "matinv", "geqrf", "gels" };

	snprintf(name, 16, "%c%s", op->type == 0 ? 'S' : 'D', fn[op->fn]);
	return name;
}

/* Batched LU and QR routines: the matrices the arrays name, the pivots and
 * infos; geqrf's a[i] (m x n) read and written and its tau vectors written;
 * gels's a[i] (m x n) and c[i] (m x nrhs) read and written, its c array not
 * read when nrhs is 0, its device infos written when the caller gave them. */
static int lu(struct executor *ex, struct exec_blas *b, const struct phos_blas_lu *op, int *blas_status)
{
	struct spec_set set = { 0 };
	uint64_t e = op->type == 0 ? 4 : op->type == 1 ? 8 : 0, sa, sc = 0;
	bool qr = op->fn == PHOS_BLAS_GEQRF, gels = op->fn == PHOS_BLAS_GELS;
	int a_rows = qr || gels ? op->m : op->n, c_rows = gels ? op->m : op->n;
	int c_cols = op->fn == PHOS_BLAS_GETRS || gels ? op->nrhs : op->n;
	bool dev_info = gels ? op->info != 0 : op->fn != PHOS_BLAS_GETRS && !qr;
	int arrays = op->fn == PHOS_BLAS_GETRF || (gels && op->nrhs == 0) ? 1 : 2;
	uint64_t arr[2] = { op->a, op->c }, span[2];
	uint8_t access[2];
	char name[16];
	int r;

	if (!e) {
		*blas_status = BLAS_NOT_SUPPORTED;
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
	if (op->fn < PHOS_BLAS_GETRF || op->fn > PHOS_BLAS_GELS || op->batch < 0 ||
	    (gels && (op->trans != 0 || op->n > op->m)) ||
	    matrix_span(a_rows, op->n, op->lda, 1, 0, e, &sa) < 0 ||
	    (qr && tau_span(op->m, op->n, e, &sc) < 0) ||
	    (!qr && op->fn != PHOS_BLAS_GETRF && matrix_span(c_rows, c_cols, op->ldc, 1, 0, e, &sc) < 0)) {
		*blas_status = BLAS_INVALID_VALUE;
		return -PHOS_CUDA_INVALID_VALUE;
	}
	span[0] = sa;
	span[1] = sc;
	access[0] = op->fn == PHOS_BLAS_GETRF || qr || gels ? SPEC_READ | SPEC_WRITE : SPEC_READ;
	access[1] = op->fn == PHOS_BLAS_GETRS || gels ? SPEC_READ | SPEC_WRITE : SPEC_WRITE;
	if (op->batch == 0)
		return 0;
	r = exec_arrays_set(ex, arrays, arr, span, access, op->batch, &set);
	if (r == 0 && op->pivots && !qr && !gels)
		r = spec_range(ex, &set, op->pivots, (uint64_t)op->n * (uint64_t)op->batch * 4,
			       op->fn == PHOS_BLAS_GETRF ? SPEC_WRITE : SPEC_READ);
	if (r == 0 && dev_info)
		r = spec_range(ex, &set, op->info, (uint64_t)op->batch * 4, SPEC_WRITE);
	if (r < 0) {
		*blas_status = BLAS_INVALID_VALUE;
		return r;
	}
	TRY(spec_commit(ex, "blas_lu", lu_name(op, name), b->stream, &set));
	return ex->dev_ops->blas_lu(ex->dev, b->dev_handle, op, blas_status);
}

int exec_blas_make(struct executor *ex, uint32_t id)
{
	struct exec_blas *b = calloc(1, sizeof(*b));
	int r;

	if (!b)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	b->device = ex->dev_index;
	r = ex->dev_ops->blas_create(ex->dev, &b->dev_handle);
	if (r == 0 && (r = handle_put(&ex->blas, id, b)) < 0)
		ex->dev_ops->blas_destroy(ex->dev, b->dev_handle);
	if (r < 0)
		free(b);
	return r;
}

void exec_blas_free(struct executor *ex, struct exec_blas *b)
{
	if (!b)
		return;
	ex->dev_ops->blas_destroy(ex->devs[b->device], b->dev_handle);
	free(b);
}

int exec_blas_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		     uint32_t *out_len, int *blas_status)
{
	const struct phos_handle *h = body;
	struct exec_blas *b;
	void *stream;

	if (op == PHOS_OP_BLAS_SET_MATRIX || op == PHOS_OP_BLAS_GET_MATRIX)
		return matrix_copy(ex, op, body, len, out, out_len);
	if (len < sizeof(*h))
		return -PHOS_CUDA_INVALID_VALUE;
	if (op == PHOS_OP_BLAS_CREATE)
		return exec_blas_make(ex, h->id);
	/* Every other op starts with the handle id. */
	b = handle_get(&ex->blas, h->id);
	if (!b) {
		*blas_status = BLAS_NOT_INITIALIZED;
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	}
	exec_use_device(ex, b->device);   /* a handle works on the device it was made on */
	switch (op) {
	case PHOS_OP_BLAS_DESTROY:
		exec_sync_function(ex);
		exec_blas_free(ex, handle_take(&ex->blas, h->id));
		return 0;
	case PHOS_OP_BLAS_SET_STREAM: {
		BODY(struct phos_blas_set, s);

		TRY(exec_stream(ex, (uint32_t)s->value, &stream));
		TRY(ex->dev_ops->blas_set_stream(ex->dev, b->dev_handle, stream));
		b->stream = (uint32_t)s->value;
		return 0;
	}
	case PHOS_OP_BLAS_SET_MATH: {
		BODY(struct phos_blas_set, s);

		TRY(ex->dev_ops->blas_set_math(ex->dev, b->dev_handle, s->value));
		b->math_mode = s->value;
		return 0;
	}
	case PHOS_OP_BLAS_SET_WORKSPACE: {
		BODY(struct phos_blas_workspace, w);
		struct spec_set set = { 0 };

		if (w->size && spec_range(ex, &set, w->addr, w->size, SPEC_WRITE) < 0)
			return -PHOS_CUDA_INVALID_VALUE;
		TRY(ex->dev_ops->blas_set_workspace(ex->dev, b->dev_handle, w->addr, w->size));
		b->workspace = w->addr;
		b->workspace_size = w->size;
		return 0;
	}
	case PHOS_OP_BLAS_GEMM: {
		BODY(struct phos_blas_gemm, g);

		return gemm(ex, b, g, blas_status);
	}
	case PHOS_OP_BLAS_L1: {
		BODY(struct phos_blas_l1, l);

		return l1(ex, b, l, out, out_len, blas_status);
	}
	case PHOS_OP_BLAS_GEMV: {
		BODY(struct phos_blas_gemv, g);

		return gemv(ex, b, g, blas_status);
	}
	case PHOS_OP_BLAS_CALL: {
		BODY(struct phos_blas_op, c);

		return call(ex, b, c, out, out_len, blas_status);
	}
	case PHOS_OP_BLAS_LU: {
		BODY(struct phos_blas_lu, l);

		return lu(ex, b, l, blas_status);
	}
	default:
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
}
