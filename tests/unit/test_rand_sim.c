/* SPDX-License-Identifier: MIT */
/*
 * cuRAND on the sim device (runtime/device/sim/device_sim_rand.c):
 *
 * - Philox4x32-10's block function against Random123's known answers
 *   (kat_vectors: the zero, all-ones and pi-digit counters and keys);
 * - the sim's PHILOX4_32_10 sequence is Philox of counter (p / 4, 0, 0, 0)
 *   and key (seed), word p % 4: cuRAND's device API's curand_init(seed, 0,
 *   p) order, the first words computed here from the block function;
 * - positions: a seed, offset or ordering set starts again at the offset; a
 *   call of n words moves the position by n (calls split anyhow give one
 *   call's words); double and normal calls take the words rand_dev.h says;
 * - distributions over 2^20 values: uniform in (0, 1] with mean 1/2 and
 *   variance 1/12, normal and log-normal moments, Poisson mean and
 *   variance for a small and a large lambda; types give other sequences;
 * - the backend's answers: odd n of a pair kind, a generator of another
 *   kind, output outside device memory.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "rand_dev.h"

#define BASE 0x530000000000ull   /* clear of ASan's allocator */
#define SIZE (1ull << 30)
#define MAPPED (64ull << 20)
#define NBIG (1u << 20)

static const struct phos_device_ops *ops = &phos_device_sim;
static const struct phos_rand_ops *rnd = &phos_rand_sim;
static struct phos_device *dev;
#include "check.h"

static void test_philox_kat(void)
{
	static const struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
		{ { 0, 0, 0, 0 }, { 0, 0 }, { 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8 } },
		{ { 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff }, { 0xffffffff, 0xffffffff },
		  { 0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd } },
		{ { 0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344 }, { 0xa4093822, 0x299f31d0 },
		  { 0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1 } },
	};

	for (size_t i = 0; i < sizeof(kat) / sizeof(kat[0]); i++) {
		uint32_t out[4];

		phos_rand_philox(kat[i].ctr, kat[i].key, out);
		CHECK(memcmp(out, kat[i].out, sizeof(out)) == 0, "Philox KAT %zu: %08x %08x %08x %08x", i, out[0],
		      out[1], out[2], out[3]);
	}
}

static void test_philox_order(void)
{
	uint64_t seed = 0x123456789abcdef0ull, pos = 0;
	uint32_t got[12], key[2] = { 0x9abcdef0u, 0x12345678u };

	CHECK(phos_rand_sim_fill(PHOS_RAND_PHILOX4_32_10, seed, &pos, PHOS_RAND_GEN_BITS, 12, 0, 0, got) && pos == 12,
	      "fill 12 words: pos %llu", (unsigned long long)pos);
	for (uint32_t b = 0; b < 3; b++) {
		uint32_t ctr[4] = { b, 0, 0, 0 }, want[4];

		phos_rand_philox(ctr, key, want);
		CHECK(memcmp(&got[4 * b], want, sizeof(want)) == 0, "Philox word block %u is not counter %u", b, b);
	}
	/* a position in the middle of a block: word 6 onwards */
	uint32_t mid[3];
	pos = 6;
	phos_rand_sim_fill(PHOS_RAND_PHILOX4_32_10, seed, &pos, PHOS_RAND_GEN_BITS, 3, 0, 0, mid);
	CHECK(memcmp(mid, &got[6], sizeof(mid)) == 0 && pos == 9, "words 6..8 from position 6");
	/* a 64-bit block index goes into counter words 0 and 1 */
	uint32_t far, ctr[4] = { 1, 2, 0, 0 }, want[4];
	pos = ((2ull << 32) + 1) * 4 + 3;
	phos_rand_sim_fill(PHOS_RAND_PHILOX4_32_10, seed, &pos, PHOS_RAND_GEN_BITS, 1, 0, 0, &far);
	phos_rand_philox(ctr, key, want);
	CHECK(far == want[3], "word 3 of block 2^33 + 1: %08x, want %08x", far, want[3]);
}

