/* SPDX-License-Identifier: MIT */
/*
 * A host program that loads the CUDA runtime itself, as plugin hosts and
 * language bindings do: dlopen(PATH) of a libcudart.so.13 by absolute path,
 * then the calls through dlsym. Natively that file serves it; under phos-fn
 * the stand-in must (issue 12). Copies 1 MiB through the device and back.
 *
 *   dlopen_cudart PATH
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

typedef int (*malloc_fn)(void **, size_t);
typedef int (*memcpy_fn)(void *, const void *, size_t, int);
typedef int (*memset_fn)(void *, int, size_t);
typedef int (*free_fn)(void *);

int main(int argc, char **argv)
{
	const size_t n = 1 << 20;
	unsigned char *in, *out;
	void *lib, *d = NULL;

	if (argc != 2) {
		fprintf(stderr, "usage: dlopen_cudart PATH\n");
		return 2;
	}
	lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	malloc_fn cu_malloc = (malloc_fn)dlsym(lib, "cudaMalloc");
	memcpy_fn cu_memcpy = (memcpy_fn)dlsym(lib, "cudaMemcpy");
	memset_fn cu_memset = (memset_fn)dlsym(lib, "cudaMemset");
	free_fn cu_free = (free_fn)dlsym(lib, "cudaFree");

	if (!cu_malloc || !cu_memcpy || !cu_memset || !cu_free) {
		fprintf(stderr, "dlsym: %s\n", dlerror());
		return 1;
	}
	print_cudart((void *)cu_malloc);
	in = malloc(n);
	out = malloc(n);
	for (size_t i = 0; i < n; i++)
		in[i] = (unsigned char)(i * 7 + 3);
	int e;
	if ((e = cu_malloc(&d, n)) || (e = cu_memcpy(d, in, n / 2, 1 /* H2D */)) ||
	    (e = cu_memset((char *)d + n / 2, 0x5a, n / 2)) || (e = cu_memcpy(out, d, n, 2 /* D2H */))) {
		fprintf(stderr, "a CUDA call failed: error %d\n", e);
		free(in);
		free(out);
		return 1;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned char want = i < n / 2 ? in[i] : 0x5a;

		if (out[i] != want) {
			fprintf(stderr, "byte %zu: %u, want %u\n", i, out[i], want);
			free(in);
			free(out);
			return 1;
		}
	}
	cu_free(d);
	free(in);
	free(out);
	printf("dlopen_cudart: ok\n");
	return 0;
}
