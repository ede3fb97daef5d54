/* SPDX-License-Identifier: MIT */
/*
 * The cuRAND stand-in (libcurand.so.10): device generators made by the
 * executor with the real cuRAND (the sim device's reference in CI), every
 * generate call forwarded.
 *
 *   curandCreateGenerator ──────── sync RAND_CREATE: the executor makes the
 *                                  generator under our id (the handle)
 *   curandSetPseudoRandom-     ── sync RAND_SET, and kept in the
 *   GeneratorSeed, SetGenerator-     generator's history
 *   Offset, SetGeneratorOrdering
 *   curandGenerate, Generate-  ── RAND_GENERATE, stream-ordered on the
 *   Uniform/Normal/LogNormal         generator's stream: the executor's set
 *   (Double), GeneratePoisson        is the n elements written; kept in the
 *                                    history
 *   curandSetStream ─────────────── kept here, sent with each call
 *   curandGetVersion/Property ───── the executor's library's
 *
 * After a restore (a new executor, at phos_fn_serve or from a checkpoint) a
 * generator is made again at its first use by replaying its history: the
 * create, then each setting and call again (RAND_REPLAY, the calls into the
 * executor's scratch), so that its next numbers are those an uninterrupted
 * run gives, whatever cuRAND's offset does per type and ordering
 * (ctxpool/calls/exec_rand.c says why). The history is kept short where the
 * program loops: when its last L steps (L <= PHOS_RAND_REPEAT_MAX) equal
 * the L before, they become a repeat step of that block, whose count the
 * next L equal steps raise (a run of equal calls is L = 1; a loop of a
 * uniform and a normal call, L = 2). A history longer than RAND_HISTORY_MAX
 * steps is dropped, and the generator then cannot be made again: after a
 * restore it answers CURAND_STATUS_PREEXISTING_FAILURE, said on stderr. Every
 * call that names the executor's generators runs inside a fenced section of
 * the channel (rand_enter), as cuFFT's (cufft.c).
 *
 * Refused with CURAND_STATUS_TYPE_ERROR and one stderr line: quasirandom
 * generators (Sobol), host generators (curandCreateGeneratorHost: the real
 * library carries its own CUDA runtime, which must not run in the function
 * process), generate calls into memory other than cudaMalloc's or on a
 * capturing stream; every export not implemented here answers it too, named
 * once in the log (stubs_curand.c). A generate call's output must be aligned
 * to its element (4 or 8 bytes), else CURAND_STATUS_OUT_OF_RANGE.
 */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <curand.h>

#include "internal.h"
#include "log.h"

#define RAND_HISTORY_MAX 65536   /* steps a generator keeps to be made again */

