/* SPDX-License-Identifier: MIT */
/*
 * cuSPARSE behind the executor: the device interface's two backends.
 *
 *             ctxpool/calls/exec_sparse.c  (read/write sets, checks)
 *                   │ struct phos_sparse_ops
 *        ┌──────────┴──────────────────────┐
 *   device_cuda_sparse.c               device_sim_sparse.c
 *   the real libcusparse.so.12,        a plain reference on the host, in
 *   dlopen'ed at the first call; one   double: CSR and COO SpMV and SpMM
 *   cuSPARSE handle per device, and    (both dense orders, op(A), op(B)),
 *   descriptors made for each call     SDDMM, sparse to dense, coo2csr,
 *   from its description (SpGEMM: its  csrsort, coosortByRow, identity,
 *   phases run whole each call)        SpGEMM (CSR x CSR)
 *
 * Every call takes a phos_sparse_call whose ranges phos_sparse_ranges_of
 * gave (the executor checked each lies in device memory), returns 0 or a
 * negated cudaError_t, and puts the cusparseStatus_t in *st.
 */
#pragma once

#include <stdint.h>

#include "proto.h"
#include "sparse_abi.h"

struct phos_device;

struct phos_sparse_ops {
	int (*version)(struct phos_device *dev, struct phos_reply_sparse_version *ret, int *st);
	/* The external buffer call c takes (its _bufferSize). */
	int (*buffer_size)(struct phos_device *dev, const struct phos_sparse_call *c, uint64_t *ret, int *st);
	/* Runs c on stream (its external buffer of the size buffer_size gave;
	 * SpGEMM: buffers of the backend's own, C's nnz checked against the
	 * product's). */
	int (*exec)(struct phos_device *dev, const struct phos_sparse_call *c, void *stream, int *st);
	/* SPGEMM_NNZ: the nnz of C = alpha A B, the work done on stream and waited for. */
	int (*spgemm_nnz)(struct phos_device *dev, const struct phos_sparse_call *c, void *stream, uint64_t *ret,
			  int *st);
};

extern const struct phos_sparse_ops phos_sparse_sim;
extern const struct phos_sparse_ops phos_sparse_cuda;

/* The sim's external buffer of every call but coo2csr and the identity (none): bytes it
 * asks for and never touches, so that the sets hold a buffer on sim too. */
#define PHOS_SPARSE_SIM_BUFFER 256u
