/* SPDX-License-Identifier: MIT */
/*
 * cuDNN's RNN API in the stand-in (libcudnn.so.9): the v8 calls that
 * PyTorch's nn.LSTM, nn.GRU and nn.RNN make with cuDNN 9.
 *
 *   dropout, RNN and RNN data descriptors ── kept here, by value (an RNN
 *        descriptor copies its dropout descriptor's values when it is set,
 *        so the program may destroy them in either order)
 *   cudnnSetDropoutDescriptor with states ── DNN_RNN DROPOUT_INIT, stream-
 *        ordered: the executor's cuDNN seeds the states (written)
 *   cudnnRestoreDropoutDescriptor ────────── kept here only (no device work)
 *   size queries, cudnnGetRNNWeightParams ── sync DNN_RNN_ASK. Weight
 *        parameters answer offsets into the weight space and the matrix and
 *        bias descriptors as the executor's cuDNN filled them; PyTorch asks
 *        each one a hundred times a pass, so answers are kept here, by the
 *        RNN descriptor's values, the layer, the matrix and the space's size
 *   cudnnRNNForward, ...BackwardData_v8, ...BackwardWeights_v8 ── DNN_RNN,
 *        stream-ordered (nodes on a capturing stream): every descriptor by
 *        value, and the batch's sequence lengths; their sets are exact
 *        (ctxpool/calls/exec_dnn.c)
 *
 * cudnnBuildRNNDynamic, the clip calls and the stand-alone dropout
 * (cudnnDropoutForward/Backward) answer NOT_SUPPORTED, named once in the
 * log.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn_internal.h"
#include "internal.h"

#define DNN_DROPOUT_MAGIC 0x7068444fu
#define DNN_RNN_MAGIC 0x70685252u
#define DNN_RNN_DATA_MAGIC 0x70685244u

struct cudnnDropoutStruct {
	uint32_t magic;
	float dropout;
	void *states;
	size_t bytes;
	unsigned long long seed;
};

struct cudnnRNNStruct {
	uint32_t magic;
	bool set;
	struct phos_dnn_rnn_desc d;
	cudnnDropoutDescriptor_t dropout;   /* as given, for cudnnGetRNNDescriptor_v8 only */
};

struct cudnnRNNDataStruct {
	uint32_t magic;
	bool set;
	struct phos_dnn_rnn_data d;
	int32_t *seq;                       /* d.batch lengths */
};

static cudnnDropoutDescriptor_t dropout_of(cudnnDropoutDescriptor_t d)
{
	return d && d->magic == DNN_DROPOUT_MAGIC ? d : NULL;
}

static cudnnRNNDescriptor_t rnn_of(cudnnRNNDescriptor_t d)
{
	return d && d->magic == DNN_RNN_MAGIC ? d : NULL;
}

static cudnnRNNDataDescriptor_t data_of(cudnnRNNDataDescriptor_t d)
{
	return d && d->magic == DNN_RNN_DATA_MAGIC ? d : NULL;
}

/* --- dropout --- */

PHOS_EXPORT cudnnStatus_t cudnnCreateDropoutDescriptor(cudnnDropoutDescriptor_t *desc)
{
	return dnn_desc_new(desc, sizeof(**desc), DNN_DROPOUT_MAGIC);
}

PHOS_EXPORT cudnnStatus_t cudnnDestroyDropoutDescriptor(cudnnDropoutDescriptor_t desc)
{
	return dnn_desc_free(desc, dropout_of(desc) != NULL);
}

/* A query of the executor's cuDNN (r->kind one of the ASK kinds), with
 * x's sequence lengths for TEMP_SPACE. */
static cudnnStatus_t ask(cudnnHandle_t h, struct phos_dnn_rnn *r, const int32_t *seq, size_t nseq,
			 struct phos_reply_dnn_rnn *ret)
{
	r->handle = h->id;
	return dnn_ask(h, PHOS_OP_DNN_RNN_ASK, r, sizeof(*r), seq, nseq * sizeof(int32_t), ret, sizeof(*ret));
}

