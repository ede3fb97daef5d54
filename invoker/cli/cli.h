/* SPDX-License-Identifier: MIT */
/* phos-fn: the command-line front end. One file per subcommand. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "control.h"
#include "paths.h"

/* phos-fn run [--device auto|cuda|sim] [--gpu N] [--trace FILE] -- PROGRAM ARGS... */
int cli_run(int argc, char **argv);

/* phos-fn pool: warm executors lent to phos-fn run (cli_pool.c). */
int cli_pool(int argc, char **argv);
/* Where phos-fn pool listens by default (and phos-fn run asks first):
 * $PHOS_EXECUTOR_SOCKET, else executors.sock in our private runtime
 * directory (runtime/rundir.h, made 0700 whatever make_dir says; one another
 * user made is refused: -EPERM). 0 or -errno. */
int cli_executor_socket_default(char *buf, size_t len, bool make_dir);

/* phos-fn snapshot [--device D] [--stats FILE] [--timeout S] -o DIR -- PROGRAM ARGS... */
int cli_snapshot(int argc, char **argv);

/* phos-fn deploy|list|describe|remove|invoke|logs|snapshot NAME against the
 * invoker's HTTP API (cli_gateway.c); argv[0] is the command. */
int cli_gateway(int argc, char **argv);

/* phos-fn checkpoint [--mode stw|cow|recopy] -o DIR PID (cli_checkpoint.c) */
int cli_checkpoint(int argc, char **argv);

/* The checkpoint endpoint of a `phos-fn run --checkpointable` (cli_checkpoint.c):
 * the socket path of run process pid (make_dir: its directory is made);
 * cli_run_listen binds and listens on ours (returns the fd or -errno, path
 * in buf); cli_run_serve_checkpoint accepts one request on it and answers. */
struct phos_checkpoint_target;
int cli_run_socket_path(pid_t pid, bool make_dir, char *buf, size_t len);
int cli_run_listen(char *buf, size_t len);
void cli_run_serve_checkpoint(int listen_fd, const struct phos_checkpoint_target *t);

/* phos-fn restore [--device D] [--stats FILE] [periodic options] DIR, where
 * DIR is a checkpoint, a snapshot, or a --checkpoint-dir (its latest
 * checkpoint that reads back whole) */
int cli_restore(int argc, char **argv);

/* phos-fn criu-check [--criu PATH]: 0 when that CRIU (or the one found)
 * dumps and restores a small process here, else 1 with the reason. */
int cli_criu_check(int argc, char **argv);

/* phos-fn peer-token [--state-dir DIR]: prints STATE/peer.token (token.h);
 * 1 when it is absent or unreadable, saying why. */
int cli_peer_token(int argc, char **argv);

/*
 * Periodic checkpoints and restart on failure (cli_periodic.c), options of
 * `phos-fn run` (which they make --checkpointable) and `phos-fn restore`:
 *
 *   --checkpoint-dir DIR       checkpoints go to DIR/ckpt-NNNNNN
 *   --checkpoint-every S|auto  every S seconds; auto: Young's interval from
 *                              the measured stall and --mtbf
 *   --mtbf S                   the expected time between failures (auto)
 *   --checkpoint-mode M        stw (default), cow or recopy
 *   --keep N                   the newest N complete checkpoints stay (2)
 *   --restart-on-failure       when the executor dies, the program is
 *                              restored from the latest checkpoint and goes on
 *   --max-restarts N           at most N such restarts (3)
 */
