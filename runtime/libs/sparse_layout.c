/* SPDX-License-Identifier: MIT */
/*
 * What a cuSPARSE call touches (proto.h, phos_sparse_ranges_of): the source
 * of the executor's read/write sets, and the checks both devices rely on.
 * cuSPARSE's rules for its generic API:
 *
 *   CSR      row offsets: rows + 1 entries; columns and values: nnz each,
 *            of their index and value types; batch b at b x the offsets'
 *            stride and b x the columns-values stride
 *   COO      row indices, columns and values: nnz each, one batch stride
 *   dense    order COL: (i, j) at i + j ld (ld >= rows); ROW: i ld + j
 *            (ld >= cols); its extent from the first element to the last
 *   shapes   SpMV  op(A) m x k, x k, y m
 *            SpMM  op(A) m x k, op(B) k x n, C m x n
 *            SDDMM op(A) m x k, op(B) k x n, C m x n (CSR)
 *
 *            SpGEMM A m x k, B k x n, C m x n (CSR, op N, beta 0)
 *
 *   sorts    csrsort: offsets read, columns and P (32-bit, nnz) read and
 *            written; coosortByRow: rows, columns and P read and written;
 *            the identity permutation: n entries written
 *
 * The output (y, C; SDDMM: C's values) is written and read when beta may be
 * non-zero (a device-mode beta always); a _preprocess call reads the inputs
 * and not the output. The external buffer is read and written.
 */
#include "proto.h"

static bool mul(int64_t a, int64_t b, int64_t *ret)
{
	return !__builtin_mul_overflow(a, b, ret) && *ret <= PHOS_SPARSE_ELEMS_MAX;
}

static bool size_ok(int64_t v)
{
	return v >= 0 && v <= PHOS_SPARSE_ELEMS_MAX;
}

/* Elements spanned by batch copies of an extent of n elements stride apart. */
static bool batched(int64_t n, int32_t batch, int64_t stride, int64_t *ret)
{
	int64_t lead;

	if (n == 0) {
		*ret = 0;
		return true;
	}
	return mul(batch - 1, stride, &lead) && !__builtin_add_overflow(lead, n, ret) && *ret <= PHOS_SPARSE_ELEMS_MAX;
}

bool phos_sparse_dnmat_bytes(const struct phos_sparse_dnmat *d, uint64_t *ret)
{
	int64_t major, minor, one = 0, all;

	if (!size_ok(d->rows) || !size_ok(d->cols) || !size_ok(d->ld) || !phos_sparse_value_ok(d->value_type) ||
	    d->batch < 1 || d->batch > PHOS_SPARSE_BATCH_MAX || !size_ok(d->batch_stride))
		return false;
	if (d->order == PHOS_SPARSE_ORDER_COL) {
		major = d->cols;
		minor = d->rows;
	} else if (d->order == PHOS_SPARSE_ORDER_ROW) {
		major = d->rows;
		minor = d->cols;
	} else {
		return false;
	}
	if (d->ld < (minor > 1 ? minor : 1))
		return false;
	if (major > 0 && minor > 0 && (!mul(major - 1, d->ld, &one) || (one += minor) > PHOS_SPARSE_ELEMS_MAX))
		return false;
	if (d->batch > 1 && d->batch_stride < one)   /* (batches may not overlap) */
		return false;
	if (!batched(one, d->batch, d->batch_stride, &all))
		return false;
	*ret = (uint64_t)all * phos_sparse_value_size(d->value_type);
	return true;
}

struct acc {
	struct phos_sparse_range *r;
	uint32_t n;
};

static int add(struct acc *a, uint64_t addr, uint64_t len, bool read, bool write)
{
	if (len == 0)
		return 0;
	if (!addr)
		return PHOS_SPARSE_INVALID_VALUE;   /* (a NULL array that has elements) */
	if (__builtin_add_overflow(addr, len, &(uint64_t){ 0 }) || a->n >= PHOS_SPARSE_RANGES)
		return PHOS_SPARSE_INVALID_VALUE;
	a->r[a->n++] = (struct phos_sparse_range){ addr, len, read, write };
	return 0;
}

/* The arrays of sparse matrix s: structure read (and written when
 * struct_write), values read and/or written. */
