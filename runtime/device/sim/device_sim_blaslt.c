/* SPDX-License-Identifier: MIT */
/*
 * Host reference cuBLASLt for the sim backend:
 *
 *   D[b] = epilogue(alpha op(A[b]) op(B[b]) + beta C[b])   for each batch member b
 *
 * for real types (R_32F, R_64F, R_16F, R_16BF, mixed as the layouts say),
 * column or row order, transposes, strided batches, host or device scalars,
 * and the epilogues DEFAULT, RELU, BIAS, RELU_BIAS, GELU, GELU_BIAS (GELU as
 * cuBLASLt computes it, the tanh approximation). Products accumulate in
 * double whatever the compute type. Everything else (aux outputs,
 * gradients, FP8 scales, integer and complex types, unequal batch counts)
 * answers CUBLAS_STATUS_NOT_SUPPORTED. The heuristic gives one algorithm,
 * which needs no workspace.
 */
#include "device_sim.h"

#include <math.h>
#include <string.h>

enum { ST_SUCCESS = 0, ST_INVALID_VALUE = 7, ST_NOT_SUPPORTED = 15 };   /* cublasStatus_t */
enum { EPI_DEFAULT = 1, EPI_RELU = 2, EPI_BIAS = 4, EPI_GELU = 32 };

/* The one algorithm the heuristic gives: "phossim1" in its first word. */
#define SIM_ALGO 0x70686f7373696d31ull

static int status(int *ret, int s)
{
	*ret = s;
	return s == ST_SUCCESS ? 0 : s == ST_NOT_SUPPORTED ? -PHOS_CUDA_NOT_SUPPORTED : -PHOS_CUDA_INVALID_VALUE;
}

static bool real_type(int t)
{
	return t == 0 || t == 1 || t == 2 || t == 14;
}

/* What sim computes: 0 or the cublasStatus_t that refuses it. m, n, k are D's
 * rows and columns and the inner dimension. */
static int problem_check(const struct phos_blaslt_desc *d, const struct phos_blaslt_layout *la,
			 const struct phos_blaslt_layout *lb, const struct phos_blaslt_layout *lc,
			 const struct phos_blaslt_layout *ld, uint64_t *ret_k)
{
	static const int epilogues[] = { EPI_DEFAULT, EPI_RELU, EPI_BIAS, EPI_RELU | EPI_BIAS, EPI_GELU,
					 EPI_GELU | EPI_BIAS };
	uint64_t m = ld->rows, n = ld->cols, k = d->transa ? la->rows : la->cols;
	bool epi = false;

	for (size_t i = 0; i < sizeof(epilogues) / sizeof(epilogues[0]); i++)
		epi |= d->epilogue == epilogues[i];
	if (!epi || d->scale[0] || d->scale[1] || d->scale[2] || d->scale[3] || d->amax_d ||
	    !real_type(la->type) || !real_type(lb->type) || !real_type(lc->type) || !real_type(ld->type) ||
	    !real_type(d->scale_type) || (d->bias_type >= 0 && !real_type(d->bias_type)) ||
	    la->batch != ld->batch || lb->batch != ld->batch || lc->batch != ld->batch)
		return ST_NOT_SUPPORTED;
	if (d->transa < 0 || d->transa > 2 || d->transb < 0 || d->transb > 2 ||
	    (d->transa ? la->cols : la->rows) != m || (d->transb ? lb->rows : lb->cols) != n ||
	    (d->transb ? lb->cols : lb->rows) != k || lc->rows != m || lc->cols != n)
		return ST_INVALID_VALUE;
	*ret_k = k;
	return ST_SUCCESS;
}

/* Element (r, c) of member b of a layout's matrix at base. */
static double at(uint64_t base, const struct phos_blaslt_layout *l, int64_t b, uint64_t r, uint64_t c)
{
	int64_t i = l->order == 0 ? (int64_t)(r + c * (uint64_t)l->ld) : (int64_t)(r * (uint64_t)l->ld + c);

	return phos_sim_elem_get((const void *)(uintptr_t)base, l->type, b * l->stride + i);
}

static double gelu(double x)
{
	return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

int phos_sim_blaslt_matmul(struct phos_device *dev, void *stream, const struct phos_blaslt_matmul *m,
			   int *ret_blas_status)
{
	const struct phos_blaslt_desc *d = &m->desc;
	const struct phos_blaslt_layout *ld = &m->ld;
	int bias_type = d->bias_type >= 0 ? d->bias_type : ld->type;
	double alpha, beta;
	uint64_t k;
	int s;

	if (phos_sim_stream_check(dev, stream) < 0)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	s = problem_check(d, &m->la, &m->lb, &m->lc, ld, &k);
	if (s != ST_SUCCESS)
		return status(ret_blas_status, s);
	if (d->pointer_mode) {
		alpha = phos_sim_elem_get((const void *)(uintptr_t)m->alpha_addr, d->scale_type, 0);
		beta = phos_sim_elem_get((const void *)(uintptr_t)m->beta_addr, d->scale_type, 0);
	} else {
		alpha = phos_sim_elem_get(m->alpha, d->scale_type, 0);
		beta = phos_sim_elem_get(m->beta, d->scale_type, 0);
	}
	for (int64_t b = 0; b < ld->batch; b++)
		for (uint64_t j = 0; j < ld->cols; j++)
			for (uint64_t i = 0; i < ld->rows; i++) {
				double acc = 0, v;
				int64_t di = ld->order == 0 ? (int64_t)(i + j * (uint64_t)ld->ld)
							    : (int64_t)(i * (uint64_t)ld->ld + j);

				for (uint64_t p = 0; p < k; p++)
					acc += (d->transa ? at(m->a, &m->la, b, p, i) : at(m->a, &m->la, b, i, p)) *
					       (d->transb ? at(m->b, &m->lb, b, j, p) : at(m->b, &m->lb, b, p, j));
				v = alpha * acc + (beta != 0 ? beta * at(m->c, &m->lc, b, i, j) : 0);
				if (d->epilogue & EPI_BIAS)
					v += phos_sim_elem_get((const void *)(uintptr_t)d->bias, bias_type,
							       b * d->bias_stride + (int64_t)i);
				if (d->epilogue & EPI_RELU)
					v = v > 0 ? v : 0;
				if (d->epilogue & EPI_GELU)
					v = gelu(v);
				phos_sim_elem_put((void *)(uintptr_t)m->d, ld->type, b * ld->stride + di, v);
			}
	return status(ret_blas_status, ST_SUCCESS);
}

int phos_sim_blaslt_heuristic(struct phos_device *dev, const struct phos_blaslt_heuristic *h,
			      struct phos_blaslt_result *ret, int *ret_count, int *ret_blas_status)
{
	uint64_t k;
	int s = problem_check(&h->desc, &h->la, &h->lb, &h->lc, &h->ld, &k);

	(void)dev;
	*ret_count = 0;
	if (s != ST_SUCCESS)
		return status(ret_blas_status, s);
	memset(&ret[0], 0, sizeof(ret[0]));
	ret[0].algo[0] = SIM_ALGO;
	ret[0].waves = 1.0f;
	*ret_count = 1;
	return status(ret_blas_status, ST_SUCCESS);
}
