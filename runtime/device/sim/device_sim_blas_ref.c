/* SPDX-License-Identifier: MIT */
/*
 * Host reference of the level 1-3 routines of every precision for the sim
 * backend (phos_blas_op: axpy, scal, dot/dotc, nrm2, asum, amax/amin, copy,
 * swap, gemv, ger/gerc, trsm, trsmBatched) and of the double and complex GEMMs. Plain
 * column-major loops as reference BLAS writes them; every element is widened
 * to double complex and stored back in its own type, so one loop serves S, D,
 * C and Z. Increments follow reference BLAS (a negative increment walks the
 * vector from its far end), and cuBLAS's rules for incx <= 0 in scal, nrm2,
 * asum, amax and amin (nothing done, result 0). Each operand's extent is
 * checked with phos_sim_range_ok first, so a bad pointer gives
 * CUBLAS_STATUS_EXECUTION_FAILED, not a fault.
 */
#include "device_sim.h"

#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { T_R32 = 0, T_R64 = 1, T_C32 = 4, T_C64 = 5 };   /* cudaDataType */
enum { ST_SUCCESS = 0, ST_NOT_INITIALIZED = 1, ST_ALLOC_FAILED = 3, ST_INVALID_VALUE = 7,
       ST_EXECUTION_FAILED = 13, ST_NOT_SUPPORTED = 15 };

typedef double complex zval;

static int ret_status(int *ret_blas_status, int status)
{
	if (ret_blas_status)
		*ret_blas_status = status;
	switch (status) {
	case ST_SUCCESS:
		return 0;
	case ST_NOT_INITIALIZED:
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	case ST_ALLOC_FAILED:
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	case ST_EXECUTION_FAILED:
		return -PHOS_CUDA_ILLEGAL_ADDRESS;
	case ST_NOT_SUPPORTED:
		return -PHOS_CUDA_NOT_SUPPORTED;
	default:
		return -PHOS_CUDA_INVALID_VALUE;
	}
}

static int64_t esize(int type)
{
	switch (type) {
	case T_R32: return 4;
	case T_R64: return 8;
	case T_C32: return 8;
	case T_C64: return 16;
	default: return 0;
	}
}

static bool is_complex(int type)
{
	return type == T_C32 || type == T_C64;
}

static zval ld(const void *base, int type, int64_t i)
{
	switch (type) {
	case T_R32: return ((const float *)base)[i];
	case T_R64: return ((const double *)base)[i];
	case T_C32: return ((const float *)base)[2 * i] + I * ((const float *)base)[2 * i + 1];
	default: return ((const double *)base)[2 * i] + I * ((const double *)base)[2 * i + 1];
	}
}

static void st(void *base, int type, int64_t i, zval v)
{
	switch (type) {
	case T_R32: ((float *)base)[i] = (float)creal(v); break;
	case T_R64: ((double *)base)[i] = creal(v); break;
	case T_C32: ((float *)base)[2 * i] = (float)creal(v); ((float *)base)[2 * i + 1] = (float)cimag(v); break;
	default: ((double *)base)[2 * i] = creal(v); ((double *)base)[2 * i + 1] = cimag(v); break;
	}
}

/* Whether a rows x cols matrix (leading dimension ld) of type at addr is device memory. */
static bool mat_ok(struct phos_device *dev, uint64_t addr, int type, int64_t rows, int64_t cols, int64_t ldim)
{
	int64_t elems, bytes;

	if (rows <= 0 || cols <= 0)
		return true;
	if (__builtin_mul_overflow(cols - 1, ldim, &elems) || __builtin_add_overflow(elems, rows, &elems) ||
	    __builtin_mul_overflow(elems, esize(type), &bytes))
		return false;
	return phos_sim_range_ok(dev, addr, (uint64_t)bytes);
}

static bool vec_ok(struct phos_device *dev, uint64_t addr, int type, int64_t n, int64_t inc)
{
	return mat_ok(dev, addr, type, 1, n, inc < 0 ? -inc : inc ? inc : 1);
}

/* Element t of a strided vector of n elements (reference BLAS). */
static int64_t vi(int64_t t, int64_t n, int64_t inc)
{
	return inc >= 0 ? t * inc : (n - 1 - t) * -inc;
}

static double abs1(zval v)
{
	return fabs(creal(v)) + fabs(cimag(v));
}

/* Stores a real or complex result of type in ret (the element size of type). */
static void result_put(void *ret, int type, zval v)
{
	st(ret, type, 0, v);
}

static double nrm2(const void *x, int type, int64_t n, int64_t inc)
{
	double scale = 0.0, ssq = 1.0;

	for (int64_t t = 0; t < n; t++) {
		zval v = ld(x, type, t * inc);
		double parts[2] = { fabs(creal(v)), fabs(cimag(v)) };

		for (int k = 0; k < 2; k++) {
			double a = parts[k];

			if (a == 0.0)
				continue;
			if (scale < a) {
				ssq = 1.0 + ssq * (scale / a) * (scale / a);
				scale = a;
			} else {
				ssq += (a / scale) * (a / scale);
			}
		}
	}
	return scale * sqrt(ssq);
}

static int real_type(int type)
{
	return type == T_C32 ? T_R32 : type == T_C64 ? T_R64 : type;
}

