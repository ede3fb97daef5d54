/* SPDX-License-Identifier: MIT */
/*
 * The validation twin rewriter (runtime/kernel/ptx_twin.h):
 *   - on the access corpus and on every example function's PTX: the twin with
 *     its inserted text removed is the module again (modulo whitespace), it
 *     has one check per global/generic memory operand with a register address
 *     (counted here by a separate scan), and ptxas -arch=sm_90 accepts it;
 *   - a hand-written module with guards, labels, nested scopes, a .func, the
 *     cp.async forms, symbol and shared addresses: exactly the expected checks,
 *     in the expected places, and ptxas accepts it too;
 *   - malformed input, and seeded mutations of the corpus: an error or a
 *     module, never a crash (run under ASan in CI).
 *
 *   test_twin PTXAS corpus.ptx [example.ptx...]
 * The ptxas part is skipped, with a message, when PTXAS is not executable.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ptx_twin.h"

static const char *ptxas;
static char tmpdir[] = "/tmp/phos-twin-XXXXXX";

/* ---- an independent count of instrumentable operands ------------------ */

/* The text without comments, one statement per ';' (the scan of ptx_twin.c
 * written again, differently: comments first, then a character walk). */
static char *strip_comments(const char *s, size_t len)
{
	char *o = malloc(len + 1);
	size_t n = 0;

	for (size_t i = 0; i < len;) {
		if (i + 1 < len && s[i] == '/' && s[i + 1] == '/') {
			while (i < len && s[i] != '\n')
				i++;
		} else if (i + 1 < len && s[i] == '/' && s[i + 1] == '*') {
			const char *e = strstr(s + i + 2, "*/");

			i = e ? (size_t)(e - s) + 2 : len;
			o[n++] = ' ';
		} else {
			o[n++] = s[i++];
		}
	}
	o[n] = 0;
	return o;
}

static bool has_part(const char *op, const char *part)
{
	size_t k = strlen(part);

	for (const char *p = strchr(op, '.'); p; p = strchr(p + 1, '.'))
		if (!strncmp(p + 1, part, k) && (p[1 + k] == '.' || p[1 + k] == ':' || p[1 + k] == 0))
			return true;
	return false;
}

/* Registers declared without '%' (".reg .b64 t;" in inline asm). */
static char plain_regs[16][32];
static unsigned nplain_regs;

static bool is_reg(const char *q)
{
	size_t n = strcspn(q, " \t+-]");

	if (*q == '%')
		return true;
	for (unsigned i = 0; i < nplain_regs; i++)
		if (strlen(plain_regs[i]) == n && !strncmp(plain_regs[i], q, n))
			return true;
	return false;
}

static void note_regs(const char *a)
{
	/* ".reg .TYPE name, name": the names after the type */
	char buf[256], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", a);
	for (char *w = strtok_r(buf, " \t,", &save); w; w = strtok_r(NULL, " \t,", &save))
		if (*w != '.' && *w != '%' && nplain_regs < 16)
			snprintf(plain_regs[nplain_regs++], sizeof(plain_regs[0]), "%s", w);
}

