/* SPDX-License-Identifier: MIT */
/*
 * cuDNN 9's binary interface as phos-fn sees it, declared here from the ABI
 * (names and values of cuDNN 9.x's cudnn_graph.h and cudnn_ops.h), so that
 * neither the stand-in libcudnn.so.9 nor the executor needs NVIDIA's headers:
 *
 *   cudnnStatus_t                 int: 0 success, 1001.. not initialised,
 *                                 2000.. bad parameter, 3000.. not supported
 *   cudnnHandle_t                 an opaque pointer (ours: preload/cudnn/cudnn.c)
 *   cudnnBackendDescriptor_t      an opaque pointer (ours: preload/cudnn/cudnn.c)
 *   cudnnBackendAttributeType_t   int: 0 handle ... 30; each element's size
 *                                 is phos_dnn_attr_type_size
 *   cudnnDataType_t               int: 0 float ... 21 complex fp64; element
 *                                 bytes are phos_dnn_data_type_size
 *   cudnnTensorDescriptor_t       the legacy API's: dimensions and strides
 *                                 (at most PHOS_DNN_DIM_MAX), kept by value
 *
 * Only the attribute names phos reads itself are named here: the backend
 * passes every other one to the real library unchanged.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* cudnnStatus_t values phos answers itself */
enum {
	PHOS_DNN_SUCCESS = 0,
	PHOS_DNN_NOT_INITIALIZED = 1001,
	PHOS_DNN_BAD_PARAM = 2000,
	PHOS_DNN_BAD_PARAM_NULL_POINTER = 2002,
	PHOS_DNN_BAD_PARAM_NOT_FINALIZED = 2004,
	PHOS_DNN_BAD_PARAM_OUT_OF_BOUND = 2005,
	PHOS_DNN_BAD_PARAM_ATTRIBUTE_TYPE = 2010,
	PHOS_DNN_BAD_PARAM_DESCRIPTOR_TYPE = 2012,
	PHOS_DNN_NOT_SUPPORTED = 3000,
	PHOS_DNN_INTERNAL_ERROR = 4000,
	PHOS_DNN_EXECUTION_FAILED = 5000,
};

#define PHOS_DNN_DIM_MAX 8

/* cudnnBackendAttributeType_t */
enum {
	PHOS_DNN_TYPE_HANDLE = 0,
	PHOS_DNN_TYPE_DATA_TYPE = 1,
	PHOS_DNN_TYPE_BOOLEAN = 2,
	PHOS_DNN_TYPE_INT64 = 3,
	PHOS_DNN_TYPE_FLOAT = 4,
	PHOS_DNN_TYPE_DOUBLE = 5,
	PHOS_DNN_TYPE_VOID_PTR = 6,
	PHOS_DNN_TYPE_BACKEND_DESCRIPTOR = 15,
	PHOS_DNN_TYPE_INT32 = 23,
	PHOS_DNN_TYPE_CHAR = 24,
	PHOS_DNN_TYPE_FRACTION = 26,
	PHOS_DNN_TYPE_LAST = 30,
};

/* cudnnBackendDescriptorType_t (those phos looks into) */
enum {
	PHOS_DNN_CONVOLUTION_DESCRIPTOR = 1,
	PHOS_DNN_ENGINE_DESCRIPTOR = 2,
	PHOS_DNN_ENGINECFG_DESCRIPTOR = 3,
	PHOS_DNN_ENGINEHEUR_DESCRIPTOR = 4,
	PHOS_DNN_EXECUTION_PLAN_DESCRIPTOR = 5,
	PHOS_DNN_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR = 10,
	PHOS_DNN_OPERATIONGRAPH_DESCRIPTOR = 15,
	PHOS_DNN_VARIANT_PACK_DESCRIPTOR = 16,
	PHOS_DNN_TENSOR_DESCRIPTOR = 17,
	PHOS_DNN_DESCRIPTOR_TYPE_LAST = 63,   /* more than cuDNN 9.19 has (43) */
};

