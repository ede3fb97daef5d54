/* SPDX-License-Identifier: MIT */
/*
 * cuRAND 10's host API as phos-fn sees it (the values of CUDA 13's
 * curand.h, cuRAND 10.4), so that the executor and its backends need no
 * cuRAND header:
 *
 *   curandStatus_t     int: 0 success, 101 not initialized, 103 type error,
 *                      104 out of range, 105 length not a multiple, ...
 *   curandRngType_t    int: pseudo 100 (default: XORWOW), XORWOW 101,
 *                      MRG32K3A 121, MTGP32 141, MT19937 142, PHILOX4_32_10
 *                      161; quasi 200 .. 204 (Sobol, refused by phos-fn)
 *   curandOrdering_t   int: pseudo BEST 100, DEFAULT 101, SEEDED 102,
 *                      LEGACY 103, DYNAMIC 104; QUASI_DEFAULT 201
 *   curandGenerator_t  a pointer in the program: the preload's id
 *                      (preload/mathlibs/curand.c)
 *
 * A generate call is one of PHOS_RAND_GEN_*: what it writes (an element of
 * phos_rand_esize bytes, n of them) and which parameters it takes.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* curandStatus_t */
enum {
	PHOS_RAND_SUCCESS = 0,
	PHOS_RAND_VERSION_MISMATCH = 100,
	PHOS_RAND_NOT_INITIALIZED = 101,
	PHOS_RAND_ALLOCATION_FAILED = 102,
	PHOS_RAND_TYPE_ERROR = 103,
	PHOS_RAND_OUT_OF_RANGE = 104,
	PHOS_RAND_LENGTH_NOT_MULTIPLE = 105,
	PHOS_RAND_DOUBLE_PRECISION_REQUIRED = 106,
	PHOS_RAND_LAUNCH_FAILURE = 201,
	PHOS_RAND_PREEXISTING_FAILURE = 202,
	PHOS_RAND_INITIALIZATION_FAILED = 203,
	PHOS_RAND_ARCH_MISMATCH = 204,
	PHOS_RAND_INTERNAL_ERROR = 999,
};

/* curandRngType_t */
enum {
	PHOS_RAND_PSEUDO_DEFAULT = 100,
	PHOS_RAND_XORWOW = 101,
	PHOS_RAND_MRG32K3A = 121,
	PHOS_RAND_MTGP32 = 141,
	PHOS_RAND_MT19937 = 142,
	PHOS_RAND_PHILOX4_32_10 = 161,
	PHOS_RAND_QUASI_DEFAULT = 200,
	PHOS_RAND_SOBOL32 = 201,
	PHOS_RAND_SCRAMBLED_SOBOL32 = 202,
	PHOS_RAND_SOBOL64 = 203,
	PHOS_RAND_SCRAMBLED_SOBOL64 = 204,
};

/* curandOrdering_t */
enum {
	PHOS_RAND_ORDERING_BEST = 100,
	PHOS_RAND_ORDERING_DEFAULT = 101,
	PHOS_RAND_ORDERING_SEEDED = 102,
	PHOS_RAND_ORDERING_LEGACY = 103,
	PHOS_RAND_ORDERING_DYNAMIC = 104,
	PHOS_RAND_ORDERING_QUASI_DEFAULT = 201,
};

/* cuRAND 10.4 of CUDA 13.0 (curand.h: CURAND_VERSION = major * 1000 + minor * 100 + patch) */
#define PHOS_RAND_VERSION 10400

/* What a generate call makes (its curandGenerate* function). */
enum phos_rand_gen {
	PHOS_RAND_GEN_BITS = 1,          /* curandGenerate: unsigned int */
	PHOS_RAND_GEN_UNIFORM,           /* float in (0, 1] */
	PHOS_RAND_GEN_UNIFORM_DOUBLE,    /* double in (0, 1] */
	PHOS_RAND_GEN_NORMAL,            /* float, mean a, stddev b; n even */
	PHOS_RAND_GEN_NORMAL_DOUBLE,
	PHOS_RAND_GEN_LOG_NORMAL,        /* float exp(normal(a, b)); n even */
	PHOS_RAND_GEN_LOG_NORMAL_DOUBLE,
	PHOS_RAND_GEN_POISSON,           /* unsigned int, lambda a in (0, 400000] */
};

/* The pseudorandom types phos-fn forwards (the device generators of
 * curandCreateGenerator), PSEUDO_DEFAULT included. */
static inline bool phos_rand_pseudo(int type)
{
	switch (type) {
	case PHOS_RAND_PSEUDO_DEFAULT: case PHOS_RAND_XORWOW: case PHOS_RAND_MRG32K3A:
	case PHOS_RAND_MTGP32: case PHOS_RAND_MT19937: case PHOS_RAND_PHILOX4_32_10:
		return true;
	default:
		return false;
	}
}

static inline bool phos_rand_quasi(int type)
{
	return type >= PHOS_RAND_QUASI_DEFAULT && type <= PHOS_RAND_SCRAMBLED_SOBOL64;
}

static inline bool phos_rand_ordering_pseudo(int ordering)
{
	return ordering >= PHOS_RAND_ORDERING_BEST && ordering <= PHOS_RAND_ORDERING_DYNAMIC;
}

/* The bytes of one element a generate call of kind gen writes; 0 for no kind. */
static inline uint32_t phos_rand_esize(int gen)
{
	switch (gen) {
	case PHOS_RAND_GEN_BITS: case PHOS_RAND_GEN_UNIFORM: case PHOS_RAND_GEN_NORMAL:
	case PHOS_RAND_GEN_LOG_NORMAL: case PHOS_RAND_GEN_POISSON:
		return 4;
	case PHOS_RAND_GEN_UNIFORM_DOUBLE: case PHOS_RAND_GEN_NORMAL_DOUBLE: case PHOS_RAND_GEN_LOG_NORMAL_DOUBLE:
		return 8;
	default:
		return 0;
	}
}

/* Normal and log-normal kinds: Box-Muller makes pairs, so n must be even. */
static inline bool phos_rand_pairs(int gen)
{
	return gen >= PHOS_RAND_GEN_NORMAL && gen <= PHOS_RAND_GEN_LOG_NORMAL_DOUBLE;
}
