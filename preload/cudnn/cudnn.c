/* SPDX-License-Identifier: MIT */
/*
 * The cuDNN stand-in (libcudnn.so.9): the backend (graph) API that PyTorch's
 * convolutions and cuDNN's frontend use, the handle, and the legacy tensor
 * descriptors and batch normalization that PyTorch calls.
 *
 *   cudnnCreate / Destroy ────────── sync DNN_CREATE / DESTROY: a handle of the
 *        executor's cuDNN on the calling thread's device; its stream is kept
 *        here (cudnnSetStream) and sent with each call that runs
 *   backend descriptors ──────────── sync DESC_CREATE, DNN_SET, DNN_GET,
 *        DNN_FINALIZE: objects of the executor under our ids, each attribute
 *        forwarded as set (descriptors and handles as ids). Each descriptor
 *        keeps its history here: the attributes set on it, whether it was
 *        finalized, and the GetAttribute that filled it (heuristic results,
 *        a configuration's engine). After a restore (a new executor) a
 *        descriptor is made again from that history at its first use, the
 *        descriptors it names first (those the program destroyed since are
 *        made for the while and destroyed again)
 *   variant packs ───────────────── kept here only: cudnnBackendExecute sends
 *        DNN_EXECUTE with the plan and the pack's (uid, pointer) pairs, each
 *        with the bytes its tensor spans (dimensions, strides and data type
 *        of the tensor of that uid in the plan's operation graph); by-value
 *        tensors travel as their bytes. A pack whose tensors cannot all be
 *        found or sized (ragged ones: their offsets are in device memory)
 *        is sent as opaque (it may touch any buffer)
 *   legacy tensor descriptors ───── kept here, by value (Nd and 4d forms)
 *   batch normalization ──────────── DNN_BN (stream-ordered) and DNN_BN_SIZE,
 *        the descriptors by value; bnOps other than BN (fused addition and
 *        activation) answer NOT_SUPPORTED; with BN, z and the activation
 *        descriptor are ignored, as cuDNN ignores them
 *
 * RNNs and dropout are in cudnn_rnn.c. The rest of cuDNN's legacy API
 * (convolutions, CTC, pooling, ...) are stubs that answer
 * CUDNN_STATUS_NOT_SUPPORTED, named once in the log.
 * cudnnGetVersion answers the executor's library's version, so a program
 * checks what will really run its calls.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cudnn_abi.h"
#include "cudnn_api.h"
#include "cudnn_internal.h"
#include "internal.h"
#include "log.h"

#define DNN_HANDLE_MAGIC 0x70684e44u   /* "DNhp" */
#define DNN_DESC_MAGIC 0x70684444u


struct dnn_desc;

/* One SetAttribute, as the program made it (descriptors: our objects, held). */
struct dnn_rec {
	int name, type;
	int64_t count;
	void *elems;
};

struct dnn_desc {
	uint32_t magic, id;
	int type;
	uint32_t epoch;         /* the executor it exists in; 0: none */
	int refs;               /* the program's (until Destroy), and one per record or fill naming it */
	bool destroyed;         /* by the program: made again only for another's sake */
	bool finalized;
	int nrecs;
	struct dnn_rec *recs;
	/* filled by GetAttribute(from, from_name) at from_index */
	struct dnn_desc *from;
	int from_name;
	int64_t from_index;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;   /* guards every descriptor */
static uint32_t epoch = 1;   /* bumped by each restore */

static int restored(void)
{
	pthread_mutex_lock(&lock);
	epoch++;
	pthread_mutex_unlock(&lock);
	return 0;
}

/* Connects, and registers the restore hook once. 0 or a cudaError_t. */
static int connect_once(void)
{
	static bool registered;
	int r = phos_preload_connect();

	if (r == 0) {
		pthread_mutex_lock(&lock);
		if (!registered && phos_preload_on_restore(restored) == 0)
			registered = true;
		pthread_mutex_unlock(&lock);
	}
	return r;
}

/* Every call that names the executor's cuDNN objects runs between dnn_enter()
 * and dnn_leave(): under the lock, and inside a fenced section of the channel
 * (channel.h), so that a checkpoint never stops the program halfway through
 * one. A restore of a checkpoint shows as a new adoption of the channel; it
 * is looked for first thing inside, and then every object is made again at
 * its first use, as after a restore at phos_fn_serve. */
static uint32_t adoptions_seen;

void dnn_enter(void)
{
	int64_t now = phos_preload_section_enter();

	pthread_mutex_lock(&lock);
	if (now >= 0 && (uint32_t)now != adoptions_seen) {
		adoptions_seen = (uint32_t)now;
		epoch++;
	}
}

void dnn_leave(void)
{
	pthread_mutex_unlock(&lock);
	phos_preload_section_leave();
}

/* A refusal that tells why, once per reason. */
cudnnStatus_t dnn_refuse(const char *what)
{
	phos_refuse_once("cuDNN", what, " (no exact read/write set): CUDNN_STATUS_NOT_SUPPORTED");
	return PHOS_DNN_NOT_SUPPORTED;
}

/* A call's result: the library status when the executor gave one, else the
 * CUDA error's nearest status. */
static cudnnStatus_t status_of(int r, int st)
{
	if (st)
		return st;
	if (r == cudaSuccess)
		return PHOS_DNN_SUCCESS;
	return r == cudaErrorNotSupported ? PHOS_DNN_NOT_SUPPORTED
	       : r == cudaErrorInvalidValue ? PHOS_DNN_BAD_PARAM
	       : r == cudaErrorInitializationError || r == cudaErrorDevicesUnavailable ? PHOS_DNN_NOT_INITIALIZED
											: PHOS_DNN_EXECUTION_FAILED;
}

cudnnStatus_t dnn_call(uint32_t op, const void *body, size_t len, const void *payload, size_t plen, void *out,
			  size_t cap, size_t *ret_len)
{
	int st = 0, r = phos_preload_call(op, body, len, payload, plen, out, cap, ret_len, &st);

	return status_of(r, st);
}

/* --- versions, statuses --- */

static struct phos_reply_dnn_version version;
static pthread_once_t version_once = PTHREAD_ONCE_INIT;

static void version_ask(void)
{
	if (connect_once() != 0 ||
	    dnn_call(PHOS_OP_DNN_VERSION, NULL, 0, NULL, 0, &version, sizeof(version), NULL) != PHOS_DNN_SUCCESS) {
		memset(&version, 0, sizeof(version));
		fprintf(stderr, "phos-fn: cuDNN: the executor has no cuDNN (libcudnn.so.9 not found there: "
				"PHOS_CUDNN_LIB): every cuDNN call fails\n");
	}
}

PHOS_EXPORT size_t cudnnGetVersion(void)
{
	pthread_once(&version_once, version_ask);
	return (size_t)version.version;
}

PHOS_EXPORT size_t cudnnGetMaxDeviceVersion(void)
{
	pthread_once(&version_once, version_ask);
	return (size_t)version.max_device_version;
}

PHOS_EXPORT size_t cudnnGetCudartVersion(void)
{
	return CUDART_VERSION;
}

PHOS_EXPORT cudnnStatus_t cudnnGetProperty(int type, int *value)
{
	size_t v = cudnnGetVersion();

	if (!value)
		return PHOS_DNN_BAD_PARAM_NULL_POINTER;
	switch (type) {   /* libraryPropertyType: MAJOR, MINOR, PATCH */
	case 0: *value = (int)(v / 10000); break;
	case 1: *value = (int)(v / 100 % 100); break;
	case 2: *value = (int)(v % 100); break;
	default: return PHOS_DNN_BAD_PARAM;
	}
	return v ? PHOS_DNN_SUCCESS : PHOS_DNN_NOT_INITIALIZED;
}

PHOS_EXPORT const char *cudnnGetErrorString(cudnnStatus_t s)
{
	static const struct { int s; const char *name; } names[] = {
		{ 0, "CUDNN_STATUS_SUCCESS" },
		{ 1001, "CUDNN_STATUS_NOT_INITIALIZED" },
		{ 1002, "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH" },
		{ 1003, "CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH" },
		{ 1004, "CUDNN_STATUS_DEPRECATED" },
		{ 1005, "CUDNN_STATUS_LICENSE_ERROR" },
		{ 1006, "CUDNN_STATUS_RUNTIME_IN_PROGRESS" },
		{ 1007, "CUDNN_STATUS_RUNTIME_FP_OVERFLOW" },
		{ 1008, "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED" },
		{ 2000, "CUDNN_STATUS_BAD_PARAM" },
		{ 2002, "CUDNN_STATUS_BAD_PARAM_NULL_POINTER" },
		{ 2003, "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER" },
		{ 2004, "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED" },
		{ 2005, "CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND" },
		{ 2006, "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT" },
		{ 2007, "CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH" },
		{ 2008, "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH" },
		{ 2009, "CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES" },
		{ 2010, "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE" },
		{ 2011, "CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH" },
		{ 2012, "CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE" },
		{ 3000, "CUDNN_STATUS_NOT_SUPPORTED" },
		{ 3001, "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN" },
		{ 3002, "CUDNN_STATUS_NOT_SUPPORTED_SHAPE" },
		{ 3003, "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE" },
		{ 3004, "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT" },
		{ 3005, "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER" },
		{ 3006, "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART" },
		{ 3007, "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH" },
		{ 3008, "CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING" },
		{ 3009, "CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE" },
		{ 3010, "CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT" },
		{ 3011, "CUDNN_STATUS_NOT_SUPPORTED_PADDING" },
		{ 3012, "CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM" },
		{ 3013, "CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API" },
		{ 3014, "CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE" },
		{ 4000, "CUDNN_STATUS_INTERNAL_ERROR" },
		{ 4001, "CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED" },
		{ 4002, "CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE" },
		{ 4003, "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED" },
		{ 4004, "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED" },
		{ 4005, "CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM" },
		{ 4006, "CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED" },
		{ 5000, "CUDNN_STATUS_EXECUTION_FAILED" },
		{ 5001, "CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER" },
		{ 5002, "CUDNN_STATUS_EXECUTION_FAILED_CUBLAS" },
		{ 5003, "CUDNN_STATUS_EXECUTION_FAILED_CUDART" },
		{ 5004, "CUDNN_STATUS_EXECUTION_FAILED_CURAND" },
	};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].s == s)
			return names[i].name;
	return "CUDNN_UNKNOWN_STATUS_FOUND";
}

