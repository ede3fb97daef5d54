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
 *   syevj  the same, each matrix of a batch, max_sweeps sweeps (100 for
 *          0), sorted when sort is 1; info n + 1 when they do not converge
 *          (the tolerance is not used: it converges to double precision)
 *   gesvdj one-sided Jacobi (Hestenes) on A, or A^T when m < n: s
 *          descending (sort 1), U and V orthonormal, completed by
 *          Gram-Schmidt where a singular value is 0 or full U, V are asked;
 *          info min(m, n) + 1 when the sweeps do not converge
 *   the 64-bit API's calls as the legacy ones, with int64_t pivots
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
 * eigenvectors in v's columns, unsorted. False when sweeps sweeps do not
 * converge. */
static bool jacobi(double *s, int64_t n, double *w, double *v, int sweeps)
{
	for (int64_t i = 0; i < n * n; i++)
		v[i] = i % (n + 1) == 0;
	for (int sweep = 0; sweep <= sweeps; sweep++) {
		double off = 0, all = 0;

		for (int64_t j = 0; j < n; j++)
			for (int64_t i = 0; i < n; i++)
				*(i == j ? &all : &off) += s[i + j * n] * s[i + j * n];
		if (off <= 1e-30 * (all + off) || off == 0)
			goto done;
		for (int64_t p = 0; sweep < sweeps && p < n - 1; p++)
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

/* Sorts w (k values) ascending or descending, the columns of the rows-row
 * x and y (either NULL) with them. */
static void sort_with(double *w, int64_t k, bool descending, double *x, int64_t xrows, double *y, int64_t yrows)
{
	for (int64_t i = 1; i < k; i++)
		for (int64_t j = i; j > 0 && (descending ? w[j - 1] < w[j] : w[j - 1] > w[j]); j--) {
			double t = w[j];

			w[j] = w[j - 1];
			w[j - 1] = t;
			for (int64_t r = 0; x && r < xrows; r++) {
				t = x[r + j * xrows];
				x[r + j * xrows] = x[r + (j - 1) * xrows];
				x[r + (j - 1) * xrows] = t;
			}
			for (int64_t r = 0; y && r < yrows; r++) {
				t = y[r + j * yrows];
				y[r + j * yrows] = y[r + (j - 1) * yrows];
				y[r + (j - 1) * yrows] = t;
			}
		}
}

static void store_vector(const struct phos_solver_call *c, uint64_t addr, const double *x, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		store_one(c, addr + (uint64_t)i * phos_solver_esize(c->type), x[i]);
}

/* One symmetric eigenproblem of c at a (w its values): its info, -1 when
 * out of memory. syevd sorts and answers 1 when it does not converge;
 * syevj sorts as c->sort says and answers n + 1 (as cuSOLVER's). */
static int32_t eigen_one(const struct phos_solver_call *c, uint64_t at, uint64_t w_at)
{
	int64_t n = c->n;
	double *a = load(c, at, n, n, c->lda), *v = malloc((size_t)(n * n) * sizeof(double));
	double *w = malloc((size_t)n * sizeof(double));
	bool lower = c->uplo == PHOS_SOLVER_LOWER, j = c->kind == PHOS_SOLVER_SYEVJ;
	int32_t info = 0;

	if (!a || !v || !w) {
		free(a);
		free(v);
		free(w);
		return -1;
	}
	for (int64_t q = 0; q < n; q++)   /* the uplo triangle, mirrored */
		for (int64_t i = 0; i < n; i++)
			if (lower ? i < q : i > q)
				a[i + q * n] = a[q + i * n];
	if (!jacobi(a, n, w, v, j && c->max_sweeps ? c->max_sweeps : 100))
		info = j ? (int32_t)n + 1 : 1;
	if (!info && (!j || c->sort))
		sort_with(w, n, false, v, n, NULL, 0);
	if (!info)
		store_vector(c, w_at, w, n);
	if (!info && c->jobz == PHOS_SOLVER_VECTOR)
		store(c, at, v, n, n, c->lda, -1);
	free(a);
	free(v);
	free(w);
	return info;
}

/* syevd, syevj and syevjBatched. */
static int eigen(const struct phos_solver_call *c, int *st)
{
	uint32_t es = phos_solver_esize(c->type);
	int64_t b = c->batch ? c->batch : 1;

	for (int64_t i = 0; i < b; i++) {
		int32_t info = c->n ? eigen_one(c, c->a + (uint64_t)(i * c->lda * c->n) * es,
						c->w + (uint64_t)(i * c->n) * es) : 0;

		if (info < 0)
			return ok(st, PHOS_SOLVER_ALLOC_FAILED);
		memcpy(ptr(c->info + (uint64_t)i * 4), &info, 4);
	}
	return ok(st, PHOS_SOLVER_SUCCESS);
}

/* Completes q (rows x cols) to orthonormal columns: those not good[j] are
 * made by Gram-Schmidt of unit vectors against the good ones. */
static void complete(double *q, int64_t rows, int64_t cols, bool *good)
{
	for (int64_t j = 0; j < cols; j++) {
		double *x = q + j * rows;

		for (int64_t e = 0; !good[j] && e < rows; e++) {
			double norm = 0;

			for (int64_t i = 0; i < rows; i++)
				x[i] = i == e;
			for (int pass = 0; pass < 2; pass++)
				for (int64_t g = 0; g < cols; g++) {
					double d = 0;

					for (int64_t i = 0; good[g] && i < rows; i++)
						d += q[i + g * rows] * x[i];
					for (int64_t i = 0; good[g] && i < rows; i++)
						x[i] -= d * q[i + g * rows];
				}
			for (int64_t i = 0; i < rows; i++)
				norm += x[i] * x[i];
			if (norm > 1e-6) {
				for (int64_t i = 0; i < rows; i++)
					x[i] /= sqrt(norm);
				good[j] = true;
			}
		}
	}
}

/* One-sided Jacobi on the r x k b (r >= k): b's columns made orthogonal by
 * rotations, accumulated in the k x k w. False when sweeps do not do it. */
static bool one_sided(double *b, int64_t r, int64_t k, double *w, int sweeps)
{
	for (int64_t i = 0; i < k * k; i++)
		w[i] = i % (k + 1) == 0;
	for (int sweep = 0; sweep < sweeps; sweep++) {
		bool rotated = false;

		for (int64_t p = 0; p < k - 1; p++)
			for (int64_t q = p + 1; q < k; q++) {
				double al = 0, be = 0, ga = 0, zeta, t, cs, sn;

				for (int64_t i = 0; i < r; i++) {
					al += b[i + p * r] * b[i + p * r];
					be += b[i + q * r] * b[i + q * r];
					ga += b[i + p * r] * b[i + q * r];
				}
				if (ga == 0 || fabs(ga) <= 1e-15 * sqrt(al * be))
					continue;
				rotated = true;
				zeta = (be - al) / (2 * ga);
				t = copysign(1.0, zeta) / (fabs(zeta) + sqrt(1 + zeta * zeta));
				cs = 1 / sqrt(1 + t * t);
				sn = cs * t;
				for (int64_t i = 0; i < r; i++) {
					double x = b[i + p * r], y = b[i + q * r];

					b[i + p * r] = cs * x - sn * y;
					b[i + q * r] = sn * x + cs * y;
				}
				for (int64_t i = 0; i < k; i++) {
					double x = w[i + p * k], y = w[i + q * k];

					w[i + p * k] = cs * x - sn * y;
					w[i + q * k] = sn * x + cs * y;
				}
			}
		if (!rotated)
			return true;
	}
	return false;
}

struct svd_at { uint64_t a, s, u, v; };

/* One SVD of c (econ or full U and V, sorted descending as c->sort says):
 * its info (min(m, n) + 1 when it does not converge, as cuSOLVER's), -1
 * when out of memory. */
static int32_t svd_one(const struct phos_solver_call *c, struct svd_at at)
{
	int64_t m = c->m, n = c->n, k = m < n ? m : n, r = m < n ? n : m, uc = c->econ ? k : m, vc = c->econ ? k : n;
	double *a = load(c, at.a, m, n, c->lda), *b = malloc((size_t)(r * k) * sizeof(double));
	double *w = malloc((size_t)(k * k) * sizeof(double)), *sv = malloc((size_t)k * sizeof(double));
	double *u = calloc((size_t)(m * m), sizeof(double)), *v = calloc((size_t)(n * n), sizeof(double));
	bool *gu = calloc((size_t)m, sizeof(bool)), *gv = calloc((size_t)n, sizeof(bool)), ok1 = true;
	int32_t info = 0;

	if (!a || !b || !w || !sv || !u || !v || !gu || !gv) {
		info = -1;
		goto out;
	}
	for (int64_t j = 0; j < k; j++)   /* b = A, or A^T when m < n */
		for (int64_t i = 0; i < r; i++)
			b[i + j * r] = m >= n ? a[i + j * m] : a[j + i * m];
	ok1 = one_sided(b, r, k, w, c->max_sweeps ? c->max_sweeps : 100);
	for (int64_t j = 0; j < k; j++) {
		double norm = 0;

		for (int64_t i = 0; i < r; i++)
			norm += b[i + j * r] * b[i + j * r];
		sv[j] = sqrt(norm);
		for (int64_t i = 0; i < r; i++)   /* b's columns normalized: U (m >= n) or V */
			b[i + j * r] = sv[j] > 0 ? b[i + j * r] / sv[j] : 0;
	}
	if (c->sort)
		sort_with(sv, k, true, b, r, w, k);
	for (int64_t j = 0; j < k; j++)
		for (int64_t i = 0; i < r; i++) {
			(m >= n ? u : v)[i + j * r] = b[i + j * r];
			(m >= n ? gu : gv)[j] = sv[j] > 0;
		}
	for (int64_t j = 0; j < k; j++)   /* w: V (m >= n) or U, k x k */
		for (int64_t i = 0; i < k; i++) {
			(m >= n ? v : u)[i + j * k] = w[i + j * k];
			(m >= n ? gv : gu)[j] = true;
		}
	complete(u, m, uc, gu);
	complete(v, n, vc, gv);
	info = ok1 ? 0 : (int32_t)k + 1;
	store_vector(c, at.s, sv, k);
	if (c->jobz == PHOS_SOLVER_VECTOR) {
		store(c, at.u, u, m, uc, c->ldu, -1);
		store(c, at.v, v, n, vc, c->ldv, -1);
	}
out:
	free(a);
	free(b);
	free(w);
	free(sv);
	free(u);
	free(v);
	free(gu);
	free(gv);
	return info;
}

/* gesvdj and gesvdjBatched. */
static int svd(const struct phos_solver_call *c, int *st)
{
	uint32_t es = phos_solver_esize(c->type);
	int64_t b = c->batch ? c->batch : 1, k = c->m < c->n ? c->m : c->n;

	for (int64_t i = 0; i < b; i++) {
		struct svd_at at = { c->a + (uint64_t)(i * c->lda * c->n) * es, c->w + (uint64_t)(i * k) * es,
				     c->u + (uint64_t)(i * c->ldu * c->m) * es, c->v + (uint64_t)(i * c->ldv * c->n) * es };
		int32_t info = k ? svd_one(c, at) : 0;

		if (info < 0)
			return ok(st, PHOS_SOLVER_ALLOC_FAILED);
		memcpy(ptr(c->info + (uint64_t)i * 4), &info, 4);
	}
	return ok(st, PHOS_SOLVER_SUCCESS);
}

/* potrfBatched and potrsBatched: each matrix the arrays name, in memory
 * the device holds (a GPU would fault on another), its info. */
static int cholesky_batched(struct phos_device *dev, const struct phos_solver_call *c, int *st)
{
	bool solve_ = c->kind == PHOS_SOLVER_POTRS_BATCHED;
	uint64_t sa, sb;

	if (!phos_solver_array_spans(c, &sa, &sb))
		return ok(st, PHOS_SOLVER_INVALID_VALUE);
	for (int64_t i = 0; i < c->batch; i++) {
		struct phos_solver_call one = *c;
		int r;

		memcpy(&one.a, ptr(c->a + (uint64_t)i * 8), 8);
		if (solve_)
			memcpy(&one.b, ptr(c->b + (uint64_t)i * 8), 8);
		if ((sa && !phos_sim_range_ok(dev, one.a, sa)) || (solve_ && sb && !phos_sim_range_ok(dev, one.b, sb)))
			return ok(st, PHOS_SOLVER_EXECUTION_FAILED);
		one.kind = solve_ ? PHOS_SOLVER_POTRS : PHOS_SOLVER_POTRF;
		one.batch = 0;
		one.info = solve_ ? c->info : c->info + (uint64_t)i * 4;
		r = solve_ ? solve(&one, st) : potrf(&one, st);
		if (r < 0 || *st)
			return r;
	}
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
	case PHOS_SOLVER_SYEVD: case PHOS_SOLVER_SYEVJ: return eigen(c, st);
	case PHOS_SOLVER_GESVDJ: return svd(c, st);
	case PHOS_SOLVER_POTRF_BATCHED: case PHOS_SOLVER_POTRS_BATCHED: return cholesky_batched(dev, c, st);
	default: return ok(st, PHOS_SOLVER_INVALID_VALUE);
	}
}

const struct phos_solver_ops phos_solver_sim = {
	.version = sim_solver_version,
	.buffer_size = sim_solver_buffer_size,
	.exec = sim_solver_exec,
};