/* Operands of one statement (opcode op, operands text a) that get a check. */
static unsigned count_statement(const char *op, const char *a)
{
	static const char *const access[] = { "ld", "ldu", "st", "atom", "red", "prefetch", "prefetchu" };
	char base[16];
	size_t bl = strcspn(op, ".");
	bool is_access = false;
	unsigned n = 0, k = 0;
	const char *spaces[4];
	unsigned nspaces = 0;

	if (bl >= sizeof(base))
		return 0;
	memcpy(base, op, bl);
	base[bl] = 0;
	for (size_t i = 0; i < sizeof(access) / sizeof(access[0]); i++)
		is_access |= !strcmp(base, access[i]);
	if (!is_access && strcmp(base, "cp"))
		return 0;
	if (has_part(op, "tensor") || has_part(op, "tensormap"))
		return 0;
	if (is_access && (has_part(op, "shared") || has_part(op, "local") || has_part(op, "const") ||
			  has_part(op, "param")))
		return 0;
	if (!is_access) {
		/* the spaces, in the order the opcode names them */
		for (const char *p = strchr(op, '.'); p && nspaces < 4; p = strchr(p + 1, '.')) {
			if (!strncmp(p + 1, "global", 6))
				spaces[nspaces++] = "global";
			else if (!strncmp(p + 1, "shared", 6) || !strncmp(p + 1, "local", 5) ||
				 !strncmp(p + 1, "const", 5) || !strncmp(p + 1, "param", 5))
				spaces[nspaces++] = "other";
		}
	}
	for (const char *p = strchr(a, '['); p; p = strchr(p + 1, '[')) {
		const char *q = p + 1;

		while (*q == ' ' || *q == '\t')
			q++;
		if (is_access ? k == 0 && is_reg(q) : k < nspaces && !strcmp(spaces[k], "global") && is_reg(q))
			n++;
		k++;
	}
	return n;
}

static unsigned count_operands(const char *text, size_t len)
{
	char *s = strip_comments(text, len);
	unsigned n = 0;
	char *save = NULL;

	/* nvcc writes one statement per line, inline asm one per ';': split on
	 * both, drop labels, scope braces and guards */
	for (char *st = strtok_r(s, ";\n", &save); st; st = strtok_r(NULL, ";\n", &save)) {
		char op[128];
		const char *p = st;
		size_t ol;

		for (;;) {
			while (*p == ' ' || *p == '\t' || *p == '{' || *p == '}' || *p == '\r')
				p++;
			if (*p == '@') {
				p += strcspn(p, " \t");
				continue;
			}
			ol = strcspn(p, " \t:");
			if (p[ol] == ':' && p[ol + 1] != ':') {
				p += ol + 1;    /* a label */
				continue;
			}
			break;
		}
		ol = strcspn(p, " \t");
		if (ol == 0 || ol >= sizeof(op))
			continue;
		memcpy(op, p, ol);
		op[ol] = 0;
		if (!strcmp(op, ".reg"))
			note_regs(p + ol);
		else
			n += count_statement(op, p + ol);
	}
	free(s);
	return n;
}

/* ---- checks on one module --------------------------------------------- */

static unsigned count_str(const char *s, const char *what)
{
	unsigned n = 0;

	for (const char *p = strstr(s, what); p; p = strstr(p + 1, what))
		n++;
	return n;
}

/* The twin with its inserted text taken out and every whitespace dropped. */
static char *untwin(const char *twin)
{
	static const char begin[] = "\n// phos twin: begin\n", end[] = "// phos twin: end\n";
	static const char block[] = "{ .reg .b64 %__pa;";
	char *o = malloc(strlen(twin) + 1);
	size_t n = 0;
	const char *p = twin;

	while (*p) {
		if (!strncmp(p, begin, sizeof(begin) - 1)) {
			const char *e = strstr(p, end);

			if (!e)
				break;
			p = e + sizeof(end) - 1;
			continue;
		}
		if (!strncmp(p, block, sizeof(block) - 1)) {
			p = strchr(p, '}');
			if (!p)
				break;
			p++;
			continue;
		}
		if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
			o[n++] = *p;
		p++;
	}
	o[n] = 0;
	return o;
}

static char *squeeze(const char *s)
{
	char *o = malloc(strlen(s) + 1);
	size_t n = 0;

	for (; *s; s++)
		if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r')
			o[n++] = *s;
	o[n] = 0;
	return o;
}

