/* SPDX-License-Identifier: MIT */
/*
 * The driver API stand-in, part three: JIT linking (cuLinkCreate,
 * cuLinkAddData, cuLinkAddFile, cuLinkComplete, cuLinkDestroy), as a
 * program that compiles PTX at run time writes it (NVIDIA's ptxjit: one PTX
 * input, its output given to cuModuleLoadData).
 *
 * A link of one input (PTX, a cubin or a fatbin) completes to that input
 * itself: cuModuleLoadData takes all three, and a PTX module keeps what the
 * access analysis reads in it (a linked cubin would make its kernels
 * opaque). Its errors come at cuModuleLoadData, as CUDA_ERROR_INVALID_IMAGE
 * (the driver would report a bad PTX at cuLinkAddData).
 *
 * Several inputs (relocatable device code: PTX, cubins, fatbins, host
 * objects and libraries with device code, as Numba links its PTX with
 * libcudadevrt.a) are linked here, in the function's process, by NVIDIA's
 * nvJitLink (libnvJitLink.so.13, loaded on the first such link; it needs no
 * GPU) for the current device's sm_XY. The output is a cubin, so its
 * kernels are opaque to the access analysis (their launches get the
 * conservative set). Link errors are nvJitLink's: its error log goes to the
 * state's CU_JIT_ERROR_LOG_BUFFER, and a PTX that does not compile is
 * CUDA_ERROR_INVALID_PTX, anything else CUDA_ERROR_INVALID_IMAGE. Without
 * nvJitLink, or for NVVM IR (LTO), the link is refused with
 * CUDA_ERROR_NOT_SUPPORTED, named once in the log. The other JIT options
 * are answered as cuModuleLoadDataEx answers them.
 *
 * A state is a handle this file made: another pointer is
 * CUDA_ERROR_INVALID_HANDLE, never a read of it. The output lives until
 * cuLinkDestroy, as CUDA says.
 */
#include <dlfcn.h>
#include <nvJitLink.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kparam.h"
#include "libcuda_internal.h"

#define LINK_MAX_INPUTS 64
#define LINK_MAX_INPUT_BYTES (1ull << 30)

struct link_input {
	CUjitInputType type;
	char *data;     /* a copy; PTX NUL-terminated */
	size_t size;    /* as given (PTX: with its NUL when the caller counted it) */
	char name[128]; /* as given (cuLinkAddData's name, cuLinkAddFile's path), for nvJitLink's log */
};

struct link {
	struct link *next;
	struct link_input in[LINK_MAX_INPUTS];
	unsigned n;
	char *error_log;        /* cuLinkCreate's CU_JIT_ERROR_LOG_BUFFER, or NULL */
	size_t error_room;      /* its CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES */
	void *linked;           /* nvJitLink's cubin, freed by cuLinkDestroy */
	size_t linked_size;
};

static pthread_mutex_t links_lock = PTHREAD_MUTEX_INITIALIZER;
static struct link *links;   /* the live states, under links_lock */

/* The state behind handle s (links_lock held), or NULL. */
static struct link *link_of(CUlinkState s)
{
	for (struct link *l = links; l; l = l->next)
		if ((CUlinkState)l == s)
			return l;
	return NULL;
}

