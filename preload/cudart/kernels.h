/* SPDX-License-Identifier: MIT */
/*
 * The registry of modules, kernels and device variables (kernels.c), for the
 * launches (launch.c) and the graphs' kernel nodes (graph.c): what nvcc's
 * registration and the driver API's module loads leave, and what a launch
 * needs of a kernel.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "internal.h"

#define FATBIN_WRAPPER_MAGIC 0x466243b1
#define MAX_FATBIN (1ull << 30)
#define MAX_NAME 4096

struct fatbin_wrapper {
	int magic;
	int version;
	const unsigned long long *data;
	void *filename_or_fatbins;
};

struct func;
struct var;

struct module {
	uint32_t id;
	bool valid;          /* the fatbin validated */
	bool sent;           /* the executor has it, its kernels and variables (lazy_lock) */
	bool owned;          /* image is our copy (cuModuleLoadData), freed at unload */
	const void *image;
	size_t size;
	struct func *funcs;  /* registered kernels and variables, newest first (lazy_lock) */
	struct var *vars;
};

struct func {
	uint32_t id;
	struct module *mod;
	struct func *next;   /* on mod->funcs */
	bool registered;     /* the executor has it (lazy_lock; read with acquire) */
	const void *host;    /* the host stub nvcc registered; NULL: cuModuleGetFunction */
	char *name;
	bool missing;        /* cuModuleGetFunction of a name the module lacks */
	pthread_mutex_t lock;
	bool have_info;
	struct phos_reply_func_info info;
};

struct var {
	uint32_t id;
	struct module *mod;
	struct var *next;    /* on mod->vars */
	bool registered;     /* the executor has it (lazy_lock) */
	const void *host;    /* the host shadow of the variable; NULL: cuModuleGetGlobal */
	char *name;
	uint64_t size;
	int constant;
	/* where the executor put it, per device (a copy on each) */
	bool have_info[PHOS_MAX_DEVICES];
	uint64_t addr[PHOS_MAX_DEVICES], dev_size[PHOS_MAX_DEVICES];
	bool given[PHOS_MAX_DEVICES];   /* its address went to the program (the executor knows) */
};

/* The hidden API, as crt/host_runtime.h and crt/device_functions.h declare it
 * (for C++ only, hence repeated here). */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
char __cudaInitModule(void **fatCubinHandle);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
			    int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);
void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress, const char *deviceName, int ext,
		       size_t size, int constant, int global);
void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress, char *deviceAddress,
			      const char *deviceName, int ext, size_t size, int constant, int global);
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, struct CUstream_st *stream);
cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream);
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
			       cudaStream_t stream);

/* func from a host stub or from a cudaKernel_t we handed out; NULL: none. */
struct func *phos_func_lookup(const void *p);
/* func of a host stub nvcc registered; NULL: none. */
struct func *phos_func_of_stub(const void *host);
/* The executor has f (and its module, and the module's variables): sends
 * what it lacks. cudaErrorInvalidKernelImage for a refused module. */
int phos_func_ensure(struct func *f);
/* The kernel's FUNC_INFO (its module sent first), fetched on first use. A
 * failure is not cached: the status of a synchronous reply may be an earlier
 * asynchronous error. */
int phos_func_info(struct func *f, struct phos_reply_func_info *ret);
/* Checks a launch of f and packs its parameters: *ret_l (stream unset,
 * flags 0), *ret_params (malloc'd, param_bytes; the caller frees it) and the
 * kernel's layout in *ret_fi. f NULL: cudaErrorInvalidDeviceFunction. */
int phos_func_prepare(struct func *f, const uint32_t grid[3], const uint32_t block[3], size_t shmem, void **args,
		      struct phos_launch_ex *ret_l, void **ret_params, struct phos_reply_func_info *ret_fi);