static int run_ptxas(const char *name, const char *ptx, size_t len)
{
	char path[256], cmd[600];
	FILE *f;
	int r;

	if (!ptxas)
		return 0;
	snprintf(path, sizeof(path), "%s/twin.ptx", tmpdir);
	f = fopen(path, "wb");
	if (!f || fwrite(ptx, 1, len, f) != len || fclose(f) != 0) {
		CHECK(0, "%s: cannot write %s", name, path);
		return -1;
	}
	snprintf(cmd, sizeof(cmd), "'%s' -arch=sm_90 -o /dev/null '%s'", ptxas, path);
	r = system(cmd);
	CHECK(r == 0, "%s: ptxas rejected the twin (kept in %s): %d", name, path, r);
	if (r == 0)
		unlink(path);
	return r;
}

/* Rewrites text; checks (1) to (3). Returns the number of checks, -1 on failure. */
static int check_module(const char *name, const char *text, size_t len)
{
	char *twin = NULL, *a, *b;
	size_t tlen = 0;
	unsigned want, got;
	int r = phos_ptx_twin(text, len, &twin, &tlen);

	CHECK(r == 0, "%s: twin %d", name, r);
	if (r < 0)
		return -1;
	CHECK(strlen(twin) == tlen, "%s: length %zu, text %zu", name, tlen, strlen(twin));

	/* (1) every statement kept, in order */
	a = untwin(twin);
	b = squeeze(text);
	CHECK(!strcmp(a, b), "%s: the twin without its checks is not the module", name);
	if (strcmp(a, b)) {
		size_t i = 0;

		while (a[i] && a[i] == b[i])
			i++;
		fprintf(stderr, "  first difference at %zu: twin '%.60s' vs '%.60s'\n", i, a + i, b + i);
	}
	free(a);
	free(b);

	/* (2) one check per global/generic operand with a register address */
	want = count_operands(text, len);
	got = count_str(twin, "call.uni __phos_vcheck,");
	CHECK(got == want, "%s: %u checks, %u operands", name, got, want);
	CHECK(count_str(twin, "{ .reg .b64 %__pa;") == got, "%s: blocks and calls differ", name);
	printf("%s: %zu -> %zu bytes, %u checks\n", name, len, tlen, got);

	/* (3) ptxas takes it */
	run_ptxas(name, twin, tlen);
	free(twin);
	return (int)got;
}

/* ---- a hand-written module -------------------------------------------- */

