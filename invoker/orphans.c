/* SPDX-License-Identifier: MIT */
/*
 * Nothing of a SIGKILLed invoker outlives its next start (issue 10).
 *
 * Every process an invoker starts carries PHOS_INVOKER_STATE=<its state dir,
 * resolved> in its environment: executors and CRIU inherit it, a function
 * spawned for a deploy gets it through phos_function_env (a function's own
 * "env" cannot override it), and instances and standbys, being CRIU restores
 * of such a function, get it back from their image.
 *
 *   SIGKILL of the invoker ─▶ executors end by themselves (PHOS_EXECUTOR_PARENT,
 *                             ctxpool/executor/main.c); idle instances and standbys end
 *                             on their closed pipes; a function busy in its
 *                             handler, or still in its init for a deploy,
 *                             lives on
 *   next start ─▶ STATE/invoker.lock taken (the old invoker is gone) ─▶ every
 *                 process whose environment holds our marker is SIGKILLed
 *                 through a pidfd opened before its environment was read
 *                 (a pid reused by an unrelated process is never signalled:
 *                 such a process fails the check, or the pidfd is of the
 *                 dead one) ─▶ repeated until a pass finds none (a CRIU we
 *                 killed may have forked meanwhile) ─▶ the marker set in our
 *                 own environment ─▶ pool, registry, HTTP.
 *
 * Late ones: a CRIU restore of the dead invoker, caught halfway, can still
 * bring a marked process to life after that sweep (its environment is not
 * readable yet while CRIU builds its memory; test_lifecycle met one under
 * ASan). So the reaper sweeps again during the first minute
 * (inv_orphans_late_sweep, at 1, 3, 10, 30 and 60 s), for processes born
 * before the first sweep ended: one born later cannot be the dead
 * invoker's (its CRIUs were ended by then), and may be a restore of one of
 * our snapshots that someone runs by hand beside us (phos-fn restore, whose
 * image brings our mark: CI met one killed halfway, test_ondemand).
 *
 * A marked process under a live phos-invoker, ours or another, is left alone
 * (see under_an_invoker): ours, or an instance of a snapshot or instance that
 * another invoker took from ours (its mark came with the CRIU image).
 *
 * Why not PR_SET_PDEATHSIG: it fires when the forking *thread* ends, and a
 * function restored by CRIU with one is killed as CRIU exits (docs/design.md's
 * CRIU recipe). Why not a process group: functions are session leaders.
 * Snapshots taken by an invoker before the marker existed restore without
 * it; their leftovers are not found.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "invoker.h"
#include "log.h"
#include "snapshotter.h"

#define ORPHAN_MAX 4096          /* killed per pass; more are found by the next */
#define ORPHAN_PASSES 8
#define ENVIRON_MAX (1u << 20)   /* bytes of a process's environment looked at */

static char marker[PATH_MAX + 32];   /* "PHOS_INVOKER_STATE=<dir>" */
static unsigned long long swept_at;  /* the first sweep's end, in clock ticks since boot */

/* pid's start in clock ticks since boot (/proc/PID/stat's 22nd field), or 0. */
static unsigned long long born_at(long pid)
{
	char path[64], buf[1024], *p;
	unsigned long long t = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	p = strrchr(buf, ')');   /* the command may hold spaces and parentheses */
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (p)
		t = strtoull(p + 1, NULL, 10);
	return t;
}

/* Now, in the ticks of born_at. */
static unsigned long long ticks_now(void)
{
	struct timespec ts;
	long hz = sysconf(_SC_CLK_TCK);

	if (clock_gettime(CLOCK_BOOTTIME, &ts) < 0 || hz <= 0)
		return 0;
	return (unsigned long long)ts.tv_sec * (unsigned long long)hz +
	       (unsigned long long)ts.tv_nsec / (1000000000ull / (unsigned long long)hz);
}

/* True when /proc/<pid>/environ holds exactly marker as one entry. */
static bool environ_marked(long pid)
{
	char path[64], buf[8192];
	size_t mlen = strlen(marker) + 1, have = 0, seen = 0;   /* the entry with its NUL */
	bool found = false, at_start = true;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%ld/environ", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	/* Entries are NUL-separated: compare each one's start with marker\0. */
	while (!found && seen < ENVIRON_MAX && (n = read(fd, buf + have, sizeof(buf) - have)) > 0) {
		size_t len = have + (size_t)n, i = 0;

		seen += (size_t)n;
		while (i < len) {
			char *nul = memchr(buf + i, '\0', len - i);

			if (!nul)
				break;
			if (at_start && (size_t)(nul - (buf + i)) + 1 == mlen && !memcmp(buf + i, marker, mlen)) {
				found = true;
				break;
			}
			at_start = true;
			i = (size_t)(nul - buf) + 1;
		}
		if (found)
			break;
		/* keep an unfinished entry when it may still be ours, else skip it */
		have = len - i;
		if (have >= mlen || have == sizeof(buf)) {
			at_start = false;
			have = 0;
		} else {
			memmove(buf, buf + i, have);
		}
	}
	close(fd);
	return found;
}

