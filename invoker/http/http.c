/* SPDX-License-Identifier: MIT */
/*
 * The HTTP API on libmicrohttpd (a few polling threads; a handler that may
 * block on a call or a snapshot runs on a worker lane with its connection
 * suspended, http_server.h): routing, bearer-token auth, incremental body
 * reading under a size limit, JSON errors {"error": "..."}.
 *
 * What a request passes, in order, before any handler runs:
 *   raw URI     no NUL or control character, raw or %-escaped (400): MHD
 *               unescapes before routing, so "/function/a%00b" would be "a"
 *   Host/Origin the listen address, localhost, 127.0.0.1, [::1] or an
 *               --allow-host name, with the port (403): a web page that
 *               rebinds DNS to 127.0.0.1, or posts no-cors, is refused
 *   route, method (404, 405)
 *   token       /system/... and /metrics always; /function/..., /async-function/...
 *               and /system/calls/ID (the random id is the capability) only
 *               with --protect-invoke (401). The admin token opens every
 *               route, the peer token only those of peers (peer_route)
 *   type        a body for /system/... must be application/json (415)
 *   body        Content-Length within the route's limit (413) and within the
 *               daemon's budgets for all bodies being received (503),
 *               reserved before a byte of it is buffered (bodies.c)
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <linux/filter.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "cluster.h"
#include "invoker.h"
#include "log.h"
#include "token.h"
#include "transfer.h"
#include "http_server.h"

#define DEPLOY_BODY_MAX (1u << 20)

enum route {
	R_NONE, R_HEALTH, R_READY, R_METRICS, R_FUNCS, R_FUNC, R_SNAPSHOT, R_CALL, R_LOGS, R_INVOKE, R_ASYNC,
	R_EXPORT, R_EXPORT_FILE,   /* a snapshot pulled by a peer (export.c) */
	R_CHECKPOINT,              /* /system/functions/NAME/instances/ID/checkpoint (checkpoints.c) */
	R_MIGRATE, R_CKPT_FILE,    /* .../instances/ID/migrate, .../checkpoint/file (migrate.c) */
	R_INSTANCES,               /* /system/functions/NAME/instances: a moved instance arrives */
	R_MIGRATION,               /* /system/migrations/ID */
	R_RENDEZVOUS,              /* /system/functions/NAME/rendezvous (rendezvous.c) */
	R_CLUSTER,                 /* /system/cluster: the members (cluster.h) */
	R_DRAIN,                   /* /system/cluster/drain */
	R_REPLICATE,               /* /system/cluster/replicate: a member asks us to pull a function */
};

struct req {
	struct inv_job job;          /* on a worker lane (http_work.c): the first member */
	struct MHD_Connection *c;
	enum route route;
	char name[INV_NAME_MAX + 1];
	char id[65];
	unsigned instance;           /* R_CHECKPOINT */
	struct inv_function *f;      /* R_INVOKE, R_ASYNC */
	bool forward;                /* R_INVOKE of a function we lack: another member's (cluster.h) */
	struct inv_body body;
	int body_err;                /* the first error taking the body: the rest is dropped */
	bool started;
	bool bad_uri;                /* a NUL or control character in the raw URI */
	bool post, del;              /* the method (GET otherwise) */
	/* The answer, made by the handler or by its worker (which then resumes
	 * the connection: MHD touches q only after that), queued by reply(). */
	unsigned code;
	struct MHD_Response *resp;
	bool queued;                 /* handed to a worker lane */
	struct inv_after after;      /* R_INVOKE: done once the answer is queued */
};

atomic_uint inv_http_active;
static char listen_host[256], listen_port[16];
static bool listen_wildcard;
/* Requests from their headers until their answer went out (the drain waits for them). */
atomic_uint inv_http_open;

#if MHD_VERSION < 0x00097002
typedef int MHD_RESULT;
#else
typedef enum MHD_Result MHD_RESULT;
#endif

static void put_response(struct req *q, unsigned code, struct MHD_Response *r)
{
	if (q->resp)
		MHD_destroy_response(q->resp);
	q->code = code;
	q->resp = r;
}

/* The answer to q, kept until it is queued (reply). buf is taken (freed on
 * failure); headers: name, value, ..., NULL. */