static int level1(struct phos_device *dev, const struct phos_blas_op *op, void *ret_result)
{
	int type = op->type;
	int64_t n = op->n, ix = op->incx, iy = op->incy;
	void *x = (void *)(uintptr_t)op->x, *y = (void *)(uintptr_t)op->y;
	zval alpha = op->alpha[0] + I * op->alpha[1], sum = 0;
	bool needs_y = op->fn == PHOS_BLAS_AXPY || op->fn == PHOS_BLAS_DOT || op->fn == PHOS_BLAS_DOTC ||
		       op->fn == PHOS_BLAS_COPY || op->fn == PHOS_BLAS_SWAP;
	bool positive_inc = op->fn == PHOS_BLAS_SCAL || op->fn == PHOS_BLAS_NRM2 || op->fn == PHOS_BLAS_ASUM ||
			    op->fn == PHOS_BLAS_AMAX || op->fn == PHOS_BLAS_AMIN;
	double best = 0;
	int32_t idx = 0;

	if (n <= 0 || (positive_inc && ix <= 0)) {
		if (ret_result)
			memset(ret_result, 0, 16);
		return ST_SUCCESS;
	}
	if (!vec_ok(dev, op->x, type, n, ix) || (needs_y && !vec_ok(dev, op->y, type, n, iy)))
		return ST_EXECUTION_FAILED;
	switch (op->fn) {
	case PHOS_BLAS_AXPY:
		for (int64_t t = 0; t < n; t++)
			st(y, type, vi(t, n, iy), ld(y, type, vi(t, n, iy)) + alpha * ld(x, type, vi(t, n, ix)));
		break;
	case PHOS_BLAS_SCAL:   /* Csscal/Zdscal: a real alpha (alpha[1] is 0) */
		for (int64_t t = 0; t < n; t++)
			st(x, type, t * ix, alpha * ld(x, type, t * ix));
		break;
	case PHOS_BLAS_DOT:
	case PHOS_BLAS_DOTC:
		for (int64_t t = 0; t < n; t++) {
			zval xv = ld(x, type, vi(t, n, ix));

			sum += (op->fn == PHOS_BLAS_DOTC ? conj(xv) : xv) * ld(y, type, vi(t, n, iy));
		}
		result_put(ret_result, type, sum);
		break;
	case PHOS_BLAS_NRM2:
		result_put(ret_result, real_type(type), nrm2(x, type, n, ix));
		break;
	case PHOS_BLAS_ASUM:
		for (int64_t t = 0; t < n; t++)
			sum += abs1(ld(x, type, t * ix));
		result_put(ret_result, real_type(type), sum);
		break;
	case PHOS_BLAS_AMAX:
	case PHOS_BLAS_AMIN:
		for (int64_t t = 0; t < n; t++) {
			double a = abs1(ld(x, type, t * ix));

			if (t == 0 || (op->fn == PHOS_BLAS_AMAX ? a > best : a < best)) {
				best = a;
				idx = (int32_t)t + 1;
			}
		}
		memcpy(ret_result, &idx, sizeof(idx));
		break;
	case PHOS_BLAS_COPY:
		for (int64_t t = 0; t < n; t++)
			st(y, type, vi(t, n, iy), ld(x, type, vi(t, n, ix)));
		break;
	case PHOS_BLAS_SWAP:
		for (int64_t t = 0; t < n; t++) {
			zval a = ld(x, type, vi(t, n, ix)), b = ld(y, type, vi(t, n, iy));

			st(x, type, vi(t, n, ix), b);
			st(y, type, vi(t, n, iy), a);
		}
		break;
	}
	return ST_SUCCESS;
}

/* op(A)[i, j] for op = N, T or C (cublasOperation_t 0, 1, 2). */
static zval opa(const void *a, int type, int64_t lda, int trans, int64_t i, int64_t j)
{
	if (trans == 0)
		return ld(a, type, i + j * lda);
	return trans == 2 ? conj(ld(a, type, j + i * lda)) : ld(a, type, j + i * lda);
}

static int gemv(struct phos_device *dev, const struct phos_blas_op *op)
{
	int type = op->type;
	int64_t m = op->m, n = op->n, lenx = op->trans ? m : n, leny = op->trans ? n : m;
	zval alpha = op->alpha[0] + I * op->alpha[1], beta = op->beta[0] + I * op->beta[1];
	const void *a = (const void *)(uintptr_t)op->a, *x = (const void *)(uintptr_t)op->x;
	void *y = (void *)(uintptr_t)op->y;

	if (op->trans < 0 || op->trans > 2 || m < 0 || n < 0 || op->lda < (m > 1 ? m : 1) || !op->incx || !op->incy)
		return ST_INVALID_VALUE;
	if (!m || !n || (alpha == 0 && beta == 1))
		return ST_SUCCESS;
	if (!mat_ok(dev, op->a, type, m, n, op->lda) || !vec_ok(dev, op->x, type, lenx, op->incx) ||
	    !vec_ok(dev, op->y, type, leny, op->incy))
		return ST_EXECUTION_FAILED;
	for (int64_t i = 0; i < leny; i++) {
		zval s = 0;
		int64_t yi = vi(i, leny, op->incy);

		for (int64_t j = 0; j < lenx; j++)   /* op(A) is leny x lenx */
			s += opa(a, type, op->lda, op->trans, i, j) * ld(x, type, vi(j, lenx, op->incx));
		st(y, type, yi, alpha * s + (beta != 0 ? beta * ld(y, type, yi) : 0));
	}
	return ST_SUCCESS;
}

static int ger(struct phos_device *dev, const struct phos_blas_op *op)
{
	int type = op->type;
	int64_t m = op->m, n = op->n;
	zval alpha = op->alpha[0] + I * op->alpha[1];
	const void *x = (const void *)(uintptr_t)op->x, *y = (const void *)(uintptr_t)op->y;
	void *a = (void *)(uintptr_t)op->a;

	if (m < 0 || n < 0 || !op->incx || !op->incy || op->lda < (m > 1 ? m : 1))
		return ST_INVALID_VALUE;
	if (!m || !n || alpha == 0)
		return ST_SUCCESS;
	if (!mat_ok(dev, op->a, type, m, n, op->lda) || !vec_ok(dev, op->x, type, m, op->incx) ||
	    !vec_ok(dev, op->y, type, n, op->incy))
		return ST_EXECUTION_FAILED;
	for (int64_t j = 0; j < n; j++) {
		zval yj = ld(y, type, vi(j, n, op->incy));

		if (op->fn == PHOS_BLAS_GERC)
			yj = conj(yj);
		for (int64_t i = 0; i < m; i++)
			st(a, type, i + j * op->lda,
			   ld(a, type, i + j * op->lda) + alpha * ld(x, type, vi(i, m, op->incx)) * yj);
	}
	return ST_SUCCESS;
}

/* A symmetric (hemv: Hermitian) n x n matrix's element (i, j) from the
 * triangle uplo says is stored (0 lower, 1 upper); a Hermitian diagonal is
 * real. */
static zval sym_ld(const void *a, int type, int64_t lda, int uplo, bool herm, int64_t i, int64_t j)
{
	bool stored = uplo == 1 ? i <= j : i >= j;
	zval v = stored ? ld(a, type, i + j * lda) : ld(a, type, j + i * lda);

	if (herm)
		v = i == j ? creal(v) : stored ? v : conj(v);
	return v;
}

static int symv(struct phos_device *dev, const struct phos_blas_op *op)
{
	int type = op->type;
	int64_t n = op->n;
	bool herm = op->fn == PHOS_BLAS_HEMV;
	zval alpha = op->alpha[0] + I * op->alpha[1], beta = op->beta[0] + I * op->beta[1];
	const void *a = (const void *)(uintptr_t)op->a, *x = (const void *)(uintptr_t)op->x;
	void *y = (void *)(uintptr_t)op->y;

	if (op->uplo < 0 || op->uplo > 1 || n < 0 || op->lda < (n > 1 ? n : 1) || !op->incx || !op->incy ||
	    (herm && !is_complex(type)))
		return ST_INVALID_VALUE;
	if (!n)
		return ST_SUCCESS;
	if (!mat_ok(dev, op->a, type, n, n, op->lda) || !vec_ok(dev, op->x, type, n, op->incx) ||
	    !vec_ok(dev, op->y, type, n, op->incy))
		return ST_EXECUTION_FAILED;
	/* y is read whole before a byte of it is written: x may alias nothing here */
	for (int64_t i = 0; i < n; i++) {
		zval s = 0;
		int64_t yi = vi(i, n, op->incy);

		for (int64_t j = 0; j < n; j++)
			s += sym_ld(a, type, op->lda, op->uplo, herm, i, j) * ld(x, type, vi(j, n, op->incx));
		st(y, type, yi, alpha * s + (beta != 0 ? beta * ld(y, type, yi) : 0));
	}
	return ST_SUCCESS;
}

