/* SPDX-License-Identifier: MIT */
/*
 * cuDNN on the cuda device (dnn_dev.h): the real libcudnn.so.9, loaded at the
 * first cuDNN record (runtime/device/cuda/libfind.h: $PHOS_CUDNN_LIB, the loader path,
 * pip's nvidia-cudnn-cu13 in nvidia/cudnn/lib, the toolkit), so a program
 * that never calls cuDNN never loads it.
 *
 * Handles and backend descriptors are the library's own objects. An
 * execution builds the variant pack here (a host object of the library,
 * destroyed after the call); batch normalization builds its tensor
 * descriptors the same way, and an RNN call its dropout, RNN, data and
 * tensor descriptors. The device's context is current for every call.
 */
#include "device_cuda_syms.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "dnn_dev.h"
#include "libfind.h"
#include "log.h"

typedef int st_t;   /* cudnnStatus_t */
typedef void *obj_t;

#define DNN_SYMS(X)                                                                                         \
	X(GetVersion, "cudnnGetVersion", size_t, (void))                                                    \
	X(GetMaxDeviceVersion, "cudnnGetMaxDeviceVersion", size_t, (void))                                  \
	X(Create, "cudnnCreate", st_t, (obj_t *))                                                           \
	X(Destroy, "cudnnDestroy", st_t, (obj_t))                                                           \
	X(SetStream, "cudnnSetStream", st_t, (obj_t, void *))                                               \
	X(DescCreate, "cudnnBackendCreateDescriptor", st_t, (int, obj_t *))                                 \
	X(DescDestroy, "cudnnBackendDestroyDescriptor", st_t, (obj_t))                                      \
	X(Set, "cudnnBackendSetAttribute", st_t, (obj_t, int, int, int64_t, const void *))                  \
	X(Get, "cudnnBackendGetAttribute", st_t, (obj_t, int, int, int64_t, int64_t *, void *))             \
	X(Finalize, "cudnnBackendFinalize", st_t, (obj_t))                                                  \
	X(Execute, "cudnnBackendExecute", st_t, (obj_t, obj_t, obj_t))                                      \
	X(TensorCreate, "cudnnCreateTensorDescriptor", st_t, (obj_t *))                                     \
	X(TensorDestroy, "cudnnDestroyTensorDescriptor", st_t, (obj_t))                                     \
	X(TensorSet, "cudnnSetTensorNdDescriptor", st_t, (obj_t, int, int, const int *, const int *))       \
	X(BnInference, "cudnnBatchNormalizationForwardInference", st_t,                                     \
	  (obj_t, int, const void *, const void *, obj_t, const void *, obj_t, void *, obj_t, const void *, \
	   const void *, const void *, const void *, double))                                               \
	X(BnTraining, "cudnnBatchNormalizationForwardTrainingEx", st_t,                                     \
	  (obj_t, int, int, const void *, const void *, obj_t, const void *, obj_t, const void *, obj_t,    \
	   void *, obj_t, const void *, const void *, double, void *, void *, double, void *, void *,       \
	   obj_t, void *, size_t, void *, size_t))                                                          \
	X(BnBackward, "cudnnBatchNormalizationBackwardEx", st_t,                                            \
	  (obj_t, int, int, const void *, const void *, const void *, const void *, obj_t, const void *,    \
	   obj_t, const void *, obj_t, const void *, obj_t, void *, obj_t, void *, obj_t, const void *,     \
	   const void *, void *, void *, double, const void *, const void *, obj_t, void *, size_t, void *, \
	   size_t))                                                                                         \
	X(BnTrainingWs, "cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize", st_t,                   \
	  (obj_t, int, int, obj_t, obj_t, obj_t, obj_t, obj_t, size_t *))                                   \
	X(BnBackwardWs, "cudnnGetBatchNormalizationBackwardExWorkspaceSize", st_t,                          \
	  (obj_t, int, int, obj_t, obj_t, obj_t, obj_t, obj_t, obj_t, obj_t, size_t *))                     \
	X(BnReserve, "cudnnGetBatchNormalizationTrainingExReserveSpaceSize", st_t,                          \
	  (obj_t, int, int, obj_t, obj_t, size_t *))                                                        \
	X(StfCreate, "cudnnCreateSpatialTransformerDescriptor", st_t, (obj_t *))                            \
	X(StfDestroy, "cudnnDestroySpatialTransformerDescriptor", st_t, (obj_t))                            \
	X(StfSet, "cudnnSetSpatialTransformerNdDescriptor", st_t, (obj_t, int, int, int, const int *))      \
	X(StfGrid, "cudnnSpatialTfGridGeneratorForward", st_t, (obj_t, obj_t, const void *, void *))        \
	X(StfGridBackward, "cudnnSpatialTfGridGeneratorBackward", st_t, (obj_t, obj_t, const void *, void *)) \
	X(StfSample, "cudnnSpatialTfSamplerForward", st_t,                                                  \
	  (obj_t, obj_t, const void *, obj_t, const void *, const void *, const void *, obj_t, void *))     \
	X(StfSampleBackward, "cudnnSpatialTfSamplerBackward", st_t,                                         \
	  (obj_t, obj_t, const void *, obj_t, const void *, const void *, obj_t, void *, const void *,      \
	   obj_t, const void *, const void *, const void *, void *))                                        \
	X(TensorGet, "cudnnGetTensorNdDescriptor", st_t, (obj_t, int, int *, int *, int *, int *))          \
	X(DropoutCreate, "cudnnCreateDropoutDescriptor", st_t, (obj_t *))                                   \
	X(DropoutDestroy, "cudnnDestroyDropoutDescriptor", st_t, (obj_t))                                   \
	X(DropoutStatesSize, "cudnnDropoutGetStatesSize", st_t, (obj_t, size_t *))                          \
	X(DropoutSet, "cudnnSetDropoutDescriptor", st_t,                                                    \
	  (obj_t, obj_t, float, void *, size_t, unsigned long long))                                        \
	X(DropoutRestore, "cudnnRestoreDropoutDescriptor", st_t,                                            \
	  (obj_t, obj_t, float, void *, size_t, unsigned long long))                                        \
	X(RnnCreate, "cudnnCreateRNNDescriptor", st_t, (obj_t *))                                           \
	X(RnnDestroy, "cudnnDestroyRNNDescriptor", st_t, (obj_t))                                           \
	X(RnnSet, "cudnnSetRNNDescriptor_v8", st_t,                                                         \
	  (obj_t, int, int, int, int, int, int, int, int, int32_t, int32_t, int32_t, int32_t, obj_t,        \
	   uint32_t))                                                                                       \
	X(RnnDataCreate, "cudnnCreateRNNDataDescriptor", st_t, (obj_t *))                                   \
	X(RnnDataDestroy, "cudnnDestroyRNNDataDescriptor", st_t, (obj_t))                                   \
	X(RnnDataSet, "cudnnSetRNNDataDescriptor", st_t, (obj_t, int, int, int, int, int, const int *, void *)) \
	X(RnnWeightSpace, "cudnnGetRNNWeightSpaceSize", st_t, (obj_t, obj_t, size_t *))                     \
	X(RnnTempSpace, "cudnnGetRNNTempSpaceSizes", st_t, (obj_t, obj_t, int, obj_t, size_t *, size_t *))  \
	X(RnnWeightParams, "cudnnGetRNNWeightParams", st_t,                                                 \
	  (obj_t, obj_t, int32_t, size_t, const void *, int32_t, obj_t, void **, obj_t, void **))           \
	X(RnnForward, "cudnnRNNForward", st_t,                                                              \
	  (obj_t, obj_t, int, const int32_t *, obj_t, const void *, obj_t, void *, obj_t, const void *,     \
	   void *, obj_t, const void *, void *, size_t, const void *, size_t, void *, size_t, void *))      \
	X(RnnBackwardData, "cudnnRNNBackwardData_v8", st_t,                                                 \
	  (obj_t, obj_t, const int32_t *, obj_t, const void *, const void *, obj_t, void *, obj_t,          \
	   const void *, const void *, void *, obj_t, const void *, const void *, void *, size_t,           \
	   const void *, size_t, void *, size_t, void *))                                                   \
	X(RnnBackwardWeights, "cudnnRNNBackwardWeights_v8", st_t,                                           \
	  (obj_t, obj_t, int, const int32_t *, obj_t, const void *, obj_t, const void *, obj_t,             \
	   const void *, size_t, void *, size_t, void *, size_t, void *))                                   \
	X(CtcCreate, "cudnnCreateCTCLossDescriptor", st_t, (obj_t *))                                       \
	X(CtcDestroy, "cudnnDestroyCTCLossDescriptor", st_t, (obj_t))                                       \
	X(CtcSet, "cudnnSetCTCLossDescriptor", st_t, (obj_t, int))                                          \
	X(CtcSetEx, "cudnnSetCTCLossDescriptorEx", st_t, (obj_t, int, int, int))                            \
	X(CtcSet8, "cudnnSetCTCLossDescriptor_v8", st_t, (obj_t, int, int, int, int))                       \
	X(CtcSet9, "cudnnSetCTCLossDescriptor_v9", st_t, (obj_t, int, int, int, int))                       \
	X(CtcSize, "cudnnGetCTCLossWorkspaceSize", st_t,                                                    \
	  (obj_t, obj_t, obj_t, const int *, const int *, const int *, int, obj_t, size_t *))               \
	X(CtcSize8, "cudnnGetCTCLossWorkspaceSize_v8", st_t, (obj_t, int, obj_t, obj_t, obj_t, size_t *))   \
	X(Ctc, "cudnnCTCLoss", st_t,                                                                        \
	  (obj_t, obj_t, const void *, const int *, const int *, const int *, void *, obj_t, void *, int,   \
	   obj_t, void *, size_t))                                                                          \
	X(Ctc8, "cudnnCTCLoss_v8", st_t,                                                                    \
	  (obj_t, int, obj_t, obj_t, const void *, const int *, const int *, const int *, void *, obj_t,    \
	   void *, size_t, void *))

