// SPDX-License-Identifier: MIT
// cuDNN's CTC loss as PyTorch's F.ctc_loss calls it on cuDNN (int32 targets
// on the CPU: cudnnSetCTCLossDescriptorEx with softmax normalization,
// cudnnGetCTCLossWorkspaceSize and cudnnCTCLoss with host arrays): float
// activations T x B x A, concatenated labels (a repeated label among
// them), every input length T; the costs and the gradients checked against
// a CPU reference (softmax, then the forward-backward algorithm in log
// space, in double). Served: each request (phos_fn_serve; natively a line
// of stdin) runs the loss again and checks it.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <phos/fn.h>

#include "cudnn_decls.h"

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
	fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define DK(x) do { cudnnStatus_t s_ = (x); if (s_ != CUDNN_STATUS_SUCCESS) { \
	fprintf(stderr, "%s:%d %s: %d\n", __FILE__, __LINE__, #x, (int)s_); exit(1); } } while (0)

static const int T = 12, B = 3, A = 6;
static const std::vector<int> labels = { 1, 2, 2, 3, 1, 4, 5, 1, 2, 5 }, lengths = { 3, 5, 2 }, inputs = { T, T, T };

struct state {
	cudnnHandle_t h;
	cudaStream_t s;
	cudnnCTCLossDescriptor_t ctc;
	cudnnTensorDescriptor_t pd, gd;
	float *probs, *costs, *grads;
	void *work;
	size_t work_bytes;
	std::vector<float> x;
	std::vector<double> want_cost, want_grad;
	int requests, failures;
};

static double lse(double a, double b)
{
	if (a == -INFINITY)
		return b;
	if (b == -INFINITY)
		return a;
	return a > b ? a + log1p(exp(b - a)) : b + log1p(exp(a - b));
}

// The reference for sequence b: its cost, and its gradients into grad.
static double reference(const std::vector<float> &x, int b, const int *l, int L, std::vector<double> &grad)
{
	int S = 2 * L + 1;
	std::vector<double> lp(T * A), al(T * S, -INFINITY), be(T * S, -INFINITY);
	auto lab = [&](int s) { return s % 2 ? l[s / 2] : 0; };

	for (int t = 0; t < T; t++) {
		double m = -INFINITY, z = 0;
		for (int a = 0; a < A; a++)
			m = fmax(m, x[(t * B + b) * A + a]);
		for (int a = 0; a < A; a++)
			z += exp(x[(t * B + b) * A + a] - m);
		for (int a = 0; a < A; a++)
			lp[t * A + a] = x[(t * B + b) * A + a] - m - log(z);
	}
	al[0] = lp[0];
	al[1] = lp[lab(1)];
	for (int t = 1; t < T; t++)
		for (int s = 0; s < S; s++) {
			double v = al[(t - 1) * S + s];
			if (s > 0)
				v = lse(v, al[(t - 1) * S + s - 1]);
			if (s > 1 && lab(s) && lab(s) != lab(s - 2))
				v = lse(v, al[(t - 1) * S + s - 2]);
			al[t * S + s] = v + lp[t * A + lab(s)];
		}
	be[(T - 1) * S + S - 1] = lp[(T - 1) * A + lab(S - 1)];
	be[(T - 1) * S + S - 2] = lp[(T - 1) * A + lab(S - 2)];
	for (int t = T - 2; t >= 0; t--)
		for (int s = 0; s < S; s++) {
			double v = be[(t + 1) * S + s];
			if (s + 1 < S)
				v = lse(v, be[(t + 1) * S + s + 1]);
			if (s + 2 < S && lab(s) && lab(s) != lab(s + 2))
				v = lse(v, be[(t + 1) * S + s + 2]);
			be[t * S + s] = v + lp[t * A + lab(s)];
		}
	double logp = lse(al[(T - 1) * S + S - 1], al[(T - 1) * S + S - 2]);
	for (int t = 0; t < T; t++)
		for (int a = 0; a < A; a++) {
			double occ = -INFINITY;
			for (int s = 0; s < S; s++)
				if (lab(s) == a)
					occ = lse(occ, al[t * S + s] + be[t * S + s] - lp[t * A + a]);
			grad[(t * B + b) * A + a] = exp(lp[t * A + a]) - exp(occ - logp);
		}
	return -logp;
}

static bool run(state *st, char *why, size_t len)
{
	std::vector<float> costs(B), grads(T * B * A);

	CK(cudaMemsetAsync(st->grads, 0xff, grads.size() * 4, st->s));
	DK(cudnnCTCLoss(st->h, st->pd, st->probs, labels.data(), lengths.data(), inputs.data(), st->costs, st->gd,
			st->grads, CUDNN_CTC_LOSS_ALGO_DETERMINISTIC, st->ctc, st->work, st->work_bytes));
	CK(cudaMemcpyAsync(costs.data(), st->costs, B * 4, cudaMemcpyDeviceToHost, st->s));
	CK(cudaMemcpyAsync(grads.data(), st->grads, grads.size() * 4, cudaMemcpyDeviceToHost, st->s));
	CK(cudaStreamSynchronize(st->s));
	for (int b = 0; b < B; b++)
		if (!(fabs(costs[b] - st->want_cost[b]) <= 1e-4 * (1 + fabs(st->want_cost[b])))) {
			snprintf(why, len, "cost[%d] = %.7g, want %.7g", b, costs[b], st->want_cost[b]);
			return false;
		}
	for (size_t i = 0; i < grads.size(); i++)
		if (!(fabs(grads[i] - st->want_grad[i]) <= 1e-4)) {
			snprintf(why, len, "grad[%zu] = %.7g, want %.7g", i, grads[i], st->want_grad[i]);
			return false;
		}
	return true;
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	state *st = (state *)arg;
	char why[256] = "", out[512];
	bool ok;

	(void)req;
	st->requests++;
	ok = run(st, why, sizeof(why));
	if (!ok) {
		fprintf(stderr, "cudnn_ctc: %s\n", why);
		st->failures++;
	}
	snprintf(out, sizeof(out), "{\"ok\": %s, \"requests\": %d, \"why\": \"%s\"}", ok ? "true" : "false",
		 st->requests, why);
	resp->body = strdup(out);
	resp->len = strlen(out);
	return 0;
}

int main()
{
	static state st;
	int dims[3] = { T, B, A }, str[3] = { B * A, A, 1 }, off = 0;

	st.x.resize(T * B * A);
	for (size_t i = 0; i < st.x.size(); i++)
		st.x[i] = (float)(1.5 * sin(0.7 * (double)i + 0.3 * (double)(i % 5)));
	st.want_cost.resize(B);
	st.want_grad.assign(T * B * A, 0);
	for (int b = 0; b < B; b++) {
		st.want_cost[b] = reference(st.x, b, labels.data() + off, lengths[b], st.want_grad);
		off += lengths[b];
	}
	CK(cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
	DK(cudnnCreate(&st.h));
	DK(cudnnSetStream(st.h, st.s));
	DK(cudnnCreateCTCLossDescriptor(&st.ctc));
	DK(cudnnSetCTCLossDescriptorEx(st.ctc, CUDNN_DATA_FLOAT, CUDNN_LOSS_NORMALIZATION_SOFTMAX, CUDNN_PROPAGATE_NAN));
	DK(cudnnCreateTensorDescriptor(&st.pd));
	DK(cudnnCreateTensorDescriptor(&st.gd));
	DK(cudnnSetTensorNdDescriptor(st.pd, CUDNN_DATA_FLOAT, 3, dims, str));
	DK(cudnnSetTensorNdDescriptor(st.gd, CUDNN_DATA_FLOAT, 3, dims, str));
	DK(cudnnGetCTCLossWorkspaceSize(st.h, st.pd, st.gd, labels.data(), lengths.data(), inputs.data(),
					CUDNN_CTC_LOSS_ALGO_DETERMINISTIC, st.ctc, &st.work_bytes));
	CK(cudaMalloc((void **)&st.probs, st.x.size() * 4));
	CK(cudaMalloc((void **)&st.costs, B * 4));
	CK(cudaMalloc((void **)&st.grads, st.x.size() * 4));
	CK(cudaMalloc(&st.work, st.work_bytes + 16));
	CK(cudaMemcpy(st.probs, st.x.data(), st.x.size() * 4, cudaMemcpyHostToDevice));
	char why[256] = "";
	if (!run(&st, why, sizeof(why))) {
		fprintf(stderr, "cudnn_ctc: at init: %s\n", why);
		return 1;
	}
	int r = phos_fn_serve(handle, &st);

	DK(cudnnDestroyTensorDescriptor(st.pd));
	DK(cudnnDestroyTensorDescriptor(st.gd));
	DK(cudnnDestroyCTCLossDescriptor(st.ctc));
	DK(cudnnDestroy(st.h));
	return r ? r : st.failures ? 1 : 0;
}
