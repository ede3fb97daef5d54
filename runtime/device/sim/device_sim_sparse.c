/* SPDX-License-Identifier: MIT */
/*
 * cuSPARSE for the sim device (sparse_dev.h): a plain reference on the
 * host, in double whatever the value type, results rounded to it once:
 *
 *   SpMV   y = alpha op(A) x + beta y
 *   SpMM   C = alpha op(A) op(B) + beta C, each batch (an input of one
 *          batch serves all of the output's)
 *   SDDMM  C = alpha (op(A) op(B)) o spy(C) + beta C, on C's nonzeros
 *   sparse to dense   B = A (zeros elsewhere; duplicates of COO summed)
 *   coo2csr           offsets of sorted row indices
 *   csrsort           each row's columns sorted (stably), P moved with them
 *   coosortByRow      the entries sorted by row (stably), columns and P with them
 *   identity          P[i] = i
 *
 * With beta 0 the output is not read (NaN there stays out), as cuSPARSE
 * does. An index out of its matrix is CUSPARSE_STATUS_INVALID_VALUE here
 * (a GPU would read or write out of bounds). Alpha and beta are read from
 * device memory in pointer mode device. External buffers are
 * PHOS_SPARSE_SIM_BUFFER bytes (none for coo2csr and the identity), never
 * touched. A product of more than
 * SIM_SPARSE_ELEMS elements of scratch is CUSPARSE_STATUS_ALLOC_FAILED.
 */
#include "device_sim.h"

#include <stdlib.h>
#include <string.h>

#include "sparse_dev.h"

#define SIM_SPARSE_ELEMS (1ll << 26)   /* doubles of one output: 512 MiB */

static int ok(int *st, int s)
{
	*st = s;
	return 0;
}

static double load(uint64_t base, int32_t type, int64_t i)
{
	if (type == PHOS_SPARSE_R_64F) {
		double v;

		memcpy(&v, (const void *)(uintptr_t)(base + (uint64_t)i * 8), 8);
		return v;
	} else {
		float v;

		memcpy(&v, (const void *)(uintptr_t)(base + (uint64_t)i * 4), 4);
		return v;
	}
}

static void store(uint64_t base, int32_t type, int64_t i, double v)
{
	if (type == PHOS_SPARSE_R_64F) {
		memcpy((void *)(uintptr_t)(base + (uint64_t)i * 8), &v, 8);
	} else {
		float f = (float)v;

		memcpy((void *)(uintptr_t)(base + (uint64_t)i * 4), &f, 4);
	}
}

static int64_t load_index(uint64_t base, int32_t type, int64_t i)
{
	if (type == PHOS_SPARSE_INDEX_64I) {
		int64_t v;

		memcpy(&v, (const void *)(uintptr_t)(base + (uint64_t)i * 8), 8);
		return v;
	} else {
		int32_t v;

		memcpy(&v, (const void *)(uintptr_t)(base + (uint64_t)i * 4), 4);
		return v;
	}
}

/* Element (i, j) of batch b of a dense matrix, as an element offset. */
static int64_t dn_at(const struct phos_sparse_dnmat *d, int64_t b, int64_t i, int64_t j)
{
	return b * d->batch_stride + (d->order == PHOS_SPARSE_ORDER_COL ? i + j * d->ld : i * d->ld + j);
}

/* op(X)(i, j) of dense X */
static double dn_op(const struct phos_sparse_dnmat *d, int32_t op, int64_t b, int64_t i, int64_t j)
{
	return op == PHOS_SPARSE_OP_N ? load(d->values, d->value_type, dn_at(d, b, i, j))
				      : load(d->values, d->value_type, dn_at(d, b, j, i));
}

/* Calls fn(arg, i, j, p) for each nonzero p of batch b of s (0-based i, j);
 * false for an index out of the matrix or offsets that do not ascend. */