/* C = alpha op(A) op(A)^T (herk: ^H) + beta C on the uplo triangle of C; the
 * other triangle is not touched, and herk's diagonal comes out real. */
static int syrk(struct phos_device *dev, const struct phos_blas_op *op)
{
	int type = op->type;
	int64_t n = op->n, k = op->m;
	bool herm = op->fn == PHOS_BLAS_HERK, nt = op->trans == 0;
	zval alpha = op->alpha[0] + I * op->alpha[1], beta = op->beta[0] + I * op->beta[1];
	const void *a = (const void *)(uintptr_t)op->a;
	void *c = (void *)(uintptr_t)op->b;

	if (op->uplo < 0 || op->uplo > 1 || n < 0 || k < 0 || op->lda < ((nt ? n : k) > 1 ? (nt ? n : k) : 1) ||
	    op->ldb < (n > 1 ? n : 1) || (herm && !is_complex(type)))
		return ST_INVALID_VALUE;
	if (!n)
		return ST_SUCCESS;
	if ((k && !mat_ok(dev, op->a, type, nt ? n : k, nt ? k : n, op->lda)) || !mat_ok(dev, op->b, type, n, n, op->ldb))
		return ST_EXECUTION_FAILED;
	for (int64_t j = 0; j < n; j++)
		for (int64_t i = op->uplo == 1 ? 0 : j; i <= (op->uplo == 1 ? j : n - 1); i++) {
			zval s = 0, old = ld(c, type, i + j * op->ldb), v;

			for (int64_t p = 0; p < k; p++) {
				/* op(A)(i, p) and op(A)(j, p) */
				zval ai = nt ? ld(a, type, i + p * op->lda) : ld(a, type, p + i * op->lda);
				zval aj = nt ? ld(a, type, j + p * op->lda) : ld(a, type, p + j * op->lda);

				if (!nt && herm)   /* herk with trans C: op(A) = A^H */
					ai = conj(ai), aj = conj(aj);
				s += ai * (herm ? conj(aj) : aj);
			}
			if (herm && i == j)
				old = creal(old);
			v = alpha * s + (beta != 0 ? beta * old : 0);
			st(c, type, i + j * op->ldb, herm && i == j ? creal(v) : v);
		}
	return ST_SUCCESS;
}

/* (x, y) = (c x + s y, c y - conj(s) x), c real, s real or complex */
static int rot(struct phos_device *dev, const struct phos_blas_op *op)
{
	int type = op->type;
	int64_t n = op->n;
	double c = op->alpha[0];
	zval s = op->beta[0] + I * op->beta[1];
	void *x = (void *)(uintptr_t)op->x, *y = (void *)(uintptr_t)op->y;

	if (!op->incx || !op->incy)
		return ST_INVALID_VALUE;
	if (n <= 0)
		return ST_SUCCESS;
	if (!vec_ok(dev, op->x, type, n, op->incx) || !vec_ok(dev, op->y, type, n, op->incy))
		return ST_EXECUTION_FAILED;
	for (int64_t i = 0; i < n; i++) {
		int64_t xi = vi(i, n, op->incx), yi = vi(i, n, op->incy);
		zval xv = ld(x, type, xi), yv = ld(y, type, yi);

		st(x, type, xi, c * xv + s * yv);
		st(y, type, yi, c * yv - conj(s) * xv);
	}
	return ST_SUCCESS;
}

/* C = alpha A B + beta C (side left) or alpha B A + beta C (right), A
 * symmetric (hemm: Hermitian) in its uplo triangle. */
static int symm(struct phos_device *dev, const struct phos_blas_op *op)
{
	int type = op->type;
	int64_t m = op->m, n = op->n, ka = op->side ? n : m;
	bool herm = op->fn == PHOS_BLAS_HEMM;
	zval alpha = op->alpha[0] + I * op->alpha[1], beta = op->beta[0] + I * op->beta[1];
	const void *a = (const void *)(uintptr_t)op->a, *b = (const void *)(uintptr_t)op->b;
	void *c = (void *)(uintptr_t)op->c;

	if (op->side < 0 || op->side > 1 || op->uplo < 0 || op->uplo > 1 || m < 0 || n < 0 ||
	    op->lda < (ka > 1 ? ka : 1) || op->ldb < (m > 1 ? m : 1) || op->ldc < (m > 1 ? m : 1) ||
	    (herm && !is_complex(type)))
		return ST_INVALID_VALUE;
	if (!m || !n)
		return ST_SUCCESS;
	if (!mat_ok(dev, op->a, type, ka, ka, op->lda) || !mat_ok(dev, op->b, type, m, n, op->ldb) ||
	    !mat_ok(dev, op->c, type, m, n, op->ldc))
		return ST_EXECUTION_FAILED;
	for (int64_t j = 0; j < n; j++)
		for (int64_t i = 0; i < m; i++) {
			zval s = 0;

			for (int64_t p = 0; p < ka; p++)
				s += op->side ? ld(b, type, i + p * op->ldb) * sym_ld(a, type, op->lda, op->uplo, herm, p, j)
					      : sym_ld(a, type, op->lda, op->uplo, herm, i, p) * ld(b, type, p + j * op->ldb);
			st(c, type, i + j * op->ldc, alpha * s + (beta != 0 ? beta * ld(c, type, i + j * op->ldc) : 0));
		}
	return ST_SUCCESS;
}

/* C = alpha (op(A) op(B)^T + op(B) op(A)^T) + beta C (her2k: alpha op(A)
 * op(B)^H + conj(alpha) op(B) op(A)^H, beta real) on C's uplo triangle. */
