// SPDX-License-Identifier: MIT
// What cudnn_serve.cu takes from <cudnn.h> (cuDNN 9): the declarations and
// values of cudnn_graph.h and cudnn_ops.h it uses, written out because CI
// machines have no cuDNN. On a GPU the program links NVIDIA's libcudnn.so.9
// when run natively and phos-fn's stand-in under phos-fn: the ABI is the same.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

extern "C" {
typedef int cudnnStatus_t;
typedef struct cudnnContext *cudnnHandle_t;
typedef void *cudnnBackendDescriptor_t;
typedef struct cudnnTensorStruct *cudnnTensorDescriptor_t;
typedef void *cudnnActivationDescriptor_t;
typedef struct cudnnSpatialTransformerStruct *cudnnSpatialTransformerDescriptor_t;

enum { CUDNN_STATUS_SUCCESS = 0, CUDNN_STATUS_NOT_SUPPORTED = 3000 };
enum { CUDNN_DATA_FLOAT = 0, CUDNN_DATA_DOUBLE = 1 };
enum { CUDNN_CROSS_CORRELATION = 1 };
enum { CUDNN_HEUR_MODE_INSTANT = 0 };
enum { CUDNN_BATCHNORM_SPATIAL = 1 };
enum { CUDNN_BATCHNORM_OPS_BN = 0 };
enum { CUDNN_SAMPLER_BILINEAR = 0 };
// RNNs (cudnn_rnn.cu)
typedef struct cudnnDropoutStruct *cudnnDropoutDescriptor_t;
typedef struct cudnnRNNStruct *cudnnRNNDescriptor_t;
typedef struct cudnnRNNDataStruct *cudnnRNNDataDescriptor_t;
enum { CUDNN_RNN_RELU = 0, CUDNN_RNN_TANH = 1, CUDNN_LSTM = 2, CUDNN_GRU = 3 };
enum { CUDNN_RNN_NO_BIAS = 0, CUDNN_RNN_SINGLE_INP_BIAS = 1, CUDNN_RNN_DOUBLE_BIAS = 2, CUDNN_RNN_SINGLE_REC_BIAS = 3 };
enum { CUDNN_UNIDIRECTIONAL = 0, CUDNN_BIDIRECTIONAL = 1 };
enum { CUDNN_LINEAR_INPUT = 0 };
enum { CUDNN_RNN_ALGO_STANDARD = 0 };
enum { CUDNN_DEFAULT_MATH = 0, CUDNN_FMA_MATH = 3 };
enum { CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED = 0, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED = 1,
       CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED = 2 };
enum { CUDNN_RNN_PADDED_IO_DISABLED = 0, CUDNN_RNN_PADDED_IO_ENABLED = 1 };
enum { CUDNN_FWD_MODE_INFERENCE = 0, CUDNN_FWD_MODE_TRAINING = 1 };
enum { CUDNN_WGRAD_MODE_ADD = 0, CUDNN_WGRAD_MODE_SET = 1 };
// CTC losses (cudnn_ctc.cu)
typedef struct cudnnCTCLossStruct *cudnnCTCLossDescriptor_t;
enum { CUDNN_CTC_LOSS_ALGO_DETERMINISTIC = 0 };
enum { CUDNN_LOSS_NORMALIZATION_SOFTMAX = 1 };
enum { CUDNN_PROPAGATE_NAN = 1 };
enum {   // cudnnBackendAttributeType_t
	CUDNN_TYPE_HANDLE = 0, CUDNN_TYPE_DATA_TYPE = 1, CUDNN_TYPE_INT64 = 3, CUDNN_TYPE_FLOAT = 4,
	CUDNN_TYPE_DOUBLE = 5, CUDNN_TYPE_VOID_PTR = 6, CUDNN_TYPE_CONVOLUTION_MODE = 7, CUDNN_TYPE_HEUR_MODE = 8,
	CUDNN_TYPE_BACKEND_DESCRIPTOR = 15,
};
enum {   // cudnnBackendDescriptorType_t
	CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR = 1, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR = 3,
	CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR = 4, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR = 5,
	CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR = 10, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR = 15,
	CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR = 16, CUDNN_BACKEND_TENSOR_DESCRIPTOR = 17,
};
enum {   // cudnnBackendAttributeName_t
	CUDNN_ATTR_CONVOLUTION_COMP_TYPE = 100, CUDNN_ATTR_CONVOLUTION_CONV_MODE = 101,
	CUDNN_ATTR_CONVOLUTION_DILATIONS = 102, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES = 103,
	CUDNN_ATTR_CONVOLUTION_POST_PADDINGS = 104, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS = 105,
	CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS = 106,
	CUDNN_ATTR_ENGINEHEUR_MODE = 200, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH = 201,
	CUDNN_ATTR_ENGINEHEUR_RESULTS = 202,
	CUDNN_ATTR_EXECUTION_PLAN_HANDLE = 400, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG = 401,
	CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE = 402,
	CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA = 700, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA = 701,
	CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC = 702, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W = 703,
	CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X = 704, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y = 705,
	CUDNN_ATTR_OPERATIONGRAPH_HANDLE = 800, CUDNN_ATTR_OPERATIONGRAPH_OPS = 801,
	CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT = 900, CUDNN_ATTR_TENSOR_DATA_TYPE = 901,
	CUDNN_ATTR_TENSOR_DIMENSIONS = 902, CUDNN_ATTR_TENSOR_STRIDES = 903, CUDNN_ATTR_TENSOR_UNIQUE_ID = 906,
	CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC = 913,
	CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS = 1000, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS = 1001,
	CUDNN_ATTR_VARIANT_PACK_WORKSPACE = 1003,
};

size_t cudnnGetVersion(void);
const char *cudnnGetErrorString(cudnnStatus_t status);
cudnnStatus_t cudnnCreate(cudnnHandle_t *handle);
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle);
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream);
cudnnStatus_t cudnnBackendCreateDescriptor(int type, cudnnBackendDescriptor_t *desc);
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t desc);
cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t desc, int name, int type, int64_t count,
				       const void *elems);
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const desc, int name, int type, int64_t requested,
				       int64_t *count, void *elems);
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t desc);
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
				  cudnnBackendDescriptor_t pack);
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *desc);
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc);
cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t desc, int type, int nb, const int dims[],
					 const int strides[]);
