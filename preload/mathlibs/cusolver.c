/* SPDX-License-Identifier: MIT */
/*
 * The cuSOLVER stand-in (libcusolver.so.12): cusolverDn handles kept here,
 * the dense LAPACK-like calls forwarded with their whole description and
 * run by the executor with the real cuSOLVER (the sim device's plain
 * reference in CI).
 *
 *   cusolverDnCreate ──────────── a handle here: device, stream
 *   cusolverDnCreateParams ────── a params object here (the default
 *                                 algorithm only)
 *   cusolverDnCreateSyevjInfo, ── the Jacobi settings here (tolerance,
 *   CreateGesvdjInfo, Set*        sweeps, sort), sent with each call
 *   S/D getrf, getrs, potrf, ──── SOLVER_EXEC, stream-ordered on the handle's
 *   potrs, geqrf, orgqr, ormqr,   stream: one phos_solver_call; the executor
 *   syevd, syevj(Batched),        takes the read/write set from it
 *   gesvdj(Batched); Xgetrf,      (exec_solver.c), info included
 *   Xgetrs, Xpotrf, Xpotrs,
 *   Xgeqrf, Xsyevd, XsyevBatched; (the batched Cholesky: the executor reads
 *   potrfBatched, potrsBatched    the matrices' pointers from their arrays)
 *   *_bufferSize ──────────────── sync SOLVER_SIZE: the executor's library
 *                                 answers for this call
 *
 * The executor keeps nothing of the program's: its own cusolverDn handle per
 * device is made at its first call, so after a restore (at phos_fn_serve or
 * of a checkpoint) the new executor makes one again and every handle here
 * goes on as it was, with no fenced section needed.
 *
 * Forwarded: float and double (the S and D functions), every argument
 * checked against LAPACK's rules before it leaves the process
 * (runtime/libs/solver_layout.c; a bad one answers CUSOLVER_STATUS_INVALID_VALUE).
 * Refused with CUSOLVER_STATUS_NOT_SUPPORTED, named once on stderr: a call
 * on a capturing stream or on memory other than cudaMalloc's, an algorithm
 * other than the default in cusolverDnSetAdvOptions, 64-bit calls of
 * complex, half or mixed types. Every export not implemented here (complex
 * types, gesvd, Xgesvd, Xgeev, sytrf, the Jacobi infos' Get* results,
 * cusolverSp, cusolverRf, ...) is a stub answering NOT_SUPPORTED and named once in the
 * log (stubs_cusolver.c).
 */
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <cusolverDn.h>

#include "internal.h"
#include "log.h"

#define HANDLE_MAGIC 0x73766831u   /* "svh1" */
#define PARAMS_MAGIC 0x73767031u   /* "svp1" */

struct cusolverDnContext {
	uint32_t magic;
	int device;                 /* current at cusolverDnCreate, as cuSOLVER binds it */
	cudaStream_t stream;
	cusolverDeterministicMode_t mode;   /* as set (the executor's handle stays deterministic) */
};

struct cusolverDnParams {
	uint32_t magic;
};

/* NOT_SUPPORTED, said once per reason on stderr. */
static cusolverStatus_t refuse(const char *what)
{
	phos_refuse_once("cuSOLVER", what, ": CUSOLVER_STATUS_NOT_SUPPORTED");
	return CUSOLVER_STATUS_NOT_SUPPORTED;
}

/* A call's result: the library status when the executor gave one, else the
 * CUDA error's nearest status. */
static cusolverStatus_t status_of(int r, int st)
{
	if (st)
		return (cusolverStatus_t)st;
	switch (r) {
	case cudaSuccess: return CUSOLVER_STATUS_SUCCESS;
	case cudaErrorNotSupported: return CUSOLVER_STATUS_NOT_SUPPORTED;
	case cudaErrorInvalidValue: return CUSOLVER_STATUS_INVALID_VALUE;
	case cudaErrorMemoryAllocation: return CUSOLVER_STATUS_ALLOC_FAILED;
	case cudaErrorInitializationError: case cudaErrorDevicesUnavailable: return CUSOLVER_STATUS_NOT_INITIALIZED;
	default: return CUSOLVER_STATUS_EXECUTION_FAILED;
	}
}

/* --- versions --- */

static struct phos_reply_solver_version version;
static pthread_once_t version_once = PTHREAD_ONCE_INIT;

static void version_ask(void)
{
	size_t len = 0;
	int st = 0;

	if (phos_preload_connect() != 0 ||
	    status_of(phos_preload_call(PHOS_OP_SOLVER_VERSION, NULL, 0, NULL, 0, &version, sizeof(version), &len,
					&st),
		      st) != CUSOLVER_STATUS_SUCCESS || len != sizeof(version)) {
		memset(&version, 0, sizeof(version));
		fprintf(stderr, "phos-fn: cuSOLVER: the executor has no cuSOLVER (libcusolver.so.12 not found there: "
				"PHOS_CUSOLVER_LIB): every cuSOLVER call fails\n");
	}
}

PHOS_EXPORT cusolverStatus_t cusolverGetVersion(int *value)
{
	if (!value)
		return CUSOLVER_STATUS_INVALID_VALUE;
	pthread_once(&version_once, version_ask);
	*value = version.version;
	return version.version ? CUSOLVER_STATUS_SUCCESS : CUSOLVER_STATUS_NOT_INITIALIZED;
}

PHOS_EXPORT cusolverStatus_t cusolverGetProperty(libraryPropertyType type, int *value)
{
	if (!value)
		return CUSOLVER_STATUS_INVALID_VALUE;
	pthread_once(&version_once, version_ask);
	if (!version.version)
		return CUSOLVER_STATUS_NOT_INITIALIZED;
	switch (type) {
	case MAJOR_VERSION: *value = version.major; break;
	case MINOR_VERSION: *value = version.minor; break;
	case PATCH_LEVEL: *value = version.patch; break;
	default: return CUSOLVER_STATUS_INVALID_VALUE;
	}
	return CUSOLVER_STATUS_SUCCESS;
}

/* --- handles and params --- */

static bool handle_ok(const struct cusolverDnContext *h)
{
	return h && h->magic == HANDLE_MAGIC;
}

PHOS_EXPORT cusolverStatus_t cusolverDnCreate(cusolverDnHandle_t *handle)
{
	struct cusolverDnContext *h;
	int device = 0;

	if (!handle)
		return CUSOLVER_STATUS_INVALID_VALUE;
	if (phos_preload_connect() != 0 || cudaGetDevice(&device) != cudaSuccess)
		return CUSOLVER_STATUS_NOT_INITIALIZED;
	h = calloc(1, sizeof(*h));
	if (!h)
		return CUSOLVER_STATUS_ALLOC_FAILED;
	*h = (struct cusolverDnContext){ .magic = HANDLE_MAGIC, .device = device, .mode = CUSOLVER_DETERMINISTIC_RESULTS };
	*handle = h;
	return CUSOLVER_STATUS_SUCCESS;
}

PHOS_EXPORT cusolverStatus_t cusolverDnDestroy(cusolverDnHandle_t handle)
{
	if (!handle_ok(handle))
		return CUSOLVER_STATUS_NOT_INITIALIZED;
	handle->magic = 0;
	free(handle);
	return CUSOLVER_STATUS_SUCCESS;
}

PHOS_EXPORT cusolverStatus_t cusolverDnSetStream(cusolverDnHandle_t handle, cudaStream_t streamId)
{
	if (!handle_ok(handle))
		return CUSOLVER_STATUS_NOT_INITIALIZED;
	handle->stream = streamId;   /* (checked where a call runs on it) */
	return CUSOLVER_STATUS_SUCCESS;
}

PHOS_EXPORT cusolverStatus_t cusolverDnGetStream(cusolverDnHandle_t handle, cudaStream_t *streamId)
{
	if (!handle_ok(handle))
		return CUSOLVER_STATUS_NOT_INITIALIZED;
	if (!streamId)
		return CUSOLVER_STATUS_INVALID_VALUE;
	*streamId = handle->stream;
	return CUSOLVER_STATUS_SUCCESS;
}

