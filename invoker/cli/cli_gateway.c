/* SPDX-License-Identifier: MIT */
/*
 * phos-fn deploy | list | describe | remove | invoke | logs | snapshot NAME |
 * cluster | drain: clients of the invoker's HTTP API (--gateway URL, or a
 * member of the cluster registered in etcd at --cluster URL; --token-file
 * FILE, or --state-dir DIR whose admin.token the invoker made).
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cli.h"
#include "cli_client.h"
#include "etcd.h"
#include "token.h"

#define MAX_STDIN (256u << 20)

enum { O_GATEWAY = 1000, O_TOKEN, O_NAME, O_DEVICE, O_LIMIT, O_TAIL, O_STATE, O_FROM, O_FROM_TOKEN, O_TO, O_TO_TOKEN,
       O_INSTANCE, O_MODE, O_GPUS, O_INSECURE_HTTP, O_REPLICAS, O_CLUSTER, O_UNDO };

static const struct option common_opts[] = {
	{ "gateway", required_argument, NULL, O_GATEWAY }, { "token-file", required_argument, NULL, O_TOKEN },
	{ "name", required_argument, NULL, O_NAME },       { "device", required_argument, NULL, O_DEVICE },
	{ "limit", required_argument, NULL, O_LIMIT },     { "tail", required_argument, NULL, O_TAIL },
	{ "state-dir", required_argument, NULL, O_STATE }, { "help", no_argument, NULL, 'h' },
	{ "from", required_argument, NULL, O_FROM },       { "from-token-file", required_argument, NULL, O_FROM_TOKEN },
	{ "to", required_argument, NULL, O_TO },           { "to-token-file", required_argument, NULL, O_TO_TOKEN },
	{ "instance", required_argument, NULL, O_INSTANCE }, { "mode", required_argument, NULL, O_MODE },
	{ "gpus", required_argument, NULL, O_GPUS },
	{ "insecure-http", no_argument, NULL, O_INSECURE_HTTP },
	{ "replicas", required_argument, NULL, O_REPLICAS }, { "cluster", required_argument, NULL, O_CLUSTER },
	{ "undo", no_argument, NULL, O_UNDO },
	{ 0 },
};

struct args {
	const char *gateway, *token_file, *state_dir, *name, *device, *tail;
	bool insecure_http;   /* a token may go over plain http to another host */
	const char *gpus;   /* deploy --gpus N (the invoker checks it) */
	const char *from, *from_token_file;   /* deploy --from: a pull from a peer invoker */
	const char *to, *to_token_file, *instance, *mode;   /* migrate */
	const char *cluster;  /* etcd's URL: the gateway is a member registered there */
	long replicas;        /* deploy --replicas N (0: not given) */
	bool undo;            /* drain --undo */
	json_t *limits;
};

static bool name_valid(const char *n)
{
	size_t len = strlen(n);

	if (len < 1 || len > 63 || n[0] == '-')
		return false;
	return strspn(n, "abcdefghijklmnopqrstuvwxyz0123456789-") == len;
}

static const char *usage_of(const char *cmd)
{
	if (!strcmp(cmd, "deploy"))
		return "deploy --name NAME [--device auto|cuda|sim] [--gpus N] [--limit KEY=VALUE]... -- PROGRAM [ARGS...]\n"
		       "       phos-fn deploy --from URL [--from-token-file FILE] [--limit deploy_timeout_ms=MS] NAME   "
		       "(pull NAME's snapshot from the invoker at URL, within MS: default 60000)";
	if (!strcmp(cmd, "list"))
		return "list";
	if (!strcmp(cmd, "logs"))
		return "logs NAME [--tail N]";
	if (!strcmp(cmd, "migrate"))
		return "migrate NAME [--instance ID] --to URL [--to-token-file FILE] [--mode recopy|stw|cow]";
	if (!strcmp(cmd, "checkpoint"))
		return "checkpoint NAME [--instance ID] [--mode stw|cow|recopy]   (an instance, on the invoker)";
	if (!strcmp(cmd, "invoke"))
		return "invoke NAME   (request body on stdin, answer on stdout)";
	if (!strcmp(cmd, "cluster"))
		return "cluster   (the members of the invoker's cluster)";
	if (!strcmp(cmd, "drain"))
		return "drain [--undo]   (the invoker's sessions move to other members; none is placed there)";
	static char buf[64];
	snprintf(buf, sizeof(buf), "%s NAME", cmd);
	return buf;
}

