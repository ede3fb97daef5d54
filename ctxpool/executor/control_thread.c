/* SPDX-License-Identifier: MIT */
/*
 * The thread that answers the control socket's questions while a restored
 * function is served (exec_control_start/stop, executor.h):
 *   ASK_TOUCHED   → TOUCHED: the snapshot buffers the function has touched so
 *                   far, in first-touch order (the invoker stores them as the
 *                   snapshot's prefetch order after its first call).
 *   ASK_FALLBACKS → FALLBACKS: the calls that took the safe path, by reason
 *                   (executor.h, enum spec_fallback), whether an on-demand
 *                   restore is still moving buffers in, and the shared and
 *                   copied bytes (exec_share.c).
 *   ASK_COPIED    → COPIED: the shared buffers the instance copied on write
 *                   so far (exec_share.c), for the invoker to learn which
 *                   a first call writes.
 *   CHECKPOINT    → CHECKPOINTED or ERROR, from the dispatcher
 *                   (exec_checkpoint.c); RESUME lets it go on. A recopy
 *                   with wait_stop says PRECOPIED first and stops at STOP.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "executor.h"
#include "engine.h"
#include "log.h"

static void reply_touched(struct executor *ex)
{
	uint64_t *ids = ex->loader ? calloc(PHOS_CTL_TOUCHED_MAX, sizeof(*ids)) : NULL;
	struct phos_ctl_msg m = { .type = PHOS_CTL_TOUCHED, .fd = -1 };

	m.touched.ids = ids;
	m.touched.n = ids ? loader_touched(ex->loader, ids, PHOS_CTL_TOUCHED_MAX) : 0;
	exec_control_send(ex, &m);
	free(ids);
}

static void reply_copied(struct executor *ex)
{
	uint64_t ids[EXEC_SHARE_MAX];
	struct phos_ctl_msg m = { .type = PHOS_CTL_COPIED, .fd = -1 };

	m.touched.ids = ids;
	m.touched.n = exec_share_copied(ex, ids, EXEC_SHARE_MAX);
	exec_control_send(ex, &m);
}

static void reply_fallbacks(struct executor *ex)
{
	struct phos_ctl_msg m = { .type = PHOS_CTL_FALLBACKS, .fd = -1 };

	m.fallbacks.opaque = atomic_load(&ex->spec_fallbacks[SPEC_FB_OPAQUE]);
	m.fallbacks.overflow = atomic_load(&ex->spec_fallbacks[SPEC_FB_OVERFLOW]);
	m.fallbacks.validate_miss = atomic_load(&ex->spec_fallbacks[SPEC_FB_VALIDATE]);
	m.fallbacks.restoring = ex->loader && !loader_done(ex->loader);
	m.fallbacks.shared_bytes = atomic_load(&ex->shared_bytes);
	m.fallbacks.cow_bytes = atomic_load(&ex->cow_bytes);
	exec_control_send(ex, &m);
}

static void *control_main(void *arg)
{
	struct exec_control_thread *ct = arg;
	struct executor *ex = ct->ex;

	for (;;) {
		struct pollfd p[2] = { { ex->control_fd, POLLIN, 0 }, { ct->stop_fd, POLLIN, 0 } };
		struct phos_ctl_msg m;
		char err[256];
		int r;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (!p[0].revents)
			continue;
		r = phos_ctl_recv(ex->control_fd, PHOS_CTL_REST_MS, &m, err, sizeof(err));
		if (r < 0) {
			/* Closed, or out of step: nothing more can be answered. */
			if (r != -EPIPE)
				phos_warn("control: %s", err[0] ? err : strerror(-r));
			break;
		}
		if (m.type == PHOS_CTL_ASK_TOUCHED)
			reply_touched(ex);
		else if (m.type == PHOS_CTL_ASK_FALLBACKS)
			reply_fallbacks(ex);
		else if (m.type == PHOS_CTL_ASK_COPIED)
			reply_copied(ex);
		else if (m.type == PHOS_CTL_CHECKPOINT)
			exec_checkpoint_ask(ex, m.checkpoint.mode, m.checkpoint.wait_stop, m.checkpoint.dir);
		else if (m.type == PHOS_CTL_RESUME)
			exec_checkpoint_resume(ex);
		else if (m.type == PHOS_CTL_STOP)
			exec_checkpoint_stop(ex);
		else
			exec_control_error(ex, "unknown request while serving '%s'", phos_ctl_type_name(m.type));
		phos_ctl_msg_exit(&m);
	}
	/* Nobody is left to say RESUME: a held function must not stay stopped. */
	exec_checkpoint_resume(ex);
	return NULL;
}

void exec_control_start(struct executor *ex, struct exec_control_thread *ct)
{
	int stop[2];

	*ct = (struct exec_control_thread){ .ex = ex, .stop_fd = -1, .stop_wr = -1 };
	if (ex->control_fd < 0 || pipe2(stop, O_CLOEXEC) < 0)
		return;
	ct->stop_fd = stop[0];
	ct->stop_wr = stop[1];
	ct->running = pthread_create(&ct->th, NULL, control_main, ct) == 0;
}

void exec_control_stop(struct exec_control_thread *ct)
{
	if (ct->running) {
		(void)!write(ct->stop_wr, "x", 1);
		pthread_join(ct->th, NULL);
	}
	if (ct->stop_fd >= 0)
		close(ct->stop_fd);
	if (ct->stop_wr >= 0)
		close(ct->stop_wr);
	ct->running = false;
	ct->stop_fd = ct->stop_wr = -1;
}
