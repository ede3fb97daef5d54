/* SPDX-License-Identifier: MIT */
/*
 * PTX access analysis (ptx_access.h has the rules). The module text is read in
 * three steps:
 *
 *   1. module scope: names of .global/.const variables (module variables, which
 *      the restore engine restores like buffers), .shared variables, functions;
 *   2. per .entry: parameter offsets, then the body split into statements
 *      (labels, guards and inline-asm scopes stripped) and each statement into
 *      an opcode with classified operands;
 *   3. taints iterated to a fixpoint over all statements, then every memory
 *      operand judged once.
 *
 * The parser is bounded and never trusts the input: a statement it cannot read
 * makes its kernel OPAQUE with that statement as the reason.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptx_access.h"
#include "ptx_lex.h"

#define NW (PHOS_ACCESS_WORDS / 64)
#define MAX_INSNS (1u << 20)
#define MAX_REGS (1u << 18)
#define MAX_ROUNDS 256

enum {
	T_IDX = 1,      /* loaded from memory, at most 32 bits wide */
	T_PTR = 2,      /* loaded from memory (or built) wide enough for an address */
	T_SYM = 4,      /* address of a module variable (.global/.const) */
	T_LOCAL = 8,    /* address of shared or local memory */
	T_PADDR = 16,   /* address of a kernel parameter */
	T_HIGH = 32,    /* derives from parameter bytes past PHOS_ACCESS_WORDS words */
};

struct taint {
	uint64_t w[NW];
	uint8_t f;
};

enum sym_kind { SYM_PARAM, SYM_GLOBAL, SYM_LOCAL, SYM_OTHER };

struct sym {
	const char *name;
	size_t len;
	uint8_t kind;
	uint32_t off, size;     /* SYM_PARAM: bytes in the parameter space */
};

enum op_kind { OP_NONE, OP_REG, OP_VEC, OP_IMM, OP_SYM, OP_MEM };
enum space { SP_GENERIC, SP_GLOBAL, SP_SHARED, SP_LOCAL, SP_CONST, SP_PARAM };

struct operand {
	uint8_t kind;
	uint8_t space;          /* OP_MEM */
	uint8_t base;           /* OP_MEM: OP_REG, OP_SYM or OP_IMM */
	uint16_t nvec;          /* OP_VEC */
	int32_t idx;            /* register, symbol, or first vector element (in vec[]) */
	int64_t imm;            /* OP_IMM value; OP_MEM offset */
	bool big;               /* OP_IMM: an integer of 2^32 or more */
};

enum insn_class {
	C_ARITH,    /* op0 = f(rest) */
	C_MUL,      /* mul/mad: op1 * op2 (+ op3) */
	C_SHL,      /* op1 << op2 */
	C_SELP,     /* op0 = op3 ? op1 : op2 */
	C_PRED,     /* defines a predicate: nothing to track */
	C_LOAD,     /* op0 = [op1] */
	C_STORE,    /* [op0] = rest */
	C_ATOM,     /* op0 = [op1] op= rest */
	C_RED,      /* [op0] op= rest */
	C_COPY,     /* cp.*: [op0] = [op1] */
	C_PREFETCH, /* [op0] is read */
	C_MBAR,     /* mbarrier: [mem] read and written, op0 a token if not memory */
	C_LOCALDEF, /* alloca, stacksave: op0 = a local address */
	C_NOP,      /* control flow, fences, barriers */
	C_OPAQUE,   /* the kernel is opaque */
};

struct insn {
	uint8_t cls;
	uint8_t width;          /* bytes of the destination type (or loaded element) */
	uint8_t nvec;           /* vector count of a load (.v2, .v4) */
	uint8_t spaces[4];      /* state spaces named in the opcode, in order */
	uint8_t nspaces;
	uint32_t op0, nops;     /* operands in ops[] */
	uint32_t text, tlen;    /* the statement, for reasons */
};

struct entry {
	const char *text;       /* the module */
	struct sym *syms;
	size_t nsyms, csyms;
	size_t nmodsyms;        /* syms[0..nmodsyms) are module scope */
	uint32_t param_bytes;

	struct insn *insns;
	size_t ninsns, cinsns;
	struct operand *ops;
	size_t nops, cops;
	int32_t *vec;
	size_t nvec, cvec;

	/* registers: open addressing on names */
	struct { const char *name; uint32_t len; int32_t id; } *rtab;
	size_t rcap;
	struct taint *reg;
	size_t nregs, cregs;

	struct phos_kernel_access acc;
	bool failed;            /* out of memory */
};

static bool grow(void **p, size_t *cap, size_t need, size_t elem)
{
	size_t n;
	void *q;

	if (need <= *cap)
		return true;
	n = *cap ? *cap * 2 : 64;
	while (n < need)
		n *= 2;
	q = realloc(*p, n * elem);
	if (!q)
		return false;
	*p = q;
	*cap = n;
	return true;
}

static void opaque(struct entry *e, const char *fmt, ...)
{
	va_list ap;

	if (e->acc.verdict == PHOS_ACCESS_OPAQUE && e->acc.why[0])
		return;         /* keep the first reason */
	e->acc.verdict = PHOS_ACCESS_OPAQUE;
	va_start(ap, fmt);
	vsnprintf(e->acc.why, sizeof(e->acc.why), fmt, ap);
	va_end(ap);
}

/* "why" quoting a statement, shortened and on one line. */
static void opaque_at(struct entry *e, const struct insn *in, const char *what)
{
	char s[96];
	size_t n = 0;

	for (uint32_t i = 0; i < in->tlen && n + 1 < sizeof(s); i++) {
		char c = e->text[in->text + i];

		if (phos_ptx_is_space(c)) {
			if (n && s[n - 1] == ' ')
				continue;
			c = ' ';
		}
		s[n++] = c;
	}
	s[n] = 0;
	opaque(e, "%s: %s", what, s);
}

/* ---- symbols ---------------------------------------------------------- */

