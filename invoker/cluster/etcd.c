/* SPDX-License-Identifier: MIT */
/*
 * etcd's v3 JSON gateway over libcurl (etcd.h): one POST per call, its
 * answer bounded in time and size, its JSON checked before use.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "curl_buf.h"
#include "etcd.h"

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *inv_base64_encode(const void *p, size_t n)
{
	const unsigned char *s = p;
	char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;

	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
			     (i + 2 < n ? s[i + 2] : 0);

		*o++ = b64[v >> 18 & 63];
		*o++ = b64[v >> 12 & 63];
		*o++ = i + 1 < n ? b64[v >> 6 & 63] : '=';
		*o++ = i + 2 < n ? b64[v & 63] : '=';
	}
	*o = '\0';
	return out;
}

static int b64_value(char c)
{
	const char *p = c ? strchr(b64, c) : NULL;

	return p ? (int)(p - b64) : -1;
}

char *inv_base64_decode(const char *s, size_t *ret_len)
{
	size_t n = strlen(s), pad = 0, len;
	char *out;

	if (n % 4)
		return NULL;
	if (n && s[n - 1] == '=')
		pad = n >= 2 && s[n - 2] == '=' ? 2 : 1;
	len = n / 4 * 3 - pad;
	if (!(out = malloc(len + 1)))
		return NULL;
	for (size_t i = 0, o = 0; i < n; i += 4) {
		int v[4];
		uint32_t w = 0;

		for (int k = 0; k < 4; k++) {
			bool padding = i + 4 == n && k >= 4 - (int)pad;

			v[k] = padding ? 0 : b64_value(s[i + k]);
			if (v[k] < 0) {
				free(out);
				return NULL;
			}
			w = w << 6 | (uint32_t)v[k];
		}
		for (int k = 0; k < 3 && o < len; k++)
			out[o++] = (char)(w >> (16 - 8 * k) & 0xff);
	}
	out[len] = '\0';
	*ret_len = len;
	return out;
}

static void say(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* POSTs body (taken) to url + path: the answer's JSON object into *ret. */
static int post(const char *url, const char *path, json_t *body, json_t **ret, char *err, size_t errlen)
{
	char full[512], *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
	struct inv_curl_buf a = { .max = INV_ETCD_MAX_ANSWER };
	CURLcode cr = CURLE_FAILED_INIT;
	long status = 0;
	CURL *c = NULL;
	json_error_t je;
	int r = -EIO;

	*ret = NULL;
	json_decref(body);
	if (!text || !h || !(c = curl_easy_init()) ||
	    (size_t)snprintf(full, sizeof(full), "%s%s", url, path) >= sizeof(full)) {
		say(err, errlen, "etcd %s: out of memory or a URL too long", path);
		r = -ENOMEM;
		goto out;
	}
	curl_easy_setopt(c, CURLOPT_URL, full);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)INV_ETCD_TIMEOUT_MS);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)INV_ETCD_TIMEOUT_MS);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, inv_curl_buf_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &a);
	cr = curl_easy_perform(c);
	if (cr != CURLE_OK) {
		say(err, errlen, "etcd at %s: %s", url, a.over ? "an answer over 16 MiB" : curl_easy_strerror(cr));
		goto out;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	*ret = a.buf ? json_loadb(a.buf, a.len, 0, &je) : NULL;
	if (status != 200) {
		json_t *m = json_is_object(*ret) ? json_object_get(*ret, "message") : NULL;

		say(err, errlen, "etcd %s: HTTP %ld: %.200s", path, status,
		    json_is_string(m) ? json_string_value(m) : "no message");
		json_decref(*ret);
		*ret = NULL;
		goto out;
	}
	if (!json_is_object(*ret)) {
		say(err, errlen, "etcd %s: the answer is not a JSON object", path);
		json_decref(*ret);
		*ret = NULL;
		r = -EPROTO;
		goto out;
	}
	r = 0;
out:
	if (c)
		curl_easy_cleanup(c);
	curl_slist_free_all(h);
	free(text);
	free(a.buf);
	return r;
}

/* An int64 field of the gateway (a JSON string of digits, or a number;
 * absent: 0, as protobuf's JSON omits zeros). False when it is neither. */
static bool int64_field(json_t *o, const char *name, int64_t *ret)
{
	json_t *v = json_object_get(o, name);
	char *end;

	*ret = 0;
	if (!v)
		return true;
	if (json_is_integer(v)) {
		*ret = json_integer_value(v);
		return true;
	}
	if (!json_is_string(v) || !*json_string_value(v))
		return false;
	errno = 0;
	*ret = strtoll(json_string_value(v), &end, 10);
	return !errno && !*end;
}

