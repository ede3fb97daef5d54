/* SPDX-License-Identifier: MIT */
/* Absolute paths kept out of the error answers of calls (invoker.h). */
#include <stdbool.h>
#include <string.h>

#include "invoker.h"

void inv_redact_paths(char *msg)
{
	char *w = msg;

	for (const char *p = msg; *p;) {
		bool start = *p == '/' && (p == msg || strchr(" \t'\"(=:[,", p[-1])) && p[1] && p[1] != ' ';

		if (!start) {
			*w++ = *p++;
			continue;
		}
		/* an absolute path: keep its last component only */
		const char *end = p + strcspn(p, " \t'\"),;]\n"), *last = p;

		for (const char *s = p; s < end; s++)
			if (*s == '/' && s + 1 < end)
				last = s + 1;
		memmove(w, last, (size_t)(end - last));
		w += end - last;
		p = end;
	}
	*w = '\0';
}
