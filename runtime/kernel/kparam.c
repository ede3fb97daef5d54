/* SPDX-License-Identifier: MIT */
/*
 * Fatbin parsing: the kernel table of a fatbin, from the .nv.info sections of
 * its ELF cubins and, for kernels no cubin carries, from its PTX.
 *
 * Layouts, as CUDA 13 nvcc writes them (verified against its output):
 *
 *   fatbin header (16 bytes)       entry header (64 bytes, 80 for PTX)
 *   0  u32 magic 0xBA55ED50        0  u16 kind (1 PTX, 2 ELF cubin)
 *   4  u16 version (1)             2  u16 version (0x0101)
 *   6  u16 header size (16)        4  u32 header size (payload follows it)
 *   8  u64 bytes of entries        8  u64 payload size (8-byte padded)
 *                                  16 u32 compressed size (0: not compressed)
 *                                  28 u32 arch (90 for sm_90)
 *                                  40 u64 flags (0x2000 LZ4, 0x8000 zstd)
 *                                  56 u64 decompressed size
 *
 * nvcc compresses PTX with zstd by default (--compress-mode default/size/
 * balance; with -compress-all cubins too) and with LZ4 in --compress-mode=speed.
 * Cubins are plain unless -compress-all is given. Both are decompressed here
 * (zstd by libzstd, LZ4 by the small decoder below), with a size cap. Every
 * cubin of a fatbin carries all its kernels, so one readable cubin is enough to
 * answer -ENOENT.
 *
 * Each PTX module is also run through the access analysis (ptx_access.h); a
 * kernel's verdict comes from its PTX, and a kernel no PTX carries is opaque.
 *
 * .nv.info.<kernel> is a list of records {u8 format, u8 attribute, u16 value}
 * on a 4-byte grid; format 4 (EIFMT_SVAL) has the u16 as a payload size and the
 * payload after it. EIATTR_KPARAM_INFO (0x17) payload: u32 index, u16 ordinal,
 * u16 offset, u32 flags with the size in bits 18..31. That field holds at most
 * 16,383 bytes: a kernel whose parameters need more (CUDA 12.1+ allows 32,764)
 * gets EIATTR_KPARAM_INFO_V2 (0x45) records instead: u32 index, u16 ordinal,
 * u16 offset, u32 size (seen in nvcc 13.0's cubins).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <zstd.h>

#include "kparam.h"

#define FATBIN_MAGIC 0xBA55ED50u
#define FATBIN_WRAPPER_MAGIC 0x466243B1u
#define FATBIN_KIND_PTX 1
#define FATBIN_KIND_ELF 2
#define FATBIN_FLAG_LZ4 0x2000u
#define FATBIN_FLAG_ZSTD 0x8000u
#define ENTRY_HDR_MIN 64u

#define MAX_DECOMPRESSED (256u << 20) /* per entry */
#define MAX_ENTRIES 65536u
#define MAX_KERNELS (1u << 20)
#define MAX_NAME 65536u

#define EIFMT_SVAL 0x04
#define EIATTR_KPARAM_INFO 0x17
#define EIATTR_KPARAM_INFO_V2 0x45
/* The most parameter bytes a kernel may take (CUDA 12.1+, Volta and later). */
#define MAX_PARAM_BYTES 32764u
#define SHT_CUDA_INFO 0x70000000u

enum { SRC_CUBIN = 0, SRC_PTX = 1 };

struct kinfo {
	char *name;
	struct phos_kernel_access *acc;    /* from its PTX; NULL: none seen */
	int err;               /* -E2BIG: more than PHOS_MAX_PARAMS parameters */
	uint8_t src;           /* SRC_* */
	uint32_t nparams, param_bytes;
	uint16_t offset[PHOS_MAX_PARAMS], size[PHOS_MAX_PARAMS];
};

struct phos_fatbin {
	unsigned ncubins, nptx;
	size_t nkernels, cap;
	struct kinfo *k;
};

static uint16_t rd16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* LZ4 block format: sequences of {token, literal length, literals, u16 offset,
 * match length}; the last sequence has literals only. Returns the number of
 * bytes written or -EBADMSG. Never reads or writes out of bounds. */
