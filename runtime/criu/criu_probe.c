/* SPDX-License-Identifier: MIT */
/* Trying CRIU on this machine: phos_criu_probe and its cache, phos_criu_check,
 * and phos_criu_find, which takes the first CRIU that passes them (the picture
 * is in criu.h). Above criu.c, which runs CRIU: it calls criu.c, never back. */
#include "criu.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "rundir.h"

#define PROBE_TIMEOUT_MS 15000   /* default of $PHOS_CRIU_PROBE_TIMEOUT */
#define PROBE_LINE       64

struct probe {
	const char *criu;
	double deadline;
	int cancel_fd;            /* timerfd, readable at the deadline (bounds the dump) */
	char dir[PATH_MAX];       /* the image, removed at the end */
	int in[2], out[2];        /* the process's stdin and stdout, before and after */
	pid_t pid;                /* the process, spawned or restored */
};

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static void pipes_close(struct probe *p)
{
	for (int i = 0; i < 2; i++) {
		if (p->in[i] >= 0)
			close(p->in[i]);
		if (p->out[i] >= 0)
			close(p->out[i]);
		p->in[i] = p->out[i] = -1;
	}
}

static void probe_exit(struct probe *p)
{
	if (p->pid > 0) {
		kill(p->pid, SIGKILL);
		while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
	pipes_close(p);
	if (p->cancel_fd >= 0)
		close(p->cancel_fd);
	if (p->dir[0])
		nftw(p->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Reads one line from fd into buf until p's deadline: 0, -ETIMEDOUT, -EPIPE
 * (closed first) or -errno. */
static int read_line(const struct probe *p, int fd, char *buf, size_t len)
{
	size_t n = 0;

	while (n + 1 < len) {
		double left = p->deadline - phos_now();
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t k;
		int r;

		if (left <= 0)
			return -ETIMEDOUT;
		r = poll(&pfd, 1, (int)(left * 1e3) + 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			continue;
		k = read(fd, buf + n, 1);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			return -EPIPE;
		if (buf[n] == '\n')
			break;
		n++;
	}
	buf[n] = '\0';
	return 0;
}

/* The process: a shell that says it is ready, then echoes one line. */
static int probe_spawn(struct probe *p, char *err, size_t errlen)
{
	char *const argv[] = { "/bin/sh", "-c", "echo ready; read line; echo \"got $line\"", NULL };
	int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC), r;
	char line[PROBE_LINE];

	if (null_fd < 0)
		return -errno;
	const struct phos_fd_map fds[] = { { p->in[0], 0 }, { p->out[1], 1 }, { null_fd, 2 } };

	r = phos_criu_spawn(argv, NULL, fds, 3, NULL, &p->pid);
	close(null_fd);
	if (r < 0) {
		phos_errf(err, errlen, "cannot start /bin/sh to try CRIU on: %s", strerror(-r));
		return r;
	}
	r = read_line(p, p->out[0], line, sizeof(line));
	if (r < 0 || strcmp(line, "ready")) {
		phos_errf(err, errlen, "the process to try CRIU on did not start (%s)", r < 0 ? strerror(-r) : line);
		return r < 0 ? r : -EIO;
	}
	return 0;
}

static int probe_dump(struct probe *p, char *err, size_t errlen)
{
	char why[1024];
	int r = phos_criu_dump_flags(p->criu, p->pid, p->dir, NULL, 0, PHOS_CRIU_UNFAULTED, p->cancel_fd, why,
				     sizeof(why));

	if (r == -ECANCELED)
		r = -ETIMEDOUT;
	if (r == -ETIMEDOUT)
		phos_errf(err, errlen, "%s: criu dump of a test process made no progress in time: killed", p->criu);
	else if (r < 0)
		phos_errf(err, errlen, "%s: criu dump of a test process failed: %s", p->criu, why);
	else
		p->pid = 0;   /* gone (dumped and reaped) */
	return r;
}

/* Restores the image with fresh pipes in place of the old ones, and has the
 * restored shell echo a line through them. */
static int probe_restore(struct probe *p, char *err, size_t errlen)
{
	char key_in[64], key_out[64], why[1024], line[PROBE_LINE];
	int r;

	if ((r = phos_criu_fd_key(0, p->in[0], key_in, sizeof(key_in))) < 0 ||
	    (r = phos_criu_fd_key(0, p->out[1], key_out, sizeof(key_out))) < 0) {
		phos_errf(err, errlen, "cannot name the test process's pipes: %s", strerror(-r));
		return r;
	}
	pipes_close(p);
	if (pipe2(p->in, O_CLOEXEC) < 0 || pipe2(p->out, O_CLOEXEC) < 0)
		return -errno;
	const struct phos_criu_inherit inh[] = { { .fd = p->in[0], .target = 0, .key = key_in },
						 { .fd = p->out[1], .target = 1, .key = key_out } };

	r = phos_criu_restore(p->criu, p->dir, inh, 2, PHOS_CRIU_UNFAULTED, p->deadline, -1, &p->pid, why, sizeof(why));
	if (r == -ETIMEDOUT) {
		phos_errf(err, errlen, "%s: criu restore of a test process made no progress in time (%s)", p->criu, why);
		return r;
	}
	if (r < 0) {
		phos_errf(err, errlen, "%s: criu restore of a test process failed: %s", p->criu, why);
		return r;
	}
	close(p->in[0]);
	close(p->out[1]);
	p->in[0] = p->out[1] = -1;
	if (write(p->in[1], "ping\n", 5) != 5) {
		phos_errf(err, errlen, "%s: the restored test process does not read its stdin (%s)", p->criu,
			  strerror(errno));
		return -EIO;
	}
	r = read_line(p, p->out[0], line, sizeof(line));
	if (r < 0 || strcmp(line, "got ping")) {
		phos_errf(err, errlen, "%s: the restored test process did not answer (%s)", p->criu,
			  r < 0 ? strerror(-r) : line);
		return r < 0 ? r : -EIO;
	}
	return 0;
}

int phos_criu_probe(const char *criu, unsigned timeout_ms, char *err, size_t errlen)
{
	struct probe p = { .criu = criu, .cancel_fd = -1, .in = { -1, -1 }, .out = { -1, -1 } };
	const char *tmp = getenv("TMPDIR");
	struct itimerspec at = { 0 };
	char dir[PATH_MAX];
	int r;

	if (!criu || !timeout_ms)
		return -EINVAL;
	p.deadline = phos_now() + timeout_ms / 1e3;
	/* The restored shell is reparented to the nearest subreaper: us, so that
	 * it is ours to kill and reap (restores set it too). */
	prctl(PR_SET_CHILD_SUBREAPER, 1);
	at.it_value.tv_sec = (time_t)p.deadline;
	at.it_value.tv_nsec = (long)((p.deadline - (double)(time_t)p.deadline) * 1e9);
	snprintf(dir, sizeof(dir), "%s/phos-criu-probe-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		r = -errno;
		phos_errf(err, errlen, "cannot try %s: mkdtemp %s: %s", criu, dir, strerror(errno));
		return r;
	}
	strcpy(p.dir, dir);
	p.cancel_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (p.cancel_fd < 0 || timerfd_settime(p.cancel_fd, TFD_TIMER_ABSTIME, &at, NULL) < 0 ||
	    pipe2(p.in, O_CLOEXEC) < 0 || pipe2(p.out, O_CLOEXEC) < 0) {
		r = -errno;
		phos_errf(err, errlen, "cannot try %s: %s", criu, strerror(errno));
		goto out;
	}
	r = probe_spawn(&p, err, errlen);
	if (r == 0)
		r = probe_dump(&p, err, errlen);
	if (r == 0)
		r = probe_restore(&p, err, errlen);
out:
	probe_exit(&p);
	return r;
}

/* ---- the cache: one file per CRIU binary and kernel boot ---- */

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

/* What a success holds for: criu's path, size, mtime and inode, the kernel
 * and its boot. -errno when criu cannot be looked at. */
static int cache_key(const char *criu, char *key, size_t len)
{
	char real[PATH_MAX], boot[64] = "";
	struct utsname u;
	struct stat st;
	int fd;

	if (!realpath(criu, real) || stat(real, &st) < 0)
		return -errno;
	fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, boot, sizeof(boot) - 1);

		boot[n > 0 ? n : 0] = '\0';
		boot[strcspn(boot, "\n")] = '\0';
		close(fd);
	}
	if (uname(&u) < 0)
		return -errno;
	snprintf(key, len, "criu %s %lld %lld.%09ld %llu\nkernel %s %s\nboot %s\n", real, (long long)st.st_size,
		 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (unsigned long long)st.st_ino, u.release,
		 u.version, boot);
	return 0;
}

/* The file of key: in $PHOS_CRIU_PROBE_CACHE, else our runtime directory;
 * -errno when there is none (then nothing is kept). */
static int cache_path(const char *key, char *path, size_t len)
{
	const char *env = getenv("PHOS_CRIU_PROBE_CACHE");
	char dir[PATH_MAX - 64];
	int r = 0;

	if (env && *env)
		snprintf(dir, sizeof(dir), "%s", env);
	else
		r = phos_rundir(dir, sizeof(dir));
	if (r < 0)
		return r;
	snprintf(path, len, "%s/criu-ok-%016llx", dir, (unsigned long long)fnv1a(key));
	return 0;
}

/* Whether path is a file of ours, writable by us alone, holding key. */
static bool cache_holds(const char *path, const char *key)
{
	char buf[PATH_MAX + 512];
	struct stat st;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return false;
	n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 022)
		    ? read(fd, buf, sizeof(buf) - 1)
		    : -1;
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	return strcmp(buf, key) == 0;
}

