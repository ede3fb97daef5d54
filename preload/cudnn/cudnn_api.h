/* SPDX-License-Identifier: MIT */
/*
 * What the cuDNN stand-in (cudnn.c) implements, declared with its own types
 * (NVIDIA's cudnn.h is not needed to build phos-fn): cudnnStatus_t and the
 * enumerations are ints (runtime/libs/cudnn_abi.h gives their values), handles
 * and descriptors pointers to the stand-in's own structs.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

typedef int cudnnStatus_t;
typedef struct cudnnContext *cudnnHandle_t;
typedef struct dnn_desc *cudnnBackendDescriptor_t;
typedef struct cudnnTensorStruct *cudnnTensorDescriptor_t;
typedef struct cudnnSpatialTransformerStruct *cudnnSpatialTransformerDescriptor_t;

size_t cudnnGetVersion(void);
size_t cudnnGetMaxDeviceVersion(void);
size_t cudnnGetCudartVersion(void);
cudnnStatus_t cudnnGetProperty(int type, int *value);
const char *cudnnGetErrorString(cudnnStatus_t s);
void cudnnGetLastErrorString(char *message, size_t max_size);
cudnnStatus_t cudnnCreate(cudnnHandle_t *handle);
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle);
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, void *stream);
cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, void **stream);
cudnnStatus_t cudnnBackendCreateDescriptor(int type, cudnnBackendDescriptor_t *descriptor);
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor);
cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor, int name, int type, int64_t count, const void *elems);
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor, int name, int type, int64_t requested, int64_t *count, void *elems);
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor);
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack);
cudnnStatus_t cudnnBackendInitialize(cudnnBackendDescriptor_t descriptor);
cudnnStatus_t cudnnBackendPopulateCudaGraph(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack, void *graph);
cudnnStatus_t cudnnBackendUpdateCudaGraph(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack, void *graph);
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *desc);
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc);
cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t desc, int type, int nb, const int dims[], const int strides[]);
cudnnStatus_t cudnnSetTensor4dDescriptorEx(cudnnTensorDescriptor_t desc, int type, int n, int c, int h, int w, int ns, int cs, int hs, int ws);
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t desc, int format, int type, int n, int c, int h, int w);
cudnnStatus_t cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t desc, int requested, int *type, int *nb, int dims[], int strides[]);
cudnnStatus_t cudnnGetTensorSizeInBytes(const cudnnTensorDescriptor_t desc, size_t *size);
cudnnStatus_t cudnnBatchNormalizationForwardInference( cudnnHandle_t handle, int mode, const void *alpha, const void *beta, cudnnTensorDescriptor_t xd, const void *x, cudnnTensorDescriptor_t yd, void *y, cudnnTensorDescriptor_t bnd, const void *scale, const void *bias, const void *mean, const void *var, double epsilon);
cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx( cudnnHandle_t handle, int mode, int ops, const void *alpha, const void *beta, cudnnTensorDescriptor_t xd, const void *x, cudnnTensorDescriptor_t zd, const void *z, cudnnTensorDescriptor_t yd, void *y, cudnnTensorDescriptor_t bnd, const void *scale, const void *bias, double factor, void *running_mean, void *running_var, double epsilon, void *save_mean, void *save_inv_var, void *act, void *workspace, size_t workspace_bytes, void *reserve, size_t reserve_bytes);
cudnnStatus_t cudnnBatchNormalizationBackwardEx( cudnnHandle_t handle, int mode, int ops, const void *alpha, const void *beta, const void *alpha_param, const void *beta_param, cudnnTensorDescriptor_t xd, const void *x, cudnnTensorDescriptor_t yd, const void *y, cudnnTensorDescriptor_t dyd, const void *dy, cudnnTensorDescriptor_t dzd, void *dz, cudnnTensorDescriptor_t dxd, void *dx, cudnnTensorDescriptor_t bnd, const void *scale, const void *bias, void *dscale, void *dbias, double epsilon, const void *save_mean, const void *save_inv_var, void *act, void *workspace, size_t workspace_bytes, void *reserve, size_t reserve_bytes);
cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize( cudnnHandle_t handle, int mode, int ops, cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t zd, cudnnTensorDescriptor_t yd, cudnnTensorDescriptor_t bnd, void *act, size_t *size);
cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize( cudnnHandle_t handle, int mode, int ops, cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t yd, cudnnTensorDescriptor_t dyd, cudnnTensorDescriptor_t dzd, cudnnTensorDescriptor_t dxd, cudnnTensorDescriptor_t bnd, void *act, size_t *size);
cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cudnnHandle_t handle, int mode, int ops, void *act, cudnnTensorDescriptor_t xd, size_t *size);
cudnnStatus_t cudnnCreateSpatialTransformerDescriptor(cudnnSpatialTransformerDescriptor_t *desc);
cudnnStatus_t cudnnDestroySpatialTransformerDescriptor(cudnnSpatialTransformerDescriptor_t desc);
cudnnStatus_t cudnnSetSpatialTransformerNdDescriptor(cudnnSpatialTransformerDescriptor_t desc, int sampler, int type, const int nb, const int dims[]);
cudnnStatus_t cudnnSpatialTfGridGeneratorForward(cudnnHandle_t handle, const cudnnSpatialTransformerDescriptor_t desc, const void *theta, void *grid);
cudnnStatus_t cudnnSpatialTfGridGeneratorBackward(cudnnHandle_t handle, const cudnnSpatialTransformerDescriptor_t desc, const void *dgrid, void *dtheta);
cudnnStatus_t cudnnSpatialTfSamplerForward(cudnnHandle_t handle, cudnnSpatialTransformerDescriptor_t desc, const void *alpha, const cudnnTensorDescriptor_t xd, const void *x, const void *grid, const void *beta, cudnnTensorDescriptor_t yd, void *y);
cudnnStatus_t cudnnSpatialTfSamplerBackward(cudnnHandle_t handle, cudnnSpatialTransformerDescriptor_t desc, const void *alpha, const cudnnTensorDescriptor_t xd, const void *x, const void *beta, const cudnnTensorDescriptor_t dxd, void *dx, const void *alpha_dgrid, const cudnnTensorDescriptor_t dyd, const void *dy, const void *grid, const void *beta_dgrid, void *dgrid);

/* RNNs and dropout (cudnn_rnn.c) */
typedef struct cudnnDropoutStruct *cudnnDropoutDescriptor_t;
typedef struct cudnnRNNStruct *cudnnRNNDescriptor_t;
typedef struct cudnnRNNDataStruct *cudnnRNNDataDescriptor_t;

