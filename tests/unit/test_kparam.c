/* SPDX-License-Identifier: MIT */
/*
 * Kernel metadata: fatbin parsing (cubin .nv.info, PTX, LZ4), the demangler,
 * and malformed input (truncations, byte flips, huge sizes, garbage).
 *
 * argv: the fatbins meson builds from kernels.cu, in this order:
 *   kernels.fatbin       nvcc's default: plain cubin, zstd-compressed PTX
 *   kernels_lz4.fatbin   cubin and PTX LZ4-compressed (--compress-mode=speed)
 *   kernels_ptx.fatbin   PTX only, not compressed
 *   kernels_zstd.fatbin  cubin and PTX zstd-compressed (-compress-all), read like the others
 * Only the first is required.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kparam.h"

#include "check.h"

enum { S = PHOS_PARAM_SCALAR, C = PHOS_PARAM_CONST_PTR, P = PHOS_PARAM_PTR, O = PHOS_PARAM_OPAQUE };

struct expect_param { uint16_t offset, size; uint8_t kind; };
struct expect_kernel {
	const char *name;
	unsigned nparams, param_bytes;
	struct expect_param p[4];
};

static const struct expect_kernel kernels[] = {
	{ "_Z7vec_addPKfS0_Pfi", 4, 28, { { 0, 8, C }, { 8, 8, C }, { 16, 8, P }, { 24, 4, S } } },
	{ "_Z9fill_span4spanf", 2, 20, { { 0, 16, O }, { 16, 4, S } } },
	{ "c_copy", 3, 24, { { 0, 8, O }, { 8, 8, O }, { 16, 8, O } } },
	{ "_Z4axpyIfEvPKT_PS0_S0_i", 4, 24, { { 0, 8, C }, { 8, 8, P }, { 16, 4, S }, { 20, 4, S } } },
	{ "_Z5sum_vIfEv3vecIT_EPKS2_", 2, 24, { { 0, 16, O }, { 16, 8, C } } },
	{ "_ZN9phos_test5scaleEPffi", 3, 16, { { 0, 8, P }, { 8, 4, S }, { 12, 4, S } } },
	{ "_Z5mixedcdsPi", 4, 32, { { 0, 1, S }, { 8, 8, S }, { 16, 2, S }, { 24, 8, P } } },
	{ "_Z9no_paramsv", 0, 0, { { 0, 0, 0 } } },
	{ "_Z7big_midPKf8block20kdPf", 4, 20024, { { 0, 8, C }, { 8, 20000, O }, { 20008, 8, S }, { 20016, 8, P } } },
	{ "_Z7big_max8block32kPi", 2, 32760, { { 0, 32752, O }, { 32752, 8, P } } },
};
#define NKERNELS (sizeof(kernels) / sizeof(kernels[0]))
#define MANY_NAME "_Z4manyiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiii"

static int read_file(const char *path, uint8_t **ret_buf, size_t *ret_len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long len;

	if (!f)
		return -errno;
	if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (buf = malloc((size_t)len)) && fread(buf, 1, (size_t)len, f) == (size_t)len) {
		fclose(f);
		*ret_buf = buf;
		*ret_len = (size_t)len;
		return 0;
	}
	free(buf);
	fclose(f);
	return -EIO;
}

static void check_kernel(const char *what, const struct phos_fatbin *fb, const struct expect_kernel *e)
{
	struct phos_kernel_info info;
	int r = phos_fatbin_kernel(fb, e->name, &info);

	CHECK(r == 0, "%s: %s: phos_fatbin_kernel = %d", what, e->name, r);
	if (r < 0)
		return;
	CHECK(info.name && !strcmp(info.name, e->name), "%s: %s: name %s", what, e->name, info.name);
	CHECK(info.nparams == e->nparams, "%s: %s: nparams %u, want %u", what, e->name, info.nparams, e->nparams);
	CHECK(info.param_bytes == e->param_bytes, "%s: %s: param_bytes %u, want %u", what, e->name,
	      info.param_bytes, e->param_bytes);
	for (unsigned i = 0; i < e->nparams && i < info.nparams; i++) {
		const struct phos_kparam *p = &info.params[i];

		CHECK(p->offset == e->p[i].offset && p->size == e->p[i].size && p->kind == e->p[i].kind,
		      "%s: %s: param %u is offset %u size %u kind %u, want %u %u %u", what, e->name, i,
		      p->offset, p->size, p->kind, e->p[i].offset, e->p[i].size, e->p[i].kind);
	}
	phos_kernel_info_exit(&info);
}

/* One of the fatbins meson built; want_*: expected stats, all: every kernel there. */
static void check_fatbin(const char *path, unsigned want_cubins, unsigned want_ptx, bool all)
{
	struct phos_fatbin *fb = NULL;
	struct phos_kernel_info info;
	unsigned cubins, ptx, nk;
	uint8_t *buf;
	size_t len;
	int r;

	r = read_file(path, &buf, &len);
	CHECK(r == 0, "%s: cannot read: %s", path, strerror(-r));
	if (r < 0)
		return;
	CHECK(phos_fatbin_size(buf, len) == len, "%s: phos_fatbin_size %zu, want %zu", path,
	      phos_fatbin_size(buf, len), len);
	CHECK(phos_fatbin_size(buf, len - 1) == 0, "%s: phos_fatbin_size with a short max", path);
	r = phos_fatbin_parse(buf, len, &fb);
	CHECK(r == 0, "%s: phos_fatbin_parse = %d", path, r);
	free(buf);      /* the parser copies what it needs */
	if (r < 0)
		return;
	phos_fatbin_stats(fb, &cubins, &ptx, &nk);
	CHECK(cubins == want_cubins && ptx == want_ptx, "%s: %u cubins %u ptx, want %u %u", path, cubins,
	      ptx, want_cubins, want_ptx);
	CHECK(nk == (all ? NKERNELS + 1 : 0), "%s: %u kernels", path, nk);
	if (all) {
		for (size_t i = 0; i < NKERNELS; i++)
			check_kernel(path, fb, &kernels[i]);
		r = phos_fatbin_kernel(fb, MANY_NAME, &info);
		CHECK(r == -E2BIG, "%s: many: %d, want -E2BIG", path, r);
		r = phos_fatbin_kernel(fb, "_Z7missingv", &info);
		CHECK(r == -ENOENT, "%s: a missing kernel: %d, want -ENOENT", path, r);
	} else {
		/* every entry is zstd: the kernel may be there, ask the driver */
		r = phos_fatbin_kernel(fb, kernels[0].name, &info);
		CHECK(r == -EOPNOTSUPP, "%s: kernel in zstd entries: %d, want -EOPNOTSUPP", path, r);
	}
	phos_fatbin_free(fb);
}