static int sym_find(const struct entry *e, const char *name, size_t len)
{
	/* entry symbols shadow module ones: search from the end */
	for (size_t i = e->nsyms; i-- > 0;)
		if (e->syms[i].len == len && !memcmp(e->syms[i].name, name, len))
			return (int)i;
	return -1;
}

static int sym_add(struct entry *e, const char *name, size_t len, uint8_t kind, uint32_t off, uint32_t size)
{
	if (!grow((void **)&e->syms, &e->csyms, e->nsyms + 1, sizeof(*e->syms)))
		return -ENOMEM;
	e->syms[e->nsyms++] = (struct sym){ .name = name, .len = len, .kind = kind, .off = off, .size = size };
	return 0;
}

/* ---- registers -------------------------------------------------------- */

static uint64_t hash_name(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
	return h;
}

static int reg_id(struct entry *e, const char *name, size_t len)
{
	size_t i;

	if (e->nregs * 2 + 2 > e->rcap) {
		size_t ncap = e->rcap ? e->rcap * 2 : 256;
		void *nt;

		if (e->nregs >= MAX_REGS)
			return -E2BIG;
		nt = calloc(ncap, sizeof(*e->rtab));
		if (!nt)
			return -ENOMEM;
		for (size_t j = 0; j < e->rcap; j++) {
			if (!e->rtab[j].name)
				continue;
			i = hash_name(e->rtab[j].name, e->rtab[j].len) & (ncap - 1);
			while (((typeof(e->rtab))nt)[i].name)
				i = (i + 1) & (ncap - 1);
			((typeof(e->rtab))nt)[i] = e->rtab[j];
		}
		free(e->rtab);
		e->rtab = nt;
		e->rcap = ncap;
	}
	i = hash_name(name, len) & (e->rcap - 1);
	while (e->rtab[i].name) {
		if (e->rtab[i].len == len && !memcmp(e->rtab[i].name, name, len))
			return e->rtab[i].id;
		i = (i + 1) & (e->rcap - 1);
	}
	if (!grow((void **)&e->reg, &e->cregs, e->nregs + 1, sizeof(*e->reg)))
		return -ENOMEM;
	memset(&e->reg[e->nregs], 0, sizeof(*e->reg));
	e->rtab[i].name = name;
	e->rtab[i].len = (uint32_t)len;
	e->rtab[i].id = (int32_t)e->nregs;
	return (int)e->nregs++;
}

/* ---- taints ----------------------------------------------------------- */

static bool taint_or(struct taint *dst, const struct taint *src)
{
	bool changed = false;

	for (unsigned i = 0; i < NW; i++) {
		uint64_t n = dst->w[i] | src->w[i];

		changed |= n != dst->w[i];
		dst->w[i] = n;
	}
	if ((dst->f | src->f) != dst->f) {
		dst->f |= src->f;
		changed = true;
	}
	return changed;
}

static bool taint_words(const struct taint *t)
{
	for (unsigned i = 0; i < NW; i++)
		if (t->w[i])
			return true;
	return false;
}

/* Words [off, off+len) of the parameter space. */
static void taint_add_range(struct taint *t, uint64_t off, uint64_t len)
{
	if (len == 0)
		return;
	for (uint64_t w = off / 8; w <= (off + len - 1) / 8; w++) {
		if (w >= PHOS_ACCESS_WORDS) {
			t->f |= T_HIGH;
			break;
		}
		t->w[w / 64] |= 1ull << (w % 64);
	}
}

static void taint_of_sym(const struct entry *e, int s, struct taint *t)
{
	memset(t, 0, sizeof(*t));
	switch (e->syms[s].kind) {
	case SYM_PARAM:
		t->f = T_PADDR;
		taint_add_range(t, e->syms[s].off, e->syms[s].size);
		break;
	case SYM_GLOBAL:
		t->f = T_SYM;
		break;
	case SYM_LOCAL:
		t->f = T_LOCAL;
		break;
	default:
		t->f = T_PTR;   /* a function or an unknown name: no provable target */
		break;
	}
}

static void taint_of(const struct entry *e, const struct operand *o, struct taint *t)
{
	memset(t, 0, sizeof(*t));
	switch (o->kind) {
	case OP_REG:
		*t = e->reg[o->idx];
		break;
	case OP_VEC:
		for (unsigned i = 0; i < o->nvec; i++)
			if (e->vec[o->idx + i] >= 0)
				taint_or(t, &e->reg[e->vec[o->idx + i]]);
		/* two halves packed into one wide value may rebuild an address */
		if (o->nvec > 1 && (t->f & (T_IDX | T_PTR)))
			t->f |= T_PTR;
		break;
	case OP_IMM:
		if (o->big)
			t->f = T_PTR;   /* a literal that can be an address */
		break;
	case OP_SYM:
		taint_of_sym(e, o->idx, t);
		break;
	default:
		break;
	}
}

/* ---- statements ------------------------------------------------------- */

static const char *const type_names[] = {
	"b8", "u8", "s8", "e4m3", "e5m2", "b16", "u16", "s16", "f16", "bf16", "b32", "u32", "s32",
	"f32", "f16x2", "bf16x2", "tf32", "b64", "u64", "s64", "f64", "b128",
};
static const uint8_t type_bytes[] = { 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 4, 4, 4, 4, 4, 4, 4, 8, 8, 8, 8, 16 };

static int type_size(const char *p, size_t n)
{
	for (size_t i = 0; i < sizeof(type_names) / sizeof(type_names[0]); i++)
		if (strlen(type_names[i]) == n && !memcmp(type_names[i], p, n))
			return type_bytes[i];
	return 0;
}

static bool part_starts(const char *p, size_t n, const char *s)
{
	size_t k = strlen(s);

	return n >= k && !memcmp(p, s, k) && (n == k || p[k] == ':');
}

struct opcode_info {
	uint8_t cls;
	const char *reason;     /* C_OPAQUE */
};

