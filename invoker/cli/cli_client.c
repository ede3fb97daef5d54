/* SPDX-License-Identifier: MIT */
/* phos-fn's HTTP client of the invoker (libcurl). */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <strings.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "cli.h"
#include "cli_client.h"
#include "curl_buf.h"
#include "token.h"

#define MAX_ANSWER (256u << 20)

struct progress {
	const char *what;
	double t0;
	unsigned ticks;
	bool shown;
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	static const char spin[] = "|/-\\";
	struct progress *p = arg;
	double el = now() - p->t0;

	if (el < 0.3)
		return 0;
	fprintf(stderr, "\r%c %s ... %.1f s ", spin[p->ticks++ % 4], p->what, el);
	p->shown = true;
	return 0;
}

int cli_http(const struct cli_gateway *g, const char *method, const char *path, const char *body, size_t len,
	     const char *progress, struct cli_answer *ret)
{
	struct inv_curl_buf s = { .max = MAX_ANSWER };
	struct curl_slist *h = NULL;
	struct progress pr = { progress, now(), 0, false };
	char url[4096], auth[1200];
	long code = 0;
	CURLcode cr;
	CURL *c;

	memset(ret, 0, sizeof(*ret));
	if ((size_t)snprintf(url, sizeof(url), "%s%s", g->url, path) >= sizeof(url))
		return -ENAMETOOLONG;
	c = curl_easy_init();
	if (!c)
		return -ENOMEM;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, inv_curl_buf_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	if (body) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
		h = curl_slist_append(h, "Content-Type: application/json");
	} else if (!strcmp(method, "POST")) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, "");
	}
	h = curl_slist_append(h, "Expect:");
	if (g->token[0]) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", g->token);
		h = curl_slist_append(h, auth);
	}
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	if (progress && isatty(STDERR_FILENO)) {
		curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(c, CURLOPT_XFERINFODATA, &pr);
		curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	}
	cr = curl_easy_perform(c);
	if (pr.shown)
		fprintf(stderr, "\r%s: %.1f s%20s\n", progress, now() - pr.t0, "");
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	if (cr != CURLE_OK) {
		free(s.buf);
		fprintf(stderr, "phos-fn: %s: %s\n", url, s.over ? "answer too large" : curl_easy_strerror(cr));
		return -EIO;
	}
	ret->code = code;
	ret->body = s.buf ? s.buf : strdup("");
	ret->len = s.len;
	return 0;
}

/* The server's {"error": "..."} message, or the body as it is. */
void cli_http_report(const struct cli_answer *a)
{
	const char *e = strstr(a->body, "\"error\"");

	if (e) {
		const char *q = strchr(e + 7, '"');
		const char *end = q ? strchr(q + 1, '"') : NULL;

		while (end && end[-1] == '\\')
			end = strchr(end + 1, '"');
		if (q && end) {
			fprintf(stderr, "phos-fn: HTTP %ld: %.*s\n", a->code, (int)(end - q - 1), q + 1);
			if (a->code == 401)
				fprintf(stderr, "phos-fn: pass --token-file FILE, or --state-dir DIR of the invoker "
						"(whose DIR/" INV_TOKEN_FILE " this user must be able to read)\n");
			return;
		}
	}
	fprintf(stderr, "phos-fn: HTTP %ld: %.*s\n", a->code, (int)a->len, a->body);
}

/* URL's scheme, host (no brackets) and port (the scheme's default when
 * absent) by libcurl's parser; false when it is not a URL. */
static bool url_parts(const char *url, char *scheme, size_t sl, char *host, size_t hl, char *port, size_t pl)
{
	CURLU *u = curl_url();
	char *s = NULL, *h = NULL, *p = NULL;
	bool ok = u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
		  curl_url_get(u, CURLUPART_SCHEME, &s, 0) == CURLUE_OK &&
		  curl_url_get(u, CURLUPART_HOST, &h, 0) == CURLUE_OK &&
		  curl_url_get(u, CURLUPART_PORT, &p, CURLU_DEFAULT_PORT) == CURLUE_OK;

	if (ok) {
		size_t n = strlen(h);

		if (n >= 2 && h[0] == '[' && h[n - 1] == ']')   /* [::1] */
			snprintf(host, hl, "%.*s", (int)(n - 2), h + 1);
		else
			snprintf(host, hl, "%s", h);
		snprintf(scheme, sl, "%s", s);
		snprintf(port, pl, "%s", p);
	}
	curl_free(s);
	curl_free(h);
	curl_free(p);
	curl_url_cleanup(u);
	return ok;
}

/* Whether every address host resolves to is a loopback one (127/8, ::1,
 * ::ffff:127/104); false when it does not resolve. */