static void cache_put(const char *path, const char *key)
{
	char tmp[PATH_MAX + 16];
	int fd;

	snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path);
	fd = mkstemp(tmp);
	if (fd < 0)
		return;   /* not kept: the next start tries again */
	if (write(fd, key, strlen(key)) != (ssize_t)strlen(key) || fchmod(fd, 0644) < 0 || rename(tmp, path) < 0)
		unlink(tmp);
	close(fd);
}

int phos_criu_check(const char *criu, char *err, size_t errlen)
{
	const char *skip = getenv("PHOS_CRIU_PROBE"), *env = getenv("PHOS_CRIU_PROBE_TIMEOUT");
	long timeout_ms = env ? strtol(env, NULL, 10) : 0;
	char key[PATH_MAX + 512], path[PATH_MAX];
	double t0 = phos_now();
	int r;

	if (skip && strcmp(skip, "0") == 0)
		return 0;
	if (timeout_ms <= 0 || timeout_ms > 600000)
		timeout_ms = PROBE_TIMEOUT_MS;
	r = cache_key(criu, key, sizeof(key));
	if (r < 0) {
		phos_errf(err, errlen, "%s: %s", criu, strerror(-r));
		return r;
	}
	bool kept = cache_path(key, path, sizeof(path)) == 0;

	if (kept && cache_holds(path, key))
		return 0;
	r = phos_criu_probe(criu, (unsigned)timeout_ms, err, errlen);
	if (r < 0) {
		size_t n = strlen(err);

		if (r == -ETIMEDOUT)
			snprintf(err + n, errlen > n ? errlen - n : 0, " after %.1f s (bound %ld ms, "
				 "PHOS_CRIU_PROBE_TIMEOUT): this CRIU hangs on this machine", phos_now() - t0, timeout_ms);
		n = strlen(err);
		snprintf(err + n, errlen > n ? errlen - n : 0,
			 "; run tools/setup, which picks a CRIU that works here, or set PHOS_CRIU");
	}
	if (r == 0 && kept)
		cache_put(path, key);
	return r;
}

