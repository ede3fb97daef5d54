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
	X(DestroyMatDescr, "cusparseDestroyMatDescr")                 \
	X(SpGEMM_createDescr, "cusparseSpGEMM_createDescr")           \
	X(SpGEMM_destroyDescr, "cusparseSpGEMM_destroyDescr")         \
	X(SpGEMM_workEstimation, "cusparseSpGEMM_workEstimation")     \
	X(SpGEMM_compute, "cusparseSpGEMM_compute")                   \
	X(SpGEMM_copy, "cusparseSpGEMM_copy")                         \
	X(SpMatGetSize, "cusparseSpMatGetSize")                       \
	X(CsrSetPointers, "cusparseCsrSetPointers")

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

static int spgemm(struct phos_device *dev, const struct phos_sparse_call *c, void *stream, bool write,
		  uint64_t *ret_nnz, int *st);

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
	if (c->kind == PHOS_SPARSE_SPGEMM)
		return spgemm(dev, c, stream, true, &(uint64_t){ 0 }, st);
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

/* SpGEMM's phases, whole, in one call: buffers of the executor's own
 * (cuMemAlloc, outside the arena, freed before it returns, the stream
 * waited for). write: C's arrays filled, its nnz being the product's;
 * else only *ret_nnz. */
static int spgemm(struct phos_device *dev, const struct phos_sparse_call *c, void *stream, bool write,
		  uint64_t *ret_nnz, int *st)
{
	const struct phos_sparse_spmat *C = &c->sp2[1];
	cudaDataType ct = (cudaDataType)c->compute_type;
	cusparseSpGEMMAlg_t alg = (cusparseSpGEMMAlg_t)c->alg;
	const cusparseOperation_t N = CUSPARSE_OPERATION_NON_TRANSPOSE;
	double a64 = c->alpha, b64 = 0;
	float a32 = (float)c->alpha, b32 = 0;
	const void *alpha = ct == CUDA_R_64F ? (const void *)&a64 : (const void *)&a32;
	const void *beta = ct == CUDA_R_64F ? (const void *)&b64 : (const void *)&b32;
	cusparseSpMatDescr_t a = NULL, b = NULL, cm = NULL;
	cusparseSpGEMMDescr_t g = NULL;
	CUdeviceptr buf1 = 0, buf2 = 0;
	size_t s1 = 0, s2 = 0;
	int64_t rows, cols, nnz = 0;
	cusparseHandle_t h;
	CUresult cr = CUDA_SUCCESS;

	*ret_nnz = 0;
	READY(h);
	if ((*st = sp.SetStream(h, stream)) || (*st = sp.SetPointerMode(h, CUSPARSE_POINTER_MODE_HOST)) ||
	    (*st = spmat_make(&c->sp, &a)) || (*st = spmat_make(&c->sp2[0], &b)) ||
	    (*st = sp.CreateCsr(&cm, C->rows, C->cols, 0, NULL, NULL, NULL, (cusparseIndexType_t)C->offsets_type,
				(cusparseIndexType_t)C->index_type, (cusparseIndexBase_t)C->base, ct)) ||
	    (*st = sp.SpGEMM_createDescr(&g)))
		goto out;
	if ((*st = sp.SpGEMM_workEstimation(h, N, N, alpha, a, b, beta, cm, ct, alg, g, &s1, NULL)))
		goto out;
	if (s1 && (cr = cuda_drv.MemAlloc(&buf1, s1)) != CUDA_SUCCESS)
		goto out;
	if ((*st = sp.SpGEMM_workEstimation(h, N, N, alpha, a, b, beta, cm, ct, alg, g, &s1, ptr(buf1))) ||
	    (*st = sp.SpGEMM_compute(h, N, N, alpha, a, b, beta, cm, ct, alg, g, &s2, NULL)))
		goto out;
	if (s2 && (cr = cuda_drv.MemAlloc(&buf2, s2)) != CUDA_SUCCESS)
		goto out;
	if ((*st = sp.SpGEMM_compute(h, N, N, alpha, a, b, beta, cm, ct, alg, g, &s2, ptr(buf2))) ||
	    (*st = sp.SpMatGetSize(cm, &rows, &cols, &nnz)))
		goto out;
	*ret_nnz = (uint64_t)nnz;
	if (write && nnz != C->nnz) {
		*st = CUSPARSE_STATUS_INVALID_VALUE;   /* C has room for another count than the product's */
		goto out;
	}
	if (write && ((*st = sp.CsrSetPointers(cm, ptr(C->offsets), ptr(C->columns), ptr(C->values))) ||
		      (*st = sp.SpGEMM_copy(h, N, N, alpha, a, b, beta, cm, ct, alg, g))))
		goto out;
out:
	/* the buffers go once the stream has done with them */
	if (buf1 || buf2)
		(void)cuda_drv.StreamSynchronize(stream ? (CUstream)stream : CU_STREAM_LEGACY);
	if (buf1)
		cuda_drv.MemFree(buf1);
	if (buf2)
		cuda_drv.MemFree(buf2);
	if (g)
		sp.SpGEMM_destroyDescr(g);
	if (cm)
		sp.DestroySpMat(cm);
	if (b)
		sp.DestroySpMat(b);
	if (a)
		sp.DestroySpMat(a);
	if (cr == CUDA_ERROR_OUT_OF_MEMORY)
		*st = CUSPARSE_STATUS_ALLOC_FAILED;
	else if (cr != CUDA_SUCCESS)
		*st = CUSPARSE_STATUS_EXECUTION_FAILED;
	return 0;
}

static int cuda_sparse_spgemm_nnz(struct phos_device *dev, const struct phos_sparse_call *c, void *stream,
				  uint64_t *ret, int *st)
{
	return spgemm(dev, c, stream, false, ret, st);
}

const struct phos_sparse_ops phos_sparse_cuda = {
	.version = cuda_sparse_version,
	.buffer_size = cuda_sparse_buffer_size,
	.exec = cuda_sparse_exec,
	.spgemm_nnz = cuda_sparse_spgemm_nnz,
};