PHOS_EXPORT void cudnnGetLastErrorString(char *message, size_t max_size)
{
	if (message && max_size)
		message[0] = '\0';
}

/* --- handles --- */

cudnnHandle_t dnn_handle_of(cudnnHandle_t h)
{
	return h && h->magic == DNN_HANDLE_MAGIC ? h : NULL;
}

/* Makes h again in a new executor (after a restore). Lock held. */
cudnnStatus_t dnn_handle_ensure(cudnnHandle_t h)
{
	struct phos_dnn_handle c = { .id = h->id, .device = h->device };
	cudnnStatus_t s;

	if (h->epoch == epoch)
		return PHOS_DNN_SUCCESS;
	s = dnn_call(PHOS_OP_DNN_CREATE, &c, sizeof(c), NULL, 0, NULL, 0, NULL);
	if (s == PHOS_DNN_SUCCESS)
		h->epoch = epoch;
	return s;
}

PHOS_EXPORT cudnnStatus_t cudnnCreate(cudnnHandle_t *handle)
{
	cudnnHandle_t h;
	cudnnStatus_t s;
	int device = 0;

	if (!handle)
		return PHOS_DNN_BAD_PARAM_NULL_POINTER;
	if (connect_once() != 0 || cudaGetDevice(&device) != cudaSuccess)
		return PHOS_DNN_NOT_INITIALIZED;
	h = calloc(1, sizeof(*h));
	if (!h)
		return PHOS_DNN_INTERNAL_ERROR;
	if (phos_ids_add(PHOS_H_DNN, h, &h->id) < 0) {
		free(h);
		return PHOS_DNN_INTERNAL_ERROR;
	}
	h->magic = DNN_HANDLE_MAGIC;
	h->device = device;
	dnn_enter();
	s = dnn_handle_ensure(h);
	dnn_leave();
	if (s != PHOS_DNN_SUCCESS) {
		phos_ids_take(PHOS_H_DNN, h->id);
		h->magic = 0;
		free(h);
		return s;
	}
	*handle = h;
	return PHOS_DNN_SUCCESS;
}

PHOS_EXPORT cudnnStatus_t cudnnDestroy(cudnnHandle_t handle)
{
	cudnnHandle_t h = dnn_handle_of(handle);
	struct phos_handle c;

	if (!h)
		return PHOS_DNN_BAD_PARAM;
	c = (struct phos_handle){ .id = h->id };
	dnn_enter();
	if (h->epoch == epoch)
		dnn_call(PHOS_OP_DNN_DESTROY, &c, sizeof(c), NULL, 0, NULL, 0, NULL);
	h->magic = 0;
	dnn_leave();
	phos_ids_take(PHOS_H_DNN, h->id);
	free(h);
	return PHOS_DNN_SUCCESS;
}

PHOS_EXPORT cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, void *stream)
{
	cudnnHandle_t h = dnn_handle_of(handle);

	if (!h)
		return PHOS_DNN_BAD_PARAM;
	h->stream = stream;   /* (checked where a call runs on it) */
	return PHOS_DNN_SUCCESS;
}

PHOS_EXPORT cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, void **stream)
{
	cudnnHandle_t h = dnn_handle_of(handle);

	if (!h || !stream)
		return PHOS_DNN_BAD_PARAM;
	*stream = h->stream;
	return PHOS_DNN_SUCCESS;
}

/* The handle's stream as an id for a call that runs now. */
static cudnnStatus_t stream_id(cudnnHandle_t h, uint32_t *ret)
{
	int r = phos_preload_stream_id(h->stream, ret);

	if (r == cudaErrorStreamCaptureUnsupported)
		return dnn_refuse("a stream that is capturing a graph");
	return r == cudaSuccess ? PHOS_DNN_SUCCESS : PHOS_DNN_BAD_PARAM;
}

/* --- backend descriptors --- */

static cudnnBackendDescriptor_t desc_of(cudnnBackendDescriptor_t d)
{
	return d && d->magic == DNN_DESC_MAGIC && !d->destroyed ? d : NULL;
}

static void desc_unref(struct dnn_desc *d);

static void rec_free(struct dnn_rec *r)
{
	if (r->type == PHOS_DNN_TYPE_BACKEND_DESCRIPTOR)
		for (int64_t i = 0; i < r->count; i++)
			desc_unref(((struct dnn_desc **)r->elems)[i]);
	free(r->elems);
}

static void desc_history_clear(struct dnn_desc *d)
{
	for (int i = 0; i < d->nrecs; i++)
		rec_free(&d->recs[i]);
	free(d->recs);
	d->recs = NULL;
	d->nrecs = 0;
	if (d->from)
		desc_unref(d->from);
	d->from = NULL;
}

static void desc_unref(struct dnn_desc *d)
{
	if (!d || --d->refs > 0)
		return;
	desc_history_clear(d);
	phos_ids_take(PHOS_H_DNN_DESC, d->id);
	d->magic = 0;
	free(d);
}

static struct dnn_rec *rec_find(const struct dnn_desc *d, int name)
{
	for (int i = d->nrecs - 1; i >= 0; i--)
		if (d->recs[i].name == name)
			return &d->recs[i];
	return NULL;
}

static int64_t rec_int(const struct dnn_desc *d, int name, int64_t def)
{
	const struct dnn_rec *r = rec_find(d, name);

	if (!r || r->count < 1)
		return def;
	switch (r->type) {
	case PHOS_DNN_TYPE_INT64: return ((const int64_t *)r->elems)[0];
	case PHOS_DNN_TYPE_BOOLEAN: case PHOS_DNN_TYPE_CHAR: return ((const uint8_t *)r->elems)[0];
	default: return ((const int32_t *)r->elems)[0];
	}
}

static struct dnn_desc *rec_desc(const struct dnn_desc *d, int name)
{
	const struct dnn_rec *r = rec_find(d, name);

	return r && r->type == PHOS_DNN_TYPE_BACKEND_DESCRIPTOR && r->count > 0 ? ((struct dnn_desc **)r->elems)[0]
										: NULL;
}

/* Wire form of a set's elements: descriptors and handles as u64 ids. */
static void *wire_elems(const struct dnn_rec *r, size_t *ret_len)
{
	size_t es = phos_dnn_attr_type_size(r->type), len = (size_t)r->count * es;
	void *w = malloc(len ? len : 1);

	if (!w)
		return NULL;
	if (r->type == PHOS_DNN_TYPE_BACKEND_DESCRIPTOR || r->type == PHOS_DNN_TYPE_HANDLE)
		for (int64_t i = 0; i < r->count; i++) {
			const void *o = ((void *const *)r->elems)[i];
			uint64_t id = !o ? 0
				      : r->type == PHOS_DNN_TYPE_HANDLE ? ((const struct cudnnContext *)o)->id
									: ((const struct dnn_desc *)o)->id;

			memcpy((char *)w + i * 8, &id, 8);
		}
	else if (len)
		memcpy(w, r->elems, len);
	*ret_len = len;
	return w;
}

static cudnnStatus_t desc_ensure(struct dnn_desc *d, int depth);