PHOS_EXPORT cudnnStatus_t cudnnDropoutGetStatesSize(cudnnHandle_t handle, size_t *size)
{
	static pthread_mutex_t once = PTHREAD_MUTEX_INITIALIZER;
	static size_t known;   /* the executor's library's answer, asked once */
	cudnnHandle_t h = dnn_handle_of(handle);
	struct phos_dnn_rnn r = { .kind = PHOS_DNN_DROPOUT_STATES_SIZE };
	struct phos_reply_dnn_rnn ret;
	cudnnStatus_t s = PHOS_DNN_SUCCESS;

	if (!h || !size)
		return !h ? PHOS_DNN_BAD_PARAM : PHOS_DNN_BAD_PARAM_NULL_POINTER;
	pthread_mutex_lock(&once);
	if (!known) {
		s = ask(h, &r, NULL, 0, &ret);
		if (!s)
			known = (size_t)ret.size[0];
	}
	if (!s)
		*size = known;
	pthread_mutex_unlock(&once);
	return s;
}

static cudnnStatus_t dropout_keep(cudnnDropoutDescriptor_t d, float dropout, void *states, size_t bytes,
				  unsigned long long seed)
{
	if (!(dropout >= 0 && dropout < 1) || (!states != !bytes))
		return PHOS_DNN_BAD_PARAM;
	d->dropout = dropout;
	d->states = states;
	d->bytes = bytes;
	d->seed = seed;
	return PHOS_DNN_SUCCESS;
}

PHOS_EXPORT cudnnStatus_t cudnnSetDropoutDescriptor(cudnnDropoutDescriptor_t desc, cudnnHandle_t handle,
						    float dropout, void *states, size_t bytes,
						    unsigned long long seed)
{
	cudnnDropoutDescriptor_t d = dropout_of(desc);
	cudnnHandle_t h = dnn_handle_of(handle);
	struct phos_dnn_rnn r = { .kind = PHOS_DNN_DROPOUT_INIT };
	cudnnStatus_t s;

	if (!d || !h)
		return PHOS_DNN_BAD_PARAM;
	s = dropout_keep(d, dropout, states, bytes, seed);
	if (s || !states)
		return s;
	r.handle = h->id;
	r.r.dropout = dropout;
	r.r.states = (uint64_t)(uintptr_t)states;
	r.r.states_bytes = bytes;
	r.r.seed = seed;
	return dnn_post(h, PHOS_OP_DNN_RNN, &r, sizeof(r), NULL, 0, offsetof(struct phos_dnn_rnn, stream));
}

PHOS_EXPORT cudnnStatus_t cudnnRestoreDropoutDescriptor(cudnnDropoutDescriptor_t desc, cudnnHandle_t handle,
							float dropout, void *states, size_t bytes,
							unsigned long long seed)
{
	cudnnDropoutDescriptor_t d = dropout_of(desc);

	if (!d || !dnn_handle_of(handle))
		return PHOS_DNN_BAD_PARAM;
	return dropout_keep(d, dropout, states, bytes, seed);
}

PHOS_EXPORT cudnnStatus_t cudnnGetDropoutDescriptor(cudnnDropoutDescriptor_t desc, cudnnHandle_t handle,
						    float *dropout, void **states, unsigned long long *seed)
{
	cudnnDropoutDescriptor_t d = dropout_of(desc);

	if (!d || !dnn_handle_of(handle) || !dropout || !states || !seed)
		return PHOS_DNN_BAD_PARAM;
	*dropout = d->dropout;
	*states = d->states;
	*seed = d->seed;
	return PHOS_DNN_SUCCESS;
}

/* --- RNN descriptors --- */

PHOS_EXPORT cudnnStatus_t cudnnCreateRNNDescriptor(cudnnRNNDescriptor_t *desc)
{
	return dnn_desc_new(desc, sizeof(**desc), DNN_RNN_MAGIC);
}

PHOS_EXPORT cudnnStatus_t cudnnDestroyRNNDescriptor(cudnnRNNDescriptor_t desc)
{
	return dnn_desc_free(desc, rnn_of(desc) != NULL);   /* (its dropout descriptor is the program's) */
}