/* __fatBinC_Wrapper_t in front of the fatbin, its data pointer inside the blob or not. */
static void check_wrapper(const char *path)
{
	struct phos_fatbin *fb = NULL;
	uint8_t *buf, *blob;
	uint64_t ptr;
	uint32_t hdr[2] = { 0x466243B1u, 1 };
	size_t len;
	int r;

	if (read_file(path, &buf, &len) < 0)
		return;
	blob = calloc(1, len + 24);
	if (!blob) {
		free(buf);
		return;
	}
	memcpy(blob, hdr, 8);
	ptr = (uint64_t)(uintptr_t)(blob + 24);
	memcpy(blob + 8, &ptr, 8);
	memcpy(blob + 24, buf, len);
	r = phos_fatbin_parse(blob, len + 24, &fb);
	CHECK(r == 0, "wrapper: parse = %d", r);
	if (r == 0)
		check_kernel("wrapper", fb, &kernels[0]);
	phos_fatbin_free(fb);
	ptr = (uint64_t)(uintptr_t)buf;         /* outside [blob, blob+len) */
	memcpy(blob + 8, &ptr, 8);
	fb = NULL;
	r = phos_fatbin_parse(blob, len + 24, &fb);
	CHECK(r == -EINVAL && !fb, "wrapper pointing outside: %d, want -EINVAL", r);
	free(blob);
	free(buf);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* Parses a private copy of exactly len bytes (so that ASan and valgrind see any
 * over-read), queries every kernel, and checks the error is one of the contract's. */
static int parse_copy(const char *what, const uint8_t *data, size_t len)
{
	uint8_t *copy = malloc(len ? len : 1);
	struct phos_fatbin *fb = NULL;
	int r;

	if (!copy)
		return -ENOMEM;
	memcpy(copy, data, len);
	(void)phos_fatbin_size(copy, len);
	r = phos_fatbin_parse(copy, len, &fb);
	free(copy);
	CHECK(r == 0 || r == -EINVAL || r == -EBADMSG || r == -E2BIG, "%s: len %zu: unexpected %d", what, len, r);
	CHECK((r == 0) == (fb != NULL), "%s: len %zu: ret_fb with %d", what, len, r);
	if (r == 0) {
		struct phos_kernel_info info;

		for (size_t i = 0; i < NKERNELS; i++)
			if (phos_fatbin_kernel(fb, kernels[i].name, &info) == 0) {
				CHECK(info.nparams <= PHOS_MAX_PARAMS, "%s: nparams %u", what, info.nparams);
				phos_kernel_info_exit(&info);
			}
		phos_fatbin_free(fb);
	}
	return r;
}

static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static void check_malformed(const char *path)
{
	uint8_t *buf, *m;
	size_t len;
	int r;

	if (read_file(path, &buf, &len) < 0)
		return;
	m = malloc(len);
	if (!m) {
		free(buf);
		return;
	}
	/* truncated at every length: the header's size no longer fits */
	for (size_t l = 0; l < len; l++) {
		r = parse_copy("truncated", buf, l);
		CHECK(r < 0, "%s truncated to %zu bytes: parse = %d", path, l, r);
	}
	/* truncated, the header patched to agree: the entries themselves are cut */
	for (size_t l = 16; l < len; l++) {
		memcpy(m, buf, l);
		put64(m + 8, l - 16);
		parse_copy("truncated+patched", m, l);
	}
	/* random byte flips, biased towards the headers */
	for (int i = 0; i < 4000; i++) {
		int nflips = 1 + (int)(rng() % 4);

		memcpy(m, buf, len);
		for (int j = 0; j < nflips; j++) {
			size_t at = (i & 1) ? rng() % len : rng() % (len < 512 ? len : 512);

			m[at] ^= (uint8_t)(1 + rng() % 255);
		}
		parse_copy("flipped", m, len);
	}
	/* sizes claimed huge */
	memcpy(m, buf, len);
	put64(m + 8, UINT64_MAX);
	CHECK(parse_copy("huge fatbin", m, len) == -EBADMSG, "a fatbin claiming 2^64 bytes");
	CHECK(phos_fatbin_size(m, len) == 0, "phos_fatbin_size of a fatbin claiming 2^64 bytes");
	put64(m + 8, len - 15);
	CHECK(parse_copy("one byte over", m, len) == -EBADMSG, "a fatbin claiming one byte too many");
	memcpy(m, buf, len);
	put64(m + 16 + 8, UINT64_MAX);          /* the first entry's payload size */
	CHECK(parse_copy("huge entry", m, len) == -EBADMSG, "an entry claiming 2^64 bytes");
	memcpy(m, buf, len);
	put64(m + 16 + 40, 0x2011);             /* LZ4 flag on an entry... */
	put64(m + 16 + 56, 1ull << 40);         /* ...decompressing to 1 TiB */
	CHECK(parse_copy("huge lz4", m, len) == -EBADMSG, "an LZ4 entry of 1 TiB");
	/* garbage, with and without a valid magic */
	for (int i = 0; i < 2000; i++) {
		size_t l = rng() % 2048;

		for (size_t j = 0; j < l; j++)
			m[j] = (uint8_t)rng();
		if (i & 1 && l >= 16) {
			memcpy(m, buf, 8);
			put64(m + 8, l - 16);
		}
		r = parse_copy("garbage", m, l);
		CHECK(r < 0 || (i & 1), "garbage of %zu bytes parsed", l);
	}
	CHECK(phos_fatbin_size(NULL, 100) == 0 && phos_fatbin_size("xyz", 3) == 0, "phos_fatbin_size of junk");
	free(m);
	free(buf);
}

/* A hand-written PTX entry: comments, .ptr qualifiers, an aligned array. */
static void check_ptx_synthetic(void)
{
	static const char ptx[] =
		"// .entry commented_out(\n"
		"/* .entry also_commented_out( */\n"
		".version 9.0\n.target sm_90\n.address_size 64\n"
		".visible .entry _Z3ptxPKfPf4spanc(\n"
		"\t.param .u64 .ptr .global .align 4 _Z3ptxPKfPf4spanc_param_0,\n"
		"\t.param .u64 .ptr .align 16 _Z3ptxPKfPf4spanc_param_1,\n"
		"\t.param .align 16 .b8 _Z3ptxPKfPf4spanc_param_2[24],\n"
		"\t.param .u8 _Z3ptxPKfPf4spanc_param_3\n"
		")\n{\n\tret;\n}\n"
		".entry plain_c(.param .u32 a, .param .f64 b)\n{ ret; }\n";
	static const struct expect_kernel want[] = {
		{ "_Z3ptxPKfPf4spanc", 4, 41, { { 0, 8, C }, { 8, 8, P }, { 16, 24, O }, { 40, 1, S } } },
		{ "plain_c", 2, 16, { { 0, 4, O }, { 8, 8, O } } },
	};
	uint8_t blob[16 + 64 + sizeof(ptx) + 8] = { 0 };
	size_t plen = (sizeof(ptx) + 7) & ~(size_t)7;
	uint32_t magic = 0xBA55ED50u, ehsize = 64;
	uint16_t version = 1, hsize = 16, kind = 1;
	struct phos_fatbin *fb = NULL;
	struct phos_kernel_info info;
	unsigned cubins, nptx, nk;
	int r;

	memcpy(blob, &magic, 4);
	memcpy(blob + 4, &version, 2);
	memcpy(blob + 6, &hsize, 2);
	put64(blob + 8, 64 + plen);
	memcpy(blob + 16, &kind, 2);
	memcpy(blob + 16 + 4, &ehsize, 4);
	put64(blob + 16 + 8, plen);
	memcpy(blob + 16 + 64, ptx, sizeof(ptx));
	r = phos_fatbin_parse(blob, 16 + 64 + plen, &fb);
	CHECK(r == 0, "synthetic PTX: parse = %d", r);
	if (r < 0)
		return;
	phos_fatbin_stats(fb, &cubins, &nptx, &nk);
	CHECK(cubins == 0 && nptx == 1 && nk == 2, "synthetic PTX: %u cubins %u ptx %u kernels", cubins, nptx, nk);
	for (size_t i = 0; i < 2; i++)
		check_kernel("synthetic PTX", fb, &want[i]);
	CHECK(phos_fatbin_kernel(fb, "commented_out", &info) == -ENOENT, "synthetic PTX: a commented-out entry");
	phos_fatbin_free(fb);
	for (size_t l = 16; l < 16 + 64 + plen; l++) {   /* cut inside the text */
		uint8_t *m = malloc(l);

		if (!m)
			break;
		memcpy(m, blob, l);
		put64(m + 8, l - 16);
		if (l >= 16 + 64)
			put64(m + 16 + 8, l - 16 - 64);
		parse_copy("synthetic PTX cut", m, l);
		free(m);
	}
}

struct demangle_case {
	const char *name;
	int n;                  /* parameters, or -errno */
	uint8_t kinds[8];
};

static const struct demangle_case demangle_cases[] = {
	{ "_Z7vec_addPKfPfi", 3, { C, P, S } },
	{ "_Z7vec_addPKfS0_Pfi", 4, { C, C, P, S } },   /* S_ = const float, S0_ = const float* */
	{ "_Z3fooPfS_", 2, { P, P } },                  /* S_ = float* (builtins are no candidates) */
	{ "_Z3barPKfS_", 2, { C, S } },                 /* S_ = const float, by value */
	{ "_Z3barPKff", 2, { C, S } },
	{ "_Z2f6PfPKfS_S1_", 4, { P, C, P, C } },
	{ "_Z2f1PK1SPS_S_1EPKS3_", 5, { C, P, O, O, C } },
	{ "_Z2f2PSt6vectorIiSaIiEEPKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEES8_", 3, { P, C, O } },
	{ "_Z2f3PfPVKiPKPiPKPKi", 4, { P, C, C, C } },
	{ "_Z2f4PFviEM1SiRA4_f", 3, { P, O, O } },
	{ "_Z2f5yneDsDnDF16_wb", 8, { S, S, S, S, S, S, S, S } },
	{ "_Z1hPDhS_DhPKDF16b", 4, { P, P, S, C } },
	{ "_Z6kernelIfEvPKT_PS0_i", 3, { C, P, S } },
	{ "_Z4axpyIfEvPKT_PS0_S0_i", 4, { C, P, S, S } },
	{ "_Z2tkIdEvPKT_PS0_S0_i", 4, { C, P, S, S } },
	{ "_Z2ntILi3EfEvPT0_PKS0_", 2, { P, C } },
	{ "_Z2tkI1SEvPKT_PS1_S1_", 3, { C, P, O } },    /* T = S, a class: by value opaque */
	{ "_Z2tkIPfEvT_PKS0_", 2, { P, C } },           /* T = float*: PKS0_ = float* const* */
	{ "_Z2vkIJiPfPKcEEvDpT_", 3, { S, P, C } },
	{ "_Z3vkpIJifEEvDpPKT_", 2, { C, C } },
	{ "_Z2vkIJEEvDpT_", 0, { 0 } },
	{ "_Z3lamIZ6uselamvEUliE_EvT_", 1, { O } },
	{ "_Z5applyIZ4mainEUliE_EvT_i", 2, { O, S } },
	{ "_Z2vkIfEv3VecIT_EPKS2_", 2, { O, C } },
	{ "_ZN2ns3fooEPf", 1, { P } },
	{ "_ZN2ns3fooEPNS_1TEPKS0_S0_", 3, { P, C, O } },
	{ "_ZN3ns22in1gIiEEvPT_PKS2_PNS_2W2E", 3, { P, C, P } },
	{ "_ZN1WIiE1mIfEEvPiPT_", 2, { P, P } },
	{ "_ZN12_GLOBAL__N_14anonEPf", 1, { P } },
	{ "_ZL6staticPf", 1, { P } },
	{ "_Z1kPU3AS1fPKU3AS3f", 2, { P, C } },
	{ "_Z1kPrfPVf", 2, { P, P } },
	{ "_Z1kPKcPKS_", 2, { C, C } },                 /* S_ = const char; PKS_ = const char* const* */
	{ "_Z1k4spanPS_RKS_", 3, { O, P, O } },
	{ "_Z1k6float4PKS_", 2, { O, C } },
	{ "_Z1k6Kind_t", 1, { O } },                    /* an enum: opaque, we cannot tell */
	{ "_Z1kSt6vectorIiSaIiEE", 1, { O } },
	{ "_Z9no_paramsv", 0, { 0 } },
	{ "_Z4testv.cold", 0, { 0 } },
	{ "_Z1kIiEvT0_", 1, { O } },                    /* T0_ unknown: opaque */
	/* extern "C" */
	{ "vec_add", -ENOENT, { 0 } },
	{ "", -ENOENT, { 0 } },
	{ "_vec", -ENOENT, { 0 } },
	/* malformed or unsupported */
	{ "_Z", -EINVAL, { 0 } },
	{ "_Z3fo", -EINVAL, { 0 } },
	{ "_Z3foo", -EINVAL, { 0 } },
	{ "_Z3fooP", -EINVAL, { 0 } },
	{ "_Z3fooPfS0_", -EINVAL, { 0 } },
	{ "_Z3foovi", -EINVAL, { 0 } },
	{ "_Z3fooiv", -EINVAL, { 0 } },
	{ "_Z3foo!", -EINVAL, { 0 } },
	{ "_Z999999999foov", -EINVAL, { 0 } },
	{ "_ZN3fooE", -EINVAL, { 0 } },
	{ "_ZN3fooEi", 1, { S } },
	{ "_ZN3foo", -EINVAL, { 0 } },
	{ "_ZNS_3fooEi", -EINVAL, { 0 } },
	{ "_Z1fIiEvDTfp_E", -EINVAL, { 0 } },
	{ "_Z1fIiEvT_IT_E", 1, { O } },               /* template template parameter */
	{ "_ZTV3Foo", -EINVAL, { 0 } },
	{ "_Z1fDpT_", -EINVAL, { 0 } },
	{ "_Z1fSZ_", -EINVAL, { 0 } },
};

static void check_demangle(void)
{
	char deep[600], buf[64];
	uint8_t kinds[PHOS_MAX_PARAMS];

	for (size_t i = 0; i < sizeof(demangle_cases) / sizeof(demangle_cases[0]); i++) {
		const struct demangle_case *c = &demangle_cases[i];
		int n;

		memset(kinds, 0xff, sizeof(kinds));
		n = phos_demangle_params(c->name, kinds, PHOS_MAX_PARAMS);
		CHECK(n == c->n, "demangle %s = %d, want %d", c->name, n, c->n);
		for (int j = 0; n == c->n && j < n && j < 8; j++)
			CHECK(kinds[j] == c->kinds[j], "demangle %s: param %d kind %u, want %u", c->name, j,
			      kinds[j], c->kinds[j]);
	}
	/* max bounds the writes; the count is still the total */
	memset(kinds, 0xff, sizeof(kinds));
	CHECK(phos_demangle_params("_Z7vec_addPKfPfi", kinds, 1) == 3 && kinds[0] == C && kinds[1] == 0xff,
	      "demangle with max 1");
	CHECK(phos_demangle_params(MANY_NAME, kinds, PHOS_MAX_PARAMS) == 65, "demangle 65 parameters");
	CHECK(phos_demangle_params(NULL, kinds, 4) == -EINVAL, "demangle NULL");

	/* bounded recursion: 500 nested pointers */
	memcpy(deep, "_Z1f", 4);
	memset(deep + 4, 'P', 500);
	strcpy(deep + 504, "f");
	CHECK(phos_demangle_params(deep, kinds, PHOS_MAX_PARAMS) == -EINVAL, "500 nested pointers");
	/* 150 nested template arguments: 1AI1AI...iE...E */
	for (int i = 0; i < 150; i++)
		memcpy(deep + 4 + 3 * i, "1AI", 3);
	deep[454] = 'i';
	memset(deep + 455, 'E', 140);
	deep[595] = '\0';
	CHECK(phos_demangle_params(deep, kinds, PHOS_MAX_PARAMS) == -EINVAL, "150 nested template arguments");

	/* random mangled-looking strings: must not crash */
	for (int i = 0; i < 20000; i++) {
		static const char alphabet[] = "_Z0123456789NEIPKRVSTLDpfivcJXadhrU";
		size_t l = 2 + rng() % 40;

		memcpy(deep, "_Z", 2);
		for (size_t j = 2; j < l; j++)
			deep[j] = alphabet[rng() % (sizeof(alphabet) - 1)];
		deep[l] = '\0';
		(void)phos_demangle_params(deep, kinds, PHOS_MAX_PARAMS);
		(void)phos_demangle_basename(deep, buf, sizeof(buf));
	}

	CHECK(!strcmp(phos_demangle_basename("_Z7vec_addPKfPfi", buf, sizeof(buf)), "vec_add"), "basename %s", buf);
	CHECK(!strcmp(phos_demangle_basename("_ZN9phos_test5scaleEPffi", buf, sizeof(buf)), "scale"), "basename %s", buf);
	CHECK(!strcmp(phos_demangle_basename("_Z4axpyIfEvPKT_PS0_S0_i", buf, sizeof(buf)), "axpy"), "basename %s", buf);
	CHECK(!strcmp(phos_demangle_basename("c_copy", buf, sizeof(buf)), "c_copy"), "basename %s", buf);
	CHECK(!strcmp(phos_demangle_basename("_Z7vec_addPKfPfi", buf, 4), "vec"), "basename truncated %s", buf);
}

/* Parses a private copy of a module image of any kind (cuModuleLoadData's
 * input): the contract's errors only, never a crash or an over-read. */
static int modimage_copy(const char *what, const uint8_t *data, size_t len)
{
	uint8_t *copy = malloc(len ? len : 1);
	struct phos_fatbin *fb = NULL;
	int r;

	if (!copy)
		return -ENOMEM;
	memcpy(copy, data, len);
	(void)phos_modimage_kind(copy, len);
	(void)phos_modimage_size(copy, len);
	r = phos_modimage_parse(copy, len, &fb);
	free(copy);
	CHECK(r == 0 || r == -EINVAL || r == -EBADMSG || r == -E2BIG, "%s: len %zu: unexpected %d", what, len, r);
	CHECK((r == 0) == (fb != NULL), "%s: len %zu: ret_fb with %d", what, len, r);
	phos_fatbin_free(fb);
	return r;
}

/* A cubin and PTX text as the driver API takes them, taken out of the fatbin:
 * their kind, size and kernels, then truncated and corrupted. */
static void check_modimage(const char *path)
{
	size_t len = 0, ptx_len = 0, off;
	uint8_t *buf = NULL;
	const uint8_t *cubin = NULL;
	uint64_t cubin_len = 0;
	char *ptx = NULL;
	struct phos_fatbin *fb = NULL;
	unsigned nk = 0;

	if (read_file(path, &buf, &len) < 0)
		return;
	/* the first uncompressed ELF entry (fatbin layout: kparam.c) */
	for (off = 16; off + 64 <= len;) {
		uint32_t hsize;
		uint64_t psize, flags;

		memcpy(&hsize, buf + off + 4, 4);
		memcpy(&psize, buf + off + 8, 8);
		memcpy(&flags, buf + off + 40, 8);
		if (hsize < 64 || psize > len - off - hsize)
			break;
		if (buf[off] == 2 && !(flags & 0xa000u)) {
			cubin = buf + off + hsize;
			cubin_len = psize;
			break;
		}
		off += hsize + psize;
	}
	CHECK(cubin && phos_modimage_kind(cubin, cubin_len) == PHOS_MODIMAGE_CUBIN, "%s: no plain cubin", path);
	if (cubin) {
		size_t size = phos_modimage_size(cubin, cubin_len);

		/* the payload is padded to 8 bytes: the ELF ends within the last 8 */
		CHECK(size && size <= cubin_len && cubin_len - size < 8, "cubin size %zu of a %llu-byte entry", size,
		      (unsigned long long)cubin_len);
		CHECK(phos_modimage_parse(cubin, cubin_len, &fb) == 0, "the cubin does not parse");
		phos_fatbin_stats(fb, NULL, NULL, &nk);
		CHECK(nk == NKERNELS + 1, "the cubin has %u kernels, want %zu", nk, NKERNELS + 1);
		phos_fatbin_free(fb);
		fb = NULL;
		for (size_t n = 0; n < cubin_len; n += 1 + n / 8)
			modimage_copy("truncated cubin", cubin, n);
		for (int i = 0; i < 300; i++) {
			uint8_t *c = malloc(cubin_len);

			memcpy(c, cubin, cubin_len);
			c[4 + rng() % (cubin_len - 4)] ^= (uint8_t)(1u << (rng() % 8));
			modimage_copy("corrupted cubin", c, cubin_len);
			free(c);
		}
	}
	CHECK(phos_fatbin_ptx(buf, len, &ptx, &ptx_len) == 0, "%s: no PTX", path);
	if (ptx) {
		CHECK(phos_modimage_kind(ptx, ptx_len + 1) == PHOS_MODIMAGE_PTX, "PTX text not recognised");
		CHECK(phos_modimage_size(ptx, ptx_len + 1) == ptx_len + 1, "PTX size without its NUL");
		CHECK(phos_modimage_size(ptx, ptx_len) == 0, "PTX without a NUL within max has a size");
		CHECK(phos_modimage_parse(ptx, ptx_len + 1, &fb) == 0, "the PTX does not parse");
		phos_fatbin_stats(fb, NULL, NULL, &nk);
		CHECK(nk == NKERNELS + 1, "the PTX has %u kernels, want %zu", nk, NKERNELS + 1);
		phos_fatbin_free(fb);
		fb = NULL;
		CHECK(modimage_copy("PTX without its NUL", (const uint8_t *)ptx, ptx_len) == -EBADMSG,
		      "PTX without its NUL parsed");
		for (size_t n = 0; n < ptx_len; n += 1 + n / 8) {
			char *t = malloc(n + 1);

			memcpy(t, ptx, n);
			t[n] = '\0';
			modimage_copy("truncated PTX", (const uint8_t *)t, n + 1);
			free(t);
		}
		free(ptx);
	}
	CHECK(modimage_copy("junk", (const uint8_t *)"not a module, just some text", 29) == -EINVAL,
	      "junk is an image");
	free(buf);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s kernels.fatbin [lz4.fatbin ptx.fatbin zstd.fatbin]\n", argv[0]);
		return 1;
	}
	check_demangle();
	check_ptx_synthetic();
	check_fatbin(argv[1], 1, 1, true);      /* zstd PTX is read too */
	check_wrapper(argv[1]);
	check_malformed(argv[1]);
	check_modimage(argv[1]);
	if (argc > 2) {
		check_fatbin(argv[2], 1, 1, true);
		check_malformed(argv[2]);
	}
	if (argc > 3) {
		check_fatbin(argv[3], 0, 1, true);
		check_malformed(argv[3]);
	}
	if (argc > 4)
		check_fatbin(argv[4], 1, 1, true);
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("kparam: all checks passed\n");
	return 0;
}