static int syr2k(struct phos_device *dev, const struct phos_blas_op *op)
{
	int type = op->type;
	int64_t n = op->n, k = op->k;
	bool herm = op->fn == PHOS_BLAS_HER2K, nt = op->trans == 0;
	zval alpha = op->alpha[0] + I * op->alpha[1], beta = herm ? op->beta[0] : op->beta[0] + I * op->beta[1];
	const void *a = (const void *)(uintptr_t)op->a, *b = (const void *)(uintptr_t)op->b;
	void *c = (void *)(uintptr_t)op->c;
	int64_t rows = nt ? n : k;

	if (op->uplo < 0 || op->uplo > 1 || n < 0 || k < 0 || op->lda < (rows > 1 ? rows : 1) ||
	    op->ldb < (rows > 1 ? rows : 1) || op->ldc < (n > 1 ? n : 1) || (herm && !is_complex(type)))
		return ST_INVALID_VALUE;
	if (!n)
		return ST_SUCCESS;
	if ((k && (!mat_ok(dev, op->a, type, rows, nt ? k : n, op->lda) ||
		   !mat_ok(dev, op->b, type, rows, nt ? k : n, op->ldb))) ||
	    !mat_ok(dev, op->c, type, n, n, op->ldc))
		return ST_EXECUTION_FAILED;
	for (int64_t j = 0; j < n; j++)
		for (int64_t i = op->uplo == 1 ? 0 : j; i <= (op->uplo == 1 ? j : n - 1); i++) {
			zval s1 = 0, s2 = 0, old = ld(c, type, i + j * op->ldc), v;

			for (int64_t p = 0; p < k; p++) {
				/* op(X)(r, p): X(r, p) for N, X(p, r) for T, conj(X(p, r)) for C */
				zval ai = nt ? ld(a, type, i + p * op->lda) : ld(a, type, p + i * op->lda);
				zval aj = nt ? ld(a, type, j + p * op->lda) : ld(a, type, p + j * op->lda);
				zval bi = nt ? ld(b, type, i + p * op->ldb) : ld(b, type, p + i * op->ldb);
				zval bj = nt ? ld(b, type, j + p * op->ldb) : ld(b, type, p + j * op->ldb);

				if (!nt && herm)
					ai = conj(ai), aj = conj(aj), bi = conj(bi), bj = conj(bj);
				s1 += ai * (herm ? conj(bj) : bj);
				s2 += bi * (herm ? conj(aj) : aj);
			}
			if (herm && i == j)
				old = creal(old);
			v = alpha * s1 + (herm ? conj(alpha) : alpha) * s2 + (beta != 0 ? beta * old : 0);
			st(c, type, i + j * op->ldc, herm && i == j ? creal(v) : v);
		}
	return ST_SUCCESS;
}

/* Element (r, c) of op(A) for a triangular A (op's uplo, diag and trans):
 * zero outside the triangle, one on a unit diagonal. */
static zval tri_opa(const void *a, int type, const struct phos_blas_op *op, int64_t r, int64_t c)
{
	int64_t ar = op->trans ? c : r, ac = op->trans ? r : c;   /* the element of A itself */
	zval v;

	if (op->uplo == 1 ? ar > ac : ar < ac)
		return 0;
	if (ar == ac && op->diag == 1)
		return 1;
	v = ld(a, type, ar + ac * op->lda);
	return op->trans == 2 ? conj(v) : v;
}

/* C = alpha op(A) B (left) or alpha B op(A) (right), A triangular; C may be B. */
static int trmm(struct phos_device *dev, const struct phos_blas_op *op)
{
	int type = op->type, tr = op->trans;
	int64_t m = op->m, n = op->n, ka = op->side ? n : m;
	zval alpha = op->alpha[0] + I * op->alpha[1];
	const void *a = (const void *)(uintptr_t)op->a, *b = (const void *)(uintptr_t)op->b;
	void *c = (void *)(uintptr_t)op->c;
	zval *out;

	if (op->side < 0 || op->side > 1 || op->uplo < 0 || op->uplo > 1 || tr < 0 || tr > 2 || op->diag < 0 ||
	    op->diag > 1 || m < 0 || n < 0 || op->lda < (ka > 1 ? ka : 1) || op->ldb < (m > 1 ? m : 1) ||
	    op->ldc < (m > 1 ? m : 1))
		return ST_INVALID_VALUE;
	if (!m || !n)
		return ST_SUCCESS;
	if (!mat_ok(dev, op->a, type, ka, ka, op->lda) || !mat_ok(dev, op->b, type, m, n, op->ldb) ||
	    !mat_ok(dev, op->c, type, m, n, op->ldc))
		return ST_EXECUTION_FAILED;
	out = malloc((size_t)(m * n) * sizeof(*out));   /* C may be B: all of it first */
	if (!out)
		return ST_ALLOC_FAILED;
	for (int64_t j = 0; j < n; j++)
		for (int64_t i = 0; i < m; i++) {
			zval s = 0;

			for (int64_t p = 0; p < ka; p++)
				s += op->side ? ld(b, type, i + p * op->ldb) * tri_opa(a, type, op, p, j)
					      : tri_opa(a, type, op, i, p) * ld(b, type, p + j * op->ldb);
			out[i + j * m] = alpha * s;
		}
	for (int64_t j = 0; j < n; j++)
		for (int64_t i = 0; i < m; i++)
			st(c, type, i + j * op->ldc, out[i + j * m]);
	free(out);
	return ST_SUCCESS;
}

/* Rank-1 and rank-2 updates of A's uplo triangle: syr A += alpha x x^T, her
 * A += alpha x x^H (alpha real, the diagonal stays real), syr2 A += alpha
 * (x y^T + y x^T), her2 A += alpha x y^H + conj(alpha) y x^H. */
static int syr(struct phos_device *dev, const struct phos_blas_op *op)
{
	int type = op->type, fn = op->fn;
	int64_t n = op->n;
	bool herm = fn == PHOS_BLAS_HER || fn == PHOS_BLAS_HER2, two = fn == PHOS_BLAS_SYR2 || fn == PHOS_BLAS_HER2;
	zval alpha = op->alpha[0] + I * (fn == PHOS_BLAS_HER ? 0 : op->alpha[1]);
	const void *x = (const void *)(uintptr_t)op->x, *y = (const void *)(uintptr_t)op->y;
	void *a = (void *)(uintptr_t)op->a;

	if (op->uplo < 0 || op->uplo > 1 || n < 0 || !op->incx || (two && !op->incy) || op->lda < (n > 1 ? n : 1) ||
	    (herm && !is_complex(type)))
		return ST_INVALID_VALUE;
	if (!n)
		return ST_SUCCESS;
	if (!mat_ok(dev, op->a, type, n, n, op->lda) || !vec_ok(dev, op->x, type, n, op->incx) ||
	    (two && !vec_ok(dev, op->y, type, n, op->incy)))
		return ST_EXECUTION_FAILED;
	for (int64_t j = 0; j < n; j++)
		for (int64_t i = op->uplo == 1 ? 0 : j; i <= (op->uplo == 1 ? j : n - 1); i++) {
			zval xi = ld(x, type, vi(i, n, op->incx)), xj = ld(x, type, vi(j, n, op->incx)), d;
			zval old = ld(a, type, i + j * op->lda);

			if (two) {
				zval yi = ld(y, type, vi(i, n, op->incy)), yj = ld(y, type, vi(j, n, op->incy));

				d = herm ? alpha * xi * conj(yj) + conj(alpha) * yi * conj(xj) : alpha * (xi * yj + yi * xj);
			} else {
				d = alpha * xi * (herm ? conj(xj) : xj);
			}
			if (herm && i == j)
				old = creal(old), d = creal(d);
			st(a, type, i + j * op->lda, old + d);
		}
	return ST_SUCCESS;
}

