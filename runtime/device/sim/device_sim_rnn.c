/* SPDX-License-Identifier: MIT */
/*
 * cuDNN's RNNs on the sim device (dnn_dev.h, phos_dnn_ops.rnn): a host
 * reference in double of the cells cuDNN documents, with its gate order:
 *
 *   RNN_RELU, RNN_TANH   h = act(W x + bW + R h' + bR)
 *   LSTM (i, f, g, o)    i, f, o = sigmoid(W x + bW + R h' + bR), g = tanh(...),
 *                        c = f c' + i g, h = o tanh(c)
 *   GRU (r, z, n)        r, z = sigmoid(...), n = tanh(Wn x + bWn + r (Rn h' + bRn)),
 *                        h = (1 - z) n + z h'
 *
 * layers stacked, uni- or bidirectional (a layer above reads both
 * directions' h), any batch sequence lengths (the packed layout's sorted
 * longest first), the three data layouts, the four bias modes. Not here
 * (NOT_SUPPORTED): projections (projSize < hiddenSize), skip input, and
 * dropout between layers while training.
 *
 * The weight space holds, for each pseudo-layer (layer x directions + direction),
 * its 2G matrices (G gates: the input ones, H x in, then the recurrent
 * ones, H x H), then its biases (H each); cudnnGetRNNWeightParams gives
 * their offsets and 3-D descriptors as cuDNN does. The reserve space (training)
 * keeps, for each pseudo-layer, time step and sequence, the gates, c, h,
 * GRU's Rn h' + bRn, and the gate gradients the backward data pass finds
 * (doubles), from which the backward weights pass sums the weights'
 * gradients. Dropout's states are a pattern made from the seed.
 */
#include "device_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dnn_dev.h"

struct geo {
	int G, L, D, et;        /* gates, layers, directions, element type (phos_sim_elem_get) */
	int64_t H, I, T, B, R;  /* hidden, input, time steps, batch, doubles a reserve record */
	bool bias_w, bias_r;
	const struct phos_dnn_rnn *r;
	const int32_t *seq;
	int64_t *cum;           /* packed layout: vectors before step t */
};

static int ok(int *st, int s)
{
	*st = s;
	return 0;
}

static int64_t in_size(const struct geo *g, int l)
{
	return l == 0 ? g->I : g->D * g->H;
}

/* The geometry of r, or a status. seq may be NULL (no data descriptors). */
static int geo_of(const struct phos_dnn_rnn *r, const int32_t *seq, struct geo *g)
{
	static const int gates[4] = { 1, 1, 4, 3 };
	const struct phos_dnn_rnn_desc *d = &r->r;

	memset(g, 0, sizeof(*g));
	g->r = r;
	g->et = phos_sim_dnn_elem_type(d->data_type);
	if (g->et < 0 || d->proj_size != d->hidden_size || d->input_mode != 0)
		return PHOS_DNN_NOT_SUPPORTED;
	g->G = gates[d->cell];
	g->L = d->layers;
	g->D = d->dir + 1;
	g->H = d->hidden_size;
	g->I = d->input_size;
	g->bias_w = d->bias == 1 || d->bias == 2;
	g->bias_r = d->bias == 2 || d->bias == 3;
	g->R = 3 * g->G * g->H + 3 * g->H;
	if (!seq)
		return 0;
	g->seq = seq;
	g->T = r->x.max_seq;
	g->B = r->x.batch;
	if (r->x.type != d->data_type || r->x.vector != g->I)
		return PHOS_DNN_BAD_PARAM;
	if (r->kind != PHOS_DNN_RNN_TEMP_SPACE && (r->y.type != d->data_type || r->y.vector != g->D * g->H))
		return PHOS_DNN_BAD_PARAM;
	{   /* sim's reserve and scratch (doubles) must stay small: a host reference */
		uint64_t n;

		if (__builtin_mul_overflow((uint64_t)(g->L * g->D) * (uint64_t)g->T, (uint64_t)g->B, &n) ||
		    __builtin_mul_overflow(n, (uint64_t)(g->R + 2 * (g->D * g->H + g->I)), &n) || n > (1ull << 31))
			return PHOS_DNN_NOT_SUPPORTED;
	}
	if (r->x.layout == 1)   /* packed: longest first */
		for (int64_t b = 1; b < g->B; b++)
			if (seq[b] > seq[b - 1])
				return PHOS_DNN_BAD_PARAM;
	return 0;
}