#define DNN_FIELD(field, export, ret, args) ret(*field) args;
static struct {
	DNN_SYMS(DNN_FIELD)
} dnn;
#undef DNN_FIELD

static pthread_once_t dnn_once = PTHREAD_ONCE_INIT;
static int dnn_status = -PHOS_CUDA_INITIALIZATION;

static void dnn_load(void)
{
	void *lib = phos_lib_find("cuDNN", "PHOS_CUDNN_LIB", "libcudnn.so.9", "cudnn");

	if (!lib) {
		phos_err("cuda: cannot load libcudnn.so.9 (PHOS_CUDNN_LIB, the loader path, pip's nvidia/cudnn/lib, "
			 "$CUDA_HOME/lib64 and /usr/local/cuda/lib64 tried)");
		return;
	}
#define DNN_LOAD(field, export, ret, args)                                      \
	{                                                                       \
		void *p_ = dlsym(lib, export);                                  \
		if (!p_) {                                                      \
			phos_err("cuda: libcudnn.so.9 lacks %s", export);       \
			return;                                                 \
		}                                                               \
		memcpy(&dnn.field, &p_, sizeof(p_));                            \
	}
	DNN_SYMS(DNN_LOAD)
#undef DNN_LOAD
	dnn_status = 0;
}

/* The library loaded and the device's context current: 0, or the error (and
 * *st NOT_INITIALIZED, as cudnnCreate answers without a usable library). */
