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

static int serve_loop(phos_fn_handler handler, void *state)
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
