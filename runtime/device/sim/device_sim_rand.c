/* SPDX-License-Identifier: MIT */
/*
 * cuRAND for the sim device (rand_dev.h): a deterministic reference on the
 * host. Philox4x32-10 is the real block function (checked against
 * Random123's known answers, tests/unit/test_rand_sim.c); the sequence's
 * order and the other types are the sim's own, described in rand_dev.h.
 */
#include "device_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rand_dev.h"

#define SIM_RAND_MAGIC 0x7372616eu   /* "sran" */

struct sim_rand_gen {
	uint32_t magic;
	int type, ordering;
	uint64_t seed, offset, pos;
};

static int ok(int *st, int s)
{
	*st = s;
	return 0;
}

static uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t *hi)
{
	uint64_t p = (uint64_t)a * b;

	*hi = (uint32_t)(p >> 32);
	return (uint32_t)p;
}

void phos_rand_philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t ret[4])
{
	uint32_t c[4] = { ctr[0], ctr[1], ctr[2], ctr[3] }, k[2] = { key[0], key[1] };

	for (int round = 0; round < 10; round++) {
		uint32_t hi0, hi1, lo0 = mulhilo(0xD2511F53u, c[0], &hi0), lo1 = mulhilo(0xCD9E8D57u, c[2], &hi1);

		c[0] = hi1 ^ c[1] ^ k[0];
		c[1] = lo1;
		c[2] = hi0 ^ c[3] ^ k[1];
		c[3] = lo0;
		k[0] += 0x9E3779B9u;   /* the Weyl key schedule */
		k[1] += 0xBB67AE85u;
	}
	memcpy(ret, c, sizeof(c));
}

/* The type's tag, xored into the seed: PHILOX4_32_10 is Philox itself. */
static uint64_t tag_of(int type)
{
	switch (type) {
	case PHOS_RAND_PHILOX4_32_10: return 0;
	case PHOS_RAND_PSEUDO_DEFAULT: case PHOS_RAND_XORWOW: return 0x584f52574f570001ull;   /* "XORWOW" */
	case PHOS_RAND_MRG32K3A: return 0x4d52473332000002ull;
	case PHOS_RAND_MTGP32: return 0x4d54475033320003ull;
	default: return 0x4d54313939333704ull;   /* MT19937 */
	}
}

/* A cursor over the words of one sequence, a block at a time. */
struct words {
	uint32_t key[2];
	uint64_t pos, block_of;   /* block_of: the block held + 1, 0 none */
	uint32_t block[4];
};

static uint32_t next(struct words *w)
{
	uint64_t b = w->pos / 4;

	if (w->block_of != b + 1) {
		uint32_t ctr[4] = { (uint32_t)b, (uint32_t)(b >> 32), 0, 0 };

		phos_rand_philox(ctr, w->key, w->block);
		w->block_of = b + 1;
	}
	return w->block[w->pos++ % 4];
}

static float uniform(uint32_t x)
{
	return x * 2.3283064e-10f + (2.3283064e-10f / 2);   /* curand_uniform.h */
}

static double uniform53(uint32_t x, uint32_t y)
{
	uint64_t z = (uint64_t)x ^ ((uint64_t)y << (53 - 32));

	return (double)z * 1.1102230246251565e-16 + (1.1102230246251565e-16 / 2.0);
}

/* curand_normal.h's _curand_box_muller (its host branch) */
static void box_muller(uint32_t x, uint32_t y, float r[2])
{
	float u = uniform(x), v = y * (2.3283064e-10f * 6.2831855f) + (2.3283064e-10f * 6.2831855f / 2);
	float s = sqrtf(-2.0f * logf(u));

	r[0] = sinf(v) * s;
	r[1] = cosf(v) * s;
}

static void box_muller_double(uint32_t x0, uint32_t x1, uint32_t y0, uint32_t y1, double r[2])
{
	double u = uniform53(x0, x1);
	uint64_t zy = (uint64_t)y0 ^ ((uint64_t)y1 << (53 - 32));
	double v = (double)zy * (1.1102230246251565e-16 * 2.0) + 1.1102230246251565e-16;
	double s = sqrt(-2.0 * log(u));

	r[0] = sin(v * 3.1415926535897932) * s;
	r[1] = cos(v * 3.1415926535897932) * s;
}

static uint32_t poisson(double lambda, uint32_t x, uint32_t y)
{
	if (lambda <= 100) {
		double u = x * 2.3283064365386963e-10 + 2.3283064365386963e-10 / 2.0, p = exp(-lambda), cdf = p;
		uint32_t k = 0;

		while (u > cdf && k < 100000) {
			k++;
			p *= lambda / k;
			cdf += p;
			if (p == 0)   /* (the tail's rounding: the CDF stays below u) */
				break;
		}
		return k;
	}
	float r[2];
	double k;

	box_muller(x, y, r);
	k = floor(lambda + sqrt(lambda) * r[0] + 0.5);
	return k < 0 ? 0 : (uint32_t)k;
}

