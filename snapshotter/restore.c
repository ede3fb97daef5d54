/* SPDX-License-Identifier: MIT */
/* Starting an instance from a snapshot (see snapshotter.h). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "criu.h"
#include "image.h"
#include "log.h"
#include "internal.h"

/* One line from the executor, or "" when it closed the socket. */
static int read_line(int fd, char *line, size_t len)
{
	size_t got = 0;

	while (got + 1 < len) {
		ssize_t n = read(fd, line + got, 1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || line[got] == '\n')
			break;
		got++;
	}
	line[got] = '\0';
	return (int)got;
}

static const struct phos_image_fd *find_fd(const struct phos_image *img, int fd)
{
	for (uint32_t i = 0; i < img->nfds; i++)
		if (img->fds[i].fd == fd)
			return &img->fds[i];
	return NULL;
}

int restore_plan(const char *dir, const int stdio[3], struct phos_image **ret_img,
		 struct phos_criu_inherit inh[4], char *err, size_t errlen)
{
	struct phos_image *img;
	char line[1024];
	int r;

	r = phos_image_read(dir, &img, line, sizeof(line));
	if (r < 0) {
		phos_errf(err, errlen, "%s: %s", dir, line);
		return r;
	}
	/* before every CRIU restore (a parked process: once, when it is parked) */
	r = phos_image_cpu_verify(dir, img, line, sizeof(line));
	if (r < 0) {
		phos_errf(err, errlen, "%s: %s", dir, line);
		phos_image_free(img);
		return r;
	}
	for (int fd = 0; fd < 4; fd++) {
		const struct phos_image_fd *f = find_fd(img, fd);

		if (!f) {
			phos_errf(err, errlen, "%s: the manifest does not say how fd %d was opened", dir, fd);
			phos_image_free(img);
			return -EBADMSG;
		}
		inh[fd] = (struct phos_criu_inherit){ .fd = fd < 3 ? stdio[fd] : -1, .target = fd, .key = f->key };
	}
	*ret_img = img;
	return 0;
}

int restore_criu(const char *criu, const char *dir, const struct phos_image *img, struct phos_criu_inherit inh[4],
		 int channel, pid_t *ret_fn, struct phos_restore_stats *st, char *err, size_t errlen)
{
	char line[1024], cpu[4200];
	double t = phos_now();
	int r;

	/* The restored function waits in phos_channel_await until the executor's
	 * new channel arrives on its socket. */
	inh[3].fd = channel;
	snprintf(cpu, sizeof(cpu), "%s/%s", dir, img->criu_dir);
	r = phos_criu_restore(criu, cpu, inh, 4, ret_fn, line, sizeof(line));
	if (r < 0) {
		phos_errf(err, errlen, "CRIU could not restore %s: %s", dir, line);
		return r;
	}
	st->cpu_restore_s = phos_now() - t;
	return 0;
}

int restore_ready(int ctl, struct phos_restore_stats *st, char *err, size_t errlen)
{
	char line[1024];
	const char *b;

	read_line(ctl, line, sizeof(line));
	if (strncmp(line, "ready", 5) != 0) {
		phos_errf(err, errlen, "%s", !strncmp(line, "error ", 6) ? line + 6 : "the executor failed");
		/* a corrupt image is the caller's to tell apart (the executor says it in words) */
		return strstr(line, "checksum mismatch") ? -EBADMSG : -EIO;
	}
	sscanf(line + 5, " {\"open_s\":%lf,\"load_s\":%lf,\"data_s\":%lf", &st->open_s, &st->load_s, &st->data_s);
	st->on_demand = strstr(line, "\"on_demand\":true") != NULL;
	b = strstr(line, "\"data_bytes\":");
	st->gpu_bytes = b ? strtoull(b + 13, NULL, 10) : 0;
	return 0;
}

