/* SPDX-License-Identifier: MIT */
/*
 * The invoker's tokens and the state directory both binaries agree on.
 *
 * The control plane (/system/..., /metrics) always needs a bearer token. When
 * the invoker is given no --token-file it creates STATE/admin.token (64 hex
 * digits, mode 0600, in a 0700 directory) and keeps it across restarts;
 * phos-fn reads the same file by itself, as kubectl reads its kubeconfig, so
 * only users who can read the state directory can deploy.
 *
 * The peer token (STATE/peer.token, made alike at the first start, always)
 * is what this invoker gives other invokers: the source of a move sends it
 * to its target (from_token) to fetch the checkpoint and export with, a
 * puller is given it to read a snapshot, a rank > 0 reads rank 0's
 * rendezvous with it, a moved session's calls are forwarded with the
 * target's. It opens the peer routes only (http.c, authorized()), never
 * deploy, remove, /metrics or a migrate request: a peer that holds it
 * cannot take over the invoker. `phos-fn peer-token` prints it.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define INV_TOKEN_MIN 16          /* characters, none of them blank */
#define INV_TOKEN_FILE "admin.token"
#define INV_PEER_TOKEN_FILE "peer.token"
/* STATE/listen: the invoker's --listen address (one line), so that phos-fn
 * sends STATE's admin token to that invoker alone (cli_client.h). */
#define INV_LISTEN_FILE "listen"

/* The default state directory into buf: $PHOS_STATE_DIR, else
 * /var/lib/phos-fn when it is writable (made when create and /var/lib is
 * writable), else $XDG_STATE_HOME/phos-fn, else ~/.local/state/phos-fn.
 * 0, or -ENOENT / -ENAMETOOLONG. */
int inv_state_dir_default(char *buf, size_t len, bool create);

/* Reads a bearer token: the first line of path, which must be a regular file
 * not accessible to group or others, of INV_TOKEN_MIN or more printable
 * characters without blanks inside. 0 and a malloc'ed token, or -errno with
 * the reason in err. */
int inv_token_read(const char *path, char **ret_token, char *err, size_t errlen);

/* STATE/file (INV_TOKEN_FILE or INV_PEER_TOKEN_FILE): read when it is there,
 * else created (random, 0600). 0 and a malloc'ed token, or -errno with the
 * reason in err. */
int inv_token_ensure(const char *state_dir, const char *file, char **ret_token, char *err, size_t errlen);

/* given equals want, compared in constant time in want's length (no early
 * exit on the first difference); a NULL want (not configured) matches
 * nothing. */
bool inv_token_equal(const char *given, const char *want);
