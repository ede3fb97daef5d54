/* SPDX-License-Identifier: MIT */
/*
 * Host reference cuBLAS for the sim backend: GEMM (Sgemm, GemmEx and their
 * strided batched forms), SAXPY/SSCAL/SDOT/SNRM2 and SGEMV, column-major with
 * cuBLAS's argument rules. Operands are device addresses, which in sim are host
 * addresses; each operand's extent is checked with phos_sim_range_ok first, so a
 * bad pointer gives CUBLAS_STATUS_EXECUTION_FAILED, not a fault.
 *
 * GEMM: for each block of mb rows of C, op(A)[rows, 0:k] is packed into a
 * contiguous float panel (mb x k, converted from half/bf16 when needed), then for
 * each column j of C:   acc[0:mb] = sum_p panel[:, p] * op(B)[p, j]
 * runs as k contiguous AXPYs of length mb, which the compiler vectorises. The
 * panel is sized to stay in cache. Accumulation is in float, as cuBLAS does for
 * CUBLAS_COMPUTE_32F; the fast/TF32 compute types are computed the same way, and
 * CUBLAS_COMPUTE_16F also accumulates in float (more precise than cuBLAS).
 *
 * L1: increments follow reference BLAS: AXPY and DOT accept negative (and
 * zero) increments, walking the vector from its far end; SCAL and NRM2 do
 * nothing / return 0 for incx <= 0. SDOT accumulates in double; SNRM2 uses the
 * scaled sum of squares of reference BLAS.
 */
#include "device_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum {
	BLAS_SUCCESS = 0,          /* cublasStatus_t */
	BLAS_NOT_INITIALIZED = 1,
	BLAS_ALLOC_FAILED = 3,
	BLAS_INVALID_VALUE = 7,
	BLAS_EXECUTION_FAILED = 13,
	BLAS_NOT_SUPPORTED = 15,
};

enum { T_F32 = 0, T_F16 = 2, T_BF16 = 14 };   /* cudaDataType */

#define GEMM_PANEL_BYTES (256u << 10)

struct sim_blas {
	struct phos_sim_obj obj;
	void *stream;
	int math;
	uint64_t workspace, workspace_size;
};

/* Sets the status and returns the matching negated cudaError_t. */
static int blas_ret(int *ret_blas_status, int status)
{
	if (ret_blas_status)
		*ret_blas_status = status;
	switch (status) {
	case BLAS_SUCCESS:
		return 0;
	case BLAS_NOT_INITIALIZED:
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	case BLAS_ALLOC_FAILED:
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	case BLAS_EXECUTION_FAILED:
		return -PHOS_CUDA_ILLEGAL_ADDRESS;
	case BLAS_NOT_SUPPORTED:
		return -PHOS_CUDA_NOT_SUPPORTED;
	default:
		return -PHOS_CUDA_INVALID_VALUE;
	}
}

/* ---- handles ---- */

int phos_sim_blas_create(struct phos_device *dev, void **ret_handle)
{
	struct sim_blas *h;

	if (!dev || !ret_handle)
		return -PHOS_CUDA_INVALID_VALUE;
	h = phos_sim_obj_new(dev, PHOS_SIM_BLAS, sizeof(*h));
	if (!h)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	*ret_handle = h;
	return 0;
}

int phos_sim_blas_destroy(struct phos_device *dev, void *handle)
{
	struct sim_blas *h = phos_sim_obj_get(dev, handle, PHOS_SIM_BLAS);

	if (!h)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	phos_sim_obj_free(dev, h);
	return 0;
}

int phos_sim_blas_set_stream(struct phos_device *dev, void *handle, void *stream)
{
	struct sim_blas *h = phos_sim_obj_get(dev, handle, PHOS_SIM_BLAS);

	if (!h || phos_sim_stream_check(dev, stream) < 0)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	h->stream = stream;
	return 0;
}

/* cublasMath_t: DEFAULT, TENSOR_OP, PEDANTIC, TF32_TENSOR_OP, FP32_EMULATED_BF16X9,
 * FP64_EMULATED_FIXEDPOINT, optionally | DISALLOW_REDUCED_PRECISION_REDUCTION (16). */