/* Offset (elements) of pseudo-layer p's matrix or bias lin, its rows and
 * columns; -1 when it has none. With p = L x D, the space's size. */
static int64_t w_at(const struct geo *g, int p, int lin, bool bias, int64_t *cols)
{
	int64_t off = 0;

	for (int q = 0; q <= p && q < g->L * g->D; q++) {
		int64_t in = in_size(g, q / g->D);

		for (int k = 0; k < 2 * g->G; k++) {
			int64_t c = k < g->G ? in : g->H;

			if (q == p && !bias && k == lin) {
				*cols = c;
				return off;
			}
			off += g->H * c;
		}
		for (int k = 0; k < 2 * g->G; k++) {
			if (!(k < g->G ? g->bias_w : g->bias_r))
				continue;
			if (q == p && bias && k == lin) {
				*cols = 1;
				return off;
			}
			off += g->H;
		}
		if (q == p)
			return -1;
	}
	return off;
}

static double sigm(double v)
{
	return 1 / (1 + exp(-v));
}

/* Element of data tensor d (x or y, vector size v) at step t of sequence b. */
static int64_t data_at(const struct geo *g, int layout, int64_t v, int64_t t, int64_t b)
{
	if (layout == 0)
		return (t * g->B + b) * v;
	if (layout == 2)
		return (b * g->T + t) * v;
	return (g->cum[t] + b) * v;
}

static int64_t state_at(const struct phos_dnn_tensor *s, int64_t p, int64_t b, int64_t j)
{
	return p * s->strides[0] + b * s->strides[1] + j * s->strides[2];
}

static double *rec(const struct geo *g, double *rs, int p, int64_t t, int64_t b)
{
	return rs + ((p * g->T + t) * g->B + b) * g->R;
}

/* A reserve record's parts. */
#define ACT(q) (q)
#define CELL(q) ((q) + g->G * g->H)
#define HID(q) ((q) + g->G * g->H + g->H)
#define RN(q) ((q) + g->G * g->H + 2 * g->H)
#define GI(q) ((q) + g->G * g->H + 3 * g->H)
#define GR(q) ((q) + 2 * g->G * g->H + 3 * g->H)

/* The input of pseudo-layer p's cell at (t, b), into in (in_size doubles). */
static void input_of(const struct geo *g, double *rs, int l, int64_t t, int64_t b, double *in)
{
	if (l == 0) {
		const void *x = (const void *)(uintptr_t)g->r->px;
		int64_t o = data_at(g, g->r->x.layout, g->I, t, b);

		for (int64_t i = 0; i < g->I; i++)
			in[i] = phos_sim_elem_get(x, g->et, o + i);
		return;
	}
	for (int d = 0; d < g->D; d++)
		memcpy(in + d * g->H, HID(rec(g, rs, (l - 1) * g->D + d, t, b)), (size_t)g->H * sizeof(double));
}

/* Step s of sequence b, in direction d: its time. */
static int64_t step_time(int d, int64_t s, int64_t len)
{
	return d == 0 ? s : len - 1 - s;
}

/* The state before step s (h, c), from the record before or the initial one. */
static void state_before(const struct geo *g, double *rs, int p, int64_t s, int64_t b, double *hp, double *cp)
{
	const struct phos_dnn_rnn *r = g->r;
	int64_t len = g->seq[b];

	if (s > 0) {
		double *q = rec(g, rs, p, step_time(p % g->D, s - 1, len), b);

		memcpy(hp, HID(q), (size_t)g->H * sizeof(double));
		memcpy(cp, CELL(q), (size_t)g->H * sizeof(double));
		return;
	}
	for (int64_t j = 0; j < g->H; j++) {
		hp[j] = r->hx ? phos_sim_elem_get((const void *)(uintptr_t)r->hx, g->et, state_at(&r->h, p, b, j)) : 0;
		cp[j] = r->cx ? phos_sim_elem_get((const void *)(uintptr_t)r->cx, g->et, state_at(&r->c, p, b, j)) : 0;
	}
}

