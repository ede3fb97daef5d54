/* SPDX-License-Identifier: MIT */
/* cudaError_t: the thread's last error, names and descriptions, and the stub hook. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include "internal.h"
#include "log.h"

struct err_entry {
	int value;
	const char *name;
	const char *desc;
};

/* Every code of the toolkit's driver_types.h (generated at build time). */
static const struct err_entry errors[] = {
#include "errors_table.h"
};

/* CUDA's own strings for the codes programs print most. */
static const struct err_entry short_desc[] = {
	{ cudaSuccess, NULL, "no error" },
	{ cudaErrorInvalidValue, NULL, "invalid argument" },
	{ cudaErrorMemoryAllocation, NULL, "out of memory" },
	{ cudaErrorInitializationError, NULL, "initialization error" },
	{ cudaErrorCudartUnloading, NULL, "driver shutting down" },
	{ cudaErrorInvalidConfiguration, NULL, "invalid configuration argument" },
	{ cudaErrorInvalidPitchValue, NULL, "invalid pitch argument" },
	{ cudaErrorInvalidSymbol, NULL, "invalid device symbol" },
	{ cudaErrorInvalidDevicePointer, NULL, "invalid device pointer" },
	{ cudaErrorInvalidMemcpyDirection, NULL, "invalid copy direction for memcpy" },
	{ cudaErrorMissingConfiguration, NULL, "__global__ function call is not configured" },
	{ cudaErrorInvalidDeviceFunction, NULL, "invalid device function" },
	{ cudaErrorDevicesUnavailable, NULL, "CUDA-capable device(s) is/are busy or unavailable" },
	{ cudaErrorNoDevice, NULL, "no CUDA-capable device is detected" },
	{ cudaErrorInvalidDevice, NULL, "invalid device ordinal" },
	{ cudaErrorInvalidKernelImage, NULL, "device kernel image is invalid" },
	{ cudaErrorNoKernelImageForDevice, NULL, "no kernel image is available for execution on the device" },
	{ cudaErrorInvalidResourceHandle, NULL, "invalid resource handle" },
	{ cudaErrorSymbolNotFound, NULL, "named symbol not found" },
	{ cudaErrorNotReady, NULL, "device not ready" },
	{ cudaErrorIllegalAddress, NULL, "an illegal memory access was encountered" },
	{ cudaErrorLaunchOutOfResources, NULL, "too many resources requested for launch" },
	{ cudaErrorLaunchFailure, NULL, "unspecified launch failure" },
	{ cudaErrorNotSupported, NULL, "operation not supported" },
	{ cudaErrorUnknown, NULL, "unknown error" },
};

static const struct err_entry *find(const struct err_entry *t, size_t n, int value)
{
	for (size_t i = 0; i < n; i++)
		if (t[i].value == value)
			return &t[i];
	return NULL;
}

PHOS_EXPORT const char *cudaGetErrorName(cudaError_t error)
{
	const struct err_entry *e = find(errors, sizeof(errors) / sizeof(errors[0]), (int)error);

	return e ? e->name : "unrecognized error code";
}

PHOS_EXPORT const char *cudaGetErrorString(cudaError_t error)
{
	const struct err_entry *e = find(short_desc, sizeof(short_desc) / sizeof(short_desc[0]), (int)error);

	if (e)
		return e->desc;
	e = find(errors, sizeof(errors) / sizeof(errors[0]), (int)error);
	return e ? e->desc : "unrecognized error code";
}

PHOS_EXPORT cudaError_t cudaGetLastError(void)
{
	return (cudaError_t)phos_take_error();
}

PHOS_EXPORT cudaError_t cudaPeekAtLastError(void)
{
	return (cudaError_t)phos_peek_error();
}

/* Called by every generated stub (stubs.c). */
int phos_cudart_stub(const char *name, int *logged);
int phos_cudart_stub(const char *name, int *logged)
{
	phos_log_once("CUDA runtime API", name, logged);
	return phos_set_error(cudaErrorNotSupported);
}

/* Profiler ranges are a no-op here, not an error: programs bracket work with them. */
PHOS_EXPORT cudaError_t cudaProfilerStart(void)
{
	return cudaSuccess;
}

PHOS_EXPORT cudaError_t cudaProfilerStop(void)
{
	return cudaSuccess;
}

PHOS_EXPORT void phos_refuse_once(const char *what, const char *reason, const char *tail)
{
	static char told[64][96];
	static unsigned ntold;
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	bool say = true;

	pthread_mutex_lock(&lock);
	for (unsigned i = 0; i < ntold && say; i++)
		say = strncmp(told[i], reason, sizeof(told[i]) - 1) != 0;
	if (say && ntold < 64)
		snprintf(told[ntold++], sizeof(told[0]), "%s", reason);
	pthread_mutex_unlock(&lock);
	if (say)
		fprintf(stderr, "phos-fn: %s: %s is not supported under phos-fn%s\n", what, reason, tail);
}