/* ---- finding CRIU: the first that says 4.1 or newer and passes the probe ---- */

static int found(char *buf, size_t len, const char *path, char *err, size_t errlen)
{
	int r = phos_criu_version_ok(path, err, errlen);

	if (r < 0)
		return r;
	r = phos_criu_check(path, err, errlen);   /* seen to work here (cached) */
	if (r < 0)
		return r;
	if (strlen(path) >= len) {
		phos_errf(err, errlen, "path of CRIU too long: %s", path);
		return -ENAMETOOLONG;
	}
	strcpy(buf, path);
	return 0;
}

int phos_criu_find(char *buf, size_t len, char *err, size_t errlen)
{
	const char *env = getenv("PHOS_CRIU"), *path = getenv("PATH");
	char cand[PATH_MAX + 16], exe[PATH_MAX];
	ssize_t n;

	phos_errf(err, errlen, "%s", "");
	if (env && *env) {
		if (!phos_criu_is_executable(env)) {
			phos_errf(err, errlen, "PHOS_CRIU=%s is not an executable file", env);
			return -ENOENT;
		}
		return found(buf, len, env, err, errlen);   /* asked for: no fallback */
	}

	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		char *slash;

		exe[n] = '\0';
		slash = strrchr(exe, '/');
		if (slash) {
			*slash = '\0';
			snprintf(cand, sizeof(cand), "%s/../criu/criu", exe);
			if (phos_criu_is_executable(cand) && found(buf, len, cand, err, errlen) == 0)
				return 0;
		}
	}

	for (const char *p = path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"; *p;) {
		size_t dl = strcspn(p, ":");

		if (dl && dl < PATH_MAX) {
			snprintf(cand, sizeof(cand), "%.*s/criu", (int)dl, p);
			if (phos_criu_is_executable(cand)) {
				char why[256];

				if (found(buf, len, cand, why, sizeof(why)) == 0)
					return 0;
				phos_errf(err, errlen, "%s", why);   /* remember the reason, keep looking */
			}
		}
		p += dl + (p[dl] == ':');
	}
	if (!err || !*err)
		phos_errf(err, errlen, "CRIU >= 4.1 not found: set PHOS_CRIU, run tools/setup (it makes "
			"<builddir>/criu/criu), or install criu");
	return -ENOENT;
}
