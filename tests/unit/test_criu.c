/* SPDX-License-Identifier: MIT */
/*
 * The CRIU driver: spawn a stand-in function (criu_target) as a pid namespace
 * init, dump it with its channel socket external, restore it three times at
 * once with fresh channels and stdio pipes handed in, and check that each copy
 * answers with the state it had at dump time, independently of the others.
 * Then the refusals: a dead pid, an empty and a corrupted image, a missing
 * channel, and injected faults (which must not run CRIU at all). Then dumps
 * made ready ahead (phos_criu_dump_ahead, through the gate): the task answers
 * while CRIU waits at its gate; let go, CRIU dumps it running on, and the
 * image restores to the state it had at the go; dropped, CRIU ends without a
 * trace on the task; a dead pid is refused before the gate.
 *
 *   test_criu CRIU_TARGET [CRIU [GATE]]
 *
 * CRIU (the wrapper tools/setup makes at <builddir>/criu/criu) becomes
 * PHOS_CRIU; without it, or as non-root, the test is skipped (77). CRIU runs
 * at most PHOS_CRIU_TIMEOUT seconds (20 here unless set).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "criu.h"

#define NCOPIES 3
#define SEED    "7"

#include "check.h"

static const char *target_path;
static char criu[4096];

/* One line from fd within 10 s into buf ("" on timeout, EOF or error). */
static void read_line(int fd, char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	while (n + 1 < len) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&p, 1, 10000) <= 0)
			break;
		r = read(fd, buf + n, 1);
		if (r <= 0)
			break;
		if (buf[n++] == '\n')
			break;
	}
	buf[n] = '\0';
}

static void ask(int fd, const char *req, char *buf, size_t len)
{
	buf[0] = '\0';
	if (write(fd, req, strlen(req)) != (ssize_t)strlen(req))
		return;
	read_line(fd, buf, len);
}

/* A function process and our ends of its descriptors. */
struct fn {
	pid_t pid;
	int chan;     /* our end of its channel (its fd 3) */
	int in, out;  /* write end of its stdin, read end of its stdout */
	uint64_t chan_ino;   /* inode of its end of the channel */
};

/* The descriptors for one instance: their ends in (*theirs), ours in fn. */
static int fn_fds(struct fn *f, int theirs[3])
{
	int sv[2], in[2], out[2];
	struct stat st;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -1;
	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0)
		return -1;
	f->chan = sv[0], f->in = in[1], f->out = out[0];
	if (fstat(sv[1], &st) < 0)
		return -1;
	f->chan_ino = st.st_ino;   /* the same inode as seen from the child */
	theirs[0] = in[0], theirs[1] = out[1], theirs[2] = sv[1];   /* fd 0, 1, 3 */
	return 0;
}

static void fn_close(struct fn *f)
{
	close(f->chan);
	close(f->in);
	close(f->out);
}

static int fn_spawn_holding(struct fn *f, char *seed, char *holding)
{
	char *argv[] = { (char *)target_path, seed, holding, NULL };
	int theirs[3], null_fd = open("/dev/null", O_RDWR | O_CLOEXEC), r;

	if (null_fd < 0 || fn_fds(f, theirs) < 0)
		return -errno;
	struct phos_fd_map map[] = { { theirs[0], 0 }, { theirs[1], 1 }, { null_fd, 2 }, { theirs[2], 3 } };
	r = phos_criu_spawn(argv, NULL, map, 4, NULL, &f->pid);
	for (int i = 0; i < 3; i++)
		close(theirs[i]);
	close(null_fd);
	return r;
}

static int fn_spawn(struct fn *f, char *seed)
{
	return fn_spawn_holding(f, seed, NULL);
}

/* Whether dir/dump.log has needle. */
static bool log_has(const char *dir, const char *needle)
{
	static char buf[1 << 20];
	char path[512];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/dump.log", dir);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	return strstr(buf, needle) != NULL;
}

