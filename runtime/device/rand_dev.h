/* SPDX-License-Identifier: MIT */
/*
 * cuRAND's host API behind the executor: the device interface's two backends.
 *
 *             ctxpool/calls/exec_rand.c  (generators by id, write sets, replay)
 *                   │ struct phos_rand_ops
 *        ┌──────────┴────────────────────────┐
 *   device_cuda_rand.c                   device_sim_rand.c
 *   the real libcurand.so.10, dlopen'ed  a deterministic reference on the
 *   at the first call (PHOS_CURAND_LIB,  host: Philox4x32-10 (Random123's
 *   the loader path, pip's nvidia/cu13/  block function) in the order of
 *   lib, the toolkit)                    cuRAND's device API, subsequence 0
 *
 * A generator is an opaque pointer of the backend. generate writes n
 * elements of the call's kind at out, a device address (of the function's
 * buffers, or the executor's scratch when replaying), on stream. Every call
 * returns 0 or a negated cudaError_t, and puts the curandStatus_t in *st.
 *
 * The sim's sequence (not NVIDIA's host-API order, which spreads a call over
 * many threads): the 32-bit word at position p of a generator of seed s is
 * word p % 4 of Philox4x32-10(counter (p / 4 as 64 bits, 0, 0), key (low
 * and high halves of s ^ tag)), tag 0 for PHILOX4_32_10 and a constant per
 * type for the others (documented stand-ins, not those algorithms).
 * Position starts at the offset; seed, offset and ordering settings move it
 * back to the offset; each call takes words from it:
 *
 *   bits, uniform float      1 word an element: uniform = w 2^-32 + 2^-33,
 *                            in (0, 1] (rounding can give 1.0f)
 *   uniform double           2 words: (w0 ^ w1 << 21) 2^-53 + 2^-54
 *   normal, log-normal float 2 words a pair, Box-Muller as curand_normal.h
 *   ... double               4 words a pair (53-bit u and v, sin/cos of v π)
 *   Poisson                  2 words an element: inversion of the CDF with
 *                            the first for lambda <= 100, else the rounded
 *                            normal approximation from both
 *
 * The ordering is kept and does not change the sim's sequence.
 */
#pragma once

#include <stdint.h>

#include "proto.h"
#include "rand_abi.h"

struct phos_device;

struct phos_rand_ops {
	int (*version)(struct phos_device *dev, struct phos_reply_rand_version *ret, int *st);
	int (*create)(struct phos_device *dev, int type, void **ret, int *st);
	int (*set)(struct phos_device *dev, void *gen, uint32_t what, uint64_t value, int *st);
	void (*destroy)(struct phos_device *dev, void *gen);
	/* One call of g's kind, g->n elements at out (g->out and g->count unused). */
	int (*generate)(struct phos_device *dev, void *gen, void *stream, const struct phos_rand_generate *g,
			uint64_t out, int *st);
};

extern const struct phos_rand_ops phos_rand_sim;
extern const struct phos_rand_ops phos_rand_cuda;

/* Philox4x32-10 (Salmon et al., SC'11; Random123's philox4x32 with 10
 * rounds): ret = the block of counter ctr under key. */
void phos_rand_philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t ret[4]);

/* The sim's numbers: n elements of kind gen from position *pos of the
 * sequence of (type, seed), written at out (host memory); *pos advanced by
 * the words taken. a, b as phos_rand_generate's. False for a kind, type or n
 * the sim does not make (an odd n of a pair kind). */
bool phos_rand_sim_fill(int type, uint64_t seed, uint64_t *pos, int gen, uint64_t n, double a, double b,
			void *out);
