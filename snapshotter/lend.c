/* SPDX-License-Identifier: MIT */
/*
 * The lending socket (snapshotter.h): warm executors of a pool for programs
 * that phos-fn run starts, so that they skip creating a CUDA context.
 *
 * One thread accepts; each client gets a thread that reads its request line
 * (bounded: 128 bytes, 5 s), lends an executor (phos_pool_lend), answers with
 * the channel fd, then waits for the client to close the connection, which
 * phos-fn run does when its program has ended, and ends the lease. At most
 * LEND_MAX_CLIENTS at once; more are told ERR busy.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "snapshotter.h"

#define LEND_MAX_CLIENTS 64
#define LEND_LINE 128
#define LEND_READ_MS 5000
#define LEND_WAIT_MS 2000    /* for an idle executor */

struct lend_client {
	struct phos_lender *l;
	int fd;
	pthread_t thread;
	bool used, done;
};

struct phos_lender {
	struct phos_pool *pool;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char device[16];
	int gpu;
	int listen_fd;
	pthread_t acceptor;
	pthread_mutex_t lock;
	bool stopping;
	struct lend_client clients[LEND_MAX_CLIENTS];
};

/* Reads one line (without its newline) within timeout_ms; 0 or -errno. */
static int read_line(int fd, char *buf, size_t cap, int timeout_ms)
{
	size_t n = 0;

	while (n + 1 < cap) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, timeout_ms) <= 0)
			return -ETIMEDOUT;
		r = read(fd, buf + n, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -ECONNRESET;
		if (buf[n] == '\n') {
			buf[n] = '\0';
			return 0;
		}
		n++;
	}
	return -E2BIG;
}

/* Sends line and, when fd >= 0, fd with it. */
static int send_line(int sock, const char *line, int fd)
{
	char ctl[CMSG_SPACE(sizeof(int))] = { 0 };
	struct iovec iov = { .iov_base = (void *)line, .iov_len = strlen(line) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (fd >= 0) {
		struct cmsghdr *c;

		mh.msg_control = ctl;
		mh.msg_controllen = sizeof(ctl);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL) == (ssize_t)iov.iov_len ? 0 : -EIO;
}

static void *client_main(void *arg)
{
	struct lend_client *c = arg;
	struct phos_lender *l = c->l;
	struct phos_lease lease = { 0 };
	char line[LEND_LINE], device[16], reply[64];
	int version = 0, gpu = -1, channel = -1, r;

	r = read_line(c->fd, line, sizeof(line), LEND_READ_MS);
	if (r == 0 && (sscanf(line, "LEND %d %15s %d", &version, device, &gpu) != 3 || version != 1))
		r = -EPROTO;
	if (r < 0) {
		send_line(c->fd, "ERR a request is LEND 1 DEVICE GPU\n", -1);
	} else if (strcmp(device, l->device) || gpu != l->gpu) {
		snprintf(reply, sizeof(reply), "ERR this pool is %s GPU %d\n", l->device, l->gpu);
		send_line(c->fd, reply, -1);
	} else if ((r = phos_pool_lend(l->pool, LEND_WAIT_MS, &channel, &lease)) < 0) {
		send_line(c->fd, r == -EBUSY ? "ERR busy: no warm executor free\n" : "ERR the executor failed\n", -1);
	} else {
		snprintf(reply, sizeof(reply), "OK %d\n", (int)lease.executor_pid);
		r = send_line(c->fd, reply, channel);
		close(channel);
		/* the program holds the channel now; its phos-fn closes this
		 * connection when the program has ended */
		if (r == 0) {
			char b;

			while (read(c->fd, &b, 1) > 0)
				;
		}
		phos_pool_lend_end(&lease);
	}
	close(c->fd);
	pthread_mutex_lock(&l->lock);
	c->done = true;
	pthread_mutex_unlock(&l->lock);
	return NULL;
}

/* Joins finished client threads (lock held). */
static void reap_clients(struct phos_lender *l)
{
	for (unsigned i = 0; i < LEND_MAX_CLIENTS; i++) {
		struct lend_client *c = &l->clients[i];

		if (c->used && c->done) {
			pthread_join(c->thread, NULL);
			c->used = c->done = false;
		}
	}
}

static void *acceptor_main(void *arg)
{
	struct phos_lender *l = arg;

	for (;;) {
		int fd = accept4(l->listen_fd, NULL, NULL, SOCK_CLOEXEC);
		struct lend_client *c = NULL;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			break;   /* the socket was shut down: stopping */
		}
		pthread_mutex_lock(&l->lock);
		reap_clients(l);
		for (unsigned i = 0; i < LEND_MAX_CLIENTS && !c && !l->stopping; i++)
			if (!l->clients[i].used)
				c = &l->clients[i];
		if (c) {
			*c = (struct lend_client){ .l = l, .fd = fd, .used = true };
			if (pthread_create(&c->thread, NULL, client_main, c) != 0) {
				c->used = false;
				c = NULL;
			}
		}
		pthread_mutex_unlock(&l->lock);
		if (!c) {
			send_line(fd, "ERR busy: too many clients\n", -1);
			close(fd);
		}
	}
	return NULL;
}