static cudnnStatus_t send_set(struct dnn_desc *d, const struct dnn_rec *r, int depth)
{
	struct phos_dnn_attr a = { .desc = d->id, .name = r->name, .type = r->type, .count = r->count };
	size_t len = 0;
	void *w;
	cudnnStatus_t s = PHOS_DNN_SUCCESS;

	for (int64_t i = 0; r->type == PHOS_DNN_TYPE_BACKEND_DESCRIPTOR && i < r->count && !s; i++)
		s = desc_ensure(((struct dnn_desc **)r->elems)[i], depth + 1);
	for (int64_t i = 0; r->type == PHOS_DNN_TYPE_HANDLE && i < r->count && !s; i++)
		if (((cudnnHandle_t *)r->elems)[i])
			s = dnn_handle_ensure(((cudnnHandle_t *)r->elems)[i]);
	if (s)
		return s;
	w = wire_elems(r, &len);
	if (!w)
		return PHOS_DNN_INTERNAL_ERROR;
	s = dnn_call(PHOS_OP_DNN_SET, &a, sizeof(a), w, len, NULL, 0, NULL);
	free(w);
	return s;
}

static cudnnStatus_t send_create(struct dnn_desc *d)
{
	struct phos_dnn_desc c = { .id = d->id, .type = d->type };

	return dnn_call(PHOS_OP_DNN_DESC_CREATE, &c, sizeof(c), NULL, 0, NULL, 0, NULL);
}

static void send_destroy(struct dnn_desc *d)
{
	struct phos_handle c = { .id = d->id };

	phos_preload_post(PHOS_OP_DNN_DESC_DESTROY, &c, sizeof(c), NULL, 0);
	d->epoch = 0;
}

/* A GetAttribute of descriptors: the ids of out[0..n) to fill. */
static cudnnStatus_t send_get_descs(struct dnn_desc *d, int name, int64_t n, struct dnn_desc *const *out,
				    int64_t *ret_count)
{
	struct phos_dnn_attr a = { .desc = d->id, .name = name, .type = PHOS_DNN_TYPE_BACKEND_DESCRIPTOR, .count = n };
	uint64_t *ids = calloc((size_t)n + 1, sizeof(uint64_t));
	int64_t count = 0;
	size_t len = 0;
	cudnnStatus_t s;

	if (!ids)
		return PHOS_DNN_INTERNAL_ERROR;
	for (int64_t i = 0; i < n; i++)
		ids[i] = out[i] ? out[i]->id : 0;
	s = dnn_call(PHOS_OP_DNN_GET, &a, sizeof(a), ids, (size_t)n * sizeof(uint64_t), &count, sizeof(count), &len);
	free(ids);
	if (s == PHOS_DNN_SUCCESS && ret_count)
		*ret_count = len >= sizeof(count) ? count : 0;
	return s;
}

/* Makes d exist in the current executor: created, filled as it was, its
 * attributes set again and finalized if it was. Lock held. */
static cudnnStatus_t desc_ensure(struct dnn_desc *d, int depth)
{
	cudnnStatus_t s;

	if (!d)
		return PHOS_DNN_BAD_PARAM;
	if (d->epoch == epoch || d->type == PHOS_DNN_VARIANT_PACK_DESCRIPTOR)
		return PHOS_DNN_SUCCESS;
	if (depth > 32)
		return PHOS_DNN_INTERNAL_ERROR;
	s = send_create(d);
	if (s)
		return s;
	d->epoch = epoch;
	if (d->from) {   /* the GetAttribute that filled it, with stand-ins before it */
		struct dnn_desc **out = calloc((size_t)d->from_index + 1, sizeof(*out));
		int64_t got = 0;

		s = out ? desc_ensure(d->from, depth + 1) : PHOS_DNN_INTERNAL_ERROR;
		for (int64_t i = 0; i < d->from_index && !s; i++) {
			out[i] = calloc(1, sizeof(**out));
			if (!out[i] || phos_ids_add(PHOS_H_DNN_DESC, out[i], &out[i]->id) < 0) {
				free(out[i]);
				out[i] = NULL;
				s = PHOS_DNN_INTERNAL_ERROR;
				break;
			}
			out[i]->type = d->type;
			s = send_create(out[i]);
		}
		if (!s) {
			out[d->from_index] = d;
			s = send_get_descs(d->from, d->from_name, d->from_index + 1, out, &got);
			if (!s && got <= d->from_index) {
				phos_warn("cudnn: descriptor %u could not be made again after the restore: its source "
					  "gave %lld results, not %lld", d->id, (long long)got, (long long)d->from_index + 1);
				s = PHOS_DNN_INTERNAL_ERROR;
			}
		}
		for (int64_t i = 0; out && i < d->from_index; i++)
			if (out[i]) {
				if (out[i]->id)
					send_destroy(out[i]);
				phos_ids_take(PHOS_H_DNN_DESC, out[i]->id);
				free(out[i]);
			}
		free(out);
		if (d->from->destroyed && d->from->epoch == epoch)
			send_destroy(d->from);
	}
	for (int i = 0; i < d->nrecs && !s; i++)
		s = send_set(d, &d->recs[i], depth);
	if (!s && d->finalized) {
		struct phos_handle c = { .id = d->id };

		s = dnn_call(PHOS_OP_DNN_FINALIZE, &c, sizeof(c), NULL, 0, NULL, 0, NULL);
	}
	/* what the program destroyed was made for d's sake only */
	for (int i = 0; i < d->nrecs; i++)
		if (d->recs[i].type == PHOS_DNN_TYPE_BACKEND_DESCRIPTOR)
			for (int64_t k = 0; k < d->recs[i].count; k++) {
				struct dnn_desc *r = ((struct dnn_desc **)d->recs[i].elems)[k];

				if (r->destroyed && r->epoch == epoch)
					send_destroy(r);
			}
	if (s) {
		phos_warn("cudnn: descriptor %u (type %d) could not be made again after the restore: %s", d->id, d->type,
			  cudnnGetErrorString(s));
		send_destroy(d);
	}
	return s;
}

PHOS_EXPORT cudnnStatus_t cudnnBackendCreateDescriptor(int type, cudnnBackendDescriptor_t *descriptor)
{
	struct dnn_desc *d;
	cudnnStatus_t s = PHOS_DNN_SUCCESS;

	if (!descriptor)
		return PHOS_DNN_BAD_PARAM_NULL_POINTER;
	if (type < 0 || type > PHOS_DNN_DESCRIPTOR_TYPE_LAST)
		return PHOS_DNN_BAD_PARAM;
	if (connect_once() != 0)
		return PHOS_DNN_NOT_INITIALIZED;
	d = calloc(1, sizeof(*d));
	if (!d || phos_ids_add(PHOS_H_DNN_DESC, d, &d->id) < 0) {
		free(d);
		return PHOS_DNN_INTERNAL_ERROR;
	}
	d->magic = DNN_DESC_MAGIC;
	d->type = type;
	d->refs = 1;

	dnn_enter();
	if (type != PHOS_DNN_VARIANT_PACK_DESCRIPTOR) {   /* (packs stay here) */
		s = send_create(d);
		if (!s)
			d->epoch = epoch;
	}
	if (s) {
		d->magic = 0;
		phos_ids_take(PHOS_H_DNN_DESC, d->id);
		free(d);
	} else {
		*descriptor = d;
	}
	dnn_leave();
	return s;
}

PHOS_EXPORT cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor)
{
	struct dnn_desc *d;

	dnn_enter();
	d = desc_of(descriptor);
	if (!d) {
		dnn_leave();
		return PHOS_DNN_BAD_PARAM;
	}
	if (d->epoch == epoch)
		send_destroy(d);
	d->destroyed = true;
	desc_unref(d);
	dnn_leave();
	return PHOS_DNN_SUCCESS;
}

/* A variant pack's GetAttribute, answered from what was set. */
static cudnnStatus_t pack_get(struct dnn_desc *d, int name, int type, int64_t requested, int64_t *count, void *out)
{
	const struct dnn_rec *r = rec_find(d, name);

	if (!r)
		return PHOS_DNN_BAD_PARAM;
	if (r->type != type)
		return PHOS_DNN_BAD_PARAM_ATTRIBUTE_TYPE;
	if (count)
		*count = r->count;
	if (out && requested > 0)
		memcpy(out, r->elems, (size_t)(requested < r->count ? requested : r->count) * phos_dnn_attr_type_size(type));
	return PHOS_DNN_SUCCESS;
}

/* PHOS_LOG=debug: every failed backend call, named. */
static cudnnStatus_t said(cudnnStatus_t s, const char *what, const struct dnn_desc *d, int name, int type,
			  int64_t count)
{
	if (s)
		phos_debug("cudnn: %s (descriptor %u of type %d, attribute %d, type %d, %lld elements): %s", what,
			   d ? d->id : 0, d ? d->type : -1, name, type, (long long)count, cudnnGetErrorString(s));
	return s;
}

