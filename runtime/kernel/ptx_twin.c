/* SPDX-License-Identifier: MIT */
/*
 * The validation twin of a PTX module (ptx_twin.h has the rules). One pass over
 * the text: the module is copied as it is, and text is only ever inserted,
 * at two kinds of places:
 *
 *   - after ".address_size 64": the table, the counters and __phos_vcheck;
 *   - inside every .entry/.func body, before each statement with an
 *     instrumented operand (after its labels, before its guard): one check
 *     block per operand, a scope of its own, so it nests inside inline-asm
 *     scopes and never clashes with the kernel's names.
 *
 * The scanner only needs statements, not their meaning: comments and strings
 * are skipped, braces at a statement start open and close scopes, ';' outside
 * brackets ends a statement, "NAME:" at a statement start is a label.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptx_lex.h"
#include "ptx_twin.h"

_Static_assert(1 + 3 * PHOS_TWIN_MAX_RANGES == 769, "the prologue's table size");

/* Module scope of the twin, inserted after .address_size. */
static const char prologue[] =
	"\n// phos twin: begin\n"
	".visible .global .align 8 .u64 __phos_vtab[769];\n"
	".visible .global .align 8 .u64 __phos_varena[2];\n"
	".visible .global .align 4 .u32 __phos_vmiss;\n"
	".visible .global .align 8 .u64 __phos_vlast;\n"
	".func __phos_vcheck(.param .b64 __phos_vcheck_addr, .param .b32 __phos_vcheck_write)\n"
	"{\n"
	"\t.reg .pred %p<3>;\n"
	"\t.reg .b32 %r<3>;\n"
	"\t.reg .b64 %rd<11>;\n"
	"\tld.param.u64 %rd1, [__phos_vcheck_addr];\n"
	"\tld.param.u32 %r1, [__phos_vcheck_write];\n"
	"\tld.global.u64 %rd2, [__phos_varena];\n"
	"\tld.global.u64 %rd3, [__phos_varena+8];\n"
	"\tsetp.lo.u64 %p1, %rd1, %rd2;\n"
	"\tsetp.hs.or.u64 %p1, %rd1, %rd3, %p1;\n"
	"\t@%p1 bra $__phos_vcheck_done;\n"
	"\tsetp.ne.u32 %p2, %r1, 0;\n"
	"\tselp.u64 %rd4, 2, 1, %p2;\n"                 /* the bit the access needs */
	"\tld.global.u64 %rd5, [__phos_vtab];\n"
	"\tmin.u64 %rd5, %rd5, 256;\n"
	"\tmov.u64 %rd6, __phos_vtab;\n"
	"\tadd.u64 %rd6, %rd6, 8;\n"                    /* the first triple */
	"\tmad.lo.u64 %rd7, %rd5, 24, %rd6;\n"          /* past the last one */
	"$__phos_vcheck_next:\n"
	"\tsetp.hs.u64 %p1, %rd6, %rd7;\n"
	"\t@%p1 bra $__phos_vcheck_miss;\n"
	"\tld.global.u64 %rd8, [%rd6];\n"
	"\tld.global.u64 %rd9, [%rd6+8];\n"
	"\tld.global.u64 %rd10, [%rd6+16];\n"
	"\tadd.u64 %rd6, %rd6, 24;\n"
	"\tsetp.lo.u64 %p1, %rd1, %rd8;\n"
	"\tsetp.hs.or.u64 %p1, %rd1, %rd9, %p1;\n"
	"\tand.b64 %rd10, %rd10, %rd4;\n"
	"\tsetp.eq.or.u64 %p1, %rd10, 0, %p1;\n"
	"\t@%p1 bra $__phos_vcheck_next;\n"
	"\tbra.uni $__phos_vcheck_done;\n"
	"$__phos_vcheck_miss:\n"
	"\tatom.global.add.u32 %r2, [__phos_vmiss], 1;\n"
	"\tst.global.u64 [__phos_vlast], %rd1;\n"
	"$__phos_vcheck_done:\n"
	"\tret;\n"
	"}\n"
	"// phos twin: end\n";

/* Names the twin adds (and every name with the prefix __phos_v): a module
 * that already has them is refused. */
static const char *const own_names[] = { "%__pa", "__pp0", "__pp1" };

/* Real modules grow by about half (the corpus: 58 KB to 88 KB); a module of
 * nothing but one-operand accesses by about 25 times. The cap keeps a hostile
 * module from taking gigabytes. */
#define MAX_OUTPUT ((size_t)PHOS_TWIN_MAX_INPUT * 8)