static ssize_t lz4_decompress(const uint8_t *src, size_t slen, uint8_t *dst, size_t dcap)
{
	size_t s = 0, d = 0;

	while (s < slen) {
		uint8_t token = src[s++];
		size_t lit = token >> 4, mlen, moff;

		if (lit == 15) {
			uint8_t b;
			do {
				if (s >= slen)
					return -EBADMSG;
				b = src[s++];
				lit += b;
			} while (b == 255);
		}
		if (lit > slen - s || lit > dcap - d)
			return -EBADMSG;
		memcpy(dst + d, src + s, lit);
		s += lit;
		d += lit;
		if (s == slen)
			return (ssize_t)d;      /* the last sequence: literals only */
		if (slen - s < 2)
			return -EBADMSG;
		moff = rd16(src + s);
		s += 2;
		if (moff == 0 || moff > d)
			return -EBADMSG;
		mlen = (token & 15) + 4u;
		if ((token & 15) == 15) {
			uint8_t b;
			do {
				if (s >= slen)
					return -EBADMSG;
				b = src[s++];
				mlen += b;
			} while (b == 255);
		}
		if (mlen > dcap - d)
			return -EBADMSG;
		for (size_t i = 0; i < mlen; i++, d++)   /* overlapping copies repeat */
			dst[d] = dst[d - moff];
	}
	return -EBADMSG;    /* an empty input, or no final literals */
}

static struct kinfo *kernel_add(struct phos_fatbin *fb, const char *name, size_t nlen, uint8_t src, int *ret_err)
{
	struct kinfo *k;

	*ret_err = 0;
	if (nlen == 0 || nlen > MAX_NAME || memchr(name, '\0', nlen)) {
		*ret_err = -EBADMSG;
		return NULL;
	}
	if (fb->nkernels == fb->cap) {
		size_t cap = fb->cap ? fb->cap * 2 : 16;
		struct kinfo *n;

		if (fb->nkernels >= MAX_KERNELS) {
			*ret_err = -E2BIG;
			return NULL;
		}
		n = realloc(fb->k, cap * sizeof(*n));
		if (!n) {
			*ret_err = -ENOMEM;
			return NULL;
		}
		fb->k = n;
		fb->cap = cap;
	}
	k = &fb->k[fb->nkernels];
	memset(k, 0, sizeof(*k));
	k->name = strndup(name, nlen);
	if (!k->name) {
		*ret_err = -ENOMEM;
		return NULL;
	}
	k->src = src;
	fb->nkernels++;
	return k;
}

/* The EIATTR records of one .nv.info.<kernel> section into k. */
static int parse_nv_info(const uint8_t *p, size_t len, struct kinfo *k)
{
	uint64_t seen = 0;
	uint32_t n = 0, end = 0;

	for (size_t o = 0; o + 4 <= len;) {
		uint8_t fmt = p[o], attr = p[o + 1];
		size_t psize = fmt == EIFMT_SVAL ? rd16(p + o + 2) : 0;

		if (psize > len - o - 4)
			return -EBADMSG;
		if (fmt == EIFMT_SVAL && (attr == EIATTR_KPARAM_INFO || attr == EIATTR_KPARAM_INFO_V2)) {
			const uint8_t *r = p + o + 4;
			uint16_t ord, off;
			uint32_t size;

			if (psize < 12)
				return -EBADMSG;
			ord = rd16(r + 4);
			off = rd16(r + 6);
			size = attr == EIATTR_KPARAM_INFO ? (rd32(r + 8) >> 18) & 0x3fff : rd32(r + 8);
			if (size > MAX_PARAM_BYTES || off + size > MAX_PARAM_BYTES)
				return -EBADMSG;
			if (ord >= PHOS_MAX_PARAMS) {
				k->err = -E2BIG;
			} else {
				if (seen & (1ull << ord))
					return -EBADMSG;
				seen |= 1ull << ord;
				k->offset[ord] = off;
				k->size[ord] = (uint16_t)size;
				if (ord + 1u > n)
					n = ord + 1u;
				if (off + size > end)
					end = off + size;
			}
		}
		o += 4 + ((psize + 3) & ~(size_t)3);
	}
	if (k->err)
		return 0;
	if (n < 64 && seen != (1ull << n) - 1)
		return -EBADMSG;    /* a gap in the ordinals */
	if (n == 64 && seen != ~0ull)
		return -EBADMSG;
	k->nparams = n;
	k->param_bytes = end;
	return 0;
}