typedef void nz_fn(void *arg, int64_t i, int64_t j, int64_t p);
static bool each_nz(const struct phos_sparse_spmat *s, int64_t b, nz_fn *fn, void *arg)
{
	int64_t vb = b * s->values_stride;

	if (s->format == PHOS_SPARSE_FORMAT_COO) {
		for (int64_t p = 0; p < s->nnz; p++) {
			int64_t i = load_index(s->offsets, s->offsets_type, vb + p) - s->base;
			int64_t j = load_index(s->columns, s->index_type, vb + p) - s->base;

			if (i < 0 || i >= s->rows || j < 0 || j >= s->cols)
				return false;
			fn(arg, i, j, vb + p);
		}
		return true;
	}
	for (int64_t i = 0; i < s->rows; i++) {
		int64_t lo = load_index(s->offsets, s->offsets_type, b * s->offsets_stride + i) - s->base;
		int64_t hi = load_index(s->offsets, s->offsets_type, b * s->offsets_stride + i + 1) - s->base;

		if (lo < 0 || hi < lo || hi > s->nnz)
			return false;
		for (int64_t p = lo; p < hi; p++) {
			int64_t j = load_index(s->columns, s->index_type, vb + p) - s->base;

			if (j < 0 || j >= s->cols)
				return false;
			fn(arg, i, j, vb + p);
		}
	}
	return true;
}

struct product {
	const struct phos_sparse_call *c;
	double *acc;        /* the output's sums: m (SpMV) or m x n row-major (SpMM, dense) */
	int64_t n, b;       /* columns of the output, B's batch (SDDMM: the output's) */
	double alpha, beta;
};

static void spmv_nz(void *arg, int64_t i, int64_t j, int64_t p)
{
	struct product *x = arg;
	const struct phos_sparse_call *c = x->c;
	double v = load(c->sp.values, c->sp.value_type, p);

	if (c->op_a == PHOS_SPARSE_OP_N)
		x->acc[i] += v * load(c->d[0].values, c->d[0].value_type, j);
	else
		x->acc[j] += v * load(c->d[0].values, c->d[0].value_type, i);
}

static void spmm_nz(void *arg, int64_t i, int64_t j, int64_t p)
{
	struct product *x = arg;
	const struct phos_sparse_call *c = x->c;
	double v = load(c->sp.values, c->sp.value_type, p);
	int64_t r = c->op_a == PHOS_SPARSE_OP_N ? i : j, k = c->op_a == PHOS_SPARSE_OP_N ? j : i;

	for (int64_t col = 0; col < x->n; col++)
		x->acc[r * x->n + col] += v * dn_op(&c->d[0], c->op_b, x->b, k, col);
}

static void dense_nz(void *arg, int64_t i, int64_t j, int64_t p)
{
	struct product *x = arg;

	x->acc[i * x->n + j] += load(x->c->sp.values, x->c->sp.value_type, p);
}

static void sddmm_nz(void *arg, int64_t i, int64_t j, int64_t p)
{
	struct product *x = arg;
	const struct phos_sparse_call *c = x->c;
	int64_t ba = c->d[0].batch == 1 ? 0 : x->b, bb = c->d[1].batch == 1 ? 0 : x->b, k;
	double dot = 0, old;

	phos_sparse_op_dims(c->op_a, c->d[0].rows, c->d[0].cols, &(int64_t){ 0 }, &k);
	for (int64_t l = 0; l < k; l++)
		dot += dn_op(&c->d[0], c->op_a, ba, i, l) * dn_op(&c->d[1], c->op_b, bb, l, j);
	old = x->beta != 0.0 ? load(c->sp.values, c->sp.value_type, p) : 0.0;
	store(c->sp.values, c->sp.value_type, p, x->alpha * dot + x->beta * old);
}

/* alpha and beta of c, from the call or from device memory. */
static void scalars_of(const struct phos_sparse_call *c, struct product *x)
{
	if (c->pointer_mode == PHOS_SPARSE_POINTER_DEVICE) {
		x->alpha = load(c->alpha_ptr, c->compute_type, 0);
		x->beta = load(c->beta_ptr, c->compute_type, 0);
	} else {
		x->alpha = c->alpha;
		x->beta = c->beta;
	}
}

