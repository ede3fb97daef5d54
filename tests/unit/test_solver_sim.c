/* SPDX-License-Identifier: MIT */
/*
 * cuSOLVER's dense API on the sim device (runtime/device/sim/device_sim_solver.c) and
 * the rules behind the executor's read/write sets (runtime/libs/solver_layout.c,
 * phos_solver_ranges_of):
 *
 * - the ranges of a few calls worked out by hand from LAPACK's argument
 *   rules (a matrix from its first element to its last, ipiv, tau and w of
 *   their lengths, info, the workspace), and calls that must be refused
 *   (a bad leading dimension, a missing pointer, a complex type);
 * - random problems in float and double with padded leading dimensions:
 *   getrf + getrs (both transposes) solve A X = B; getrf's P L U is A;
 *   potrf (both triangles, the other left alone) + potrs; geqrf + orgqr
 *   give Q R = A with Q orthonormal, ormqr's four forms agree with the
 *   explicit Q; syevd gives A V = V diag(w), w ascending, V orthonormal;
 *   singular and indefinite matrices give LAPACK's info. Every byte of the
 *   device memory outside a call's write ranges is unchanged: the sim
 *   writes inside the set the executor declares.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "solver_dev.h"

#define BASE 0x530000000000ull   /* clear of ASan's allocator */
#define SIZE (1ull << 30)
#define MAPPED (4ull << 20)
#define MAXD 9

static const struct phos_device_ops *ops = &phos_device_sim;
static const struct phos_solver_ops *sv = &phos_solver_sim;
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

static uint64_t bump;

static uint64_t dev_take(uint64_t bytes)
{
	uint64_t a = bump;

	bump += (bytes + 255) & ~255ull;
	return a;
}

static double get(uint64_t base, int32_t type, int64_t i)
{
	return type == PHOS_SOLVER_R_64F ? ((const double *)(uintptr_t)base)[i] : ((const float *)(uintptr_t)base)[i];
}

static void put(uint64_t base, int32_t type, int64_t i, double v)
{
	if (type == PHOS_SOLVER_R_64F)
		((double *)(uintptr_t)base)[i] = v;
	else
		((float *)(uintptr_t)base)[i] = (float)v;
}

static int32_t geti(uint64_t base, int64_t i)
{
	return ((const int32_t *)(uintptr_t)base)[i];
}

/* Pivot i of c: int64_t in the 64-bit API. */
static int64_t pivot(const struct phos_solver_call *c, int64_t i)
{
	return c->x64 ? ((const int64_t *)(uintptr_t)c->ipiv)[i] : geti(c->ipiv, i);
}

static bool close_to(double got, double want, int32_t t)
{
	return fabs(got - want) <= (t == PHOS_SOLVER_R_64F ? 1e-10 : 2e-3) * (1 + fabs(want));
}

/* --- hand-worked ranges --- */

static bool range_is(const struct phos_solver_range *r, uint64_t addr, uint64_t len, bool read, bool write)
{
	return r->addr == addr && r->len == len && r->read == read && r->write == write;
}