cudnnStatus_t cudnnBatchNormalizationForwardInference(cudnnHandle_t handle, int mode, const void *alpha,
						      const void *beta, cudnnTensorDescriptor_t xd, const void *x,
						      cudnnTensorDescriptor_t yd, void *y, cudnnTensorDescriptor_t bnd,
						      const void *scale, const void *bias, const void *mean,
						      const void *var, double epsilon);
cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(
	cudnnHandle_t handle, int mode, int ops, const void *alpha, const void *beta, cudnnTensorDescriptor_t xd,
	const void *x, cudnnTensorDescriptor_t zd, const void *z, cudnnTensorDescriptor_t yd, void *y,
	cudnnTensorDescriptor_t bnd, const void *scale, const void *bias, double factor, void *running_mean,
	void *running_var, double epsilon, void *save_mean, void *save_inv_var, cudnnActivationDescriptor_t act,
	void *workspace, size_t workspace_bytes, void *reserve, size_t reserve_bytes);
cudnnStatus_t cudnnBatchNormalizationBackwardEx(
	cudnnHandle_t handle, int mode, int ops, const void *alpha, const void *beta, const void *alpha_param,
	const void *beta_param, cudnnTensorDescriptor_t xd, const void *x, cudnnTensorDescriptor_t yd, const void *y,
	cudnnTensorDescriptor_t dyd, const void *dy, cudnnTensorDescriptor_t dzd, void *dz,
	cudnnTensorDescriptor_t dxd, void *dx, cudnnTensorDescriptor_t bnd, const void *scale, const void *bias,
	void *dscale, void *dbias, double epsilon, const void *save_mean, const void *save_inv_var,
	cudnnActivationDescriptor_t act, void *workspace, size_t workspace_bytes, void *reserve,
	size_t reserve_bytes);