struct rand_gen {
	uint32_t id;                /* the curandGenerator_t */
	int type, device;
	bool made;                  /* made in the executor of epoch */
	bool lost;                  /* the history was dropped: cannot be made again */
	uint32_t epoch;
	void *stream;
	struct phos_rand_step *hist;   /* proto.h's steps, oldest first */
	size_t nhist, cap;
	/* open: hist[rep] is a repeat the steps after it (match of them so far)
	 * follow the block of */
	bool open;
	size_t rep, match;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;   /* guards every generator */
static uint32_t epoch = 1;   /* bumped by each restore */
static uint32_t adoptions_seen;

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

/* Under the lock and inside a fenced section of the channel; a restore of a
 * checkpoint (a new adoption of the channel) makes every generator stale. */
static void rand_enter(void)
{
	int64_t now = phos_preload_section_enter();

	pthread_mutex_lock(&lock);
	if (now >= 0 && (uint32_t)now != adoptions_seen) {
		adoptions_seen = (uint32_t)now;
		epoch++;
	}
}

static void rand_leave(void)
{
	pthread_mutex_unlock(&lock);
	phos_preload_section_leave();
}

/* TYPE_ERROR, said once per reason on stderr. */
static curandStatus_t refuse(const char *what)
{
	phos_refuse_once("cuRAND", what, ": CURAND_STATUS_TYPE_ERROR");
	return CURAND_STATUS_TYPE_ERROR;
}

/* A call's result: the library status when the executor gave one, else the
 * CUDA error's nearest status. */
static curandStatus_t status_of(int r, int st)
{
	if (st)
		return (curandStatus_t)st;
	switch (r) {
	case cudaSuccess: return CURAND_STATUS_SUCCESS;
	case cudaErrorMemoryAllocation: return CURAND_STATUS_ALLOCATION_FAILED;
	case cudaErrorInitializationError: case cudaErrorDevicesUnavailable: case cudaErrorNoDevice:
		return CURAND_STATUS_INITIALIZATION_FAILED;
	case cudaErrorInvalidValue: return CURAND_STATUS_OUT_OF_RANGE;
	default: return CURAND_STATUS_LAUNCH_FAILURE;
	}
}

/* A synchronous record with no answer but its status. */
static curandStatus_t ask(uint32_t op, const void *body, size_t len)
{
	int st = 0, r = phos_preload_call(op, body, len, NULL, 0, NULL, 0, NULL, &st);

	return status_of(r, st);
}

/* --- versions --- */

static struct phos_reply_rand_version version;
static pthread_once_t version_once = PTHREAD_ONCE_INIT;

static void version_ask(void)
{
	size_t len = 0;
	int st = 0;

	if (connect_once() != 0 ||
	    status_of(phos_preload_call(PHOS_OP_RAND_VERSION, NULL, 0, NULL, 0, &version, sizeof(version), &len, &st),
		      st) != CURAND_STATUS_SUCCESS || len != sizeof(version)) {
		memset(&version, 0, sizeof(version));
		fprintf(stderr, "phos-fn: cuRAND: the executor has no cuRAND (libcurand.so.10 not found there: "
				"PHOS_CURAND_LIB): every cuRAND generator fails\n");
	}
}

PHOS_EXPORT curandStatus_t curandGetVersion(int *value)
{
	if (!value)
		return CURAND_STATUS_OUT_OF_RANGE;
	pthread_once(&version_once, version_ask);
	*value = version.version;
	return version.version ? CURAND_STATUS_SUCCESS : CURAND_STATUS_INITIALIZATION_FAILED;
}

PHOS_EXPORT curandStatus_t curandGetProperty(libraryPropertyType type, int *value)
{
	if (!value)
		return CURAND_STATUS_OUT_OF_RANGE;
	pthread_once(&version_once, version_ask);
	if (!version.version)
		return CURAND_STATUS_INITIALIZATION_FAILED;
	switch (type) {
	case MAJOR_VERSION: *value = version.major; break;
	case MINOR_VERSION: *value = version.minor; break;
	case PATCH_LEVEL: *value = version.patch; break;
	default: return CURAND_STATUS_OUT_OF_RANGE;
	}
	return CURAND_STATUS_SUCCESS;
}

/* --- generators --- */

/* The generator of handle g, lock held; NULL when g is none of ours. */
static struct rand_gen *gen_of(curandGenerator_t g)
{
	uintptr_t id = (uintptr_t)g;