/* Parses the options; returns optind, or -1 (usage printed, exit 2), -2 (help). */
static int parse(int argc, char **argv, struct args *a)
{
	int c;

	memset(a, 0, sizeof(*a));
	a->limits = json_object();
	optind = 1;
	/* deploy stops at PROGRAM; the others take options after NAME too */
	while ((c = getopt_long(argc, argv, strcmp(argv[0], "deploy") ? "h" : "+h", common_opts, NULL)) != -1) {
		switch (c) {
		case O_GATEWAY: a->gateway = optarg; break;
		case O_INSECURE_HTTP: a->insecure_http = true; break;
		case O_TOKEN: a->token_file = optarg; break;
		case O_STATE: a->state_dir = optarg; break;
		case O_NAME: a->name = optarg; break;
		case O_DEVICE: a->device = optarg; break;
		case O_GPUS: a->gpus = optarg; break;
		case O_TAIL: a->tail = optarg; break;
		case O_FROM: a->from = optarg; break;
		case O_FROM_TOKEN: a->from_token_file = optarg; break;
		case O_TO: a->to = optarg; break;
		case O_TO_TOKEN: a->to_token_file = optarg; break;
		case O_INSTANCE: a->instance = optarg; break;
		case O_MODE: a->mode = optarg; break;
		case O_CLUSTER: a->cluster = optarg; break;
		case O_UNDO: a->undo = true; break;
		case O_REPLICAS: {
			char *end;

			a->replicas = strtol(optarg, &end, 10);
			if (*end || end == optarg || a->replicas < 1 || a->replicas > 16) {
				fprintf(stderr, "phos-fn: --replicas takes 1..16 (hosts of the cluster to deploy to)\n");
				return -1;
			}
			break;
		}
		case O_LIMIT: {
			char *eq = strchr(optarg, '='), *end;
			long long v;

			if (!eq || eq == optarg || (v = strtoll(eq + 1, &end, 10), *end) || eq[1] == '\0' || v < 0) {
				fprintf(stderr, "phos-fn: --limit takes KEY=NUMBER (max_instances, max_inflight, "
						"timeout_ms, idle_ms, max_body_bytes, deploy_timeout_ms)\n");
				return -1;
			}
			*eq = '\0';
			json_object_set_new(a->limits, optarg, json_integer(v));
			*eq = '=';
			break;
		}
		case 'h':
			printf("usage: phos-fn %s [--gateway URL | --cluster ETCD_URL] [--token-file FILE | --state-dir DIR]\n"
			       "  [--insecure-http]\n"
			       "  (STATE's admin token goes to that invoker alone; no token goes over plain http\n"
			       "  to another host without --insecure-http; --cluster: a member registered in etcd,\n"
			       "  for invoke one that has NAME ready)\n", usage_of(argv[0]));
			return -2;
		default:
			return -1;
		}
	}
	return optind;
}

static int done(struct cli_answer *ans, bool print)
{
	int rc = 0;

	if (ans->code >= 200 && ans->code < 300) {
		if (print)
			fwrite(ans->body, 1, ans->len, stdout);
	} else {
		cli_http_report(ans);
		rc = 1;
	}
	free(ans->body);
	return rc;
}

/* Pretty-prints a JSON answer when it is one. */
static void print_json(const struct cli_answer *ans)
{
	json_t *j = json_loadb(ans->body, ans->len, 0, NULL);

	if (!j) {
		fwrite(ans->body, 1, ans->len, stdout);
		return;
	}
	json_dumpf(j, stdout, JSON_INDENT(2));
	fputc('\n', stdout);
	json_decref(j);
}

static char *read_stdin(size_t *ret_len)
{
	size_t cap = 65536, len = 0;
	char *b = malloc(cap);
	size_t n;

	while (b && (n = fread(b + len, 1, cap - len, stdin)) > 0) {
		len += n;
		if (len == cap) {
			char *nb = cap < MAX_STDIN ? realloc(b, cap * 2) : NULL;

			if (!nb) {
				fprintf(stderr, "phos-fn: request body over %u bytes\n", MAX_STDIN);
				free(b);
				return NULL;
			}
			b = nb;
			cap *= 2;
		}
	}
	*ret_len = len;
	return b;
}