/* cudnnBackendAttributeName_t (those phos reads) */
enum {
	PHOS_DNN_ATTR_CONVOLUTION_COMP_TYPE = 100,
	PHOS_DNN_ATTR_CONVOLUTION_CONV_MODE = 101,
	PHOS_DNN_ATTR_CONVOLUTION_DILATIONS = 102,
	PHOS_DNN_ATTR_CONVOLUTION_FILTER_STRIDES = 103,
	PHOS_DNN_ATTR_CONVOLUTION_POST_PADDINGS = 104,
	PHOS_DNN_ATTR_CONVOLUTION_PRE_PADDINGS = 105,
	PHOS_DNN_ATTR_CONVOLUTION_SPATIAL_DIMS = 106,
	PHOS_DNN_ATTR_ENGINEHEUR_MODE = 200,
	PHOS_DNN_ATTR_ENGINEHEUR_OPERATION_GRAPH = 201,
	PHOS_DNN_ATTR_ENGINEHEUR_RESULTS = 202,
	PHOS_DNN_ATTR_ENGINECFG_ENGINE = 300,
	PHOS_DNN_ATTR_ENGINECFG_WORKSPACE_SIZE = 303,
	PHOS_DNN_ATTR_EXECUTION_PLAN_HANDLE = 400,
	PHOS_DNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG = 401,
	PHOS_DNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE = 402,
	PHOS_DNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA = 700,
	PHOS_DNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA = 701,
	PHOS_DNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC = 702,
	PHOS_DNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W = 703,
	PHOS_DNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X = 704,
	PHOS_DNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y = 705,
	PHOS_DNN_ATTR_OPERATIONGRAPH_HANDLE = 800,
	PHOS_DNN_ATTR_OPERATIONGRAPH_OPS = 801,
	PHOS_DNN_ATTR_TENSOR_BYTE_ALIGNMENT = 900,
	PHOS_DNN_ATTR_TENSOR_DATA_TYPE = 901,
	PHOS_DNN_ATTR_TENSOR_DIMENSIONS = 902,
	PHOS_DNN_ATTR_TENSOR_STRIDES = 903,
	PHOS_DNN_ATTR_TENSOR_VECTOR_COUNT = 904,
	PHOS_DNN_ATTR_TENSOR_UNIQUE_ID = 906,
	PHOS_DNN_ATTR_TENSOR_IS_VIRTUAL = 907,
	PHOS_DNN_ATTR_TENSOR_IS_BY_VALUE = 908,
	PHOS_DNN_ATTR_TENSOR_RAGGED_OFFSET_DESC = 913,
	PHOS_DNN_ATTR_VARIANT_PACK_UNIQUE_IDS = 1000,
	PHOS_DNN_ATTR_VARIANT_PACK_DATA_POINTERS = 1001,
	PHOS_DNN_ATTR_VARIANT_PACK_INTERMEDIATES = 1002,
	PHOS_DNN_ATTR_VARIANT_PACK_WORKSPACE = 1003,
	PHOS_DNN_ATTR_ENGINE_OPERATION_GRAPH = 1300,
	PHOS_DNN_ATTR_ENGINE_GLOBAL_INDEX = 1301,
};

/* cudnnDataType_t (those with a whole number of bytes per element) */
enum {
	PHOS_DNN_DATA_FLOAT = 0,
	PHOS_DNN_DATA_DOUBLE = 1,
	PHOS_DNN_DATA_HALF = 2,
	PHOS_DNN_DATA_INT8 = 3,
	PHOS_DNN_DATA_INT32 = 4,
	PHOS_DNN_DATA_UINT8 = 6,
	PHOS_DNN_DATA_BFLOAT16 = 9,
	PHOS_DNN_DATA_INT64 = 10,
	PHOS_DNN_DATA_FP8_E4M3 = 12,
	PHOS_DNN_DATA_FP8_E5M2 = 13,
	PHOS_DNN_DATA_FP8_E8M0 = 15,
	PHOS_DNN_DATA_UINT32 = 19,
	PHOS_DNN_DATA_COMPLEX_FP32 = 20,
	PHOS_DNN_DATA_COMPLEX_FP64 = 21,
};

