/* SPDX-License-Identifier: MIT */
/* phos-fn's HTTP client of the invoker (libcurl), used by cli_gateway.c. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

struct cli_gateway {
	char url[2048];   /* without a trailing slash */
	char token[1024]; /* empty: none */
};

struct cli_answer {
	long code;
	char *body;       /* NUL-terminated, malloc'ed */
	size_t len;
};

/* --gateway URL (else $PHOS_GATEWAY, else http://127.0.0.1:8080); the token
 * from --token-file, else from the invoker's STATE/admin.token (--state-dir,
 * else the invoker's default, token.h) when it is there, and only when URL
 * is that invoker (its STATE/listen: the same port, and its host or, for an
 * invoker on loopback or every address, a loopback host); else none, with a
 * note on stderr. A token goes over plain http only to a loopback address
 * (every address of URL's host 127/8 or ::1) unless insecure_http: -EPERM,
 * said on stderr. 0, -ENOENT (an unreadable --token-file) or -EPERM. */
int cli_gateway_init(struct cli_gateway *g, const char *url, const char *token_file, const char *state_dir,
		     bool insecure_http);
/* One request; 0 and the answer (any HTTP status), or -EIO (reported on stderr).
 * progress: what to show with a spinner on stderr when it is a terminal. */
int cli_http(const struct cli_gateway *g, const char *method, const char *path, const char *body, size_t len,
	     const char *progress, struct cli_answer *ret);
/* Prints the server's error message of a failed answer on stderr. */
void cli_http_report(const struct cli_answer *a);
