/* SPDX-License-Identifier: MIT */
/*
 * Itanium C++ ABI demangling, reduced to what speculation needs: the kind of
 * each parameter of a kernel (pointer to const, other pointer, builtin, other).
 *
 * It is a recursive-descent parser over the mangled name that builds no tree:
 * every type is summarised as a struct dtype, and the substitution table
 * (S_, S0_, ...) and the template arguments (T_, T0_, ...) hold summaries too,
 * so that `_Z4axpyIfEvPKT_PS0_S0_i` reads as (const float*, float*, float, int).
 * Substitution candidates follow the ABI (and LLVM's demangler): every
 * non-builtin type once, qualified types as a whole, each prefix of a nested
 * name but not the full name, template names followed by arguments.
 *
 * Whatever is not understood (decltype, most expressions, C++20 lambda
 * template parameters) gives -EINVAL: the caller then treats every parameter
 * as PHOS_PARAM_OPAQUE, which is always safe.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "kparam.h"

#define MAX_NAME_LEN (1u << 20)
#define MAX_DEPTH 256
#define MAX_SUBS 1024
#define MAX_TARGS 64
#define MAX_PACK 256

enum tcls { T_VOID, T_BUILTIN, T_PTR, T_REF, T_CLASS, T_OTHER };

struct dtype {
	uint8_t cls;            /* enum tcls */
	bool is_const;          /* top-level const */
	bool pointee_const;     /* T_PTR: the pointee is const */
};

struct targ {
	struct dtype t;
	uint16_t pack_start, pack_len;
	bool is_pack;
};

struct dm {
	const char *s;          /* cursor */
	const char *end;
	int depth;
	bool record;            /* add substitution candidates */
	unsigned nsubs, ntargs, npack;
	int pack_index;         /* element of a pack being expanded, or -1 */
	int pack_len;           /* length of the pack met while expanding, or -1 */
	unsigned nest;          /* > 0 inside template args and local names */
	const char *base;       /* last source-name of the top-level name */
	size_t baselen;
	/* tables, not cleared between uses */
	struct dtype subs[MAX_SUBS];
	struct targ targs[MAX_TARGS];
	struct targ targs_new[MAX_TARGS];   /* being parsed; only one level stores */
	struct dtype pack[MAX_PACK];
};

static int parse_type(struct dm *d, struct dtype *ret);
static int parse_name(struct dm *d, bool top, bool *ret_targs);
static int parse_encoding(struct dm *d);

static const struct dtype CLASS = { .cls = T_CLASS };
static const struct dtype OTHER = { .cls = T_OTHER };
static const struct dtype BUILTIN = { .cls = T_BUILTIN };

static char peek(const struct dm *d, size_t i)
{
	return (size_t)(d->end - d->s) > i ? d->s[i] : '\0';
}

static bool eat(struct dm *d, char c)
{
	if (peek(d, 0) != c)
		return false;
	d->s++;
	return true;
}