static void test_ranges(void)
{
	struct phos_solver_range r[PHOS_SOLVER_RANGES];
	struct phos_solver_call c = { .kind = PHOS_SOLVER_GETRF, .type = PHOS_SOLVER_R_32F, .m = 5, .n = 4, .lda = 7,
				      .a = 0x1000, .ipiv = 0x2000, .info = 0x3000, .work = 0x4000 };
	uint32_t n = 0;

	/* A 5 x 4, lda 7: (4 - 1) 7 + 5 floats; ipiv min(5, 4) ints; info; 64 floats of workspace */
	CHECK(phos_solver_ranges_of(&c, 64, r, &n) == 0 && n == 4 && range_is(&r[0], 0x1000, 26 * 4, true, true) &&
	      range_is(&r[1], 0x2000, 16, false, true) && range_is(&r[2], 0x3000, 4, false, true) &&
	      range_is(&r[3], 0x4000, 256, true, true), "getrf: %u ranges", n);
	c.ipiv = 0;   /* no pivoting */
	CHECK(phos_solver_ranges_of(&c, 64, r, &n) == 0 && n == 3, "getrf without ipiv: %u ranges", n);
	c.lda = 4;
	CHECK(phos_solver_ranges_of(&c, 64, r, &n) == PHOS_SOLVER_INVALID_VALUE, "getrf with lda < m");
	c.lda = 7;
	c.info = 0;
	CHECK(phos_solver_ranges_of(&c, 64, r, &n) == PHOS_SOLVER_INVALID_VALUE, "getrf without info");
	c.query = 1;
	c.a = 0;
	CHECK(phos_solver_ranges_of(&c, 0, r, &n) == 0, "a query names no pointer");
	/* the 64-bit API: int64_t pivots, the workspace in bytes, sizes past 2^31 */
	c = (struct phos_solver_call){ .kind = PHOS_SOLVER_GETRF, .type = PHOS_SOLVER_R_64F, .x64 = 1, .m = 5, .n = 4,
				       .lda = 7, .a = 0x1000, .ipiv = 0x2000, .info = 0x3000, .work = 0x4000 };
	CHECK(phos_solver_ranges_of(&c, 100, r, &n) == 0 && n == 4 && range_is(&r[0], 0x1000, 26 * 8, true, true) &&
	      range_is(&r[1], 0x2000, 32, false, true) && range_is(&r[3], 0x4000, 100, true, true),
	      "Xgetrf: %u ranges", n);
	c.m = c.lda = 1ll << 32;
	c.n = 1;
	CHECK(phos_solver_ranges_of(&c, 0, r, &n) == 0 && r[0].len == (1ull << 35), "Xgetrf of 2^32 rows");
	c.n = 1ll << 40;
	c.lda = c.m = 1ll << 40;
	CHECK(phos_solver_ranges_of(&c, 0, r, &n) == PHOS_SOLVER_INVALID_VALUE, "Xgetrf past 64 bits");
	c.x64 = 0;
	c.m = c.lda = 1ll << 32;
	c.n = 1;
	CHECK(phos_solver_ranges_of(&c, 0, r, &n) == PHOS_SOLVER_INVALID_VALUE, "getrf of 2^32 rows (ints)");
	c = (struct phos_solver_call){ .kind = PHOS_SOLVER_ORGQR, .type = PHOS_SOLVER_R_64F, .x64 = 1, .m = 2, .n = 2,
				       .lda = 2, .a = 0x1000, .tau = 0x2000, .info = 0x3000 };
	CHECK(phos_solver_ranges_of(&c, 0, r, &n) == PHOS_SOLVER_INVALID_VALUE, "no orgqr in the 64-bit API");
	c = (struct phos_solver_call){ .kind = PHOS_SOLVER_GETRF, .type = 4 /* CUDA_C_32F */, .m = 2, .n = 2,
				       .lda = 2, .a = 0x1000, .info = 0x3000 };
	CHECK(phos_solver_ranges_of(&c, 0, r, &n) == PHOS_SOLVER_NOT_SUPPORTED, "a complex getrf");

	/* getrs in double: A read, ipiv read, B 6 x 2 with ldb 8 read and written, no workspace */
	c = (struct phos_solver_call){ .kind = PHOS_SOLVER_GETRS, .type = PHOS_SOLVER_R_64F, .trans = PHOS_SOLVER_OP_T,
				       .n = 6, .nrhs = 2, .lda = 6, .ldb = 8, .a = 0x1000, .ipiv = 0x2000,
				       .b = 0x5000, .info = 0x3000 };
	CHECK(phos_solver_ranges_of(&c, 0, r, &n) == 0 && n == 4 && range_is(&r[0], 0x1000, 36 * 8, true, false) &&
	      range_is(&r[1], 0x2000, 24, true, false) && range_is(&r[2], 0x5000, 14 * 8, true, true) &&
	      range_is(&r[3], 0x3000, 4, false, true), "getrs: %u ranges", n);
	CHECK(phos_solver_ranges_of(&c, 8, r, &n) == PHOS_SOLVER_INVALID_VALUE, "getrs with a workspace");
	c.ipiv = 0;
	CHECK(phos_solver_ranges_of(&c, 0, r, &n) == PHOS_SOLVER_INVALID_VALUE, "getrs without ipiv");

	/* ormqr from the right: A is n x k (n = 3, lda 3), C 4 x 3 */
	c = (struct phos_solver_call){ .kind = PHOS_SOLVER_ORMQR, .type = PHOS_SOLVER_R_32F, .side = PHOS_SOLVER_RIGHT,
				       .trans = PHOS_SOLVER_OP_T, .m = 4, .n = 3, .k = 2, .lda = 3, .ldb = 4,
				       .a = 0x1000, .tau = 0x2000, .b = 0x5000, .info = 0x3000, .work = 0x4000 };
	CHECK(phos_solver_ranges_of(&c, 10, r, &n) == 0 && n == 5 && range_is(&r[0], 0x1000, 6 * 4, true, true) &&
	      range_is(&r[1], 0x2000, 8, true, false) && range_is(&r[2], 0x5000, 12 * 4, true, true) &&
	      range_is(&r[4], 0x4000, 40, true, true), "ormqr: %u ranges", n);
	c.k = 4;   /* more reflectors than C's columns */
	CHECK(phos_solver_ranges_of(&c, 10, r, &n) == PHOS_SOLVER_INVALID_VALUE, "ormqr with k > n");
	c.k = 2;
	c.trans = PHOS_SOLVER_OP_C;
	CHECK(phos_solver_ranges_of(&c, 10, r, &n) == PHOS_SOLVER_INVALID_VALUE, "a real ormqr takes N or T");

	/* syevd: w written, A read and written; an empty problem only writes info */
	c = (struct phos_solver_call){ .kind = PHOS_SOLVER_SYEVD, .type = PHOS_SOLVER_R_64F, .jobz = PHOS_SOLVER_VECTOR,
				       .uplo = PHOS_SOLVER_UPPER, .n = 3, .lda = 5, .a = 0x1000, .w = 0x2000,
				       .info = 0x3000, .work = 0x4000 };
	CHECK(phos_solver_ranges_of(&c, 1, r, &n) == 0 && n == 4 && range_is(&r[0], 0x1000, 13 * 8, true, true) &&
	      range_is(&r[1], 0x2000, 24, false, true), "syevd: %u ranges", n);
	c.n = 0;
	CHECK(phos_solver_ranges_of(&c, 0, r, &n) == 0 && n == 1 && range_is(&r[0], 0x3000, 4, false, true),
	      "syevd of n 0: %u ranges", n);
	c.n = 3;
	c.uplo = 2;
	CHECK(phos_solver_ranges_of(&c, 1, r, &n) == PHOS_SOLVER_INVALID_VALUE, "syevd with a bad uplo");
	c.uplo = PHOS_SOLVER_LOWER;
	c.work = 0;
	CHECK(phos_solver_ranges_of(&c, 1, r, &n) == PHOS_SOLVER_INVALID_VALUE, "syevd: a workspace at 0");
	c.n = 1ll << 31;
	CHECK(phos_solver_ranges_of(&c, 0, r, &n) == PHOS_SOLVER_INVALID_VALUE, "syevd of n 2^31");
}

/* The Jacobi calls' ranges: U and V written only (none without vectors), a
 * batch's operands batch times, info an int per matrix. */