/* Deterministic results are cuSOLVER's default and what the executor's
 * handle gives; allowing others is accepted (deterministic ones are allowed
 * too) and remembered for the getter. */
PHOS_EXPORT cusolverStatus_t cusolverDnSetDeterministicMode(cusolverDnHandle_t handle, cusolverDeterministicMode_t mode)
{
	if (!handle_ok(handle))
		return CUSOLVER_STATUS_NOT_INITIALIZED;
	if (mode != CUSOLVER_DETERMINISTIC_RESULTS && mode != CUSOLVER_ALLOW_NON_DETERMINISTIC_RESULTS)
		return CUSOLVER_STATUS_INVALID_VALUE;
	handle->mode = mode;
	return CUSOLVER_STATUS_SUCCESS;
}

PHOS_EXPORT cusolverStatus_t cusolverDnGetDeterministicMode(cusolverDnHandle_t handle, cusolverDeterministicMode_t *mode)
{
	if (!handle_ok(handle))
		return CUSOLVER_STATUS_NOT_INITIALIZED;
	if (!mode)
		return CUSOLVER_STATUS_INVALID_VALUE;
	*mode = handle->mode;
	return CUSOLVER_STATUS_SUCCESS;
}

PHOS_EXPORT cusolverStatus_t cusolverDnCreateParams(cusolverDnParams_t *params)
{
	struct cusolverDnParams *p;

	if (!params)
		return CUSOLVER_STATUS_INVALID_VALUE;
	p = calloc(1, sizeof(*p));
	if (!p)
		return CUSOLVER_STATUS_ALLOC_FAILED;
	p->magic = PARAMS_MAGIC;
	*params = p;
	return CUSOLVER_STATUS_SUCCESS;
}

PHOS_EXPORT cusolverStatus_t cusolverDnDestroyParams(cusolverDnParams_t params)
{
	if (!params || params->magic != PARAMS_MAGIC)
		return CUSOLVER_STATUS_INVALID_VALUE;
	params->magic = 0;
	free(params);
	return CUSOLVER_STATUS_SUCCESS;
}

/* The default algorithm (CUSOLVER_ALG_0) of every function is what is
 * forwarded; asking for another is refused, not ignored. */
PHOS_EXPORT cusolverStatus_t cusolverDnSetAdvOptions(cusolverDnParams_t params, cusolverDnFunction_t function,
						     cusolverAlgMode_t algo)
{
	if (!params || params->magic != PARAMS_MAGIC || (unsigned)function > CUSOLVERDN_SYEVBATCHED)
		return CUSOLVER_STATUS_INVALID_VALUE;
	if (algo != CUSOLVER_ALG_0)
		return refuse("cusolverDnSetAdvOptions with an algorithm other than CUSOLVER_ALG_0");
	return CUSOLVER_STATUS_SUCCESS;
}

/* --- calls --- */

static bool in_arena(uint64_t a)
{
	const struct phos_reply_hello *h = phos_preload_hello();

	return h && a >= h->arena_base && a < h->arena_base + h->arena_size;
}

/* Refuses a form of call name, naming both once. */
static cusolverStatus_t refuse_call(const char *name, const char *form)
{
	char what[160];

	snprintf(what, sizeof(what), "%s %s", name, form);
	return refuse(what);
}

static uint64_t addr(const void *p)
{
	return (uint64_t)(uintptr_t)p;
}

/* A call of kind on handle h, of the type of its S or D function. */
static cusolverStatus_t call_init(cusolverDnHandle_t h, enum phos_solver_kind kind, int32_t type,
				  struct phos_solver_call *c)
{
	memset(c, 0, sizeof(*c));
	if (!handle_ok(h))
		return CUSOLVER_STATUS_NOT_INITIALIZED;
	c->kind = kind;
	c->device = h->device;
	c->type = type;
	c->lwork = -1;
	return CUSOLVER_STATUS_SUCCESS;
}

/* The workspaces of c (a _bufferSize): SOLVER_SIZE. */
static cusolverStatus_t query(struct phos_solver_call *c, struct phos_reply_solver_size *ret)
{
	size_t len = 0;
	int st = 0, rc;

	rc = phos_preload_call(PHOS_OP_SOLVER_SIZE, c, sizeof(*c), NULL, 0, ret, sizeof(*ret), &len, &st);
	if (status_of(rc, st) != CUSOLVER_STATUS_SUCCESS)
		return status_of(rc, st);
	if (len != sizeof(*ret) || ret->work < 0 || ret->host < 0 || (!c->x64 && ret->work > INT_MAX))
		return CUSOLVER_STATUS_INTERNAL_ERROR;
	return CUSOLVER_STATUS_SUCCESS;
}

/* Checks c (its arguments, its memory) and sends it: SOLVER_SIZE into
 * *ret_size when it is not NULL, else SOLVER_EXEC on the handle's stream. */
static cusolverStatus_t forward_x(const char *name, cusolverDnHandle_t h, struct phos_solver_call *c,
				  struct phos_reply_solver_size *ret_size)
{
	struct phos_solver_range r[PHOS_SOLVER_RANGES];
	uint32_t n = 0;
	int st, rc;

	c->query = ret_size != NULL;
	if (c->query && !phos_solver_has_work(c->kind))
		return CUSOLVER_STATUS_INVALID_VALUE;
	st = phos_solver_ranges_of(c, c->lwork > 0 ? c->lwork : 0, r, &n);
	if (st) {   /* LAPACK's rules (solver_layout.c): the program sees the status, the log says why */
		phos_debug("%s: status %d: m %lld n %lld k %lld nrhs %lld lda %lld ldb %lld lwork %lld a %#llx "
			   "tau %#llx info %#llx", name, st, (long long)c->m, (long long)c->n, (long long)c->k,
			   (long long)c->nrhs, (long long)c->lda, (long long)c->ldb, (long long)c->lwork,
			   (unsigned long long)c->a, (unsigned long long)c->tau, (unsigned long long)c->info);
		return (cusolverStatus_t)st;
	}
	if (c->query)   /* (a size query may name memory not yet allocated) */
		return query(c, ret_size);
	for (uint32_t i = 0; i < n; i++)
		if (!in_arena(r[i].addr))
			return refuse_call(name, "on memory other than cudaMalloc's (host or managed memory)");
	if (c->work && !in_arena(c->work))
		return refuse_call(name, "with a workspace other than cudaMalloc's");
	rc = phos_preload_stream_id(h->stream, &c->stream);
	if (rc == cudaErrorStreamCaptureUnsupported)
		return refuse_call(name, "on a stream that is capturing a graph");
	if (rc != cudaSuccess)
		return CUSOLVER_STATUS_INVALID_VALUE;
	return status_of(phos_preload_post(PHOS_OP_SOLVER_EXEC, c, sizeof(*c), NULL, 0), 0);
}

/* forward_x of the legacy API: the workspace in *ret_lwork, elements. */
static cusolverStatus_t forward(const char *name, cusolverDnHandle_t h, struct phos_solver_call *c, int *ret_lwork)
{
	struct phos_reply_solver_size size;
	cusolverStatus_t s = forward_x(name, h, c, ret_lwork ? &size : NULL);

	if (!s && ret_lwork)
		*ret_lwork = (int)size.work;
	return s;
}

/* The S and D functions, one body for both: their type, and the name they
 * are refused under. Pointers as addresses, sizes as LAPACK's ints. */