PHOS_EXPORT cudnnStatus_t cudnnSetRNNDescriptor_v8(cudnnRNNDescriptor_t desc, int algo, int cell, int bias, int dir,
						   int input_mode, int data_type, int math_prec, int math_type,
						   int32_t input_size, int32_t hidden_size, int32_t proj_size,
						   int32_t layers, cudnnDropoutDescriptor_t dropout,
						   uint32_t aux_flags)
{
	cudnnRNNDescriptor_t d = rnn_of(desc);
	cudnnDropoutDescriptor_t drop = dropout_of(dropout);
	struct phos_dnn_rnn_desc v = {
		.algo = algo, .cell = cell, .bias = bias, .dir = dir, .input_mode = input_mode,
		.data_type = data_type, .math_prec = math_prec, .math_type = math_type, .input_size = input_size,
		.hidden_size = hidden_size, .proj_size = proj_size, .layers = layers, .aux_flags = aux_flags,
	};

	if (!d || (dropout && !drop))
		return PHOS_DNN_BAD_PARAM;
	if (cell < 0 || cell > 3 || dir < 0 || dir > 1 || bias < 0 || bias > 3 || input_mode < 0 || input_mode > 1 ||
	    algo < 0 || algo > 3 || !phos_dnn_data_type_size(data_type) || layers < 1 || layers > 1024 ||
	    input_size < 1 || input_size > PHOS_DNN_RNN_SIZE_MAX || hidden_size < 1 ||
	    hidden_size > PHOS_DNN_RNN_SIZE_MAX || proj_size < 1 || proj_size > hidden_size)
		return PHOS_DNN_BAD_PARAM;
	if (drop) {
		v.dropout = drop->dropout;
		v.states = (uint64_t)(uintptr_t)drop->states;
		v.states_bytes = drop->bytes;
		v.seed = drop->seed;
	}
	d->d = v;
	d->dropout = dropout;
	d->set = true;
	return PHOS_DNN_SUCCESS;
}

PHOS_EXPORT cudnnStatus_t cudnnGetRNNDescriptor_v8(cudnnRNNDescriptor_t desc, int *algo, int *cell, int *bias,
						   int *dir, int *input_mode, int *data_type, int *math_prec,
						   int *math_type, int32_t *input_size, int32_t *hidden_size,
						   int32_t *proj_size, int32_t *layers,
						   cudnnDropoutDescriptor_t *dropout, uint32_t *aux_flags)
{
	cudnnRNNDescriptor_t d = rnn_of(desc);

	if (!d || !d->set)
		return PHOS_DNN_BAD_PARAM;
#define OUT(p, v) do { if (p) *(p) = (v); } while (0)
	OUT(algo, d->d.algo);
	OUT(cell, d->d.cell);
	OUT(bias, d->d.bias);
	OUT(dir, d->d.dir);
	OUT(input_mode, d->d.input_mode);
	OUT(data_type, d->d.data_type);
	OUT(math_prec, d->d.math_prec);
	OUT(math_type, d->d.math_type);
	OUT(input_size, d->d.input_size);
	OUT(hidden_size, d->d.hidden_size);
	OUT(proj_size, d->d.proj_size);
	OUT(layers, d->d.layers);
	OUT(dropout, d->dropout);
	OUT(aux_flags, d->d.aux_flags);
#undef OUT
	return PHOS_DNN_SUCCESS;
}

/* --- RNN data descriptors --- */

PHOS_EXPORT cudnnStatus_t cudnnCreateRNNDataDescriptor(cudnnRNNDataDescriptor_t *desc)
{
	return dnn_desc_new(desc, sizeof(**desc), DNN_RNN_DATA_MAGIC);
}

PHOS_EXPORT cudnnStatus_t cudnnDestroyRNNDataDescriptor(cudnnRNNDataDescriptor_t desc)
{
	cudnnRNNDataDescriptor_t d = data_of(desc);

	if (d)
		free(d->seq);
	return dnn_desc_free(desc, d != NULL);
}

