/* SPDX-License-Identifier: MIT */
/*
 * The HTTP API on libmicrohttpd (one thread per connection, so a handler may
 * block on a call or a snapshot): routing, bearer-token auth, incremental body
 * reading under a size limit, JSON errors {"error": "..."}.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "invoker.h"
#include "log.h"

#define DEPLOY_BODY_MAX (1u << 20)

enum route {
	R_NONE, R_HEALTH, R_READY, R_METRICS, R_FUNCS, R_FUNC, R_SNAPSHOT, R_CALL, R_LOGS, R_INVOKE, R_ASYNC,
};

struct req {
	enum route route;
	char name[INV_NAME_MAX + 1];
	char id[65];
	struct inv_function *f;      /* R_INVOKE, R_ASYNC */
	char *body;
	size_t len, cap, limit;
	bool too_big;
};

atomic_uint inv_http_active;
/* Requests from their headers until their answer went out (the drain waits for them). */
atomic_uint inv_http_open;

#if MHD_VERSION < 0x00097002
typedef int MHD_RESULT;
#else
typedef enum MHD_Result MHD_RESULT;
#endif

static MHD_RESULT send_buf(struct MHD_Connection *c, unsigned code, const char *ctype, char *buf, size_t len,
			   const char *const *headers)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);
	MHD_RESULT ret;

	if (!r) {
		free(buf);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", ctype);
	if (inv_draining)   /* keep-alive clients must not send into a closing daemon */
		MHD_add_response_header(r, "Connection", "close");
	for (; headers && *headers; headers += 2)
		MHD_add_response_header(r, headers[0], headers[1]);
	ret = MHD_queue_response(c, code, r);
	MHD_destroy_response(r);
	return ret;
}

static MHD_RESULT send_json(struct MHD_Connection *c, unsigned code, json_t *j, const char *const *headers)
{
	char *s = json_dumps(j, JSON_COMPACT);

	json_decref(j);
	if (!s)
		return MHD_NO;
	size_t n = strlen(s);
	char *t = realloc(s, n + 2);

	if (!t) {
		free(s);
		return MHD_NO;
	}
	s = t;
	s[n] = '\n';
	s[n + 1] = '\0';
	return send_buf(c, code, "application/json", s, n + 1, headers);
}

