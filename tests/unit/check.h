/* SPDX-License-Identifier: MIT */
/* The unit tests' one assertion: reports file:line and a message, counts the
 * failure and goes on, so that one run shows every broken check. */
#pragma once

#include <stdio.h>

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