/* deploy --from URL NAME: the invoker pulls NAME's snapshot from the peer at
 * URL, with the peer's peer token (phos-fn peer-token there) from
 * --from-token-file (else $PHOS_FROM_TOKEN_FILE). */
static int deploy_from(struct cli_gateway *g, struct args *a, int argc, char **argv, int first)
{
	const char *tf = a->from_token_file ? a->from_token_file : getenv("PHOS_FROM_TOKEN_FILE");
	const char *name = first == argc - 1 ? argv[first] : first == argc ? a->name : NULL;  /* NAME or --name */
	json_t *timeout = json_object_get(a->limits, "deploy_timeout_ms");   /* the whole pull's */
	char *token = NULL, err[512], what[128], *body;
	struct cli_answer ans;
	json_t *req;
	int r;

	if (!name || !name_valid(name) || (a->name && strcmp(a->name, name)) || a->device || a->gpus ||
	    json_object_size(a->limits) > (timeout ? 1u : 0u)) {
		fprintf(stderr, "usage: phos-fn %s\n", usage_of("deploy"));
		return 2;
	}
	if (!tf) {
		fprintf(stderr, "phos-fn: deploy --from needs the peer's peer token (phos-fn peer-token there): "
				"--from-token-file FILE (or $PHOS_FROM_TOKEN_FILE)\n");
		return 2;
	}
	if (inv_token_read(tf, &token, err, sizeof(err)) < 0) {
		fprintf(stderr, "phos-fn: %s\n", err);
		return 1;
	}
	req = json_pack("{s:s,s:s,s:s}", "name", name, "from", a->from, "from_token", token);
	explicit_bzero(token, strlen(token));
	free(token);
	if (req && timeout)
		json_object_set(req, "deploy_timeout_ms", timeout);
	body = req ? json_dumps(req, JSON_COMPACT) : NULL;
	json_decref(req);
	if (!body)
		return 1;
	snprintf(what, sizeof(what), "pulling %s from %.64s", name, a->from);
	r = cli_http(g, "POST", "/system/functions", body, strlen(body), what, &ans);
	free(body);
	if (r < 0)
		return 1;
	if (ans.code == 201)
		print_json(&ans);
	return done(&ans, false);
}

/* The instance a command names: --instance ID, else NAME's only live
 * instance (from /system/logs). 0, or the exit status after saying why. */
static int instance_of(struct cli_gateway *g, struct args *a, const char *name, unsigned long *ret)
{
	struct cli_answer ans;
	char path[256], *end;
	unsigned long id = 0;

	if (a->instance) {
		id = strtoul(a->instance, &end, 10);
		if (*end || id < 1 || id > 999999999 || a->instance[0] == '-') {
			fprintf(stderr, "phos-fn: --instance takes an instance id (1..999999999; see phos-fn logs)\n");
			return 2;
		}
	} else {
		json_t *j, *list, *v;
		unsigned n = 0;
		size_t i;

		snprintf(path, sizeof(path), "/system/logs?name=%s&tail=1", name);
		if (cli_http(g, "GET", path, NULL, 0, NULL, &ans) < 0)
			return 1;
		if (ans.code != 200)
			return done(&ans, false);
		j = json_loadb(ans.body, ans.len, 0, NULL);
		list = json_object_get(j, "instances");
		json_array_foreach(list, i, v)
			if (strcmp(json_string_value(json_object_get(v, "state")) ?: "", "exited")) {
				n++;
				id = (unsigned long)json_integer_value(json_object_get(v, "instance"));
			}
		json_decref(j);
		free(ans.body);
		if (n != 1) {
			fprintf(stderr, "phos-fn: %s has %u instances: name one with --instance ID (see phos-fn logs %s)\n",
				name, n, name);
			return 1;
		}
	}
	*ret = id;
	return 0;
}

/* checkpoint NAME [--instance ID] [--mode M]: the invoker checkpoints the
 * instance (issue 11; into its state dir, replaced by the next, removed with
 * the instance). */
