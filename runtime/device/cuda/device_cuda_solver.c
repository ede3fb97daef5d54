/* SPDX-License-Identifier: MIT */
/*
 * cuSOLVER's dense API on the cuda device (solver_dev.h): the real
 * libcusolver.so.12, loaded at the first cuSOLVER record
 * (runtime/device/cuda/libfind.h: $PHOS_CUSOLVER_LIB, the loader path, the CUDA 13
 * wheels' nvidia/cu13/lib that PyTorch depends on, the toolkit), so a
 * program that never calls cuSOLVER never loads it.
 *
 * One cusolverDn handle per device (d->solver), made at the first call and
 * destroyed with the device; each call sets its stream. The function's
 * handles are the preload's, so a new executor (after a restore) simply
 * makes its own at its first call. The device's context is current for
 * every call. Each S/D pair is chosen by the call's type; its workspace is
 * the program's, of c->lwork elements (the _bufferSize's answer for
 * getrf, which takes no size). The 64-bit API (x64) runs with one params
 * object of default settings and a host workspace of the backend's own (a
 * call that takes one is waited for before the next may use it); the
 * Jacobi calls with an info object made for the call from its settings,
 * waited for before it is destroyed.
 */
#include "device_cuda_syms.h"

#include <cusolverDn.h>
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "libfind.h"
#include "log.h"
#include "solver_dev.h"

#define SV_PAIR(X, f) X(S##f, "cusolverDnS" #f) X(D##f, "cusolverDnD" #f)
#define SV_SYMS(X)                                              \
	X(Create, "cusolverDnCreate")                           \
	X(Destroy, "cusolverDnDestroy")                         \
	X(SetStream, "cusolverDnSetStream")                     \
	X(GetVersion, "cusolverGetVersion")                     \
	X(GetProperty, "cusolverGetProperty")                   \
	SV_PAIR(X, getrf_bufferSize) SV_PAIR(X, getrf) SV_PAIR(X, getrs)           \
	SV_PAIR(X, potrf_bufferSize) SV_PAIR(X, potrf) SV_PAIR(X, potrs)           \
	SV_PAIR(X, geqrf_bufferSize) SV_PAIR(X, geqrf)                             \
	SV_PAIR(X, orgqr_bufferSize) SV_PAIR(X, orgqr)                             \
	SV_PAIR(X, ormqr_bufferSize) SV_PAIR(X, ormqr)                             \
	SV_PAIR(X, syevd_bufferSize) SV_PAIR(X, syevd)                             \
	X(CreateParams, "cusolverDnCreateParams")                                  \
	X(Xgetrf_bufferSize, "cusolverDnXgetrf_bufferSize") X(Xgetrf, "cusolverDnXgetrf") \
	X(Xgetrs, "cusolverDnXgetrs")                                              \
	X(Xpotrf_bufferSize, "cusolverDnXpotrf_bufferSize") X(Xpotrf, "cusolverDnXpotrf") \
	X(Xpotrs, "cusolverDnXpotrs")                                              \
	X(Xgeqrf_bufferSize, "cusolverDnXgeqrf_bufferSize") X(Xgeqrf, "cusolverDnXgeqrf") \
	X(Xsyevd_bufferSize, "cusolverDnXsyevd_bufferSize") X(Xsyevd, "cusolverDnXsyevd")   \
	X(XsyevBatched_bufferSize, "cusolverDnXsyevBatched_bufferSize")            \
	X(XsyevBatched, "cusolverDnXsyevBatched")                                  \
	SV_PAIR(X, syevj_bufferSize) SV_PAIR(X, syevj)                             \
	SV_PAIR(X, syevjBatched_bufferSize) SV_PAIR(X, syevjBatched)               \
	SV_PAIR(X, gesvdj_bufferSize) SV_PAIR(X, gesvdj)                           \
	SV_PAIR(X, gesvdjBatched_bufferSize) SV_PAIR(X, gesvdjBatched)             \
	SV_PAIR(X, potrfBatched) SV_PAIR(X, potrsBatched)                          \
	X(CreateSyevjInfo, "cusolverDnCreateSyevjInfo")                            \
	X(DestroySyevjInfo, "cusolverDnDestroySyevjInfo")                          \
	X(XsyevjSetTolerance, "cusolverDnXsyevjSetTolerance")                      \
	X(XsyevjSetMaxSweeps, "cusolverDnXsyevjSetMaxSweeps")                      \
	X(XsyevjSetSortEig, "cusolverDnXsyevjSetSortEig")                          \
	X(CreateGesvdjInfo, "cusolverDnCreateGesvdjInfo")                          \
	X(DestroyGesvdjInfo, "cusolverDnDestroyGesvdjInfo")                        \
	X(XgesvdjSetTolerance, "cusolverDnXgesvdjSetTolerance")                    \
	X(XgesvdjSetMaxSweeps, "cusolverDnXgesvdjSetMaxSweeps")                    \
	X(XgesvdjSetSortEig, "cusolverDnXgesvdjSetSortEig")