/* out(i, j) = alpha acc(i, j) + beta out(i, j) over a dense m x n output
 * (batch b); out not read when beta is 0. */
static void finish(const struct phos_sparse_dnmat *d, int64_t b, const struct product *x, int64_t m)
{
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < x->n; j++) {
			int64_t at = dn_at(d, b, i, j);
			double old = x->beta != 0.0 ? load(d->values, d->value_type, at) : 0.0;

			store(d->values, d->value_type, at, x->alpha * x->acc[i * x->n + j] + x->beta * old);
		}
}

static int spmv(const struct phos_sparse_call *c, int *st)
{
	struct product x = { .c = c, .n = 1 };
	int64_t m = c->d[1].rows;

	scalars_of(c, &x);
	if (m > SIM_SPARSE_ELEMS || !(x.acc = calloc((size_t)(m ? m : 1), sizeof(double))))
		return ok(st, PHOS_SPARSE_ALLOC_FAILED);
	if (!each_nz(&c->sp, 0, spmv_nz, &x)) {
		free(x.acc);
		return ok(st, PHOS_SPARSE_INVALID_VALUE);
	}
	finish(&c->d[1], 0, &x, m);
	free(x.acc);
	return ok(st, PHOS_SPARSE_SUCCESS);
}

static int spmm(const struct phos_sparse_call *c, int *st)
{
	const struct phos_sparse_dnmat *C = &c->d[1];
	struct product x = { .c = c, .n = C->cols };
	int64_t cells;

	scalars_of(c, &x);
	if (__builtin_mul_overflow(C->rows, C->cols, &cells) || cells > SIM_SPARSE_ELEMS ||
	    !(x.acc = malloc((size_t)(cells ? cells : 1) * sizeof(double))))
		return ok(st, PHOS_SPARSE_ALLOC_FAILED);
	for (int64_t b = 0; b < C->batch; b++) {
		memset(x.acc, 0, (size_t)cells * sizeof(double));
		x.b = c->d[0].batch == 1 ? 0 : b;
		if (!each_nz(&c->sp, c->sp.batch == 1 ? 0 : b, spmm_nz, &x)) {
			free(x.acc);
			return ok(st, PHOS_SPARSE_INVALID_VALUE);
		}
		finish(C, b, &x, C->rows);
	}
	free(x.acc);
	return ok(st, PHOS_SPARSE_SUCCESS);
}

static int sddmm(const struct phos_sparse_call *c, int *st)
{
	struct product x = { .c = c };

	scalars_of(c, &x);
	for (int64_t b = 0; b < c->sp.batch; b++) {
		x.b = b;
		if (!each_nz(&c->sp, b, sddmm_nz, &x))
			return ok(st, PHOS_SPARSE_INVALID_VALUE);
	}
	return ok(st, PHOS_SPARSE_SUCCESS);
}

static int to_dense(const struct phos_sparse_call *c, int *st)
{
	struct product x = { .c = c, .n = c->sp.cols, .alpha = 1.0, .beta = 0.0 };
	int64_t cells;

	if (__builtin_mul_overflow(c->sp.rows, c->sp.cols, &cells) || cells > SIM_SPARSE_ELEMS ||
	    !(x.acc = calloc((size_t)(cells ? cells : 1), sizeof(double))))
		return ok(st, PHOS_SPARSE_ALLOC_FAILED);
	if (!each_nz(&c->sp, 0, dense_nz, &x)) {
		free(x.acc);
		return ok(st, PHOS_SPARSE_INVALID_VALUE);
	}
	finish(&c->d[0], 0, &x, c->sp.rows);
	free(x.acc);
	return ok(st, PHOS_SPARSE_SUCCESS);
}

/* csr[i] = base + the number of nonzeros in rows under i; the row indices
 * must ascend and lie in the matrix. */
