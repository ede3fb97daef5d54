/* SPDX-License-Identifier: MIT */
/*
 * cuRAND records (proto.h, PHOS_OP_RAND_*): generators by the preload's
 * ids, the write set of every generate call, and the replay that makes a
 * generator again after a restore.
 *
 *   RAND_CREATE    a generator of the backend under the preload's id (a
 *                  generator of that id is replaced)
 *   RAND_SET       its seed, offset or ordering
 *   RAND_GENERATE  one call on the record's stream: its set is the n
 *                  elements it writes at out, nothing read (the state is
 *                  the executor's, in no set)
 *   RAND_REPLAY    count calls of n elements into the executor's scratch,
 *                  then the device synchronized and the scratch freed: the
 *                  generator's state moves as the program's calls moved it
 *
 * Why replay rather than an offset: cuRAND documents curandSetGeneratorOffset
 * as an absolute position, but not that a call of n numbers moves the
 * position by n for every type, ordering and distribution (the normal and
 * Poisson calls, MTGP32's blocks, the orderings that spread a call over
 * threads). Making the same calls again on the same library gives the same
 * state by construction; the preload keeps them (preload/curand.c), a run
 * of equal calls as one entry.
 *
 * Every call is synchronous but GENERATE (stream-ordered) and DESTROY; the
 * curandStatus_t comes back in the reply's library status.
 */
#include <stdlib.h>
#include <string.h>

#include "executor.h"
#include "log.h"
#include "rand_dev.h"

struct exec_rand_gen {
	void *dev;                  /* the backend's generator */
	int device;                 /* of the executor's devices, made there */
};

static const struct phos_rand_ops *rnd(const struct executor *ex)
{
	return strcmp(ex->dev_ops->name, "cuda") == 0 ? &phos_rand_cuda : &phos_rand_sim;
}

/* A failed cuRAND status: the record fails too (a posted record's error
 * then reaches the function at its next synchronising call), and the status
 * goes back in the reply. */
static int fail(int *st, int status)
{
	*st = status;
	if (status)
		phos_debug("curand: status %d", status);
	return status == PHOS_RAND_SUCCESS ? 0
	       : status == PHOS_RAND_ALLOCATION_FAILED ? -PHOS_CUDA_MEMORY_ALLOCATION
	       : status == PHOS_RAND_LAUNCH_FAILURE ? -PHOS_CUDA_LAUNCH_FAILURE
						    : -PHOS_CUDA_INVALID_VALUE;
}

static int result(int r, int *st)
{
	return r < 0 ? r : fail(st, *st);
}

static void drop(struct executor *ex, struct exec_rand_gen *g)
{
	exec_use_device(ex, g->device);
	rnd(ex)->destroy(ex->dev, g->dev);
	free(g);
}

static int create(struct executor *ex, const struct phos_rand_create *c, int *st)
{
	struct exec_rand_gen *g, *old;
	int r;

	if (c->id == 0 || c->id >= EXEC_MAX_HANDLES)
		return fail(st, PHOS_RAND_NOT_INITIALIZED);
	old = handle_take(&ex->rand_gens, c->id);   /* (gone also when the new one fails) */
	if (old)
		drop(ex, old);
	if (!phos_rand_pseudo(c->type))
		return fail(st, PHOS_RAND_TYPE_ERROR);
	if (c->device < 0 || c->device >= ex->ndevs)
		return fail(st, PHOS_RAND_INITIALIZATION_FAILED);
	exec_use_device(ex, c->device);
	g = calloc(1, sizeof(*g));
	if (!g)
		return fail(st, PHOS_RAND_ALLOCATION_FAILED);
	r = result(rnd(ex)->create(ex->dev, c->type, &g->dev, st), st);
	if (r < 0) {
		free(g);
		return r;
	}
	g->device = c->device;
	if (handle_put(&ex->rand_gens, c->id, g) < 0) {
		drop(ex, g);
		return fail(st, PHOS_RAND_ALLOCATION_FAILED);
	}
	return 0;
}

/* The generator of id, its device current; NULL (and *st) when none. */
static struct exec_rand_gen *gen_of(struct executor *ex, uint32_t id)
{
	struct exec_rand_gen *g = handle_get(&ex->rand_gens, id);

	if (g)
		exec_use_device(ex, g->device);
	return g;
}

/* A call the preload checked, checked again: its kind, n, parameters; the
 * bytes it writes in *ret_bytes. */