static int ready(struct phos_device *dev, int *st)
{
	pthread_once(&dnn_once, dnn_load);
	*st = 0;
	if (dnn_status < 0) {
		*st = PHOS_DNN_NOT_INITIALIZED;
		return 0;
	}
	return cuda_current(cuda_dev(dev));
}

#define READY()                           \
	do {                              \
		int r_ = ready(dev, st);  \
		if (r_ < 0 || *st)        \
			return r_;        \
	} while (0)

static int cuda_dnn_version(struct phos_device *dev, struct phos_reply_dnn_version *ret, int *st)
{
	READY();
	ret->version = dnn.GetVersion();
	ret->max_device_version = dnn.GetMaxDeviceVersion();
	return 0;
}

static int cuda_dnn_handle_create(struct phos_device *dev, void **ret, int *st)
{
	READY();
	*st = dnn.Create(ret);
	return 0;
}

static void cuda_dnn_handle_destroy(struct phos_device *dev, void *h)
{
	int s;

	if (ready(dev, &s) == 0 && !s)
		dnn.Destroy(h);
}

static int cuda_dnn_desc_create(struct phos_device *dev, int type, void **ret, int *st)
{
	READY();
	*st = dnn.DescCreate(type, ret);
	return 0;
}

static void cuda_dnn_desc_destroy(struct phos_device *dev, void *d)
{
	int s;

	if (ready(dev, &s) == 0 && !s)
		dnn.DescDestroy(d);
}

