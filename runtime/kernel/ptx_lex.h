/* SPDX-License-Identifier: MIT */
/*
 * The small PTX lexer that the access analysis (ptx_access.c) and the
 * validation twins (ptx_twin.c) share: identifiers, white space, comments and
 * strings (skipped alike), one token at a time. Every function is bounded by
 * end and never reads past it.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* A character of an identifier, a register (%r1), a label ($L__BB0_1) or a number. */
static inline bool phos_ptx_is_ident(char c)
{
	return c == '_' || c == '$' || c == '%' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
	       (c >= 'A' && c <= 'Z');
}

static inline bool phos_ptx_is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* Skips a comment or a string at p, if any; returns where the text goes on. */
static inline const char *phos_ptx_skip_comment(const char *p, const char *end)
{
	if (end - p >= 2 && p[0] == '/' && p[1] == '/') {
		while (p < end && *p != '\n')
			p++;
	} else if (end - p >= 2 && p[0] == '/' && p[1] == '*') {
		p += 2;
		while (end - p >= 2 && !(p[0] == '*' && p[1] == '/'))
			p++;
		p = end - p >= 2 ? p + 2 : end;
	} else if (p < end && *p == '"') {
		for (p++; p < end && *p != '"' && *p != '\n'; p++)
			if (*p == '\\' && p + 1 < end)
				p++;
		p += p < end;
	}
	return p;
}

/* Skips white space, comments and strings. */
static inline const char *phos_ptx_skip_ws(const char *p, const char *end)
{
	for (;;) {
		const char *q;

		while (p < end && phos_ptx_is_space(*p))
			p++;
		q = phos_ptx_skip_comment(p, end);
		if (q == p)
			return p;
		p = q;
	}
}

/* The next token (an identifier, directive or number, or one character) and
 * its length in *ret_len; 0 at the end. */
static inline const char *phos_ptx_next_tok(const char *p, const char *end, size_t *ret_len)
{
	const char *s;

	p = phos_ptx_skip_ws(p, end);
	s = p;
	if (p < end && (*p == '.' || phos_ptx_is_ident(*p))) {
		p++;
		while (p < end && phos_ptx_is_ident(*p))
			p++;
	} else if (p < end) {
		p++;
	}
	*ret_len = (size_t)(p - s);
	return s;
}

/* Whether the n characters at t are exactly s. */
static inline bool phos_ptx_tok_is(const char *t, size_t n, const char *s)
{
	return strlen(s) == n && !memcmp(t, s, n);
}
