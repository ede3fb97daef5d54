/* SPDX-License-Identifier: MIT */
/*
 * The PTX access analysis (runtime/kernel/ptx_access.h) on the kernel corpus
 * (access_corpus.cu), through the fatbin parser as the executor sees it:
 *   - every kernel's verdict is the one its name says (exact_* / opaque_*),
 *     and there are at least 40 of them;
 *   - the read and write parameter words of the kernels listed below;
 *   - the same corpus built without PTX: every kernel opaque;
 *   - malformed and mutated PTX: no crash, and never exact by accident for
 *     the synthetic cases.
 *
 *   test_access corpus.fatbin corpus_sass.fatbin corpus.ptx
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kparam.h"
#include "ptx_access.h"

struct want_sets {
	const char *name;
	uint64_t read, write;   /* words 0..63 */
	uint8_t globals;
};

static const struct want_sets want_sets[] = {
	{ "_Z11exact_saxpyifPKfPf", 0x6, 0x4, 0 },             /* x read, y read+written */
	{ "_Z12exact_gatherPKfPKiPf", 0x3, 0x4, 0 },           /* table and idx read, out written */
	{ "_Z13exact_scatterPKfPKiPf", 0x3, 0x4, 0 },
	{ "exact_extern_c", 0x3, 0x1, 0 },                     /* x read+written, y read */
	{ "_Z21exact_struct_by_value4span", 0x1, 0x2, 0 },     /* s.src at +0, s.dst at +8 */
	{ "_Z19exact_nested_struct6nested", 0x2, 0x14, 0 },    /* s.src +8; s.dst +16, aux +32 */
	{ "_Z20exact_atomic_counterPiS_", 0x1, 0x3, 0 },
	{ "_Z21exact_graph_conditionyPi", 0x2, 0x2, 0 },    /* the counter; the handle is no pointer */
	{ "_Z21exact_module_variablePf", 0x0, 0x1, PHOS_ACCESS_READ },
	{ "_Z21exact_constant_coeffsPKfPf", 0x1, 0x2, PHOS_ACCESS_READ },
	/* every pointer word, and k (+320) that indexes them: a harmless extra */
	{ "_Z26exact_struct_pointer_array9wide_ptrsi", 0x0, (1ull << 41) - 1, 0 },
	{ "_Z17exact_many_paramsPKfS0_S0_S0_S0_S0_S0_S0_PfS1_", 0xff, 0x300, 0 },
};

static void check_corpus(const char *path)
{
	struct phos_fatbin *fb = NULL;
	unsigned cubins, ptx, nk, nexact = 0, nopaque = 0;
	size_t len;
	void *buf = check_read_file(path, &len);
	int r = phos_fatbin_parse(buf, len, &fb);

	free(buf);
	CHECK(r == 0, "%s: parse %d", path, r);
	if (r < 0)
		return;
	phos_fatbin_stats(fb, &cubins, &ptx, &nk);
	CHECK(cubins >= 1 && ptx >= 1, "%s: %u cubins, %u PTX", path, cubins, ptx);
	{
		/* the PTX text itself (the validation twins are made from it) */
		char *text = NULL;
		size_t tlen = 0;

		buf = check_read_file(path, &len);
		r = phos_fatbin_ptx(buf, len, &text, &tlen);
		CHECK(r == 0 && text && strlen(text) == tlen && strstr(text, ".entry _Z11exact_saxpyifPKfPf"),
		      "%s: phos_fatbin_ptx %d", path, r);
		free(text);
		free(buf);
	}
	for (size_t i = 0; i < nk; i++) {
		const char *name = phos_fatbin_kernel_name(fb, i);
		struct phos_kernel_info info;
		bool want_exact = strstr(name, "exact_") != NULL;

		CHECK(want_exact || strstr(name, "opaque_"), "%s: kernel %s names no verdict", path, name);
		r = phos_fatbin_kernel(fb, name, &info);
		CHECK(r == 0, "%s: kernel %s: %d", path, name, r);
		if (r < 0)
			continue;
		CHECK((info.access.verdict == PHOS_ACCESS_EXACT) == want_exact, "%s: %s is %s (%s)", path, name,
		      info.access.verdict == PHOS_ACCESS_EXACT ? "exact" : "opaque", info.access.why);
		if (info.access.verdict == PHOS_ACCESS_EXACT) {
			nexact++;
			CHECK(info.access.why[0] == 0, "%s: exact %s has a reason", path, name);
		} else {
			nopaque++;
			CHECK(info.access.why[0] != 0, "%s: opaque %s has no reason", path, name);
			for (unsigned w = 0; w < PHOS_ACCESS_WORDS; w++)
				CHECK(!phos_access_word(info.access.read, w) && !phos_access_word(info.access.write, w),
				      "%s: opaque %s has words", path, name);
		}
		phos_kernel_info_exit(&info);
	}
	CHECK(nexact + nopaque >= 40, "%s: %u kernels, want at least 40", path, nexact + nopaque);
	CHECK(nexact >= 20 && nopaque >= 15, "%s: %u exact, %u opaque", path, nexact, nopaque);
	printf("corpus: %u kernels, %u exact, %u opaque\n", nexact + nopaque, nexact, nopaque);

	for (size_t i = 0; i < sizeof(want_sets) / sizeof(want_sets[0]); i++) {
		const struct want_sets *w = &want_sets[i];
		struct phos_kernel_info info;

		r = phos_fatbin_kernel(fb, w->name, &info);
		CHECK(r == 0, "%s: %d", w->name, r);
		if (r < 0)
			continue;
		CHECK(info.access.read[0] == w->read && info.access.write[0] == w->write,
		      "%s: read %#llx write %#llx, want %#llx %#llx", w->name,
		      (unsigned long long)info.access.read[0], (unsigned long long)info.access.write[0],
		      (unsigned long long)w->read, (unsigned long long)w->write);
		for (unsigned k = 1; k < PHOS_ACCESS_WORDS / 64; k++)
			CHECK(!info.access.read[k] && !info.access.write[k], "%s: words past 64", w->name);
		CHECK(info.access.globals == w->globals, "%s: globals %u, want %u", w->name, info.access.globals,
		      w->globals);
		phos_kernel_info_exit(&info);
	}
	phos_fatbin_free(fb);
}