cudnnStatus_t cudnnCreateSpatialTransformerDescriptor(cudnnSpatialTransformerDescriptor_t *desc);
cudnnStatus_t cudnnDestroySpatialTransformerDescriptor(cudnnSpatialTransformerDescriptor_t desc);
cudnnStatus_t cudnnSetSpatialTransformerNdDescriptor(cudnnSpatialTransformerDescriptor_t desc, int sampler, int type,
						     const int nb, const int dims[]);
cudnnStatus_t cudnnSpatialTfGridGeneratorForward(cudnnHandle_t handle, const cudnnSpatialTransformerDescriptor_t desc,
						 const void *theta, void *grid);
cudnnStatus_t cudnnSpatialTfGridGeneratorBackward(cudnnHandle_t handle,
						  const cudnnSpatialTransformerDescriptor_t desc, const void *dgrid,
						  void *dtheta);
cudnnStatus_t cudnnSpatialTfSamplerForward(cudnnHandle_t handle, cudnnSpatialTransformerDescriptor_t desc,
					   const void *alpha, const cudnnTensorDescriptor_t xd, const void *x,
					   const void *grid, const void *beta, cudnnTensorDescriptor_t yd, void *y);
cudnnStatus_t cudnnSpatialTfSamplerBackward(cudnnHandle_t handle, cudnnSpatialTransformerDescriptor_t desc,
					    const void *alpha, const cudnnTensorDescriptor_t xd, const void *x,
					    const void *beta, const cudnnTensorDescriptor_t dxd, void *dx,
					    const void *alpha_dgrid, const cudnnTensorDescriptor_t dyd, const void *dy,
					    const void *grid, const void *beta_dgrid, void *dgrid);
cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
	cudnnHandle_t handle, int mode, int ops, cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t zd,
	cudnnTensorDescriptor_t yd, cudnnTensorDescriptor_t bnd, cudnnActivationDescriptor_t act, size_t *size);
cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(
	cudnnHandle_t handle, int mode, int ops, cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t yd,
	cudnnTensorDescriptor_t dyd, cudnnTensorDescriptor_t dzd, cudnnTensorDescriptor_t dxd,
	cudnnTensorDescriptor_t bnd, cudnnActivationDescriptor_t act, size_t *size);
cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cudnnHandle_t handle, int mode, int ops,
								   cudnnActivationDescriptor_t act,
								   cudnnTensorDescriptor_t xd, size_t *size);
cudnnStatus_t cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t desc, int requested, int *type, int *nb,
					 int dims[], int strides[]);
cudnnStatus_t cudnnCreateDropoutDescriptor(cudnnDropoutDescriptor_t *desc);
cudnnStatus_t cudnnDestroyDropoutDescriptor(cudnnDropoutDescriptor_t desc);
cudnnStatus_t cudnnDropoutGetStatesSize(cudnnHandle_t handle, size_t *size);
cudnnStatus_t cudnnSetDropoutDescriptor(cudnnDropoutDescriptor_t desc, cudnnHandle_t handle, float dropout,
					void *states, size_t bytes, unsigned long long seed);
cudnnStatus_t cudnnRestoreDropoutDescriptor(cudnnDropoutDescriptor_t desc, cudnnHandle_t handle, float dropout,
					    void *states, size_t bytes, unsigned long long seed);
cudnnStatus_t cudnnCreateRNNDescriptor(cudnnRNNDescriptor_t *desc);
cudnnStatus_t cudnnDestroyRNNDescriptor(cudnnRNNDescriptor_t desc);
cudnnStatus_t cudnnSetRNNDescriptor_v8(cudnnRNNDescriptor_t desc, int algo, int cell, int bias, int dir,
				       int input_mode, int data_type, int math_prec, int math_type, int32_t input_size,
				       int32_t hidden_size, int32_t proj_size, int32_t layers,
				       cudnnDropoutDescriptor_t dropout, uint32_t aux_flags);
