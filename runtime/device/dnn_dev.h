/* SPDX-License-Identifier: MIT */
/*
 * cuDNN behind the executor: the device interface's two backends
 * (phos_device_ops.dnn).
 *
 *             ctxpool/calls/exec_dnn.c  (handles and descriptors by id, read/write sets)
 *                   │ struct phos_dnn_ops
 *        ┌──────────┴──────────────────────┐
 *   device_cuda_dnn.c                  device_sim_dnn.c
 *   the real libcudnn.so.9, dlopen'ed  descriptors as attribute lists; one
 *   at the first call (PHOS_CUDNN_LIB, engine: a direct convolution forward
 *   the loader path, $CUDNN_HOME/lib,  (float or double, NCHW strides as
 *   pip's nvidia/cudnn/lib); objects   given, cross-correlation or
 *   are the library's own              convolution, padding, stride,
 *                                      dilation); batch normalization,
 *                                      spatial transformers and RNNs
 *                                      (ReLU, tanh, LSTM, GRU) in double
 *
 * Objects are opaque pointers of the backend. In set/get, elements of type
 * HANDLE and BACKEND_DESCRIPTOR are such pointers (the executor translated
 * the function's ids); the rest are the function's bytes. Every call returns
 * 0 or a negated cudaError_t, and puts the cudnnStatus_t in *st.
 */
#pragma once

#include <stdint.h>

#include "cudnn_abi.h"
#include "proto.h"

struct phos_device;

struct phos_dnn_ops {
	int (*version)(struct phos_device *dev, struct phos_reply_dnn_version *ret, int *st);
	int (*handle_create)(struct phos_device *dev, void **ret, int *st);
	void (*handle_destroy)(struct phos_device *dev, void *h);
	int (*desc_create)(struct phos_device *dev, int type, void **ret, int *st);
	void (*desc_destroy)(struct phos_device *dev, void *d);
	int (*set)(struct phos_device *dev, void *d, int name, int type, int64_t count, const void *elems, int *st);
	/* For BACKEND_DESCRIPTOR, elems holds the `requested` objects to fill. */
	int (*get)(struct phos_device *dev, void *d, int name, int type, int64_t requested, int64_t *ret_count,
		   void *elems, int *st);
	int (*finalize)(struct phos_device *dev, void *d, int *st);
	/* n (uid, pointer) pairs: the variant pack, by-value pointers already the executor's. */
	int (*execute)(struct phos_device *dev, void *h, void *stream, void *plan, int n, const int64_t *uids,
		       void *const *ptrs, void *workspace, int *st);
	int (*bn)(struct phos_device *dev, void *h, void *stream, const struct phos_dnn_bn *b, int *st);
	int (*bn_size)(struct phos_device *dev, void *h, const struct phos_dnn_bn *b, uint64_t *ret, int *st);
	/* A spatial transformer's grid generator or sampler (phos_dnn_stf_kind). */
	int (*stf)(struct phos_device *dev, void *h, void *stream, const struct phos_dnn_stf *f, int *st);
	/* An RNN call or query (phos_dnn_rnn_kind), checked by the executor:
	 * seqs holds x's batch sequence lengths, then y's (NULL for the kinds
	 * without data descriptors); a query fills *ret (stream unused). */
	int (*rnn)(struct phos_device *dev, void *h, void *stream, const struct phos_dnn_rnn *r, const int32_t *seqs,
		   struct phos_reply_dnn_rnn *ret, int *st);
	/* A CTC loss, or its workspace's size (size non-NULL; stream unused),
	 * checked by the executor: arrays holds the legacy call's labels, label
	 * lengths and input lengths (NULL for api 8). */
	int (*ctc)(struct phos_device *dev, void *h, void *stream, const struct phos_dnn_ctc *c, const int32_t *arrays,
		   uint64_t *size, int *st);
};

extern const struct phos_dnn_ops phos_dnn_sim;
extern const struct phos_dnn_ops phos_dnn_cuda;
