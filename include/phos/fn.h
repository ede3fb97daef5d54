/* SPDX-License-Identifier: MIT */
/*
 * phos-fn: the function contract. The only header a function author needs
 * besides CUDA's.
 *
 *     static int handle(void *state, const struct phos_fn_request *req,
 *                       struct phos_fn_response *resp) { ... }
 *
 *     int main(int argc, char **argv) {
 *         ... init: read weights, cudaMalloc, cudaMemcpy, cublasCreate ...
 *         return phos_fn_serve(handle, state);   // the snapshot point
 *     }
 *
 * phos_fn_serve tells the runtime that init is done, then loops: receive a
 * request, call the handler, send the response, until there are no more
 * requests (it then returns 0). Under phos-fn the implementation lives in the
 * preload library (the stand-in libcudart), reached through a weak symbol, so
 * functions link against nothing but CUDA. The same binary run on the real CUDA
 * libraries falls back to the loop below: one request per line on stdin, one
 * response per line on stdout.
 *
 * The handler returns 0 on success or an HTTP-like status (400, 500, ...) on
 * failure; in both cases resp->body (malloc'ed by the handler, freed by the
 * runtime) is sent back. A handler must not keep req->body after returning.
 */
#ifndef PHOS_FN_H
#define PHOS_FN_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

struct phos_fn_request {
	const char *body;          /* NUL-terminated for convenience; len excludes the NUL */
	size_t len;
	const char *content_type;  /* "application/json" unless the caller said otherwise */
};

struct phos_fn_response {
	char *body;                /* malloc'ed by the handler; NULL for an empty body */
	size_t len;
	const char *content_type;  /* static string or NULL for application/json */
};

typedef int (*phos_fn_handler)(void *state, const struct phos_fn_request *req,
			       struct phos_fn_response *resp);

/* Implemented by the phos preload library; absent when running natively. */
extern int phos_fn_serve_impl(phos_fn_handler handler, void *state) __attribute__((weak));

/* Native fallback: one request per line on stdin, one response per line on stdout. */
static inline int phos_fn_serve_stdio(phos_fn_handler handler, void *state)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;

	while ((n = getline(&line, &cap, stdin)) >= 0) {
		struct phos_fn_request req;
		struct phos_fn_response resp;
		int rc;

		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (n == 0)
			continue;
		req.body = line;
		req.len = (size_t)n;
		req.content_type = "application/json";
		memset(&resp, 0, sizeof(resp));
		rc = handler(state, &req, &resp);
		if (resp.body)
			fwrite(resp.body, 1, resp.len, stdout);
		else if (rc)
			printf("{\"error\":\"handler failed with %d\"}", rc);
		fputc('\n', stdout);
		fflush(stdout);
		free(resp.body);
	}
	free(line);
	return 0;
}

/* Serves requests until there are none left; returns 0, or non-zero on a runtime error. */
static inline int phos_fn_serve(phos_fn_handler handler, void *state)
{
	if (phos_fn_serve_impl)
		return phos_fn_serve_impl(handler, state);
	return phos_fn_serve_stdio(handler, state);
}

#ifdef __cplusplus
}
#endif

#endif /* PHOS_FN_H */