PHOS_EXPORT CUresult cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options, void **optionValues,
				     CUlinkState *stateOut)
{
	struct link *l;

	NEED_INIT();
	if (!stateOut || (numOptions && (!options || !optionValues)))
		return CUDA_ERROR_INVALID_VALUE;
	l = calloc(1, sizeof(*l));
	if (!l)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (unsigned i = 0; i < numOptions; i++) {
		if (options[i] == CU_JIT_ERROR_LOG_BUFFER)
			l->error_log = optionValues[i];
		else if (options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
			l->error_room = (size_t)(uintptr_t)optionValues[i];
	}
	if (!l->error_log)
		l->error_room = 0;
	cu_jit_options_answer(numOptions, options, optionValues);
	pthread_mutex_lock(&links_lock);
	l->next = links;
	links = l;
	pthread_mutex_unlock(&links_lock);
	*stateOut = (CUlinkState)l;
	return CUDA_SUCCESS;
}

/* Whether data (size bytes) is an input of type t this stand-in links. */
static CUresult input_check(CUjitInputType t, const void *data, size_t size)
{
	static int logged;
	enum phos_modimage_kind k = phos_modimage_kind(data, size);

	switch (t) {
	case CU_JIT_INPUT_PTX:
		return k == PHOS_MODIMAGE_PTX ? CUDA_SUCCESS : CUDA_ERROR_INVALID_PTX;
	case CU_JIT_INPUT_CUBIN:
		return k == PHOS_MODIMAGE_CUBIN ? CUDA_SUCCESS : CUDA_ERROR_INVALID_IMAGE;
	case CU_JIT_INPUT_FATBINARY:
		return k == PHOS_MODIMAGE_FATBIN ? CUDA_SUCCESS : CUDA_ERROR_INVALID_IMAGE;
	case CU_JIT_INPUT_OBJECT:   /* a host ELF object with device code */
		return size >= 4 && !memcmp(data, "\177ELF", 4) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_IMAGE;
	case CU_JIT_INPUT_LIBRARY:  /* an ar archive of such objects */
		return size >= 8 && !memcmp(data, "!<arch>\n", 8) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_IMAGE;
	case CU_JIT_INPUT_NVVM:
		phos_log_once("CUDA driver API", "cuLinkAddData of NVVM IR (link-time optimization)", &logged);
		return CUDA_ERROR_NOT_SUPPORTED;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* Adds a copy of data to state s, called name (or NULL) in link errors. */
static CUresult link_add(CUlinkState s, CUjitInputType type, const void *data, size_t size, const char *name)
{
	struct link *l;
	char *copy;
	CUresult r;

	if (!data || !size || size > LINK_MAX_INPUT_BYTES)
		return CUDA_ERROR_INVALID_VALUE;
	r = input_check(type, data, size);
	if (r)
		return r;
	copy = malloc(size + 1);
	if (!copy)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(copy, data, size);
	copy[size] = '\0';
	pthread_mutex_lock(&links_lock);
	l = link_of(s);
	r = !l ? CUDA_ERROR_INVALID_HANDLE : l->n == LINK_MAX_INPUTS ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
	if (r == CUDA_SUCCESS) {
		l->in[l->n] = (struct link_input){ .type = type, .data = copy, .size = size };
		snprintf(l->in[l->n].name, sizeof(l->in[l->n].name), "%s", name ? name : "input");
		l->n++;
		copy = NULL;
	}
	pthread_mutex_unlock(&links_lock);
	free(copy);
	return r;
}

PHOS_EXPORT CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size,
				      const char *name, unsigned int numOptions, CUjit_option *options,
				      void **optionValues)
{
	CUresult r;

	NEED_INIT();
	if (numOptions && (!options || !optionValues))
		return CUDA_ERROR_INVALID_VALUE;
	r = link_add(state, type, data, size, name);
	if (r == CUDA_SUCCESS)
		cu_jit_options_answer(numOptions, options, optionValues);
	return r;
}

PHOS_EXPORT CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path,
				      unsigned int numOptions, CUjit_option *options, void **optionValues)
{
	char *buf = NULL;
	size_t size = 0;
	CUresult r;

	NEED_INIT();
	if (!path || (numOptions && (!options || !optionValues)))
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_read_module_file(path, &buf, &size);
	if (r == CUDA_SUCCESS)
		r = link_add(state, type, buf, type == CU_JIT_INPUT_PTX ? size + 1 : size, path);
	free(buf);
	if (r == CUDA_SUCCESS)
		cu_jit_options_answer(numOptions, options, optionValues);
	return r;
}

/* nvJitLink's entry points (the versioned names its header calls), loaded once. */
static struct {
	nvJitLinkResult (*create)(nvJitLinkHandle *, uint32_t, const char **);
	nvJitLinkResult (*destroy)(nvJitLinkHandle *);
	nvJitLinkResult (*add)(nvJitLinkHandle, nvJitLinkInputType, const void *, size_t, const char *);
	nvJitLinkResult (*complete)(nvJitLinkHandle);
	nvJitLinkResult (*cubin_size)(nvJitLinkHandle, size_t *);
	nvJitLinkResult (*cubin)(nvJitLinkHandle, void *);
	nvJitLinkResult (*error_log_size)(nvJitLinkHandle, size_t *);
	nvJitLinkResult (*error_log)(nvJitLinkHandle, char *);
} jl;
static pthread_once_t jl_once = PTHREAD_ONCE_INIT;
static bool jl_ok;

static void jl_load(void)
{
	static const char *const names[] = { "libnvJitLink.so.13", "/usr/local/cuda/lib64/libnvJitLink.so.13" };
	char path[4096];
	const char *home = getenv("CUDA_HOME");
	void *h = NULL;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !h; i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!h && home && snprintf(path, sizeof(path), "%s/lib64/libnvJitLink.so.13", home) < (int)sizeof(path))
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return;
	*(void **)&jl.create = dlsym(h, "__nvJitLinkCreate_13_0");
	*(void **)&jl.destroy = dlsym(h, "__nvJitLinkDestroy_13_0");
	*(void **)&jl.add = dlsym(h, "__nvJitLinkAddData_13_0");
	*(void **)&jl.complete = dlsym(h, "__nvJitLinkComplete_13_0");
	*(void **)&jl.cubin_size = dlsym(h, "__nvJitLinkGetLinkedCubinSize_13_0");
	*(void **)&jl.cubin = dlsym(h, "__nvJitLinkGetLinkedCubin_13_0");
	*(void **)&jl.error_log_size = dlsym(h, "__nvJitLinkGetErrorLogSize_13_0");
	*(void **)&jl.error_log = dlsym(h, "__nvJitLinkGetErrorLog_13_0");
	jl_ok = jl.create && jl.destroy && jl.add && jl.complete && jl.cubin_size && jl.cubin && jl.error_log_size &&
		jl.error_log;
}

