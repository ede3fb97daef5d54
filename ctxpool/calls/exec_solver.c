/* SPDX-License-Identifier: MIT */
/*
 * cuSOLVER dense records (proto.h, PHOS_OP_SOLVER_*): the read/write set of
 * every call, and its checks. The executor keeps nothing of the function's
 * (its handles are the preload's, each call described in full), so nothing
 * is replayed after a restore: the backend's own cusolverDn handle is made
 * at the first call of the new executor, and a checkpoint may stop the
 * program between any two calls.
 *
 *   SOLVER_VERSION  the library's version
 *   SOLVER_SIZE     the workspace a call takes (its _bufferSize), in elements
 *   SOLVER_EXEC     the call on the record's stream, in its device
 *
 * An execution's set (runtime/libs/solver_layout.c, phos_solver_ranges_of):
 * every operand at its exact extent, info's int written, and the
 * workspace, read and written: the lwork elements the program gave, which
 * must be at least what the backend's _bufferSize answers for this very
 * call (asked here again, not taken from the function); getrf takes no
 * size, and its workspace is that answer. The 64-bit API's host workspace
 * is the backend's own, of the size its _bufferSize answers (the
 * program's must be at least that, as cuSOLVER asks). Each range must lie in device
 * memory the function holds, or the call fails with
 * CUSOLVER_STATUS_INVALID_VALUE before anything runs. The
 * cusolverStatus_t comes back in the reply's library status (a posted
 * call's error reaches the function at its next synchronising call).
 */
#include <string.h>

#include "executor.h"
#include "log.h"
#include "solver_dev.h"

static const struct phos_solver_ops *solver(const struct executor *ex)
{
	return strcmp(ex->dev_ops->name, "cuda") == 0 ? &phos_solver_cuda : &phos_solver_sim;
}

static int fail(int *st, int status)
{
	*st = status;
	if (status)
		phos_debug("cusolver: status %d", status);
	return status == PHOS_SOLVER_SUCCESS ? 0
	       : status == PHOS_SOLVER_NOT_SUPPORTED ? -PHOS_CUDA_NOT_SUPPORTED
	       : status == PHOS_SOLVER_ALLOC_FAILED ? -PHOS_CUDA_MEMORY_ALLOCATION
						    : -PHOS_CUDA_INVALID_VALUE;
}

static int result(int r, int *st)
{
	return r < 0 ? r : fail(st, *st);
}

/* The trace's name of a call. */
static const char *what_of(const struct phos_solver_call *c)
{
	static const char *const names[PHOS_SOLVER__KINDS] = {
		[PHOS_SOLVER_GETRF] = "solver_getrf", [PHOS_SOLVER_GETRS] = "solver_getrs",
		[PHOS_SOLVER_POTRF] = "solver_potrf", [PHOS_SOLVER_POTRS] = "solver_potrs",
		[PHOS_SOLVER_GEQRF] = "solver_geqrf", [PHOS_SOLVER_ORGQR] = "solver_orgqr",
		[PHOS_SOLVER_ORMQR] = "solver_ormqr", [PHOS_SOLVER_SYEVD] = "solver_syevd",
		[PHOS_SOLVER_SYEVJ] = "solver_syevj", [PHOS_SOLVER_GESVDJ] = "solver_gesvdj",
		[PHOS_SOLVER_POTRF_BATCHED] = "solver_potrf_batched", [PHOS_SOLVER_POTRS_BATCHED] = "solver_potrs_batched",
	};

	if (c->batch && c->kind == PHOS_SOLVER_SYEVJ)
		return "solver_syevj_batched";
	if (c->batch && c->kind == PHOS_SOLVER_GESVDJ)
		return "solver_gesvdj_batched";
	if (c->batch && c->kind == PHOS_SOLVER_SYEVD)
		return "solver_syev_batched";
	return c->kind < PHOS_SOLVER__KINDS && names[c->kind] ? names[c->kind] : "solver";
}

/* The device c names becomes current, and c is a call the layout accepts,
 * with the workspaces its _bufferSize answers in *ret: 0, or the status. */
static int prepare(struct executor *ex, const struct phos_solver_call *c, struct phos_reply_solver_size *ret, int *st)
{
	struct phos_solver_range r[PHOS_SOLVER_RANGES];
	uint32_t n;
	int s;

	*ret = (struct phos_reply_solver_size){ 0, 0 };
	if (c->device < 0 || c->device >= ex->ndevs)
		return fail(st, PHOS_SOLVER_INVALID_VALUE);
	exec_use_device(ex, c->device);
	s = phos_solver_ranges_of(c, 0, r, &n);
	if (s) {
		phos_debug("cusolver: %s: its arguments are refused (%d)", what_of(c), s);
		return fail(st, s);
	}
	if (!phos_solver_has_work(c->kind))
		return 0;
	TRY(result(solver(ex)->buffer_size(ex->dev, c, ret, st), st));
	if (*st)
		phos_debug("cusolver: %s: the library's workspace query answered %d", what_of(c), *st);
	if (ret->work < 0 || ret->work > (c->x64 ? PHOS_SOLVER_X64_MAX : PHOS_SOLVER_ELEMS_MAX) || ret->host < 0 ||
	    ret->host > PHOS_SOLVER_X64_MAX || (ret->host && !c->x64))
		return fail(st, PHOS_SOLVER_INTERNAL_ERROR);
	return 0;
}