static cusolverStatus_t getrf(const char *name, cusolverDnHandle_t handle, int32_t type, int m, int n,
			      const void *A, int lda, const void *work, const int *ipiv, int *info, int *ret_lwork)
{
	struct phos_solver_call c;
	cusolverStatus_t s = call_init(handle, PHOS_SOLVER_GETRF, type, &c);

	if (s)
		return s;
	if (!ret_lwork && !work)
		return CUSOLVER_STATUS_INVALID_VALUE;
	c.m = m;
	c.n = n;
	c.lda = lda;
	c.a = addr(A);
	c.work = addr(work);
	c.ipiv = addr(ipiv);
	c.info = addr(info);
	return forward(name, handle, &c, ret_lwork);
}

static cusolverStatus_t getrs(const char *name, cusolverDnHandle_t handle, int32_t type, cublasOperation_t trans,
			      int n, int nrhs, const void *A, int lda, const int *ipiv, void *B, int ldb, int *info)
{
	struct phos_solver_call c;
	cusolverStatus_t s = call_init(handle, PHOS_SOLVER_GETRS, type, &c);

	if (s)
		return s;
	c.trans = trans;
	c.n = n;
	c.nrhs = nrhs;
	c.lda = lda;
	c.ldb = ldb;
	c.a = addr(A);
	c.ipiv = addr(ipiv);
	c.b = addr(B);
	c.info = addr(info);
	c.lwork = 0;
	return forward(name, handle, &c, NULL);
}

/* lwork: the program's (-1 in a query) */
static cusolverStatus_t potrf(const char *name, cusolverDnHandle_t handle, int32_t type, cublasFillMode_t uplo,
			      int n, const void *A, int lda, const void *work, int lwork, int *info, int *ret_lwork)
{
	struct phos_solver_call c;
	cusolverStatus_t s = call_init(handle, PHOS_SOLVER_POTRF, type, &c);

	if (s)
		return s;
	c.uplo = uplo;
	c.n = n;
	c.lda = lda;
	c.a = addr(A);
	c.work = addr(work);
	c.lwork = ret_lwork ? -1 : lwork;
	c.info = addr(info);
	if (!ret_lwork && lwork < 0)
		return CUSOLVER_STATUS_INVALID_VALUE;
	return forward(name, handle, &c, ret_lwork);
}

static cusolverStatus_t potrs(const char *name, cusolverDnHandle_t handle, int32_t type, cublasFillMode_t uplo,
			      int n, int nrhs, const void *A, int lda, void *B, int ldb, int *info)
{
	struct phos_solver_call c;
	cusolverStatus_t s = call_init(handle, PHOS_SOLVER_POTRS, type, &c);

	if (s)
		return s;
	c.uplo = uplo;
	c.n = n;
	c.nrhs = nrhs;
	c.lda = lda;
	c.ldb = ldb;
	c.a = addr(A);
	c.b = addr(B);
	c.info = addr(info);
	c.lwork = 0;
	return forward(name, handle, &c, NULL);
}

static cusolverStatus_t geqrf(const char *name, cusolverDnHandle_t handle, int32_t type, int m, int n,
			      const void *A, int lda, const void *tau, const void *work, int lwork, int *info,
			      int *ret_lwork)
{
	struct phos_solver_call c;
	cusolverStatus_t s = call_init(handle, PHOS_SOLVER_GEQRF, type, &c);

	if (s)
		return s;
	c.m = m;
	c.n = n;
	c.lda = lda;
	c.a = addr(A);
	c.tau = addr(tau);
	c.work = addr(work);
	c.lwork = ret_lwork ? -1 : lwork;
	c.info = addr(info);
	if (!ret_lwork && lwork < 0)
		return CUSOLVER_STATUS_INVALID_VALUE;
	return forward(name, handle, &c, ret_lwork);
}

static cusolverStatus_t orgqr(const char *name, cusolverDnHandle_t handle, int32_t type, int m, int n, int k,
			      const void *A, int lda, const void *tau, const void *work, int lwork, int *info,
			      int *ret_lwork)
{
	struct phos_solver_call c;
	cusolverStatus_t s = call_init(handle, PHOS_SOLVER_ORGQR, type, &c);

	if (s)
		return s;
	c.m = m;
	c.n = n;
	c.k = k;
	c.lda = lda;
	c.a = addr(A);
	c.tau = addr(tau);
	c.work = addr(work);
	c.lwork = ret_lwork ? -1 : lwork;
	c.info = addr(info);
	if (!ret_lwork && lwork < 0)
		return CUSOLVER_STATUS_INVALID_VALUE;
	return forward(name, handle, &c, ret_lwork);
}

struct ormqr_args {
	cublasSideMode_t side;
	cublasOperation_t trans;
	int m, n, k;
	const void *A;
	int lda;
	const void *tau, *C;
	int ldc;
	const void *work;
	int lwork;
	int *info;
};

static cusolverStatus_t ormqr(const char *name, cusolverDnHandle_t handle, int32_t type, const struct ormqr_args *o,
			      int *ret_lwork)
{
	struct phos_solver_call c;
	cusolverStatus_t s = call_init(handle, PHOS_SOLVER_ORMQR, type, &c);

	if (s)
		return s;
	c.side = o->side;
	c.trans = o->trans;
	c.m = o->m;
	c.n = o->n;
	c.k = o->k;
	c.lda = o->lda;
	c.ldb = o->ldc;
	c.a = addr(o->A);
	c.tau = addr(o->tau);
	c.b = addr(o->C);
	c.work = addr(o->work);
	c.lwork = ret_lwork ? -1 : o->lwork;
	c.info = addr(o->info);
	if (!ret_lwork && o->lwork < 0)
		return CUSOLVER_STATUS_INVALID_VALUE;
	return forward(name, handle, &c, ret_lwork);
}

static cusolverStatus_t syevd(const char *name, cusolverDnHandle_t handle, int32_t type, cusolverEigMode_t jobz,
			      cublasFillMode_t uplo, int n, const void *A, int lda, const void *W, const void *work,
			      int lwork, int *info, int *ret_lwork)
{
	struct phos_solver_call c;
	cusolverStatus_t s = call_init(handle, PHOS_SOLVER_SYEVD, type, &c);

	if (s)
		return s;
	c.jobz = jobz;
	c.uplo = uplo;
	c.n = n;
	c.lda = lda;
	c.a = addr(A);
	c.w = addr(W);
	c.work = addr(work);
	c.lwork = ret_lwork ? -1 : lwork;
	c.info = addr(info);
	if (!ret_lwork && lwork < 0)
		return CUSOLVER_STATUS_INVALID_VALUE;
	return forward(name, handle, &c, ret_lwork);
}