PHOS_EXPORT cudnnStatus_t cudnnSetRNNDataDescriptor(cudnnRNNDataDescriptor_t desc, int type, int layout,
						    int max_seq, int batch, int vector, const int seq[], void *fill)
{
	cudnnRNNDataDescriptor_t d = data_of(desc);
	size_t es = phos_dnn_data_type_size(type);
	int32_t *copy;

	if (!d || !seq || !es || layout < 0 || layout > 2 || max_seq < 1 || batch < 1 ||
	    batch > PHOS_DNN_RNN_BATCH_MAX || vector < 1 || vector > PHOS_DNN_RNN_SIZE_MAX)
		return PHOS_DNN_BAD_PARAM;
	for (int b = 0; b < batch; b++)
		if (seq[b] < 0 || seq[b] > max_seq)
			return PHOS_DNN_BAD_PARAM;
	copy = malloc((size_t)batch * sizeof(int32_t));
	if (!copy)
		return PHOS_DNN_INTERNAL_ERROR;
	memcpy(copy, seq, (size_t)batch * sizeof(int32_t));
	free(d->seq);
	d->seq = copy;
	memset(&d->d, 0, sizeof(d->d));
	d->d = (struct phos_dnn_rnn_data){ .type = type, .layout = layout, .max_seq = max_seq, .batch = batch,
					   .vector = vector, .has_fill = fill != NULL };
	if (fill)   /* a value of the data's type, in host memory */
		memcpy(d->d.fill, fill, es < sizeof(d->d.fill) ? es : sizeof(d->d.fill));
	d->set = true;
	return PHOS_DNN_SUCCESS;
}

PHOS_EXPORT cudnnStatus_t cudnnGetRNNDataDescriptor(cudnnRNNDataDescriptor_t desc, int *type, int *layout,
						    int *max_seq, int *batch, int *vector, int requested, int seq[],
						    void *fill)
{
	cudnnRNNDataDescriptor_t d = data_of(desc);
	size_t es;

	if (!d || !d->set || !type || !layout || !max_seq || !batch || !vector || requested < 0 ||
	    (requested && !seq))
		return PHOS_DNN_BAD_PARAM;
	*type = d->d.type;
	*layout = d->d.layout;
	*max_seq = d->d.max_seq;
	*batch = d->d.batch;
	*vector = d->d.vector;
	for (int b = 0; b < requested && b < d->d.batch; b++)
		seq[b] = d->seq[b];
	es = phos_dnn_data_type_size(d->d.type);
	if (fill && d->d.has_fill)
		memcpy(fill, d->d.fill, es < sizeof(d->d.fill) ? es : sizeof(d->d.fill));
	return PHOS_DNN_SUCCESS;
}

/* --- queries --- */

/* The record's handle and RNN descriptor: both ours, the descriptor set. */
static cudnnStatus_t begin(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, int kind, struct phos_dnn_rnn *r,
			   cudnnHandle_t *ret)
{
	cudnnRNNDescriptor_t d = rnn_of(desc);

	*ret = dnn_handle_of(handle);
	memset(r, 0, sizeof(*r));
	if (!*ret || !d || !d->set)
		return PHOS_DNN_BAD_PARAM;
	r->handle = (*ret)->id;
	r->kind = kind;
	r->r = d->d;
	return PHOS_DNN_SUCCESS;
}

PHOS_EXPORT cudnnStatus_t cudnnGetRNNWeightSpaceSize(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, size_t *size)
{
	struct phos_reply_dnn_rnn ret;
	struct phos_dnn_rnn r;
	cudnnHandle_t h;
	cudnnStatus_t s = begin(handle, desc, PHOS_DNN_RNN_WEIGHT_SPACE, &r, &h);

	if (!s && !size)
		s = PHOS_DNN_BAD_PARAM_NULL_POINTER;
	if (!s)
		s = ask(h, &r, NULL, 0, &ret);
	if (!s)
		*size = (size_t)ret.size[0];
	return s;
}

