/* SPDX-License-Identifier: MIT */
/*
 * The read/write set of a cuSOLVER dense call (proto.h,
 * phos_solver_ranges_of): LAPACK's argument rules checked, then each
 * operand at its exact extent. The preload checks a call with it before
 * sending (a bad one never leaves the process), the executor again with
 * the workspace it accepts, and the sim device before it runs.
 */
#include "proto.h"

struct ranges {
	struct phos_solver_range *r;
	uint32_t n;
	uint32_t esize;
	bool overflow;   /* a span past 64 bits (the 64-bit API's sizes) */
};

/* The largest size, leading dimension or workspace of c's API. */
static int64_t dim_max(const struct phos_solver_call *c)
{
	return c->x64 ? PHOS_SOLVER_X64_MAX : PHOS_SOLVER_ELEMS_MAX;
}

static bool dim_ok(const struct phos_solver_call *c, int64_t v)
{
	return v >= 0 && v <= dim_max(c);
}

/* batch column-major rows x cols matrices of leading dimension ld (ld >=
 * max(1, rows) checked by the caller), ld cols elements apart: from the
 * first's first element to the last's last. */
static void matrices(struct ranges *x, uint64_t addr, int64_t rows, int64_t cols, int64_t ld, int64_t batch, bool read,
		     bool write)
{
	uint64_t span, before;

	if (rows == 0 || cols == 0 || batch == 0)
		return;
	if (__builtin_mul_overflow((uint64_t)(cols - 1), (uint64_t)ld, &span) ||
	    __builtin_add_overflow(span, (uint64_t)rows, &span) ||
	    __builtin_mul_overflow((uint64_t)ld * (uint64_t)cols, (uint64_t)(batch - 1), &before) ||
	    __builtin_add_overflow(span, before, &span) || __builtin_mul_overflow(span, x->esize, &span)) {
		x->overflow = true;
		return;
	}
	x->r[x->n++] = (struct phos_solver_range){ addr, span, read, write };
}

static void matrix(struct ranges *x, uint64_t addr, int64_t rows, int64_t cols, int64_t ld, bool read, bool write)
{
	matrices(x, addr, rows, cols, ld, 1, read, write);
}

/* len elements of esize bytes. */
static void vector(struct ranges *x, uint64_t addr, int64_t len, uint32_t esize, bool read, bool write)
{
	uint64_t bytes;

	if (len <= 0)
		return;
	if (__builtin_mul_overflow((uint64_t)len, esize, &bytes)) {
		x->overflow = true;
		return;
	}
	x->r[x->n++] = (struct phos_solver_range){ addr, bytes, read, write };
}

static int64_t max1(int64_t v)
{
	return v > 1 ? v : 1;
}

