/* SPDX-License-Identifier: MIT */
/*
 * cuSPARSE on the cuda device (sparse_dev.h): the real libcusparse.so.12,
 * loaded at the first cuSPARSE record (runtime/device/cuda/libfind.h: $PHOS_CUSPARSE_LIB,
 * the loader path, the CUDA 13 wheels' nvidia/cu13/lib that PyTorch depends
 * on, the toolkit), so a program that never calls cuSPARSE never loads it.
 *
 * One cuSPARSE handle per device (d->sparse), made at the first call and
 * destroyed with the device; each call sets its stream and pointer mode.
 * The function's handles and descriptors are the preload's: each call makes
 * the descriptors of its description (cusparseCreateCsr ... host objects,
 * no device work), runs, and destroys them. A _preprocess call therefore
 * prepares descriptors that go with it: cuSPARSE documents it as optional
 * (the product does its own analysis then), and it still writes the
 * external buffer the program gave. The device's context is current for
 * every call.
 */
#include "device_cuda_syms.h"

#include <cusparse.h>
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "libfind.h"
#include "log.h"
#include "sparse_dev.h"

#define SP_SYMS(X)                                                    \
	X(Create, "cusparseCreate")                                   \
	X(Destroy, "cusparseDestroy")                                 \
	X(SetStream, "cusparseSetStream")                             \
	X(SetPointerMode, "cusparseSetPointerMode")                   \
	X(GetVersion, "cusparseGetVersion")                           \
	X(GetProperty, "cusparseGetProperty")                         \
	X(CreateCsr, "cusparseCreateCsr")                             \
	X(CreateCoo, "cusparseCreateCoo")                             \
	X(CsrSetStridedBatch, "cusparseCsrSetStridedBatch")           \
	X(CooSetStridedBatch, "cusparseCooSetStridedBatch")           \
	X(DestroySpMat, "cusparseDestroySpMat")                       \
	X(CreateDnMat, "cusparseCreateDnMat")                         \
	X(DnMatSetStridedBatch, "cusparseDnMatSetStridedBatch")       \
	X(DestroyDnMat, "cusparseDestroyDnMat")                       \
	X(CreateDnVec, "cusparseCreateDnVec")                         \
	X(DestroyDnVec, "cusparseDestroyDnVec")                       \
	X(SpMV, "cusparseSpMV")                                       \
	X(SpMV_bufferSize, "cusparseSpMV_bufferSize")                 \
	X(SpMM, "cusparseSpMM")                                       \
	X(SpMM_bufferSize, "cusparseSpMM_bufferSize")                 \
	X(SpMM_preprocess, "cusparseSpMM_preprocess")                 \
	X(SDDMM, "cusparseSDDMM")                                     \
	X(SDDMM_bufferSize, "cusparseSDDMM_bufferSize")               \
	X(SDDMM_preprocess, "cusparseSDDMM_preprocess")               \
	X(SparseToDense, "cusparseSparseToDense")                     \
	X(SparseToDense_bufferSize, "cusparseSparseToDense_bufferSize") \
	X(Xcoo2csr, "cusparseXcoo2csr")                               \
	X(Xcsrsort, "cusparseXcsrsort")                               \
	X(Xcsrsort_bufferSizeExt, "cusparseXcsrsort_bufferSizeExt")   \
	X(XcoosortByRow, "cusparseXcoosortByRow")                     \
	X(Xcoosort_bufferSizeExt, "cusparseXcoosort_bufferSizeExt")   \
	X(CreateIdentityPermutation, "cusparseCreateIdentityPermutation") \
	X(CreateMatDescr, "cusparseCreateMatDescr")                   \
	X(SetMatIndexBase, "cusparseSetMatIndexBase")                 \
	X(DestroyMatDescr, "cusparseDestroyMatDescr")

/* Each pointer has the type of NVIDIA's declaration in cusparse.h (some are
 * marked deprecated there, cusparseCreateIdentityPermutation: PyTorch calls
 * them, so they are forwarded). */
#define SP_FIELD(field, export) __typeof__(cusparse##field) *field;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static struct {
	SP_SYMS(SP_FIELD)
} sp;
#pragma GCC diagnostic pop
#undef SP_FIELD

static pthread_once_t sp_once = PTHREAD_ONCE_INIT;
static int sp_status = -PHOS_CUDA_INITIALIZATION;