static int spmat(struct acc *a, const struct phos_sparse_spmat *s, bool vread, bool vwrite)
{
	uint32_t oi = phos_sparse_index_size(s->offsets_type), ci = phos_sparse_index_size(s->index_type);
	uint32_t vs = phos_sparse_value_size(s->value_type);
	int64_t off, nz, ostride;
	int r;

	if (s->format != PHOS_SPARSE_FORMAT_CSR && s->format != PHOS_SPARSE_FORMAT_COO)
		return PHOS_SPARSE_NOT_SUPPORTED;
	if (!size_ok(s->rows) || !size_ok(s->cols) || !size_ok(s->nnz) || (s->base != 0 && s->base != 1) ||
	    !phos_sparse_index_ok(s->offsets_type) || !phos_sparse_index_ok(s->index_type) ||
	    !phos_sparse_value_ok(s->value_type) || s->batch < 1 || s->batch > PHOS_SPARSE_BATCH_MAX ||
	    !size_ok(s->offsets_stride) || !size_ok(s->values_stride))
		return PHOS_SPARSE_INVALID_VALUE;
	if (s->format == PHOS_SPARSE_FORMAT_COO && s->offsets_type != s->index_type)
		return PHOS_SPARSE_INVALID_VALUE;
	/* CSR: rows + 1 offsets; COO: nnz row indices, strided as the values */
	ostride = s->format == PHOS_SPARSE_FORMAT_CSR ? s->offsets_stride : s->values_stride;
	if (s->batch > 1 && ((s->format == PHOS_SPARSE_FORMAT_CSR && ostride < s->rows + 1) ||
			     s->values_stride < s->nnz))
		return PHOS_SPARSE_INVALID_VALUE;
	if (!batched(s->format == PHOS_SPARSE_FORMAT_CSR ? s->rows + 1 : s->nnz, s->batch, ostride, &off) ||
	    !batched(s->nnz, s->batch, s->values_stride, &nz))
		return PHOS_SPARSE_INVALID_VALUE;
	if ((r = add(a, s->offsets, (uint64_t)off * oi, true, false)) || (r = add(a, s->columns, (uint64_t)nz * ci, true, false)) ||
	    (r = add(a, s->values, (uint64_t)nz * vs, vread, vwrite)))
		return r;
	return 0;
}

static int dnmat(struct acc *a, const struct phos_sparse_dnmat *d, bool read, bool write)
{
	uint64_t bytes;

	if (!phos_sparse_dnmat_bytes(d, &bytes))
		return PHOS_SPARSE_INVALID_VALUE;
	return add(a, d->values, bytes, read, write);
}

/* alpha, beta in device mode */
static int scalars(struct acc *a, const struct phos_sparse_call *c)
{
	uint64_t n = phos_sparse_value_size(c->compute_type);
	int r;

	if (c->pointer_mode == PHOS_SPARSE_POINTER_HOST)
		return 0;
	if (c->pointer_mode != PHOS_SPARSE_POINTER_DEVICE || !c->alpha_ptr || !c->beta_ptr)
		return PHOS_SPARSE_INVALID_VALUE;
	if ((r = add(a, c->alpha_ptr, n, true, false)))
		return r;
	return add(a, c->beta_ptr, n, true, false);
}

/* Whether the output is read: beta may be non-zero. */
static bool beta_read(const struct phos_sparse_call *c)
{
	return c->pointer_mode != PHOS_SPARSE_POINTER_HOST || c->beta != 0.0;
}

/* Every operand has the compute type: float or double throughout. */
static bool types_ok(const struct phos_sparse_call *c, bool sp, int nd)
{
	if (!phos_sparse_value_ok(c->compute_type) || (sp && c->sp.value_type != c->compute_type))
		return false;
	for (int i = 0; i < nd; i++)
		if (c->d[i].value_type != c->compute_type)
			return false;
	return true;
}

/* A vector: one column of ld size, no batch. */
static bool vector_ok(const struct phos_sparse_dnmat *d)
{
	return d->cols == 1 && d->ld == (d->rows > 1 ? d->rows : 1) && d->order == PHOS_SPARSE_ORDER_COL &&
	       d->batch == 1;
}

/* A batched product's counts: the output's count, the inputs' 1 or it. */
static bool batch_ok(int32_t out, int32_t a, int32_t b)
{
	return (a == 1 || a == out) && (b == 1 || b == out) && out == (a > b ? a : b);
}

static int spmv(struct acc *a, const struct phos_sparse_call *c)
{
	int64_t m, k;
	int r;

	if (!phos_sparse_op_ok(c->op_a) || !types_ok(c, true, 2))
		return PHOS_SPARSE_INVALID_VALUE;
	if (c->sp.batch != 1)
		return PHOS_SPARSE_NOT_SUPPORTED;
	phos_sparse_op_dims(c->op_a, c->sp.rows, c->sp.cols, &m, &k);
	if (!vector_ok(&c->d[0]) || !vector_ok(&c->d[1]) || c->d[0].rows != k || c->d[1].rows != m)
		return PHOS_SPARSE_INVALID_VALUE;
	if ((r = spmat(a, &c->sp, true, false)) || (r = dnmat(a, &c->d[0], true, false)) || (r = scalars(a, c)))
		return r;
	return c->preprocess ? 0 : dnmat(a, &c->d[1], beta_read(c), true);
}

