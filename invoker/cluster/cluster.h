/* SPDX-License-Identifier: MIT */
/*
 * Invokers that find each other through etcd (--cluster URL; docs/cluster.md).
 *
 *   member ──every second──▶ etcd: phos/hosts/<advertise URL> = its record,
 *                            under a lease of INV_CLUSTER_TTL_S (renewed
 *                            each second; revoked at a clean stop)
 *          ◀──every second── etcd: every member's record, into a cache
 *
 * A record says what placing a call needs: {"url", "device", "draining",
 * "load" (calls running, queued and forwarded), "gpus": [{"index", "name",
 * "memory_total_mib", "memory_free_mib"}], "functions": {NAME: {"ready",
 * "idle", "busy", "standby", "hot", "generation", "digest"}}}. Placement reads the cache only, so a
 * call never waits for etcd, and an etcd that stops answering leaves the
 * last view in use (a member that died meanwhile fails fast and is skipped).
 *
 * A call of a function this invoker does not have goes to a member that has
 * it ready: one with an idle instance first, then one with a parked process,
 * then one whose pool keeps its snapshot hot (page cache), then the least
 * loaded. A member that cannot be reached, or answers 404,
 * 429 or 503, is skipped and the next one tried; so a call whose member dies
 * under it is run again elsewhere (at least once, as any retried HTTP call).
 * A member that has the function but is full hands the call over alike
 * (http.c: refused at once, never run here).
 * Forwarded calls carry X-Phos-Forwarded and the cluster token; a member
 * never forwards a forwarded call (no loops).
 *
 * The cluster token (--cluster-token-file) is one secret all members share:
 * it opens every member's peer routes (token.h: pulls, moves, forwarded
 * calls), never the admin routes, and is what members send each other.
 * etcd holds no secret.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "invoker.h"

#define INV_CLUSTER_TTL_S 10          /* a member's key outlives it by at most this */
#define INV_CLUSTER_PREFIX "phos/hosts/"
#define INV_CLUSTER_FORWARDED "X-Phos-Forwarded"
#define INV_CLUSTER_MAX_MEMBERS 256   /* read from etcd; more are left out */
#define INV_CLUSTER_MAX_REPLICAS 16   /* a deploy's "replicas" */

/* Joins the cluster at etcd_url as advertise (the URL other members reach
 * us at: http[s]://HOST:PORT) with token (the shared secret, kept): checks
 * both, then starts the thread above. The first registration is tried at
 * once; an etcd not answering yet is retried each second, not an error.
 * 0, or -errno with the reason in err. */
int inv_cluster_start(const char *etcd_url, const char *advertise, const char *token, char *err, size_t errlen);
/* Leaves: the thread stopped, the lease revoked (our key gone at once).
 * Calls may still be forwarded with the last view (the drain's). */
void inv_cluster_stop(void);
bool inv_cluster_on(void);
/* u is http[s]://HOST[:PORT] and nothing else (what --cluster and
 * --advertise take, and a member's key names). */
bool inv_cluster_url_ok(const char *u);
/* given is the cluster token (constant time; false without a cluster). */
bool inv_cluster_token_ok(const char *given);
/* One call of NAME, which this invoker does not have, on a member that has
 * it (above): res as inv_invoke's, with served_by the member's URL
 * (malloc'ed into *ret_member, NULL when none answered). */
void inv_cluster_invoke(const char *name, const char *body, size_t len, const char *ctype, struct inv_result *res,
			char **ret_member);
/* POST /system/cluster/drain {"drain": true|false}: with true, members
 * place no call here while another has the function (our record says
 * "draining"), and the live instance of every session (a function of
 * max_instances 1) moves to a member (recopy: it serves on until its last
 * moment here; calls here are then forwarded to it, migrate.c). Every
 * other function ready here that no other member (not draining) holds is
 * pulled by one (inv_cluster_replicate): the host can then go. Their
 * instances here stay and serve calls made here. false ends it. HTTP
 * status and body (each session's move, each function placed). */
int inv_cluster_drain(const char *body, size_t len, json_t **ret_body);
/* A deploy's "replicas": N (N > 1), once it is deployed here: N - 1 other
 * members of our device that lack it, the least loaded, each pull it from
 * us (POST /system/cluster/replicate; content-addressed: chunks a member
 * holds already are not fetched), at once. Their outcomes, a JSON array
 * of {"member", "status", "answer" or "error"}. */
json_t *inv_cluster_replicate(const char *name, unsigned replicas);
/* POST /system/cluster/replicate {"name", "from"} (cluster token): pulls
 * NAME from the member at from, which must be in our view (the cluster
 * token never makes us fetch from any other URL). HTTP status and body. */
int inv_cluster_replicate_receive(const char *body, size_t len, json_t **ret_body);
/* GET /system/cluster: this member, etcd's state and every member's record. */
json_t *inv_cluster_describe(void);
