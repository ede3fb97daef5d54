/* SPDX-License-Identifier: MIT */
/*
 * The cuFFT stand-in (libcufft.so.12): plans made by the executor with the
 * real cuFFT (the sim device's reference DFT in CI), executions forwarded.
 *
 *   cufftCreate ─────────────────── a plan here only: its id is the cufftHandle
 *   cufftMakePlan1d/2d/3d/Many/  ── sync FFT_PLAN: every form brought to one
 *   Many64, cufftXtMakePlanMany,     phos_fft_plan (proto.h), kept here; the
 *   cufftPlan1d/2d/3d/Many           executor makes its plan under the id and
 *                                    answers the work area's size
 *   cufftExec{C2C,R2C,C2R,Z2Z,   ── FFT_EXEC, stream-ordered on the plan's
 *   D2Z,Z2D}, cufftXtExec            stream; the executor takes the read/write
 *                                    set from the plan (exec_fft.c)
 *   cufftGetSize*, cufftEstimate* ─ sync FFT_SIZE (cufftGetSize: the plan's)
 *   cufftSetStream ──────────────── kept here, sent with each execution
 *   cufftSetWorkArea,            ── accepted, nothing more: the executor's
 *   cufftSetAutoAllocation           plan keeps cuFFT's own work area, and a
 *                                    work area the program gives is never used
 *
 * After a restore (a new executor, at phos_fn_serve or from a checkpoint)
 * a made plan is made again from its parameters at its first use. Every
 * call that names the executor's plans runs inside a fenced section of the
 * channel (fft_enter), so that a checkpoint never stops the program halfway
 * through one, as cuDNN's calls do (cudnn.c).
 *
 * In the basic layout (inembed or onembed NULL) cuFFT ignores the other
 * advanced parameters, of both sides. Plans of half or bfloat16 data
 * (cufftXtMakePlanMany), executions on a capturing stream or outside device
 * memory, and every export not implemented here answer CUFFT_NOT_SUPPORTED,
 * named once (the stubs, stubs_cufft.c, in the log; the rest on stderr).
 * cufftGetVersion answers the executor's library's version.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <cufftXt.h>

#include "internal.h"
#include "log.h"

struct fft_plan {
	uint32_t id;                /* the cufftHandle */
	bool made;                  /* p holds a plan the executor made */
	uint32_t epoch;             /* the executor it was made in */
	struct phos_fft_plan p;
	void *stream;
	uint64_t work;              /* the work area's bytes, as the executor answered */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;   /* guards every plan */
static uint32_t epoch = 1;   /* bumped by each restore */
static uint32_t adoptions_seen;

static int restored(void)
{
	pthread_mutex_lock(&lock);
	epoch++;
	pthread_mutex_unlock(&lock);
	return 0;
}

/* Connects, and registers the restore hook once. 0 or a cudaError_t. */
static int connect_once(void)
{
	static bool registered;
	int r = phos_preload_connect();

	if (r == 0) {
		pthread_mutex_lock(&lock);
		if (!registered && phos_preload_on_restore(restored) == 0)
			registered = true;
		pthread_mutex_unlock(&lock);
	}
	return r;
}

/* Under the lock and inside a fenced section of the channel; a restore of a
 * checkpoint (a new adoption of the channel) makes every plan stale. */
static void fft_enter(void)
{
	int64_t now = phos_preload_section_enter();

	pthread_mutex_lock(&lock);
	if (now >= 0 && (uint32_t)now != adoptions_seen) {
		adoptions_seen = (uint32_t)now;
		epoch++;
	}
}

static void fft_leave(void)
{
	pthread_mutex_unlock(&lock);
	phos_preload_section_leave();
}

/* NOT_SUPPORTED, said once per reason on stderr. */
static cufftResult refuse(const char *what)
{
	phos_refuse_once("cuFFT", what, ": CUFFT_NOT_SUPPORTED");
	return CUFFT_NOT_SUPPORTED;
}

/* A call's result: the library status when the executor gave one, else the
 * CUDA error's nearest status. */