	return id > 0 && id <= UINT32_MAX ? phos_ids_get(PHOS_H_RAND, (uint32_t)id) : NULL;
}

static bool step_eq(const struct phos_rand_step *x, const struct phos_rand_step *y)
{
	return x->kind == y->kind && x->what == y->what && x->value == y->value && x->a == y->a && x->b == y->b;
}

/* Appends s to g's history; false (the history dropped) past
 * RAND_HISTORY_MAX steps. Lock held. */
static bool push(struct rand_gen *g, const struct phos_rand_step *s)
{
	if (g->nhist == g->cap) {
		size_t cap = g->cap ? g->cap * 2 : 16;
		struct phos_rand_step *h = cap <= RAND_HISTORY_MAX ? realloc(g->hist, cap * sizeof(*h)) : NULL;

		if (!h) {
			phos_warn("curand: generator %u: its history passed %d steps and is dropped; it cannot be "
				  "made again after a restore", g->id, RAND_HISTORY_MAX);
			free(g->hist);
			g->hist = NULL;
			g->nhist = g->cap = 0;
			g->lost = true;
			g->open = false;
			return false;
		}
		g->hist = h;
		g->cap = cap;
	}
	g->hist[g->nhist++] = *s;
	return true;
}

/* Keeps step s (a setting or call the library took) in g's history, a loop
 * folded into a repeat (the header says how). Lock held. */
static void remember(struct rand_gen *g, const struct phos_rand_step *s)
{
	size_t plain = 0;

	if (g->lost)
		return;
	if (g->open) {
		struct phos_rand_step *r = &g->hist[g->rep];
		const struct phos_rand_step *block = r - r->what;

		if (step_eq(s, &block[g->match])) {
			if (++g->match == r->what) {   /* the block once more: counted, its steps dropped */
				g->nhist = g->rep + 1;
				r->value++;
				g->match = 0;
				return;
			}
			push(g, s);
			return;
		}
		g->open = false;   /* (the steps that matched stay, as steps) */
	}
	if (!push(g, s))
		return;
	while (plain < g->nhist && plain < 2 * PHOS_RAND_REPEAT_MAX &&
	       g->hist[g->nhist - 1 - plain].kind != PHOS_RAND_STEP_REPEAT)
		plain++;
	for (size_t len = 1; len <= PHOS_RAND_REPEAT_MAX && 2 * len <= plain; len++) {
		const struct phos_rand_step *last = &g->hist[g->nhist - len], *before = last - len;
		size_t k = 0;

		while (k < len && step_eq(&last[k], &before[k]))
			k++;
		if (k == len) {   /* the last len steps are the len before again: a repeat of them */
			struct phos_rand_step r = { .kind = PHOS_RAND_STEP_REPEAT, .what = (uint32_t)len, .value = 1 };

			g->nhist -= len;
			push(g, &r);
			g->open = true;
			g->rep = g->nhist - 1;
			g->match = 0;
			return;
		}
	}
}

static curandStatus_t send_create(const struct rand_gen *g)
{
	struct phos_rand_create c = { .id = g->id, .device = g->device, .type = g->type };

	return ask(PHOS_OP_RAND_CREATE, &c, sizeof(c));
}

/* Makes the generator again in a new executor (after a restore) from its
 * history. Lock held. */
static curandStatus_t gen_ensure(struct rand_gen *g)
{
	curandStatus_t s;

	if (!g->made || g->epoch == epoch)
		return CURAND_STATUS_SUCCESS;
	if (g->lost) {
		fprintf(stderr, "phos-fn: cuRAND: generator %u cannot be made again after the restore (its history "
				"passed %d entries): CURAND_STATUS_PREEXISTING_FAILURE\n", g->id, RAND_HISTORY_MAX);
		return CURAND_STATUS_PREEXISTING_FAILURE;
	}
	s = send_create(g);
	for (size_t i = 0; i < g->nhist && s == CURAND_STATUS_SUCCESS; i += PHOS_RAND_REPLAY_STEPS) {
		size_t n = g->nhist - i < PHOS_RAND_REPLAY_STEPS ? g->nhist - i : PHOS_RAND_REPLAY_STEPS;
		struct phos_rand_replay h = { .id = g->id, .nsteps = (uint32_t)n };
		int st = 0, r = phos_preload_call(PHOS_OP_RAND_REPLAY, &h, sizeof(h), &g->hist[i], n * sizeof(g->hist[0]),
						  NULL, 0, NULL, &st);

		s = status_of(r, st);
	}
	if (s != CURAND_STATUS_SUCCESS) {
		phos_warn("curand: generator %u could not be made again after the restore: status %d", g->id, s);
		return s;
	}
	phos_debug("curand: generator %u made again from %zu steps", g->id, g->nhist);
	g->epoch = epoch;
	return CURAND_STATUS_SUCCESS;
}

static void gen_free(struct rand_gen *g)
{
	if (g)
		free(g->hist);
	free(g);
}

PHOS_EXPORT curandStatus_t curandCreateGenerator(curandGenerator_t *generator, curandRngType_t rng_type)
{
	struct rand_gen *g;
	curandStatus_t s;
	int device = 0;

	if (!generator)
		return CURAND_STATUS_NOT_INITIALIZED;
	if (phos_rand_quasi(rng_type))
		return refuse("a quasirandom generator (Sobol)");
	if (!phos_rand_pseudo(rng_type))
		return CURAND_STATUS_TYPE_ERROR;
	if (connect_once() != 0 || cudaGetDevice(&device) != cudaSuccess)
		return CURAND_STATUS_INITIALIZATION_FAILED;
	g = calloc(1, sizeof(*g));
	if (!g)
		return CURAND_STATUS_ALLOCATION_FAILED;
	g->type = rng_type;
	g->device = device;
	if (phos_ids_add(PHOS_H_RAND, g, &g->id) < 0) {
		free(g);
		return CURAND_STATUS_ALLOCATION_FAILED;
	}
	rand_enter();
	s = send_create(g);
	g->made = s == CURAND_STATUS_SUCCESS;
	g->epoch = epoch;
	if (!g->made)
		phos_ids_take(PHOS_H_RAND, g->id);
	rand_leave();
	if (!g->made) {
		gen_free(g);
		return s;
	}
	*generator = (curandGenerator_t)(uintptr_t)g->id;
	return CURAND_STATUS_SUCCESS;
}

PHOS_EXPORT curandStatus_t curandCreateGeneratorHost(curandGenerator_t *generator, curandRngType_t rng_type)
{
	(void)generator;
	(void)rng_type;
	return refuse("a host generator (curandCreateGeneratorHost)");
}

PHOS_EXPORT curandStatus_t curandDestroyGenerator(curandGenerator_t generator)
{
	struct rand_gen *g;

	rand_enter();
	g = gen_of(generator);
	if (!g) {
		rand_leave();
		return CURAND_STATUS_NOT_INITIALIZED;
	}
	if (g->made && g->epoch == epoch) {
		struct phos_handle c = { .id = g->id };

		phos_preload_post(PHOS_OP_RAND_DESTROY, &c, sizeof(c), NULL, 0);
	}
	phos_ids_take(PHOS_H_RAND, g->id);
	rand_leave();
	gen_free(g);
	return CURAND_STATUS_SUCCESS;
}

PHOS_EXPORT curandStatus_t curandSetStream(curandGenerator_t generator, cudaStream_t stream)
{
	struct rand_gen *g;

	rand_enter();
	g = gen_of(generator);
	if (g)
		g->stream = stream;   /* (checked where a call runs on it) */
	rand_leave();
	return g ? CURAND_STATUS_SUCCESS : CURAND_STATUS_NOT_INITIALIZED;
}

/* A setting: sent (after the generator is made again when a restore came
 * between) and, when the library took it, kept in the history. */
static curandStatus_t setting(curandGenerator_t generator, uint32_t what, uint64_t value)
{
	struct rand_gen *g;
	curandStatus_t s;

	rand_enter();
	g = gen_of(generator);
	s = g ? gen_ensure(g) : CURAND_STATUS_NOT_INITIALIZED;
	if (s == CURAND_STATUS_SUCCESS) {
		struct phos_rand_set c = { .id = g->id, .what = what, .value = value };

		s = ask(PHOS_OP_RAND_SET, &c, sizeof(c));
		if (s == CURAND_STATUS_SUCCESS)
			remember(g, &(struct phos_rand_step){ .kind = PHOS_RAND_STEP_SET, .what = what, .value = value });
	}
	rand_leave();
	return s;
}

PHOS_EXPORT curandStatus_t curandSetPseudoRandomGeneratorSeed(curandGenerator_t generator, unsigned long long seed)
{
	return setting(generator, PHOS_RAND_SET_SEED, seed);   /* (every generator of ours is pseudorandom) */
}

PHOS_EXPORT curandStatus_t curandSetGeneratorOffset(curandGenerator_t generator, unsigned long long offset)
{
	return setting(generator, PHOS_RAND_SET_OFFSET, offset);
}

PHOS_EXPORT curandStatus_t curandSetGeneratorOrdering(curandGenerator_t generator, curandOrdering_t order)
{
	return setting(generator, PHOS_RAND_SET_ORDERING, (uint64_t)order);
}

/* A generator of ours, else NOT_INITIALIZED; what pseudorandom generators
 * answer to a quasirandom call otherwise. */
static curandStatus_t known_or(curandGenerator_t generator, curandStatus_t otherwise)
{
	bool known;

	rand_enter();
	known = gen_of(generator) != NULL;
	rand_leave();
	return known ? otherwise : CURAND_STATUS_NOT_INITIALIZED;
}

PHOS_EXPORT curandStatus_t curandSetQuasiRandomGeneratorDimensions(curandGenerator_t generator,
								   unsigned int num_dimensions)
{
	return known_or(generator, num_dimensions < 1 || num_dimensions > 20000 ? CURAND_STATUS_OUT_OF_RANGE
										 : CURAND_STATUS_TYPE_ERROR);
}

/* Only the 64-bit quasirandom generators make 64-bit numbers, and phos-fn
 * makes no quasirandom generator. */
PHOS_EXPORT curandStatus_t curandGenerateLongLong(curandGenerator_t generator, unsigned long long *outputPtr,
						  size_t num)
{
	(void)outputPtr;
	(void)num;
	return known_or(generator, CURAND_STATUS_TYPE_ERROR);
}

/* The starting state is made by the first generate call anyway (curand.h);
 * making it ahead changes no number. */
PHOS_EXPORT curandStatus_t curandGenerateSeeds(curandGenerator_t generator)
{
	return known_or(generator, CURAND_STATUS_SUCCESS);
}

/* --- generate calls --- */

/* [p, p + bytes) lies in the executor's arena (cudaMalloc's memory). */
static bool in_arena(const void *p, uint64_t bytes)
{
	const struct phos_reply_hello *h = phos_preload_hello();
	uint64_t a = (uint64_t)(uintptr_t)p;

	return h && a >= h->arena_base && bytes <= h->arena_size && a - h->arena_base <= h->arena_size - bytes;
}

/* A call's arguments as cuRAND documents them: lambda's range; and as
 * phos-fn takes them: n bounded, the output aligned to its element and in
 * cudaMalloc's memory. An odd n of a Box-Muller kind is the device's to
 * judge (generate): documented as LENGTH_NOT_MULTIPLE, CUDA 13's Philox
 * takes it. */
static curandStatus_t args_ok(int gen, const void *out, size_t n, double a)
{
	uint32_t esize = phos_rand_esize(gen);

	if (gen == PHOS_RAND_GEN_POISSON && !(a > 0 && a <= 400000))
		return CURAND_STATUS_OUT_OF_RANGE;
	if (n == 0)
		return CURAND_STATUS_SUCCESS;
	if (n > PHOS_RAND_ELEMS_MAX || (uintptr_t)out % esize)
		return CURAND_STATUS_OUT_OF_RANGE;
	if (!in_arena(out, (uint64_t)n * esize))
		return refuse("a generate call into memory other than cudaMalloc's (host or managed memory)");
	return CURAND_STATUS_SUCCESS;
}

/* One generate call of kind gen: checked as cuRAND documents, posted on the
 * generator's stream, kept in its history. */
static curandStatus_t generate(curandGenerator_t generator, int gen, void *out, size_t n, double a, double b)
{
	struct phos_rand_generate c = { .gen = (uint32_t)gen, .out = (uint64_t)(uintptr_t)out, .n = n, .a = a, .b = b };
	struct rand_gen *g;
	curandStatus_t s;
	int r;

	rand_enter();
	g = gen_of(generator);
	s = !g ? CURAND_STATUS_NOT_INITIALIZED : args_ok(gen, out, n, a);
	if (s == CURAND_STATUS_SUCCESS && n == 0) {
		rand_leave();
		return CURAND_STATUS_SUCCESS;   /* (nothing to make, nothing moved) */
	}
	if (s == CURAND_STATUS_SUCCESS)
		s = gen_ensure(g);
	if (s == CURAND_STATUS_SUCCESS) {
		r = phos_preload_stream_id(g->stream, &c.stream);
		s = r == cudaErrorStreamCaptureUnsupported ? refuse("a generate call on a stream that is capturing a graph")
		    : r != cudaSuccess ? CURAND_STATUS_LAUNCH_FAILURE
				       : CURAND_STATUS_SUCCESS;
	}
	if (s == CURAND_STATUS_SUCCESS) {
		c.id = g->id;
		/* an odd n of Box-Muller: asked, so that the device's refusal
		 * reaches the program and a refused call stays out of the history */
		if (phos_rand_pairs(gen) && n % 2)
			s = ask(PHOS_OP_RAND_GENERATE, &c, sizeof(c));
		else
			s = status_of(phos_preload_post(PHOS_OP_RAND_GENERATE, &c, sizeof(c), NULL, 0), 0);
		if (s == CURAND_STATUS_SUCCESS)
			remember(g, &(struct phos_rand_step){ .kind = PHOS_RAND_STEP_GEN, .what = (uint32_t)gen, .value = n,
							       .a = a, .b = b });
	}
	rand_leave();
	return s;
}

PHOS_EXPORT curandStatus_t curandGenerate(curandGenerator_t generator, unsigned int *outputPtr, size_t num)
{
	return generate(generator, PHOS_RAND_GEN_BITS, outputPtr, num, 0, 0);
}

PHOS_EXPORT curandStatus_t curandGenerateUniform(curandGenerator_t generator, float *outputPtr, size_t num)
{
	return generate(generator, PHOS_RAND_GEN_UNIFORM, outputPtr, num, 0, 0);
}

PHOS_EXPORT curandStatus_t curandGenerateUniformDouble(curandGenerator_t generator, double *outputPtr, size_t num)
{
	return generate(generator, PHOS_RAND_GEN_UNIFORM_DOUBLE, outputPtr, num, 0, 0);
}

PHOS_EXPORT curandStatus_t curandGenerateNormal(curandGenerator_t generator, float *outputPtr, size_t n, float mean,
						float stddev)
{
	return generate(generator, PHOS_RAND_GEN_NORMAL, outputPtr, n, mean, stddev);
}

PHOS_EXPORT curandStatus_t curandGenerateNormalDouble(curandGenerator_t generator, double *outputPtr, size_t n,
						      double mean, double stddev)
{
	return generate(generator, PHOS_RAND_GEN_NORMAL_DOUBLE, outputPtr, n, mean, stddev);
}

PHOS_EXPORT curandStatus_t curandGenerateLogNormal(curandGenerator_t generator, float *outputPtr, size_t n,
						   float mean, float stddev)
{
	return generate(generator, PHOS_RAND_GEN_LOG_NORMAL, outputPtr, n, mean, stddev);
}

PHOS_EXPORT curandStatus_t curandGenerateLogNormalDouble(curandGenerator_t generator, double *outputPtr, size_t n,
							 double mean, double stddev)
{
	return generate(generator, PHOS_RAND_GEN_LOG_NORMAL_DOUBLE, outputPtr, n, mean, stddev);
}

PHOS_EXPORT curandStatus_t curandGeneratePoisson(curandGenerator_t generator, unsigned int *outputPtr, size_t n,
						 double lambda)
{
	return generate(generator, PHOS_RAND_GEN_POISSON, outputPtr, n, lambda, 0);
}

/* Called by every generated stub (stubs_curand.c). */
int phos_curand_stub(const char *name, int *logged);
int phos_curand_stub(const char *name, int *logged)
{
	phos_log_once("cuRAND API", name, logged);
	return CURAND_STATUS_TYPE_ERROR;
}

__attribute__((constructor)) static void log_init(void)
{
	phos_log_init("phos-preload-curand", PHOS_LOG_OFF);
}