int phos_sim_blas_set_math(struct phos_device *dev, void *handle, int mode)
{
	struct sim_blas *h = phos_sim_obj_get(dev, handle, PHOS_SIM_BLAS);
	int base = mode & ~16;

	if (!h)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (mode < 0 || (base > 4 && base != 8))
		return -PHOS_CUDA_INVALID_VALUE;
	h->math = mode;
	return 0;
}

/* The workspace is unused by the reference, but checked as cuBLAS does. */
int phos_sim_blas_set_workspace(struct phos_device *dev, void *handle, uint64_t addr, uint64_t size)
{
	struct sim_blas *h = phos_sim_obj_get(dev, handle, PHOS_SIM_BLAS);

	if (!h)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (size && (addr % 256 || !phos_sim_range_ok(dev, addr, size)))
		return -PHOS_CUDA_INVALID_VALUE;
	h->workspace = size ? addr : 0;
	h->workspace_size = size;
	return 0;
}

/* ---- element conversions ---- */

static float half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31, exp = h >> 10 & 0x1f, mant = h & 0x3ff, bits;
	float f;

	if (exp == 0) {                    /* zero or subnormal: mant * 2^-24 */
		f = ldexpf((float)mant, -24);
		return sign ? -f : f;
	}
	if (exp == 31)
		bits = sign | 0x7f800000u | mant << 13;
	else
		bits = sign | (exp + 112) << 23 | mant << 13;
	memcpy(&f, &bits, sizeof(f));
	return f;
}

/* Round to nearest even, with subnormals, infinities and NaN. */
static uint16_t float_to_half(float f)
{
	uint32_t x, sign, ax;
	float a;

	memcpy(&x, &f, sizeof(x));
	sign = x >> 16 & 0x8000;
	ax = x & 0x7fffffff;
	if (ax > 0x7f800000)                          /* NaN: keep it quiet */
		return (uint16_t)(sign | 0x7e00 | (ax >> 13 & 0x3ff));
	if (ax >= 0x477ff000)                         /* >= 65520 rounds to infinity */
		return (uint16_t)(sign | 0x7c00);
	if (ax < 0x38800000) {                        /* below 2^-14: subnormal half */
		memcpy(&a, &ax, sizeof(a));
		return (uint16_t)(sign | (uint32_t)lrintf(a * 16777216.0f));
	}
	ax += 0xfff + (ax >> 13 & 1);
	return (uint16_t)(sign | (ax - 0x38000000u) >> 13);
}

static float bf16_to_float(uint16_t h)
{
	uint32_t bits = (uint32_t)h << 16;
	float f;

	memcpy(&f, &bits, sizeof(f));
	return f;
}

static uint16_t float_to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, sizeof(x));
	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)(x >> 16 | 0x40);
	x += 0x7fff + (x >> 16 & 1);
	return (uint16_t)(x >> 16);
}

static size_t type_size(int type)
{
	return type == T_F32 ? 4 : 2;
}

/* dst[t] = src[start + t*stride] for t < count, converted to float. */
static void load_strided(float *restrict dst, const void *src, int type, int64_t start, int64_t stride,
			 int64_t count)
{
	const float *f = src;
	const uint16_t *h = src;

	for (int64_t t = 0; t < count; t++) {
		int64_t i = start + t * stride;

		dst[t] = type == T_F32 ? f[i] : type == T_F16 ? half_to_float(h[i]) : bf16_to_float(h[i]);
	}
}

static float load_one(const void *src, int type, int64_t i)
{
	float v;

	load_strided(&v, src, type, i, 0, 1);
	return v;
}

static void store_one(void *dst, int type, int64_t i, float v)
{
	if (type == T_F32)
		((float *)dst)[i] = v;
	else
		((uint16_t *)dst)[i] = type == T_F16 ? float_to_half(v) : float_to_bf16(v);
}

double phos_sim_elem_get(const void *base, int type, int64_t i)
{
	return type == 1 ? ((const double *)base)[i] : (double)load_one(base, type, i);
}

void phos_sim_elem_put(void *base, int type, int64_t i, double v)
{
	if (type == 1)
		((double *)base)[i] = v;
	else
		store_one(base, type, i, (float)v);
}