/* A generator made through the backend, seed and offset set. */
static void *gen_new(int type, uint64_t seed)
{
	void *g = NULL;
	int st = -1;

	CHECK(rnd->create(dev, type, &g, &st) == 0 && st == 0 && g, "create type %d: status %d", type, st);
	CHECK(rnd->set(dev, g, PHOS_RAND_SET_SEED, seed, &st) == 0 && st == 0, "seed: status %d", st);
	return g;
}

static int gen_call(void *g, int kind, uint64_t n, double a, double b, uint64_t out)
{
	struct phos_rand_generate c = { .gen = (uint32_t)kind, .n = n, .a = a, .b = b };
	int st = -1;

	CHECK(rnd->generate(dev, g, NULL, &c, out, &st) == 0, "generate: an error");
	return st;
}

static void test_positions(void)
{
	uint32_t *d = (uint32_t *)(uintptr_t)BASE, ref[64];
	uint64_t pos = 0;
	void *g = gen_new(PHOS_RAND_PHILOX4_32_10, 7);
	int st;

	phos_rand_sim_fill(PHOS_RAND_PHILOX4_32_10, 7, &pos, PHOS_RAND_GEN_BITS, 64, 0, 0, ref);
	/* calls of 10, 1 and 5 give words 0..15 */
	CHECK(gen_call(g, PHOS_RAND_GEN_BITS, 10, 0, 0, BASE) == 0 &&
	      gen_call(g, PHOS_RAND_GEN_BITS, 1, 0, 0, BASE + 40) == 0 &&
	      gen_call(g, PHOS_RAND_GEN_BITS, 5, 0, 0, BASE + 44) == 0, "three calls");
	CHECK(memcmp(d, ref, 16 * 4) == 0, "calls of 10, 1, 5 are words 0..15");
	/* the offset is absolute, and a seed set again starts at it too */
	rnd->set(dev, g, PHOS_RAND_SET_OFFSET, 20, &st);
	gen_call(g, PHOS_RAND_GEN_BITS, 4, 0, 0, BASE);
	CHECK(st == 0 && memcmp(d, &ref[20], 16) == 0, "offset 20: words 20..23");
	gen_call(g, PHOS_RAND_GEN_BITS, 4, 0, 0, BASE);
	CHECK(memcmp(d, &ref[24], 16) == 0, "after offset 20 and 4 words: words 24..27");
	rnd->set(dev, g, PHOS_RAND_SET_SEED, 7, &st);
	gen_call(g, PHOS_RAND_GEN_BITS, 4, 0, 0, BASE);
	CHECK(memcmp(d, &ref[20], 16) == 0, "the seed set again: back at offset 20");
	rnd->set(dev, g, PHOS_RAND_SET_ORDERING, PHOS_RAND_ORDERING_LEGACY, &st);
	gen_call(g, PHOS_RAND_GEN_BITS, 4, 0, 0, BASE);
	CHECK(st == 0 && memcmp(d, &ref[20], 16) == 0, "an ordering set: back at offset 20");
	CHECK(rnd->set(dev, g, PHOS_RAND_SET_ORDERING, PHOS_RAND_ORDERING_QUASI_DEFAULT, &st) == 0 &&
	      st == PHOS_RAND_OUT_OF_RANGE, "a quasirandom ordering on a pseudorandom generator: %d", st);
	/* a double takes two words, a normal pair two, a double pair four */
	rnd->set(dev, g, PHOS_RAND_SET_OFFSET, 0, &st);
	gen_call(g, PHOS_RAND_GEN_UNIFORM_DOUBLE, 3, 0, 0, BASE);
	gen_call(g, PHOS_RAND_GEN_NORMAL, 2, 0, 1, BASE);
	gen_call(g, PHOS_RAND_GEN_NORMAL_DOUBLE, 2, 0, 1, BASE);
	gen_call(g, PHOS_RAND_GEN_BITS, 1, 0, 0, BASE);
	CHECK(d[0] == ref[6 + 2 + 4], "after 3 doubles, a normal pair and a double pair: word 12 (%08x, %08x)", d[0],
	      ref[12]);
	/* uniform of word w: w 2^-32 + 2^-33, double of (w0, w1): (w0 ^ w1 << 21) 2^-53 + 2^-54 */
	rnd->set(dev, g, PHOS_RAND_SET_OFFSET, 0, &st);
	gen_call(g, PHOS_RAND_GEN_UNIFORM, 2, 0, 0, BASE);
	float *f = (float *)d;
	CHECK(f[0] == ref[0] * 2.3283064e-10f + 2.3283064e-10f / 2 && f[1] == ref[1] * 2.3283064e-10f + 2.3283064e-10f / 2,
	      "uniform floats of words 0, 1");
	rnd->set(dev, g, PHOS_RAND_SET_OFFSET, 0, &st);
	gen_call(g, PHOS_RAND_GEN_UNIFORM_DOUBLE, 1, 0, 0, BASE);
	double *x = (double *)d;
	uint64_t z = (uint64_t)ref[0] ^ ((uint64_t)ref[1] << 21);
	CHECK(x[0] == (double)z * 1.1102230246251565e-16 + 1.1102230246251565e-16 / 2, "uniform double of words 0, 1");
	/* what the backend refuses */
	CHECK(gen_call(g, PHOS_RAND_GEN_NORMAL, 3, 0, 1, BASE) == PHOS_RAND_LENGTH_NOT_MULTIPLE, "odd normal n");
	CHECK(gen_call(g, PHOS_RAND_GEN_BITS, 4, 0, 0, BASE + SIZE) == PHOS_RAND_LAUNCH_FAILURE, "outside device memory");
	CHECK(gen_call(g, 99, 4, 0, 0, BASE) == PHOS_RAND_OUT_OF_RANGE, "no such kind");
	void *q = NULL;
	CHECK(rnd->create(dev, PHOS_RAND_SOBOL32, &q, &st) == 0 && st == PHOS_RAND_TYPE_ERROR && !q, "Sobol: %d", st);
	rnd->destroy(dev, g);
}

