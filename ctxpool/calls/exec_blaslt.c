/* SPDX-License-Identifier: MIT */
/*
 * cuBLASLt: matmuls and heuristic queries (proto.h, PHOS_OP_BLASLT_*), with
 * the exact bytes each matmul reads and writes.
 *
 * Every operand's extent comes from its own layout: (batch - 1) * stride +
 * (outer - 1) * ld + inner elements, inner being rows (column order) or
 * columns (row order). The epilogue adds what it touches:
 *
 *   epilogue                      bias vector            aux matrix (m x n, aux_ld)
 *   BIAS, RELU_BIAS, GELU_BIAS    read, m elements       -
 *   *_AUX forward (RELU, GELU)    (read if BIAS)         written: 1 bit (ReLU) or
 *                                                         one aux_type element each
 *   DRELU, DGELU                  -                      read
 *   DRELU_BGRAD, DGELU_BGRAD      written, m elements    read
 *   BGRADA / BGRADB               written, m / n         -
 *
 * Scale pointers (FP8) are read, AMAX_D written; device-mode alpha/beta are
 * read; the workspace is written; C is read unless beta is a host zero. An
 * epilogue not in this table, or an aux matrix with a row-ordered D, has no
 * set we can prove: the call is refused (CUBLAS_STATUS_NOT_SUPPORTED).
 */
#include <string.h>

#include "executor.h"

#define BLAS_NOT_SUPPORTED 15
#define BLAS_INVALID_VALUE 7

enum {
	EPI_DEFAULT = 1, EPI_RELU = 2, EPI_BIAS = 4, EPI_DRELU = 8 | 128, EPI_GRAD = 16, EPI_GELU = 32,
	EPI_DGELU = 64 | 128, EPI_AUX = 128, EPI_BGRADA = 256, EPI_BGRADB = 512,
};

/* Bytes of one element of a cudaDataType that cuBLASLt takes, 0 for others:
 * cuBLAS's types and the FP8 ones (R_8F_E4M3, R_8F_E5M2). */
static uint64_t elem_bytes(int type)
{
	return type == 28 || type == 29 ? 1 : exec_blas_elem_size(type);
}

/* a * b + c into *r, false on overflow. */
static bool mad(uint64_t a, uint64_t b, uint64_t c, uint64_t *r)
{
	uint64_t p;

	return !__builtin_mul_overflow(a, b, &p) && !__builtin_add_overflow(p, c, r);
}

/* Elements spanned by inner x outer with leading dimension ld, batch members
 * stride elements apart; false when impossible or overflowing. */
static bool span_elems(uint64_t inner, uint64_t outer, int64_t ld, int32_t batch, int64_t stride, uint64_t *ret)
{
	uint64_t e;

	if (batch < 1 || ld < 0 || stride < 0)
		return false;
	if (!inner || !outer) {
		*ret = 0;
		return true;
	}
	if ((uint64_t)ld < inner)
		return false;
	return mad(outer - 1, (uint64_t)ld, inner, &e) && mad((uint64_t)(batch - 1), (uint64_t)stride, e, ret);
}

static int layout_check(const struct phos_blaslt_layout *l)
{
	if (!elem_bytes(l->type) || (l->order != 0 && l->order != 1) || l->batch < 1 || l->ld < 0 || l->stride < 0)
		return -1;
	return 0;
}

/* Bytes a layout spans in memory. */
static int layout_bytes(const struct phos_blaslt_layout *l, uint64_t *ret)
{
	uint64_t inner = l->order == 0 ? l->rows : l->cols, outer = l->order == 0 ? l->cols : l->rows, e;

	if (layout_check(l) < 0 || !span_elems(inner, outer, l->ld, l->batch, l->stride, &e) ||
	    __builtin_mul_overflow(e, elem_bytes(l->type), ret))
		return -1;
	return 0;
}

static bool epilogue_known(int e)
{
	static const int known[] = { EPI_DEFAULT, EPI_RELU, EPI_RELU | EPI_AUX, EPI_BIAS, EPI_RELU | EPI_BIAS,
				     EPI_RELU | EPI_AUX | EPI_BIAS, EPI_DRELU, EPI_DRELU | EPI_GRAD, EPI_GELU,
				     EPI_GELU | EPI_AUX, EPI_GELU | EPI_BIAS, EPI_GELU | EPI_AUX | EPI_BIAS, EPI_DGELU,
				     EPI_DGELU | EPI_GRAD, EPI_BGRADA, EPI_BGRADB };

	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (known[i] == e)
			return true;
	return false;
}