static bool call_ok(const struct phos_rand_generate *g, uint64_t *ret_bytes)
{
	uint32_t esize = phos_rand_esize((int)g->gen);

	if (!esize || g->n == 0 || g->n > PHOS_RAND_ELEMS_MAX || (phos_rand_pairs((int)g->gen) && g->n % 2))
		return false;
	if (g->gen == PHOS_RAND_GEN_POISSON && !(g->a > 0 && g->a <= 400000))
		return false;
	*ret_bytes = g->n * esize;
	return true;
}

static int generate(struct executor *ex, const struct phos_rand_generate *c, int *st)
{
	struct exec_rand_gen *g = gen_of(ex, c->id);
	struct spec_set set;
	uint64_t bytes;
	void *stream;

	if (!g)
		return fail(st, PHOS_RAND_NOT_INITIALIZED);
	if (!call_ok(c, &bytes))
		return fail(st, PHOS_RAND_OUT_OF_RANGE);
	spec_clear(&set);
	if (spec_range(ex, &set, c->out, bytes, SPEC_WRITE) < 0) {
		phos_warn("curand: the output of a generate call (%llu bytes at 0x%llx) is not in device memory",
			  (unsigned long long)bytes, (unsigned long long)c->out);
		return fail(st, PHOS_RAND_LAUNCH_FAILURE);
	}
	TRY(exec_stream(ex, c->stream, &stream));
	TRY(spec_commit(ex, "rand_generate", NULL, c->stream, &set));
	return result(rnd(ex)->generate(ex->dev, g->dev, stream, c, c->out, st), st);
}

/* count calls into scratch of one call's size, on the default stream, the
 * device synchronized before the scratch goes. */
static int replay(struct executor *ex, const struct phos_rand_generate *c, int *st)
{
	struct exec_rand_gen *g = gen_of(ex, c->id);
	uint64_t bytes, scratch = 0;
	int r = 0;

	if (!g)
		return fail(st, PHOS_RAND_NOT_INITIALIZED);
	if (!call_ok(c, &bytes) || c->count == 0)
		return fail(st, PHOS_RAND_OUT_OF_RANGE);
	if (ex->dev_ops->scratch_alloc(ex->dev, bytes, &scratch) < 0)
		return fail(st, PHOS_RAND_ALLOCATION_FAILED);
	*st = 0;
	for (uint64_t i = 0; i < c->count && r == 0 && *st == 0; i++)
		r = rnd(ex)->generate(ex->dev, g->dev, NULL, c, scratch, st);
	if (ex->dev_ops->synchronize(ex->dev) < 0 && r == 0)
		r = -PHOS_CUDA_LAUNCH_FAILURE;
	ex->dev_ops->scratch_free(ex->dev, scratch);
	return result(r, st);
}

int exec_rand_handle(struct executor *ex, uint32_t op, const void *body, uint32_t len, void *out, uint32_t *out_len,
		     int *st)
{
	switch (op) {
	case PHOS_OP_RAND_VERSION:
		*out_len = sizeof(struct phos_reply_rand_version);
		return result(rnd(ex)->version(ex->dev, out, st), st);
	case PHOS_OP_RAND_CREATE: {
		BODY(struct phos_rand_create, c);

		return create(ex, c, st);
	}
	case PHOS_OP_RAND_SET: {
		BODY(struct phos_rand_set, s);
		struct exec_rand_gen *g = gen_of(ex, s->id);

		if (!g)
			return fail(st, PHOS_RAND_NOT_INITIALIZED);
		return result(rnd(ex)->set(ex->dev, g->dev, s->what, s->value, st), st);
	}
	case PHOS_OP_RAND_DESTROY: {
		BODY(struct phos_handle, c);
		struct exec_rand_gen *g = handle_take(&ex->rand_gens, c->id);

		if (!g)
			return fail(st, PHOS_RAND_NOT_INITIALIZED);
		drop(ex, g);
		return 0;
	}
	case PHOS_OP_RAND_GENERATE: {
		BODY(struct phos_rand_generate, g);

		return generate(ex, g, st);
	}
	case PHOS_OP_RAND_REPLAY: {
		BODY(struct phos_rand_generate, g);

		return replay(ex, g, st);
	}
	default:
		return -PHOS_CUDA_NOT_SUPPORTED;
	}
}

bool exec_rand_in_use(const struct executor *ex)
{
	for (uint32_t id = 0; id < ex->rand_gens.cap; id++)
		if (handle_get(&ex->rand_gens, id))
			return true;
	return false;
}

void exec_rand_clear(struct executor *ex)
{
	for (uint32_t id = 0; id < ex->rand_gens.cap; id++) {
		struct exec_rand_gen *g = handle_take(&ex->rand_gens, id);

		if (g)
			drop(ex, g);
	}
}