/* Whether the rows x cols matrix with leading dimension ld at addr + index*stride
 * elements (index < batch) lies in device memory. */
static bool matrix_ok(struct phos_device *dev, uint64_t addr, int type, int64_t rows, int64_t cols,
		      int64_t ld, int64_t stride, int64_t batch)
{
	int64_t esize = (int64_t)type_size(type), elems, bytes, off;

	if (!rows || !cols)
		return true;
	if (__builtin_mul_overflow(cols - 1, ld, &elems) || __builtin_add_overflow(elems, rows, &elems) ||
	    __builtin_mul_overflow(elems, esize, &bytes))
		return false;
	for (int64_t b = 0; b < batch; b++) {
		if (__builtin_mul_overflow(b, stride, &off) || __builtin_mul_overflow(off, esize, &off))
			return false;
		if (!phos_sim_range_ok(dev, addr + (uint64_t)off, (uint64_t)bytes))
			return false;
		if (stride == 0)
			break;
	}
	return true;
}

/* ---- GEMM ---- */

struct gemm_job {
	int64_t m, n, k;
	bool ta, tb;
	const void *a, *b;
	void *c;
	int atype, btype, ctype;
	int64_t lda, ldb, ldc;
	float alpha, beta;
};

/* C = alpha op(A) op(B) + beta C for one batch entry; scratch holds the panel,
 * one column of op(B) and one accumulator column. */
static void gemm_one(const struct gemm_job *g, float *restrict panel, float *restrict bcol,
		     float *restrict acc, int64_t mb_max)
{
	bool product = g->alpha != 0.0f && g->k > 0;

	for (int64_t i0 = 0; i0 < g->m; i0 += mb_max) {
		int64_t mb = g->m - i0 < mb_max ? g->m - i0 : mb_max;

		for (int64_t p = 0; product && p < g->k; p++) {
			if (g->ta)    /* op(A)[i, p] = A[p + i*lda] */
				load_strided(panel + p * mb, g->a, g->atype, p + i0 * g->lda, g->lda, mb);
			else          /* op(A)[i, p] = A[i + p*lda] */
				load_strided(panel + p * mb, g->a, g->atype, i0 + p * g->lda, 1, mb);
		}
		for (int64_t j = 0; j < g->n; j++) {
			memset(acc, 0, (size_t)mb * sizeof(float));
			if (product) {
				if (g->tb)
					load_strided(bcol, g->b, g->btype, j, g->ldb, g->k);
				else
					load_strided(bcol, g->b, g->btype, j * g->ldb, 1, g->k);
				for (int64_t p = 0; p < g->k; p++) {
					const float *col = panel + p * mb;
					float s = bcol[p];

					for (int64_t i = 0; i < mb; i++)
						acc[i] += col[i] * s;
				}
			}
			for (int64_t i = 0; i < mb; i++) {
				int64_t ci = i0 + i + j * g->ldc;
				float v = g->alpha * acc[i];

				if (g->beta != 0.0f)   /* beta == 0: C is not read (NaN there is dropped) */
					v += g->beta * load_one(g->c, g->ctype, ci);
				store_one(g->c, g->ctype, ci, v);
			}
		}
	}
}

static bool compute_32f(int compute)
{
	/* CUDA_R_32F (legacy GemmEx), 32F, 32F_PEDANTIC, FAST_16F, FAST_16BF, FAST_TF32, EMULATED_16BFX9 */
	return compute == 0 || compute == 68 || compute == 69 || compute == 74 || compute == 75 ||
	       compute == 77 || compute == 78;
}

static bool compute_16f(int compute)
{
	return compute == 2 || compute == 64 || compute == 65;   /* CUDA_R_16F (legacy), 16F, 16F_PEDANTIC */
}

static bool gemm_types_supported(const struct phos_blas_gemm *g)
{
	if (g->atype != g->btype)
		return false;
	if (g->atype == T_F32)
		return g->ctype == T_F32 && compute_32f(g->compute);
	if (g->atype == T_F16 || g->atype == T_BF16)
		return ((g->ctype == g->atype || g->ctype == T_F32) && compute_32f(g->compute)) ||
		       (g->atype == T_F16 && g->ctype == T_F16 && compute_16f(g->compute));
	return false;
}

