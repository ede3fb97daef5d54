/* SPDX-License-Identifier: MIT */
/*
 * cuSPARSE on the sim device (runtime/device/sim/device_sim_sparse.c) and the rules
 * behind the executor's read/write sets (runtime/libs/sparse_layout.c,
 * phos_sparse_ranges_of):
 *
 * - the ranges of a few calls worked out by hand from cuSPARSE's rules
 *   (CSR offsets rows + 1, columns and values nnz, dense extents from the
 *   first element to the last, batches, device-mode scalars, beta 0, a
 *   preprocess), and calls that must be refused or answer INVALID_VALUE;
 * - random problems (CSR and COO, 32- and 64-bit indices, bases 0 and 1,
 *   float and double, op(A) and op(B), both dense orders with padded ld,
 *   batches, beta 0 over NaN): every output element equals a product
 *   computed here from a dense copy, and every byte of the device memory
 *   outside the call's write ranges is unchanged: the sim writes inside
 *   the set the executor declares;
 * - SpGEMM (CSR x CSR, every index type and base): C's count, then its
 *   arrays, rows with ascending columns and the dense product's values,
 *   nothing written outside C's arrays; a C of another count, ALG2, beta
 *   non-zero, op T and a C of the wrong shape are refused.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "sparse_dev.h"

#define BASE 0x530000000000ull   /* clear of ASan's allocator */
#define SIZE (1ull << 30)
#define MAPPED (4ull << 20)

static const struct phos_device_ops *ops = &phos_device_sim;
static const struct phos_sparse_ops *sp = &phos_sparse_sim;
static struct phos_device *dev;
#include "check.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static int64_t pick(int64_t lo, int64_t hi)
{
	return lo + (int64_t)(rng() % (uint64_t)(hi - lo + 1));
}

static double drand(void)
{
	return (double)(rng() % 20001) / 10000.0 - 1.0;
}

/* --- hand-worked ranges --- */

static struct phos_sparse_spmat csr(int64_t rows, int64_t cols, int64_t nnz)
{
	return (struct phos_sparse_spmat){ .format = PHOS_SPARSE_FORMAT_CSR, .offsets_type = PHOS_SPARSE_INDEX_32I,
					   .index_type = PHOS_SPARSE_INDEX_32I, .value_type = PHOS_SPARSE_R_32F,
					   .batch = 1, .rows = rows, .cols = cols, .nnz = nnz, .offsets = 0x1000,
					   .columns = 0x2000, .values = 0x3000 };
}

static struct phos_sparse_dnmat dn(int64_t rows, int64_t cols, int64_t ld, int32_t order, uint64_t at)
{
	return (struct phos_sparse_dnmat){ .rows = rows, .cols = cols, .ld = ld, .values = at,
					   .value_type = PHOS_SPARSE_R_32F, .order = order, .batch = 1 };
}

/* Whether ranges r[0..n) hold [addr, len) with that access. */
static bool has(const struct phos_sparse_range *r, uint32_t n, uint64_t addr, uint64_t len, bool read, bool write)
{
	for (uint32_t i = 0; i < n; i++)
		if (r[i].addr == addr && r[i].len == len && r[i].read == read && r[i].write == write)
			return true;
	return false;
}