/* Each pointer has the type of NVIDIA's declaration (cusolverDn.h). */
#define SV_FIELD(field, export) __typeof__(cusolverDn##field) *field;
#define cusolverDnGetVersion cusolverGetVersion
#define cusolverDnGetProperty cusolverGetProperty
static struct {
	SV_SYMS(SV_FIELD)
} sv;
#undef cusolverDnGetVersion
#undef cusolverDnGetProperty
#undef SV_FIELD

static pthread_once_t sv_once = PTHREAD_ONCE_INIT;
static int sv_status = -PHOS_CUDA_INITIALIZATION;
/* The 64-bit API's params (default algorithms: the stand-in forwards no
 * other), a host object made once; and its host workspace, grown as calls
 * ask, each such call waited for before the next may use it. */
static cusolverDnParams_t sv_params;
static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static void *host_work;
static size_t host_size;

static void sv_load(void)
{
	void *lib = phos_lib_find("cuSOLVER", "PHOS_CUSOLVER_LIB", "libcusolver.so.12", "cu13");

	if (!lib) {
		phos_err("cuda: cannot load libcusolver.so.12 (PHOS_CUSOLVER_LIB, the loader path, pip's "
			 "nvidia/cu13/lib, $CUDA_HOME/lib64 and /usr/local/cuda/lib64 tried)");
		return;
	}
#define SV_LOAD(field, export)                                                  \
	{                                                                       \
		void *p_ = dlsym(lib, export);                                  \
		if (!p_) {                                                      \
			phos_err("cuda: libcusolver.so.12 lacks %s", export);   \
			return;                                                 \
		}                                                               \
		memcpy(&sv.field, &p_, sizeof(p_));                             \
	}
	SV_SYMS(SV_LOAD)
#undef SV_LOAD
	if (sv.CreateParams(&sv_params) != CUSOLVER_STATUS_SUCCESS) {
		phos_err("cuda: cusolverDnCreateParams failed");
		return;
	}
	sv_status = 0;
}

/* The library loaded, the device's context current and its handle made:
 * 0 with *ret, or the error (*st NOT_INITIALIZED without a usable library). */
static int ready(struct phos_device *dev, cusolverDnHandle_t *ret, int *st)
{
	struct cuda_dev *d = cuda_dev(dev);
	int r;

	pthread_once(&sv_once, sv_load);
	*st = 0;
	if (sv_status < 0) {
		*st = CUSOLVER_STATUS_NOT_INITIALIZED;
		return 0;
	}
	r = cuda_current(d);
	if (r < 0)
		return r;
	pthread_mutex_lock(&d->lock);
	if (!d->solver) {
		cusolverDnHandle_t h;

		*st = sv.Create(&h);
		if (!*st)
			d->solver = h;
	}
	*ret = d->solver;
	pthread_mutex_unlock(&d->lock);
	return 0;
}

#define READY(h)                                   \
	do {                                       \
		int r_ = ready(dev, &(h), st);     \
		if (r_ < 0 || *st)                 \
			return r_;                 \
	} while (0)

void cuda_solver_release(struct cuda_dev *d)
{
	if (d->solver) {
		(void)sv.SetStream(d->solver, NULL);   /* (the last call's stream may be gone: a scrub destroyed it) */
		(void)sv.Destroy(d->solver);
	}
	d->solver = NULL;
}

