/* SPDX-License-Identifier: MIT */
/*
 * cuDNN for the sim device (dnn_dev.h): a host reference, in double.
 *
 * A backend descriptor is its type and the attributes set on it, kept as
 * set; descriptors named by others are counted references, so that the
 * caller may destroy an operation once its graph is finalized, as cuDNN
 * allows. Finalize checks that the attributes each type needs are there.
 * One engine (global index 0) runs one kind of graph: a single convolution
 * forward of float, double, half or bfloat16 tensors (any strides, 1 to 3
 * spatial dimensions, groups, padding, stride, dilation, convolution or
 * cross-correlation, alpha and beta), y = alpha conv(x, w) + beta y. A plan
 * of any other graph is CUDNN_STATUS_NOT_SUPPORTED at its finalize, as
 * cuDNN answers for an engine that does not support a graph. Heuristics
 * give that engine (one configuration), which needs no workspace.
 *
 * Batch normalization (bnOps BN, spatial or per-activation): inference,
 * training (batch mean and biased variance; running variance updated with
 * the unbiased one, as cuDNN does) and backward, without workspace or
 * reserve space. RNNs are in device_sim_rnn.c, CTC losses in device_sim_ctc.c.
 */
#include "device_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dnn_dev.h"

#define SIM_HANDLE_MAGIC 0x64736e68u

struct sim_handle {
	uint32_t magic;
};

struct sim_attr {
	int name, type;
	int64_t count;
	void *elems;   /* count x the type's size; descriptors: struct sim_desc * */
};

struct sim_desc {
	int type;
	int refs;          /* the caller's, and one per attribute naming it */
	bool finalized;
	int nattrs;
	struct sim_attr *attrs;
};

static int ok(int *st, int s)
{
	*st = s;
	return 0;
}

static void desc_unref(struct sim_desc *d);

static void attr_free(struct sim_attr *a)
{
	if (a->type == PHOS_DNN_TYPE_BACKEND_DESCRIPTOR)
		for (int64_t i = 0; i < a->count; i++)
			desc_unref(((struct sim_desc **)a->elems)[i]);
	free(a->elems);
}

static void desc_unref(struct sim_desc *d)
{
	if (!d || --d->refs > 0)
		return;
	for (int i = 0; i < d->nattrs; i++)
		attr_free(&d->attrs[i]);
	free(d->attrs);
	free(d);
}

static struct sim_attr *attr_find(const struct sim_desc *d, int name)
{
	for (int i = 0; i < d->nattrs; i++)
		if (d->attrs[i].name == name)
			return &d->attrs[i];
	return NULL;
}

/* Stores (replacing) an attribute; descriptors in it gain a reference. */
static int attr_store(struct sim_desc *d, int name, int type, int64_t count, const void *elems)
{
	size_t es = phos_dnn_attr_type_size(type);
	struct sim_attr *a = attr_find(d, name), n = { name, type, count, NULL };

	if (count > 0 && !(n.elems = malloc((size_t)count * es)))
		return PHOS_DNN_INTERNAL_ERROR;
	if (count > 0)
		memcpy(n.elems, elems, (size_t)count * es);
	if (type == PHOS_DNN_TYPE_BACKEND_DESCRIPTOR)
		for (int64_t i = 0; i < count; i++)
			if (((struct sim_desc **)n.elems)[i])
				((struct sim_desc **)n.elems)[i]->refs++;
	if (!a) {
		struct sim_attr *grown = realloc(d->attrs, (size_t)(d->nattrs + 1) * sizeof(*grown));

		if (!grown) {
			attr_free(&n);
			return PHOS_DNN_INTERNAL_ERROR;
		}
		d->attrs = grown;
		a = &d->attrs[d->nattrs++];
	} else {
		attr_free(a);
	}
	*a = n;
	return 0;
}

/* The first element of an attribute as an integer (INT64, INT32 or an
 * enumeration), or def. */
static int64_t attr_int(const struct sim_desc *d, int name, int64_t def)
{
	const struct sim_attr *a = attr_find(d, name);

	if (!a || a->count < 1)
		return def;
	if (a->type == PHOS_DNN_TYPE_INT64)
		return ((const int64_t *)a->elems)[0];
	if (a->type == PHOS_DNN_TYPE_BOOLEAN)
		return ((const uint8_t *)a->elems)[0];
	return ((const int32_t *)a->elems)[0];
}

static struct sim_desc *attr_desc(const struct sim_desc *d, int name, int64_t i)
{
	const struct sim_attr *a = attr_find(d, name);

	return a && a->type == PHOS_DNN_TYPE_BACKEND_DESCRIPTOR && i < a->count ? ((struct sim_desc **)a->elems)[i]
										  : NULL;
}

static double attr_real(const struct sim_desc *d, int name, double def)
{
	const struct sim_attr *a = attr_find(d, name);

	if (!a || a->count < 1)
		return def;
	return a->type == PHOS_DNN_TYPE_DOUBLE ? ((const double *)a->elems)[0]
	       : a->type == PHOS_DNN_TYPE_FLOAT ? ((const float *)a->elems)[0] : def;
}

/* --- the graph the one engine runs --- */

struct sim_tensor {
	int type;   /* cudaDataType for phos_sim_elem_get */
	int nb;
	int64_t uid, dims[PHOS_DNN_DIM_MAX], strides[PHOS_DNN_DIM_MAX];
};

