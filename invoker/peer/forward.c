/* SPDX-License-Identifier: MIT */
/*
 * A call handed to another invoker (forward.h), over libcurl.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <curl/curl.h>

#include "curl_buf.h"
#include "forward.h"
#include "pull.h"   /* PULL_URL_MAX, PULL_TOKEN_MAX */

static int keepalive_opts(void *arg, curl_socket_t fd, curlsocktype purpose)
{
	const int on = 1, idle = 5, intvl = 5, cnt = 3;
	const unsigned user_timeout_ms = 20000;

	(void)arg;
	if (purpose != CURLSOCKTYPE_IPCXN)
		return CURL_SOCKOPT_OK;
	/* (best effort: a socket that takes none of these still works) */
	(void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
	(void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof(user_timeout_ms));
	return CURL_SOCKOPT_OK;
}

void pull_curl_keepalive(CURL *c)
{
	curl_easy_setopt(c, CURLOPT_SOCKOPTFUNCTION, keepalive_opts);
	curl_easy_setopt(c, CURLOPT_SOCKOPTDATA, NULL);
}

static void wipe_free(struct curl_slist *h)
{
	for (struct curl_slist *x = h; x; x = x->next)
		explicit_bzero(x->data, strlen(x->data));
	curl_slist_free_all(h);
}

int inv_peer_forward(const char *base, const char *name, const char *token, const char *forwarded_by,
		     const char *body, size_t len, const char *ctype, long timeout_ms, struct inv_result *res,
		     char *err, size_t errlen)
{
	size_t bl = strlen(base);
	char url[PULL_URL_MAX + 128], line[PULL_TOKEN_MAX + PULL_URL_MAX + 64];
	struct curl_slist *h = NULL;
	struct inv_curl_buf w = { .max = INV_MAX_RESPONSE };
	const char *type = NULL;
	long status = 0;
	CURLcode cr = CURLE_FAILED_INIT;
	CURL *c = curl_easy_init();

	bl -= bl && base[bl - 1] == '/';
	snprintf(url, sizeof(url), "%.*s/function/%s", (int)bl, base, name);
	snprintf(line, sizeof(line), "Authorization: Bearer %s", token);
	h = curl_slist_append(h, line);
	snprintf(line, sizeof(line), "Content-Type: %s", ctype);
	h = curl_slist_append(h, line);
	if (forwarded_by) {
		snprintf(line, sizeof(line), "X-Phos-Forwarded: %s", forwarded_by);
		h = curl_slist_append(h, line);
	}
	explicit_bzero(line, sizeof(line));
	if (c && h) {
		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(c, CURLOPT_POST, 1L);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
		curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
		curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
		curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
		pull_curl_keepalive(c);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, inv_curl_buf_write);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, &w);
		cr = curl_easy_perform(c);
		if (cr == CURLE_OK) {
			curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
			curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &type);
		}
	}
	if (cr == CURLE_OK && status >= 100 && status <= 599) {
		free(res->body);
		res->body = w.buf ? w.buf : strdup("");
		res->len = w.len;
		res->http = (int)status;
		snprintf(res->content_type, sizeof(res->content_type), "%s",
			 type && strlen(type) < sizeof(res->content_type) && !strpbrk(type, "\r\n") ? type
												: "application/json");
		w.buf = NULL;
	} else {
		snprintf(err, errlen, "%s", w.over ? "answered too much" : c ? curl_easy_strerror(cr) : "out of memory");
	}
	free(w.buf);
	wipe_free(h);
	if (c)
		curl_easy_cleanup(c);
	return res->body && cr == CURLE_OK && status >= 100 && status <= 599 ? 0 : -1;
}

int inv_peer_post_json(const char *base, const char *path, const char *token, json_t *body, long timeout_ms,
		       long *ret_status, json_t **ret_answer, char *err, size_t errlen)
{
	size_t bl = strlen(base);
	char url[PULL_URL_MAX + 256], line[PULL_TOKEN_MAX + 64], *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	struct curl_slist *h = NULL;
	struct inv_curl_buf w = { .max = INV_MAX_RESPONSE };
	CURLcode cr = CURLE_FAILED_INIT;
	CURL *c = text ? curl_easy_init() : NULL;

	json_decref(body);
	*ret_status = 0;
	*ret_answer = NULL;
	bl -= bl && base[bl - 1] == '/';
	snprintf(url, sizeof(url), "%.*s%s", (int)bl, base, path);
	snprintf(line, sizeof(line), "Authorization: Bearer %s", token);
	h = curl_slist_append(h, line);
	explicit_bzero(line, sizeof(line));
	h = curl_slist_append(h, "Content-Type: application/json");
	if (c && h) {
		curl_easy_setopt(c, CURLOPT_URL, url);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
		curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
		curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
		curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
		curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
		pull_curl_keepalive(c);
		curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, inv_curl_buf_write);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, &w);
		cr = curl_easy_perform(c);
		if (cr == CURLE_OK)
			curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, ret_status);
	}
	if (cr == CURLE_OK && w.buf)
		*ret_answer = json_loadb(w.buf, w.len, 0, NULL);
	if (cr != CURLE_OK)
		snprintf(err, errlen, "%s", w.over ? "answered too much" : c ? curl_easy_strerror(cr) : "out of memory");
	free(w.buf);
	free(text);
	wipe_free(h);
	if (c)
		curl_easy_cleanup(c);
	return cr == CURLE_OK ? 0 : -1;
}
