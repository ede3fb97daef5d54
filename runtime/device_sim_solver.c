/* SPDX-License-Identifier: MIT */
/*
 * cuSOLVER's dense API for the sim device (solver_dev.h): a plain
 * reference on the host, in double whatever the type, results rounded to
 * it once, with LAPACK's conventions so that a program reads the same
 * outputs as from cuSOLVER:
 *
 *   getrf  right-looking LU with partial pivoting (ipiv 1-based; without
 *          ipiv no pivoting), info the first zero pivot (1-based)
 *   getrs  op(A) X = B with getrf's factors and row swaps
 *   potrf  column Cholesky of the uplo triangle (the other is not touched),
 *          info the order of the first minor not positive definite
 *   potrs  A X = B with potrf's factor
 *   geqrf  Householder QR as dgeqr2: R on and above the diagonal, each
 *          reflector's v below it (v(0) = 1 implied), tau
 *   orgqr  Q = H(1) ... H(k), its first n columns
 *   ormqr  op(Q) C or C op(Q) (A is read only here)
 *   syevd  cyclic Jacobi on the uplo triangle made symmetric: eigenvalues
 *          ascending in w, orthonormal eigenvectors in A's columns (jobz
 *          VECTOR; with NOVECTOR A is left as it was); info 1 when 100
 *          sweeps do not converge
 *
 * Workspaces are PHOS_SOLVER_SIM_LWORK elements, never touched. A call of
 * more than SIM_SOLVER_ELEMS elements of scratch is
 * CUSOLVER_STATUS_ALLOC_FAILED.
 */
#include "device_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "solver_dev.h"

#define SIM_SOLVER_ELEMS (1ll << 26)   /* doubles of one operand: 512 MiB */

static int ok(int *st, int s)
{
	*st = s;
	return 0;
}

static void *ptr(uint64_t a)
{
	return (void *)(uintptr_t)a;
}

/* A rows x cols matrix of c's type at addr (leading dimension ld) as a
 * dense column-major array of doubles (malloc'd; NULL when empty or too big). */
static double *load(const struct phos_solver_call *c, uint64_t addr, int64_t rows, int64_t cols, int64_t ld)
{
	double *x;

	if (rows <= 0 || cols <= 0 || rows * cols > SIM_SOLVER_ELEMS)
		return NULL;
	x = malloc((size_t)(rows * cols) * sizeof(double));
	for (int64_t j = 0; x && j < cols; j++)
		for (int64_t i = 0; i < rows; i++) {
			uint64_t at = addr + (uint64_t)(i + j * ld) * phos_solver_esize(c->type);

			if (c->type == PHOS_SOLVER_R_64F) {
				memcpy(&x[i + j * rows], ptr(at), 8);
			} else {
				float f;

				memcpy(&f, ptr(at), 4);
				x[i + j * rows] = f;
			}
		}
	return x;
}

static void store_one(const struct phos_solver_call *c, uint64_t at, double v)
{
	if (c->type == PHOS_SOLVER_R_64F) {
		memcpy(ptr(at), &v, 8);
	} else {
		float f = (float)v;

		memcpy(ptr(at), &f, 4);
	}
}

/* x back at addr; with tri >= 0 only the triangle tri (PHOS_SOLVER_LOWER or _UPPER). */
static void store(const struct phos_solver_call *c, uint64_t addr, const double *x, int64_t rows, int64_t cols,
		  int64_t ld, int tri)
{
	uint32_t es = phos_solver_esize(c->type);

	for (int64_t j = 0; j < cols; j++)
		for (int64_t i = 0; i < rows; i++)
			if (tri < 0 || (tri == PHOS_SOLVER_LOWER ? i >= j : i <= j))
				store_one(c, addr + (uint64_t)(i + j * ld) * es, x[i + j * rows]);
}

static void put_info(const struct phos_solver_call *c, int32_t info)
{
	memcpy(ptr(c->info), &info, 4);
}

static int64_t ipiv_at(const struct phos_solver_call *c, int64_t i)
{
	int64_t v;
	int32_t v32;

	if (c->x64) {
		memcpy(&v, ptr(c->ipiv + (uint64_t)i * 8), 8);
		return v;
	}
	memcpy(&v32, ptr(c->ipiv + (uint64_t)i * 4), 4);
	return v32;
}