PHOS_EXPORT cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor, int name, int type,
						   int64_t count, const void *elems)
{
	size_t es = phos_dnn_attr_type_size(type);
	struct dnn_rec r = { name, type, count, NULL }, *slot;
	struct dnn_desc *d;
	cudnnStatus_t s;

	if (!es)
		return said(PHOS_DNN_BAD_PARAM_ATTRIBUTE_TYPE, "SetAttribute", NULL, name, type, count);
	if (count < 0 || count > PHOS_DNN_MAX_ELEMS || (count && !elems))
		return said(PHOS_DNN_BAD_PARAM, "SetAttribute", NULL, name, type, count);
	dnn_enter();
	d = desc_of(descriptor);
	s = !d ? PHOS_DNN_BAD_PARAM : d->finalized ? PHOS_DNN_BAD_PARAM : PHOS_DNN_SUCCESS;
	for (int64_t i = 0; !s && i < count && type == PHOS_DNN_TYPE_BACKEND_DESCRIPTOR; i++)
		if (!desc_of(((struct dnn_desc *const *)elems)[i]))
			s = PHOS_DNN_BAD_PARAM;
	for (int64_t i = 0; !s && i < count && type == PHOS_DNN_TYPE_HANDLE; i++)
		if (((cudnnHandle_t const *)elems)[i] && !dnn_handle_of(((cudnnHandle_t const *)elems)[i]))
			s = PHOS_DNN_BAD_PARAM;
	if (!s && !(r.elems = malloc(count ? (size_t)count * es : 1)))
		s = PHOS_DNN_INTERNAL_ERROR;
	if (s) {
		dnn_leave();
		return s;
	}
	memcpy(r.elems, elems, (size_t)count * es);
	if (d->type != PHOS_DNN_VARIANT_PACK_DESCRIPTOR) {
		s = desc_ensure(d, 0);
		if (!s)
			s = send_set(d, &r, 0);
	}
	if (!s && (slot = realloc(d->recs, (size_t)(d->nrecs + 1) * sizeof(*slot)))) {
		d->recs = slot;
		if (type == PHOS_DNN_TYPE_BACKEND_DESCRIPTOR)
			for (int64_t i = 0; i < count; i++)
				((struct dnn_desc **)r.elems)[i]->refs++;
		d->recs[d->nrecs++] = r;
		r.elems = NULL;
	} else if (!s) {
		s = PHOS_DNN_INTERNAL_ERROR;
	}
	free(r.elems);
	dnn_leave();
	return said(s, "SetAttribute", d, name, type, count);
}

PHOS_EXPORT cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor, int name, int type,
						   int64_t requested, int64_t *count, void *elems)
{
	size_t es = phos_dnn_attr_type_size(type);
	struct phos_dnn_attr a = { .name = name, .type = type, .count = requested };
	struct dnn_desc *d;
	cudnnStatus_t s;

	if (!es)
		return said(PHOS_DNN_BAD_PARAM_ATTRIBUTE_TYPE, "GetAttribute", NULL, name, type, requested);
	if (!elems)   /* a count query, whatever was requested (cuDNN's frontend asks so) */
		requested = 0;
	if (requested < 0 || requested > PHOS_DNN_MAX_ELEMS || (!requested && !count))
		return said(PHOS_DNN_BAD_PARAM, "GetAttribute", NULL, name, type, requested);
	dnn_enter();
	d = desc_of(descriptor);
	if (!d) {
		dnn_leave();
		return said(PHOS_DNN_BAD_PARAM, "GetAttribute", NULL, name, type, requested);
	}
	if (d->type == PHOS_DNN_VARIANT_PACK_DESCRIPTOR) {
		s = pack_get(d, name, type, requested, count, elems);
		dnn_leave();
		return s;
	}
	s = desc_ensure(d, 0);
	if (!s && type == PHOS_DNN_TYPE_BACKEND_DESCRIPTOR) {
		struct dnn_desc *const *out = elems;
		int64_t got = 0;

		for (int64_t i = 0; i < requested && !s; i++)
			s = desc_of(out[i]) ? desc_ensure(out[i], 0) : PHOS_DNN_BAD_PARAM;
		if (!s)
			s = send_get_descs(d, name, requested, out, &got);
		/* each filled descriptor remembers how (for a restore) */
		for (int64_t i = 0; !s && i < requested && i < got; i++) {
			struct dnn_desc *o = out[i];

			desc_history_clear(o);
			o->from = d;
			d->refs++;
			o->from_name = name;
			o->from_index = i;

		}
		if (!s && count)
			*count = got;
	} else if (!s) {
		size_t len = 0, cap = sizeof(int64_t) + (size_t)requested * es;
		uint8_t *buf = malloc(cap);

		a.desc = d->id;
		s = buf ? dnn_call(PHOS_OP_DNN_GET, &a, sizeof(a), NULL, 0, buf, cap, &len) : PHOS_DNN_INTERNAL_ERROR;
		if (!s && len >= sizeof(int64_t)) {
			int64_t n;

			memcpy(&n, buf, sizeof(n));
			if (count)
				*count = n;
			if (requested)
				memcpy(elems, buf + sizeof(int64_t), len - sizeof(int64_t));
		}
		free(buf);
	}
	dnn_leave();
	return said(s, "GetAttribute", d, name, type, requested);
}