/* cudnnBatchNormMode_t, cudnnBatchNormOps_t */
enum { PHOS_DNN_BN_PER_ACTIVATION = 0, PHOS_DNN_BN_SPATIAL = 1, PHOS_DNN_BN_SPATIAL_PERSISTENT = 2 };
enum { PHOS_DNN_BN_OPS_BN = 0 };

/* cudnnSamplerType_t */
enum { PHOS_DNN_SAMPLER_BILINEAR = 0 };

/* Bytes of one element of an attribute type, 0 for an unknown type. */
static inline size_t phos_dnn_attr_type_size(int type)
{
	switch (type) {
	case PHOS_DNN_TYPE_BOOLEAN: case PHOS_DNN_TYPE_CHAR: return 1;
	case PHOS_DNN_TYPE_HANDLE: case PHOS_DNN_TYPE_INT64: case PHOS_DNN_TYPE_DOUBLE:
	case PHOS_DNN_TYPE_VOID_PTR: case PHOS_DNN_TYPE_BACKEND_DESCRIPTOR: return 8;
	case PHOS_DNN_TYPE_FRACTION: return 16;
	default:   /* FLOAT, INT32 and the enumerations */
		return type >= 0 && type <= PHOS_DNN_TYPE_LAST ? 4 : 0;
	}
}

/* Bytes of one element of a data type; 0 for sub-byte, vectorised or unknown
 * types (no exact extent: phos does not guess one). */
static inline size_t phos_dnn_data_type_size(int type)
{
	switch (type) {
	case PHOS_DNN_DATA_INT8: case PHOS_DNN_DATA_UINT8: case PHOS_DNN_DATA_FP8_E4M3:
	case PHOS_DNN_DATA_FP8_E5M2: case PHOS_DNN_DATA_FP8_E8M0: return 1;
	case PHOS_DNN_DATA_HALF: case PHOS_DNN_DATA_BFLOAT16: return 2;
	case PHOS_DNN_DATA_FLOAT: case PHOS_DNN_DATA_INT32: case PHOS_DNN_DATA_UINT32: return 4;
	case PHOS_DNN_DATA_DOUBLE: case PHOS_DNN_DATA_INT64: case PHOS_DNN_DATA_COMPLEX_FP32: return 8;
	case PHOS_DNN_DATA_COMPLEX_FP64: return 16;
	default: return 0;
	}
}

/* Bytes a tensor of nb dimensions spans from its first element, elements of
 * esize bytes: (sum of (dim - 1) x stride, + 1) x esize. False when esize is
 * 0 (no whole bytes per element), a dimension is under 1, a stride under
 * min_stride, or a product overflows. *ret_elems (when given) gets the
 * number of elements, which must not overflow either. */
static inline bool phos_dnn_span(int64_t nb, const int64_t *dims, const int64_t *strides, int64_t min_stride,
				 size_t esize, uint64_t *ret_bytes, uint64_t *ret_elems)
{
	uint64_t last = 0, n = 1, e;

	if (!esize || nb < 1)
		return false;
	for (int64_t i = 0; i < nb; i++) {
		if (dims[i] < 1 || strides[i] < min_stride ||
		    __builtin_mul_overflow((uint64_t)(dims[i] - 1), (uint64_t)strides[i], &e) ||
		    __builtin_add_overflow(last, e, &last) ||
		    (ret_elems && __builtin_mul_overflow(n, (uint64_t)dims[i], &n)))
			return false;
	}
	if (ret_elems)
		*ret_elems = n;
	return !__builtin_mul_overflow(last + 1, (uint64_t)esize, ret_bytes);
}