static int coo2csr(const struct phos_sparse_call *c, int *st)
{
	const struct phos_sparse_spmat *s = &c->sp;
	int64_t p = 0, prev = 0;

	for (int64_t q = 0; q < s->nnz; q++) {
		int64_t r = load_index(s->offsets, PHOS_SPARSE_INDEX_32I, q) - s->base;

		if (r < 0 || r >= s->rows || r < prev)
			return ok(st, PHOS_SPARSE_INVALID_VALUE);
		prev = r;
	}
	for (int64_t i = 0; i <= s->rows; i++) {
		int32_t v;

		while (p < s->nnz && load_index(s->offsets, PHOS_SPARSE_INDEX_32I, p) - s->base < i)
			p++;
		v = (int32_t)(p + s->base);
		memcpy((void *)(uintptr_t)(s->columns + (uint64_t)i * 4), &v, 4);
	}
	return ok(st, PHOS_SPARSE_SUCCESS);
}

static int32_t i32_at(uint64_t base, int64_t i)
{
	int32_t v;

	memcpy(&v, (const void *)(uintptr_t)(base + (uint64_t)i * 4), 4);
	return v;
}

static void i32_put(uint64_t base, int64_t i, int32_t v)
{
	memcpy((void *)(uintptr_t)(base + (uint64_t)i * 4), &v, 4);
}

struct entry {
	int32_t key, col, p;
	int64_t at;      /* the original position: the sort is stable */
};

static int entry_cmp(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;

	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->at < y->at ? -1 : x->at > y->at;
}

/* Sorts entries [lo, hi) of the arrays by key (rows: the row array; else
 * the columns), stably, moving the columns and P (when not 0) along. */
static bool sort_range(const struct phos_sparse_spmat *s, bool by_row, int64_t lo, int64_t hi)
{
	struct entry *e = malloc((size_t)(hi - lo ? hi - lo : 1) * sizeof(*e));

	if (!e)
		return false;
	for (int64_t q = lo; q < hi; q++) {
		int32_t col = i32_at(s->columns, q);

		e[q - lo] = (struct entry){ .key = by_row ? i32_at(s->offsets, q) : col, .col = col,
					    .p = s->values ? i32_at(s->values, q) : 0, .at = q };
	}
	qsort(e, (size_t)(hi - lo), sizeof(*e), entry_cmp);
	for (int64_t q = lo; q < hi; q++) {
		if (by_row)
			i32_put(s->offsets, q, e[q - lo].key);
		i32_put(s->columns, q, e[q - lo].col);
		if (s->values)
			i32_put(s->values, q, e[q - lo].p);
	}
	free(e);
	return true;
}

static int sorts(const struct phos_sparse_call *c, int *st)
{
	const struct phos_sparse_spmat *s = &c->sp;

	if (c->kind == PHOS_SPARSE_IDENTITY) {
		for (int64_t i = 0; i < s->nnz; i++)
			i32_put(s->values, i, (int32_t)i);
		return ok(st, PHOS_SPARSE_SUCCESS);
	}
	if (c->kind == PHOS_SPARSE_COOSORT)
		return ok(st, sort_range(s, true, 0, s->nnz) ? PHOS_SPARSE_SUCCESS : PHOS_SPARSE_ALLOC_FAILED);
	for (int64_t i = 0; i < s->rows; i++) {
		int64_t lo = (int64_t)i32_at(s->offsets, i) - s->base, hi = (int64_t)i32_at(s->offsets, i + 1) - s->base;

		if (lo < 0 || hi < lo || hi > s->nnz)
			return ok(st, PHOS_SPARSE_INVALID_VALUE);
		if (!sort_range(s, false, lo, hi))
			return ok(st, PHOS_SPARSE_ALLOC_FAILED);
	}
	return ok(st, PHOS_SPARSE_SUCCESS);
}

/* The external buffer the sim asks of a call. */
static uint64_t buffer_of(const struct phos_sparse_call *c)
{
	return phos_sparse_has_buffer(c->kind) ? PHOS_SPARSE_SIM_BUFFER : 0;
}

