/* SPDX-License-Identifier: MIT */
/*
 * cuRAND on the cuda device (rand_dev.h): the real libcurand.so.10, loaded
 * at the first cuRAND record (runtime/device/cuda/libfind.h: $PHOS_CURAND_LIB, the
 * loader path, the CUDA 13 wheels' nvidia/cu13/lib, the toolkit), so a
 * program that never calls cuRAND never loads it.
 *
 * Each generator is NVIDIA's, made with curandCreateGenerator (a device
 * generator: its state lives in the executor's memory, never the
 * function's), set and called as the program did; it is bound to the
 * stream of each call (curandSetStream) when that changes. The device's
 * context is current for every call.
 */
#include "device_cuda_syms.h"

#include <curand.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "libfind.h"
#include "log.h"
#include "rand_dev.h"

#define RAND_SYMS(X)                                                   \
	X(GetVersion, "curandGetVersion")                              \
	X(GetProperty, "curandGetProperty")                            \
	X(CreateGenerator, "curandCreateGenerator")                    \
	X(DestroyGenerator, "curandDestroyGenerator")                  \
	X(SetStream, "curandSetStream")                                \
	X(SetPseudoRandomGeneratorSeed, "curandSetPseudoRandomGeneratorSeed") \
	X(SetGeneratorOffset, "curandSetGeneratorOffset")              \
	X(SetGeneratorOrdering, "curandSetGeneratorOrdering")          \
	X(Generate, "curandGenerate")                                  \
	X(GenerateUniform, "curandGenerateUniform")                    \
	X(GenerateUniformDouble, "curandGenerateUniformDouble")        \
	X(GenerateNormal, "curandGenerateNormal")                      \
	X(GenerateNormalDouble, "curandGenerateNormalDouble")          \
	X(GenerateLogNormal, "curandGenerateLogNormal")                \
	X(GenerateLogNormalDouble, "curandGenerateLogNormalDouble")    \
	X(GeneratePoisson, "curandGeneratePoisson")

/* Each pointer has the type of NVIDIA's declaration in curand.h. */
#define RAND_FIELD(field, export) __typeof__(curand##field) *field;
static struct {
	RAND_SYMS(RAND_FIELD)
} rnd;
#undef RAND_FIELD

static pthread_once_t rand_once = PTHREAD_ONCE_INIT;
static int rand_status = -PHOS_CUDA_INITIALIZATION;

static void rand_load(void)
{
	void *lib = phos_lib_find("cuRAND", "PHOS_CURAND_LIB", "libcurand.so.10", "cu13");

	if (!lib) {
		phos_err("cuda: cannot load libcurand.so.10 (PHOS_CURAND_LIB, the loader path, pip's nvidia/cu13/lib, "
			 "$CUDA_HOME/lib64 and /usr/local/cuda/lib64 tried)");
		return;
	}
#define RAND_LOAD(field, export)                                                \
	{                                                                       \
		void *p_ = dlsym(lib, export);                                  \
		if (!p_) {                                                      \
			phos_err("cuda: libcurand.so.10 lacks %s", export);     \
			return;                                                 \
		}                                                               \
		memcpy(&rnd.field, &p_, sizeof(p_));                            \
	}
	RAND_SYMS(RAND_LOAD)
#undef RAND_LOAD
	rand_status = 0;
}

/* The library loaded and the device's context current: 0, or the error
 * (and *st CURAND_STATUS_INITIALIZATION_FAILED without a usable library). */
static int ready(struct phos_device *dev, int *st)
{
	pthread_once(&rand_once, rand_load);
	*st = 0;
	if (rand_status < 0) {
		*st = PHOS_RAND_INITIALIZATION_FAILED;
		return 0;
	}
	return cuda_current(cuda_dev(dev));
}

#define READY()                           \
	do {                              \
		int r_ = ready(dev, st);  \
		if (r_ < 0 || *st)        \
			return r_;        \
	} while (0)

struct cuda_rand_gen {
	curandGenerator_t g;
	void *stream;           /* bound with curandSetStream (NULL: the default stream) */
};