static int64_t min2(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

/* The Jacobi calls' own rules: a Batched call's sizes, U's and V's leading
 * dimensions, the info's settings. */
static bool jacobi_ok(const struct phos_solver_call *c)
{
	bool vectors = c->jobz == PHOS_SOLVER_VECTOR;

	if (c->x64 || (c->jobz != PHOS_SOLVER_NOVECTOR && !vectors) || c->tol < 0 || c->max_sweeps < 0 ||
	    (c->sort != 0 && c->sort != 1) || c->batch < 0 || c->batch > PHOS_SOLVER_BATCH_MAX ||
	    (c->batch && (c->m > PHOS_SOLVER_BATCHED_DIM || c->n > PHOS_SOLVER_BATCHED_DIM)))
		return false;
	if (c->kind == PHOS_SOLVER_SYEVJ)
		return phos_solver_uplo_ok(c->uplo) && c->lda >= max1(c->n);
	return (c->econ == 0 || (c->econ == 1 && !c->batch)) && c->lda >= max1(c->m) &&
	       (!vectors || (dim_ok(c, c->ldu) && dim_ok(c, c->ldv) && c->ldu >= max1(c->m) && c->ldv >= max1(c->n)));
}

/* The arguments of c, LAPACK's rules (the values it would answer -i for). */
static bool args_ok(const struct phos_solver_call *c)
{
	int64_t nq = c->side == PHOS_SOLVER_LEFT ? c->m : c->n;

	if (!dim_ok(c, c->m) || !dim_ok(c, c->n) || !dim_ok(c, c->k) || !dim_ok(c, c->nrhs) || !dim_ok(c, c->lda) ||
	    !dim_ok(c, c->ldb) || (c->x64 && (c->kind == PHOS_SOLVER_ORGQR || c->kind == PHOS_SOLVER_ORMQR)))
		return false;
	switch (c->kind) {
	case PHOS_SOLVER_GETRF: case PHOS_SOLVER_GEQRF:
		return c->lda >= max1(c->m);
	case PHOS_SOLVER_GETRS:
		return c->trans >= PHOS_SOLVER_OP_N && c->trans <= PHOS_SOLVER_OP_C && c->lda >= max1(c->n) &&
		       c->ldb >= max1(c->n);
	case PHOS_SOLVER_POTRF:
		return phos_solver_uplo_ok(c->uplo) && c->lda >= max1(c->n);
	case PHOS_SOLVER_POTRS:
		return phos_solver_uplo_ok(c->uplo) && c->lda >= max1(c->n) && c->ldb >= max1(c->n);
	case PHOS_SOLVER_ORGQR:
		return c->n <= c->m && c->k <= c->n && c->lda >= max1(c->m);
	case PHOS_SOLVER_ORMQR:
		return (c->side == PHOS_SOLVER_LEFT || c->side == PHOS_SOLVER_RIGHT) &&
		       (c->trans == PHOS_SOLVER_OP_N || c->trans == PHOS_SOLVER_OP_T) && c->k <= nq &&
		       c->lda >= max1(nq) && c->ldb >= max1(c->m);
	case PHOS_SOLVER_SYEVD:   /* (batched: the 64-bit API's XsyevBatched) */
		return (c->jobz == PHOS_SOLVER_NOVECTOR || c->jobz == PHOS_SOLVER_VECTOR) &&
		       phos_solver_uplo_ok(c->uplo) && c->lda >= max1(c->n) &&
		       (c->batch == 0 || (c->x64 && c->batch >= 1 && c->batch <= PHOS_SOLVER_BATCH_MAX));
	case PHOS_SOLVER_SYEVJ: case PHOS_SOLVER_GESVDJ:
		return jacobi_ok(c);
	case PHOS_SOLVER_POTRF_BATCHED: case PHOS_SOLVER_POTRS_BATCHED:
		return !c->x64 && phos_solver_uplo_ok(c->uplo) && c->lda >= max1(c->n) && c->batch >= 1 &&
		       c->batch <= PHOS_SOLVER_ARRAY_MAX &&
		       (c->kind == PHOS_SOLVER_POTRF_BATCHED || (c->nrhs == 1 && c->ldb >= max1(c->n)));
	default:
		return false;
	}
}

/* The operands of c but info and the workspace. */
static void operands(const struct phos_solver_call *c, struct ranges *x)
{
	int64_t mn = min2(c->m, c->n), nq = c->side == PHOS_SOLVER_LEFT ? c->m : c->n, b = c->batch ? c->batch : 1;

	switch (c->kind) {
	case PHOS_SOLVER_GETRF:
		matrix(x, c->a, c->m, c->n, c->lda, true, true);
		if (c->ipiv)
			vector(x, c->ipiv, mn, c->x64 ? 8 : 4, false, true);
		break;
	case PHOS_SOLVER_GETRS:
		matrix(x, c->a, c->n, c->n, c->lda, true, false);
		vector(x, c->ipiv, c->n, c->x64 ? 8 : 4, true, false);
		matrix(x, c->b, c->n, c->nrhs, c->ldb, true, true);
		break;
	case PHOS_SOLVER_POTRF:
		matrix(x, c->a, c->n, c->n, c->lda, true, true);
		break;
	case PHOS_SOLVER_POTRS:
		matrix(x, c->a, c->n, c->n, c->lda, true, false);
		matrix(x, c->b, c->n, c->nrhs, c->ldb, true, true);
		break;
	case PHOS_SOLVER_GEQRF:
		matrix(x, c->a, c->m, c->n, c->lda, true, true);
		vector(x, c->tau, mn, x->esize, false, true);
		break;
	case PHOS_SOLVER_ORGQR:
		matrix(x, c->a, c->m, c->n, c->lda, true, true);
		vector(x, c->tau, c->k, x->esize, true, false);
		break;
	case PHOS_SOLVER_ORMQR:
		matrix(x, c->a, nq, c->k, c->lda, true, true);
		vector(x, c->tau, c->k, x->esize, true, false);
		matrix(x, c->b, c->m, c->n, c->ldb, true, true);
		break;
	case PHOS_SOLVER_SYEVD:
		matrices(x, c->a, c->n, c->n, c->lda, b, true, true);
		vector(x, c->w, c->n * b, x->esize, false, true);
		break;
	case PHOS_SOLVER_SYEVJ:
		matrices(x, c->a, c->n, c->n, c->lda, b, true, true);
		vector(x, c->w, c->n * b, x->esize, false, true);
		break;
	case PHOS_SOLVER_POTRF_BATCHED: case PHOS_SOLVER_POTRS_BATCHED:   /* the arrays themselves */
		vector(x, c->a, c->batch, 8, true, false);
		if (c->kind == PHOS_SOLVER_POTRS_BATCHED)
			vector(x, c->b, c->batch, 8, true, false);
		break;
	case PHOS_SOLVER_GESVDJ:
		matrices(x, c->a, c->m, c->n, c->lda, b, true, true);
		vector(x, c->w, mn * b, x->esize, false, true);
		if (c->jobz == PHOS_SOLVER_VECTOR) {
			matrices(x, c->u, c->m, c->econ ? mn : c->m, c->ldu, b, false, true);
			matrices(x, c->v, c->n, c->econ ? mn : c->n, c->ldv, b, false, true);
		}
		break;
	}
}

int phos_solver_ranges_of(const struct phos_solver_call *c, int64_t work, struct phos_solver_range *ret,
			  uint32_t *ret_n)
{
	struct ranges x = { .r = ret, .n = 0, .esize = phos_solver_esize(c->type) };

	*ret_n = 0;
	if (c->kind < PHOS_SOLVER_GETRF || c->kind >= PHOS_SOLVER__KINDS)
		return PHOS_SOLVER_INVALID_VALUE;
	if (!phos_solver_type_ok(c->type))
		return PHOS_SOLVER_NOT_SUPPORTED;
	if (!args_ok(c) || work < 0 || work > dim_max(c) || c->host_bytes < 0 ||
	    (work > 0 && (!c->work || !phos_solver_has_work(c->kind))))
		return PHOS_SOLVER_INVALID_VALUE;
	operands(c, &x);
	if (x.overflow)
		return PHOS_SOLVER_INVALID_VALUE;
	if (c->query) {   /* (a size: nothing is touched, and pointers may be 0) */
		*ret_n = x.n;
		return PHOS_SOLVER_SUCCESS;
	}
	if (!c->info || (c->kind == PHOS_SOLVER_GETRS && !c->ipiv))
		return PHOS_SOLVER_INVALID_VALUE;
	for (uint32_t i = 0; i < x.n; i++)
		if (!x.r[i].addr)
			return PHOS_SOLVER_INVALID_VALUE;
	vector(&x, c->info, c->batch && c->kind != PHOS_SOLVER_POTRS_BATCHED ? c->batch : 1, 4, false, true);
	vector(&x, c->work, work, c->x64 ? 1 : x.esize, true, true);
	*ret_n = x.n;
	return PHOS_SOLVER_SUCCESS;
}

bool phos_solver_array_spans(const struct phos_solver_call *c, uint64_t *ret_a, uint64_t *ret_b)
{
	struct phos_solver_range r[PHOS_SOLVER_RANGES];
	struct ranges x = { .r = r, .n = 0, .esize = phos_solver_esize(c->type) };
	uint32_t n;

	*ret_a = *ret_b = 0;
	if ((c->kind != PHOS_SOLVER_POTRF_BATCHED && c->kind != PHOS_SOLVER_POTRS_BATCHED) ||
	    phos_solver_ranges_of(c, 0, r, &n) != 0)
		return false;
	n = 0;
	matrix(&x, 1, c->n, c->n, c->lda, true, true);
	if (c->kind == PHOS_SOLVER_POTRS_BATCHED)
		matrix(&x, 1, c->n, c->nrhs, c->ldb, true, true);
	*ret_a = x.n > 0 ? r[0].len : 0;
	*ret_b = x.n > 1 ? r[1].len : 0;
	return !x.overflow;
}