static void test_types_differ(void)
{
	static const int types[] = { PHOS_RAND_XORWOW, PHOS_RAND_MRG32K3A, PHOS_RAND_MTGP32, PHOS_RAND_MT19937,
				     PHOS_RAND_PHILOX4_32_10 };
	uint32_t w[5][8];

	for (int i = 0; i < 5; i++) {
		uint64_t pos = 0;

		phos_rand_sim_fill(types[i], 1, &pos, PHOS_RAND_GEN_BITS, 8, 0, 0, w[i]);
		for (int j = 0; j < i; j++)
			CHECK(memcmp(w[i], w[j], sizeof(w[i])) != 0, "types %d and %d give the same words", types[i],
			      types[j]);
	}
	uint32_t dflt[8];
	uint64_t pos = 0;
	phos_rand_sim_fill(PHOS_RAND_PSEUDO_DEFAULT, 1, &pos, PHOS_RAND_GEN_BITS, 8, 0, 0, dflt);
	CHECK(memcmp(dflt, w[0], sizeof(dflt)) == 0, "PSEUDO_DEFAULT is XORWOW");
}

/* mean and variance of n values read by get(i) */
static void moments(const void *p, int kind, size_t n, double *ret_m, double *ret_v, double *ret_min, double *ret_max)
{
	double m = 0, v = 0, lo = INFINITY, hi = -INFINITY;

	for (size_t i = 0; i < n; i++) {
		double x = phos_rand_esize(kind) == 8 ? ((const double *)p)[i]
			   : kind == PHOS_RAND_GEN_POISSON ? ((const uint32_t *)p)[i]
			   : ((const float *)p)[i];

		if (kind == PHOS_RAND_GEN_LOG_NORMAL || kind == PHOS_RAND_GEN_LOG_NORMAL_DOUBLE)
			x = x > 0 ? log(x) : NAN;
		m += x;
		v += x * x;
		lo = x < lo ? x : lo;
		hi = x > hi ? x : hi;
	}
	m /= (double)n;
	*ret_m = m;
	*ret_v = v / (double)n - m * m;
	*ret_min = lo;
	*ret_max = hi;
}