static const char synthetic[] =
	"//\n// hand-written\n//\n"
	".version 8.0\n"
	".target sm_90\n"
	".address_size 64\n"
	"\n"
	".global .align 8 .u64 gvar[4];\n"
	".extern .func (.param .b32 r) declared_only(.param .b64 p);\n"
	"\n"
	".func (.param .b32 ret) helper(.param .b64 p)\n"
	"{\n"
	"\t.reg .b64 %rd<3>;\n"
	"\t.reg .b32 %r<2>;\n"
	"\tld.param.u64 %rd1, [p];\n"
	"\tld.u32 %r1, [%rd1+-4];\n"                            /* 1: generic, .func body */
	"\tst.param.b32 [ret], %r1;\n"
	"\tret;\n"
	"}\n"
	"\n"
	".visible .entry k(.param .u64 a, .param .u64 b)\n"
	"{\n"
	"\t.reg .pred %p<3>;\n"
	"\t.reg .b32 %r<8>;\n"
	"\t.reg .b64 %rd<8>;\n"
	"\t.shared .align 16 .b8 sh[256];\n"
	"\n"
	"\tld.param.u64 %rd1, [a];\n"
	"\tld.param.u64 %rd2, [b];\n"
	"\tcvta.to.global.u64 %rd3, %rd2;\n"
	"\tmov.u32 %r1, %tid.x;\n"
	"\tsetp.eq.u32 %p1, %r1, 0;\n"
	"\t@%p1 bra $L_skip;\n"
	"\tld.global.u32 %r2, [%rd1+0x10]; /* 2: hex offset */\n"
	"$L_skip:\n"
	"\t@!%p1 st.global.u32 [%rd3], %r2;\n"                 /* 3: negated guard after a label */
	"$L_two: $L_three:\n"
	"\t@%p1 red.global.add.u32 [%rd3 + 8], 1;\n"           /* 4: two labels, guard */
	"\tatom.add.u32 %r3, [%rd1], 1;\n"                     /* 5: generic atom */
	"\tld.global.u64 %rd4, [gvar+8];\n"                    /* a symbol: no check */
	"\tld.shared.u32 %r4, [sh];\n"                         /* shared: no */
	"\tmov.u32 %r5, sh;\n"
	"\tld.shared.u32 %r4, [%r5+4];\n"                      /* shared: no */
	"\tst.volatile.shared.u32 [%r5], %r4;\n"               /* shared: no */
	"\t{\n"
	"\t\t.reg .pred p;\n"
	"\t\t.reg .b64 t;\n"
	"\t\tsetp.ne.u32 p, %r1, 1;\n"
	"\t\tadd.s64 t, %rd1, 4;\n"
	"\t\t@p ld.global.v2.u32 {%r6, %r7}, [t];\n"           /* 6: nested scope, scope-local names */
	"\t}\n"
	"\tcp.async.ca.shared.global [%r5], [%rd1+16], 4;\n"   /* 7: the global source */
	"\tcp.async.commit_group;\n"
	"\tcp.async.wait_group 0;\n"
	"\tcp.async.bulk.global.shared::cta.bulk_group [%rd3], [%r5], 16;\n"  /* 8: global destination */
	"\tcp.async.bulk.commit_group;\n"
	"\tcp.async.bulk.wait_group 0;\n"
	"\tcp.async.bulk.prefetch.L2.global [%rd3], 16;\n"     /* 9: a read */
	"\tprefetch.global.L2 [%rd1];\n"                       /* 10 */
	"\tldu.global.u32 %r4, [%rd1];\n"                      /* 11 */
	"\tld.relaxed.gpu.global.u32 %r4, [%rd1];\n"           /* 12 */
	"\tld.local.u32 %r4, [%rd1];\n"                        /* local: no */
	"\t{\n"
	"\t\t.param .b64 param0;\n"
	"\t\t.param .b32 retval0;\n"
	"\t\tst.param.b64 [param0], %rd1;\n"
	"\t\tcall.uni (retval0), helper, (param0);\n"
	"\t\tld.param.b32 %r4, [retval0];\n"
	"\t}\n"
	"\tst.global.u32 [%rd3+4], %r4;\n"                     /* 13 */
	"\tret;\n"
	"}\n";

