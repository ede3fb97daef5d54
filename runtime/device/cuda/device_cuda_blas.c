/* SPDX-License-Identifier: MIT */
/*
 * cuBLAS for the cuda device backend (libcublas.so.13 through dlopen; see
 * device_cuda_syms.h).
 *
 * Handles live in the device's primary context. An open with warm set creates
 * CUDA_WARM_HANDLES handles and runs one small SGEMM on each, so that the lazy
 * loading of cuBLAS's kernels (about 164 ms on H100) happens at pool start and
 * not in a user's first call; blas_create hands those out first. A destroyed
 * handle goes back to that pool (its settings reset) while there is room.
 *
 * The warm-up also makes the device's cuBLASLt handle and runs a heuristic
 * query and a matmul for FP32, FP16 and BF16 with a bias epilogue
 * (device_cuda_blaslt.c), so that the first one of a restored PyTorch
 * function does not build cuBLASLt's tables on its cold path.
 *
 * Every handle stays in CUBLAS_POINTER_MODE_HOST: the call records carry their
 * scalars by value (alpha/beta widened to double), and SDOT/SNRM2 return their
 * result to the host, which makes them synchronous.
 *
 * cublasStatus_t → negated cudaError_t (the status itself also goes to
 * *ret_blas_status, for the preload to return to the user):
 *   SUCCESS                       → 0
 *   INVALID_VALUE                 → -cudaErrorInvalidValue
 *   NOT_SUPPORTED, ARCH_MISMATCH  → -cudaErrorNotSupported
 *   ALLOC_FAILED                  → -cudaErrorMemoryAllocation
 *   NOT_INITIALIZED               → -cudaErrorInitializationError
 *   EXECUTION_FAILED              → -cudaErrorLaunchFailure
 *   anything else                 → -cudaErrorUnknown
 */
#include "device_cuda_syms.h"

#include <math.h>
#include <string.h>

#include "log.h"

#define BLAS_CHECK(call)                                                                   \
	do {                                                                               \
		cublasStatus_t blas_check_s_ = (call);                                     \
		if (blas_check_s_ != CUBLAS_STATUS_SUCCESS)                                \
			return cuda_blas_fail(blas_check_s_, #call, __FILE__, __LINE__);   \
	} while (0)

/* A new handle in host pointer mode. */
static int handle_new(cublasHandle_t *ret_handle)
{
	cublasHandle_t h;
	cublasStatus_t s;

	BLAS_CHECK(cuda_cublas.Create(&h));
	s = cuda_cublas.SetPointerMode(h, CUBLAS_POINTER_MODE_HOST);
	if (s != CUBLAS_STATUS_SUCCESS) {
		cuda_cublas.Destroy(h);
		return cuda_blas_fail(s, "cublasSetPointerMode_v2", __FILE__, __LINE__);
	}
	*ret_handle = h;
	return 0;
}

int cuda_blas_warm(struct cuda_dev *d)
{
	enum { N = 64 };
	const size_t bytes = 3 * N * N * sizeof(float);
	const float alpha = 1.0f, beta = 0.0f;
	CUdeviceptr buf = 0;
	cublasHandle_t h;
	CUresult cr;
	int r = 0;

	CU_CHECK(cuda_drv.MemAlloc(&buf, bytes));
	cr = cuda_drv.MemsetD8Async(buf, 0, bytes, CU_STREAM_LEGACY);
	if (cr != CUDA_SUCCESS)
		r = cu_fail(cr, "cuMemsetD8Async", __FILE__, __LINE__);
	while (r == 0 && d->nwarm < CUDA_WARM_HANDLES) {
		const float *a = (const float *)(uintptr_t)buf;
		cublasStatus_t s;

		r = handle_new(&h);
		if (r < 0)
			break;
		d->warm[d->nwarm++] = h;
		/* The default stream, as every new handle has it. */
		s = cuda_cublas.Sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &alpha, a, N, a + N * N, N,
				      &beta, (float *)(uintptr_t)buf + 2 * N * N, N);
		if (s != CUBLAS_STATUS_SUCCESS)
			r = cuda_blas_fail(s, "cublasSgemm_v2 (warm-up)", __FILE__, __LINE__);
	}
	/* cuBLASLt's first heuristic query builds its tables (PyTorch's Linear
	 * layers ask one per call): also off the cold path. Not fatal. */
	if (r == 0)
		cuda_blaslt_warm(d, buf, N);
	/* Wait for the warm-up before its buffer goes, also after a failure. */
	cr = cuda_drv.CtxSynchronize();
	if (cr != CUDA_SUCCESS && r == 0)
		r = cu_fail(cr, "cuCtxSynchronize", __FILE__, __LINE__);
	cr = cuda_drv.MemFree(buf);
	if (cr != CUDA_SUCCESS && r == 0)
		r = cu_fail(cr, "cuMemFree_v2", __FILE__, __LINE__);
	return r;
}

void cuda_blas_release_warm(struct cuda_dev *d)
{
	cublasStatus_t s;

	pthread_mutex_lock(&d->lock);
	while (d->nwarm) {
		s = cuda_cublas.Destroy(d->warm[--d->nwarm]);
		if (s != CUBLAS_STATUS_SUCCESS)
			cuda_blas_fail(s, "cublasDestroy_v2", __FILE__, __LINE__);
	}
	pthread_mutex_unlock(&d->lock);
}