static struct opcode_info classify(const char *base, size_t n)
{
	static const struct { const char *name; uint8_t cls; const char *reason; } table[] = {
		{ "ld", C_LOAD, NULL }, { "ldu", C_LOAD, NULL }, { "ldmatrix", C_LOAD, NULL },
		{ "st", C_STORE, NULL }, { "stmatrix", C_STORE, NULL }, { "atom", C_ATOM, NULL },
		{ "red", C_RED, NULL }, { "cp", C_COPY, NULL }, { "prefetch", C_PREFETCH, NULL },
		{ "prefetchu", C_PREFETCH, NULL }, { "applypriority", C_RED, NULL }, { "discard", C_RED, NULL },
		{ "mbarrier", C_MBAR, NULL }, { "alloca", C_LOCALDEF, NULL }, { "stacksave", C_LOCALDEF, NULL },
		{ "mul", C_MUL, NULL }, { "mul24", C_MUL, NULL }, { "mad", C_MUL, NULL },
		{ "mad24", C_MUL, NULL }, { "madc", C_MUL, NULL }, { "shl", C_SHL, NULL },
		{ "selp", C_SELP, NULL }, { "setp", C_PRED, NULL }, { "set", C_PRED, NULL },
		{ "isspacep", C_PRED, NULL }, { "vote", C_PRED, NULL },
		{ "bra", C_NOP, NULL }, { "brx", C_NOP, NULL }, { "ret", C_NOP, NULL }, { "exit", C_NOP, NULL },
		{ "bar", C_NOP, NULL }, { "barrier", C_NOP, NULL }, { "membar", C_NOP, NULL },
		{ "fence", C_NOP, NULL }, { "trap", C_NOP, NULL }, { "brkpt", C_NOP, NULL },
		{ "nanosleep", C_NOP, NULL }, { "pmevent", C_NOP, NULL }, { "griddepcontrol", C_NOP, NULL },
		{ "stackrestore", C_NOP, NULL }, { "setmaxnreg", C_NOP, NULL },
		{ "call", C_OPAQUE, "calls a function" },
		{ "tex", C_OPAQUE, "texture access" }, { "tld4", C_OPAQUE, "texture access" },
		{ "txq", C_OPAQUE, "texture access" }, { "suld", C_OPAQUE, "surface access" },
		{ "sust", C_OPAQUE, "surface access" }, { "sured", C_OPAQUE, "surface access" },
		{ "suq", C_OPAQUE, "surface access" }, { "istypep", C_OPAQUE, "texture access" },
		{ "tensormap", C_OPAQUE, "tensor map instruction" },
		{ "multimem", C_OPAQUE, "multimem access" }, { "wgmma", C_OPAQUE, "descriptor-driven MMA" },
		{ "tcgen05", C_OPAQUE, "tensor memory instruction" }, { "clusterlaunchcontrol", C_OPAQUE, "launch control" },
	};

	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (phos_ptx_tok_is(base, n, table[i].name))
			return (struct opcode_info){ table[i].cls, table[i].reason };
	return (struct opcode_info){ C_ARITH, NULL };
}

static int parse_number(const char *p, size_t n, int64_t *ret, bool *ret_big)
{
	bool neg = false;
	uint64_t v = 0;
	size_t i = 0;

	if (n && (p[0] == '-' || p[0] == '+')) {
		neg = p[0] == '-';
		i = 1;
	}
	if (i >= n)
		return -1;
	if (n - i >= 2 && p[i] == '0' && (p[i + 1] == 'f' || p[i + 1] == 'F' || p[i + 1] == 'd' ||
					  p[i + 1] == 'D')) {
		*ret = 0;       /* float literal: never an address */
		*ret_big = false;
		return 0;
	}
	if (n - i >= 2 && p[i] == '0' && (p[i + 1] == 'x' || p[i + 1] == 'X')) {
		i += 2;
		if (i >= n)
			return -1;
		for (; i < n && p[i] != 'U'; i++) {
			char c = p[i];
			unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') :
				     c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) :
				     c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 99;
			if (d == 99)
				return -1;
			v = v * 16 + d;
		}
	} else {
		for (; i < n && p[i] != 'U'; i++) {
			if (p[i] < '0' || p[i] > '9')
				return -1;
			v = v * 10 + (uint64_t)(p[i] - '0');
		}
	}
	*ret = neg ? -(int64_t)v : (int64_t)v;
	*ret_big = v >= (1ull << 32) && !(neg && v <= (1ull << 32));
	return 0;
}

static const char *trim(const char *p, const char *end, const char **ret_end)
{
	while (p < end && phos_ptx_is_space(*p))
		p++;
	while (end > p && phos_ptx_is_space(end[-1]))
		end--;
	*ret_end = end;
	return p;
}

/* One plain operand (no brackets): a register, a vector, an immediate or a name. */
static int parse_plain(struct entry *e, const char *p, const char *end, struct operand *o)
{
	p = trim(p, end, &end);
	memset(o, 0, sizeof(*o));
	if (p == end)
		return -1;
	if (*p == '!' )
		p++;
	if (*p == '{') {
		const char *q = p + 1, *close = end - 1;

		if (*close != '}')
			return -1;
		o->kind = OP_VEC;
		o->idx = (int32_t)e->nvec;
		while (q < close) {
			const char *c = q, *ve;
			int32_t r = -1;

			while (c < close && *c != ',')
				c++;
			q = trim(q, c, &ve);
			if (q < ve && *q == '%') {
				r = reg_id(e, q, (size_t)(ve - q));
				if (r < 0)
					return r == -ENOMEM ? -ENOMEM : -1;
			}       /* else an immediate or the sink "_": no register */
			if (!grow((void **)&e->vec, &e->cvec, e->nvec + 1, sizeof(*e->vec)))
				return -ENOMEM;
			e->vec[e->nvec++] = r;
			o->nvec++;
			q = c + 1;
		}
		return 0;
	}
	if (*p == '%') {
		const char *bar = memchr(p, '|', (size_t)(end - p));
		int r;

		if (bar)
			end = bar;      /* setp's "%p|%q": predicates, not tracked */
		r = reg_id(e, p, (size_t)(end - p));
		if (r < 0)
			return r == -ENOMEM ? -ENOMEM : -1;
		o->kind = OP_REG;
		o->idx = r;
		return 0;
	}
	if ((*p >= '0' && *p <= '9') || *p == '-' || *p == '+') {
		o->kind = OP_IMM;
		return parse_number(p, (size_t)(end - p), &o->imm, &o->big);
	}
	if (*p == '_' && end - p == 1) {
		o->kind = OP_NONE;      /* sink */
		return 0;
	}
	if (phos_ptx_is_ident(*p) || *p == '.') {
		int s = sym_find(e, p, (size_t)(end - p));

		if (s < 0) {
			/* labels and function names in bra/call, or a name we never saw */
			int r = sym_add(e, p, (size_t)(end - p), SYM_OTHER, 0, 0);

			if (r < 0)
				return r;
			s = (int)e->nsyms - 1;
		}
		o->kind = OP_SYM;
		o->idx = s;
		return 0;
	}
	return -1;
}