static int checkpoint(struct cli_gateway *g, struct args *a, const char *name)
{
	char path[256], what[160], body[64];
	struct cli_answer ans;
	unsigned long id;
	int r = instance_of(g, a, name, &id);

	if (r)
		return r;
	if (a->mode && strcmp(a->mode, "stw") && strcmp(a->mode, "cow") && strcmp(a->mode, "recopy")) {
		fprintf(stderr, "phos-fn: --mode takes stw, cow or recopy\n");
		return 2;
	}
	snprintf(body, sizeof(body), "{\"mode\":\"%s\"}", a->mode ? a->mode : "stw");
	snprintf(path, sizeof(path), "/system/functions/%s/instances/%lu/checkpoint", name, id);
	snprintf(what, sizeof(what), "checkpointing instance %lu of %s", id, name);
	if (cli_http(g, "POST", path, body, strlen(body), what, &ans) < 0)
		return 1;
	if (ans.code == 200)
		print_json(&ans);
	return done(&ans, false);
}

/* migrate NAME --to URL: the invoker moves NAME's instance (--instance, else
 * its only one) with its state to the invoker at URL, whose peer token
 * (phos-fn peer-token there) is in --to-token-file (else $PHOS_TO_TOKEN_FILE). */
static int migrate(struct cli_gateway *g, struct args *a, const char *name)
{
	const char *tf = a->to_token_file ? a->to_token_file : getenv("PHOS_TO_TOKEN_FILE");
	char *token = NULL, err[512], what[160], path[256], *body;
	struct cli_answer ans;
	unsigned long id = 0;
	json_t *req;
	int r;

	if (!a->to || !tf) {
		fprintf(stderr, "phos-fn: migrate needs --to URL and the target's peer token (phos-fn peer-token "
				"there): --to-token-file FILE (or $PHOS_TO_TOKEN_FILE)\n");
		return 2;
	}
	r = instance_of(g, a, name, &id);
	if (r)
		return r;
	if (inv_token_read(tf, &token, err, sizeof(err)) < 0) {
		fprintf(stderr, "phos-fn: %s\n", err);
		return 1;
	}
	req = json_pack("{s:s,s:s}", "to", a->to, "to_token", token);
	explicit_bzero(token, strlen(token));
	free(token);
	if (req && a->mode)
		json_object_set_new(req, "mode", json_string(a->mode));
	body = req ? json_dumps(req, JSON_COMPACT) : NULL;
	json_decref(req);
	if (!body)
		return 1;
	snprintf(path, sizeof(path), "/system/functions/%s/instances/%lu/migrate", name, id);
	snprintf(what, sizeof(what), "moving instance %lu of %s to %.64s", id, name, a->to);
	r = cli_http(g, "POST", path, body, strlen(body), what, &ans);
	explicit_bzero(body, strlen(body));
	free(body);
	if (r < 0)
		return 1;
	if (ans.code == 200)
		print_json(&ans);
	return done(&ans, false);
}

static int deploy(struct cli_gateway *g, struct args *a, int argc, char **argv, int first)
{
	char prog[PATH_MAX], path[64 + PATH_MAX], what[128];
	struct cli_answer ans;
	json_t *req, *args = json_array();
	char *body;
	int r;

	if (!a->name || first >= argc) {
		fprintf(stderr, "usage: phos-fn %s\n", usage_of("deploy"));
		return 2;
	}
	/* The invoker needs an absolute path: resolve a relative one here. */
	if (argv[first][0] != '/' && strchr(argv[first], '/') && realpath(argv[first], prog))
		snprintf(path, sizeof(path), "%s", prog);
	else
		snprintf(path, sizeof(path), "%s", argv[first]);
	for (int i = first + 1; i < argc; i++)
		json_array_append_new(args, json_string(argv[i]));
	req = json_pack("{s:s,s:s,s:o,s:o}", "name", a->name, "program", path, "args", args, "limits", a->limits);
	a->limits = NULL;
	if (a->replicas)
		json_object_set_new(req, "replicas", json_integer(a->replicas));
	if (a->device)
		json_object_set_new(req, "device", json_string(a->device));
	if (a->gpus) {
		char *end;
		long n = strtol(a->gpus, &end, 10);

		if (*end || end == a->gpus || n < 1 || n > 1024) {
			fprintf(stderr, "phos-fn: --gpus takes a number of GPUs (the invoker allows 1 to 8)\n");
			json_decref(req);
			return 2;
		}
		json_object_set_new(req, "gpus", json_integer(n));
	}
	body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	snprintf(what, sizeof(what), "deploying %s (snapshot)", a->name);
	r = cli_http(g, "POST", "/system/functions", body, strlen(body), what, &ans);
	free(body);
	if (r < 0)
		return 1;
	if (ans.code == 201)
		print_json(&ans);
	return done(&ans, false);
}

