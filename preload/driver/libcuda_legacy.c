/* SPDX-License-Identifier: MIT */
/*
 * The driver API stand-in, part four: the legacy execution control that
 * CUDA still exports (deprecated since CUDA 4.0, declared in CUDA 13's
 * cuda.h) and old driver-API programs launch with: cuFuncSetBlockShape,
 * cuFuncSetSharedSize, cuParamSetSize, cuParamSeti/f/v, cuLaunch,
 * cuLaunchGrid and cuLaunchGridAsync.
 *
 * A function's block shape, dynamic shared memory and parameter buffer are
 * kept here, per CUfunction, as the driver keeps them; a launch is
 * cuLaunchKernel with that buffer as extra's packed parameters
 * (CU_LAUNCH_PARAM_BUFFER_POINTER), so it carries the same read/write sets.
 * A launch before cuFuncSetBlockShape, a parameter past the 4 KiB the
 * legacy API allows, or a handle that is no function is
 * CUDA_ERROR_INVALID_VALUE (a bad handle: CUDA_ERROR_INVALID_HANDLE).
 * cuParamSetTexRef (texture references, gone since CUDA 12) stays a stub.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "libcuda_internal.h"

#define LEGACY_PARAM_MAX 4096u   /* the legacy API's parameter space */
#define LEGACY_FUNCS_MAX 4096u   /* functions with legacy state at once */

struct legacy {
	struct legacy *next;
	CUfunction f;
	uint32_t block[3];      /* 0: not set yet */
	unsigned shmem;
	size_t size;            /* cuParamSetSize's bytes */
	unsigned char params[LEGACY_PARAM_MAX];
};

static pthread_mutex_t legacy_lock = PTHREAD_MUTEX_INITIALIZER;
static struct legacy *funcs;   /* under legacy_lock */
static unsigned nfuncs;

/* f's state, made on first use, with legacy_lock held; or NULL, the lock
 * not held, and the error in *r (not a function, no memory, or too many
 * functions). Callers unlock. */
static struct legacy *state_lock(CUfunction f, CUresult *r)
{
	struct legacy *s;

	if (!phos_handle_unwrap(f, PHOS_H_FUNC)) {
		*r = CUDA_ERROR_INVALID_HANDLE;
		return NULL;
	}
	pthread_mutex_lock(&legacy_lock);
	for (s = funcs; s; s = s->next)
		if (s->f == f)
			return s;
	if (nfuncs == LEGACY_FUNCS_MAX || !(s = calloc(1, sizeof(*s)))) {
		pthread_mutex_unlock(&legacy_lock);
		*r = CUDA_ERROR_OUT_OF_MEMORY;
		return NULL;
	}
	s->f = f;
	s->next = funcs;
	funcs = s;
	nfuncs++;
	return s;
}

PHOS_EXPORT CUresult cuFuncSetBlockShape(CUfunction hfunc, int x, int y, int z)
{
	struct legacy *st;
	CUresult r;

	NEED_INIT();
	if (x <= 0 || y <= 0 || z <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(st = state_lock(hfunc, &r)))
		return r;
	st->block[0] = (uint32_t)x;
	st->block[1] = (uint32_t)y;
	st->block[2] = (uint32_t)z;
	pthread_mutex_unlock(&legacy_lock);
	return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuFuncSetSharedSize(CUfunction hfunc, unsigned int bytes)
{
	struct legacy *st;
	CUresult r;

	NEED_INIT();
	if (!(st = state_lock(hfunc, &r)))
		return r;
	st->shmem = bytes;
	pthread_mutex_unlock(&legacy_lock);
	return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuParamSetSize(CUfunction hfunc, unsigned int numbytes)
{
	struct legacy *st;
	CUresult r;

	NEED_INIT();
	if (numbytes > LEGACY_PARAM_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(st = state_lock(hfunc, &r)))
		return r;
	st->size = numbytes;
	pthread_mutex_unlock(&legacy_lock);
	return CUDA_SUCCESS;
}

/* numbytes of ptr at offset of f's parameter buffer. */
static CUresult param_set(CUfunction f, int offset, const void *ptr, unsigned numbytes)
{
	struct legacy *st;
	CUresult r;

	NEED_INIT();
	if (offset < 0 || (!ptr && numbytes) || (uint64_t)offset + numbytes > LEGACY_PARAM_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(st = state_lock(f, &r)))
		return r;
	if (numbytes)
		memcpy(st->params + offset, ptr, numbytes);
	pthread_mutex_unlock(&legacy_lock);
	return CUDA_SUCCESS;
}

PHOS_EXPORT CUresult cuParamSetv(CUfunction hfunc, int offset, void *ptr, unsigned int numbytes)
{
	return param_set(hfunc, offset, ptr, numbytes);
}

PHOS_EXPORT CUresult cuParamSeti(CUfunction hfunc, int offset, unsigned int value)
{
	return param_set(hfunc, offset, &value, sizeof(value));
}

PHOS_EXPORT CUresult cuParamSetf(CUfunction hfunc, int offset, float value)
{
	return param_set(hfunc, offset, &value, sizeof(value));
}

/* A launch of grid w x h on stream with f's legacy state. */
static CUresult legacy_launch(CUfunction f, int w, int h, CUstream stream)
{
	unsigned char params[LEGACY_PARAM_MAX];
	struct legacy *st;
	uint32_t block[3];
	unsigned shmem;
	size_t size;
	CUresult r;

	NEED_INIT();
	if (w <= 0 || h <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(st = state_lock(f, &r)))
		return r;
	memcpy(block, st->block, sizeof(block));
	shmem = st->shmem;
	size = st->size;
	memcpy(params, st->params, size);
	pthread_mutex_unlock(&legacy_lock);
	if (!block[0])
		return CUDA_ERROR_INVALID_VALUE;   /* no cuFuncSetBlockShape */
	void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, params, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
			  CU_LAUNCH_PARAM_END };
	return cuLaunchKernel(f, (unsigned)w, (unsigned)h, 1, block[0], block[1], block[2], shmem, stream, NULL,
			      size ? extra : NULL);
}

PHOS_EXPORT CUresult cuLaunch(CUfunction f)
{
	return legacy_launch(f, 1, 1, NULL);
}

PHOS_EXPORT CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height)
{
	return legacy_launch(f, grid_width, grid_height, NULL);
}

PHOS_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream)
{
	return legacy_launch(f, grid_width, grid_height, hStream);
}