static json_t *id_body(int64_t id)
{
	char s[24];

	snprintf(s, sizeof(s), "%" PRId64, id);
	return json_pack("{s:s}", "ID", s);
}

int inv_etcd_grant(const char *url, unsigned ttl_s, int64_t *ret_id, char *err, size_t errlen)
{
	json_t *a;
	int r = post(url, "/v3/lease/grant", json_pack("{s:I}", "TTL", (json_int_t)ttl_s), &a, err, errlen);

	if (r == 0 && (!int64_field(a, "ID", ret_id) || *ret_id == 0)) {
		say(err, errlen, "etcd /v3/lease/grant: no lease in the answer");
		r = -EPROTO;
	}
	json_decref(a);
	return r;
}

int inv_etcd_keepalive(const char *url, int64_t id, int64_t *ret_ttl, char *err, size_t errlen)
{
	json_t *a, *res;
	int r = post(url, "/v3/lease/keepalive", id_body(id), &a, err, errlen);

	*ret_ttl = 0;
	if (r == 0) {   /* one answer of the stream: {"result": {...}} */
		res = json_object_get(a, "result");
		if (!json_is_object(res) || !int64_field(res, "TTL", ret_ttl)) {
			say(err, errlen, "etcd /v3/lease/keepalive: no result in the answer");
			r = -EPROTO;
		}
	}
	json_decref(a);
	return r;
}

int inv_etcd_revoke(const char *url, int64_t id, char *err, size_t errlen)
{
	json_t *a;
	int r = post(url, "/v3/lease/revoke", id_body(id), &a, err, errlen);

	json_decref(a);
	return r;
}

int inv_etcd_put(const char *url, const char *key, const char *value, int64_t lease, char *err, size_t errlen)
{
	char *k = inv_base64_encode(key, strlen(key)), *v = inv_base64_encode(value, strlen(value)), l[24];
	json_t *a = NULL, *body;
	int r = -ENOMEM;

	snprintf(l, sizeof(l), "%" PRId64, lease);
	body = k && v ? json_pack("{s:s,s:s}", "key", k, "value", v) : NULL;
	if (body && lease)
		json_object_set_new(body, "lease", json_string(l));
	if (body)
		r = post(url, "/v3/kv/put", body, &a, err, errlen);
	else
		say(err, errlen, "etcd put: out of memory");
	json_decref(a);
	free(k);
	free(v);
	return r;
}

int inv_etcd_range(const char *url, const char *prefix, json_t **ret, char *err, size_t errlen)
{
	size_t n = strlen(prefix);
	char *end = malloc(n + 1), *k = inv_base64_encode(prefix, n), *e = NULL;
	json_t *a = NULL, *kvs, *kv;
	size_t i;
	int r = -ENOMEM;

	*ret = NULL;
	if (!n) {
		say(err, errlen, "etcd range: an empty prefix");
		r = -EINVAL;
		goto out;
	}
	if (!end || !k)
		goto out;
	/* the range [prefix, prefix with its last byte + 1): every key under it */
	memcpy(end, prefix, n + 1);
	end[n - 1] = (char)((unsigned char)end[n - 1] + 1);
	if (!(e = inv_base64_encode(end, n)))
		goto out;
	r = post(url, "/v3/kv/range", json_pack("{s:s,s:s}", "key", k, "range_end", e), &a, err, errlen);
	if (r)
		goto out;
	kvs = json_object_get(a, "kvs");
	if (kvs && !json_is_array(kvs)) {
		say(err, errlen, "etcd /v3/kv/range: kvs is not a list");
		r = -EPROTO;
		goto out;
	}
	*ret = json_array();
	json_array_foreach(kvs, i, kv) {
		json_t *kj = json_object_get(kv, "key"), *vj = json_object_get(kv, "value");
		size_t kl = 0, vl = 0;
		char *ks = json_is_string(kj) ? inv_base64_decode(json_string_value(kj), &kl) : NULL;
		char *vs = json_is_string(vj) ? inv_base64_decode(json_string_value(vj), &vl) : NULL;

		/* text only: a key or value with a NUL in it is not one of ours */
		if (ks && vs && strlen(ks) == kl && strlen(vs) == vl)
			json_array_append_new(*ret, json_pack("{s:s,s:s}", "key", ks, "value", vs));
		free(ks);
		free(vs);
	}
out:
	if (r == -ENOMEM)
		say(err, errlen, "etcd range: out of memory");
	json_decref(a);
	free(end);
	free(k);
	free(e);
	return r;
}