static int size(struct executor *ex, const struct phos_solver_call *c, void *out, uint32_t *out_len, int *st)
{
	struct phos_reply_solver_size need;

	TRY(prepare(ex, c, &need, st));
	memcpy(out, &need, sizeof(need));
	*out_len = sizeof(need);
	return 0;
}

/* The matrices a batched Cholesky's pointer arrays name, into set. */
static int arrays_into(struct executor *ex, const struct phos_solver_call *c, struct spec_set *set, int *st)
{
	const uint64_t arr[2] = { c->a, c->b };
	const uint8_t access[2] = { c->kind == PHOS_SOLVER_POTRF_BATCHED ? SPEC_READ | SPEC_WRITE : SPEC_READ,
				    SPEC_READ | SPEC_WRITE };
	uint64_t span[2];

	if (!phos_solver_array_spans(c, &span[0], &span[1]))
		return fail(st, PHOS_SOLVER_INVALID_VALUE);
	if (exec_arrays_set(ex, c->kind == PHOS_SOLVER_POTRS_BATCHED ? 2 : 1, arr, span, access, (int32_t)c->batch,
			    set) < 0) {
		phos_warn("cusolver: %s: a pointer of its arrays names no device memory the function holds",
			  what_of(c));
		return fail(st, PHOS_SOLVER_INVALID_VALUE);
	}
	return 0;
}

static int exec(struct executor *ex, const struct phos_solver_call *given, int *st)
{
	struct phos_solver_range r[PHOS_SOLVER_RANGES];
	struct phos_solver_call c = *given;
	struct phos_reply_solver_size need;
	struct spec_set set;
	void *stream;
	uint32_t n = 0;
	int s;

	c.query = 0;   /* (an execution touches what it names) */
	TRY(prepare(ex, &c, &need, st));
	if (c.kind == PHOS_SOLVER_GETRF && !c.x64)
		c.lwork = need.work;
	else if (!phos_solver_has_work(c.kind))
		c.lwork = 0;
	if (c.lwork < need.work || (c.x64 && c.host_bytes < need.host)) {
		phos_warn("cusolver: %s: a workspace of %lld (host %lld), %lld (host %lld) needed", what_of(&c),
			  (long long)c.lwork, (long long)c.host_bytes, (long long)need.work, (long long)need.host);
		return fail(st, PHOS_SOLVER_INVALID_VALUE);
	}
	c.host_bytes = need.host;   /* (the program's host buffer is in its own process: the backend's is used) */
	s = phos_solver_ranges_of(&c, c.lwork, r, &n);
	if (s)
		return fail(st, s);
	spec_clear(&set);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t acc = (r[i].read ? SPEC_READ : 0) | (r[i].write ? SPEC_WRITE : 0);

		if (spec_range(ex, &set, r[i].addr, r[i].len, acc) < 0) {
			phos_warn("cusolver: %s: %llu bytes at 0x%llx are not in device memory", what_of(&c),
				  (unsigned long long)r[i].len, (unsigned long long)r[i].addr);
			return fail(st, PHOS_SOLVER_INVALID_VALUE);
		}
	}
	if (c.kind == PHOS_SOLVER_POTRF_BATCHED || c.kind == PHOS_SOLVER_POTRS_BATCHED)
		TRY(arrays_into(ex, &c, &set, st));
	TRY(exec_stream(ex, c.stream, &stream));
	TRY(spec_commit(ex, what_of(&c), NULL, c.stream, &set));
	return result(solver(ex)->exec(ex->dev, &c, stream, st), st);
}

int exec_solver_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out,
		       uint32_t *out_len, int *st)
{
	switch (op) {
	case PHOS_OP_SOLVER_VERSION:
		*out_len = sizeof(struct phos_reply_solver_version);
		return result(solver(ex)->version(ex->dev, out, st), st);
	case PHOS_OP_SOLVER_SIZE: {
		BODY(struct phos_solver_call, c);

		return size(ex, c, out, out_len, st);
	}
	case PHOS_OP_SOLVER_EXEC: {
		BODY(struct phos_solver_call, c);

		return exec(ex, c, st);
	}
	default:
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
}
