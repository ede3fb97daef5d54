/* SPDX-License-Identifier: MIT */
/*
 * Shared by the files of the cuBLAS stand-in (cublas.c: handles and GEMMs,
 * cublas_level.c: level 1-3 routines, cublas_matrix.c: Set/Get helpers). All
 * hidden: only PHOS_EXPORT definitions leave the library.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cublas_api.h>

#define BLAS_UNBOUND UINT32_MAX

struct blas {
	uint32_t id;
	cudaStream_t stream;
	uint32_t sid;            /* the executor stream the handle is bound to (BLAS_UNBOUND: none known) */
	uint32_t epoch;          /* phos_graph_record_epoch when it was bound */
	cublasMath_t math;
	cublasAtomicsMode_t atomics;
	cublasPointerMode_t pointer_mode;
	void *workspace;
	size_t workspace_size;
};

/* The handle behind a cublasHandle_t, or NULL (CUBLAS_STATUS_NOT_INITIALIZED). */
struct blas *blas_get(cublasHandle_t handle);
/* A synchronous call on b's stream: the executor's cuBLAS status when it
 * gave one. On a capturing stream (a result the host reads now cannot be
 * captured): refused, and the capture invalidated, as CUDA does. */
cublasStatus_t blas_call_on(struct blas *b, uint32_t op, const void *body, size_t len, void *out, size_t out_cap,
			    size_t *ret_len);
/* An asynchronous call on b's stream; on a capturing stream it joins the
 * capture (graph_internal.h, GN_RECORD): each launch of the graph posts b's
 * binding to the launch stream, then the call. */
cublasStatus_t blas_post_on(struct blas *b, uint32_t op, const void *body, size_t len);
/* A setting (not stream-ordered): posted at once. */
cublasStatus_t blas_post(uint32_t op, const void *body, size_t len);

/* A host scalar of cudaDataType type (R_32F, R_64F, C_32F, C_64F) widened to re, im. */
void blas_scalar_read(const void *p, int type, double ret[2]);