#define DEFINE_SD(P, T, TY_)                                                                                      \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##getrf_bufferSize(cusolverDnHandle_t handle, int m, int n,     \
								     T *A, int lda, int *Lwork)                   \
	{                                                                                                         \
		return !Lwork ? CUSOLVER_STATUS_INVALID_VALUE : getrf("cusolverDn" #P "getrf", handle,            \
			     TY_, m, n, A, lda, NULL, NULL, NULL, Lwork);                                         \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##getrf(cusolverDnHandle_t handle, int m, int n, T *A, int lda, \
							  T *Workspace, int *devIpiv, int *devInfo)               \
	{                                                                                                         \
		return getrf("cusolverDn" #P "getrf", handle, TY_, m, n, A, lda, Workspace, devIpiv,              \
			     devInfo, NULL);                                                                      \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##getrs(cusolverDnHandle_t handle, cublasOperation_t trans,     \
							  int n, int nrhs, const T *A, int lda, const int *devIpiv, \
							  T *B, int ldb, int *devInfo)                            \
	{                                                                                                         \
		return getrs("cusolverDn" #P "getrs", handle, TY_, trans, n, nrhs, A, lda, devIpiv, B,            \
			     ldb, devInfo);                                                                       \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##potrf_bufferSize(cusolverDnHandle_t handle,                   \
								     cublasFillMode_t uplo, int n, T *A, int lda, \
								     int *Lwork)                                  \
	{                                                                                                         \
		return !Lwork ? CUSOLVER_STATUS_INVALID_VALUE : potrf("cusolverDn" #P "potrf", handle,            \
			     TY_, uplo, n, A, lda, NULL, -1, NULL, Lwork);                                        \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##potrf(cusolverDnHandle_t handle, cublasFillMode_t uplo,       \
							  int n, T *A, int lda, T *Workspace, int Lwork,          \
							  int *devInfo)                                           \
	{                                                                                                         \
		return potrf("cusolverDn" #P "potrf", handle, TY_, uplo, n, A, lda, Workspace, Lwork,             \
			     devInfo, NULL);                                                                      \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##potrs(cusolverDnHandle_t handle, cublasFillMode_t uplo,       \
							  int n, int nrhs, const T *A, int lda, T *B, int ldb,    \
							  int *devInfo)                                           \
	{                                                                                                         \
		return potrs("cusolverDn" #P "potrs", handle, TY_, uplo, n, nrhs, A, lda, B, ldb, devInfo);       \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##geqrf_bufferSize(cusolverDnHandle_t handle, int m, int n,     \
								     T *A, int lda, int *lwork)                   \
	{                                                                                                         \
		return !lwork ? CUSOLVER_STATUS_INVALID_VALUE : geqrf("cusolverDn" #P "geqrf", handle,            \
			     TY_, m, n, A, lda, NULL, NULL, -1, NULL, lwork);                                     \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##geqrf(cusolverDnHandle_t handle, int m, int n, T *A, int lda, \
							  T *TAU, T *Workspace, int Lwork, int *devInfo)          \
	{                                                                                                         \
		return geqrf("cusolverDn" #P "geqrf", handle, TY_, m, n, A, lda, TAU, Workspace, Lwork,           \
			     devInfo, NULL);                                                                      \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##orgqr_bufferSize(cusolverDnHandle_t handle, int m, int n,     \
								     int k, const T *A, int lda, const T *tau,    \
								     int *lwork)                                  \
	{                                                                                                         \
		return !lwork ? CUSOLVER_STATUS_INVALID_VALUE : orgqr("cusolverDn" #P "orgqr", handle,            \
			     TY_, m, n, k, A, lda, tau, NULL, -1, NULL, lwork);                                   \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##orgqr(cusolverDnHandle_t handle, int m, int n, int k, T *A,   \
							  int lda, const T *tau, T *work, int lwork, int *info)   \
	{                                                                                                         \
		return orgqr("cusolverDn" #P "orgqr", handle, TY_, m, n, k, A, lda, tau, work, lwork,             \
			     info, NULL);                                                                         \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##ormqr_bufferSize(                                             \
		cusolverDnHandle_t handle, cublasSideMode_t side, cublasOperation_t trans, int m, int n, int k,   \
		const T *A, int lda, const T *tau, const T *C, int ldc, int *lwork)                               \
	{                                                                                                         \
		struct ormqr_args o = { side, trans, m, n, k, A, lda, tau, C, ldc, NULL, -1, NULL };              \
		return !lwork ? CUSOLVER_STATUS_INVALID_VALUE : ormqr("cusolverDn" #P "ormqr", handle,            \
			     TY_, &o, lwork);                                                                     \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##ormqr(cusolverDnHandle_t handle, cublasSideMode_t side,       \
							  cublasOperation_t trans, int m, int n, int k, const T *A, \
							  int lda, const T *tau, T *C, int ldc, T *work,          \
							  int lwork, int *devInfo)                                \
	{                                                                                                         \
		struct ormqr_args o = { side, trans, m, n, k, A, lda, tau, C, ldc, work, lwork, devInfo };        \
		return ormqr("cusolverDn" #P "ormqr", handle, TY_, &o, NULL);                                     \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##syevd_bufferSize(cusolverDnHandle_t handle,                   \
								     cusolverEigMode_t jobz, cublasFillMode_t uplo, \
								     int n, const T *A, int lda, const T *W,      \
								     int *lwork)                                  \
	{                                                                                                         \
		return !lwork ? CUSOLVER_STATUS_INVALID_VALUE : syevd("cusolverDn" #P "syevd", handle,            \
			     TY_, jobz, uplo, n, A, lda, W, NULL, -1, NULL, lwork);                               \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##syevd(cusolverDnHandle_t handle, cusolverEigMode_t jobz,      \
							  cublasFillMode_t uplo, int n, T *A, int lda, T *W,      \
							  T *work, int lwork, int *info)                          \
	{                                                                                                         \
		return syevd("cusolverDn" #P "syevd", handle, TY_, jobz, uplo, n, A, lda, W, work, lwork,         \
			     info, NULL);                                                                         \
	}

DEFINE_SD(S, float, PHOS_SOLVER_R_32F)
DEFINE_SD(D, double, PHOS_SOLVER_R_64F)
PHOS_EXPORT_NAMES(cusolverDnSgetrf_bufferSize cusolverDnSgetrf cusolverDnSgetrs cusolverDnSpotrf_bufferSize
		  cusolverDnSpotrf cusolverDnSpotrs cusolverDnSgeqrf_bufferSize cusolverDnSgeqrf
		  cusolverDnSorgqr_bufferSize cusolverDnSorgqr cusolverDnSormqr_bufferSize cusolverDnSormqr
		  cusolverDnSsyevd_bufferSize cusolverDnSsyevd
		  cusolverDnDgetrf_bufferSize cusolverDnDgetrf cusolverDnDgetrs cusolverDnDpotrf_bufferSize
		  cusolverDnDpotrf cusolverDnDpotrs cusolverDnDgeqrf_bufferSize cusolverDnDgeqrf
		  cusolverDnDorgqr_bufferSize cusolverDnDorgqr cusolverDnDormqr_bufferSize cusolverDnDormqr
		  cusolverDnDsyevd_bufferSize cusolverDnDsyevd)

/* --- the Jacobi calls and their info objects --- */

#define SYEVJ_MAGIC 0x73766a31u    /* "svj1" */
#define GESVDJ_MAGIC 0x73766731u   /* "svg1" */

/* A Jacobi call's settings, kept here and sent with each call (the
 * executor makes cuSOLVER's object for the call). Residual and sweeps are
 * not brought back: cusolverDnX{syevj,gesvdj}Get{Residual,Sweeps} answer
 * NOT_SUPPORTED. */
struct jacobi_info {
	uint32_t magic;
	double tol;        /* 0: the library's default (the type's machine epsilon) */
	int max_sweeps;    /* 0: the default, 100 */
	int sort;          /* 1 (the default): sorted */
};
struct syevjInfo {
	struct jacobi_info j;
};
struct gesvdjInfo {
	struct jacobi_info j;
};

static cusolverStatus_t jinfo_new(struct jacobi_info **ret, uint32_t magic, size_t size)
{
	struct jacobi_info *j;

	if (!ret)
		return CUSOLVER_STATUS_INVALID_VALUE;
	j = calloc(1, size);
	if (!j)
		return CUSOLVER_STATUS_ALLOC_FAILED;
	*j = (struct jacobi_info){ .magic = magic, .sort = 1 };
	*ret = j;
	return CUSOLVER_STATUS_SUCCESS;
}

static struct jacobi_info *jinfo_of(void *info, uint32_t magic)
{
	struct jacobi_info *j = info;

	return j && j->magic == magic ? j : NULL;
}

static cusolverStatus_t jinfo_set(struct jacobi_info *j, int what, double value)
{
	if (!j)
		return CUSOLVER_STATUS_INVALID_VALUE;
	if (what == 0 && value > 0 && value < 1)
		j->tol = value;
	else if (what == 1 && value > 0 && value <= INT_MAX)
		j->max_sweeps = (int)value;
	else if (what == 2 && (value == 0 || value == 1))
		j->sort = (int)value;
	else if (what != 0 || value != 0)
		return CUSOLVER_STATUS_INVALID_VALUE;
	return CUSOLVER_STATUS_SUCCESS;
}

static cusolverStatus_t jinfo_free(struct jacobi_info *j)
{
	if (!j)
		return CUSOLVER_STATUS_INVALID_VALUE;
	j->magic = 0;
	free(j);
	return CUSOLVER_STATUS_SUCCESS;
}

PHOS_EXPORT cusolverStatus_t cusolverDnCreateSyevjInfo(syevjInfo_t *info)
{
	return jinfo_new((struct jacobi_info **)info, SYEVJ_MAGIC, sizeof(struct syevjInfo));
}

PHOS_EXPORT cusolverStatus_t cusolverDnDestroySyevjInfo(syevjInfo_t info)
{
	return jinfo_free(jinfo_of(info, SYEVJ_MAGIC));
}

PHOS_EXPORT cusolverStatus_t cusolverDnXsyevjSetTolerance(syevjInfo_t info, double tolerance)
{
	return jinfo_set(jinfo_of(info, SYEVJ_MAGIC), 0, tolerance);
}

PHOS_EXPORT cusolverStatus_t cusolverDnXsyevjSetMaxSweeps(syevjInfo_t info, int max_sweeps)
{
	return jinfo_set(jinfo_of(info, SYEVJ_MAGIC), 1, max_sweeps);
}

PHOS_EXPORT cusolverStatus_t cusolverDnXsyevjSetSortEig(syevjInfo_t info, int sort_eig)
{
	return jinfo_set(jinfo_of(info, SYEVJ_MAGIC), 2, sort_eig);
}

PHOS_EXPORT cusolverStatus_t cusolverDnCreateGesvdjInfo(gesvdjInfo_t *info)
{
	return jinfo_new((struct jacobi_info **)info, GESVDJ_MAGIC, sizeof(struct gesvdjInfo));
}

PHOS_EXPORT cusolverStatus_t cusolverDnDestroyGesvdjInfo(gesvdjInfo_t info)
{
	return jinfo_free(jinfo_of(info, GESVDJ_MAGIC));
}

PHOS_EXPORT cusolverStatus_t cusolverDnXgesvdjSetTolerance(gesvdjInfo_t info, double tolerance)
{
	return jinfo_set(jinfo_of(info, GESVDJ_MAGIC), 0, tolerance);
}

PHOS_EXPORT cusolverStatus_t cusolverDnXgesvdjSetMaxSweeps(gesvdjInfo_t info, int max_sweeps)
{
	return jinfo_set(jinfo_of(info, GESVDJ_MAGIC), 1, max_sweeps);
}

PHOS_EXPORT cusolverStatus_t cusolverDnXgesvdjSetSortEig(gesvdjInfo_t info, int sort_svd)
{
	return jinfo_set(jinfo_of(info, GESVDJ_MAGIC), 2, sort_svd);
}

/* syevj and syevjBatched (batch 0: the plain call): lwork -1 and ret_lwork
 * for the _bufferSize. */
static cusolverStatus_t syevj(const char *name, cusolverDnHandle_t handle, int32_t type, cusolverEigMode_t jobz,
			      cublasFillMode_t uplo, int n, const void *A, int lda, const void *W, const void *work,
			      int lwork, int *info, void *params, int batch, int *ret_lwork)
{
	struct jacobi_info *j = jinfo_of(params, SYEVJ_MAGIC);
	struct phos_solver_call c;
	cusolverStatus_t s = call_init(handle, PHOS_SOLVER_SYEVJ, type, &c);

	if (s)
		return s;
	if (!j || batch < 0 || (!ret_lwork && lwork < 0))
		return CUSOLVER_STATUS_INVALID_VALUE;
	c.jobz = jobz;
	c.uplo = uplo;
	c.n = n;
	c.lda = lda;
	c.a = addr(A);
	c.w = addr(W);
	c.work = addr(work);
	c.lwork = ret_lwork ? -1 : lwork;
	c.info = addr(info);
	c.batch = batch;
	c.tol = j->tol;
	c.max_sweeps = j->max_sweeps;
	c.sort = j->sort;
	return forward(name, handle, &c, ret_lwork);
}

struct gesvdj_args {
	cusolverEigMode_t jobz;
	int econ, m, n;
	const void *A;
	int lda;
	const void *S, *U;
	int ldu;
	const void *V;
	int ldv;
	const void *work;
	int lwork;
	int *info;
	void *params;
	int batch;
};

/* gesvdj and gesvdjBatched (batch 0: the plain call). */
static cusolverStatus_t gesvdj(const char *name, cusolverDnHandle_t handle, int32_t type, const struct gesvdj_args *g,
			       int *ret_lwork)
{
	struct jacobi_info *j = jinfo_of(g->params, GESVDJ_MAGIC);
	struct phos_solver_call c;
	cusolverStatus_t s = call_init(handle, PHOS_SOLVER_GESVDJ, type, &c);

	if (s)
		return s;
	if (!j || g->batch < 0 || (!ret_lwork && g->lwork < 0))
		return CUSOLVER_STATUS_INVALID_VALUE;
	c.jobz = g->jobz;
	c.econ = g->econ;
	c.m = g->m;
	c.n = g->n;
	c.lda = g->lda;
	c.a = addr(g->A);
	c.w = addr(g->S);
	c.u = addr(g->U);
	c.ldu = g->ldu;
	c.v = addr(g->V);
	c.ldv = g->ldv;
	c.work = addr(g->work);
	c.lwork = ret_lwork ? -1 : g->lwork;
	c.info = addr(g->info);
	c.batch = g->batch;
	c.tol = j->tol;
	c.max_sweeps = j->max_sweeps;
	c.sort = j->sort;
	return forward(name, handle, &c, ret_lwork);
}

#define DEFINE_JACOBI(P, T, TY_)                                                                                  \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##syevj_bufferSize(                                             \
		cusolverDnHandle_t handle, cusolverEigMode_t jobz, cublasFillMode_t uplo, int n, const T *A, int lda, \
		const T *W, int *lwork, syevjInfo_t params)                                                       \
	{                                                                                                         \
		return !lwork ? CUSOLVER_STATUS_INVALID_VALUE                                                     \
			      : syevj("cusolverDn" #P "syevj_bufferSize", handle, TY_, jobz, uplo, n, A, lda, W,  \
				      NULL, -1, NULL, params, 0, lwork);                                          \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##syevj(cusolverDnHandle_t handle, cusolverEigMode_t jobz,      \
							  cublasFillMode_t uplo, int n, T *A, int lda, T *W,      \
							  T *work, int lwork, int *info, syevjInfo_t params)      \
	{                                                                                                         \
		return syevj("cusolverDn" #P "syevj", handle, TY_, jobz, uplo, n, A, lda, W, work, lwork, info,   \
			     params, 0, NULL);                                                                    \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##syevjBatched_bufferSize(                                      \
		cusolverDnHandle_t handle, cusolverEigMode_t jobz, cublasFillMode_t uplo, int n, const T *A, int lda, \
		const T *W, int *lwork, syevjInfo_t params, int batchSize)                                        \
	{                                                                                                         \
		return !lwork || batchSize < 1                                                                    \
			       ? CUSOLVER_STATUS_INVALID_VALUE                                                    \
			       : syevj("cusolverDn" #P "syevjBatched_bufferSize", handle, TY_, jobz, uplo, n, A,  \
				       lda, W, NULL, -1, NULL, params, batchSize, lwork);                         \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##syevjBatched(                                                 \
		cusolverDnHandle_t handle, cusolverEigMode_t jobz, cublasFillMode_t uplo, int n, T *A, int lda,   \
		T *W, T *work, int lwork, int *info, syevjInfo_t params, int batchSize)                           \
	{                                                                                                         \
		return batchSize < 1 ? CUSOLVER_STATUS_INVALID_VALUE                                              \
				     : syevj("cusolverDn" #P "syevjBatched", handle, TY_, jobz, uplo, n, A, lda,  \
					     W, work, lwork, info, params, batchSize, NULL);                      \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##gesvdj_bufferSize(                                            \
		cusolverDnHandle_t handle, cusolverEigMode_t jobz, int econ, int m, int n, const T *A, int lda,   \
		const T *S, const T *U, int ldu, const T *V, int ldv, int *lwork, gesvdjInfo_t params)            \
	{                                                                                                         \
		struct gesvdj_args g = { jobz, econ, m, n, A, lda, S, U, ldu, V, ldv, NULL, -1, NULL, params, 0 }; \
		return !lwork ? CUSOLVER_STATUS_INVALID_VALUE                                                     \
			      : gesvdj("cusolverDn" #P "gesvdj_bufferSize", handle, TY_, &g, lwork);              \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##gesvdj(                                                       \
		cusolverDnHandle_t handle, cusolverEigMode_t jobz, int econ, int m, int n, T *A, int lda, T *S,   \
		T *U, int ldu, T *V, int ldv, T *work, int lwork, int *info, gesvdjInfo_t params)                 \
	{                                                                                                         \
		struct gesvdj_args g = { jobz, econ, m, n, A, lda, S, U, ldu, V, ldv, work, lwork, info, params, 0 }; \
		return gesvdj("cusolverDn" #P "gesvdj", handle, TY_, &g, NULL);                                   \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##gesvdjBatched_bufferSize(                                     \
		cusolverDnHandle_t handle, cusolverEigMode_t jobz, int m, int n, const T *A, int lda, const T *S, \
		const T *U, int ldu, const T *V, int ldv, int *lwork, gesvdjInfo_t params, int batchSize)         \
	{                                                                                                         \
		struct gesvdj_args g = { jobz, 0, m, n, A, lda, S, U, ldu, V, ldv, NULL, -1, NULL, params,        \
					 batchSize };                                                             \
		return !lwork || batchSize < 1                                                                    \
			       ? CUSOLVER_STATUS_INVALID_VALUE                                                    \
			       : gesvdj("cusolverDn" #P "gesvdjBatched_bufferSize", handle, TY_, &g, lwork);      \
	}                                                                                                         \
	PHOS_EXPORT cusolverStatus_t cusolverDn##P##gesvdjBatched(                                                \
		cusolverDnHandle_t handle, cusolverEigMode_t jobz, int m, int n, T *A, int lda, T *S, T *U,       \
		int ldu, T *V, int ldv, T *work, int lwork, int *info, gesvdjInfo_t params, int batchSize)        \
	{                                                                                                         \
		struct gesvdj_args g = { jobz, 0, m, n, A, lda, S, U, ldu, V, ldv, work, lwork, info, params,     \
					 batchSize };                                                             \
		return batchSize < 1 ? CUSOLVER_STATUS_INVALID_VALUE                                              \
				     : gesvdj("cusolverDn" #P "gesvdjBatched", handle, TY_, &g, NULL);            \
	}

DEFINE_JACOBI(S, float, PHOS_SOLVER_R_32F)
DEFINE_JACOBI(D, double, PHOS_SOLVER_R_64F)
PHOS_EXPORT_NAMES(cusolverDnSsyevj_bufferSize cusolverDnSsyevj cusolverDnSsyevjBatched_bufferSize
		  cusolverDnSsyevjBatched cusolverDnSgesvdj_bufferSize cusolverDnSgesvdj
		  cusolverDnSgesvdjBatched_bufferSize cusolverDnSgesvdjBatched
		  cusolverDnDsyevj_bufferSize cusolverDnDsyevj cusolverDnDsyevjBatched_bufferSize
		  cusolverDnDsyevjBatched cusolverDnDgesvdj_bufferSize cusolverDnDgesvdj
		  cusolverDnDgesvdjBatched_bufferSize cusolverDnDgesvdjBatched)

/* --- the batched Cholesky (arrays of device pointers) --- */

/* potrfBatched (b NULL) and potrsBatched: the arrays are checked here, the
 * matrices they name by the executor, which reads them. */
static cusolverStatus_t cholesky_batched(const char *name, cusolverDnHandle_t handle, int32_t type,
					 cublasFillMode_t uplo, int n, int nrhs, void *a, int lda, void *b, int ldb,
					 int *info, int batch)
{
	struct phos_solver_call c;
	cusolverStatus_t s = call_init(handle, b ? PHOS_SOLVER_POTRS_BATCHED : PHOS_SOLVER_POTRF_BATCHED, type, &c);

	if (s)
		return s;
	if (b && nrhs != 1)
		return refuse_call(name, "of more than one right-hand side (cuSOLVER takes one)");
	c.uplo = uplo;
	c.n = n;
	c.nrhs = b ? nrhs : 0;
	c.lda = lda;
	c.ldb = b ? ldb : 0;
	c.a = addr(a);
	c.b = addr(b);
	c.info = addr(info);
	c.batch = batch;
	c.lwork = 0;
	return forward(name, handle, &c, NULL);
}

PHOS_EXPORT cusolverStatus_t cusolverDnSpotrfBatched(cusolverDnHandle_t handle, cublasFillMode_t uplo, int n,
						     float *Aarray[], int lda, int *infoArray, int batchSize)
{
	return cholesky_batched("cusolverDnSpotrfBatched", handle, PHOS_SOLVER_R_32F, uplo, n, 0, Aarray, lda, NULL,
				0, infoArray, batchSize);
}

PHOS_EXPORT cusolverStatus_t cusolverDnDpotrfBatched(cusolverDnHandle_t handle, cublasFillMode_t uplo, int n,
						     double *Aarray[], int lda, int *infoArray, int batchSize)
{
	return cholesky_batched("cusolverDnDpotrfBatched", handle, PHOS_SOLVER_R_64F, uplo, n, 0, Aarray, lda, NULL,
				0, infoArray, batchSize);
}

PHOS_EXPORT cusolverStatus_t cusolverDnSpotrsBatched(cusolverDnHandle_t handle, cublasFillMode_t uplo, int n,
						     int nrhs, float *A[], int lda, float *B[], int ldb, int *d_info,
						     int batchSize)
{
	if (!B)
		return CUSOLVER_STATUS_INVALID_VALUE;
	return cholesky_batched("cusolverDnSpotrsBatched", handle, PHOS_SOLVER_R_32F, uplo, n, nrhs, A, lda, B, ldb,
				d_info, batchSize);
}

PHOS_EXPORT cusolverStatus_t cusolverDnDpotrsBatched(cusolverDnHandle_t handle, cublasFillMode_t uplo, int n,
						     int nrhs, double *A[], int lda, double *B[], int ldb, int *d_info,
						     int batchSize)
{
	if (!B)
		return CUSOLVER_STATUS_INVALID_VALUE;
	return cholesky_batched("cusolverDnDpotrsBatched", handle, PHOS_SOLVER_R_64F, uplo, n, nrhs, A, lda, B, ldb,
				d_info, batchSize);
}

/* --- the 64-bit generic API (cusolverDnX*) --- */

/* A call of the 64-bit API: handle, params, and one real type for every
 * operand and the computation (types: up to three, the rest 0 -> computeType). */
static cusolverStatus_t x_init(const char *name, cusolverDnHandle_t h, cusolverDnParams_t params,
			       enum phos_solver_kind kind, cudaDataType ct, const cudaDataType *types, int ntypes,
			       struct phos_solver_call *c)
{
	cusolverStatus_t s = call_init(h, kind, ct, c);

	if (s)
		return s;
	/* NULL is the default algorithm, as cuSOLVER takes it (PyTorch's geqrf passes NULL) */
	if (params && params->magic != PARAMS_MAGIC) {
		phos_debug("%s: INVALID_VALUE: params %p is not one of cusolverDnCreateParams's", name, (void *)params);
		return CUSOLVER_STATUS_INVALID_VALUE;
	}
	for (int i = 0; i < ntypes; i++)
		if (types[i] != ct)
			return refuse_call(name, "with data types that differ from the compute type");
	if (!phos_solver_type_ok(ct))
		return refuse_call(name, "of complex or half values");
	c->x64 = 1;
	return CUSOLVER_STATUS_SUCCESS;
}

/* A _bufferSize of the 64-bit API: both sizes, or forwarded (sizes NULL). */
static cusolverStatus_t x_forward(const char *name, cusolverDnHandle_t h, struct phos_solver_call *c, size_t *dev,
				  size_t *host, bool query)
{
	struct phos_reply_solver_size size;
	cusolverStatus_t s;

	if (query && (!dev || !host))
		return CUSOLVER_STATUS_INVALID_VALUE;
	s = forward_x(name, h, c, query ? &size : NULL);
	if (s)
		phos_debug("%s: status %d", name, (int)s);
	if (!s && query) {
		*dev = (size_t)size.work;
		*host = (size_t)size.host;
	}
	return s;
}

/* The workspaces the program gave (bytes: as LAPACK's sizes, at most 2^40). */
static cusolverStatus_t x_work(struct phos_solver_call *c, void *dev, size_t dev_bytes, size_t host_bytes)
{
	if (dev_bytes > (size_t)PHOS_SOLVER_X64_MAX || host_bytes > (size_t)PHOS_SOLVER_X64_MAX)
		return CUSOLVER_STATUS_INVALID_VALUE;
	c->work = addr(dev);
	c->lwork = (int64_t)dev_bytes;
	c->host_bytes = (int64_t)host_bytes;
	return CUSOLVER_STATUS_SUCCESS;
}

PHOS_EXPORT cusolverStatus_t cusolverDnXgetrf_bufferSize(cusolverDnHandle_t handle, cusolverDnParams_t params,
							 int64_t m, int64_t n, cudaDataType dataTypeA, const void *A,
							 int64_t lda, cudaDataType computeType,
							 size_t *workspaceInBytesOnDevice, size_t *workspaceInBytesOnHost)
{
	struct phos_solver_call c;
	cusolverStatus_t s = x_init("cusolverDnXgetrf_bufferSize", handle, params, PHOS_SOLVER_GETRF, computeType,
				    &dataTypeA, 1, &c);

	if (s)
		return s;
	c.m = m;
	c.n = n;
	c.lda = lda;
	c.a = addr(A);
	return x_forward("cusolverDnXgetrf_bufferSize", handle, &c, workspaceInBytesOnDevice, workspaceInBytesOnHost,
			 true);
}

PHOS_EXPORT cusolverStatus_t cusolverDnXgetrf(cusolverDnHandle_t handle, cusolverDnParams_t params, int64_t m,
					      int64_t n, cudaDataType dataTypeA, void *A, int64_t lda, int64_t *ipiv,
					      cudaDataType computeType, void *bufferOnDevice,
					      size_t workspaceInBytesOnDevice, void *bufferOnHost,
					      size_t workspaceInBytesOnHost, int *info)
{
	struct phos_solver_call c;
	cusolverStatus_t s = x_init("cusolverDnXgetrf", handle, params, PHOS_SOLVER_GETRF, computeType, &dataTypeA, 1,
				    &c);

	(void)bufferOnHost;   /* (the executor's own is used) */
	if (s || (s = x_work(&c, bufferOnDevice, workspaceInBytesOnDevice, workspaceInBytesOnHost)))
		return s;
	c.m = m;
	c.n = n;
	c.lda = lda;
	c.a = addr(A);
	c.ipiv = addr(ipiv);
	c.info = addr(info);
	return x_forward("cusolverDnXgetrf", handle, &c, NULL, NULL, false);
}

PHOS_EXPORT cusolverStatus_t cusolverDnXgetrs(cusolverDnHandle_t handle, cusolverDnParams_t params,
					      cublasOperation_t trans, int64_t n, int64_t nrhs, cudaDataType dataTypeA,
					      const void *A, int64_t lda, const int64_t *ipiv, cudaDataType dataTypeB,
					      void *B, int64_t ldb, int *info)
{
	struct phos_solver_call c;
	cusolverStatus_t s = x_init("cusolverDnXgetrs", handle, params, PHOS_SOLVER_GETRS, dataTypeA, &dataTypeB, 1,
				    &c);

	if (s)
		return s;
	c.trans = trans;
	c.n = n;
	c.nrhs = nrhs;
	c.lda = lda;
	c.ldb = ldb;
	c.a = addr(A);
	c.ipiv = addr(ipiv);
	c.b = addr(B);
	c.info = addr(info);
	c.lwork = 0;
	return x_forward("cusolverDnXgetrs", handle, &c, NULL, NULL, false);
}

PHOS_EXPORT cusolverStatus_t cusolverDnXpotrf_bufferSize(cusolverDnHandle_t handle, cusolverDnParams_t params,
							 cublasFillMode_t uplo, int64_t n, cudaDataType dataTypeA,
							 const void *A, int64_t lda, cudaDataType computeType,
							 size_t *workspaceInBytesOnDevice, size_t *workspaceInBytesOnHost)
{
	struct phos_solver_call c;
	cusolverStatus_t s = x_init("cusolverDnXpotrf_bufferSize", handle, params, PHOS_SOLVER_POTRF, computeType,
				    &dataTypeA, 1, &c);

	if (s)
		return s;
	c.uplo = uplo;
	c.n = n;
	c.lda = lda;
	c.a = addr(A);
	return x_forward("cusolverDnXpotrf_bufferSize", handle, &c, workspaceInBytesOnDevice, workspaceInBytesOnHost,
			 true);
}

PHOS_EXPORT cusolverStatus_t cusolverDnXpotrf(cusolverDnHandle_t handle, cusolverDnParams_t params,
					      cublasFillMode_t uplo, int64_t n, cudaDataType dataTypeA, void *A,
					      int64_t lda, cudaDataType computeType, void *bufferOnDevice,
					      size_t workspaceInBytesOnDevice, void *bufferOnHost,
					      size_t workspaceInBytesOnHost, int *info)
{
	struct phos_solver_call c;
	cusolverStatus_t s = x_init("cusolverDnXpotrf", handle, params, PHOS_SOLVER_POTRF, computeType, &dataTypeA, 1,
				    &c);

	(void)bufferOnHost;
	if (s || (s = x_work(&c, bufferOnDevice, workspaceInBytesOnDevice, workspaceInBytesOnHost)))
		return s;
	c.uplo = uplo;
	c.n = n;
	c.lda = lda;
	c.a = addr(A);
	c.info = addr(info);
	return x_forward("cusolverDnXpotrf", handle, &c, NULL, NULL, false);
}

PHOS_EXPORT cusolverStatus_t cusolverDnXpotrs(cusolverDnHandle_t handle, cusolverDnParams_t params,
					      cublasFillMode_t uplo, int64_t n, int64_t nrhs, cudaDataType dataTypeA,
					      const void *A, int64_t lda, cudaDataType dataTypeB, void *B, int64_t ldb,
					      int *info)
{
	struct phos_solver_call c;
	cusolverStatus_t s = x_init("cusolverDnXpotrs", handle, params, PHOS_SOLVER_POTRS, dataTypeA, &dataTypeB, 1,
				    &c);

	if (s)
		return s;
	c.uplo = uplo;
	c.n = n;
	c.nrhs = nrhs;
	c.lda = lda;
	c.ldb = ldb;
	c.a = addr(A);
	c.b = addr(B);
	c.info = addr(info);
	c.lwork = 0;
	return x_forward("cusolverDnXpotrs", handle, &c, NULL, NULL, false);
}

PHOS_EXPORT cusolverStatus_t cusolverDnXgeqrf_bufferSize(cusolverDnHandle_t handle, cusolverDnParams_t params,
							 int64_t m, int64_t n, cudaDataType dataTypeA, const void *A,
							 int64_t lda, cudaDataType dataTypeTau, const void *tau,
							 cudaDataType computeType, size_t *workspaceInBytesOnDevice,
							 size_t *workspaceInBytesOnHost)
{
	const cudaDataType types[2] = { dataTypeA, dataTypeTau };
	struct phos_solver_call c;
	cusolverStatus_t s = x_init("cusolverDnXgeqrf_bufferSize", handle, params, PHOS_SOLVER_GEQRF, computeType,
				    types, 2, &c);

	if (s)
		return s;
	c.m = m;
	c.n = n;
	c.lda = lda;
	c.a = addr(A);
	c.tau = addr(tau);
	return x_forward("cusolverDnXgeqrf_bufferSize", handle, &c, workspaceInBytesOnDevice, workspaceInBytesOnHost,
			 true);
}

PHOS_EXPORT cusolverStatus_t cusolverDnXgeqrf(cusolverDnHandle_t handle, cusolverDnParams_t params, int64_t m,
					      int64_t n, cudaDataType dataTypeA, void *A, int64_t lda,
					      cudaDataType dataTypeTau, void *tau, cudaDataType computeType,
					      void *bufferOnDevice, size_t workspaceInBytesOnDevice, void *bufferOnHost,
					      size_t workspaceInBytesOnHost, int *info)
{
	const cudaDataType types[2] = { dataTypeA, dataTypeTau };
	struct phos_solver_call c;
	cusolverStatus_t s = x_init("cusolverDnXgeqrf", handle, params, PHOS_SOLVER_GEQRF, computeType, types, 2, &c);

	(void)bufferOnHost;
	if (s || (s = x_work(&c, bufferOnDevice, workspaceInBytesOnDevice, workspaceInBytesOnHost)))
		return s;
	c.m = m;
	c.n = n;
	c.lda = lda;
	c.a = addr(A);
	c.tau = addr(tau);
	c.info = addr(info);
	return x_forward("cusolverDnXgeqrf", handle, &c, NULL, NULL, false);
}

PHOS_EXPORT cusolverStatus_t cusolverDnXsyevd_bufferSize(cusolverDnHandle_t handle, cusolverDnParams_t params,
							 cusolverEigMode_t jobz, cublasFillMode_t uplo, int64_t n,
							 cudaDataType dataTypeA, const void *A, int64_t lda,
							 cudaDataType dataTypeW, const void *W, cudaDataType computeType,
							 size_t *workspaceInBytesOnDevice, size_t *workspaceInBytesOnHost)
{
	const cudaDataType types[2] = { dataTypeA, dataTypeW };
	struct phos_solver_call c;
	cusolverStatus_t s = x_init("cusolverDnXsyevd_bufferSize", handle, params, PHOS_SOLVER_SYEVD, computeType,
				    types, 2, &c);

	if (s)
		return s;
	c.jobz = jobz;
	c.uplo = uplo;
	c.n = n;
	c.lda = lda;
	c.a = addr(A);
	c.w = addr(W);
	return x_forward("cusolverDnXsyevd_bufferSize", handle, &c, workspaceInBytesOnDevice, workspaceInBytesOnHost,
			 true);
}

PHOS_EXPORT cusolverStatus_t cusolverDnXsyevd(cusolverDnHandle_t handle, cusolverDnParams_t params,
					      cusolverEigMode_t jobz, cublasFillMode_t uplo, int64_t n,
					      cudaDataType dataTypeA, void *A, int64_t lda, cudaDataType dataTypeW,
					      void *W, cudaDataType computeType, void *bufferOnDevice,
					      size_t workspaceInBytesOnDevice, void *bufferOnHost,
					      size_t workspaceInBytesOnHost, int *info)
{
	const cudaDataType types[2] = { dataTypeA, dataTypeW };
	struct phos_solver_call c;
	cusolverStatus_t s = x_init("cusolverDnXsyevd", handle, params, PHOS_SOLVER_SYEVD, computeType, types, 2, &c);

	(void)bufferOnHost;
	if (s || (s = x_work(&c, bufferOnDevice, workspaceInBytesOnDevice, workspaceInBytesOnHost)))
		return s;
	c.jobz = jobz;
	c.uplo = uplo;
	c.n = n;
	c.lda = lda;
	c.a = addr(A);
	c.w = addr(W);
	c.info = addr(info);
	return x_forward("cusolverDnXsyevd", handle, &c, NULL, NULL, false);
}

/* The batched eigensolver of the 64-bit API: syevd's call with a batch. */
static cusolverStatus_t syev_batched(const char *name, cusolverDnHandle_t handle, cusolverDnParams_t params,
				     cusolverEigMode_t jobz, cublasFillMode_t uplo, int64_t n, cudaDataType dataTypeA,
				     const void *A, int64_t lda, cudaDataType dataTypeW, const void *W,
				     cudaDataType computeType, int64_t batchSize, struct phos_solver_call *c)
{
	const cudaDataType types[2] = { dataTypeA, dataTypeW };
	cusolverStatus_t s = x_init(name, handle, params, PHOS_SOLVER_SYEVD, computeType, types, 2, c);

	if (s)
		return s;
	if (batchSize < 1)   /* (0 would be the plain call's) */
		return CUSOLVER_STATUS_INVALID_VALUE;
	c->jobz = jobz;
	c->uplo = uplo;
	c->n = n;
	c->lda = lda;
	c->a = addr(A);
	c->w = addr(W);
	c->batch = batchSize;
	return CUSOLVER_STATUS_SUCCESS;
}

PHOS_EXPORT cusolverStatus_t cusolverDnXsyevBatched_bufferSize(cusolverDnHandle_t handle, cusolverDnParams_t params,
							       cusolverEigMode_t jobz, cublasFillMode_t uplo,
							       int64_t n, cudaDataType dataTypeA, const void *A,
							       int64_t lda, cudaDataType dataTypeW, const void *W,
							       cudaDataType computeType,
							       size_t *workspaceInBytesOnDevice,
							       size_t *workspaceInBytesOnHost, int64_t batchSize)
{
	static const char name[] = "cusolverDnXsyevBatched_bufferSize";
	struct phos_solver_call c;
	cusolverStatus_t s = syev_batched(name, handle, params, jobz, uplo, n, dataTypeA, A, lda, dataTypeW, W,
					  computeType, batchSize, &c);

	return s ? s : x_forward(name, handle, &c, workspaceInBytesOnDevice, workspaceInBytesOnHost, true);
}

PHOS_EXPORT cusolverStatus_t cusolverDnXsyevBatched(cusolverDnHandle_t handle, cusolverDnParams_t params,
						    cusolverEigMode_t jobz, cublasFillMode_t uplo, int64_t n,
						    cudaDataType dataTypeA, void *A, int64_t lda, cudaDataType dataTypeW,
						    void *W, cudaDataType computeType, void *bufferOnDevice,
						    size_t workspaceInBytesOnDevice, void *bufferOnHost,
						    size_t workspaceInBytesOnHost, int *info, int64_t batchSize)
{
	static const char name[] = "cusolverDnXsyevBatched";
	struct phos_solver_call c;
	cusolverStatus_t s = syev_batched(name, handle, params, jobz, uplo, n, dataTypeA, A, lda, dataTypeW, W,
					  computeType, batchSize, &c);

	(void)bufferOnHost;
	if (s || (s = x_work(&c, bufferOnDevice, workspaceInBytesOnDevice, workspaceInBytesOnHost)))
		return s;
	c.info = addr(info);
	return x_forward(name, handle, &c, NULL, NULL, false);
}

/* Called by every generated stub (stubs_cusolver.c). */
int phos_cusolver_stub(const char *name, int *logged);
int phos_cusolver_stub(const char *name, int *logged)
{
	phos_log_once("cuSOLVER API", name, logged);
	return CUSOLVER_STATUS_NOT_SUPPORTED;
}

__attribute__((constructor)) static void log_init(void)
{
	phos_log_init("phos-preload-cusolver", PHOS_LOG_OFF);
}