static void *ptr(uint64_t a)
{
	return (void *)(uintptr_t)a;
}

/* The S or D function of c's type, with the same arguments (void pointers
 * become the type's pointers). */
#define SD(c, f, ...) ((c)->type == PHOS_SOLVER_R_64F ? sv.D##f(__VA_ARGS__) : sv.S##f(__VA_ARGS__))

static int cuda_solver_version(struct phos_device *dev, struct phos_reply_solver_version *ret, int *st)
{
	cusolverDnHandle_t h;

	READY(h);
	*st = sv.GetVersion(&ret->version);
	if (!*st)
		*st = sv.GetProperty(MAJOR_VERSION, &ret->major);
	if (!*st)
		*st = sv.GetProperty(MINOR_VERSION, &ret->minor);
	if (!*st)
		*st = sv.GetProperty(PATCH_LEVEL, &ret->patch);
	return 0;
}

/* The 64-bit API's workspaces of c (bytes, device and host). */
static cusolverStatus_t x_size(cusolverDnHandle_t h, const struct phos_solver_call *c, size_t *dev, size_t *host)
{
	cudaDataType dt = (cudaDataType)c->type;
	cublasFillMode_t uplo = (cublasFillMode_t)c->uplo;

	switch (c->kind) {
	case PHOS_SOLVER_GETRF:
		return sv.Xgetrf_bufferSize(h, sv_params, c->m, c->n, dt, ptr(c->a), c->lda, dt, dev, host);
	case PHOS_SOLVER_POTRF:
		return sv.Xpotrf_bufferSize(h, sv_params, uplo, c->n, dt, ptr(c->a), c->lda, dt, dev, host);
	case PHOS_SOLVER_GEQRF:
		return sv.Xgeqrf_bufferSize(h, sv_params, c->m, c->n, dt, ptr(c->a), c->lda, dt, ptr(c->tau), dt, dev,
					    host);
	case PHOS_SOLVER_SYEVD:
		if (c->batch)
			return sv.XsyevBatched_bufferSize(h, sv_params, (cusolverEigMode_t)c->jobz, uplo, c->n, dt,
							  ptr(c->a), c->lda, dt, ptr(c->w), dt, dev, host, c->batch);
		return sv.Xsyevd_bufferSize(h, sv_params, (cusolverEigMode_t)c->jobz, uplo, c->n, dt, ptr(c->a), c->lda,
					    dt, ptr(c->w), dt, dev, host);
	default:   /* getrs, potrs: none */
		*dev = *host = 0;
		return CUSOLVER_STATUS_SUCCESS;
	}
}

/* The Jacobi calls' info objects, made for one call from its settings
 * (host objects; destroyed once the call is done: it writes its residual
 * and sweeps there). */
struct jinfo {
	syevjInfo_t e;
	gesvdjInfo_t g;
};

static cusolverStatus_t jinfo_make(const struct phos_solver_call *c, struct jinfo *j)
{
	cusolverStatus_t st;

	memset(j, 0, sizeof(*j));
	if (c->kind == PHOS_SOLVER_SYEVJ) {
		st = sv.CreateSyevjInfo(&j->e);
		if (!st && c->tol > 0)
			st = sv.XsyevjSetTolerance(j->e, c->tol);
		if (!st && c->max_sweeps > 0)
			st = sv.XsyevjSetMaxSweeps(j->e, c->max_sweeps);
		if (!st)
			st = sv.XsyevjSetSortEig(j->e, c->sort);
	} else if (c->kind == PHOS_SOLVER_GESVDJ) {
		st = sv.CreateGesvdjInfo(&j->g);
		if (!st && c->tol > 0)
			st = sv.XgesvdjSetTolerance(j->g, c->tol);
		if (!st && c->max_sweeps > 0)
			st = sv.XgesvdjSetMaxSweeps(j->g, c->max_sweeps);
		if (!st)
			st = sv.XgesvdjSetSortEig(j->g, c->sort);
	} else {
		return CUSOLVER_STATUS_SUCCESS;
	}
	return st;
}

static void jinfo_drop(struct jinfo *j)
{
	if (j->e)
		(void)sv.DestroySyevjInfo(j->e);
	if (j->g)
		(void)sv.DestroyGesvdjInfo(j->g);
}