int phos_sim_blas_gemm(struct phos_device *dev, void *handle, const struct phos_blas_gemm *g,
		       int *ret_blas_status)
{
	struct gemm_job job;
	int64_t arows, acols, brows, bcols, mb;
	float *panel, *bcol, *acc;
	bool product;

	if (!phos_sim_obj_get(dev, handle, PHOS_SIM_BLAS))
		return blas_ret(ret_blas_status, BLAS_NOT_INITIALIZED);
	if (!g || g->transa < 0 || g->transa > 2 || g->transb < 0 || g->transb > 2 || g->m < 0 || g->n < 0 ||
	    g->k < 0 || g->batch < 0)
		return blas_ret(ret_blas_status, BLAS_INVALID_VALUE);
	job = (struct gemm_job){ .m = g->m, .n = g->n, .k = g->k, .ta = g->transa != 0, .tb = g->transb != 0,
				 .atype = g->atype, .btype = g->btype, .ctype = g->ctype, .lda = g->lda,
				 .ldb = g->ldb, .ldc = g->ldc, .alpha = (float)g->alpha, .beta = (float)g->beta };
	arows = job.ta ? job.k : job.m;     /* A as stored: arows x acols */
	acols = job.ta ? job.m : job.k;
	brows = job.tb ? job.n : job.k;
	bcols = job.tb ? job.k : job.n;
	if (job.lda < (arows > 1 ? arows : 1) || job.ldb < (brows > 1 ? brows : 1) ||
	    job.ldc < (job.m > 1 ? job.m : 1))
		return blas_ret(ret_blas_status, BLAS_INVALID_VALUE);
	if ((g->ctype == 1 || g->ctype == 4 || g->ctype == 5) && g->batch)   /* D, C, Z */
		return phos_sim_blas_gemm_wide(dev, g, ret_blas_status);
	if (!gemm_types_supported(g))
		return blas_ret(ret_blas_status, BLAS_NOT_SUPPORTED);
	if (!job.m || !job.n || !g->batch)
		return blas_ret(ret_blas_status, BLAS_SUCCESS);
	product = job.alpha != 0.0f && job.k > 0;
	if (g->arrays) {
		/* pointer arrays in device memory: every matrix they name must be there */
		if (!phos_sim_range_ok(dev, g->a, (uint64_t)g->batch * 8) ||
		    !phos_sim_range_ok(dev, g->b, (uint64_t)g->batch * 8) ||
		    !phos_sim_range_ok(dev, g->c, (uint64_t)g->batch * 8))
			return blas_ret(ret_blas_status, BLAS_EXECUTION_FAILED);
		for (int64_t b = 0; b < g->batch; b++)
			if ((product && (!matrix_ok(dev, ((const uint64_t *)(uintptr_t)g->a)[b], g->atype, arows, acols,
						    job.lda, 0, 1) ||
					 !matrix_ok(dev, ((const uint64_t *)(uintptr_t)g->b)[b], g->btype, brows, bcols,
						    job.ldb, 0, 1))) ||
			    !matrix_ok(dev, ((const uint64_t *)(uintptr_t)g->c)[b], g->ctype, job.m, job.n, job.ldc, 0, 1))
				return blas_ret(ret_blas_status, BLAS_EXECUTION_FAILED);
	} else if ((product && (!matrix_ok(dev, g->a, g->atype, arows, acols, job.lda, g->stride_a, g->batch) ||
				!matrix_ok(dev, g->b, g->btype, brows, bcols, job.ldb, g->stride_b, g->batch))) ||
		   !matrix_ok(dev, g->c, g->ctype, job.m, job.n, job.ldc, g->stride_c, g->batch)) {
		return blas_ret(ret_blas_status, BLAS_EXECUTION_FAILED);
	}

	/* Rows per panel: the panel (mb x k floats) should stay in cache. */
	mb = job.k ? (int64_t)(GEMM_PANEL_BYTES / sizeof(float)) / job.k : job.m;
	mb = mb < 16 ? 16 : mb / 16 * 16;
	if (mb > job.m)
		mb = job.m;
	panel = malloc((size_t)(mb * (job.k ? job.k : 1)) * sizeof(float));
	bcol = malloc((size_t)(job.k ? job.k : 1) * sizeof(float));
	acc = malloc((size_t)mb * sizeof(float));
	if (!panel || !bcol || !acc) {
		free(panel);
		free(bcol);
		free(acc);
		return blas_ret(ret_blas_status, BLAS_ALLOC_FAILED);
	}
	for (int64_t b = 0; b < g->batch; b++) {
		if (g->arrays) {
			job.a = (const char *)(uintptr_t)((const uint64_t *)(uintptr_t)g->a)[b];
			job.b = (const char *)(uintptr_t)((const uint64_t *)(uintptr_t)g->b)[b];
			job.c = (char *)(uintptr_t)((const uint64_t *)(uintptr_t)g->c)[b];
		} else {
			job.a = (const char *)(uintptr_t)g->a + b * g->stride_a * (int64_t)type_size(g->atype);
			job.b = (const char *)(uintptr_t)g->b + b * g->stride_b * (int64_t)type_size(g->btype);
			job.c = (char *)(uintptr_t)g->c + b * g->stride_c * (int64_t)type_size(g->ctype);
		}
		gemm_one(&job, panel, bcol, acc, mb);
	}
	free(panel);
	free(bcol);
	free(acc);
	return blas_ret(ret_blas_status, BLAS_SUCCESS);
}