static int cuda_rand_version(struct phos_device *dev, struct phos_reply_rand_version *ret, int *st)
{
	READY();
	*st = rnd.GetVersion(&ret->version);
	if (!*st)
		*st = rnd.GetProperty(MAJOR_VERSION, &ret->major);
	if (!*st)
		*st = rnd.GetProperty(MINOR_VERSION, &ret->minor);
	if (!*st)
		*st = rnd.GetProperty(PATCH_LEVEL, &ret->patch);
	return 0;
}

static int cuda_rand_create(struct phos_device *dev, int type, void **ret, int *st)
{
	struct cuda_rand_gen *g;

	READY();
	g = calloc(1, sizeof(*g));
	if (!g)
		return -PHOS_CUDA_MEMORY_ALLOCATION;
	*st = rnd.CreateGenerator(&g->g, (curandRngType_t)type);
	if (*st) {
		free(g);
		return 0;
	}
	*ret = g;
	return 0;
}

static int cuda_rand_set(struct phos_device *dev, void *gen, uint32_t what, uint64_t value, int *st)
{
	struct cuda_rand_gen *g = gen;

	READY();
	switch (what) {
	case PHOS_RAND_SET_SEED:
		*st = rnd.SetPseudoRandomGeneratorSeed(g->g, value);
		break;
	case PHOS_RAND_SET_OFFSET:
		*st = rnd.SetGeneratorOffset(g->g, value);
		break;
	case PHOS_RAND_SET_ORDERING:
		*st = rnd.SetGeneratorOrdering(g->g, (curandOrdering_t)value);
		break;
	default:
		*st = PHOS_RAND_OUT_OF_RANGE;
	}
	return 0;
}

static void cuda_rand_destroy(struct phos_device *dev, void *gen)
{
	struct cuda_rand_gen *g = gen;
	int s;

	if (g && ready(dev, &s) == 0 && !s)
		rnd.DestroyGenerator(g->g);
	free(g);
}

/* A Poisson call, as the program made it: cuRAND makes the distribution of
 * a new lambda again by itself. (Until 2026-12-05 the context was idle
 * around a change of lambda, for stale draws that turned out to be the
 * test's own race: it read a non-blocking stream's buffers with cudaMemcpy.
 * On an H100 the fixed test gives the native draws forwarded.) */
static int poisson(struct cuda_rand_gen *g, void *p, size_t n, double lambda, int *st)
{
	*st = rnd.GeneratePoisson(g->g, p, n, lambda);
	return 0;
}

static int cuda_rand_generate(struct phos_device *dev, void *gen, void *stream, const struct phos_rand_generate *c,
			      uint64_t out, int *st)
{
	struct cuda_rand_gen *g = gen;
	void *p = (void *)(uintptr_t)out;
	size_t n = (size_t)c->n;

	READY();
	if (g->stream != stream) {
		*st = rnd.SetStream(g->g, (cudaStream_t)stream);
		if (*st)
			return 0;
		g->stream = stream;
	}
	switch (c->gen) {
	case PHOS_RAND_GEN_BITS: *st = rnd.Generate(g->g, p, n); break;
	case PHOS_RAND_GEN_UNIFORM: *st = rnd.GenerateUniform(g->g, p, n); break;
	case PHOS_RAND_GEN_UNIFORM_DOUBLE: *st = rnd.GenerateUniformDouble(g->g, p, n); break;
	case PHOS_RAND_GEN_NORMAL: *st = rnd.GenerateNormal(g->g, p, n, (float)c->a, (float)c->b); break;
	case PHOS_RAND_GEN_NORMAL_DOUBLE: *st = rnd.GenerateNormalDouble(g->g, p, n, c->a, c->b); break;
	case PHOS_RAND_GEN_LOG_NORMAL: *st = rnd.GenerateLogNormal(g->g, p, n, (float)c->a, (float)c->b); break;
	case PHOS_RAND_GEN_LOG_NORMAL_DOUBLE: *st = rnd.GenerateLogNormalDouble(g->g, p, n, c->a, c->b); break;
	case PHOS_RAND_GEN_POISSON: return poisson(g, p, n, c->a, st);
	default: *st = PHOS_RAND_OUT_OF_RANGE;
	}
	return 0;
}

const struct phos_rand_ops phos_rand_cuda = {
	.version = cuda_rand_version,
	.create = cuda_rand_create,
	.set = cuda_rand_set,
	.destroy = cuda_rand_destroy,
	.generate = cuda_rand_generate,
};