static int tensor_of(const struct sim_desc *d, struct sim_tensor *t)
{
	const struct sim_attr *dims = d ? attr_find(d, PHOS_DNN_ATTR_TENSOR_DIMENSIONS) : NULL;
	const struct sim_attr *str = d ? attr_find(d, PHOS_DNN_ATTR_TENSOR_STRIDES) : NULL;

	if (!d || d->type != PHOS_DNN_TENSOR_DESCRIPTOR || !d->finalized || !dims || !str)
		return -1;
	t->type = phos_sim_dnn_elem_type((int)attr_int(d, PHOS_DNN_ATTR_TENSOR_DATA_TYPE, -1));
	t->nb = (int)dims->count;
	t->uid = attr_int(d, PHOS_DNN_ATTR_TENSOR_UNIQUE_ID, -1);
	if (t->type < 0 || dims->type != PHOS_DNN_TYPE_INT64 || str->type != PHOS_DNN_TYPE_INT64)
		return -1;
	memcpy(t->dims, dims->elems, (size_t)t->nb * sizeof(int64_t));
	memcpy(t->strides, str->elems, (size_t)t->nb * sizeof(int64_t));
	return 0;
}

struct sim_conv {
	struct sim_tensor x, w, y;
	int spatial, mode;   /* mode 0: convolution (flipped filter), 1: cross-correlation */
	int64_t pre[3], stride[3], dil[3];
	double alpha, beta;
};

static int ints_of(const struct sim_desc *c, int name, int n, int64_t *out)
{
	const struct sim_attr *a = attr_find(c, name);

	if (!a || a->count != n || a->type != PHOS_DNN_TYPE_INT64)
		return -1;
	memcpy(out, a->elems, (size_t)n * sizeof(int64_t));
	return 0;
}

/* The operation graph of a plan, if it is what the engine runs. */
static int plan_conv(const struct sim_desc *plan, struct sim_conv *cv)
{
	const struct sim_desc *cfg = attr_desc(plan, PHOS_DNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, 0);
	const struct sim_desc *eng = cfg ? attr_desc(cfg, PHOS_DNN_ATTR_ENGINECFG_ENGINE, 0) : NULL;
	const struct sim_desc *g = eng ? attr_desc(eng, PHOS_DNN_ATTR_ENGINE_OPERATION_GRAPH, 0) : NULL;
	const struct sim_attr *ops = g ? attr_find(g, PHOS_DNN_ATTR_OPERATIONGRAPH_OPS) : NULL;
	const struct sim_desc *op, *c;

	if (!ops || ops->count != 1)
		return -1;
	op = ((struct sim_desc **)ops->elems)[0];
	if (!op || op->type != PHOS_DNN_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR)
		return -1;
	c = attr_desc(op, PHOS_DNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, 0);
	if (!c || tensor_of(attr_desc(op, PHOS_DNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, 0), &cv->x) < 0 ||
	    tensor_of(attr_desc(op, PHOS_DNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, 0), &cv->w) < 0 ||
	    tensor_of(attr_desc(op, PHOS_DNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, 0), &cv->y) < 0)
		return -1;
	cv->spatial = (int)attr_int(c, PHOS_DNN_ATTR_CONVOLUTION_SPATIAL_DIMS, 0);
	cv->mode = (int)attr_int(c, PHOS_DNN_ATTR_CONVOLUTION_CONV_MODE, -1);
	cv->alpha = attr_real(op, PHOS_DNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, NAN);
	cv->beta = attr_real(op, PHOS_DNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, NAN);
	if (cv->spatial < 1 || cv->spatial > 3 || (cv->mode != 0 && cv->mode != 1) || isnan(cv->alpha) ||
	    isnan(cv->beta) || cv->x.nb != cv->spatial + 2 || cv->w.nb != cv->x.nb || cv->y.nb != cv->x.nb ||
	    ints_of(c, PHOS_DNN_ATTR_CONVOLUTION_PRE_PADDINGS, cv->spatial, cv->pre) < 0 ||
	    ints_of(c, PHOS_DNN_ATTR_CONVOLUTION_FILTER_STRIDES, cv->spatial, cv->stride) < 0 ||
	    ints_of(c, PHOS_DNN_ATTR_CONVOLUTION_DILATIONS, cv->spatial, cv->dil) < 0)
		return -1;
	/* groups: x's channels a whole multiple of w's, y's channels of the groups */
	if (cv->w.dims[1] < 1 || cv->x.dims[1] % cv->w.dims[1] || cv->y.dims[0] != cv->x.dims[0] ||
	    cv->y.dims[1] != cv->w.dims[0] || cv->w.dims[0] % (cv->x.dims[1] / cv->w.dims[1]))
		return -1;
	for (int i = 0; i < cv->spatial; i++)
		if (cv->stride[i] < 1 || cv->dil[i] < 1)
			return -1;
	return 0;
}

static void *uid_ptr(int n, const int64_t *uids, void *const *ptrs, int64_t uid)
{
	for (int i = 0; i < n; i++)
		if (uids[i] == uid)
			return ptrs[i];
	return NULL;
}