static int cuda_dnn_set(struct phos_device *dev, void *d, int name, int type, int64_t count, const void *elems,
			int *st)
{
	READY();
	*st = dnn.Set(d, name, type, count, elems);
	return 0;
}

static int cuda_dnn_get(struct phos_device *dev, void *d, int name, int type, int64_t requested, int64_t *ret_count,
			void *elems, int *st)
{
	READY();
	*st = dnn.Get(d, name, type, requested, ret_count, requested ? elems : NULL);
	return 0;
}

static int cuda_dnn_finalize(struct phos_device *dev, void *d, int *st)
{
	READY();
	*st = dnn.Finalize(d);
	return 0;
}

static int cuda_dnn_execute(struct phos_device *dev, void *h, void *stream, void *plan, int n, const int64_t *uids,
			    void *const *ptrs, void *workspace, int *st)
{
	obj_t vp = NULL;

	READY();
	*st = dnn.SetStream(h, stream);
	if (!*st)
		*st = dnn.DescCreate(PHOS_DNN_VARIANT_PACK_DESCRIPTOR, &vp);
	if (!*st)
		*st = dnn.Set(vp, PHOS_DNN_ATTR_VARIANT_PACK_UNIQUE_IDS, PHOS_DNN_TYPE_INT64, n, uids);
	if (!*st)
		*st = dnn.Set(vp, PHOS_DNN_ATTR_VARIANT_PACK_DATA_POINTERS, PHOS_DNN_TYPE_VOID_PTR, n, ptrs);
	if (!*st)
		*st = dnn.Set(vp, PHOS_DNN_ATTR_VARIANT_PACK_WORKSPACE, PHOS_DNN_TYPE_VOID_PTR, 1, &workspace);
	if (!*st)
		*st = dnn.Finalize(vp);
	if (!*st)
		*st = dnn.Execute(h, plan, vp);
	if (vp)
		dnn.DescDestroy(vp);
	return 0;
}

/* The legacy tensor descriptors of a batch normalization. */
struct bn_descs {
	obj_t x, y, bn, dy, dx;
};

static void bn_free(struct bn_descs *t)
{
	obj_t *all[] = { &t->x, &t->y, &t->bn, &t->dy, &t->dx };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (*all[i])
			dnn.TensorDestroy(*all[i]);
}

static st_t tensor(const struct phos_dnn_tensor *t, obj_t *ret)
{
	st_t s;

	*ret = NULL;
	if (t->nb == 0)   /* not part of this call */
		return 0;
	if (t->nb < 0 || t->nb > PHOS_DNN_DIM_MAX)
		return PHOS_DNN_BAD_PARAM;
	s = dnn.TensorCreate(ret);
	return s ? s : dnn.TensorSet(*ret, t->type, t->nb, t->dims, t->strides);
}