static void sp_load(void)
{
	void *lib = phos_lib_find("cuSPARSE", "PHOS_CUSPARSE_LIB", "libcusparse.so.12", "cu13");

	if (!lib) {
		phos_err("cuda: cannot load libcusparse.so.12 (PHOS_CUSPARSE_LIB, the loader path, pip's "
			 "nvidia/cu13/lib, $CUDA_HOME/lib64 and /usr/local/cuda/lib64 tried)");
		return;
	}
#define SP_LOAD(field, export)                                                  \
	{                                                                       \
		void *p_ = dlsym(lib, export);                                  \
		if (!p_) {                                                      \
			phos_err("cuda: libcusparse.so.12 lacks %s", export);   \
			return;                                                 \
		}                                                               \
		memcpy(&sp.field, &p_, sizeof(p_));                             \
	}
	SP_SYMS(SP_LOAD)
#undef SP_LOAD
	sp_status = 0;
}

/* The library loaded, the device's context current and its handle made:
 * 0 with *ret, or the error (*st NOT_INITIALIZED without a usable library). */
static int ready(struct phos_device *dev, cusparseHandle_t *ret, int *st)
{
	struct cuda_dev *d = cuda_dev(dev);
	int r;

	pthread_once(&sp_once, sp_load);
	*st = 0;
	if (sp_status < 0) {
		*st = CUSPARSE_STATUS_NOT_INITIALIZED;
		return 0;
	}
	r = cuda_current(d);
	if (r < 0)
		return r;
	pthread_mutex_lock(&d->lock);
	if (!d->sparse) {
		cusparseHandle_t h;

		*st = sp.Create(&h);
		if (!*st)
			d->sparse = h;
	}
	*ret = d->sparse;
	pthread_mutex_unlock(&d->lock);
	return 0;
}

#define READY(h)                                   \
	do {                                       \
		int r_ = ready(dev, &(h), st);     \
		if (r_ < 0 || *st)                 \
			return r_;                 \
	} while (0)

void cuda_sparse_release(struct cuda_dev *d)
{
	if (d->sparse) {
		(void)sp.SetStream(d->sparse, NULL);   /* (the last call's stream may be gone: a scrub destroyed it) */
		(void)sp.Destroy(d->sparse);
	}
	d->sparse = NULL;
}

/* The descriptors of one call. */
struct descs {
	cusparseSpMatDescr_t a;
	cusparseDnMatDescr_t m[2];
	cusparseDnVecDescr_t v[2];
};

static void descs_drop(struct descs *x)
{
	if (x->a)
		sp.DestroySpMat(x->a);
	for (int i = 0; i < 2; i++) {
		if (x->m[i])
			sp.DestroyDnMat(x->m[i]);
		if (x->v[i])
			sp.DestroyDnVec(x->v[i]);
	}
}

static void *ptr(uint64_t a)
{
	return (void *)(uintptr_t)a;
}

static cusparseStatus_t spmat_make(const struct phos_sparse_spmat *s, cusparseSpMatDescr_t *ret)
{
	cusparseStatus_t st;

	if (s->format == PHOS_SPARSE_FORMAT_CSR) {
		st = sp.CreateCsr(ret, s->rows, s->cols, s->nnz, ptr(s->offsets), ptr(s->columns), ptr(s->values),
				  (cusparseIndexType_t)s->offsets_type, (cusparseIndexType_t)s->index_type,
				  (cusparseIndexBase_t)s->base, (cudaDataType)s->value_type);
		if (!st && s->batch > 1)
			st = sp.CsrSetStridedBatch(*ret, s->batch, s->offsets_stride, s->values_stride);
	} else {
		st = sp.CreateCoo(ret, s->rows, s->cols, s->nnz, ptr(s->offsets), ptr(s->columns), ptr(s->values),
				  (cusparseIndexType_t)s->index_type, (cusparseIndexBase_t)s->base,
				  (cudaDataType)s->value_type);
		if (!st && s->batch > 1)
			st = sp.CooSetStridedBatch(*ret, s->batch, s->values_stride);
	}
	return st;
}

static cusparseStatus_t dnmat_make(const struct phos_sparse_dnmat *d, cusparseDnMatDescr_t *ret)
{
	cusparseStatus_t st = sp.CreateDnMat(ret, d->rows, d->cols, d->ld, ptr(d->values), (cudaDataType)d->value_type,
					     (cusparseOrder_t)d->order);

	if (!st && d->batch > 1)
		st = sp.DnMatSetStridedBatch(*ret, d->batch, d->batch_stride);
	return st;
}