static MHD_RESULT send_error(struct MHD_Connection *c, unsigned code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static MHD_RESULT send_error(struct MHD_Connection *c, unsigned code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return send_json(c, code, json_pack("{s:s}", "error", msg), NULL);
}

/* Constant time in the token's length: no early exit on the first difference. */
static bool token_ok(const char *given)
{
	const char *want = inv_cfg.token;
	size_t gl = strlen(given), wl = strlen(want);
	unsigned char diff = gl != wl;

	for (size_t i = 0; i < wl; i++)
		diff |= (unsigned char)(want[i] ^ (i < gl ? given[i] : 0));
	return diff == 0;
}

static bool authorized(struct MHD_Connection *c, enum route r)
{
	const char *h;

	if (!inv_cfg.token || r == R_HEALTH || r == R_READY)
		return true;
	if ((r == R_INVOKE || r == R_ASYNC) && !inv_cfg.protect_invoke)
		return true;
	h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	return h && !strncmp(h, "Bearer ", 7) && token_ok(h + 7);
}

/* Splits url into a route and its name; 0 or 404. */
static int route(const char *url, struct req *q)
{
	static const struct { const char *prefix; enum route r; } named[] = {
		{ "/system/functions/", R_FUNC }, { "/system/calls/", R_CALL },
		{ "/function/", R_INVOKE },       { "/async-function/", R_ASYNC },
	};

	if (!strcmp(url, "/healthz"))
		return q->route = R_HEALTH, 0;
	if (!strcmp(url, "/readyz"))
		return q->route = R_READY, 0;
	if (!strcmp(url, "/metrics"))
		return q->route = R_METRICS, 0;
	if (!strcmp(url, "/system/functions") || !strcmp(url, "/system/functions/"))
		return q->route = R_FUNCS, 0;
	if (!strcmp(url, "/system/logs"))
		return q->route = R_LOGS, 0;
	for (unsigned i = 0; i < sizeof(named) / sizeof(named[0]); i++) {
		size_t pl = strlen(named[i].prefix);
		const char *rest = url + pl, *slash;
		size_t n;

		if (strncmp(url, named[i].prefix, pl))
			continue;
		slash = strchr(rest, '/');
		n = slash ? (size_t)(slash - rest) : strlen(rest);
		q->route = named[i].r;
		if (named[i].r == R_FUNC && slash && !strcmp(slash, "/snapshot"))
			q->route = R_SNAPSHOT;
		else if (slash && !(slash[1] == '\0' && named[i].r != R_CALL))
			return 404;
		if (named[i].r == R_CALL) {
			if (n == 0 || n >= sizeof(q->id))
				return 404;
			memcpy(q->id, rest, n);
			q->id[n] = '\0';
			return 0;
		}
		if (n == 0 || n > INV_NAME_MAX)
			return 400;
		memcpy(q->name, rest, n);
		q->name[n] = '\0';
		return inv_name_valid(q->name) ? 0 : 400;
	}
	return 404;
}

static const char *allowed(enum route r)
{
	switch (r) {
	case R_FUNCS: return "GET, POST";
	case R_FUNC: return "GET, DELETE";
	case R_SNAPSHOT: case R_INVOKE: case R_ASYNC: return "POST";
	default: return "GET";
	}
}

static bool method_ok(enum route r, const char *m)
{
	const char *a = allowed(r);
	size_t n = strlen(m);

	for (const char *p = a; (p = strstr(p, m)); p += n)
		if ((p == a || p[-1] == ' ') && (p[n] == ',' || p[n] == '\0'))
			return true;
	return !strcmp(m, "HEAD") && strstr(a, "GET");
}

static MHD_RESULT invoke(struct MHD_Connection *c, struct req *q)
{
	const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
	char ctype[128] = "application/json", id[33], rms[32], runms[32];
	struct inv_result res;

	/* the content type goes into the frame header: one token of printable ASCII */
	if (ct && strlen(ct) < sizeof(ctype)) {
		bool ok = *ct != '\0';

		for (const char *p = ct; *p; p++)
			ok &= *p > ' ' && *p < 127;
		if (ok)
			snprintf(ctype, sizeof(ctype), "%s", ct);
	}
	if (q->route == R_ASYNC) {
		int r = inv_call_async(q->f, q->body ? q->body : "", q->len, ctype, id);

		if (r < 0)
			return send_error(c, 429, "too many asynchronous calls in flight");
		return send_json(c, 202, json_pack("{s:s}", "call_id", id), NULL);
	}
	inv_call_new(q->f->name, id);
	inv_call_set_running(id);
	inv_invoke(q->f, q->body ? q->body : "", q->len, ctype, &res);
	inv_call_finish(id, &res);
	snprintf(rms, sizeof(rms), "%.3f", res.restore_s * 1000);
	snprintf(runms, sizeof(runms), "%.3f", res.run_s * 1000);
	const char *const h[] = { "X-Call-Id", id, "X-Cold-Start", res.cold ? "true" : "false",
				  "X-Restore-Ms", rms, "X-Run-Ms", runms, NULL };
	return send_buf(c, (unsigned)res.http, res.content_type, res.body, res.len, h);
}

static MHD_RESULT dispatch(struct MHD_Connection *c, const char *method, struct req *q)
{
	json_t *body = NULL;
	int code;

	switch (q->route) {
	case R_HEALTH:
		return send_json(c, 200, json_pack("{s:s}", "status", "ok"), NULL);
	case R_READY:
		if (inv_draining)
			return send_error(c, 503, "shutting down");
		return send_json(c, 200, json_pack("{s:s}", "status", "ready"), NULL);
	case R_METRICS: {
		char *m = inv_metrics_render();

		return m ? send_buf(c, 200, "text/plain; version=0.0.4", m, strlen(m), NULL) : MHD_NO;
	}
	case R_FUNCS:
		if (!strcmp(method, "POST")) {
			json_error_t je;
			json_t *j = json_loadb(q->body ? q->body : "", q->len, JSON_REJECT_DUPLICATES, &je);

			if (!j)
				return send_error(c, 400, "bad JSON: %s (line %d)", je.text, je.line);
			code = inv_function_deploy(j, &body);
			json_decref(j);
			return send_json(c, (unsigned)code, body, NULL);
		}
		return send_json(c, 200, inv_function_list(), NULL);
	case R_FUNC: {
		if (!strcmp(method, "DELETE")) {
			code = inv_function_remove(q->name, &body);
			return send_json(c, (unsigned)code, body, NULL);
		}
		struct inv_function *f = inv_function_get(q->name);

		if (!f)
			return send_error(c, 404, "no function %s", q->name);
		body = inv_function_describe(f);
		inv_function_unref(f);
		return send_json(c, 200, body, NULL);
	}
	case R_SNAPSHOT:
		code = inv_function_resnapshot(q->name, &body);
		return send_json(c, (unsigned)code, body, NULL);
	case R_CALL:
		body = inv_call_get(q->id);
		return body ? send_json(c, 200, body, NULL) : send_error(c, 404, "no call %s (or it is too old)", q->id);
	case R_LOGS: {
		const char *name = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "name");
		const char *tail = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "tail");
		long n = 100;
		char *end;

		if (!name || !inv_name_valid(name))
			return send_error(c, 400, "name= must be a function name");
		if (tail && ((n = strtol(tail, &end, 10)) < 1 || n > 100000 || *end))
			return send_error(c, 400, "tail= must be 1..100000");
		struct inv_function *f = inv_function_get(name);
		if (!f)
			return send_error(c, 404, "no function %s", name);
		body = json_pack("{s:s,s:o}", "name", name, "instances", inv_instances_logs(f, (unsigned)n));
		inv_function_unref(f);
		return send_json(c, 200, body, NULL);
	}
	case R_INVOKE:
	case R_ASYNC:
		return invoke(c, q);
	default:
		return send_error(c, 404, "no such route");
	}
}

