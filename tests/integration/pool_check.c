/* SPDX-License-Identifier: MIT */
/*
 * Restores a snapshot n times, one after another, from a warm pool of two
 * executors, feeding each instance the request lines of stdin, and prints one
 * JSON line per instance: {"i":N,"executor":PID,"restore_s":S,"answers":[...]}.
 * The test checks that executors are reused (scrubbed in between) and that
 * every instance answers as the original function would.
 *
 *   pool_check SNAPSHOT_DIR N < requests
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "criu.h"
#include "snapshotter.h"

static char *slurp_stdin(void)
{
	size_t cap = 4096, len = 0;
	char *b = malloc(cap);
	ssize_t n;

	while (b && (n = read(0, b + len, cap - len - 1)) > 0) {
		len += (size_t)n;
		if (len + 1 == cap)
			b = realloc(b, cap *= 2);
	}
	if (b)
		b[len] = '\0';
	return b;
}

int main(int argc, char **argv)
{
	const char *build = getenv("PHOS_BUILD_DIR"), *dev = getenv("PHOS_TEST_DEVICE");
	char exe[PATH_MAX], pre[PATH_MAX], criu[PATH_MAX], twins[2 * PATH_MAX], err[1024];
	struct phos_runtime_paths paths = { 0 };
	struct phos_pool *pool;
	char *reqs;
	int n;

	if (argc != 3 || !build || (n = atoi(argv[2])) < 1 || n > 100) {
		fprintf(stderr, "usage: PHOS_BUILD_DIR=... pool_check SNAPSHOT_DIR N < requests\n");
		return 2;
	}
	snprintf(exe, sizeof(exe), "%s/ctxpool/phos-executor", build);
	snprintf(pre, sizeof(pre), "%s/preload", build);
	snprintf(criu, sizeof(criu), "%s/criu/criu", build);
	if (getenv("PHOS_CRIU"))
		snprintf(criu, sizeof(criu), "%s", getenv("PHOS_CRIU"));
	snprintf(twins, sizeof(twins), "%s", getenv("PHOS_SIM_TWINS") ? getenv("PHOS_SIM_TWINS") : "");
	paths.executor = exe;
	paths.preload_dir = pre;
	paths.criu = criu;
	paths.device = dev && *dev ? dev : "sim";
	paths.sim_twins = twins[0] ? twins : NULL;
	reqs = slurp_stdin();
	if (!reqs || phos_pool_new(&paths, 2, &pool) < 0)
		return 1;
	for (int i = 0; i < n; i++) {
		struct phos_instance inst;
		struct phos_restore_stats st;
		int in[2], out[2], code;
		char buf[65536];
		size_t got = 0;
		ssize_t k;

		if (pipe(in) < 0 || pipe(out) < 0)
			return 1;
		if (phos_restore_pooled(pool, argv[1], in[0], out[1], STDERR_FILENO, 60000, false, NULL, &inst, &st, err,
					sizeof(err)) < 0) {
			fprintf(stderr, "pool_check: restore %d: %s\n", i, err);
			return 1;
		}
		close(in[0]);
		close(out[1]);
		if (write(in[1], reqs, strlen(reqs)) < 0)
			return 1;
		close(in[1]);
		while (got + 1 < sizeof(buf) && (k = read(out[0], buf + got, sizeof(buf) - got - 1)) > 0)
			got += (size_t)k;
		buf[got] = '\0';
		close(out[0]);
		code = phos_instance_wait(&inst);
		printf("{\"i\":%d,\"executor\":%d,\"exit\":%d,\"open_s\":%.6f,\"restore_s\":%.6f,\"answers\":[", i,
		       (int)inst.executor_pid, code, st.open_s, st.ready_s);
		for (char *line = strtok(buf, "\n"), *sep = ""; line; line = strtok(NULL, "\n"), sep = ",") {
			printf("%s%s", sep, line);
		}
		printf("]}\n");
		fflush(stdout);
	}
	phos_pool_free(pool);
	free(reqs);
	return 0;
}