static int spmm(struct acc *a, const struct phos_sparse_call *c)
{
	int64_t m, k, kb, n;
	int r;

	if (!phos_sparse_op_ok(c->op_a) || !phos_sparse_op_ok(c->op_b) || !types_ok(c, true, 2))
		return PHOS_SPARSE_INVALID_VALUE;
	phos_sparse_op_dims(c->op_a, c->sp.rows, c->sp.cols, &m, &k);
	phos_sparse_op_dims(c->op_b, c->d[0].rows, c->d[0].cols, &kb, &n);
	if (kb != k || c->d[1].rows != m || c->d[1].cols != n || !batch_ok(c->d[1].batch, c->sp.batch, c->d[0].batch))
		return PHOS_SPARSE_INVALID_VALUE;
	if ((r = spmat(a, &c->sp, true, false)) || (r = dnmat(a, &c->d[0], true, false)) || (r = scalars(a, c)))
		return r;
	return c->preprocess ? 0 : dnmat(a, &c->d[1], beta_read(c), true);
}

static int sddmm(struct acc *a, const struct phos_sparse_call *c)
{
	int64_t m, k, kb, n;
	int r;

	if (!phos_sparse_op_ok(c->op_a) || !phos_sparse_op_ok(c->op_b) || !types_ok(c, true, 2))
		return PHOS_SPARSE_INVALID_VALUE;
	if (c->sp.format != PHOS_SPARSE_FORMAT_CSR)
		return PHOS_SPARSE_NOT_SUPPORTED;
	phos_sparse_op_dims(c->op_a, c->d[0].rows, c->d[0].cols, &m, &k);
	phos_sparse_op_dims(c->op_b, c->d[1].rows, c->d[1].cols, &kb, &n);
	if (kb != k || c->sp.rows != m || c->sp.cols != n || !batch_ok(c->sp.batch, c->d[0].batch, c->d[1].batch))
		return PHOS_SPARSE_INVALID_VALUE;
	if ((r = dnmat(a, &c->d[0], true, false)) || (r = dnmat(a, &c->d[1], true, false)) || (r = scalars(a, c)))
		return r;
	return spmat(a, &c->sp, c->preprocess || beta_read(c), !c->preprocess);
}

static int to_dense(struct acc *a, const struct phos_sparse_call *c)
{
	int r;

	if (!phos_sparse_value_ok(c->sp.value_type) || c->d[0].value_type != c->sp.value_type)
		return PHOS_SPARSE_INVALID_VALUE;
	if (c->sp.batch != 1 || c->d[0].batch != 1)
		return PHOS_SPARSE_NOT_SUPPORTED;
	if (c->d[0].rows != c->sp.rows || c->d[0].cols != c->sp.cols)
		return PHOS_SPARSE_INVALID_VALUE;
	if ((r = spmat(a, &c->sp, true, false)))
		return r;
	return dnmat(a, &c->d[0], false, true);
}

static int coo2csr(struct acc *a, const struct phos_sparse_call *c)
{
	const struct phos_sparse_spmat *s = &c->sp;
	int r;

	if (!size_ok(s->rows) || !size_ok(s->nnz) || s->rows > INT32_MAX || s->nnz > INT32_MAX ||
	    (s->base != 0 && s->base != 1))
		return PHOS_SPARSE_INVALID_VALUE;
	if ((r = add(a, s->offsets, (uint64_t)s->nnz * 4, true, false)))
		return r;
	return add(a, s->columns, ((uint64_t)s->rows + 1) * 4, false, true);
}

/* Xcsrsort, XcoosortByRow, CreateIdentityPermutation: 32-bit arrays, P may be NULL for the sorts. */
static int sort(struct acc *a, const struct phos_sparse_call *c)
{
	const struct phos_sparse_spmat *s = &c->sp;
	uint64_t nz = (uint64_t)s->nnz * 4;
	int r;

	if (!size_ok(s->rows) || !size_ok(s->cols) || !size_ok(s->nnz) || s->rows > INT32_MAX ||
	    s->cols > INT32_MAX || s->nnz > INT32_MAX || (s->base != 0 && s->base != 1))
		return PHOS_SPARSE_INVALID_VALUE;
	if (c->kind == PHOS_SPARSE_IDENTITY)
		return add(a, s->values, nz, false, true);
	if (c->kind == PHOS_SPARSE_CSRSORT)
		r = add(a, s->offsets, ((uint64_t)s->rows + 1) * 4, true, false);
	else
		r = add(a, s->offsets, nz, true, true);
	if (r || (r = add(a, s->columns, nz, true, true)))
		return r;
	return s->values ? add(a, s->values, nz, true, true) : 0;
}

