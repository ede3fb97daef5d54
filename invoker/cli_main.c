/* SPDX-License-Identifier: MIT */
/* phos-fn: subcommand dispatch. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "log.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: phos-fn COMMAND [ARGS...]\n\n"
		   "commands:\n"
		   "  run [--device auto|cuda|sim] [--trace FILE] -- PROGRAM [ARGS...]\n"
		   "      run a CUDA program with its calls forwarded to a phos executor\n");
}

int main(int argc, char **argv)
{
	phos_log_init("phos-fn", PHOS_LOG_WARN);
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (!strcmp(argv[1], "run"))
		return cli_run(argc - 1, argv + 1);
	fprintf(stderr, "phos-fn: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