static st_t bn_make(const struct phos_dnn_bn *b, struct bn_descs *t)
{
	st_t s = tensor(&b->x, &t->x);

	if (!s)
		s = tensor(&b->y, &t->y);
	if (!s)
		s = tensor(&b->bn, &t->bn);
	if (!s)
		s = tensor(&b->dy, &t->dy);
	if (!s)
		s = tensor(&b->dx, &t->dx);
	return s;
}

#define P(a) ((void *)(uintptr_t)(a))

static int cuda_dnn_bn(struct phos_device *dev, void *h, void *stream, const struct phos_dnn_bn *b, int *st)
{
	struct bn_descs t = { 0 };

	READY();
	*st = dnn.SetStream(h, stream);
	if (!*st)
		*st = bn_make(b, &t);
	if (*st)
		goto out;
	switch (b->kind) {
	case PHOS_DNN_BN_INFERENCE:
		*st = dnn.BnInference(h, b->mode, b->alpha, b->beta, t.x, P(b->px), t.y, P(b->py), t.bn, P(b->scale),
				      P(b->bias), P(b->mean), P(b->var), b->epsilon);
		break;
	case PHOS_DNN_BN_TRAINING:
		*st = dnn.BnTraining(h, b->mode, PHOS_DNN_BN_OPS_BN, b->alpha, b->beta, t.x, P(b->px), NULL, NULL, t.y,
				     P(b->py), t.bn, P(b->scale), P(b->bias), b->factor, P(b->mean), P(b->var),
				     b->epsilon, P(b->save_mean), P(b->save_inv_var), NULL, P(b->workspace),
				     b->workspace_bytes, P(b->reserve), b->reserve_bytes);
		break;
	case PHOS_DNN_BN_BACKWARD:
		*st = dnn.BnBackward(h, b->mode, PHOS_DNN_BN_OPS_BN, b->alpha, b->beta, b->alpha_param, b->beta_param,
				     t.x, P(b->px), NULL, NULL, t.dy, P(b->pdy), NULL, NULL, t.dx, P(b->pdx), t.bn,
				     P(b->scale), NULL, P(b->dscale), P(b->dbias), b->epsilon, P(b->save_mean),
				     P(b->save_inv_var), NULL, P(b->workspace), b->workspace_bytes, P(b->reserve),
				     b->reserve_bytes);
		break;
	default:
		*st = PHOS_DNN_BAD_PARAM;
	}
out:
	bn_free(&t);
	return 0;
}

static int cuda_dnn_bn_size(struct phos_device *dev, void *h, const struct phos_dnn_bn *b, uint64_t *ret, int *st)
{
	struct bn_descs t = { 0 };
	size_t n = 0;

	READY();
	*st = bn_make(b, &t);
	if (*st)
		goto out;
	switch (b->kind) {
	case PHOS_DNN_BN_TRAINING:
		*st = dnn.BnTrainingWs(h, b->mode, PHOS_DNN_BN_OPS_BN, t.x, NULL, t.y, t.bn, NULL, &n);
		break;
	case PHOS_DNN_BN_BACKWARD:
		*st = dnn.BnBackwardWs(h, b->mode, PHOS_DNN_BN_OPS_BN, t.x, NULL, t.dy, NULL, t.dx, t.bn, NULL, &n);
		break;
	case PHOS_DNN_BN_RESERVE:
		*st = dnn.BnReserve(h, b->mode, PHOS_DNN_BN_OPS_BN, NULL, t.x, &n);
		break;
	default:
		*st = PHOS_DNN_BAD_PARAM;
	}
	*ret = n;
out:
	bn_free(&t);
	return 0;
}

