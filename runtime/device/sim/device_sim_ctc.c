/* SPDX-License-Identifier: MIT */
/*
 * cuDNN's CTC loss on the sim device (dnn_dev.h, phos_dnn_ops.ctc): the
 * forward-backward algorithm in log space, in double, with softmax
 * normalization (CUDNN_LOSS_NORMALIZATION_SOFTMAX: probs are activations,
 * softmax over the alphabet is taken here, gradients are with respect to
 * the activations; NONE answers NOT_SUPPORTED). For sequence b of input
 * length T_b and labels l (blank 0):
 *
 *   cost_b       -log P(l | x_b), from alpha over l' (l with blanks between)
 *   grad[t,b,a]  p[t,b,a] - (sum over s with l'_s = a of alpha_t(s) beta_t(s) / p[t,b,a]) / P
 *                for t < T_b, 0 after
 *
 * A sequence its labels cannot fit (more labels and repeats than steps)
 * costs +inf with zero gradients (cudnnCTCGradMode_t SKIP leaves them).
 * Only the legacy call (host arrays, api 7) runs here: sim has no
 * device-side arrays to read for _v8 (NOT_SUPPORTED).
 */
#include "device_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dnn_dev.h"

static int ok(int *st, int s)
{
	*st = s;
	return 0;
}

static double lse(double a, double b)
{
	if (a == -INFINITY)
		return b;
	if (b == -INFINITY)
		return a;
	return a > b ? a + log1p(exp(b - a)) : b + log1p(exp(a - b));
}

/* One sequence: lp (T x A log-probabilities of it), labels, its gradients
 * (grad, T x A, or NULL); its cost. */
static double sequence(int64_t T, int64_t A, const double *lp, const int32_t *l, int64_t L, double *grad,
		       double *alpha, double *beta)
{
	int64_t S = 2 * L + 1;
	double logp = -INFINITY;

#define LAB(s) ((s) % 2 ? l[(s) / 2] : 0)
	for (int64_t i = 0; i < T * S; i++)
		alpha[i] = beta[i] = -INFINITY;
	alpha[0] = lp[0];
	if (S > 1)
		alpha[1] = lp[LAB(1)];
	for (int64_t t = 1; t < T; t++)
		for (int64_t s = 0; s < S; s++) {
			double v = alpha[(t - 1) * S + s];

			if (s > 0)
				v = lse(v, alpha[(t - 1) * S + s - 1]);
			if (s > 1 && LAB(s) != 0 && LAB(s) != LAB(s - 2))
				v = lse(v, alpha[(t - 1) * S + s - 2]);
			alpha[t * S + s] = v == -INFINITY ? v : v + lp[t * A + LAB(s)];
		}
	beta[(T - 1) * S + S - 1] = lp[(T - 1) * A + LAB(S - 1)];
	if (S > 1)
		beta[(T - 1) * S + S - 2] = lp[(T - 1) * A + LAB(S - 2)];
	for (int64_t t = T - 2; t >= 0; t--)
		for (int64_t s = 0; s < S; s++) {
			double v = beta[(t + 1) * S + s];

			if (s + 1 < S)
				v = lse(v, beta[(t + 1) * S + s + 1]);
			if (s + 2 < S && LAB(s) != 0 && LAB(s) != LAB(s + 2))
				v = lse(v, beta[(t + 1) * S + s + 2]);
			beta[t * S + s] = v == -INFINITY ? v : v + lp[t * A + LAB(s)];
		}
	logp = alpha[(T - 1) * S + S - 1];
	if (S > 1)
		logp = lse(logp, alpha[(T - 1) * S + S - 2]);
	if (grad && logp > -INFINITY)
		for (int64_t t = 0; t < T; t++) {
			for (int64_t a = 0; a < A; a++) {
				double occ = -INFINITY;

				for (int64_t s = 0; s < S; s++)
					if (LAB(s) == a)
						occ = lse(occ, alpha[t * S + s] + beta[t * S + s] - lp[t * A + a]);
				grad[t * A + a] = exp(lp[t * A + a]) - exp(occ - logp);
			}
		}
#undef LAB
	return -logp;
}

