// SPDX-License-Identifier: MIT
// cuDNN as PyTorch uses it (issue 16): convolutions through the backend
// (graph) API, built once at start (tensors, a convolution, an operation
// graph, heuristics, a plan per configuration until one finalizes), every
// descriptor but the plans destroyed before phos_fn_serve; and batch
// normalization (training forward, backward, inference) with legacy tensor
// descriptors. Each request runs them all and checks every output against a
// CPU reference. Snapshotted at phos_fn_serve and restored, the plans must
// still run (phos-fn makes them again from their history).
//
// argv[1] "pointers": also print the double convolution's device pointers as
// JSON on stderr (the test compares them with the trace's read/write sets);
// "extra": every variant pack also names a uid that no tensor of the graph
// has (phos-fn cannot size it: the execution's set must be opaque; only for
// phos-fn's sim, real cuDNN may refuse such a pack); "ragged": the double
// convolution's y is a ragged tensor (its rows at offsets another tensor
// keeps in device memory: opaque too; sim only, cuDNN has no ragged
// convolutions); "graph": each convolution (its output's reset and the
// execution) is captured into a CUDA graph at init, and requests launch the
// graphs (snapshotted, the restored process replays them); "loop N": no serving, N requests' work in a row, a line
// every 100 and a last one with the count of wrong answers (checkpoints of
// the running program restore it mid-loop: every cuDNN call of a restored
// copy must still find its objects).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <phos/fn.h>

#include "cudnn_decls.h"

#define CK(call)                                                                                \
	do {                                                                                    \
		cudaError_t e_ = (call);                                                        \
		if (e_ != cudaSuccess) {                                                        \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
			exit(1);                                                                \
		}                                                                               \
	} while (0)
#define DK(call)                                                                                \
	do {                                                                                    \
		cudnnStatus_t s_ = (call);                                                      \
		if (s_ != CUDNN_STATUS_SUCCESS) {                                               \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudnnGetErrorString(s_)); \
			exit(1);                                                                \
		}                                                                               \
	} while (0)

typedef cudnnBackendDescriptor_t desc_t;

struct conv {
	int type;                              // CUDNN_DATA_DOUBLE or CUDNN_DATA_FLOAT
	int64_t n, c, h, w, k, r, s, pad, stride, dil, oh, ow;
	desc_t plan;
	void *dx, *dw, *dy, *ws;
	int64_t ws_bytes;
	std::vector<double> hx, hw, want;
	double tol;
	cudaGraphExec_t graph;                 // "graph": the set and the execution, captured
};

struct bn {
	cudnnTensorDescriptor_t xd, pd;
	int n, c, h, w;
	float *x, *y, *dy, *dx, *scale, *bias, *rmean, *rvar, *smean, *sinv, *dscale, *dbias, *yinf;
	void *ws_fwd, *ws_bwd, *reserve;
	size_t ws_fwd_bytes, ws_bwd_bytes, reserve_bytes;
	std::vector<float> hx, hdy, hscale, hbias;
};

struct state {
	cudnnHandle_t h;
	cudaStream_t s;
	struct conv conv[2];
	struct bn bn;
	int requests, failures;
};

static size_t esize(int type)
{
	return type == CUDNN_DATA_DOUBLE ? 8 : 4;
}

static desc_t make(int type)
{
	desc_t d;

	DK(cudnnBackendCreateDescriptor(type, &d));
	return d;
}

static bool ragged_y;

static desc_t tensor(int64_t uid, int type, const int64_t dims[4])
{
	desc_t t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);

	if (ragged_y && uid == 'y' && type == CUDNN_DATA_DOUBLE) {
		int64_t one[4] = { 1, 1, 1, 1 };
		int32_t itype = 4;   // CUDNN_DATA_INT32
		bool keep = ragged_y;

		ragged_y = false;   // (the offsets tensor itself is not ragged)
		desc_t r = tensor('r', itype, one);
		ragged_y = keep;
		DK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r));
		DK(cudnnBackendDestroyDescriptor(r));
	}
	int64_t strides[4] = { dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1 }, align = 16;

	DK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type));
	DK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
	DK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
	DK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
	DK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
	DK(cudnnBackendFinalize(t));
	return t;
}