static void test_ranges(void)
{
	struct phos_sparse_range r[PHOS_SPARSE_RANGES];
	struct phos_sparse_call c = { .kind = PHOS_SPARSE_SPMV, .compute_type = PHOS_SPARSE_R_32F, .alpha = 1 };
	uint32_t n = 0;

	/* SpMV 7 x 5, nnz 10, beta 0: y written only; buffer 64 read and written */
	c.sp = csr(7, 5, 10);
	c.d[0] = dn(5, 1, 5, PHOS_SPARSE_ORDER_COL, 0x4000);
	c.d[1] = dn(7, 1, 7, PHOS_SPARSE_ORDER_COL, 0x5000);
	c.buffer = 0x6000;
	CHECK(phos_sparse_ranges_of(&c, 64, r, &n) == 0 && n == 6, "spmv: %u ranges", n);
	CHECK(has(r, n, 0x1000, 32, true, false) && has(r, n, 0x2000, 40, true, false) &&
	      has(r, n, 0x3000, 40, true, false) && has(r, n, 0x4000, 20, true, false) &&
	      has(r, n, 0x5000, 28, false, true) && has(r, n, 0x6000, 64, true, true), "spmv ranges");
	/* beta non-zero: y read too; a buffer of 0 bytes is in no set */
	c.beta = 0.5;
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == 0 && n == 5 && has(r, n, 0x5000, 28, true, true), "spmv beta");
	/* transposed: x has rows entries */
	c.op_a = PHOS_SPARSE_OP_T;
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == PHOS_SPARSE_INVALID_VALUE, "spmv^T with x of 5");
	c.d[0] = dn(7, 1, 7, PHOS_SPARSE_ORDER_COL, 0x4000);
	c.d[1] = dn(5, 1, 5, PHOS_SPARSE_ORDER_COL, 0x5000);
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == 0, "spmv^T");
	/* device mode: alpha and beta read, and y read whatever beta is */
	c.pointer_mode = PHOS_SPARSE_POINTER_DEVICE;
	c.alpha_ptr = 0x7000;
	c.beta_ptr = 0x7008;
	c.beta = 0;
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == 0 && n == 7 && has(r, n, 0x7000, 4, true, false) &&
	      has(r, n, 0x7008, 4, true, false) && has(r, n, 0x5000, 20, true, true), "spmv device mode");
	c.beta_ptr = 0;
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == PHOS_SPARSE_INVALID_VALUE, "device mode, NULL beta");
	/* 64-bit one-based double CSR: 8-byte entries */
	c = (struct phos_sparse_call){ .kind = PHOS_SPARSE_SPMV, .compute_type = PHOS_SPARSE_R_64F };
	c.sp = csr(7, 5, 10);
	c.sp.offsets_type = c.sp.index_type = PHOS_SPARSE_INDEX_64I;
	c.sp.value_type = PHOS_SPARSE_R_64F;
	c.sp.base = 1;
	c.d[0] = dn(5, 1, 5, PHOS_SPARSE_ORDER_COL, 0x4000);
	c.d[1] = dn(7, 1, 7, PHOS_SPARSE_ORDER_COL, 0x5000);
	c.d[0].value_type = c.d[1].value_type = PHOS_SPARSE_R_64F;
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == 0 && has(r, n, 0x1000, 64, true, false) &&
	      has(r, n, 0x2000, 80, true, false) && has(r, n, 0x3000, 80, true, false) &&
	      has(r, n, 0x5000, 56, false, true), "spmv double 64-bit");
	c.d[1].value_type = PHOS_SPARSE_R_32F;
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == PHOS_SPARSE_INVALID_VALUE, "mixed value types");
	c.d[1].value_type = PHOS_SPARSE_R_64F;
	c.sp.batch = 2;
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == PHOS_SPARSE_NOT_SUPPORTED, "batched spmv");

	/* SpMM: B 5 x 3 column-major ld 7 spans 2 x 7 + 5 elements; C row-major 7 x 3 ld 4: 6 x 4 + 3 */
	c = (struct phos_sparse_call){ .kind = PHOS_SPARSE_SPMM, .compute_type = PHOS_SPARSE_R_32F, .beta = 2 };
	c.sp = csr(7, 5, 10);
	c.d[0] = dn(5, 3, 7, PHOS_SPARSE_ORDER_COL, 0x4000);
	c.d[1] = dn(7, 3, 4, PHOS_SPARSE_ORDER_ROW, 0x5000);
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == 0 && has(r, n, 0x4000, 19 * 4, true, false) &&
	      has(r, n, 0x5000, 27 * 4, true, true), "spmm extents");
	/* preprocess: no C */
	c.preprocess = 1;
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == 0 && n == 4 && !has(r, n, 0x5000, 27 * 4, true, true),
	      "spmm preprocess");
	c.preprocess = 0;
	/* batches: A two (offsets 8 apart, values 10 apart), B one, C two 21 apart */
	c.sp.batch = 2;
	c.sp.offsets_stride = 8;
	c.sp.values_stride = 10;
	c.d[1] = dn(7, 3, 7, PHOS_SPARSE_ORDER_COL, 0x5000);
	c.d[1].batch = 2;
	c.d[1].batch_stride = 21;
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == 0 && has(r, n, 0x1000, 16 * 4, true, false) &&
	      has(r, n, 0x2000, 20 * 4, true, false) && has(r, n, 0x5000, 42 * 4, true, true), "spmm batched");
	c.d[1].batch_stride = 20;   /* batches overlapping */
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == PHOS_SPARSE_INVALID_VALUE, "overlapping batches");
	c.d[1].batch = 3;
	c.d[1].batch_stride = 21;
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == PHOS_SPARSE_INVALID_VALUE, "batches 2 and 3");
	/* ld under the rows; a shape that does not agree; a NULL array with elements; an overflow */
	c = (struct phos_sparse_call){ .kind = PHOS_SPARSE_SPMM, .compute_type = PHOS_SPARSE_R_32F };
	c.sp = csr(7, 5, 10);
	c.d[0] = dn(5, 3, 4, PHOS_SPARSE_ORDER_COL, 0x4000);
	c.d[1] = dn(7, 3, 7, PHOS_SPARSE_ORDER_COL, 0x5000);
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == PHOS_SPARSE_INVALID_VALUE, "ld 4 < 5 rows");
	c.d[0] = dn(4, 3, 4, PHOS_SPARSE_ORDER_COL, 0x4000);
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == PHOS_SPARSE_INVALID_VALUE, "k 5 vs 4");
	c.d[0] = dn(5, 3, 5, PHOS_SPARSE_ORDER_COL, 0x4000);
	c.sp.columns = 0;
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == PHOS_SPARSE_INVALID_VALUE, "NULL columns");
	c.sp = csr(7, 5, 10);
	c.d[0] = dn(5, 1ll << 39, 5, PHOS_SPARSE_ORDER_COL, 0x4000);   /* 5 x 2^39 elements: over the limit */
	c.d[1] = dn(7, 1ll << 39, 7, PHOS_SPARSE_ORDER_COL, 0x5000);
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == PHOS_SPARSE_INVALID_VALUE, "extent overflow");
	c.d[0] = dn(5, 3, 5, PHOS_SPARSE_ORDER_COL, 0x4000);
	c.d[1] = dn(7, 3, 7, PHOS_SPARSE_ORDER_COL, 0x5000);
	c.buffer = 0;
	CHECK(phos_sparse_ranges_of(&c, 256, r, &n) == PHOS_SPARSE_INVALID_VALUE, "a buffer of 256 bytes at NULL");
	c.sp.index_type = PHOS_SPARSE_INDEX_16U;
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == PHOS_SPARSE_INVALID_VALUE, "16-bit indices");
	c.sp = csr(7, 5, 10);
	c.sp.format = 6;   /* BSR */
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == PHOS_SPARSE_NOT_SUPPORTED, "BSR");

	/* SDDMM: C's structure read, values written (read with beta); COO refused */
	c = (struct phos_sparse_call){ .kind = PHOS_SPARSE_SDDMM, .compute_type = PHOS_SPARSE_R_32F };
	c.sp = csr(7, 5, 10);
	c.d[0] = dn(7, 4, 4, PHOS_SPARSE_ORDER_ROW, 0x4000);
	c.d[1] = dn(4, 5, 5, PHOS_SPARSE_ORDER_ROW, 0x5000);
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == 0 && n == 5 && has(r, n, 0x3000, 40, false, true) &&
	      has(r, n, 0x4000, 112, true, false) && has(r, n, 0x5000, 80, true, false), "sddmm");
	c.sp.format = PHOS_SPARSE_FORMAT_COO;
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == PHOS_SPARSE_NOT_SUPPORTED, "sddmm of COO");

	/* coo2csr: 10 rows read, 8 offsets written */
	c = (struct phos_sparse_call){ .kind = PHOS_SPARSE_COO2CSR };
	c.sp = (struct phos_sparse_spmat){ .rows = 7, .nnz = 10, .offsets = 0x1000, .columns = 0x2000 };
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == 0 && n == 2 && has(r, n, 0x1000, 40, true, false) &&
	      has(r, n, 0x2000, 32, false, true), "coo2csr");
}