/* SpGEMM (CSR only, op N, one batch, beta 0, host scalars: cuSPARSE's own
 * limits, and PyTorch's use): A and B read; C's arrays written by SPGEMM,
 * untouched by SPGEMM_NNZ. */
static int spgemm(struct acc *a, const struct phos_sparse_call *c)
{
	const struct phos_sparse_spmat *A = &c->sp, *B = &c->sp2[0], *C = &c->sp2[1];
	uint32_t oi = phos_sparse_index_size(C->offsets_type), ci = phos_sparse_index_size(C->index_type);
	uint32_t vs = phos_sparse_value_size(C->value_type);
	int r;

	if (!phos_sparse_value_ok(c->compute_type) || A->value_type != c->compute_type ||
	    B->value_type != c->compute_type || C->value_type != c->compute_type || !phos_sparse_op_ok(c->op_a) ||
	    !phos_sparse_op_ok(c->op_b))
		return PHOS_SPARSE_INVALID_VALUE;
	if (c->op_a != PHOS_SPARSE_OP_N || c->op_b != PHOS_SPARSE_OP_N || A->format != PHOS_SPARSE_FORMAT_CSR ||
	    B->format != PHOS_SPARSE_FORMAT_CSR || C->format != PHOS_SPARSE_FORMAT_CSR || A->batch != 1 ||
	    B->batch != 1 || C->batch != 1 || c->pointer_mode != PHOS_SPARSE_POINTER_HOST || c->beta != 0.0 ||
	    c->alg < 0 || c->alg > 3)   /* (ALG2, ALG3 need SpGEMM_estimateMemory) */
		return PHOS_SPARSE_NOT_SUPPORTED;
	if (A->cols != B->rows || C->rows != A->rows || C->cols != B->cols || !size_ok(C->rows) ||
	    !size_ok(C->cols) || !size_ok(C->nnz) || (C->base != 0 && C->base != 1) ||
	    !phos_sparse_index_ok(C->offsets_type) || !phos_sparse_index_ok(C->index_type))
		return PHOS_SPARSE_INVALID_VALUE;
	if ((r = spmat(a, A, true, false)) || (r = spmat(a, B, true, false)))
		return r;
	if (c->kind == PHOS_SPARSE_SPGEMM_NNZ)
		return 0;
	if ((r = add(a, C->offsets, ((uint64_t)C->rows + 1) * oi, false, true)) ||
	    (r = add(a, C->columns, (uint64_t)C->nnz * ci, false, true)))
		return r;
	return add(a, C->values, (uint64_t)C->nnz * vs, false, true);
}

int phos_sparse_ranges_of(const struct phos_sparse_call *c, uint64_t buffer_bytes, struct phos_sparse_range *ret,
			  uint32_t *ret_n)
{
	struct phos_sparse_range r[PHOS_SPARSE_RANGES];
	struct acc a = { r, 0 };
	int s;

	switch (c->kind) {
	case PHOS_SPARSE_SPMV: s = spmv(&a, c); break;
	case PHOS_SPARSE_SPMM: s = spmm(&a, c); break;
	case PHOS_SPARSE_SDDMM: s = sddmm(&a, c); break;
	case PHOS_SPARSE_TO_DENSE: s = to_dense(&a, c); break;
	case PHOS_SPARSE_COO2CSR: s = coo2csr(&a, c); break;
	case PHOS_SPARSE_CSRSORT: case PHOS_SPARSE_COOSORT: case PHOS_SPARSE_IDENTITY: s = sort(&a, c); break;
	case PHOS_SPARSE_SPGEMM_NNZ: case PHOS_SPARSE_SPGEMM: s = spgemm(&a, c); break;
	default: return PHOS_SPARSE_INVALID_VALUE;
	}
	if (!s && phos_sparse_has_buffer(c->kind) && buffer_bytes)
		s = add(&a, c->buffer, buffer_bytes, true, true);
	if (s)
		return s;
	for (uint32_t i = 0; i < a.n; i++)
		ret[i] = r[i];
	*ret_n = a.n;
	return 0;
}
