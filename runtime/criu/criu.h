/* SPDX-License-Identifier: MIT */
/*
 * Driving CRIU for function processes (docs/design.md, "Restore", the CRIU recipe).
 *
 *   phos_criu_spawn: the function starts as the init of a new pid namespace and
 *                    a session leader (setsid), without a parent-death signal,
 *                    with the descriptors it is handed at fixed numbers.
 *   phos_criu_dump:  criu dump -t PID -D DIR --shell-job --ext-unix-sk
 *                    --external unix[INO]... (the channel socket), log in DIR.
 *                    The process is gone afterwards. Dumps of tasks with one
 *                    working directory are serialized across processes (the
 *                    parasite makes a "proc.crtools" there; criu.c says why).
 *   phos_criu_restore: criu restore -D DIR --work-dir TMP --shell-job -d --pidfile F
 *                    --inherit-fd fd[N]:KEY...; the fresh descriptors are put
 *                    at N in CRIU's process. The restored root is reparented to
 *                    the nearest subreaper: callers that want to wait for it set
 *                    PR_SET_CHILD_SUBREAPER first.
 *
 * CRIU is found as: $PHOS_CRIU, else the wrapper tools/setup made beside the
 * build (<dir of the calling binary>/../criu/criu), else a system `criu` of
 * version >= 4.1; the one found must pass phos_criu_check. Failures return a negative errno and CRIU's own reason (the
 * "Error" lines of its log) in err. "Can't setup RLIMIT_NOFILE" is harmless on
 * these machines and never the reason given.
 *
 * Stdio pipes whose other end is outside the tree (the function's stdin and
 * stdout) need nothing at dump time; on restore they must be handed in like
 * the channel (key "pipe:[INO]" as phos_criu_fd_key read it before the dump).
 * Otherwise CRIU makes fresh pipes nobody holds: stdin reads EOF and the first
 * write to stdout raises SIGPIPE. A key that is in no image is ignored by CRIU.
 *
 * CRIU runs at most $PHOS_CRIU_TIMEOUT seconds (default 300), or until the
 * caller's deadline or cancel fd; then it and the tree it was restoring are
 * killed and the call returns -ETIMEDOUT (-ECANCELED) (CRIU 4.1.1
 * retries a short read of a truncated pages-*.img forever). A restoring CRIU
 * gets a soft RLIMIT_FSIZE of 64 MiB, which bounds its log; the restored tasks
 * get their own limits back from the image.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Path of a usable CRIU into buf: >= 4.1, and seen to work on this machine
 * (phos_criu_check, below). -ENOENT with a reason in err when there is none;
 * the check's -errno (-ETIMEDOUT: it hangs here) with its reason, naming the
 * CRIU, when the first one found does not work. */
int phos_criu_find(char *buf, size_t len, char *err, size_t errlen);

/* What phos_criu_find (criu_probe.c) asks of criu.c: whether path is an
 * executable file, and whether `criu --version` (bounded) says 4.1 or newer
 * (0, else a negative errno and the reason in err). */
bool phos_criu_is_executable(const char *path);
int phos_criu_version_ok(const char *criu, char *err, size_t errlen);

struct phos_fd_map {
	int from;   /* descriptor in the caller */
	int to;     /* number it gets in the child */
};

/* A user to run a function as (phos_criu_spawn). */
struct phos_criu_user {
	uid_t uid;
	gid_t gid;
};

/* Starts argv (with envp, or environ when NULL; PATH is searched) as the init
 * of a new pid namespace; fds lists the descriptors it gets (others are
 * closed; from and to may overlap). Signals are reset to their defaults.
 * With user (NULL: ours), it runs as that user without supplementary groups,
 * in a mount namespace of its own (our mounts, propagating to it) whose /proc
 * is its pid namespace's: CRIU can then dump it (see phos_criu_dump).
 * Returns 0 and the child's host pid (a child of the caller), or -errno of the
 * failed exec (-ENOENT, ...). */
int phos_criu_spawn(char *const argv[], char *const envp[], const struct phos_fd_map *fds, unsigned nfds,
		    const struct phos_criu_user *user, pid_t *ret_pid);

/* Dumps the process tree rooted at pid into dir (which must exist). ext_unix are
 * the inodes of unix sockets whose peers are outside (the channel). On success
 * the tree is gone, and pid is reaped when it is a child of the caller. A
 * task of another user is dumped by CRIU running as that user with our
 * capabilities (--unprivileged: root may lack CAP_SYS_RESOURCE, which CRIU
 * needs to read another user's rlimits); a mount namespace of its own is
 * dumped with our mounts as external (--ext-mount-map auto), and a restore
 * of such an image binds them back from ours (--root /).
 * -ESRCH: no such process; -EIO: CRIU failed (its reason in err); -ECANCELED:
 * cancel_fd (>= 0; -1: none) turned readable, and CRIU was killed at once
 * (the process may be left stopped or half-dumped: the caller kills it). */