static int push(struct dm *d, struct dtype t)
{
	if (!d->record)
		return 0;
	if (d->nsubs == MAX_SUBS)
		return -EINVAL;
	d->subs[d->nsubs++] = t;
	return 0;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* <number> ::= [n] <decimal>, bounded. */
static int parse_number(struct dm *d, size_t *ret)
{
	size_t v = 0;

	eat(d, 'n');
	if (!is_digit(peek(d, 0)))
		return -EINVAL;
	while (is_digit(peek(d, 0))) {
		v = v * 10 + (size_t)(*d->s++ - '0');
		if (v > MAX_NAME_LEN)
			return -EINVAL;
	}
	*ret = v;
	return 0;
}

/* <seq-id> _ : "_" is 0, "0_" is 1, "A_" is 11 (base 36). */
static int parse_seq_id(struct dm *d, size_t *ret)
{
	size_t v = 0;

	if (eat(d, '_')) {
		*ret = 0;
		return 0;
	}
	for (;;) {
		char c = peek(d, 0);

		if (is_digit(c))
			v = v * 36 + (size_t)(c - '0');
		else if (c >= 'A' && c <= 'Z')
			v = v * 36 + (size_t)(c - 'A' + 10);
		else
			break;
		d->s++;
		if (v > MAX_SUBS)
			return -EINVAL;
	}
	if (!eat(d, '_'))
		return -EINVAL;
	*ret = v + 1;
	return 0;
}

static int parse_source_name(struct dm *d, bool top)
{
	size_t len;
	int r = parse_number(d, &len);

	if (r < 0 || len == 0 || len > (size_t)(d->end - d->s))
		return -EINVAL;
	if (top && d->nest == 0) {
		d->base = d->s;
		d->baselen = len;
	}
	d->s += len;
	return 0;
}

/* Discriminator after a local name: _ <digit> or __ <number> _. */
static void skip_discriminator(struct dm *d)
{
	if (peek(d, 0) == '_' && is_digit(peek(d, 1))) {
		d->s += 2;
	} else if (peek(d, 0) == '_' && peek(d, 1) == '_' && is_digit(peek(d, 2))) {
		d->s += 2;
		while (is_digit(peek(d, 0)))
			d->s++;
		eat(d, '_');
	}
}

/* <unqualified-name>: source-name, unnamed type (Ut), closure type (Ul),
 * constructor/destructor; then ABI tags (B <source-name>). */
static int parse_unqualified(struct dm *d, bool top)
{
	int r = 0;
	char c = peek(d, 0);

	if (c == 'L')
		c = (d->s++, peek(d, 0));       /* GCC: internal linkage */
	if (is_digit(c)) {
		r = parse_source_name(d, top);
	} else if (c == 'U' && (peek(d, 1) == 't' || peek(d, 1) == 'l')) {
		bool lambda = peek(d, 1) == 'l';

		d->s += 2;
		if (lambda) {
			if (peek(d, 0) == 'T')
				return -EINVAL;     /* C++20 template parameter declarations */
			do {
				struct dtype t;

				r = parse_type(d, &t);
			} while (r == 0 && peek(d, 0) != 'E');
			if (r < 0 || !eat(d, 'E'))
				return -EINVAL;
		}
		while (is_digit(peek(d, 0)))
			d->s++;
		if (!eat(d, '_'))
			return -EINVAL;
	} else if ((c == 'C' && peek(d, 1) >= '1' && peek(d, 1) <= '5') ||
		   (c == 'D' && peek(d, 1) >= '0' && peek(d, 1) <= '5')) {
		d->s += 2;
	} else {
		return -EINVAL;     /* operator names and the rest */
	}
	while (r == 0 && peek(d, 0) == 'B') {
		d->s++;
		r = parse_source_name(d, false);
	}
	return r;
}

static int resolve_template_param(struct dm *d, size_t i, struct dtype *ret)
{
	const struct targ *a;

	if (i >= d->ntargs) {
		*ret = OTHER;
		return 0;
	}
	a = &d->targs[i];
	if (!a->is_pack) {
		*ret = a->t;
		return 0;
	}
	if (d->pack_index < 0)
		return -EINVAL;     /* a pack outside a pack expansion */
	d->pack_len = a->pack_len;
	*ret = (unsigned)d->pack_index < a->pack_len ? d->pack[a->pack_start + d->pack_index] : OTHER;
	return 0;
}

/* T_ T0_ T1_ ... */
static int parse_template_param(struct dm *d, struct dtype *ret)
{
	size_t i;

	if (!eat(d, 'T') || peek(d, 0) == 'L')
		return -EINVAL;
	if (eat(d, '_')) {
		i = 0;
	} else {
		int r = parse_number(d, &i);

		if (r < 0 || !eat(d, '_'))
			return -EINVAL;
		i++;
	}
	return resolve_template_param(d, i, ret);
}

/* S_ S0_ ... and the std:: abbreviations (all class types or prefixes). */
static int parse_substitution(struct dm *d, struct dtype *ret)
{
	size_t i;
	int r;

	if (!eat(d, 'S'))
		return -EINVAL;
	switch (peek(d, 0)) {
	case 'a': case 'b': case 's': case 'i': case 'o': case 'd':
		d->s++;
		*ret = CLASS;
		return 0;
	}
	r = parse_seq_id(d, &i);
	if (r < 0 || i >= d->nsubs)
		return -EINVAL;
	*ret = d->subs[i];
	return 0;
}

static int parse_expr(struct dm *d);

/* L <type> <value> E | L _Z <encoding> E */
static int parse_literal(struct dm *d)
{
	struct dtype t;
	int r;

	if (!eat(d, 'L'))
		return -EINVAL;
	if (peek(d, 0) == '_' && peek(d, 1) == 'Z') {
		d->s += 2;
		d->nest++;
		r = parse_encoding(d);
		d->nest--;
	} else {
		r = parse_type(d, &t);
		while (r == 0 && peek(d, 0) && peek(d, 0) != 'E')
			d->s++;         /* the value: [n] digits or lowercase hex */
	}
	return r < 0 || !eat(d, 'E') ? -EINVAL : 0;
}

/* The few expressions that appear in kernel template arguments: literals,
 * template parameters, and &expr (nvcc's extended lambda wrappers). */
static int parse_expr(struct dm *d)
{
	struct dtype t;
	int r = -EINVAL;

	if (++d->depth > MAX_DEPTH)
		return -EINVAL;
	if (peek(d, 0) == 'L') {
		r = parse_literal(d);
	} else if (peek(d, 0) == 'T') {
		r = parse_template_param(d, &t);
	} else if (peek(d, 0) == 'a' && peek(d, 1) == 'd') {
		d->s += 2;
		r = parse_expr(d);
	}
	d->depth--;
	return r;
}

/* I <template-arg>+ E. When store is set (the kernel's own arguments), the
 * arguments become what T_, T0_, ... refer to. */
static int parse_template_args(struct dm *d, bool store)
{
	struct targ *args = d->targs_new;
	unsigned n = 0, npack = store ? 0 : d->npack;
	int r = 0;

	if (!eat(d, 'I'))
		return -EINVAL;
	d->nest++;
	while (r == 0 && !eat(d, 'E')) {
		struct targ a = { .t = OTHER };

		if (peek(d, 0) == 'L') {
			r = parse_literal(d);
		} else if (peek(d, 0) == 'X') {
			d->s++;
			r = parse_expr(d);
			if (r == 0 && !eat(d, 'E'))
				r = -EINVAL;
		} else if (eat(d, 'J')) {
			a.is_pack = true;
			a.pack_start = (uint16_t)npack;
			while (r == 0 && !eat(d, 'E')) {
				struct dtype t;

				r = parse_type(d, &t);
				if (r == 0 && store) {
					if (npack == MAX_PACK)
						r = -EINVAL;
					else
						d->pack[npack++] = t;
				}
			}
			a.pack_len = (uint16_t)(npack - a.pack_start);
		} else if (peek(d, 0) == '\0') {
			r = -EINVAL;
		} else {
			r = parse_type(d, &a.t);
		}
		if (r == 0 && store) {
			if (n == MAX_TARGS)
				r = -EINVAL;
			else
				args[n++] = a;
		}
	}
	d->nest--;
	if (r == 0 && store) {
		memcpy(d->targs, args, n * sizeof(*args));
		d->ntargs = n;
		d->npack = npack;
	}
	return r;
}

/* N [CV] [ref] <prefix components> E. Every prefix is a candidate, the full
 * name is not (a function, or a type that parse_type adds). */
static int parse_nested_name(struct dm *d, bool top, bool *ret_targs)
{
	bool pushed_last = false, any = false;
	int r = 0;

	if (!eat(d, 'N'))
		return -EINVAL;
	while (peek(d, 0) == 'r' || peek(d, 0) == 'V' || peek(d, 0) == 'K')
		d->s++;
	if (peek(d, 0) == 'R' || peek(d, 0) == 'O')
		d->s++;
	while (r == 0 && !eat(d, 'E')) {
		char c = peek(d, 0);
		struct dtype t;

		*ret_targs = false;
		pushed_last = false;
		if (c == 'S' && peek(d, 1) == 't') {
			d->s += 2;      /* std:: */
			any = true;
			continue;
		}
		if (c == 'S') {
			r = parse_substitution(d, &t);
			any = true;
			continue;
		}
		if (c == 'I') {
			if (!any)
				return -EINVAL;
			r = parse_template_args(d, top);
			*ret_targs = true;
		} else if (c == 'T') {
			r = parse_template_param(d, &t);
		} else if (c == '\0') {
			return -EINVAL;
		} else {
			r = parse_unqualified(d, top);
		}
		any = true;
		if (r == 0)
			r = push(d, CLASS);
		pushed_last = true;
	}
	if (r < 0 || !pushed_last)
		return -EINVAL;
	if (d->record)
		d->nsubs--;     /* the full name is not a candidate */
	return 0;
}

/* Z <function encoding> E <entity name> [<discriminator>] */
static int parse_local_name(struct dm *d)
{
	bool targs;
	int r;

	if (!eat(d, 'Z'))
		return -EINVAL;
	d->nest++;
	r = parse_encoding(d);
	if (r == 0 && !eat(d, 'E'))
		r = -EINVAL;
	if (r == 0) {
		if (eat(d, 's')) {
			skip_discriminator(d);
		} else {
			if (eat(d, 'd')) {
				while (is_digit(peek(d, 0)))
					d->s++;
				if (!eat(d, '_'))
					r = -EINVAL;
			}
			if (r == 0)
				r = parse_name(d, false, &targs);
			skip_discriminator(d);
		}
	}
	d->nest--;
	return r;
}

/* <name>; *ret_targs says whether it ends with template arguments. top: the
 * kernel's own name, whose template arguments T_ refers to. */
static int parse_name(struct dm *d, bool top, bool *ret_targs)
{
	struct dtype t;
	int r;

	*ret_targs = false;
	if (++d->depth > MAX_DEPTH)
		return -EINVAL;
	switch (peek(d, 0)) {
	case 'N':
		r = parse_nested_name(d, top, ret_targs);
		break;
	case 'Z':
		r = parse_local_name(d);
		break;
	case 'S':
		if (peek(d, 1) == 't') {
			d->s += 2;
			r = parse_unqualified(d, top);
		} else {
			/* only as <unscoped-template-name> <template-args> */
			r = parse_substitution(d, &t);
			if (r == 0 && peek(d, 0) != 'I')
				r = -EINVAL;
			if (r == 0) {
				r = parse_template_args(d, top);
				*ret_targs = true;
			}
			break;
		}
		goto template_args;
	default:
		r = parse_unqualified(d, top);
	template_args:
		if (r == 0 && peek(d, 0) == 'I') {
			r = push(d, CLASS);     /* the unscoped template name */
			if (r == 0)
				r = parse_template_args(d, top);
			*ret_targs = true;
		}
		break;
	}
	d->depth--;
	return r;
}

/* F [Y] <return type> <parameter types> [R|O] E */
static int parse_function_type(struct dm *d)
{
	struct dtype t;
	int r = 0;

	if (!eat(d, 'F'))
		return -EINVAL;
	eat(d, 'Y');
	while (r == 0 && !eat(d, 'E')) {
		if ((peek(d, 0) == 'R' || peek(d, 0) == 'O') && peek(d, 1) == 'E') {
			d->s++;
			continue;
		}
		r = parse_type(d, &t);
	}
	return r;
}

static int parse_builtin_d(struct dm *d, struct dtype *ret)
{
	char c = peek(d, 1);

	*ret = BUILTIN;
	if (strchr("defhisuacn", c) && c) {
		d->s += 2;
		return 0;
	}
	if (c == 'F' || c == 'B' || c == 'U') {     /* DF16_, DF32x, DF16b, DB8_, DU8_ */
		d->s += 2;
		if (c == 'F' && peek(d, 0) == '1' && peek(d, 1) == '6' && peek(d, 2) == 'b') {
			d->s += 3;
			return 0;
		}
		if (!is_digit(peek(d, 0)))
			return -EINVAL;
		while (is_digit(peek(d, 0)))
			d->s++;
		if (eat(d, '_') || (c == 'F' && eat(d, 'x')))
			return 0;
		return -EINVAL;
	}
	return 1;   /* not a builtin */
}

/* A type that starts with D: a builtin (Dn, DF16_, ...), a pack expansion,
 * a vector type or a noexcept function type. */
static int parse_type_d(struct dm *d, struct dtype *ret)
{
	struct dtype t = OTHER;
	int r;

	r = parse_builtin_d(d, ret);
	if (r <= 0)
		return r;
	if (peek(d, 1) == 'p') {        /* a pack expansion outside a parameter list */
		d->s += 2;
		r = parse_type(d, ret);
		return r < 0 ? r : push(d, *ret);
	}
	if (peek(d, 1) == 'v') {        /* vector type */
		size_t n;

		d->s += 2;
		r = parse_number(d, &n);
		if (r < 0 || !eat(d, '_'))
			return -EINVAL;
		r = parse_type(d, &t);
		*ret = OTHER;
		return r < 0 ? r : push(d, *ret);
	}
	if (peek(d, 1) == 'o' || peek(d, 1) == 'x') {   /* noexcept function type */
		d->s += 2;
		r = parse_function_type(d);
		*ret = OTHER;
		return r < 0 ? r : push(d, *ret);
	}
	return -EINVAL;     /* decltype, and the rest */
}

/* A type that starts with T: an elaborated type specifier (Ts, Tu, Te), or
 * a template parameter, perhaps a template template one with arguments. */
static int parse_type_t(struct dm *d, struct dtype *ret)
{
	bool targs;
	int r;

	if (peek(d, 1) == 's' || peek(d, 1) == 'u' || peek(d, 1) == 'e') {
		d->s += 2;      /* elaborated type specifier */
		r = parse_name(d, false, &targs);
		*ret = CLASS;
		return r < 0 ? r : push(d, *ret);
	}
	r = parse_template_param(d, ret);
	if (r == 0)
		r = push(d, *ret);
	if (r == 0 && peek(d, 0) == 'I') {      /* template template parameter */
		r = parse_template_args(d, false);
		*ret = CLASS;
		if (r == 0)
			r = push(d, *ret);
	}
	return r;
}

/* A vendor's extended type (u NAME [ARGS]), or a vendor qualifier on a
 * type (U NAME [ARGS] TYPE, e.g. an address space: U3AS1). */
static int parse_type_vendor(struct dm *d, struct dtype *ret)
{
	bool qualifier = *d->s++ == 'U';
	int r;

	r = parse_source_name(d, false);
	if (r == 0 && peek(d, 0) == 'I')
		r = parse_template_args(d, false);
	if (!qualifier)
		*ret = CLASS;
	else if (r == 0)
		r = parse_type(d, ret);
	return r < 0 ? r : push(d, *ret);
}

static int parse_type_inner(struct dm *d, struct dtype *ret)
{
	struct dtype t = OTHER;
	bool targs;
	int r;

	switch (peek(d, 0)) {
	case 'v':
		d->s++;
		*ret = (struct dtype){ .cls = T_VOID };
		return 0;
	case 'b': case 'c': case 'a': case 'h': case 's': case 't': case 'i': case 'j':
	case 'l': case 'm': case 'x': case 'y': case 'n': case 'o': case 'f': case 'd':
	case 'e': case 'g': case 'z': case 'w':
		d->s++;
		*ret = BUILTIN;
		return 0;
	case 'u':       /* vendor extended type */
	case 'U':       /* vendor qualifier, e.g. an address space: U3AS1 */
		return parse_type_vendor(d, ret);
	case 'D':
		return parse_type_d(d, ret);
	case 'r': case 'V': case 'K': {
		bool is_const = false;

		while (peek(d, 0) == 'r' || peek(d, 0) == 'V' || peek(d, 0) == 'K')
			is_const |= *d->s++ == 'K';
		r = parse_type(d, ret);
		ret->is_const |= is_const;
		return r < 0 ? r : push(d, *ret);
	}
	case 'P':
		d->s++;
		r = parse_type(d, &t);
		*ret = (struct dtype){ .cls = T_PTR, .pointee_const = t.is_const };
		return r < 0 ? r : push(d, *ret);
	case 'R': case 'O':
		d->s++;
		r = parse_type(d, &t);
		*ret = (struct dtype){ .cls = T_REF };
		return r < 0 ? r : push(d, *ret);
	case 'C': case 'G':     /* complex, imaginary */
		d->s++;
		r = parse_type(d, &t);
		*ret = t.cls == T_BUILTIN ? BUILTIN : OTHER;
		return r < 0 ? r : push(d, *ret);
	case 'F':
		r = parse_function_type(d);
		*ret = OTHER;
		return r < 0 ? r : push(d, *ret);
	case 'A': {
		size_t n;

		d->s++;
		if (peek(d, 0) != '_' && (parse_number(d, &n) < 0))
			return -EINVAL;
		if (!eat(d, '_'))
			return -EINVAL;
		r = parse_type(d, &t);
		*ret = OTHER;
		return r < 0 ? r : push(d, *ret);
	}
	case 'M':
		d->s++;
		r = parse_type(d, &t);
		if (r == 0)
			r = parse_type(d, &t);
		*ret = OTHER;
		return r < 0 ? r : push(d, *ret);
	case 'T':
		return parse_type_t(d, ret);
	case 'S':
		if (peek(d, 1) == 't')
			break;          /* std::name: a class type */
		r = parse_substitution(d, ret);
		if (r == 0 && peek(d, 0) == 'I') {
			r = parse_template_args(d, false);
			*ret = CLASS;
			if (r == 0)
				r = push(d, *ret);
		}
		return r;
	case 'N': case 'Z': case 'L':
	case '0': case '1': case '2': case '3': case '4':
	case '5': case '6': case '7': case '8': case '9':
		break;          /* a class or enum by name */
	default:
		return -EINVAL;
	}
	r = parse_name(d, false, &targs);
	*ret = CLASS;
	return r < 0 ? r : push(d, *ret);
}

static int parse_type(struct dm *d, struct dtype *ret)
{
	int r;

	if (++d->depth > MAX_DEPTH)
		return -EINVAL;
	*ret = OTHER;
	r = parse_type_inner(d, ret);
	d->depth--;
	return r;
}

static uint8_t classify(struct dtype t)
{
	switch (t.cls) {
	case T_PTR:
		return t.pointee_const ? PHOS_PARAM_CONST_PTR : PHOS_PARAM_PTR;
	case T_BUILTIN:
		return PHOS_PARAM_SCALAR;
	default:
		return PHOS_PARAM_OPAQUE;
	}
}

/* One parameter (or a pack expansion Dp <pattern>, one per element) into
 * out; *n counts them. */
static int parse_param(struct dm *d, uint8_t *out, unsigned max, unsigned *n, bool *ret_void)
{
	struct dtype t;
	const char *pattern;
	bool record = d->record;
	int r, len;

	*ret_void = false;
	if (!(peek(d, 0) == 'D' && peek(d, 1) == 'p')) {
		r = parse_type(d, &t);
		if (r == 0 && t.cls == T_VOID)
			*ret_void = true;
		else if (r == 0 && *n < max)
			out[*n] = classify(t);
		*n += r == 0 && !*ret_void;
		return r;
	}
	d->s += 2;
	pattern = d->s;
	d->pack_index = 0;
	d->pack_len = -1;
	r = parse_type(d, &t);
	len = d->pack_len;
	if (r == 0 && len < 0)
		r = -EINVAL;    /* the pattern names no pack */
	if (r == 0)
		r = push(d, t);     /* Dp <pattern> itself */
	for (int i = 0; r == 0 && i < len; i++) {
		if (i > 0) {    /* replay the pattern for element i, recording nothing */
			const char *after = d->s;

			d->s = pattern;
			d->record = false;
			d->pack_index = i;
			r = parse_type(d, &t);
			d->record = record;
			if (r == 0 && d->s != after)
				r = -EINVAL;
		}
		if (r == 0 && *n < max)
			out[*n] = classify(t);
		*n += r == 0;
	}
	d->pack_index = -1;
	return r;
}

/* <name> <bare-function-type>, as in _Z<encoding> or inside Z...E. */
static int parse_encoding(struct dm *d)
{
	struct dtype t;
	bool targs;
	int r;

	if (++d->depth > MAX_DEPTH)
		return -EINVAL;
	r = parse_name(d, false, &targs);
	while (r == 0 && peek(d, 0) && peek(d, 0) != 'E' && peek(d, 0) != '.')
		r = parse_type(d, &t);
	d->depth--;
	return r;
}

static int demangle(struct dm *d, const char *mangled, uint8_t *out, unsigned max)
{
	size_t len;
	bool targs, is_void = false;
	unsigned n = 0;
	int r;

	if (!mangled)
		return -EINVAL;
	if (strncmp(mangled, "_Z", 2))
		return -ENOENT;
	len = strnlen(mangled, MAX_NAME_LEN + 1);
	if (len > MAX_NAME_LEN)
		return -EINVAL;
	memset(d, 0, offsetof(struct dm, subs));      /* the tables need no clearing */
	d->s = mangled + 2;
	d->end = mangled + len;
	d->record = true;
	d->pack_index = -1;
	d->pack_len = -1;

	r = parse_name(d, true, &targs);
	if (r < 0)
		return r;
	if (targs) {        /* template functions encode their return type first */
		struct dtype t;

		r = parse_type(d, &t);
		if (r < 0)
			return r;
	}
	if (!peek(d, 0) || peek(d, 0) == '.')
		return -EINVAL;     /* not a function */
	while (peek(d, 0) && peek(d, 0) != '.') {
		bool v;

		r = parse_param(d, out, max, &n, &v);
		if (r < 0)
			return r;
		if (v) {        /* (void): the only parameter */
			if (n > 0 || is_void)
				return -EINVAL;
			is_void = true;
		} else if (is_void) {
			return -EINVAL;
		}
	}
	return (int)n;
}

int phos_demangle_params(const char *mangled, uint8_t *ret_kinds, unsigned max)
{
	struct dm d;
	uint8_t kinds[PHOS_MAX_PARAMS];
	int n = demangle(&d, mangled, kinds, PHOS_MAX_PARAMS);

	if (max > PHOS_MAX_PARAMS)
		max = PHOS_MAX_PARAMS;
	if (n < 0)
		return n;
	if (ret_kinds)
		memcpy(ret_kinds, kinds, (size_t)n < max ? (size_t)n : max);
	return n;
}

const char *phos_demangle_basename(const char *mangled, char *buf, size_t buflen)
{
	struct dm d;
	uint8_t kinds[PHOS_MAX_PARAMS];
	const char *src = mangled ? mangled : "";
	size_t len;

	if (!buf || buflen == 0)
		return buf;
	if (demangle(&d, mangled, kinds, PHOS_MAX_PARAMS) >= 0 && d.base) {
		src = d.base;
		len = d.baselen;
	} else {
		len = strlen(src);
	}
	if (len >= buflen)
		len = buflen - 1;
	memcpy(buf, src, len);
	buf[len] = '\0';
	return buf;
}