static double rnd(unsigned *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	return (double)((*seed >> 8) % 2001) / 1000.0 - 1.0;   // [-1, 1]
}

static void conv_reference(struct conv *cv)
{
	cv->want.assign((size_t)(cv->n * cv->k * cv->oh * cv->ow), 0.0);
	for (int64_t n = 0; n < cv->n; n++)
		for (int64_t k = 0; k < cv->k; k++)
			for (int64_t i = 0; i < cv->oh; i++)
				for (int64_t j = 0; j < cv->ow; j++) {
					double acc = 0;

					for (int64_t c = 0; c < cv->c; c++)
						for (int64_t r = 0; r < cv->r; r++)
							for (int64_t s = 0; s < cv->s; s++) {
								int64_t y = i * cv->stride - cv->pad + r * cv->dil;
								int64_t x = j * cv->stride - cv->pad + s * cv->dil;

								if (y < 0 || y >= cv->h || x < 0 || x >= cv->w)
									continue;
								acc += cv->hx[((n * cv->c + c) * cv->h + y) * cv->w + x] *
								       cv->hw[((k * cv->c + c) * cv->r + r) * cv->s + s];
							}
					cv->want[((n * cv->k + k) * cv->oh + i) * cv->ow + j] = acc;
				}
}

// Device copy of host doubles in the convolution's type.
static void *upload(const std::vector<double> &v, int type)
{
	void *d;
	std::vector<float> f(v.begin(), v.end());

	CK(cudaMalloc(&d, v.size() * esize(type)));
	CK(cudaMemcpy(d, type == CUDNN_DATA_DOUBLE ? (const void *)v.data() : (const void *)f.data(),
		      v.size() * esize(type), cudaMemcpyHostToDevice));
	return d;
}

// The whole backend path, as the frontend takes it; everything but the plan destroyed.
static void conv_build(struct state *st, struct conv *cv, unsigned seed)
{
	int64_t xd[4] = { cv->n, cv->c, cv->h, cv->w }, wd[4] = { cv->k, cv->c, cv->r, cv->s };
	int64_t pads[2] = { cv->pad, cv->pad }, strides[2] = { cv->stride, cv->stride }, dils[2] = { cv->dil, cv->dil };
	int64_t spatial = 2;
	int mode = CUDNN_CROSS_CORRELATION, heur_mode = CUDNN_HEUR_MODE_INSTANT;

	cv->oh = (cv->h + 2 * cv->pad - cv->dil * (cv->r - 1) - 1) / cv->stride + 1;
	cv->ow = (cv->w + 2 * cv->pad - cv->dil * (cv->s - 1) - 1) / cv->stride + 1;
	int64_t yd[4] = { cv->n, cv->k, cv->oh, cv->ow };
	cv->hx.resize((size_t)(cv->n * cv->c * cv->h * cv->w));
	cv->hw.resize((size_t)(cv->k * cv->c * cv->r * cv->s));
	for (double &v : cv->hx)
		v = rnd(&seed);
	for (double &v : cv->hw)
		v = rnd(&seed);
	conv_reference(cv);
	cv->dx = upload(cv->hx, cv->type);
	cv->dw = upload(cv->hw, cv->type);
	CK(cudaMalloc(&cv->dy, cv->want.size() * esize(cv->type)));

	desc_t x = tensor('x', cv->type, xd), w = tensor('w', cv->type, wd), y = tensor('y', cv->type, yd);
	desc_t c = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
	DK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial));
	DK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &cv->type));
	DK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
	DK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dils));
	DK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, strides));
	DK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads));
	DK(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads));
	DK(cudnnBackendFinalize(c));

	desc_t op = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
	DK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
	DK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w));
	DK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
	DK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
				    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c));
	if (cv->type == CUDNN_DATA_DOUBLE) {
		double one = 1, zero = 0;

		DK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_DOUBLE, 1, &one));
		DK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_DOUBLE, 1, &zero));
	} else {
		float one = 1, zero = 0;

		DK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &one));
		DK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &zero));
	}
	DK(cudnnBackendFinalize(op));

	desc_t g = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
	DK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &st->h));
	DK(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op));
	DK(cudnnBackendFinalize(g));

	desc_t heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
	DK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g));
	DK(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heur_mode));
	DK(cudnnBackendFinalize(heur));
	int64_t count = 0;
	DK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
				    nullptr));
	if (count < 1) {
		fprintf(stderr, "no engine configuration for the convolution\n");
		exit(1);
	}
	if (count > 8)
		count = 8;
	desc_t cfgs[8];
	for (int64_t i = 0; i < count; i++)
		cfgs[i] = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
	int64_t got = 0;
	DK(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
				    cfgs));
	cv->plan = nullptr;
	for (int64_t i = 0; i < got && i < count && !cv->plan; i++) {
		desc_t p = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);

		/* the double convolution's plan takes its handle from its operation
		 * graph, as PyTorch's attention plans do (cuDNN 9 allows both) */
		if (cv->type != CUDNN_DATA_DOUBLE)
			DK(cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &st->h));
		DK(cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
					    &cfgs[i]));
		if (cudnnBackendFinalize(p) == CUDNN_STATUS_SUCCESS)
			cv->plan = p;
		else
			DK(cudnnBackendDestroyDescriptor(p));
	}
	if (!cv->plan) {
		fprintf(stderr, "no configuration of %lld gave a plan\n", (long long)got);
		exit(1);
	}
	DK(cudnnBackendGetAttribute(cv->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &count,
				    &cv->ws_bytes));
	cv->ws = nullptr;
	if (cv->ws_bytes)
		CK(cudaMalloc(&cv->ws, (size_t)cv->ws_bytes));
	// the plan must outlive everything it was made from
	for (int64_t i = 0; i < got && i < 8; i++)
		DK(cudnnBackendDestroyDescriptor(cfgs[i]));
	desc_t all[] = { heur, g, op, c, x, w, y };
	for (desc_t d : all)
		DK(cudnnBackendDestroyDescriptor(d));
}