int phos_criu_dump(const char *criu, pid_t pid, const char *dir, const uint64_t *ext_unix, unsigned next,
		   int cancel_fd, char *err, size_t errlen);

/* As phos_criu_dump, with flags: PHOS_CRIU_LEAVE_RUNNING (criu dump
 * --leave-running: the tree goes on after the dump, as a checkpoint of a
 * running program wants; nothing is reaped). -EINVAL for unknown flags. */
#define PHOS_CRIU_LEAVE_RUNNING 1u
/* For dumps and restores alike: the fault points criu_dump and criu_restore
 * (fault.h) are not consulted. phos_criu_probe's runs are no test's target. */
#define PHOS_CRIU_UNFAULTED (1u << 8)
int phos_criu_dump_flags(const char *criu, pid_t pid, const char *dir, const uint64_t *ext_unix, unsigned next,
			 unsigned flags, int cancel_fd, char *err, size_t errlen);

/* A dump made ready ahead of its moment, for checkpoints of a running
 * program, whose stall it shortens. CRIU starts with the gate as its action
 * script (--action-script): it does its start-up (kernel feature probes,
 * options: tens of milliseconds) and then runs the gate at its pre-dump
 * action, before it touches the task. The gate (runtime/criu/criu_gate.c) tells
 * the caller it is there and waits: the task runs on meanwhile.
 * phos_criu_dump_ahead returns once CRIU waits at the gate (0 and *ret), or
 * -errno with CRIU's reason in err and nothing left running. Then either
 * phos_criu_dump_go: CRIU seizes the task and dumps it, as
 * phos_criu_dump_flags would (same returns; the task's dump lock, see
 * phos_criu_dump, is taken first); or phos_criu_dump_drop: the
 * gate fails, and CRIU ends without having touched the task. Both free a. */
struct phos_criu_ahead;
int phos_criu_dump_ahead(const char *criu, const char *gate, pid_t pid, const char *dir, const uint64_t *ext_unix,
			 unsigned next, unsigned flags, struct phos_criu_ahead **ret, char *err, size_t errlen);
int phos_criu_dump_go(struct phos_criu_ahead *a, char *err, size_t errlen);
/* As phos_criu_dump_go, and dumped(arg) is called as soon as CRIU has
 * written the whole image, while it still holds the tree (its post-dump
 * action, where the gate tells the caller and waits until dumped returned):
 * a caller that holds the tree's peers (an executor holding the channel)
 * lets them go on there instead of after CRIU's end. The return still says
 * whether the dump succeeded; dumped is not called when CRIU fails before. */
int phos_criu_dump_go_then(struct phos_criu_ahead *a, void (*dumped)(void *arg), void *arg, char *err,
			   size_t errlen);
void phos_criu_dump_drop(struct phos_criu_ahead *a);

/* Path of the gate program into buf: $PHOS_CRIU_GATE, else phos-criu-gate
 * beside the calling binary, in ../runtime (the build tree) or in
 * ../libexec/phos-fn. -ENOENT when there is none (dumps then run without it). */
int phos_criu_gate_find(char *buf, size_t len);

/* Path of the socket-table shim into buf: $PHOS_CRIU_SOCKDIAG ("0": none),
 * else phos-criu-sockdiag.so found as the gate is. Every dump preloads it
 * into CRIU (runtime/criu/criu_sockdiag.c says why and when it acts); -ENOENT
 * when there is none (dumps then run without it). */
int phos_criu_sockdiag_find(char *buf, size_t len);

struct phos_criu_inherit {
	int fd;            /* the caller's descriptor to hand in */
	int target;        /* the number it had in the dumped process (for the
			    * caller's records: CRIU matches by key, and every
			    * fd of the image that had this key gets it) */
	const char *key;   /* "socket:[123]", "pipe:[456]" */
};

/* phos_criu_restore's flags. */
enum {
	/* The restored tree is left stopped (--leave-stopped): it runs once the
	 * caller sends SIGCONT, e.g. after its executor has taken over its
	 * channel, so that a program restored in the middle of CPU code cannot
	 * run (or end) before then. */
	PHOS_CRIU_STOPPED = 1u << 0,
};

/* Restores dir, which is only read (the log and pid file go to a private
 * directory under $TMPDIR or /tmp, removed afterwards), so that restores of
 * one image may run at once. Returns 0 and the host pid of the restored root
 * (the init of a new pid namespace, reparented to the nearest subreaper);
 * -EIO with CRIU's reason in err; -ETIMEDOUT when CRIU had not finished by
 * deadline (a phos_now() time; 0: none) or within $PHOS_CRIU_TIMEOUT;
 * -ECANCELED (cancel_fd, as for phos_criu_dump). On either of the last two,
 * CRIU and what it had restored are killed. */