PHOS_EXPORT cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor)
{
	struct dnn_desc *d;
	cudnnStatus_t s;

	dnn_enter();
	d = desc_of(descriptor);
	if (!d || d->finalized) {
		dnn_leave();
		return PHOS_DNN_BAD_PARAM;
	}
	if (d->type == PHOS_DNN_VARIANT_PACK_DESCRIPTOR) {
		const struct dnn_rec *ids = rec_find(d, PHOS_DNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
		const struct dnn_rec *ptrs = rec_find(d, PHOS_DNN_ATTR_VARIANT_PACK_DATA_POINTERS);

		s = ids && ptrs && ids->count == ptrs->count && ids->type == PHOS_DNN_TYPE_INT64 &&
				    ptrs->type == PHOS_DNN_TYPE_VOID_PTR && ids->count <= PHOS_DNN_MAX_VP
			    ? PHOS_DNN_SUCCESS
			    : PHOS_DNN_BAD_PARAM;
	} else {
		struct phos_handle c = { .id = d->id };

		s = desc_ensure(d, 0);
		if (!s)
			s = dnn_call(PHOS_OP_DNN_FINALIZE, &c, sizeof(c), NULL, 0, NULL, 0, NULL);
	}
	if (!s)
		d->finalized = true;
	dnn_leave();
	return said(s, "Finalize", d, 0, 0, 0);
}

/* --- execution: the pack's tensors sized from the plan's graph --- */

/* The operation graph a plan (or configuration, engine, heuristic) was made from. */
static struct dnn_desc *graph_of(struct dnn_desc *d, int depth)
{
	struct dnn_desc *n = NULL;

	if (!d || depth > 8)
		return NULL;
	switch (d->type) {
	case PHOS_DNN_OPERATIONGRAPH_DESCRIPTOR:
		return d;
	case PHOS_DNN_EXECUTION_PLAN_DESCRIPTOR:
		n = rec_desc(d, PHOS_DNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
		break;
	case PHOS_DNN_ENGINECFG_DESCRIPTOR:
		n = rec_desc(d, PHOS_DNN_ATTR_ENGINECFG_ENGINE);
		break;
	case PHOS_DNN_ENGINE_DESCRIPTOR:
		n = rec_desc(d, PHOS_DNN_ATTR_ENGINE_OPERATION_GRAPH);
		break;
	case PHOS_DNN_ENGINEHEUR_DESCRIPTOR:
		n = rec_desc(d, PHOS_DNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
		break;
	default:
		return NULL;
	}
	if (!n)
		n = d->from;   /* a configuration from a heuristic, an engine from a configuration */
	return graph_of(n, depth + 1);
}

/* The tensor of uid among the descriptors reachable from d. */
static struct dnn_desc *tensor_find(struct dnn_desc *d, int64_t uid, int depth)
{
	if (!d || depth > 8)
		return NULL;
	if (d->type == PHOS_DNN_TENSOR_DESCRIPTOR && rec_int(d, PHOS_DNN_ATTR_TENSOR_UNIQUE_ID, -1) == uid &&
	    rec_find(d, PHOS_DNN_ATTR_TENSOR_UNIQUE_ID))
		return d;
	for (int i = 0; i < d->nrecs; i++)
		if (d->recs[i].type == PHOS_DNN_TYPE_BACKEND_DESCRIPTOR)
			for (int64_t k = 0; k < d->recs[i].count; k++) {
				struct dnn_desc *t = tensor_find(((struct dnn_desc **)d->recs[i].elems)[k], uid, depth + 1);

				if (t)
					return t;
			}
	return NULL;
}

/* Bytes a backend tensor spans (phos_dnn_span; a stride may be 0, a broadcast),
 * or -1. A ragged tensor has none: its rows start at offsets that another
 * tensor holds in device memory, which phos-fn does not read. */
static int64_t tensor_span(const struct dnn_desc *t, int64_t *ret_elems)
{
	const struct dnn_rec *dims = rec_find(t, PHOS_DNN_ATTR_TENSOR_DIMENSIONS);
	const struct dnn_rec *str = rec_find(t, PHOS_DNN_ATTR_TENSOR_STRIDES);
	size_t es = phos_dnn_data_type_size((int)rec_int(t, PHOS_DNN_ATTR_TENSOR_DATA_TYPE, -1));
	uint64_t bytes, n;

	if (!dims || !str || dims->type != PHOS_DNN_TYPE_INT64 || str->type != PHOS_DNN_TYPE_INT64 ||
	    dims->count != str->count || rec_int(t, PHOS_DNN_ATTR_TENSOR_VECTOR_COUNT, 1) != 1 ||
	    rec_find(t, PHOS_DNN_ATTR_TENSOR_RAGGED_OFFSET_DESC) ||
	    !phos_dnn_span(dims->count, dims->elems, str->elems, 0, es, &bytes, &n) || bytes > INT64_MAX)
		return -1;
	if (ret_elems)
		*ret_elems = (int64_t)n;
	return (int64_t)bytes;
}

static bool in_arena(uint64_t p)
{
	const struct phos_reply_hello *h = phos_preload_hello();

	return h && p >= h->arena_base && p < h->arena_base + h->arena_size;
}

/* --- calls captured into CUDA graphs (internal.h, phos_graph_capture_call) ---
 *
 * An execution or a batch normalization on a capturing stream becomes a
 * node: its record, kept with its handle's id and its plan (held while a
 * copy of the node exists), is made ready at each launch of the graph as a
 * call is (the handle and the plan made again after a restore, inside a
 * fenced section), then posted with the launch stream's id. */
struct dnn_captured {
	uint32_t op, handle;
	uint32_t stream_off;        /* of the stream id in the record */
	uint32_t len;               /* bytes of the record, after this header */
	struct dnn_desc *plan;      /* held; NULL: none (batch normalization) */
};

static int captured_run(const void *body, size_t len, uint32_t sid)
{
	struct dnn_captured c;
	cudnnHandle_t h;
	cudnnStatus_t s;
	uint8_t *rec;
	int r;

	if (len < sizeof(c))
		return cudaErrorInvalidValue;
	memcpy(&c, body, sizeof(c));
	if (c.len != len - sizeof(c) || c.stream_off > c.len - sizeof(sid) || c.len < sizeof(sid))
		return cudaErrorInvalidValue;
	rec = malloc(c.len);
	if (!rec)
		return cudaErrorMemoryAllocation;
	memcpy(rec, (const uint8_t *)body + sizeof(c), c.len);
	memcpy(rec + c.stream_off, &sid, sizeof(sid));
	dnn_enter();
	h = dnn_handle_of(phos_ids_get(PHOS_H_DNN, c.handle));
	s = h ? dnn_handle_ensure(h) : PHOS_DNN_BAD_PARAM;
	if (!s && c.plan)
		s = desc_ensure(c.plan, 0);
	r = !h ? cudaErrorInvalidResourceHandle : s ? cudaErrorUnknown : phos_preload_post(c.op, rec, c.len, NULL, 0);
	dnn_leave();
	free(rec);
	return r;
}

static void captured_hold(const void *body)
{
	struct dnn_captured c;

	memcpy(&c, body, sizeof(c));
	if (c.plan) {
		dnn_enter();
		c.plan->refs++;
		dnn_leave();
	}
}

static void captured_drop(const void *body)
{
	struct dnn_captured c;

	memcpy(&c, body, sizeof(c));
	if (!c.plan)
		return;
	dnn_enter();
	/* a plan the program destroyed, made again for the graph: gone with it */
	if (c.plan->refs == 1 && c.plan->destroyed && c.plan->epoch == epoch)
		send_destroy(c.plan);
	desc_unref(c.plan);
	dnn_leave();
}

static const struct phos_graph_call_ops captured_ops = { captured_run, captured_hold, captured_drop };

/* The node's body for record rec (len bytes, its stream id at stream_off),
 * holding plan (may be NULL). Lock held. NULL when out of memory. */
static struct dnn_captured *captured_make(uint32_t op, cudnnHandle_t h, struct dnn_desc *plan, const void *rec,
					  size_t len, const void *more, size_t more_len, uint32_t stream_off,
					  size_t *ret_len)
{
	struct dnn_captured *c = malloc(sizeof(*c) + len + more_len);

	if (!c)
		return NULL;
	*c = (struct dnn_captured){ .op = op, .handle = h->id, .stream_off = stream_off,
				    .len = (uint32_t)(len + more_len), .plan = plan };
	memcpy(c + 1, rec, len);
	if (more_len)
		memcpy((uint8_t *)(c + 1) + len, more, more_len);
	if (plan)
		plan->refs++;
	*ret_len = sizeof(*c) + len + more_len;
	return c;
}

PHOS_EXPORT cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
					      cudnnBackendDescriptor_t pack)
{
	struct phos_dnn_vp_entry ent[PHOS_DNN_MAX_VP];
	uint8_t values[PHOS_DNN_MAX_VP * 16], *payload = NULL;
	struct phos_dnn_execute e = { 0 };
	cudnnHandle_t h = dnn_handle_of(handle);
	struct dnn_desc *p, *v, *graph;
	const struct dnn_rec *ids, *ptrs, *ws;
	struct dnn_captured *cap = NULL;
	size_t nvalues = 0, cap_len = 0;
	bool capturing;
	cudnnStatus_t s;

	if (!h)
		return PHOS_DNN_BAD_PARAM;
	capturing = phos_preload_capturing(h->stream);   /* a node (above) */
	dnn_enter();
	p = desc_of(plan);
	v = desc_of(pack);
	s = !p || !v || p->type != PHOS_DNN_EXECUTION_PLAN_DESCRIPTOR || v->type != PHOS_DNN_VARIANT_PACK_DESCRIPTOR
		    ? PHOS_DNN_BAD_PARAM
		    : !p->finalized || !v->finalized ? PHOS_DNN_BAD_PARAM_NOT_FINALIZED : PHOS_DNN_SUCCESS;
	ids = v ? rec_find(v, PHOS_DNN_ATTR_VARIANT_PACK_UNIQUE_IDS) : NULL;
	ptrs = v ? rec_find(v, PHOS_DNN_ATTR_VARIANT_PACK_DATA_POINTERS) : NULL;
	ws = v ? rec_find(v, PHOS_DNN_ATTR_VARIANT_PACK_WORKSPACE) : NULL;
	if (!s && (!ids || !ptrs))
		s = PHOS_DNN_BAD_PARAM;
	if (!s)
		s = dnn_handle_ensure(h);
	if (!s)
		s = desc_ensure(p, 0);
	if (!s && !capturing)
		s = stream_id(h, &e.stream);
	graph = s ? NULL : graph_of(p, 0);
	e.n = s ? 0 : (uint32_t)ids->count;
	for (uint32_t i = 0; !s && i < e.n; i++) {
		int64_t uid = ((const int64_t *)ids->elems)[i], elems = 0;
		uint64_t ptr = (uint64_t)(uintptr_t)((void *const *)ptrs->elems)[i];
		struct dnn_desc *t = tensor_find(graph, uid, 0);
		int64_t span = t ? tensor_span(t, &elems) : -1;

		ent[i] = (struct phos_dnn_vp_entry){ .uid = uid, .ptr = ptr };
		if (t && rec_int(t, PHOS_DNN_ATTR_TENSOR_IS_BY_VALUE, 0)) {   /* the value, from host memory */
			if (span < 0 || !ptr || (size_t)span > 16 || nvalues + (size_t)span > sizeof(values)) {
				s = dnn_refuse("a by-value tensor that is not a small scalar");
				break;
			}
			memcpy(values + nvalues, (const void *)(uintptr_t)ptr, (size_t)span);
			ent[i].value_off = (uint32_t)nvalues;
			ent[i].value_len = (uint32_t)span;
			nvalues += (size_t)span;
			continue;
		}
		if (ptr && !in_arena(ptr)) {
			s = dnn_refuse("a variant pack pointer outside device memory");
			break;
		}
		if (span < 0)   /* not found or not sizable: no exact set */
			e.opaque = 1;
		else
			ent[i].bytes = (uint64_t)span;
	}
	if (!s && ws && ws->count == 1 && ws->type == PHOS_DNN_TYPE_VOID_PTR)
		e.workspace = (uint64_t)(uintptr_t)((void *const *)ws->elems)[0];
	e.handle = h->id;
	e.plan = p ? p->id : 0;
	if (!s) {
		size_t elen = e.n * sizeof(ent[0]);

		payload = malloc(elen + nvalues + 1);
		if (!payload) {
			s = PHOS_DNN_INTERNAL_ERROR;
		} else {
			memcpy(payload, ent, elen);
			memcpy(payload + elen, values, nvalues);
			if (!capturing)
				s = status_of(phos_preload_post(PHOS_OP_DNN_EXECUTE, &e, sizeof(e), payload,
								elen + nvalues), 0);
			else if (!(cap = captured_make(PHOS_OP_DNN_EXECUTE, h, p, &e, sizeof(e), payload, elen + nvalues,
						      offsetof(struct phos_dnn_execute, stream), &cap_len)))
				s = PHOS_DNN_INTERNAL_ERROR;
		}
	}
	free(payload);
	dnn_leave();
	if (cap)   /* (outside the lock: a failed capture drops the plan's hold) */
		s = status_of(phos_graph_capture_call(h->stream, &captured_ops, cap, cap_len), 0);
	free(cap);
	return said(s, "Execute", p, 0, 0, e.n);
}

PHOS_EXPORT cudnnStatus_t cudnnBackendInitialize(cudnnBackendDescriptor_t descriptor)
{
	(void)descriptor;
	return dnn_refuse("cudnnBackendInitialize (descriptors in the caller's memory)");
}

PHOS_EXPORT cudnnStatus_t cudnnBackendPopulateCudaGraph(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
							cudnnBackendDescriptor_t pack, void *graph)
{
	(void)handle, (void)plan, (void)pack, (void)graph;
	return dnn_refuse("cudnnBackendPopulateCudaGraph");
}

PHOS_EXPORT cudnnStatus_t cudnnBackendUpdateCudaGraph(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
						      cudnnBackendDescriptor_t pack, void *graph)
{
	(void)handle, (void)plan, (void)pack, (void)graph;
	return dnn_refuse("cudnnBackendUpdateCudaGraph");
}

/* --- legacy tensor descriptors --- */

cudnnTensorDescriptor_t dnn_tensor_of(cudnnTensorDescriptor_t t)
{
	return t && t->magic == DNN_TENSOR_MAGIC ? t : NULL;
}

cudnnStatus_t dnn_desc_new(void *ret, size_t size, uint32_t magic)
{
	uint32_t *d;

	if (!ret)
		return PHOS_DNN_BAD_PARAM_NULL_POINTER;
	d = calloc(1, size);
	if (!d)
		return PHOS_DNN_INTERNAL_ERROR;
	*d = magic;
	memcpy(ret, &d, sizeof(d));
	return PHOS_DNN_SUCCESS;
}

cudnnStatus_t dnn_desc_free(void *d, bool mine)
{
	if (!d)
		return PHOS_DNN_SUCCESS;
	if (!mine)
		return PHOS_DNN_BAD_PARAM;
	*(uint32_t *)d = 0;
	free(d);
	return PHOS_DNN_SUCCESS;
}

PHOS_EXPORT cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *desc)
{
	return dnn_desc_new(desc, sizeof(**desc), DNN_TENSOR_MAGIC);
}

PHOS_EXPORT cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc)
{
	return dnn_desc_free(desc, dnn_tensor_of(desc) != NULL);
}

