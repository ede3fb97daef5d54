/* SPDX-License-Identifier: MIT */
/*
 * Async calls on disk, so that a restarted invoker runs what it accepted and
 * still answers for what it finished. One directory, STATE/calls/, mode 0700;
 * each call is one file named after its id, whose suffix is its state:
 *
 *   accept:  ID.req   (written to ID.tmp, then renamed: never half there)
 *   start:   ID.req ─rename─▶ ID.run (back to ID.req when it was refused
 *            before reaching the function: the function at capacity)
 *   checkpointed:  ID.ckpt (via ID.tmp) after each checkpoint of the running
 *            call (limits.checkpoint_ms): the checkpoint's name in
 *            STATE/checkpoints and how often the call was resumed already
 *   finish:  ID.res   (via ID.tmp), then ID.run and ID.ckpt removed
 *   evict:   ID.res removed
 *
 * Each file is one line of JSON (function, content type, times, status) and
 * then the body: the request's for .req/.run, the answer's for .res. At start,
 * .req calls are queued again; a .run call with a checkpoint (ID.ckpt, its
 * directory kept by inv_checkpoints_init as STATE/checkpoints/resume-ID) is
 * resumed from it, at most INV_MAX_RESUMES times; other .run calls (the
 * invoker stopped while they ran: they may have had effects) end as failed
 * with 503 and are not run again; .res records are kept while in retention,
 * and .tmp files are removed.
 * Nothing is fsynced: the files are there for a crash of the invoker, not of
 * the machine.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdio.h"
#include "image.h"
#include "invoker.h"
#include "log.h"

#include <time.h>

#define HEADER_MAX 4096
#define FILE_MAX ((size_t)INV_MAX_BODY_LIMIT + HEADER_MAX)

static int dir_fd = -1;

double inv_wall_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int inv_calls_store_init(void)
{
	char path[PATH_MAX];

	if (dir_fd >= 0)
		return 0;   /* (main opens it before inv_checkpoints_init, calls.c again) */
	if ((size_t)snprintf(path, sizeof(path), "%s/calls", inv_cfg.state_dir) >= sizeof(path))
		return -ENAMETOOLONG;
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return -errno;
	dir_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	return dir_fd < 0 ? -errno : 0;
}

void inv_calls_store_exit(void)
{
	if (dir_fd >= 0)
		close(dir_fd);
	dir_fd = -1;
}

/* Writes header line + body to ID.suffix, whole or not at all. */
static int store_write(const char *id, const char *suffix, json_t *header, const char *body, size_t len)
{
	char tmp[64], name[64];
	char *h = json_dumps(header, JSON_COMPACT);
	int fd, r;

	json_decref(header);
	if (!h)
		return -ENOMEM;
	snprintf(tmp, sizeof(tmp), "%s.tmp", id);
	snprintf(name, sizeof(name), "%s.%s", id, suffix);
	fd = openat(dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		free(h);
		return -errno;
	}
	r = phos_write_all(fd, h, strlen(h));
	if (!r)
		r = phos_write_all(fd, "\n", 1);
	if (!r)
		r = phos_write_all(fd, body, len);
	free(h);
	if (close(fd) < 0 && !r)
		r = -errno;
	if (!r && renameat(dir_fd, tmp, dir_fd, name) < 0)
		r = -errno;
	if (r)
		unlinkat(dir_fd, tmp, 0);
	return r;
}

int inv_calls_store_accept(const char *id, const char *function, const char *ctype, double accepted,
			   const char *body, size_t len)
{
	if (dir_fd < 0)
		return 0;
	return store_write(id, "req", json_pack("{s:s,s:s,s:f}", "function", function, "ctype", ctype, "accepted",
						accepted), body, len);
}

void inv_calls_store_mark(const char *id, bool running)
{
	char from[64], to[64];

	if (dir_fd < 0)
		return;
	snprintf(from, sizeof(from), "%s.%s", id, running ? "req" : "run");
	snprintf(to, sizeof(to), "%s.%s", id, running ? "run" : "req");
	if (renameat(dir_fd, from, dir_fd, to) < 0)
		phos_warn("call %s: cannot mark it running: %s", id, strerror(errno));
}

