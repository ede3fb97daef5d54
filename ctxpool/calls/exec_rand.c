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
 *   RAND_REPLAY    steps of the generator's history: settings, calls into
 *                  the executor's scratch, and repeats of the last steps
 *                  (a loop of calls); then the device synchronized and the
 *                  scratch freed: the generator's state moves as the
 *                  program's calls moved it
 *
 * Why replay rather than an offset: cuRAND documents curandSetGeneratorOffset
 * as an absolute position, but not that a call of n numbers moves the
 * position by n for every type, ordering and distribution (the normal and
 * Poisson calls, MTGP32's blocks, the orderings that spread a call over
 * threads). Making the same calls again on the same library gives the same
 * state by construction; the preload keeps them (preload/mathlibs/curand.c), a loop
 * of calls as one block and a count.
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
	/* replaying: the last settings and calls made again, oldest first (the
	 * block a repeat step makes again) */
	struct phos_rand_step recent[PHOS_RAND_REPEAT_MAX];
	uint32_t nrecent;
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
						       : -PHOS_CUDA_INVALID_VALUE;   /* (not a sticky launch failure) */
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

	/* an odd n of a Box-Muller kind is the device's to refuse (preload/mathlibs/curand.c) */
	if (!esize || g->n == 0 || g->n > PHOS_RAND_ELEMS_MAX)
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

/* One setting or call of a replay, a call into scratch (of scratch_bytes). */
static int replay_one(struct executor *ex, struct exec_rand_gen *g, const struct phos_rand_step *s, uint64_t scratch,
		      uint64_t scratch_bytes, int *st)
{
	struct phos_rand_generate c = { .gen = s->what, .n = s->value, .a = s->a, .b = s->b };
	uint64_t bytes;

	if (s->kind == PHOS_RAND_STEP_SET)
		return result(rnd(ex)->set(ex->dev, g->dev, s->what, s->value, st), st);
	if (s->kind != PHOS_RAND_STEP_GEN || !call_ok(&c, &bytes) || bytes > scratch_bytes)
		return fail(st, PHOS_RAND_OUT_OF_RANGE);
	return result(rnd(ex)->generate(ex->dev, g->dev, NULL, &c, scratch, st), st);
}

/* The steps of a replay record (and the recent ones a repeat may make
 * again) are well formed: a repeat's block within the steps before it; the
 * largest call's bytes in *ret_bytes. */
static bool steps_ok(const struct exec_rand_gen *g, const struct phos_rand_step *steps, uint32_t n, uint64_t *ret_bytes)
{
	uint64_t most = 0, bytes;
	uint32_t plain = g->nrecent;

	for (uint32_t i = 0; i < g->nrecent; i++) {
		struct phos_rand_generate c = { .gen = g->recent[i].what, .n = g->recent[i].value, .a = g->recent[i].a };

		if (g->recent[i].kind == PHOS_RAND_STEP_GEN && call_ok(&c, &bytes) && bytes > most)
			most = bytes;
	}
	for (uint32_t i = 0; i < n; i++) {
		const struct phos_rand_step *s = &steps[i];
		struct phos_rand_generate c = { .gen = s->what, .n = s->value, .a = s->a };

		if (s->kind == PHOS_RAND_STEP_REPEAT) {
			if (s->what < 1 || s->what > PHOS_RAND_REPEAT_MAX || s->what > plain)
				return false;
			continue;
		}
		if (s->kind == PHOS_RAND_STEP_GEN) {
			if (!call_ok(&c, &bytes))
				return false;
			most = bytes > most ? bytes : most;
		} else if (s->kind != PHOS_RAND_STEP_SET) {
			return false;
		}
		plain = plain < PHOS_RAND_REPEAT_MAX ? plain + 1 : plain;
	}
	*ret_bytes = most;
	return true;
}

static void recent_push(struct exec_rand_gen *g, const struct phos_rand_step *s)
{
	if (g->nrecent == PHOS_RAND_REPEAT_MAX)
		memmove(g->recent, g->recent + 1, (PHOS_RAND_REPEAT_MAX - 1) * sizeof(g->recent[0]));
	else
		g->nrecent++;
	g->recent[g->nrecent - 1] = *s;
}

/* Replays steps on generator id (made again just before, or being made),
 * on the default stream, into scratch of the largest call's size; the
 * device synchronized before the scratch goes. */
static int replay(struct executor *ex, const struct phos_rand_replay *h, uint32_t len, int *st)
{
	const struct phos_rand_step *steps = (const struct phos_rand_step *)(h + 1);
	struct exec_rand_gen *g = gen_of(ex, h->id);
	uint64_t bytes = 0, scratch = 0;
	int r = 0;

	if (!g)
		return fail(st, PHOS_RAND_NOT_INITIALIZED);
	if (h->nsteps < 1 || h->nsteps > PHOS_RAND_REPLAY_STEPS ||
	    len < sizeof(*h) + (uint64_t)h->nsteps * sizeof(*steps) || !steps_ok(g, steps, h->nsteps, &bytes))
		return fail(st, PHOS_RAND_OUT_OF_RANGE);
	if (bytes && ex->dev_ops->scratch_alloc(ex->dev, bytes, &scratch) < 0)
		return fail(st, PHOS_RAND_ALLOCATION_FAILED);
	*st = 0;
	for (uint32_t i = 0; i < h->nsteps && r == 0; i++) {
		const struct phos_rand_step *s = &steps[i];

		if (s->kind != PHOS_RAND_STEP_REPEAT) {
			r = replay_one(ex, g, s, scratch, bytes, st);
			recent_push(g, s);
			continue;
		}
		struct phos_rand_step block[PHOS_RAND_REPEAT_MAX];
		uint32_t n = s->what;

		memcpy(block, g->recent + g->nrecent - n, n * sizeof(block[0]));
		for (uint64_t t = 0; t < s->value && r == 0; t++)
			for (uint32_t k = 0; k < n && r == 0; k++)
				r = replay_one(ex, g, &block[k], scratch, bytes, st);
	}
	if (ex->dev_ops->synchronize(ex->dev) < 0 && r == 0)
		r = -PHOS_CUDA_LAUNCH_FAILURE;
	ex->dev_ops->scratch_free(ex->dev, scratch);
	return r;
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
		BODY(struct phos_rand_replay, h);

		return replay(ex, h, len, st);
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