int phos_lender_start(struct phos_pool *pool, const char *path, const char *device, int gpu,
		      struct phos_lender **ret, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct phos_lender *l;
	int r;

	if (strlen(path) >= sizeof(sa.sun_path) || strlen(device) >= sizeof(l->device)) {
		phos_errf(err, errlen, "%s: path too long", path);
		return -ENAMETOOLONG;
	}
	*err = '\0';
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->pool = pool;
	l->gpu = gpu;
	snprintf(l->path, sizeof(l->path), "%s", path);
	snprintf(l->device, sizeof(l->device), "%s", device);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	pthread_mutex_init(&l->lock, NULL);
	l->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l->listen_fd < 0) {
		r = -errno;
		goto fail;
	}
	/* a socket left by a crashed server: nobody answers there */
	if (connect(l->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		r = -EADDRINUSE;
		phos_errf(err, errlen, "%s: another server answers there", path);
		goto fail;
	}
	close(l->listen_fd);
	l->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	{
		struct stat st;

		if (lstat(path, &st) == 0 && !S_ISSOCK(st.st_mode)) {
			r = -EEXIST;
			phos_errf(err, errlen, "%s exists and is not a socket", path);
			goto fail;
		}
	}
	unlink(path);
	{
		mode_t old = umask(0177);   /* 0600 from the start: no window */

		r = l->listen_fd < 0 || bind(l->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
		    listen(l->listen_fd, 16) < 0 ? -errno : 0;
		umask(old);
	}
	if (r < 0) {
		phos_errf(err, errlen, "%s: %s", path, strerror(-r));
		goto fail;
	}
	r = -pthread_create(&l->acceptor, NULL, acceptor_main, l);
	if (r < 0) {
		unlink(path);
		goto fail;
	}
	*ret = l;
	return 0;
fail:
	if (!*err)
		phos_errf(err, errlen, "%s: %s", path, strerror(-r));
	if (l->listen_fd >= 0)
		close(l->listen_fd);
	pthread_mutex_destroy(&l->lock);
	free(l);
	return r;
}

void phos_lender_stop(struct phos_lender *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->lock);
	l->stopping = true;
	pthread_mutex_unlock(&l->lock);
	shutdown(l->listen_fd, SHUT_RDWR);
	pthread_join(l->acceptor, NULL);
	close(l->listen_fd);
	unlink(l->path);
	pthread_mutex_lock(&l->lock);
	for (unsigned i = 0; i < LEND_MAX_CLIENTS; i++)
		if (l->clients[i].used && !l->clients[i].done)
			shutdown(l->clients[i].fd, SHUT_RDWR);
	pthread_mutex_unlock(&l->lock);
	for (unsigned i = 0; i < LEND_MAX_CLIENTS; i++)
		if (l->clients[i].used)
			pthread_join(l->clients[i].thread, NULL);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

int phos_lender_borrow(const char *path, const char *device, int gpu, unsigned timeout_ms, int *ret_conn,
		       int *ret_channel, pid_t *ret_executor_pid, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char line[LEND_LINE + 1] = "", ctl[CMSG_SPACE(sizeof(int))];
	struct iovec iov = { .iov_base = line, .iov_len = LEND_LINE };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl, .msg_controllen = sizeof(ctl) };
	struct pollfd p;
	struct cmsghdr *c;
	int fd, channel = -1, pid = 0, r;
	ssize_t n;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	snprintf(line, sizeof(line), "LEND 1 %s %d\n", device, gpu);
	if (send_line(fd, line, -1) < 0) {
		close(fd);
		return -EIO;
	}
	p = (struct pollfd){ .fd = fd, .events = POLLIN };
	if (poll(&p, 1, (int)timeout_ms) <= 0) {
		close(fd);
		phos_errf(err, errlen, "%s did not answer within %u ms", path, timeout_ms);
		return -ETIMEDOUT;
	}
	memset(line, 0, sizeof(line));
	n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	for (c = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
			memcpy(&channel, CMSG_DATA(c), sizeof(int));
	line[n > 0 ? n : 0] = '\0';
	line[strcspn(line, "\n")] = '\0';
	if (n > 0 && sscanf(line, "OK %d", &pid) == 1 && pid > 0 && channel >= 0) {
		*ret_conn = fd;
		*ret_channel = channel;
		*ret_executor_pid = pid;
		return 0;
	}
	if (channel >= 0)
		close(channel);
	close(fd);
	phos_errf(err, errlen, "%s: %s", path, n > 0 ? line : "no answer");
	return strstr(line, "busy") ? -EBUSY : strstr(line, "this pool is") ? -ENODEV : -EPROTO;
}
