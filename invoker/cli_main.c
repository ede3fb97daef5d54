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
		   "      run a CUDA program with its calls forwarded to a phos executor\n"
		   "  snapshot [--device auto|cuda|sim] [--stats FILE] [--timeout S] -o DIR -- PROGRAM [ARGS...]\n"
		   "      run a function until phos_fn_serve and snapshot it there\n"
		   "  restore [--device auto|cuda|sim] [--stats FILE] DIR\n"
		   "      start a function from its snapshot; requests on stdin, one per line\n");
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
	if (!strcmp(argv[1], "snapshot"))
		return cli_snapshot(argc - 1, argv + 1);
	if (!strcmp(argv[1], "restore"))
		return cli_restore(argc - 1, argv + 1);
	fprintf(stderr, "phos-fn: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