static cufftResult status_of(int r, int st)
{
	if (st)
		return (cufftResult)st;
	switch (r) {
	case cudaSuccess: return CUFFT_SUCCESS;
	case cudaErrorNotSupported: return CUFFT_NOT_SUPPORTED;
	case cudaErrorInvalidValue: return CUFFT_INVALID_VALUE;
	case cudaErrorMemoryAllocation: return CUFFT_ALLOC_FAILED;
	case cudaErrorInvalidDevice: return CUFFT_INVALID_DEVICE;
	case cudaErrorInitializationError: case cudaErrorDevicesUnavailable: return CUFFT_SETUP_FAILED;
	default: return CUFFT_EXEC_FAILED;
	}
}

/* A synchronous call answering a u64 (a work area's size) into *ret. */
static cufftResult ask_work(uint32_t op, const struct phos_fft_plan *p, uint64_t *ret)
{
	size_t len = 0;
	int st = 0, r = phos_preload_call(op, p, sizeof(*p), NULL, 0, ret, sizeof(*ret), &len, &st);
	cufftResult s = status_of(r, st);

	return s == CUFFT_SUCCESS && len != sizeof(*ret) ? CUFFT_INTERNAL_ERROR : s;
}

/* --- versions --- */

static struct phos_reply_fft_version version;
static pthread_once_t version_once = PTHREAD_ONCE_INIT;

static void version_ask(void)
{
	size_t len = 0;
	int st = 0;

	if (connect_once() != 0 ||
	    status_of(phos_preload_call(PHOS_OP_FFT_VERSION, NULL, 0, NULL, 0, &version, sizeof(version), &len, &st),
		      st) != CUFFT_SUCCESS || len != sizeof(version)) {
		memset(&version, 0, sizeof(version));
		fprintf(stderr, "phos-fn: cuFFT: the executor has no cuFFT (libcufft.so.12 not found there: "
				"PHOS_CUFFT_LIB): every cuFFT plan fails\n");
	}
}

PHOS_EXPORT cufftResult cufftGetVersion(int *value)
{
	if (!value)
		return CUFFT_INVALID_VALUE;
	pthread_once(&version_once, version_ask);
	*value = version.version;
	return version.version ? CUFFT_SUCCESS : CUFFT_SETUP_FAILED;
}

PHOS_EXPORT cufftResult cufftGetProperty(libraryPropertyType type, int *value)
{
	if (!value)
		return CUFFT_INVALID_VALUE;
	pthread_once(&version_once, version_ask);
	if (!version.version)
		return CUFFT_SETUP_FAILED;
	switch (type) {
	case MAJOR_VERSION: *value = version.major; break;
	case MINOR_VERSION: *value = version.minor; break;
	case PATCH_LEVEL: *value = version.patch; break;
	default: return CUFFT_INVALID_TYPE;
	}
	return CUFFT_SUCCESS;
}

/* --- plans --- */

/* The plan of handle h, lock held; NULL when h is none of ours. */
static struct fft_plan *plan_of(cufftHandle h)
{
	return h > 0 ? phos_ids_get(PHOS_H_FFT, (uint32_t)h) : NULL;
}

/* Makes the plan again in a new executor (after a restore). Lock held. */
static cufftResult plan_ensure(struct fft_plan *pl)
{
	uint64_t work = 0;
	cufftResult s;

	if (!pl->made || pl->epoch == epoch)
		return CUFFT_SUCCESS;
	s = ask_work(PHOS_OP_FFT_PLAN, &pl->p, &work);
	if (s != CUFFT_SUCCESS) {
		phos_warn("cufft: plan %u could not be made again after the restore: status %d", pl->id, s);
		return s;
	}
	pl->epoch = epoch;
	pl->work = work;
	return CUFFT_SUCCESS;
}

PHOS_EXPORT cufftResult cufftCreate(cufftHandle *handle)
{
	struct fft_plan *pl;

	if (!handle)
		return CUFFT_INVALID_VALUE;
	pl = calloc(1, sizeof(*pl));
	if (!pl)
		return CUFFT_ALLOC_FAILED;
	if (phos_ids_add(PHOS_H_FFT, pl, &pl->id) < 0 || pl->id > INT32_MAX) {
		if (pl->id)
			phos_ids_take(PHOS_H_FFT, pl->id);
		free(pl);
		return CUFFT_ALLOC_FAILED;
	}
	*handle = (cufftHandle)pl->id;
	return CUFFT_SUCCESS;
}

