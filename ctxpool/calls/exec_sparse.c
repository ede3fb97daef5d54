/* SPDX-License-Identifier: MIT */
/*
 * cuSPARSE records (proto.h, PHOS_OP_SPARSE_*): the read/write set of
 * every call, and its checks. The executor keeps nothing of the function's
 * (its handles and descriptors are the preload's, described in full in
 * each call), so nothing is made again after a restore and a checkpoint
 * may stop the program between any two calls.
 *
 *   SPARSE_VERSION  the library's version
 *   SPARSE_SIZE     the external buffer a call takes (its _bufferSize); for
 *                   SpGEMM's structure, C's nnz (computed on the call's
 *                   stream, A and B its read set)
 *   SPARSE_EXEC     the call on the record's stream, in its device
 *
 * An execution's set (runtime/libs/sparse_layout.c, phos_sparse_ranges_of):
 * every array of its operands at its exact extent, alpha and beta in
 * device pointer mode, and the external buffer, read and written, of the
 * size the backend's _bufferSize answers for this very call (asked here
 * again, not taken from the function). Each range must lie in device
 * memory the function holds, or the call fails with
 * CUSPARSE_STATUS_INVALID_VALUE. The cusparseStatus_t comes back in the
 * reply's library status (a posted call's error reaches the function at
 * its next synchronising call).
 */
#include <string.h>

#include "executor.h"
#include "log.h"
#include "sparse_dev.h"

static const struct phos_sparse_ops *sparse(const struct executor *ex)
{
	return strcmp(ex->dev_ops->name, "cuda") == 0 ? &phos_sparse_cuda : &phos_sparse_sim;
}

static int fail(int *st, int status)
{
	*st = status;
	if (status)
		phos_debug("cusparse: status %d", status);
	return status == PHOS_SPARSE_SUCCESS ? 0
	       : status == PHOS_SPARSE_NOT_SUPPORTED ? -PHOS_CUDA_NOT_SUPPORTED
	       : status == PHOS_SPARSE_ALLOC_FAILED ? -PHOS_CUDA_MEMORY_ALLOCATION
						    : -PHOS_CUDA_INVALID_VALUE;
}

static int result(int r, int *st)
{
	return r < 0 ? r : fail(st, *st);
}

/* The trace's name of a call. */
static const char *what_of(const struct phos_sparse_call *c)
{
	switch (c->kind) {
	case PHOS_SPARSE_SPMV: return "sparse_spmv";
	case PHOS_SPARSE_SPMM: return c->preprocess ? "sparse_spmm_preprocess" : "sparse_spmm";
	case PHOS_SPARSE_SDDMM: return c->preprocess ? "sparse_sddmm_preprocess" : "sparse_sddmm";
	case PHOS_SPARSE_TO_DENSE: return "sparse_to_dense";
	case PHOS_SPARSE_CSRSORT: return "sparse_csrsort";
	case PHOS_SPARSE_COOSORT: return "sparse_coosort";
	case PHOS_SPARSE_IDENTITY: return "sparse_identity";
	case PHOS_SPARSE_SPGEMM_NNZ: return "sparse_spgemm_nnz";
	case PHOS_SPARSE_SPGEMM: return "sparse_spgemm";
	default: return "sparse_coo2csr";
	}
}

/* The device c names becomes current, and c is a call the layout accepts:
 * 0, or the status. */
static int prepare(struct executor *ex, const struct phos_sparse_call *c)
{
	struct phos_sparse_range r[PHOS_SPARSE_RANGES];
	uint32_t n;
	int s;

	if (c->device < 0 || c->device >= ex->ndevs)
		return PHOS_SPARSE_INVALID_VALUE;
	exec_use_device(ex, c->device);
	s = phos_sparse_ranges_of(c, 0, r, &n);
	return s;
}

/* The set of c (its buffer of bytes included), checked against device
 * memory, committed on c's stream (*ret_stream): 0, or the error. */
static int commit(struct executor *ex, const struct phos_sparse_call *c, uint64_t bytes, void **ret_stream, int *st)
{
	struct phos_sparse_range r[PHOS_SPARSE_RANGES];
	struct spec_set set;
	uint32_t n = 0;
	int s = phos_sparse_ranges_of(c, bytes, r, &n);

	if (s)
		return fail(st, s);
	spec_clear(&set);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t acc = (r[i].read ? SPEC_READ : 0) | (r[i].write ? SPEC_WRITE : 0);

		if (spec_range(ex, &set, r[i].addr, r[i].len, acc) < 0) {
			phos_warn("cusparse: %s: %llu bytes at 0x%llx are not in device memory", what_of(c),
				  (unsigned long long)r[i].len, (unsigned long long)r[i].addr);
			return fail(st, PHOS_SPARSE_INVALID_VALUE);
		}
	}
	TRY(exec_stream(ex, c->stream, ret_stream));
	return spec_commit(ex, what_of(c), NULL, c->stream, &set);
}

static int size(struct executor *ex, const struct phos_sparse_call *c, void *out, uint32_t *out_len, int *st)
{
	uint64_t bytes = 0;
	void *stream;
	int s = prepare(ex, c);

	if (s)
		return fail(st, s);
	if (c->kind == PHOS_SPARSE_SPGEMM_NNZ) {
		/* (reads A and B on the device: a set like any call's) */
		TRY(commit(ex, c, 0, &stream, st));
		TRY(result(sparse(ex)->spgemm_nnz(ex->dev, c, stream, &bytes, st), st));
	} else if (phos_sparse_has_buffer(c->kind)) {
		TRY(result(sparse(ex)->buffer_size(ex->dev, c, &bytes, st), st));
	}
	memcpy(out, &bytes, sizeof(bytes));
	*out_len = sizeof(bytes);
	return 0;
}

static int exec(struct executor *ex, const struct phos_sparse_call *c, int *st)
{
	uint64_t bytes = 0;
	void *stream;
	int s = prepare(ex, c);

	if (s)
		return fail(st, s);
	if (c->kind == PHOS_SPARSE_SPGEMM_NNZ)
		return fail(st, PHOS_SPARSE_INVALID_VALUE);   /* (a size's question only) */
	if (phos_sparse_has_buffer(c->kind))
		TRY(result(sparse(ex)->buffer_size(ex->dev, c, &bytes, st), st));
	TRY(commit(ex, c, bytes, &stream, st));
	return result(sparse(ex)->exec(ex->dev, c, stream, st), st);
}

int exec_sparse_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		       uint32_t *out_len, int *st)
{
	switch (op) {
	case PHOS_OP_SPARSE_VERSION:
		*out_len = sizeof(struct phos_reply_sparse_version);
		return result(sparse(ex)->version(ex->dev, out, st), st);
	case PHOS_OP_SPARSE_SIZE: {
		BODY(struct phos_sparse_call, c);

		return size(ex, c, out, out_len, st);
	}
	case PHOS_OP_SPARSE_EXEC: {
		BODY(struct phos_sparse_call, c);

		return exec(ex, c, st);
	}
	default:
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
}