static void test_ranges_jacobi(void)
{
	struct phos_solver_range r[PHOS_SOLVER_RANGES];
	struct phos_solver_call c;
	uint32_t n = 0;

	/* gesvdj, economy: A 5 x 3 (lda 6), S 3, U 5 x 3 (ldu 5), V 3 x 3 (ldv 4) */
	c = (struct phos_solver_call){ .kind = PHOS_SOLVER_GESVDJ, .type = PHOS_SOLVER_R_32F, .jobz = PHOS_SOLVER_VECTOR,
				       .econ = 1, .m = 5, .n = 3, .lda = 6, .ldu = 5, .ldv = 4, .a = 0x1000, .w = 0x2000,
				       .u = 0x3000, .v = 0x4000, .info = 0x5000, .work = 0x6000, .sort = 1 };
	CHECK(phos_solver_ranges_of(&c, 8, r, &n) == 0 && n == 6 && range_is(&r[0], 0x1000, 17 * 4, true, true) &&
	      range_is(&r[1], 0x2000, 12, false, true) && range_is(&r[2], 0x3000, 15 * 4, false, true) &&
	      range_is(&r[3], 0x4000, 11 * 4, false, true) && range_is(&r[4], 0x5000, 4, false, true),
	      "gesvdj: %u ranges", n);
	c.jobz = PHOS_SOLVER_NOVECTOR;   /* U and V not referenced */
	CHECK(phos_solver_ranges_of(&c, 8, r, &n) == 0 && n == 4, "gesvdj without vectors: %u ranges", n);
	/* gesvdjBatched: 3 matrices of 4 x 2, lda 4; U 4 x 4, V 2 x 2; info 3 ints */
	c = (struct phos_solver_call){ .kind = PHOS_SOLVER_GESVDJ, .type = PHOS_SOLVER_R_64F, .jobz = PHOS_SOLVER_VECTOR,
				       .m = 4, .n = 2, .lda = 4, .ldu = 4, .ldv = 2, .batch = 3, .a = 0x1000,
				       .w = 0x2000, .u = 0x3000, .v = 0x4000, .info = 0x5000, .sort = 1 };
	CHECK(phos_solver_ranges_of(&c, 0, r, &n) == 0 && n == 5 && range_is(&r[0], 0x1000, 24 * 8, true, true) &&
	      range_is(&r[1], 0x2000, 6 * 8, false, true) && range_is(&r[2], 0x3000, 48 * 8, false, true) &&
	      range_is(&r[3], 0x4000, 12 * 8, false, true) && range_is(&r[4], 0x5000, 12, false, true),
	      "gesvdjBatched: %u ranges", n);
	c.econ = 1;
	CHECK(phos_solver_ranges_of(&c, 0, r, &n) == PHOS_SOLVER_INVALID_VALUE, "no economy gesvdjBatched");
	c.econ = 0;
	c.m = 33;
	c.lda = c.ldu = 33;
	CHECK(phos_solver_ranges_of(&c, 0, r, &n) == PHOS_SOLVER_INVALID_VALUE, "gesvdjBatched of 33 rows");
	/* syevjBatched: 2 matrices of 3 x 3 with lda 4, w 6, info 2 */
	c = (struct phos_solver_call){ .kind = PHOS_SOLVER_SYEVJ, .type = PHOS_SOLVER_R_32F, .jobz = PHOS_SOLVER_VECTOR,
				       .n = 3, .lda = 4, .batch = 2, .a = 0x1000, .w = 0x2000, .info = 0x5000, .sort = 1 };
	CHECK(phos_solver_ranges_of(&c, 0, r, &n) == 0 && n == 3 && range_is(&r[0], 0x1000, 23 * 4, true, true) &&
	      range_is(&r[1], 0x2000, 24, false, true) && range_is(&r[2], 0x5000, 8, false, true),
	      "syevjBatched: %u ranges", n);
	c.sort = 2;
	CHECK(phos_solver_ranges_of(&c, 0, r, &n) == PHOS_SOLVER_INVALID_VALUE, "syevj's sort is 0 or 1");
}

/* --- random problems --- */

/* The matrices a batched Cholesky's arrays name, as the executor adds them
 * (exec_solver.c): written when the call writes them. */
static uint32_t array_ranges(const struct phos_solver_call *c, struct phos_solver_range *r, uint32_t n)
{
	uint64_t span[2];

	if ((c->kind != PHOS_SOLVER_POTRF_BATCHED && c->kind != PHOS_SOLVER_POTRS_BATCHED) ||
	    !phos_solver_array_spans(c, &span[0], &span[1]))
		return n;
	for (int64_t i = 0; i < c->batch; i++) {
		r[n++] = (struct phos_solver_range){ ((uint64_t *)(uintptr_t)c->a)[i], span[0], true,
						     c->kind == PHOS_SOLVER_POTRF_BATCHED };
		if (c->kind == PHOS_SOLVER_POTRS_BATCHED)
			r[n++] = (struct phos_solver_range){ ((uint64_t *)(uintptr_t)c->b)[i], span[1], true, true };
	}
	return n;
}

/* Runs c (its workspace the sim's) and checks that only the bytes of its
 * write ranges changed. */