PHOS_EXPORT cudnnStatus_t cudnnGetRNNTempSpaceSizes(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, int fwd_mode,
						    cudnnRNNDataDescriptor_t xd, size_t *work, size_t *reserve)
{
	cudnnRNNDataDescriptor_t x = data_of(xd);
	struct phos_reply_dnn_rnn ret;
	struct phos_dnn_rnn r;
	cudnnHandle_t h;
	cudnnStatus_t s = begin(handle, desc, PHOS_DNN_RNN_TEMP_SPACE, &r, &h);

	if (!s && (!x || !x->set || fwd_mode < 0 || fwd_mode > 1))
		s = PHOS_DNN_BAD_PARAM;
	if (s)
		return s;
	r.fwd_mode = fwd_mode;
	r.x = x->d;
	s = ask(h, &r, x->seq, (size_t)x->d.batch, &ret);
	if (!s && work)
		*work = (size_t)ret.size[0];
	if (!s && reserve)
		*reserve = (size_t)ret.size[1];
	return s;
}

/* Weight parameters answered, by what their layout depends on. */
struct wp_key {
	int32_t algo, cell, bias, dir, input_mode, data_type, math_prec, math_type;
	int32_t input_size, hidden_size, proj_size, layers, layer, lin;
	uint64_t weights_bytes;
};
struct wp_entry {
	bool used;
	struct wp_key key;
	struct phos_reply_dnn_rnn ret;
};
#define WP_CACHE 1024
static struct wp_entry wp_cache[WP_CACHE];
static unsigned wp_next;
static pthread_mutex_t wp_lock = PTHREAD_MUTEX_INITIALIZER;

static struct wp_key wp_key_of(const struct phos_dnn_rnn *r)
{
	struct wp_key k;

	memset(&k, 0, sizeof(k));
	k.algo = r->r.algo, k.cell = r->r.cell, k.bias = r->r.bias, k.dir = r->r.dir;
	k.input_mode = r->r.input_mode, k.data_type = r->r.data_type, k.math_prec = r->r.math_prec;
	k.math_type = r->r.math_type, k.input_size = r->r.input_size, k.hidden_size = r->r.hidden_size;
	k.proj_size = r->r.proj_size, k.layers = r->r.layers, k.layer = r->layer, k.lin = r->lin;
	k.weights_bytes = r->weights_bytes;
	return k;
}

/* A descriptor's new values from cuDNN's answer (one of ours, or NULL). */
static cudnnStatus_t fill_tensor(cudnnTensorDescriptor_t d, const struct phos_dnn_tensor *t)
{
	cudnnTensorDescriptor_t mine = dnn_tensor_of(d);

	if (!d)
		return PHOS_DNN_SUCCESS;
	if (!mine)
		return PHOS_DNN_BAD_PARAM;
	mine->t = *t;
	return PHOS_DNN_SUCCESS;
}