/* --cluster ETCD_URL: a member registered there, into buf: for a call of
 * name (NULL: any command), one that has it ready with an idle instance
 * first; else the least loaded. 0, or -1 (said why). */
static int member_of(const char *etcd, const char *name, char *buf, size_t len)
{
	json_t *members = NULL, *m;
	long best_rank = 0, best_load = 0;
	char err[512];
	size_t i;

	buf[0] = '\0';
	if (inv_etcd_range(etcd, "phos/hosts/", &members, err, sizeof(err)) < 0) {
		fprintf(stderr, "phos-fn: --cluster: %s\n", err);
		return -1;
	}
	json_array_foreach(members, i, m) {
		json_t *rec = json_loads(json_string_value(json_object_get(m, "value")), 0, NULL);
		json_t *fn = name ? json_object_get(json_object_get(rec, "functions"), name) : NULL;
		const char *key = json_string_value(json_object_get(m, "key"));
		const char *url = key && strlen(key) > 11 ? key + 11 : NULL;   /* (after "phos/hosts/": the key names it) */
		long load = (long)json_integer_value(json_object_get(rec, "load"));
		long rank = json_is_true(json_object_get(rec, "draining")) ? 3 :
			    !name ? 1 : !json_is_true(json_object_get(fn, "ready")) ? 2 :
			    json_integer_value(json_object_get(fn, "idle")) > 0 ? 0 : 1;

		if (url && strlen(url) < len && !strncmp(url, "http", 4) &&
		    (!buf[0] || rank < best_rank || (rank == best_rank && load < best_load))) {
			snprintf(buf, len, "%s", url);
			best_rank = rank;
			best_load = load;
		}
		json_decref(rec);
	}
	json_decref(members);
	if (!buf[0]) {
		fprintf(stderr, "phos-fn: --cluster: no member is registered in etcd at %s\n", etcd);
		return -1;
	}
	return 0;
}

/* phos-fn cluster | drain [--undo]: the cluster's routes of the invoker. */
static int cluster_cmd(struct cli_gateway *g, struct args *a, const char *cmd)
{
	struct cli_answer ans;
	const char *body = a->undo ? "{\"drain\":false}" : "{\"drain\":true}";
	int r = !strcmp(cmd, "cluster") ? cli_http(g, "GET", "/system/cluster", NULL, 0, NULL, &ans) :
		cli_http(g, "POST", "/system/cluster/drain", body, strlen(body), a->undo ? NULL : "moving its sessions",
			 &ans);

	if (r < 0)
		return 1;
	if (ans.code == 200)
		print_json(&ans);
	return done(&ans, false);
}

/* phos-fn COMMAND ... against the gateway; cmd is argv[0]. */
/* describe, remove, snapshot NAME: the answer printed. */
static int one_function(struct cli_gateway *g, const char *cmd, const char *name)
{
	struct cli_answer ans;
	char path[512];
	bool snap = !strcmp(cmd, "snapshot");

	snprintf(path, sizeof(path), "/system/functions/%s%s", name, snap ? "/snapshot" : "");
	if (cli_http(g, snap ? "POST" : cmd[0] == 'd' ? "GET" : "DELETE", path, NULL, 0,
		     snap ? "taking the snapshot" : NULL, &ans) < 0)
		return 1;
	if (ans.code == 200)
		print_json(&ans);
	return done(&ans, false);
}