PHOS_EXPORT cufftResult cufftDestroy(cufftHandle plan)
{
	struct fft_plan *pl;

	fft_enter();
	pl = plan_of(plan);
	if (!pl) {
		fft_leave();
		return CUFFT_INVALID_PLAN;
	}
	if (pl->made && pl->epoch == epoch) {
		struct phos_handle c = { .id = pl->id };

		phos_preload_post(PHOS_OP_FFT_DESTROY, &c, sizeof(c), NULL, 0);
	}
	phos_ids_take(PHOS_H_FFT, pl->id);
	fft_leave();
	free(pl);
	return CUFFT_SUCCESS;
}

/*
 * The parameters of any form of plan, as phos_fft_plan: rank 1 to 3, n and
 * the embeds copied (the embeds only when both are given: cuFFT's advanced
 * layout), checked as cuFFT checks them. The device is the caller's.
 */
static cufftResult plan_params(int rank, const long long *n, const long long *inembed, long long istride,
			       long long idist, const long long *onembed, long long ostride, long long odist,
			       int type, long long batch, struct phos_fft_plan *ret)
{
	struct phos_fft_plan p = { .type = type, .rank = rank, .batch = batch };
	struct phos_fft_side s;
	uint64_t bytes;
	int device = 0;

	if (!phos_fft_type_ok(type))
		return CUFFT_INVALID_TYPE;
	if (rank < 1 || rank > PHOS_FFT_RANK_MAX || !n)
		return CUFFT_INVALID_VALUE;
	for (int k = 0; k < rank; k++)
		if (n[k] < 1 || n[k] > PHOS_FFT_ELEMS_MAX)
			return CUFFT_INVALID_SIZE;
	if (batch < 1 || batch > PHOS_FFT_ELEMS_MAX)
		return CUFFT_INVALID_SIZE;
	p.advanced = inembed && onembed;
	for (int k = 0; k < rank; k++) {
		p.n[k] = n[k];
		p.inembed[k] = p.advanced ? inembed[k] : 0;
		p.onembed[k] = p.advanced ? onembed[k] : 0;
	}
	if (p.advanced) {
		p.istride = istride;
		p.idist = idist;
		p.ostride = ostride;
		p.odist = odist;
	}
	for (int in_place = 0; in_place < 2; in_place++)
		for (int output = 0; output < 2; output++)
			if (!phos_fft_side_of(&p, output, in_place, &s, &bytes))
				return CUFFT_INVALID_VALUE;
	if (cudaGetDevice(&device) != cudaSuccess)
		return CUFFT_SETUP_FAILED;
	p.device = device;
	*ret = p;
	return CUFFT_SUCCESS;
}

/* Makes plan handle from p (a plan it held is replaced); its work area's
 * size in *work_size (may be NULL). */
static cufftResult plan_make(cufftHandle handle, struct phos_fft_plan *p, size_t *work_size)
{
	struct fft_plan *pl;
	uint64_t work = 0;
	cufftResult s;

	if (connect_once() != 0)
		return CUFFT_SETUP_FAILED;
	fft_enter();
	pl = plan_of(handle);
	if (!pl) {
		fft_leave();
		return CUFFT_INVALID_PLAN;
	}
	p->id = pl->id;
	s = ask_work(PHOS_OP_FFT_PLAN, p, &work);
	pl->made = s == CUFFT_SUCCESS;   /* (a failed make left no plan there) */
	if (pl->made) {
		pl->p = *p;
		pl->epoch = epoch;
		pl->work = work;
		if (work_size)
			*work_size = (size_t)work;
	}
	fft_leave();
	return s;
}

/* Makes plan handle from the parameters of the long long forms. */
static cufftResult make64(cufftHandle handle, int rank, const long long *n, const long long *inembed,
			  long long istride, long long idist, const long long *onembed, long long ostride,
			  long long odist, int type, long long batch, size_t *work_size)
{
	struct phos_fft_plan p;
	cufftResult s = plan_params(rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, &p);

	return s ? s : plan_make(handle, &p, work_size);
}

/* The int arrays of the int forms (rank entries; NULL stays NULL), widened. */
static bool widen(int rank, const int *in, long long out[PHOS_FFT_RANK_MAX])
{
	if (!in)
		return false;
	for (int k = 0; k < rank && k < PHOS_FFT_RANK_MAX; k++)
		out[k] = in[k];
	return true;
}