/* An ELF64 cubin: every .nv.info.<kernel> section. */
static int parse_cubin(struct phos_fatbin *fb, const uint8_t *e, size_t len)
{
	uint64_t shoff, shnum, strndx;
	uint16_t shentsize;
	const uint8_t *strsh;
	uint64_t stroff, strsize;
	int r;

	if (len < 64 || memcmp(e, "\x7f" "ELF", 4) || e[4] != 2 || e[5] != 1)
		return -EBADMSG;
	shoff = rd64(e + 0x28);
	shentsize = rd16(e + 0x3a);
	shnum = rd16(e + 0x3c);
	strndx = rd16(e + 0x3e);
	if (shentsize < 64 || shoff > len || len - shoff < shentsize)
		return -EBADMSG;
	if (shnum == 0)         /* extended numbering: the count is in section 0 */
		shnum = rd64(e + shoff + 32);
	if (strndx == 0xffff)
		strndx = rd32(e + shoff + 40);
	if (shnum > (len - shoff) / shentsize || strndx >= shnum)
		return -EBADMSG;
	strsh = e + shoff + strndx * shentsize;
	stroff = rd64(strsh + 24);
	strsize = rd64(strsh + 32);
	if (stroff > len || strsize > len - stroff)
		return -EBADMSG;

	for (uint64_t i = 0; i < shnum; i++) {
		const uint8_t *sh = e + shoff + i * shentsize;
		uint32_t nameoff = rd32(sh), type = rd32(sh + 4);
		uint64_t off = rd64(sh + 24), size = rd64(sh + 32);
		const char *name, *nul;
		struct kinfo *k;

		if (type != SHT_CUDA_INFO || nameoff >= strsize)
			continue;
		name = (const char *)e + stroff + nameoff;
		nul = memchr(name, '\0', strsize - nameoff);
		if (!nul)
			return -EBADMSG;
		if ((size_t)(nul - name) <= 9 || strncmp(name, ".nv.info.", 9))
			continue;
		if (off > len || size > len - off)
			return -EBADMSG;
		k = kernel_add(fb, name + 9, (size_t)(nul - name) - 9, SRC_CUBIN, &r);
		if (!k)
			return r;
		r = parse_nv_info(e + off, size, k);
		if (r < 0)
			return r;
	}
	fb->ncubins++;
	return 0;
}

/* PTX: a tiny lexer, enough for .entry declarations. */
struct lexer {
	const char *p, *end;
	const char *tok;
	size_t tlen;
};