/* "[base+off]" */
static int parse_mem(struct entry *e, const char *p, const char *end, struct operand *o)
{
	const char *plus = NULL;
	struct operand b;
	int r;

	p = trim(p + 1, end - 1, &end);        /* inside the brackets */
	for (const char *q = p + 1; q < end; q++)
		if (*q == '+' || (*q == '-' && q[-1] != '+')) {
			plus = q;
			break;
		}
	r = parse_plain(e, p, plus ? plus : end, &b);
	if (r < 0)
		return r;
	memset(o, 0, sizeof(*o));
	o->kind = OP_MEM;
	o->base = b.kind;
	o->idx = b.idx;
	if (b.kind == OP_IMM)
		o->imm = b.imm;
	if (b.kind != OP_REG && b.kind != OP_SYM && b.kind != OP_IMM)
		return -1;
	if (plus) {
		int64_t off;
		bool big;
		const char *q = plus[0] == '+' ? plus + 1 : plus, *qe;

		q = trim(q, end, &qe);
		if (parse_number(q, (size_t)(qe - q), &off, &big) < 0)
			return -1;
		o->imm = b.kind == OP_IMM ? o->imm + off : off;
	}
	return 0;
}

static uint8_t space_of(const char *p, size_t n)
{
	if (part_starts(p, n, "global"))
		return SP_GLOBAL;
	if (part_starts(p, n, "shared"))
		return SP_SHARED;
	if (part_starts(p, n, "local"))
		return SP_LOCAL;
	if (part_starts(p, n, "const"))
		return SP_CONST;
	if (part_starts(p, n, "param"))
		return SP_PARAM;
	return 0xff;
}

/* Device-runtime functions a kernel may call that touch no memory of the
 * program: cudaGraphSetConditional sets a condition of the graph that runs
 * the kernel (its arguments travel in .param space). */
static bool calls_pure(const char *p, const char *end)
{
	static const char *const pure[] = { "cudaGraphSetConditional" };
	const char *name;

	while (p < end && (phos_ptx_is_space(*p) || *p == ','))
		p++;
	if (p < end && *p == '(') {   /* a return parameter list */
		while (p < end && *p != ')')
			p++;
		p++;
		while (p < end && (phos_ptx_is_space(*p) || *p == ','))
			p++;
	}
	name = p;
	while (p < end && !phos_ptx_is_space(*p) && *p != ',' && *p != '(')
		p++;
	for (size_t i = 0; i < sizeof(pure) / sizeof(pure[0]); i++)
		if (phos_ptx_tok_is(name, (size_t)(p - name), pure[i]))
			return true;
	return false;
}

/* The opcode op..op_end (ld.global.v2.u64, ...) into in: its class, vector
 * width, memory spaces and access width; info->reason says why an opaque
 * class is opaque. */
static void parse_opcode(const char *op, const char *op_end, struct insn *in, struct opcode_info *info)
{
	const char *q = op;
	bool cvt, wide = false;
	int first_type = 0, last_type = 0;

	while (q < op_end && *q != '.')
		q++;
	*info = classify(op, (size_t)(q - op));
	in->cls = info->cls;
	cvt = phos_ptx_tok_is(op, (size_t)(q - op), "cvt");
	while (q < op_end) {
		const char *s = ++q;
		size_t n;
		int t;

		while (q < op_end && *q != '.')
			q++;
		n = (size_t)(q - s);
		t = type_size(s, n);
		if (t) {
			if (!first_type)
				first_type = t;
			last_type = t;
		} else if (phos_ptx_tok_is(s, n, "wide")) {
			wide = true;
		} else if (n == 2 && s[0] == 'v' && (s[1] == '2' || s[1] == '4' || s[1] == '8')) {
			in->nvec = (uint8_t)(s[1] - '0');
		} else if (phos_ptx_tok_is(s, n, "tensor") && in->cls == C_COPY) {
			in->cls = C_OPAQUE;
			info->reason = "TMA tensor copy";
		} else if (phos_ptx_tok_is(s, n, "tensormap")) {
			in->cls = C_OPAQUE;
			info->reason = "tensor map access";
		} else if (space_of(s, n) != 0xff && in->nspaces < sizeof(in->spaces)) {
			in->spaces[in->nspaces++] = space_of(s, n);
		} else if (in->cls == C_ARITH && phos_ptx_tok_is(op, 4, "wmma")) {
			if (phos_ptx_tok_is(s, n, "load"))
				in->cls = C_LOAD;
			else if (phos_ptx_tok_is(s, n, "store"))
				in->cls = C_STORE;
		}
	}
	in->width = (uint8_t)(cvt ? first_type : last_type);
	if (wide && in->width && in->width < 16)
		in->width *= 2;
	if (!in->width)
		in->width = 8;   /* unknown: wide enough for an address */
}

/* The operands p..end, split on top-level commas, appended to e->ops (in:
 * their first and count). 1 when one is unreadable (in made opaque), 0, or
 * -ENOMEM. */