static bool run_checked(struct phos_solver_call *c, const char *what)
{
	static uint8_t before[MAPPED];
	struct phos_solver_range r[PHOS_SOLVER_RANGES + 8];
	uint32_t n = 0;
	int st = -1;

	c->lwork = phos_solver_has_work(c->kind) ? PHOS_SOLVER_SIM_LWORK : 0;
	c->lwork *= c->x64 ? phos_solver_esize(c->type) : 1;   /* (x64: bytes) */
	c->work = c->lwork ? dev_take((uint64_t)c->lwork * 8) : 0;
	c->info = dev_take(4 * (uint64_t)(c->batch ? c->batch : 1));
	for (int64_t i = 0; i < (c->batch ? c->batch : 1); i++)
		((int32_t *)(uintptr_t)c->info)[i] = -7;
	memcpy(before, (void *)(uintptr_t)BASE, bump - BASE);
	if (phos_solver_ranges_of(c, c->lwork, r, &n) != 0 || sv->exec(dev, c, NULL, &st) != 0 || st != 0) {
		CHECK(false, "%s: refused (status %d)", what, st);
		return false;
	}
	n = array_ranges(c, r, n);
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

static int32_t info_of(const struct phos_solver_call *c)
{
	return geti(c->info, 0);
}

/* A rows x cols matrix of random values at a new address (ld), its values
 * as stored (rounded to t) in x (column-major, ld rows). */
static uint64_t random_matrix(int32_t t, int64_t rows, int64_t cols, int64_t ld, double *x)
{
	uint64_t a = dev_take((uint64_t)(ld * cols) * 8);

	for (int64_t j = 0; j < cols; j++)
		for (int64_t i = 0; i < ld; i++) {
			put(a, t, i + j * ld, i < rows ? drand() : 1e30);   /* (the gaps: never read) */
			x[i + j * ld] = get(a, t, i + j * ld);
		}
	return a;
}

static void test_lu(int round)
{
	static double a0[MAXD * MAXD], b0[MAXD * MAXD];
	int32_t t = rng() & 1 ? PHOS_SOLVER_R_64F : PHOS_SOLVER_R_32F;
	int64_t m = pick(1, 8), n = pick(1, 8), lda = m + pick(0, 2), mn = m < n ? m : n, nrhs = pick(1, 3);
	struct phos_solver_call c = { .kind = PHOS_SOLVER_GETRF, .type = t, .m = m, .n = n, .lda = lda,
				      .x64 = rng() & 1 };
	char what[64];

	bump = BASE;
	snprintf(what, sizeof(what), "lu %d (%lld x %lld%s)", round, (long long)m, (long long)n, c.x64 ? ", x64" : "");
	c.a = random_matrix(t, m, n, lda, a0);
	c.ipiv = dev_take(8 * (uint64_t)mn);
	if (!run_checked(&c, what) || !(info_of(&c) == 0))
		return;
	for (int64_t i = 0; i < mn; i++)   /* P^T A0: the swaps in order */
		for (int64_t j = 0, p = pivot(&c, i) - 1; j < n && p != i; j++) {
			double s = a0[i + j * lda];

			a0[i + j * lda] = a0[p + j * lda];
			a0[p + j * lda] = s;
		}
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double s = 0;

			for (int64_t k = 0; k <= (i < j ? i : j) && k < mn; k++)
				s += (k == i ? 1 : get(c.a, t, i + k * lda)) * get(c.a, t, k + j * lda);
			CHECK(close_to(s, a0[i + j * lda], t), "%s: (L U)(%lld, %lld) = %g, P^T A %g", what, (long long)i,
			      (long long)j, s, a0[i + j * lda]);
		}
	if (m != n)
		return;
	/* getrs on a fresh copy of a0 factored again */
	c.a = random_matrix(t, n, n, lda, a0);
	if (!run_checked(&c, what) || info_of(&c) != 0)
		return;
	struct phos_solver_call s = { .kind = PHOS_SOLVER_GETRS, .type = t, .trans = (int32_t)pick(0, 2), .n = n,
				      .nrhs = nrhs, .lda = lda, .ldb = n + pick(0, 2), .a = c.a, .ipiv = c.ipiv,
				      .x64 = c.x64 };

	s.b = random_matrix(t, n, nrhs, s.ldb, b0);
	if (!run_checked(&s, what) || info_of(&s) != 0)
		return;
	for (int64_t r = 0; r < nrhs; r++)
		for (int64_t i = 0; i < n; i++) {
			double v = 0, scale = 1;

			for (int64_t k = 0; k < n; k++) {
				double e = (s.trans ? a0[k + i * lda] : a0[i + k * lda]) * get(s.b, t, k + r * s.ldb);

				v += e;
				scale += fabs(e);
			}
			CHECK(fabs(v - b0[i + r * s.ldb]) <= (t == PHOS_SOLVER_R_64F ? 1e-12 : 1e-4) * scale,
			      "%s: getrs (trans %d): (op(A) X)(%lld, %lld) = %g, B %g", what, s.trans, (long long)i,
			      (long long)r, v, b0[i + r * s.ldb]);
		}
}

/* A random symmetric positive definite n x n (M M^T + n I), both triangles. */
static uint64_t spd_matrix(int32_t t, int64_t n, int64_t lda, double *x)
{
	double m[MAXD * MAXD];
	uint64_t a = dev_take((uint64_t)(lda * n) * 8);

	for (int64_t i = 0; i < n * n; i++)
		m[i] = drand();
	for (int64_t j = 0; j < n; j++)
		for (int64_t i = 0; i < lda; i++) {
			double v = i == j ? (double)n : 0;

			for (int64_t k = 0; i < n && k < n; k++)
				v += m[i + k * n] * m[j + k * n];
			put(a, t, i + j * lda, i < n ? v : 1e30);
			x[i + j * lda] = get(a, t, i + j * lda);
		}
	return a;
}