/* --- random problems against a dense reference --- */

static uint64_t bump;

static uint64_t dev_take(uint64_t bytes)
{
	uint64_t a = bump;

	bump += (bytes + 255) & ~255ull;
	return a;
}

static void put_index(uint64_t base, int32_t type, int64_t i, int64_t v)
{
	if (type == PHOS_SPARSE_INDEX_64I)
		memcpy((void *)(uintptr_t)(base + (uint64_t)i * 8), &v, 8);
	else
		memcpy((void *)(uintptr_t)(base + (uint64_t)i * 4), &(int32_t){ (int32_t)v }, 4);
}

static void put(uint64_t base, int32_t type, int64_t i, double v)
{
	if (type == PHOS_SPARSE_R_64F)
		memcpy((void *)(uintptr_t)(base + (uint64_t)i * 8), &v, 8);
	else
		memcpy((void *)(uintptr_t)(base + (uint64_t)i * 4), &(float){ (float)v }, 4);
}

static double get(uint64_t base, int32_t type, int64_t i)
{
	if (type == PHOS_SPARSE_R_64F) {
		double v;

		memcpy(&v, (void *)(uintptr_t)(base + (uint64_t)i * 8), 8);
		return v;
	}
	float f;

	memcpy(&f, (void *)(uintptr_t)(base + (uint64_t)i * 4), 4);
	return f;
}

#define MAXD 9
#define MAXB 3
/* A random sparse matrix of batch count nb in the sim's memory, and its
 * dense copy dense[b][i][j] (values as stored, rounded to the type). */
static void make_sparse(struct phos_sparse_spmat *s, int64_t rows, int64_t cols, int nb, int32_t vt,
			double dense[MAXB][MAXD][MAXD])
{
	bool coo = rng() & 1;
	int32_t it = rng() & 1 ? PHOS_SPARSE_INDEX_64I : PHOS_SPARSE_INDEX_32I;
	uint32_t is = phos_sparse_index_size(it), vs = phos_sparse_value_size(vt);
	int64_t nnz = 0;
	bool on[MAXD][MAXD];

	for (int64_t i = 0; i < rows; i++)
		for (int64_t j = 0; j < cols; j++)
			nnz += on[i][j] = rng() % 3 == 0;
	*s = (struct phos_sparse_spmat){ .format = coo ? PHOS_SPARSE_FORMAT_COO : PHOS_SPARSE_FORMAT_CSR,
					 .offsets_type = it, .index_type = it, .base = (int32_t)(rng() & 1),
					 .value_type = vt, .batch = nb, .rows = rows, .cols = cols, .nnz = nnz };
	s->offsets_stride = coo ? nnz : rows + 1 + pick(0, 2);
	s->values_stride = nnz + pick(0, 2);
	if (coo)
		s->offsets_stride = s->values_stride;
	s->offsets = dev_take((uint64_t)(nb * (coo ? s->values_stride : s->offsets_stride) + 1) * is);
	s->columns = dev_take((uint64_t)(nb * s->values_stride + 1) * is);
	s->values = dev_take((uint64_t)(nb * s->values_stride + 1) * vs);
	memset(dense, 0, sizeof(double) * MAXB * MAXD * MAXD);
	for (int b = 0; b < nb; b++) {
		int64_t p = 0;

		for (int64_t i = 0; i < rows; i++) {
			if (!coo)
				put_index(s->offsets, it, b * s->offsets_stride + i, p + s->base);
			for (int64_t j = 0; j < cols; j++)
				if (on[i][j]) {
					int64_t at = b * s->values_stride + p;

					if (coo)
						put_index(s->offsets, it, at, i + s->base);
					put_index(s->columns, it, at, j + s->base);
					put(s->values, vt, at, drand());
					dense[b][i][j] = get(s->values, vt, at);
					p++;
				}
		}
		if (!coo)
			put_index(s->offsets, it, b * s->offsets_stride + rows, p + s->base);
	}
}