static int parse_operands(struct entry *e, struct insn *in, const char *p, const char *end)
{
	in->op0 = (uint32_t)e->nops;
	while (p < end) {
		int depth = 0, r;
		const char *s, *ts, *te;
		struct operand o;

		while (p < end && phos_ptx_is_space(*p))
			p++;
		if (p == end)
			break;
		s = p;
		for (; p < end; p++) {
			if (*p == '[' || *p == '{' || *p == '(')
				depth++;
			else if (*p == ']' || *p == '}' || *p == ')')
				depth--;
			else if (*p == ',' && depth == 0)
				break;
		}
		ts = trim(s, p, &te);
		r = ts < te && *ts == '[' && te[-1] == ']' ? parse_mem(e, ts, te, &o) : parse_plain(e, s, p, &o);
		if (r == -ENOMEM)
			return r;
		if (r < 0) {
			opaque_at(e, in, "unreadable operand");
			return 1;
		}
		if (!grow((void **)&e->ops, &e->cops, e->nops + 1, sizeof(*e->ops)))
			return -ENOMEM;
		e->ops[e->nops++] = o;
		in->nops++;
		if (p < end)
			p++;    /* the comma */
	}
	return 0;
}

/* One statement (no ';', labels and guard already removed). */
static int parse_statement(struct entry *e, const char *p, const char *end)
{
	const char *op = p, *op_end;
	struct insn in = { 0 };
	struct opcode_info info;
	int r;

	while (p < end && !phos_ptx_is_space(*p))
		p++;
	op_end = p;
	in.text = (uint32_t)(op - e->text);
	in.tlen = (uint32_t)(end - op);
	in.nvec = 1;
	parse_opcode(op, op_end, &in, &info);
	if (in.cls == C_OPAQUE && info.reason && !strcmp(info.reason, "calls a function") && calls_pure(op_end, end))
		return 0;
	if (in.cls == C_OPAQUE) {
		opaque_at(e, &in, info.reason);
		return 0;
	}
	if (in.cls == C_NOP)
		return 0;
	r = parse_operands(e, &in, op_end, end);
	if (r != 0)
		return r < 0 ? r : 0;
	/* memory operands get the opcode's spaces in order */
	for (uint32_t i = 0, k = 0; i < in.nops; i++) {
		struct operand *o = &e->ops[in.op0 + i];

		if (o->kind != OP_MEM)
			continue;
		o->space = k < in.nspaces ? in.spaces[k] : SP_GENERIC;
		if (in.cls != C_COPY && in.nspaces == 1)
			o->space = in.spaces[0];
		k++;
	}
	if (in.cls == C_ARITH || in.cls == C_MUL || in.cls == C_SHL || in.cls == C_SELP) {
		for (uint32_t i = 0; i < in.nops; i++)
			if (e->ops[in.op0 + i].kind == OP_MEM) {
				opaque_at(e, &in, "unknown memory instruction");
				return 0;
			}
	}
	if (e->ninsns >= MAX_INSNS) {
		opaque(e, "more than %u instructions", MAX_INSNS);
		return 0;
	}
	if (!grow((void **)&e->insns, &e->cinsns, e->ninsns + 1, sizeof(*e->insns)))
		return -ENOMEM;
	e->insns[e->ninsns++] = in;
	return 0;
}

/* ---- evaluation ------------------------------------------------------- */

/* The taint of a memory operand's address. */
static void addr_taint(const struct entry *e, const struct operand *o, struct taint *t)
{
	memset(t, 0, sizeof(*t));
	if (o->base == OP_REG)
		*t = e->reg[o->idx];
	else if (o->base == OP_SYM)
		taint_of_sym(e, o->idx, t);
	/* OP_IMM: an absolute address, no provenance */
}

/* The value a load through address taint a in space sp gives. */
static void loaded_taint(const struct insn *in, const struct operand *m, const struct taint *a,
			 struct taint *t)
{
	memset(t, 0, sizeof(*t));
	if ((m->space == SP_PARAM || m->space == SP_GENERIC) && (a->f & T_PADDR) && !(a->f & T_PTR)) {
		/* a kernel parameter: its words (all of the symbol's, when indexed) */
		memcpy(t->w, a->w, sizeof(t->w));
		t->f = a->f & T_HIGH;
		return;
	}
	/* vector elements narrower than an address stay indices: packing them
	 * into one wide value later makes a ptr (taint_of, OP_VEC) */
	t->f = in->width >= 8 ? T_PTR : T_IDX;
}

static bool assign(struct entry *e, const struct operand *d, const struct taint *t)
{
	bool changed = false;

	if (d->kind == OP_REG)
		return taint_or(&e->reg[d->idx], t);
	if (d->kind == OP_VEC)
		for (unsigned i = 0; i < d->nvec; i++)
			if (e->vec[d->idx + i] >= 0)
				changed |= taint_or(&e->reg[e->vec[d->idx + i]], t);
	return changed;
}

/* An immediate that scales an index by an element size (2 .. 2^20). */
static bool scale_imm(const struct operand *o)
{
	return o->kind == OP_IMM && ((o->imm >= 2 && o->imm < (1 << 20)) || (o->imm <= -2 && o->imm > -(1 << 20)));
}

/* A load or an atomic: its destination gets what the address's memory
 * holds (for a kernel parameter, the words it reads). */
static bool eval_load(struct entry *e, const struct insn *in, const struct operand *o)
{
	const struct operand *m = NULL;
	struct taint t, u;

	for (uint32_t i = 1; i < in->nops; i++)
		if (o[i].kind == OP_MEM) {
			m = &o[i];
			break;
		}
	if (!m)
		return false;
	if (m->base == OP_SYM && e->syms[m->idx].kind == SYM_PARAM && m->space != SP_GLOBAL) {
		/* ld.param [k_param_1+8]: just the words it reads */
		const struct sym *s = &e->syms[m->idx];
		uint64_t w = (uint64_t)in->width * in->nvec;

		memset(&t, 0, sizeof(t));
		if (m->imm >= 0 && (uint64_t)m->imm + w <= s->size)
			taint_add_range(&t, s->off + (uint64_t)m->imm, w);
		else
			taint_add_range(&t, s->off, s->size);
		return assign(e, &o[0], &t);
	}
	addr_taint(e, m, &u);
	loaded_taint(in, m, &u, &t);
	return assign(e, &o[0], &t);
}