int restore_cpu(const char *criu, const char *dir, const struct phos_image *img, struct phos_criu_inherit inh[4],
		int channel, int ctl, pid_t *ret_fn, struct phos_restore_stats *st, char *err, size_t errlen)
{
	pid_t fn;
	int r;

	r = restore_criu(criu, dir, img, inh, channel, &fn, st, err, errlen);
	if (r < 0)
		return r;
	r = restore_ready(ctl, st, err, errlen);
	if (r < 0) {
		kill(fn, SIGKILL);
		waitpid(fn, NULL, 0);
		return r;
	}
	*ret_fn = fn;
	return 0;
}

int phos_park(const struct phos_runtime_paths *paths, const char *dir, int stdin_fd, int stdout_fd, int stderr_fd,
	      struct phos_parked *ret, char *err, size_t errlen)
{
	struct phos_restore_stats st = { 0 };
	struct phos_image *img = NULL;
	struct phos_criu_inherit inh[4];
	const int stdio[3] = { stdin_fd, stdout_fd, stderr_fd };
	int ch[2] = { -1, -1 }, r;

	memset(ret, 0, sizeof(*ret));
	ret->channel = -1;
	*err = '\0';
	r = restore_plan(dir, stdio, &img, inh, err, errlen);
	if (r < 0)
		return r;
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ch) < 0) {
		r = -errno;
		phos_errf(err, errlen, "socketpair: %s", strerror(errno));
		goto out;
	}
	r = restore_criu(paths->criu, dir, img, inh, ch[1], &ret->fn_pid, &st, err, errlen);
	if (r < 0)
		goto out;
	ret->channel = ch[0];
	ch[0] = -1;
	ret->criu_s = st.cpu_restore_s;
out:
	for (int i = 0; i < 2; i++)
		if (ch[i] >= 0)
			close(ch[i]);
	phos_image_free(img);
	return r;
}

void phos_parked_drop(struct phos_parked *p)
{
	if (p->fn_pid > 0) {
		kill(p->fn_pid, SIGKILL);
		while (waitpid(p->fn_pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	if (p->channel >= 0)
		close(p->channel);
	p->fn_pid = 0;
	p->channel = -1;
}

int phos_restore_start(const struct phos_runtime_paths *paths, const char *dir, int stdin_fd, int stdout_fd,
		       int stderr_fd, bool on_demand, struct phos_instance *ret_inst,
		       struct phos_restore_stats *ret_stats, char *err, size_t errlen)
{
	struct phos_restore_stats st = { 0 };
	struct phos_image *img = NULL;
	struct phos_criu_inherit inh[4];
	const int stdio[3] = { stdin_fd, stdout_fd, stderr_fd };
	int ch[2] = { -1, -1 }, ctl[2] = { -1, -1 }, r;
	pid_t exe = -1, fn = -1;
	double t0 = phos_now();

	memset(ret_inst, 0, sizeof(*ret_inst));
	*err = '\0';
	r = restore_plan(dir, stdio, &img, inh, err, errlen);
	if (r < 0)
		return r;
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ch) < 0 ||
	    socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) < 0) {
		r = -errno;
		phos_errf(err, errlen, "socketpair: %s", strerror(errno));
		goto out;
	}
	r = phos_executor_spawn(paths, ch[0], ctl[1],
				(const char *const[]){ "--restore-from", dir, on_demand ? "--on-demand" : NULL, NULL }, &exe);
	if (r < 0) {
		phos_errf(err, errlen, "cannot start the executor: %s", strerror(-r));
		goto out;
	}
	close(ctl[1]);
	ctl[1] = -1;
	/* CRIU restores the CPU side while the executor loads the GPU side. */
	r = restore_cpu(paths->criu, dir, img, inh, ch[1], ctl[0], &fn, &st, err, errlen);
	if (r < 0)
		goto out;
	st.gpu_restore_s = st.ready_s = phos_now() - t0;
	ret_inst->fn_pid = fn;
	ret_inst->executor_pid = exe;
	ret_inst->control_fd = ctl[0];
	ctl[0] = -1;
	exe = -1;
	if (ret_stats)
		*ret_stats = st;
	r = 0;
out:
	for (int i = 0; i < 2; i++) {
		if (ch[i] >= 0)
			close(ch[i]);
		if (ctl[i] >= 0)
			close(ctl[i]);
	}
	if (exe > 0) {
		kill(exe, SIGTERM);
		waitpid(exe, NULL, 0);
	}
	phos_image_free(img);
	return r;
}