/* The Jacobi calls' workspace (elements). */
static cusolverStatus_t jacobi_size(cusolverDnHandle_t h, const struct phos_solver_call *c, const struct jinfo *j,
				    int *lwork)
{
	cusolverEigMode_t jobz = (cusolverEigMode_t)c->jobz;
	cublasFillMode_t uplo = (cublasFillMode_t)c->uplo;
	int m = (int)c->m, n = (int)c->n, lda = (int)c->lda, ldu = (int)c->ldu, ldv = (int)c->ldv;
	void *a = ptr(c->a), *w = ptr(c->w), *u = ptr(c->u), *v = ptr(c->v);

	if (c->kind == PHOS_SOLVER_SYEVJ && c->batch)
		return SD(c, syevjBatched_bufferSize, h, jobz, uplo, n, a, lda, w, lwork, j->e, (int)c->batch);
	if (c->kind == PHOS_SOLVER_SYEVJ)
		return SD(c, syevj_bufferSize, h, jobz, uplo, n, a, lda, w, lwork, j->e);
	if (c->batch)
		return SD(c, gesvdjBatched_bufferSize, h, jobz, m, n, a, lda, w, u, ldu, v, ldv, lwork, j->g,
			  (int)c->batch);
	return SD(c, gesvdj_bufferSize, h, jobz, c->econ, m, n, a, lda, w, u, ldu, v, ldv, lwork, j->g);
}

/* A Jacobi call, waited for (its info object goes after it). */
static cusolverStatus_t jacobi_exec(cusolverDnHandle_t h, const struct phos_solver_call *c, void *stream)
{
	cusolverEigMode_t jobz = (cusolverEigMode_t)c->jobz;
	cublasFillMode_t uplo = (cublasFillMode_t)c->uplo;
	int m = (int)c->m, n = (int)c->n, lda = (int)c->lda, ldu = (int)c->ldu, ldv = (int)c->ldv;
	int lwork = (int)c->lwork, *info = ptr(c->info);
	void *a = ptr(c->a), *w = ptr(c->w), *u = ptr(c->u), *v = ptr(c->v), *work = ptr(c->work);
	struct jinfo j;
	cusolverStatus_t st = jinfo_make(c, &j);

	if (!st && c->kind == PHOS_SOLVER_SYEVJ && c->batch)
		st = SD(c, syevjBatched, h, jobz, uplo, n, a, lda, w, work, lwork, info, j.e, (int)c->batch);
	else if (!st && c->kind == PHOS_SOLVER_SYEVJ)
		st = SD(c, syevj, h, jobz, uplo, n, a, lda, w, work, lwork, info, j.e);
	else if (!st && c->batch)
		st = SD(c, gesvdjBatched, h, jobz, m, n, a, lda, w, u, ldu, v, ldv, work, lwork, info, j.g,
			(int)c->batch);
	else if (!st)
		st = SD(c, gesvdj, h, jobz, c->econ, m, n, a, lda, w, u, ldu, v, ldv, work, lwork, info, j.g);
	if (cuda_drv.StreamSynchronize((CUstream)stream) != CUDA_SUCCESS && !st)
		st = CUSOLVER_STATUS_EXECUTION_FAILED;
	jinfo_drop(&j);
	return st;
}