struct out {
	char *buf;
	size_t len, cap;
	int err;                /* -ENOMEM or -E2BIG: nothing more is written */
};

struct reg_name {
	const char *name;
	size_t len;
	bool ranged;            /* "t<4>" */
};

struct twin {
	const char *text, *end;
	struct reg_name *regs;  /* .reg names without '%' of the current body */
	size_t nregs, cregs;
	const char *copied;     /* text before this is in out */
	struct out out;
	size_t checks;
};

static void out_put(struct out *o, const char *s, size_t n)
{
	if (o->err)
		return;
	if (o->len + n + 1 > MAX_OUTPUT) {
		o->err = -E2BIG;
		return;
	}
	if (o->len + n + 1 > o->cap) {
		size_t cap = o->cap ? o->cap : 1 << 16;
		char *b;

		while (cap < o->len + n + 1)
			cap *= 2;
		b = realloc(o->buf, cap);
		if (!b) {
			o->err = -ENOMEM;
			return;
		}
		o->buf = b;
		o->cap = cap;
	}
	memcpy(o->buf + o->len, s, n);
	o->len += n;
	o->buf[o->len] = 0;
}

static void out_str(struct out *o, const char *s)
{
	out_put(o, s, strlen(s));
}

/* Copies the module text up to p (not yet copied) to the output. */
static void copy_to(struct twin *t, const char *p)
{
	out_put(&t->out, t->copied, (size_t)(p - t->copied));
	t->copied = p;
}

/* Whether name occurs in text as a whole identifier. */
static bool has_ident(const char *text, size_t len, const char *name)
{
	size_t n = strlen(name);
	const char *p = text, *end = text + len, *q;

	while ((q = memmem(p, (size_t)(end - p), name, n))) {
		if ((q == text || !phos_ptx_is_ident(q[-1])) && (q + n == end || !phos_ptx_is_ident(q[n])))
			return true;
		p = q + 1;
	}
	return false;
}

/* "global", "shared::cta", ... as an opcode part: its state space. */
enum space { SP_NONE, SP_GLOBAL, SP_OTHER };

static enum space space_of(const char *p, size_t n)
{
	static const char *const others[] = { "shared", "local", "const", "param" };
	size_t k;

	if (n >= 6 && !memcmp(p, "global", 6) && (n == 6 || p[6] == ':'))
		return SP_GLOBAL;
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
		k = strlen(others[i]);
		if (n >= k && !memcmp(p, others[i], k) && (n == k || p[k] == ':'))
			return SP_OTHER;
	}
	return SP_NONE;
}