static void store_index(uint64_t base, int32_t type, int64_t i, int64_t v)
{
	if (type == PHOS_SPARSE_INDEX_64I) {
		memcpy((void *)(uintptr_t)(base + (uint64_t)i * 8), &v, 8);
	} else {
		int32_t w = (int32_t)v;

		memcpy((void *)(uintptr_t)(base + (uint64_t)i * 4), &w, 4);
	}
}

/* Row i of CSR s as [*lo, *hi) (0-based): false when its offsets do not ascend within nnz. */
static bool csr_row(const struct phos_sparse_spmat *s, int64_t i, int64_t *lo, int64_t *hi)
{
	*lo = load_index(s->offsets, s->offsets_type, i) - s->base;
	*hi = load_index(s->offsets, s->offsets_type, i + 1) - s->base;
	return *lo >= 0 && *hi >= *lo && *hi <= s->nnz;
}

struct gemm_entry { int64_t col; double v; };

static int gemm_entry_cmp(const void *a, const void *b)
{
	const struct gemm_entry *x = a, *y = b;

	return x->col < y->col ? -1 : x->col > y->col;
}

/* SpGEMM, row by row (Gustavson): each row's products sorted by column and
 * summed, so C's columns ascend in every row. write: into C's arrays, whose
 * nnz must be the product's; else only the count. */
static int spgemm(const struct phos_sparse_call *c, bool write, uint64_t *ret_nnz, int *st)
{
	const struct phos_sparse_spmat *A = &c->sp, *B = &c->sp2[0], *C = &c->sp2[1];
	struct gemm_entry *row = NULL;
	int64_t nnz = 0, cap = 0;
	int s = PHOS_SPARSE_SUCCESS;

	for (int64_t i = 0; i < A->rows && s == PHOS_SPARSE_SUCCESS; i++) {
		int64_t alo, ahi, n = 0, m = 0;

		if (!csr_row(A, i, &alo, &ahi)) {
			s = PHOS_SPARSE_INVALID_VALUE;
			break;
		}
		for (int64_t p = alo; p < ahi && s == PHOS_SPARSE_SUCCESS; p++) {
			int64_t k = load_index(A->columns, A->index_type, p) - A->base, blo, bhi;
			double av = load(A->values, A->value_type, p);

			if (k < 0 || k >= A->cols || !csr_row(B, k, &blo, &bhi)) {
				s = PHOS_SPARSE_INVALID_VALUE;
				break;
			}
			for (int64_t q = blo; q < bhi; q++) {
				int64_t j = load_index(B->columns, B->index_type, q) - B->base;

				if (j < 0 || j >= B->cols) {
					s = PHOS_SPARSE_INVALID_VALUE;
					break;
				}
				if (n == cap) {
					int64_t ncap = cap ? 2 * cap : 64;
					struct gemm_entry *g = ncap <= SIM_SPARSE_ELEMS ? realloc(row, (size_t)ncap * sizeof(*g))
											: NULL;

					if (!g) {
						s = PHOS_SPARSE_ALLOC_FAILED;
						break;
					}
					row = g;
					cap = ncap;
				}
				row[n++] = (struct gemm_entry){ j, av * load(B->values, B->value_type, q) };
			}
		}
		if (s != PHOS_SPARSE_SUCCESS)
			break;
		if (n)
			qsort(row, (size_t)n, sizeof(*row), gemm_entry_cmp);
		if (write)
			store_index(C->offsets, C->offsets_type, i, nnz + C->base);
		for (int64_t p = 0; p < n; m++) {
			int64_t j = row[p].col;
			double sum = 0;

			for (; p < n && row[p].col == j; p++)
				sum += row[p].v;
			if (write && nnz + m >= C->nnz) {
				s = PHOS_SPARSE_INVALID_VALUE;   /* C has room for fewer than the product's */
				break;
			}
			if (write) {
				store_index(C->columns, C->index_type, nnz + m, j + C->base);
				store(C->values, C->value_type, nnz + m, c->alpha * sum);
			}
		}
		nnz += m;
	}
	free(row);
	if (s == PHOS_SPARSE_SUCCESS && write) {
		store_index(C->offsets, C->offsets_type, A->rows, nnz + C->base);
		if (nnz != C->nnz)
			s = PHOS_SPARSE_INVALID_VALUE;
	}
	*ret_nnz = (uint64_t)nnz;
	return ok(st, s);
}

