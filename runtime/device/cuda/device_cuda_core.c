/* SPDX-License-Identifier: MIT */
/*
 * The cuda backend's core, below device_cuda.c and its sub-files alike
 * (cuBLAS, cuBLASLt, graphs, solver, sparse, ...): the driver's and cuBLAS's
 * symbols (loaded once per process through dlopen; device_cuda_syms.h), the
 * conversion and logging of failed driver and cuBLAS calls, and making a
 * device's context current on the calling thread. It calls nothing of the
 * backend's other files.
 */
#include "device_cuda_syms.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

struct cuda_driver_syms cuda_drv;
struct cuda_blas_syms cuda_cublas;



/* ------------------------------------------------------------------------ */
/* Symbols                                                                    */

struct cu_sym_desc {
	const char *name;    /* base name for cuGetProcAddress */
	int version;         /* CUDA version of the ABI we call */
	const char *export;  /* the exported name of that version */
	size_t offset;       /* into struct cuda_driver_syms */
};

#define CU_SYM_DESC(field, name, version, export, type) \
	{ name, version, export, offsetof(struct cuda_driver_syms, field) },
static const struct cu_sym_desc cu_sym_table[] = { CU_SYMS(CU_SYM_DESC) };
#undef CU_SYM_DESC

struct blas_sym_desc {
	const char *export;
	size_t offset;
};

#define BLAS_SYM_DESC(field, export, ret, args) { export, offsetof(struct cuda_blas_syms, field) },
static const struct blas_sym_desc blas_sym_table[] = { BLAS_SYMS(BLAS_SYM_DESC) };
#undef BLAS_SYM_DESC

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static int driver_status;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;
static int blas_status;

static void sym_store(void *table, size_t offset, void *fn)
{
	/* Function pointers and void * have the same size on every platform CUDA supports. */
	memcpy((char *)table + offset, &fn, sizeof(fn));
}

/* Where distributions install the driver, for when the soname finds ours. */
static const char *const driver_paths[] = {
	"/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1", "/usr/lib/libcuda.so.1",
	"/lib/x86_64-linux-gnu/libcuda.so.1",
};

static void driver_load(void)
{
	PFN_cuGetProcAddress_v12000 get_proc = NULL;
	void *lib, *p;
	size_t i;

	lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	/* phos-fn's own stand-in (preload/driver/libcuda.c) forwards to an executor: an
	 * executor that found it (the preload folder in its LD_LIBRARY_PATH)
	 * must look for the real driver where drivers are installed. */
	if (lib && dlsym(lib, "phos_cuda_standin")) {
		phos_warn("cuda: libcuda.so.1 is phos-fn's stand-in here; looking for the real driver");
		dlclose(lib);
		lib = NULL;
		for (size_t k = 0; !lib && k < sizeof(driver_paths) / sizeof(driver_paths[0]); k++) {
			lib = dlopen(driver_paths[k], RTLD_NOW | RTLD_LOCAL);
			if (lib && dlsym(lib, "phos_cuda_standin")) {
				dlclose(lib);
				lib = NULL;
			}
		}
	}
	if (!lib) {
		phos_err("cuda: cannot load the driver libcuda.so.1: %s", dlerror());
		driver_status = -PHOS_CUDA_INITIALIZATION;
		return;
	}
	p = dlsym(lib, "cuGetProcAddress_v2");
	memcpy(&get_proc, &p, sizeof(p));

	for (i = 0; i < sizeof(cu_sym_table) / sizeof(cu_sym_table[0]); i++) {
		const struct cu_sym_desc *s = &cu_sym_table[i];
		CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;

		p = NULL;
		/* LEGACY_STREAM: the variants whose NULL stream is the legacy default
		 * stream (never the _ptsz/_ptds ones). */
		if (get_proc && (get_proc(s->name, &p, s->version, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
					  &found) != CUDA_SUCCESS ||
				 found != CU_GET_PROC_ADDRESS_SUCCESS))
			p = NULL;
		if (!p)
			p = dlsym(lib, s->export);
		if (!p) {
			phos_err("cuda: the driver lacks %s (%s, CUDA %d.%d ABI); it is too old for phos",
				 s->export, s->name, s->version / 1000, s->version % 1000 / 10);
			driver_status = -PHOS_CUDA_INITIALIZATION;
			return;
		}
		sym_store(&cuda_drv, s->offset, p);
	}
	phos_debug("cuda: %zu driver symbols resolved%s", i,
		   get_proc ? " through cuGetProcAddress_v2" : " by dlsym");
}

void *cuda_lib_open(const char *soname)
{
	char path[4096];
	const char *home = getenv("CUDA_HOME");
	const char *dirs[] = { home, home, "/usr/local/cuda", "/usr/local/cuda" };
	const char *subdirs[] = { "lib64", "lib", "lib64", "lib" };
	const char *first_error;
	void *lib;
	size_t i;

	/* The soname through the loader's search path first, then the usual toolkit folders. */
	lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
	first_error = lib ? NULL : strdup(dlerror() ?: "unknown error");
	for (i = 0; !lib && i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		if (!dirs[i] || !*dirs[i])
			continue;
		snprintf(path, sizeof(path), "%s/%s/%s", dirs[i], subdirs[i], soname);
		lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	}
	if (!lib)
		phos_err("cuda: cannot load %s (also looked in $CUDA_HOME and /usr/local/cuda): %s", soname,
			 first_error ?: "not found");
	free((void *)first_error);
	return lib;
}