/* logs NAME: the last `tail` lines of each instance's log. */
static int logs(struct cli_gateway *g, const char *name, long tail)
{
	struct cli_answer ans;
	char path[512];

	snprintf(path, sizeof(path), "/system/logs?name=%s&tail=%ld", name, tail);
	if (cli_http(g, "GET", path, NULL, 0, NULL, &ans) < 0)
		return 1;
	if (ans.code == 200) {
		json_t *j = json_loadb(ans.body, ans.len, 0, NULL), *in;
		size_t i;

		json_array_foreach(json_object_get(j, "instances"), i, in) {
			const char *log = json_string_value(json_object_get(in, "log"));

			printf("== instance %lld (%s) ==\n%s", (long long)json_integer_value(json_object_get(in, "instance")),
			       json_string_value(json_object_get(in, "state")), log ? log : "");
			if (log && *log && log[strlen(log) - 1] != '\n')
				putchar('\n');
		}
		json_decref(j);
	}
	return done(&ans, false);
}

/* invoke NAME: standard input as the body, the answer on standard output. */
static int invoke(struct cli_gateway *g, const char *name)
{
	struct cli_answer ans;
	char path[512], *body;
	size_t len;
	int rc;

	body = read_stdin(&len);
	if (!body)
		return 1;
	snprintf(path, sizeof(path), "/function/%s", name);
	rc = cli_http(g, "POST", path, body, len, NULL, &ans);
	free(body);
	return rc < 0 ? 1 : done(&ans, true);
}

int cli_gateway(int argc, char **argv)
{
	const char *cmd = argv[0];
	struct cli_gateway g;
	struct cli_answer ans;
	struct args a;
	int first = parse(argc, argv, &a), rc;

	if (first < 0) {
		json_decref(a.limits);
		return first == -2 ? 0 : 2;
	}
	if ((a.replicas && strcmp(cmd, "deploy")) || (a.undo && strcmp(cmd, "drain")) || (a.cluster && a.gateway)) {
		fprintf(stderr, "phos-fn: --replicas goes with deploy, --undo with drain, and --cluster replaces "
				"--gateway\n");
		json_decref(a.limits);
		return 2;
	}
	char member[1024];

	if (a.cluster) {
		if (member_of(a.cluster, !strcmp(cmd, "invoke") && first == argc - 1 ? argv[first] : NULL, member,
			      sizeof(member)) < 0) {
			json_decref(a.limits);
			return 1;
		}
		a.gateway = member;
	}
	if (cli_gateway_init(&g, a.gateway, a.token_file, a.state_dir, a.insecure_http) < 0) {
		json_decref(a.limits);
		return 1;
	}
	if (!strcmp(cmd, "deploy")) {
		rc = a.from ? deploy_from(&g, &a, argc, argv, first) : deploy(&g, &a, argc, argv, first);
		json_decref(a.limits);
		return rc;
	}
	json_decref(a.limits);
	if (!strcmp(cmd, "cluster") || !strcmp(cmd, "drain")) {
		if (first != argc)
			goto usage;
		return cluster_cmd(&g, &a, cmd);
	}
	if (!strcmp(cmd, "list")) {
		if (first != argc)
			goto usage;
		if (cli_http(&g, "GET", "/system/functions", NULL, 0, NULL, &ans) < 0)
			return 1;
		if (ans.code == 200)
			print_json(&ans);
		return done(&ans, false);
	}
	if (first != argc - 1 || !name_valid(argv[first]))
		goto usage;
	const char *name = argv[first];
	if (!strcmp(cmd, "migrate"))
		return migrate(&g, &a, name);
	if (!strcmp(cmd, "checkpoint"))
		return checkpoint(&g, &a, name);
	if (!strcmp(cmd, "describe") || !strcmp(cmd, "remove") || !strcmp(cmd, "snapshot"))
		return one_function(&g, cmd, name);
	if (!strcmp(cmd, "logs")) {
		long tail = a.tail ? strtol(a.tail, NULL, 10) : 100;

		if (tail < 1 || tail > 100000)
			goto usage;
		return logs(&g, name, tail);
	}
	if (!strcmp(cmd, "invoke"))
		return invoke(&g, name);
usage:
	fprintf(stderr, "usage: phos-fn %s [--gateway URL] [--token-file FILE | --state-dir DIR]\n", usage_of(cmd));
	return 2;
}
