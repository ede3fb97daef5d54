/* SPDX-License-Identifier: MIT */
/* phos-fn criu-check: whether a CRIU works on this machine (runtime/criu/criu.h,
 * phos_criu_check), as the invoker and phos-fn check it at start; tools/setup
 * chooses its CRIU with it. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "criu.h"
#include "log.h"

int cli_criu_check(int argc, char **argv)
{
	static const struct option opts[] = { { "criu", required_argument, NULL, 'c' },
					      { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 } };
	const char *criu = NULL;
	char path[4096], err[2048];
	double t0 = phos_now();
	int c, r;

	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		if (c == 'c') {
			criu = optarg;
		} else {
			fprintf(c == 'h' ? stdout : stderr,
				"usage: phos-fn criu-check [--criu PATH]\n"
				"  dumps and restores a small process with CRIU (PATH, else the one phos-fn finds),\n"
				"  bounded by PHOS_CRIU_PROBE_TIMEOUT ms; a success is kept per CRIU and kernel boot\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "phos-fn criu-check: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (criu && strlen(criu) >= sizeof(path)) {
		fprintf(stderr, "phos-fn criu-check: --criu: path too long\n");
		return 2;
	}
	r = criu ? phos_criu_check(criu, err, sizeof(err)) : phos_criu_find(path, sizeof(path), err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "phos-fn: %s\n", err);
		return 1;
	}
	printf("%s works on this machine (%.2f s)\n", criu ? criu : path, phos_now() - t0);
	return 0;
}
