/* SPDX-License-Identifier: MIT */
/* Error answers: a JSON body, and absolute paths kept out of those of calls
 * (invoker.h, transfer.h). Below every file that makes one. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "invoker.h"
#include "transfer.h"

json_t *inv_err_json(const char *fmt, ...)
{
	char buf[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return json_pack("{s:s}", "error", buf);
}

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
