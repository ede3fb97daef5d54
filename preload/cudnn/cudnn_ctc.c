/* SPDX-License-Identifier: MIT */
/*
 * cuDNN's CTC loss in the stand-in (libcudnn.so.9): PyTorch's F.ctc_loss on
 * cuDNN (int32 targets on the CPU: cudnnSetCTCLossDescriptorEx,
 * cudnnGetCTCLossWorkspaceSize, cudnnCTCLoss; its tensor variant: the _v8
 * and _v9 calls with device arrays).
 *
 *   CTC loss descriptors ─────────── kept here, by value, with the Set call
 *        that made them (the executor makes the same one)
 *   cudnnGetCTCLossWorkspaceSize(_v8) ─ sync DNN_CTC_SIZE
 *   cudnnCTCLoss(_v8) ──────────────── DNN_CTC, stream-ordered: the legacy
 *        call's host arrays (labels, label and input lengths) travel in the
 *        record; its set reads probs and writes costs, gradients and the
 *        workspace exactly; _v8's device labels are read as their whole
 *        buffer (their extent is a sum held in device memory)
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cudnn_internal.h"
#include "internal.h"

#define DNN_CTC_MAGIC 0x70684354u

struct cudnnCTCLossStruct {
	uint32_t magic;
	bool made;
	int32_t set, comp_type, norm_mode, grad_mode, max_label;
};

static cudnnCTCLossDescriptor_t ctc_of(cudnnCTCLossDescriptor_t d)
{
	return d && d->magic == DNN_CTC_MAGIC ? d : NULL;
}

PHOS_EXPORT cudnnStatus_t cudnnCreateCTCLossDescriptor(cudnnCTCLossDescriptor_t *desc)
{
	return dnn_desc_new(desc, sizeof(**desc), DNN_CTC_MAGIC);
}

PHOS_EXPORT cudnnStatus_t cudnnDestroyCTCLossDescriptor(cudnnCTCLossDescriptor_t desc)
{
	return dnn_desc_free(desc, ctc_of(desc) != NULL);
}

static cudnnStatus_t keep(cudnnCTCLossDescriptor_t desc, int set, int comp, int norm, int grad, int max_label)
{
	cudnnCTCLossDescriptor_t d = ctc_of(desc);

	if (!d || !phos_dnn_data_type_size(comp) || norm < 0 || norm > 1 || grad < 0 || grad > 1 || max_label < 0 ||
	    max_label > 255)
		return PHOS_DNN_BAD_PARAM;
	*d = (struct cudnnCTCLossStruct){ .magic = DNN_CTC_MAGIC, .made = true, .set = set, .comp_type = comp,
					   .norm_mode = norm, .grad_mode = grad, .max_label = max_label };
	return PHOS_DNN_SUCCESS;
}

PHOS_EXPORT cudnnStatus_t cudnnSetCTCLossDescriptor(cudnnCTCLossDescriptor_t desc, int comp_type)
{
	return keep(desc, 0, comp_type, 0, 0, 0);
}

PHOS_EXPORT cudnnStatus_t cudnnSetCTCLossDescriptorEx(cudnnCTCLossDescriptor_t desc, int comp_type, int norm_mode,
						      int grad_mode)
{
	return keep(desc, 1, comp_type, norm_mode, grad_mode, 0);
}

PHOS_EXPORT cudnnStatus_t cudnnSetCTCLossDescriptor_v8(cudnnCTCLossDescriptor_t desc, int comp_type, int norm_mode,
						       int grad_mode, int max_label)
{
	return keep(desc, 8, comp_type, norm_mode, grad_mode, max_label);
}

PHOS_EXPORT cudnnStatus_t cudnnSetCTCLossDescriptor_v9(cudnnCTCLossDescriptor_t desc, int comp_type, int norm_mode,
						       int ctc_grad_mode, int max_label)
{
	return keep(desc, 9, comp_type, norm_mode, ctc_grad_mode, max_label);
}

static cudnnStatus_t get(cudnnCTCLossDescriptor_t desc, int *comp, int *norm, int *grad, int *max_label)
{
	cudnnCTCLossDescriptor_t d = ctc_of(desc);

	if (!d || !d->made || !comp)
		return PHOS_DNN_BAD_PARAM;
	*comp = d->comp_type;
	if (norm)
		*norm = d->norm_mode;
	if (grad)
		*grad = d->grad_mode;
	if (max_label)
		*max_label = d->max_label;
	return PHOS_DNN_SUCCESS;
}

PHOS_EXPORT cudnnStatus_t cudnnGetCTCLossDescriptor(cudnnCTCLossDescriptor_t desc, int *comp_type)
{
	return get(desc, comp_type, NULL, NULL, NULL);
}

PHOS_EXPORT cudnnStatus_t cudnnGetCTCLossDescriptorEx(cudnnCTCLossDescriptor_t desc, int *comp_type, int *norm_mode,
						      int *grad_mode)
{
	return !norm_mode || !grad_mode ? PHOS_DNN_BAD_PARAM : get(desc, comp_type, norm_mode, grad_mode, NULL);
}

PHOS_EXPORT cudnnStatus_t cudnnGetCTCLossDescriptor_v8(cudnnCTCLossDescriptor_t desc, int *comp_type, int *norm_mode,
						       int *grad_mode, int *max_label)
{
	return !norm_mode || !grad_mode || !max_label ? PHOS_DNN_BAD_PARAM
						       : get(desc, comp_type, norm_mode, grad_mode, max_label);
}

PHOS_EXPORT cudnnStatus_t cudnnGetCTCLossDescriptor_v9(cudnnCTCLossDescriptor_t desc, int *comp_type, int *norm_mode,
						       int *ctc_grad_mode, int *max_label)
{
	return cudnnGetCTCLossDescriptor_v8(desc, comp_type, norm_mode, ctc_grad_mode, max_label);
}

/* The record of a call: its handle, descriptor, algo and tensors. */
static cudnnStatus_t begin(cudnnHandle_t handle, cudnnCTCLossDescriptor_t desc, int api, int algo,
			   cudnnTensorDescriptor_t probs, cudnnTensorDescriptor_t grads, struct phos_dnn_ctc *c,
			   cudnnHandle_t *ret)
{
	cudnnCTCLossDescriptor_t d = ctc_of(desc);
	cudnnTensorDescriptor_t p = dnn_tensor_of(probs), g = dnn_tensor_of(grads);

	*ret = dnn_handle_of(handle);
	memset(c, 0, sizeof(*c));
	if (!*ret || !d || !d->made || !p || p->t.nb != 3 || (grads && !g) || algo < 0 || algo > 1)
		return PHOS_DNN_BAD_PARAM;
	c->handle = (*ret)->id;
	c->api = api;
	c->algo = algo;
	c->set = d->set;
	c->comp_type = d->comp_type;
	c->norm_mode = d->norm_mode;
	c->grad_mode = d->grad_mode;
	c->max_label = d->max_label;
	c->probs = p->t;
	if (g)
		c->grads = g->t;
	return PHOS_DNN_SUCCESS;
}

