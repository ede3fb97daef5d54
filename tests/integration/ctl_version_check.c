/* SPDX-License-Identifier: MIT */
/*
 * An executor of another control protocol version is refused by name
 * (runtime/proto/control.h): a pool of real executors (sim device) comes up idle;
 * a pool whose executors claim the next version (fault point ctl_version)
 * never has an idle one, and says why in its log.
 *
 *   PHOS_BUILD_DIR=... ctl_version_check
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.h"
#include "log.h"
#include "snapshotter.h"

/* Seconds until pool p has an idle executor, polling for up to s; -1 if never. */
static double first_idle(struct phos_pool *p, double s)
{
	double t0 = phos_now();

	while (phos_now() - t0 < s) {
		if (phos_pool_idle(p) > 0)
			return phos_now() - t0;
		usleep(20000);
	}
	return -1;
}

int main(void)
{
	const char *build = getenv("PHOS_BUILD_DIR");
	char exe[PATH_MAX], pre[PATH_MAX], log_path[] = "/tmp/phos-ctl-version-XXXXXX", text[65536];
	struct phos_runtime_paths paths = { 0 };
	struct phos_pool *pool;
	int log_fd, saved_err, failures = 0;
	ssize_t n;
	double t;

	if (!build) {
		fprintf(stderr, "usage: PHOS_BUILD_DIR=... ctl_version_check\n");
		return 2;
	}
	snprintf(exe, sizeof(exe), "%s/ctxpool/phos-executor", build);
	snprintf(pre, sizeof(pre), "%s/preload", build);
	paths.executor = exe;
	paths.preload_dir = pre;
	paths.device = "sim";
	phos_log_init("ctl_version_check", PHOS_LOG_WARN);
	unsetenv("PHOS_FAULT");

	/* The same version: idle soon. */
	if (phos_pool_new(&paths, 1, &pool) < 0)
		return 1;
	t = first_idle(pool, 30);
	if (t < 0) {
		fprintf(stderr, "FAIL: a pool of this build's executors never became idle\n");
		failures++;
	}
	phos_pool_free(pool);

	/* The next version: refused, every time, with the reason logged. */
	log_fd = mkstemp(log_path);
	saved_err = dup(STDERR_FILENO);
	if (log_fd < 0 || saved_err < 0 || dup2(log_fd, STDERR_FILENO) < 0)
		return 1;
	setenv("PHOS_FAULT", "ctl_version", 1);
	if (phos_pool_new(&paths, 1, &pool) < 0)
		return 1;
	t = first_idle(pool, 2);
	phos_pool_free(pool);
	unsetenv("PHOS_FAULT");
	dup2(saved_err, STDERR_FILENO);
	n = pread(log_fd, text, sizeof(text) - 1, 0);
	text[n > 0 ? n : 0] = '\0';
	close(log_fd);
	unlink(log_path);
	if (t >= 0) {
		fprintf(stderr, "FAIL: an executor of control protocol version %u was taken idle\n", PHOS_CTL_VERSION + 1);
		failures++;
	}
	char want[160];

	snprintf(want, sizeof(want), "failed to start (the peer speaks control protocol version %u, this build speaks "
		 "version %u)", PHOS_CTL_VERSION + 1, PHOS_CTL_VERSION);
	if (!strstr(text, want)) {
		fprintf(stderr, "FAIL: the pool's log does not name the version mismatch:\n%.2000s\n", text);
		failures++;
	}
	if (!failures)
		printf("ok: same version idle; version %u refused by name\n", PHOS_CTL_VERSION + 1);
	return failures ? 1 : 0;
}