static void test_cholesky(int round)
{
	static double a0[MAXD * MAXD], b0[MAXD * MAXD];
	int32_t t = rng() & 1 ? PHOS_SOLVER_R_64F : PHOS_SOLVER_R_32F;
	int64_t n = pick(1, 8), lda = n + pick(0, 2), nrhs = pick(1, 3);
	bool lower = rng() & 1;
	struct phos_solver_call c = { .kind = PHOS_SOLVER_POTRF, .type = t, .uplo = lower ? 0 : 1, .n = n, .lda = lda };
	char what[64];

	bump = BASE;
	snprintf(what, sizeof(what), "cholesky %d (n %lld, %s)", round, (long long)n, lower ? "lower" : "upper");
	c.a = spd_matrix(t, n, lda, a0);
	if (!run_checked(&c, what) || info_of(&c) != 0) {
		CHECK(false, "%s: info %d", what, info_of(&c));
		return;
	}
	for (int64_t i = 0; i < n; i++)
		for (int64_t j = 0; j < n; j++) {
			double s = 0;

			if (lower ? i < j : i > j) {   /* the other triangle is not touched */
				CHECK(get(c.a, t, i + j * lda) == a0[i + j * lda], "%s: (%lld, %lld) changed", what,
				      (long long)i, (long long)j);
				continue;
			}
			for (int64_t k = 0; k <= (i < j ? i : j); k++)   /* (L L^T or U^T U)(i, j) */
				s += lower ? get(c.a, t, i + k * lda) * get(c.a, t, j + k * lda)
					   : get(c.a, t, k + i * lda) * get(c.a, t, k + j * lda);
			CHECK(close_to(s, a0[i + j * lda], t), "%s: factor product (%lld, %lld) = %g, A %g", what,
			      (long long)i, (long long)j, s, a0[i + j * lda]);
		}
	struct phos_solver_call s = { .kind = PHOS_SOLVER_POTRS, .type = t, .uplo = c.uplo, .n = n, .nrhs = nrhs,
				      .lda = lda, .ldb = n + pick(0, 2), .a = c.a };

	s.b = random_matrix(t, n, nrhs, s.ldb, b0);
	if (!run_checked(&s, what) || info_of(&s) != 0)
		return;
	for (int64_t r = 0; r < nrhs; r++)
		for (int64_t i = 0; i < n; i++) {
			double v = 0;

			for (int64_t k = 0; k < n; k++)
				v += a0[i + k * lda] * get(s.b, t, k + r * s.ldb);
			CHECK(close_to(v, b0[i + r * s.ldb], t), "%s: potrs: (A X)(%lld, %lld) = %g, B %g", what,
			      (long long)i, (long long)r, v, b0[i + r * s.ldb]);
		}
}

/* x = C after ormqr(side, trans) on a copy of the p x q c0 (ld p) with geqrf's a. */
static void ormqr_on(const struct phos_solver_call *qr, int side, int trans, const double *c0, int64_t p, int64_t q,
		     double *x, const char *what)
{
	struct phos_solver_call o = { .kind = PHOS_SOLVER_ORMQR, .type = qr->type, .side = side, .trans = trans,
				      .m = p, .n = q, .k = qr->n, .lda = qr->lda, .ldb = p, .a = qr->a, .tau = qr->tau };

	o.b = dev_take((uint64_t)(p * q) * 8);
	for (int64_t i = 0; i < p * q; i++)
		put(o.b, qr->type, i, c0[i]);
	if (run_checked(&o, what))
		for (int64_t i = 0; i < p * q; i++)
			x[i] = get(o.b, qr->type, i);
}

static void test_qr(int round)
{
	static double a0[MAXD * MAXD], x[MAXD * MAXD], y[MAXD * MAXD];
	int32_t t = rng() & 1 ? PHOS_SOLVER_R_64F : PHOS_SOLVER_R_32F;
	int64_t m = pick(1, 8), n = pick(1, m), lda = m + pick(0, 2);
	struct phos_solver_call c = { .kind = PHOS_SOLVER_GEQRF, .type = t, .m = m, .n = n, .lda = lda };
	char what[64];

	bump = BASE;
	snprintf(what, sizeof(what), "qr %d (%lld x %lld)", round, (long long)m, (long long)n);
	c.a = random_matrix(t, m, n, lda, a0);
	c.tau = dev_take((uint64_t)n * 8);
	if (!run_checked(&c, what) || info_of(&c) != 0)
		return;
	/* Q^T A0 (ormqr left, T) is R above and 0 below; Q (Q^T A0) is A0 again */
	for (int64_t j = 0; j < n; j++)
		for (int64_t i = 0; i < m; i++)
			y[i + j * m] = a0[i + j * lda];
	ormqr_on(&c, PHOS_SOLVER_LEFT, PHOS_SOLVER_OP_T, y, m, n, x, what);
	for (int64_t j = 0; j < n; j++)
		for (int64_t i = 0; i < m; i++)
			CHECK(close_to(x[i + j * m], i <= j ? get(c.a, t, i + j * lda) : 0, t), "%s: (Q^T A)(%lld, %lld) = %g",
			      what, (long long)i, (long long)j, x[i + j * m]);
	ormqr_on(&c, PHOS_SOLVER_LEFT, PHOS_SOLVER_OP_N, x, m, n, x, what);
	for (int64_t i = 0; i < m * n; i++)
		CHECK(close_to(x[i], y[i], t), "%s: Q Q^T A = A at %lld: %g, %g", what, (long long)i, x[i], y[i]);
	/* orgqr: Q's n columns, orthonormal, Q R = A0; and C Q from the right as ormqr gives it */
	struct phos_solver_call g = { .kind = PHOS_SOLVER_ORGQR, .type = t, .m = m, .n = n, .k = n, .lda = lda,
				      .tau = c.tau };

	g.a = dev_take((uint64_t)(lda * n) * 8);
	memcpy((void *)(uintptr_t)g.a, (void *)(uintptr_t)c.a, (size_t)(lda * n) * (t == PHOS_SOLVER_R_64F ? 8 : 4));
	if (!run_checked(&g, what))
		return;
	for (int64_t i = 0; i < m; i++)
		for (int64_t j = 0; j < n; j++) {
			double qr = 0;

			for (int64_t k = 0; k <= j; k++)
				qr += get(g.a, t, i + k * lda) * get(c.a, t, k + j * lda);
			CHECK(close_to(qr, a0[i + j * lda], t), "%s: (Q R)(%lld, %lld) = %g, A %g", what, (long long)i,
			      (long long)j, qr, a0[i + j * lda]);
		}
	for (int64_t i = 0; i < n; i++)
		for (int64_t j = 0; j < n; j++) {
			double d = 0;

			for (int64_t k = 0; k < m; k++)
				d += get(g.a, t, k + i * lda) * get(g.a, t, k + j * lda);
			CHECK(close_to(d, i == j, t), "%s: (Q^T Q)(%lld, %lld) = %g", what, (long long)i, (long long)j, d);
		}
	for (int64_t i = 0; i < 2 * m; i++)   /* C: 2 x m */
		y[i] = drand();
	ormqr_on(&c, PHOS_SOLVER_RIGHT, PHOS_SOLVER_OP_N, y, 2, m, x, what);
	for (int64_t r = 0; r < 2; r++)
		for (int64_t j = 0; j < n; j++) {
			double v = 0;

			for (int64_t k = 0; k < m; k++)
				v += (t == PHOS_SOLVER_R_64F ? y[r + k * 2] : (float)y[r + k * 2]) * get(g.a, t, k + j * lda);
			CHECK(close_to(x[r + j * 2], v, t), "%s: (C Q)(%lld, %lld) = %g, want %g", what, (long long)r,
			      (long long)j, x[r + j * 2], v);
		}
	ormqr_on(&c, PHOS_SOLVER_RIGHT, PHOS_SOLVER_OP_T, x, 2, m, x, what);
	for (int64_t i = 0; i < 2 * m; i++)
		CHECK(close_to(x[i], t == PHOS_SOLVER_R_64F ? y[i] : (float)y[i], t), "%s: C Q Q^T = C at %lld", what,
		      (long long)i);
}

