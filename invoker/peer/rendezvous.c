/* SPDX-License-Identifier: MIT */
/*
 * Ranks of one function on several invokers (issue 14): the NCCL unique id,
 * and the meeting files of communicators made again after a restore, pass
 * through the invokers rather than through a file system the hosts share.
 *
 *   deploy {"ranks": {"rank": R, "nranks": N}}                  rank 0 (leader)
 *   deploy {"ranks": {"rank": R, "nranks": N,                   rank R > 0
 *                     "leader": "http://HOST:PORT", "leader_token": T}}
 *   (T: rank 0's invoker's peer token, token.h; its admin token works too)
 *
 * Each such function has a rendezvous folder, STATE.rendezvous/NAME (mode
 * 0700, the function's user; STATE itself stays the invoker's alone, the
 * top folder is 0711: the function's user must be able to pass through the
 * folder that holds STATE), in its environment as PHOS_RENDEZVOUS_DIR, and
 * as PHOS_NCCL_REINIT_DIR (the stand-in's meeting place after a restore)
 * unless the deploy's env sets it; PHOS_RANK and PHOS_NRANKS say the rank.
 * The program exchanges its id through files there (functions/examples:
 * nccl_id.h takes a relative id path inside it).
 *
 *   leader   GET /system/functions/NAME/rendezvous (its peer token): the
 *            folder's files, {"files": {"FILE": "HEX", ...}}, at most
 *            RDV_MAX_FILES of RDV_MAX_BYTES, names [A-Za-z0-9._-], no dot
 *            first (a file being written is a dot file)
 *   rank R   a thread polls the leader's function of the same name every
 *            RDV_POLL_MS while the function is deployed, and mirrors what
 *            it gets into its own folder (each file written to a dot file and
 *            renamed); a file it mirrored that the leader no longer has is
 *            removed. The rank's own files are left alone.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <curl/curl.h>

#include "criu.h"
#include "invoker.h"
#include "log.h"
#include "pull.h"

#define RDV_MAX_FILES 64
#define RDV_MAX_BYTES 4096
#define RDV_POLL_MS 50
#define RDV_ANSWER_MAX (RDV_MAX_FILES * (2 * RDV_MAX_BYTES + 128) + 1024)

static bool file_name_ok(const char *n)
{
	size_t len = strlen(n);

	return len >= 1 && len <= 64 && n[0] != '.' && strspn(n, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
							    "0123456789._-") == len;
}

/* Removes the files of folder dir (not the folder). */
static void empty_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
}

int inv_rendezvous_prepare(struct inv_function *f, char *err, size_t errlen)
{
	char top[PATH_MAX], dir[PATH_MAX];
	const struct phos_criu_user *u = inv_cfg.paths.run_as;
	struct stat st;

	if (!f->ranks.on)
		return 0;
	snprintf(top, sizeof(top), "%s.rendezvous", inv_cfg.state_dir);
	inv_rendezvous_path(f, dir, sizeof(dir));
	/* the function's user may pass through the top folder, not list it; one
	 * that is not ours (or a link) is not used */
	if (mkdir(top, 0711) < 0 && errno != EEXIST) {
		phos_errf(err, errlen, "rendezvous folder %s: %s", top, strerror(errno));
		return -errno;
	}
	if (lstat(top, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
	    ((st.st_mode & 07777) != 0711 && chmod(top, 0711) < 0)) {
		phos_errf(err, errlen, "rendezvous folder %s: not a folder of ours", top);
		return -EPERM;
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		phos_errf(err, errlen, "rendezvous folder %s: %s", dir, strerror(errno));
		return -errno;
	}
	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		phos_errf(err, errlen, "rendezvous folder %s: not a folder", dir);
		return -EPERM;
	}
	empty_dir(dir);   /* nothing of an earlier deploy of the name */
	if (u && chown(dir, u->uid, u->gid) < 0) {
		phos_errf(err, errlen, "rendezvous folder %s: chown: %s", dir, strerror(errno));
		return -errno;
	}
	return 0;
}

void inv_rendezvous_drop(struct inv_function *f)
{
	char dir[PATH_MAX];

	if (!f->ranks.on)
		return;
	inv_rendezvous_path(f, dir, sizeof(dir));
	empty_dir(dir);
	if (rmdir(dir) < 0 && errno != ENOENT)
		phos_warn("%s: cannot remove %s: %s", f->name, dir, strerror(errno));
}