/* Whether host-mode bytes of a scalar are all zero (beta = 0: C is not read). */
static bool zero_bytes(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* The epilogue's bias vector and aux matrix. */
static int epilogue_set(struct executor *ex, const struct phos_blaslt_matmul *m, struct spec_set *set)
{
	const struct phos_blaslt_desc *d = &m->desc;
	int e = d->epilogue;
	uint64_t rows = m->ld.rows, cols = m->ld.cols, len, bytes;
	int32_t batch = m->ld.batch;

	if (e & EPI_BIAS || e & EPI_GRAD || e == EPI_BGRADA || e == EPI_BGRADB) {
		int type = d->bias_type >= 0 ? d->bias_type : m->ld.type;
		uint8_t access = e & EPI_BIAS ? SPEC_READ : SPEC_WRITE;

		len = e == EPI_BGRADB ? cols : rows;
		if (!m->desc.bias || !span_elems(len, 1, (int64_t)len, batch, d->bias_stride, &bytes) ||
		    !elem_bytes(type) || __builtin_mul_overflow(bytes, elem_bytes(type), &bytes))
			return -PHOS_CUDA_INVALID_VALUE;
		TRY(spec_range(ex, set, d->bias, bytes, access));
	}
	if (e & EPI_AUX) {
		bool relu = (e & EPI_RELU) || (e & 8);
		bool forward = (e & EPI_RELU) || (e & EPI_GELU);
		int type = d->aux_type >= 0 ? d->aux_type : m->ld.type;
		uint64_t elems;

		if (m->ld.order != 0)
			return -PHOS_CUDA_NOT_SUPPORTED;
		if (!d->aux || !span_elems(rows, cols, d->aux_ld, batch, d->aux_stride, &elems))
			return -PHOS_CUDA_INVALID_VALUE;
		if (relu)
			bytes = elems / 8 + (elems % 8 != 0);
		else if (!elem_bytes(type) || __builtin_mul_overflow(elems, elem_bytes(type), &bytes))
			return -PHOS_CUDA_INVALID_VALUE;
		TRY(spec_range(ex, set, d->aux, bytes, forward ? SPEC_WRITE : SPEC_READ));
	}
	return 0;
}

static int matmul_set(struct executor *ex, const struct phos_blaslt_matmul *m, struct spec_set *set)
{
	const struct phos_blaslt_desc *d = &m->desc;
	uint64_t sa, sb, sc, sd, scalar = elem_bytes(d->scale_type);
	uint64_t scale_bytes = d->compute == 70 || d->compute == 71 ? 8 : 4;   /* 64F compute: double scales */
	bool c_read = d->pointer_mode != 0 || !zero_bytes(m->beta, scalar);

	if (!epilogue_known(d->epilogue))
		return -PHOS_CUDA_NOT_SUPPORTED;
	if (!scalar || layout_bytes(&m->la, &sa) < 0 || layout_bytes(&m->lb, &sb) < 0 ||
	    layout_bytes(&m->lc, &sc) < 0 || layout_bytes(&m->ld, &sd) < 0)
		return -PHOS_CUDA_INVALID_VALUE;
	TRY(spec_range(ex, set, m->a, sa, SPEC_READ));
	TRY(spec_range(ex, set, m->b, sb, SPEC_READ));
	if (c_read)
		TRY(spec_range(ex, set, m->c, sc, SPEC_READ));
	TRY(spec_range(ex, set, m->d, sd, SPEC_WRITE));
	if (m->workspace_size)
		TRY(spec_range(ex, set, m->workspace, m->workspace_size, SPEC_WRITE));
	if (d->pointer_mode != 0) {
		TRY(spec_range(ex, set, m->alpha_addr, scalar, SPEC_READ));
		TRY(spec_range(ex, set, m->beta_addr, scalar, SPEC_READ));
	}
	for (int i = 0; i < 4; i++)
		if (d->scale[i])
			TRY(spec_range(ex, set, d->scale[i], scale_bytes, SPEC_READ));
	if (d->amax_d)
		TRY(spec_range(ex, set, d->amax_d, 4, SPEC_WRITE));
	return epilogue_set(ex, m, set);
}

static int matmul(struct executor *ex, const struct phos_blaslt_matmul *m, int *blas_status)
{
	struct spec_set set = { 0 };
	void *stream;
	int r = matmul_set(ex, m, &set);

	if (r < 0) {
		*blas_status = r == -PHOS_CUDA_NOT_SUPPORTED ? BLAS_NOT_SUPPORTED : BLAS_INVALID_VALUE;
		return r;
	}
	TRY(exec_stream(ex, m->stream, &stream));
	TRY(spec_commit(ex, "blaslt_matmul", NULL, m->stream, &set));
	return ex->dev_ops->blaslt_matmul(ex->dev, stream, m, blas_status);
}

static int heuristic(struct executor *ex, const struct phos_blaslt_heuristic *h, void *out, uint32_t *out_len,
		     int *blas_status)
{
	const struct phos_blaslt_layout *l[4] = { &h->la, &h->lb, &h->lc, &h->ld };
	int n = 0, r;

	for (int i = 0; i < 4; i++)
		if (layout_check(l[i]) < 0) {
			*blas_status = BLAS_INVALID_VALUE;
			return -PHOS_CUDA_INVALID_VALUE;
		}
	if (h->requested < 1 || h->requested > PHOS_BLASLT_MAX_RESULTS || !epilogue_known(h->desc.epilogue)) {
		*blas_status = h->requested < 1 ? BLAS_INVALID_VALUE : BLAS_NOT_SUPPORTED;
		return h->requested < 1 ? -PHOS_CUDA_INVALID_VALUE : -PHOS_CUDA_NOT_SUPPORTED;
	}
	r = ex->dev_ops->blaslt_heuristic(ex->dev, h, out, &n, blas_status);
	if (r < 0)
		return r;
	*out_len = (uint32_t)n * sizeof(struct phos_blaslt_result);
	return 0;
}

int exec_blaslt_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		       uint32_t *out_len, int *blas_status)
{
	switch (op) {
	case PHOS_OP_BLASLT_MATMUL: {
		BODY(struct phos_blaslt_matmul, m);

		return matmul(ex, m, blas_status);
	}
	case PHOS_OP_BLASLT_HEURISTIC: {
		BODY(struct phos_blaslt_heuristic, h);

		return heuristic(ex, h, out, out_len, blas_status);
	}
	default:
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
}
