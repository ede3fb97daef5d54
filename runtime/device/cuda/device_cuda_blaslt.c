/* SPDX-License-Identifier: MIT */
/*
 * cuBLASLt for the cuda device backend (libcublasLt.so.13 through dlopen, at
 * the first call; a program that never calls cuBLASLt never loads it).
 *
 * Each device has one cublasLtHandle_t (made at its first call, destroyed at
 * close). A call builds the real descriptor and layouts from the record,
 * setting each attribute that differs from cuBLASLt's default, runs, and
 * destroys them: they are host objects of a few hundred bytes, and nothing
 * of them outlives the call, so nothing of cuBLASLt is executor state.
 */
#include "device_cuda_syms.h"

#include <cublasLt.h>
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "log.h"

#define LT_SYMS(X)                                                                                         \
	X(Create, "cublasLtCreate", cublasStatus_t, (cublasLtHandle_t *))                                  \
	X(Destroy, "cublasLtDestroy", cublasStatus_t, (cublasLtHandle_t))                                  \
	X(DescCreate, "cublasLtMatmulDescCreate", cublasStatus_t,                                          \
	  (cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t))                                   \
	X(DescDestroy, "cublasLtMatmulDescDestroy", cublasStatus_t, (cublasLtMatmulDesc_t))                \
	X(DescSet, "cublasLtMatmulDescSetAttribute", cublasStatus_t,                                       \
	  (cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void *, size_t))                    \
	X(LayoutCreate, "cublasLtMatrixLayoutCreate", cublasStatus_t,                                      \
	  (cublasLtMatrixLayout_t *, cudaDataType, uint64_t, uint64_t, int64_t))                           \
	X(LayoutDestroy, "cublasLtMatrixLayoutDestroy", cublasStatus_t, (cublasLtMatrixLayout_t))          \
	X(LayoutSet, "cublasLtMatrixLayoutSetAttribute", cublasStatus_t,                                   \
	  (cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t, const void *, size_t))                 \
	X(PrefCreate, "cublasLtMatmulPreferenceCreate", cublasStatus_t, (cublasLtMatmulPreference_t *))    \
	X(PrefDestroy, "cublasLtMatmulPreferenceDestroy", cublasStatus_t, (cublasLtMatmulPreference_t))    \
	X(PrefSet, "cublasLtMatmulPreferenceSetAttribute", cublasStatus_t,                                 \
	  (cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void *, size_t))        \
	X(Heuristic, "cublasLtMatmulAlgoGetHeuristic", cublasStatus_t,                                     \
	  (cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,         \
	   cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,                \
	   cublasLtMatmulHeuristicResult_t *, int *))                                                      \
	X(Matmul, "cublasLtMatmul", cublasStatus_t,                                                        \
	  (cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *, cublasLtMatrixLayout_t,     \
	   const void *, cublasLtMatrixLayout_t, const void *, const void *, cublasLtMatrixLayout_t,       \
	   void *, cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t))

#define LT_FIELD(field, export, ret, args) ret(*field) args;
static struct {
	LT_SYMS(LT_FIELD)
} lt;
#undef LT_FIELD

static pthread_once_t lt_once = PTHREAD_ONCE_INIT;
static int lt_status;

static void lt_load(void)
{
	void *lib = cuda_lib_open("libcublasLt.so.13");

	if (!lib) {
		lt_status = -PHOS_CUDA_INITIALIZATION;
		return;
	}
#define LT_LOAD(field, export, ret, args)                                               \
	if (lt_status == 0) {                                                           \
		void *p_ = dlsym(lib, export);                                          \
		if (!p_) {                                                              \
			phos_err("cuda: libcublasLt.so.13 lacks %s", export);           \
			lt_status = -PHOS_CUDA_INITIALIZATION;                          \
		}                                                                       \
		memcpy(&lt.field, &p_, sizeof(p_));                                     \
	}
	LT_SYMS(LT_LOAD)
#undef LT_LOAD
}