static cufftResult make32(cufftHandle handle, int rank, const int *n, const int *inembed, int istride, int idist,
			  const int *onembed, int ostride, int odist, int type, int batch, size_t *work_size)
{
	long long n64[PHOS_FFT_RANK_MAX], in64[PHOS_FFT_RANK_MAX], on64[PHOS_FFT_RANK_MAX];

	if (rank < 1 || rank > PHOS_FFT_RANK_MAX)
		return CUFFT_INVALID_VALUE;
	return make64(handle, rank, widen(rank, n, n64) ? n64 : NULL, widen(rank, inembed, in64) ? in64 : NULL,
		      istride, idist, widen(rank, onembed, on64) ? on64 : NULL, ostride, odist, type, batch, work_size);
}

PHOS_EXPORT cufftResult cufftMakePlanMany64(cufftHandle plan, int rank, long long int *n, long long int *inembed,
					    long long int istride, long long int idist, long long int *onembed,
					    long long int ostride, long long int odist, cufftType type,
					    long long int batch, size_t *workSize)
{
	return make64(plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, workSize);
}

PHOS_EXPORT cufftResult cufftMakePlanMany(cufftHandle plan, int rank, int *n, int *inembed, int istride, int idist,
					  int *onembed, int ostride, int odist, cufftType type, int batch,
					  size_t *workSize)
{
	return make32(plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, workSize);
}

PHOS_EXPORT cufftResult cufftMakePlan1d(cufftHandle plan, int nx, cufftType type, int batch, size_t *workSize)
{
	int n[1] = { nx };

	return make32(plan, 1, n, NULL, 1, 0, NULL, 1, 0, type, batch, workSize);
}

PHOS_EXPORT cufftResult cufftMakePlan2d(cufftHandle plan, int nx, int ny, cufftType type, size_t *workSize)
{
	int n[2] = { nx, ny };

	return make32(plan, 2, n, NULL, 1, 0, NULL, 1, 0, type, 1, workSize);
}

PHOS_EXPORT cufftResult cufftMakePlan3d(cufftHandle plan, int nx, int ny, int nz, cufftType type, size_t *workSize)
{
	int n[3] = { nx, ny, nz };

	return make32(plan, 3, n, NULL, 1, 0, NULL, 1, 0, type, 1, workSize);
}

/* The cufftType of cufftXtMakePlanMany's data types, or a refusal: half and
 * bfloat16 are not forwarded, other combinations are no cuFFT type. */
static cufftResult xt_type(cudaDataType in, cudaDataType out, cudaDataType exec, int *ret)
{
	static const struct { cudaDataType in, out, exec; int type; } types[] = {
		{ CUDA_C_32F, CUDA_C_32F, CUDA_C_32F, CUFFT_C2C }, { CUDA_R_32F, CUDA_C_32F, CUDA_C_32F, CUFFT_R2C },
		{ CUDA_C_32F, CUDA_R_32F, CUDA_C_32F, CUFFT_C2R }, { CUDA_C_64F, CUDA_C_64F, CUDA_C_64F, CUFFT_Z2Z },
		{ CUDA_R_64F, CUDA_C_64F, CUDA_C_64F, CUFFT_D2Z }, { CUDA_C_64F, CUDA_R_64F, CUDA_C_64F, CUFFT_Z2D },
	};

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (types[i].in == in && types[i].out == out && types[i].exec == exec) {
			*ret = types[i].type;
			return CUFFT_SUCCESS;
		}
	if (exec == CUDA_C_16F || exec == CUDA_C_16BF)
		return refuse("a plan of half or bfloat16 data (cufftXtMakePlanMany)");
	return CUFFT_INVALID_TYPE;
}

PHOS_EXPORT cufftResult cufftXtMakePlanMany(cufftHandle plan, int rank, long long int *n, long long int *inembed,
					    long long int istride, long long int idist, cudaDataType inputtype,
					    long long int *onembed, long long int ostride, long long int odist,
					    cudaDataType outputtype, long long int batch, size_t *workSize,
					    cudaDataType executiontype)
{
	int type = 0;
	cufftResult s = xt_type(inputtype, outputtype, executiontype, &type);

	return s ? s : make64(plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, workSize);
}