PHOS_EXPORT cudnnStatus_t cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t desc, int type, int nb,
						     const int dims[], const int strides[])
{
	cudnnTensorDescriptor_t t = dnn_tensor_of(desc);

	if (!t || !dims || !strides)
		return PHOS_DNN_BAD_PARAM;
	if (nb < 1 || nb > PHOS_DNN_DIM_MAX)
		return PHOS_DNN_NOT_SUPPORTED;
	if (!phos_dnn_data_type_size(type))
		return PHOS_DNN_BAD_PARAM;
	for (int i = 0; i < nb; i++)
		if (dims[i] < 1 || strides[i] < 1)
			return PHOS_DNN_BAD_PARAM;
	memset(&t->t, 0, sizeof(t->t));
	t->t.type = type;
	t->t.nb = nb;
	memcpy(t->t.dims, dims, (size_t)nb * sizeof(int));
	memcpy(t->t.strides, strides, (size_t)nb * sizeof(int));
	return PHOS_DNN_SUCCESS;
}

PHOS_EXPORT cudnnStatus_t cudnnSetTensor4dDescriptorEx(cudnnTensorDescriptor_t desc, int type, int n, int c, int h,
						       int w, int ns, int cs, int hs, int ws)
{
	const int dims[4] = { n, c, h, w }, strides[4] = { ns, cs, hs, ws };

	return cudnnSetTensorNdDescriptor(desc, type, 4, dims, strides);
}

PHOS_EXPORT cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t desc, int format, int type, int n,
						     int c, int h, int w)
{
	switch (format) {   /* cudnnTensorFormat_t: NCHW, NHWC */
	case 0: return cudnnSetTensor4dDescriptorEx(desc, type, n, c, h, w, c * h * w, h * w, w, 1);
	case 1: return cudnnSetTensor4dDescriptorEx(desc, type, n, c, h, w, h * w * c, 1, w * c, c);
	default: return dnn_refuse("a vectorised tensor format");
	}
}

PHOS_EXPORT cudnnStatus_t cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t desc, int requested, int *type,
						     int *nb, int dims[], int strides[])
{
	const struct cudnnTensorStruct *t = dnn_tensor_of(desc);

	if (!t || !type || !nb || requested < 0 || (requested && (!dims || !strides)))
		return PHOS_DNN_BAD_PARAM;
	*type = t->t.type;
	*nb = t->t.nb;
	for (int i = 0; i < requested && i < t->t.nb; i++) {
		dims[i] = t->t.dims[i];
		strides[i] = t->t.strides[i];
	}
	return PHOS_DNN_SUCCESS;
}

PHOS_EXPORT cudnnStatus_t cudnnGetTensorSizeInBytes(const cudnnTensorDescriptor_t desc, size_t *size)
{
	const struct cudnnTensorStruct *t = dnn_tensor_of(desc);
	uint64_t bytes;

	if (!t || !size || !phos_dnn_tensor_bytes(&t->t, &bytes))
		return PHOS_DNN_BAD_PARAM;
	*size = (size_t)bytes;
	return PHOS_DNN_SUCCESS;
}

/* --- batch normalization --- */

/* Copies a set descriptor into the record (NULL: left unset). */
static cudnnStatus_t bn_tensor(cudnnTensorDescriptor_t d, struct phos_dnn_tensor *out, bool needed)
{
	if (!d)
		return needed ? PHOS_DNN_BAD_PARAM : PHOS_DNN_SUCCESS;
	if (!dnn_tensor_of(d) || !d->t.nb)
		return PHOS_DNN_BAD_PARAM;
	*out = d->t;
	return PHOS_DNN_SUCCESS;
}

/* The descriptors of a forward pass (x, y, the parameters' bn), and of a
 * backward one (x, dy, dx, bn): each needed. */
static cudnnStatus_t bn_forward_tensors(struct phos_dnn_bn *b, cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t yd,
					cudnnTensorDescriptor_t bnd)
{
	cudnnStatus_t s = bn_tensor(xd, &b->x, true);

	if (!s)
		s = bn_tensor(yd, &b->y, true);
	return s ? s : bn_tensor(bnd, &b->bn, true);
}

static cudnnStatus_t bn_backward_tensors(struct phos_dnn_bn *b, cudnnTensorDescriptor_t xd,
					 cudnnTensorDescriptor_t dyd, cudnnTensorDescriptor_t dxd,
					 cudnnTensorDescriptor_t bnd)
{
	cudnnStatus_t s = bn_tensor(xd, &b->x, true);

	if (!s)
		s = bn_tensor(dyd, &b->dy, true);
	if (!s)
		s = bn_tensor(dxd, &b->dx, true);
	return s ? s : bn_tensor(bnd, &b->bn, true);
}

static void bn_scalar(uint8_t out[8], const void *p, int type)
{
	memcpy(out, p, type == PHOS_DNN_DATA_DOUBLE ? 8 : 4);
}

/* The handle and mode of a batch normalization, and its bnOps: only BN. z
 * and the activation descriptor are not asked for: cuDNN reads them only for
 * the fused bnOps, and so ignores them with BN. */