static int getrf(const struct phos_solver_call *c, int *st)
{
	int64_t m = c->m, n = c->n, mn = m < n ? m : n;
	double *a = load(c, c->a, m, n, c->lda);
	int32_t info = 0;

	if (m && n && !a)
		return ok(st, PHOS_SOLVER_ALLOC_FAILED);
	for (int64_t j = 0; j < mn; j++) {
		int64_t p = j;

		for (int64_t i = j + 1; c->ipiv && i < m; i++)
			if (fabs(a[i + j * m]) > fabs(a[p + j * m]))
				p = i;
		if (c->ipiv && c->x64) {
			int64_t one = p + 1;

			memcpy(ptr(c->ipiv + (uint64_t)j * 8), &one, 8);
		} else if (c->ipiv) {
			int32_t one = (int32_t)p + 1;

			memcpy(ptr(c->ipiv + (uint64_t)j * 4), &one, 4);
		}
		for (int64_t k = 0; p != j && k < n; k++) {
			double t = a[j + k * m];

			a[j + k * m] = a[p + k * m];
			a[p + k * m] = t;
		}
		if (a[j + j * m] == 0) {
			if (!info)
				info = (int32_t)j + 1;
			continue;
		}
		for (int64_t i = j + 1; i < m; i++)
			a[i + j * m] /= a[j + j * m];
		for (int64_t k = j + 1; k < n; k++)
			for (int64_t i = j + 1; i < m; i++)
				a[i + k * m] -= a[i + j * m] * a[j + k * m];
	}
	if (a)
		store(c, c->a, a, m, n, c->lda, -1);
	free(a);
	put_info(c, info);
	return ok(st, PHOS_SOLVER_SUCCESS);
}

/* Solves with a triangle of the n x n t in place on the n x nrhs b:
 * lower or upper, transposed or not, unit diagonal or not. */
static void trsm(const double *t, int64_t n, double *b, int64_t nrhs, bool lower, bool trans, bool unit)
{
	bool forward = lower != trans;

	for (int64_t r = 0; r < nrhs; r++) {
		double *x = b + r * n;

		for (int64_t s = 0; s < n; s++) {
			int64_t i = forward ? s : n - 1 - s;
			double v = x[i];

			for (int64_t q = 0; q < s; q++) {
				int64_t k = forward ? q : n - 1 - q;

				v -= (trans ? t[k + i * n] : t[i + k * n]) * x[k];
			}
			x[i] = unit ? v : v / t[i + i * n];
		}
	}
}

static void swap_rows(double *b, int64_t n, int64_t nrhs, int64_t i, int64_t p)
{
	for (int64_t r = 0; p != i && r < nrhs; r++) {
		double t = b[i + r * n];

		b[i + r * n] = b[p + r * n];
		b[p + r * n] = t;
	}
}

/* getrs and potrs. */
static int solve(const struct phos_solver_call *c, int *st)
{
	int64_t n = c->n, nrhs = c->nrhs;
	double *a = load(c, c->a, n, n, c->lda), *b = load(c, c->b, n, nrhs, c->ldb);
	bool t = c->trans != PHOS_SOLVER_OP_N;

	if (n && nrhs && (!a || !b)) {
		free(a);
		free(b);
		return ok(st, PHOS_SOLVER_ALLOC_FAILED);
	}
	for (int64_t i = 0; c->kind == PHOS_SOLVER_GETRS && i < n; i++)
		if (ipiv_at(c, i) < 1 || ipiv_at(c, i) > n) {   /* (a GPU would read out of bounds) */
			free(a);
			free(b);
			return ok(st, PHOS_SOLVER_INVALID_VALUE);
		}
	if (b && c->kind == PHOS_SOLVER_GETRS) {
		for (int64_t i = 0; !t && i < n; i++)
			swap_rows(b, n, nrhs, i, ipiv_at(c, i) - 1);
		trsm(a, n, b, nrhs, !t, t, !t);
		trsm(a, n, b, nrhs, t, t, t);
		for (int64_t i = n - 1; t && i >= 0; i--)
			swap_rows(b, n, nrhs, i, ipiv_at(c, i) - 1);
	} else if (b) {   /* A = L L^T or U^T U */
		bool lower = c->uplo == PHOS_SOLVER_LOWER;

		trsm(a, n, b, nrhs, lower, !lower, false);
		trsm(a, n, b, nrhs, lower, lower, false);
	}
	if (b)
		store(c, c->b, b, n, nrhs, c->ldb, -1);
	free(a);
	free(b);
	put_info(c, 0);
	return ok(st, PHOS_SOLVER_SUCCESS);
}