int cuda_blas_create(struct phos_device *dev, void **ret_handle)
{
	struct cuda_dev *d = cuda_dev(dev);
	cublasHandle_t h = NULL;
	int r;

	if (!d || !ret_handle)
		return -PHOS_CUDA_INVALID_VALUE;
	r = cuda_current(d);
	if (r < 0)
		return r;
	pthread_mutex_lock(&d->lock);
	if (d->nwarm)
		h = d->warm[--d->nwarm];
	pthread_mutex_unlock(&d->lock);
	if (!h) {
		r = handle_new(&h);
		if (r < 0)
			return r;
	}
	*ret_handle = h;
	return 0;
}

/* Puts a handle back into its just-created state: the default stream (which
 * also drops a user workspace, cublasSetStream's documented effect), default
 * math, host pointer mode. */
static int handle_reset(cublasHandle_t h)
{
	BLAS_CHECK(cuda_cublas.SetStream(h, NULL));
	BLAS_CHECK(cuda_cublas.SetMathMode(h, CUBLAS_DEFAULT_MATH));
	BLAS_CHECK(cuda_cublas.SetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
	return 0;
}

int cuda_blas_destroy(struct phos_device *dev, void *handle)
{
	struct cuda_dev *d = cuda_dev(dev);
	cublasHandle_t h = handle;
	bool pooled = false;
	int r;

	if (!d || !h)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	r = cuda_current(d);
	if (r < 0)
		return r;
	/* cublasDestroy waits for the device; so does recycling, so that no work of
	 * the old owner still uses the handle's workspace when the next one starts. */
	if (cuda_drv.CtxSynchronize() == CUDA_SUCCESS && handle_reset(h) == 0) {
		pthread_mutex_lock(&d->lock);
		if (d->nwarm < CUDA_WARM_HANDLES) {
			d->warm[d->nwarm++] = h;
			pooled = true;
		}
		pthread_mutex_unlock(&d->lock);
	}
	if (!pooled)
		BLAS_CHECK(cuda_cublas.Destroy(h));
	return 0;
}

int cuda_blas_set_stream(struct phos_device *dev, void *handle, void *stream)
{
	struct cuda_dev *d = cuda_dev(dev);
	int r;

	if (!d || !handle)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	r = cuda_current(d);
	if (r < 0)
		return r;
	/* cudaStream_t and CUstream are the same type; NULL is the legacy default stream. */
	BLAS_CHECK(cuda_cublas.SetStream((cublasHandle_t)handle, (cudaStream_t)stream));
	return 0;
}

int cuda_blas_set_math(struct phos_device *dev, void *handle, int mode)
{
	struct cuda_dev *d = cuda_dev(dev);
	int r;

	if (!d || !handle)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	r = cuda_current(d);
	if (r < 0)
		return r;
	BLAS_CHECK(cuda_cublas.SetMathMode((cublasHandle_t)handle, (cublasMath_t)mode));
	return 0;
}

int cuda_blas_set_workspace(struct phos_device *dev, void *handle, uint64_t addr, uint64_t size)
{
	struct cuda_dev *d = cuda_dev(dev);
	int r;

	if (!d || !handle)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	r = cuda_current(d);
	if (r < 0)
		return r;
	BLAS_CHECK(cuda_cublas.SetWorkspace((cublasHandle_t)handle, (void *)(uintptr_t)addr, size));
	return 0;
}

/* ------------------------------------------------------------------------ */
/* GEMM                                                                       */

/* IEEE binary16 bits of f, rounded to nearest even. */
static uint16_t half_from_float(float f)
{
	uint32_t x, sign, exp, mant, h, rem, shift, mid;
	int e;

	memcpy(&x, &f, sizeof(x));
	sign = (x >> 16) & 0x8000u;
	exp = (x >> 23) & 0xffu;
	mant = x & 0x7fffffu;
	if (exp == 0xffu)                               /* inf, nan */
		return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
	e = (int)exp - 127 + 15;
	if (e >= 0x1f)                                  /* too large: inf */
		return (uint16_t)(sign | 0x7c00u);
	if (e <= 0) {                                   /* subnormal or zero */
		if (e < -10)
			return (uint16_t)sign;
		mant |= 0x800000u;
		shift = (uint32_t)(14 - e);
		h = mant >> shift;
		rem = mant & ((1u << shift) - 1);
		mid = 1u << (shift - 1);
		if (rem > mid || (rem == mid && (h & 1)))
			h++;
		return (uint16_t)(sign | h);
	}
	h = ((uint32_t)e << 10) | (mant >> 13);
	rem = mant & 0x1fffu;
	if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
		h++;                                    /* may carry into the exponent, up to inf */
	return (uint16_t)(sign | h);
}

/* A scalar of the type cuBLAS reads alpha/beta as, for a compute type. */
union blas_scalar {
	float f;
	double d;
	uint16_t h;
	int32_t i;
	float c[2];
	double z[2];
};

/* The cudaDataType values older code passes as the compute type of cublasGemmEx
 * (the C++ header migrates them; C callers may pass them through unchanged). */
static cublasComputeType_t compute_migrate(int compute)
{
	switch (compute) {
	case CUDA_R_16F:
		return CUBLAS_COMPUTE_16F;
	case CUDA_R_32F:
	case CUDA_C_32F:
		return CUBLAS_COMPUTE_32F;
	case CUDA_R_64F:
	case CUDA_C_64F:
		return CUBLAS_COMPUTE_64F;
	case CUDA_R_32I:
	case CUDA_C_32I:
		return CUBLAS_COMPUTE_32I;
	default:
		return (cublasComputeType_t)compute;
	}
}

/* Fills *ret with v as the scalar type of compute; false for an unknown compute type. */
static bool scalar_for(cublasComputeType_t compute, double v, union blas_scalar *ret)
{
	memset(ret, 0, sizeof(*ret));
	switch (compute) {
	case CUBLAS_COMPUTE_16F:
	case CUBLAS_COMPUTE_16F_PEDANTIC:
		ret->h = half_from_float((float)v);
		return true;
	case CUBLAS_COMPUTE_32F:
	case CUBLAS_COMPUTE_32F_PEDANTIC:
	case CUBLAS_COMPUTE_32F_FAST_16F:
	case CUBLAS_COMPUTE_32F_FAST_16BF:
	case CUBLAS_COMPUTE_32F_FAST_TF32:
	case CUBLAS_COMPUTE_32F_EMULATED_16BFX9:
		ret->f = (float)v;
		return true;
	case CUBLAS_COMPUTE_64F:
	case CUBLAS_COMPUTE_64F_PEDANTIC:
	case CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT:
		ret->d = v;
		return true;
	case CUBLAS_COMPUTE_32I:
	case CUBLAS_COMPUTE_32I_PEDANTIC:
		ret->i = (int32_t)lrint(v);
		return true;
	default:
		return false;
	}
}

static bool type_is_complex(int t)
{
	switch (t) {
	case CUDA_C_16F:
	case CUDA_C_16BF:
	case CUDA_C_32F:
	case CUDA_C_64F:
	case CUDA_C_4I:
	case CUDA_C_4U:
	case CUDA_C_8I:
	case CUDA_C_8U:
	case CUDA_C_16I:
	case CUDA_C_16U:
	case CUDA_C_32I:
	case CUDA_C_32U:
	case CUDA_C_64I:
	case CUDA_C_64U:
		return true;
	default:
		return false;
	}
}

/*
 * One record covers cublasSgemm, cublasSgemmStridedBatched, cublasGemmEx and
 * cublasGemmStridedBatchedEx: all-f32 with CUBLAS_COMPUTE_32F goes to the Sgemm
 * forms (what the user called), anything else to the Ex forms (double and
 * complex GEMMs included: Dgemm is GemmEx with CUBLAS_COMPUTE_64F, Cgemm and
 * Zgemm take complex scalars of C's precision).
 */
int cuda_blas_gemm(struct phos_device *dev, void *handle, const struct phos_blas_gemm *g,
		   int *ret_blas_status)
{
	struct cuda_dev *d = cuda_dev(dev);
	cublasHandle_t h = handle;
	cublasOperation_t ta, tb;
	cublasComputeType_t compute;
	union blas_scalar alpha, beta;
	bool f32;
	cublasStatus_t s;
	int r;

	if (!d || !h || !g || g->batch < 1)
		return cuda_blas_result(CUBLAS_STATUS_INVALID_VALUE, ret_blas_status, "gemm (arguments)");
	compute = compute_migrate(g->compute);
	if (type_is_complex(g->ctype)) {
		/* Cgemm/Zgemm (and complex GemmEx): the scalars are complex of C's precision */
		if (g->ctype != CUDA_C_32F && g->ctype != CUDA_C_64F)
			return cuda_blas_result(CUBLAS_STATUS_NOT_SUPPORTED, ret_blas_status, "gemm (complex types)");
		memset(&alpha, 0, sizeof(alpha));
		memset(&beta, 0, sizeof(beta));
		if (g->ctype == CUDA_C_32F) {
			alpha.c[0] = (float)g->alpha, alpha.c[1] = (float)g->alpha_im;
			beta.c[0] = (float)g->beta, beta.c[1] = (float)g->beta_im;
		} else {
			alpha.z[0] = g->alpha, alpha.z[1] = g->alpha_im;
			beta.z[0] = g->beta, beta.z[1] = g->beta_im;
		}
	} else if (!scalar_for(compute, g->alpha, &alpha) || !scalar_for(compute, g->beta, &beta)) {
		return cuda_blas_result(CUBLAS_STATUS_NOT_SUPPORTED, ret_blas_status, "gemm (compute type)");
	}
	r = cuda_current(d);
	if (r < 0)
		return r;

	ta = (cublasOperation_t)g->transa;
	tb = (cublasOperation_t)g->transb;
	f32 = g->atype == CUDA_R_32F && g->btype == CUDA_R_32F && g->ctype == CUDA_R_32F &&
	      compute == CUBLAS_COMPUTE_32F;
	if (g->arrays && f32)
		s = cuda_cublas.SgemmBatched(h, ta, tb, g->m, g->n, g->k, &alpha.f, (const float *const *)(uintptr_t)g->a,
					     g->lda, (const float *const *)(uintptr_t)g->b, g->ldb, &beta.f,
					     (float *const *)(uintptr_t)g->c, g->ldc, g->batch);
	else if (g->arrays)
		s = cuda_cublas.GemmBatchedEx(h, ta, tb, g->m, g->n, g->k, &alpha, (const void *const *)(uintptr_t)g->a,
					      (cudaDataType)g->atype, g->lda, (const void *const *)(uintptr_t)g->b,
					      (cudaDataType)g->btype, g->ldb, &beta, (void *const *)(uintptr_t)g->c,
					      (cudaDataType)g->ctype, g->ldc, g->batch, compute, (cublasGemmAlgo_t)g->algo);
	else if (f32 && g->batch == 1)
		s = cuda_cublas.Sgemm(h, ta, tb, g->m, g->n, g->k, &alpha.f, (const float *)(uintptr_t)g->a,
				      g->lda, (const float *)(uintptr_t)g->b, g->ldb, &beta.f,
				      (float *)(uintptr_t)g->c, g->ldc);
	else if (f32)
		s = cuda_cublas.SgemmStridedBatched(h, ta, tb, g->m, g->n, g->k, &alpha.f,
						    (const float *)(uintptr_t)g->a, g->lda, g->stride_a,
						    (const float *)(uintptr_t)g->b, g->ldb, g->stride_b, &beta.f,
						    (float *)(uintptr_t)g->c, g->ldc, g->stride_c, g->batch);
	else if (g->batch == 1)
		s = cuda_cublas.GemmEx(h, ta, tb, g->m, g->n, g->k, &alpha, (const void *)(uintptr_t)g->a,
				       (cudaDataType)g->atype, g->lda, (const void *)(uintptr_t)g->b,
				       (cudaDataType)g->btype, g->ldb, &beta, (void *)(uintptr_t)g->c,
				       (cudaDataType)g->ctype, g->ldc, compute, (cublasGemmAlgo_t)g->algo);
	else
		s = cuda_cublas.GemmStridedBatchedEx(h, ta, tb, g->m, g->n, g->k, &alpha,
						     (const void *)(uintptr_t)g->a, (cudaDataType)g->atype,
						     g->lda, g->stride_a, (const void *)(uintptr_t)g->b,
						     (cudaDataType)g->btype, g->ldb, g->stride_b, &beta,
						     (void *)(uintptr_t)g->c, (cudaDataType)g->ctype, g->ldc,
						     g->stride_c, g->batch, compute, (cublasGemmAlgo_t)g->algo);
	return cuda_blas_result(s, ret_blas_status, f32 ? "cublasSgemm" : "cublasGemmEx");
}

int cuda_blas_l1(struct phos_device *dev, void *handle, const struct phos_blas_l1 *op, float *ret_result,
		 int *ret_blas_status)
{
	struct cuda_dev *d = cuda_dev(dev);
	cublasHandle_t h = handle;
	const float alpha = op ? (float)op->alpha : 0.0f;
	float result = 0.0f;
	float *x, *y;
	cublasStatus_t s;
	int r;

	if (!d || !h || !op)
		return cuda_blas_result(CUBLAS_STATUS_INVALID_VALUE, ret_blas_status, "l1 (arguments)");
	r = cuda_current(d);
	if (r < 0)
		return r;
	x = (float *)(uintptr_t)op->x;
	y = (float *)(uintptr_t)op->y;
	switch (op->kind) {
	case PHOS_BLAS_SAXPY:
		s = cuda_cublas.Saxpy(h, op->n, &alpha, x, op->incx, y, op->incy);
		break;
	case PHOS_BLAS_SSCAL:
		s = cuda_cublas.Sscal(h, op->n, &alpha, x, op->incx);
		break;
	case PHOS_BLAS_SDOT:
		/* Host pointer mode: returns once the result is on the host. */
		s = cuda_cublas.Sdot(h, op->n, x, op->incx, y, op->incy, &result);
		if (s == CUBLAS_STATUS_SUCCESS && ret_result)
			*ret_result = result;
		break;
	case PHOS_BLAS_SNRM2:
		s = cuda_cublas.Snrm2(h, op->n, x, op->incx, &result);
		if (s == CUBLAS_STATUS_SUCCESS && ret_result)
			*ret_result = result;
		break;
	default:
		s = CUBLAS_STATUS_INVALID_VALUE;
		break;
	}
	return cuda_blas_result(s, ret_blas_status, "cublas level-1 call");
}

int cuda_blas_gemv(struct phos_device *dev, void *handle, const struct phos_blas_gemv *op,
		   int *ret_blas_status)
{
	struct cuda_dev *d = cuda_dev(dev);
	cublasHandle_t h = handle;
	float alpha, beta;
	cublasStatus_t s;
	int r;

	if (!d || !h || !op)
		return cuda_blas_result(CUBLAS_STATUS_INVALID_VALUE, ret_blas_status, "gemv (arguments)");
	r = cuda_current(d);
	if (r < 0)
		return r;
	alpha = (float)op->alpha;
	beta = (float)op->beta;
	s = cuda_cublas.Sgemv(h, (cublasOperation_t)op->trans, op->m, op->n, &alpha,
			      (const float *)(uintptr_t)op->a, op->lda, (const float *)(uintptr_t)op->x,
			      op->incx, &beta, (float *)(uintptr_t)op->y, op->incy);
	return cuda_blas_result(s, ret_blas_status, "cublasSgemv_v2");
}

/* ------------------------------------------------------------------------ */
/* Level 1-3 routines of every precision (phos_blas_op)                        */

static cudaDataType real_of(cudaDataType t)
{
	return t == CUDA_C_32F ? CUDA_R_32F : t == CUDA_C_64F ? CUDA_R_64F : t;
}

/* One call's arguments, as cuda_blas_call decoded them: the handle, the
 * op, the type's index (S, D, C, Z), the matrix and scalar types, the host
 * scalars and the device pointers. */
struct blas_call {
	cublasHandle_t h;
	const struct phos_blas_op *op;
	int ti;
	cudaDataType t, st;
	union blas_scalar alpha, beta;
	void *x, *y, *a, *b;
	uint8_t *result;
};

/* Level 1: vectors (rot's c is alpha's first part). */
static cublasStatus_t blas_vector(const struct blas_call *c)
{
	const int fn = c->op->fn;

	switch (fn) {
	case PHOS_BLAS_AXPY: {
		__typeof__(cuda_cublas.AxpyS) f[4] = { cuda_cublas.AxpyS, cuda_cublas.AxpyD, cuda_cublas.AxpyC,
						       cuda_cublas.AxpyZ };

		return f[c->ti](c->h, c->op->n, &c->alpha, c->x, c->op->incx, c->y, c->op->incy);
	}
	case PHOS_BLAS_SCAL: {
		/* a real scalar on a complex vector: Csscal / Zdscal */
		__typeof__(cuda_cublas.ScalS) f[4] = { cuda_cublas.ScalS, cuda_cublas.ScalD,
						       c->st == c->t ? cuda_cublas.ScalC : cuda_cublas.ScalCs,
						       c->st == c->t ? cuda_cublas.ScalZ : cuda_cublas.ScalZd };

		return f[c->ti](c->h, c->op->n, &c->alpha, c->x, c->op->incx);
	}
	case PHOS_BLAS_DOT:
	case PHOS_BLAS_DOTC: {
		__typeof__(cuda_cublas.DotS) f[4] = { cuda_cublas.DotS, cuda_cublas.DotD,
						      fn == PHOS_BLAS_DOT ? cuda_cublas.DotC : cuda_cublas.DotcC,
						      fn == PHOS_BLAS_DOT ? cuda_cublas.DotZ : cuda_cublas.DotcZ };

		return f[c->ti](c->h, c->op->n, c->x, c->op->incx, c->y, c->op->incy, c->result);
	}
	case PHOS_BLAS_NRM2:
	case PHOS_BLAS_ASUM: {
		__typeof__(cuda_cublas.Nrm2S) f[2][4] = {
			{ cuda_cublas.Nrm2S, cuda_cublas.Nrm2D, cuda_cublas.Nrm2C, cuda_cublas.Nrm2Z },
			{ cuda_cublas.AsumS, cuda_cublas.AsumD, cuda_cublas.AsumC, cuda_cublas.AsumZ },
		};

		return f[fn == PHOS_BLAS_ASUM][c->ti](c->h, c->op->n, c->x, c->op->incx, c->result);
	}
	case PHOS_BLAS_AMAX:
	case PHOS_BLAS_AMIN: {
		__typeof__(cuda_cublas.IamaxS) f[2][4] = {
			{ cuda_cublas.IamaxS, cuda_cublas.IamaxD, cuda_cublas.IamaxC, cuda_cublas.IamaxZ },
			{ cuda_cublas.IaminS, cuda_cublas.IaminD, cuda_cublas.IaminC, cuda_cublas.IaminZ },
		};

		return f[fn == PHOS_BLAS_AMIN][c->ti](c->h, c->op->n, c->x, c->op->incx,
				(int *)c->result);
	}
	case PHOS_BLAS_COPY: {
		__typeof__(cuda_cublas.CopyS) f[4] = { cuda_cublas.CopyS, cuda_cublas.CopyD, cuda_cublas.CopyC,
						       cuda_cublas.CopyZ };

		return f[c->ti](c->h, c->op->n, c->x, c->op->incx, c->y, c->op->incy);
	}
	case PHOS_BLAS_SWAP: {
		__typeof__(cuda_cublas.SwapS) f[4] = { cuda_cublas.SwapS, cuda_cublas.SwapD, cuda_cublas.SwapC,
						       cuda_cublas.SwapZ };

		return f[c->ti](c->h, c->op->n, c->x, c->op->incx, c->y, c->op->incy);
	}
	case PHOS_BLAS_ROT: {
		/* c is alpha's first part, real; s is beta: real (srot, drot, csrot,
		 * zdrot) or complex (crot, zrot) */
		__typeof__(cuda_cublas.RotS) f[4] = { cuda_cublas.RotS, cuda_cublas.RotD,
						      c->st == c->t ? cuda_cublas.RotC : cuda_cublas.RotCs,
						      c->st == c->t ? cuda_cublas.RotZ : cuda_cublas.RotZd };

		return f[c->ti](c->h, c->op->n, c->x, c->op->incx, c->y, c->op->incy, &c->alpha, &c->beta);
	}
	default:
		return CUBLAS_STATUS_INVALID_VALUE;
	}
}

/* Level 2: a matrix and vectors. */
static cublasStatus_t blas_matrix_vector(const struct blas_call *c)
{
	const int fn = c->op->fn;

	switch (fn) {
	case PHOS_BLAS_GEMV: {
		__typeof__(cuda_cublas.GemvS) f[4] = { cuda_cublas.GemvS, cuda_cublas.GemvD, cuda_cublas.GemvC,
						       cuda_cublas.GemvZ };

		return f[c->ti](c->h, (cublasOperation_t)c->op->trans, c->op->m, c->op->n, &c->alpha, c->a,
				c->op->lda, c->x, c->op->incx, &c->beta, c->y, c->op->incy);
	}
	case PHOS_BLAS_GER:
	case PHOS_BLAS_GERC: {
		__typeof__(cuda_cublas.GerS) f[4] = { cuda_cublas.GerS, cuda_cublas.GerD,
						      fn == PHOS_BLAS_GER ? cuda_cublas.GeruC : cuda_cublas.GercC,
						      fn == PHOS_BLAS_GER ? cuda_cublas.GeruZ : cuda_cublas.GercZ };

		return f[c->ti](c->h, c->op->m, c->op->n, &c->alpha, c->x, c->op->incx, c->y, c->op->incy,
				c->a, c->op->lda);
	}
	case PHOS_BLAS_SYMV:
	case PHOS_BLAS_HEMV: {
		__typeof__(cuda_cublas.SymvS) f[4] = { cuda_cublas.SymvS, cuda_cublas.SymvD,
						       fn == PHOS_BLAS_SYMV ? cuda_cublas.SymvC : cuda_cublas.HemvC,
						       fn == PHOS_BLAS_SYMV ? cuda_cublas.SymvZ : cuda_cublas.HemvZ };

		if (fn == PHOS_BLAS_HEMV && c->ti < 2)
			return CUBLAS_STATUS_NOT_SUPPORTED;
		return f[c->ti](c->h, (cublasFillMode_t)c->op->uplo, c->op->n, &c->alpha, c->a, c->op->lda,
				c->x, c->op->incx, &c->beta, c->y, c->op->incy);
	}
	case PHOS_BLAS_SYR:
	case PHOS_BLAS_HER: {
		__typeof__(cuda_cublas.SyrS) f[4] = { cuda_cublas.SyrS, cuda_cublas.SyrD,
						      fn == PHOS_BLAS_SYR ? cuda_cublas.SyrC : cuda_cublas.HerC,
						      fn == PHOS_BLAS_SYR ? cuda_cublas.SyrZ : cuda_cublas.HerZ };

		/* her's alpha is real (scal_type), syr's of the vector type */
		if ((fn == PHOS_BLAS_HER) != (c->st != c->t) || (fn == PHOS_BLAS_HER && c->ti < 2))
			return CUBLAS_STATUS_NOT_SUPPORTED;
		return f[c->ti](c->h, (cublasFillMode_t)c->op->uplo, c->op->n, &c->alpha, c->x, c->op->incx,
				c->a, c->op->lda);
	}
	case PHOS_BLAS_SYR2:
	case PHOS_BLAS_HER2: {
		__typeof__(cuda_cublas.Syr2S) f[4] = { cuda_cublas.Syr2S, cuda_cublas.Syr2D,
						       fn == PHOS_BLAS_SYR2 ? cuda_cublas.Syr2C : cuda_cublas.Her2C,
						       fn == PHOS_BLAS_SYR2 ? cuda_cublas.Syr2Z : cuda_cublas.Her2Z };

		if (fn == PHOS_BLAS_HER2 && c->ti < 2)
			return CUBLAS_STATUS_NOT_SUPPORTED;
		return f[c->ti](c->h, (cublasFillMode_t)c->op->uplo, c->op->n, &c->alpha, c->x, c->op->incx,
				c->y, c->op->incy, c->a, c->op->lda);
	}
	case PHOS_BLAS_TRMV:
	case PHOS_BLAS_TRSV: {
		__typeof__(cuda_cublas.TrmvS) f[2][4] = {
			{ cuda_cublas.TrmvS, cuda_cublas.TrmvD, cuda_cublas.TrmvC, cuda_cublas.TrmvZ },
			{ cuda_cublas.TrsvS, cuda_cublas.TrsvD, cuda_cublas.TrsvC, cuda_cublas.TrsvZ },
		};

		return f[fn == PHOS_BLAS_TRSV][c->ti](c->h, (cublasFillMode_t)c->op->uplo,
				(cublasOperation_t)c->op->trans, (cublasDiagType_t)c->op->diag, c->op->n,
				c->a, c->op->lda, c->x, c->op->incx);
	}
	default:
		return CUBLAS_STATUS_INVALID_VALUE;
	}
}

/* Level 3: matrices, and the batched triangular solve on device arrays of pointers. */
static cublasStatus_t blas_matrix(const struct blas_call *c)
{
	const int fn = c->op->fn;

	switch (fn) {
	case PHOS_BLAS_SYRK:
	case PHOS_BLAS_HERK: {
		__typeof__(cuda_cublas.SyrkS) f[4] = { cuda_cublas.SyrkS, cuda_cublas.SyrkD,
						       fn == PHOS_BLAS_SYRK ? cuda_cublas.SyrkC : cuda_cublas.HerkC,
						       fn == PHOS_BLAS_SYRK ? cuda_cublas.SyrkZ : cuda_cublas.HerkZ };

		/* herk's alpha and beta are real (scal_type), syrk's of the matrix type */
		if ((fn == PHOS_BLAS_HERK) != (c->st != c->t) || (fn == PHOS_BLAS_HERK && c->ti < 2))
			return CUBLAS_STATUS_NOT_SUPPORTED;
		return f[c->ti](c->h, (cublasFillMode_t)c->op->uplo, (cublasOperation_t)c->op->trans,
				c->op->n, c->op->m, &c->alpha, c->a, c->op->lda, &c->beta, c->b, c->op->ldb);
	}
	case PHOS_BLAS_SYMM:
	case PHOS_BLAS_HEMM: {
		__typeof__(cuda_cublas.SymmS) f[4] = { cuda_cublas.SymmS, cuda_cublas.SymmD,
						       fn == PHOS_BLAS_SYMM ? cuda_cublas.SymmC : cuda_cublas.HemmC,
						       fn == PHOS_BLAS_SYMM ? cuda_cublas.SymmZ : cuda_cublas.HemmZ };

		if (fn == PHOS_BLAS_HEMM && c->ti < 2)
			return CUBLAS_STATUS_NOT_SUPPORTED;
		return f[c->ti](c->h, (cublasSideMode_t)c->op->side, (cublasFillMode_t)c->op->uplo, c->op->m,
				c->op->n, &c->alpha, c->a, c->op->lda, c->b, c->op->ldb, &c->beta,
				(void *)(uintptr_t)c->op->c, c->op->ldc);
	}
	case PHOS_BLAS_SYR2K:
	case PHOS_BLAS_HER2K: {
		__typeof__(cuda_cublas.Syr2kS) f[4] = { cuda_cublas.Syr2kS, cuda_cublas.Syr2kD,
							fn == PHOS_BLAS_SYR2K ? cuda_cublas.Syr2kC : cuda_cublas.Her2kC,
							fn == PHOS_BLAS_SYR2K ? cuda_cublas.Syr2kZ : cuda_cublas.Her2kZ };
		/* her2k's beta is real: beta's first part, laid out as its real type */
		if (fn == PHOS_BLAS_HER2K && c->ti < 2)
			return CUBLAS_STATUS_NOT_SUPPORTED;
		return f[c->ti](c->h, (cublasFillMode_t)c->op->uplo, (cublasOperation_t)c->op->trans,
				c->op->n, c->op->k, &c->alpha, c->a, c->op->lda, c->b, c->op->ldb, &c->beta,
				(void *)(uintptr_t)c->op->c, c->op->ldc);
	}
	case PHOS_BLAS_TRMM: {
		__typeof__(cuda_cublas.TrmmS) f[4] = { cuda_cublas.TrmmS, cuda_cublas.TrmmD, cuda_cublas.TrmmC,
						       cuda_cublas.TrmmZ };

		return f[c->ti](c->h, (cublasSideMode_t)c->op->side, (cublasFillMode_t)c->op->uplo,
				(cublasOperation_t)c->op->trans, (cublasDiagType_t)c->op->diag, c->op->m,
				c->op->n, &c->alpha, c->a, c->op->lda, c->b, c->op->ldb,
				(void *)(uintptr_t)c->op->c, c->op->ldc);
	}
	case PHOS_BLAS_TRSM: {
		__typeof__(cuda_cublas.TrsmS) f[4] = { cuda_cublas.TrsmS, cuda_cublas.TrsmD, cuda_cublas.TrsmC,
						       cuda_cublas.TrsmZ };

		return f[c->ti](c->h, (cublasSideMode_t)c->op->side, (cublasFillMode_t)c->op->uplo,
				(cublasOperation_t)c->op->trans, (cublasDiagType_t)c->op->diag, c->op->m,
				c->op->n, &c->alpha, c->a, c->op->lda, c->b, c->op->ldb);
	}
	case PHOS_BLAS_TRSM_BATCHED: {   /* a and b are the device arrays of pointers */
		__typeof__(cuda_cublas.TrsmBatchedS) f[4] = { cuda_cublas.TrsmBatchedS, cuda_cublas.TrsmBatchedD,
							      cuda_cublas.TrsmBatchedC, cuda_cublas.TrsmBatchedZ };

		return f[c->ti](c->h, (cublasSideMode_t)c->op->side, (cublasFillMode_t)c->op->uplo,
				(cublasOperation_t)c->op->trans, (cublasDiagType_t)c->op->diag, c->op->m,
				c->op->n, &c->alpha, (const void *const *)c->a, c->op->lda,
				(void *const *)c->b, c->op->ldb, c->op->batch);
	}
	default:
		return CUBLAS_STATUS_INVALID_VALUE;
	}
}

/* Every routine through its typed form, picked by type: the type-generic Ex
 * forms do not take every type (cublasAsumEx answered NOT_SUPPORTED for
 * complex vectors on an H100), and the typed one is what the
 * program called. Scalars are host values (the executor read
 * device-mode ones), so every handle stays in host pointer mode and results
 * come back to the host. */
int cuda_blas_call(struct phos_device *dev, void *handle, const struct phos_blas_op *op, void *ret_result,
		   int *ret_blas_status)
{
	struct cuda_dev *d = cuda_dev(dev);
	cublasHandle_t h = handle;
	uint8_t result[16] = { 0 };
	struct blas_call c = { .h = h, .op = op, .result = result };
	union blas_scalar *alpha = &c.alpha, *beta = &c.beta;
	cudaDataType t, st;
	cublasStatus_t s;
	int r;

	if (!d || !h || !op)
		return cuda_blas_result(CUBLAS_STATUS_INVALID_VALUE, ret_blas_status, "blas call (arguments)");
	t = (cudaDataType)op->type;
	st = (cudaDataType)op->scal_type;
	c.ti = t == CUDA_R_32F ? 0 : t == CUDA_R_64F ? 1 : t == CUDA_C_32F ? 2 : t == CUDA_C_64F ? 3 : -1;
	if (c.ti < 0 || (st != t && st != real_of(t)))
		return cuda_blas_result(CUBLAS_STATUS_NOT_SUPPORTED, ret_blas_status, "blas call (type)");
	c.t = t;
	c.st = st;
	memset(alpha, 0, sizeof(*alpha));
	memset(beta, 0, sizeof(*beta));
	if (st == CUDA_R_32F || st == CUDA_C_32F) {
		alpha->c[0] = (float)op->alpha[0], alpha->c[1] = (float)op->alpha[1];
		beta->c[0] = (float)op->beta[0], beta->c[1] = (float)op->beta[1];
	} else {
		alpha->z[0] = op->alpha[0], alpha->z[1] = op->alpha[1];
		beta->z[0] = op->beta[0], beta->z[1] = op->beta[1];
	}
	r = cuda_current(d);
	if (r < 0)
		return r;
	c.x = (void *)(uintptr_t)op->x;
	c.y = (void *)(uintptr_t)op->y;
	c.a = (void *)(uintptr_t)op->a;
	c.b = (void *)(uintptr_t)op->b;
	switch (op->fn) {
	case PHOS_BLAS_AXPY: case PHOS_BLAS_SCAL: case PHOS_BLAS_DOT: case PHOS_BLAS_DOTC:
	case PHOS_BLAS_NRM2: case PHOS_BLAS_ASUM: case PHOS_BLAS_AMAX: case PHOS_BLAS_AMIN:
	case PHOS_BLAS_COPY: case PHOS_BLAS_SWAP: case PHOS_BLAS_ROT:
		s = blas_vector(&c);
		break;
	case PHOS_BLAS_GEMV: case PHOS_BLAS_GER: case PHOS_BLAS_GERC: case PHOS_BLAS_SYMV:
	case PHOS_BLAS_HEMV: case PHOS_BLAS_SYR: case PHOS_BLAS_HER: case PHOS_BLAS_SYR2:
	case PHOS_BLAS_HER2: case PHOS_BLAS_TRMV: case PHOS_BLAS_TRSV:
		s = blas_matrix_vector(&c);
		break;
	default:
		s = blas_matrix(&c);
		break;
	}
	if (s == CUBLAS_STATUS_SUCCESS && ret_result)
		memcpy(ret_result, result, sizeof(result));
	return cuda_blas_result(s, ret_blas_status, "cublas level 1-3 call");
}

/* Batched LU and QR on device arrays of pointers, S and D. getrsBatched,
 * geqrfBatched and gelsBatched report argument errors in a host int, which
 * stays here: the preload checked them. */
int cuda_blas_lu(struct phos_device *dev, void *handle, const struct phos_blas_lu *op, int *ret_blas_status)
{
	struct cuda_dev *d = cuda_dev(dev);
	cublasHandle_t h = handle;
	void *const *a, *const *c;
	int *piv, *info, host_info = 0, r;
	bool dbl;
	cublasStatus_t s;

	if (!d || !h || !op)
		return cuda_blas_result(CUBLAS_STATUS_INVALID_VALUE, ret_blas_status, "batched LU (arguments)");
	if (op->type != CUDA_R_32F && op->type != CUDA_R_64F)
		return cuda_blas_result(CUBLAS_STATUS_NOT_SUPPORTED, ret_blas_status, "batched LU (type)");
	r = cuda_current(d);
	if (r < 0)
		return r;
	dbl = op->type == CUDA_R_64F;
	a = (void *const *)(uintptr_t)op->a;
	c = (void *const *)(uintptr_t)op->c;
	piv = (int *)(uintptr_t)op->pivots;
	info = (int *)(uintptr_t)op->info;
	switch (op->fn) {
	case PHOS_BLAS_GETRF:
		s = (dbl ? cuda_cublas.GetrfD : cuda_cublas.GetrfS)(h, op->n, a, op->lda, piv, info, op->batch);
		break;
	case PHOS_BLAS_GETRI:
		s = (dbl ? cuda_cublas.GetriD : cuda_cublas.GetriS)(h, op->n, (const void *const *)a, op->lda, piv, c,
								     op->ldc, info, op->batch);
		break;
	case PHOS_BLAS_GETRS:
		s = (dbl ? cuda_cublas.GetrsD : cuda_cublas.GetrsS)(h, (cublasOperation_t)op->trans, op->n, op->nrhs,
								     (const void *const *)a, op->lda, piv, c, op->ldc,
								     &host_info, op->batch);
		break;
	case PHOS_BLAS_MATINV:
		s = (dbl ? cuda_cublas.MatinvD : cuda_cublas.MatinvS)(h, op->n, (const void *const *)a, op->lda, c,
								       op->ldc, info, op->batch);
		break;
	case PHOS_BLAS_GEQRF:
		s = (dbl ? cuda_cublas.GeqrfD : cuda_cublas.GeqrfS)(h, op->m, op->n, a, op->lda, c, &host_info,
								     op->batch);
		break;
	case PHOS_BLAS_GELS:
		s = (dbl ? cuda_cublas.GelsD : cuda_cublas.GelsS)(h, (cublasOperation_t)op->trans, op->m, op->n,
								   op->nrhs, a, op->lda, c, op->ldc, &host_info, info,
								   op->batch);
		break;
	default:
		s = CUBLAS_STATUS_INVALID_VALUE;
		break;
	}
	return cuda_blas_result(s, ret_blas_status, "cublas batched LU");
}
