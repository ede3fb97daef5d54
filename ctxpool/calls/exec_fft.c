/* SPDX-License-Identifier: MIT */
/*
 * cuFFT records (proto.h, PHOS_OP_FFT_*): plans by the preload's ids, and
 * the read/write set of every execution.
 *
 *   FFT_PLAN      a plan of the backend under the preload's id, made from
 *                 the parameters it sends (again after a restore); a plan
 *                 of that id is replaced
 *   FFT_SIZE      the work area a plan would take, nothing kept
 *   FFT_EXEC      the plan on the record's stream, in the plan's device
 *
 * An execution's set comes from the plan's parameters kept here, never
 * from the function (runtime/libs/fft_layout.c, phos_fft_side_of):
 *
 *   input         the bytes its side spans from the input pointer: read;
 *                 also written by C2R and Z2D, whose input cuFFT may
 *                 overwrite (its documentation says an out-of-place
 *                 complex-to-real transform does)
 *   output        the bytes its side spans from the output pointer: written
 *
 * In place (input == output) the basic layout's real side has padded rows,
 * and both ranges start at the one pointer. Each must lie in device memory
 * the function holds, or the execution fails with CUFFT_INVALID_VALUE. The
 * work area is the backend's own (fft_dev.h), in no set. Every call is
 * synchronous but EXEC (stream-ordered) and DESTROY; the cufftResult comes
 * back in the reply's library status.
 */
#include <stdlib.h>
#include <string.h>

#include "executor.h"
#include "fft_dev.h"
#include "log.h"

struct exec_fft_plan {
	void *dev;                  /* the backend's plan */
	int device;                 /* of the executor's devices, made there */
	struct phos_fft_plan p;
};

static const struct phos_fft_ops *fft(const struct executor *ex)
{
	return strcmp(ex->dev_ops->name, "cuda") == 0 ? &phos_fft_cuda : &phos_fft_sim;
}

/* A failed cuFFT status: the record fails too (a posted record's error then
 * reaches the function at its next synchronising call), and the status goes
 * back in the reply. */
static int fail(int *st, int status)
{
	*st = status;
	if (status)
		phos_debug("cufft: status %d", status);
	return status == PHOS_FFT_SUCCESS ? 0
	       : status == PHOS_FFT_NOT_SUPPORTED ? -PHOS_CUDA_NOT_SUPPORTED
	       : status == PHOS_FFT_ALLOC_FAILED ? -PHOS_CUDA_MEMORY_ALLOCATION
						 : -PHOS_CUDA_INVALID_VALUE;
}

/* A backend's result: its own error, else its status. */
static int result(int r, int *st)
{
	return r < 0 ? r : fail(st, *st);
}

static void drop(struct executor *ex, struct exec_fft_plan *pl)
{
	exec_use_device(ex, pl->device);
	fft(ex)->plan_destroy(ex->dev, pl->dev);
	free(pl);
}

/* Both sides of p can be laid out: a plan cuFFT could make. */
static bool plan_ok(const struct phos_fft_plan *p)
{
	struct phos_fft_side s;
	uint64_t bytes;

	for (int in_place = 0; in_place < 2; in_place++)
		for (int output = 0; output < 2; output++)
			if (!phos_fft_side_of(p, output, in_place, &s, &bytes))
				return false;
	return true;
}

/* The device p names becomes current: false for one the executor lacks. */
static bool on_device(struct executor *ex, const struct phos_fft_plan *p)
{
	if (p->device < 0 || p->device >= ex->ndevs)
		return false;
	exec_use_device(ex, p->device);
	return true;
}

static int plan(struct executor *ex, const struct phos_fft_plan *p, void *out, uint32_t *out_len, int *st)
{
	struct exec_fft_plan *pl, *old;
	uint64_t work = 0;
	int r;

	if (p->id == 0 || p->id >= EXEC_MAX_HANDLES)
		return fail(st, PHOS_FFT_INVALID_PLAN);
	old = handle_take(&ex->fft_plans, p->id);   /* (gone also when the new one fails) */
	if (old)
		drop(ex, old);
	if (!plan_ok(p))
		return fail(st, PHOS_FFT_INVALID_VALUE);
	if (!on_device(ex, p))
		return fail(st, PHOS_FFT_INVALID_DEVICE);
	pl = calloc(1, sizeof(*pl));
	if (!pl)
		return fail(st, PHOS_FFT_ALLOC_FAILED);
	r = result(fft(ex)->plan_make(ex->dev, p, &pl->dev, &work, st), st);
	if (r < 0) {
		free(pl);
		return r;
	}
	pl->device = p->device;
	pl->p = *p;
	if (handle_put(&ex->fft_plans, p->id, pl) < 0) {
		drop(ex, pl);
		return fail(st, PHOS_FFT_ALLOC_FAILED);
	}
	memcpy(out, &work, sizeof(work));
	*out_len = sizeof(work);
	return 0;
}

