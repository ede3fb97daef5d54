// SPDX-License-Identifier: MIT
// cuDNN's RNN API as PyTorch's nn.LSTM / nn.GRU / nn.RNN call it (cuDNN 9,
// the v8 calls): three networks, each checked against a CPU reference (the
// cells and gate orders cuDNN documents), forward in training and in
// inference, backward data (dx, dhx, dcx) and backward weights (every
// matrix and bias, added to zeros):
//   lstm  2 layers, bidirectional, float, sequence-major unpacked, padded IO
//   gru   1 layer, double, packed (lengths 4, 3, 1), dropout descriptor with
//         states (seeded by cudnnSetDropoutDescriptor, then restored)
//   tanh  1 layer, bidirectional, double, batch-major unpacked (lengths 2, 4),
//         input biases only
// Weights are written where cudnnGetRNNWeightParams says (asked 100 times
// each, as PyTorch does). At init every network runs its training forward
// pass (the reserve space filled); each request (phos_fn_serve; natively a
// line of stdin) runs the backward passes on that reserve, checks them,
// then the forward passes again. Snapshotted at phos_fn_serve and restored,
// the backward passes read the reserve the snapshot kept.
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

typedef std::vector<double> vec;

struct net {
	const char *name;
	int cell, layers, dirs, type, layout, bias, I, H, B, T;
	std::vector<int> seq;
	float dropout;
	double tol;
	// made at init
	int G;
	size_t es, wbytes, work_bytes, reserve_bytes;
	cudnnDropoutDescriptor_t drop;
	cudnnRNNDescriptor_t rnn;
	cudnnRNNDataDescriptor_t xd, yd;
	cudnnTensorDescriptor_t hd, cd;
	void *w, *dw, *x, *y, *dy, *dx, *hx, *hy, *dhy, *dhx, *cx, *cy, *dcy, *dcx, *work, *reserve, *states;
	vec hx_h, cx_h, x_h, dy_h, dhy_h, dcy_h;
	std::vector<vec> M, Bs;          // [p * 2G + lin]: matrix H x cols (row-major), bias H (empty: none)
	std::vector<long long> moff, boff;  // where cuDNN put them (bytes), -1: none
	std::vector<int> mcols;
};

static double val(int seed, int a, int b, int c)
{
	return 0.45 * sin(0.37 * seed + 1.3 * a + 0.71 * b + 0.23 * c);
}

static int in_size(const net &n, int l)
{
	return l == 0 ? n.I : n.dirs * n.H;
}

static void put(std::vector<unsigned char> &buf, size_t es, size_t i, double v)
{
	if (es == 4) {
		float f = (float)v;
		memcpy(&buf[i * 4], &f, 4);
	} else {
		memcpy(&buf[i * 8], &v, 8);
	}
}

static double get(const std::vector<unsigned char> &buf, size_t es, size_t i)
{
	if (es == 4) {
		float f;
		memcpy(&f, &buf[i * 4], 4);
		return f;
	}
	double d;
	memcpy(&d, &buf[i * 8], 8);
	return d;
}

static void *upload(const vec &v, size_t es)
{
	std::vector<unsigned char> b(v.size() * es + 8);
	void *d;

	for (size_t i = 0; i < v.size(); i++)
		put(b, es, i, v[i]);
	CK(cudaMalloc(&d, v.size() * es + 8));
	CK(cudaMemcpy(d, b.data(), v.size() * es, cudaMemcpyHostToDevice));
	return d;
}