PHOS_EXPORT cudnnStatus_t cudnnGetRNNWeightParams(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, int32_t layer,
						  size_t weights_bytes, const void *weights, int32_t lin,
						  cudnnTensorDescriptor_t md, void **m, cudnnTensorDescriptor_t bd,
						  void **b)
{
	struct phos_reply_dnn_rnn ret;
	struct phos_dnn_rnn r;
	struct wp_key key;
	bool found = false;
	cudnnHandle_t h;
	cudnnStatus_t s = begin(handle, desc, PHOS_DNN_RNN_WEIGHT_PARAMS, &r, &h);

	if (!s && (!weights || layer < 0 || lin < 0 || lin > 8))
		s = PHOS_DNN_BAD_PARAM;
	if (s)
		return s;
	r.layer = layer;
	r.lin = lin;
	r.weights = (uint64_t)(uintptr_t)weights;
	r.weights_bytes = weights_bytes;
	key = wp_key_of(&r);
	pthread_mutex_lock(&wp_lock);
	for (unsigned i = 0; i < WP_CACHE && !found; i++)
		if (wp_cache[i].used && memcmp(&wp_cache[i].key, &key, sizeof(key)) == 0) {
			ret = wp_cache[i].ret;
			found = true;
		}
	pthread_mutex_unlock(&wp_lock);
	if (!found) {
		s = ask(h, &r, NULL, 0, &ret);
		if (s)
			return s;
		if (ret.m_off < -1 || ret.b_off < -1 || (ret.m_off >= 0 && (uint64_t)ret.m_off >= weights_bytes) ||
		    (ret.b_off >= 0 && (uint64_t)ret.b_off >= weights_bytes))
			return PHOS_DNN_INTERNAL_ERROR;
		pthread_mutex_lock(&wp_lock);
		wp_cache[wp_next] = (struct wp_entry){ .used = true, .key = key, .ret = ret };
		wp_next = (wp_next + 1) % WP_CACHE;
		pthread_mutex_unlock(&wp_lock);
	}
	if (ret.m_off >= 0)
		s = fill_tensor(md, &ret.m);
	if (!s && ret.b_off >= 0)
		s = fill_tensor(bd, &ret.b);
	if (s)
		return s;
	if (m)
		*m = ret.m_off >= 0 ? (uint8_t *)(uintptr_t)weights + ret.m_off : NULL;
	if (b)
		*b = ret.b_off >= 0 ? (uint8_t *)(uintptr_t)weights + ret.b_off : NULL;
	return PHOS_DNN_SUCCESS;
}

/* --- passes --- */

static cudnnStatus_t data_in(cudnnRNNDataDescriptor_t desc, struct phos_dnn_rnn_data *out, const int32_t **seq)
{
	cudnnRNNDataDescriptor_t d = data_of(desc);

	if (!d || !d->set)
		return PHOS_DNN_BAD_PARAM;
	*out = d->d;
	*seq = d->seq;
	return PHOS_DNN_SUCCESS;
}

/* A state tensor's values (NULL: none in this call). */
static cudnnStatus_t state_in(cudnnTensorDescriptor_t desc, struct phos_dnn_tensor *out)
{
	cudnnTensorDescriptor_t t = dnn_tensor_of(desc);

	if (!desc)
		return PHOS_DNN_SUCCESS;
	if (!t || !t->t.nb)
		return PHOS_DNN_BAD_PARAM;
	*out = t->t;
	return PHOS_DNN_SUCCESS;
}

/* Posts a pass with x's and y's descriptors and h's and c's. */
static cudnnStatus_t pass(cudnnHandle_t h, struct phos_dnn_rnn *r, cudnnRNNDataDescriptor_t xd,
			  cudnnRNNDataDescriptor_t yd, cudnnTensorDescriptor_t hd, cudnnTensorDescriptor_t cd)
{
	const int32_t *xs = NULL, *ys = NULL;
	int32_t *seqs;
	cudnnStatus_t s = data_in(xd, &r->x, &xs);
	size_t n;

	if (!s)
		s = data_in(yd, &r->y, &ys);
	if (!s)
		s = state_in(hd, &r->h);
	if (!s)
		s = state_in(cd, &r->c);
	if (!s && r->x.batch != r->y.batch)
		s = PHOS_DNN_BAD_PARAM;
	if (s)
		return s;
	n = (size_t)r->x.batch * sizeof(int32_t);
	seqs = malloc(2 * n);
	if (!seqs)
		return PHOS_DNN_INTERNAL_ERROR;
	memcpy(seqs, xs, n);
	memcpy((uint8_t *)seqs + n, ys, n);
	s = dnn_post(h, PHOS_OP_DNN_RNN, r, sizeof(*r), seqs, 2 * n, offsetof(struct phos_dnn_rnn, stream));
	free(seqs);
	return s;
}

#define U(p) ((uint64_t)(uintptr_t)(p))

