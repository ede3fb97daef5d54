/* SPDX-License-Identifier: MIT */
/*
 * Access analysis of PTX kernels: which kernel parameters the addresses of a
 * kernel's global and generic memory operations derive from, and whether every
 * such address does (docs/design.md "Kernel metadata and speculation").
 *
 *   ld.param %rd1, [k_param_0]     %rd1 ← param words {0}
 *   ld.param %r1,  [k_param_1]     %r1  ← param words {1}
 *   cvta.to.global %rd2, %rd1      %rd2 ← {0}
 *   mul.wide.s32 %rd3, %r9, 4      %rd3 ← idx        (a 32-bit value loaded from memory)
 *   add.s64 %rd4, %rd2, %rd3       %rd4 ← {0} + idx  (a parameter pointer plus an index)
 *   ld.global.f32 %f1, [%rd4]      address from {0}: reads the buffer param 0 points into
 *   ld.global.u64 %rd5, [%rd4]     %rd5 ← ptr        (64 bits loaded: may be a pointer)
 *   st.global.f32 [%rd5], %f1      address from a loaded pointer: OPAQUE
 *
 * Every register carries a taint: the set of 8-byte parameter words its value
 * derives from, and flags for values loaded from memory (idx: at most 32 bits,
 * which cannot hold a device address; ptr: 64 bits, which may), for module
 * variables (sym) and for shared/local addresses. Taints are unions over every
 * definition of a register (flow-insensitive, iterated to a fixpoint), so loops
 * and branches need no special handling. An address is proven when it carries
 * parameter words or a module symbol and no ptr flag. Indices stay allowed
 * because C's pointer arithmetic keeps a pointer plus an integer inside the
 * object the pointer points into; an index built wide enough to hold an address
 * (a product of two loaded values, a shift by 16 or more, a 64-bit load, two
 * 32-bit halves packed into 64 bits, an immediate of 2^32 or more) is a ptr,
 * and a 64-bit loaded value scaled by an element size (int64 indices, idx * 4
 * or idx << 2) is an index again: a scaled address is no address.
 *
 * A kernel is EXACT when every global/generic access is proven; then the
 * buffers its accesses can reach are the ones its read/write parameter words
 * point into (plus module variables when `globals` says so). Anything else is
 * OPAQUE, with the first reason: an address of unknown origin, a call (device
 * functions, malloc, dynamic parallelism, printf), textures and surfaces, TMA
 * and other descriptor-driven instructions, instructions the analysis does not
 * know, parameters beyond PHOS_ACCESS_WORDS words. Kernels without PTX are
 * opaque too (kparam.h). Unknown never means exact.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define PHOS_ACCESS_WORDS 512          /* 4 KiB of parameters, in 8-byte words */

enum phos_access_verdict {
	PHOS_ACCESS_OPAQUE = 0,        /* the zero value: unknown is opaque */
	PHOS_ACCESS_EXACT = 1,
};

enum phos_access_bits { PHOS_ACCESS_READ = 1, PHOS_ACCESS_WRITE = 2 };

struct phos_kernel_access {
	uint8_t verdict;                           /* enum phos_access_verdict */
	uint8_t globals;                           /* phos_access_bits on module variables */
	uint64_t read[PHOS_ACCESS_WORDS / 64];     /* parameter words whose pointees are read */
	uint64_t write[PHOS_ACCESS_WORDS / 64];    /* ... and written */
	char why[160];                             /* OPAQUE: the first reason, for logs */
};

typedef int (*phos_ptx_entry_fn)(void *ctx, const char *name, size_t name_len,
				 const struct phos_kernel_access *access);

/* Analyses every .entry of a PTX module and calls fn for each with its result
 * (an entry whose body cannot be parsed is reported OPAQUE, never skipped). A
 * non-zero return of fn stops the walk and is returned. Returns 0 or -ENOMEM.
 * Bounded: at most 1 << 20 instructions and 1 << 18 registers per entry. */
int phos_ptx_analyze(const char *text, size_t len, phos_ptx_entry_fn fn, void *ctx);

/* Whether parameter word w is set in bitmap bits. */
static inline int phos_access_word(const uint64_t *bits, unsigned w)
{
	return w < PHOS_ACCESS_WORDS && (bits[w / 64] >> (w % 64)) & 1;
}