static int size(struct executor *ex, const struct phos_fft_plan *p, void *out, uint32_t *out_len, int *st)
{
	uint64_t work = 0;

	if (!plan_ok(p))
		return fail(st, PHOS_FFT_INVALID_VALUE);
	if (!on_device(ex, p))
		return fail(st, PHOS_FFT_INVALID_DEVICE);
	TRY(result(fft(ex)->plan_size(ex->dev, p, &work, st), st));
	memcpy(out, &work, sizeof(work));
	*out_len = sizeof(work);
	return 0;
}

/* Adds a side of the execution (output: the output side) to set s. */
static int side_set(struct executor *ex, const struct phos_fft_plan *p, bool output, uint64_t ptr, bool in_place,
		    struct spec_set *s)
{
	struct phos_fft_side side;
	uint64_t bytes;
	uint8_t acc = output ? SPEC_WRITE : phos_fft_real_out(p->type) ? SPEC_READ | SPEC_WRITE : SPEC_READ;

	if (!phos_fft_side_of(p, output, in_place, &side, &bytes))
		return -1;
	if (spec_range(ex, s, ptr, bytes, acc) < 0) {
		phos_warn("cufft: the %s of an execution (%llu bytes at 0x%llx) is not in device memory",
			  output ? "output" : "input", (unsigned long long)bytes, (unsigned long long)ptr);
		return -1;
	}
	return 0;
}

static int exec(struct executor *ex, const struct phos_fft_exec *e, int *st)
{
	struct exec_fft_plan *pl = handle_get(&ex->fft_plans, e->plan);
	int direction = e->direction;
	struct spec_set set;
	void *stream;

	if (!pl)
		return fail(st, PHOS_FFT_INVALID_PLAN);
	if (phos_fft_real_in(pl->p.type) || phos_fft_real_out(pl->p.type))   /* (their own, as cuFFT takes it) */
		direction = phos_fft_real_in(pl->p.type) ? PHOS_FFT_FORWARD : PHOS_FFT_INVERSE;
	if (direction != PHOS_FFT_FORWARD && direction != PHOS_FFT_INVERSE)
		return fail(st, PHOS_FFT_INVALID_VALUE);
	exec_use_device(ex, pl->device);
	spec_clear(&set);
	if (side_set(ex, &pl->p, false, e->in, e->in == e->out, &set) < 0 ||
	    side_set(ex, &pl->p, true, e->out, e->in == e->out, &set) < 0)
		return fail(st, PHOS_FFT_INVALID_VALUE);
	TRY(exec_stream(ex, e->stream, &stream));
	TRY(spec_commit(ex, "fft_exec", NULL, e->stream, &set));
	return result(fft(ex)->exec(ex->dev, pl->dev, &pl->p, stream, e->in, e->out, direction, st), st);
}

int exec_fft_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out, uint32_t *out_len,
		    int *st)
{
	switch (op) {
	case PHOS_OP_FFT_VERSION:
		*out_len = sizeof(struct phos_reply_fft_version);
		return result(fft(ex)->version(ex->dev, out, st), st);
	case PHOS_OP_FFT_PLAN: {
		BODY(struct phos_fft_plan, p);

		return plan(ex, p, out, out_len, st);
	}
	case PHOS_OP_FFT_SIZE: {
		BODY(struct phos_fft_plan, p);

		return size(ex, p, out, out_len, st);
	}
	case PHOS_OP_FFT_DESTROY: {
		BODY(struct phos_handle, c);
		struct exec_fft_plan *pl = handle_take(&ex->fft_plans, c->id);

		if (!pl)
			return fail(st, PHOS_FFT_INVALID_PLAN);
		drop(ex, pl);
		return 0;
	}
	case PHOS_OP_FFT_EXEC: {
		BODY(struct phos_fft_exec, e);

		return exec(ex, e, st);
	}
	default:
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
}

bool exec_fft_in_use(const struct executor *ex)
{
	for (uint32_t id = 0; id < ex->fft_plans.cap; id++)
		if (handle_get(&ex->fft_plans, id))
			return true;
	return false;
}

void exec_fft_clear(struct executor *ex)
{
	for (uint32_t id = 0; id < ex->fft_plans.cap; id++) {
		struct exec_fft_plan *pl = handle_take(&ex->fft_plans, id);

		if (pl)
			drop(ex, pl);
	}
}
