/* SPDX-License-Identifier: MIT */
/* The unit tests' one assertion: reports file:line and a message, counts the
 * failure and goes on, so that one run shows every broken check; and reading
 * a fixture file whole. */
#pragma once

#include <stdio.h>
#include <stdlib.h>

static int failures;

#define CHECK(c, ...)                                                        \
	do {                                                                 \
		if (!(c)) {                                                  \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                        \
			fputc('\n', stderr);                                 \
			failures++;                                          \
		}                                                            \
	} while (0)

/* The whole file at path, NUL-terminated (malloc'd; *ret_len excludes the
 * NUL). A fixture that cannot be read ends the test. */
static inline char *check_read_file(const char *path, size_t *ret_len)
{
	FILE *f = fopen(path, "rb");
	size_t cap = 1 << 16, len = 0, n;
	char *buf = malloc(cap + 1);

	if (!f || !buf) {
		fprintf(stderr, "%s: cannot read\n", path);
		exit(1);
	}
	while ((n = fread(buf + len, 1, cap - len, f)) > 0) {
		len += n;
		if (len == cap) {
			cap *= 2;
			buf = realloc(buf, cap + 1);
			if (!buf)
				exit(1);
		}
	}
	fclose(f);
	buf[len] = 0;
	*ret_len = len;
	return buf;
}