/* --- the leader's side --- */

int inv_rendezvous_describe(const char *name, json_t **ret_body)
{
	struct inv_function *f = inv_function_get(name);
	char dir[PATH_MAX];
	json_t *files;
	struct dirent *e;
	unsigned n = 0;
	DIR *d;

	if (!f) {
		*ret_body = json_pack("{s:s}", "error", "no such function");
		return 404;
	}
	if (!f->ranks.on) {
		inv_function_unref(f);
		*ret_body = json_pack("{s:s}", "error", "the function has no ranks (deploy's \"ranks\")");
		return 404;
	}
	inv_rendezvous_path(f, dir, sizeof(dir));
	inv_function_unref(f);
	files = json_object();
	d = opendir(dir);
	while (files && d && (e = readdir(d)) && n < RDV_MAX_FILES) {
		char hex[2 * RDV_MAX_BYTES + 1];
		uint8_t buf[RDV_MAX_BYTES + 1];
		struct stat st;
		ssize_t got;
		int fd;

		if (!file_name_ok(e->d_name))
			continue;
		fd = openat(dirfd(d), e->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue;
		got = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, buf, sizeof(buf)) : -1;
		close(fd);
		if (got < 0 || got > RDV_MAX_BYTES)
			continue;   /* not a plain small file: not for the ranks */
		for (ssize_t i = 0; i < got; i++)
			snprintf(hex + 2 * i, 3, "%02x", buf[i]);
		hex[2 * got] = '\0';
		json_object_set_new(files, e->d_name, json_string(hex));
		n++;
	}
	if (d)
		closedir(d);
	*ret_body = files ? json_pack("{s:s,s:o}", "name", name, "files", files) : NULL;
	return *ret_body ? 200 : 500;
}

/* --- a follower's mirror --- */

struct mirror {
	struct inv_function *f;
	char url[1024], auth[PULL_TOKEN_MAX + 32], dir[PATH_MAX];
	char mirrored[RDV_MAX_FILES][65];   /* names it wrote */
	unsigned nmirrored;
	char last_err[256];
};

struct answer {
	char *buf;
	size_t len;
};

static size_t on_data(char *data, size_t size, size_t nmemb, void *arg)
{
	struct answer *a = arg;
	size_t n = size * nmemb;
	char *b;

	if (a->len + n > RDV_ANSWER_MAX)
		return 0;   /* too big: the transfer fails */
	b = realloc(a->buf, a->len + n + 1);
	if (!b)
		return 0;
	memcpy(b + a->len, data, n);
	a->buf = b;
	a->len += n;
	a->buf[a->len] = '\0';
	return n;
}

/* Says a failure once until it changes (the mirror polls). */
static void say(struct mirror *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct mirror *m, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (strcmp(msg, m->last_err))
		phos_warn("%s: rendezvous with %s: %s", m->f->name, m->url, msg);
	snprintf(m->last_err, sizeof(m->last_err), "%s", msg);
}

static bool hex_decode(const char *hex, uint8_t *out, size_t *ret_len)
{
	size_t n = strlen(hex);

	if (n % 2 || n / 2 > RDV_MAX_BYTES)
		return false;
	for (size_t i = 0; i < n / 2; i++) {
		if (!isxdigit((unsigned char)hex[2 * i]) || !isxdigit((unsigned char)hex[2 * i + 1]))
			return false;
		sscanf(hex + 2 * i, "%2hhx", &out[i]);
	}
	*ret_len = n / 2;
	return true;
}

/* name with content data (len bytes) in the mirror's folder, unless it holds
 * that already: written to a dot file, renamed over. */
static void put_file(struct mirror *m, const char *name, const uint8_t *data, size_t len)
{
	char path[PATH_MAX + 80], tmp[PATH_MAX + 80];
	uint8_t have[RDV_MAX_BYTES + 1];
	ssize_t got = -1;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", m->dir, name);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd >= 0) {
		got = read(fd, have, sizeof(have));
		close(fd);
	}
	if (got == (ssize_t)len && !memcmp(have, data, len))
		return;
	/* The folder is the function's user's: a new file of ours, never one
	 * (or a link) found there. */
	snprintf(tmp, sizeof(tmp), "%s/.%s.mirror", m->dir, name);
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	/* readable by the rank's own user (the folder is its, 0700): our umask
	 * (077) made it 0600, ours alone, and a rank running as nobody could not
	 * read the id it waits for */
	if (fd < 0 || fchmod(fd, 0644) < 0 || write(fd, data, len) != (ssize_t)len || close(fd) < 0 ||
	    rename(tmp, path) < 0) {
		say(m, "cannot write %s: %s", path, strerror(errno));
		if (fd >= 0)
			unlink(tmp);
		return;
	}
	for (unsigned i = 0; i < m->nmirrored; i++)
		if (!strcmp(m->mirrored[i], name))
			return;
	if (m->nmirrored < RDV_MAX_FILES)
		snprintf(m->mirrored[m->nmirrored++], sizeof(m->mirrored[0]), "%s", name);
}

