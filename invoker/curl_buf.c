/* SPDX-License-Identifier: MIT */
/* An HTTP answer collected in memory (curl_buf.h). */
#include <stdlib.h>
#include <string.h>

#include "curl_buf.h"

size_t inv_curl_buf_write(char *data, size_t size, size_t nmemb, void *arg)
{
	struct inv_curl_buf *w = arg;
	size_t n = size * nmemb;

	if (w->len + n > w->max) {
		w->over = true;
		return 0;
	}
	if (w->len + n + 1 > w->cap) {
		size_t cap = w->cap ? w->cap : 4096;
		char *b;

		while (cap < w->len + n + 1)
			cap *= 2;
		if (!(b = realloc(w->buf, cap)))
			return 0;
		w->buf = b;
		w->cap = cap;
	}
	memcpy(w->buf + w->len, data, n);
	w->len += n;
	w->buf[w->len] = '\0';
	return n;
}