static int potrf(const struct phos_solver_call *c, int *st)
{
	int64_t n = c->n;
	double *a = load(c, c->a, n, n, c->lda);
	bool lower = c->uplo == PHOS_SOLVER_LOWER;
	int32_t info = 0;

	if (n && !a)
		return ok(st, PHOS_SOLVER_ALLOC_FAILED);
	/* (the upper case as the lower of A^T: element (i, j) of L is (j, i) of U) */
#define L(i, j) a[lower ? (i) + (j) * n : (j) + (i) * n]
	for (int64_t j = 0; j < n && !info; j++) {
		double d = L(j, j);

		for (int64_t k = 0; k < j; k++)
			d -= L(j, k) * L(j, k);
		if (!(d > 0)) {
			L(j, j) = d;
			info = (int32_t)j + 1;
			break;
		}
		L(j, j) = sqrt(d);
		for (int64_t i = j + 1; i < n; i++) {
			double s = L(i, j);

			for (int64_t k = 0; k < j; k++)
				s -= L(i, k) * L(j, k);
			L(i, j) = s / L(j, j);
		}
	}
#undef L
	if (a)
		store(c, c->a, a, n, n, c->lda, c->uplo);
	free(a);
	put_info(c, info);
	return ok(st, PHOS_SOLVER_SUCCESS);
}

/* Applies H = I - tau v v^T (v(0) = 1, v(i) = a[i + col * lda] below) to rows
 * r0 .. m - 1 of the m x cols x from the left, or to its columns r0 ..
 * (right: x is rows x m). */
static void reflect(const double *a, int64_t lda, int64_t col, int64_t r0, double tau, double *x, int64_t m,
		    int64_t other, bool right)
{
	if (tau == 0)
		return;
	for (int64_t q = 0; q < other; q++) {
		double s = 0;

		for (int64_t i = r0; i < m; i++)
			s += (i == r0 ? 1 : a[i + col * lda]) * (right ? x[q + i * other] : x[i + q * m]);
		s *= tau;
		for (int64_t i = r0; i < m; i++) {
			double v = i == r0 ? 1 : a[i + col * lda];

			if (right)
				x[q + i * other] -= s * v;
			else
				x[i + q * m] -= s * v;
		}
	}
}

static double tau_at(const struct phos_solver_call *c, int64_t i)
{
	uint64_t at = c->tau + (uint64_t)i * phos_solver_esize(c->type);
	double d;
	float f;

	if (c->type == PHOS_SOLVER_R_64F) {
		memcpy(&d, ptr(at), 8);
		return d;
	}
	memcpy(&f, ptr(at), 4);
	return f;
}

static int geqrf(const struct phos_solver_call *c, int *st)
{
	int64_t m = c->m, n = c->n, mn = m < n ? m : n;
	double *a = load(c, c->a, m, n, c->lda);

	if (m && n && !a)
		return ok(st, PHOS_SOLVER_ALLOC_FAILED);
	for (int64_t j = 0; j < mn; j++) {   /* dlarfg, then H(j) on the columns right of j */
		double alpha = a[j + j * m], xn = 0, beta, tau = 0;

		for (int64_t i = j + 1; i < m; i++)
			xn = hypot(xn, a[i + j * m]);
		if (xn != 0) {
			beta = -copysign(hypot(alpha, xn), alpha);
			tau = (beta - alpha) / beta;
			for (int64_t i = j + 1; i < m; i++)
				a[i + j * m] /= alpha - beta;
			a[j + j * m] = beta;
		}
		store_one(c, c->tau + (uint64_t)j * phos_solver_esize(c->type), tau);
		reflect(a, m, j, j, tau, a + (j + 1) * m, m, n - j - 1, false);
	}
	if (a)
		store(c, c->a, a, m, n, c->lda, -1);
	free(a);
	put_info(c, 0);
	return ok(st, PHOS_SOLVER_SUCCESS);
}