/* The descriptors call c names. */
static cusparseStatus_t descs_make(const struct phos_sparse_call *c, struct descs *x)
{
	cusparseStatus_t st = CUSPARSE_STATUS_SUCCESS;

	memset(x, 0, sizeof(*x));
	if (c->kind != PHOS_SPARSE_COO2CSR)
		st = spmat_make(&c->sp, &x->a);
	if (!st && c->kind == PHOS_SPARSE_SPMV) {
		st = sp.CreateDnVec(&x->v[0], c->d[0].rows, ptr(c->d[0].values), (cudaDataType)c->d[0].value_type);
		if (!st)
			st = sp.CreateDnVec(&x->v[1], c->d[1].rows, ptr(c->d[1].values),
					    (cudaDataType)c->d[1].value_type);
	} else if (!st && (c->kind == PHOS_SPARSE_SPMM || c->kind == PHOS_SPARSE_SDDMM)) {
		st = dnmat_make(&c->d[0], &x->m[0]);
		if (!st)
			st = dnmat_make(&c->d[1], &x->m[1]);
	} else if (!st && c->kind == PHOS_SPARSE_TO_DENSE) {
		st = dnmat_make(&c->d[0], &x->m[0]);
	}
	if (st)
		descs_drop(x);
	return st;
}

/* alpha and beta as cuSPARSE takes them: host values of the compute type,
 * or the device addresses; the handle's pointer mode set to match. */
struct scalars {
	union { float f; double d; } a, b;
	const void *alpha, *beta;
};

static cusparseStatus_t scalars_of(cusparseHandle_t h, const struct phos_sparse_call *c, struct scalars *s)
{
	if (c->pointer_mode == PHOS_SPARSE_POINTER_DEVICE) {
		s->alpha = ptr(c->alpha_ptr);
		s->beta = ptr(c->beta_ptr);
		return sp.SetPointerMode(h, CUSPARSE_POINTER_MODE_DEVICE);
	}
	if (c->compute_type == PHOS_SPARSE_R_64F) {
		s->a.d = c->alpha;
		s->b.d = c->beta;
	} else {
		s->a.f = (float)c->alpha;
		s->b.f = (float)c->beta;
	}
	s->alpha = &s->a;
	s->beta = &s->b;
	return sp.SetPointerMode(h, CUSPARSE_POINTER_MODE_HOST);
}

/* The legacy calls (coo2csr, the sorts, the identity), on the handle's stream. */
static cusparseStatus_t legacy(cusparseHandle_t h, const struct phos_sparse_call *c)
{
	const struct phos_sparse_spmat *s = &c->sp;
	cusparseMatDescr_t md;
	cusparseStatus_t st;

	switch (c->kind) {
	case PHOS_SPARSE_COO2CSR:
		return sp.Xcoo2csr(h, ptr(s->offsets), (int)s->nnz, (int)s->rows, ptr(s->columns),
				   (cusparseIndexBase_t)s->base);
	case PHOS_SPARSE_IDENTITY:
		return sp.CreateIdentityPermutation(h, (int)s->nnz, ptr(s->values));
	case PHOS_SPARSE_COOSORT:
		return sp.XcoosortByRow(h, (int)s->rows, (int)s->cols, (int)s->nnz, ptr(s->offsets), ptr(s->columns),
					ptr(s->values), ptr(c->buffer));
	case PHOS_SPARSE_CSRSORT:
		st = sp.CreateMatDescr(&md);
		if (st)
			return st;
		st = sp.SetMatIndexBase(md, (cusparseIndexBase_t)s->base);
		if (!st)
			st = sp.Xcsrsort(h, (int)s->rows, (int)s->cols, (int)s->nnz, md, ptr(s->offsets), ptr(s->columns),
					 ptr(s->values), ptr(c->buffer));
		sp.DestroyMatDescr(md);
		return st;
	default:
		return CUSPARSE_STATUS_INVALID_VALUE;
	}
}

/* The legacy calls' buffers: the sorts' _bufferSizeExt, none for the others. */
static cusparseStatus_t legacy_size(cusparseHandle_t h, const struct phos_sparse_call *c, size_t *ret)
{
	const struct phos_sparse_spmat *s = &c->sp;

	*ret = 0;
	if (c->kind == PHOS_SPARSE_CSRSORT)
		return sp.Xcsrsort_bufferSizeExt(h, (int)s->rows, (int)s->cols, (int)s->nnz, ptr(s->offsets),
						 ptr(s->columns), ret);
	if (c->kind == PHOS_SPARSE_COOSORT)
		return sp.Xcoosort_bufferSizeExt(h, (int)s->rows, (int)s->cols, (int)s->nnz, ptr(s->offsets),
						 ptr(s->columns), ret);
	return CUSPARSE_STATUS_SUCCESS;
}

static bool is_legacy(const struct phos_sparse_call *c)
{
	return c->kind == PHOS_SPARSE_COO2CSR || c->kind == PHOS_SPARSE_CSRSORT || c->kind == PHOS_SPARSE_COOSORT ||
	       c->kind == PHOS_SPARSE_IDENTITY;
}