static MHD_RESULT handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
			  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
	struct req *q = *con_cls;

	if (!q) {
		const char *cl;
		int r;

		q = calloc(1, sizeof(*q));
		if (!q)
			return MHD_NO;
		*con_cls = q;
		atomic_fetch_add(&inv_http_open, 1);
		r = route(url, q);
		if (r == 404)
			return send_error(c, 404, "no route %s", url);
		if (!method_ok(q->route, method)) {
			const char *const h[] = { "Allow", allowed(q->route), NULL };

			return send_json(c, 405, json_pack("{s:s}", "error", "method not allowed"), h);
		}
		if (!authorized(c, q->route)) {
			const char *const h[] = { "WWW-Authenticate", "Bearer", NULL };

			return send_json(c, 401, json_pack("{s:s}", "error", "missing or bad bearer token"), h);
		}
		if (r == 400)
			return send_error(c, 400, "bad function name (must match [a-z0-9][a-z0-9-]{0,62})");
		q->limit = q->route == R_FUNCS ? DEPLOY_BODY_MAX : 0;
		if (q->route == R_INVOKE || q->route == R_ASYNC) {
			q->f = inv_function_get(q->name);
			if (!q->f)
				return send_error(c, 404, "no function %s", q->name);
			q->limit = q->f->limits.max_body_bytes;
		}
		cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
		if (cl && strtoull(cl, NULL, 10) > q->limit && q->limit)
			return send_error(c, 413, "request body over %zu bytes", q->limit);
		return MHD_YES;
	}
	if (*upload_size) {
		if (q->too_big || q->len + *upload_size > q->limit) {
			q->too_big = true; /* drop the rest, answer 413 at the end */
		} else {
			if (q->len + *upload_size + 1 > q->cap) {
				size_t cap = q->cap ? q->cap : 4096;
				char *b;

				while (cap < q->len + *upload_size + 1)
					cap *= 2;
				if (!(b = realloc(q->body, cap)))
					return MHD_NO;
				q->body = b;
				q->cap = cap;
			}
			memcpy(q->body + q->len, upload, *upload_size);
			q->len += *upload_size;
			q->body[q->len] = '\0';
		}
		*upload_size = 0;
		return MHD_YES;
	}
	if (q->too_big)
		return send_error(c, 413, "request body over %zu bytes", q->limit);
	if ((q->route == R_INVOKE || q->route == R_ASYNC) && !q->f->ready)
		return send_error(c, 503, "function %s is being deployed", q->name);
	atomic_fetch_add(&inv_http_active, 1);
	MHD_RESULT ret = dispatch(c, method, q);
	atomic_fetch_sub(&inv_http_active, 1);
	return ret;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t)
{
	struct req *q = *con_cls;

	if (!q)
		return;
	atomic_fetch_sub(&inv_http_open, 1);
	inv_function_unref(q->f);
	free(q->body);
	free(q);
	*con_cls = NULL;
}

/* ADDR:PORT or [ADDR6]:PORT into host and port. */
static int split_listen(const char *listen, char *host, size_t hl, char *port, size_t pl)
{
	const char *colon = strrchr(listen, ':');
	const char *h = listen;
	size_t n;

	if (!colon || !colon[1] || strlen(colon + 1) >= pl)
		return -EINVAL;
	n = (size_t)(colon - listen);
	if (*h == '[') {
		if (n < 2 || h[n - 1] != ']')
			return -EINVAL;
		h++;
		n -= 2;
	}
	if (n == 0 || n >= hl)
		return -EINVAL;
	memcpy(host, h, n);
	host[n] = '\0';
	snprintf(port, pl, "%s", colon + 1);
	return 0;
}

bool inv_listen_is_loopback(const char *listen)
{
	char host[256], port[16];

	if (split_listen(listen, host, sizeof(host), port, sizeof(port)) < 0)
		return false;
	return !strcmp(host, "127.0.0.1") || !strcmp(host, "::1") || !strcmp(host, "localhost");
}

struct MHD_Daemon *inv_http_start(const char *listen, char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV }, *ai;
	char host[256], port[16];
	struct MHD_Daemon *d;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG;
	int r;

	if (split_listen(listen, host, sizeof(host), port, sizeof(port)) < 0) {
		snprintf(err, errlen, "--listen takes ADDR:PORT or [ADDR6]:PORT, not '%s'", listen);
		return NULL;
	}
	if ((r = getaddrinfo(host, port, &hints, &ai)) != 0) {
		snprintf(err, errlen, "cannot resolve %s: %s", listen, gai_strerror(r));
		return NULL;
	}
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	d = MHD_start_daemon(flags, 0, NULL, NULL, handler, NULL, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
			     MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_CONNECTION_LIMIT, 512u,
			     MHD_OPTION_CONNECTION_TIMEOUT, 900u, MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!d)
		snprintf(err, errlen, "cannot listen on %s (in use, or not an address of this host)", listen);
	return d;
}
