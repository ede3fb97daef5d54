/* SPDX-License-Identifier: MIT */
/* cublasStatus_t names and versions (blas_status.h). */
#include <cuda_runtime_api.h>

#include "blas_status.h"

/* cudaError_t of posting/calling → cublasStatus_t. */
cublasStatus_t phos_blas_status_of(int cuda_err)
{
	switch (cuda_err) {
	case cudaSuccess:
		return CUBLAS_STATUS_SUCCESS;
	case cudaErrorInitializationError:
		return CUBLAS_STATUS_NOT_INITIALIZED;
	case cudaErrorMemoryAllocation:
		return CUBLAS_STATUS_ALLOC_FAILED;
	case cudaErrorInvalidValue:
		return CUBLAS_STATUS_INVALID_VALUE;
	case cudaErrorNotSupported:
		return CUBLAS_STATUS_NOT_SUPPORTED;
	default:
		return CUBLAS_STATUS_EXECUTION_FAILED;
	}
}

cublasStatus_t phos_blas_property(libraryPropertyType type, int *value)
{
	if (!value)
		return CUBLAS_STATUS_INVALID_VALUE;
	switch (type) {
	case MAJOR_VERSION:
		*value = CUBLAS_VER_MAJOR;
		return CUBLAS_STATUS_SUCCESS;
	case MINOR_VERSION:
		*value = CUBLAS_VER_MINOR;
		return CUBLAS_STATUS_SUCCESS;
	case PATCH_LEVEL:
		*value = CUBLAS_VER_PATCH;
		return CUBLAS_STATUS_SUCCESS;
	default:
		return CUBLAS_STATUS_INVALID_VALUE;
	}
}

static const struct {
	cublasStatus_t status;
	const char *name, *desc;
} statuses[] = {
	{ CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS", "success" },
	{ CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED", "the library was not initialized" },
	{ CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED", "the resource allocation failed" },
	{ CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE", "an invalid numeric value was used as an argument" },
	{ CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH", "an absent device architectural feature is required" },
	{ CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR", "an access to GPU memory space failed" },
	{ CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED", "the GPU program failed to execute" },
	{ CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR", "an internal operation failed" },
	{ CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED", "the functionality requested is not supported" },
	{ CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR", "the functionality requested requires some license and an error was detected when trying to check the current licensing" },
};

const char *phos_blas_status_name(cublasStatus_t status)
{
	for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
		if (statuses[i].status == status)
			return statuses[i].name;
	return "CUBLAS_STATUS_UNKNOWN";
}

const char *phos_blas_status_string(cublasStatus_t status)
{
	for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
		if (statuses[i].status == status)
			return statuses[i].desc;
	return "unknown error";
}