/* trmv x = op(A) x, trsv x = op(A)^-1 x, A triangular (uplo, diag). */
static int trmv(struct phos_device *dev, const struct phos_blas_op *op)
{
	int type = op->type, tr = op->trans;
	int64_t n = op->n;
	const void *a = (const void *)(uintptr_t)op->a;
	void *x = (void *)(uintptr_t)op->x;
	/* op(A) is upper triangular when A is upper and not transposed, or lower and transposed */
	bool upper = (op->uplo == 1) == (tr == 0);
	zval *v;

	if (op->uplo < 0 || op->uplo > 1 || tr < 0 || tr > 2 || op->diag < 0 || op->diag > 1 || n < 0 ||
	    op->lda < (n > 1 ? n : 1) || !op->incx)
		return ST_INVALID_VALUE;
	if (!n)
		return ST_SUCCESS;
	if (!mat_ok(dev, op->a, type, n, n, op->lda) || !vec_ok(dev, op->x, type, n, op->incx))
		return ST_EXECUTION_FAILED;
	v = malloc((size_t)n * sizeof(*v));
	if (!v)
		return ST_ALLOC_FAILED;
	for (int64_t i = 0; i < n; i++)
		v[i] = ld(x, type, vi(i, n, op->incx));
	if (op->fn == PHOS_BLAS_TRMV) {
		for (int64_t i = 0; i < n; i++) {
			zval s = 0;

			for (int64_t c = upper ? i : 0; c <= (upper ? n - 1 : i); c++)
				s += tri_opa(a, type, op, i, c) * v[c];
			st(x, type, vi(i, n, op->incx), s);
		}
	} else {
		for (int64_t k = 0; k < n; k++) {
			int64_t i = upper ? n - 1 - k : k;
			zval s = v[i];

			for (int64_t c = upper ? i + 1 : 0; c < (upper ? n : i); c++)
				s -= tri_opa(a, type, op, i, c) * v[c];
			v[i] = s / tri_opa(a, type, op, i, i);
		}
		for (int64_t i = 0; i < n; i++)
			st(x, type, vi(i, n, op->incx), v[i]);
	}
	free(v);
	return ST_SUCCESS;
}

static bool trsm_args_ok(const struct phos_blas_op *op)
{
	int64_t ka = op->side ? op->n : op->m;

	return op->side >= 0 && op->side <= 1 && op->uplo >= 0 && op->uplo <= 1 && op->trans >= 0 &&
	       op->trans <= 2 && op->diag >= 0 && op->diag <= 1 && op->m >= 0 && op->n >= 0 &&
	       op->lda >= (ka > 1 ? ka : 1) && op->ldb >= (op->m > 1 ? op->m : 1);
}

/* op(A) X = alpha B (side left, 0) or X op(A) = alpha B (right, 1); X overwrites B.
 * uplo: 0 lower, 1 upper (cublasFillMode_t); diag: 0 non-unit, 1 unit. */
static int trsm(struct phos_device *dev, const struct phos_blas_op *op)
{
	int type = op->type, tr = op->trans;
	int64_t m = op->m, n = op->n, ka = op->side ? n : m, lda = op->lda, ldb = op->ldb;
	zval alpha = op->alpha[0] + I * op->alpha[1];
	const void *a = (const void *)(uintptr_t)op->a;
	void *b = (void *)(uintptr_t)op->b;
	/* op(A) is upper triangular when A is upper and not transposed, or lower and transposed */
	bool upper = (op->uplo == 1) == (tr == 0);
	bool unit = op->diag == 1;

	if (!trsm_args_ok(op))
		return ST_INVALID_VALUE;
	if (!m || !n)
		return ST_SUCCESS;
	if (!mat_ok(dev, op->a, type, ka, ka, lda) || !mat_ok(dev, op->b, type, m, n, ldb))
		return ST_EXECUTION_FAILED;
	for (int64_t j = 0; j < n; j++)
		for (int64_t i = 0; i < m; i++)
			st(b, type, i + j * ldb, alpha * ld(b, type, i + j * ldb));
	if (op->side == 0) {           /* each column: op(A) x = b */
		for (int64_t j = 0; j < n; j++) {
			for (int64_t s = 0; s < m; s++) {
				int64_t i = upper ? m - 1 - s : s;
				zval v = ld(b, type, i + j * ldb);

				for (int64_t k = upper ? i + 1 : 0; k < (upper ? m : i); k++)
					v -= opa(a, type, lda, tr, i, k) * ld(b, type, k + j * ldb);
				if (!unit)
					v /= opa(a, type, lda, tr, i, i);
				st(b, type, i + j * ldb, v);
			}
		}
	} else {                       /* each row: x op(A) = b, sum_k x_k op(A)[k, j] = b_j */
		for (int64_t i = 0; i < m; i++) {
			for (int64_t s = 0; s < n; s++) {
				int64_t j = upper ? s : n - 1 - s;
				zval v = ld(b, type, i + j * ldb);

				for (int64_t k = upper ? 0 : j + 1; k < (upper ? j : n); k++)
					v -= ld(b, type, i + k * ldb) * opa(a, type, lda, tr, k, j);
				if (!unit)
					v /= opa(a, type, lda, tr, j, j);
				st(b, type, i + j * ldb, v);
			}
		}
	}
	return ST_SUCCESS;
}

/* trsm on each pair of the device arrays of pointers a and b (batch of each);
 * every matrix is checked before the first is solved, so a bad pointer
 * changes nothing. */
static int trsm_batched(struct phos_device *dev, const struct phos_blas_op *op)
{
	struct phos_blas_op one = *op;
	int64_t ka = op->side ? op->n : op->m;
	const uint64_t *pa, *pb;
	int s = ST_SUCCESS;

	if (!trsm_args_ok(op) || op->batch < 0)
		return ST_INVALID_VALUE;
	if (!op->m || !op->n || !op->batch)
		return ST_SUCCESS;
	if (!phos_sim_range_ok(dev, op->a, (uint64_t)op->batch * 8) ||
	    !phos_sim_range_ok(dev, op->b, (uint64_t)op->batch * 8))
		return ST_EXECUTION_FAILED;
	pa = (const uint64_t *)(uintptr_t)op->a;
	pb = (const uint64_t *)(uintptr_t)op->b;
	for (int32_t i = 0; i < op->batch; i++)
		if (!mat_ok(dev, pa[i], op->type, ka, ka, op->lda) || !mat_ok(dev, pb[i], op->type, op->m, op->n, op->ldb))
			return ST_EXECUTION_FAILED;
	one.fn = PHOS_BLAS_TRSM;
	for (int32_t i = 0; i < op->batch && s == ST_SUCCESS; i++) {
		one.a = pa[i];
		one.b = pb[i];
		s = trsm(dev, &one);
	}
	return s;
}