/* Create, then make; the plan destroyed again when the make fails. */
static cufftResult plan_new(cufftHandle *plan, int rank, const int *n, const int *inembed, int istride, int idist,
			    const int *onembed, int ostride, int odist, int type, int batch)
{
	cufftHandle h;
	cufftResult s;

	if (!plan)
		return CUFFT_INVALID_VALUE;
	s = cufftCreate(&h);
	if (s)
		return s;
	s = make32(h, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, NULL);
	if (s) {
		cufftDestroy(h);
		return s;
	}
	*plan = h;
	return CUFFT_SUCCESS;
}

PHOS_EXPORT cufftResult cufftPlan1d(cufftHandle *plan, int nx, cufftType type, int batch)
{
	int n[1] = { nx };

	return plan_new(plan, 1, n, NULL, 1, 0, NULL, 1, 0, type, batch);
}

PHOS_EXPORT cufftResult cufftPlan2d(cufftHandle *plan, int nx, int ny, cufftType type)
{
	int n[2] = { nx, ny };

	return plan_new(plan, 2, n, NULL, 1, 0, NULL, 1, 0, type, 1);
}

PHOS_EXPORT cufftResult cufftPlan3d(cufftHandle *plan, int nx, int ny, int nz, cufftType type)
{
	int n[3] = { nx, ny, nz };

	return plan_new(plan, 3, n, NULL, 1, 0, NULL, 1, 0, type, 1);
}

PHOS_EXPORT cufftResult cufftPlanMany(cufftHandle *plan, int rank, int *n, int *inembed, int istride, int idist,
				      int *onembed, int ostride, int odist, cufftType type, int batch)
{
	return plan_new(plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch);
}

/* --- work areas --- */

/* The work area a plan of p would take (handle: a plan of ours; NULL for
 * the cufftEstimate* forms, which name none). */
static cufftResult size_of(const cufftHandle *handle, struct phos_fft_plan *p, size_t *work_size)
{
	uint64_t work = 0;
	cufftResult s;

	if (!work_size)
		return CUFFT_INVALID_VALUE;
	if (connect_once() != 0)
		return CUFFT_SETUP_FAILED;
	fft_enter();
	s = handle && !plan_of(*handle) ? CUFFT_INVALID_PLAN : ask_work(PHOS_OP_FFT_SIZE, p, &work);
	fft_leave();
	if (s == CUFFT_SUCCESS)
		*work_size = (size_t)work;
	return s;
}

static cufftResult size64(const cufftHandle *handle, int rank, const long long *n, const long long *inembed,
			  long long istride, long long idist, const long long *onembed, long long ostride,
			  long long odist, int type, long long batch, size_t *work_size)
{
	struct phos_fft_plan p;
	cufftResult s = plan_params(rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, &p);

	return s ? s : size_of(handle, &p, work_size);
}

static cufftResult size32(const cufftHandle *handle, int rank, const int *n, const int *inembed, int istride, int idist,
			  const int *onembed, int ostride, int odist, int type, int batch, size_t *work_size)
{
	long long n64[PHOS_FFT_RANK_MAX], in64[PHOS_FFT_RANK_MAX], on64[PHOS_FFT_RANK_MAX];

	if (rank < 1 || rank > PHOS_FFT_RANK_MAX)
		return CUFFT_INVALID_VALUE;
	return size64(handle, rank, widen(rank, n, n64) ? n64 : NULL, widen(rank, inembed, in64) ? in64 : NULL,
		      istride, idist, widen(rank, onembed, on64) ? on64 : NULL, ostride, odist, type, batch, work_size);
}

PHOS_EXPORT cufftResult cufftGetSize(cufftHandle handle, size_t *workSize)
{
	struct fft_plan *pl;

	if (!workSize)
		return CUFFT_INVALID_VALUE;
	fft_enter();
	pl = plan_of(handle);
	if (pl)
		*workSize = (size_t)pl->work;
	fft_leave();
	return pl ? CUFFT_SUCCESS : CUFFT_INVALID_PLAN;
}

PHOS_EXPORT cufftResult cufftGetSize1d(cufftHandle handle, int nx, cufftType type, int batch, size_t *workSize)
{
	int n[1] = { nx };

	return size32(&handle, 1, n, NULL, 1, 0, NULL, 1, 0, type, batch, workSize);
}