enum {
	CLI_OPT_CKPT_DIR = 0x100,
	CLI_OPT_CKPT_EVERY,
	CLI_OPT_CKPT_MODE,
	CLI_OPT_KEEP,
	CLI_OPT_MTBF,
	CLI_OPT_RESTART,
	CLI_OPT_MAX_RESTARTS,
};
#define CLI_PERIODIC_OPTIONS                                                        \
	{ "checkpoint-dir", required_argument, NULL, CLI_OPT_CKPT_DIR },            \
	{ "checkpoint-every", required_argument, NULL, CLI_OPT_CKPT_EVERY },        \
	{ "checkpoint-mode", required_argument, NULL, CLI_OPT_CKPT_MODE },          \
	{ "keep", required_argument, NULL, CLI_OPT_KEEP },                          \
	{ "mtbf", required_argument, NULL, CLI_OPT_MTBF },                          \
	{ "restart-on-failure", no_argument, NULL, CLI_OPT_RESTART },               \
	{ "max-restarts", required_argument, NULL, CLI_OPT_MAX_RESTARTS }
#define CLI_PERIODIC_USAGE                                                                          \
	"  --checkpoint-dir DIR      periodic checkpoints go to DIR/ckpt-NNNNNN (atomic, numbered)\n"  \
	"  --checkpoint-every S|auto every S seconds; auto: sqrt(2 x stall x --mtbf) (Young)\n"        \
	"  --mtbf S                  the expected time between failures, for auto\n"                   \
	"  --checkpoint-mode M       stw (default), cow or recopy\n"                                   \
	"  --keep N                  keep the newest N complete checkpoints (default 2)\n"             \
	"  --restart-on-failure      if the executor dies, restore the latest checkpoint and go on\n"  \
	"  --max-restarts N          at most N restarts (default 3)\n"

struct cli_periodic {
	char dir[PATH_MAX - 64];
	bool enabled;              /* --checkpoint-every given */
	bool auto_every, restart;
	double every_s, mtbf_s;
	enum phos_ckpt_mode mode;
	unsigned keep, max_restarts, restarts;
	unsigned seq;              /* the newest checkpoint's number */
	unsigned taken;            /* checkpoints taken by this process */
	double next_at, last_stall_s;
};
#define CLI_PERIODIC_INIT { .mode = PHOS_CKPT_STW, .keep = 2, .max_restarts = 3 }

/* Takes one option of the list above (opt its code): 0, -EINVAL after saying
 * why on stderr, or -ENOENT for an option that is not one of them. */
int cli_periodic_option(struct cli_periodic *p, int opt, const char *arg);
/* After the options: checks that they go together, makes DIR, and numbers
 * on from its checkpoints. 0 or -errno after saying why. */
int cli_periodic_check(struct cli_periodic *p);
/* Milliseconds until the next checkpoint is due (-1: none planned). */
int cli_periodic_wait_ms(const struct cli_periodic *p);
/* Takes the checkpoint of t when it is due (p may be NULL). */
struct phos_checkpoint_target;
void cli_periodic_tick(struct cli_periodic *p, const struct phos_checkpoint_target *t);
/* Whether executor exe (a child of ours, not reaped yet) ended by a signal or
 * with a failure status: its device state is gone. An executor that exited
 * 0 ended with its program (it does as soon as the program says goodbye,
 * which may be before the program's own exit). */
bool cli_executor_failed(pid_t exe);
/* The same from a wait status of the executor, once reaped. */
bool cli_executor_status_failed(int status);
/* A restart after why ("the executor died", for the message): the newest
 * checkpoint of p->dir in buf, counted as a restart and said on stderr; -1
 * (said why not) when no restart is left or there is no checkpoint. */
int cli_periodic_restart(struct cli_periodic *p, const char *why, char *buf, size_t len);
/* The newest checkpoint of dir that reads back whole: 0 and its path in buf,
 * or -ENOENT (-errno when dir cannot be read). */
int cli_periodic_latest(const char *dir, char *buf, size_t len);

/* Restores dir (a checkpoint or snapshot) on device and serves it until its
 * program ends: checkpoint requests (phos-fn checkpoint), per's periodic
 * checkpoints, and with per->restart a restore of per->dir's latest
 * checkpoint whenever the executor dies (cli_snapshot.c). Returns the
 * program's exit code, or 1 when a restore failed (said on stderr). */
int cli_restore_run(const char *device, const char *dir, bool on_demand, const char *stats, struct cli_periodic *per);