static int sim_sparse_version(struct phos_device *dev, struct phos_reply_sparse_version *ret, int *st)
{
	(void)dev;
	/* what cuSPARSE of CUDA 13.0 answers (cusparse.h: 12.6.3, CUSPARSE_VERSION 12603) */
	*ret = (struct phos_reply_sparse_version){ .version = 12603, .major = 12, .minor = 6, .patch = 3 };
	return ok(st, PHOS_SPARSE_SUCCESS);
}

static int sim_sparse_buffer_size(struct phos_device *dev, const struct phos_sparse_call *c, uint64_t *ret, int *st)
{
	struct phos_sparse_range r[PHOS_SPARSE_RANGES];
	uint32_t n;
	int s = phos_sparse_ranges_of(c, 0, r, &n);

	(void)dev;
	*ret = buffer_of(c);
	return ok(st, s);
}

static int sim_sparse_exec(struct phos_device *dev, const struct phos_sparse_call *c, void *stream, int *st)
{
	struct phos_sparse_range r[PHOS_SPARSE_RANGES];
	uint64_t buf = buffer_of(c);
	uint32_t n = 0;
	int s;

	if (phos_sim_stream_check(dev, stream) < 0)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	s = phos_sparse_ranges_of(c, c->buffer ? buf : 0, r, &n);
	if (s)
		return ok(st, s);
	for (uint32_t i = 0; i < n; i++)
		if (!phos_sim_range_ok(dev, r[i].addr, r[i].len))
			return ok(st, PHOS_SPARSE_EXECUTION_FAILED);
	if (c->preprocess)
		return ok(st, PHOS_SPARSE_SUCCESS);   /* (nothing to prepare) */
	switch (c->kind) {
	case PHOS_SPARSE_SPMV: return spmv(c, st);
	case PHOS_SPARSE_SPMM: return spmm(c, st);
	case PHOS_SPARSE_SDDMM: return sddmm(c, st);
	case PHOS_SPARSE_TO_DENSE: return to_dense(c, st);
	case PHOS_SPARSE_COO2CSR: return coo2csr(c, st);
	case PHOS_SPARSE_CSRSORT: case PHOS_SPARSE_COOSORT: case PHOS_SPARSE_IDENTITY: return sorts(c, st);
	case PHOS_SPARSE_SPGEMM: return spgemm(c, true, &(uint64_t){ 0 }, st);
	default: return ok(st, PHOS_SPARSE_INVALID_VALUE);
	}
}

static int sim_sparse_spgemm_nnz(struct phos_device *dev, const struct phos_sparse_call *c, void *stream,
				 uint64_t *ret, int *st)
{
	struct phos_sparse_range r[PHOS_SPARSE_RANGES];
	uint32_t n = 0;
	int s;

	*ret = 0;
	if (phos_sim_stream_check(dev, stream) < 0)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	s = c->kind == PHOS_SPARSE_SPGEMM_NNZ ? phos_sparse_ranges_of(c, 0, r, &n) : PHOS_SPARSE_INVALID_VALUE;
	if (s)
		return ok(st, s);
	for (uint32_t i = 0; i < n; i++)
		if (!phos_sim_range_ok(dev, r[i].addr, r[i].len))
			return ok(st, PHOS_SPARSE_EXECUTION_FAILED);
	return spgemm(c, false, ret, st);
}

const struct phos_sparse_ops phos_sparse_sim = {
	.version = sim_sparse_version,
	.buffer_size = sim_sparse_buffer_size,
	.exec = sim_sparse_exec,
	.spgemm_nnz = sim_sparse_spgemm_nnz,
};