/* The library loaded and the device's handle made; its context current. */
static int lt_handle(struct cuda_dev *d, cublasLtHandle_t *ret)
{
	int r;

	pthread_once(&lt_once, lt_load);
	if (lt_status < 0)
		return lt_status;
	r = cuda_current(d);
	if (r < 0)
		return r;
	pthread_mutex_lock(&d->lock);
	if (!d->lt) {
		cublasLtHandle_t h;
		cublasStatus_t s = lt.Create(&h);

		if (s != CUBLAS_STATUS_SUCCESS) {
			pthread_mutex_unlock(&d->lock);
			return cuda_blas_result(s, NULL, "cublasLtCreate");
		}
		d->lt = h;
	}
	*ret = d->lt;
	pthread_mutex_unlock(&d->lock);
	return 0;
}

void cuda_blaslt_release(struct cuda_dev *d)
{
	if (d->lt)
		(void)lt.Destroy(d->lt);
	d->lt = NULL;
}

/* The real objects of one call. */
struct lt_problem {
	cublasLtMatmulDesc_t desc;
	cublasLtMatrixLayout_t l[4];
};

static void problem_free(struct lt_problem *p)
{
	for (int i = 0; i < 4; i++)
		if (p->l[i])
			lt.LayoutDestroy(p->l[i]);
	if (p->desc)
		lt.DescDestroy(p->desc);
}

static cublasStatus_t layout_make(const struct phos_blaslt_layout *in, cublasLtMatrixLayout_t *ret)
{
	cublasStatus_t s = lt.LayoutCreate(ret, (cudaDataType)in->type, in->rows, in->cols, in->ld);

	if (s == CUBLAS_STATUS_SUCCESS && in->order)
		s = lt.LayoutSet(*ret, CUBLASLT_MATRIX_LAYOUT_ORDER, &in->order, sizeof(in->order));
	if (s == CUBLAS_STATUS_SUCCESS && in->batch != 1)
		s = lt.LayoutSet(*ret, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &in->batch, sizeof(in->batch));
	if (s == CUBLAS_STATUS_SUCCESS && in->stride)
		s = lt.LayoutSet(*ret, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &in->stride, sizeof(in->stride));
	return s;
}

#define DESC_SET(attr, value)                                                        \
	do {                                                                         \
		if (s == CUBLAS_STATUS_SUCCESS)                                      \
			s = lt.DescSet(p->desc, attr, &(value), sizeof(value));      \
	} while (0)

static cublasStatus_t problem_make(const struct phos_blaslt_desc *d, const struct phos_blaslt_layout *const in[4],
				   struct lt_problem *p)
{
	const cublasLtMatmulDescAttributes_t scale_attr[4] = {
		CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
		CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER,
	};
	cublasStatus_t s;

	memset(p, 0, sizeof(*p));
	s = lt.DescCreate(&p->desc, (cublasComputeType_t)d->compute, (cudaDataType_t)d->scale_type);
	if (d->pointer_mode)
		DESC_SET(CUBLASLT_MATMUL_DESC_POINTER_MODE, d->pointer_mode);
	if (d->transa)
		DESC_SET(CUBLASLT_MATMUL_DESC_TRANSA, d->transa);
	if (d->transb)
		DESC_SET(CUBLASLT_MATMUL_DESC_TRANSB, d->transb);
	if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
		uint32_t e = (uint32_t)d->epilogue;

