/* SPDX-License-Identifier: MIT */
/*
 * A pull's own state (pull.h), below the request (pull.c), the transfers
 * (pull_fetch.c) and a move (migrate.c): its failure and why it stopped, the
 * peer's URL and token as a request gives them, and what it holds.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "invoker.h"
#include "log.h"
#include "pull.h"

int pull_fail(struct pull *p, int code, int rc, char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	phos_verrf(err, errlen, fmt, ap);
	va_end(ap);
	p->code = code;
	return rc;
}

bool pull_cancelled(const struct pull *p)
{
	struct pollfd pfd = { .fd = p->cancel_fd, .events = POLLIN };

	return inv_draining || (p->deadline && phos_now() >= p->deadline) ||
	       (p->cancel_fd >= 0 && poll(&pfd, 1, 0) == 1);
}

int pull_fail_stopped(struct pull *p, char *err, size_t errlen)
{
	if (inv_draining)
		return pull_fail(p, 503, -ECANCELED, err, errlen, "the pull was cancelled: the invoker is stopping");
	if (p->deadline && phos_now() >= p->deadline)
		return pull_fail(p, 504, -ETIMEDOUT, err, errlen, "the pull did not end within its deploy_timeout_ms "
				 "(%u ms): a peer this slow cannot serve it", p->timeout_ms);
	return pull_fail(p, 409, -ECANCELED, err, errlen, "the pull was cancelled");
}

bool pull_token_valid(const char *t)
{
	size_t n = strlen(t);

	if (n < 16 || n > PULL_TOKEN_MAX)
		return false;
	for (; *t; t++)
		if (*t <= ' ' || *t >= 127)
			return false;
	return true;
}

/* "from" is http(s)://HOST[:PORT][/] and nothing else: into p->base. */
int pull_url_check(struct pull *p, const char *from, char *err, size_t errlen)
{
	char *scheme = NULL, *host = NULL, *part = NULL;
	int r = 0;

	if (strlen(from) > PULL_URL_MAX)
		return phos_errf_rc(err, errlen, -EINVAL, "from: a URL of at most %d characters", PULL_URL_MAX);
	p->base = curl_url();
	if (!p->base || curl_url_set(p->base, CURLUPART_URL, from, 0) != CURLUE_OK)
		return phos_errf_rc(err, errlen, -EINVAL, "from: not a URL: '%.128s'", from);
	if (curl_url_get(p->base, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    (strcmp(scheme, "http") && strcmp(scheme, "https"))) {
		phos_errf(err, errlen, "from: the scheme must be http or https");
		r = -EINVAL;
	} else if (curl_url_get(p->base, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host[0]) {
		phos_errf(err, errlen, "from: no host");
		r = -EINVAL;
	} else if (curl_url_get(p->base, CURLUPART_USER, &part, 0) == CURLUE_OK) {
		phos_errf(err, errlen, "from: no user or password in the URL (the token goes in from_token)");
		r = -EINVAL;
	} else if (curl_url_get(p->base, CURLUPART_QUERY, &part, 0) == CURLUE_OK ||
		   curl_url_get(p->base, CURLUPART_FRAGMENT, &part, 0) == CURLUE_OK) {
		phos_errf(err, errlen, "from: no query or fragment: the peer's base URL only");
		r = -EINVAL;
	} else if (curl_url_get(p->base, CURLUPART_PATH, &part, 0) == CURLUE_OK && strcmp(part, "/") && part[0]) {
		phos_errf(err, errlen, "from: the peer's base URL, without a path (not '%.64s')", part);
		r = -EINVAL;
	}
	curl_free(scheme);
	curl_free(host);
	curl_free(part);
	return r;
}

void pull_free(struct pull *p)
{
	for (size_t i = 0; p->ext && i < p->next; i++)
		free(p->ext[i].chunks);
	free(p->ext);
	for (unsigned i = 0; i < p->nsrc; i++)
		close(p->src_fd[i]);
	free(p->local);
	phos_image_free(p->img);
	json_decref(p->exp);
	explicit_bzero(p->auth, sizeof(p->auth));   /* the peer's token is for this pull only */
	for (struct curl_slist *h = p->headers; h; h = h->next)
		explicit_bzero(h->data, strlen(h->data));
	curl_slist_free_all(p->headers);
	if (p->curl)
		curl_easy_cleanup(p->curl);
	curl_url_cleanup(p->base);
}
