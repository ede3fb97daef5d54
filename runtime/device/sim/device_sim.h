/* SPDX-License-Identifier: MIT */
/*
 * Internals of the sim backend, shared by device_sim.c (memory, streams,
 * events, modules, twins) and device_sim_blas.c (the host cuBLAS reference).
 * The executor sees only phos_device_sim (device.h).
 *
 * Handles: every object sim hands out starts with struct phos_sim_obj and is
 * linked into its device's object list. A handle is accepted only while it is
 * in that list with the expected magic, so a stale or foreign pointer is
 * refused without being dereferenced (O(objects) per lookup: a function holds
 * a few streams, events and handles, not thousands).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "cudnn_abi.h"
#include "device.h"

enum phos_sim_magic {
	PHOS_SIM_STREAM = 0x5354524du,   /* "STRM" */
	PHOS_SIM_EVENT = 0x45564e54u,    /* "EVNT" */
	PHOS_SIM_MODULE = 0x4d4f444cu,   /* "MODL" */
	PHOS_SIM_FUNC = 0x46554e43u,     /* "FUNC" */
	PHOS_SIM_BLAS = 0x424c4153u,     /* "BLAS" */
	PHOS_SIM_ARRAY = 0x41525259u,    /* "ARRY" */
};

struct phos_sim_obj {
	uint32_t magic;                          /* enum phos_sim_magic */
	struct phos_sim_obj *prev, *next;
	void (*release)(struct phos_sim_obj *o); /* frees what the object owns; may be NULL */
};

/* The core (device_sim_core.c, below every other file of the backend). */

/* A zeroed object of size bytes (>= sizeof(struct phos_sim_obj)) linked into dev,
 * or NULL when out of memory. */
void *phos_sim_obj_new(struct phos_device *dev, uint32_t magic, size_t size);
/* Unlinks obj (a live object of dev), calls its release and frees it. */
void phos_sim_obj_free(struct phos_device *dev, void *obj);
/* obj when it is a live object of dev with that magic, else NULL. */
void *phos_sim_obj_get(struct phos_device *dev, const void *obj, uint32_t magic);

/* 0 when stream is NULL (the default stream) or a live stream of dev, else
 * -PHOS_CUDA_INVALID_RESOURCE_HANDLE. */
int phos_sim_stream_check(struct phos_device *dev, const void *stream);

/* Whether [addr, addr+len) is memory sim may touch: mapped chunks of the arena
 * or allocated module-variable storage. An empty range is always accepted. */
bool phos_sim_range_ok(struct phos_device *dev, uint64_t addr, uint64_t len);

/* CUDA arrays, texture and surface objects (device_sim_tex.c). */
int phos_sim_array_create(struct phos_device *dev, const struct phos_array_create *d, void **ret_array);
int phos_sim_array_destroy(struct phos_device *dev, void *array);
int phos_sim_array_copy(struct phos_device *dev, const struct phos_copy_side *dst, const struct phos_copy_side *src,
			uint64_t width, uint64_t height, uint64_t depth, void *stream);
int phos_sim_tex_create(struct phos_device *dev, const struct phos_tex_create *d, void *array, uint64_t *ret_handle);
int phos_sim_tex_destroy(struct phos_device *dev, uint64_t handle, bool surface);
/* The object of a texture or surface handle for twins (sim_tex.h), or NULL. */
struct phos_sim_tex;
const struct phos_sim_tex *phos_sim_tex_lookup(uint64_t handle);
/* Frees every texture and surface object (the device closes). */
void phos_sim_tex_clear(void);

/* CUDA graphs (device_sim_graph.c), and cudaGraphSetConditional for twins
 * (bound into every twin plugin that asks: sim_twin.h). */
int phos_sim_graph_make(struct phos_device *dev, const struct phos_dev_graph *d, void **ret_graph);
/* Runs graph on stream through ops (the sim's own table, phos_device_sim,
 * passed by device_sim.c so that the graph file does not name it). */
int phos_sim_graph_launch(const struct phos_device_ops *ops, struct phos_device *dev, void *graph, void *stream);
void phos_sim_graph_destroy(struct phos_device *dev, void *graph);
void phos_sim_cond_set(uint64_t handle, unsigned value);

/* The cuBLAS members of phos_device_sim (device_sim_blas.c). */
int phos_sim_blas_create(struct phos_device *dev, void **ret_handle);
int phos_sim_blas_destroy(struct phos_device *dev, void *handle);
int phos_sim_blas_set_stream(struct phos_device *dev, void *handle, void *stream);
int phos_sim_blas_set_math(struct phos_device *dev, void *handle, int mode);
int phos_sim_blas_set_workspace(struct phos_device *dev, void *handle, uint64_t addr, uint64_t size);
int phos_sim_blas_gemm(struct phos_device *dev, void *handle, const struct phos_blas_gemm *g,
		       int *ret_blas_status);
int phos_sim_blas_l1(struct phos_device *dev, void *handle, const struct phos_blas_l1 *op,
		     float *ret_result, int *ret_blas_status);
int phos_sim_blas_gemv(struct phos_device *dev, void *handle, const struct phos_blas_gemv *op,
		       int *ret_blas_status);
/* Element i of an array of real cudaDataType type (R_32F, R_64F, R_16F,
 * R_16BF) as a double, and the other way (rounded to nearest even). */
double phos_sim_elem_get(const void *base, int type, int64_t i);
void phos_sim_elem_put(void *base, int type, int64_t i, double v);
/* cuDNN's data type as the type phos_sim_elem_get takes (a cudaDataType), or
 * -1. Here, not in device_sim_dnn.c: its RNN and CTC files use it too, and
 * device_sim_dnn.c calls them (no circle). */
static inline int phos_sim_dnn_elem_type(int dnn_type)
{
	switch (dnn_type) {
	case PHOS_DNN_DATA_FLOAT: return 0;
	case PHOS_DNN_DATA_DOUBLE: return 1;
	case PHOS_DNN_DATA_HALF: return 2;
	case PHOS_DNN_DATA_BFLOAT16: return 14;
	default: return -1;
	}
}
/* RNNs (device_sim_rnn.c): phos_dnn_ops.rnn. */
int phos_sim_dnn_rnn(struct phos_device *dev, void *h, void *stream, const struct phos_dnn_rnn *r,
		     const int32_t *seq, struct phos_reply_dnn_rnn *ret, int *st);
/* CTC losses (device_sim_ctc.c): phos_dnn_ops.ctc. */
int phos_sim_dnn_ctc(struct phos_device *dev, void *h, void *stream, const struct phos_dnn_ctc *c,
		     const int32_t *arrays, uint64_t *size, int *st);
/* cuBLASLt (device_sim_blaslt.c). */
int phos_sim_blaslt_matmul(struct phos_device *dev, void *stream, const struct phos_blaslt_matmul *m,
			   int *ret_blas_status);
int phos_sim_blaslt_heuristic(struct phos_device *dev, const struct phos_blaslt_heuristic *h,
			      struct phos_blaslt_result *ret, int *ret_count, int *ret_blas_status);
/* device_sim_blas_ref.c: the level 1-3 routines of every precision, and GEMMs
 * of double and complex types (called by phos_sim_blas_gemm, handle checked). */
int phos_sim_blas_call(struct phos_device *dev, void *handle, const struct phos_blas_op *op, void *ret_result,
		       int *ret_blas_status);
int phos_sim_blas_lu(struct phos_device *dev, void *handle, const struct phos_blas_lu *op, int *ret_blas_status);
int phos_sim_blas_gemm_wide(struct phos_device *dev, const struct phos_blas_gemm *g, int *ret_blas_status);