void inv_calls_store_ckpt(const char *id, const char *function, const char *checkpoint, unsigned resumes)
{
	int r;

	if (dir_fd < 0)
		return;
	r = store_write(id, "ckpt", json_pack("{s:s,s:s,s:i}", "function", function, "checkpoint", checkpoint,
					      "resumes", (json_int_t)resumes), "", 0);
	if (r < 0)
		phos_warn("call %s: cannot note its checkpoint: %s", id, strerror(-r));
}

void inv_calls_store_finish(const char *id, const char *function, bool ok, int code, bool truncated, double finished,
			    const char *body, size_t len)
{
	char name[64];
	int r;

	if (dir_fd < 0)
		return;
	r = store_write(id, "res", json_pack("{s:s,s:b,s:i,s:b,s:f}", "function", function, "ok", ok, "code", code,
					     "truncated", truncated, "finished", finished), body, len);
	if (r < 0)
		phos_warn("call %s: cannot store its result: %s", id, strerror(-r));
	snprintf(name, sizeof(name), "%s.run", id);
	unlinkat(dir_fd, name, 0);
	snprintf(name, sizeof(name), "%s.req", id);
	unlinkat(dir_fd, name, 0);
	snprintf(name, sizeof(name), "%s.ckpt", id);
	unlinkat(dir_fd, name, 0);
}

void inv_calls_store_drop(const char *id)
{
	char name[64];

	if (dir_fd < 0)
		return;
	snprintf(name, sizeof(name), "%s.res", id);
	unlinkat(dir_fd, name, 0);
}

/* Reads name into a header object and a malloc'ed body. */
static int store_read(const char *name, json_t **ret_header, char **ret_body, size_t *ret_len)
{
	int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	char *buf = NULL, *nl;
	size_t off = 0;
	json_t *h;
	int r = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > FILE_MAX) {
		close(fd);
		return -EINVAL;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	{
		ssize_t n = phos_read_full(fd, buf, (size_t)st.st_size);

		r = n < 0 ? (int)n : (size_t)n < (size_t)st.st_size ? -EINVAL : 0;
		off = n > 0 ? (size_t)n : 0;
	}
	close(fd);
	nl = r ? NULL : memchr(buf, '\n', off < HEADER_MAX ? off : HEADER_MAX);
	h = nl ? json_loadb(buf, (size_t)(nl - buf), 0, NULL) : NULL;
	if (!h || !json_is_object(h) || !json_is_string(json_object_get(h, "function"))) {
		json_decref(h);
		free(buf);
		return r ? r : -EINVAL;
	}
	*ret_len = off - (size_t)(nl + 1 - buf);
	memmove(buf, nl + 1, *ret_len);
	buf[*ret_len] = '\0';
	*ret_header = h;
	*ret_body = buf;
	return 0;
}