static void conv_run(const struct sim_conv *cv, const void *x, const void *w, void *y)
{
	int sd = cv->spatial;
	int64_t groups = cv->x.dims[1] / cv->w.dims[1], kpg = cv->w.dims[0] / groups, cpg = cv->w.dims[1];
	int64_t o[3] = { 0 }, f[3], total = 1;

	for (int i = 0; i < sd; i++)
		total *= cv->y.dims[2 + i];
	for (int64_t n = 0; n < cv->y.dims[0]; n++)
		for (int64_t k = 0; k < cv->y.dims[1]; k++)
			for (int64_t idx = 0; idx < total; idx++) {
				int64_t rest = idx, yoff = n * cv->y.strides[0] + k * cv->y.strides[1], ftotal = 1;
				double acc = 0;

				for (int i = sd - 1; i >= 0; i--) {
					o[i] = rest % cv->y.dims[2 + i];
					rest /= cv->y.dims[2 + i];
					yoff += o[i] * cv->y.strides[2 + i];
				}
				for (int i = 0; i < sd; i++)
					ftotal *= cv->w.dims[2 + i];
				for (int64_t c = 0; c < cpg; c++)
					for (int64_t fi = 0; fi < ftotal; fi++) {
						int64_t fr = fi, xoff = n * cv->x.strides[0] +
									 ((k / kpg) * cpg + c) * cv->x.strides[1];
						int64_t woff = k * cv->w.strides[0] + c * cv->w.strides[1];
						bool inside = true;

						for (int i = sd - 1; i >= 0; i--) {
							f[i] = fr % cv->w.dims[2 + i];
							fr /= cv->w.dims[2 + i];
						}
						for (int i = 0; i < sd; i++) {
							int64_t fk = cv->mode == 0 ? cv->w.dims[2 + i] - 1 - f[i] : f[i];
							int64_t xi = o[i] * cv->stride[i] - cv->pre[i] + f[i] * cv->dil[i];

							if (xi < 0 || xi >= cv->x.dims[2 + i])
								inside = false;
							xoff += xi * cv->x.strides[2 + i];
							woff += fk * cv->w.strides[2 + i];
						}
						if (inside)
							acc += phos_sim_elem_get(x, cv->x.type, xoff) *
							       phos_sim_elem_get(w, cv->w.type, woff);
					}
				double old = cv->beta != 0 ? phos_sim_elem_get(y, cv->y.type, yoff) : 0;

				phos_sim_elem_put(y, cv->y.type, yoff, cv->alpha * acc + cv->beta * old);
			}
}

/* --- the backend interface --- */

static int sim_dnn_version(struct phos_device *dev, struct phos_reply_dnn_version *ret, int *st)
{
	(void)dev;
	ret->version = 90000;   /* the cuDNN 9.0 API */
	ret->max_device_version = 1200;
	return ok(st, 0);
}

static int sim_dnn_handle_create(struct phos_device *dev, void **ret, int *st)
{
	struct sim_handle *h = calloc(1, sizeof(*h));

	(void)dev;
	if (!h)
		return ok(st, PHOS_DNN_INTERNAL_ERROR);
	h->magic = SIM_HANDLE_MAGIC;
	*ret = h;
	return ok(st, 0);
}

static void sim_dnn_handle_destroy(struct phos_device *dev, void *h)
{
	(void)dev;
	free(h);
}

static int sim_dnn_desc_create(struct phos_device *dev, int type, void **ret, int *st)
{
	struct sim_desc *d = calloc(1, sizeof(*d));

	(void)dev;
	if (!d)
		return ok(st, PHOS_DNN_INTERNAL_ERROR);
	d->type = type;
	d->refs = 1;
	*ret = d;
	return ok(st, 0);
}

static void sim_dnn_desc_destroy(struct phos_device *dev, void *d)
{
	(void)dev;
	desc_unref(d);
}

static int sim_dnn_set(struct phos_device *dev, void *obj, int name, int type, int64_t count, const void *elems,
		       int *st)
{
	struct sim_desc *d = obj;

	(void)dev;
	if (d->finalized)
		return ok(st, PHOS_DNN_BAD_PARAM);
	if (type == PHOS_DNN_TYPE_BACKEND_DESCRIPTOR)
		for (int64_t i = 0; i < count; i++)
			if (!((struct sim_desc *const *)elems)[i])
				return ok(st, PHOS_DNN_BAD_PARAM_NULL_POINTER);
	return ok(st, attr_store(d, name, type, count, elems));
}