/* CRIU heard "no such family" for TCP: the socket-table shim answered. */
#define SHIM_ANSWERED "family AF_INET proto IPPROTO_TCP: -2"

/* The socket-table shim (runtime/criu/criu_sockdiag.c): it answers CRIU's
 * internet socket queries only for trees that hold no socket but unix ones
 * (the ahead dump checks that it does); a tree with a TCP socket, in the
 * root or in a child, or a thread whose fd table it cannot see through, gets
 * CRIU's own queries. This kernel's CRIU cannot dump an internet socket
 * (SO_PASSCRED on it: "Operation not supported"), so those dumps may fail:
 * what is checked is that the kernel was asked. */
static void test_sockdiag(const char *base)
{
	static char *const holds[] = { "inet", "child-inet", "own-files" };
	char dir[256], reply[160], err[1024];

	for (unsigned i = 0; i < sizeof(holds) / sizeof(holds[0]); i++) {
		struct fn f;
		uint64_t ino;
		int r;

		CHECK(fn_spawn_holding(&f, SEED, holds[i]) == 0, "spawn holding %s", holds[i]);
		ino = f.chan_ino;
		ask(f.chan, "get\n", reply, sizeof(reply));
		CHECK(strstr(reply, "count=0 "), "holding %s: %s", holds[i], reply);
		snprintf(dir, sizeof(dir), "%s/sockdiag-%s", base, holds[i]);
		mkdir(dir, 0700);
		r = phos_criu_dump_flags(criu, f.pid, dir, &ino, 1, PHOS_CRIU_LEAVE_RUNNING, -1, err, sizeof(err));
		printf("dump holding %s: %d %s\n", holds[i], r, r ? err : "");
		CHECK(log_has(dir, "Seized task"), "holding %s: CRIU did not get to the task", holds[i]);
		CHECK(!log_has(dir, SHIM_ANSWERED), "holding %s: the shim answered CRIU's TCP query", holds[i]);
		if (!strcmp(holds[i], "own-files"))   /* it has no internet socket: CRIU dumps it */
			CHECK(r == 0, "holding %s: %d %s", holds[i], r, err);
		kill(f.pid, SIGKILL);
		waitpid(f.pid, NULL, 0);
		fn_close(&f);
	}
}

/* The init of a pid namespace, catching no signal and ignoring none. */
static bool is_pidns_init(pid_t pid)
{
	char path[64], line[256];
	bool init = false, sigs_default = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "NSpid:", 6)) {   /* "NSpid:\t<host pid>\t1" */
			char *last = strrchr(line, '\t');

			init = last && last != strchr(line, '\t') && atoi(last + 1) == 1;
		} else if (!strncmp(line, "SigIgn:", 7)) {
			sigs_default = strtoull(line + 7, NULL, 16) == 0;
		}
	fclose(f);
	return init && sigs_default;
}

/* True when pid may write files of any size (CRIU restored its limit). */
static bool fsize_unlimited(pid_t pid)
{
	char path[64], line[256];
	bool unlimited = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "Max file size", 13))
			unlimited = strstr(line, "unlimited") != NULL;
	fclose(f);
	return unlimited;
}

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

/* ---- spawning ---- */

static void test_find(void)
{
	char path[4096], err[256], *saved = strdup(getenv("PHOS_CRIU"));
	int r;

	setenv("PHOS_CRIU", "/nonexistent/criu", 1);
	r = phos_criu_find(path, sizeof(path), err, sizeof(err));
	CHECK(r == -ENOENT && strstr(err, "PHOS_CRIU"), "find with a bad PHOS_CRIU: %d %s", r, err);
	setenv("PHOS_CRIU", saved, 1);
	r = phos_criu_find(path, 8, err, sizeof(err));
	CHECK(r == -ENAMETOOLONG, "find into a short buffer: %d", r);
	free(saved);
}