/* The legacy API's workspace of c (elements). */
static cusolverStatus_t legacy_size(cusolverDnHandle_t h, const struct phos_solver_call *c, int *lwork)
{
	cublasFillMode_t uplo = (cublasFillMode_t)c->uplo;
	int m = (int)c->m, n = (int)c->n, k = (int)c->k, lda = (int)c->lda;

	*lwork = 0;
	switch (c->kind) {
	case PHOS_SOLVER_GETRF:
		return SD(c, getrf_bufferSize, h, m, n, ptr(c->a), lda, lwork);
	case PHOS_SOLVER_POTRF:
		return SD(c, potrf_bufferSize, h, uplo, n, ptr(c->a), lda, lwork);
	case PHOS_SOLVER_GEQRF:
		return SD(c, geqrf_bufferSize, h, m, n, ptr(c->a), lda, lwork);
	case PHOS_SOLVER_ORGQR:
		return SD(c, orgqr_bufferSize, h, m, n, k, ptr(c->a), lda, ptr(c->tau), lwork);
	case PHOS_SOLVER_ORMQR:
		return SD(c, ormqr_bufferSize, h, (cublasSideMode_t)c->side, (cublasOperation_t)c->trans, m, n, k,
			  ptr(c->a), lda, ptr(c->tau), ptr(c->b), (int)c->ldb, lwork);
	case PHOS_SOLVER_SYEVD:
		return SD(c, syevd_bufferSize, h, (cusolverEigMode_t)c->jobz, uplo, n, ptr(c->a), lda, ptr(c->w),
			  lwork);
	default:   /* getrs, potrs: none */
		return CUSOLVER_STATUS_SUCCESS;
	}
}

static int cuda_solver_buffer_size(struct phos_device *dev, const struct phos_solver_call *c,
				   struct phos_reply_solver_size *ret, int *st)
{
	cusolverDnHandle_t h;
	size_t dw = 0, hw = 0;
	int lwork = 0;

	READY(h);
	*ret = (struct phos_reply_solver_size){ 0, 0 };
	if (c->x64) {
		*st = x_size(h, c, &dw, &hw);
		*ret = (struct phos_reply_solver_size){ (int64_t)dw, (int64_t)hw };
	} else if (c->kind == PHOS_SOLVER_SYEVJ || c->kind == PHOS_SOLVER_GESVDJ) {
		struct jinfo j;

		*st = jinfo_make(c, &j);
		if (!*st)
			*st = jacobi_size(h, c, &j, &lwork);
		jinfo_drop(&j);
		ret->work = lwork;
	} else {
		*st = legacy_size(h, c, &lwork);
		ret->work = lwork;
	}
	return 0;
}

/* A 64-bit API call, its host workspace the backend's (hw, hb bytes). */
static cusolverStatus_t x_exec(cusolverDnHandle_t h, const struct phos_solver_call *c, void *hw, size_t hb)
{
	cudaDataType dt = (cudaDataType)c->type;
	cublasFillMode_t uplo = (cublasFillMode_t)c->uplo;
	void *a = ptr(c->a), *work = ptr(c->work);
	size_t lwork = (size_t)c->lwork;
	int *info = ptr(c->info);

	switch (c->kind) {
	case PHOS_SOLVER_GETRF:
		return sv.Xgetrf(h, sv_params, c->m, c->n, dt, a, c->lda, ptr(c->ipiv), dt, work, lwork, hw, hb, info);
	case PHOS_SOLVER_GETRS:
		return sv.Xgetrs(h, sv_params, (cublasOperation_t)c->trans, c->n, c->nrhs, dt, a, c->lda, ptr(c->ipiv), dt,
				 ptr(c->b), c->ldb, info);
	case PHOS_SOLVER_POTRF:
		return sv.Xpotrf(h, sv_params, uplo, c->n, dt, a, c->lda, dt, work, lwork, hw, hb, info);
	case PHOS_SOLVER_POTRS:
		return sv.Xpotrs(h, sv_params, uplo, c->n, c->nrhs, dt, a, c->lda, dt, ptr(c->b), c->ldb, info);
	case PHOS_SOLVER_GEQRF:
		return sv.Xgeqrf(h, sv_params, c->m, c->n, dt, a, c->lda, dt, ptr(c->tau), dt, work, lwork, hw, hb, info);
	case PHOS_SOLVER_SYEVD:
		if (c->batch)
			return sv.XsyevBatched(h, sv_params, (cusolverEigMode_t)c->jobz, uplo, c->n, dt, a, c->lda, dt,
					       ptr(c->w), dt, work, lwork, hw, hb, info, c->batch);
		return sv.Xsyevd(h, sv_params, (cusolverEigMode_t)c->jobz, uplo, c->n, dt, a, c->lda, dt, ptr(c->w), dt,
				 work, lwork, hw, hb, info);
	default:
		return CUSOLVER_STATUS_INVALID_VALUE;
	}
}

/* x_exec with a host workspace of c->host_bytes (none: none), the call
 * waited for before the workspace may serve another. */
