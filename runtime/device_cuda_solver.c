/* SPDX-License-Identifier: MIT */
/*
 * cuSOLVER's dense API on the cuda device (solver_dev.h): the real
 * libcusolver.so.12, loaded at the first cuSOLVER record
 * (runtime/libfind.h: $PHOS_CUSOLVER_LIB, the loader path, the CUDA 13
 * wheels' nvidia/cu13/lib that PyTorch depends on, the toolkit), so a
 * program that never calls cuSOLVER never loads it.
 *
 * One cusolverDn handle per device (d->solver), made at the first call and
 * destroyed with the device; each call sets its stream. The function's
 * handles are the preload's, so a new executor (after a restore) simply
 * makes its own at its first call. The device's context is current for
 * every call. Each S/D pair is chosen by the call's type; its workspace is
 * the program's, of c->lwork elements (the _bufferSize's answer for
 * getrf, which takes no size).
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
	SV_PAIR(X, syevd_bufferSize) SV_PAIR(X, syevd)

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

static int cuda_solver_buffer_size(struct phos_device *dev, const struct phos_solver_call *c, int64_t *ret, int *st)
{
	cublasFillMode_t uplo = (cublasFillMode_t)c->uplo;
	int m = (int)c->m, n = (int)c->n, k = (int)c->k, lda = (int)c->lda, lwork = 0;
	cusolverDnHandle_t h;

	READY(h);
	*ret = 0;
	switch (c->kind) {
	case PHOS_SOLVER_GETRF:
		*st = SD(c, getrf_bufferSize, h, m, n, ptr(c->a), lda, &lwork);
		break;
	case PHOS_SOLVER_POTRF:
		*st = SD(c, potrf_bufferSize, h, uplo, n, ptr(c->a), lda, &lwork);
		break;
	case PHOS_SOLVER_GEQRF:
		*st = SD(c, geqrf_bufferSize, h, m, n, ptr(c->a), lda, &lwork);
		break;
	case PHOS_SOLVER_ORGQR:
		*st = SD(c, orgqr_bufferSize, h, m, n, k, ptr(c->a), lda, ptr(c->tau), &lwork);
		break;
	case PHOS_SOLVER_ORMQR:
		*st = SD(c, ormqr_bufferSize, h, (cublasSideMode_t)c->side, (cublasOperation_t)c->trans, m, n, k,
			 ptr(c->a), lda, ptr(c->tau), ptr(c->b), (int)c->ldb, &lwork);
		break;
	case PHOS_SOLVER_SYEVD:
		*st = SD(c, syevd_bufferSize, h, (cusolverEigMode_t)c->jobz, uplo, n, ptr(c->a), lda, ptr(c->w),
			 &lwork);
		break;
	default:   /* getrs, potrs: none */
		*st = CUSOLVER_STATUS_SUCCESS;
	}
	*ret = lwork;
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