static bool extra_uid;

/* The variant pack's set and the execution, on the handle's stream. */
static void conv_enqueue(struct state *st, struct conv *cv)
{
	int64_t uids[4] = { 'x', 'w', 'y', 'q' };
	void *ptrs[4] = { cv->dx, cv->dw, cv->dy, cv->dy };
	int n = extra_uid ? 4 : 3;
	desc_t pack = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);

	CK(cudaMemsetAsync(cv->dy, 0xff, cv->want.size() * esize(cv->type), st->s));   // (NaNs until written)
	DK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids));
	DK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs));
	DK(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &cv->ws));
	DK(cudnnBackendFinalize(pack));
	DK(cudnnBackendExecute(st->h, cv->plan, pack));
	DK(cudnnBackendDestroyDescriptor(pack));
}

/* "graph": conv_enqueue captured from the handle's stream into a graph,
 * which each run launches instead (as PyTorch's CUDA graphs capture cuDNN). */
static void conv_capture(struct state *st, struct conv *cv)
{
	cudaGraph_t g;

	CK(cudaStreamBeginCapture(st->s, cudaStreamCaptureModeThreadLocal));
	conv_enqueue(st, cv);
	CK(cudaStreamEndCapture(st->s, &g));
	CK(cudaGraphInstantiate(&cv->graph, g, 0));
	CK(cudaGraphDestroy(g));
}

static bool conv_run(struct state *st, struct conv *cv, char *why, size_t len)
{
	std::vector<double> out(cv->want.size());
	std::vector<float> outf(cv->want.size());

	if (cv->graph)
		CK(cudaGraphLaunch(cv->graph, st->s));
	else
		conv_enqueue(st, cv);
	if (cv->type == CUDNN_DATA_DOUBLE)
		CK(cudaMemcpyAsync(out.data(), cv->dy, out.size() * 8, cudaMemcpyDeviceToHost, st->s));
	else
		CK(cudaMemcpyAsync(outf.data(), cv->dy, out.size() * 4, cudaMemcpyDeviceToHost, st->s));
	CK(cudaStreamSynchronize(st->s));
	for (size_t i = 0; i < out.size(); i++) {
		double v = cv->type == CUDNN_DATA_DOUBLE ? out[i] : outf[i];

		if (!(fabs(v - cv->want[i]) <= cv->tol * (1 + fabs(cv->want[i])))) {
			snprintf(why, len, "conv %s [%zu] = %g, want %g", cv->type == CUDNN_DATA_DOUBLE ? "double" : "float",
				 i, v, cv->want[i]);
			return false;
		}
	}
	return true;
}

