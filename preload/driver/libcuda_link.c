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
 * (the driver would report a bad PTX at cuLinkAddData). Linking several
 * inputs together (relocatable device code), objects, libraries and NVVM IR
 * are refused with CUDA_ERROR_NOT_SUPPORTED, named once in the log. The
 * JIT options are answered as cuModuleLoadDataEx answers them.
 *
 * A state is a handle this file made: another pointer is
 * CUDA_ERROR_INVALID_HANDLE, never a read of it. The output lives until
 * cuLinkDestroy, as CUDA says.
 */
#include <pthread.h>
#include <stdbool.h>
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
};

struct link {
	struct link *next;
	struct link_input in[LINK_MAX_INPUTS];
	unsigned n;
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
	case CU_JIT_INPUT_OBJECT:
	case CU_JIT_INPUT_LIBRARY:
	case CU_JIT_INPUT_NVVM:
		phos_log_once("CUDA driver API", "cuLinkAddData of an object, a library or NVVM IR", &logged);
		return CUDA_ERROR_NOT_SUPPORTED;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* Adds a copy of data to state s. */
static CUresult link_add(CUlinkState s, CUjitInputType type, const void *data, size_t size)
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
		l->in[l->n++] = (struct link_input){ .type = type, .data = copy, .size = size };
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

	(void)name;
	NEED_INIT();
	if (numOptions && (!options || !optionValues))
		return CUDA_ERROR_INVALID_VALUE;
	r = link_add(state, type, data, size);
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
		r = link_add(state, type, buf, type == CU_JIT_INPUT_PTX ? size + 1 : size);
	free(buf);
	if (r == CUDA_SUCCESS)
		cu_jit_options_answer(numOptions, options, optionValues);
	return r;
}

PHOS_EXPORT CUresult cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)
{
	static int logged;
	struct link *l;
	CUresult r;

	NEED_INIT();
	if (!cubinOut || !sizeOut)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&links_lock);
	l = link_of(state);
	r = !l ? CUDA_ERROR_INVALID_HANDLE : l->n == 0 ? CUDA_ERROR_INVALID_VALUE : l->n > 1 ? CUDA_ERROR_NOT_SUPPORTED
											    : CUDA_SUCCESS;
	if (r == CUDA_SUCCESS) {
		*cubinOut = l->in[0].data;
		*sizeOut = l->in[0].size;
	}
	pthread_mutex_unlock(&links_lock);
	if (r == CUDA_ERROR_NOT_SUPPORTED)
		phos_log_once("CUDA driver API", "cuLinkComplete of several inputs (linking device code)", &logged);
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
	free(l);
	return CUDA_SUCCESS;
}
