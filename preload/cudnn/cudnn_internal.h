/* SPDX-License-Identifier: MIT */
/*
 * What the cuDNN stand-in's files share (cudnn.c: handles, the backend
 * API, tensor descriptors, batch normalization and spatial transformers;
 * cudnn_rnn.c: RNNs and dropout). Every call that names the executor's
 * objects runs between dnn_enter() and dnn_leave() (cudnn.c says why).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cudnn_abi.h"
#include "cudnn_api.h"
#include "proto.h"

#define DNN_TENSOR_MAGIC 0x70685444u

/* A handle: the executor's under id. */
struct cudnnContext {
	uint32_t magic, id;
	int device;
	uint32_t epoch;   /* the executor it was made in */
	void *stream;
};

/* A legacy tensor descriptor: its values, kept here. */
struct cudnnTensorStruct {
	uint32_t magic;
	struct phos_dnn_tensor t;
};

/* h when it is one of ours, else NULL. */
cudnnHandle_t dnn_handle_of(cudnnHandle_t h);
/* t when it is one of ours, else NULL. */
cudnnTensorDescriptor_t dnn_tensor_of(cudnnTensorDescriptor_t t);
void dnn_enter(void);
void dnn_leave(void);
/* Makes h in the executor if this one lacks it (after a restore); between
 * dnn_enter and dnn_leave. */
cudnnStatus_t dnn_handle_ensure(cudnnHandle_t h);
/* A synchronous call: its status (the library's, else the CUDA error's nearest). */
cudnnStatus_t dnn_call(uint32_t op, const void *body, size_t len, const void *payload, size_t plen, void *out,
		       size_t cap, size_t *ret_len);
/* A synchronous query of h's executor (h made there first, inside the
 * fenced section): rec (len bytes) then payload, a reply of exactly want
 * bytes into out (INTERNAL_ERROR otherwise). */
cudnnStatus_t dnn_ask(cudnnHandle_t h, uint32_t op, const void *rec, size_t len, const void *payload, size_t plen,
		      void *out, size_t want);
/* Posts a stream-ordered call on h's stream (a node when it captures):
 * rec (len bytes) then more (more_len), the stream id written at stream_off. */
cudnnStatus_t dnn_post(cudnnHandle_t h, uint32_t op, void *rec, size_t len, const void *more, size_t more_len,
		       size_t stream_off);
/* A new descriptor of size bytes (zeroed, its first word magic: every
 * descriptor struct here starts with its magic) into *ret: the status. */
cudnnStatus_t dnn_desc_new(void *ret, size_t size, uint32_t magic);
/* Frees descriptor d when mine (one of ours, as its magic said); NULL is
 * nothing to free. The status: BAD_PARAM for one not ours. */
cudnnStatus_t dnn_desc_free(void *d, bool mine);
/* NOT_SUPPORTED, said once per reason in the log. */
cudnnStatus_t dnn_refuse(const char *what);