/* A multiplication's result (into *t, zeroed by the caller): its operands'
 * taints, widened to an address or narrowed to an index by what they are. */
static void mul_taint(const struct entry *e, const struct insn *in, const struct operand *o, struct taint *t)
{
	struct taint a, b, u;

	taint_of(e, &o[1], &a);
	taint_of(e, &o[2], &b);
	taint_or(t, &a);
	taint_or(t, &b);
	/* loaded × loaded, or loaded × a huge literal, is wide enough for an address */
	if (((a.f & (T_IDX | T_PTR)) && (b.f & (T_IDX | T_PTR))) ||
	    ((a.f & (T_IDX | T_PTR)) && o[2].kind == OP_IMM && (o[2].imm >= (1 << 20) || o[2].imm <= -(1 << 20))) ||
	    ((b.f & (T_IDX | T_PTR)) && o[1].kind == OP_IMM && (o[1].imm >= (1 << 20) || o[1].imm <= -(1 << 20))))
		t->f |= T_PTR;
	/* a 64-bit loaded value scaled by an element size (int64 indices:
	 * idx * 4) is an offset, not an address: an index */
	else if (((a.f & T_PTR) && scale_imm(&o[2])) || ((b.f & T_PTR) && scale_imm(&o[1])))
		t->f = (uint8_t)((t->f & ~T_PTR) | T_IDX);
	for (uint32_t i = 3; i < in->nops; i++) {
		taint_of(e, &o[i], &u);
		taint_or(t, &u);
	}
}

static bool eval(struct entry *e, const struct insn *in)
{
	const struct operand *o = &e->ops[in->op0];
	struct taint t, u;

	if (in->nops == 0)
		return false;
	switch (in->cls) {
	case C_LOAD:
	case C_ATOM:
		return eval_load(e, in, o);
	case C_MBAR:
		if (o[0].kind == OP_MEM)
			return false;
		memset(&t, 0, sizeof(t));
		t.f = T_IDX;    /* a state token, or a pending count */
		return assign(e, &o[0], &t);
	case C_LOCALDEF:
		memset(&t, 0, sizeof(t));
		t.f = T_LOCAL;
		return assign(e, &o[0], &t);
	case C_PRED:
	case C_STORE:
	case C_RED:
	case C_COPY:
	case C_PREFETCH:
		return false;
	default:
		break;
	}

	memset(&t, 0, sizeof(t));
	if (in->cls == C_SELP) {
		for (uint32_t i = 1; i < in->nops && i < 3; i++) {
			taint_of(e, &o[i], &u);
			taint_or(&t, &u);
		}
	} else if (in->cls == C_MUL && in->nops >= 3) {
		mul_taint(e, in, o, &t);
	} else if (in->cls == C_SHL && in->nops >= 3) {
		taint_of(e, &o[1], &t);
		taint_of(e, &o[2], &u);
		taint_or(&t, &u);
		if ((t.f & (T_IDX | T_PTR)) && !(o[2].kind == OP_IMM && o[2].imm >= 0 && o[2].imm < 16))
			t.f |= T_PTR;
		else if ((t.f & T_PTR) && o[2].kind == OP_IMM && o[2].imm >= 1)
			t.f = (uint8_t)((t.f & ~T_PTR) | T_IDX);        /* scaled: an index */
	} else {
		for (uint32_t i = 1; i < in->nops; i++) {
			taint_of(e, &o[i], &u);
			taint_or(&t, &u);
		}
	}
	/* a result of 32 bits or less cannot hold an address */
	if (in->width <= 4 && (t.f & T_PTR)) {
		t.f &= (uint8_t)~T_PTR;
		t.f |= T_IDX;
	}
	return assign(e, &o[0], &t);
}

static void judge_access(struct entry *e, const struct insn *in, const struct operand *m, uint8_t access)
{
	struct taint a;

	addr_taint(e, m, &a);
	switch (m->space) {
	case SP_SHARED:
	case SP_LOCAL:
		return;
	case SP_CONST:
		if (a.f & T_SYM)
			e->acc.globals |= PHOS_ACCESS_READ;
		return;
	case SP_PARAM:
		if ((a.f & T_LOCAL) && !(a.f & (T_PTR | T_PADDR)))
			return;   /* a call's argument slot (declared in the body) */
		if (!(a.f & T_PADDR) || (a.f & T_PTR))
			opaque_at(e, in, "parameter access through an unknown address");
		else if (access & PHOS_ACCESS_WRITE)
			opaque_at(e, in, "writes its parameters");
		return;
	default:
		break;
	}
	if (a.f & T_PTR) {
		opaque_at(e, in, "address loaded from memory");
		return;
	}
	if (a.f & T_PADDR) {
		if (access & PHOS_ACCESS_WRITE)
			opaque_at(e, in, "writes its parameters");
		return;         /* a generic read of a parameter */
	}
	if (a.f & T_HIGH) {
		opaque_at(e, in, "address from parameters past 4 KiB");
		return;
	}
	if (!taint_words(&a) && !(a.f & (T_SYM | T_LOCAL))) {
		opaque_at(e, in, "address not derived from parameters");
		return;
	}
	for (unsigned i = 0; i < NW; i++) {
		if (access & PHOS_ACCESS_READ)
			e->acc.read[i] |= a.w[i];
		if (access & PHOS_ACCESS_WRITE)
			e->acc.write[i] |= a.w[i];
	}
	if (a.f & T_SYM)
		e->acc.globals |= access;
}