static void test_distributions(void)
{
	static const struct { int kind; double a, b, mean, var; } cases[] = {
		{ PHOS_RAND_GEN_UNIFORM, 0, 0, 0.5, 1.0 / 12 },
		{ PHOS_RAND_GEN_UNIFORM_DOUBLE, 0, 0, 0.5, 1.0 / 12 },
		{ PHOS_RAND_GEN_NORMAL, 2, 3, 2, 9 },
		{ PHOS_RAND_GEN_NORMAL_DOUBLE, -1, 0.5, -1, 0.25 },
		{ PHOS_RAND_GEN_LOG_NORMAL, 0.5, 0.25, 0.5, 0.0625 },
		{ PHOS_RAND_GEN_LOG_NORMAL_DOUBLE, 0, 1, 0, 1 },
		{ PHOS_RAND_GEN_POISSON, 4, 0, 4, 4 },
		{ PHOS_RAND_GEN_POISSON, 0.25, 0, 0.25, 0.25 },
		{ PHOS_RAND_GEN_POISSON, 3000, 0, 3000, 3000 },
	};
	void *buf = malloc((size_t)NBIG * 8);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint64_t pos = 0;
		double m, v, lo, hi, sd = sqrt(cases[i].var), se = sd / sqrt((double)NBIG);

		CHECK(phos_rand_sim_fill(PHOS_RAND_MRG32K3A, 1000 + i, &pos, cases[i].kind, NBIG, cases[i].a, cases[i].b,
					 buf), "fill case %zu", i);
		moments(buf, cases[i].kind, NBIG, &m, &v, &lo, &hi);
		CHECK(fabs(m - cases[i].mean) < 6 * se && fabs(v / cases[i].var - 1) < 0.02,
		      "case %zu (kind %d): mean %g (want %g), variance %g (want %g)", i, cases[i].kind, m, cases[i].mean,
		      v, cases[i].var);
		if (cases[i].kind == PHOS_RAND_GEN_UNIFORM || cases[i].kind == PHOS_RAND_GEN_UNIFORM_DOUBLE)
			CHECK(lo > 0 && hi <= 1, "uniform kind %d in [%g, %g], not (0, 1]", cases[i].kind, lo, hi);
		if (cases[i].kind == PHOS_RAND_GEN_LOG_NORMAL || cases[i].kind == PHOS_RAND_GEN_LOG_NORMAL_DOUBLE)
			CHECK(!isnan(m), "a log-normal value not positive");
	}
	free(buf);
}

int main(void)
{
	struct phos_reply_rand_version v;
	int st = -1;

	if (ops->open(0, BASE, SIZE, false, &dev) < 0 || ops->map(dev, BASE, MAPPED) < 0) {
		fprintf(stderr, "FAIL: open and map the sim device at %#llx\n", BASE);
		return 1;
	}
	CHECK(rnd->version(dev, &v, &st) == 0 && st == 0 && v.version == 10400 && v.major == 10 && v.minor == 4 &&
	      v.patch == 0, "version %d (%d.%d.%d)", v.version, v.major, v.minor, v.patch);
	test_philox_kat();
	test_philox_order();
	test_positions();
	test_types_differ();
	test_distributions();
	ops->close(dev);
	if (failures)
		fprintf(stderr, "%d failures\n", failures);
	return failures ? 1 : 0;
}