cudnnStatus_t cudnnCreateRNNDataDescriptor(cudnnRNNDataDescriptor_t *desc);
cudnnStatus_t cudnnDestroyRNNDataDescriptor(cudnnRNNDataDescriptor_t desc);
cudnnStatus_t cudnnSetRNNDataDescriptor(cudnnRNNDataDescriptor_t desc, int type, int layout, int max_seq, int batch,
					int vector, const int seq[], void *fill);
cudnnStatus_t cudnnGetRNNWeightSpaceSize(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, size_t *size);
cudnnStatus_t cudnnGetRNNTempSpaceSizes(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, int fwd_mode,
					cudnnRNNDataDescriptor_t xd, size_t *work, size_t *reserve);
cudnnStatus_t cudnnGetRNNWeightParams(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, int32_t layer,
				      size_t weights_bytes, const void *weights, int32_t lin,
				      cudnnTensorDescriptor_t md, void **m, cudnnTensorDescriptor_t bd, void **b);
cudnnStatus_t cudnnRNNForward(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, int fwd_mode, const int32_t dev_seq[],
			      cudnnRNNDataDescriptor_t xd, const void *x, cudnnRNNDataDescriptor_t yd, void *y,
			      cudnnTensorDescriptor_t hd, const void *hx, void *hy, cudnnTensorDescriptor_t cd,
			      const void *cx, void *cy, size_t weights_bytes, const void *weights, size_t work_bytes,
			      void *work, size_t reserve_bytes, void *reserve);
cudnnStatus_t cudnnRNNBackwardData_v8(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, const int32_t dev_seq[],
				      cudnnRNNDataDescriptor_t yd, const void *y, const void *dy,
				      cudnnRNNDataDescriptor_t xd, void *dx, cudnnTensorDescriptor_t hd,
				      const void *hx, const void *dhy, void *dhx, cudnnTensorDescriptor_t cd,
				      const void *cx, const void *dcy, void *dcx, size_t weights_bytes,
				      const void *weights, size_t work_bytes, void *work, size_t reserve_bytes,
				      void *reserve);
cudnnStatus_t cudnnRNNBackwardWeights_v8(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, int wgrad_mode,
					 const int32_t dev_seq[], cudnnRNNDataDescriptor_t xd, const void *x,
					 cudnnTensorDescriptor_t hd, const void *hx, cudnnRNNDataDescriptor_t yd,
					 const void *y, size_t weights_bytes, void *dweights, size_t work_bytes,
					 void *work, size_t reserve_bytes, void *reserve);
cudnnStatus_t cudnnCreateCTCLossDescriptor(cudnnCTCLossDescriptor_t *desc);
cudnnStatus_t cudnnDestroyCTCLossDescriptor(cudnnCTCLossDescriptor_t desc);
cudnnStatus_t cudnnSetCTCLossDescriptorEx(cudnnCTCLossDescriptor_t desc, int comp_type, int norm_mode, int grad_mode);
cudnnStatus_t cudnnGetCTCLossWorkspaceSize(cudnnHandle_t handle, cudnnTensorDescriptor_t probs_desc,
					   cudnnTensorDescriptor_t grads_desc, const int *labels, const int *label_lengths,
					   const int *input_lengths, int algo, cudnnCTCLossDescriptor_t desc, size_t *size);
cudnnStatus_t cudnnCTCLoss(cudnnHandle_t handle, cudnnTensorDescriptor_t probs_desc, const void *probs,
			   const int labels[], const int label_lengths[], const int input_lengths[], void *costs,
			   cudnnTensorDescriptor_t grads_desc, void *grads, int algo, cudnnCTCLossDescriptor_t desc,
			   void *work, size_t work_bytes);
}
