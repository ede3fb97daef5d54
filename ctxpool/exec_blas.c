/* SPDX-License-Identifier: MIT */
/* cuBLAS: handles and the calls we forward, with their exact read/write ranges. */
#include <stdlib.h>
#include <string.h>

#include "executor.h"
#include "loader.h"
#include "log.h"

#define BLAS_INVALID_VALUE 7
#define BLAS_NOT_INITIALIZED 1
#define BLAS_NOT_SUPPORTED 15

/* Bytes per element of a cudaDataType, 0 when unknown. */
static uint64_t elem_size(int type)
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

#define MAX_BATCH_ARRAY (1 << 16)   /* pointers per array of a pointer-array batched call */

/* A pointer-array batched GEMM: the arrays are read (they are in device
 * memory, so the device is synchronized first and, during an on-demand
 * restore, the arrays are waited for), and every matrix they name joins the
 * set with one matrix's span. A pointer to no live buffer refuses the call. */
static int gemm_arrays_set(struct executor *ex, const struct phos_blas_gemm *g, uint64_t sa, uint64_t sb,
			   uint64_t sc, struct spec_set *set)
{
	const uint64_t arr[3] = { g->a, g->b, g->c }, span[3] = { sa, sb, sc };
	const uint8_t access[3] = { SPEC_READ, SPEC_READ, g->beta != 0 ? SPEC_READ | SPEC_WRITE : SPEC_WRITE };
	uint64_t bytes = (uint64_t)g->batch * 8;
	uint64_t *ptrs;
	int r = 0;

	if (g->batch > MAX_BATCH_ARRAY)
		return -PHOS_CUDA_INVALID_VALUE;
	for (int i = 0; i < 3; i++)
		TRY(spec_range(ex, set, arr[i], bytes, SPEC_READ));
	ptrs = malloc(bytes);
	if (!ptrs)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	if (ex->loader)
		for (int i = 0; i < 3 && r == 0; i++)
			r = loader_settle(ex->loader, arr[i], bytes);
	if (r == 0)
		r = ex->dev_ops->synchronize(ex->dev);
	for (int i = 0; i < 3 && r == 0; i++) {
		r = ex->dev_ops->memcpy_d2h(ex->dev, ptrs, arr[i], bytes, NULL);
		for (int32_t j = 0; j < g->batch && r == 0 && span[i]; j++)
			if (spec_range(ex, set, ptrs[j], span[i], access[i]) < 0)
				r = -PHOS_CUDA_ILLEGAL_ADDRESS;
	}
	free(ptrs);
	return r;
}

static int gemm(struct executor *ex, struct exec_blas *b, const struct phos_blas_gemm *g, int *blas_status)
{
	struct spec_set set = { 0 };
	uint64_t sa, sb, sc;
	int arows = g->transa ? g->k : g->m, acols = g->transa ? g->m : g->k;
	int brows = g->transb ? g->n : g->k, bcols = g->transb ? g->k : g->n;

	if (!elem_size(g->atype) || !elem_size(g->btype) || !elem_size(g->ctype)) {
		*blas_status = BLAS_NOT_SUPPORTED;
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
	/* one matrix of each when a, b, c are pointer arrays */
	int spans = g->arrays ? 1 : g->batch;

	if (g->m < 0 || g->n < 0 || g->k < 0 || g->batch < 1 ||
	    matrix_span(arows, acols, g->lda, spans, g->stride_a, elem_size(g->atype), &sa) < 0 ||
	    matrix_span(brows, bcols, g->ldb, spans, g->stride_b, elem_size(g->btype), &sb) < 0 ||
	    matrix_span(g->m, g->n, g->ldc, spans, g->stride_c, elem_size(g->ctype), &sc) < 0) {
		*blas_status = BLAS_INVALID_VALUE;
		return -PHOS_CUDA_INVALID_VALUE;
	}
	if (g->arrays) {
		int r = gemm_arrays_set(ex, g, sa, sb, sc, &set);

		if (r < 0) {
			*blas_status = BLAS_INVALID_VALUE;
			return r;
		}
	} else if (spec_range(ex, &set, g->a, sa, SPEC_READ) < 0 || spec_range(ex, &set, g->b, sb, SPEC_READ) < 0 ||
		   spec_range(ex, &set, g->c, sc, g->beta != 0 ? SPEC_READ | SPEC_WRITE : SPEC_WRITE) < 0) {
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

int exec_blas_make(struct executor *ex, uint32_t id)
{
	struct exec_blas *b = calloc(1, sizeof(*b));
	int r;

	if (!b)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
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
	ex->dev_ops->blas_destroy(ex->dev, b->dev_handle);
	free(b);
}

int exec_blas_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		     uint32_t *out_len, int *blas_status)
{
	const struct phos_handle *h = body;
	struct exec_blas *b;
	void *stream;

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
	default:
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
}