/* Fills cfg with the engine's one configuration for graph g. */
static int fill_cfg(struct sim_desc *cfg, struct sim_desc *g)
{
	struct sim_desc *eng;
	int64_t zero = 0;
	int s;

	if (cfg->type != PHOS_DNN_ENGINECFG_DESCRIPTOR)
		return PHOS_DNN_BAD_PARAM_DESCRIPTOR_TYPE;
	if (!(eng = calloc(1, sizeof(*eng))))
		return PHOS_DNN_INTERNAL_ERROR;
	eng->type = PHOS_DNN_ENGINE_DESCRIPTOR;
	eng->refs = 1;
	s = attr_store(eng, PHOS_DNN_ATTR_ENGINE_OPERATION_GRAPH, PHOS_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
	if (!s)
		s = attr_store(eng, PHOS_DNN_ATTR_ENGINE_GLOBAL_INDEX, PHOS_DNN_TYPE_INT64, 1, &zero);
	eng->finalized = true;
	if (!s)
		s = attr_store(cfg, PHOS_DNN_ATTR_ENGINECFG_ENGINE, PHOS_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &eng);
	desc_unref(eng);   /* (the configuration holds it) */
	cfg->finalized = s == 0;
	return s;
}

/* Copies src's attributes into dst (a caller's descriptor of the same type). */
static int fill_copy(struct sim_desc *dst, const struct sim_desc *src)
{
	int s = 0;

	if (dst->type != src->type)
		return PHOS_DNN_BAD_PARAM_DESCRIPTOR_TYPE;
	for (int i = 0; i < src->nattrs && !s; i++)
		s = attr_store(dst, src->attrs[i].name, src->attrs[i].type, src->attrs[i].count, src->attrs[i].elems);
	dst->finalized = s == 0;
	return s;
}

static int sim_dnn_get(struct phos_device *dev, void *obj, int name, int type, int64_t requested, int64_t *ret_count,
		       void *elems, int *st)
{
	struct sim_desc *d = obj;
	const struct sim_attr *a;
	int64_t zero = 0;

	(void)dev;
	if (!d->finalized)
		return ok(st, PHOS_DNN_BAD_PARAM_NOT_FINALIZED);
	if ((d->type == PHOS_DNN_ENGINEHEUR_DESCRIPTOR && name == PHOS_DNN_ATTR_ENGINEHEUR_RESULTS) ||
	    (d->type == PHOS_DNN_ENGINECFG_DESCRIPTOR && name == PHOS_DNN_ATTR_ENGINECFG_ENGINE)) {
		if (type != PHOS_DNN_TYPE_BACKEND_DESCRIPTOR)
			return ok(st, PHOS_DNN_BAD_PARAM_ATTRIBUTE_TYPE);
		*ret_count = 1;
		if (requested < 1)
			return ok(st, 0);
		if (d->type == PHOS_DNN_ENGINEHEUR_DESCRIPTOR)
			return ok(st, fill_cfg(((struct sim_desc **)elems)[0],
					       attr_desc(d, PHOS_DNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, 0)));
		return ok(st, fill_copy(((struct sim_desc **)elems)[0], attr_desc(d, PHOS_DNN_ATTR_ENGINECFG_ENGINE, 0)));
	}
	if ((d->type == PHOS_DNN_EXECUTION_PLAN_DESCRIPTOR && name == PHOS_DNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) ||
	    (d->type == PHOS_DNN_ENGINECFG_DESCRIPTOR && name == PHOS_DNN_ATTR_ENGINECFG_WORKSPACE_SIZE)) {
		if (type != PHOS_DNN_TYPE_INT64)
			return ok(st, PHOS_DNN_BAD_PARAM_ATTRIBUTE_TYPE);
		*ret_count = 1;
		if (requested >= 1)
			memcpy(elems, &zero, sizeof(zero));
		return ok(st, 0);
	}
	a = attr_find(d, name);
	if (!a)
		return ok(st, PHOS_DNN_NOT_SUPPORTED);
	if (a->type != type)
		return ok(st, PHOS_DNN_BAD_PARAM_ATTRIBUTE_TYPE);
	*ret_count = a->count;
	if (type == PHOS_DNN_TYPE_BACKEND_DESCRIPTOR) {
		for (int64_t i = 0; i < requested && i < a->count; i++) {
			int s = fill_copy(((struct sim_desc **)elems)[i], ((struct sim_desc **)a->elems)[i]);

			if (s)
				return ok(st, s);
		}
		return ok(st, 0);
	}
	memcpy(elems, a->elems, (size_t)(requested < a->count ? requested : a->count) * phos_dnn_attr_type_size(type));
	return ok(st, 0);
}

/* The attributes a type needs before its finalize. */
static const struct {
	int type;
	int names[6];
} needed[] = {
	{ PHOS_DNN_TENSOR_DESCRIPTOR, { PHOS_DNN_ATTR_TENSOR_DATA_TYPE, PHOS_DNN_ATTR_TENSOR_DIMENSIONS,
					PHOS_DNN_ATTR_TENSOR_STRIDES, PHOS_DNN_ATTR_TENSOR_UNIQUE_ID,
					PHOS_DNN_ATTR_TENSOR_BYTE_ALIGNMENT } },
	{ PHOS_DNN_CONVOLUTION_DESCRIPTOR, { PHOS_DNN_ATTR_CONVOLUTION_SPATIAL_DIMS, PHOS_DNN_ATTR_CONVOLUTION_CONV_MODE,
					     PHOS_DNN_ATTR_CONVOLUTION_DILATIONS, PHOS_DNN_ATTR_CONVOLUTION_FILTER_STRIDES,
					     PHOS_DNN_ATTR_CONVOLUTION_PRE_PADDINGS,
					     PHOS_DNN_ATTR_CONVOLUTION_POST_PADDINGS } },
	{ PHOS_DNN_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
	  { PHOS_DNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, PHOS_DNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
	    PHOS_DNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, PHOS_DNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC } },
	{ PHOS_DNN_OPERATIONGRAPH_DESCRIPTOR, { PHOS_DNN_ATTR_OPERATIONGRAPH_OPS, PHOS_DNN_ATTR_OPERATIONGRAPH_HANDLE } },
	{ PHOS_DNN_ENGINEHEUR_DESCRIPTOR, { PHOS_DNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, PHOS_DNN_ATTR_ENGINEHEUR_MODE } },
	{ PHOS_DNN_ENGINE_DESCRIPTOR, { PHOS_DNN_ATTR_ENGINE_OPERATION_GRAPH, PHOS_DNN_ATTR_ENGINE_GLOBAL_INDEX } },
	{ PHOS_DNN_ENGINECFG_DESCRIPTOR, { PHOS_DNN_ATTR_ENGINECFG_ENGINE } },
	/* (no handle needed: cuDNN 9 takes the operation graph's, as PyTorch's plans show) */
	{ PHOS_DNN_EXECUTION_PLAN_DESCRIPTOR, { PHOS_DNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG } },
};

static int sim_dnn_finalize(struct phos_device *dev, void *obj, int *st)
{
	struct sim_desc *d = obj;

	(void)dev;
	if (d->finalized)
		return ok(st, PHOS_DNN_BAD_PARAM);
	for (size_t i = 0; i < sizeof(needed) / sizeof(needed[0]); i++) {
		if (needed[i].type != d->type)
			continue;
		for (int k = 0; k < 6 && needed[i].names[k]; k++)
			if (!attr_find(d, needed[i].names[k]))
				return ok(st, PHOS_DNN_BAD_PARAM);
	}
	if (d->type == PHOS_DNN_ENGINE_DESCRIPTOR && attr_int(d, PHOS_DNN_ATTR_ENGINE_GLOBAL_INDEX, -1) != 0)
		return ok(st, PHOS_DNN_NOT_SUPPORTED);
	if (d->type == PHOS_DNN_EXECUTION_PLAN_DESCRIPTOR) {
		struct sim_conv cv;

		if (plan_conv(d, &cv) < 0)
			return ok(st, PHOS_DNN_NOT_SUPPORTED);
	}
	d->finalized = true;
	return ok(st, 0);
}

static int sim_dnn_execute(struct phos_device *dev, void *h, void *stream, void *plan, int n, const int64_t *uids,
			   void *const *ptrs, void *workspace, int *st)
{
	struct sim_conv cv;
	void *x, *w, *y;

	(void)h;
	(void)workspace;
	if (phos_sim_stream_check(dev, stream) < 0)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (!((struct sim_desc *)plan)->finalized || plan_conv(plan, &cv) < 0)
		return ok(st, PHOS_DNN_BAD_PARAM_NOT_FINALIZED);
	x = uid_ptr(n, uids, ptrs, cv.x.uid);
	w = uid_ptr(n, uids, ptrs, cv.w.uid);
	y = uid_ptr(n, uids, ptrs, cv.y.uid);
	if (!x || !w || !y)
		return ok(st, PHOS_DNN_BAD_PARAM);
	conv_run(&cv, x, w, y);
	return ok(st, 0);
}

/* --- batch normalization --- */

/* cuDNN's host scaling factors: doubles for double data, else floats. */
static double scalar_of(bool dbl, const void *p)
{
	return dbl ? *(const double *)p : *(const float *)p;
}

/* dst[o] = alpha v + beta dst[o]; with beta 0, dst is not read (cuDNN's
 * rule: it may hold anything, NaN included). */
static void put_blend(void *dst, int t, int64_t o, double alpha, double v, double beta)
{
	phos_sim_elem_put(dst, t, o, alpha * v + (beta != 0 ? beta * phos_sim_elem_get(dst, t, o) : 0));
}

/* Element e of t (row-major index over its dims) → its offset, and the
 * offset of its parameters in bn (dims of 1 in bn broadcast). */
static void bn_offsets(const struct phos_dnn_tensor *t, const struct phos_dnn_tensor *bn, int64_t e, int64_t *off,
		       int64_t *poff)
{
	*off = *poff = 0;
	for (int i = t->nb - 1; i >= 0; i--) {
		int64_t c = e % t->dims[i];

		e /= t->dims[i];
		*off += c * t->strides[i];
		if (i > 0 && bn->dims[i] != 1)
			*poff += c * bn->strides[i];
	}
}

static int64_t elems_of(const struct phos_dnn_tensor *t)
{
	int64_t n = 1;

	for (int i = 0; i < t->nb; i++)
		n *= t->dims[i];
	return n;
}

/* One batch normalization, as sim_dnn_bn decoded it: the call, x's and the
 * parameters' element types, the scaling factors, x's element count, and per
 * parameter offset (span of them) the sums that become the mean and variance. */
struct bn_run {
	const struct phos_dnn_bn *b;
	const struct phos_dnn_tensor *x, *p;
	int xt, pt;
	double alpha, beta;
	int64_t n, span;
	double *sum, *sq, *cnt;
	const void *px, *scale, *bias;
	void *py;
};

/* y = scale (x - mean) / sqrt(var + eps) + bias, blended into y; the mean
 * and variance are the tensors given (inference), or with NULL the batch's
 * in sum and sq. */
static void bn_apply(const struct bn_run *r, const void *mean, const void *var)
{
	const struct phos_dnn_bn *b = r->b;
	int64_t off, poff, yo, yp;

	for (int64_t e = 0; e < r->n; e++) {
		double m, v, y;

		bn_offsets(r->x, r->p, e, &off, &poff);
		m = mean ? phos_sim_elem_get(mean, r->pt, poff) : r->sum[poff];
		v = var ? phos_sim_elem_get(var, r->pt, poff) : r->sq[poff];
		y = phos_sim_elem_get(r->scale, r->pt, poff) * (phos_sim_elem_get(r->px, r->xt, off) - m) /
			    sqrt(v + b->epsilon) +
		    phos_sim_elem_get(r->bias, r->pt, poff);
		bn_offsets(&b->y, r->p, e, &yo, &yp);
		put_blend(r->py, r->xt, yo, r->alpha, y, r->beta);
	}
}

/* The batch's mean (in sum) and variance (in sq) per parameter offset. */
static void bn_statistics(const struct bn_run *r)
{
	int64_t off, poff;

	for (int64_t e = 0; e < r->n; e++) {
		double v;

		bn_offsets(r->x, r->p, e, &off, &poff);
		v = phos_sim_elem_get(r->px, r->xt, off);
		r->sum[poff] += v;
		r->sq[poff] += v * v;
		r->cnt[poff] += 1;
	}
	for (int64_t k = 0; k < r->span; k++) {
		if (!r->cnt[k])
			continue;
		double mean = r->sum[k] / r->cnt[k], var = r->sq[k] / r->cnt[k] - mean * mean;

		r->sum[k] = mean;
		r->sq[k] = var < 0 ? 0 : var;
	}
}

/* Training: the running mean and variance (unbiased) move by factor, the
 * saved mean and inverse deviation are written, then y from the batch's. */
static void bn_training(const struct bn_run *r)
{
	const struct phos_dnn_bn *b = r->b;
	void *rmean = (void *)(uintptr_t)b->mean, *rvar = (void *)(uintptr_t)b->var;

	for (int64_t k = 0; k < r->span; k++) {
		if (!r->cnt[k])
			continue;
		double mean = r->sum[k], var = r->sq[k], inv = 1 / sqrt(var + b->epsilon);
		double unbiased = r->cnt[k] > 1 ? var * r->cnt[k] / (r->cnt[k] - 1) : var;

		if (rmean)
			phos_sim_elem_put(rmean, r->pt, k,
					  (1 - b->factor) * phos_sim_elem_get(rmean, r->pt, k) + b->factor * mean);
		if (rvar)
			phos_sim_elem_put(rvar, r->pt, k,
					  (1 - b->factor) * phos_sim_elem_get(rvar, r->pt, k) + b->factor * unbiased);
		if (b->save_mean)
			phos_sim_elem_put((void *)(uintptr_t)b->save_mean, r->pt, k, mean);
		if (b->save_inv_var)
			phos_sim_elem_put((void *)(uintptr_t)b->save_inv_var, r->pt, k, inv);
	}
	bn_apply(r, NULL, NULL);
}

/* Backward: dbias = sum dy, dscale = sum dy xhat, dx = scale inv (dy -
 * dbias/m - xhat dscale/m), with the saved statistics when the call gives
 * them. Returns a cuDNN status. */
static int bn_backward(const struct bn_run *r, double ap, double bp)
{
	const struct phos_dnn_bn *b = r->b;
	const void *pdy = (const void *)(uintptr_t)b->pdy;
	void *pdx = (void *)(uintptr_t)b->pdx;
	double *db = calloc((size_t)r->span, sizeof(double)), *ds = calloc((size_t)r->span, sizeof(double));
	int64_t off, poff, dyo, dyp, dxo, dxp;

	if (!db || !ds) {
		free(db);
		free(ds);
		return PHOS_DNN_INTERNAL_ERROR;
	}
	if (b->save_mean && b->save_inv_var)
		for (int64_t k = 0; k < r->span; k++)
			if (r->cnt[k]) {
				double inv = phos_sim_elem_get((void *)(uintptr_t)b->save_inv_var, r->pt, k);

				r->sum[k] = phos_sim_elem_get((void *)(uintptr_t)b->save_mean, r->pt, k);
				r->sq[k] = 1 / (inv * inv) - b->epsilon;
			}
	for (int64_t e = 0; e < r->n; e++) {
		bn_offsets(r->x, r->p, e, &off, &poff);
		bn_offsets(&b->dy, r->p, e, &dyo, &dyp);
		double dy = phos_sim_elem_get(pdy, r->xt, dyo);
		double xhat = (phos_sim_elem_get(r->px, r->xt, off) - r->sum[poff]) / sqrt(r->sq[poff] + b->epsilon);

		db[poff] += dy;
		ds[poff] += dy * xhat;
	}
	for (int64_t e = 0; e < r->n; e++) {
		bn_offsets(r->x, r->p, e, &off, &poff);
		bn_offsets(&b->dy, r->p, e, &dyo, &dyp);
		bn_offsets(&b->dx, r->p, e, &dxo, &dxp);
		double inv = 1 / sqrt(r->sq[poff] + b->epsilon), m = r->cnt[poff];
		double xhat = (phos_sim_elem_get(r->px, r->xt, off) - r->sum[poff]) * inv;
		double dx = phos_sim_elem_get(r->scale, r->pt, poff) * inv *
			    (phos_sim_elem_get(pdy, r->xt, dyo) - db[poff] / m - xhat * ds[poff] / m);

		put_blend(pdx, r->xt, dxo, r->alpha, dx, r->beta);
	}
	for (int64_t k = 0; k < r->span; k++) {
		if (!r->cnt[k])
			continue;
		put_blend((void *)(uintptr_t)b->dscale, r->pt, k, ap, ds[k], bp);
		put_blend((void *)(uintptr_t)b->dbias, r->pt, k, ap, db[k], bp);
	}
	free(db);
	free(ds);
	return 0;
}

static int sim_dnn_bn(struct phos_device *dev, void *h, void *stream, const struct phos_dnn_bn *b, int *st)
{
	const struct phos_dnn_tensor *x = &b->x, *p = &b->bn;
	bool dbl = x->type == PHOS_DNN_DATA_DOUBLE;
	struct bn_run r = {
		.b = b, .x = x, .p = p, .xt = phos_sim_dnn_elem_type(x->type), .pt = dbl ? 1 : 0,
		.n = elems_of(x), .span = 1, .px = (const void *)(uintptr_t)b->px,
		.scale = (const void *)(uintptr_t)b->scale, .bias = (const void *)(uintptr_t)b->bias,
		.py = (void *)(uintptr_t)b->py,
	};
	int status = 0;

	(void)h;
	if (phos_sim_stream_check(dev, stream) < 0)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (r.xt < 0 || p->nb != x->nb || p->dims[0] != 1 || phos_sim_dnn_elem_type(p->type) != r.pt)
		return ok(st, PHOS_DNN_NOT_SUPPORTED);
	r.alpha = scalar_of(dbl, b->alpha);
	r.beta = scalar_of(dbl, b->beta);
	if (b->kind == PHOS_DNN_BN_INFERENCE) {
		if (!b->mean || !b->var)
			return ok(st, PHOS_DNN_BAD_PARAM);
		bn_apply(&r, (const void *)(uintptr_t)b->mean, (const void *)(uintptr_t)b->var);
		return ok(st, 0);
	}
	/* the parameter offsets span at most the bn tensor; sums by offset */
	for (int i = 0; i < p->nb; i++)
		r.span += (p->dims[i] - 1) * p->strides[i];
	r.sum = calloc((size_t)r.span, sizeof(double));
	r.sq = calloc((size_t)r.span, sizeof(double));
	r.cnt = calloc((size_t)r.span, sizeof(double));
	if (!r.sum || !r.sq || !r.cnt) {
		status = PHOS_DNN_INTERNAL_ERROR;
		goto out;
	}
	/* batch statistics (training), or those saved by it (backward without them) */
	bn_statistics(&r);
	if (b->kind == PHOS_DNN_BN_TRAINING)
		bn_training(&r);
	else if (b->kind == PHOS_DNN_BN_BACKWARD)
		status = bn_backward(&r, scalar_of(dbl, b->alpha_param), scalar_of(dbl, b->beta_param));
	else
		status = PHOS_DNN_BAD_PARAM;
out:
	free(r.sum);
	free(r.sq);
	free(r.cnt);
	return ok(st, status);
}

static int sim_dnn_bn_size(struct phos_device *dev, void *h, const struct phos_dnn_bn *b, uint64_t *ret, int *st)
{
	(void)dev;
	(void)h;
	(void)b;
	*ret = 0;
	return ok(st, 0);
}

/* A spatial transformer's coordinates: output pixel i of n at -1 .. 1 (the
 * grid generator's), and grid value g as a position among n input pixels
 * (the sampler's; its derivative by g is (n - 1) / 2). */
static double tf_target(int64_t i, int64_t n)
{
	return n > 1 ? -1.0 + 2.0 * (double)i / (double)(n - 1) : 0;
}

static double tf_source(double g, int64_t n)
{
	return (g + 1) * (double)(n - 1) / 2;
}

/* Where the sampler reads for the grid entry at g (x at g, y at g + 1) in
 * an ih x iw input: the top-left pixel of the four and the weights of the
 * right and lower ones. */
struct tf_point {
	int64_t x0, y0;
	double wx, wy;
};

static struct tf_point tf_point_at(const void *grid, int t, int64_t g, int64_t ih, int64_t iw)
{
	double sx = tf_source(phos_sim_elem_get(grid, t, g), iw), sy = tf_source(phos_sim_elem_get(grid, t, g + 1), ih);
	double fx = floor(sx), fy = floor(sy);

	return (struct tf_point){ .x0 = (int64_t)fx, .y0 = (int64_t)fy, .wx = sx - fx, .wy = sy - fy };
}

/* The sampler's backward pass: dx gets each output's dy spread over the
 * four pixels it read, by their weights; dgrid the derivative of the
 * sampled value by the grid's coordinates, summed over the channels. */
static int sim_stf_sample_backward(const struct phos_dnn_stf *f, int t, int *st)
{
	int64_t n = f->dims[0], c = f->dims[1], oh = f->dims[2], ow = f->dims[3];
	const void *px = (const void *)(uintptr_t)f->px, *pdy = (const void *)(uintptr_t)f->pdy;
	const void *grid = (const void *)(uintptr_t)f->grid;
	void *pdx = (void *)(uintptr_t)f->pdx, *dgrid = (void *)(uintptr_t)f->dgrid;
	bool dbl = f->type == PHOS_DNN_DATA_DOUBLE;
	double alpha = scalar_of(dbl, f->alpha), beta = scalar_of(dbl, f->beta);
	double ag = scalar_of(dbl, f->alpha_dgrid), bg = scalar_of(dbl, f->beta_dgrid);
	int64_t ih = f->x.dims[2], iw = f->x.dims[3], xn = n * c * ih * iw;
	const int32_t *xs = f->x.strides, *ds = f->dx.strides, *ys = f->dy.strides;
	double *acc;

	if (f->x.nb != 4 || f->dx.nb != 4 || f->dy.nb != 4 || f->x.dims[0] != n || f->x.dims[1] != c ||
	    memcmp(f->dx.dims, f->x.dims, 4 * sizeof(int32_t)) || f->dy.dims[0] != n || f->dy.dims[1] != c ||
	    f->dy.dims[2] != oh || f->dy.dims[3] != ow || f->x.type != f->type)
		return ok(st, PHOS_DNN_BAD_PARAM);
	acc = calloc((size_t)xn, sizeof(double));
	if (!acc)
		return ok(st, PHOS_DNN_INTERNAL_ERROR);
	for (int64_t b = 0; b < n; b++)
		for (int64_t i = 0; i < oh; i++)
			for (int64_t j = 0; j < ow; j++) {
				int64_t g = ((b * oh + i) * ow + j) * 2;
				struct tf_point pt = tf_point_at(grid, t, g, ih, iw);
				double wx = pt.wx, wy = pt.wy, gx = 0, gy = 0;
				int64_t x0 = pt.x0, y0 = pt.y0;

				for (int64_t ch = 0; ch < c; ch++) {
					double d = phos_sim_elem_get(pdy, t, b * ys[0] + ch * ys[1] + i * ys[2] + j * ys[3]);

					for (int dy = 0; dy < 2; dy++)
						for (int dx = 0; dx < 2; dx++) {
							int64_t yy = y0 + dy, xx = x0 + dx;
							double v;

							if (yy < 0 || yy >= ih || xx < 0 || xx >= iw)
								continue;
							v = phos_sim_elem_get(px, t, b * xs[0] + ch * xs[1] + yy * xs[2] + xx * xs[3]);
							acc[((b * c + ch) * ih + yy) * iw + xx] +=
								d * (dy ? wy : 1 - wy) * (dx ? wx : 1 - wx);
							gx += d * v * (dy ? wy : 1 - wy) * (dx ? 1 : -1);
							gy += d * v * (dx ? wx : 1 - wx) * (dy ? 1 : -1);
						}
				}
				gx *= (double)(iw - 1) / 2;
				gy *= (double)(ih - 1) / 2;
				put_blend(dgrid, t, g, ag, gx, bg);
				put_blend(dgrid, t, g + 1, ag, gy, bg);
			}
	for (int64_t b = 0; b < n; b++)
		for (int64_t ch = 0; ch < c; ch++)
			for (int64_t yy = 0; yy < ih; yy++)
				for (int64_t xx = 0; xx < iw; xx++) {
					int64_t o = b * ds[0] + ch * ds[1] + yy * ds[2] + xx * ds[3];

					put_blend(pdx, t, o, alpha, acc[((b * c + ch) * ih + yy) * iw + xx], beta);
				}
	free(acc);
	return ok(st, PHOS_DNN_SUCCESS);
}

/* Spatial transformers: the grid of output pixel (i, j) is theta times
 * (x, y, 1), x and y from -1 at the first pixel to 1 at the last; the
 * sampler reads the input at ((gx + 1) (W - 1) / 2, (gy + 1) (H - 1) / 2),
 * bilinear, zero outside; the backward passes are their derivatives. */
static int sim_dnn_stf(struct phos_device *dev, void *h, void *stream, const struct phos_dnn_stf *f, int *st)
{
	int t = phos_sim_dnn_elem_type(f->type);
	int64_t n = f->dims[0], c = f->dims[1], oh = f->dims[2], ow = f->dims[3];

	(void)h;
	if (phos_sim_stream_check(dev, stream) < 0)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (t < 0)
		return ok(st, PHOS_DNN_NOT_SUPPORTED);
	if (f->kind == PHOS_DNN_STF_GRID) {
		const void *theta = (const void *)(uintptr_t)f->theta;
		void *grid = (void *)(uintptr_t)f->grid;

		for (int64_t b = 0; b < n; b++)
			for (int64_t i = 0; i < oh; i++)
				for (int64_t j = 0; j < ow; j++) {
					double xt = tf_target(j, ow);
					double yt = tf_target(i, oh);

					for (int k = 0; k < 2; k++)
						phos_sim_elem_put(grid, t, ((b * oh + i) * ow + j) * 2 + k,
								  phos_sim_elem_get(theta, t, b * 6 + k * 3) * xt +
									  phos_sim_elem_get(theta, t, b * 6 + k * 3 + 1) * yt +
									  phos_sim_elem_get(theta, t, b * 6 + k * 3 + 2));
				}
		return ok(st, PHOS_DNN_SUCCESS);
	}
	if (f->kind == PHOS_DNN_STF_GRID_BACKWARD) {
		const void *dgrid = (const void *)(uintptr_t)f->dgrid;
		void *dtheta = (void *)(uintptr_t)f->dtheta;

		for (int64_t b = 0; b < n; b++)
			for (int k = 0; k < 2; k++) {
				double d[3] = { 0, 0, 0 };

				for (int64_t i = 0; i < oh; i++)
					for (int64_t j = 0; j < ow; j++) {
						double xt = tf_target(j, ow);
						double yt = tf_target(i, oh);
						double g = phos_sim_elem_get(dgrid, t, ((b * oh + i) * ow + j) * 2 + k);

						d[0] += g * xt;
						d[1] += g * yt;
						d[2] += g;
					}
				for (int m = 0; m < 3; m++)
					phos_sim_elem_put(dtheta, t, b * 6 + k * 3 + m, d[m]);
			}
		return ok(st, PHOS_DNN_SUCCESS);
	}
	if (f->kind == PHOS_DNN_STF_SAMPLE_BACKWARD)
		return sim_stf_sample_backward(f, t, st);
	if (f->kind != PHOS_DNN_STF_SAMPLE)
		return ok(st, PHOS_DNN_BAD_PARAM);
	if (f->x.nb != 4 || f->y.nb != 4 || f->x.dims[0] != n || f->x.dims[1] != c || f->y.dims[0] != n ||
	    f->y.dims[1] != c || f->y.dims[2] != oh || f->y.dims[3] != ow || f->x.type != f->type)
		return ok(st, PHOS_DNN_BAD_PARAM);
	{
		const void *px = (const void *)(uintptr_t)f->px, *grid = (const void *)(uintptr_t)f->grid;
		void *py = (void *)(uintptr_t)f->py;
		bool dbl = f->type == PHOS_DNN_DATA_DOUBLE;
		double alpha = scalar_of(dbl, f->alpha), beta = scalar_of(dbl, f->beta);
		int64_t ih = f->x.dims[2], iw = f->x.dims[3];
		const int32_t *xs = f->x.strides, *ys = f->y.strides;

		for (int64_t b = 0; b < n; b++)
			for (int64_t i = 0; i < oh; i++)
				for (int64_t j = 0; j < ow; j++) {
					struct tf_point pt = tf_point_at(grid, t, ((b * oh + i) * ow + j) * 2, ih, iw);
					double wx = pt.wx, wy = pt.wy;
					int64_t x0 = pt.x0, y0 = pt.y0;

					for (int64_t ch = 0; ch < c; ch++) {
						double v = 0;

						for (int dy = 0; dy < 2; dy++)
							for (int dx = 0; dx < 2; dx++) {
								int64_t yy = y0 + dy, xx = x0 + dx;
								double w = (dy ? wy : 1 - wy) * (dx ? wx : 1 - wx);

								if (yy < 0 || yy >= ih || xx < 0 || xx >= iw || w == 0)
									continue;
								v += w * phos_sim_elem_get(px, t, b * xs[0] + ch * xs[1] +
												  yy * xs[2] + xx * xs[3]);
							}
						put_blend(py, t, b * ys[0] + ch * ys[1] + i * ys[2] + j * ys[3], alpha, v, beta);
					}
				}
	}
	return ok(st, PHOS_DNN_SUCCESS);
}

const struct phos_dnn_ops phos_dnn_sim = {
	.version = sim_dnn_version,
	.handle_create = sim_dnn_handle_create,
	.handle_destroy = sim_dnn_handle_destroy,
	.desc_create = sim_dnn_desc_create,
	.desc_destroy = sim_dnn_desc_destroy,
	.set = sim_dnn_set,
	.get = sim_dnn_get,
	.finalize = sim_dnn_finalize,
	.execute = sim_dnn_execute,
	.bn = sim_dnn_bn,
	.stf = sim_dnn_stf,
	.rnn = phos_sim_dnn_rnn,
	.ctc = phos_sim_dnn_ctc,
	.bn_size = sim_dnn_bn_size,
};