int phos_sim_blas_call(struct phos_device *dev, void *handle, const struct phos_blas_op *op, void *ret_result,
		       int *ret_blas_status)
{
	int s;

	if (!phos_sim_obj_get(dev, handle, PHOS_SIM_BLAS))
		return ret_status(ret_blas_status, ST_NOT_INITIALIZED);
	if (!op || !esize(op->type) || (op->scal_type != op->type && op->scal_type != real_type(op->type)))
		return ret_status(ret_blas_status, ST_NOT_SUPPORTED);
	switch (op->fn) {
	case PHOS_BLAS_AXPY ... PHOS_BLAS_SWAP:
		if (op->fn >= PHOS_BLAS_DOT && op->fn <= PHOS_BLAS_AMIN && !ret_result)
			return ret_status(ret_blas_status, ST_INVALID_VALUE);
		if (op->fn == PHOS_BLAS_DOTC && !is_complex(op->type))
			return ret_status(ret_blas_status, ST_NOT_SUPPORTED);
		s = level1(dev, op, ret_result);
		break;
	case PHOS_BLAS_GEMV:
		s = gemv(dev, op);
		break;
	case PHOS_BLAS_GER:
	case PHOS_BLAS_GERC:
		s = ger(dev, op);
		break;
	case PHOS_BLAS_TRSM:
		s = trsm(dev, op);
		break;
	case PHOS_BLAS_TRSM_BATCHED:
		s = trsm_batched(dev, op);
		break;
	case PHOS_BLAS_SYMV:
	case PHOS_BLAS_HEMV:
		s = symv(dev, op);
		break;
	case PHOS_BLAS_SYRK:
	case PHOS_BLAS_HERK:
		s = syrk(dev, op);
		break;
	case PHOS_BLAS_ROT:
		s = rot(dev, op);
		break;
	case PHOS_BLAS_SYMM:
	case PHOS_BLAS_HEMM:
		s = symm(dev, op);
		break;
	case PHOS_BLAS_SYR2K:
	case PHOS_BLAS_HER2K:
		s = syr2k(dev, op);
		break;
	case PHOS_BLAS_TRMM:
		s = trmm(dev, op);
		break;
	case PHOS_BLAS_SYR ... PHOS_BLAS_HER2:
		s = syr(dev, op);
		break;
	case PHOS_BLAS_TRMV:
	case PHOS_BLAS_TRSV:
		s = trmv(dev, op);
		break;
	default:
		s = ST_INVALID_VALUE;
	}
	return ret_status(ret_blas_status, s);
}

/* C = alpha op(A) op(B) + beta C for double, complex float and complex double
 * (A, B and C of one type); batches by stride or by pointer arrays. */
int phos_sim_blas_gemm_wide(struct phos_device *dev, const struct phos_blas_gemm *g, int *ret_blas_status)
{
	int type = g->ctype;
	int64_t m = g->m, n = g->n, k = g->k;
	int64_t arows = g->transa ? k : m, acols = g->transa ? m : k;
	int64_t brows = g->transb ? n : k, bcols = g->transb ? k : n;
	zval alpha = g->alpha + I * g->alpha_im, beta = g->beta + I * g->beta_im;
	int64_t es = esize(type);

	/* cuBLAS's combinations: D and Z with a 64F compute type, C with a 32F one */
	bool c64 = g->compute == 1 || g->compute == 5 || g->compute == 70 || g->compute == 71;
	bool c32 = g->compute == 0 || g->compute == 4 || g->compute == 68 || g->compute == 69;

	if (g->atype != type || g->btype != type || (type == T_C32 ? !c32 : !c64))
		return ret_status(ret_blas_status, ST_NOT_SUPPORTED);
	for (int64_t bi = 0; bi < g->batch; bi++) {
		uint64_t pa, pb, pc;

		if (g->arrays) {
			if (!phos_sim_range_ok(dev, g->a + 8 * (uint64_t)bi, 8) ||
			    !phos_sim_range_ok(dev, g->b + 8 * (uint64_t)bi, 8) ||
			    !phos_sim_range_ok(dev, g->c + 8 * (uint64_t)bi, 8))
				return ret_status(ret_blas_status, ST_EXECUTION_FAILED);
			pa = ((const uint64_t *)(uintptr_t)g->a)[bi];
			pb = ((const uint64_t *)(uintptr_t)g->b)[bi];
			pc = ((const uint64_t *)(uintptr_t)g->c)[bi];
		} else {
			pa = g->a + (uint64_t)(bi * g->stride_a * es);
			pb = g->b + (uint64_t)(bi * g->stride_b * es);
			pc = g->c + (uint64_t)(bi * g->stride_c * es);
		}
		if ((k > 0 && (!mat_ok(dev, pa, type, arows, acols, g->lda) ||
			       !mat_ok(dev, pb, type, brows, bcols, g->ldb))) ||
		    !mat_ok(dev, pc, type, m, n, g->ldc))
			return ret_status(ret_blas_status, ST_EXECUTION_FAILED);
		for (int64_t j = 0; j < n; j++)
			for (int64_t i = 0; i < m; i++) {
				zval s = 0;
				void *c = (void *)(uintptr_t)pc;

				for (int64_t p = 0; p < k; p++)
					s += opa((const void *)(uintptr_t)pa, type, g->lda, g->transa, i, p) *
					     opa((const void *)(uintptr_t)pb, type, g->ldb, g->transb, p, j);
				st(c, type, i + j * g->ldc,
				   alpha * s + (beta != 0 ? beta * ld(c, type, i + j * g->ldc) : 0));
			}
	}
	return ret_status(ret_blas_status, ST_SUCCESS);
}

/* ---- batched LU (getrf, getri, getrs, matinv), QR (geqrf) and least squares (gels), real S and D ---- */

/* a (n x n, ld) = P L U in place, LAPACK getf2 order; piv gets 1-based pivot
 * rows (NULL: no pivoting). Returns info: 0, or k when U(k, k) is exactly 0. */
static int lu_factor(void *a, int type, int64_t n, int64_t lda, int32_t *piv)
{
	int info = 0;

	for (int64_t k = 0; k < n; k++) {
		int64_t p = k;

		if (piv) {
			for (int64_t i = k + 1; i < n; i++)
				if (fabs(creal(ld(a, type, i + k * lda))) > fabs(creal(ld(a, type, p + k * lda))))
					p = i;
			piv[k] = (int32_t)p + 1;
			if (p != k)
				for (int64_t j = 0; j < n; j++) {
					zval t = ld(a, type, k + j * lda);

					st(a, type, k + j * lda, ld(a, type, p + j * lda));
					st(a, type, p + j * lda, t);
				}
		}
		double d = creal(ld(a, type, k + k * lda));

		if (d == 0) {
			if (!info)
				info = (int)k + 1;
			continue;
		}
		for (int64_t i = k + 1; i < n; i++)
			st(a, type, i + k * lda, ld(a, type, i + k * lda) / d);
		for (int64_t j = k + 1; j < n; j++) {
			double f = creal(ld(a, type, k + j * lda));

			for (int64_t i = k + 1; i < n; i++)
				st(a, type, i + j * lda, ld(a, type, i + j * lda) - ld(a, type, i + k * lda) * f);
		}
	}
	return info;
}

