/* SPDX-License-Identifier: MIT */
/*
 * The executor's messages on the control socket (runtime/proto/control.h),
 * sent from any thread: the loader's and the validator's failures, the
 * dispatcher's checkpoints, READY and SHARED. The questions asked while a
 * restored function is served are answered by control_thread.c; the jobs of
 * a pooled executor are read by pool_loop (main.c).
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "executor.h"
#include "fault.h"
#include "log.h"

/* One message at a time: the loader's and the validator's threads report
 * failures while the control thread answers. */
static pthread_mutex_t send_lock = PTHREAD_MUTEX_INITIALIZER;

void exec_control_send(struct executor *ex, const struct phos_ctl_msg *m)
{
	int r;

	if (ex->control_fd < 0)
		return;
	pthread_mutex_lock(&send_lock);
	r = phos_ctl_send(ex->control_fd, m);
	pthread_mutex_unlock(&send_lock);
	if (r < 0 && r != -EPIPE)
		phos_warn("control: cannot send %s: %s", phos_ctl_type_name(m->type), strerror(-r));
}

void exec_control_error(struct executor *ex, const char *fmt, ...)
{
	struct phos_ctl_msg m;
	char reason[PHOS_CTL_REASON_MAX];
	va_list ap;

	if (ex->control_fd < 0)
		return;
	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	phos_ctl_error_set(&m, "%s", reason);
	exec_control_send(ex, &m);
}

void exec_control_hello(struct executor *ex)
{
	struct phos_ctl_msg m = { .type = PHOS_CTL_HELLO, .fd = -1, .hello = { .pid = (uint32_t)getpid() } };
	size_t len;
	void *buf;

	if (ex->control_fd < 0)
		return;
	/* Fault point ctl_version: this executor claims the next protocol
	 * version, as a newer build would (the controller must refuse it). */
	if (phos_fault("ctl_version") && phos_ctl_encode(&m, &buf, &len) == 0) {
		uint16_t v = PHOS_CTL_VERSION + 1;

		memcpy((uint8_t *)buf + 4, &v, sizeof(v));
		(void)!write(ex->control_fd, buf, len);
		free(buf);
		return;
	}
	exec_control_send(ex, &m);
}