/* Built without PTX: nothing to analyse, every kernel opaque. */
static void check_sass_only(const char *path)
{
	struct phos_fatbin *fb = NULL;
	unsigned cubins, ptx, nk;
	size_t len;
	void *buf = check_read_file(path, &len);
	int r = phos_fatbin_parse(buf, len, &fb);

	free(buf);
	CHECK(r == 0, "%s: parse %d", path, r);
	if (r < 0)
		return;
	phos_fatbin_stats(fb, &cubins, &ptx, &nk);
	CHECK(ptx == 0 && nk >= 40, "%s: %u PTX, %u kernels", path, ptx, nk);
	{
		char *text = NULL;
		size_t tlen;

		buf = check_read_file(path, &len);
		CHECK(phos_fatbin_ptx(buf, len, &text, &tlen) == -ENOENT && !text, "%s: PTX found in a SASS-only build",
		      path);
		free(buf);
	}
	for (size_t i = 0; i < nk; i++) {
		struct phos_kernel_info info;

		if (phos_fatbin_kernel(fb, phos_fatbin_kernel_name(fb, i), &info) < 0)
			continue;
		CHECK(info.access.verdict == PHOS_ACCESS_OPAQUE && strstr(info.access.why, "no PTX"),
		      "%s: %s without PTX: verdict %u (%s)", path, info.name, info.access.verdict, info.access.why);
		phos_kernel_info_exit(&info);
	}
	phos_fatbin_free(fb);
}

struct one_result {
	int n;
	struct phos_kernel_access acc;
};

static int keep_first(void *ctx, const char *name, size_t len, const struct phos_kernel_access *acc)
{
	struct one_result *res = ctx;

	(void)name;
	(void)len;
	if (res->n++ == 0)
		res->acc = *acc;
	return 0;
}

static struct one_result analyse_text(const char *text)
{
	struct one_result res = { 0 };
	int r = phos_ptx_analyze(text, strlen(text), keep_first, &res);

	CHECK(r == 0, "analyze: %d", r);
	return res;
}