static cudnnStatus_t bn_begin(cudnnHandle_t handle, int mode, int ops, struct phos_dnn_bn *b, cudnnHandle_t *ret)
{
	cudnnHandle_t h = dnn_handle_of(handle);

	*ret = h;
	if (!h)
		return PHOS_DNN_BAD_PARAM;
	if (ops != PHOS_DNN_BN_OPS_BN)
		return dnn_refuse("batch normalization fused with an addition or an activation");
	if (mode < PHOS_DNN_BN_PER_ACTIVATION || mode > PHOS_DNN_BN_SPATIAL_PERSISTENT)
		return PHOS_DNN_BAD_PARAM;
	b->handle = h->id;
	b->mode = mode;
	return PHOS_DNN_SUCCESS;
}

/* Posts a stream-ordered legacy call that names only its handle (a batch
 * normalization, a spatial transformer, an RNN pass): rec, len bytes, and
 * more_len bytes after it, its stream id at stream_off (filled here); on a
 * capturing stream a node (captured_ops). */
cudnnStatus_t dnn_post(cudnnHandle_t h, uint32_t op, void *rec, size_t len, const void *more, size_t more_len,
		       size_t stream_off)
{
	bool capturing = phos_preload_capturing(h->stream);
	struct dnn_captured *cap = NULL;
	size_t cap_len = 0;
	uint32_t sid = 0;
	cudnnStatus_t s = capturing ? PHOS_DNN_SUCCESS : stream_id(h, &sid);

	if (s)
		return s;
	memcpy((uint8_t *)rec + stream_off, &sid, sizeof(sid));
	dnn_enter();
	s = dnn_handle_ensure(h);
	if (!s && !capturing)
		s = status_of(phos_preload_post(op, rec, len, more, more_len), 0);
	else if (!s && !(cap = captured_make(op, h, NULL, rec, len, more, more_len, (uint32_t)stream_off, &cap_len)))
		s = PHOS_DNN_INTERNAL_ERROR;
	dnn_leave();
	if (cap)
		s = status_of(phos_graph_capture_call(h->stream, &captured_ops, cap, cap_len), 0);
	free(cap);
	return s;
}

static cudnnStatus_t bn_post(cudnnHandle_t h, struct phos_dnn_bn *b)
{
	return dnn_post(h, PHOS_OP_DNN_BN, b, sizeof(*b), NULL, 0, offsetof(struct phos_dnn_bn, stream));
}

cudnnStatus_t dnn_ask(cudnnHandle_t h, uint32_t op, const void *rec, size_t len, const void *payload, size_t plen,
		      void *out, size_t want)
{
	size_t got = 0;
	cudnnStatus_t s;

	dnn_enter();
	s = dnn_handle_ensure(h);
	if (!s)
		s = dnn_call(op, rec, len, payload, plen, out, want, &got);
	dnn_leave();
	return !s && got != want ? PHOS_DNN_INTERNAL_ERROR : s;
}

static cudnnStatus_t bn_size(cudnnHandle_t h, struct phos_dnn_bn *b, size_t *size)
{
	uint64_t n = 0;
	cudnnStatus_t s;

	if (!size)
		return PHOS_DNN_BAD_PARAM_NULL_POINTER;
	s = dnn_ask(h, PHOS_OP_DNN_BN_SIZE, b, sizeof(*b), NULL, 0, &n, sizeof(n));
	if (!s)
		*size = (size_t)n;
	return s;
}

#define U(p) ((uint64_t)(uintptr_t)(p))

PHOS_EXPORT cudnnStatus_t cudnnBatchNormalizationForwardInference(
	cudnnHandle_t handle, int mode, const void *alpha, const void *beta, cudnnTensorDescriptor_t xd, const void *x,
	cudnnTensorDescriptor_t yd, void *y, cudnnTensorDescriptor_t bnd, const void *scale, const void *bias,
	const void *mean, const void *var, double epsilon)
{
	struct phos_dnn_bn b = { .kind = PHOS_DNN_BN_INFERENCE };
	cudnnHandle_t h;
	cudnnStatus_t s = bn_begin(handle, mode, PHOS_DNN_BN_OPS_BN, &b, &h);

	if (!s && (!alpha || !beta || !x || !y || !scale || !bias || !mean || !var))
		s = PHOS_DNN_BAD_PARAM_NULL_POINTER;
	if (!s)
		s = bn_forward_tensors(&b, xd, yd, bnd);
	if (s)
		return s;
	bn_scalar(b.alpha, alpha, b.x.type);
	bn_scalar(b.beta, beta, b.x.type);
	b.px = U(x), b.py = U(y), b.scale = U(scale), b.bias = U(bias), b.mean = U(mean), b.var = U(var);
	b.epsilon = epsilon;
	return bn_post(h, &b);
}

PHOS_EXPORT cudnnStatus_t cudnnBatchNormalizationForwardTrainingEx(
	cudnnHandle_t handle, int mode, int ops, const void *alpha, const void *beta, cudnnTensorDescriptor_t xd,
	const void *x, cudnnTensorDescriptor_t zd, const void *z, cudnnTensorDescriptor_t yd, void *y,
	cudnnTensorDescriptor_t bnd, const void *scale, const void *bias, double factor, void *running_mean,
	void *running_var, double epsilon, void *save_mean, void *save_inv_var, void *act, void *workspace,
	size_t workspace_bytes, void *reserve, size_t reserve_bytes)
{
	struct phos_dnn_bn b = { .kind = PHOS_DNN_BN_TRAINING };
	cudnnHandle_t h;
	cudnnStatus_t s = bn_begin(handle, mode, ops, &b, &h);

	if (!s && (!alpha || !beta || !x || !y || !scale || !bias))
		s = PHOS_DNN_BAD_PARAM_NULL_POINTER;
	if (!s)
		s = bn_forward_tensors(&b, xd, yd, bnd);
	if (s)
		return s;
	bn_scalar(b.alpha, alpha, b.x.type);
	bn_scalar(b.beta, beta, b.x.type);
	b.px = U(x), b.py = U(y), b.scale = U(scale), b.bias = U(bias);
	b.mean = U(running_mean), b.var = U(running_var);
	b.save_mean = U(save_mean), b.save_inv_var = U(save_inv_var);
	b.workspace = U(workspace), b.workspace_bytes = workspace_bytes;
	b.reserve = U(reserve), b.reserve_bytes = reserve_bytes;
	b.factor = factor;
	b.epsilon = epsilon;
	return bn_post(h, &b);
}

PHOS_EXPORT cudnnStatus_t cudnnBatchNormalizationBackwardEx(
	cudnnHandle_t handle, int mode, int ops, const void *alpha, const void *beta, const void *alpha_param,
	const void *beta_param, cudnnTensorDescriptor_t xd, const void *x, cudnnTensorDescriptor_t yd, const void *y,
	cudnnTensorDescriptor_t dyd, const void *dy, cudnnTensorDescriptor_t dzd, void *dz,
	cudnnTensorDescriptor_t dxd, void *dx, cudnnTensorDescriptor_t bnd, const void *scale, const void *bias,
	void *dscale, void *dbias, double epsilon, const void *save_mean, const void *save_inv_var, void *act,
	void *workspace, size_t workspace_bytes, void *reserve, size_t reserve_bytes)
{
	struct phos_dnn_bn b = { .kind = PHOS_DNN_BN_BACKWARD };
	cudnnHandle_t h;
	cudnnStatus_t s = bn_begin(handle, mode, ops, &b, &h);

	(void)yd, (void)y, (void)bias;   /* (used only with an activation) */
	if (!s && (!alpha || !beta || !alpha_param || !beta_param || !x || !dy || !dx || !scale || !dscale || !dbias))
		s = PHOS_DNN_BAD_PARAM_NULL_POINTER;
	if (!s)
		s = bn_backward_tensors(&b, xd, dyd, dxd, bnd);
	if (s)
		return s;
	bn_scalar(b.alpha, alpha, b.x.type);
	bn_scalar(b.beta, beta, b.x.type);
	bn_scalar(b.alpha_param, alpha_param, b.x.type);
	bn_scalar(b.beta_param, beta_param, b.x.type);
	b.px = U(x), b.pdy = U(dy), b.pdx = U(dx), b.scale = U(scale), b.dscale = U(dscale), b.dbias = U(dbias);
	b.save_mean = U(save_mean), b.save_inv_var = U(save_inv_var);
	b.workspace = U(workspace), b.workspace_bytes = workspace_bytes;
	b.reserve = U(reserve), b.reserve_bytes = reserve_bytes;
	b.epsilon = epsilon;
	return bn_post(h, &b);
}

PHOS_EXPORT cudnnStatus_t cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
	cudnnHandle_t handle, int mode, int ops, cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t zd,
	cudnnTensorDescriptor_t yd, cudnnTensorDescriptor_t bnd, void *act, size_t *size)
{
	struct phos_dnn_bn b = { .kind = PHOS_DNN_BN_TRAINING };
	cudnnHandle_t h;
	cudnnStatus_t s = bn_begin(handle, mode, ops, &b, &h);

	if (!s)
		s = bn_forward_tensors(&b, xd, yd, bnd);
	return s ? s : bn_size(h, &b, size);
}

