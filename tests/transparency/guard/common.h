/* SPDX-License-Identifier: MIT */
/* What the guard test programs share: which libcudart file serves a symbol,
 * and a short drive through a driver library. */
#pragma once
#include <dlfcn.h>
#include <stdio.h>

/* Prints "cudart: PATH", the file that holds sym (resolved as the program sees it). */
static inline void print_cudart(void *sym)
{
	Dl_info info;

	if (dladdr(sym, &info) && info.dli_fname)
		printf("cudart: %s\n", info.dli_fname);
	else
		printf("cudart: ?\n");
	fflush(stdout);
}

/*
 * Prints "libcuda: PATH" (the file whose cuInit is cu_init), calls cuInit and,
 * when lib (a dlopen handle, or RTLD_DEFAULT) is a driver API, allocates, sets
 * and reads back 4 KiB through it: "driver: forwarded ok". A bare stand-in
 * with cuInit only prints "driver ran natively". Returns the exit status.
 */
static inline int drive_driver(void *lib, void *cu_init)
{
	int (*init)(unsigned) = (int (*)(unsigned))cu_init;
	int (*retain)(void **, int), (*set_ctx)(void *), (*alloc)(unsigned long long *, size_t);
	int (*memset8)(unsigned long long, unsigned char, size_t), (*free_)(unsigned long long);
	int (*dtoh)(void *, unsigned long long, size_t);
	unsigned char back[4096];
	unsigned long long d = 0;
	void *ctx = NULL;
	Dl_info info;
	int r;

	if (dladdr(cu_init, &info) && info.dli_fname)
		printf("libcuda: %s\n", info.dli_fname);
	if (init(0) != 0) {
		fprintf(stderr, "cuInit failed\n");
		return 1;
	}
	retain = (int (*)(void **, int))dlsym(lib, "cuDevicePrimaryCtxRetain");
	set_ctx = (int (*)(void *))dlsym(lib, "cuCtxSetCurrent");
	alloc = (int (*)(unsigned long long *, size_t))dlsym(lib, "cuMemAlloc_v2");
	memset8 = (int (*)(unsigned long long, unsigned char, size_t))dlsym(lib, "cuMemsetD8_v2");
	dtoh = (int (*)(void *, unsigned long long, size_t))dlsym(lib, "cuMemcpyDtoH_v2");
	free_ = (int (*)(unsigned long long))dlsym(lib, "cuMemFree_v2");
	if (!retain || !set_ctx || !alloc || !memset8 || !dtoh || !free_) {
		printf("driver ran natively\n");
		return 0;
	}
	if ((r = retain(&ctx, 0)) || (r = set_ctx(ctx)) || (r = alloc(&d, sizeof(back))) ||
	    (r = memset8(d, 0x5a, sizeof(back))) || (r = dtoh(back, d, sizeof(back))) || (r = free_(d))) {
		fprintf(stderr, "driver call failed: %d\n", r);
		return 1;
	}
	for (size_t i = 0; i < sizeof(back); i++)
		if (back[i] != 0x5a) {
			fprintf(stderr, "byte %zu reads %#x, want 0x5a\n", i, back[i]);
			return 1;
		}
	printf("driver: forwarded ok\n");
	return 0;
}