static void put_buf(struct req *q, unsigned code, const char *ctype, char *buf, size_t len,
		    const char *const *headers)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, buf, MHD_RESPMEM_MUST_FREE);

	if (!r) {
		free(buf);
		return;
	}
	MHD_add_response_header(r, "Content-Type", ctype);
	if (inv_draining)   /* keep-alive clients must not send into a closing daemon */
		MHD_add_response_header(r, "Connection", "close");
	for (; headers && *headers; headers += 2)
		MHD_add_response_header(r, headers[0], headers[1]);
	put_response(q, code, r);
}

static void put_json(struct req *q, unsigned code, json_t *j, const char *const *headers)
{
	char *s = json_dumps(j, JSON_COMPACT);

	json_decref(j);
	if (!s)
		return;
	size_t n = strlen(s);
	char *t = realloc(s, n + 2);

	if (!t) {
		free(s);
		return;
	}
	s = t;
	s[n] = '\n';
	s[n + 1] = '\0';
	put_buf(q, code, "application/json", s, n + 1, headers);
}

static void put_error(struct req *q, unsigned code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void put_error(struct req *q, unsigned code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	put_json(q, code, json_pack("{s:s}", "error", msg), NULL);
}

/* Queues q's answer on c (none: the connection is closed). */
static MHD_RESULT reply(struct MHD_Connection *c, struct req *q)
{
	MHD_RESULT ret;

	if (!q->resp)
		return MHD_NO;
	ret = MHD_queue_response(c, q->code, q->resp);
	MHD_destroy_response(q->resp);
	q->resp = NULL;
	return ret;
}

/* The routes other invokers use with our peer token (token.h): a snapshot
 * pulled, a moved instance arriving and its checkpoint fetched, a move's
 * record watched by its target, rank 0's rendezvous, and the calls of a
 * moved session forwarded here (those only matter with --protect-invoke). */
static bool peer_route(enum route r)
{
	switch (r) {
	case R_EXPORT: case R_EXPORT_FILE: case R_INSTANCES: case R_CKPT_FILE: case R_MIGRATION: case R_RENDEZVOUS:
	case R_INVOKE: case R_ASYNC: case R_CALL: case R_REPLICATE:
		return true;
	default:
		return false;
	}
}

static bool authorized(struct MHD_Connection *c, enum route r)
{
	const char *h;

	if (r == R_HEALTH || r == R_READY)
		return true;
	if ((r == R_INVOKE || r == R_ASYNC || r == R_CALL) && !inv_cfg.protect_invoke)
		return true;
	h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	if (!h || strncmp(h, "Bearer ", 7))
		return false;
	/* fails closed: no token configured means nobody gets in. Both are
	 * compared, whichever matches: the time says nothing of which. */
	bool admin = inv_token_equal(h + 7, inv_cfg.token),
	     peer = inv_token_equal(h + 7, inv_cfg.peer_token) || inv_cluster_token_ok(h + 7);

	return admin || (peer && peer_route(r));
}

/* NUL, control characters and DEL, raw or %-escaped, anywhere in the URI
 * (path and query) as the client sent it. */
static bool uri_clean(const char *uri)
{
	for (const unsigned char *p = (const unsigned char *)uri; *p; p++) {
		unsigned v = *p;

		if (*p == '%' && isxdigit(p[1]) && isxdigit(p[2])) {
			char hex[3] = { (char)p[1], (char)p[2], 0 };

			v = (unsigned)strtoul(hex, NULL, 16);
		}
		if (v < 0x20 || v == 0x7f)
			return false;
	}
	return true;
}

/* MHD_OPTION_URI_LOG_CALLBACK: sees the URI before MHD unescapes it; what it
 * returns is the request's *con_cls. */
static void *uri_seen(void *cls, const char *uri, struct MHD_Connection *c)
{
	struct req *q = calloc(1, sizeof(*q));

	if (q) {
		q->bad_uri = !uri_clean(uri);
		inv_body_init(&q->body, 0, false);
	}
	return q;
}

/* name (without port) is one the invoker answers to. */
static bool host_name_ok(const char *name, size_t n)
{
	static const char *const local[] = { "localhost", "127.0.0.1", "::1" };
	unsigned char addr[16];
	char lit[64];

	if (n == strlen(listen_host) && !strncasecmp(name, listen_host, n))
		return true;
	for (unsigned i = 0; i < sizeof(local) / sizeof(local[0]); i++)
		if (n == strlen(local[i]) && !strncasecmp(name, local[i], n))
			return true;
	for (unsigned i = 0; i < inv_cfg.n_allow_hosts; i++)
		if (n == strlen(inv_cfg.allow_hosts[i]) && !strncasecmp(name, inv_cfg.allow_hosts[i], n))
			return true;
	/* A wildcard listen answers on every address of the host; an address
	 * literal cannot be rebound by DNS. */
	if (listen_wildcard && n < sizeof(lit)) {
		memcpy(lit, name, n);
		lit[n] = '\0';
		return inet_pton(AF_INET, lit, addr) == 1 || inet_pton(AF_INET6, lit, addr) == 1;
	}
	return false;
}

/* "name[:port]" or "[v6][:port]" names this invoker. */
static bool host_ok(const char *h)
{
	const char *name = h, *port, *end;
	size_t n;

	if (*h == '[') {
		if (!(end = strchr(h, ']')))
			return false;
		name = h + 1;
		n = (size_t)(end - name);
		port = end[1] == ':' ? end + 2 : end[1] ? NULL : "";
	} else {
		const char *colon = strchr(h, ':');

		n = colon ? (size_t)(colon - h) : strlen(h);
		port = colon ? colon + 1 : "";
	}
	if (!port || n == 0)
		return false;
	if (*port ? strcmp(port, listen_port) : strcmp(listen_port, "80"))
		return false;
	return host_name_ok(name, n);
}

struct host_count {
	unsigned host, origin;
};

static MHD_RESULT count_host(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	struct host_count *n = cls;

	n->host += !strcasecmp(key, "Host");
	n->origin += !strcasecmp(key, "Origin");
	return MHD_YES;
}

/* Host and Origin (when sent, once each) name this invoker. */
static bool origin_ok(struct MHD_Connection *c)
{
	const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
	const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
	struct host_count n = { 0, 0 };

	MHD_get_connection_values(c, MHD_HEADER_KIND, count_host, &n);
	if (n.host > 1 || n.origin > 1)
		return false;   /* which one would a proxy have used? */
	if (host && !host_ok(host))
		return false;
	if (!origin)
		return true;
	if (!strncasecmp(origin, "http://", 7))
		origin += 7;
	else if (!strncasecmp(origin, "https://", 8))
		origin += 8;
	else
		return false;    /* "null" (a sandboxed page, a file) and other schemes */
	return !strchr(origin, '/') && host_ok(origin);
}

/* Content-Type is application/json, parameters allowed. */
static bool ctype_json(const char *ct)
{
	if (!ct)
		return false;
	while (*ct == ' ' || *ct == '\t')
		ct++;
	return !strncasecmp(ct, "application/json", 16) &&
	       (ct[16] == '\0' || ct[16] == ';' || ct[16] == ' ' || ct[16] == '\t');
}

/* The answer to a body that could not be taken (bodies.c's errors). */
static void put_body_error(struct req *q, int err)
{
	const char *const retry[] = { "Retry-After", "1", NULL };

	switch (err) {
	case -EFBIG:
		put_error(q, 413, "request body over %zu bytes", q->body.limit);
		break;
	case -E2BIG:
		put_error(q, 413, "request body over what the invoker takes at once (--body-memory, --body-disk)");
		break;
	case -EAGAIN:
		put_json(q, 503, json_pack("{s:s}", "error", "too many request bodies being received; retry"), retry);
		break;
	case -ENOSPC:
	case -EDQUOT:
		put_error(q, 507, "no room on the invoker's disk for the request body");
		break;
	default:
		put_error(q, 500, "cannot take the request body: %s", strerror(-err));
	}
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
	if (!strcmp(url, "/system/cluster"))
		return q->route = R_CLUSTER, 0;
	if (!strcmp(url, "/system/cluster/drain"))
		return q->route = R_DRAIN, 0;
	if (!strcmp(url, "/system/cluster/replicate"))
		return q->route = R_REPLICATE, 0;
	if (!strncmp(url, "/system/migrations/", 19)) {
		const char *id = url + 19;

		if (strlen(id) != 32 || strspn(id, "0123456789abcdef") != 32)
			return 404;
		memcpy(q->id, id, 33);
		return q->route = R_MIGRATION, 0;
	}
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
		else if (named[i].r == R_FUNC && slash && !strcmp(slash, "/export"))
			q->route = R_EXPORT;
		else if (named[i].r == R_FUNC && slash && !strcmp(slash, "/export/file"))
			q->route = R_EXPORT_FILE;
		else if (named[i].r == R_FUNC && slash && !strcmp(slash, "/instances"))
			q->route = R_INSTANCES;
		else if (named[i].r == R_FUNC && slash && !strcmp(slash, "/rendezvous"))
			q->route = R_RENDEZVOUS;
		else if (named[i].r == R_FUNC && slash && !strncmp(slash, "/instances/", 11)) {
			/* /instances/ID/(checkpoint|migrate|checkpoint/file), ID 1..999999999
			 * without leading zeros */
			const char *id = slash + 11, *what;
			size_t digits = strspn(id, "0123456789");

			what = id + digits;
			if (digits == 0 || digits > 9 || id[0] == '0')
				return 404;
			if (!strcmp(what, "/checkpoint"))
				q->route = R_CHECKPOINT;
			else if (!strcmp(what, "/migrate"))
				q->route = R_MIGRATE;
			else if (!strcmp(what, "/checkpoint/file"))
				q->route = R_CKPT_FILE;
			else
				return 404;
			q->instance = (unsigned)strtoul(id, NULL, 10);
		}
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
	case R_FUNC: case R_MIGRATION: return "GET, DELETE";
	case R_SNAPSHOT: case R_INVOKE: case R_ASYNC: case R_CHECKPOINT: case R_MIGRATE: case R_INSTANCES: case R_DRAIN:
	case R_REPLICATE:
		return "POST";
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

/* The call's content type into ctype (128 bytes): it goes into the frame
 * header, so one token of printable ASCII, else application/json. */
static void call_ctype(struct req *q, char *ctype)
{
	const char *ct = MHD_lookup_connection_value(q->c, MHD_HEADER_KIND, "Content-Type");
	bool ok = ct && *ct && strlen(ct) < 128;

	for (const char *p = ct; ok && *p; p++)
		ok &= *p > ' ' && *p < 127;
	snprintf(ctype, 128, "%s", ok ? ct : "application/json");
}

/* A call of a function we lack, run by another member of the cluster. */
static void forward_call(struct req *q)
{
	char ctype[128], *member;
	struct inv_result res;

	call_ctype(q, ctype);
	inv_cluster_invoke(q->name, q->body.bytes, q->body.len, ctype, &res, &member);
	const char *const h[] = { "X-Phos-Served-By", member, NULL };

	put_buf(q, (unsigned)res.http, res.content_type, res.body, res.len, member ? h : NULL);
	free(member);
}

static void invoke(struct req *q)
{
	char ctype[128], id[33], rms[32], runms[32];
	struct inv_result res;

	call_ctype(q, ctype);
	if (q->route == R_ASYNC) {
		int r = inv_call_async(q->f, q->body.bytes, q->body.len, ctype, id);

		if (r == -EAGAIN)
			put_error(q, 429, "the async queue is full (--async-queue %u)", inv_cfg.async_queue);
		else if (r == -ENOSPC || r == -EDQUOT)   /* STATE/calls is full: as a full disk is anywhere else */
			put_error(q, 507, "cannot keep the call: %s", strerror(-r));
		else if (r < 0)
			put_error(q, 503, "cannot accept the call: %s", strerror(-r));
		else
			put_json(q, 202, json_pack("{s:s}", "call_id", id), NULL);
		return;
	}
	inv_call_new(q->f->name, id);
	inv_call_set_running(id);
	inv_invoke(q->f, q->body.bytes, q->body.len, ctype, &res);
	if (res.at_capacity && inv_cluster_on() && !inv_draining &&
	    !MHD_lookup_connection_value(q->c, MHD_HEADER_KIND, INV_CLUSTER_FORWARDED)) {
		/* full here: another member may run it (it never ran here) */
		struct inv_result other;
		char *member;

		inv_cluster_invoke(q->f->name, q->body.bytes, q->body.len, ctype, &other, &member);
		if (member && other.http != 404 && other.http != 429 && other.http != 503) {
			free(res.body);
			res.body = other.body;
			res.len = other.len;
			res.http = other.http;
			snprintf(res.content_type, sizeof(res.content_type), "%s", other.content_type);
			const char *const h[] = { "X-Call-Id", id, "X-Phos-Served-By", member, NULL };

			inv_call_finish(id, &res);
			put_buf(q, (unsigned)res.http, res.content_type, res.body, res.len, h);
			q->after = res.after;
			free(member);
			return;
		}
		free(other.body);
		free(member);
	}
	inv_call_finish(id, &res);
	snprintf(rms, sizeof(rms), "%.3f", res.restore_s * 1000);
	snprintf(runms, sizeof(runms), "%.3f", res.run_s * 1000);
	const char *const h[] = { "X-Call-Id", id, "X-Cold-Start", res.cold ? "true" : "false",
				  "X-Restore-Ms", rms, "X-Run-Ms", runms, NULL };
	put_buf(q, (unsigned)res.http, res.content_type, res.body, res.len, h);
	q->after = res.after;   /* run_request, after it resumed the connection */
}

static const char *arg(struct req *q, const char *name)
{
	return MHD_lookup_connection_value(q->c, MHD_GET_ARGUMENT_KIND, name);
}

/* A range of a snapshot file (export.c), or of a file of a checkpoint being
 * moved (migrate.c), streamed from its descriptor. */
static void file_range(struct req *q)
{
	struct MHD_Response *r = NULL;
	json_t *body = NULL;
	int code = q->route == R_EXPORT_FILE ?
		inv_export_file(q->name, arg(q, "snapshot"), arg(q, "path"), arg(q, "offset"), arg(q, "length"),
				&r, &body) :
		inv_migrate_file(q->name, q->instance, arg(q, "snapshot"), arg(q, "path"), arg(q, "offset"),
				 arg(q, "length"), &r, &body);

	if (code != 200) {
		put_json(q, (unsigned)code, body, NULL);
		return;
	}
	if (inv_draining)
		MHD_add_response_header(r, "Connection", "close");
	put_response(q, 200, r);
}

static void logs(struct req *q)
{
	const char *name = arg(q, "name"), *tail = arg(q, "tail");
	struct inv_function *f;
	long n = 100;
	char *end;

	if (!name || !inv_name_valid(name)) {
		put_error(q, 400, "name= must be a function name");
		return;
	}
	/* digits only: strtol would take " 5" (tail=%205) and "+5" too */
	if (tail && (!*tail || strspn(tail, "0123456789") != strlen(tail) || strlen(tail) > 6 ||
		     (n = strtol(tail, &end, 10)) < 1 || n > 100000)) {
		put_error(q, 400, "tail= must be 1..100000");
		return;
	}
	if (!(f = inv_function_get(name))) {
		put_error(q, 404, "no function %s", name);
		return;
	}
	put_json(q, 200, json_pack("{s:s,s:o}", "name", name, "instances", inv_instances_logs(f, (unsigned)n)), NULL);
	inv_function_unref(f);
}

static void function_get(struct req *q)
{
	struct inv_function *f = inv_function_get(q->name);

	if (!f) {
		put_error(q, 404, "no function %s", q->name);
		return;
	}
	put_json(q, 200, inv_function_describe(f), NULL);
	inv_function_unref(f);
}

static void deploy(struct req *q)
{
	json_error_t je;
	json_t *j = json_loadb(q->body.bytes, q->body.len, JSON_REJECT_DUPLICATES, &je), *body = NULL, *rep;
	char name[INV_NAME_MAX + 1] = "";
	json_int_t replicas = 1;

	if (!j) {
		put_error(q, 400, "bad JSON: %s (line %d)", je.text, je.line);
		return;
	}
	/* "replicas": N, the cluster's (cluster.h); the rest is the registry's */
	if ((rep = json_object_get(j, "replicas"))) {
		replicas = json_is_integer(rep) ? json_integer_value(rep) : 0;
		if (replicas < 1 || replicas > INV_CLUSTER_MAX_REPLICAS || (replicas > 1 && !inv_cluster_on())) {
			json_decref(j);
			put_error(q, 400, "replicas must be 1..%d, and more than 1 only in a cluster (--cluster)",
				  INV_CLUSTER_MAX_REPLICAS);
			return;
		}
		json_object_del(j, "replicas");
	}
	if (json_is_string(json_object_get(j, "name")))
		snprintf(name, sizeof(name), "%s", json_string_value(json_object_get(j, "name")));
	/* with "from": a snapshot from a peer (pull.c) */
	int code = json_object_get(j, "from") ? inv_pull_deploy(j, &body) : inv_function_deploy(j, &body);

	json_decref(j);
	if (code == 201 && replicas > 1 && json_is_object(body))
		json_object_set_new(body, "replicas", inv_cluster_replicate(name, (unsigned)replicas));
	put_json(q, (unsigned)code, body, NULL);
}

/* The route's answer into q. Runs on a worker lane for every route but
 * /healthz and /readyz: it may block. */
static void dispatch(struct req *q)
{
	json_t *body = NULL, *call;
	int code;

	switch (q->route) {
	case R_HEALTH:
		put_json(q, 200, json_pack("{s:s}", "status", "ok"), NULL);
		return;
	case R_READY:
		if (inv_draining)
			put_error(q, 503, "shutting down");
		else
			put_json(q, 200, json_pack("{s:s}", "status", "ready"), NULL);
		return;
	case R_METRICS: {
		char *m = inv_metrics_render();

		if (m)
			put_buf(q, 200, "text/plain; version=0.0.4", m, strlen(m), NULL);
		return;
	}
	case R_FUNCS:
		if (q->post)
			deploy(q);
		else
			put_json(q, 200, inv_function_list(), NULL);
		return;
	case R_FUNC:
		if (!q->del) {
			function_get(q);
			return;
		}
		code = inv_function_remove(q->name, &body);
		break;
	case R_SNAPSHOT:
		code = inv_function_resnapshot(q->name, &body);
		break;
	case R_CALL:
		if ((call = inv_call_get(q->id)))
			put_json(q, 200, call, NULL);
		else
			put_error(q, 404, "no call %s (or it is too old)", q->id);
		return;
	case R_LOGS:
		logs(q);
		return;
	case R_INVOKE:
	case R_ASYNC:
		if (q->forward)
			forward_call(q);
		else
			invoke(q);
		return;
	case R_EXPORT:
		code = inv_export_describe(q->name, &body);
		break;
	case R_EXPORT_FILE:
	case R_CKPT_FILE:
		file_range(q);
		return;
	case R_CHECKPOINT:
		code = inv_checkpoint_request(q->name, q->instance, q->body.bytes, q->body.len, &body);
		break;
	case R_MIGRATE:
		code = inv_migrate_request(q->name, q->instance, q->body.bytes, q->body.len, &body);
		break;
	case R_INSTANCES:
		code = inv_migrate_receive(q->name, q->body.bytes, q->body.len, &body);
		break;
	case R_MIGRATION:
		code = inv_migration_get(q->id, q->del, &body);
		break;
	case R_RENDEZVOUS:
		code = inv_rendezvous_describe(q->name, &body);
		break;
	case R_CLUSTER:
	case R_DRAIN:
	case R_REPLICATE:
		if (!inv_cluster_on()) {
			put_error(q, 404, "this invoker is in no cluster (--cluster)");
			return;
		}
		if (q->route == R_DRAIN) {
			code = inv_cluster_drain(q->body.bytes, q->body.len, &body);
			break;
		}
		if (q->route == R_REPLICATE) {
			code = inv_cluster_replicate_receive(q->body.bytes, q->body.len, &body);
			break;
		}
		put_json(q, 200, inv_cluster_describe(), NULL);
		return;
	default:
		put_error(q, 404, "no such route");
		return;
	}
	put_json(q, (unsigned)code, body, NULL);
}

/* The first look at a request, its headers in: true when it is taken (its
 * body, if any, comes next), false with the refusal in q. */
static bool admit(struct MHD_Connection *c, struct req *q, const char *url, const char *method)
{
	const char *cl, *te;
	unsigned long long want = 0;
	int r;

	if (q->bad_uri) {
		put_error(q, 400, "a NUL or control character in the URL");
		return false;
	}
	if (!origin_ok(c)) {
		put_error(q, 403, "Host or Origin is not this invoker (see --allow-host)");
		return false;
	}
	r = route(url, q);
	if (r == 404) {
		put_error(q, 404, "no route %s", url);
		return false;
	}
	if (!method_ok(q->route, method)) {
		const char *const h[] = { "Allow", allowed(q->route), NULL };

		put_json(q, 405, json_pack("{s:s}", "error", "method not allowed"), h);
		return false;
	}
	q->post = !strcmp(method, "POST");
	q->del = !strcmp(method, "DELETE");
	if (!authorized(c, q->route)) {
		const char *const h[] = { "WWW-Authenticate", "Bearer", NULL };

		put_json(q, 401, json_pack("{s:s}", "error", "missing or bad bearer token"), h);
		return false;
	}
	if (r == 400) {
		put_error(q, 400, "bad function name (must match [a-z0-9][a-z0-9-]{0,62})");
		return false;
	}
	cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
	te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
	if (cl) {
		char *end;

		errno = 0;
		want = strtoull(cl, &end, 10);
		if (errno || end == cl || *end || *cl == '-') {
			put_error(q, 400, "bad Content-Length");
			return false;
		}
	}
	if (q->route != R_INVOKE && q->route != R_ASYNC && (q->post && q->route == R_FUNCS ? true : (want > 0 || te)) &&
	    !ctype_json(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type"))) {
		put_error(q, 415, "the body must be Content-Type: application/json");
		return false;
	}
	if (q->route == R_INVOKE || q->route == R_ASYNC) {
		q->f = inv_function_get(q->name);
		/* another member may have it; a call forwarded to us is never passed on */
		q->forward = !q->f && q->route == R_INVOKE && inv_cluster_on() &&
			     !MHD_lookup_connection_value(c, MHD_HEADER_KIND, INV_CLUSTER_FORWARDED);
		if (!q->f && !q->forward) {
			put_error(q, 404, "no function %s", q->name);
			return false;
		}
		inv_body_init(&q->body, q->f ? q->f->limits.max_body_bytes : inv_cfg.max_body_bytes, true);
	} else {
		inv_body_init(&q->body, q->route == R_FUNCS || q->route == R_INSTANCES ? DEPLOY_BODY_MAX :
			      q->route == R_CHECKPOINT || q->route == R_MIGRATE || q->route == R_DRAIN ||
			      q->route == R_REPLICATE ? 8192 : 0, false);
	}
	/* admitted or refused before a byte of it is buffered */
	if ((r = inv_body_admit(&q->body, want)) < 0) {
		put_body_error(q, r);
		return false;
	}
	inv_conns_headers(c, want > 0 || te);
	return true;
}

/* A worker lane runs the route, then hands the connection back to MHD,
 * which calls handler() again: q->resp is the answer. */
static void run_request(struct inv_job *job)
{
	struct req *q = (struct req *)job;

	struct inv_after after;

	dispatch(q);
	after = q->after;
	MHD_resume_connection(q->c);   /* q is MHD's again from here */
	inv_invoke_done(&after);       /* the answer is on its way meanwhile */
	atomic_fetch_sub(&inv_http_active, 1);
}

static MHD_RESULT handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
			  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
	struct req *q = *con_cls;

	if (!q || !q->started) {
		if (!q) {
			if (!(q = calloc(1, sizeof(*q))))
				return MHD_NO;
			inv_body_init(&q->body, 0, false);
		}
		*con_cls = q;
		atomic_fetch_add(&inv_http_open, 1);
		q->started = true;
		return admit(c, q, url, method) ? MHD_YES : reply(c, q);
	}
	if (q->queued)          /* back from its worker */
		return reply(c, q);
	if (*upload_size) {
		inv_conns_body(c, *upload_size);
		if (!q->body_err)   /* after an error, drop the rest and answer at the end */
			q->body_err = inv_body_add(&q->body, upload, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	inv_conns_busy(c);
	if (!q->body_err)
		q->body_err = inv_body_finish(&q->body);
	if (q->body_err) {
		put_body_error(q, q->body_err);
		return reply(c, q);
	}
	if ((q->route == R_INVOKE || q->route == R_ASYNC) && q->f && !q->f->ready) {
		put_error(q, 503, "function %s is being deployed", q->name);
		return reply(c, q);
	}
	if (q->route == R_HEALTH || q->route == R_READY) {   /* never block: answered here */
		dispatch(q);
		return reply(c, q);
	}
	/* the rest may block: on a worker lane, the connection suspended meanwhile */
	q->c = c;
	q->queued = true;
	q->job.run = run_request;
	atomic_fetch_add(&inv_http_active, 1);
	MHD_suspend_connection(c);
	if (inv_work_submit(q->route == R_INVOKE || q->route == R_ASYNC || q->route == R_CALL ? INV_LANE_CALLS :
			    INV_LANE_ADMIN, &q->job) < 0) {
		atomic_fetch_sub(&inv_http_active, 1);
		put_json(q, 503, json_pack("{s:s}", "error", "the invoker cannot start a thread for the request; retry"),
			 (const char *const[]){ "Retry-After", "1", NULL });
		MHD_resume_connection(c);
	}
	return MHD_YES;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t)
{
	struct req *q = *con_cls;

	inv_conns_done(c);
	if (!q)
		return;
	if (q->started)
		atomic_fetch_sub(&inv_http_open, 1);
	if (q->resp)
		MHD_destroy_response(q->resp);
	inv_function_unref(q->f);
	inv_body_exit(&q->body);
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
	/* A few polling threads (epoll: no FD_SETSIZE bound); handlers that may
	 * block run on worker lanes with their connection suspended. */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
			 MHD_USE_ERROR_LOG;
	int r;

	if (split_listen(listen, host, sizeof(host), port, sizeof(port)) < 0) {
		phos_errf(err, errlen, "--listen takes ADDR:PORT or [ADDR6]:PORT, not '%s'", listen);
		return NULL;
	}
	if ((r = getaddrinfo(host, port, &hints, &ai)) != 0) {
		phos_errf(err, errlen, "cannot resolve %s: %s", listen, gai_strerror(r));
		return NULL;
	}
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	snprintf(listen_host, sizeof(listen_host), "%s", host);
	snprintf(listen_port, sizeof(listen_port), "%s", port);
	listen_wildcard = !strcmp(host, "0.0.0.0") || !strcmp(host, "::");
	inv_self_url_set(host, port, listen_wildcard);
	inv_work_init(inv_cfg.http_workers, INV_ADMIN_WORKERS);
	if ((r = inv_conns_start(inv_cfg.header_timeout_s, inv_cfg.min_body_rate)) < 0) {
		freeaddrinfo(ai);
		phos_errf(err, errlen, "cannot start the connection sweeper: %s", strerror(-r));
		return NULL;
	}
	/* Bounds on what clients hold: connections in all and per address, the
	 * deadlines of http_conns.c, and an idle timeout for readers that stop. */
	d = MHD_start_daemon(flags, 0, NULL, NULL, handler, NULL, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
			     MHD_OPTION_THREAD_POOL_SIZE, inv_cfg.http_threads,
			     MHD_OPTION_URI_LOG_CALLBACK, uri_seen, NULL,
			     MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
			     MHD_OPTION_NOTIFY_CONNECTION, inv_conns_notify, NULL,
			     MHD_OPTION_CONNECTION_LIMIT, inv_cfg.max_connections,
			     MHD_OPTION_PER_IP_CONNECTION_LIMIT, inv_cfg.max_connections_per_ip,
			     MHD_OPTION_CONNECTION_TIMEOUT, inv_cfg.conn_timeout_s, MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!d) {
		inv_conns_stop();
		phos_errf(err, errlen, "cannot listen on %s (in use, or not an address of this host)", listen);
	}
	return d;
}

static unsigned connections(struct MHD_Daemon *d)
{
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);

	return di ? di->num_connections : 0;
}

/* New connections are no longer made: a filter on the listening socket drops
 * SYNs (and handshakes' last ACKs), so that once MHD has accepted those
 * already made, closing it resets none with a request in it. The clients'
 * SYNs are refused when it closes. */
static void refuse_new(struct MHD_Daemon *d)
{
	const union MHD_DaemonInfo *li = MHD_get_daemon_info(d, MHD_DAEMON_INFO_LISTEN_FD);
	struct sock_filter drop = BPF_STMT(BPF_RET | BPF_K, 0);
	struct sock_fprog prog = { .len = 1, .filter = &drop };

	if (li && setsockopt(li->listen_fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) == 0)
		usleep(100 * 1000);   /* MHD accepts the backlog meanwhile */
}

bool inv_http_stop(struct MHD_Daemon *d, double wait_s)
{
	double end = phos_now() + wait_s;
	MHD_socket ls;

	/* No new connections; those open finish the request they are in (each
	 * answer says Connection: close); a connection between requests is
	 * closed. */
	refuse_new(d);
	ls = MHD_quiesce_daemon(d);
	if (ls != MHD_INVALID_SOCKET)
		close(ls);
	do {
		inv_conns_close_waiting(0.2);
		if (connections(d) == 0 && inv_work_pending() == 0)
			break;
		usleep(20 * 1000);
	} while (phos_now() < end);
	if (inv_work_pending()) {
		/* MHD cannot stop with a connection suspended */
		fprintf(stderr, "phos-invoker: %u requests still running; not waiting for them\n", inv_work_pending());
		return false;
	}
	MHD_stop_daemon(d);
	inv_conns_stop();
	return true;
}