static void test_eigen(int round)
{
	static double a0[MAXD * MAXD];
	int32_t t = rng() & 1 ? PHOS_SOLVER_R_64F : PHOS_SOLVER_R_32F;
	int64_t n = pick(1, 8), lda = n + pick(0, 2);
	bool lower = rng() & 1, vectors = rng() % 4 != 0;
	struct phos_solver_call c = { .kind = PHOS_SOLVER_SYEVD, .type = t, .uplo = lower ? 0 : 1,
				      .jobz = vectors ? PHOS_SOLVER_VECTOR : PHOS_SOLVER_NOVECTOR, .n = n, .lda = lda };
	char what[64];

	bump = BASE;
	snprintf(what, sizeof(what), "eigen %d (n %lld, %s)", round, (long long)n, lower ? "lower" : "upper");
	c.a = random_matrix(t, n, n, lda, a0);
	for (int64_t j = 0; j < n; j++)   /* the triangle read, mirrored (the other holds its own values) */
		for (int64_t i = 0; i < n; i++)
			if (lower ? i < j : i > j)
				a0[i + j * lda] = a0[j + i * lda];
	c.w = dev_take((uint64_t)n * 8);
	if (!run_checked(&c, what) || info_of(&c) != 0)
		return;
	for (int64_t j = 1; j < n; j++)
		CHECK(get(c.w, t, j - 1) <= get(c.w, t, j), "%s: w not ascending at %lld", what, (long long)j);
	if (!vectors)
		return;
	for (int64_t j = 0; j < n; j++)
		for (int64_t i = 0; i < n; i++) {
			double av = 0, d = 0;

			for (int64_t k = 0; k < n; k++) {
				av += a0[i + k * lda] * get(c.a, t, k + j * lda);
				d += get(c.a, t, k + i * lda) * get(c.a, t, k + j * lda);
			}
			CHECK(close_to(av, get(c.w, t, j) * get(c.a, t, i + j * lda), t), "%s: (A v%lld)(%lld) = %g, w v %g",
			      what, (long long)j, (long long)i, av, get(c.w, t, j) * get(c.a, t, i + j * lda));
			CHECK(close_to(d, i == j, t), "%s: (V^T V)(%lld, %lld) = %g", what, (long long)i, (long long)j, d);
		}
}

/* syevj and syevjBatched: each matrix A v = w v, V orthonormal, sorted
 * ascending unless sort is 0. */