/* nvJitLink's error log into l's CU_JIT_ERROR_LOG_BUFFER (cut to its room). */
static void jl_error_log(struct link *l, nvJitLinkHandle h)
{
	size_t n = 0;
	char *log;

	if (!l->error_room || jl.error_log_size(h, &n) != NVJITLINK_SUCCESS || !n)
		return;
	log = malloc(n + 1);
	if (log && jl.error_log(h, log) == NVJITLINK_SUCCESS) {
		log[n] = '\0';
		snprintf(l->error_log, l->error_room, "%s", log);
	}
	free(log);
}

/* Links l's inputs into one cubin for the current device (l->linked). */
static CUresult jit_link(struct link *l)
{
	static const nvJitLinkInputType type_of[] = {
		[CU_JIT_INPUT_CUBIN] = NVJITLINK_INPUT_CUBIN,   [CU_JIT_INPUT_PTX] = NVJITLINK_INPUT_PTX,
		[CU_JIT_INPUT_FATBINARY] = NVJITLINK_INPUT_FATBIN, [CU_JIT_INPUT_OBJECT] = NVJITLINK_INPUT_OBJECT,
		[CU_JIT_INPUT_LIBRARY] = NVJITLINK_INPUT_LIBRARY,
	};
	static int logged;
	char arch[32];
	const char *opts[] = { arch };
	nvJitLinkHandle h = NULL;
	nvJitLinkResult jr;
	CUdevice dev;
	int major = 0, minor = 0;
	size_t size = 0;
	void *out;
	CUresult r;

	pthread_once(&jl_once, jl_load);
	if (!jl_ok) {
		phos_log_once("CUDA driver API", "cuLinkComplete of several inputs without libnvJitLink.so.13", &logged);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	r = cuCtxGetDevice(&dev);
	if (!r)
		r = cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
	if (!r)
		r = cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
	if (r)
		return r;
	snprintf(arch, sizeof(arch), "-arch=sm_%d%d", major, minor);
	jr = jl.create(&h, 1, opts);
	if (jr != NVJITLINK_SUCCESS)   /* out of memory, or an arch this nvJitLink does not know */
		return jr == NVJITLINK_ERROR_INTERNAL ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_NOT_SUPPORTED;
	for (unsigned i = 0; i < l->n && jr == NVJITLINK_SUCCESS; i++)
		jr = jl.add(h, type_of[l->in[i].type], l->in[i].data, l->in[i].size, l->in[i].name);
	if (jr == NVJITLINK_SUCCESS)
		jr = jl.complete(h);
	if (jr == NVJITLINK_SUCCESS)
		jr = jl.cubin_size(h, &size);
	out = jr == NVJITLINK_SUCCESS ? malloc(size ? size : 1) : NULL;
	if (jr == NVJITLINK_SUCCESS && !out)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	else if (jr == NVJITLINK_SUCCESS)
		jr = jl.cubin(h, out);
	if (jr != NVJITLINK_SUCCESS) {
		jl_error_log(l, h);
		r = jr == NVJITLINK_ERROR_PTX_COMPILE ? CUDA_ERROR_INVALID_PTX : CUDA_ERROR_INVALID_IMAGE;
		free(out);
	} else if (!r) {
		free(l->linked);
		l->linked = out;
		l->linked_size = size;
	}
	jl.destroy(&h);
	return r;
}

/* Whether l completes to its one input as it is (PTX, a cubin or a fatbin). */
static bool link_is_one_image(const struct link *l)
{
	return l->n == 1 && (l->in[0].type == CU_JIT_INPUT_PTX || l->in[0].type == CU_JIT_INPUT_CUBIN ||
			     l->in[0].type == CU_JIT_INPUT_FATBINARY);
}

PHOS_EXPORT CUresult cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)
{
	struct link *l;
	CUresult r;

	NEED_INIT();
	if (!cubinOut || !sizeOut)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&links_lock);
	l = link_of(state);
	r = !l ? CUDA_ERROR_INVALID_HANDLE : l->n == 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
	if (r == CUDA_SUCCESS && link_is_one_image(l)) {
		*cubinOut = l->in[0].data;
		*sizeOut = l->in[0].size;
	} else if (r == CUDA_SUCCESS) {
		/* under links_lock: a link takes milliseconds, and states are rarely many */
		r = jit_link(l);
		if (r == CUDA_SUCCESS) {
			*cubinOut = l->linked;
			*sizeOut = l->linked_size;
		}
	}
	pthread_mutex_unlock(&links_lock);
	return r;
}

PHOS_EXPORT CUresult cuLinkDestroy(CUlinkState state)
{
	struct link *l = NULL;

	NEED_INIT();
	pthread_mutex_lock(&links_lock);
	for (struct link **p = &links; *p; p = &(*p)->next)
		if ((CUlinkState)*p == state) {
			l = *p;
			*p = l->next;
			break;
		}
	pthread_mutex_unlock(&links_lock);
	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	for (unsigned i = 0; i < l->n; i++)
		free(l->in[i].data);
	free(l->linked);
	free(l);
	return CUDA_SUCCESS;
}