static float *dalloc(int n)
{
	float *p;

	CK(cudaMalloc(&p, (size_t)n * sizeof(float)));
	return p;
}

static void bn_build(struct state *st)
{
	struct bn *b = &st->bn;
	int xdims[4] = { b->n = 4, b->c = 3, b->h = 5, b->w = 5 };
	int xstr[4] = { b->c * b->h * b->w, b->h * b->w, b->w, 1 }, pdims[4] = { 1, b->c, 1, 1 }, pstr[4] = { b->c, 1, 1, 1 };
	int nx = b->n * b->c * b->h * b->w;
	unsigned seed = 7;

	DK(cudnnCreateTensorDescriptor(&b->xd));
	DK(cudnnCreateTensorDescriptor(&b->pd));
	DK(cudnnSetTensorNdDescriptor(b->xd, CUDNN_DATA_FLOAT, 4, xdims, xstr));
	DK(cudnnSetTensorNdDescriptor(b->pd, CUDNN_DATA_FLOAT, 4, pdims, pstr));
	b->hx.resize((size_t)nx);
	b->hdy.resize((size_t)nx);
	for (int i = 0; i < nx; i++) {
		b->hx[(size_t)i] = (float)(2 * rnd(&seed) + (i / 25 % 3));   // channel means 0, 1, 2
		b->hdy[(size_t)i] = (float)rnd(&seed);
	}
	b->hscale = { 1.5f, 0.5f, -1.0f };
	b->hbias = { 0.25f, -0.5f, 1.0f };
	b->x = dalloc(nx), b->y = dalloc(nx), b->dy = dalloc(nx), b->dx = dalloc(nx), b->yinf = dalloc(nx);
	float **params[] = { &b->scale, &b->bias, &b->rmean, &b->rvar, &b->smean, &b->sinv, &b->dscale, &b->dbias };
	for (float **p : params)
		*p = dalloc(b->c);
	CK(cudaMemcpy(b->x, b->hx.data(), (size_t)nx * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(b->dy, b->hdy.data(), (size_t)nx * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(b->scale, b->hscale.data(), 12, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(b->bias, b->hbias.data(), 12, cudaMemcpyHostToDevice));
	DK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(st->h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN,
								    b->xd, nullptr, b->xd, b->pd, nullptr,
								    &b->ws_fwd_bytes));
	DK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(st->h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, b->xd,
							     nullptr, b->xd, nullptr, b->xd, b->pd, nullptr,
							     &b->ws_bwd_bytes));
	DK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(st->h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN,
								nullptr, b->xd, &b->reserve_bytes));
	b->ws_fwd = b->ws_bwd = b->reserve = nullptr;
	if (b->ws_fwd_bytes)
		CK(cudaMalloc(&b->ws_fwd, b->ws_fwd_bytes));
	if (b->ws_bwd_bytes)
		CK(cudaMalloc(&b->ws_bwd, b->ws_bwd_bytes));
	if (b->reserve_bytes)
		CK(cudaMalloc(&b->reserve, b->reserve_bytes));
}

static bool close_to(const std::vector<float> &got, const std::vector<double> &want, double tol, const char *what,
		     char *why, size_t len)
{
	for (size_t i = 0; i < want.size(); i++)
		if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])))) {
			snprintf(why, len, "%s [%zu] = %g, want %g", what, i, got[i], want[i]);
			return false;
		}
	return true;
}