cudnnStatus_t cudnnCreateDropoutDescriptor(cudnnDropoutDescriptor_t *desc);
cudnnStatus_t cudnnDestroyDropoutDescriptor(cudnnDropoutDescriptor_t desc);
cudnnStatus_t cudnnDropoutGetStatesSize(cudnnHandle_t handle, size_t *size);
cudnnStatus_t cudnnSetDropoutDescriptor(cudnnDropoutDescriptor_t desc, cudnnHandle_t handle, float dropout, void *states, size_t bytes, unsigned long long seed);
cudnnStatus_t cudnnRestoreDropoutDescriptor(cudnnDropoutDescriptor_t desc, cudnnHandle_t handle, float dropout, void *states, size_t bytes, unsigned long long seed);
cudnnStatus_t cudnnGetDropoutDescriptor(cudnnDropoutDescriptor_t desc, cudnnHandle_t handle, float *dropout, void **states, unsigned long long *seed);
cudnnStatus_t cudnnCreateRNNDescriptor(cudnnRNNDescriptor_t *desc);
cudnnStatus_t cudnnDestroyRNNDescriptor(cudnnRNNDescriptor_t desc);
cudnnStatus_t cudnnSetRNNDescriptor_v8(cudnnRNNDescriptor_t desc, int algo, int cell, int bias, int dir, int input_mode, int data_type, int math_prec, int math_type, int32_t input_size, int32_t hidden_size, int32_t proj_size, int32_t layers, cudnnDropoutDescriptor_t dropout, uint32_t aux_flags);
cudnnStatus_t cudnnGetRNNDescriptor_v8(cudnnRNNDescriptor_t desc, int *algo, int *cell, int *bias, int *dir, int *input_mode, int *data_type, int *math_prec, int *math_type, int32_t *input_size, int32_t *hidden_size, int32_t *proj_size, int32_t *layers, cudnnDropoutDescriptor_t *dropout, uint32_t *aux_flags);
cudnnStatus_t cudnnCreateRNNDataDescriptor(cudnnRNNDataDescriptor_t *desc);
cudnnStatus_t cudnnDestroyRNNDataDescriptor(cudnnRNNDataDescriptor_t desc);
cudnnStatus_t cudnnSetRNNDataDescriptor(cudnnRNNDataDescriptor_t desc, int type, int layout, int max_seq, int batch, int vector, const int seq[], void *fill);
cudnnStatus_t cudnnGetRNNDataDescriptor(cudnnRNNDataDescriptor_t desc, int *type, int *layout, int *max_seq, int *batch, int *vector, int requested, int seq[], void *fill);
cudnnStatus_t cudnnGetRNNWeightSpaceSize(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, size_t *size);
cudnnStatus_t cudnnGetRNNTempSpaceSizes(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, int fwd_mode, cudnnRNNDataDescriptor_t xd, size_t *work, size_t *reserve);
cudnnStatus_t cudnnGetRNNWeightParams(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, int32_t layer, size_t weights_bytes, const void *weights, int32_t lin, cudnnTensorDescriptor_t md, void **m, cudnnTensorDescriptor_t bd, void **b);
cudnnStatus_t cudnnRNNForward(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, int fwd_mode, const int32_t dev_seq[], cudnnRNNDataDescriptor_t xd, const void *x, cudnnRNNDataDescriptor_t yd, void *y, cudnnTensorDescriptor_t hd, const void *hx, void *hy, cudnnTensorDescriptor_t cd, const void *cx, void *cy, size_t weights_bytes, const void *weights, size_t work_bytes, void *work, size_t reserve_bytes, void *reserve);
cudnnStatus_t cudnnRNNBackwardData_v8(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, const int32_t dev_seq[], cudnnRNNDataDescriptor_t yd, const void *y, const void *dy, cudnnRNNDataDescriptor_t xd, void *dx, cudnnTensorDescriptor_t hd, const void *hx, const void *dhy, void *dhx, cudnnTensorDescriptor_t cd, const void *cx, const void *dcy, void *dcx, size_t weights_bytes, const void *weights, size_t work_bytes, void *work, size_t reserve_bytes, void *reserve);
cudnnStatus_t cudnnRNNBackwardWeights_v8(cudnnHandle_t handle, cudnnRNNDescriptor_t desc, int wgrad_mode, const int32_t dev_seq[], cudnnRNNDataDescriptor_t xd, const void *x, cudnnTensorDescriptor_t hd, const void *hx, cudnnRNNDataDescriptor_t yd, const void *y, size_t weights_bytes, void *dweights, size_t work_bytes, void *work, size_t reserve_bytes, void *reserve);