static double wget(const struct geo *g, int64_t at)
{
	return phos_sim_elem_get((const void *)(uintptr_t)g->r->weights, g->et, at);
}

/* One cell step of pseudo-layer p into record q. */
static void cell(const struct geo *g, int p, const double *in, const double *hp, const double *cp, double *q)
{
	int64_t in_n = in_size(g, p / g->D), cols;

	for (int k = 0; k < g->G; k++) {
		int64_t wo = w_at(g, p, k, false, &cols), ro = w_at(g, p, g->G + k, false, &cols);
		int64_t bw = g->bias_w ? w_at(g, p, k, true, &cols) : -1;
		int64_t br = g->bias_r ? w_at(g, p, g->G + k, true, &cols) : -1;

		for (int64_t j = 0; j < g->H; j++) {
			double a = bw >= 0 ? wget(g, bw + j) : 0, rr = br >= 0 ? wget(g, br + j) : 0;

			for (int64_t i = 0; i < in_n; i++)
				a += wget(g, wo + j * in_n + i) * in[i];
			for (int64_t i = 0; i < g->H; i++)
				rr += wget(g, ro + j * g->H + i) * hp[i];
			if (g->r->r.cell == 3 && k == 2) {   /* GRU's n: r (Rn h' + bRn) */
				RN(q)[j] = rr;
				a += ACT(q)[j] * rr;          /* (r, gate 0, is done) */
			} else {
				a += rr;
			}
			ACT(q)[k * g->H + j] = a;   /* the pre-activation, for now */
		}
		if (g->r->r.cell == 3 && k < 2)
			for (int64_t j = 0; j < g->H; j++)
				ACT(q)[k * g->H + j] = sigm(ACT(q)[k * g->H + j]);
	}
	for (int64_t j = 0; j < g->H; j++) {
		double *a = ACT(q), h, c = 0;

		switch (g->r->r.cell) {
		case 0: h = a[j] = a[j] > 0 ? a[j] : 0; break;
		case 1: h = a[j] = tanh(a[j]); break;
		case 2:
			a[j] = sigm(a[j]);
			a[g->H + j] = sigm(a[g->H + j]);
			a[2 * g->H + j] = tanh(a[2 * g->H + j]);
			a[3 * g->H + j] = sigm(a[3 * g->H + j]);
			c = a[g->H + j] * cp[j] + a[j] * a[2 * g->H + j];
			h = a[3 * g->H + j] * tanh(c);
			break;
		default:
			a[2 * g->H + j] = tanh(a[2 * g->H + j]);
			h = (1 - a[g->H + j]) * a[2 * g->H + j] + a[g->H + j] * hp[j];
		}
		CELL(q)[j] = c;
		HID(q)[j] = h;
	}
}

static void state_put(const struct geo *g, uint64_t dst, const struct phos_dnn_tensor *s, int p, int64_t b,
		      const double *v)
{
	if (dst)
		for (int64_t j = 0; j < g->H; j++)
			phos_sim_elem_put((void *)(uintptr_t)dst, g->et, state_at(s, p, b, j), v[j]);
}