PHOS_EXPORT cudnnStatus_t cudnnGetBatchNormalizationBackwardExWorkspaceSize(
	cudnnHandle_t handle, int mode, int ops, cudnnTensorDescriptor_t xd, cudnnTensorDescriptor_t yd,
	cudnnTensorDescriptor_t dyd, cudnnTensorDescriptor_t dzd, cudnnTensorDescriptor_t dxd,
	cudnnTensorDescriptor_t bnd, void *act, size_t *size)
{
	struct phos_dnn_bn b = { .kind = PHOS_DNN_BN_BACKWARD };
	cudnnHandle_t h;
	cudnnStatus_t s = bn_begin(handle, mode, ops, &b, &h);

	(void)yd;
	if (!s)
		s = bn_backward_tensors(&b, xd, dyd, dxd, bnd);
	return s ? s : bn_size(h, &b, size);
}

PHOS_EXPORT cudnnStatus_t cudnnGetBatchNormalizationTrainingExReserveSpaceSize(cudnnHandle_t handle, int mode,
									       int ops, void *act,
									       cudnnTensorDescriptor_t xd,
									       size_t *size)
{
	struct phos_dnn_bn b = { .kind = PHOS_DNN_BN_RESERVE };
	cudnnHandle_t h;
	cudnnStatus_t s = bn_begin(handle, mode, ops, &b, &h);

	if (!s)
		s = bn_tensor(xd, &b.x, true);
	return s ? s : bn_size(h, &b, size);
}

/* --- spatial transformers (F.grid_sample, F.affine_grid in PyTorch) ---
 *
 * The descriptor is kept here by value; each call travels with it, its
 * tensors and its pointers (PHOS_OP_DNN_STF), stream-ordered like a batch
 * normalization, and captured into graphs as one. The executor's sets come
 * from the descriptor's output size: theta N x 2 x 3, grid N x H x W x 2. */
#define DNN_STF_MAGIC 0x70685354u

struct cudnnSpatialTransformerStruct {
	uint32_t magic;
	int32_t sampler, type, nb;   /* nb 0: not set */
	int32_t dims[4];
};

static cudnnSpatialTransformerDescriptor_t stf_of(cudnnSpatialTransformerDescriptor_t d)
{
	return d && d->magic == DNN_STF_MAGIC && d->nb ? d : NULL;
}

PHOS_EXPORT cudnnStatus_t cudnnCreateSpatialTransformerDescriptor(cudnnSpatialTransformerDescriptor_t *desc)
{
	return dnn_desc_new(desc, sizeof(**desc), DNN_STF_MAGIC);
}

PHOS_EXPORT cudnnStatus_t cudnnDestroySpatialTransformerDescriptor(cudnnSpatialTransformerDescriptor_t desc)
{
	return desc ? dnn_desc_free(desc, desc->magic == DNN_STF_MAGIC) : PHOS_DNN_BAD_PARAM;
}

PHOS_EXPORT cudnnStatus_t cudnnSetSpatialTransformerNdDescriptor(cudnnSpatialTransformerDescriptor_t desc, int sampler,
								 int type, const int nb, const int dims[])
{
	if (!desc || desc->magic != DNN_STF_MAGIC || !dims)
		return PHOS_DNN_BAD_PARAM;
	if (sampler != PHOS_DNN_SAMPLER_BILINEAR || nb != 4 ||
	    (type != PHOS_DNN_DATA_FLOAT && type != PHOS_DNN_DATA_DOUBLE && type != PHOS_DNN_DATA_HALF))
		return dnn_refuse("a spatial transformer other than bilinear 4-D of float, double or half");
	for (int i = 0; i < 4; i++)
		if (dims[i] < 1)
			return PHOS_DNN_BAD_PARAM;
	desc->sampler = sampler;
	desc->type = type;
	desc->nb = nb;
	memcpy(desc->dims, dims, sizeof(desc->dims));
	return PHOS_DNN_SUCCESS;
}

/* Posts (or captures) a spatial transformer call: the handle, the
 * descriptor and the stream filled in. */
static cudnnStatus_t stf_post(cudnnHandle_t handle, cudnnSpatialTransformerDescriptor_t desc, struct phos_dnn_stf *f)
{
	cudnnHandle_t h = dnn_handle_of(handle);

	if (!h || !stf_of(desc))
		return PHOS_DNN_BAD_PARAM;
	f->handle = h->id;
	f->sampler = desc->sampler;
	f->type = desc->type;
	f->nb = desc->nb;
	memcpy(f->dims, desc->dims, sizeof(f->dims));
	return dnn_post(h, PHOS_OP_DNN_STF, f, sizeof(*f), NULL, 0, offsetof(struct phos_dnn_stf, stream));
}

PHOS_EXPORT cudnnStatus_t cudnnSpatialTfGridGeneratorForward(cudnnHandle_t handle,
							     const cudnnSpatialTransformerDescriptor_t desc,
							     const void *theta, void *grid)
{
	struct phos_dnn_stf f = { .kind = PHOS_DNN_STF_GRID, .theta = U(theta), .grid = U(grid) };

	if (!theta || !grid)
		return PHOS_DNN_BAD_PARAM_NULL_POINTER;
	return stf_post(handle, desc, &f);
}

PHOS_EXPORT cudnnStatus_t cudnnSpatialTfGridGeneratorBackward(cudnnHandle_t handle,
							      const cudnnSpatialTransformerDescriptor_t desc,
							      const void *dgrid, void *dtheta)
{
	struct phos_dnn_stf f = { .kind = PHOS_DNN_STF_GRID_BACKWARD, .dgrid = U(dgrid), .dtheta = U(dtheta) };

	if (!dgrid || !dtheta)
		return PHOS_DNN_BAD_PARAM_NULL_POINTER;
	return stf_post(handle, desc, &f);
}

PHOS_EXPORT cudnnStatus_t cudnnSpatialTfSamplerForward(cudnnHandle_t handle, cudnnSpatialTransformerDescriptor_t desc,
						       const void *alpha, const cudnnTensorDescriptor_t xd, const void *x,
						       const void *grid, const void *beta, cudnnTensorDescriptor_t yd,
						       void *y)
{
	struct phos_dnn_stf f = { .kind = PHOS_DNN_STF_SAMPLE, .px = U(x), .grid = U(grid), .py = U(y) };
	cudnnStatus_t s;

	if (!alpha || !beta || !x || !grid || !y)
		return PHOS_DNN_BAD_PARAM_NULL_POINTER;
	s = bn_tensor(xd, &f.x, true);
	if (!s)
		s = bn_tensor(yd, &f.y, true);
	if (s)
		return s;
	bn_scalar(f.alpha, alpha, f.x.type);
	bn_scalar(f.beta, beta, f.x.type);
	return stf_post(handle, desc, &f);
}

PHOS_EXPORT cudnnStatus_t cudnnSpatialTfSamplerBackward(cudnnHandle_t handle, cudnnSpatialTransformerDescriptor_t desc,
							const void *alpha, const cudnnTensorDescriptor_t xd, const void *x,
							const void *beta, const cudnnTensorDescriptor_t dxd, void *dx,
							const void *alpha_dgrid, const cudnnTensorDescriptor_t dyd,
							const void *dy, const void *grid, const void *beta_dgrid,
							void *dgrid)
{
	struct phos_dnn_stf f = { .kind = PHOS_DNN_STF_SAMPLE_BACKWARD, .px = U(x), .pdx = U(dx), .pdy = U(dy),
				  .grid = U(grid), .dgrid = U(dgrid) };
	cudnnStatus_t s;

	if (!alpha || !beta || !alpha_dgrid || !beta_dgrid || !x || !dx || !dy || !grid || !dgrid)
		return PHOS_DNN_BAD_PARAM_NULL_POINTER;
	s = bn_tensor(xd, &f.x, true);
	if (!s)
		s = bn_tensor(dxd, &f.dx, true);
	if (!s)
		s = bn_tensor(dyd, &f.dy, true);
	if (s)
		return s;
	bn_scalar(f.alpha, alpha, f.x.type);
	bn_scalar(f.beta, beta, f.x.type);
	bn_scalar(f.alpha_dgrid, alpha_dgrid, f.x.type);
	bn_scalar(f.beta_dgrid, beta_dgrid, f.x.type);
	return stf_post(handle, desc, &f);
}

/* Called by every generated stub (stubs_cudnn.c). */
int phos_cudnn_stub(const char *name, int *logged);
int phos_cudnn_stub(const char *name, int *logged)
{
	phos_log_once("cuDNN API", name, logged);
	return PHOS_DNN_NOT_SUPPORTED;
}

__attribute__((constructor)) static void log_init(void)
{
	phos_log_init("phos-preload-cudnn", PHOS_LOG_OFF);
}