static void judge(struct entry *e)
{
	for (size_t k = 0; k < e->ninsns; k++) {
		const struct insn *in = &e->insns[k];
		const struct operand *o = &e->ops[in->op0];
		bool first_mem = true;

		for (uint32_t i = 0; i < in->nops; i++) {
			uint8_t access;

			if (o[i].kind != OP_MEM)
				continue;
			switch (in->cls) {
			case C_LOAD:
			case C_PREFETCH:
				access = PHOS_ACCESS_READ;
				break;
			case C_STORE:
				access = PHOS_ACCESS_WRITE;
				break;
			case C_COPY:
				access = first_mem ? PHOS_ACCESS_WRITE : PHOS_ACCESS_READ;
				break;
			default:        /* atom, red, mbarrier, applypriority, discard */
				access = PHOS_ACCESS_READ | PHOS_ACCESS_WRITE;
				break;
			}
			first_mem = false;
			judge_access(e, in, &o[i], access);
		}
	}
}

/* ---- module and entries ----------------------------------------------- */

/* A declaration "... NAME[...] (= ...)? ;" starting at p: the name. */
static const char *decl_name(const char *p, const char *end, size_t *ret_len)
{
	const char *name = NULL;
	size_t nlen = 0;

	for (;;) {
		size_t n;
		const char *t = phos_ptx_next_tok(p, end, &n);

		if (n == 0 || *t == ';' || *t == '[' || *t == '=' || *t == ',') {
			*ret_len = nlen;
			return name;
		}
		if (*t != '.' && phos_ptx_is_ident(*t) && *t != '%') {
			name = t;
			nlen = n;
		}
		p = t + n;
	}
}

/* Parameters "( .param ..., ... )" at p; returns the end or NULL. */
static const char *parse_params(struct entry *e, const char *p, const char *end)
{
	size_t n;
	const char *t = phos_ptx_next_tok(p, end, &n);
	uint32_t cur = 0;

	if (n != 1 || *t != '(')
		return p;       /* no parameter list */
	p = t + 1;
	for (;;) {
		uint32_t align = 0, tsize = 0, count = 1, off;
		bool ptr = false;
		const char *name = NULL;
		size_t nlen = 0;

		t = phos_ptx_next_tok(p, end, &n);
		if (n == 1 && *t == ')')
			break;
		if (!phos_ptx_tok_is(t, n, ".param"))
			return NULL;
		p = t + n;
		for (;;) {
			t = phos_ptx_next_tok(p, end, &n);
			if (n == 0)
				return NULL;
			p = t + n;
			if (phos_ptx_tok_is(t, n, ".align")) {
				char buf[8];
				unsigned long a;

				t = phos_ptx_next_tok(p, end, &n);
				if (n == 0 || n >= sizeof(buf))
					return NULL;
				memcpy(buf, t, n);
				buf[n] = 0;
				a = strtoul(buf, NULL, 10);
				if (a == 0 || a > 4096 || (a & (a - 1)))
					return NULL;
				if (!ptr)
					align = (uint32_t)a;
				p = t + n;
			} else if (phos_ptx_tok_is(t, n, ".ptr")) {
				ptr = true;
			} else if (*t == '.') {
				int s = type_size(t + 1, n - 1);

				if (s)
					tsize = (uint32_t)s;
			} else if (phos_ptx_is_ident(*t)) {
				name = t;
				nlen = n;
				break;
			} else {
				return NULL;
			}
		}
		t = phos_ptx_next_tok(p, end, &n);
		if (n == 1 && *t == '[') {
			char buf[12];

			t = phos_ptx_next_tok(t + 1, end, &n);
			if (n == 0 || n >= sizeof(buf))
				return NULL;
			memcpy(buf, t, n);
			buf[n] = 0;
			count = (uint32_t)strtoul(buf, NULL, 10);
			t = phos_ptx_next_tok(t + n, end, &n);
			if (n != 1 || *t != ']')
				return NULL;
			t = phos_ptx_next_tok(t + 1, end, &n);
		}
		if (!tsize || !name || count == 0 || (uint64_t)tsize * count > 0x10000)
			return NULL;
		if (!align)
			align = tsize;
		off = (cur + align - 1) & ~(align - 1);
		if (sym_add(e, name, nlen, SYM_PARAM, off, tsize * count) < 0) {
			e->failed = true;
			return NULL;
		}
		cur = off + tsize * count;
		p = t + n;
		if (n == 1 && *t == ')')
			break;
		if (n != 1 || *t != ',')
			return NULL;
	}
	e->param_bytes = cur;
	return t + 1;
}

/* The body "{ ... }" at p: statements into e. Returns the end of the body, or
 * NULL when the braces do not close. */
static const char *parse_body(struct entry *e, const char *p, const char *end)
{
	int depth = 0;
	const char *s = NULL;   /* current statement */
	int inner = 0;          /* bracket/brace depth inside a statement */

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
				if (--depth == 0)
					return p + 1;
				continue;
			}
			if (depth == 0)
				return NULL;
			s = p;
			inner = 0;
		}
		if (*p == '[' || *p == '{' || *p == '(')
			inner++;
		else if (*p == ']' || *p == '}' || *p == ')')
			inner--;
		else if (*p == ';' && inner <= 0) {
			const char *st = s, *se = p;

			s = NULL;
			st = phos_ptx_skip_ws(st, se);
			/* labels "NAME:" (not "::") */
			for (;;) {
				const char *l = st;

				while (l < se && phos_ptx_is_ident(*l))
					l++;
				if (l > st && l < se && *l == ':' && (l + 1 >= se || l[1] != ':'))
					st = phos_ptx_skip_ws(l + 1, se);
				else
					break;
			}
			if (st >= se)
				continue;
			if (*st == '.') {
				size_t n;
				const char *t = phos_ptx_next_tok(st, se, &n);
				/* .param in a body: a call's argument or result slot,
				 * storage of the thread like .local */
				uint8_t kind = phos_ptx_tok_is(t, n, ".local") || phos_ptx_tok_is(t, n, ".shared") ||
							phos_ptx_tok_is(t, n, ".param") ? SYM_LOCAL : 0xff;

				if (kind != 0xff) {
					size_t nl;
					const char *name = decl_name(t + n, se, &nl);

					if (name && sym_add(e, name, nl, kind, 0, 0) < 0)
						return NULL;
				}
				continue;       /* .reg, .pragma, .loc, ... */
			}
			if (*st == '@') {       /* guard */
				while (st < se && !phos_ptx_is_space(*st))
					st++;
				st = phos_ptx_skip_ws(st, se);
			}
			if (st < se && parse_statement(e, st, se) == -ENOMEM) {
				e->failed = true;
				return NULL;
			}
		}
	}
	return NULL;
}

