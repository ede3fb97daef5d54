/* SPDX-License-Identifier: MIT */
/* What the guard test programs share: which libcudart file serves a symbol. */
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