static void test_spawn(void)
{
	char key[64], out[256], cmd[200], *argv[] = { "sh", "-c", cmd, NULL };
	int p[2], a, b, n, r, st;
	pid_t pid;

	/* a swap: our a becomes the child's b and our b its a, so that every
	 * source is also a target (and the child's stdout is the pipe) */
	if (pipe2(p, O_CLOEXEC) < 0)
		return;
	a = fcntl(p[0], F_DUPFD_CLOEXEC, 40);
	n = open("/dev/null", O_RDONLY | O_CLOEXEC);
	b = fcntl(n, F_DUPFD_CLOEXEC, a + 1);
	close(n);
	snprintf(cmd, sizeof(cmd), "readlink /proc/self/fd/%d /proc/self/fd/%d; test -e /proc/self/fd/0 || echo closed",
		 a, b);
	struct phos_fd_map map[] = { { a, b }, { b, a }, { p[1], 1 } };
	r = phos_criu_spawn(argv, NULL, map, 3, NULL, &pid);
	CHECK(r == 0, "spawn sh: %d", r);
	close(p[1]);
	if (r == 0) {
		phos_criu_fd_key(0, a, key, sizeof(key));
		read_line(p[0], out, sizeof(out));
		CHECK(!strcmp(out, "/dev/null\n"), "child's fd %d is %s", a, out);
		read_line(p[0], out, sizeof(out));
		CHECK(!strncmp(out, key, strlen(key)), "child's fd %d is %s, not %s", b, out, key);
		read_line(p[0], out, sizeof(out));
		CHECK(!strcmp(out, "closed\n"), "child's fd 0 open: %s", out);
		CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && !WEXITSTATUS(st), "sh: %#x", st);
	}
	close(a), close(b), close(p[0]);

	char *bad[] = { "/nonexistent/fn", NULL };
	r = phos_criu_spawn(bad, NULL, NULL, 0, NULL, &pid);
	CHECK(r == -ENOENT, "spawn of a missing program: %d", r);
	struct phos_fd_map twice[] = { { 0, 3 }, { 1, 3 } };
	CHECK(phos_criu_spawn(argv, NULL, twice, 2, NULL, &pid) == -EINVAL, "two descriptors for fd 3 accepted");
}

/* ---- dump and concurrent restores ---- */

struct image {
	char dir[256];
	char key[4][64];   /* keys of the original's fds 0..3 */
	char ref[4][160];  /* what a never-dumped twin answers to its 2nd..5th "get" */
};

struct copy {
	const struct image *img;
	pthread_barrier_t *all_up;
	struct fn f;
	int r;
	char err[512];
	char got[4][160];
	char echo[64];
};

static void *restore_copy(void *arg)
{
	struct copy *c = arg;
	int theirs[3];

	c->r = -1;
	if (fn_fds(&c->f, theirs) < 0) {
		pthread_barrier_wait(c->all_up);
		return NULL;
	}
	const struct phos_criu_inherit inh[] = {
		{ theirs[2], 3, c->img->key[3] },
		{ theirs[0], 0, c->img->key[0] },
		{ theirs[1], 1, c->img->key[1] },
	};
	c->r = phos_criu_restore(criu, c->img->dir, inh, 3, 0, 0, -1, &c->f.pid, c->err, sizeof(c->err));
	for (int i = 0; i < 3; i++)
		close(theirs[i]);
	/* every copy is up before any is asked: they live at the same time */
	pthread_barrier_wait(c->all_up);
	if (c->r < 0)
		return NULL;
	ask(c->f.chan, "get\n", c->got[0], sizeof(c->got[0]));
	if (write(c->f.in, "ping\n", 5) == 5)
		read_line(c->f.out, c->echo, sizeof(c->echo));
	return NULL;
}

