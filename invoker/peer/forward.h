/* SPDX-License-Identifier: MIT */
/*
 * A call handed to another invoker: a moved session's (migrate.c) and one
 * placed on another member of the cluster (cluster.c).
 */
#pragma once

#include <stddef.h>

#include <curl/curl.h>

#include "invoker.h"

/* POSTs a call of name to the invoker at base ("http[s]://HOST:PORT") as
 * /function/NAME, with token as its bearer and, when forwarded_by is not
 * NULL, an X-Phos-Forwarded header naming us. Its answer into res (status,
 * content type, body; any status) and 0; or -1 when no answer came (refused,
 * cut off, past timeout_ms, or over INV_MAX_RESPONSE), the reason in err.
 * The token is wiped from memory after use. */
int inv_peer_forward(const char *base, const char *name, const char *token, const char *forwarded_by,
		     const char *body, size_t len, const char *ctype, long timeout_ms, struct inv_result *res,
		     char *err, size_t errlen);

/* POSTs body (JSON; taken) to base + path with token as its bearer: the
 * answer's status into *ret_status and its JSON (NULL when it is not JSON)
 * into *ret_answer, and 0; or -1 when no answer came (the reason in err). */
int inv_peer_post_json(const char *base, const char *path, const char *token, json_t *body, long timeout_ms,
		       long *ret_status, json_t **ret_answer, char *err, size_t errlen);

/* Peer connections that wait silently for an answer (a target fetching and
 * restoring) still notice a dead link: TCP keepalive after 5 s idle, every
 * 5 s, 3 probes; unacknowledged data times out alike (TCP_USER_TIMEOUT). */
void pull_curl_keepalive(CURL *c);