static vec download(const void *d, size_t n, size_t es)
{
	std::vector<unsigned char> b(n * es + 8);
	vec v(n);

	CK(cudaMemcpy(b.data(), d, n * es, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < n; i++)
		v[i] = get(b, es, i);
	return v;
}

// element of x or y (vector size v) at step t of sequence b
static long long data_at(const net &n, int v, int t, int b)
{
	if (n.layout == CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED)
		return ((long long)t * n.B + b) * v;
	if (n.layout == CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED)
		return ((long long)b * n.T + t) * v;
	long long before = 0;
	for (int u = 0; u < t; u++)
		for (int c = 0; c < n.B; c++)
			before += n.seq[c] > u;
	return (before + b) * v;
}

static size_t data_elems(const net &n, int v)
{
	size_t total = 0;
	for (int s : n.seq)
		total += s;
	return (n.layout == CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED ? total : (size_t)n.T * n.B) * v;
}

static bool has_bias(const net &n, int lin)
{
	return lin < n.G ? n.bias == CUDNN_RNN_SINGLE_INP_BIAS || n.bias == CUDNN_RNN_DOUBLE_BIAS
			 : n.bias == CUDNN_RNN_DOUBLE_BIAS || n.bias == CUDNN_RNN_SINGLE_REC_BIAS;
}

static double sigm(double v)
{
	return 1 / (1 + exp(-v));
}

// --- the reference: every state of every step, then the gradients ---
struct step {
	vec act, c, h, rn, in, hp, cp;
};

struct ref {
	std::vector<std::vector<std::vector<step>>> s;   // [p][b][t]
	vec y, hy, cy, dx, dhx, dcx;
	std::vector<vec> dM, dB;
};

static void ref_forward(const net &n, ref &r)
{
	int P = n.layers * n.dirs, H = n.H, G = n.G;

	r.s.assign(P, std::vector<std::vector<step>>(n.B, std::vector<step>(n.T)));
	r.hy.assign((size_t)P * n.B * H, 0);
	r.cy.assign((size_t)P * n.B * H, 0);
	for (int l = 0; l < n.layers; l++)
		for (int d = 0; d < n.dirs; d++) {
			int p = l * n.dirs + d, in_n = in_size(n, l);

			for (int b = 0; b < n.B; b++) {
				vec h(n.hx_h.begin() + ((size_t)p * n.B + b) * H, n.hx_h.begin() + ((size_t)p * n.B + b + 1) * H);
				vec c(n.cx_h.begin() + ((size_t)p * n.B + b) * H, n.cx_h.begin() + ((size_t)p * n.B + b + 1) * H);
				int len = n.seq[b];

				for (int s = 0; s < len; s++) {
					int t = d == 0 ? s : len - 1 - s;
					step &st = r.s[p][b][t];

					st.in.assign(in_n, 0);
					for (int i = 0; i < in_n; i++)
						st.in[i] = l == 0 ? n.x_h[data_at(n, n.I, t, b) + i]
								  : r.s[(l - 1) * n.dirs + i / H][b][t].h[i % H];
					st.hp = h, st.cp = c;
					st.act.assign((size_t)G * H, 0);
					st.rn.assign(H, 0);
					for (int k = 0; k < G; k++)
						for (int j = 0; j < H; j++) {
							const vec &W = n.M[p * 2 * G + k], &R = n.M[p * 2 * G + G + k];
							const vec &bw = n.Bs[p * 2 * G + k], &br = n.Bs[p * 2 * G + G + k];
							double a = bw.empty() ? 0 : bw[j], rr = br.empty() ? 0 : br[j];

							for (int i = 0; i < in_n; i++)
								a += W[(size_t)j * in_n + i] * st.in[i];
							for (int i = 0; i < H; i++)
								rr += R[(size_t)j * H + i] * h[i];
							if (n.cell == CUDNN_GRU && k == 2) {
								st.rn[j] = rr;
								a += st.act[j] * rr;
							} else {
								a += rr;
							}
							st.act[(size_t)k * H + j] = n.cell == CUDNN_RNN_RELU ? (a > 0 ? a : 0)
										    : n.cell == CUDNN_RNN_TANH ? tanh(a)
										    : (n.cell == CUDNN_LSTM && k == 2) || (n.cell == CUDNN_GRU && k == 2) ? tanh(a)
										    : sigm(a);
						}
					st.h.assign(H, 0);
					st.c.assign(H, 0);
					for (int j = 0; j < H; j++) {
						const double *a = st.act.data();
						if (n.cell == CUDNN_LSTM) {
							st.c[j] = a[H + j] * c[j] + a[j] * a[2 * H + j];
							st.h[j] = a[3 * H + j] * tanh(st.c[j]);
						} else if (n.cell == CUDNN_GRU) {
							st.h[j] = (1 - a[H + j]) * a[2 * H + j] + a[H + j] * h[j];
						} else {
							st.h[j] = a[j];
						}
					}
					h = st.h, c = st.c;
				}
				for (int j = 0; j < H; j++) {
					r.hy[((size_t)p * n.B + b) * H + j] = h[j];
					r.cy[((size_t)p * n.B + b) * H + j] = n.cell == CUDNN_LSTM ? c[j] : 0;
				}
			}
		}
	r.y.assign(data_elems(n, n.dirs * H), 0);
	for (int b = 0; b < n.B; b++)
		for (int t = 0; t < n.seq[b]; t++)
			for (int d = 0; d < n.dirs; d++)
				for (int j = 0; j < H; j++)
					r.y[data_at(n, n.dirs * H, t, b) + d * H + j] = r.s[(n.layers - 1) * n.dirs + d][b][t].h[j];
}

static void ref_backward(const net &n, ref &r)
{
	int P = n.layers * n.dirs, H = n.H, G = n.G, DH = n.dirs * H;
	std::vector<vec> dout(n.B, vec((size_t)n.T * DH, 0));

	r.dM.assign(n.M.size(), vec());
	r.dB.assign(n.Bs.size(), vec());
	for (size_t i = 0; i < n.M.size(); i++) {
		r.dM[i].assign(n.M[i].size(), 0);
		r.dB[i].assign(n.Bs[i].size(), 0);
	}
	r.dhx.assign((size_t)P * n.B * H, 0);
	r.dcx.assign((size_t)P * n.B * H, 0);
	r.dx.assign(data_elems(n, n.I), 0);
	for (int b = 0; b < n.B; b++)
		for (int t = 0; t < n.seq[b]; t++)
			for (int k = 0; k < DH; k++)
				dout[b][(size_t)t * DH + k] = n.dy_h[data_at(n, DH, t, b) + k];
	for (int l = n.layers - 1; l >= 0; l--) {
		int in_n = in_size(n, l);
		std::vector<vec> din(n.B, vec((size_t)n.T * in_n, 0));

		for (int d = 0; d < n.dirs; d++) {
			int p = l * n.dirs + d;

			for (int b = 0; b < n.B; b++) {
				int len = n.seq[b];
				vec dhn(n.dhy_h.begin() + ((size_t)p * n.B + b) * H, n.dhy_h.begin() + ((size_t)p * n.B + b + 1) * H);
				vec dcn(H, 0);

				if (n.cell == CUDNN_LSTM)
					dcn.assign(n.dcy_h.begin() + ((size_t)p * n.B + b) * H,
						   n.dcy_h.begin() + ((size_t)p * n.B + b + 1) * H);
				for (int s = len - 1; s >= 0; s--) {
					int t = d == 0 ? s : len - 1 - s;
					const step &st = r.s[p][b][t];
					const double *a = st.act.data();
					vec gi((size_t)G * H, 0), gr((size_t)G * H, 0), dhp(H, 0), dcp(H, 0);

					for (int j = 0; j < H; j++) {
						double dh = dout[b][(size_t)t * DH + d * H + j] + dhn[j];

						if (n.cell == CUDNN_RNN_RELU) {
							gi[j] = dh * (st.h[j] > 0);
						} else if (n.cell == CUDNN_RNN_TANH) {
							gi[j] = dh * (1 - st.h[j] * st.h[j]);
						} else if (n.cell == CUDNN_LSTM) {
							double tc = tanh(st.c[j]), dc = dcn[j] + dh * a[3 * H + j] * (1 - tc * tc);

							gi[j] = dc * a[2 * H + j] * a[j] * (1 - a[j]);
							gi[H + j] = dc * st.cp[j] * a[H + j] * (1 - a[H + j]);
							gi[2 * H + j] = dc * a[j] * (1 - a[2 * H + j] * a[2 * H + j]);
							gi[3 * H + j] = dh * tc * a[3 * H + j] * (1 - a[3 * H + j]);
							dcp[j] = dc * a[H + j];
						} else {
							double z = a[H + j], nn = a[2 * H + j], an = dh * (1 - z) * (1 - nn * nn);

							gi[2 * H + j] = an;
							gr[2 * H + j] = an * a[j];
							gi[j] = gr[j] = an * st.rn[j] * a[j] * (1 - a[j]);
							gi[H + j] = gr[H + j] = dh * (st.hp[j] - nn) * z * (1 - z);
							dhp[j] = dh * z;
						}
					}
					if (n.cell != CUDNN_GRU)
						gr = gi;
					for (int k = 0; k < G; k++) {
						const vec &W = n.M[p * 2 * G + k], &R = n.M[p * 2 * G + G + k];
						vec &dW = r.dM[p * 2 * G + k], &dR = r.dM[p * 2 * G + G + k];
						vec &dbw = r.dB[p * 2 * G + k], &dbr = r.dB[p * 2 * G + G + k];

						for (int j = 0; j < H; j++) {
							for (int i = 0; i < in_n; i++) {
								din[b][(size_t)t * in_n + i] += W[(size_t)j * in_n + i] * gi[(size_t)k * H + j];
								dW[(size_t)j * in_n + i] += gi[(size_t)k * H + j] * st.in[i];
							}
							for (int i = 0; i < H; i++) {
								dhp[i] += R[(size_t)j * H + i] * gr[(size_t)k * H + j];
								dR[(size_t)j * H + i] += gr[(size_t)k * H + j] * st.hp[i];
							}
							if (!dbw.empty())
								dbw[j] += gi[(size_t)k * H + j];
							if (!dbr.empty())
								dbr[j] += gr[(size_t)k * H + j];
						}
					}
					dhn = dhp, dcn = dcp;
				}
				for (int j = 0; j < H; j++) {
					r.dhx[((size_t)p * n.B + b) * H + j] = dhn[j];
					r.dcx[((size_t)p * n.B + b) * H + j] = n.cell == CUDNN_LSTM ? dcn[j] : 0;
				}
			}
		}
		for (int b = 0; b < n.B; b++)
			for (int t = 0; t < n.seq[b]; t++)
				for (int i = 0; i < in_n; i++) {
					if (l == 0)
						r.dx[data_at(n, n.I, t, b) + i] = din[b][(size_t)t * in_n + i];
					else
						dout[b][(size_t)t * DH + i] = din[b][(size_t)t * in_n + i];
				}
	}
}

// --- the program ---
static cudnnHandle_t h;
static cudaStream_t strm;
static bool trace_sizes;

static vec series(size_t n, int seed)
{
	vec v(n);
	for (size_t i = 0; i < n; i++)
		v[i] = val(seed, (int)i, (int)(i % 7), 3);
	return v;
}

static void build(net &n, int seed)
{
	cudnnTensorDescriptor_t md, bd;
	int P = n.layers * n.dirs, hdims[3] = { P, n.B, n.H }, hstr[3] = { n.B * n.H, n.H, 1 };
	size_t states_bytes = 0;
	int hn = P * n.B * n.H;

	n.G = n.cell == CUDNN_LSTM ? 4 : n.cell == CUDNN_GRU ? 3 : 1;
	n.es = n.type == CUDNN_DATA_DOUBLE ? 8 : 4;
	n.states = nullptr;
	DK(cudnnCreateDropoutDescriptor(&n.drop));
	if (n.dropout > 0) {   // seeded once, then restored as PyTorch does
		DK(cudnnDropoutGetStatesSize(h, &states_bytes));
		CK(cudaMalloc(&n.states, states_bytes));
		DK(cudnnSetDropoutDescriptor(n.drop, h, n.dropout, n.states, states_bytes, 1234));
		DK(cudnnRestoreDropoutDescriptor(n.drop, h, n.dropout, n.states, states_bytes, 0));
	} else {
		DK(cudnnSetDropoutDescriptor(n.drop, h, 0, nullptr, 0, 0));
	}
	DK(cudnnCreateRNNDescriptor(&n.rnn));
	DK(cudnnSetRNNDescriptor_v8(n.rnn, CUDNN_RNN_ALGO_STANDARD, n.cell, n.bias, n.dirs - 1, CUDNN_LINEAR_INPUT,
				    n.type, n.type, n.type == CUDNN_DATA_DOUBLE ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH,
				    n.I, n.H, n.H, n.layers, n.drop,
				    n.layout == CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED ? CUDNN_RNN_PADDED_IO_DISABLED
										      : CUDNN_RNN_PADDED_IO_ENABLED));
	DK(cudnnCreateRNNDataDescriptor(&n.xd));
	DK(cudnnCreateRNNDataDescriptor(&n.yd));
	DK(cudnnSetRNNDataDescriptor(n.xd, n.type, n.layout, n.T, n.B, n.I, n.seq.data(), nullptr));
	DK(cudnnSetRNNDataDescriptor(n.yd, n.type, n.layout, n.T, n.B, n.dirs * n.H, n.seq.data(), nullptr));
	DK(cudnnCreateTensorDescriptor(&n.hd));
	DK(cudnnCreateTensorDescriptor(&n.cd));
	DK(cudnnSetTensorNdDescriptor(n.hd, n.type, 3, hdims, hstr));
	DK(cudnnSetTensorNdDescriptor(n.cd, n.type, 3, hdims, hstr));
	DK(cudnnGetRNNWeightSpaceSize(h, n.rnn, &n.wbytes));
	DK(cudnnGetRNNTempSpaceSizes(h, n.rnn, CUDNN_FWD_MODE_TRAINING, n.xd, &n.work_bytes, &n.reserve_bytes));
	CK(cudaMalloc(&n.w, n.wbytes));
	CK(cudaMalloc(&n.dw, n.wbytes));
	CK(cudaMalloc(&n.work, n.work_bytes + 16));
	CK(cudaMalloc(&n.reserve, n.reserve_bytes + 16));
	CK(cudaMemset(n.w, 0, n.wbytes));
	// every matrix and bias where cuDNN says, with values of our own
	std::vector<unsigned char> wb(n.wbytes, 0);
	DK(cudnnCreateTensorDescriptor(&md));
	DK(cudnnCreateTensorDescriptor(&bd));
	n.M.assign((size_t)P * 2 * n.G, vec());
	n.Bs.assign(n.M.size(), vec());
	n.moff.assign(n.M.size(), -1);
	n.boff.assign(n.M.size(), -1);
	n.mcols.assign(n.M.size(), 0);
	for (int p = 0; p < P; p++)
		for (int lin = 0; lin < 2 * n.G; lin++) {
			void *ma = nullptr, *ba = nullptr;
			int type, nb, dims[8], str[8], k = p * 2 * n.G + lin;
			int cols = lin < n.G ? in_size(n, p / n.dirs) : n.H;

			for (int rep = 0; rep < 100; rep++)   // PyTorch asks each a hundred times
				DK(cudnnGetRNNWeightParams(h, n.rnn, p, n.wbytes, n.w, lin, md, &ma, bd, &ba));
			DK(cudnnGetTensorNdDescriptor(md, 3, &type, &nb, dims, str));
			if (!ma || nb != 3 || dims[1] != n.H || dims[2] != cols || dims[0] * dims[1] * dims[2] != n.H * cols ||
			    str[1] != cols || str[2] != 1) {
				fprintf(stderr, "%s: matrix %d of layer %d: %p, %d dims %d x %d x %d\n", n.name, lin, p, ma, nb,
					dims[0], dims[1], dims[2]);
				exit(1);
			}
			n.moff[k] = (char *)ma - (char *)n.w;
			n.mcols[k] = cols;
			n.M[k].assign((size_t)n.H * cols, 0);
			for (int j = 0; j < n.H; j++)
				for (int i = 0; i < cols; i++) {
					double v = val(seed + k, j, i, p);

					n.M[k][(size_t)j * cols + i] = v;
					put(wb, n.es, (size_t)n.moff[k] / n.es + (size_t)j * cols + i, v);
				}
			if (has_bias(n, lin) != (ba != nullptr)) {
				fprintf(stderr, "%s: bias %d of layer %d: %p\n", n.name, lin, p, ba);
				exit(1);
			}
			if (ba) {
				n.boff[k] = (char *)ba - (char *)n.w;
				n.Bs[k].assign(n.H, 0);
				for (int j = 0; j < n.H; j++) {
					n.Bs[k][j] = 0.3 * val(seed + 50 + k, j, 1, p);
					put(wb, n.es, (size_t)n.boff[k] / n.es + j, n.Bs[k][j]);
				}
			}
		}
	if (n.es == 4) {   // float weights: the reference reads what the device holds
		for (size_t k = 0; k < n.M.size(); k++) {
			for (auto &v : n.M[k])
				v = (float)v;
			for (auto &v : n.Bs[k])
				v = (float)v;
		}
	}
	DK(cudnnDestroyTensorDescriptor(md));
	DK(cudnnDestroyTensorDescriptor(bd));
	CK(cudaMemcpy(n.w, wb.data(), n.wbytes, cudaMemcpyHostToDevice));
	auto rounded = [&](vec v) { if (n.es == 4) for (auto &e : v) e = (float)e; return v; };
	n.x_h = rounded(series(data_elems(n, n.I), seed + 1));
	n.dy_h = rounded(series(data_elems(n, n.dirs * n.H), seed + 2));
	n.hx_h = rounded(series(hn, seed + 3));
	n.cx_h = n.cell == CUDNN_LSTM ? rounded(series(hn, seed + 4)) : vec(hn, 0);
	n.dhy_h = rounded(series(hn, seed + 5));
	n.dcy_h = n.cell == CUDNN_LSTM ? rounded(series(hn, seed + 6)) : vec(hn, 0);
	n.x = upload(n.x_h, n.es);
	n.dy = upload(n.dy_h, n.es);
	n.hx = upload(n.hx_h, n.es);
	n.dhy = upload(n.dhy_h, n.es);
	n.cx = n.cell == CUDNN_LSTM ? upload(n.cx_h, n.es) : nullptr;
	n.dcy = n.cell == CUDNN_LSTM ? upload(n.dcy_h, n.es) : nullptr;
	CK(cudaMalloc(&n.y, data_elems(n, n.dirs * n.H) * n.es));
	CK(cudaMalloc(&n.dx, data_elems(n, n.I) * n.es));
	CK(cudaMalloc(&n.hy, hn * n.es));
	CK(cudaMalloc(&n.dhx, hn * n.es));
	CK(cudaMalloc(&n.cy, hn * n.es));
	CK(cudaMalloc(&n.dcx, hn * n.es));
	if (trace_sizes)
		fprintf(stderr, "sizes %s {\"w\": %llu, \"wbytes\": %zu, \"x\": %llu, \"xbytes\": %zu, \"y\": %llu, "
			"\"ybytes\": %zu, \"reserve\": %llu, \"reserve_bytes\": %zu, \"work\": %llu, \"work_bytes\": %zu}\n",
			n.name, (unsigned long long)(uintptr_t)n.w, n.wbytes, (unsigned long long)(uintptr_t)n.x,
			data_elems(n, n.I) * n.es, (unsigned long long)(uintptr_t)n.y, data_elems(n, n.dirs * n.H) * n.es,
			(unsigned long long)(uintptr_t)n.reserve, n.reserve_bytes, (unsigned long long)(uintptr_t)n.work,
			n.work_bytes);
}

static void forward(net &n, int mode)
{
	DK(cudnnRNNForward(h, n.rnn, mode, nullptr, n.xd, n.x, n.yd, n.y, n.hd, n.hx, n.hy,
			   n.cell == CUDNN_LSTM ? n.cd : nullptr, n.cx, n.cell == CUDNN_LSTM ? n.cy : nullptr, n.wbytes,
			   n.w, n.work_bytes, n.work, mode == CUDNN_FWD_MODE_TRAINING ? n.reserve_bytes : 0,
			   mode == CUDNN_FWD_MODE_TRAINING ? n.reserve : nullptr));
}

static bool matches(const char *name, const char *what, const vec &got, const vec &want, double tol, char *why,
		  size_t len)
{
	for (size_t i = 0; i < want.size(); i++)
		if (!(fabs(got[i] - want[i]) <= tol * (1 + fabs(want[i])))) {
			snprintf(why, len, "%s %s[%zu] = %.9g, want %.9g", name, what, i, got[i], want[i]);
			return false;
		}
	return true;
}

// The valid elements of a data tensor (padding left out).
static vec valid(const net &n, const vec &v, int width)
{
	vec out;
	for (int b = 0; b < n.B; b++)
		for (int t = 0; t < n.seq[b]; t++)
			for (int k = 0; k < width; k++)
				out.push_back(v[data_at(n, width, t, b) + k]);
	return out;
}

// Backward data and weights on the reserve of the last training forward,
// then the forward passes again: every output against the reference.
static bool run(net &n, char *why, size_t len)
{
	ref r;
	int hn = n.layers * n.dirs * n.B * n.H;
	bool lstm = n.cell == CUDNN_LSTM;

	ref_forward(n, r);
	ref_backward(n, r);
	CK(cudaMemsetAsync(n.dw, 0, n.wbytes, strm));
	DK(cudnnRNNBackwardData_v8(h, n.rnn, nullptr, n.yd, n.y, n.dy, n.xd, n.dx, n.hd, n.hx, n.dhy, n.dhx,
				   lstm ? n.cd : nullptr, n.cx, n.dcy, lstm ? n.dcx : nullptr, n.wbytes, n.w,
				   n.work_bytes, n.work, n.reserve_bytes, n.reserve));
	DK(cudnnRNNBackwardWeights_v8(h, n.rnn, CUDNN_WGRAD_MODE_ADD, nullptr, n.xd, n.x, n.hd, n.hx, n.yd, n.y,
				      n.wbytes, n.dw, n.work_bytes, n.work, n.reserve_bytes, n.reserve));
	CK(cudaStreamSynchronize(strm));
	vec dx = download(n.dx, data_elems(n, n.I), n.es), dhx = download(n.dhx, hn, n.es);
	vec dwv = download(n.dw, n.wbytes / n.es, n.es);
	if (!matches(n.name, "dx", valid(n, dx, n.I), valid(n, r.dx, n.I), n.tol, why, len) ||
	    !matches(n.name, "dhx", dhx, r.dhx, n.tol, why, len) ||
	    (lstm && !matches(n.name, "dcx", download(n.dcx, hn, n.es), r.dcx, n.tol, why, len)))
		return false;
	for (size_t k = 0; k < n.M.size(); k++) {
		vec gm(n.M[k].size()), gb(n.Bs[k].size());
		int cols = n.mcols[k];

		for (int j = 0; j < n.H; j++) {
			for (int i = 0; i < cols; i++)
				gm[(size_t)j * cols + i] = dwv[(size_t)n.moff[k] / n.es + (size_t)j * cols + i];
			if (!gb.empty())
				gb[j] = dwv[(size_t)n.boff[k] / n.es + j];
		}
		if (!matches(n.name, "dW", gm, r.dM[k], n.tol, why, len) || !matches(n.name, "db", gb, r.dB[k], n.tol, why, len))
			return false;
	}
	// inference, then training (the reserve for the next request)
	forward(n, CUDNN_FWD_MODE_INFERENCE);
	CK(cudaStreamSynchronize(strm));
	vec y = download(n.y, data_elems(n, n.dirs * n.H), n.es);
	if (!matches(n.name, "inference y", valid(n, y, n.dirs * n.H), valid(n, r.y, n.dirs * n.H), n.tol, why, len))
		return false;
	forward(n, CUDNN_FWD_MODE_TRAINING);
	CK(cudaStreamSynchronize(strm));
	y = download(n.y, data_elems(n, n.dirs * n.H), n.es);
	return matches(n.name, "y", valid(n, y, n.dirs * n.H), valid(n, r.y, n.dirs * n.H), n.tol, why, len) &&
	       matches(n.name, "hy", download(n.hy, hn, n.es), r.hy, n.tol, why, len) &&
	       (!lstm || matches(n.name, "cy", download(n.cy, hn, n.es), r.cy, n.tol, why, len));
}

static std::vector<net> nets;

struct state {
	int requests, failures;
};

static bool all(char *why, size_t len)
{
	for (auto &n : nets)
		if (!run(n, why, len))
			return false;
	return true;
}

static int handle_req(void *arg, const struct phos_fn_request *req, struct phos_fn_response *resp)
{
	struct state *st = (struct state *)arg;
	char why[256] = "", out[512];
	bool ok;

	(void)req;
	st->requests++;
	ok = all(why, sizeof(why));
	if (!ok) {
		fprintf(stderr, "cudnn_rnn: %s\n", why);
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

	trace_sizes = argc > 1 && !strcmp(argv[1], "sizes");
	CK(cudaStreamCreateWithFlags(&strm, cudaStreamNonBlocking));
	DK(cudnnCreate(&h));
	DK(cudnnSetStream(h, strm));
	nets.push_back({ "lstm", CUDNN_LSTM, 2, 2, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
			 CUDNN_RNN_DOUBLE_BIAS, 5, 6, 3, 4, { 4, 4, 4 }, 0.0f, 2e-3 });
	nets.push_back({ "gru", CUDNN_GRU, 1, 1, CUDNN_DATA_DOUBLE, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED,
			 CUDNN_RNN_DOUBLE_BIAS, 3, 4, 3, 4, { 4, 3, 1 }, 0.3f, 1e-9 });
	nets.push_back({ "tanh", CUDNN_RNN_TANH, 1, 2, CUDNN_DATA_DOUBLE, CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED,
			 CUDNN_RNN_SINGLE_INP_BIAS, 2, 3, 2, 4, { 2, 4 }, 0.0f, 1e-9 });
	for (size_t i = 0; i < nets.size(); i++) {
		build(nets[i], 10 * (int)i + 1);
		forward(nets[i], CUDNN_FWD_MODE_TRAINING);
	}
	{   // bad input is refused, not run
		cudnnRNNDataDescriptor_t bad;
		cudnnRNNDescriptor_t br;
		cudnnTensorDescriptor_t md;
		void *m = nullptr, *b = nullptr;
		int lens[2] = { 3, 9 };

		DK(cudnnCreateRNNDataDescriptor(&bad));
		DK(cudnnCreateRNNDescriptor(&br));
		DK(cudnnCreateTensorDescriptor(&md));
		if (cudnnSetRNNDataDescriptor(bad, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, 4, 2, 5, lens,
					      nullptr) == CUDNN_STATUS_SUCCESS ||
		    cudnnSetRNNDescriptor_v8(br, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS,
					     CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT,
					     CUDNN_DEFAULT_MATH, 4, 8, 9, 1, nets[0].drop, 0) == CUDNN_STATUS_SUCCESS ||
		    (cudnnGetRNNWeightParams(h, nets[1].rnn, 0, nets[1].wbytes, nets[1].w, 2 * nets[1].G, md, &m, md, &b) ==
			     CUDNN_STATUS_SUCCESS && (m || b))) {
			fprintf(stderr, "cudnn_rnn: a sequence over maxSeqLength, a projection over the hidden size or "
					"a matrix past the last was taken\n");
			return 1;
		}
		DK(cudnnDestroyTensorDescriptor(md));
		DK(cudnnDestroyRNNDescriptor(br));
		DK(cudnnDestroyRNNDataDescriptor(bad));
	}
	CK(cudaStreamSynchronize(strm));
	int r = phos_fn_serve(handle_req, &st);

	for (auto &n : nets) {
		DK(cudnnDestroyRNNDataDescriptor(n.xd));
		DK(cudnnDestroyRNNDataDescriptor(n.yd));
		DK(cudnnDestroyTensorDescriptor(n.hd));
		DK(cudnnDestroyTensorDescriptor(n.cd));
		DK(cudnnDestroyDropoutDescriptor(n.drop));   // before its RNN descriptor, as PyTorch does
		DK(cudnnDestroyRNNDescriptor(n.rnn));
	}
	DK(cudnnDestroy(h));
	return r ? r : st.failures ? 1 : 0;
}
