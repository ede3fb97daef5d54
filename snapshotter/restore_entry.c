/* SPDX-License-Identifier: MIT */
/*
 * phos_restore: the one place that chooses where a restore runs (a parked
 * process, the executor prepared for it, a warm pooled executor, or an
 * executor of its own), in that order, going on to the next when one cannot
 * take it. The invoker's cold starts, checkpoint restores and moves all come
 * through here (invoker/instances.c).
 */
#include <errno.h>
#include <string.h>

#include "log.h"
#include "snapshotter.h"

static const char *const where_name[] = {
	[PHOS_ON_PARKED] = "its parked process",
	[PHOS_ON_PREPARED] = "the executor prepared for it",
	[PHOS_ON_POOLED] = "a pooled executor",
	[PHOS_ON_OWN] = "one of its own",
};

/* After a failure at one place: whether another place may still do it. A
 * corrupt image is corrupt everywhere, and a bound that came has come. */
static bool next_may(int r)
{
	return r != -EBADMSG && r != -ECANCELED && r != -ETIMEDOUT;
}

int phos_restore(const struct phos_restore_req *q, enum phos_restore_where *ret_where, struct phos_instance *ret_inst,
		 struct phos_restore_stats *ret_stats, char *err, size_t errlen)
{
	int r = -EBUSY, failed = -1;   /* the place that failed last, not for want of an executor */
	char why[256] = "";

	for (int w = PHOS_ON_PARKED; w <= PHOS_ON_OWN; w++) {
		if ((w == PHOS_ON_PARKED && (!q->parked || !q->pool)) ||
		    (w == PHOS_ON_PREPARED && (!q->prepared_slot || *q->prepared_slot < 0)) ||
		    (w == PHOS_ON_POOLED && !q->pool) || (w == PHOS_ON_OWN && !q->paths))
			continue;
		if (failed >= 0)
			phos_warn("%s: %s could not restore it (%s); trying %s", q->dir, where_name[failed], why,
				  where_name[w]);
		failed = -1;
		switch (w) {
		case PHOS_ON_PARKED:
			r = phos_restore_parked(q->pool, q->dir, q->parked, 0, q->on_demand, &q->bound, ret_inst,
						ret_stats, err, errlen);
			break;
		case PHOS_ON_PREPARED:
			r = phos_restore_prepared(q->prepared_pool, *q->prepared_slot, q->dir, q->stdin_fd, q->stdout_fd,
						  q->stderr_fd, q->on_demand, &q->bound, ret_inst, ret_stats, err,
						  errlen);
			*q->prepared_slot = -1;   /* consumed either way */
			break;
		case PHOS_ON_POOLED:
			r = phos_restore_pooled(q->pool, q->dir, q->stdin_fd, q->stdout_fd, q->stderr_fd, 0, q->on_demand,
						&q->bound, ret_inst, ret_stats, err, errlen);
			break;
		case PHOS_ON_OWN:
			r = phos_restore_start(q->paths, q->dir, q->stdin_fd, q->stdout_fd, q->stderr_fd, q->on_demand,
					       &q->bound, ret_inst, ret_stats, err, errlen);
			break;
		}
		if (r == 0) {
			if (ret_where)
				*ret_where = (enum phos_restore_where)w;
			return 0;
		}
		if (!next_may(r))
			return r;
		if (r != -EBUSY) {   /* (EBUSY: nothing free there, as often as not) */
			failed = w;
			phos_errf(why, sizeof(why), "%s", err && errlen ? err : strerror(-r));
		}
	}
	if (r == -EBUSY)
		phos_errf(err, errlen, "no executor free to restore %s, and none of its own allowed", q->dir);
	return r;
}