static void check_synthetic(void)
{
	char *twin = NULL;
	size_t len;
	int n = check_module("synthetic", synthetic, sizeof(synthetic) - 1);

	CHECK(n == 13, "synthetic: %d checks, want 13", n);
	if (phos_ptx_twin(synthetic, sizeof(synthetic) - 1, &twin, &len) < 0)
		return;
	CHECK(strstr(twin, ".version 8.0\n.target sm_90\n.address_size 64\n// phos twin: begin\n"),
	      "the header is kept, the prologue follows it");
	CHECK(strstr(twin, "$L_skip:\n\t{ .reg .b64 %__pa; .param .b64 __pp0; .param .b32 __pp1; "
			   "@%p1 bra $__phos_vskip2; add.s64 %__pa, %rd3, 0; st.param.b64 [__pp0], %__pa; "
			   "st.param.b32 [__pp1], 1; call.uni __phos_vcheck, (__pp0, __pp1); $__phos_vskip2: }\n"
			   "\t@!%p1 st.global.u32"),
	      "a guarded store after a label: the label first, then the block branched around, then the store");
	CHECK(strstr(twin, "$L_two: $L_three:\n\t{ .reg"), "two labels stay before the block");
	CHECK(strstr(twin, "add.s64 %__pa, %rd1, 16; st.param.b64 [__pp0], %__pa; "
			   "st.param.b32 [__pp1], 0; call.uni"), "cp.async: the global source, read");
	CHECK(strstr(twin, "add.s64 %__pa, %rd1, -4;"), "a negative offset");
	CHECK(strstr(twin, "add.s64 %__pa, %rd3, 8;"), "an offset with spaces");
	CHECK(strstr(twin, "@!p bra $__phos_vskip5; add.s64 %__pa, t, 0;"),
	      "a nested scope's register (no '%%') and guard");
	CHECK(strstr(twin, "add.s64 %__pa, %rd1, 0; st.param.b64 [__pp0], %__pa; st.param.b32 [__pp1], 1; "
			   "call.uni __phos_vcheck, (__pp0, __pp1); }\n\tatom.add"), "atom: a write");
	CHECK(strstr(twin, ".u64 __phos_vtab[769];") && strstr(twin, ".u64 __phos_varena[2];") &&
	      strstr(twin, ".u32 __phos_vmiss;") && strstr(twin, ".u64 __phos_vlast;"),
	      "the twin's module-scope objects");

	/* symbol and immediate addresses are not checked */
	{
		static const char sym[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
					  ".global .u32 gv[4];\n"
					  ".entry k(.param .u64 p) { .reg .b32 %r<2>; ld.global.u32 %r1, [gv+4]; "
					  "st.global.u32 [0], %r1; ld.u32 %r1, [p]; st.u32 [gv], %r1; ret; }\n";
		char *o = NULL;
		size_t olen;

		CHECK(phos_ptx_twin(sym, sizeof(sym) - 1, &o, &olen) == 0 && o && !strstr(o, "{ .reg .b64 %__pa;"),
		      "symbol and immediate addresses");
		free(o);
	}

	/* a twin of a twin is refused: its names are taken */
	{
		char *again = NULL;
		size_t alen;

		CHECK(phos_ptx_twin(twin, len, &again, &alen) == -EBADMSG, "a twin of a twin");
		free(again);
	}
	free(twin);
}

/* ---- malformed input -------------------------------------------------- */

static int twin_of(const char *s)
{
	char *o = (char *)0x1;
	size_t n = 0;
	int r = phos_ptx_twin(s, strlen(s), &o, &n);

	if (r == 0) {
		CHECK(o && strlen(o) == n, "output length");
		free(o);
	} else {
		CHECK(o == (char *)0x1 && n == 0, "ret_* untouched on failure");
	}
	return r;
}

static void check_malformed(void)
{
	static const char *const bad[] = {
		"",
		".version 8.0\n.target sm_90\n",                                       /* no .address_size */
		".version 8.0\n.target sm_90\n.address_size 32\n",                     /* 32-bit */
		".version 8.0\n.target sm_90\n.entry k() { ret; }\n.address_size 64\n",  /* late header */
		".version 8.0\n.target sm_90\n.address_size 64\n.entry k() { ret;",    /* unclosed */
		".version 8.0\n.target sm_90\n.address_size 64\n.entry k() { ld.global.u32 %r1, [%]; }",
		".version 8.0\n.target sm_90\n.address_size 64\n.entry k() { ld.global.u32 %r1, [%rd1+x]; }",
		".version 8.0\n.target sm_90\n.address_size 64\n.entry k() { ld.global.u32 %r1, [%rd1; }",
		".version 8.0\n.target sm_90\n.address_size 64\n.entry k() { .reg .b64 %__pa; ret; }",
		".version 8.0\n.target sm_90\n.address_size 64\n}\n",
		".version 8.0\n.target sm_90\n.address_size 64\n.entry k() { @! ld.global.u32 %r1, [%rd1]; }",
		".version 8.0\n.target sm_90\n.address_size 64\n.entry k(",
	};
	static const char *const good[] = {
		".version 8.0\n.target sm_90\n.address_size 64\n",
		".version 8.0\n.target sm_90\n.address_size 64\n.entry k() { ret; }\n",
		".version 8.0\n.target sm_90\n.address_size 64\n.entry k();\n",
		".version 8.0\n.target sm_90\n.address_size 64\n.entry k() { ld.global.u32 %r1, [%rd1+0x7fffffff]; }",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(twin_of(bad[i]) == -EBADMSG, "bad[%zu] accepted", i);
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		CHECK(twin_of(good[i]) == 0, "good[%zu] refused", i);

	/* NUL inside, NUL at the end (fatbin PTX), too big */
	{
		static const char nul[] = ".version 8.0\n.target sm_90\n\0.address_size 64\n";
		static const char tail[] = ".version 8.0\n.target sm_90\n.address_size 64\n\0\0";
		char *o = NULL, *big;
		size_t n;

		CHECK(phos_ptx_twin(nul, sizeof(nul) - 1, &o, &n) == -EBADMSG, "an embedded NUL");
		CHECK(phos_ptx_twin(tail, sizeof(tail) - 1, &o, &n) == 0 && o && strlen(o) == n,
		      "trailing NULs");
		free(o);
		o = NULL;
		big = calloc(1, (size_t)PHOS_TWIN_MAX_INPUT + 1);      /* untouched pages: cheap */
		CHECK(big && phos_ptx_twin(big, (size_t)PHOS_TWIN_MAX_INPUT + 1, &o, &n) == -E2BIG,
		      "the size cap");
		free(big);
	}
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Seeded mutations of a module: each an error or a module, never a crash. */
static void check_mutations(const char *text, size_t len)
{
	static const char junk[] = "{}[];:@%.,+-\"/*\n 0x";
	unsigned ok = 0, err = 0;
	char *m = malloc(len + 64);

	for (int i = 0; i < 1000; i++) {
		size_t n = len, at, k;
		char *o = NULL;
		size_t olen;
		int r;

		memcpy(m, text, len);
		for (int j = 0, edits = 1 + (int)(next_rand() % 8); j < edits; j++) {
			at = next_rand() % n;
			switch (next_rand() % 4) {
			case 0:         /* overwrite with a structural character */
				m[at] = junk[next_rand() % (sizeof(junk) - 1)];
				break;
			case 1:         /* delete a run */
				k = next_rand() % 64;
				if (at + k > n)
					k = n - at;
				memmove(m + at, m + at + k, n - at - k);
				n -= k;
				break;
			case 2:         /* truncate */
				n = at + 1;
				break;
			default:        /* a random byte */
				m[at] = (char)(next_rand() & 0xff);
				break;
			}
			if (n < 2)
				break;
		}
		r = phos_ptx_twin(m, n, &o, &olen);
		CHECK(r == 0 || r == -EBADMSG, "mutation %d: %d", i, r);
		if (r == 0) {
			CHECK(o && strlen(o) == olen, "mutation %d: output length", i);
			ok++;
		} else {
			err++;
		}
		free(o);
	}
	free(m);
	printf("mutations: %u modules, %u refused\n", ok, err);
}

int main(int argc, char **argv)
{
	size_t len;
	char *corpus;
	int n, examples = 0;

	if (argc < 3) {
		fprintf(stderr, "usage: test_twin PTXAS corpus.ptx [example.ptx...]\n");
		return 1;
	}
	if (access(argv[1], X_OK) == 0 && mkdtemp(tmpdir))
		ptxas = argv[1];
	else
		printf("SKIP ptxas checks: %s is not executable\n", argv[1]);

	corpus = check_read_file(argv[2], &len);
	n = check_module(argv[2], corpus, len);
	CHECK(n >= 100, "the corpus has only %d checks", n);
	for (int i = 3; i < argc; i++) {
		size_t elen;
		char *ex = check_read_file(argv[i], &elen);

		n = check_module(argv[i], ex, elen);
		examples += n > 0 ? n : 0;      /* gemm.cu has no kernels of its own */
		free(ex);
	}
	CHECK(argc == 3 || examples > 0, "no checks in the examples");
	check_synthetic();
	check_malformed();
	check_mutations(corpus, len);
	free(corpus);
	if (ptxas)
		rmdir(tmpdir);
	if (failures)
		fprintf(stderr, "%d failures\n", failures);
	return failures ? 1 : 0;
}