static void forward(const struct geo *g, double *rs, double *scratch)
{
	const struct phos_dnn_rnn *r = g->r;
	double *in = scratch, *hp = in + g->D * g->H + g->I, *cp = hp + g->H;

	for (int l = 0; l < g->L; l++)
		for (int d = 0; d < g->D; d++) {
			int p = l * g->D + d;

			for (int64_t b = 0; b < g->B; b++) {
				int64_t len = g->seq[b];

				for (int64_t s = 0; s < len; s++) {
					int64_t t = step_time(d, s, len);

					state_before(g, rs, p, s, b, hp, cp);
					input_of(g, rs, l, t, b, in);
					cell(g, p, in, hp, cp, rec(g, rs, p, t, b));
				}
				state_before(g, rs, p, len, b, hp, cp);
				state_put(g, r->hy, &r->h, p, b, hp);
				if (r->r.cell == 2)
					state_put(g, r->cy, &r->c, p, b, cp);
			}
		}
	for (int64_t b = 0; b < g->B; b++)
		for (int64_t t = 0; t < (r->x.layout == 1 ? g->seq[b] : g->T); t++) {
			void *y = (void *)(uintptr_t)r->py;
			int64_t o = data_at(g, r->y.layout, g->D * g->H, t, b);

			for (int d = 0; d < g->D; d++)
				for (int64_t j = 0; j < g->H; j++) {
					if (t < g->seq[b])
						phos_sim_elem_put(y, g->et, o + d * g->H + j,
								  HID(rec(g, rs, (g->L - 1) * g->D + d, t, b))[j]);
					else if (r->y.has_fill && (r->r.aux_flags & 1))
						phos_sim_elem_put(y, g->et, o + d * g->H + j,
								  r->y.type == PHOS_DNN_DATA_DOUBLE
									  ? *(const double *)r->y.fill
									  : *(const float *)r->y.fill);
				}
		}
}

/* The gradients of one step: from dh (into the step's h) and dc_next, the
 * gates' into q, and dh' and dc' (of the state before) into dhp, dcp. */
static void cell_back(const struct geo *g, int p, const double *hp, const double *cp, double *q, const double *dh,
		      const double *dc_next, double *dhp, double *dcp)
{
	const double *a = ACT(q);
	double *gi = GI(q), *gr = GR(q);
	int64_t H = g->H, cols;

	for (int64_t j = 0; j < H; j++) {
		double h = HID(q)[j];

		switch (g->r->r.cell) {
		case 0: gi[j] = dh[j] * (h > 0 ? 1 : 0); break;
		case 1: gi[j] = dh[j] * (1 - h * h); break;
		case 2: {
			double i = a[j], f = a[H + j], gg = a[2 * H + j], o = a[3 * H + j], tc = tanh(CELL(q)[j]);
			double dc = dc_next[j] + dh[j] * o * (1 - tc * tc);

			gi[j] = dc * gg * i * (1 - i);
			gi[H + j] = dc * cp[j] * f * (1 - f);
			gi[2 * H + j] = dc * i * (1 - gg * gg);
			gi[3 * H + j] = dh[j] * tc * o * (1 - o);
			dcp[j] = dc * f;
			break;
		}
		default: {
			double rg = a[j], z = a[H + j], n = a[2 * H + j];
			double an = dh[j] * (1 - z) * (1 - n * n);

			gi[2 * H + j] = an;
			gr[2 * H + j] = an * rg;
			gi[j] = an * RN(q)[j] * rg * (1 - rg);
			gi[H + j] = dh[j] * (hp[j] - n) * z * (1 - z);
			dhp[j] = dh[j] * z;
		}
		}
	}
	for (int k = 0; k < g->G; k++)
		if (g->r->r.cell != 3 || k < 2)
			memcpy(gr + k * H, gi + k * H, (size_t)H * sizeof(double));
	if (g->r->r.cell != 3)
		memset(dhp, 0, (size_t)H * sizeof(double));
	for (int k = 0; k < g->G; k++) {
		int64_t ro = w_at(g, p, g->G + k, false, &cols);

		for (int64_t j = 0; j < H; j++)
			for (int64_t i = 0; i < H; i++)
				dhp[i] += wget(g, ro + j * H + i) * gr[k * H + j];
	}
}