static int cuda_sparse_version(struct phos_device *dev, struct phos_reply_sparse_version *ret, int *st)
{
	cusparseHandle_t h;

	READY(h);
	*st = sp.GetVersion(h, &ret->version);
	if (!*st)
		*st = sp.GetProperty(MAJOR_VERSION, &ret->major);
	if (!*st)
		*st = sp.GetProperty(MINOR_VERSION, &ret->minor);
	if (!*st)
		*st = sp.GetProperty(PATCH_LEVEL, &ret->patch);
	return 0;
}

static int cuda_sparse_buffer_size(struct phos_device *dev, const struct phos_sparse_call *c, uint64_t *ret, int *st)
{
	cusparseOperation_t oa = (cusparseOperation_t)c->op_a, ob = (cusparseOperation_t)c->op_b;
	cudaDataType ct = (cudaDataType)c->compute_type;
	cusparseHandle_t h;
	struct scalars s;
	struct descs x;
	size_t n = 0;

	READY(h);
	*ret = 0;
	if (is_legacy(c)) {
		*st = legacy_size(h, c, &n);
		*ret = n;
		return 0;
	}
	*st = descs_make(c, &x);
	if (*st)
		return 0;
	*st = scalars_of(h, c, &s);
	if (*st) {
		descs_drop(&x);
		return 0;
	}
	switch (c->kind) {
	case PHOS_SPARSE_SPMV:
		*st = sp.SpMV_bufferSize(h, oa, s.alpha, x.a, x.v[0], s.beta, x.v[1], ct, (cusparseSpMVAlg_t)c->alg, &n);
		break;
	case PHOS_SPARSE_SPMM:
		*st = sp.SpMM_bufferSize(h, oa, ob, s.alpha, x.a, x.m[0], s.beta, x.m[1], ct, (cusparseSpMMAlg_t)c->alg,
					 &n);
		break;
	case PHOS_SPARSE_SDDMM:
		*st = sp.SDDMM_bufferSize(h, oa, ob, s.alpha, x.m[0], x.m[1], s.beta, x.a, ct,
					  (cusparseSDDMMAlg_t)c->alg, &n);
		break;
	case PHOS_SPARSE_TO_DENSE:
		*st = sp.SparseToDense_bufferSize(h, x.a, x.m[0], (cusparseSparseToDenseAlg_t)c->alg, &n);
		break;
	default:
		*st = CUSPARSE_STATUS_INVALID_VALUE;
	}
	descs_drop(&x);
	*ret = n;
	return 0;
}

static int cuda_sparse_exec(struct phos_device *dev, const struct phos_sparse_call *c, void *stream, int *st)
{
	cusparseOperation_t oa = (cusparseOperation_t)c->op_a, ob = (cusparseOperation_t)c->op_b;
	cudaDataType ct = (cudaDataType)c->compute_type;
	void *buf = ptr(c->buffer);
	cusparseHandle_t h;
	struct scalars s;
	struct descs x;

	READY(h);
	*st = sp.SetStream(h, stream);
	if (*st)
		return 0;
	if (is_legacy(c)) {
		*st = legacy(h, c);
		return 0;
	}
	*st = descs_make(c, &x);
	if (*st)
		return 0;
	*st = scalars_of(h, c, &s);
	if (*st) {
		descs_drop(&x);
		return 0;
	}
	switch (c->kind) {
	case PHOS_SPARSE_SPMV:
		*st = sp.SpMV(h, oa, s.alpha, x.a, x.v[0], s.beta, x.v[1], ct, (cusparseSpMVAlg_t)c->alg, buf);
		break;
	case PHOS_SPARSE_SPMM:
		*st = (c->preprocess ? sp.SpMM_preprocess : sp.SpMM)(h, oa, ob, s.alpha, x.a, x.m[0], s.beta, x.m[1], ct,
								     (cusparseSpMMAlg_t)c->alg, buf);
		break;
	case PHOS_SPARSE_SDDMM:
		*st = (c->preprocess ? sp.SDDMM_preprocess : sp.SDDMM)(h, oa, ob, s.alpha, x.m[0], x.m[1], s.beta, x.a,
								       ct, (cusparseSDDMMAlg_t)c->alg, buf);
		break;
	case PHOS_SPARSE_TO_DENSE:
		*st = sp.SparseToDense(h, x.a, x.m[0], (cusparseSparseToDenseAlg_t)c->alg, buf);
		break;
	default:
		*st = CUSPARSE_STATUS_INVALID_VALUE;
	}
	/* (descriptors are host objects: destroying them does not wait for the work) */
	descs_drop(&x);
	return 0;
}

const struct phos_sparse_ops phos_sparse_cuda = {
	.version = cuda_sparse_version,
	.buffer_size = cuda_sparse_buffer_size,
	.exec = cuda_sparse_exec,
};