static int cuda_dnn_stf(struct phos_device *dev, void *h, void *stream, const struct phos_dnn_stf *f, int *st)
{
	obj_t d = NULL, x = NULL, y = NULL;

	READY();
	*st = dnn.SetStream(h, stream);
	if (!*st)
		*st = dnn.StfCreate(&d);
	if (!*st)
		*st = dnn.StfSet(d, f->sampler, f->type, f->nb, f->dims);
	if (*st)
		goto out;
	switch (f->kind) {
	case PHOS_DNN_STF_GRID:
		*st = dnn.StfGrid(h, d, P(f->theta), P(f->grid));
		break;
	case PHOS_DNN_STF_GRID_BACKWARD:
		*st = dnn.StfGridBackward(h, d, P(f->dgrid), P(f->dtheta));
		break;
	case PHOS_DNN_STF_SAMPLE:
		*st = tensor(&f->x, &x);
		if (!*st)
			*st = tensor(&f->y, &y);
		if (!*st)
			*st = dnn.StfSample(h, d, f->alpha, x, P(f->px), P(f->grid), f->beta, y, P(f->py));
		break;
	case PHOS_DNN_STF_SAMPLE_BACKWARD: {
		obj_t dy = NULL;

		*st = tensor(&f->x, &x);
		if (!*st)
			*st = tensor(&f->dx, &y);
		if (!*st)
			*st = tensor(&f->dy, &dy);
		if (!*st)
			*st = dnn.StfSampleBackward(h, d, f->alpha, x, P(f->px), f->beta, y, P(f->pdx), f->alpha_dgrid, dy,
						    P(f->pdy), P(f->grid), f->beta_dgrid, P(f->dgrid));
		if (dy)
			dnn.TensorDestroy(dy);
		break;
	}
	default:
		*st = PHOS_DNN_BAD_PARAM;
	}
out:
	if (x)
		dnn.TensorDestroy(x);
	if (y)
		dnn.TensorDestroy(y);
	if (d)
		dnn.StfDestroy(d);
	return 0;
}

/* The library's objects for one RNN call, made from the record's values
 * and destroyed after it: dropout (restored onto the states the program
 * holds, or without states), the RNN, x and y, h and c. */
struct rnn_descs {
	obj_t drop, rnn, x, y, h, c;
};

static void rnn_free(struct rnn_descs *t)
{
	if (t->x)
		dnn.RnnDataDestroy(t->x);
	if (t->y)
		dnn.RnnDataDestroy(t->y);
	if (t->h)
		dnn.TensorDestroy(t->h);
	if (t->c)
		dnn.TensorDestroy(t->c);
	if (t->rnn)
		dnn.RnnDestroy(t->rnn);
	if (t->drop)
		dnn.DropoutDestroy(t->drop);
}

static st_t rnn_data(const struct phos_dnn_rnn_data *d, const int32_t *seq, obj_t *ret)
{
	uint8_t fill[8];
	st_t s;

	memcpy(fill, d->fill, sizeof(fill));
	s = dnn.RnnDataCreate(ret);
	return s ? s : dnn.RnnDataSet(*ret, d->type, d->layout, d->max_seq, d->batch, d->vector, seq,
				      d->has_fill ? fill : NULL);
}

static st_t rnn_make(void *h, const struct phos_dnn_rnn *r, const int32_t *seq, struct rnn_descs *t)
{
	const struct phos_dnn_rnn_desc *d = &r->r;
	st_t s = dnn.DropoutCreate(&t->drop);

	if (!s)
		s = d->states ? dnn.DropoutRestore(t->drop, h, d->dropout, P(d->states), d->states_bytes, d->seed)
			      : dnn.DropoutSet(t->drop, h, d->dropout, NULL, 0, 0);
	if (!s)
		s = dnn.RnnCreate(&t->rnn);
	if (!s)
		s = dnn.RnnSet(t->rnn, d->algo, d->cell, d->bias, d->dir, d->input_mode, d->data_type, d->math_prec,
			       d->math_type, d->input_size, d->hidden_size, d->proj_size, d->layers, t->drop,
			       d->aux_flags);
	if (!s && seq)
		s = rnn_data(&r->x, seq, &t->x);
	if (!s && seq && r->kind != PHOS_DNN_RNN_TEMP_SPACE)
		s = rnn_data(&r->y, seq + r->x.batch, &t->y);
	if (!s)
		s = tensor(&r->h, &t->h);
	if (!s)
		s = tensor(&r->c, &t->c);
	return s;
}