static int x_exec_host(cusolverDnHandle_t h, const struct phos_solver_call *c, void *stream, int *st)
{
	size_t hb = (size_t)c->host_bytes;

	if (!hb) {
		*st = x_exec(h, c, NULL, 0);
		return 0;
	}
	pthread_mutex_lock(&host_lock);
	if (host_size < hb) {
		void *p = realloc(host_work, hb);

		if (!p) {
			pthread_mutex_unlock(&host_lock);
			*st = CUSOLVER_STATUS_ALLOC_FAILED;
			return 0;
		}
		host_work = p;
		host_size = hb;
	}
	*st = x_exec(h, c, host_work, hb);
	if (!*st && cuda_drv.StreamSynchronize((CUstream)stream) != CUDA_SUCCESS)
		*st = CUSOLVER_STATUS_EXECUTION_FAILED;
	pthread_mutex_unlock(&host_lock);
	return 0;
}

static int cuda_solver_exec(struct phos_device *dev, const struct phos_solver_call *c, void *stream, int *st)
{
	cublasFillMode_t uplo = (cublasFillMode_t)c->uplo;
	int m = (int)c->m, n = (int)c->n, k = (int)c->k, lda = (int)c->lda, ldb = (int)c->ldb;
	int nrhs = (int)c->nrhs, lwork = (int)c->lwork;
	void *a = ptr(c->a), *b = ptr(c->b), *tau = ptr(c->tau), *work = ptr(c->work);
	int *ipiv = ptr(c->ipiv), *info = ptr(c->info);
	cusolverDnHandle_t h;

	READY(h);
	*st = sv.SetStream(h, stream);
	if (*st)
		return 0;
	if (c->x64)
		return x_exec_host(h, c, stream, st);
	if (c->kind == PHOS_SOLVER_SYEVJ || c->kind == PHOS_SOLVER_GESVDJ) {
		*st = jacobi_exec(h, c, stream);
		return 0;
	}
	switch (c->kind) {
	case PHOS_SOLVER_GETRF:
		*st = SD(c, getrf, h, m, n, a, lda, work, ipiv, info);
		break;
	case PHOS_SOLVER_GETRS:
		*st = SD(c, getrs, h, (cublasOperation_t)c->trans, n, nrhs, a, lda, ipiv, b, ldb, info);
		break;
	case PHOS_SOLVER_POTRF:
		*st = SD(c, potrf, h, uplo, n, a, lda, work, lwork, info);
		break;
	case PHOS_SOLVER_POTRS:
		*st = SD(c, potrs, h, uplo, n, nrhs, a, lda, b, ldb, info);
		break;
	case PHOS_SOLVER_GEQRF:
		*st = SD(c, geqrf, h, m, n, a, lda, tau, work, lwork, info);
		break;
	case PHOS_SOLVER_ORGQR:
		*st = SD(c, orgqr, h, m, n, k, a, lda, tau, work, lwork, info);
		break;
	case PHOS_SOLVER_ORMQR:
		*st = SD(c, ormqr, h, (cublasSideMode_t)c->side, (cublasOperation_t)c->trans, m, n, k, a, lda, tau, b,
			 ldb, work, lwork, info);
		break;
	case PHOS_SOLVER_SYEVD:
		*st = SD(c, syevd, h, (cusolverEigMode_t)c->jobz, uplo, n, a, lda, ptr(c->w), work, lwork, info);
		break;
	case PHOS_SOLVER_POTRF_BATCHED:   /* (a, b: device arrays of pointers) */
		*st = SD(c, potrfBatched, h, uplo, n, a, lda, info, (int)c->batch);
		break;
	case PHOS_SOLVER_POTRS_BATCHED:
		*st = SD(c, potrsBatched, h, uplo, n, nrhs, a, lda, b, ldb, info, (int)c->batch);
		break;
	default:
		*st = CUSOLVER_STATUS_INVALID_VALUE;
	}
	return 0;
}

const struct phos_solver_ops phos_solver_cuda = {
	.version = cuda_solver_version,
	.buffer_size = cuda_solver_buffer_size,
	.exec = cuda_solver_exec,
};