/* The legacy call's host arrays, in one buffer (free it): labels, label
 * lengths, input lengths; NULL with *s set when they do not hold. */
static int32_t *arrays_of(struct phos_dnn_ctc *c, const int *labels, const int *lengths, const int *inputs,
			  size_t *ret_len, cudnnStatus_t *s)
{
	int64_t B = c->probs.dims[1], n = 0;
	int32_t *a;

	*s = PHOS_DNN_BAD_PARAM;
	if (!labels || !lengths || !inputs || B < 1 || B > PHOS_DNN_RNN_BATCH_MAX)
		return NULL;
	for (int64_t b = 0; b < B; b++) {
		if (lengths[b] < 0 || lengths[b] > 255)
			return NULL;
		n += lengths[b];
	}
	if (n > PHOS_DNN_CTC_LABELS_MAX)
		return NULL;
	*ret_len = (size_t)(n + 2 * B) * sizeof(int32_t);
	a = malloc(*ret_len);
	if (!a) {
		*s = PHOS_DNN_INTERNAL_ERROR;
		return NULL;
	}
	memcpy(a, labels, (size_t)n * sizeof(int32_t));
	memcpy(a + n, lengths, (size_t)B * sizeof(int32_t));
	memcpy(a + n + B, inputs, (size_t)B * sizeof(int32_t));
	c->nlabels = (int32_t)n;
	*s = PHOS_DNN_SUCCESS;
	return a;
}