/* CTC losses (cudnn_ctc.c) */
typedef struct cudnnCTCLossStruct *cudnnCTCLossDescriptor_t;

cudnnStatus_t cudnnCreateCTCLossDescriptor(cudnnCTCLossDescriptor_t *desc);
cudnnStatus_t cudnnDestroyCTCLossDescriptor(cudnnCTCLossDescriptor_t desc);
cudnnStatus_t cudnnSetCTCLossDescriptor(cudnnCTCLossDescriptor_t desc, int comp_type);
cudnnStatus_t cudnnSetCTCLossDescriptorEx(cudnnCTCLossDescriptor_t desc, int comp_type, int norm_mode, int grad_mode);
cudnnStatus_t cudnnSetCTCLossDescriptor_v8(cudnnCTCLossDescriptor_t desc, int comp_type, int norm_mode, int grad_mode, int max_label);
cudnnStatus_t cudnnSetCTCLossDescriptor_v9(cudnnCTCLossDescriptor_t desc, int comp_type, int norm_mode, int ctc_grad_mode, int max_label);
cudnnStatus_t cudnnGetCTCLossDescriptor(cudnnCTCLossDescriptor_t desc, int *comp_type);
cudnnStatus_t cudnnGetCTCLossDescriptorEx(cudnnCTCLossDescriptor_t desc, int *comp_type, int *norm_mode, int *grad_mode);
cudnnStatus_t cudnnGetCTCLossDescriptor_v8(cudnnCTCLossDescriptor_t desc, int *comp_type, int *norm_mode, int *grad_mode, int *max_label);
cudnnStatus_t cudnnGetCTCLossDescriptor_v9(cudnnCTCLossDescriptor_t desc, int *comp_type, int *norm_mode, int *ctc_grad_mode, int *max_label);
cudnnStatus_t cudnnGetCTCLossWorkspaceSize(cudnnHandle_t handle, cudnnTensorDescriptor_t probs_desc, cudnnTensorDescriptor_t grads_desc, const int *labels, const int *label_lengths, const int *input_lengths, int algo, cudnnCTCLossDescriptor_t desc, size_t *size);
cudnnStatus_t cudnnGetCTCLossWorkspaceSize_v8(cudnnHandle_t handle, int algo, cudnnCTCLossDescriptor_t desc, cudnnTensorDescriptor_t probs_desc, cudnnTensorDescriptor_t grads_desc, size_t *size);
cudnnStatus_t cudnnCTCLoss(cudnnHandle_t handle, cudnnTensorDescriptor_t probs_desc, const void *probs, const int labels[], const int label_lengths[], const int input_lengths[], void *costs, cudnnTensorDescriptor_t grads_desc, void *grads, int algo, cudnnCTCLossDescriptor_t desc, void *work, size_t work_bytes);
cudnnStatus_t cudnnCTCLoss_v8(cudnnHandle_t handle, int algo, cudnnCTCLossDescriptor_t desc, cudnnTensorDescriptor_t probs_desc, const void *probs, const int labels[], const int label_lengths[], const int input_lengths[], void *costs, cudnnTensorDescriptor_t grads_desc, void *grads, size_t work_bytes, void *work);