static void entry_reset(struct entry *e)
{
	e->nsyms = e->nmodsyms;
	e->ninsns = e->nops = e->nvec = e->nregs = 0;
	if (e->rtab)
		memset(e->rtab, 0, e->rcap * sizeof(*e->rtab));
	memset(&e->acc, 0, sizeof(e->acc));
	e->acc.verdict = PHOS_ACCESS_EXACT;
	e->param_bytes = 0;
}

static void entry_free(struct entry *e)
{
	free(e->syms);
	free(e->insns);
	free(e->ops);
	free(e->vec);
	free(e->rtab);
	free(e->reg);
}

static void analyse(struct entry *e)
{
	bool changed = true;
	unsigned round;

	for (round = 0; changed && round < MAX_ROUNDS; round++) {
		changed = false;
		for (size_t k = 0; k < e->ninsns; k++)
			changed |= eval(e, &e->insns[k]);
	}
	if (changed) {
		opaque(e, "analysis did not settle in %u rounds", MAX_ROUNDS);
		return;
	}
	judge(e);
}

/* A module-scope .global, .const or .shared variable (t: its directive, p:
 * after it) among the module's names. -ENOMEM or 0. */
static int module_var(struct entry *e, const char *t, const char *p, const char *end)
{
	size_t nl;
	const char *name = decl_name(p, end, &nl);

	e->nsyms = e->nmodsyms;   /* drop the previous entry's names */
	if (name && sym_add(e, name, nl, *(t + 1) == 's' ? SYM_LOCAL : SYM_GLOBAL, 0, 0) < 0)
		return -ENOMEM;
	e->nmodsyms = e->nsyms;
	return 0;
}

/* A device function's name (for calls), p after .func; the body is skipped
 * by the caller's depth. -ENOMEM or 0. */
static int module_func(struct entry *e, const char *p, const char *end)
{
	size_t nl;
	const char *q = p, *name = NULL;

	for (;;) {
		const char *u = phos_ptx_next_tok(q, end, &nl);

		if (nl == 0)
			break;
		if (*u == '(') {        /* return parameter list */
			int d = 1;

			q = u + 1;
			while (q < end && d) {
				d += *q == '(';
				d -= *q == ')';
				q++;
			}
			continue;
		}
		if (phos_ptx_is_ident(*u) && *u != '%') {
			name = u;
			break;
		}
		q = u + nl;
	}
	e->nsyms = e->nmodsyms;
	if (name && sym_add(e, name, nl, SYM_OTHER, 0, 0) < 0)
		return -ENOMEM;
	e->nmodsyms = e->nsyms;
	return 0;
}

/* An .entry (p after the directive): its parameters and body analysed and
 * given to fn. Returns where the module goes on, or NULL to stop (*r: 0 at
 * an unreadable name, -ENOMEM, or what fn returned). */
static const char *module_entry(struct entry *e, const char *p, const char *end, phos_ptx_entry_fn fn, void *ctx,
				int *r)
{
	size_t nlen;
	const char *name = phos_ptx_next_tok(p, end, &nlen), *body;

	if (nlen == 0 || !phos_ptx_is_ident(*name))
		return NULL;
	entry_reset(e);
	p = name + nlen;
	body = parse_params(e, p, end);
	if (e->failed)
		return *r = -ENOMEM, NULL;
	if (!body) {
		opaque(e, "unreadable parameter list");
		body = p;
	}
	/* directives up to the body: .maxntid, .reqntid, ... */
	while (body < end && *body != '{' && *body != ';')
		body++;
	if (body >= end || *body == ';')
		return body;       /* a declaration without a body */
	p = parse_body(e, body, end);
	if (e->failed)
		return *r = -ENOMEM, NULL;
	if (!p) {
		opaque(e, "unreadable body");
		p = end;
	} else if (e->acc.verdict == PHOS_ACCESS_EXACT) {
		analyse(e);
	}
	if (e->acc.verdict != PHOS_ACCESS_EXACT) {
		memset(e->acc.read, 0, sizeof(e->acc.read));
		memset(e->acc.write, 0, sizeof(e->acc.write));
		e->acc.globals = 0;
	}
	*r = fn(ctx, name, nlen, &e->acc);
	return p;
}

int phos_ptx_analyze(const char *text, size_t len, phos_ptx_entry_fn fn, void *ctx)
{
	struct entry e = { .text = text };
	const char *p = text, *end = text + len;
	int depth = 0, r = 0;

	while (p && p < end && *p && r == 0) {
		size_t n;
		const char *t = phos_ptx_next_tok(p, end, &n);

		if (n == 0)
			break;
		p = t + n;
		if (*t == '{') {
			depth++;
			continue;
		}
		if (*t == '}') {
			depth -= depth > 0;
			continue;
		}
		if (depth > 0)
			continue;
		if (phos_ptx_tok_is(t, n, ".global") || phos_ptx_tok_is(t, n, ".const") || phos_ptx_tok_is(t, n, ".shared"))
			r = module_var(&e, t, p, end);
		else if (phos_ptx_tok_is(t, n, ".entry"))
			p = module_entry(&e, p, end, fn, ctx, &r);
		else if (phos_ptx_tok_is(t, n, ".func"))
			r = module_func(&e, p, end);
	}
	entry_free(&e);
	return r;
}