/* A random dense matrix rows x cols of nb batches, filled with fill or random values. */
static void make_dense(struct phos_sparse_dnmat *d, int64_t rows, int64_t cols, int nb, int32_t vt, bool random,
		       double fill)
{
	int32_t order = rng() & 1 ? PHOS_SPARSE_ORDER_ROW : PHOS_SPARSE_ORDER_COL;
	int64_t ld = (order == PHOS_SPARSE_ORDER_COL ? rows : cols) + pick(0, 2), per;

	if (ld < 1)
		ld = 1;
	per = ld * (order == PHOS_SPARSE_ORDER_COL ? cols : rows);
	*d = (struct phos_sparse_dnmat){ .rows = rows, .cols = cols, .ld = ld, .value_type = vt, .order = order,
					 .batch = nb, .batch_stride = per + pick(0, 3) };
	d->values = dev_take((uint64_t)(nb * d->batch_stride + 1) * phos_sparse_value_size(vt));
	for (int b = 0; b < nb; b++)
		for (int64_t i = 0; i < rows; i++)
			for (int64_t j = 0; j < cols; j++)
				put(d->values, vt, b * d->batch_stride + (order == PHOS_SPARSE_ORDER_COL ? i + j * ld : i * ld + j),
				    random ? drand() : fill);
}

/* A vector of n elements: an n x 1 column. */
static void make_vec(struct phos_sparse_dnmat *d, int64_t n, int32_t vt)
{
	*d = (struct phos_sparse_dnmat){ .rows = n, .cols = 1, .ld = n, .value_type = vt,
					 .order = PHOS_SPARSE_ORDER_COL, .batch = 1 };
	d->values = dev_take((uint64_t)n * phos_sparse_value_size(vt));
}

static int64_t index_at(uint64_t base, int32_t type, int64_t i)
{
	return type == PHOS_SPARSE_INDEX_64I ? ((const int64_t *)(uintptr_t)base)[i]
					     : ((const int32_t *)(uintptr_t)base)[i];
}

static double at(const struct phos_sparse_dnmat *d, int b, int64_t i, int64_t j)
{
	return get(d->values, d->value_type,
		   b * d->batch_stride + (d->order == PHOS_SPARSE_ORDER_COL ? i + j * d->ld : i * d->ld + j));
}

static bool close_to(double got, double want, int32_t vt)
{
	return fabs(got - want) <= (vt == PHOS_SPARSE_R_64F ? 1e-12 : 1e-5) * (1 + fabs(want));
}

/* Runs c and checks that only the bytes of its write ranges changed. */
static bool run_checked(const struct phos_sparse_call *c, const char *what)
{
	static uint8_t before[MAPPED];
	struct phos_sparse_range r[PHOS_SPARSE_RANGES];
	uint32_t n = 0;
	int st = -1;

	memcpy(before, (void *)(uintptr_t)BASE, bump - BASE);
	if (phos_sparse_ranges_of(c, c->buffer ? PHOS_SPARSE_SIM_BUFFER : 0, r, &n) != 0 ||
	    sp->exec(dev, c, NULL, &st) != 0 || st != 0) {
		CHECK(false, "%s: refused (status %d)", what, st);
		return false;
	}
	for (uint64_t o = 0; o < bump - BASE; o++) {
		uint64_t a = BASE + o;
		bool w = false;

		if (before[o] == ((uint8_t *)(uintptr_t)BASE)[o])
			continue;
		for (uint32_t i = 0; i < n && !w; i++)
			w = r[i].write && a >= r[i].addr && a < r[i].addr + r[i].len;
		if (!w) {
			CHECK(false, "%s: byte 0x%llx changed outside the write set", what, (unsigned long long)a);
			return false;
		}
	}
	return true;
}

