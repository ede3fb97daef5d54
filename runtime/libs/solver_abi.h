/* SPDX-License-Identifier: MIT */
/*
 * cuSOLVER 12's dense interface (cusolverDn) as phos-fn sees it (the values
 * of CUDA 13's cusolver_common.h, cuSOLVER 12.0, and of the cuBLAS enums it
 * takes), so that the executor and the sim device need no cuSOLVER header:
 *
 *   cusolverStatus_t    int: 0 success, 1 not initialized, 3 invalid value,
 *                       6 execution failed, 7 internal error, 9 not supported
 *   cublasFillMode_t    LOWER 0, UPPER 1
 *   cublasOperation_t   N 0, T 1, C 2 (C is T for a real matrix)
 *   cublasSideMode_t    LEFT 0, RIGHT 1
 *   cusolverEigMode_t   NOVECTOR 0, VECTOR 1
 *   cudaDataType        R_32F 0, R_64F 1 (complex types refused)
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* cusolverStatus_t */
enum {
	PHOS_SOLVER_SUCCESS = 0,
	PHOS_SOLVER_NOT_INITIALIZED = 1,
	PHOS_SOLVER_ALLOC_FAILED = 2,
	PHOS_SOLVER_INVALID_VALUE = 3,
	PHOS_SOLVER_ARCH_MISMATCH = 4,
	PHOS_SOLVER_EXECUTION_FAILED = 6,
	PHOS_SOLVER_INTERNAL_ERROR = 7,
	PHOS_SOLVER_NOT_SUPPORTED = 9,
};

enum { PHOS_SOLVER_LOWER = 0, PHOS_SOLVER_UPPER = 1 };
enum { PHOS_SOLVER_OP_N = 0, PHOS_SOLVER_OP_T = 1, PHOS_SOLVER_OP_C = 2 };
enum { PHOS_SOLVER_LEFT = 0, PHOS_SOLVER_RIGHT = 1 };
enum { PHOS_SOLVER_NOVECTOR = 0, PHOS_SOLVER_VECTOR = 1 };
enum { PHOS_SOLVER_R_32F = 0, PHOS_SOLVER_R_64F = 1 };

/* cuSOLVER 12.0.4 of CUDA 13.0 (cusolver_common.h: CUSOLVER_VERSION = major * 1000 + minor * 100 + patch) */
#define PHOS_SOLVER_VERSION 12004

static inline bool phos_solver_type_ok(int32_t t)
{
	return t == PHOS_SOLVER_R_32F || t == PHOS_SOLVER_R_64F;
}

static inline uint32_t phos_solver_esize(int32_t t)
{
	return t == PHOS_SOLVER_R_64F ? 8u : 4u;
}

static inline bool phos_solver_uplo_ok(int32_t u)
{
	return u == PHOS_SOLVER_LOWER || u == PHOS_SOLVER_UPPER;
}