static void mirror_once(struct mirror *m)
{
	struct answer a = { 0 };
	struct curl_slist *h;
	json_t *j = NULL, *files, *v;
	const char *name;
	long status = 0;
	CURLcode cr;
	CURL *c;

	if (access(m->dir, F_OK) < 0)
		return;   /* not made yet: the deploy makes it before the program runs */
	h = curl_slist_append(NULL, m->auth);
	c = curl_easy_init();
	if (!c || !h) {
		curl_slist_free_all(h);
		if (c)
			curl_easy_cleanup(c);
		return;
	}
	curl_easy_setopt(c, CURLOPT_URL, m->url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 5L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &a);
	cr = curl_easy_perform(c);
	if (cr == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(h);
	curl_easy_cleanup(c);
	if (cr != CURLE_OK || status != 200) {
		if (cr != CURLE_OK)
			say(m, "%s", curl_easy_strerror(cr));
		else
			say(m, "HTTP %ld", status);
		free(a.buf);
		return;
	}
	j = a.buf ? json_loadb(a.buf, a.len, 0, NULL) : NULL;
	free(a.buf);
	files = json_object_get(j, "files");
	if (!json_is_object(files) || json_object_size(files) > RDV_MAX_FILES) {
		say(m, "a bad answer");
		json_decref(j);
		return;
	}
	m->last_err[0] = '\0';
	json_object_foreach(files, name, v) {
		uint8_t data[RDV_MAX_BYTES];
		size_t len;

		if (file_name_ok(name) && json_is_string(v) && hex_decode(json_string_value(v), data, &len))
			put_file(m, name, data, len);
	}
	/* what the leader removed (a meeting done) goes here too */
	for (unsigned i = 0; i < m->nmirrored;) {
		char path[PATH_MAX + 80];

		if (json_object_get(files, m->mirrored[i])) {
			i++;
			continue;
		}
		snprintf(path, sizeof(path), "%s/%s", m->dir, m->mirrored[i]);
		unlink(path);
		memmove(m->mirrored[i], m->mirrored[i + 1], (m->nmirrored - i - 1) * sizeof(m->mirrored[0]));
		m->nmirrored--;
	}
	json_decref(j);
}

static bool mirror_done(struct inv_function *f)
{
	bool done;

	pthread_mutex_lock(&f->lock);
	done = f->removed || (f->deploy_done && !f->ready);
	pthread_mutex_unlock(&f->lock);
	return done || inv_draining;
}

static void *mirror_main(void *arg)
{
	struct mirror *m = arg;

	while (!mirror_done(m->f)) {
		mirror_once(m);
		usleep(RDV_POLL_MS * 1000);
	}
	explicit_bzero(m->auth, sizeof(m->auth));
	inv_function_unref(m->f);
	free(m);
	return NULL;
}

int inv_rendezvous_start(struct inv_function *f)
{
	struct mirror *m;
	pthread_attr_t attr;
	pthread_t th;
	int r;

	if (!f->ranks.on || f->ranks.rank == 0)
		return 0;
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->f = f;
	snprintf(m->url, sizeof(m->url), "%s/system/functions/%s/rendezvous", f->ranks.leader, f->name);
	snprintf(m->auth, sizeof(m->auth), "Authorization: Bearer %s", f->ranks.leader_token);
	inv_rendezvous_path(f, m->dir, sizeof(m->dir));
	pthread_mutex_lock(&f->lock);
	f->refs++;   /* the mirror's, until it ends */
	pthread_mutex_unlock(&f->lock);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&th, &attr, mirror_main, m);
	pthread_attr_destroy(&attr);
	if (r) {
		explicit_bzero(m->auth, sizeof(m->auth));
		free(m);
		inv_function_unref(f);
		return -r;
	}
	return 0;
}
