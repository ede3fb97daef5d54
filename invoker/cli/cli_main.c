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
		   "  run [--device auto|cuda|sim] [--gpu N | --gpus A,B] [--trace FILE] -- PROGRAM [ARGS...]\n"
		   "      run a CUDA program with its calls forwarded to a phos executor (a warm one of\n"
		   "      `phos-fn pool` or of an invoker on this machine when there is one)\n"
		   "  pool [--size N] [--device auto|cuda|sim] [--gpu N] [--socket PATH]\n"
		   "      keep N warm executors for phos-fn run\n"
		   "  snapshot [--device auto|cuda|sim] [--gpu N | --gpus A,B] [--stats FILE] [--timeout S] -o DIR -- PROGRAM [ARGS...]\n"
		   "      run a function until phos_fn_serve and snapshot it there\n"
		   "  restore [--device auto|cuda|sim] [--gpu N | --gpus A,B] [--stats FILE] DIR\n"
		   "      start a function from its snapshot (requests on stdin, one per line), or a program\n"
		   "      from its checkpoint (it goes on where it was)\n"
		   "  checkpoint [--mode stw] -o DIR PID\n"
		   "      checkpoint a running `phos-fn run --checkpointable` (PID: of that phos-fn run)\n"
		   "  criu-check [--criu PATH]\n"
		   "      whether CRIU works on this machine (a small dump and restore, bounded)\n"
		   "  peer-token [--state-dir DIR]\n"
		   "      the invoker's peer token: what other invokers are given (from_token, to_token)\n\n"
		   "commands against an invoker (--gateway URL, default $PHOS_GATEWAY or http://127.0.0.1:8080,\n"
		   "or --cluster ETCD_URL: a member registered there; --token-file FILE for its bearer token):\n"
		   "  deploy --name NAME [--device D] [--gpus N] [--limit KEY=VALUE]... [--replicas N] -- PROGRAM [ARGS...]\n"
		   "                         (--replicas N: N-1 other members of its cluster pull it too)\n"
		   "  deploy --from URL [--from-token-file FILE] NAME   pull NAME's snapshot from the invoker at URL\n"
		   "                         (FILE: that invoker's peer token)\n"
		   "  list | describe NAME | remove NAME | snapshot NAME\n"
		   "  invoke NAME            request body on stdin, the answer on stdout\n"
		   "  logs NAME [--tail N]   the function's stderr, per instance\n"
		   "  checkpoint NAME [--instance ID] [--mode stw|cow|recopy]   checkpoint an instance\n"
		   "  migrate NAME [--instance ID] --to URL [--to-token-file FILE] [--mode recopy|stw|cow]\n"
		   "                         move an instance with its state to the invoker at URL (FILE: its\n"
		   "                         peer token)\n"
		   "  cluster                the members of the invoker's cluster\n"
		   "  drain [--undo]         its sessions move to other members, and none is placed there\n");
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
	if (!strcmp(argv[1], "pool"))
		return cli_pool(argc - 1, argv + 1);
	if (!strcmp(argv[1], "snapshot")) {
		/* the local form has -o DIR and -- PROGRAM; else it is `snapshot NAME` on the gateway */
		for (int i = 2; i < argc; i++)
			if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
				printf("usage: phos-fn snapshot [--device auto|cuda|sim] [--gpu N | --gpus A,B] [--stats FILE] [--timeout S] -o DIR -- PROGRAM [ARGS...]\n"
				       "       phos-fn snapshot NAME [--gateway URL] [--token-file FILE]   (on the invoker)\n");
				return 0;
			} else if (!strcmp(argv[i], "--") || !strcmp(argv[i], "-o") || !strncmp(argv[i], "--output", 8) ||
			    !strncmp(argv[i], "-o", 2))
				return cli_snapshot(argc - 1, argv + 1);
		return cli_gateway(argc - 1, argv + 1);
	}
	static const char *const gw[] = { "deploy", "list", "describe", "remove", "invoke", "logs", "migrate",
					  "cluster", "drain", NULL };
	for (const char *const *c = gw; *c; c++)
		if (!strcmp(argv[1], *c))
			return cli_gateway(argc - 1, argv + 1);
	if (!strcmp(argv[1], "restore"))
		return cli_restore(argc - 1, argv + 1);
	if (!strcmp(argv[1], "criu-check"))
		return cli_criu_check(argc - 1, argv + 1);
	if (!strcmp(argv[1], "peer-token"))
		return cli_peer_token(argc - 1, argv + 1);
	if (!strcmp(argv[1], "checkpoint")) {
		/* the local form has -o DIR and a PID (and says so when nothing is
		 * given); `checkpoint NAME` is on the invoker */
		if (argc == 2)
			return cli_checkpoint(argc - 1, argv + 1);
		for (int i = 2; i < argc; i++)
			if (!strcmp(argv[i], "-o") || !strncmp(argv[i], "-o", 2) || !strncmp(argv[i], "--output", 8) ||
			    !strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
				return cli_checkpoint(argc - 1, argv + 1);
		return cli_gateway(argc - 1, argv + 1);
	}
	fprintf(stderr, "phos-fn: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