/* Sends a request line on the control socket and reads the one-line answer
 * (without its newline) into line (cap bytes). */
static int control_ask(struct phos_instance *inst, const char *req, char *line, size_t cap)
{
	size_t got = 0, len = strlen(req);

	if (inst->control_fd < 0)
		return -ENOTCONN;
	if (write(inst->control_fd, req, len) != (ssize_t)len)
		return -EPIPE;
	for (;;) {
		struct pollfd pfd = { .fd = inst->control_fd, .events = POLLIN };
		ssize_t k;

		if (poll(&pfd, 1, 5000) <= 0)
			return -ETIMEDOUT;
		k = read(inst->control_fd, line + got, 1);
		if (k <= 0)
			return -EPIPE;
		if (line[got] == '\n')
			break;
		if (++got + 1 >= cap)
			return -EPROTO;
	}
	line[got] = '\0';
	return 0;
}

int phos_instance_touched(struct phos_instance *inst, uint64_t *ret_ids, size_t max, size_t *ret_n)
{
	size_t cap = 64 + max * 21, n = 0;
	char *line = malloc(cap), *p, *end;
	int r;

	*ret_n = 0;
	if (!line)
		return -ENOMEM;
	r = control_ask(inst, "touched\n", line, cap);
	if (r == 0 && strncmp(line, "touched ", 8) != 0)
		r = -EPROTO;
	for (p = line + 8; r == 0 && *p && n < max; p = *end == ',' ? end + 1 : end) {
		ret_ids[n++] = strtoull(p, &end, 10);
		if (end == p)
			r = -EPROTO;
	}
	if (r == 0)
		*ret_n = n;
	free(line);
	return r;
}

int phos_instance_fallbacks(struct phos_instance *inst, struct phos_spec_fallbacks *ret)
{
	char line[256];
	unsigned long long o, v, m;
	int restoring, r = control_ask(inst, "fallbacks\n", line, sizeof(line));

	if (r < 0)
		return r;
	if (sscanf(line, "fallbacks %llu %llu %llu %d", &o, &v, &m, &restoring) != 4)
		return -EPROTO;
	*ret = (struct phos_spec_fallbacks){ .opaque = o, .overflow = v, .validate_miss = m,
					     .restoring = restoring != 0 };
	return 0;
}

int phos_instance_failed(const struct phos_instance *inst, unsigned wait_ms, char *why, size_t len)
{
	struct pollfd p = { .fd = inst->control_fd, .events = POLLIN };
	char buf[1024];
	ssize_t n;

	if (inst->control_fd < 0 || !len)
		return 0;
	if (wait_ms && poll(&p, 1, (int)wait_ms) <= 0)
		return 0;
	/* After "ready" the executor says nothing unasked but "error ..." just
	 * before it exits, so a peek at the front is enough. */
	n = recv(inst->control_fd, buf, sizeof(buf) - 1, MSG_PEEK | MSG_DONTWAIT);
	if (n < 6 || strncmp(buf, "error ", 6))
		return 0;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	snprintf(why, len, "%s", buf + 6);
	return 1;
}

static int exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

int phos_instance_wait(struct phos_instance *inst)
{
	int status = 0, code;

	while (waitpid(inst->fn_pid, &status, 0) < 0 && errno == EINTR)
		;
	code = exit_code(status);
	if (inst->pool) {
		/* The executor saw the function go, scrubs itself and says "idle". */
		phos_pool_return(inst);
		inst->pool = NULL;
		return code;
	}
	if (inst->control_fd >= 0)
		close(inst->control_fd);
	inst->control_fd = -1;
	while (waitpid(inst->executor_pid, &status, 0) < 0 && errno == EINTR)
		;
	return code;
}
