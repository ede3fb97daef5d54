/* SPDX-License-Identifier: MIT */
/*
 * cublasStatus_t names and versions, shared by the cuBLAS and cuBLASLt
 * stand-ins (each library links its own copy of blas_status.c; hidden).
 */
#pragma once

#include <cublas_api.h>

/* cudaError_t of posting/calling a record → cublasStatus_t. */
cublasStatus_t phos_blas_status_of(int cuda_err);
/* cublasGetStatusName / cublasGetStatusString. */
const char *phos_blas_status_name(cublasStatus_t status);
const char *phos_blas_status_string(cublasStatus_t status);
/* cublasGetProperty: the cuBLAS version the stand-ins were built against. */
cublasStatus_t phos_blas_property(libraryPropertyType type, int *value);