static int orgqr(const struct phos_solver_call *c, int *st)
{
	int64_t m = c->m, n = c->n;
	double *a = load(c, c->a, m, n, c->lda), *q = m && n ? calloc((size_t)(m * n), sizeof(double)) : NULL;

	if (m && n && (!a || !q)) {
		free(a);
		free(q);
		return ok(st, PHOS_SOLVER_ALLOC_FAILED);
	}
	for (int64_t j = 0; j < n; j++)
		q[j + j * m] = 1;
	for (int64_t i = c->k - 1; i >= 0; i--)
		reflect(a, m, i, i, tau_at(c, i), q, m, n, false);
	if (q)
		store(c, c->a, q, m, n, c->lda, -1);
	free(a);
	free(q);
	put_info(c, 0);
	return ok(st, PHOS_SOLVER_SUCCESS);
}

static int ormqr(const struct phos_solver_call *c, int *st)
{
	bool left = c->side == PHOS_SOLVER_LEFT, t = c->trans != PHOS_SOLVER_OP_N;
	int64_t nq = left ? c->m : c->n, k = c->k;
	double *a = load(c, c->a, nq, k, c->lda), *x = load(c, c->b, c->m, c->n, c->ldb);
	/* Q = H(0) ... H(k-1): Q C and C Q^T apply H(k-1) first, Q^T C and C Q H(0) first */
	bool backward = left != t;

	if (c->m && c->n && k && (!a || !x)) {
		free(a);
		free(x);
		return ok(st, PHOS_SOLVER_ALLOC_FAILED);
	}
	for (int64_t s = 0; x && s < k; s++) {
		int64_t i = backward ? k - 1 - s : s;

		reflect(a, nq, i, i, tau_at(c, i), x, nq, left ? c->n : c->m, !left);
	}
	if (x)
		store(c, c->b, x, c->m, c->n, c->ldb, -1);
	free(a);
	free(x);
	put_info(c, 0);
	return ok(st, PHOS_SOLVER_SUCCESS);
}

/* Cyclic Jacobi on the symmetric n x n s (destroyed): eigenvalues in w,
 * eigenvectors in v's columns, unsorted. False when it does not converge. */
static bool jacobi(double *s, int64_t n, double *w, double *v)
{
	for (int64_t i = 0; i < n * n; i++)
		v[i] = i % (n + 1) == 0;
	for (int sweep = 0; sweep < 100; sweep++) {
		double off = 0, all = 0;

		for (int64_t j = 0; j < n; j++)
			for (int64_t i = 0; i < n; i++)
				*(i == j ? &all : &off) += s[i + j * n] * s[i + j * n];
		if (off <= 1e-30 * (all + off) || off == 0)
			goto done;
		for (int64_t p = 0; p < n - 1; p++)
			for (int64_t q = p + 1; q < n; q++) {
				double apq = s[p + q * n], theta, t, cs, sn;

				if (apq == 0)
					continue;
				theta = (s[q + q * n] - s[p + p * n]) / (2 * apq);
				t = copysign(1.0, theta) / (fabs(theta) + sqrt(theta * theta + 1));
				cs = 1 / sqrt(t * t + 1);
				sn = t * cs;
				for (int64_t k = 0; k < n; k++) {   /* columns p, q of s and v */
					double skp = s[k + p * n], skq = s[k + q * n], vkp = v[k + p * n], vkq = v[k + q * n];

					s[k + p * n] = cs * skp - sn * skq;
					s[k + q * n] = sn * skp + cs * skq;
					v[k + p * n] = cs * vkp - sn * vkq;
					v[k + q * n] = sn * vkp + cs * vkq;
				}
				for (int64_t k = 0; k < n; k++) {   /* rows p, q of s */
					double spk = s[p + k * n], sqk = s[q + k * n];

					s[p + k * n] = cs * spk - sn * sqk;
					s[q + k * n] = sn * spk + cs * sqk;
				}
			}
	}
	return false;
done:
	for (int64_t i = 0; i < n; i++)
		w[i] = s[i + i * n];
	return true;
}