static void blas_load(void)
{
	void *lib = cuda_lib_open("libcublas.so.13"), *p;
	size_t i;

	if (!lib) {
		blas_status = -PHOS_CUDA_INITIALIZATION;
		return;
	}

	for (i = 0; i < sizeof(blas_sym_table) / sizeof(blas_sym_table[0]); i++) {
		p = dlsym(lib, blas_sym_table[i].export);
		if (!p) {
			phos_err("cuda: libcublas.so.13 lacks %s", blas_sym_table[i].export);
			blas_status = -PHOS_CUDA_INITIALIZATION;
			return;
		}
		sym_store(&cuda_cublas, blas_sym_table[i].offset, p);
	}
}

int cuda_driver_syms_load(void)
{
	pthread_once(&driver_once, driver_load);
	return driver_status;
}

int cuda_syms_load(void)
{
	int r = cuda_driver_syms_load();

	if (r < 0)
		return r;
	pthread_once(&blas_once, blas_load);
	return blas_status;
}

/* ------------------------------------------------------------------------ */
/* Errors                                                                     */

/*
 * CUresult and cudaError_t share their numbers for every condition both know
 * (CUDA_ERROR_OUT_OF_MEMORY 2 == cudaErrorMemoryAllocation, CUDA_ERROR_INVALID_HANDLE
 * 400 == cudaErrorInvalidResourceHandle, CUDA_ERROR_NOT_FOUND 500 ==
 * cudaErrorSymbolNotFound, CUDA_ERROR_INVALID_IMAGE 200 == cudaErrorInvalidKernelImage,
 * ...; checked against the CUDA 13.0 cuda.h and driver_types.h). Only two
 * driver codes have no runtime twin; they become cudaErrorUnknown, as does
 * anything outside the runtime's range. Call sites convert a few codes where
 * the runtime reports another error for the same API (module loads, kernel
 * lookups, launch configurations).
 */
int cu_to_phos(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS:
		return 0;
	case CUDA_ERROR_CONTEXT_ALREADY_CURRENT: /* 202, deprecated */
	case CUDA_ERROR_KEY_ROTATION:            /* 916 */
		return PHOS_CUDA_UNKNOWN;
	default:
		if ((int)r <= 0 || (int)r > PHOS_CUDA_UNKNOWN)
			return PHOS_CUDA_UNKNOWN;
		return (int)r;
	}
}

static const char *cu_name(CUresult r)
{
	const char *s = NULL;

	if (!cuda_drv.GetErrorName || cuda_drv.GetErrorName(r, &s) != CUDA_SUCCESS || !s)
		return "CUDA_ERROR_?";
	return s;
}

static const char *cu_string(CUresult r)
{
	const char *s = NULL;

	if (!cuda_drv.GetErrorString || cuda_drv.GetErrorString(r, &s) != CUDA_SUCCESS || !s)
		return "unknown error";
	return s;
}

int cu_fail(CUresult r, const char *expr, const char *file, int line)
{
	phos_log_at(PHOS_LOG_ERROR, file, line, "cuda: %s: %s (%d): %s", expr, cu_name(r), (int)r,
		    cu_string(r));
	return -cu_to_phos(r);
}

/* cublasStatus_t → negated cudaError_t (the table in device_cuda_blas.c). */
static int blas_to_phos(cublasStatus_t s)
{
	switch (s) {
	case CUBLAS_STATUS_SUCCESS:
		return 0;
	case CUBLAS_STATUS_INVALID_VALUE:
		return -PHOS_CUDA_INVALID_VALUE;
	case CUBLAS_STATUS_NOT_SUPPORTED:
	case CUBLAS_STATUS_ARCH_MISMATCH:
		return -PHOS_CUDA_NOT_SUPPORTED;
	case CUBLAS_STATUS_ALLOC_FAILED:
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	case CUBLAS_STATUS_NOT_INITIALIZED:
		return -PHOS_CUDA_INITIALIZATION;
	case CUBLAS_STATUS_EXECUTION_FAILED:
		return -PHOS_CUDA_LAUNCH_FAILURE;
	default:
		return -PHOS_CUDA_UNKNOWN;
	}
}

int cuda_blas_fail(cublasStatus_t s, const char *expr, const char *file, int line)
{
	const char *name = cuda_cublas.GetStatusName ? cuda_cublas.GetStatusName(s) : NULL;

	phos_log_at(PHOS_LOG_ERROR, file, line, "cuda: %s: %s (%d)", expr, name ?: "CUBLAS_STATUS_?",
		    (int)s);
	return blas_to_phos(s);
}

/* Ends a call that reports its cublasStatus_t to the caller (device_cuda_syms.h). */
int cuda_blas_result(cublasStatus_t s, int *ret_blas_status, const char *what)
{
	if (ret_blas_status)
		*ret_blas_status = (int)s;
	if (s == CUBLAS_STATUS_SUCCESS)
		return 0;
	return cuda_blas_fail(s, what, __FILE__, __LINE__);
}

/* ------------------------------------------------------------------------ */
/* Context                                                                    */

/* Generation of the device whose context this thread made current last (0: none).
 * Generations are never reused, so a closed device cannot alias a new one. */
static __thread uint64_t tls_current_gen;
static uint64_t next_gen;

int cuda_current(struct cuda_dev *d)
{
	if (tls_current_gen == d->gen)
		return 0;
	CU_CHECK(cuda_drv.CtxSetCurrent(d->ctx));
	tls_current_gen = d->gen;
	return 0;
}

uint64_t cuda_gen_next(void)
{
	return __atomic_add_fetch(&next_gen, 1, __ATOMIC_RELAXED);
}

void cuda_current_forget(const struct cuda_dev *d)
{
	if (tls_current_gen == d->gen)
		tls_current_gen = 0;
}