static void random_call(int t)
{
	static double A[MAXB][MAXD][MAXD];
	int32_t vt = rng() & 1 ? PHOS_SPARSE_R_64F : PHOS_SPARSE_R_32F;
	int kind = (int)pick(0, 3);
	int64_t m = pick(1, 8), k = pick(1, 8), n = pick(1, 6);
	struct phos_sparse_call c = { .compute_type = vt, .op_a = (int32_t)pick(0, 2), .op_b = (int32_t)pick(0, 2),
				      .alpha = drand(), .beta = rng() & 1 ? 0.0 : drand() };
	char what[64];
	int bad = 0;

	bump = BASE;
	c.buffer = dev_take(PHOS_SPARSE_SIM_BUFFER);
	snprintf(what, sizeof(what), "case %d kind %d", t, kind);
	if (kind == 0) {   /* SpMV */
		int64_t ar, ac;

		c.kind = PHOS_SPARSE_SPMV;
		ar = c.op_a == PHOS_SPARSE_OP_N ? m : k;
		ac = c.op_a == PHOS_SPARSE_OP_N ? k : m;
		make_sparse(&c.sp, ar, ac, 1, vt, A);
		make_vec(&c.d[0], k, vt);
		make_vec(&c.d[1], m, vt);
		for (int64_t i = 0; i < k; i++)
			put(c.d[0].values, vt, i, drand());
		for (int64_t i = 0; i < m; i++)
			put(c.d[1].values, vt, i, c.beta != 0 ? drand() : NAN);
		double old[MAXD];
		for (int64_t i = 0; i < m; i++)
			old[i] = get(c.d[1].values, vt, i);
		if (!run_checked(&c, what))
			return;
		for (int64_t i = 0; i < m; i++) {
			double s = 0;

			for (int64_t j = 0; j < k; j++)
				s += (c.op_a == PHOS_SPARSE_OP_N ? A[0][i][j] : A[0][j][i]) * get(c.d[0].values, vt, j);
			bad += !close_to(get(c.d[1].values, vt, i), c.alpha * s + (c.beta != 0 ? c.beta * old[i] : 0), vt);
		}
	} else if (kind == 1) {   /* SpMM, batched */
		int nb = (int)pick(1, MAXB), na = rng() & 1 ? nb : 1, nbb = rng() & 1 ? nb : 1;
		static double old[MAXB][MAXD][MAXD];

		if (na == 1 && nbb == 1)
			nb = 1;
		c.kind = PHOS_SPARSE_SPMM;
		make_sparse(&c.sp, c.op_a == PHOS_SPARSE_OP_N ? m : k, c.op_a == PHOS_SPARSE_OP_N ? k : m, na, vt, A);
		make_dense(&c.d[0], c.op_b == PHOS_SPARSE_OP_N ? k : n, c.op_b == PHOS_SPARSE_OP_N ? n : k, nbb, vt, true,
			   0);
		make_dense(&c.d[1], m, n, nb, vt, c.beta != 0, NAN);
		for (int b = 0; b < nb; b++)
			for (int64_t i = 0; i < m; i++)
				for (int64_t j = 0; j < n; j++)
					old[b][i][j] = at(&c.d[1], b, i, j);
		if (!run_checked(&c, what))
			return;
		for (int b = 0; b < nb; b++)
			for (int64_t i = 0; i < m; i++)
				for (int64_t j = 0; j < n; j++) {
					double s = 0;
					int ba = na == 1 ? 0 : b, bb = nbb == 1 ? 0 : b;

					for (int64_t l = 0; l < k; l++)
						s += (c.op_a == PHOS_SPARSE_OP_N ? A[ba][i][l] : A[ba][l][i]) *
						     (c.op_b == PHOS_SPARSE_OP_N ? at(&c.d[0], bb, l, j) : at(&c.d[0], bb, j, l));
					bad += !close_to(at(&c.d[1], b, i, j),
							 c.alpha * s + (c.beta != 0 ? c.beta * old[b][i][j] : 0), vt);
				}
	} else if (kind == 2) {   /* SDDMM over C's pattern (CSR) */
		static double old[MAXB][MAXD][MAXD];

		c.kind = PHOS_SPARSE_SDDMM;
		do
			make_sparse(&c.sp, m, n, 1, vt, old);
		while (c.sp.format != PHOS_SPARSE_FORMAT_CSR);
		make_dense(&c.d[0], c.op_a == PHOS_SPARSE_OP_N ? m : k, c.op_a == PHOS_SPARSE_OP_N ? k : m, 1, vt, true, 0);
		make_dense(&c.d[1], c.op_b == PHOS_SPARSE_OP_N ? k : n, c.op_b == PHOS_SPARSE_OP_N ? n : k, 1, vt, true, 0);
		if (!run_checked(&c, what))
			return;
		for (int64_t i = 0; i < m; i++) {
			int64_t lo = index_at(c.sp.offsets, c.sp.offsets_type, i) - c.sp.base;
			int64_t hi = index_at(c.sp.offsets, c.sp.offsets_type, i + 1) - c.sp.base;

			for (int64_t p = lo; p < hi; p++) {
				int64_t col = index_at(c.sp.columns, c.sp.index_type, p) - c.sp.base;
				double s = 0;

				for (int64_t l = 0; l < k; l++)
					s += (c.op_a == PHOS_SPARSE_OP_N ? at(&c.d[0], 0, i, l) : at(&c.d[0], 0, l, i)) *
					     (c.op_b == PHOS_SPARSE_OP_N ? at(&c.d[1], 0, l, col) : at(&c.d[1], 0, col, l));
				bad += !close_to(get(c.sp.values, vt, p), c.alpha * s + c.beta * old[0][i][col], vt);
			}
		}
	} else {   /* sparse to dense */
		c.kind = PHOS_SPARSE_TO_DENSE;
		make_sparse(&c.sp, m, k, 1, vt, A);
		make_dense(&c.d[0], m, k, 1, vt, false, NAN);
		if (!run_checked(&c, what))
			return;
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < k; j++)
				bad += at(&c.d[0], 0, i, j) != A[0][i][j];
	}
	CHECK(bad == 0, "%s: %d wrong elements", what, bad);
}