static void backward_data(const struct geo *g, double *rs, double *scratch)
{
	const struct phos_dnn_rnn *r = g->r;
	int64_t DH = g->D * g->H, in_max = DH > g->I ? DH : g->I, cols;
	double *dout = scratch, *din = dout + g->T * g->B * DH;
	double *hp = din + g->T * g->B * in_max, *cp = hp + g->H, *dh = cp + g->H, *dhn = dh + g->H, *dcn = dhn + g->H,
	       *dhp = dcn + g->H, *dcp = dhp + g->H;

	for (int64_t b = 0; b < g->B; b++)
		for (int64_t t = 0; t < g->seq[b]; t++)
			for (int64_t k = 0; k < DH; k++)
				dout[(t * g->B + b) * DH + k] = phos_sim_elem_get(
					(const void *)(uintptr_t)r->pdy, g->et, data_at(g, r->y.layout, DH, t, b) + k);
	for (int l = g->L - 1; l >= 0; l--) {
		int64_t in_n = in_size(g, l);

		memset(din, 0, (size_t)(g->T * g->B * in_max) * sizeof(double));
		for (int d = 0; d < g->D; d++) {
			int p = l * g->D + d;

			for (int64_t b = 0; b < g->B; b++) {
				int64_t len = g->seq[b];

				for (int64_t j = 0; j < g->H; j++) {
					dhn[j] = r->dhy ? phos_sim_elem_get((const void *)(uintptr_t)r->dhy, g->et,
									    state_at(&r->h, p, b, j))
							: 0;
					dcn[j] = r->dcy && r->r.cell == 2
							 ? phos_sim_elem_get((const void *)(uintptr_t)r->dcy, g->et,
									     state_at(&r->c, p, b, j))
							 : 0;
				}
				for (int64_t s = len - 1; s >= 0; s--) {
					int64_t t = step_time(d, s, len);
					double *q = rec(g, rs, p, t, b);

					for (int64_t j = 0; j < g->H; j++)
						dh[j] = dout[(t * g->B + b) * DH + d * g->H + j] + dhn[j];
					state_before(g, rs, p, s, b, hp, cp);
					cell_back(g, p, hp, cp, q, dh, dcn, dhp, dcp);
					for (int k = 0; k < g->G; k++) {
						int64_t wo = w_at(g, p, k, false, &cols);

						for (int64_t j = 0; j < g->H; j++)
							for (int64_t i = 0; i < in_n; i++)
								din[(t * g->B + b) * in_max + i] +=
									wget(g, wo + j * in_n + i) * GI(q)[k * g->H + j];
					}
					memcpy(dhn, dhp, (size_t)g->H * sizeof(double));
					memcpy(dcn, dcp, (size_t)g->H * sizeof(double));
				}
				state_put(g, r->dhx, &r->h, p, b, dhn);
				if (r->r.cell == 2)
					state_put(g, r->dcx, &r->c, p, b, dcn);
			}
		}
		for (int64_t b = 0; b < g->B; b++)
			for (int64_t t = 0; t < g->seq[b]; t++)
				for (int64_t i = 0; i < in_n; i++) {
					double v = din[(t * g->B + b) * in_max + i];

					if (l == 0)
						phos_sim_elem_put((void *)(uintptr_t)r->pdx, g->et,
								  data_at(g, r->x.layout, g->I, t, b) + i, v);
					else
						dout[(t * g->B + b) * DH + i] = v;
				}
	}
}

static void backward_weights(const struct geo *g, double *rs, double *acc, double *scratch)
{
	const struct phos_dnn_rnn *r = g->r;
	double *in = scratch, *hp = in + g->D * g->H + g->I, *cp = hp + g->H;
	int64_t n = w_at(g, g->L * g->D, 0, false, &(int64_t){ 0 }), cols;

	for (int p = 0; p < g->L * g->D; p++) {
		int l = p / g->D;
		int64_t in_n = in_size(g, l);

		for (int64_t b = 0; b < g->B; b++)
			for (int64_t s = 0; s < g->seq[b]; s++) {
				int64_t t = step_time(p % g->D, s, g->seq[b]);
				const double *q = rec(g, rs, p, t, b);

				input_of(g, rs, l, t, b, in);
				state_before(g, rs, p, s, b, hp, cp);
				for (int k = 0; k < g->G; k++) {
					int64_t wo = w_at(g, p, k, false, &cols), ro = w_at(g, p, g->G + k, false, &cols);
					int64_t bw = g->bias_w ? w_at(g, p, k, true, &cols) : -1;
					int64_t br = g->bias_r ? w_at(g, p, g->G + k, true, &cols) : -1;

					for (int64_t j = 0; j < g->H; j++) {
						double gi = GI(q)[k * g->H + j], gr = GR(q)[k * g->H + j];

						for (int64_t i = 0; i < in_n; i++)
							acc[wo + j * in_n + i] += gi * in[i];
						for (int64_t i = 0; i < g->H; i++)
							acc[ro + j * g->H + i] += gr * hp[i];
						if (bw >= 0)
							acc[bw + j] += gi;
						if (br >= 0)
							acc[br + j] += gr;
					}
				}
			}
	}
	for (int64_t i = 0; i < n; i++) {
		void *dw = (void *)(uintptr_t)r->dweights;
		double old = r->wgrad_mode == 0 ? phos_sim_elem_get(dw, g->et, i) : 0;

		phos_sim_elem_put(dw, g->et, i, old + acc[i]);
	}
}