int phos_criu_restore(const char *criu, const char *dir, const struct phos_criu_inherit *inh, unsigned ninh,
		      unsigned flags, double deadline, int cancel_fd, pid_t *ret_pid, char *err, size_t errlen);

/*
 * Trying CRIU on this machine (runtime/criu/criu_probe.c). A CRIU can pass its
 * version check and still hang on a machine: trixie's 4.1.1 waits forever in
 * the parasite cure on AMD hosts with kernel 6.18 (the hardware-breakpoint
 * stop it waits for never comes). So a CRIU is chosen, and the invoker and
 * phos-fn start, only once it has been seen to work here:
 *
 *   /bin/sh (echo ready; read line; echo got line) ── spawned as a pid-ns init
 *        │ phos_criu_dump                       (as a function is snapshotted)
 *        ▼ phos_criu_restore, fresh stdio pipes  (as a cold start restores)
 *   "ping" in, "got ping" out ─▶ it works; anything else, or no answer by
 *                                 the deadline ─▶ refused, with what it did
 */

/* Dumps and restores a small process of our own with criu, within
 * timeout_ms, and checks that the restored process answers on the pipes it
 * was handed. 0, or -errno with what failed in err (naming criu):
 * -ETIMEDOUT when a step made no progress in time. Nothing of the try is
 * left running or on disk. */
int phos_criu_probe(const char *criu, unsigned timeout_ms, char *err, size_t errlen);

/* phos_criu_probe once per CRIU binary and kernel boot: a success is kept
 * (in $PHOS_CRIU_PROBE_CACHE, else our runtime directory, rundir.h: a file
 * of ours named by a hash of the binary's path, size, mtime and inode and the
 * kernel's boot id); a failure is tried again next time. The probe's bound is
 * $PHOS_CRIU_PROBE_TIMEOUT ms (default 15000). PHOS_CRIU_PROBE=0 skips it. */
int phos_criu_check(const char *criu, char *err, size_t errlen);

/* Removes the work directories of restores whose process is gone
 * (phos-criu-PID-XXXXXX under $TMPDIR or /tmp, ours, PID dead: a SIGKILL
 * during a restore leaves one). Returns how many went. */
unsigned phos_criu_sweep(void);

/* What the tasks of a CRIU image run as (runtime/criu/criu_creds.c says where
 * CRIU keeps it): a restore gives them these back, whatever user the
 * restoring invoker runs its functions as. */
struct phos_criu_creds {
	uint32_t uid, gid, euid, egid, suid, sgid, fsuid, fsgid;
	bool caps;   /* any capability permitted or effective */
};
/* 0 when every task and thread of the CRIU image in dir runs as want->uid
 * and want->gid (all eight ids), without capabilities unless want->caps;
 * -EPERM with the first that does not in err; -EBADMSG for an image that
 * says no such thing (no task, no credentials, a bad core image). */
int phos_criu_image_users(const char *dir, const struct phos_criu_creds *want, char *err, size_t errlen);
/* 0 when uid/gid (without supplementary groups) may open every regular file
 * of the CRIU image in dir as the image has it open (read, write or both),
 * or when the file is gone here (CRIU restores those from the image);
 * directories are not checked (the tasks' cwd is the invoker's, which that
 * user may not cross; a descriptor of one gives a listing, not contents); -EPERM naming the first that it may not in err: a restore
 * opens them as root, before the tasks get their own credentials, and would
 * hand them to the task. -EBADMSG for a malformed files.img. Forks a child
 * to try the opens as that user. */
int phos_criu_image_files(const char *dir, uid_t uid, gid_t gid, char *err, size_t errlen);
/* Re-owns the CRIU image in dir: every task and thread gets uid and gid (all
 * eight ids), no inheritable, permitted, effective or ambient capability and
 * no supplementary group (core-ID.img rewritten, each through a temporary
 * file). The bounding set, securebits and the rest stay. 0, or -errno with
 * err (-EBADMSG: a core image without credentials). The files of the image
 * change: a manifest that lists their hashes must be made again. */
int phos_criu_image_reown(const char *dir, uint32_t uid, uint32_t gid, char *err, size_t errlen);

/* Lets a tree restored with PHOS_CRIU_STOPPED run: SIGCONT to pid and every
 * descendant of it (at most 256 processes; a process the restore made has
 * no other way to be stopped). */
void phos_criu_continue(pid_t pid);

/* CRIU's key for an open descriptor of process pid (0: the caller), for
 * --inherit-fd: the /proc/PID/fd/FD link ("pipe:[456]", "socket:[123]",
 * "anon_inode:...", or a file's path). -ENAMETOOLONG when it does not fit. */
int phos_criu_fd_key(pid_t pid, int fd, char *buf, size_t len);
