/* SPDX-License-Identifier: MIT */
/*
 * cuSPARSE 12's binary interface as phos-fn sees it (the values of CUDA 13's
 * cusparse.h, cuSPARSE 12.6), so that the executor and the sim device need
 * no cuSPARSE header:
 *
 *   cusparseStatus_t     int: 0 success, 3 invalid value, 10 not supported ...
 *   cusparseFormat_t     CSR 1, CSC 2, COO 3 (BLOCKED_ELL 5, BSR 6, SELL 7)
 *   cusparseIndexType_t  16U 1, 32I 2, 64I 3
 *   cusparseOrder_t      COL 1, ROW 2
 *   cusparseOperation_t  NON_TRANSPOSE 0, TRANSPOSE 1, CONJUGATE_TRANSPOSE 2
 *   cudaDataType         R_32F 0, R_64F 1 (C_32F 4, C_64F 5, R_16F 2 ...)
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* cusparseStatus_t */
enum {
	PHOS_SPARSE_SUCCESS = 0,
	PHOS_SPARSE_NOT_INITIALIZED = 1,
	PHOS_SPARSE_ALLOC_FAILED = 2,
	PHOS_SPARSE_INVALID_VALUE = 3,
	PHOS_SPARSE_ARCH_MISMATCH = 4,
	PHOS_SPARSE_EXECUTION_FAILED = 6,
	PHOS_SPARSE_INTERNAL_ERROR = 7,
	PHOS_SPARSE_MATRIX_TYPE_NOT_SUPPORTED = 8,
	PHOS_SPARSE_NOT_SUPPORTED = 10,
	PHOS_SPARSE_INSUFFICIENT_RESOURCES = 11,
};

enum { PHOS_SPARSE_FORMAT_CSR = 1, PHOS_SPARSE_FORMAT_COO = 3 };
enum { PHOS_SPARSE_INDEX_16U = 1, PHOS_SPARSE_INDEX_32I = 2, PHOS_SPARSE_INDEX_64I = 3 };
enum { PHOS_SPARSE_ORDER_COL = 1, PHOS_SPARSE_ORDER_ROW = 2 };
enum { PHOS_SPARSE_OP_N = 0, PHOS_SPARSE_OP_T = 1, PHOS_SPARSE_OP_C = 2 };
enum { PHOS_SPARSE_POINTER_HOST = 0, PHOS_SPARSE_POINTER_DEVICE = 1 };
enum { PHOS_SPARSE_R_32F = 0, PHOS_SPARSE_R_64F = 1 };

/* The value types forwarded: float and double (the complex and half types
 * are refused by the preload). */
static inline bool phos_sparse_value_ok(int32_t t)
{
	return t == PHOS_SPARSE_R_32F || t == PHOS_SPARSE_R_64F;
}

static inline uint32_t phos_sparse_value_size(int32_t t)
{
	return t == PHOS_SPARSE_R_64F ? 8u : 4u;
}

static inline bool phos_sparse_index_ok(int32_t t)
{
	return t == PHOS_SPARSE_INDEX_32I || t == PHOS_SPARSE_INDEX_64I;
}

static inline uint32_t phos_sparse_index_size(int32_t t)
{
	return t == PHOS_SPARSE_INDEX_64I ? 8u : 4u;
}

/* opA, opB: the transposes of a real matrix (conjugate is plain transpose) */
static inline bool phos_sparse_op_ok(int32_t op)
{
	return op == PHOS_SPARSE_OP_N || op == PHOS_SPARSE_OP_T || op == PHOS_SPARSE_OP_C;
}