static void test_coo2csr(void)
{
	int32_t rows[] = { 1, 1, 2, 4, 4, 4 }, want[] = { 1, 3, 4, 4, 7, 7, 7 }, got[7];
	struct phos_sparse_call c = { .kind = PHOS_SPARSE_COO2CSR };
	int st = -1;

	bump = BASE;
	c.sp = (struct phos_sparse_spmat){ .rows = 6, .nnz = 6, .base = 1, .offsets = dev_take(sizeof(rows)),
					   .columns = dev_take(sizeof(got)) };
	/* one-based rows 1 1 2 4 4 4 of a 6-row matrix */
	memcpy((void *)(uintptr_t)c.sp.offsets, rows, sizeof(rows));
	CHECK(run_checked(&c, "coo2csr"), "coo2csr ran");
	memcpy(got, (void *)(uintptr_t)c.sp.columns, sizeof(got));
	CHECK(memcmp(got, want, sizeof(got)) == 0, "coo2csr: %d %d %d %d %d %d %d", got[0], got[1], got[2], got[3],
	      got[4], got[5], got[6]);
	rows[3] = 0;   /* not sorted */
	memcpy((void *)(uintptr_t)c.sp.offsets, rows, sizeof(rows));
	CHECK(sp->exec(dev, &c, NULL, &st) == 0 && st == PHOS_SPARSE_INVALID_VALUE, "unsorted rows: %d", st);
}

/* csrsort, coosortByRow and the identity on small arrays worked by hand;
 * their ranges. */
static void test_sorts(void)
{
	struct phos_sparse_range r[PHOS_SPARSE_RANGES];
	/* one-based CSR of 3 rows: columns 3 1 | 2 | 5 4 2 */
	int32_t off[] = { 1, 3, 4, 7 }, col[] = { 3, 1, 2, 5, 4, 2 }, perm[6], got_col[6], got_perm[6];
	int32_t want_col[] = { 1, 3, 2, 2, 4, 5 }, want_perm[] = { 1, 0, 2, 5, 4, 3 };
	/* COO rows 2 0 2 1 0 with columns 0 1 1 2 3: by row, stably */
	int32_t rows[] = { 2, 0, 2, 1, 0 }, ccol[] = { 0, 1, 1, 2, 3 }, got_rows[5];
	int32_t want_rows[] = { 0, 0, 1, 2, 2 }, want_ccol[] = { 1, 3, 2, 0, 1 }, want_cperm[] = { 1, 4, 3, 0, 2 };
	struct phos_sparse_call c = { .kind = PHOS_SPARSE_IDENTITY };
	uint32_t n = 0;

	bump = BASE;
	c.sp = (struct phos_sparse_spmat){ .nnz = 6, .values = dev_take(sizeof(perm)) };
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == 0 && n == 1 && has(r, n, c.sp.values, 24, false, true),
	      "identity's range");
	CHECK(run_checked(&c, "identity"), "identity ran");
	memcpy(perm, (void *)(uintptr_t)c.sp.values, sizeof(perm));
	for (int i = 0; i < 6; i++)
		CHECK(perm[i] == i, "identity[%d] = %d", i, perm[i]);

	uint64_t p_at = c.sp.values;   /* (P: the identity just made) */

	c = (struct phos_sparse_call){ .kind = PHOS_SPARSE_CSRSORT, .buffer = dev_take(PHOS_SPARSE_SIM_BUFFER) };
	c.sp = (struct phos_sparse_spmat){ .rows = 3, .cols = 5, .nnz = 6, .base = 1, .offsets = dev_take(sizeof(off)),
					   .columns = dev_take(sizeof(col)), .values = p_at };
	memcpy((void *)(uintptr_t)c.sp.offsets, off, sizeof(off));
	memcpy((void *)(uintptr_t)c.sp.columns, col, sizeof(col));
	CHECK(phos_sparse_ranges_of(&c, 64, r, &n) == 0 && n == 4 && has(r, n, c.sp.offsets, 16, true, false) &&
	      has(r, n, c.sp.columns, 24, true, true) && has(r, n, c.sp.values, 24, true, true) &&
	      has(r, n, c.buffer, 64, true, true), "csrsort's ranges");
	CHECK(run_checked(&c, "csrsort"), "csrsort ran");
	memcpy(got_col, (void *)(uintptr_t)c.sp.columns, sizeof(got_col));
	memcpy(got_perm, (void *)(uintptr_t)c.sp.values, sizeof(got_perm));
	CHECK(!memcmp(got_col, want_col, sizeof(want_col)) && !memcmp(got_perm, want_perm, sizeof(want_perm)),
	      "csrsort: %d %d %d %d %d %d / %d %d %d %d %d %d", got_col[0], got_col[1], got_col[2], got_col[3],
	      got_col[4], got_col[5], got_perm[0], got_perm[1], got_perm[2], got_perm[3], got_perm[4], got_perm[5]);
	/* without P */
	c.sp.values = 0;
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == 0 && n == 2, "csrsort without P: %u ranges", n);

	c = (struct phos_sparse_call){ .kind = PHOS_SPARSE_COOSORT, .buffer = c.buffer };
	c.sp = (struct phos_sparse_spmat){ .rows = 3, .cols = 4, .nnz = 5, .offsets = dev_take(sizeof(rows)),
					   .columns = dev_take(sizeof(ccol)), .values = dev_take(sizeof(rows)) };
	memcpy((void *)(uintptr_t)c.sp.offsets, rows, sizeof(rows));
	memcpy((void *)(uintptr_t)c.sp.columns, ccol, sizeof(ccol));
	for (int i = 0; i < 5; i++)
		memcpy((void *)(uintptr_t)(c.sp.values + 4 * (uint64_t)i), &i, 4);
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == 0 && n == 3 && has(r, n, c.sp.offsets, 20, true, true),
	      "coosort's ranges");
	CHECK(run_checked(&c, "coosort"), "coosort ran");
	memcpy(got_rows, (void *)(uintptr_t)c.sp.offsets, sizeof(got_rows));
	memcpy(got_col, (void *)(uintptr_t)c.sp.columns, sizeof(ccol));
	memcpy(got_perm, (void *)(uintptr_t)c.sp.values, sizeof(ccol));
	CHECK(!memcmp(got_rows, want_rows, sizeof(want_rows)) && !memcmp(got_col, want_ccol, sizeof(want_ccol)) &&
	      !memcmp(got_perm, want_cperm, sizeof(want_cperm)), "coosort: rows %d %d %d %d %d, perm %d %d %d %d %d",
	      got_rows[0], got_rows[1], got_rows[2], got_rows[3], got_rows[4], got_perm[0], got_perm[1], got_perm[2],
	      got_perm[3], got_perm[4]);
	c.sp.nnz = 1ll << 31;
	CHECK(phos_sparse_ranges_of(&c, 0, r, &n) == PHOS_SPARSE_INVALID_VALUE, "coosort of 2^31 entries");
}