static cudnnStatus_t ask(cudnnHandle_t h, struct phos_dnn_ctc *c, const void *arrays, size_t len, size_t *size)
{
	uint64_t n = 0;
	cudnnStatus_t s;

	if (!size)
		return PHOS_DNN_BAD_PARAM_NULL_POINTER;
	s = dnn_ask(h, PHOS_OP_DNN_CTC_SIZE, c, sizeof(*c), arrays, len, &n, sizeof(n));
	if (!s)
		*size = (size_t)n;
	return s;
}

PHOS_EXPORT cudnnStatus_t cudnnGetCTCLossWorkspaceSize(cudnnHandle_t handle, cudnnTensorDescriptor_t probs_desc,
						       cudnnTensorDescriptor_t grads_desc, const int *labels,
						       const int *label_lengths, const int *input_lengths, int algo,
						       cudnnCTCLossDescriptor_t desc, size_t *size)
{
	struct phos_dnn_ctc c;
	cudnnHandle_t h;
	int32_t *a = NULL;
	size_t len = 0;
	cudnnStatus_t s = begin(handle, desc, 7, algo, probs_desc, grads_desc, &c, &h);

	if (!s)
		a = arrays_of(&c, labels, label_lengths, input_lengths, &len, &s);
	if (!s)
		s = ask(h, &c, a, len, size);
	free(a);
	return s;
}

PHOS_EXPORT cudnnStatus_t cudnnGetCTCLossWorkspaceSize_v8(cudnnHandle_t handle, int algo,
							  cudnnCTCLossDescriptor_t desc,
							  cudnnTensorDescriptor_t probs_desc,
							  cudnnTensorDescriptor_t grads_desc, size_t *size)
{
	struct phos_dnn_ctc c;
	cudnnHandle_t h;
	cudnnStatus_t s = begin(handle, desc, 8, algo, probs_desc, grads_desc, &c, &h);

	return s ? s : ask(h, &c, NULL, 0, size);
}

#define U(p) ((uint64_t)(uintptr_t)(p))

PHOS_EXPORT cudnnStatus_t cudnnCTCLoss(cudnnHandle_t handle, cudnnTensorDescriptor_t probs_desc, const void *probs,
				       const int labels[], const int label_lengths[], const int input_lengths[],
				       void *costs, cudnnTensorDescriptor_t grads_desc, void *grads, int algo,
				       cudnnCTCLossDescriptor_t desc, void *work, size_t work_bytes)
{
	struct phos_dnn_ctc c;
	cudnnHandle_t h;
	int32_t *a = NULL;
	size_t len = 0;
	cudnnStatus_t s = begin(handle, desc, 7, algo, probs_desc, grads ? grads_desc : NULL, &c, &h);

	if (!s)
		a = arrays_of(&c, labels, label_lengths, input_lengths, &len, &s);
	if (!s) {
		c.pprobs = U(probs), c.costs = U(costs), c.pgrads = U(grads);
		c.work = U(work), c.work_bytes = work ? work_bytes : 0;
		s = dnn_post(h, PHOS_OP_DNN_CTC, &c, sizeof(c), a, len, offsetof(struct phos_dnn_ctc, stream));
	}
	free(a);
	return s;
}

PHOS_EXPORT cudnnStatus_t cudnnCTCLoss_v8(cudnnHandle_t handle, int algo, cudnnCTCLossDescriptor_t desc,
					  cudnnTensorDescriptor_t probs_desc, const void *probs, const int labels[],
					  const int label_lengths[], const int input_lengths[], void *costs,
					  cudnnTensorDescriptor_t grads_desc, void *grads, size_t work_bytes, void *work)
{
	struct phos_dnn_ctc c;
	cudnnHandle_t h;
	cudnnStatus_t s = begin(handle, desc, 8, algo, probs_desc, grads ? grads_desc : NULL, &c, &h);

	if (s)
		return s;
	c.pprobs = U(probs), c.costs = U(costs), c.pgrads = U(grads);
	c.work = U(work), c.work_bytes = work ? work_bytes : 0;
	c.labels = U(labels), c.label_lengths = U(label_lengths), c.input_lengths = U(input_lengths);
	return dnn_post(h, PHOS_OP_DNN_CTC, &c, sizeof(c), NULL, 0, offsetof(struct phos_dnn_ctc, stream));
}