static int syevd(const struct phos_solver_call *c, int *st)
{
	int64_t n = c->n;
	double *a = load(c, c->a, n, n, c->lda), *v = n ? malloc((size_t)(n * n) * sizeof(double)) : NULL;
	double *w = n ? malloc((size_t)n * sizeof(double)) : NULL;
	bool lower = c->uplo == PHOS_SOLVER_LOWER;
	int32_t info = 0;

	if (n && (!a || !v || !w)) {
		free(a);
		free(v);
		free(w);
		return ok(st, PHOS_SOLVER_ALLOC_FAILED);
	}
	for (int64_t j = 0; j < n; j++)   /* the uplo triangle, mirrored */
		for (int64_t i = 0; i < n; i++)
			if (lower ? i < j : i > j)
				a[i + j * n] = a[j + i * n];
	if (n && !jacobi(a, n, w, v))
		info = 1;
	for (int64_t i = 1; !info && i < n; i++)   /* ascending, vectors with them */
		for (int64_t j = i; j > 0 && w[j - 1] > w[j]; j--) {
			double t = w[j];

			w[j] = w[j - 1];
			w[j - 1] = t;
			for (int64_t k = 0; k < n; k++) {
				t = v[k + j * n];
				v[k + j * n] = v[k + (j - 1) * n];
				v[k + (j - 1) * n] = t;
			}
		}
	for (int64_t i = 0; !info && i < n; i++)
		store_one(c, c->w + (uint64_t)i * phos_solver_esize(c->type), w[i]);
	if (!info && n && c->jobz == PHOS_SOLVER_VECTOR)
		store(c, c->a, v, n, n, c->lda, -1);
	free(a);
	free(v);
	free(w);
	put_info(c, info);
	return ok(st, PHOS_SOLVER_SUCCESS);
}

static int sim_solver_version(struct phos_device *dev, struct phos_reply_solver_version *ret, int *st)
{
	(void)dev;
	/* what cuSOLVER of CUDA 13.0 answers (cusolver_common.h: 12.0.4) */
	*ret = (struct phos_reply_solver_version){ .version = PHOS_SOLVER_VERSION, .major = 12, .minor = 0,
						   .patch = 4 };
	return ok(st, PHOS_SOLVER_SUCCESS);
}

static int sim_solver_buffer_size(struct phos_device *dev, const struct phos_solver_call *c,
				  struct phos_reply_solver_size *ret, int *st)
{
	struct phos_solver_range r[PHOS_SOLVER_RANGES];
	uint32_t n;
	int s = phos_solver_ranges_of(c, 0, r, &n);

	(void)dev;
	ret->work = phos_solver_has_work(c->kind) ? PHOS_SOLVER_SIM_LWORK : 0;
	ret->work *= c->x64 ? phos_solver_esize(c->type) : 1;
	ret->host = 0;
	return ok(st, s);
}

static int sim_solver_exec(struct phos_device *dev, const struct phos_solver_call *c, void *stream, int *st)
{
	struct phos_solver_range r[PHOS_SOLVER_RANGES];
	uint32_t n = 0;
	int s;

	if (phos_sim_stream_check(dev, stream) < 0)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	s = phos_solver_ranges_of(c, c->lwork > 0 ? c->lwork : 0, r, &n);
	if (s)
		return ok(st, s);
	if (phos_solver_has_work(c->kind) &&
	    c->lwork < PHOS_SOLVER_SIM_LWORK * (c->x64 ? (int64_t)phos_solver_esize(c->type) : 1))
		return ok(st, PHOS_SOLVER_INVALID_VALUE);
	for (uint32_t i = 0; i < n; i++)
		if (!phos_sim_range_ok(dev, r[i].addr, r[i].len))
			return ok(st, PHOS_SOLVER_EXECUTION_FAILED);
	switch (c->kind) {
	case PHOS_SOLVER_GETRF: return getrf(c, st);
	case PHOS_SOLVER_GETRS: case PHOS_SOLVER_POTRS: return solve(c, st);
	case PHOS_SOLVER_POTRF: return potrf(c, st);
	case PHOS_SOLVER_GEQRF: return geqrf(c, st);
	case PHOS_SOLVER_ORGQR: return orgqr(c, st);
	case PHOS_SOLVER_ORMQR: return ormqr(c, st);
	case PHOS_SOLVER_SYEVD: return syevd(c, st);
	default: return ok(st, PHOS_SOLVER_INVALID_VALUE);
	}
}

const struct phos_solver_ops phos_solver_sim = {
	.version = sim_solver_version,
	.buffer_size = sim_solver_buffer_size,
	.exec = sim_solver_exec,
};