/* A descriptor cuDNN filled, read back by value (nb 0 when it did not). */
static st_t tensor_read(obj_t d, struct phos_dnn_tensor *out)
{
	int type = 0, nb = 0;
	st_t s;

	memset(out, 0, sizeof(*out));
	s = dnn.TensorGet(d, PHOS_DNN_DIM_MAX, &type, &nb, out->dims, out->strides);
	if (s || nb < 1 || nb > PHOS_DNN_DIM_MAX) {
		memset(out, 0, sizeof(*out));
		return s;
	}
	out->type = type;
	out->nb = nb;
	return 0;
}

static int cuda_dnn_rnn(struct phos_device *dev, void *h, void *stream, const struct phos_dnn_rnn *r,
			const int32_t *seq, struct phos_reply_dnn_rnn *ret, int *st)
{
	struct rnn_descs t = { 0 };

	READY();
	if (r->kind == PHOS_DNN_DROPOUT_STATES_SIZE) {
		size_t n = 0;

		*st = dnn.DropoutStatesSize(h, &n);
		ret->size[0] = n;
		return 0;
	}
	if (stream)
		*st = dnn.SetStream(h, stream);
	if (!*st && r->kind == PHOS_DNN_DROPOUT_INIT) {
		*st = dnn.DropoutCreate(&t.drop);
		if (!*st)
			*st = dnn.DropoutSet(t.drop, h, r->r.dropout, P(r->r.states), r->r.states_bytes, r->r.seed);
		goto out;
	}
	if (!*st)
		*st = rnn_make(h, r, seq, &t);
	if (*st)
		goto out;
	switch (r->kind) {
	case PHOS_DNN_RNN_WEIGHT_SPACE: {
		size_t n = 0;

		*st = dnn.RnnWeightSpace(h, t.rnn, &n);
		ret->size[0] = n;
		break;
	}
	case PHOS_DNN_RNN_TEMP_SPACE: {
		size_t w = 0, rs = 0;

		*st = dnn.RnnTempSpace(h, t.rnn, r->fwd_mode, t.x, &w, &rs);
		ret->size[0] = w;
		ret->size[1] = rs;
		break;
	}
	case PHOS_DNN_RNN_WEIGHT_PARAMS: {
		obj_t m = NULL, b = NULL;
		void *ma = NULL, *ba = NULL;

		*st = dnn.TensorCreate(&m);
		if (!*st)
			*st = dnn.TensorCreate(&b);
		if (!*st)
			*st = dnn.RnnWeightParams(h, t.rnn, r->layer, r->weights_bytes, P(r->weights), r->lin, m, &ma, b,
						  &ba);
		ret->m_off = ret->b_off = -1;
		if (!*st && ma)
			ret->m_off = (int64_t)((uintptr_t)ma - (uintptr_t)r->weights);
		if (!*st && ba)
			ret->b_off = (int64_t)((uintptr_t)ba - (uintptr_t)r->weights);
		if (!*st && ma)
			*st = tensor_read(m, &ret->m);
		if (!*st && ba)
			*st = tensor_read(b, &ret->b);
		if (m)
			dnn.TensorDestroy(m);
		if (b)
			dnn.TensorDestroy(b);
		break;
	}
	case PHOS_DNN_RNN_FORWARD:
		*st = dnn.RnnForward(h, t.rnn, r->fwd_mode, P(r->dev_seq), t.x, P(r->px), t.y, P(r->py), t.h, P(r->hx),
				     P(r->hy), t.c, P(r->cx), P(r->cy), r->weights_bytes, P(r->weights), r->work_bytes,
				     P(r->work), r->reserve_bytes, P(r->reserve));
		break;
	case PHOS_DNN_RNN_BACKWARD_DATA:
		*st = dnn.RnnBackwardData(h, t.rnn, P(r->dev_seq), t.y, P(r->py), P(r->pdy), t.x, P(r->pdx), t.h,
					  P(r->hx), P(r->dhy), P(r->dhx), t.c, P(r->cx), P(r->dcy), P(r->dcx),
					  r->weights_bytes, P(r->weights), r->work_bytes, P(r->work), r->reserve_bytes,
					  P(r->reserve));
		break;
	case PHOS_DNN_RNN_BACKWARD_WEIGHTS:
		*st = dnn.RnnBackwardWeights(h, t.rnn, r->wgrad_mode, P(r->dev_seq), t.x, P(r->px), t.h, P(r->hx), t.y,
					     P(r->py), r->weights_bytes, P(r->dweights), r->work_bytes, P(r->work),
					     r->reserve_bytes, P(r->reserve));
		break;
	default:
		*st = PHOS_DNN_BAD_PARAM;
	}
out:
	rnn_free(&t);
	return 0;
}

