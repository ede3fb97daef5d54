/* SPDX-License-Identifier: MIT */
/*
 * cuDNN on the cuda device (dnn_dev.h): the real libcudnn.so.9, loaded at the
 * first cuDNN record (runtime/libfind.h: $PHOS_CUDNN_LIB, the loader path,
 * pip's nvidia-cudnn-cu13 in nvidia/cudnn/lib, the toolkit), so a program
 * that never calls cuDNN never loads it.
 *
 * Handles and backend descriptors are the library's own objects. An
 * execution builds the variant pack here (a host object of the library,
 * destroyed after the call); batch normalization builds its tensor
 * descriptors the same way. The device's context is current for every call.
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
	   obj_t, const void *, const void *, const void *, void *))

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
};