/* An integer literal of PTX (decimal, 0x, 0b, octal, optional U): its value. */
static int parse_int(const char *p, const char *end, long long *ret)
{
	unsigned long long v = 0;
	unsigned base = 10;
	bool neg = false;

	if (p < end && (*p == '-' || *p == '+')) {
		neg = *p == '-';
		p++;
		while (p < end && phos_ptx_is_space(*p))
			p++;
	}
	if (end > p && end[-1] == 'U')
		end--;
	if (p >= end)
		return -EBADMSG;
	if (end - p > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
		base = 16, p += 2;
	else if (end - p > 2 && p[0] == '0' && (p[1] == 'b' || p[1] == 'B'))
		base = 2, p += 2;
	else if (end - p > 1 && p[0] == '0')
		base = 8, p += 1;
	for (; p < end; p++) {
		unsigned d = *p >= '0' && *p <= '9' ? (unsigned)(*p - '0') :
			     *p >= 'a' && *p <= 'f' ? (unsigned)(*p - 'a' + 10) :
			     *p >= 'A' && *p <= 'F' ? (unsigned)(*p - 'A' + 10) : 99;

		if (d >= base || v > (1ull << 62))
			return -EBADMSG;
		v = v * base + d;
	}
	if (v > (1ull << 62))
		return -EBADMSG;
	*ret = neg ? -(long long)v : (long long)v;
	return 0;
}

/* Whether name[0..n) is a register: "%..." as nvcc names them, or a name a
 * .reg of this body declared (inline asm may say ".reg .b64 t;"). Anything
 * else in an address is a variable, a parameter or a label. */
static bool is_register(const struct twin *t, const char *name, size_t n)
{
	if (*name == '%')
		return true;
	for (size_t i = 0; i < t->nregs; i++) {
		const struct reg_name *r = &t->regs[i];
		size_t k;

		if (r->len == n && !memcmp(r->name, name, n))
			return true;
		if (!r->ranged || r->len >= n || memcmp(r->name, name, r->len))
			continue;
		for (k = r->len; k < n && name[k] >= '0' && name[k] <= '9'; k++)
			;
		if (k == n)
			return true;    /* "t<4>" declares t0..t3 */
	}
	return false;
}

/* ".reg .b64 a, b<4>" (s[0..e), after ".reg"): remembers the names without '%'. */
static int declare_registers(struct twin *t, const char *p, const char *e)
{
	while (p < e) {
		size_t n;
		const char *tk = phos_ptx_next_tok(p, e, &n);

		if (n == 0)
			break;
		p = tk + n;
		if (*tk == '.' || *tk == '%' || !phos_ptx_is_ident(*tk) || (*tk >= '0' && *tk <= '9'))
			continue;       /* types, '%' names, punctuation, counts */
		if (t->nregs == t->cregs) {
			size_t c = t->cregs ? t->cregs * 2 : 16;
			struct reg_name *r = realloc(t->regs, c * sizeof(*r));

			if (!r)
				return -ENOMEM;
			t->regs = r;
			t->cregs = c;
		}
		t->regs[t->nregs++] = (struct reg_name){ tk, n, p < e && phos_ptx_skip_ws(p, e) < e && *phos_ptx_skip_ws(p, e) == '<' };
	}
	return 0;
}

/* Emits the check block of the memory operand m[0..n) (its text inside the
 * brackets, comments blanked out) of a statement with guard g[0..gn). A
 * guarded statement gets a branch around the block: st.param cannot be
 * predicated. */
static int emit_check(struct twin *t, const char *g, size_t gn, const char *m, size_t n, bool write)
{
	const char *p = m, *end = m + n, *b, *be;
	long long off = 0;
	char num[64];

	while (p < end && phos_ptx_is_space(*p))
		p++;
	while (end > p && phos_ptx_is_space(end[-1]))
		end--;
	if (p == end)
		return -EBADMSG;
	b = p;
	for (be = b; be < end && phos_ptx_is_ident(*be); be++)
		;
	if (be == b || (*b == '%' && be == b + 1))
		return -EBADMSG;
	if ((*b >= '0' && *b <= '9') || !is_register(t, b, (size_t)(be - b)))
		return 0;       /* an immediate or a symbol: not instrumented */
	p = be;
	while (p < end && phos_ptx_is_space(*p))
		p++;
	if (p < end) {
		if (*p != '+' && *p != '-')
			return -EBADMSG;
		if (*p == '+')
			p++;
		while (p < end && phos_ptx_is_space(*p))
			p++;
		if (parse_int(p, end, &off) < 0)
			return -EBADMSG;
	}

	out_str(&t->out, "{ .reg .b64 %__pa; .param .b64 __pp0; .param .b32 __pp1; ");
	if (gn) {
		/* "@%p" → "@!%p", "@!%p" → "@%p" */
		out_str(&t->out, "@");
		if (gn > 1 && g[1] == '!')
			out_put(&t->out, g + 2, gn - 2);
		else
			out_put(&t->out, "!", 1), out_put(&t->out, g + 1, gn - 1);
		snprintf(num, sizeof(num), " bra $__phos_vskip%zu; ", t->checks);
		out_str(&t->out, num);
	}
	out_str(&t->out, "add.s64 %__pa, ");
	out_put(&t->out, b, (size_t)(be - b));
	snprintf(num, sizeof(num), ", %lld; ", off);
	out_str(&t->out, num);
	out_str(&t->out, "st.param.b64 [__pp0], %__pa; ");
	out_str(&t->out, write ? "st.param.b32 [__pp1], 1; " : "st.param.b32 [__pp1], 0; ");
	out_str(&t->out, "call.uni __phos_vcheck, (__pp0, __pp1); ");
	if (gn) {
		snprintf(num, sizeof(num), "$__phos_vskip%zu: ", t->checks);
		out_str(&t->out, num);
	}
	out_str(&t->out, "}\n\t");
	t->checks++;
	return 0;
}

enum op_kind { K_NONE, K_ACCESS, K_COPY };

/* What a statement's opcode says: a memory access (writing or not) or a
 * copy, and the spaces it names in order. */
struct twin_op {
	enum op_kind kind;
	bool write, other_space, skip, prefetch;
	enum space spaces[4];
	size_t nspaces;
};

/* The opcode op..op_end into *o; false for an opcode that touches no
 * memory the twin checks. */
static bool twin_opcode(const char *op, const char *op_end, struct twin_op *o)
{
	const char *q;

	for (q = op; q < op_end && *q != '.'; q++)
		;
	if (phos_ptx_tok_is(op, (size_t)(q - op), "ld") || phos_ptx_tok_is(op, (size_t)(q - op), "ldu")) {
		o->kind = K_ACCESS;
	} else if (phos_ptx_tok_is(op, (size_t)(q - op), "prefetch") || phos_ptx_tok_is(op, (size_t)(q - op), "prefetchu")) {
		o->kind = K_ACCESS;
	} else if (phos_ptx_tok_is(op, (size_t)(q - op), "st") || phos_ptx_tok_is(op, (size_t)(q - op), "atom") ||
		   phos_ptx_tok_is(op, (size_t)(q - op), "red")) {
		o->kind = K_ACCESS;
		o->write = true;
	} else if (phos_ptx_tok_is(op, (size_t)(q - op), "cp")) {
		o->kind = K_COPY;
	} else {
		return false;
	}
	while (q < op_end) {
		const char *part = ++q;
		size_t n;
		enum space sp;

		while (q < op_end && *q != '.')
			q++;
		n = (size_t)(q - part);
		sp = space_of(part, n);
		if (sp != SP_NONE && o->nspaces < sizeof(o->spaces) / sizeof(o->spaces[0]))
			o->spaces[o->nspaces++] = sp;
		o->other_space |= sp == SP_OTHER;
		o->skip |= phos_ptx_tok_is(part, n, "tensor") || phos_ptx_tok_is(part, n, "tensormap");
		o->prefetch |= phos_ptx_tok_is(part, n, "prefetch");
	}
	return !(o->skip || (o->kind == K_ACCESS && o->other_space));
}

/* The operands p..ce (comments blanked), split on top-level commas: a check
 * block for the access's address, or for each global operand of a copy. */
static int twin_operands(struct twin *t, const char *s, size_t gn, const struct twin_op *op, const char *p,
			 const char *ce)
{
	size_t nmem = 0;
	int r = 0;

	while (p < ce && r == 0) {
		const char *o;
		int depth = 0;

		while (p < ce && phos_ptx_is_space(*p))
			p++;
		o = p;
		for (; p < ce; p++) {
			if (*p == '[' || *p == '{' || *p == '(')
				depth++;
			else if (*p == ']' || *p == '}' || *p == ')')
				depth--;
			else if (*p == ',' && depth == 0)
				break;
		}
		if (o < p && *o == '[') {
			const char *c = p;

			while (c > o && phos_ptx_is_space(c[-1]))
				c--;
			if (c[-1] != ']' || c - o < 2)
				return -EBADMSG;
			if (op->kind == K_ACCESS) {
				if (nmem == 0)
					r = emit_check(t, s, gn, o + 1, (size_t)(c - o - 2), op->write);
			} else if (nmem < op->nspaces && op->spaces[nmem] == SP_GLOBAL) {
				/* cp: the first operand is the destination, except for a prefetch */
				r = emit_check(t, s, gn, o + 1, (size_t)(c - o - 2), nmem == 0 && !op->prefetch);
			}
			nmem++;
		}
		p += p < ce;
	}
	return r;
}

/* One statement s[0..e) of a body, labels stripped, without its ';'. */
static int statement(struct twin *t, const char *s, const char *e)
{
	const char *op, *op_end, *q;
	struct twin_op o = { .kind = K_NONE };
	size_t gn = 0;
	char *clean;
	int r;

	if (*s == '.') {        /* .reg, .local, .pragma, ... */
		for (q = s; q < e && !phos_ptx_is_space(*q); q++)
			;
		return phos_ptx_tok_is(s, (size_t)(q - s), ".reg") ? declare_registers(t, q, e) : 0;
	}
	op = s;
	if (*s == '@') {
		while (op < e && !phos_ptx_is_space(*op))
			op++;
		gn = (size_t)(op - s);
		op = phos_ptx_skip_ws(op, e);
	}
	if (gn == 1 || (gn == 2 && s[1] == '!'))
		return -EBADMSG;        /* a guard without a predicate */
	for (op_end = op; op_end < e && !phos_ptx_is_space(*op_end); op_end++)
		;
	if (!twin_opcode(op, op_end, &o))
		return 0;
	/* the operands, comments blanked out */
	clean = malloc((size_t)(e - op_end) + 1);
	if (!clean)
		return -ENOMEM;
	for (const char *p = op_end; p < e;) {
		const char *c = *p == '"' ? p : phos_ptx_skip_comment(p, e);

		if (c != p) {
			memset(clean + (p - op_end), ' ', (size_t)(c - p));
			p = c;
		} else {
			clean[p - op_end] = *p;
			p++;
		}
	}
	r = twin_operands(t, s, gn, &o, clean, clean + (e - op_end));
	free(clean);
	return r;
}

/* The body "{ ... }" at p: copied with its check blocks. Returns 0 and the
 * end of the body in *ret_end, or -EBADMSG when the braces do not close. */
static int body(struct twin *t, const char *p, const char **ret_end)
{
	const char *end = t->end, *s = NULL;
	int depth = 0, inner = 0, r;

	t->nregs = 0;

	for (; p < end; p++) {
		const char *q = phos_ptx_skip_comment(p, end);

		if (q != p) {
			p = q - 1;
			continue;
		}
		if (!s) {
			if (phos_ptx_is_space(*p))
				continue;
			if (*p == '{') {
				depth++;
				continue;
			}
			if (*p == '}') {
				if (--depth == 0) {
					*ret_end = p + 1;
					return 0;
				}
				continue;
			}
			if (depth == 0)
				return -EBADMSG;
			if (phos_ptx_is_ident(*p)) {
				/* a label "NAME:" (not "::"): the statement starts after it */
				for (q = p; q < end && phos_ptx_is_ident(*q); q++)
					;
				if (q < end && *q == ':' && (q + 1 == end || q[1] != ':')) {
					p = q;
					continue;
				}
			}
			s = p;
			inner = 0;
		}
		if (*p == '[' || *p == '{' || *p == '(') {
			inner++;
		} else if (*p == ']' || *p == '}' || *p == ')') {
			inner--;
		} else if (*p == ';' && inner <= 0) {
			/* check blocks go right before the statement (after its labels) */
			copy_to(t, s);
			r = statement(t, s, p);
			if (r < 0)
				return r;
			s = NULL;
		}
	}
	return -EBADMSG;
}

static int rewrite(struct twin *t)
{
	const char *p = t->text, *end = t->end;
	bool header = false;
	int depth = 0, r;

	while (p < end) {
		size_t n;
		const char *tk = phos_ptx_next_tok(p, end, &n);

		if (n == 0)
			break;
		p = tk + n;
		if (*tk == '{') {
			depth++;
			continue;
		}
		if (*tk == '}') {
			if (--depth < 0)
				return -EBADMSG;
			continue;
		}
		if (depth > 0)
			continue;
		if (phos_ptx_tok_is(tk, n, ".address_size")) {
			tk = phos_ptx_next_tok(p, end, &n);
			if (header || !phos_ptx_tok_is(tk, n, "64"))
				return -EBADMSG;        /* only 64-bit modules */
			p = tk + n;
			copy_to(t, p);
			out_str(&t->out, prologue);
			header = true;
			continue;
		}
		if (phos_ptx_tok_is(tk, n, ".entry") || phos_ptx_tok_is(tk, n, ".func")) {
			const char *b = p;
			int paren = 0;

			if (!header)
				return -EBADMSG;
			/* the body, or ';' of a declaration, outside the parameter lists */
			for (; b < end; b++) {
				const char *q = phos_ptx_skip_comment(b, end);

				if (q != b) {
					b = q - 1;
					continue;
				}
				paren += *b == '(';
				paren -= *b == ')';
				if (paren == 0 && (*b == '{' || *b == ';'))
					break;
			}
			if (b == end)
				return -EBADMSG;
			if (*b == ';') {
				p = b + 1;
				continue;
			}
			r = body(t, b, &p);
			if (r < 0)
				return r;
		}
	}
	if (!header || depth != 0)
		return -EBADMSG;
	copy_to(t, end);
	return 0;
}

int phos_ptx_twin(const char *text, size_t len, char **ret_text, size_t *ret_len)
{
	struct twin t = { 0 };
	int r;

	if (!text)
		return -EBADMSG;
	if (len > PHOS_TWIN_MAX_INPUT)
		return -E2BIG;
	while (len && !text[len - 1])
		len--;          /* fatbin PTX comes NUL-terminated */
	if (memchr(text, 0, len))
		return -EBADMSG;
	if (memmem(text, len, "__phos_v", 8))
		return -EBADMSG;
	for (size_t i = 0; i < sizeof(own_names) / sizeof(own_names[0]); i++)
		if (has_ident(text, len, own_names[i]))
			return -EBADMSG;
	t.text = t.copied = text;
	t.end = text + len;
	r = rewrite(&t);
	free(t.regs);
	if (r == 0 && t.out.err)
		r = t.out.err;
	if (r < 0) {
		free(t.out.buf);
		return r;
	}
	*ret_text = t.out.buf;
	*ret_len = t.out.len;
	return 0;
}