static bool id_valid(const char *s, size_t n)
{
	if (n != 32)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

/* A scan of STATE/calls from its start: 1 and *ret, 0 when there is no store,
 * or -errno. */
static int store_opendir(DIR **ret)
{
	int fd;

	if (dir_fd < 0)
		return 0;
	fd = dup(dir_fd);
	if (fd < 0 || !(*ret = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	rewinddir(*ret);   /* a dup shares its offset with dir_fd: an earlier scan left it at the end */
	return 1;
}

/* A checkpoint name as ID.ckpt gives it: one plain entry of STATE/checkpoints. */
static bool ckpt_name_valid(const char *s)
{
	return s && *s && strlen(s) < 256 && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..") &&
	       !strstr(s, ".tmp-");
}

/* ID.ckpt's checkpoint name and resumes, when ID.run is there too (the call was running). */
static bool ckpt_of_running(const char *id, char name[256], unsigned *resumes)
{
	char f[64];
	json_t *h = NULL;
	char *body = NULL;
	size_t len;
	bool ok;

	snprintf(f, sizeof(f), "%s.run", id);
	if (faccessat(dir_fd, f, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
		return false;
	snprintf(f, sizeof(f), "%s.ckpt", id);
	if (store_read(f, &h, &body, &len) < 0)
		return false;
	const char *c = json_string_value(json_object_get(h, "checkpoint"));
	json_int_t n = json_integer_value(json_object_get(h, "resumes"));
	ok = ckpt_name_valid(c) && n >= 0 && n < 1000;
	if (ok) {
		snprintf(name, 256, "%s", c);
		*resumes = (unsigned)n;
	}
	json_decref(h);
	free(body);
	return ok;
}

int inv_calls_store_resumable(void (*fn)(const char *id, const char *checkpoint, void *arg), void *arg)
{
	DIR *d;
	struct dirent *de;
	int r = store_opendir(&d);

	if (r <= 0)
		return r;
	while ((de = readdir(d))) {
		const char *dot = strchr(de->d_name, '.');
		char id[33], name[256];
		unsigned resumes;

		if (!dot || strcmp(dot, ".ckpt") || !id_valid(de->d_name, (size_t)(dot - de->d_name)))
			continue;
		memcpy(id, de->d_name, 32);
		id[32] = '\0';
		if (ckpt_of_running(id, name, &resumes))
			fn(id, name, arg);
	}
	closedir(d);
	return 0;
}

int inv_calls_store_load(const struct inv_calls_store_visitor *v)
{
	DIR *d;
	struct dirent *de;
	int r = store_opendir(&d);

	if (r <= 0)
		return r;
	while ((de = readdir(d))) {
		const char *dot = strchr(de->d_name, '.');
		char id[33];
		json_t *h = NULL;
		char *body = NULL;
		size_t len = 0;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (dot && !strcmp(dot, ".ckpt") && id_valid(de->d_name, (size_t)(dot - de->d_name))) {
			char run[64];   /* read with its .run; alone it is left from a finish cut short */

			snprintf(run, sizeof(run), "%.32s.run", de->d_name);
			if (faccessat(dir_fd, run, F_OK, AT_SYMLINK_NOFOLLOW) < 0)
				unlinkat(dir_fd, de->d_name, 0);
			continue;
		}
		if (!dot || !id_valid(de->d_name, (size_t)(dot - de->d_name)) ||
		    (strcmp(dot, ".req") && strcmp(dot, ".run") && strcmp(dot, ".res"))) {
			phos_warn("removed %s/calls/%s (an unfinished write or not a call)", inv_cfg.state_dir,
				  de->d_name);
			unlinkat(dir_fd, de->d_name, 0);
			continue;
		}
		memcpy(id, de->d_name, 32);
		id[32] = '\0';
		if (store_read(de->d_name, &h, &body, &len) < 0) {
			phos_warn("removed %s/calls/%s (unreadable)", inv_cfg.state_dir, de->d_name);
			unlinkat(dir_fd, de->d_name, 0);
			continue;
		}
		const char *fn = json_string_value(json_object_get(h, "function"));
		if (!strcmp(dot, ".req")) {
			const char *ct = json_string_value(json_object_get(h, "ctype"));

			v->queued(id, fn, ct ? ct : "application/octet-stream",
				  json_number_value(json_object_get(h, "accepted")), body, len);
		} else if (!strcmp(dot, ".run")) {
			static const char msg[] = "{\"error\":\"the invoker stopped while the call ran; it was not run again\"}";
			static const char many[] = "{\"error\":\"the invoker stopped while the call ran, again; it was "
						   "resumed from its checkpoints too often and is not run again\"}";
			const char *ct = json_string_value(json_object_get(h, "ctype"));
			char name[256], dir[PATH_MAX];
			unsigned resumes = 0;
			bool ckpt = ckpt_of_running(id, name, &resumes);
			struct stat st;
			double now = inv_wall_now();

			snprintf(dir, sizeof(dir), "%s/checkpoints/resume-%s", inv_cfg.state_dir, id);
			if (ckpt && resumes < INV_MAX_RESUMES && stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) {
				v->running(id, fn, ct ? ct : "application/octet-stream",
					   json_number_value(json_object_get(h, "accepted")), body, len, resumes + 1);
			} else {
				if (ckpt)
					phos_image_dir_remove(dir);
				inv_calls_store_finish(id, fn, false, 503, false, now, ckpt ? many : msg,
						       (ckpt ? sizeof(many) : sizeof(msg)) - 1);
				v->finished(id, fn, false, 503, false, now, ckpt ? many : msg,
					    (ckpt ? sizeof(many) : sizeof(msg)) - 1);
			}
		} else {
			v->finished(id, fn, json_is_true(json_object_get(h, "ok")),
				    (int)json_integer_value(json_object_get(h, "code")),
				    json_is_true(json_object_get(h, "truncated")),
				    json_number_value(json_object_get(h, "finished")), body, len);
		}
		json_decref(h);
		free(body);
	}
	closedir(d);
	return 0;
}