PHOS_EXPORT cudnnStatus_t cudnnRNNForward(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, int fwd_mode,
					  const int32_t dev_seq[], cudnnRNNDataDescriptor_t xd, const void *x,
					  cudnnRNNDataDescriptor_t yd, void *y, cudnnTensorDescriptor_t hd,
					  const void *hx, void *hy, cudnnTensorDescriptor_t cd, const void *cx,
					  void *cy, size_t weights_bytes, const void *weights, size_t work_bytes,
					  void *work, size_t reserve_bytes, void *reserve)
{
	struct phos_dnn_rnn r;
	cudnnHandle_t h;
	cudnnStatus_t s = begin(handle, desc, PHOS_DNN_RNN_FORWARD, &r, &h);

	if (s)
		return s;
	if (fwd_mode < 0 || fwd_mode > 1)
		return PHOS_DNN_BAD_PARAM;
	r.fwd_mode = fwd_mode;
	r.dev_seq = U(dev_seq);
	r.px = U(x), r.py = U(y), r.hx = U(hx), r.hy = U(hy), r.cx = U(cx), r.cy = U(cy);
	r.weights = U(weights), r.weights_bytes = weights_bytes;
	r.work = U(work), r.work_bytes = work ? work_bytes : 0;
	r.reserve = U(reserve), r.reserve_bytes = reserve ? reserve_bytes : 0;
	return pass(h, &r, xd, yd, hd, cd);
}

PHOS_EXPORT cudnnStatus_t cudnnRNNBackwardData_v8(cudnnHandle_t handle, cudnnRNNDescriptor_t desc,
						  const int32_t dev_seq[], cudnnRNNDataDescriptor_t yd, const void *y,
						  const void *dy, cudnnRNNDataDescriptor_t xd, void *dx,
						  cudnnTensorDescriptor_t hd, const void *hx, const void *dhy, void *dhx,
						  cudnnTensorDescriptor_t cd, const void *cx, const void *dcy, void *dcx,
						  size_t weights_bytes, const void *weights, size_t work_bytes, void *work,
						  size_t reserve_bytes, void *reserve)
{
	struct phos_dnn_rnn r;
	cudnnHandle_t h;
	cudnnStatus_t s = begin(handle, desc, PHOS_DNN_RNN_BACKWARD_DATA, &r, &h);

	if (s)
		return s;
	r.dev_seq = U(dev_seq);
	r.py = U(y), r.pdy = U(dy), r.pdx = U(dx);
	r.hx = U(hx), r.dhy = U(dhy), r.dhx = U(dhx), r.cx = U(cx), r.dcy = U(dcy), r.dcx = U(dcx);
	r.weights = U(weights), r.weights_bytes = weights_bytes;
	r.work = U(work), r.work_bytes = work ? work_bytes : 0;
	r.reserve = U(reserve), r.reserve_bytes = reserve ? reserve_bytes : 0;
	return pass(h, &r, xd, yd, hd, cd);
}

PHOS_EXPORT cudnnStatus_t cudnnRNNBackwardWeights_v8(cudnnHandle_t handle, cudnnRNNDescriptor_t desc,
						     int wgrad_mode, const int32_t dev_seq[],
						     cudnnRNNDataDescriptor_t xd, const void *x,
						     cudnnTensorDescriptor_t hd, const void *hx,
						     cudnnRNNDataDescriptor_t yd, const void *y, size_t weights_bytes,
						     void *dweights, size_t work_bytes, void *work,
						     size_t reserve_bytes, void *reserve)
{
	struct phos_dnn_rnn r;
	cudnnHandle_t h;
	cudnnStatus_t s = begin(handle, desc, PHOS_DNN_RNN_BACKWARD_WEIGHTS, &r, &h);

	if (s)
		return s;
	if (wgrad_mode < 0 || wgrad_mode > 1)
		return PHOS_DNN_BAD_PARAM;
	r.wgrad_mode = wgrad_mode;
	r.dev_seq = U(dev_seq);
	r.px = U(x), r.hx = U(hx), r.py = U(y);
	r.dweights = U(dweights), r.weights_bytes = weights_bytes;
	r.work = U(work), r.work_bytes = work ? work_bytes : 0;
	r.reserve = U(reserve), r.reserve_bytes = reserve ? reserve_bytes : 0;
	return pass(h, &r, xd, yd, hd, NULL);
}
