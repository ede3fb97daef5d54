/* SPDX-License-Identifier: MIT */
/*
 * Driving CRIU for function processes (DESIGN.md, "Restore", the CRIU recipe).
 *
 *   phos_criu_spawn: the function starts as the init of a new pid namespace and
 *                    a session leader (setsid), without a parent-death signal,
 *                    with the descriptors it is handed at fixed numbers.
 *   phos_criu_dump:  criu dump -t PID -D DIR --shell-job --ext-unix-sk
 *                    --external unix[INO]... (the channel socket), log in DIR.
 *                    The process is gone afterwards.
 *   phos_criu_restore: criu restore -D DIR --shell-job -d --pidfile F
 *                    --inherit-fd fd[N]:KEY...; the fresh descriptors are put
 *                    at N in CRIU's process. The restored root is reparented to
 *                    the nearest subreaper: callers that want to wait for it set
 *                    PR_SET_CHILD_SUBREAPER first.
 *
 * CRIU is found as: $PHOS_CRIU, else the wrapper tools/setup made beside the
 * build (<dir of the calling binary>/../criu/criu), else a system `criu` of
 * version >= 4.1. Failures return a negative errno and CRIU's own reason (the
 * "Error" lines of its log) in err. "Can't setup RLIMIT_NOFILE" is harmless on
 * these machines and never the reason given.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Path of a usable CRIU (>= 4.1) into buf; -ENOENT with a reason in err. */
int phos_criu_find(char *buf, size_t len, char *err, size_t errlen);

struct phos_fd_map {
	int from;   /* descriptor in the caller */
	int to;     /* number it gets in the child */
};

/* Starts argv (with envp; PATH is searched) as the init of a new pid namespace;
 * fds lists the descriptors it gets (others are closed). Returns 0 and the
 * child's host pid. */
int phos_criu_spawn(char *const argv[], char *const envp[], const struct phos_fd_map *fds, unsigned nfds,
		    pid_t *ret_pid);

/* Dumps the process tree rooted at pid into dir (which must exist). ext_unix are
 * the inodes of unix sockets whose peers are outside (the channel). */
int phos_criu_dump(const char *criu, pid_t pid, const char *dir, const uint64_t *ext_unix, unsigned next,
		   char *err, size_t errlen);

struct phos_criu_inherit {
	int fd;            /* the caller's descriptor to hand in */
	int target;        /* the number it had in the dumped process */
	const char *key;   /* "socket:[123]", "pipe:[456]" */
};

/* Restores dir; returns 0 and the host pid of the restored root. */
int phos_criu_restore(const char *criu, const char *dir, const struct phos_criu_inherit *inh, unsigned ninh,
		      pid_t *ret_pid, char *err, size_t errlen);

/* CRIU's key for an open descriptor of this process ("pipe:[456]",
 * "socket:[123]", or for other files the path), for --inherit-fd. */
int phos_criu_fd_key(pid_t pid, int fd, char *buf, size_t len);
