/* SPDX-License-Identifier: MIT */
/*
 * The validation twin of a PTX module (docs/design.md "Kernel metadata and
 * speculation"): the same module, where every global or generic memory access
 * first asks __phos_vcheck whether its address is allowed. The executor fills
 * the table before a twin launch with the ranges the access analysis
 * (ptx_access.h) granted, and reads the miss counter afterwards: a miss means
 * the analysis was wrong about that kernel, which then becomes opaque for good.
 *
 *   original                           twin
 *   $L__BB0_2:                         $L__BB0_2:
 *   @%p1 ld.global.f32 %f1, [%rd4+8];  { .reg .b64 %__pa; .param .b64 __pp0; .param .b32 __pp1;
 *                                        @!%p1 bra $__phos_vskip7;
 *                                        add.s64 %__pa, %rd4, 8;
 *                                        st.param.b64 [__pp0], %__pa;
 *                                        st.param.b32 [__pp1], 0;   (a read; 1: a write)
 *                                        call.uni __phos_vcheck, (__pp0, __pp1);
 *                                        $__phos_vskip7: }
 *                                      @%p1 ld.global.f32 %f1, [%rd4+8];
 *
 * Labels stay in front of the block, so a branch to $L__BB0_2 runs the check
 * too. A guarded statement's block is branched around (ptxas refuses a
 * predicated st.param); an unguarded one has no branch and no label.
 *
 * Module-scope objects the twin gains (right after .address_size):
 *
 *   __phos_vtab    .u64[1 + 3 * PHOS_TWIN_MAX_RANGES]: [0] = n, then n triples
 *                  {lo, hi, bits}: [lo, hi) allowed for bits (1 read, 2 write)
 *   __phos_varena  .u64[2]: [lo, hi); only addresses inside are checked (all
 *                  zero, as loaded: nothing is checked)
 *   __phos_vmiss   .u32: accesses inside the arena that no range allowed
 *   __phos_vlast   .u64: the address of the last such access
 *   __phos_vcheck  .func (.param .b64 addr, .param .b32 write)
 *
 * What is instrumented, in .entry and .func bodies alike (device functions run
 * on behalf of the kernels that call them), inline-asm scopes included:
 *   - ld, ldu, st, atom, red, prefetch, prefetchu whose opcode names the
 *     .global state space or none (generic), vector forms included;
 *     atom and red check as writes;
 *   - cp.* (cp.async, cp.async.bulk, cp.reduce.async.bulk): each memory operand
 *     whose state space in the opcode (in operand order) is .global, so the
 *     global source of a copy to shared memory, the global destination of a
 *     bulk copy from shared memory (a write);
 *   - only operands whose address is a register ([%rd4], [%rd4+8]).
 * Not instrumented: addresses that are a symbol or an immediate, the shared,
 * local, const and param state spaces, TMA (cp.async.bulk.tensor: the address
 * is a tensor map), prefetch.tensormap, mbarrier, wmma/ldmatrix/stmatrix,
 * applypriority/discard (cache hints), multimem and texture/surface accesses
 * (kernels using these are opaque to the analysis anyway, except wmma whose
 * footprint is a strided tile that a base-address check would not cover).
 * Only the first byte of an access is checked.
 *
 * Using a twin: load it as a module of its own (cuModuleLoadData), set the
 * arena to the buffer arena (so that shared/local/param addresses reached
 * through generic pointers, and the driver's own allocations, are not
 * checked), the table to the launch's read and write sets, __phos_vmiss to 0,
 * launch the twin's kernel of the same name, read __phos_vmiss. The twin has
 * its own copies of the module's variables (__device__, __constant__): copy
 * them from the original module before a twin launch and back after it, or
 * the twin computes with other values. Each access costs a call: for tests and
 * validation windows, not for every launch.
 *
 * Modules must have ".address_size 64". A module that already uses the names
 * above (anything with __phos_v, %__pa, __pp0, __pp1: a twin of a twin) is
 * refused. The
 * objects are .visible: twins of several modules cannot be linked together
 * (cuLink of -rdc code); load each as its own module.
 */
#pragma once

#include <stddef.h>

#define PHOS_TWIN_MAX_RANGES 256
#define PHOS_TWIN_MAX_INPUT (64u << 20)        /* bytes of PTX */

/* Names of the twin's module-scope objects (cuModuleGetGlobal). */
#define PHOS_TWIN_TAB "__phos_vtab"
#define PHOS_TWIN_ARENA "__phos_varena"
#define PHOS_TWIN_MISS "__phos_vmiss"
#define PHOS_TWIN_LAST "__phos_vlast"
#define PHOS_TWIN_CHECK "__phos_vcheck"

/* Range bits in __phos_vtab (the same values as ptx_access.h's phos_access_bits). */
enum phos_twin_bits { PHOS_TWIN_READ = 1, PHOS_TWIN_WRITE = 2 };

/* Rewrites the PTX module text[0..len) (a trailing NUL is allowed) into its
 * validation twin: a malloc'd NUL-terminated text in *ret_text, its length
 * without the NUL in *ret_len; the caller frees it. Every statement of the
 * module is kept, in order and unchanged; check blocks and the objects above
 * are added, so the twin computes what the module computes. Returns 0,
 * -ENOMEM, -E2BIG (more than PHOS_TWIN_MAX_INPUT bytes in, or more than 8
 * times that out) or -EBADMSG (not a 64-bit PTX module, unbalanced braces, an
 * instrumentable address it cannot read, the twin's own names already used);
 * ret_* untouched on failure. */
int phos_ptx_twin(const char *text, size_t len, char **ret_text, size_t *ret_len);
