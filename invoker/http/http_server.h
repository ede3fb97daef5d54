/* SPDX-License-Identifier: MIT */
/*
 * What http.c builds on: the deadlines every connection is held to
 * (http_conns.c), and the bounded worker threads that run the handlers that
 * may block (http_work.c). Private to the invoker's HTTP server.
 *
 * The server is libmicrohttpd with a few polling threads (epoll): a
 * connection costs a descriptor and its buffers, never a thread. A request
 * whose handler may block (a call, a deploy, a migration) is suspended and
 * handed to a worker lane; the worker resumes it with its answer ready.
 */
#ifndef PHOS_INVOKER_HTTP_SERVER_H
#define PHOS_INVOKER_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <microhttpd.h>

/* ---- connection deadlines (http_conns.c) ----
 * Each connection is in one phase; a sweeper thread closes (shutdown(2): the
 * polling thread then sees the end and frees it) those past their phase's
 * bound:
 *   waiting  from its accept, or its previous answer, until its next
 *            request's headers are in: at most --header-timeout seconds
 *            (one byte every second does not extend it)
 *   body     after the headers, until the body is in: after a grace of
 *            --header-timeout seconds, at least --min-body-rate bytes/s on
 *            average since the headers
 *   busy     a handler runs or the answer goes out: no bound here (the call's
 *            timeout_ms and --conn-timeout for a reader that stops) */
int inv_conns_start(unsigned header_timeout_s, unsigned min_body_rate);
void inv_conns_stop(void);
/* MHD_OPTION_NOTIFY_CONNECTION's callback. */
void inv_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
		      enum MHD_ConnectionNotificationCode toe);
/* c's headers are in; body: whether a body is to come. */
void inv_conns_headers(struct MHD_Connection *c, bool body);
/* n more bytes of c's body are in. */
void inv_conns_body(struct MHD_Connection *c, size_t n);
/* c's request is whole (a handler runs), or its answer went out (waiting again). */
void inv_conns_busy(struct MHD_Connection *c);
void inv_conns_done(struct MHD_Connection *c);
/* Closes every connection that has waited idle_s or more for a request and
 * has none on its way in (the drain's end). A keep-alive client sends its
 * next request as soon as it has an answer: one that got its answer just
 * before the drain began (without Connection: close) and sent again at once
 * is answered 503 instead of reset (CI14, test_slow_clients). */
void inv_conns_close_waiting(double idle_s);
/* Connections closed for their deadline, since start (/metrics). */
uint64_t inv_conns_cut(void);

/* ---- worker lanes (http_work.c) ----
 * A lane runs jobs in threads it starts as needed, at most `cap` at once
 * (the rest wait, first come first served); a thread idle for 3 s ends.
 * Calls (routes any client may reach) and administration (token holders)
 * have a lane each, so that calls in flight cannot hold up the operator. */
enum inv_lane { INV_LANE_CALLS, INV_LANE_ADMIN, INV_LANES };

struct inv_job {
	void (*run)(struct inv_job *job);
	struct inv_job *next;
};

void inv_work_init(unsigned calls_cap, unsigned admin_cap);
/* Queues job on lane: 0, or -errno (no thread could be started: the job is
 * not queued). */
int inv_work_submit(enum inv_lane lane, struct inv_job *job);
/* Jobs queued or running in all lanes; threads alive (/metrics, tests). */
unsigned inv_work_pending(void);
unsigned inv_work_threads(void);

#endif