/* x (n values, in doubles) = op(A)^-1 x from the factors of lu_factor. */
static void lu_solve(const void *a, int type, int64_t n, int64_t lda, const int32_t *piv, bool trans, double *x)
{
	if (!trans) {
		for (int64_t k = 0; piv && k < n; k++) {
			double t = x[k];

			x[k] = x[piv[k] - 1];
			x[piv[k] - 1] = t;
		}
		for (int64_t i = 0; i < n; i++)            /* L y = b, unit lower */
			for (int64_t k = 0; k < i; k++)
				x[i] -= creal(ld(a, type, i + k * lda)) * x[k];
		for (int64_t i = n - 1; i >= 0; i--) {     /* U x = y */
			for (int64_t k = i + 1; k < n; k++)
				x[i] -= creal(ld(a, type, i + k * lda)) * x[k];
			x[i] /= creal(ld(a, type, i + i * lda));
		}
		return;
	}
	for (int64_t i = 0; i < n; i++) {                  /* U^T z = b */
		for (int64_t k = 0; k < i; k++)
			x[i] -= creal(ld(a, type, k + i * lda)) * x[k];
		x[i] /= creal(ld(a, type, i + i * lda));
	}
	for (int64_t i = n - 1; i >= 0; i--)               /* L^T w = z */
		for (int64_t k = i + 1; k < n; k++)
			x[i] -= creal(ld(a, type, k + i * lda)) * x[k];
	for (int64_t k = n - 1; piv && k >= 0; k--) {      /* x = P w */
		double t = x[k];

		x[k] = x[piv[k] - 1];
		x[piv[k] - 1] = t;
	}
}

/* c = A^-1 column by column from the factors; info k when U(k, k) is 0. */
static int lu_inverse(const void *a, int type, int64_t n, int64_t lda, const int32_t *piv, void *c, int64_t ldc,
		      double *x)
{
	for (int64_t k = 0; k < n; k++)
		if (creal(ld(a, type, k + k * lda)) == 0)
			return (int)k + 1;
	for (int64_t j = 0; j < n; j++) {
		for (int64_t i = 0; i < n; i++)
			x[i] = i == j;
		lu_solve(a, type, n, lda, piv, false, x);
		for (int64_t i = 0; i < n; i++)
			st(c, type, i + j * ldc, x[i]);
	}
	return 0;
}

/* x(k:m, j) -= t v (v^T x(k:m, j)), v = (1, a(k+1:m, k)): the k-th
 * Householder reflector of a QR factorization in LAPACK's form, applied to
 * column j of x (ldx). */
static void reflect(const void *a, int type, int64_t m, int64_t lda, int64_t k, double t, void *x, int64_t ldx,
		    int64_t j)
{
	double w = creal(ld(x, type, k + j * ldx));

	for (int64_t i = k + 1; i < m; i++)
		w += creal(ld(a, type, i + k * lda)) * creal(ld(x, type, i + j * ldx));
	st(x, type, k + j * ldx, creal(ld(x, type, k + j * ldx)) - t * w);
	for (int64_t i = k + 1; i < m; i++)
		st(x, type, i + j * ldx, creal(ld(x, type, i + j * ldx)) - t * creal(ld(a, type, i + k * lda)) * w);
}

/* a (m x n, lda) = Q R in place as LAPACK's geqr2 writes it: column k's
 * reflector H = I - tau v v^T (v(k) = 1, v(k+1:m) stored below the diagonal)
 * makes a(k+1:m, k) zero, beta = -sign(a(k, k)) ||a(k:m, k)|| goes on the
 * diagonal; tau = 0 (H = I) when a(k+1:m, k) is zero already. tau gets
 * min(m, n) elements. */
static void qr_factor(void *a, int type, int64_t m, int64_t n, int64_t lda, void *tau)
{
	for (int64_t k = 0; k < (m < n ? m : n); k++) {
		double alpha = creal(ld(a, type, k + k * lda)), xnorm = 0, beta, t;

		for (int64_t i = k + 1; i < m; i++)
			xnorm = hypot(xnorm, creal(ld(a, type, i + k * lda)));
		if (xnorm == 0) {
			st(tau, type, k, 0);
			continue;
		}
		beta = -copysign(hypot(alpha, xnorm), alpha);
		t = (beta - alpha) / beta;
		for (int64_t i = k + 1; i < m; i++)
			st(a, type, i + k * lda, creal(ld(a, type, i + k * lda)) / (alpha - beta));
		st(a, type, k + k * lda, beta);
		st(tau, type, k, t);
		for (int64_t j = k + 1; j < n; j++)
			reflect(a, type, m, lda, k, t, a, lda, j);
	}
}

/* geqrfBatched: a[i] (m x n) and tau[i] from the device arrays a and c. */
static int qr_batched(struct phos_device *dev, const struct phos_blas_lu *op)
{
	int64_t m = op->m, n = op->n, batch = op->batch, k = m < n ? m : n;
	const uint64_t *pa, *pt;

	if (m < 0 || n < 0 || batch < 0 || op->lda < (m > 1 ? m : 1))
		return ST_INVALID_VALUE;
	if (!batch || !k)
		return ST_SUCCESS;
	if (!phos_sim_range_ok(dev, op->a, (uint64_t)batch * 8) || !phos_sim_range_ok(dev, op->c, (uint64_t)batch * 8))
		return ST_EXECUTION_FAILED;
	pa = (const uint64_t *)(uintptr_t)op->a;
	pt = (const uint64_t *)(uintptr_t)op->c;
	for (int64_t b = 0; b < batch; b++)
		if (!mat_ok(dev, pa[b], op->type, m, n, op->lda) || !mat_ok(dev, pt[b], op->type, k, 1, k))
			return ST_EXECUTION_FAILED;
	for (int64_t b = 0; b < batch; b++)
		qr_factor((void *)(uintptr_t)pa[b], op->type, m, n, op->lda, (void *)(uintptr_t)pt[b]);
	return ST_SUCCESS;
}

/* c (m x nrhs, ldc) = Q^T c with qr_factor's a (m x n, lda) and tau, then
 * its first n rows = R^-1 of them, as LAPACK's gels for m >= n. Returns 0,
 * or k when R(k, k) is exactly 0: c is then left Q^T c, unsolved. */
static int ls_solve(const void *a, int type, int64_t m, int64_t n, int64_t lda, const void *tau, void *c,
		    int64_t nrhs, int64_t ldc)
{
	for (int64_t j = 0; j < nrhs; j++)
		for (int64_t k = 0; k < n; k++)
			reflect(a, type, m, lda, k, creal(ld(tau, type, k)), c, ldc, j);
	for (int64_t k = 0; k < n; k++)
		if (creal(ld(a, type, k + k * lda)) == 0)
			return (int)k + 1;
	for (int64_t j = 0; j < nrhs; j++)
		for (int64_t i = n - 1; i >= 0; i--) {   /* R x = (Q^T c)(0:n) */
			double x = creal(ld(c, type, i + j * ldc));

			for (int64_t p = i + 1; p < n; p++)
				x -= creal(ld(a, type, i + p * lda)) * creal(ld(c, type, p + j * ldc));
			st(c, type, i + j * ldc, x / creal(ld(a, type, i + i * lda)));
		}
	return 0;
}

/* gelsBatched: a[i] (m x n) factored in place and c[i] (m x nrhs) solved
 * from the device arrays a and c; info[i] (when given) as ls_solve's. */