PHOS_EXPORT cufftResult cufftGetSize2d(cufftHandle handle, int nx, int ny, cufftType type, size_t *workSize)
{
	int n[2] = { nx, ny };

	return size32(&handle, 2, n, NULL, 1, 0, NULL, 1, 0, type, 1, workSize);
}

PHOS_EXPORT cufftResult cufftGetSize3d(cufftHandle handle, int nx, int ny, int nz, cufftType type, size_t *workSize)
{
	int n[3] = { nx, ny, nz };

	return size32(&handle, 3, n, NULL, 1, 0, NULL, 1, 0, type, 1, workSize);
}

PHOS_EXPORT cufftResult cufftGetSizeMany(cufftHandle handle, int rank, int *n, int *inembed, int istride, int idist,
					 int *onembed, int ostride, int odist, cufftType type, int batch,
					 size_t *workArea)
{
	return size32(&handle, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch,
		      workArea);
}

PHOS_EXPORT cufftResult cufftGetSizeMany64(cufftHandle plan, int rank, long long int *n, long long int *inembed,
					   long long int istride, long long int idist, long long int *onembed,
					   long long int ostride, long long int odist, cufftType type,
					   long long int batch, size_t *workSize)
{
	return size64(&plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch,
		      workSize);
}

PHOS_EXPORT cufftResult cufftXtGetSizeMany(cufftHandle plan, int rank, long long int *n, long long int *inembed,
					   long long int istride, long long int idist, cudaDataType inputtype,
					   long long int *onembed, long long int ostride, long long int odist,
					   cudaDataType outputtype, long long int batch, size_t *workSize,
					   cudaDataType executiontype)
{
	int type = 0;
	cufftResult s = xt_type(inputtype, outputtype, executiontype, &type);

	return s ? s : size64(&plan, rank, n, inembed, istride, idist, onembed, ostride, odist, type,
			      batch, workSize);
}

PHOS_EXPORT cufftResult cufftEstimate1d(int nx, cufftType type, int batch, size_t *workSize)
{
	int n[1] = { nx };

	return size32(NULL, 1, n, NULL, 1, 0, NULL, 1, 0, type, batch, workSize);
}

PHOS_EXPORT cufftResult cufftEstimate2d(int nx, int ny, cufftType type, size_t *workSize)
{
	int n[2] = { nx, ny };

	return size32(NULL, 2, n, NULL, 1, 0, NULL, 1, 0, type, 1, workSize);
}

PHOS_EXPORT cufftResult cufftEstimate3d(int nx, int ny, int nz, cufftType type, size_t *workSize)
{
	int n[3] = { nx, ny, nz };

	return size32(NULL, 3, n, NULL, 1, 0, NULL, 1, 0, type, 1, workSize);
}

PHOS_EXPORT cufftResult cufftEstimateMany(int rank, int *n, int *inembed, int istride, int idist, int *onembed,
					  int ostride, int odist, cufftType type, int batch, size_t *workSize)
{
	return size32(NULL, rank, n, inembed, istride, idist, onembed, ostride, odist, type, batch, workSize);
}

/* A setting of plan handle that changes nothing here: INVALID_PLAN for a
 * handle that is none of ours, else SUCCESS. */
static cufftResult plan_known(cufftHandle handle)
{
	bool known;

	fft_enter();
	known = plan_of(handle) != NULL;
	fft_leave();
	return known ? CUFFT_SUCCESS : CUFFT_INVALID_PLAN;
}

PHOS_EXPORT cufftResult cufftSetWorkArea(cufftHandle plan, void *workArea)
{
	(void)workArea;   /* (the executor's plan has its own) */
	return plan_known(plan);
}

PHOS_EXPORT cufftResult cufftSetAutoAllocation(cufftHandle plan, int autoAllocate)
{
	(void)autoAllocate;
	return plan_known(plan);
}

PHOS_EXPORT cufftResult cufftSetStream(cufftHandle plan, cudaStream_t stream)
{
	struct fft_plan *pl;

	fft_enter();
	pl = plan_of(plan);
	if (pl)
		pl->stream = stream;   /* (checked where an execution runs on it) */
	fft_leave();
	return pl ? CUFFT_SUCCESS : CUFFT_INVALID_PLAN;
}