static std::vector<float> down(const float *d, int n)
{
	std::vector<float> h((size_t)n);

	CK(cudaMemcpy(h.data(), d, (size_t)n * 4, cudaMemcpyDeviceToHost));
	return h;
}

static bool bn_run(struct state *st, char *why, size_t len)
{
	struct bn *b = &st->bn;
	int c = b->c, hw = b->h * b->w, nx = b->n * c * hw, m = b->n * hw;
	const double eps = 1e-5, factor = 0.1;
	float one = 1, zero = 0;
	std::vector<float> zeros((size_t)c, 0.0f), ones((size_t)c, 1.0f);
	std::vector<double> mean((size_t)c), var((size_t)c), inv((size_t)c), y((size_t)nx), rm((size_t)c), rv((size_t)c);
	std::vector<double> db((size_t)c, 0), ds((size_t)c, 0), dx((size_t)nx), yinf((size_t)nx);

	// the reference: batch statistics per channel
	for (int k = 0; k < c; k++) {
		double s = 0, q = 0;

		for (int n = 0; n < b->n; n++)
			for (int i = 0; i < hw; i++) {
				double v = b->hx[(size_t)((n * c + k) * hw + i)];

				s += v;
				q += v * v;
			}
		mean[(size_t)k] = s / m;
		var[(size_t)k] = q / m - mean[(size_t)k] * mean[(size_t)k];
		inv[(size_t)k] = 1 / sqrt(var[(size_t)k] + eps);
		rm[(size_t)k] = factor * mean[(size_t)k];
		rv[(size_t)k] = (1 - factor) + factor * var[(size_t)k] * m / (m - 1);
	}
	for (int e = 0; e < nx; e++) {
		size_t k = (size_t)(e / hw % c);
		double xhat = (b->hx[(size_t)e] - mean[k]) * inv[k];

		y[(size_t)e] = b->hscale[k] * xhat + b->hbias[k];
		db[k] += b->hdy[(size_t)e];
		ds[k] += b->hdy[(size_t)e] * xhat;
	}
	for (int e = 0; e < nx; e++) {
		size_t k = (size_t)(e / hw % c);
		double xhat = (b->hx[(size_t)e] - mean[k]) * inv[k];

		dx[(size_t)e] = b->hscale[k] * inv[k] * (b->hdy[(size_t)e] - db[k] / m - xhat * ds[k] / m);
		yinf[(size_t)e] = b->hscale[k] * (b->hx[(size_t)e] - rm[k]) / sqrt(rv[k] + eps) + b->hbias[k];
	}

	CK(cudaMemcpy(b->rmean, zeros.data(), (size_t)c * 4, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(b->rvar, ones.data(), (size_t)c * 4, cudaMemcpyHostToDevice));
	DK(cudnnBatchNormalizationForwardTrainingEx(st->h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, &one, &zero,
						    b->xd, b->x, nullptr, nullptr, b->xd, b->y, b->pd, b->scale, b->bias,
						    factor, b->rmean, b->rvar, eps, b->smean, b->sinv, nullptr, b->ws_fwd,
						    b->ws_fwd_bytes, b->reserve, b->reserve_bytes));
	DK(cudnnBatchNormalizationBackwardEx(st->h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, &one, &zero, &one,
					     &zero, b->xd, b->x, nullptr, nullptr, b->xd, b->dy, nullptr, nullptr, b->xd,
					     b->dx, b->pd, b->scale, b->bias, b->dscale, b->dbias, eps, b->smean, b->sinv,
					     nullptr, b->ws_bwd, b->ws_bwd_bytes, b->reserve, b->reserve_bytes));
	DK(cudnnBatchNormalizationForwardInference(st->h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, b->xd, b->x, b->xd,
						   b->yinf, b->pd, b->scale, b->bias, b->rmean, b->rvar, eps));
	CK(cudaStreamSynchronize(st->s));
	return close_to(down(b->y, nx), y, 1e-4, "bn y", why, len) &&
	       close_to(down(b->smean, c), mean, 1e-5, "bn saved mean", why, len) &&
	       close_to(down(b->sinv, c), inv, 1e-4, "bn saved inverse variance", why, len) &&
	       close_to(down(b->rmean, c), rm, 1e-5, "bn running mean", why, len) &&
	       close_to(down(b->rvar, c), rv, 1e-4, "bn running variance", why, len) &&
	       close_to(down(b->dx, nx), dx, 1e-3, "bn dx", why, len) &&
	       close_to(down(b->dscale, c), ds, 1e-3, "bn dscale", why, len) &&
	       close_to(down(b->dbias, c), db, 1e-3, "bn dbias", why, len) &&
	       close_to(down(b->yinf, nx), yinf, 1e-4, "bn inference y", why, len);
}

static int handle(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	struct state *st = (struct state *)arg;
	char why[256] = "", out[512];
	bool ok;

	(void)req;
	st->requests++;
	ok = conv_run(st, &st->conv[0], why, sizeof(why)) && conv_run(st, &st->conv[1], why, sizeof(why)) &&
	     bn_run(st, why, sizeof(why));
	if (!ok) {
		fprintf(stderr, "cudnn_serve: %s\n", why);
		st->failures++;
	}
	snprintf(out, sizeof(out), "{\"ok\": %s, \"requests\": %d, \"why\": \"%s\"}", ok ? "true" : "false",
		 st->requests, why);
	resp->body = strdup(out);
	resp->len = strlen(out);
	return 0;
}

int main(int argc, char **argv)
{
	static struct state st;

	ragged_y = argc > 1 && !strcmp(argv[1], "ragged");
	if (cudnnGetVersion() < 90000) {
		fprintf(stderr, "cuDNN 9 needed, got %zu\n", cudnnGetVersion());
		return 1;
	}
	CK(cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking));
	DK(cudnnCreate(&st.h));
	DK(cudnnSetStream(st.h, st.s));
	// a double convolution (exact), and a float one with stride and dilation (TF32 on tensor cores may round)
	st.conv[0] = { CUDNN_DATA_DOUBLE, 2, 3, 8, 8, 4, 3, 3, 1, 1, 1, 0, 0, nullptr, nullptr, nullptr, nullptr,
		       nullptr, 0, {}, {}, {}, 1e-9 };
	st.conv[1] = { CUDNN_DATA_FLOAT, 3, 5, 11, 9, 6, 3, 3, 2, 2, 2, 0, 0, nullptr, nullptr, nullptr, nullptr,
		       nullptr, 0, {}, {}, {}, 2e-2 };
	conv_build(&st, &st.conv[0], 1);
	conv_build(&st, &st.conv[1], 2);
	bn_build(&st);
	extra_uid = argc > 1 && !strcmp(argv[1], "extra");
	if (argc > 1 && !strcmp(argv[1], "graph"))
		for (auto &cv : st.conv)
			conv_capture(&st, &cv);
	if (argc > 1 && !strcmp(argv[1], "pointers"))
		fprintf(stderr, "pointers {\"x\": %llu, \"w\": %llu, \"y\": %llu}\n",
			(unsigned long long)(uintptr_t)st.conv[0].dx, (unsigned long long)(uintptr_t)st.conv[0].dw,
			(unsigned long long)(uintptr_t)st.conv[0].dy);
	if (argc > 2 && !strcmp(argv[1], "loop")) {
		int n = atoi(argv[2]);

		for (int i = 1; i <= n; i++) {
			char why[256] = "";

			st.requests = i;
			if (!(conv_run(&st, &st.conv[0], why, sizeof(why)) && conv_run(&st, &st.conv[1], why, sizeof(why)) &&
			      bn_run(&st, why, sizeof(why)))) {
				fprintf(stderr, "cudnn_serve: step %d: %s\n", i, why);
				st.failures++;
			}
			if (i % 100 == 0 || i == n) {
				printf("{\"step\": %d, \"failures\": %d, \"done\": %s}\n", i, st.failures,
				       i == n ? "true" : "false");
				fflush(stdout);
			}
		}
		return st.failures ? 1 : 0;
	}
	int r = phos_fn_serve(handle, &st);

	return r ? r : st.failures ? 1 : 0;   // (a wrong answer fails the run too)
}