/* pid's parent, or -1. */
static long parent_of(long pid)
{
	char path[64], line[256];
	long ppid = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%ld/status", pid);
	if (!(f = fopen(path, "re")))
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "PPid:", 5)) {
			ppid = strtol(line + 5, NULL, 10);
			break;
		}
	fclose(f);
	return ppid;
}

static bool is_invoker(long pid)
{
	char path[64], exe[PATH_MAX];
	const char *base;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%ld/exe", pid);
	n = readlink(path, exe, sizeof(exe) - 1);
	if (n <= 0)
		return false;
	exe[n] = '\0';
	base = strrchr(exe, '/') ? strrchr(exe, '/') + 1 : exe;
	return !strncmp(base, "phos-invoker", 12) && (base[12] == '\0' || base[12] == ' ');
}

/* Whether pid descends from a live phos-invoker: us, or another one. Such a
 * marked process is not a leftover: ours (everything we start is our child,
 * or restored and reparented to us, a subreaper), or, on one host, a
 * neighbour's that carries our mark because it came from our state dir (an
 * instance of a snapshot pulled from us, or of an instance moved from us,
 * issue 13; while CRIU restores it, its parent is that invoker's CRIU). An
 * orphan of a dead invoker has been reparented to init or a subreaper
 * outside, never under an invoker. */
static bool under_an_invoker(long pid)
{
	for (int depth = 0; depth < 64; depth++) {
		pid = parent_of(pid);
		if (pid <= 1)
			return false;
		if (pid == getpid() || is_invoker(pid))
			return true;
	}
	return false;
}

/* The first word of pid's command line, for the log. */
static void comm_of(long pid, char *buf, size_t len)
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	n = fd >= 0 ? read(fd, buf, len - 1) : -1;
	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = '\0';
	if (!buf[0])
		snprintf(buf, len, "?");
}

/* One pass over /proc: SIGKILLs every marked process that is not under a
 * live invoker (ours, or a neighbour's) and, with born_before, was born at or
 * before it; their pidfds go to fds. Returns how many. */
static unsigned kill_pass(int *fds, unsigned max, unsigned long long born_before)
{
	struct dirent *de;
	unsigned n = 0;
	DIR *d = opendir("/proc");

	if (!d)
		return 0;
	while (n < max && (de = readdir(d))) {
		char *end, what[128];
		long pid = strtol(de->d_name, &end, 10);
		int fd;

		if (*end || pid <= 1 || pid == getpid())
			continue;
		fd = pidfd_open((pid_t)pid, 0);   /* before the check: see the top */
		if (fd < 0)
			continue;
		if (!environ_marked(pid) || under_an_invoker(pid) || (born_before && born_at(pid) > born_before) ||
		    pidfd_send_signal(fd, SIGKILL, NULL, 0) < 0) {
			close(fd);
			continue;
		}
		comm_of(pid, what, sizeof(what));
		phos_warn("ended pid %ld (%s), left running by an earlier invoker of this state dir", pid, what);
		fds[n++] = fd;
	}
	closedir(d);
	return n;
}

int inv_orphans_sweep(const char *state_dir)
{
	char dir[PATH_MAX];
	unsigned total = 0;
	static int fds[ORPHAN_MAX];

	if (!realpath(state_dir, dir))
		return -errno;
	snprintf(marker, sizeof(marker), "%s=%s", PHOS_OWNER_ENV, dir);
	for (int pass = 0; pass < ORPHAN_PASSES; pass++) {
		unsigned n = kill_pass(fds, ORPHAN_MAX, 0);

		if (!n)
			break;
		total += n;
		/* Wait (bounded) for them to be gone: a killed CRIU no longer
		 * forks, a killed dump no longer writes into snapshots/. */
		for (unsigned i = 0; i < n; i++) {
			struct pollfd p = { .fd = fds[i], .events = POLLIN };

			if (poll(&p, 1, 5000) == 0)
				phos_warn("a process killed at start is still there after 5 s");
			close(fds[i]);
		}
	}
	if (total)
		phos_warn("ended %u process%s of an earlier invoker of %s", total, total == 1 ? "" : "es", dir);
	swept_at = ticks_now();
	/* From here on, what we start is marked as ours. */
	return setenv(PHOS_OWNER_ENV, dir, 1) < 0 ? -errno : 0;
}

void inv_orphans_late_sweep(double since_start_s)
{
	static const double at[] = { 1, 3, 10, 30, 60 };
	static unsigned next;
	static int fds[ORPHAN_MAX];
	unsigned n;

	if (!marker[0] || next >= sizeof(at) / sizeof(at[0]) || since_start_s < at[next])
		return;
	while (next < sizeof(at) / sizeof(at[0]) && since_start_s >= at[next])
		next++;
	if (!swept_at)
		return;
	n = kill_pass(fds, ORPHAN_MAX, swept_at);
	for (unsigned i = 0; i < n; i++)
		close(fds[i]);
	if (n)
		phos_warn("ended %u process%s of an earlier invoker that came up after the start", n, n == 1 ? "" : "es");
}