static void test_dump_restore(struct image *img)
{
	char reply[160], err[1024], tmpdir[300];
	struct copy copies[NCOPIES] = { 0 };
	pthread_t th[NCOPIES];
	pthread_barrier_t all_up;
	struct fn orig, twin;
	int r, n_img, status;

	/* the never-dumped twin: what the copies should say */
	CHECK(fn_spawn(&twin, SEED) == 0, "spawn twin");
	ask(twin.chan, "get\n", reply, sizeof(reply));
	for (int i = 0; i < 4; i++)
		ask(twin.chan, "get\n", img->ref[i], sizeof(img->ref[i]));
	fn_close(&twin);
	waitpid(twin.pid, &status, 0);
	CHECK(strstr(img->ref[0], "count=1 "), "twin said %s", img->ref[0]);

	/* the original: a pid namespace init, session leader, exactly fds 0-3 */
	r = fn_spawn(&orig, SEED);
	CHECK(r == 0, "spawn target: %d", r);
	if (r < 0)
		return;
	ask(orig.chan, "get\n", reply, sizeof(reply));
	CHECK(strstr(reply, "seed=" SEED " count=0 "), "original said %s", reply);
	CHECK(is_pidns_init(orig.pid), "target is not the init of a pid namespace, or ignores signals");
	CHECK(getsid(orig.pid) == orig.pid, "target is not a session leader");
	snprintf(tmpdir, sizeof(tmpdir), "/proc/%d/fd", (int)orig.pid);
	CHECK(count_entries(tmpdir) == 4, "target has %d fds, not 4", count_entries(tmpdir));

	for (int fd = 0; fd < 4; fd++)
		CHECK(phos_criu_fd_key(orig.pid, fd, img->key[fd], sizeof(img->key[fd])) == 0, "key of fd %d", fd);
	CHECK(!strncmp(img->key[0], "pipe:[", 6) && !strncmp(img->key[1], "pipe:[", 6), "stdio keys %s %s",
	      img->key[0], img->key[1]);
	CHECK(!strcmp(img->key[2], "/dev/null"), "fd 2 key %s", img->key[2]);
	uint64_t ino = orig.chan_ino;
	snprintf(reply, sizeof(reply), "socket:[%" PRIu64 "]", ino);
	CHECK(!strcmp(img->key[3], reply), "channel key %s, not %s", img->key[3], reply);

	r = phos_criu_dump(criu, orig.pid, img->dir, &ino, 1, -1, err, sizeof(err));
	CHECK(r == 0, "dump: %d %s", r, err);
	CHECK(kill(orig.pid, 0) < 0 && errno == ESRCH, "the original is still there after its dump");
	fn_close(&orig);
	if (r < 0)
		return;
	n_img = count_entries(img->dir);

	/* three copies at once; the temp files of each go to a private TMPDIR */
	snprintf(tmpdir, sizeof(tmpdir), "%s.tmp", img->dir);
	mkdir(tmpdir, 0700);
	setenv("TMPDIR", tmpdir, 1);
	pthread_barrier_init(&all_up, NULL, NCOPIES);
	for (int i = 0; i < NCOPIES; i++) {
		copies[i] = (struct copy){ .img = img, .all_up = &all_up };
		pthread_create(&th[i], NULL, restore_copy, &copies[i]);
	}
	for (int i = 0; i < NCOPIES; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&all_up);
	unsetenv("TMPDIR");
	CHECK(count_entries(tmpdir) == 0, "restores left %d files in TMPDIR", count_entries(tmpdir));
	rmdir(tmpdir);
	CHECK(count_entries(img->dir) == n_img, "restores wrote into the image dir");

	for (int i = 0; i < NCOPIES; i++) {
		struct copy *c = &copies[i];

		CHECK(c->r == 0, "restore %d: %d %s", i, c->r, c->err);
		if (c->r < 0)
			continue;
		CHECK(!strcmp(c->got[0], img->ref[0]), "copy %d said %s, the twin %s", i, c->got[0], img->ref[0]);
		CHECK(!strcmp(c->echo, "echo ping\n"), "copy %d stdio: %s", i, c->echo);
		CHECK(is_pidns_init(c->f.pid), "copy %d is not a pid namespace init", i);
		CHECK(fsize_unlimited(c->f.pid) == fsize_unlimited(getpid()), "copy %d kept CRIU's file size limit", i);
		for (int j = 0; j < i; j++)
			CHECK(c->f.pid != copies[j].f.pid, "copies %d and %d share pid %d", i, j, (int)c->f.pid);
	}
	/* independent: copy 0 moves on three times; the others are still at 2 */
	if (copies[0].r == 0)
		for (int k = 1; k < 4; k++) {
			ask(copies[0].f.chan, "get\n", reply, sizeof(reply));
			CHECK(!strcmp(reply, img->ref[k]), "copy 0, get %d: %s, not %s", k, reply, img->ref[k]);
		}
	for (int i = 1; i < NCOPIES; i++)
		if (copies[i].r == 0) {
			ask(copies[i].f.chan, "get\n", reply, sizeof(reply));
			CHECK(!strcmp(reply, img->ref[1]), "copy %d, 2nd get: %s", i, reply);
		}

	/* copy 0 ends on its own when its channel closes (we are its subreaper);
	 * the others are killed */
	for (int i = 0; i < NCOPIES; i++) {
		struct copy *c = &copies[i];

		if (c->r < 0)
			continue;
		if (i > 0)
			kill(c->f.pid, SIGKILL);
		fn_close(&c->f);
		CHECK(waitpid(c->f.pid, &status, 0) == c->f.pid, "copy %d not reaped: %s", i, strerror(errno));
		if (i == 0)
			CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "copy 0 ended with %#x", status);
		else
			CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "copy %d ended with %#x", i, status);
	}
}