static void test_syevj(int round)
{
	static double a0[4][MAXD * MAXD];
	int32_t t = rng() & 1 ? PHOS_SOLVER_R_64F : PHOS_SOLVER_R_32F;
	int64_t n = pick(1, 8), lda = n + pick(0, 2), batch = rng() & 1 ? pick(1, 4) : 0, nb = batch ? batch : 1;
	struct phos_solver_call c = { .kind = PHOS_SOLVER_SYEVJ, .type = t, .uplo = (int32_t)(rng() & 1),
				      .jobz = PHOS_SOLVER_VECTOR, .n = n, .lda = lda, .batch = batch,
				      .sort = (int32_t)(rng() % 3 != 0) };
	uint32_t es = phos_solver_esize(t);
	char what[64];

	bump = BASE;
	snprintf(what, sizeof(what), "syevj %d (n %lld, batch %lld)", round, (long long)n, (long long)batch);
	c.a = dev_take((uint64_t)(lda * n * nb) * 8);
	for (int64_t b = 0; b < nb; b++)
		for (int64_t j = 0; j < n; j++)
			for (int64_t i = 0; i < n; i++) {
				double v = i < j ? drand() : 0;

				if (i <= j) {   /* symmetric: both triangles the same */
					v = i == j ? drand() : v;
					a0[b][i + j * lda] = a0[b][j + i * lda] = t == PHOS_SOLVER_R_64F ? v : (float)v;
				}
			}
	for (int64_t b = 0; b < nb; b++)
		for (int64_t j = 0; j < n; j++)
			for (int64_t i = 0; i < n; i++)
				put(c.a + (uint64_t)(b * lda * n) * es, t, i + j * lda, a0[b][i + j * lda]);
	c.w = dev_take((uint64_t)(n * nb) * 8);
	if (!run_checked(&c, what))
		return;
	for (int64_t b = 0; b < nb; b++) {
		uint64_t a = c.a + (uint64_t)(b * lda * n) * es, w = c.w + (uint64_t)(b * n) * es;

		CHECK(geti(c.info, b) == 0, "%s: info[%lld] %d", what, (long long)b, geti(c.info, b));
		for (int64_t j = 1; c.sort && j < n; j++)
			CHECK(get(w, t, j - 1) <= get(w, t, j), "%s: w not ascending", what);
		for (int64_t j = 0; j < n; j++)
			for (int64_t i = 0; i < n; i++) {
				double av = 0, d = 0;

				for (int64_t k = 0; k < n; k++) {
					av += a0[b][i + k * lda] * get(a, t, k + j * lda);
					d += get(a, t, k + i * lda) * get(a, t, k + j * lda);
				}
				CHECK(close_to(av, get(w, t, j) * get(a, t, i + j * lda), t), "%s: A v", what);
				CHECK(close_to(d, i == j, t), "%s: V^T V", what);
			}
	}
}

/* gesvdj and gesvdjBatched: U diag(s) V^T = A, s descending, U and V
 * orthonormal (full or economy). */
static void test_gesvdj(int round)
{
	static double a0[4][MAXD * MAXD];
	int32_t t = rng() & 1 ? PHOS_SOLVER_R_64F : PHOS_SOLVER_R_32F;
	int64_t m = pick(1, 8), n = pick(1, 8), k = m < n ? m : n, batch = rng() & 1 ? pick(1, 3) : 0;
	int64_t nb = batch ? batch : 1, lda = m + pick(0, 2);
	struct phos_solver_call c = { .kind = PHOS_SOLVER_GESVDJ, .type = t, .jobz = PHOS_SOLVER_VECTOR,
				      .econ = batch ? 0 : (int32_t)(rng() & 1), .m = m, .n = n, .lda = lda,
				      .ldu = m + pick(0, 1), .ldv = n + pick(0, 1), .batch = batch, .sort = 1 };
	int64_t uc = c.econ ? k : m, vc = c.econ ? k : n;
	uint32_t es = phos_solver_esize(t);
	char what[80];

	bump = BASE;
	snprintf(what, sizeof(what), "gesvdj %d (%lld x %lld, econ %d, batch %lld)", round, (long long)m, (long long)n,
		 c.econ, (long long)batch);
	c.a = dev_take((uint64_t)(lda * n * nb) * 8);
	c.w = dev_take((uint64_t)(k * nb) * 8);
	c.u = dev_take((uint64_t)(c.ldu * m * nb) * 8);
	c.v = dev_take((uint64_t)(c.ldv * n * nb) * 8);
	for (int64_t b = 0; b < nb; b++)
		for (int64_t j = 0; j < n; j++)
			for (int64_t i = 0; i < m; i++) {
				put(c.a + (uint64_t)(b * lda * n) * es, t, i + j * lda, drand());
				a0[b][i + j * lda] = get(c.a + (uint64_t)(b * lda * n) * es, t, i + j * lda);
			}
	if (!run_checked(&c, what))
		return;
	for (int64_t b = 0; b < nb; b++) {
		uint64_t s = c.w + (uint64_t)(b * k) * es, u = c.u + (uint64_t)(b * c.ldu * m) * es;
		uint64_t v = c.v + (uint64_t)(b * c.ldv * n) * es;

		CHECK(geti(c.info, b) == 0, "%s: info[%lld] %d", what, (long long)b, geti(c.info, b));
		for (int64_t j = 1; j < k; j++)
			CHECK(get(s, t, j - 1) >= get(s, t, j) && get(s, t, j) >= 0, "%s: s not descending", what);
		for (int64_t i = 0; i < m; i++)
			for (int64_t j = 0; j < n; j++) {
				double x = 0;

				for (int64_t q = 0; q < k; q++)
					x += get(u, t, i + q * c.ldu) * get(s, t, q) * get(v, t, j + q * c.ldv);
				CHECK(close_to(x, a0[b][i + j * lda], t), "%s: (U S V^T)(%lld, %lld) = %g, A %g", what,
				      (long long)i, (long long)j, x, a0[b][i + j * lda]);
			}
		for (int64_t i = 0; i < uc; i++)
			for (int64_t j = 0; j < uc; j++) {
				double d = 0;

				for (int64_t q = 0; q < m; q++)
					d += get(u, t, q + i * c.ldu) * get(u, t, q + j * c.ldu);
				CHECK(close_to(d, i == j, t), "%s: (U^T U)(%lld, %lld) = %g", what, (long long)i,
				      (long long)j, d);
			}
		for (int64_t i = 0; i < vc; i++)
			for (int64_t j = 0; j < vc; j++) {
				double d = 0;

				for (int64_t q = 0; q < n; q++)
					d += get(v, t, q + i * c.ldv) * get(v, t, q + j * c.ldv);
				CHECK(close_to(d, i == j, t), "%s: (V^T V)(%lld, %lld) = %g", what, (long long)i,
				      (long long)j, d);
			}
	}
}

/* potrfBatched and potrsBatched through arrays of pointers in device
 * memory: each matrix factored and solved, the arrays' ranges by hand. */