static int gels_batched(struct phos_device *dev, const struct phos_blas_lu *op)
{
	int64_t m = op->m, n = op->n, nrhs = op->nrhs, batch = op->batch;
	const uint64_t *pa, *pc;
	int32_t *info;
	void *tau;

	if (op->trans != 0 || (m >= 0 && n > m))
		return ST_NOT_SUPPORTED;
	if (m < 0 || n < 0 || nrhs < 0 || batch < 0 || op->lda < (m > 1 ? m : 1) || op->ldc < (m > 1 ? m : 1))
		return ST_INVALID_VALUE;
	if (!batch || !n)
		return ST_SUCCESS;
	if (!phos_sim_range_ok(dev, op->a, (uint64_t)batch * 8) ||
	    (nrhs && !phos_sim_range_ok(dev, op->c, (uint64_t)batch * 8)) ||
	    (op->info && !phos_sim_range_ok(dev, op->info, (uint64_t)batch * 4)))
		return ST_EXECUTION_FAILED;
	pa = (const uint64_t *)(uintptr_t)op->a;
	pc = (const uint64_t *)(uintptr_t)op->c;
	info = (int32_t *)(uintptr_t)op->info;
	for (int64_t b = 0; b < batch; b++)
		if (!mat_ok(dev, pa[b], op->type, m, n, op->lda) ||
		    (nrhs && !mat_ok(dev, pc[b], op->type, m, nrhs, op->ldc)))
			return ST_EXECUTION_FAILED;
	tau = malloc((size_t)n * (size_t)esize(op->type));
	if (!tau)
		return ST_ALLOC_FAILED;
	for (int64_t b = 0; b < batch; b++) {
		void *a = (void *)(uintptr_t)pa[b], *c = nrhs ? (void *)(uintptr_t)pc[b] : NULL;
		int v;

		qr_factor(a, op->type, m, n, op->lda, tau);
		v = ls_solve(a, op->type, m, n, op->lda, tau, c, nrhs, op->ldc);
		if (info)
			info[b] = v;
	}
	free(tau);
	return ST_SUCCESS;
}

int phos_sim_blas_lu(struct phos_device *dev, void *handle, const struct phos_blas_lu *op, int *ret_blas_status)
{
	int type, fn;
	int64_t n, batch, cols;
	const uint64_t *pa, *pc;
	int32_t *piv, *info;
	double *x;
	void *scratch = NULL;

	if (!phos_sim_obj_get(dev, handle, PHOS_SIM_BLAS))
		return ret_status(ret_blas_status, ST_NOT_INITIALIZED);
	if (!op || (op->type != T_R32 && op->type != T_R64))
		return ret_status(ret_blas_status, ST_NOT_SUPPORTED);
	if (op->fn == PHOS_BLAS_GEQRF)
		return ret_status(ret_blas_status, qr_batched(dev, op));
	if (op->fn == PHOS_BLAS_GELS)
		return ret_status(ret_blas_status, gels_batched(dev, op));
	type = op->type;
	fn = op->fn;
	n = op->n;
	batch = op->batch;
	cols = fn == PHOS_BLAS_GETRS ? op->nrhs : n;
	if (fn < PHOS_BLAS_GETRF || fn > PHOS_BLAS_MATINV || n < 0 || batch < 0 || op->lda < (n > 1 ? n : 1) ||
	    (fn != PHOS_BLAS_GETRF && op->ldc < (n > 1 ? n : 1)) || (fn == PHOS_BLAS_GETRS && op->nrhs < 0))
		return ret_status(ret_blas_status, ST_INVALID_VALUE);
	if (!batch)
		return ret_status(ret_blas_status, ST_SUCCESS);
	if (!phos_sim_range_ok(dev, op->a, (uint64_t)batch * 8) ||
	    (fn != PHOS_BLAS_GETRF && !phos_sim_range_ok(dev, op->c, (uint64_t)batch * 8)) ||
	    (op->pivots && !phos_sim_range_ok(dev, op->pivots, (uint64_t)(n * batch) * 4)) ||
	    (fn != PHOS_BLAS_GETRS && !phos_sim_range_ok(dev, op->info, (uint64_t)batch * 4)))
		return ret_status(ret_blas_status, ST_EXECUTION_FAILED);
	pa = (const uint64_t *)(uintptr_t)op->a;
	pc = (const uint64_t *)(uintptr_t)op->c;
	piv = (int32_t *)(uintptr_t)op->pivots;
	info = (int32_t *)(uintptr_t)op->info;
	for (int64_t b = 0; b < batch; b++)
		if (!mat_ok(dev, pa[b], type, n, n, op->lda) ||
		    (fn != PHOS_BLAS_GETRF && !mat_ok(dev, pc[b], type, n, cols, op->ldc)))
			return ret_status(ret_blas_status, ST_EXECUTION_FAILED);
	x = malloc((size_t)(n ? n : 1) * sizeof(double));
	if (fn == PHOS_BLAS_MATINV) {   /* factors of a copy: A is not changed */
		scratch = malloc((size_t)(n ? n * n : 1) * (size_t)esize(type) + (size_t)(n ? n : 1) * 4);
	}
	if (!x || (fn == PHOS_BLAS_MATINV && !scratch)) {
		free(x);
		free(scratch);
		return ret_status(ret_blas_status, ST_ALLOC_FAILED);
	}
	for (int64_t b = 0; b < batch; b++) {
		void *a = (void *)(uintptr_t)pa[b], *c = fn == PHOS_BLAS_GETRF ? NULL : (void *)(uintptr_t)pc[b];
		int32_t *p = piv ? piv + b * n : NULL;

		switch (fn) {
		case PHOS_BLAS_GETRF:
			info[b] = lu_factor(a, type, n, op->lda, p);
			break;
		case PHOS_BLAS_GETRI:
			info[b] = lu_inverse(a, type, n, op->lda, p, c, op->ldc, x);
			break;
		case PHOS_BLAS_GETRS:
			for (int64_t j = 0; j < cols; j++) {
				for (int64_t i = 0; i < n; i++)
					x[i] = creal(ld(c, type, i + j * op->ldc));
				lu_solve(a, type, n, op->lda, p, op->trans != 0, x);
				for (int64_t i = 0; i < n; i++)
					st(c, type, i + j * op->ldc, x[i]);
			}
			break;
		case PHOS_BLAS_MATINV: {
			int32_t *mp = (int32_t *)((char *)scratch + (size_t)(n * n) * (size_t)esize(type));

			for (int64_t j = 0; j < n; j++)
				for (int64_t i = 0; i < n; i++)
					st(scratch, type, i + j * n, ld(a, type, i + j * op->lda));
			info[b] = lu_factor(scratch, type, n, n, mp);
			if (!info[b])
				info[b] = lu_inverse(scratch, type, n, n, mp, c, op->ldc, x);
			break;
		}
		}
	}
	free(x);
	free(scratch);
	return ret_status(ret_blas_status, ST_SUCCESS);
}