bool phos_rand_sim_fill(int type, uint64_t seed, uint64_t *pos, int gen, uint64_t n, double a, double b,
			void *out)
{
	uint64_t k = seed ^ tag_of(type);
	struct words w = { .key = { (uint32_t)k, (uint32_t)(k >> 32) }, .pos = *pos };

	if (!phos_rand_pseudo(type) || !phos_rand_esize(gen) || (phos_rand_pairs(gen) && n % 2))
		return false;
	for (uint64_t i = 0; i < n; i++) {
		switch (gen) {
		case PHOS_RAND_GEN_BITS:
			((uint32_t *)out)[i] = next(&w);
			break;
		case PHOS_RAND_GEN_UNIFORM:
			((float *)out)[i] = uniform(next(&w));
			break;
		case PHOS_RAND_GEN_UNIFORM_DOUBLE: {
			uint32_t x = next(&w);

			((double *)out)[i] = uniform53(x, next(&w));
			break;
		}
		case PHOS_RAND_GEN_NORMAL: case PHOS_RAND_GEN_LOG_NORMAL: {
			uint32_t x = next(&w), y = next(&w);
			float r[2];

			box_muller(x, y, r);
			for (int j = 0; j < 2; j++) {
				float v = r[j] * (float)b + (float)a;

				((float *)out)[i + j] = gen == PHOS_RAND_GEN_LOG_NORMAL ? expf(v) : v;
			}
			i++;
			break;
		}
		case PHOS_RAND_GEN_NORMAL_DOUBLE: case PHOS_RAND_GEN_LOG_NORMAL_DOUBLE: {
			uint32_t x0 = next(&w), x1 = next(&w), y0 = next(&w), y1 = next(&w);
			double r[2];

			box_muller_double(x0, x1, y0, y1, r);
			for (int j = 0; j < 2; j++) {
				double v = r[j] * b + a;

				((double *)out)[i + j] = gen == PHOS_RAND_GEN_LOG_NORMAL_DOUBLE ? exp(v) : v;
			}
			i++;
			break;
		}
		case PHOS_RAND_GEN_POISSON: {
			uint32_t x = next(&w);

			((uint32_t *)out)[i] = poisson(a, x, next(&w));
			break;
		}
		}
	}
	*pos = w.pos;
	return true;
}

static int sim_rand_version(struct phos_device *dev, struct phos_reply_rand_version *ret, int *st)
{
	(void)dev;
	ret->version = PHOS_RAND_VERSION;
	ret->major = PHOS_RAND_VERSION / 1000;
	ret->minor = PHOS_RAND_VERSION / 100 % 10;
	ret->patch = PHOS_RAND_VERSION % 100;
	return ok(st, PHOS_RAND_SUCCESS);
}

static int sim_rand_create(struct phos_device *dev, int type, void **ret, int *st)
{
	struct sim_rand_gen *g;

	(void)dev;
	if (!phos_rand_pseudo(type))
		return ok(st, PHOS_RAND_TYPE_ERROR);
	g = calloc(1, sizeof(*g));
	if (!g)
		return ok(st, PHOS_RAND_ALLOCATION_FAILED);
	g->magic = SIM_RAND_MAGIC;
	g->type = type;
	g->ordering = PHOS_RAND_ORDERING_DEFAULT;
	*ret = g;
	return ok(st, PHOS_RAND_SUCCESS);
}

static int sim_rand_set(struct phos_device *dev, void *gen, uint32_t what, uint64_t value, int *st)
{
	struct sim_rand_gen *g = gen;

	(void)dev;
	if (!g || g->magic != SIM_RAND_MAGIC)
		return ok(st, PHOS_RAND_NOT_INITIALIZED);
	switch (what) {
	case PHOS_RAND_SET_SEED:
		g->seed = value;
		break;
	case PHOS_RAND_SET_OFFSET:
		g->offset = value;
		break;
	case PHOS_RAND_SET_ORDERING:
		if (!phos_rand_ordering_pseudo((int)value))
			return ok(st, PHOS_RAND_OUT_OF_RANGE);
		g->ordering = (int)value;
		break;
	default:
		return ok(st, PHOS_RAND_OUT_OF_RANGE);
	}
	g->pos = g->offset;   /* (every setting starts the sequence again at the offset) */
	return ok(st, PHOS_RAND_SUCCESS);
}

static void sim_rand_destroy(struct phos_device *dev, void *gen)
{
	(void)dev;
	free(gen);
}

static int sim_rand_generate(struct phos_device *dev, void *gen, void *stream, const struct phos_rand_generate *g,
			     uint64_t out, int *st)
{
	struct sim_rand_gen *s = gen;
	uint32_t esize = phos_rand_esize((int)g->gen);

	if (phos_sim_stream_check(dev, stream) < 0)
		return -PHOS_CUDA_INVALID_RESOURCE_HANDLE;
	if (!s || s->magic != SIM_RAND_MAGIC)
		return ok(st, PHOS_RAND_NOT_INITIALIZED);
	if (!esize || g->n == 0 || g->n > PHOS_RAND_ELEMS_MAX)
		return ok(st, PHOS_RAND_OUT_OF_RANGE);
	if (!phos_sim_range_ok(dev, out, g->n * esize))
		return ok(st, PHOS_RAND_LAUNCH_FAILURE);
	if (!phos_rand_sim_fill(s->type, s->seed, &s->pos, (int)g->gen, g->n, g->a, g->b, (void *)(uintptr_t)out))
		return ok(st, PHOS_RAND_LENGTH_NOT_MULTIPLE);
	return ok(st, PHOS_RAND_SUCCESS);
}

const struct phos_rand_ops phos_rand_sim = {
	.version = sim_rand_version,
	.create = sim_rand_create,
	.set = sim_rand_set,
	.destroy = sim_rand_destroy,
	.generate = sim_rand_generate,
};