static void test_cholesky_batched(int round)
{
	static double a0[4][MAXD * MAXD], b0[4][MAXD];
	int32_t t = rng() & 1 ? PHOS_SOLVER_R_64F : PHOS_SOLVER_R_32F;
	int64_t n = pick(1, 8), lda = n + pick(0, 2), batch = pick(1, 4);
	struct phos_solver_call c = { .kind = PHOS_SOLVER_POTRF_BATCHED, .type = t, .uplo = (int32_t)(rng() & 1),
				      .n = n, .lda = lda, .batch = batch };
	struct phos_solver_range r[PHOS_SOLVER_RANGES];
	uint64_t ma[4], mb[4];
	uint32_t nr = 0;
	char what[64];

	bump = BASE;
	snprintf(what, sizeof(what), "cholesky batched %d (n %lld, batch %lld)", round, (long long)n, (long long)batch);
	c.a = dev_take((uint64_t)batch * 8);
	c.b = dev_take((uint64_t)batch * 8);
	for (int64_t i = 0; i < batch; i++) {   /* the matrices in reverse order, apart */
		ma[i] = spd_matrix(t, n, lda, a0[i]);
		mb[i] = random_matrix(t, n, 1, n, b0[i]);
		((uint64_t *)(uintptr_t)c.a)[batch - 1 - i] = ma[i];
		((uint64_t *)(uintptr_t)c.b)[batch - 1 - i] = mb[i];
	}
	c.info = 0x1;   /* (only for the ranges below) */
	CHECK(phos_solver_ranges_of(&c, 0, r, &nr) == 0 && nr == 2 && range_is(&r[0], c.a, (uint64_t)batch * 8, true,
										 false) &&
	      range_is(&r[1], 0x1, (uint64_t)batch * 4, false, true), "%s: %u ranges", what, nr);
	uint64_t barr = c.b;

	c.b = 0;
	if (!run_checked(&c, what))
		return;
	for (int64_t i = 0; i < batch; i++)
		CHECK(geti(c.info, i) == 0, "%s: info[%lld] = %d", what, (long long)i, geti(c.info, i));
	struct phos_solver_call s = c;

	s.kind = PHOS_SOLVER_POTRS_BATCHED;
	s.b = barr;
	s.nrhs = 1;
	s.ldb = n;
	if (!run_checked(&s, what))
		return;
	for (int64_t m = 0; m < batch; m++)
		for (int64_t i = 0; i < n; i++) {
			double v = 0;

			for (int64_t k = 0; k < n; k++)
				v += a0[m][i + k * lda] * get(mb[m], t, k);
			CHECK(close_to(v, b0[m][i], t), "%s: (A X)[%lld](%lld) = %g, b %g", what, (long long)m,
			      (long long)i, v, b0[m][i]);
		}
}

/* LAPACK's info: a zero pivot, a minor not positive definite. */
static void test_info(void)
{
	struct phos_solver_call c = { .kind = PHOS_SOLVER_GETRF, .type = PHOS_SOLVER_R_64F, .m = 3, .n = 3, .lda = 3 };
	const double singular[9] = { 1, 2, 3, 0, 0, 0, 4, 5, 7 }, indefinite[9] = { 1, 0, 0, 0, -1, 0, 0, 0, 1 };

	bump = BASE;
	c.a = dev_take(72);
	c.ipiv = dev_take(12);
	memcpy((void *)(uintptr_t)c.a, singular, 72);
	CHECK(run_checked(&c, "singular getrf") && info_of(&c) == 2, "getrf of a zero column 2: info %d", info_of(&c));
	c = (struct phos_solver_call){ .kind = PHOS_SOLVER_POTRF, .type = PHOS_SOLVER_R_64F, .uplo = PHOS_SOLVER_LOWER,
				       .n = 3, .lda = 3, .a = dev_take(72) };
	memcpy((void *)(uintptr_t)c.a, indefinite, 72);
	CHECK(run_checked(&c, "indefinite potrf") && info_of(&c) == 2, "potrf of diag(1, -1, 1): info %d",
	      info_of(&c));
}

int main(void)
{
	struct phos_reply_solver_version v;
	struct phos_reply_solver_size size = { -1, -1 };
	int st = -1;
	struct phos_solver_call q = { .kind = PHOS_SOLVER_SYEVD, .type = PHOS_SOLVER_R_32F, .n = 4, .lda = 4,
				      .query = 1 };

	if (ops->open(0, BASE, SIZE, false, &dev) < 0 || ops->map(dev, BASE, MAPPED) < 0) {
		fprintf(stderr, "FAIL: open and map the sim device at %#llx\n", BASE);
		return 1;
	}
	CHECK(sv->version(dev, &v, &st) == 0 && st == 0 && v.version == 12004 && v.major == 12, "version %d",
	      v.version);
	CHECK(sv->buffer_size(dev, &q, &size, &st) == 0 && st == 0 && size.work == PHOS_SOLVER_SIM_LWORK &&
	      size.host == 0, "the sim's workspace: %lld", (long long)size.work);
	q.x64 = 1;
	CHECK(sv->buffer_size(dev, &q, &size, &st) == 0 && st == 0 && size.work == PHOS_SOLVER_SIM_LWORK * 4,
	      "the sim's workspace of the 64-bit API, in bytes: %lld", (long long)size.work);
	test_ranges();
	test_ranges_jacobi();
	test_info();
	for (int t = 0; t < 300; t++) {
		test_lu(t);
		test_cholesky(t);
		test_qr(t);
		test_eigen(t);
		test_syevj(t);
		test_gesvdj(t);
		test_cholesky_batched(t);
	}
	ops->close(dev);
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	return failures ? 1 : 0;
}