		DESC_SET(CUBLASLT_MATMUL_DESC_EPILOGUE, e);
	}
	if (d->bias) {
		const void *v = (const void *)(uintptr_t)d->bias;

		DESC_SET(CUBLASLT_MATMUL_DESC_BIAS_POINTER, v);
	}
	if (d->bias_type >= 0)
		DESC_SET(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, d->bias_type);
	if (d->bias_stride)
		DESC_SET(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, d->bias_stride);
	if (d->aux) {
		void *v = (void *)(uintptr_t)d->aux;

		DESC_SET(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, v);
	}
	if (d->aux_ld)
		DESC_SET(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, d->aux_ld);
	if (d->aux_stride)
		DESC_SET(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, d->aux_stride);
	if (d->aux_type >= 0)
		DESC_SET(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, d->aux_type);
	if (d->sm_count)
		DESC_SET(CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, d->sm_count);
	if (d->fast_accum) {
		int8_t v = (int8_t)d->fast_accum;

		DESC_SET(CUBLASLT_MATMUL_DESC_FAST_ACCUM, v);
	}
	for (int i = 0; i < 4; i++)
		if (d->scale[i]) {
			const void *v = (const void *)(uintptr_t)d->scale[i];

			DESC_SET(scale_attr[i], v);
		}
	if (d->amax_d) {
		void *v = (void *)(uintptr_t)d->amax_d;

		DESC_SET(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, v);
	}
	for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
		s = layout_make(in[i], &p->l[i]);
	if (s != CUBLAS_STATUS_SUCCESS)
		problem_free(p);
	return s;
}

void cuda_blaslt_warm(struct cuda_dev *d, CUdeviceptr buf, int n)
{
	static const int types[] = { CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF };
	const float alpha = 1.0f, beta = 0.0f;
	cublasLtHandle_t h;
	int r = lt_handle(d, &h);

	for (size_t i = 0; r == 0 && i < sizeof(types) / sizeof(types[0]); i++) {
		const struct phos_blaslt_layout l = { .type = types[i], .batch = 1, .rows = (uint64_t)n,
						      .cols = (uint64_t)n, .ld = n };
		const struct phos_blaslt_layout *const in[4] = { &l, &l, &l, &l };
		struct phos_blaslt_desc desc = { .compute = CUBLAS_COMPUTE_32F, .scale_type = CUDA_R_32F,
						 .transa = CUBLAS_OP_T, .epilogue = CUBLASLT_EPILOGUE_BIAS,
						 .bias = buf, .bias_type = -1, .aux_type = -1 };
		cublasLtMatmulHeuristicResult_t res;
		cublasLtMatmulPreference_t pref = NULL;
		struct lt_problem p;
		int found = 0;
		cublasStatus_t s = problem_make(&desc, in, &p);

		if (s != CUBLAS_STATUS_SUCCESS)
			break;
		s = lt.PrefCreate(&pref);
		if (s == CUBLAS_STATUS_SUCCESS)
			s = lt.Heuristic(h, p.desc, p.l[0], p.l[1], p.l[2], p.l[3], pref, 1, &res, &found);
		if (s == CUBLAS_STATUS_SUCCESS && found == 1)
			s = lt.Matmul(h, p.desc, &alpha, (const void *)(uintptr_t)buf, p.l[0],
				      (const char *)(uintptr_t)buf + (size_t)n * n * 4, p.l[1], &beta,
				      (const char *)(uintptr_t)buf + (size_t)2 * n * n * 4, p.l[2],
				      (char *)(uintptr_t)buf + (size_t)2 * n * n * 4, p.l[3], &res.algo, NULL, 0,
				      (cudaStream_t)CU_STREAM_LEGACY);
		if (pref)
			lt.PrefDestroy(pref);
		problem_free(&p);
		if (s != CUBLAS_STATUS_SUCCESS)
			phos_debug("cuda: cuBLASLt warm-up (type %d): status %d", types[i], (int)s);
	}
}

int cuda_blaslt_matmul(struct phos_device *dev, void *stream, const struct phos_blaslt_matmul *m,
		       int *ret_blas_status)
{
	const struct phos_blaslt_layout *const in[4] = { &m->la, &m->lb, &m->lc, &m->ld };
	struct lt_problem p;
	cublasLtMatmulAlgo_t algo;
	cublasLtHandle_t h;
	const void *alpha = m->alpha, *beta = m->beta;
	cublasStatus_t s;
	int r = lt_handle(cuda_dev(dev), &h);

	if (r < 0)
		return r;
	s = problem_make(&m->desc, in, &p);
	if (s != CUBLAS_STATUS_SUCCESS)
		return cuda_blas_result(s, ret_blas_status, "cublasLtMatmul (descriptors)");
	if (m->desc.pointer_mode) {
		alpha = (const void *)(uintptr_t)m->alpha_addr;
		beta = (const void *)(uintptr_t)m->beta_addr;
	}
	memcpy(algo.data, m->algo, sizeof(algo.data));
	s = lt.Matmul(h, p.desc, alpha, (const void *)(uintptr_t)m->a, p.l[0], (const void *)(uintptr_t)m->b, p.l[1],
		      beta, (const void *)(uintptr_t)m->c, p.l[2], (void *)(uintptr_t)m->d, p.l[3],
		      m->has_algo ? &algo : NULL, (void *)(uintptr_t)m->workspace, m->workspace_size,
		      (cudaStream_t)stream);
	problem_free(&p);
	return cuda_blas_result(s, ret_blas_status, "cublasLtMatmul");
}