/* Hand-written PTX: what nvcc does not emit today but other front ends may. */
static void check_synthetic(void)
{
	struct one_result r;

	r = analyse_text(".visible .entry k(.param .u64 k_p0) {\n .reg .b64 %rd<4>;\n"
			 " ld.param.u64 %rd1, [k_p0];\n cvta.to.global.u64 %rd2, %rd1;\n"
			 " st.global.u32 [%rd2+4], 7;\n ret;\n}\n");
	CHECK(r.n == 1 && r.acc.verdict == PHOS_ACCESS_EXACT && r.acc.write[0] == 1, "plain store: %u %s",
	      r.acc.verdict, r.acc.why);

	/* an unknown memory-looking instruction */
	r = analyse_text(".visible .entry k(.param .u64 k_p0) {\n .reg .b64 %rd<4>;\n"
			 " ld.param.u64 %rd1, [k_p0];\n frobnicate.global.u32 %r1, [%rd1];\n ret;\n}\n");
	CHECK(r.n == 1 && r.acc.verdict == PHOS_ACCESS_OPAQUE, "unknown memory instruction is exact");

	/* a loop that carries a loaded pointer back into its own address */
	r = analyse_text(".visible .entry k(.param .u64 k_p0) {\n .reg .b64 %rd<4>;\n .reg .pred %p<2>;\n"
			 " ld.param.u64 %rd1, [k_p0];\n$L1:\n ld.global.u64 %rd2, [%rd1];\n"
			 " mov.b64 %rd1, %rd2;\n setp.ne.s64 %p1, %rd1, 0;\n @%p1 bra $L1;\n ret;\n}\n");
	CHECK(r.n == 1 && r.acc.verdict == PHOS_ACCESS_OPAQUE, "loop-carried pointer is exact");

	/* a 64-bit index: may be an address */
	r = analyse_text(".visible .entry k(.param .u64 k_p0, .param .u64 k_p1) {\n .reg .b64 %rd<8>;\n"
			 " ld.param.u64 %rd1, [k_p0];\n ld.param.u64 %rd2, [k_p1];\n"
			 " ld.global.u64 %rd3, [%rd2];\n add.s64 %rd4, %rd1, %rd3;\n"
			 " st.global.u32 [%rd4], 1;\n ret;\n}\n");
	CHECK(r.n == 1 && r.acc.verdict == PHOS_ACCESS_OPAQUE, "64-bit loaded offset is exact");

	/* a 32-bit index shifted into the high half */
	r = analyse_text(".visible .entry k(.param .u64 k_p0) {\n .reg .b64 %rd<8>;\n .reg .b32 %r<4>;\n"
			 " ld.param.u64 %rd1, [k_p0];\n ld.global.u32 %r1, [%rd1];\n"
			 " cvt.u64.u32 %rd2, %r1;\n shl.b64 %rd3, %rd2, 32;\n add.s64 %rd4, %rd1, %rd3;\n"
			 " st.global.u32 [%rd4], 1;\n ret;\n}\n");
	CHECK(r.n == 1 && r.acc.verdict == PHOS_ACCESS_OPAQUE, "index << 32 is exact");

	/* truncated and garbage input: a verdict, never a crash, never exact */
	r = analyse_text(".visible .entry k(.param .u64 k_p0) {\n ld.param.u64 %rd1, [k_p0");
	CHECK(r.n <= 1 && (r.n == 0 || r.acc.verdict == PHOS_ACCESS_OPAQUE), "truncated body is exact");
	r = analyse_text(".entry k( {{{{ ]]]] ;;; .entry");
	CHECK(r.n <= 1 && (r.n == 0 || r.acc.verdict == PHOS_ACCESS_OPAQUE), "garbage is exact");
}

static int count_only(void *ctx, const char *name, size_t len, const struct phos_kernel_access *acc)
{
	(void)name;
	(void)len;
	(void)acc;
	++*(int *)ctx;
	return 0;
}

/* Seeded mutations of the corpus' PTX: bytes flipped, deleted and duplicated.
 * The analysis must return (ASan/UBSan run this in CI). */
static void check_mutations(const char *path)
{
	size_t len;
	char *text = check_read_file(path, &len), *m = malloc(len * 2 + 64);
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	int total = 0;

	if (!m)
		exit(1);
	for (int round = 0; round < 60; round++) {
		size_t n = len;

		memcpy(m, text, len);
		for (int k = 0; k < 1 + round % 8; k++) {
			size_t at;

			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			at = (size_t)(seed >> 33) % n;
			switch ((seed >> 20) % 4) {
			case 0:
				m[at] = "{}[];,.%+-0 \n"[(seed >> 8) % 13];
				break;
			case 1:
				memmove(m + at, m + at + 1, n - at - 1);
				n--;
				break;
			case 2:
				if (n + 32 < len * 2 + 64) {
					size_t k2 = 1 + (seed >> 40) % 31;

					memmove(m + at + k2, m + at, n - at);
					n += k2;
				}
				break;
			default:
				n = at + 1;      /* truncated */
				break;
			}
		}
		CHECK(phos_ptx_analyze(m, n, count_only, &total) == 0, "mutation %d", round);
	}
	printf("mutations: 60 rounds, %d entries reported\n", total);
	free(m);
	free(text);
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: %s corpus.fatbin corpus_sass.fatbin corpus.ptx\n", argv[0]);
		return 1;
	}
	check_corpus(argv[1]);
	check_sass_only(argv[2]);
	check_synthetic();
	check_mutations(argv[3]);
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("access: all checks passed\n");
	return 0;
}