/* A random CSR matrix of one batch (make_sparse until it draws CSR). */
static void make_csr(struct phos_sparse_spmat *s, int64_t rows, int64_t cols, int32_t vt, double dense[MAXB][MAXD][MAXD])
{
	do
		make_sparse(s, rows, cols, 1, vt, dense);
	while (s->format != PHOS_SPARSE_FORMAT_CSR);
}

/* SpGEMM: C's count, then C = alpha A B written inside its set, each row's
 * columns ascending, each value the dense product's; and what is refused. */
static void random_spgemm(int t)
{
	static double A[MAXB][MAXD][MAXD], B[MAXB][MAXD][MAXD];
	int32_t vt = rng() & 1 ? PHOS_SPARSE_R_64F : PHOS_SPARSE_R_32F;
	int64_t m = pick(1, 8), k = pick(1, 8), n = pick(1, 8), want = 0;
	int32_t ct = rng() & 1 ? PHOS_SPARSE_INDEX_64I : PHOS_SPARSE_INDEX_32I;
	struct phos_sparse_call c = { .kind = PHOS_SPARSE_SPGEMM_NNZ, .compute_type = vt, .alpha = drand(),
				      .alg = (int32_t)pick(0, 3) };
	bool on[MAXD][MAXD] = { { false } };
	uint64_t nnz = 0;
	char what[64];
	int st = -1;

	bump = BASE;
	snprintf(what, sizeof(what), "spgemm case %d", t);
	make_csr(&c.sp, m, k, vt, A);
	make_csr(&c.sp2[0], k, n, vt, B);
	/* the structure: stored entries of A and B (a stored zero counts) */
	for (int64_t i = 0; i < m; i++)
		for (int64_t p = index_at(c.sp.offsets, c.sp.offsets_type, i) - c.sp.base;
		     p < index_at(c.sp.offsets, c.sp.offsets_type, i + 1) - c.sp.base; p++) {
			int64_t kk = index_at(c.sp.columns, c.sp.index_type, p) - c.sp.base;
			const struct phos_sparse_spmat *b = &c.sp2[0];

			for (int64_t q = index_at(b->offsets, b->offsets_type, kk) - b->base;
			     q < index_at(b->offsets, b->offsets_type, kk + 1) - b->base; q++)
				on[i][index_at(b->columns, b->index_type, q) - b->base] = true;
		}
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++)
			want += on[i][j];
	c.sp2[1] = (struct phos_sparse_spmat){ .format = PHOS_SPARSE_FORMAT_CSR, .offsets_type = ct, .index_type = ct,
					       .base = (int32_t)(rng() & 1), .value_type = vt, .batch = 1, .rows = m,
					       .cols = n };
	CHECK(sp->spgemm_nnz(dev, &c, NULL, &nnz, &st) == 0 && st == 0 && nnz == (uint64_t)want,
	      "%s: nnz %llu (status %d), want %lld", what, (unsigned long long)nnz, st, (long long)want);
	struct phos_sparse_spmat *C = &c.sp2[1];
	uint32_t is = phos_sparse_index_size(ct);

	C->nnz = want;
	C->offsets = dev_take((uint64_t)(m + 1) * is);
	C->columns = dev_take((uint64_t)(want + 1) * is);
	C->values = dev_take((uint64_t)(want + 1) * phos_sparse_value_size(vt));
	c.kind = PHOS_SPARSE_SPGEMM;
	if (!run_checked(&c, what))
		return;
	for (int64_t i = 0; i < m; i++) {
		int64_t lo = index_at(C->offsets, ct, i) - C->base, hi = index_at(C->offsets, ct, i + 1) - C->base, last = -1;
		int64_t cnt = 0;

		for (int64_t j = 0; j < n; j++)
			cnt += on[i][j];
		CHECK(hi - lo == cnt, "%s: row %lld has %lld entries, want %lld", what, (long long)i, (long long)(hi - lo),
		      (long long)cnt);
		for (int64_t p = lo; p < hi && p >= 0 && hi <= want; p++) {
			int64_t j = index_at(C->columns, ct, p) - C->base;
			double sum = 0;

			CHECK(j > last && j < n && on[i][j], "%s: row %lld column %lld (after %lld)", what, (long long)i,
			      (long long)j, (long long)last);
			if (j <= last || j >= n)
				break;
			last = j;
			for (int64_t kk = 0; kk < k; kk++)
				sum += A[0][i][kk] * B[0][kk][j];
			CHECK(close_to(get(C->values, vt, p), c.alpha * sum, vt), "%s: C(%lld, %lld) %g, want %g", what,
			      (long long)i, (long long)j, get(C->values, vt, p), c.alpha * sum);
		}
	}
	/* a C of another count than the product's is refused */
	if (want > 0) {
		C->nnz = want - 1;
		CHECK(sp->exec(dev, &c, NULL, &st) == 0 && st == PHOS_SPARSE_INVALID_VALUE, "%s: C too small: %d", what,
		      st);
		C->nnz = want;
	}
	/* outside what is forwarded: NOT_SUPPORTED by the layout */
	{
		struct phos_sparse_range r[PHOS_SPARSE_RANGES];
		uint32_t nr;
		struct phos_sparse_call x = c;

		x.alg = 4;   /* ALG2 */
		CHECK(phos_sparse_ranges_of(&x, 0, r, &nr) == PHOS_SPARSE_NOT_SUPPORTED, "%s: ALG2", what);
		x = c;
		x.beta = 1;
		CHECK(phos_sparse_ranges_of(&x, 0, r, &nr) == PHOS_SPARSE_NOT_SUPPORTED, "%s: beta 1", what);
		x = c;
		x.op_a = 1;
		CHECK(phos_sparse_ranges_of(&x, 0, r, &nr) == PHOS_SPARSE_NOT_SUPPORTED, "%s: op T", what);
		x = c;
		x.sp2[1].cols = n + 1;
		CHECK(phos_sparse_ranges_of(&x, 0, r, &nr) == PHOS_SPARSE_INVALID_VALUE, "%s: C's shape", what);
		x = c;
		x.kind = PHOS_SPARSE_SPGEMM_NNZ;
		/* offsets always; columns and values when there are entries */
		uint32_t ranges = 2 + (c.sp.nnz ? 2 : 0) + (c.sp2[0].nnz ? 2 : 0);

		CHECK(phos_sparse_ranges_of(&x, 0, r, &nr) == 0 && nr == ranges,
		      "%s: the count reads A and B only (%u ranges, want %u)", what, nr, ranges);
		for (uint32_t i = 0; i < nr; i++)
			CHECK(r[i].read && !r[i].write, "%s: the count's range %u is read only", what, i);
	}
}

int main(void)
{
	struct phos_reply_sparse_version v;
	int st = -1;

	if (ops->open(0, BASE, SIZE, false, &dev) < 0 || ops->map(dev, BASE, MAPPED) < 0) {
		fprintf(stderr, "FAIL: open and map the sim device at %#llx\n", BASE);
		return 1;
	}
	CHECK(sp->version(dev, &v, &st) == 0 && st == 0 && v.version == 12603 && v.major == 12, "version %d",
	      v.version);
	test_ranges();
	test_coo2csr();
	test_sorts();
	for (int t = 0; t < 600; t++)
		random_call(t);
	for (int t = 0; t < 300; t++)
		random_spgemm(t);
	ops->close(dev);
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	return failures ? 1 : 0;
}