/* The dropout states: their size, or filled from the seed. A cuDNN status. */
static int dropout(const struct phos_dnn_rnn *r, struct phos_reply_dnn_rnn *ret)
{
	if (r->kind == PHOS_DNN_DROPOUT_STATES_SIZE) {
		ret->size[0] = 4096;
		return PHOS_DNN_SUCCESS;
	}
	uint8_t *p = (uint8_t *)(uintptr_t)r->r.states;
	uint64_t x = r->r.seed * 0x9e3779b97f4a7c15ull + 1;

	for (uint64_t i = 0; i < r->r.states_bytes; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		p[i] = (uint8_t)x;
	}
	return PHOS_DNN_SUCCESS;
}

/* cudnnGetRNNWeightParams: where a layer's matrix lin and its bias lie in
 * the weight space (nw elements of es bytes). A cuDNN status. */
static int weight_params(const struct geo *g, const struct phos_dnn_rnn *r, int64_t nw, int64_t es,
			 struct phos_reply_dnn_rnn *ret)
{
	int64_t m, b, mc = 0, cols;

	if (r->layer >= g->L * g->D || r->lin >= 2 * g->G)
		return PHOS_DNN_BAD_PARAM;
	if (r->weights_bytes < (uint64_t)(nw * es))
		return PHOS_DNN_BAD_PARAM;
	m = w_at(g, r->layer, r->lin, false, &mc);
	b = (r->lin < g->G ? g->bias_w : g->bias_r) ? w_at(g, r->layer, r->lin, true, &cols) : -1;
	ret->m_off = m * es;
	ret->m = (struct phos_dnn_tensor){ .type = r->r.data_type, .nb = 3, .dims = { 1, (int32_t)g->H, (int32_t)mc },
					   .strides = { (int32_t)(g->H * mc), (int32_t)mc, 1 } };
	ret->b_off = b >= 0 ? b * es : -1;
	if (b >= 0)
		ret->b = (struct phos_dnn_tensor){ .type = r->r.data_type, .nb = 3, .dims = { 1, (int32_t)g->H, 1 },
						   .strides = { (int32_t)g->H, 1, 1 } };
	return PHOS_DNN_SUCCESS;
}

/* A pass's sizes and states checked against its geometry: the weights
 * (wbytes), the hidden and cell states, the reserve (rbytes). A cuDNN status. */
static int pass_check(const struct geo *g, const struct phos_dnn_rnn *r, uint64_t wbytes, uint64_t rbytes)
{
	if (r->weights_bytes < wbytes)
		return PHOS_DNN_BAD_PARAM;
	if ((r->hx || r->hy || r->dhx || r->dhy) &&
	    (r->h.nb < 3 || r->h.dims[0] != g->L * g->D || r->h.dims[1] != g->B || r->h.dims[2] != g->H))
		return PHOS_DNN_BAD_PARAM;
	if (r->r.cell == 2 && (r->cx || r->cy || r->dcx || r->dcy) &&
	    (r->c.nb < 3 || r->c.dims[0] != g->L * g->D || r->c.dims[1] != g->B || r->c.dims[2] != g->H))
		return PHOS_DNN_BAD_PARAM;
	if ((r->kind != PHOS_DNN_RNN_FORWARD || r->fwd_mode == 1) && r->reserve_bytes < rbytes)
		return PHOS_DNN_BAD_PARAM;
	if (r->kind == PHOS_DNN_RNN_FORWARD && r->fwd_mode == 1 && r->r.dropout > 0 && g->L > 1)
		return PHOS_DNN_NOT_SUPPORTED;
	return PHOS_DNN_SUCCESS;
}