static bool host_is_loopback(const char *host)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai, *a;
	bool all = true;

	if (getaddrinfo(host, NULL, &hints, &ai) != 0)
		return false;
	for (a = ai; a && all; a = a->ai_next) {
		if (a->ai_family == AF_INET) {
			all = (ntohl(((struct sockaddr_in *)a->ai_addr)->sin_addr.s_addr) >> 24) == 127;
		} else if (a->ai_family == AF_INET6) {
			const struct in6_addr *v6 = &((struct sockaddr_in6 *)a->ai_addr)->sin6_addr;

			all = IN6_IS_ADDR_LOOPBACK(v6) || (IN6_IS_ADDR_V4MAPPED(v6) && v6->s6_addr[12] == 127);
		} else {
			all = false;
		}
	}
	freeaddrinfo(ai);
	return all;
}

/* Whether url is the invoker that listens at listen ("HOST:PORT",
 * "[HOST6]:PORT", STATE/listen). */
static bool url_is_invoker(const char *url, const char *listen)
{
	char scheme[16], host[256], port[16], lhost[256];
	const char *colon = strrchr(listen, ':');
	size_t n;

	if (!colon || !url_parts(url, scheme, sizeof(scheme), host, sizeof(host), port, sizeof(port)))
		return false;
	n = (size_t)(colon - listen);
	if (n >= 2 && listen[0] == '[' && listen[n - 1] == ']')
		snprintf(lhost, sizeof(lhost), "%.*s", (int)(n - 2), listen + 1);
	else
		snprintf(lhost, sizeof(lhost), "%.*s", (int)n, listen);
	if (strcmp(port, colon + 1))
		return false;
	if (!strcasecmp(host, lhost))
		return true;
	return (host_is_loopback(lhost) || !strcmp(lhost, "0.0.0.0") || !strcmp(lhost, "::")) &&
	       host_is_loopback(host);
}

/* The invoker's STATE/listen into buf (one line); false when there is none. */
static bool state_listen(const char *state, char *buf, size_t len)
{
	char path[PATH_MAX + 32];
	FILE *f;
	bool ok;

	snprintf(path, sizeof(path), "%s/%s", state, INV_LISTEN_FILE);
	f = fopen(path, "re");
	if (!f)
		return false;
	ok = fgets(buf, (int)len, f) != NULL;
	fclose(f);
	buf[strcspn(buf, "\n")] = '\0';
	return ok && *buf;
}

int cli_gateway_init(struct cli_gateway *g, const char *url, const char *token_file, const char *state_dir,
		     bool insecure_http)
{
	const char *env = getenv("PHOS_GATEWAY");
	char state[PATH_MAX], path[PATH_MAX + 32], err[PATH_MAX + 128], listen[300];
	char scheme[16], host[256], port[16];
	char *token = NULL;

	memset(g, 0, sizeof(*g));
	snprintf(g->url, sizeof(g->url), "%s", url ? url : env && *env ? env : "http://127.0.0.1:8080");
	size_t n = strlen(g->url);
	while (n && g->url[n - 1] == '/')
		g->url[--n] = '\0';
	if (token_file) {
		if (inv_token_read(token_file, &token, err, sizeof(err)) < 0) {
			fprintf(stderr, "phos-fn: %s\n", err);
			return -ENOENT;
		}
	} else if (state_dir || inv_state_dir_default(state, sizeof(state), false) == 0) {
		/* the invoker's own admin token, when this user may read it, for
		 * that invoker alone */
		const char *sd = state_dir ? state_dir : state;

		snprintf(path, sizeof(path), "%s/%s", sd, INV_TOKEN_FILE);
		if (access(path, F_OK) == 0 && inv_token_read(path, &token, err, sizeof(err)) < 0)
			fprintf(stderr, "phos-fn: %s\n", err);
		if (token && !(state_listen(sd, listen, sizeof(listen)) && url_is_invoker(g->url, listen))) {
			fprintf(stderr, "phos-fn: not sending the admin token of %s to %s: it is not that invoker "
					"(pass --token-file to send one)\n", sd, g->url);
			explicit_bzero(token, strlen(token));
			free(token);
			token = NULL;
		}
	}
	if (token && !insecure_http &&
	    (!url_parts(g->url, scheme, sizeof(scheme), host, sizeof(host), port, sizeof(port)) ||
	     (strcasecmp(scheme, "https") && !host_is_loopback(host)))) {
		fprintf(stderr, "phos-fn: refusing to send an admin token to %s: plain http to an address that is not "
				"this machine's loopback (use https, or --insecure-http)\n", g->url);
		explicit_bzero(token, strlen(token));
		free(token);
		return -EPERM;
	}
	if (token) {
		snprintf(g->token, sizeof(g->token), "%s", token);
		free(token);
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	return 0;
}