int cuda_blaslt_heuristic(struct phos_device *dev, const struct phos_blaslt_heuristic *hq,
			  struct phos_blaslt_result *ret, int *ret_count, int *ret_blas_status)
{
	const struct phos_blaslt_layout *const in[4] = { &hq->la, &hq->lb, &hq->lc, &hq->ld };
	const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
		CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
	};
	cublasLtMatmulHeuristicResult_t res[PHOS_BLASLT_MAX_RESULTS];
	cublasLtMatmulPreference_t pref = NULL;
	struct lt_problem p;
	cublasLtHandle_t h;
	uint32_t search = (uint32_t)hq->search_mode;
	cublasStatus_t s;
	int n = 0, r = lt_handle(cuda_dev(dev), &h);

	*ret_count = 0;
	if (r < 0)
		return r;
	s = problem_make(&hq->desc, in, &p);
	if (s != CUBLAS_STATUS_SUCCESS)
		return cuda_blas_result(s, ret_blas_status, "cublasLtMatmulAlgoGetHeuristic (descriptors)");
	s = lt.PrefCreate(&pref);
	if (s == CUBLAS_STATUS_SUCCESS)
		s = lt.PrefSet(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &hq->max_workspace,
			       sizeof(hq->max_workspace));
	if (s == CUBLAS_STATUS_SUCCESS)
		s = lt.PrefSet(pref, CUBLASLT_MATMUL_PREF_SEARCH_MODE, &search, sizeof(search));
	if (s == CUBLAS_STATUS_SUCCESS)
		s = lt.PrefSet(pref, CUBLASLT_MATMUL_PREF_IMPL_MASK, &hq->impl_mask, sizeof(hq->impl_mask));
	if (s == CUBLAS_STATUS_SUCCESS && hq->max_waves > 0)
		s = lt.PrefSet(pref, CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, &hq->max_waves, sizeof(hq->max_waves));
	for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
		s = lt.PrefSet(pref, align_attr[i], &hq->align[i], sizeof(hq->align[i]));
	if (s == CUBLAS_STATUS_SUCCESS)
		s = lt.Heuristic(h, p.desc, p.l[0], p.l[1], p.l[2], p.l[3], pref, hq->requested, res, &n);
	if (pref)
		lt.PrefDestroy(pref);
	problem_free(&p);
	if (s != CUBLAS_STATUS_SUCCESS) {
		/* no algorithm for this problem is the caller's answer, not an executor error */
		if (ret_blas_status)
			*ret_blas_status = (int)s;
		return s == CUBLAS_STATUS_NOT_SUPPORTED ? -PHOS_CUDA_NOT_SUPPORTED : -PHOS_CUDA_INVALID_VALUE;
	}
	for (int i = 0; i < n && i < hq->requested; i++) {
		memcpy(ret[i].algo, res[i].algo.data, sizeof(ret[i].algo));
		ret[i].workspace_size = res[i].workspaceSize;
		ret[i].state = (int32_t)res[i].state;
		ret[i].waves = res[i].wavesCount;
	}
	*ret_count = n < hq->requested ? n : hq->requested;
	return cuda_blas_result(CUBLAS_STATUS_SUCCESS, ret_blas_status, "cublasLtMatmulAlgoGetHeuristic");
}
