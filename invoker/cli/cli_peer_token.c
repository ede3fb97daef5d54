/* SPDX-License-Identifier: MIT */
/* phos-fn peer-token [--state-dir DIR]: prints the peer token of the invoker
 * of DIR (token.h), what another invoker is given as from_token (a pull) or
 * a move's to_token, or a rank > 0 as leader_token. It opens the routes of
 * peers only, never the control plane. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "token.h"

int cli_peer_token(int argc, char **argv)
{
	static const struct option opts[] = { { "state-dir", required_argument, NULL, 's' },
					      { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 } };
	const char *dir = NULL;
	char state[PATH_MAX], path[PATH_MAX + 32], err[PATH_MAX + 128];
	char *token = NULL;
	int c;

	optind = 1;
	while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
		if (c == 's') {
			dir = optarg;
		} else {
			fprintf(c == 'h' ? stdout : stderr,
				"usage: phos-fn peer-token [--state-dir DIR]\n"
				"  prints the peer token of the invoker of DIR (else $PHOS_STATE_DIR or the default\n"
				"  state dir): what other invokers get as from_token, to_token or leader_token. It\n"
				"  opens only the routes peers use, never deploy, remove or /metrics.\n"
				"  (umask 077; phos-fn peer-token > FILE) makes a file for --from-token-file.\n");
			return c == 'h' ? 0 : 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "phos-fn peer-token: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (!dir && inv_state_dir_default(state, sizeof(state), false) < 0) {
		fprintf(stderr, "phos-fn peer-token: no state directory (pass --state-dir DIR)\n");
		return 2;
	}
	if (!dir)
		dir = state;
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, INV_PEER_TOKEN_FILE) >= sizeof(path)) {
		fprintf(stderr, "phos-fn peer-token: --state-dir: path too long\n");
		return 2;
	}
	if (access(path, F_OK) < 0 && errno == ENOENT) {
		fprintf(stderr, "phos-fn peer-token: %s has no peer token (%s): the invoker makes it at its start; "
				"start phos-invoker --state-dir %s once (an invoker older than the peer token has none)\n",
			dir, INV_PEER_TOKEN_FILE, dir);
		return 1;
	}
	if (inv_token_read(path, &token, err, sizeof(err)) < 0) {
		fprintf(stderr, "phos-fn peer-token: %s\n", err);
		return 1;
	}
	printf("%s\n", token);
	explicit_bzero(token, strlen(token));
	free(token);
	return fflush(stdout) == 0 ? 0 : 1;
}