/* ---- level 1 and GEMV ---- */

/* Element t of a strided vector of len elements, reference-BLAS style: a
 * negative increment walks from the far end of the storage at base. */
static int64_t vec_index(int64_t t, int64_t len, int64_t inc)
{
	return inc >= 0 ? t * inc : (len - 1 - t) * -inc;
}

/* Whether the storage of a strided vector, (len-1)*|inc| + 1 floats at addr, is device memory. */
static bool vector_ok(struct phos_device *dev, uint64_t addr, int64_t len, int64_t inc)
{
	int64_t span = inc < 0 ? -inc : inc;

	if (len <= 0)
		return true;
	if (span == 0)   /* one element, used len times */
		return phos_sim_range_ok(dev, addr, sizeof(float));
	return matrix_ok(dev, addr, T_F32, 1, len, span, 0, 1);
}

static double snrm2(const float *x, int64_t n, int64_t inc)
{
	double scale = 0.0, ssq = 1.0;

	for (int64_t t = 0; t < n; t++) {
		double a = fabs((double)x[t * inc]);

		if (a == 0.0)
			continue;
		if (scale < a) {
			ssq = 1.0 + ssq * (scale / a) * (scale / a);
			scale = a;
		} else {
			ssq += (a / scale) * (a / scale);
		}
	}
	return scale * sqrt(ssq);
}