static bool is_ident(char c)
{
	return c == '_' || c == '$' || c == '%' || (c >= '0' && c <= '9') ||
	       (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* The next token into lx->tok; false (and an empty token) at the end. */
static bool lex_next(struct lexer *lx)
{
	const char *p = lx->p;

	for (;;) {
		while (p < lx->end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
			p++;
		if (lx->end - p >= 2 && p[0] == '/' && p[1] == '/') {
			while (p < lx->end && *p != '\n')
				p++;
		} else if (lx->end - p >= 2 && p[0] == '/' && p[1] == '*') {
			const char *q = p + 2;

			while (lx->end - q >= 2 && !(q[0] == '*' && q[1] == '/'))
				q++;
			p = lx->end - q >= 2 ? q + 2 : lx->end;
		} else {
			break;
		}
	}
	if (p >= lx->end || *p == '\0') {
		lx->p = lx->end;
		lx->tok = lx->end;
		lx->tlen = 0;
		return false;
	}
	lx->tok = p;
	if (*p == '.' || is_ident(*p)) {
		do
			p++;
		while (p < lx->end && is_ident(*p));
	} else {
		p++;
	}
	lx->tlen = (size_t)(p - lx->tok);
	lx->p = p;
	return true;
}

static bool tok_is(const struct lexer *lx, const char *s)
{
	return lx->tlen == strlen(s) && !memcmp(lx->tok, s, lx->tlen);
}

static unsigned ptx_type_size(const struct lexer *lx)
{
	static const struct { const char *t; unsigned size; } types[] = {
		{ ".b8", 1 }, { ".u8", 1 }, { ".s8", 1 }, { ".pred", 1 },
		{ ".b16", 2 }, { ".u16", 2 }, { ".s16", 2 }, { ".f16", 2 }, { ".bf16", 2 },
		{ ".b32", 4 }, { ".u32", 4 }, { ".s32", 4 }, { ".f32", 4 }, { ".f16x2", 4 },
		{ ".bf16x2", 4 }, { ".b64", 8 }, { ".u64", 8 }, { ".s64", 8 }, { ".f64", 8 },
		{ ".b128", 16 },
	};

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
		if (tok_is(lx, types[i].t))
			return types[i].size;
	return 0;
}

static bool lex_number(struct lexer *lx, uint32_t *ret)
{
	uint64_t v = 0;

	if (!lex_next(lx) || lx->tlen > 9)
		return false;
	for (size_t i = 0; i < lx->tlen; i++) {
		if (lx->tok[i] < '0' || lx->tok[i] > '9')
			return false;
		v = v * 10 + (uint64_t)(lx->tok[i] - '0');
	}
	*ret = (uint32_t)v;
	return true;
}

/* One ".param ..." declaration, after the ".param" token: its size and alignment. */
static int ptx_param(struct lexer *lx, uint32_t *ret_size, uint32_t *ret_align)
{
	uint32_t align = 0, tsize = 0, count = 1;
	bool ptr = false;

	while (lex_next(lx)) {
		if (tok_is(lx, ".align")) {
			uint32_t a;

			if (!lex_number(lx, &a) || a == 0 || a > 4096 || (a & (a - 1)))
				return -EBADMSG;
			if (!ptr)       /* after .ptr it is the pointee's alignment */
				align = a;
		} else if (tok_is(lx, ".ptr")) {
			ptr = true;
		} else if (lx->tok[0] == '.') {
			unsigned s = ptx_type_size(lx);

			if (s)
				tsize = s;
			/* else a state space or other qualifier: ignored */
		} else {
			break;          /* the parameter's name */
		}
	}
	if (!tsize || lx->tlen == 0 || !is_ident(lx->tok[0]))
		return -EBADMSG;
	if (lex_next(lx) && tok_is(lx, "[")) {
		if (!lex_number(lx, &count) || !lex_next(lx) || !tok_is(lx, "]"))
			return -EBADMSG;
		lex_next(lx);
	}
	if ((uint64_t)tsize * count > 0xffff)
		return -EBADMSG;
	*ret_size = tsize * count;
	*ret_align = align ? align : tsize;
	return 0;
}

struct access_ctx {
	struct phos_fatbin *fb;
	size_t first;           /* the module's kernels are fb->k[first..] */
};

/* The analysis' result for one entry of the module just parsed. */
static int ptx_access_found(void *ctx, const char *name, size_t len, const struct phos_kernel_access *acc)
{
	struct access_ctx *c = ctx;

	for (size_t i = c->first; i < c->fb->nkernels; i++) {
		struct kinfo *k = &c->fb->k[i];

		if (k->src != SRC_PTX || k->acc || strlen(k->name) != len || memcmp(k->name, name, len))
			continue;
		k->acc = malloc(sizeof(*k->acc));
		if (!k->acc)
			return -ENOMEM;
		*k->acc = *acc;
		return 0;
	}
	return 0;
}

/* A PTX module: every ".entry NAME ( .param ..., ... )". */
static int parse_ptx(struct phos_fatbin *fb, const char *text, size_t len)
{
	struct lexer lx = { .p = text, .end = text + len };
	size_t first = fb->nkernels;
	int r;

	while (lex_next(&lx)) {
		struct kinfo *k;
		uint32_t cur = 0;

		if (!tok_is(&lx, ".entry"))
			continue;
		if (!lex_next(&lx) || !is_ident(lx.tok[0]))
			return -EBADMSG;
		k = kernel_add(fb, lx.tok, lx.tlen, SRC_PTX, &r);
		if (!k)
			return r;
		if (!lex_next(&lx) || !tok_is(&lx, "("))
			continue;       /* no parameter list */
		if (!lex_next(&lx))
			return -EBADMSG;
		while (!tok_is(&lx, ")")) {
			uint32_t size, align, off;

			if (!tok_is(&lx, ".param"))
				return -EBADMSG;
			r = ptx_param(&lx, &size, &align);
			if (r < 0)
				return r;
			off = (cur + align - 1) & ~(align - 1);
			if (off + size > 0xffff)
				return -EBADMSG;
			if (k->nparams == PHOS_MAX_PARAMS) {
				k->err = -E2BIG;
			} else {
				k->offset[k->nparams] = (uint16_t)off;
				k->size[k->nparams] = (uint16_t)size;
				k->nparams++;
			}
			cur = off + size;
			if (tok_is(&lx, ","))
				lex_next(&lx);
			else if (!tok_is(&lx, ")"))
				return -EBADMSG;
		}
		k->param_bytes = cur;
	}
	r = phos_ptx_analyze(text, len, ptx_access_found, &(struct access_ctx){ fb, first });
	if (r < 0)
		return r;
	fb->nptx++;
	return 0;
}

/* The payload of entry h, decompressed into a malloc'd *ret_buf when it is
 * compressed (the caller frees it; NULL otherwise): *ret_data, *ret_len. */
static int entry_decode(const uint8_t *h, const uint8_t *payload, uint64_t psize, uint8_t **ret_buf,
			const uint8_t **ret_data, uint64_t *ret_len)
{
	uint64_t flags = rd64(h + 40), csize = rd32(h + 16), dsize = rd64(h + 56);
	uint8_t *buf;

	*ret_buf = NULL;
	*ret_data = payload;
	*ret_len = psize;
	if (!(flags & (FATBIN_FLAG_ZSTD | FATBIN_FLAG_LZ4)))
		return 0;
	if (csize > psize || dsize == 0 || dsize > MAX_DECOMPRESSED)
		return -EBADMSG;
	buf = malloc(dsize);
	if (!buf)
		return -ENOMEM;
	if (flags & FATBIN_FLAG_ZSTD) {
		size_t z = ZSTD_decompress(buf, dsize, payload, csize);

		if (ZSTD_isError(z)) {
			free(buf);
			return -EBADMSG;
		}
		*ret_len = z;
	} else {
		ssize_t n = lz4_decompress(payload, csize, buf, dsize);

		if (n < 0) {
			free(buf);
			return (int)n;
		}
		*ret_len = (uint64_t)n;
	}
	*ret_buf = buf;
	*ret_data = buf;
	return 0;
}

static int parse_entry(void *ctx, const uint8_t *h, const uint8_t *payload, uint64_t psize)
{
	struct phos_fatbin *fb = ctx;
	uint16_t kind = rd16(h);
	uint8_t *buf;
	const uint8_t *data;
	uint64_t len;
	int r;

	if (kind != FATBIN_KIND_PTX && kind != FATBIN_KIND_ELF)
		return 0;       /* other kinds carry no kernels we read */
	r = entry_decode(h, payload, psize, &buf, &data, &len);
	if (r < 0)
		return r;
	if (kind == FATBIN_KIND_ELF)
		r = parse_cubin(fb, data, len);
	else
		r = parse_ptx(fb, (const char *)data, len);
	free(buf);
	return r;
}

typedef int (*entry_fn)(void *ctx, const uint8_t *h, const uint8_t *payload, uint64_t psize);

/* Calls fn for every entry of the fatbin at p (a fatbin header, not a
 * wrapper), each checked to lie inside it. fn returns 0 to go on, a negative
 * errno to fail, or 1 to stop there. Returns fn's last value (0 when all ran),
 * -EINVAL (not a fatbin) or -EBADMSG (truncated, corrupt, too many entries). */
static int entries_walk(const uint8_t *p, size_t len, entry_fn fn, void *ctx)
{
	uint64_t hsize, end;
	unsigned nentries = 0;
	int r = 0;

	if (len < 16 || rd32(p) != FATBIN_MAGIC || rd16(p + 4) != 1)
		return -EINVAL;
	hsize = rd16(p + 6);
	end = rd64(p + 8);
	if (hsize < 16 || hsize > len || end > len - hsize)
		return -EBADMSG;
	end += hsize;
	for (uint64_t off = hsize; off < end && r == 0; nentries++) {
		const uint8_t *h = p + off;
		uint32_t ehsize;
		uint64_t psize;

		if (nentries == MAX_ENTRIES || end - off < ENTRY_HDR_MIN)
			return -EBADMSG;
		ehsize = rd32(h + 4);
		psize = rd64(h + 8);
		if (ehsize < ENTRY_HDR_MIN || ehsize > end - off || psize > end - off - ehsize)
			return -EBADMSG;
		r = fn(ctx, h, h + ehsize, psize);
		off += ehsize + psize;
	}
	return r;
}

static int kinfo_cmp(const void *a, const void *b)
{
	const struct kinfo *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : (int)x->src - (int)y->src;
}

static int kinfo_cmp_name(const void *key, const void *elem)
{
	return strcmp(((const struct kinfo *)key)->name, ((const struct kinfo *)elem)->name);
}

/* One kernel seen in several entries (a cubin and PTX, or PTX for several
 * architectures): keep the access result, and the worse one when two differ. */
static void access_merge(struct kinfo *keep, struct kinfo *drop)
{
	if (!drop->acc)
		return;
	if (!keep->acc) {
		keep->acc = drop->acc;
		drop->acc = NULL;
		return;
	}
	if (keep->acc->verdict != PHOS_ACCESS_EXACT)
		return;
	if (drop->acc->verdict != PHOS_ACCESS_EXACT) {
		*keep->acc = *drop->acc;
		return;
	}
	keep->acc->globals |= drop->acc->globals;
	for (unsigned i = 0; i < PHOS_ACCESS_WORDS / 64; i++) {
		keep->acc->read[i] |= drop->acc->read[i];
		keep->acc->write[i] |= drop->acc->write[i];
	}
}

void phos_fatbin_free(struct phos_fatbin *fb)
{
	if (!fb)
		return;
	for (size_t i = 0; i < fb->nkernels; i++) {
		free(fb->k[i].name);
		free(fb->k[i].acc);
	}
	free(fb->k);
	free(fb);
}

size_t phos_fatbin_size(const void *data, size_t max)
{
	const uint8_t *p = data;
	uint64_t hsize, fsize;

	if (!p || max < 16 || rd32(p) != FATBIN_MAGIC || rd16(p + 4) != 1)
		return 0;
	hsize = rd16(p + 6);
	fsize = rd64(p + 8);
	if (hsize < 16 || fsize > max || hsize > max - fsize)
		return 0;
	return (size_t)(hsize + fsize);
}

static void kernels_finish(struct phos_fatbin *fb);

int phos_fatbin_parse(const void *data, size_t len, struct phos_fatbin **ret_fb)
{
	const uint8_t *p = data;
	struct phos_fatbin *fb;
	int r;

	if (!p || len < 16)
		return -EINVAL;
	if (rd32(p) == FATBIN_WRAPPER_MAGIC) {
		/* __fatBinC_Wrapper_t { int magic, version; const void *data; ... } */
		uintptr_t inner, base = (uintptr_t)p;

		if (rd32(p + 4) != 1 && rd32(p + 4) != 2)      /* 2: -rdc builds */
			return -EINVAL;
		inner = (uintptr_t)rd64(p + 8);
		if (inner < base || inner - base >= len || inner == base)
			return -EINVAL;
		len -= inner - base;
		p += inner - base;
		if (len < 16)
			return -EBADMSG;
	}
	if (rd32(p) != FATBIN_MAGIC || rd16(p + 4) != 1)
		return -EINVAL;
	fb = calloc(1, sizeof(*fb));
	if (!fb)
		return -ENOMEM;
	r = entries_walk(p, len, parse_entry, fb);
	if (r < 0) {
		phos_fatbin_free(fb);
		return r;
	}
	kernels_finish(fb);
	*ret_fb = fb;
	return 0;
}

/* One record per kernel: cubins first (sorted before PTX of the same name). */
static void kernels_finish(struct phos_fatbin *fb)
{
	if (fb->nkernels) {
		size_t w = 0;

		qsort(fb->k, fb->nkernels, sizeof(*fb->k), kinfo_cmp);
		for (size_t i = 0; i < fb->nkernels; i++) {
			if (w && !strcmp(fb->k[w - 1].name, fb->k[i].name)) {
				access_merge(&fb->k[w - 1], &fb->k[i]);
				free(fb->k[i].name);
				free(fb->k[i].acc);
				continue;
			}
			fb->k[w++] = fb->k[i];
		}
		fb->nkernels = w;
	}
}

struct ptx_found {
	char *text;
	size_t len;
};

/* The first PTX entry, decoded into ctx; 1 stops the walk there. */
static int ptx_entry(void *ctx, const uint8_t *h, const uint8_t *payload, uint64_t psize)
{
	struct ptx_found *f = ctx;
	uint64_t dlen;
	uint8_t *buf;
	const uint8_t *d;
	int r;

	if (rd16(h) != FATBIN_KIND_PTX)
		return 0;
	r = entry_decode(h, payload, psize, &buf, &d, &dlen);
	if (r < 0)
		return r;
	while (dlen && d[dlen - 1] == 0)      /* padding */
		dlen--;
	f->text = malloc(dlen + 1);
	if (f->text) {
		memcpy(f->text, d, dlen);
		f->text[dlen] = 0;
		f->len = dlen;
	}
	free(buf);
	return f->text ? 1 : -ENOMEM;
}

int phos_fatbin_ptx(const void *data, size_t len, char **ret_text, size_t *ret_len)
{
	struct ptx_found f = { 0 };
	int r;

	if (!data)
		return -EINVAL;
	r = entries_walk(data, len, ptx_entry, &f);
	if (r < 0)
		return r;
	if (!f.text)
		return -ENOENT;
	*ret_text = f.text;
	*ret_len = f.len;
	return 0;
}

int phos_fatbin_kernel(const struct phos_fatbin *fb, const char *name, struct phos_kernel_info *ret_info)
{
	struct kinfo key = { .name = (char *)name };
	const struct kinfo *k;
	uint8_t kinds[PHOS_MAX_PARAMS];
	struct phos_kernel_info info = { 0 };
	int n;

	if (!fb || !name || !ret_info)
		return -EINVAL;
	k = fb->nkernels ? bsearch(&key, fb->k, fb->nkernels, sizeof(*fb->k), kinfo_cmp_name) : NULL;
	if (!k)
		return -ENOENT;
	if (k->err)
		return k->err;

	n = phos_demangle_params(name, kinds, PHOS_MAX_PARAMS);
	for (uint32_t i = 0; i < k->nparams; i++) {
		uint8_t kind = n == (int)k->nparams ? kinds[i] : PHOS_PARAM_OPAQUE;

		/* a pointer that is not 8 bytes wide: trust neither source */
		if ((kind == PHOS_PARAM_PTR || kind == PHOS_PARAM_CONST_PTR) && k->size[i] != 8)
			kind = PHOS_PARAM_OPAQUE;
		info.params[i].offset = k->offset[i];
		info.params[i].size = k->size[i];
		info.params[i].kind = kind;
	}
	info.nparams = k->nparams;
	info.param_bytes = k->param_bytes;
	if (k->acc) {
		info.access = *k->acc;
	} else {
		info.access.verdict = PHOS_ACCESS_OPAQUE;
		snprintf(info.access.why, sizeof(info.access.why), "no PTX in the module (SASS only)");
	}
	info.name = strdup(name);
	if (!info.name)
		return -ENOMEM;
	*ret_info = info;
	return 0;
}

const char *phos_fatbin_kernel_name(const struct phos_fatbin *fb, size_t i)
{
	return fb && i < fb->nkernels ? fb->k[i].name : NULL;
}

void phos_kernel_info_exit(struct phos_kernel_info *info)
{
	if (!info)
		return;
	free(info->name);
	info->name = NULL;
}

void phos_fatbin_stats(const struct phos_fatbin *fb, unsigned *ret_cubins, unsigned *ret_ptx, unsigned *ret_kernels)
{
	if (ret_cubins)
		*ret_cubins = fb ? fb->ncubins : 0;
	if (ret_ptx)
		*ret_ptx = fb ? fb->nptx : 0;
	if (ret_kernels)
		*ret_kernels = fb ? (unsigned)fb->nkernels : 0;
}

/* --- module images of the driver API: fatbin, cubin or PTX text --- */

/* PTX text: printable, a .version and a .target directive in its first 64 KiB. */
static bool looks_like_ptx(const uint8_t *p, size_t len)
{
	size_t head = strnlen((const char *)p, len < 65536 ? len : 65536);

	for (size_t i = 0; i < head; i++)
		if (p[i] < 0x20 && p[i] != '\n' && p[i] != '\r' && p[i] != '\t' && p[i] != '\f' && p[i] != '\v')
			return false;
	return memmem(p, head, ".version", 8) && memmem(p, head, ".target", 7);
}

enum phos_modimage_kind phos_modimage_kind(const void *data, size_t len)
{
	const uint8_t *p = data;

	if (!p || len < 16)
		return PHOS_MODIMAGE_NONE;
	if (rd32(p) == FATBIN_MAGIC)
		return PHOS_MODIMAGE_FATBIN;
	if (rd32(p) == FATBIN_WRAPPER_MAGIC)
		return PHOS_MODIMAGE_WRAPPER;
	if (!memcmp(p, "\x7f" "ELF", 4))
		return PHOS_MODIMAGE_CUBIN;
	if (looks_like_ptx(p, len))
		return PHOS_MODIMAGE_PTX;
	return PHOS_MODIMAGE_NONE;
}

/* End of an ELF64 image: the furthest of its header tables and sections, read
 * from headers that are first checked to lie in [p, p + max). */
static size_t elf_size(const uint8_t *p, size_t max)
{
	uint64_t shoff, phoff, end = 64;
	uint16_t shentsize, shnum, phentsize, phnum;

	if (max < 64 || p[4] != 2 || p[5] != 1)
		return 0;
	phoff = rd64(p + 0x20);
	shoff = rd64(p + 0x28);
	phentsize = rd16(p + 0x36);
	phnum = rd16(p + 0x38);
	shentsize = rd16(p + 0x3a);
	shnum = rd16(p + 0x3c);
	if (shnum == 0 || shentsize < 64 || shoff > max || (uint64_t)shnum * shentsize > max - shoff)
		return 0;      /* a cubin always has sections (and no extended numbering here) */
	end = shoff + (uint64_t)shnum * shentsize;
	if (phnum) {
		if (phentsize < 56 || phoff > max || (uint64_t)phnum * phentsize > max - phoff)
			return 0;
		if (phoff + (uint64_t)phnum * phentsize > end)
			end = phoff + (uint64_t)phnum * phentsize;
	}
	for (uint16_t i = 0; i < shnum; i++) {
		const uint8_t *sh = p + shoff + (uint64_t)i * shentsize;
		uint32_t type = rd32(sh + 4);
		uint64_t off = rd64(sh + 24), size = rd64(sh + 32);

		if (type == 8 /* SHT_NOBITS */ || type == 0)
			continue;
		if (off > max || size > max - off)
			return 0;
		if (off + size > end)
			end = off + size;
	}
	return (size_t)end;
}

size_t phos_modimage_size(const void *data, size_t max)
{
	const uint8_t *p = data;
	size_t n;

	switch (phos_modimage_kind(data, max)) {
	case PHOS_MODIMAGE_FATBIN:
		return phos_fatbin_size(data, max);
	case PHOS_MODIMAGE_CUBIN:
		return elf_size(p, max);
	case PHOS_MODIMAGE_PTX:
		n = strnlen(data, max);
		return n < max ? n + 1 : 0;    /* with its NUL */
	default:
		return 0;
	}
}

int phos_modimage_parse(const void *data, size_t len, struct phos_fatbin **ret_fb)
{
	enum phos_modimage_kind kind = phos_modimage_kind(data, len);
	struct phos_fatbin *fb;
	int r;

	if (kind == PHOS_MODIMAGE_FATBIN || kind == PHOS_MODIMAGE_WRAPPER)
		return phos_fatbin_parse(data, len, ret_fb);
	if (kind == PHOS_MODIMAGE_NONE)
		return -EINVAL;
	fb = calloc(1, sizeof(*fb));
	if (!fb)
		return -ENOMEM;
	if (kind == PHOS_MODIMAGE_CUBIN) {
		r = parse_cubin(fb, data, len);
	} else {
		size_t n = strnlen(data, len);

		r = n == len ? -EBADMSG : parse_ptx(fb, data, n);   /* PTX must be NUL-terminated */
	}
	if (r < 0) {
		phos_fatbin_free(fb);
		return r;
	}
	kernels_finish(fb);
	*ret_fb = fb;
	return 0;
}

int phos_modimage_ptx(const void *data, size_t len, char **ret_text, size_t *ret_len)
{
	size_t n;
	char *t;

	switch (phos_modimage_kind(data, len)) {
	case PHOS_MODIMAGE_FATBIN:
		return phos_fatbin_ptx(data, len, ret_text, ret_len);
	case PHOS_MODIMAGE_PTX:
		n = strnlen(data, len);
		t = malloc(n + 1);
		if (!t)
			return -ENOMEM;
		memcpy(t, data, n);
		t[n] = 0;
		*ret_text = t;
		*ret_len = n;
		return 0;
	case PHOS_MODIMAGE_CUBIN:
		return -ENOENT;
	default:
		return -EINVAL;
	}
}

/* A ".global" (or ".const") declaration at module scope: [.align N] .TYPE name[[N]]... */
int phos_ptx_global_size(const char *text, size_t len, const char *name, uint64_t *ret_size)
{
	struct lexer lx = { .p = text, .end = text + strnlen(text, len) };
	unsigned depth = 0;

	while (lex_next(&lx)) {
		uint64_t size;
		uint32_t n;

		if (tok_is(&lx, "{") || tok_is(&lx, "}")) {
			depth = tok_is(&lx, "{") ? depth + 1 : (depth ? depth - 1 : 0);
			continue;
		}
		if (depth || !(tok_is(&lx, ".global") || tok_is(&lx, ".const")))
			continue;
		if (!lex_next(&lx))
			break;
		if (tok_is(&lx, ".align") && (!lex_number(&lx, &n) || !lex_next(&lx)))
			break;
		size = ptx_type_size(&lx);
		if (!size || !lex_next(&lx))
			continue;
		if (lx.tlen != strlen(name) || memcmp(lx.tok, name, lx.tlen))
			continue;
		while (lex_next(&lx) && tok_is(&lx, "[")) {
			if (!lex_number(&lx, &n) || !lex_next(&lx) || !tok_is(&lx, "]"))
				return -EBADMSG;
			size *= n;
		}
		*ret_size = size;
		return 0;
	}
	return -ENOENT;
}
