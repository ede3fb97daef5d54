/* SPDX-License-Identifier: MIT */
/*
 * Connection deadlines (http_server.h): every connection libmicrohttpd
 * accepts is in a list with its phase and when the phase began; a sweeper
 * thread, four times a second, shuts down those past their bound. MHD's own
 * --conn-timeout is an idle timeout that each byte renews, so one byte every
 * few seconds would hold a connection for ever; these bounds are on the
 * whole phase.
 *
 * shutdown(2), not close(2): the descriptor stays MHD's, whose polling
 * thread sees the end of the stream and frees the connection. A connection
 * leaves the list in MHD's CLOSED notification, which comes before MHD closes
 * the descriptor, and the sweeper shuts down only under the list's lock: it
 * never touches a descriptor number that was reused.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_server.h"
#include "log.h"

enum phase { WAITING, BODY, BUSY };

struct conn {
	int fd;
	enum phase phase;
	double since;            /* the phase began */
	uint64_t got;            /* BODY: bytes since the headers */
	bool cut;
	struct conn *prev, *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stop_cond = PTHREAD_COND_INITIALIZER;
static struct conn *head;
static double header_s = 5, min_rate = 1024;
static bool running, stopping;
static pthread_t sweeper;
static atomic_uint_fast64_t cut_count;

static struct conn *conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

static void cut(struct conn *k, bool count)
{
	if (k->cut)
		return;
	k->cut = true;
	(void)shutdown(k->fd, SHUT_RDWR);
	if (count)
		atomic_fetch_add(&cut_count, 1);
}

static void sweep(double now)
{
	for (struct conn *k = head; k; k = k->next) {
		double in = now - k->since;

		if (k->phase == WAITING && in > header_s)
			cut(k, true);
		else if (k->phase == BODY && in > header_s && (double)k->got < min_rate * in)
			cut(k, true);
	}
}

static void *sweep_loop(void *arg)
{
	pthread_mutex_lock(&lock);
	while (!stopping) {
		struct timespec until;

		sweep(phos_now());
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_nsec += 250 * 1000 * 1000;
		if (until.tv_nsec >= 1000000000) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&stop_cond, &lock, &until);
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

int inv_conns_start(unsigned header_timeout_s, unsigned min_body_rate)
{
	pthread_condattr_t ca;
	int r;

	header_s = header_timeout_s;
	min_rate = min_body_rate;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_destroy(&stop_cond);
	pthread_cond_init(&stop_cond, &ca);
	pthread_condattr_destroy(&ca);
	stopping = false;
	r = -pthread_create(&sweeper, NULL, sweep_loop, NULL);
	running = r == 0;
	return r;
}

void inv_conns_stop(void)
{
	if (!running)
		return;
	pthread_mutex_lock(&lock);
	stopping = true;
	pthread_cond_signal(&stop_cond);
	pthread_mutex_unlock(&lock);
	pthread_join(sweeper, NULL);
	running = false;
}

void inv_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
		      enum MHD_ConnectionNotificationCode toe)
{
	struct conn *k = *socket_context;

	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);

		k = calloc(1, sizeof(*k));
		if (!k || !ci) {
			/* no bound for it rather than no connection; MHD's idle timeout still holds */
			free(k);
			*socket_context = NULL;
			return;
		}
		k->fd = ci->connect_fd;
		k->phase = WAITING;
		k->since = phos_now();
		pthread_mutex_lock(&lock);
		k->next = head;
		if (head)
			head->prev = k;
		head = k;
		pthread_mutex_unlock(&lock);
		*socket_context = k;
		return;
	}
	if (!k)
		return;
	pthread_mutex_lock(&lock);
	if (k->prev)
		k->prev->next = k->next;
	else
		head = k->next;
	if (k->next)
		k->next->prev = k->prev;
	pthread_mutex_unlock(&lock);
	free(k);
	*socket_context = NULL;
}

static void set_phase(struct MHD_Connection *c, enum phase p)
{
	struct conn *k = conn_of(c);

	if (!k)
		return;
	pthread_mutex_lock(&lock);
	k->phase = p;
	k->since = phos_now();
	k->got = 0;
	pthread_mutex_unlock(&lock);
}

void inv_conns_headers(struct MHD_Connection *c, bool body)
{
	set_phase(c, body ? BODY : BUSY);
}

void inv_conns_body(struct MHD_Connection *c, size_t n)
{
	struct conn *k = conn_of(c);

	if (!k)
		return;
	pthread_mutex_lock(&lock);
	k->got += n;
	pthread_mutex_unlock(&lock);
}

void inv_conns_busy(struct MHD_Connection *c)
{
	set_phase(c, BUSY);
}

void inv_conns_done(struct MHD_Connection *c)
{
	set_phase(c, WAITING);
}

/* Bytes of fd not yet read: a request on its way in. */
static bool unread(int fd)
{
	int n = 0;

	return ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}

void inv_conns_close_waiting(double idle_s)
{
	double now = phos_now();

	pthread_mutex_lock(&lock);
	for (struct conn *k = head; k; k = k->next)
		if (k->phase == WAITING && now - k->since >= idle_s && !unread(k->fd))
			cut(k, false);
	pthread_mutex_unlock(&lock);
}

uint64_t inv_conns_cut(void)
{
	return atomic_load(&cut_count);
}