int phos_sim_dnn_ctc(struct phos_device *dev, void *h, void *stream, const struct phos_dnn_ctc *c,
		     const int32_t *arrays, uint64_t *size, int *st)
{
	int64_t T = c->probs.dims[0], B = c->probs.dims[1], A = c->probs.dims[2], maxT = 0, maxL = 0, off = 0;
	int et = phos_sim_dnn_elem_type(c->comp_type);
	const int32_t *lengths, *inputs;
	double *lp, *grad, *alpha, *beta;
	int s = PHOS_DNN_SUCCESS;

	(void)h;
	if (stream && phos_sim_stream_check(dev, stream) < 0)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (c->api != 7 || c->norm_mode != 1 || et < 0)
		return ok(st, PHOS_DNN_NOT_SUPPORTED);
	if (size) {
		*size = 256;   /* a workspace sim does not use */
		return ok(st, PHOS_DNN_SUCCESS);
	}
	lengths = arrays + c->nlabels;
	inputs = lengths + B;
	for (int64_t b = 0; b < B; b++) {
		maxT = inputs[b] > maxT ? inputs[b] : maxT;
		maxL = lengths[b] > maxL ? lengths[b] : maxL;
	}
	lp = calloc((size_t)(T * A), sizeof(double));
	grad = calloc((size_t)(T * A), sizeof(double));
	alpha = calloc((size_t)((maxT + 1) * (2 * maxL + 1)), sizeof(double));
	beta = calloc((size_t)((maxT + 1) * (2 * maxL + 1)), sizeof(double));
	if (!lp || !grad || !alpha || !beta) {
		s = PHOS_DNN_INTERNAL_ERROR;
		goto out;
	}
	for (int64_t b = 0; b < B; b++) {
		const void *probs = (const void *)(uintptr_t)c->pprobs;
		int64_t Tb = inputs[b], L = lengths[b], need = L;
		double cost = INFINITY;
		bool skip = c->set == 9 && c->grad_mode == 1;   /* CUDNN_CTC_SKIP_OOB_GRADIENTS */

		for (int64_t i = 1; i < L; i++)
			need += arrays[off + i] == arrays[off + i - 1];
		memset(grad, 0, (size_t)(T * A) * sizeof(double));
		if (Tb >= 1 && need <= Tb) {
			for (int64_t t = 0; t < Tb; t++) {   /* log softmax over the alphabet */
				double m = -INFINITY, z = 0;

				for (int64_t a = 0; a < A; a++) {
					lp[t * A + a] = phos_sim_elem_get(probs, et, t * c->probs.strides[0] +
										b * c->probs.strides[1] +
										a * c->probs.strides[2]);
					m = lp[t * A + a] > m ? lp[t * A + a] : m;
				}
				for (int64_t a = 0; a < A; a++)
					z += exp(lp[t * A + a] - m);
				for (int64_t a = 0; a < A; a++)
					lp[t * A + a] -= m + log(z);
			}
			cost = sequence(Tb, A, lp, arrays + off, L, grad, alpha, beta);
			skip = false;
		}
		phos_sim_elem_put((void *)(uintptr_t)c->costs, et, b, cost);
		if (c->pgrads && !skip)
			for (int64_t t = 0; t < T; t++)
				for (int64_t a = 0; a < A; a++)
					phos_sim_elem_put((void *)(uintptr_t)c->pgrads, et,
							  t * c->grads.strides[0] + b * c->grads.strides[1] +
								  a * c->grads.strides[2],
							  grad[t * A + a]);
		off += L;
	}
out:
	free(lp);
	free(grad);
	free(alpha);
	free(beta);
	return ok(st, s);
}