/* ---- refusals ---- */

static void copy_dir(const char *from, const char *to)
{
	char cmd[700];

	snprintf(cmd, sizeof(cmd), "cp -a '%s/.' '%s/'", from, to);
	CHECK(system(cmd) == 0, "%s", cmd);
}

static int restore_with_channel(const struct image *img, const char *dir, char *err, size_t errlen)
{
	int sv[2], r;
	pid_t pid;

	socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
	const struct phos_criu_inherit inh[] = { { sv[1], 3, img->key[3] } };
	r = phos_criu_restore(criu, dir, inh, 1, 0, 0, -1, &pid, err, errlen);
	if (r == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	close(sv[0]);
	close(sv[1]);
	return r;
}

static void test_refusals(const struct image *img, const char *base)
{
	char dir[256], path[300], err[512];
	pid_t gone, pid;
	int r;

	gone = fork();
	if (gone == 0)
		_exit(0);
	waitpid(gone, NULL, 0);
	snprintf(dir, sizeof(dir), "%s/gone", base);
	mkdir(dir, 0700);
	r = phos_criu_dump(criu, gone, dir, NULL, 0, -1, err, sizeof(err));
	CHECK(r == -ESRCH && strstr(err, "Error ("), "dump of a dead pid: %d %s", r, err);
	printf("dump of a dead pid: %s\n", err);

	snprintf(dir, sizeof(dir), "%s/empty", base);
	mkdir(dir, 0700);
	r = phos_criu_restore(criu, dir, NULL, 0, 0, 0, -1, &pid, err, sizeof(err));
	CHECK(r == -EIO && strstr(err, "Error ("), "restore of an empty dir: %d %s", r, err);
	printf("restore of an empty dir: %s\n", err);
	CHECK(count_entries(dir) == 0, "restore wrote into the empty image dir");

	r = phos_criu_restore(criu, "/nonexistent/image", NULL, 0, 0, 0, -1, &pid, err, sizeof(err));
	CHECK(r == -EIO && strstr(err, "Can't open dir"), "restore of a missing dir: %d %s", r, err);

	if (img->key[3][0]) {
		r = phos_criu_restore(criu, img->dir, NULL, 0, 0, 0, -1, &pid, err, sizeof(err));
		CHECK(r == -EIO && strstr(err, "External socket"), "restore without its channel: %d %s", r, err);
		printf("restore without its channel: %s\n", err);
	}

	static const char *const victims[] = { "core-1.img", "pagemap-1.img", "pages-1.img" };
	char *timeout = strdup(getenv("PHOS_CRIU_TIMEOUT"));

	setenv("PHOS_CRIU_TIMEOUT", "5", 1);   /* a tiny image restores in ~40 ms */
	for (unsigned i = 0; i < sizeof(victims) / sizeof(victims[0]); i++) {
		struct stat st;

		snprintf(dir, sizeof(dir), "%s/bad-%u", base, i);
		mkdir(dir, 0700);
		copy_dir(img->dir, dir);
		snprintf(path, sizeof(path), "%s/%s", dir, victims[i]);
		if (stat(path, &st) < 0 || truncate(path, st.st_size / 2) < 0) {
			CHECK(0, "truncate %s", path);
			continue;
		}
		r = restore_with_channel(img, dir, err, sizeof(err));
		/* a truncated pages-1.img makes CRIU 4.1.1's restorer retry its
		 * read forever: the time limit (PHOS_CRIU_TIMEOUT) ends it */
		CHECK((r == -EIO && strstr(err, "Error (")) || (r == -ETIMEDOUT && strstr(err, "killed after")),
		      "restore with %s truncated: %d %s", victims[i], r, err);
		printf("restore with %s truncated: %s\n", victims[i], err);
	}
	setenv("PHOS_CRIU_TIMEOUT", timeout, 1);
	free(timeout);
}

/* The task's state letter (R, S, t, ...), or '?'. */
static char task_state(pid_t pid)
{
	char path[64], buf[512], *paren;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return '?';
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	paren = strrchr(buf, ')');
	return paren && paren[1] == ' ' ? paren[2] : '?';
}

struct dumped_seen {
	pid_t pid;
	const char *dir;
	int calls;
	char state;       /* the task's, when told */
	bool inventory;   /* CRIU's inventory.img was in dir then */
};

static void on_dumped(void *arg)
{
	struct dumped_seen *d = arg;
	char path[512];

	snprintf(path, sizeof(path), "%s/inventory.img", d->dir);
	d->calls++;
	d->state = task_state(d->pid);
	d->inventory = access(path, F_OK) == 0;
}

static void test_ahead(const char *base, const char *gate)
{
	struct dumped_seen dumped;
	char dir[256], reply[160], err[1024], found[4096];
	struct phos_criu_ahead *a = NULL;
	struct fn f;
	uint64_t ino;
	int r, sv[2];
	pid_t gone, pid;

	CHECK(phos_criu_gate_find(found, sizeof(found)) == 0 && realpath(gate, dir) && !strcmp(found, dir),
	      "gate found: %s", found);
	CHECK(fn_spawn(&f, SEED) == 0, "spawn for the ahead dumps");
	ino = f.chan_ino;
	ask(f.chan, "get\n", reply, sizeof(reply));
	CHECK(strstr(reply, "count=0 "), "before: %s", reply);

	/* ready, then let go: the task runs meanwhile, and after */
	snprintf(dir, sizeof(dir), "%s/ahead", base);
	mkdir(dir, 0700);
	r = phos_criu_dump_ahead(criu, gate, f.pid, dir, &ino, 1, PHOS_CRIU_LEAVE_RUNNING, &a, err, sizeof(err));
	CHECK(r == 0 && a, "dump ahead: %d %s", r, err);
	ask(f.chan, "get\n", reply, sizeof(reply));
	CHECK(strstr(reply, "count=1 "), "while CRIU waits at its gate: %s", reply);
	CHECK(count_entries(dir) == 1, "CRIU wrote more than its log before its gate: %d", count_entries(dir));
	dumped = (struct dumped_seen){ .pid = f.pid, .dir = dir };
	r = phos_criu_dump_go_then(a, on_dumped, &dumped, err, sizeof(err));
	CHECK(r == 0, "dump go: %d %s", r, err);
	/* told at post-dump: the image whole, the task still held by CRIU */
	CHECK(dumped.calls == 1, "the dumped callback ran %d times", dumped.calls);
	CHECK(dumped.state == 't' && dumped.inventory, "at the dumped callback: task state %c, inventory %s",
	      dumped.state, dumped.inventory ? "written" : "missing");
	if (strcmp(getenv("PHOS_CRIU_SOCKDIAG"), "0"))   /* only unix sockets and pipes: no table walk */
		CHECK(log_has(dir, SHIM_ANSWERED), "the socket-table shim did not answer CRIU's TCP query");
	CHECK(task_state(f.pid) != 't' && kill(f.pid, 0) == 0, "the task is not running on after the dump");
	ask(f.chan, "get\n", reply, sizeof(reply));
	CHECK(strstr(reply, "count=2 "), "after the dump: %s", reply);

	/* the image is the task at the go: its next answer is count=2 */
	socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
	snprintf(reply, sizeof(reply), "socket:[%" PRIu64 "]", ino);
	const struct phos_criu_inherit inh[] = { { sv[1], 3, reply } };
	r = phos_criu_restore(criu, dir, inh, 1, 0, 0, -1, &pid, err, sizeof(err));
	CHECK(r == 0, "restore of the ahead dump: %d %s", r, err);
	if (r == 0) {
		ask(sv[0], "get\n", reply, sizeof(reply));
		CHECK(strstr(reply, "count=2 "), "restored from the ahead dump: %s", reply);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	close(sv[0]);
	close(sv[1]);

	/* ready, then dropped: no image, the task untouched */
	snprintf(dir, sizeof(dir), "%s/dropped", base);
	mkdir(dir, 0700);
	r = phos_criu_dump_ahead(criu, gate, f.pid, dir, &ino, 1, PHOS_CRIU_LEAVE_RUNNING, &a, err, sizeof(err));
	CHECK(r == 0 && a, "dump ahead to drop: %d %s", r, err);
	phos_criu_dump_drop(a);
	CHECK(task_state(f.pid) != 't' && kill(f.pid, 0) == 0, "the task is not running after a drop");
	ask(f.chan, "get\n", reply, sizeof(reply));
	CHECK(strstr(reply, "count=3 "), "after a drop: %s", reply);
	snprintf(err, sizeof(err), "%s/core-1.img", dir);
	CHECK(access(err, F_OK) < 0, "a dropped dump wrote an image");
	kill(f.pid, SIGKILL);
	waitpid(f.pid, NULL, 0);
	fn_close(&f);

	/* a dead pid: refused, with CRIU's reason, nothing waiting */
	gone = fork();
	if (gone == 0)
		_exit(0);
	waitpid(gone, NULL, 0);
	snprintf(dir, sizeof(dir), "%s/ahead-gone", base);
	mkdir(dir, 0700);
	a = NULL;
	r = phos_criu_dump_ahead(criu, gate, gone, dir, NULL, 0, PHOS_CRIU_LEAVE_RUNNING, &a, err, sizeof(err));
	CHECK(r == -ESRCH && !a && *err, "dump ahead of a dead pid: %d %s", r, err);
	printf("dump ahead of a dead pid: %s\n", err);
}

/* Runs in a forked child before this process ever asks phos_fault (which reads
 * PHOS_FAULT once): the armed points fail without running CRIU. */
static int fault_child(const char *base)
{
	char dir[256], err[256];
	struct fn f;
	pid_t pid;
	int r, bad = 0;

	setenv("PHOS_FAULT", "criu_dump,criu_restore", 1);
	setenv("TMPDIR", base, 1);
	snprintf(dir, sizeof(dir), "%s/fault", base);
	mkdir(dir, 0700);
	if (fn_spawn(&f, SEED) < 0)
		return 2;
	r = phos_criu_dump(criu, f.pid, dir, NULL, 0, -1, err, sizeof(err));
	if (r != -EIO || strcmp(err, "injected fault: criu_dump"))
		bad |= 4, fprintf(stderr, "fault dump: %d %s\n", r, err);
	if (kill(f.pid, 0) < 0 || count_entries(dir) != 0)
		bad |= 8, fprintf(stderr, "CRIU ran despite the fault\n");
	r = phos_criu_restore(criu, dir, NULL, 0, 0, 0, -1, &pid, err, sizeof(err));
	if (r != -EIO || strcmp(err, "injected fault: criu_restore"))
		bad |= 16, fprintf(stderr, "fault restore: %d %s\n", r, err);
	if (count_entries(base) != 1)
		bad |= 32, fprintf(stderr, "the faulted restore made temp files\n");
	kill(f.pid, SIGKILL);
	waitpid(f.pid, NULL, 0);
	fn_close(&f);
	return bad;
}

static void test_faults(const char *base)
{
	int st;
	pid_t pid = fork();

	if (pid == 0)
		_exit(fault_child(base));
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "fault child: %#x", st);
}

static void remove_tree(const char *dir)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
}