int phos_sim_dnn_rnn(struct phos_device *dev, void *h, void *stream, const struct phos_dnn_rnn *r,
		     const int32_t *seq, struct phos_reply_dnn_rnn *ret, int *st)
{
	struct geo g;
	int64_t es, nw, cols, DH, in_max, cum = 0;
	uint64_t rbytes;
	double *rs = NULL, *scratch = NULL, *acc = NULL;
	int s;

	(void)h;
	if (stream && phos_sim_stream_check(dev, stream) < 0)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (r->kind == PHOS_DNN_DROPOUT_STATES_SIZE || r->kind == PHOS_DNN_DROPOUT_INIT)
		return ok(st, dropout(r, ret));
	s = geo_of(r, seq, &g);
	if (s)
		return ok(st, s);
	es = (int64_t)phos_dnn_data_type_size(r->r.data_type);
	nw = w_at(&g, g.L * g.D, 0, false, &cols);
	rbytes = (uint64_t)(g.L * g.D) * (uint64_t)g.T * (uint64_t)g.B * (uint64_t)g.R * sizeof(double);
	switch (r->kind) {
	case PHOS_DNN_RNN_WEIGHT_SPACE:
		ret->size[0] = (uint64_t)(nw * es);
		return ok(st, PHOS_DNN_SUCCESS);
	case PHOS_DNN_RNN_TEMP_SPACE:
		ret->size[0] = (uint64_t)g.B * 64;   /* a workspace sim does not use */
		ret->size[1] = r->fwd_mode == 1 ? rbytes : 0;
		return ok(st, PHOS_DNN_SUCCESS);
	case PHOS_DNN_RNN_WEIGHT_PARAMS:
		return ok(st, weight_params(&g, r, nw, es, ret));
	default:
		break;
	}
	s = pass_check(&g, r, (uint64_t)(nw * es), rbytes);
	if (s)
		return ok(st, s);
	g.cum = calloc((size_t)g.T + 1, sizeof(int64_t));
	DH = g.D * g.H;
	in_max = DH > g.I ? DH : g.I;
	scratch = calloc((size_t)(2 * g.T * g.B * in_max + DH + g.I + 16 * g.H), sizeof(double));
	if (r->kind == PHOS_DNN_RNN_FORWARD && r->fwd_mode == 0)
		rs = calloc(rbytes / sizeof(double) + 1, sizeof(double));
	if (r->kind == PHOS_DNN_RNN_BACKWARD_WEIGHTS)
		acc = calloc((size_t)nw + 1, sizeof(double));
	if (!g.cum || !scratch || (r->kind == PHOS_DNN_RNN_FORWARD && r->fwd_mode == 0 && !rs) ||
	    (r->kind == PHOS_DNN_RNN_BACKWARD_WEIGHTS && !acc)) {
		s = PHOS_DNN_INTERNAL_ERROR;
		goto out;
	}
	for (int64_t t = 0; t < g.T; t++) {
		g.cum[t] = cum;
		for (int64_t b = 0; b < g.B; b++)
			cum += seq[b] > t;
	}
	if (!rs)
		rs = (double *)(uintptr_t)r->reserve;
	if (r->kind == PHOS_DNN_RNN_FORWARD)
		forward(&g, rs, scratch);
	else if (r->kind == PHOS_DNN_RNN_BACKWARD_DATA)
		backward_data(&g, rs, scratch);
	else
		backward_weights(&g, rs, acc, scratch);
	s = PHOS_DNN_SUCCESS;
out:
	if (rs && rs != (double *)(uintptr_t)r->reserve)
		free(rs);
	free(acc);
	free(scratch);
	free(g.cum);
	return ok(st, s);
}
