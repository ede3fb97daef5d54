/* SPDX-License-Identifier: MIT */
/*
 * cuFFT on the cuda device (fft_dev.h): the real libcufft.so.12, loaded at
 * the first cuFFT record (runtime/device/cuda/libfind.h: $PHOS_CUFFT_LIB, the loader
 * path, the CUDA 13 wheels' nvidia/cu13/lib that PyTorch depends on, the
 * toolkit), so a program that never calls cuFFT never loads it.
 *
 * Every plan is made with cufftXtMakePlanMany, whatever form the program
 * used, and keeps cuFFT's automatic work area: the work area is the
 * executor's, never the program's (a work area the program gives is not
 * used, so an execution's set is its input and output alone). The plan is
 * bound to the stream of each execution (cufftSetStream) when it changes.
 * The device's context is current for every call.
 */
#include "device_cuda_syms.h"

#include <cufftXt.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fft_dev.h"
#include "libfind.h"
#include "log.h"

#define FFT_SYMS(X)                                   \
	X(GetVersion, "cufftGetVersion")              \
	X(GetProperty, "cufftGetProperty")            \
	X(Create, "cufftCreate")                      \
	X(Destroy, "cufftDestroy")                    \
	X(SetStream, "cufftSetStream")                \
	X(XtMakePlanMany, "cufftXtMakePlanMany")      \
	X(XtGetSizeMany, "cufftXtGetSizeMany")        \
	X(XtExec, "cufftXtExec")

/* Each pointer has the type of NVIDIA's declaration in cufftXt.h. */
#define FFT_FIELD(field, export) __typeof__(cufft##field) *field;
static struct {
	FFT_SYMS(FFT_FIELD)
} fft;
#undef FFT_FIELD

static pthread_once_t fft_once = PTHREAD_ONCE_INIT;
static int fft_status = -PHOS_CUDA_INITIALIZATION;

static void fft_load(void)
{
	void *lib = phos_lib_find("cuFFT", "PHOS_CUFFT_LIB", "libcufft.so.12", "cu13");

	if (!lib) {
		phos_err("cuda: cannot load libcufft.so.12 (PHOS_CUFFT_LIB, the loader path, pip's nvidia/cu13/lib, "
			 "$CUDA_HOME/lib64 and /usr/local/cuda/lib64 tried)");
		return;
	}
#define FFT_LOAD(field, export)                                                 \
	{                                                                       \
		void *p_ = dlsym(lib, export);                                  \
		if (!p_) {                                                      \
			phos_err("cuda: libcufft.so.12 lacks %s", export);      \
			return;                                                 \
		}                                                               \
		memcpy(&fft.field, &p_, sizeof(p_));                            \
	}
	FFT_SYMS(FFT_LOAD)
#undef FFT_LOAD
	fft_status = 0;
}

/* The library loaded and the device's context current: 0, or the error
 * (and *st CUFFT_SETUP_FAILED without a usable library). */
static int ready(struct phos_device *dev, int *st)
{
	pthread_once(&fft_once, fft_load);
	*st = 0;
	if (fft_status < 0) {
		*st = PHOS_FFT_SETUP_FAILED;
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

struct cuda_fft_plan {
	cufftHandle h;
	void *stream;           /* bound with cufftSetStream */
};

static int cuda_fft_version(struct phos_device *dev, struct phos_reply_fft_version *ret, int *st)
{
	READY();
	*st = fft.GetVersion(&ret->version);
	if (!*st)
		*st = fft.GetProperty(MAJOR_VERSION, &ret->major);
	if (!*st)
		*st = fft.GetProperty(MINOR_VERSION, &ret->minor);
	if (!*st)
		*st = fft.GetProperty(PATCH_LEVEL, &ret->patch);
	return 0;
}

/* The input, output and execution data types of a cufftType. */
static void types_of(int type, cudaDataType t[3])
{
	bool dbl = phos_fft_double(type);
	cudaDataType c = dbl ? CUDA_C_64F : CUDA_C_32F, r = dbl ? CUDA_R_64F : CUDA_R_32F;

	t[0] = phos_fft_real_in(type) ? r : c;
	t[1] = phos_fft_real_out(type) ? r : c;
	t[2] = c;
}

/* cufftXtMakePlanMany (size false) or cufftXtGetSizeMany of p on h. */
static cufftResult make_many(cufftHandle h, const struct phos_fft_plan *p, bool size, size_t *ws)
{
	long long n[PHOS_FFT_RANK_MAX], in[PHOS_FFT_RANK_MAX], on[PHOS_FFT_RANK_MAX];
	cudaDataType t[3];

	for (int k = 0; k < PHOS_FFT_RANK_MAX; k++) {
		n[k] = p->n[k];
		in[k] = p->inembed[k];
		on[k] = p->onembed[k];
	}
	types_of(p->type, t);
	return (size ? fft.XtGetSizeMany : fft.XtMakePlanMany)(h, p->rank, n, p->advanced ? in : NULL, p->istride,
								 p->idist, t[0], p->advanced ? on : NULL, p->ostride,
								 p->odist, t[1], p->batch, ws, t[2]);
}

static int cuda_fft_plan_make(struct phos_device *dev, const struct phos_fft_plan *p, void **ret, uint64_t *ret_work,
			      int *st)
{
	struct cuda_fft_plan *pl;
	size_t ws = 0;

	READY();
	pl = calloc(1, sizeof(*pl));
	if (!pl)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	*st = fft.Create(&pl->h);
	if (*st) {
		free(pl);
		return 0;
	}
	*st = make_many(pl->h, p, false, &ws);
	if (*st) {
		fft.Destroy(pl->h);
		free(pl);
		return 0;
	}
	*ret = pl;
	*ret_work = ws;
	return 0;
}

static int cuda_fft_plan_size(struct phos_device *dev, const struct phos_fft_plan *p, uint64_t *ret_work, int *st)
{
	cufftHandle h;
	size_t ws = 0;

	READY();
	*st = fft.Create(&h);
	if (*st)
		return 0;
	*st = make_many(h, p, true, &ws);
	fft.Destroy(h);
	*ret_work = ws;
	return 0;
}

static void cuda_fft_plan_destroy(struct phos_device *dev, void *plan)
{
	struct cuda_fft_plan *pl = plan;
	int s;

	if (pl && ready(dev, &s) == 0 && !s)
		fft.Destroy(pl->h);
	free(pl);
}

static int cuda_fft_exec(struct phos_device *dev, void *plan, const struct phos_fft_plan *p, void *stream,
			 uint64_t in, uint64_t out, int direction, int *st)
{
	struct cuda_fft_plan *pl = plan;

	(void)p;
	READY();
	if (pl->stream != stream) {   /* (a new plan runs on the default stream, NULL) */
		*st = fft.SetStream(pl->h, stream);
		if (*st)
			return 0;
		pl->stream = stream;
	}
	*st = fft.XtExec(pl->h, (void *)(uintptr_t)in, (void *)(uintptr_t)out, direction);
	return 0;
}

const struct phos_fft_ops phos_fft_cuda = {
	.version = cuda_fft_version,
	.plan_make = cuda_fft_plan_make,
	.plan_size = cuda_fft_plan_size,
	.plan_destroy = cuda_fft_plan_destroy,
	.exec = cuda_fft_exec,
};