int main(int argc, char **argv)
{
	char base[] = "/tmp/phos-test-criu-XXXXXX", err[512];
	struct image img = { 0 };

	if (argc < 2) {
		fprintf(stderr, "usage: %s CRIU_TARGET [CRIU]\n", argv[0]);
		return 2;
	}
	target_path = argv[1];
	if (geteuid() != 0) {
		printf("SKIP: CRIU needs root\n");
		return 77;
	}
	if (argc > 2) {
		if (access(argv[2], X_OK) != 0) {
			printf("SKIP: no CRIU at %s (tools/setup makes it)\n", argv[2]);
			return 77;
		}
		setenv("PHOS_CRIU", argv[2], 1);
	}
	if (phos_criu_find(criu, sizeof(criu), err, sizeof(err)) < 0) {
		printf("SKIP: %s\n", err);
		return 77;
	}
	/* restored roots are reparented to us, so that we can reap them */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
		perror("PR_SET_CHILD_SUBREAPER");
		return 1;
	}
	setenv("PHOS_CRIU_TIMEOUT", "20", 0);
	signal(SIGPIPE, SIG_IGN);   /* the children must not inherit it (see spawn) */
	if (!mkdtemp(base)) {
		perror("mkdtemp");
		return 1;
	}
	printf("criu: %s\n", criu);

	test_faults(base);
	if (getenv("PHOS_CRIU"))
		test_find();
	test_spawn();
	snprintf(img.dir, sizeof(img.dir), "%s/image", base);
	mkdir(img.dir, 0700);
	test_dump_restore(&img);
	test_refusals(&img, base);
	if (argc > 4 && access(argv[4], R_OK) == 0) {
		setenv("PHOS_CRIU_SOCKDIAG", argv[4], 1);
		test_sockdiag(base);
	} else {
		setenv("PHOS_CRIU_SOCKDIAG", "0", 1);
		printf("no socket-table shim: its checks are not made\n");
	}
	if (argc > 3 && access(argv[3], X_OK) == 0) {
		setenv("PHOS_CRIU_GATE", argv[3], 1);
		test_ahead(base, argv[3]);
	} else {
		printf("no gate program: the ahead dumps are not tried\n");
	}

	if (failures)
		fprintf(stderr, "%d failure(s); images kept in %s\n", failures, base);
	else
		remove_tree(base);
	return failures ? 1 : 0;
}