/* --- executions --- */

static bool in_arena(const void *p)
{
	const struct phos_reply_hello *h = phos_preload_hello();
	uint64_t a = (uint64_t)(uintptr_t)p;

	return h && a >= h->arena_base && a < h->arena_base + h->arena_size;
}

static bool complex_only(int type)
{
	return !phos_fft_real_in(type) && !phos_fft_real_out(type);
}

/* Posts an execution of plan handle (of type want, or any when want is 0). */
static cufftResult exec(cufftHandle handle, int want, const void *in, void *out, int direction)
{
	struct phos_fft_exec e = { .in = (uint64_t)(uintptr_t)in, .out = (uint64_t)(uintptr_t)out,
				   .direction = direction };
	struct fft_plan *pl;
	cufftResult s;
	int r;

	if (!in || !out)
		return CUFFT_INVALID_VALUE;
	if (!in_arena(in) || !in_arena(out))
		return refuse("an execution on memory other than cudaMalloc's (host or managed memory)");
	fft_enter();
	pl = plan_of(handle);
	s = !pl || !pl->made ? CUFFT_INVALID_PLAN
	    : want && pl->p.type != want ? CUFFT_INVALID_VALUE
	    : complex_only(pl->p.type) && direction != CUFFT_FORWARD && direction != CUFFT_INVERSE ? CUFFT_INVALID_VALUE
	    : plan_ensure(pl);
	if (s == CUFFT_SUCCESS) {
		r = phos_preload_stream_id(pl->stream, &e.stream);
		s = r == cudaErrorStreamCaptureUnsupported ? refuse("an execution on a stream that is capturing a graph")
		    : r != cudaSuccess ? CUFFT_INVALID_VALUE
				       : CUFFT_SUCCESS;
	}
	if (s == CUFFT_SUCCESS) {
		e.plan = pl->id;
		s = status_of(phos_preload_post(PHOS_OP_FFT_EXEC, &e, sizeof(e), NULL, 0), 0);
	}
	fft_leave();
	return s;
}

PHOS_EXPORT cufftResult cufftExecC2C(cufftHandle plan, cufftComplex *idata, cufftComplex *odata, int direction)
{
	return exec(plan, CUFFT_C2C, idata, odata, direction);
}

PHOS_EXPORT cufftResult cufftExecZ2Z(cufftHandle plan, cufftDoubleComplex *idata, cufftDoubleComplex *odata,
				     int direction)
{
	return exec(plan, CUFFT_Z2Z, idata, odata, direction);
}

PHOS_EXPORT cufftResult cufftExecR2C(cufftHandle plan, cufftReal *idata, cufftComplex *odata)
{
	return exec(plan, CUFFT_R2C, idata, odata, CUFFT_FORWARD);
}

PHOS_EXPORT cufftResult cufftExecC2R(cufftHandle plan, cufftComplex *idata, cufftReal *odata)
{
	return exec(plan, CUFFT_C2R, idata, odata, CUFFT_INVERSE);
}

PHOS_EXPORT cufftResult cufftExecD2Z(cufftHandle plan, cufftDoubleReal *idata, cufftDoubleComplex *odata)
{
	return exec(plan, CUFFT_D2Z, idata, odata, CUFFT_FORWARD);
}

PHOS_EXPORT cufftResult cufftExecZ2D(cufftHandle plan, cufftDoubleComplex *idata, cufftDoubleReal *odata)
{
	return exec(plan, CUFFT_Z2D, idata, odata, CUFFT_INVERSE);
}

/* Any type; the direction matters to C2C and Z2Z only (cuFFT ignores it
 * for the real transforms). */
PHOS_EXPORT cufftResult cufftXtExec(cufftHandle plan, void *input, void *output, int direction)
{
	return exec(plan, 0, input, output, direction);
}

/* Called by every generated stub (stubs_cufft.c). */
int phos_cufft_stub(const char *name, int *logged);
int phos_cufft_stub(const char *name, int *logged)
{
	phos_log_once("cuFFT API", name, logged);
	return CUFFT_NOT_SUPPORTED;
}

__attribute__((constructor)) static void log_init(void)
{
	phos_log_init("phos-preload-cufft", PHOS_LOG_OFF);
}
