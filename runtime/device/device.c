/* SPDX-License-Identifier: MIT */
/*
 * Backend choice: "sim", "cuda", or "auto" (cuda when a driver reports a GPU).
 *
 * The probe dlopens libcuda.so.1 (never linked: CI machines have no driver),
 * calls cuInit(0) and cuDeviceGetCount, and closes the library again. It makes
 * no context. The answer is computed once per process.
 */
#include "device.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "log.h"

typedef int (*cu_init_fn)(unsigned int flags);          /* CUresult cuInit(unsigned int) */
typedef int (*cu_device_count_fn)(int *ret_count);      /* CUresult cuDeviceGetCount(int *) */

static pthread_once_t cuda_probe_once = PTHREAD_ONCE_INIT;
static bool cuda_present;

static void cuda_probe(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
	cu_init_fn init;
	cu_device_count_fn count;
	int n = 0;

	if (!lib) {
		phos_debug("no CUDA driver: %s", dlerror());
		return;
	}
	init = (cu_init_fn)dlsym(lib, "cuInit");
	count = (cu_device_count_fn)dlsym(lib, "cuDeviceGetCount");
	if (!init || !count) {
		phos_warn("libcuda.so.1 lacks cuInit/cuDeviceGetCount");
	} else if (init(0) != 0) {
		phos_debug("cuInit failed: no usable GPU");
	} else if (count(&n) == 0 && n > 0) {
		cuda_present = true;
	}
	dlclose(lib);
}

bool phos_device_cuda_available(void)
{
	pthread_once(&cuda_probe_once, cuda_probe);
	return cuda_present;
}

const struct phos_device_ops *phos_device_pick(const char *name)
{
	if (!name || !strcmp(name, "auto"))
		return phos_device_cuda_available() ? &phos_device_cuda : &phos_device_sim;
	if (!strcmp(name, "sim"))
		return &phos_device_sim;
	if (!strcmp(name, "cuda"))
		return &phos_device_cuda;
	return NULL;
}