static int cuda_dnn_ctc(struct phos_device *dev, void *h, void *stream, const struct phos_dnn_ctc *c,
			const int32_t *arrays, uint64_t *size, int *st)
{
	obj_t d = NULL, probs = NULL, grads = NULL;
	int64_t B = c->probs.dims[1];
	const int *labels = arrays, *lengths = arrays ? arrays + c->nlabels : NULL, *inputs = lengths ? lengths + B : NULL;

	READY();
	if (stream)
		*st = dnn.SetStream(h, stream);
	if (!*st)
		*st = dnn.CtcCreate(&d);
	if (!*st)
		*st = c->set == 9   ? dnn.CtcSet9(d, c->comp_type, c->norm_mode, c->grad_mode, c->max_label)
		      : c->set == 8 ? dnn.CtcSet8(d, c->comp_type, c->norm_mode, c->grad_mode, c->max_label)
		      : c->set == 1 ? dnn.CtcSetEx(d, c->comp_type, c->norm_mode, c->grad_mode)
				    : dnn.CtcSet(d, c->comp_type);
	if (!*st)
		*st = tensor(&c->probs, &probs);
	if (!*st)
		*st = tensor(&c->grads, &grads);
	if (*st)
		goto out;
	if (size) {
		size_t n = 0;

		*st = c->api == 7 ? dnn.CtcSize(h, probs, grads, labels, lengths, inputs, c->algo, d, &n)
				  : dnn.CtcSize8(h, c->algo, d, probs, grads, &n);
		*size = n;
	} else if (c->api == 7) {
		*st = dnn.Ctc(h, probs, P(c->pprobs), labels, lengths, inputs, P(c->costs), grads, P(c->pgrads), c->algo,
			      d, P(c->work), c->work_bytes);
	} else {
		*st = dnn.Ctc8(h, c->algo, d, probs, P(c->pprobs), P(c->labels), P(c->label_lengths),
			       P(c->input_lengths), P(c->costs), grads, P(c->pgrads), c->work_bytes, P(c->work));
	}
out:
	if (probs)
		dnn.TensorDestroy(probs);
	if (grads)
		dnn.TensorDestroy(grads);
	if (d)
		dnn.CtcDestroy(d);
	return 0;
}

const struct phos_dnn_ops phos_dnn_cuda = {
	.version = cuda_dnn_version,
	.handle_create = cuda_dnn_handle_create,
	.handle_destroy = cuda_dnn_handle_destroy,
	.desc_create = cuda_dnn_desc_create,
	.desc_destroy = cuda_dnn_desc_destroy,
	.set = cuda_dnn_set,
	.get = cuda_dnn_get,
	.finalize = cuda_dnn_finalize,
	.execute = cuda_dnn_execute,
	.bn = cuda_dnn_bn,
	.bn_size = cuda_dnn_bn_size,
	.stf = cuda_dnn_stf,
	.rnn = cuda_dnn_rnn,
	.ctc = cuda_dnn_ctc,
};