int phos_sim_blas_l1(struct phos_device *dev, void *handle, const struct phos_blas_l1 *op,
		     float *ret_result, int *ret_blas_status)
{
	float *x, *y;
	int64_t n;
	double sum = 0.0;

	if (!phos_sim_obj_get(dev, handle, PHOS_SIM_BLAS))
		return blas_ret(ret_blas_status, BLAS_NOT_INITIALIZED);
	if (!op || op->kind < PHOS_BLAS_SAXPY || op->kind > PHOS_BLAS_SNRM2 ||
	    ((op->kind == PHOS_BLAS_SDOT || op->kind == PHOS_BLAS_SNRM2) && !ret_result))
		return blas_ret(ret_blas_status, BLAS_INVALID_VALUE);
	n = op->n;
	x = (float *)(uintptr_t)op->x;
	y = (float *)(uintptr_t)op->y;
	switch (op->kind) {
	case PHOS_BLAS_SAXPY:
		if (n <= 0 || op->alpha == 0.0)
			break;
		if (!vector_ok(dev, op->x, n, op->incx) || !vector_ok(dev, op->y, n, op->incy))
			return blas_ret(ret_blas_status, BLAS_EXECUTION_FAILED);
		for (int64_t t = 0; t < n; t++)
			y[vec_index(t, n, op->incy)] += (float)op->alpha * x[vec_index(t, n, op->incx)];
		break;
	case PHOS_BLAS_SSCAL:
		if (n <= 0 || op->incx <= 0)
			break;
		if (!vector_ok(dev, op->x, n, op->incx))
			return blas_ret(ret_blas_status, BLAS_EXECUTION_FAILED);
		for (int64_t t = 0; t < n; t++)
			x[t * op->incx] *= (float)op->alpha;
		break;
	case PHOS_BLAS_SDOT:
		if (n > 0) {
			if (!vector_ok(dev, op->x, n, op->incx) || !vector_ok(dev, op->y, n, op->incy))
				return blas_ret(ret_blas_status, BLAS_EXECUTION_FAILED);
			for (int64_t t = 0; t < n; t++)
				sum += (double)x[vec_index(t, n, op->incx)] * y[vec_index(t, n, op->incy)];
		}
		*ret_result = (float)sum;
		break;
	case PHOS_BLAS_SNRM2:
		if (n > 0 && op->incx > 0) {
			if (!vector_ok(dev, op->x, n, op->incx))
				return blas_ret(ret_blas_status, BLAS_EXECUTION_FAILED);
			sum = snrm2(x, n, op->incx);
		}
		*ret_result = (float)sum;
		break;
	}
	return blas_ret(ret_blas_status, BLAS_SUCCESS);
}

/* y = alpha op(A) x + beta y, A m x n column-major. */
int phos_sim_blas_gemv(struct phos_device *dev, void *handle, const struct phos_blas_gemv *op,
		       int *ret_blas_status)
{
	int64_t m, n, lenx, leny, lda;
	const float *a, *x;
	float *y, *acc, alpha, beta;

	if (!phos_sim_obj_get(dev, handle, PHOS_SIM_BLAS))
		return blas_ret(ret_blas_status, BLAS_NOT_INITIALIZED);
	if (!op || op->trans < 0 || op->trans > 2 || op->m < 0 || op->n < 0 || op->lda < (op->m > 1 ? op->m : 1) ||
	    !op->incx || !op->incy)
		return blas_ret(ret_blas_status, BLAS_INVALID_VALUE);
	m = op->m;
	n = op->n;
	lda = op->lda;
	alpha = (float)op->alpha;
	beta = (float)op->beta;
	lenx = op->trans ? m : n;
	leny = op->trans ? n : m;
	if (!m || !n || (alpha == 0.0f && beta == 1.0f))
		return blas_ret(ret_blas_status, BLAS_SUCCESS);
	if ((alpha != 0.0f && (!matrix_ok(dev, op->a, T_F32, m, n, lda, 0, 1) ||
			       !vector_ok(dev, op->x, lenx, op->incx))) ||
	    !vector_ok(dev, op->y, leny, op->incy))
		return blas_ret(ret_blas_status, BLAS_EXECUTION_FAILED);
	acc = calloc((size_t)leny, sizeof(float));
	if (!acc)
		return blas_ret(ret_blas_status, BLAS_ALLOC_FAILED);
	a = (const float *)(uintptr_t)op->a;
	x = (const float *)(uintptr_t)op->x;
	y = (float *)(uintptr_t)op->y;
	if (alpha != 0.0f) {
		for (int64_t j = 0; j < n; j++) {
			const float *col = a + j * lda;

			if (!op->trans) {            /* acc[0:m] += A[:, j] x[j] */
				float s = x[vec_index(j, lenx, op->incx)];

				for (int64_t i = 0; i < m; i++)
					acc[i] += col[i] * s;
			} else {                     /* acc[j] = A[:, j] . x */
				float s = 0.0f;

				for (int64_t i = 0; i < m; i++)
					s += col[i] * x[vec_index(i, lenx, op->incx)];
				acc[j] = s;
			}
		}
	}
	for (int64_t t = 0; t < leny; t++) {
		float *yt = &y[vec_index(t, leny, op->incy)];

		*yt = alpha * acc[t] + (beta != 0.0f ? beta * *yt : 0.0f);
	}
	free(acc);
	return blas_ret(ret_blas_status, BLAS_SUCCESS);
}
