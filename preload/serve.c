/* SPDX-License-Identifier: MIT */
/*
 * phos_fn_serve_impl: the function's entry point under phos-fn (include/phos/fn.h).
 *
 * Tells the executor that init is done (SERVE, the snapshot point: a snapshot
 * is dumped while phos_preload_serve_point waits, and a restored copy wakes up
 * there with a new executor), then serves
 * requests. The transport is, for now, the native one: one request per line on
 * stdin, one response per line on stdout. Later work replaces serve_loop.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* fn.h declares phos_fn_serve_impl weak for the function's side; defined after
 * that declaration ours would be weak too, so the header sees another name. */
#define phos_fn_serve_impl phos_fn_serve_impl_weak_decl_
#include <phos/fn.h>
#undef phos_fn_serve_impl

#include "internal.h"
#include "log.h"

PHOS_EXPORT int phos_fn_serve_impl(phos_fn_handler handler, void *state);

/* Largest framed request body accepted (the invoker enforces its own, smaller limit). */
#define MAX_FRAME (256u << 20)

/* Reads exactly len bytes from f into a new NUL-terminated buffer. */
static char *read_body(FILE *f, size_t len)
{
	char *b = malloc(len + 1);

	if (!b)
		return NULL;
	if (len && fread(b, 1, len, f) != len) {
		free(b);
		return NULL;
	}
	b[len] = '\0';
	return b;
}

/*
 * Requests come one per line on stdin, or framed (what the invoker sends, so
 * that bodies may hold any bytes):
 *
 *   PHOS-FRAME <len> <content-type>\n<len bytes>   →   PHOS-FRAME <len> <status>\n<len bytes>
 *
 * where status is the handler's return value (0 = success). A line request gets
 * a line response.
 */
static int serve_loop(phos_fn_handler handler, void *state)
{
	char *line = NULL, ctype[128];
	size_t cap = 0;
	ssize_t n;

	while ((n = getline(&line, &cap, stdin)) >= 0) {
		struct phos_fn_request req;
		struct phos_fn_response resp;
		unsigned long long flen;
		char *body = NULL;
		bool framed = false;
		int rc;

		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (!strncmp(line, "PHOS-FRAME ", 11)) {
			ctype[0] = '\0';
			if (sscanf(line + 11, "%llu %127s", &flen, ctype) < 1 || flen > MAX_FRAME ||
			    !(body = read_body(stdin, (size_t)flen)))
				break; /* the stream is out of step: nothing sensible can follow */
			framed = true;
			req.body = body;
			req.len = (size_t)flen;
			req.content_type = ctype[0] ? ctype : "application/json";
		} else {
			if (n == 0)
				continue;
			req.body = line;
			req.len = (size_t)n;
			req.content_type = "application/json";
		}
		memset(&resp, 0, sizeof(resp));
		rc = handler(state, &req, &resp);
		if (framed) {
			printf("PHOS-FRAME %zu %d\n", resp.body ? resp.len : 0, rc);
			if (resp.body)
				fwrite(resp.body, 1, resp.len, stdout);
		} else {
			if (resp.body)
				fwrite(resp.body, 1, resp.len, stdout);
			else if (rc)
				printf("{\"error\":\"handler failed with %d\"}", rc);
			fputc('\n', stdout);
		}
		fflush(stdout);
		free(resp.body);
		free(body);
	}
	free(line);
	return 0;
}

PHOS_EXPORT int phos_fn_serve_impl(phos_fn_handler handler, void *state)
{
	int r;

	if (!handler)
		return 1;
	r = phos_preload_serve_point();
	if (r)
		/* Not under an executor (or it refused): serve anyway, the handler's
		 * CUDA calls report the problem. */
		phos_warn("SERVE failed (%d); serving without the runtime", r);
	r = serve_loop(handler, state);
	phos_preload_goodbye();
	return r;
}
