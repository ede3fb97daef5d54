/* SPDX-License-Identifier: MIT */
/*
 * etcd's v3 API through its JSON gateway (grpc-gateway: POST /v3/...), over
 * libcurl: the few calls the cluster needs (cluster.h), so no etcd C
 * library. Keys and values are strings here and base64 on the wire; the
 * gateway writes int64 fields as JSON strings.
 *
 * Every call is one bounded HTTP request (INV_ETCD_TIMEOUT_MS) and answers
 * 0, or -errno with the reason in err: -EIO for an etcd that cannot be
 * reached or answers an error, -EPROTO for an answer that is not what the
 * API says. url is the base, "http://HOST:PORT" (no trailing slash).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#define INV_ETCD_TIMEOUT_MS 3000
#define INV_ETCD_MAX_ANSWER (16u << 20)   /* bytes of one answer */

/* A lease of ttl_s seconds: its id into *ret_id. */
int inv_etcd_grant(const char *url, unsigned ttl_s, int64_t *ret_id, char *err, size_t errlen);
/* Renews lease id: its remaining TTL into *ret_ttl, 0 when it has expired
 * (its keys are gone: grant another). */
int inv_etcd_keepalive(const char *url, int64_t id, int64_t *ret_ttl, char *err, size_t errlen);
/* Ends lease id now: its keys go with it. */
int inv_etcd_revoke(const char *url, int64_t id, char *err, size_t errlen);
/* key = value, attached to lease (0: none). */
int inv_etcd_put(const char *url, const char *key, const char *value, int64_t lease, char *err, size_t errlen);
/* Every key under prefix, in key order: a new JSON array of {"key": K,
 * "value": V} (keys or values that are not text are skipped) into *ret. */
int inv_etcd_range(const char *url, const char *prefix, json_t **ret, char *err, size_t errlen);

/* Base64 (RFC 4648, padded) of n bytes of p: malloc'ed, or NULL. */
char *inv_base64_encode(const void *p, size_t n);
/* The bytes of base64 text s, NUL-terminated (*ret_len without it):
 * malloc'ed, or NULL for text that is not base64. */
char *inv_base64_decode(const char *s, size_t *ret_len);
