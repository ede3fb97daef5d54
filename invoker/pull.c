/* SPDX-License-Identifier: MIT */
/*
 * The puller side of a snapshot pull (transfer.h): POST /system/functions
 * {"name": N, "from": "http://host-a:8080", "from_token": T} fetches N's
 * registry entry and snapshot from the peer invoker at "from" (libcurl),
 * verifies every byte against the manifest, and commits it like a deploy,
 * without running the program.
 *
 *   request checks (400) ─▶ GET export (502 unreachable, bad token, bad
 *   answer; 404 no such function there) ─▶ compatibility (422: export version,
 *   image major, device, GPU model, stand-in build) ─▶ chunk lists checked
 *   against the manifest (502) ─▶ free disk (507) ─▶ listed as deploying ─▶
 *   modules, cpu/ files, gpu.data chunks into snapshots/N.tmp-*: each chunk a
 *   local snapshot holds is copied and re-hashed, the others fetched in ranges
 *   of up to 64 MiB, streamed to disk and hashed as they come (a mismatch:
 *   502, the temporary removed) ─▶ manifest.json last, read back ─▶ commit ─▶
 *   functions/N.json
 *
 * Memory is bounded: the export document (at most 64 MiB), one 4 MiB buffer
 * for local copies; fetched bytes go from libcurl's buffer to the file.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <curl/curl.h>
#include <xxhash.h>

#include "fault.h"
#include "invoker.h"
#include "log.h"
#include "transfer.h"

#define PULL_URL_MAX 1024
#define PULL_TOKEN_MAX 1024
#define PULL_DISK_MARGIN (64ull << 20)   /* left free after a pull */
#define PULL_BYTES_MAX (1ull << 40)      /* a snapshot over 1 TiB is refused */
#define PULL_ERRBODY_MAX 4096

/* A chunk a local snapshot holds. */
struct local_chunk {
	uint64_t hash, len, offset;
	unsigned src;     /* index in pull.src_fd */
};

struct pull {
	const char *name;
	CURLU *base;            /* the peer's URL (scheme, host, port) */
	char auth[PULL_TOKEN_MAX + 32];
	CURL *curl;
	struct curl_slist *headers;
	int cancel_fd;          /* f->snap_cancel_fd while pulling */
	json_t *exp;            /* the export document */
	const char *snapshot_id;
	struct phos_image *img;
	const char *manifest;
	size_t manifest_len;
	struct inv_extent *ext; /* chunk lists, checked against img */
	size_t next;
	struct local_chunk *local;
	size_t nlocal;
	int src_fd[1024];
	unsigned nsrc;
	uint64_t fetched, reused, chunks_fetched, chunks_reused;
	double started;
	int code;               /* HTTP status of a failure, 0: by errno */
};

static json_t *err_json(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_t *err_json(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	return json_pack("{s:s}", "error", buf);
}

/* Records a failure with its status; returns rc. */
__attribute__((format(printf, 6, 7)))
static int fail(struct pull *p, int code, int rc, char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	p->code = code;
	return rc;
}

static bool cancelled(const struct pull *p)
{
	struct pollfd pfd = { .fd = p->cancel_fd, .events = POLLIN };

	return inv_draining || (p->cancel_fd >= 0 && poll(&pfd, 1, 0) == 1);
}

/* ---- the request ---- */

static bool token_valid(const char *t)
{
	size_t n = strlen(t);

	if (n < 16 || n > PULL_TOKEN_MAX)
		return false;
	for (; *t; t++)
		if (*t <= ' ' || *t >= 127)
			return false;
	return true;
}

/* "from" is http(s)://HOST[:PORT][/] and nothing else: into p->base. */
static int url_check(struct pull *p, const char *from, char *err, size_t errlen)
{
	char *scheme = NULL, *host = NULL, *part = NULL;
	int r = 0;

	if (strlen(from) > PULL_URL_MAX)
		return snprintf(err, errlen, "from: a URL of at most %d characters", PULL_URL_MAX), -EINVAL;
	p->base = curl_url();
	if (!p->base || curl_url_set(p->base, CURLUPART_URL, from, 0) != CURLUE_OK)
		return snprintf(err, errlen, "from: not a URL: '%.128s'", from), -EINVAL;
	if (curl_url_get(p->base, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    (strcmp(scheme, "http") && strcmp(scheme, "https"))) {
		snprintf(err, errlen, "from: the scheme must be http or https");
		r = -EINVAL;
	} else if (curl_url_get(p->base, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host[0]) {
		snprintf(err, errlen, "from: no host");
		r = -EINVAL;
	} else if (curl_url_get(p->base, CURLUPART_USER, &part, 0) == CURLUE_OK) {
		snprintf(err, errlen, "from: no user or password in the URL (the token goes in from_token)");
		r = -EINVAL;
	} else if (curl_url_get(p->base, CURLUPART_QUERY, &part, 0) == CURLUE_OK ||
		   curl_url_get(p->base, CURLUPART_FRAGMENT, &part, 0) == CURLUE_OK) {
		snprintf(err, errlen, "from: no query or fragment: the peer's base URL only");
		r = -EINVAL;
	} else if (curl_url_get(p->base, CURLUPART_PATH, &part, 0) == CURLUE_OK && strcmp(part, "/") && part[0]) {
		snprintf(err, errlen, "from: the peer's base URL, without a path (not '%.64s')", part);
		r = -EINVAL;
	}
	curl_free(scheme);
	curl_free(host);
	curl_free(part);
	return r;
}

/* ---- HTTP ---- */

struct sink {
	struct pull *p;
	long status;            /* of the answer being received */
	/* into memory (the export document, error bodies) */
	char *mem;
	size_t len, cap, max;
	/* into a file at off, hashed in PHOS_IMAGE_HASH_CHUNK chunks */
	int fd;
	uint64_t off, got;
	XXH3_state_t *chunk;    /* the chunk being received */
	uint64_t chunk_fill;
	uint64_t *hashes;       /* hashes of the chunks completed, in order */
	size_t nhashes, maxhashes;
	const uint64_t *expect; /* when set: each completed chunk must match */
	XXH3_state_t *whole;    /* when set: XXH3-128 of everything (modules) */
	bool mismatch, write_error;
	int werr;               /* errno of the failed write */
};

static void chunk_done(struct sink *s)
{
	uint64_t h = XXH3_64bits_digest(s->chunk);

	if (s->nhashes < s->maxhashes) {
		if (s->expect && s->expect[s->nhashes] != h)
			s->mismatch = true;
		s->hashes[s->nhashes++] = h;
	} else {
		s->mismatch = true;    /* more chunks than the manifest says */
	}
	XXH3_64bits_reset(s->chunk);
	s->chunk_fill = 0;
}

static int sink_file(struct sink *s, const char *data, size_t n)
{
	size_t done = 0;

	while (done < n) {
		ssize_t w = pwrite(s->fd, data + done, n - done, (off_t)(s->off + s->got));

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			s->write_error = true;
			s->werr = errno ? errno : EIO;
			return -s->werr;
		}
		if (s->chunk) {
			for (size_t k = 0; k < (size_t)w;) {
				size_t room = PHOS_IMAGE_HASH_CHUNK - (size_t)s->chunk_fill;
				size_t take = (size_t)w - k < room ? (size_t)w - k : room;

				XXH3_64bits_update(s->chunk, data + done + k, take);
				s->chunk_fill += take;
				k += take;
				if (s->chunk_fill == PHOS_IMAGE_HASH_CHUNK)
					chunk_done(s);
			}
		}
		if (s->whole)
			XXH3_128bits_update(s->whole, data + done, (size_t)w);
		s->got += (uint64_t)w;
		done += (size_t)w;
	}
	return 0;
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *arg)
{
	struct sink *s = arg;
	size_t n = size * nmemb;

	if (!s->status)
		curl_easy_getinfo(s->p->curl, CURLINFO_RESPONSE_CODE, &s->status);
	if (cancelled(s->p))
		return 0;
	if (s->status != 200 || s->fd < 0) {
		size_t max = s->status != 200 ? PULL_ERRBODY_MAX : s->max;

		if (s->len + n > max)
			return s->status != 200 ? n : 0;   /* an error body: keep its start */
		if (s->len + n + 1 > s->cap) {
			size_t cap = s->cap ? s->cap : 65536;
			char *m;

			while (cap < s->len + n + 1)
				cap *= 2;
			if (!(m = realloc(s->mem, cap)))
				return 0;
			s->mem = m;
			s->cap = cap;
		}
		memcpy(s->mem + s->len, data, n);
		s->len += n;
		s->mem[s->len] = '\0';
		return n;
	}
	if (sink_file(s, data, n) < 0)
		return 0;
	if (s->mismatch)
		return 0;   /* stop at the first bad chunk */
	return n;
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	return cancelled(arg) ? 1 : 0;
}

/* The error message of a JSON error body, or the start of the body. */
static void peer_error(const struct sink *s, char *buf, size_t len)
{
	json_t *j = s->mem ? json_loadb(s->mem, s->len, 0, NULL) : NULL;
	const char *e = json_string_value(json_object_get(j, "error"));

	snprintf(buf, len, "%.300s", e ? e : s->mem ? s->mem : "(no body)");
	json_decref(j);
}

/* GET path?query from the peer into s: 0 with s->status 200, or a failure
 * with its status recorded in p. */
static int http_get(struct pull *p, const char *path, const char *query, struct sink *s, char *err, size_t errlen)
{
	char *url = NULL, msg[400];
	CURLcode cr;
	int r = 0;

	s->status = 0;
	if (curl_url_set(p->base, CURLUPART_PATH, path, 0) != CURLUE_OK ||
	    curl_url_set(p->base, CURLUPART_QUERY, query, 0) != CURLUE_OK ||
	    curl_url_get(p->base, CURLUPART_URL, &url, 0) != CURLUE_OK)
		return fail(p, 500, -ENOMEM, err, errlen, "cannot build the peer's URL");
	curl_easy_setopt(p->curl, CURLOPT_URL, url);
	curl_easy_setopt(p->curl, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(p->curl, CURLOPT_WRITEDATA, s);
	curl_easy_setopt(p->curl, CURLOPT_XFERINFODATA, p);
	cr = curl_easy_perform(p->curl);
	curl_url_set(p->base, CURLUPART_QUERY, NULL, 0);
	if (!s->status)
		curl_easy_getinfo(p->curl, CURLINFO_RESPONSE_CODE, &s->status);
	curl_free(url);
	if (cancelled(p))
		return fail(p, inv_draining ? 503 : 409, -ECANCELED, err, errlen, "the pull was cancelled");
	if (s->mismatch)
		return 0;   /* the caller names the chunk */
	if (s->write_error)
		return fail(p, s->werr == ENOSPC || s->werr == EDQUOT ? 507 : 500, -s->werr, err, errlen,
			    "writing the snapshot: %s", strerror(s->werr));
	if (cr != CURLE_OK && s->status == 200)
		return fail(p, 502, -EIO, err, errlen, "peer: %s%s", curl_easy_strerror(cr),
			    s->len >= s->max && s->fd < 0 ? " (answer too large)" : "");
	if (cr != CURLE_OK)
		return fail(p, 502, -EHOSTUNREACH, err, errlen, "cannot reach the peer: %s", curl_easy_strerror(cr));
	if (s->status == 200)
		return 0;
	peer_error(s, msg, sizeof(msg));
	if (s->status == 401)
		r = fail(p, 502, -EACCES, err, errlen, "the peer refused our token (401): check from_token");
	else if (s->status == 404 && strstr(path, "/export") && !query)
		r = fail(p, 404, -ENOENT, err, errlen, "the peer has no function %s", p->name);
	else
		r = fail(p, 502, -EIO, err, errlen, "the peer answered %ld: %s", s->status, msg);
	return r;
}

/* ---- the export document ---- */

static int hex_u64(const char *s, uint64_t *ret)
{
	char *end;

	if (!s || strlen(s) != 16)
		return -EINVAL;
	for (int i = 0; i < 16; i++)
		if (!isxdigit((unsigned char)s[i]))
			return -EINVAL;
	*ret = strtoull(s, &end, 16);
	return 0;
}

static void gpu_models(char *buf, size_t len)
{
	DIR *d = opendir("/proc/driver/nvidia/gpus");
	struct dirent *de;
	size_t used = 0;

	buf[0] = '\0';
	while (d && (de = readdir(d))) {
		char path[PATH_MAX], line[512];
		FILE *f;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/driver/nvidia/gpus/%s/information", de->d_name);
		if (!(f = fopen(path, "re")))
			continue;
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, "Model:", 6)) {
				char *m = line + 6;

				m += strspn(m, " \t");
				m[strcspn(m, "\n")] = '\0';
				used += (size_t)snprintf(buf + used, used < len ? len - used : 0, "%s%s", used ? "\n" : "", m);
			}
		fclose(f);
	}
	if (d)
		closedir(d);
}

/* Whether this host can run a snapshot of img (device, GPU model). */
static int compatible(struct pull *p, char *err, size_t errlen)
{
	const struct phos_image *img = p->img;
	char models[2048];

	if (!strcmp(img->device, "sim"))
		return 0;
	if (strcmp(img->device, "cuda"))
		return fail(p, 422, -EPROTONOSUPPORT, err, errlen, "the snapshot is of device '%.32s', unknown here",
			    img->device);
	if (strcmp(inv_cfg.device, "cuda"))
		return fail(p, 422, -EPROTONOSUPPORT, err, errlen,
			    "the snapshot was taken on a GPU (%.128s); this invoker runs the %s device", img->gpu_name,
			    inv_cfg.device);
	gpu_models(models, sizeof(models));
	if (models[0]) {
		for (char *m = models, *nl; m && *m; m = nl ? nl + 1 : NULL) {
			nl = strchr(m, '\n');
			if (nl)
				*nl = '\0';
			if (!strcmp(m, img->gpu_name))
				return 0;
		}
		return fail(p, 422, -EPROTONOSUPPORT, err, errlen,
			    "the snapshot was taken on a %.128s; this host has none (%.128s)", img->gpu_name, models);
	}
	return 0;
}

static const char *str_of(json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* Checks the export's chunk lists against the manifest into p->ext. */
static int extents_check(struct pull *p, char *err, size_t errlen)
{
	const struct phos_image *img = p->img;
	json_t *arr = json_object_get(p->exp, "extents"), *e;
	size_t want = img->nbufs, k = 0, i;

	for (uint32_t v = 0; v < img->nvars; v++)
		want += img->vars[v].size > 0;
	if (!json_is_array(arr) || json_array_size(arr) != want)
		return fail(p, 502, -EBADMSG, err, errlen, "the export lists %zu extents, the manifest %zu",
			    json_array_size(arr), want);
	p->ext = calloc(want + 1, sizeof(*p->ext));
	if (!p->ext)
		return fail(p, 500, -ENOMEM, err, errlen, "out of memory");
	json_array_foreach(arr, i, e) {
		const struct phos_image_buf *b = i < img->nbufs ? &img->bufs[i] : NULL;
		uint64_t off, size, hash;
		json_t *c = json_object_get(e, "chunks");
		struct inv_extent *x = &p->ext[i];

		if (b) {
			off = b->offset, size = b->size, hash = b->hash;
		} else {
			while (img->vars[k].size == 0)
				k++;
			off = img->vars[k].offset, size = img->vars[k].size, hash = img->vars[k].hash;
			k++;
		}
		x->offset = off;
		x->size = size;
		x->hash = hash;
		p->next = i + 1;
		size_t nc = (size_t)((size + PHOS_IMAGE_HASH_CHUNK - 1) / PHOS_IMAGE_HASH_CHUNK);
		if ((uint64_t)json_integer_value(json_object_get(e, "offset")) != off ||
		    (uint64_t)json_integer_value(json_object_get(e, "size")) != size || !json_is_array(c) ||
		    json_array_size(c) != nc)
			return fail(p, 502, -EBADMSG, err, errlen, "the export's extent %zu does not match the manifest", i);
		x->chunks = calloc(nc, sizeof(uint64_t));
		if (!x->chunks)
			return fail(p, 500, -ENOMEM, err, errlen, "out of memory");
		for (size_t j = 0; j < nc; j++)
			if (hex_u64(json_string_value(json_array_get(c, j)), &x->chunks[j]) < 0)
				return fail(p, 502, -EBADMSG, err, errlen, "the export's extent %zu: a bad chunk hash", i);
		if (phos_image_combine(x->chunks, nc) != hash)
			return fail(p, 502, -EBADMSG, err, errlen,
				    "the peer's chunk hashes of gpu.data [%" PRIu64 ", +%" PRIu64 ") do not combine to "
				    "the manifest's checksum", off, size);
	}
	return 0;
}

/* Fetches and checks the export document; the function's entry in ret_entry. */
static int export_fetch(struct pull *p, json_t **ret_entry, char *err, size_t errlen)
{
	struct sink s = { .p = p, .fd = -1, .max = INV_EXPORT_JSON_MAX };
	char path[128], why[512];
	json_error_t je;
	json_t *fmt, *entry;
	uint64_t total = 0;
	struct statvfs vfs;
	int r;

	snprintf(path, sizeof(path), "/system/functions/%s/export", p->name);
	/* the peer may hash the whole gpu.data before it answers (once per snapshot) */
	curl_easy_setopt(p->curl, CURLOPT_LOW_SPEED_TIME, 600L);
	r = http_get(p, path, NULL, &s, err, errlen);
	curl_easy_setopt(p->curl, CURLOPT_LOW_SPEED_TIME, 30L);
	if (r < 0) {
		free(s.mem);
		return r;
	}
	p->exp = json_loadb(s.mem ? s.mem : "", s.len, JSON_REJECT_DUPLICATES, &je);
	free(s.mem);
	if (!json_is_object(p->exp))
		return fail(p, 502, -EBADMSG, err, errlen, "the peer's export is not a JSON object: %s", je.text);
	if (!json_is_integer(json_object_get(p->exp, "export_version")) ||
	    json_integer_value(json_object_get(p->exp, "export_version")) != INV_EXPORT_VERSION)
		return fail(p, 422, -EPROTONOSUPPORT, err, errlen,
			    "the peer speaks export version %lld, this invoker %d: upgrade the older one",
			    (long long)json_integer_value(json_object_get(p->exp, "export_version")), INV_EXPORT_VERSION);
	fmt = json_object_get(p->exp, "format");
	if (!json_is_integer(json_object_get(fmt, "major")) ||
	    json_integer_value(json_object_get(fmt, "major")) != PHOS_IMAGE_MAJOR)
		return fail(p, 422, -EPROTONOSUPPORT, err, errlen,
			    "the peer's snapshot is of format %lld.x, this invoker reads %d.x",
			    (long long)json_integer_value(json_object_get(fmt, "major")), PHOS_IMAGE_MAJOR);
	if (!str_of(p->exp, "standin") || strcmp(str_of(p->exp, "standin"), inv_standin_build()))
		return fail(p, 422, -EPROTONOSUPPORT, err, errlen,
			    "the peer's CUDA stand-ins are another build (%.32s, here %s): CRIU would not restore its "
			    "snapshot here; install the same phos-fn build on both hosts",
			    str_of(p->exp, "standin") ? str_of(p->exp, "standin") : "none", inv_standin_build());
	p->snapshot_id = str_of(p->exp, "snapshot");
	if (!p->snapshot_id || strlen(p->snapshot_id) != 32 || strspn(p->snapshot_id, "0123456789abcdef") != 32)
		return fail(p, 502, -EBADMSG, err, errlen, "the peer's export has no snapshot id");
	if (!str_of(p->exp, "name") || strcmp(str_of(p->exp, "name"), p->name))
		return fail(p, 502, -EBADMSG, err, errlen, "the peer exported another function");
	p->manifest = str_of(p->exp, "manifest");
	p->manifest_len = json_string_length(json_object_get(p->exp, "manifest"));
	if (!p->manifest)
		return fail(p, 502, -EBADMSG, err, errlen, "the peer's export has no manifest");
	r = phos_image_parse(p->manifest, p->manifest_len, &p->img, why, sizeof(why));
	if (r < 0)
		return fail(p, r == -EPROTONOSUPPORT ? 422 : 502, r, err, errlen, "the peer's %s", why);
	if (p->img->ncpu_files == 0)
		return fail(p, 502, -EBADMSG, err, errlen, "the peer's manifest has no CPU image checksums");
	if ((size_t)p->img->nmodules + p->img->ncpu_files + 1 > INV_EXPORT_MAX_FILES)
		return fail(p, 502, -E2BIG, err, errlen, "the peer's snapshot has more than %u files",
			    (unsigned)INV_EXPORT_MAX_FILES);
	r = compatible(p, err, errlen);
	if (r < 0)
		return r;
	entry = json_object_get(p->exp, "function");
	if (!json_is_object(entry) || !str_of(entry, "name") || strcmp(str_of(entry, "name"), p->name) ||
	    !str_of(entry, "device") || strcmp(str_of(entry, "device"), p->img->device))
		return fail(p, 502, -EBADMSG, err, errlen,
			    "the peer's registry entry does not name %s on the snapshot's device", p->name);
	r = extents_check(p, err, errlen);
	if (r < 0)
		return r;
	/* what this host must hold: gpu.data's extents, modules, the CPU image */
	for (size_t i = 0; i < p->next; i++)
		total += p->ext[i].size;
	for (uint32_t i = 0; i < p->img->nmodules; i++)
		total += p->img->modules[i].size;
	for (uint32_t i = 0; i < p->img->ncpu_files; i++)
		total += p->img->cpu_files[i].size;
	if (total > PULL_BYTES_MAX || p->img->data_bytes > PULL_BYTES_MAX)
		return fail(p, 507, -EFBIG, err, errlen, "the snapshot is %" PRIu64 " bytes, over the limit of %llu",
			    total, PULL_BYTES_MAX);
	{
		char dir[PATH_MAX];

		snprintf(dir, sizeof(dir), "%s/snapshots", inv_cfg.state_dir);
		int sr = statvfs(dir, &vfs);

		if (sr == 0 && phos_fault("pull_nospace"))
			vfs.f_bavail = 0;   /* tests: a full disk */
		if (sr == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < total + PULL_DISK_MARGIN)
			return fail(p, 507, -ENOSPC, err, errlen,
				    "the snapshot needs %" PRIu64 " MiB, %llu MiB are free", total >> 20,
				    (unsigned long long)((uint64_t)vfs.f_bavail * vfs.f_frsize >> 20));
	}
	*ret_entry = entry;
	return 0;
}

/* ---- chunks this host already holds ---- */

struct collect {
	struct inv_function *list[1024];
	unsigned n;
};

static void collect_one(struct inv_function *f, void *arg)
{
	struct collect *c = arg;

	if (c->n == sizeof(c->list) / sizeof(c->list[0]))
		return;
	pthread_mutex_lock(&f->lock);
	if (f->ready && !f->removed) {
		f->refs++;
		c->list[c->n++] = f;
	}
	pthread_mutex_unlock(&f->lock);
}

static int local_cmp(const void *a, const void *b)
{
	const struct local_chunk *x = a, *y = b;

	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	return x->len < y->len ? -1 : x->len > y->len;
}

/* Indexes the chunks of every local snapshot (hashed once per snapshot and
 * cached), keeping a descriptor of each gpu.data: a committed file never
 * changes, and each copied chunk is hashed again anyway. */
static void local_index(struct pull *p)
{
	struct collect *c = calloc(1, sizeof(*c));
	size_t cap = 0;

	if (!c)
		return;
	inv_function_foreach(collect_one, c);
	for (unsigned i = 0; i < c->n; i++) {
		struct inv_function *g = c->list[i];
		struct inv_snapinfo *si = NULL;
		char err[512], path[PATH_MAX];
		int fd = -1;

		pthread_rwlock_rdlock(&g->snap_lock);
		if (inv_snapinfo_get(g, true, &si, err, sizeof(err)) == 0) {
			snprintf(path, sizeof(path), "%s/gpu.data", g->snapshot_dir);
			fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		} else {
			phos_warn("pull of %s: the chunks of %s are not reused: %s", p->name, g->name, err);
		}
		pthread_rwlock_unlock(&g->snap_lock);
		if (fd >= 0 && p->nsrc < sizeof(p->src_fd) / sizeof(p->src_fd[0])) {
			unsigned src = p->nsrc++;

			p->src_fd[src] = fd;
			for (size_t e = 0; e < si->next; e++)
				for (uint64_t off = 0; off < si->ext[e].size; off += PHOS_IMAGE_HASH_CHUNK) {
					if (p->nlocal == cap) {
						struct local_chunk *l = realloc(p->local, (cap * 2 + 256) * sizeof(*l));

						if (!l)
							break;
						p->local = l;
						cap = cap * 2 + 256;
					}
					p->local[p->nlocal++] = (struct local_chunk){
						si->ext[e].chunks[off / PHOS_IMAGE_HASH_CHUNK],
						si->ext[e].size - off < PHOS_IMAGE_HASH_CHUNK ? si->ext[e].size - off
											      : PHOS_IMAGE_HASH_CHUNK,
						si->ext[e].offset + off, src };
				}
		} else if (fd >= 0) {
			close(fd);
		}
		inv_snapinfo_unref(si);
		inv_function_unref(g);
	}
	free(c);
	qsort(p->local, p->nlocal, sizeof(*p->local), local_cmp);
}

/* Copies a chunk of hash and len from a local snapshot to fd at off: true
 * when one was found whose bytes still hash right. */
static bool local_copy(struct pull *p, uint64_t hash, uint64_t len, int fd, uint64_t off, void *buf)
{
	struct local_chunk key = { .hash = hash, .len = len };
	struct local_chunk *l = bsearch(&key, p->local, p->nlocal, sizeof(key), local_cmp);

	if (!l)
		return false;
	for (size_t got = 0; got < len;) {
		ssize_t n = pread(p->src_fd[l->src], (char *)buf + got, len - got, (off_t)(l->offset + got));

		if (n <= 0 && !(n < 0 && errno == EINTR))
			return false;
		got += n > 0 ? (size_t)n : 0;
	}
	if (phos_image_chunk_hash(buf, len) != hash)
		return false;   /* a local file that rotted: fetch the chunk instead */
	for (size_t put = 0; put < len;) {
		ssize_t n = pwrite(fd, (char *)buf + put, len - put, (off_t)(off + put));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return false;
		put += (size_t)n;
	}
	return true;
}

/* ---- files ---- */

static int query_of(struct pull *p, const char *path, uint64_t off, uint64_t len, char *q, size_t qlen)
{
	char *esc = curl_easy_escape(p->curl, path, 0);
	int n;

	if (!esc)
		return -ENOMEM;
	n = snprintf(q, qlen, "snapshot=%s&path=%s&offset=%" PRIu64 "&length=%" PRIu64, p->snapshot_id, esc, off, len);
	curl_free(esc);
	return (size_t)n < qlen ? 0 : -ENAMETOOLONG;
}

/* Fetches [off, off + len) of the peer's file path into s (which knows where
 * to write), in ranges of at most INV_EXPORT_RANGE_MAX. */
static int fetch_range(struct pull *p, const char *path, uint64_t off, uint64_t len, struct sink *s, char *err,
		       size_t errlen)
{
	char urlpath[128], q[512];
	int r;

	snprintf(urlpath, sizeof(urlpath), "/system/functions/%s/export/file", p->name);
	while (len > 0 && !s->mismatch) {
		uint64_t n = len < INV_EXPORT_RANGE_MAX ? len : INV_EXPORT_RANGE_MAX;
		uint64_t before = s->got;

		r = query_of(p, path, off, n, q, sizeof(q));
		if (r < 0)
			return fail(p, 500, r, err, errlen, "path too long");
		free(s->mem);
		s->mem = NULL;
		s->len = s->cap = 0;
		r = http_get(p, urlpath, q, s, err, errlen);
		if (r < 0)
			return r;
		if (!s->mismatch && s->got - before != n)
			return fail(p, 502, -EBADMSG, err, errlen, "%s: the peer sent %" PRIu64 " of %" PRIu64 " bytes",
				    path, s->got - before, n);
		p->fetched += s->got - before;
		off += n;
		len -= n;
	}
	return 0;
}

static int open_new(const char *dir, const char *rel, int *ret_fd, char *err, size_t errlen)
{
	char path[PATH_MAX];
	int fd;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, rel) >= sizeof(path))
		return snprintf(err, errlen, "path too long"), -ENAMETOOLONG;
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return snprintf(err, errlen, "%s: %s", rel, strerror(errno)), -errno;
	*ret_fd = fd;
	return 0;
}

/* A module: its XXH3-128 must be its name. */
static int pull_module(struct pull *p, const char *tmp, const struct phos_image_module *m, char *err, size_t errlen)
{
	char rel[128], hex[33];
	struct sink s = { .p = p, .fd = -1 };
	XXH128_hash_t h;
	int r;

	snprintf(rel, sizeof(rel), "modules/%s.fatbin", m->hash);
	r = open_new(tmp, rel, &s.fd, err, errlen);
	if (r < 0)
		return fail(p, r == -ENOSPC ? 507 : 500, r, err, errlen, "%s", err);
	s.whole = XXH3_createState();
	if (!s.whole) {
		close(s.fd);
		return fail(p, 500, -ENOMEM, err, errlen, "out of memory");
	}
	XXH3_128bits_reset(s.whole);
	r = fetch_range(p, rel, 0, m->size, &s, err, errlen);
	h = XXH3_128bits_digest(s.whole);
	snprintf(hex, sizeof(hex), "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
	XXH3_freeState(s.whole);
	free(s.mem);
	close(s.fd);
	if (r == 0 && strcmp(hex, m->hash))
		r = fail(p, 502, -EBADMSG, err, errlen, "checksum mismatch in %s (fetched from the peer)", rel);
	return r;
}

/* A file of the CRIU image: its chunked hash must be the manifest's. */
static int pull_cpu_file(struct pull *p, const char *tmp, const struct phos_image_file *cf, char *err, size_t errlen)
{
	char rel[160];
	struct sink s = { .p = p, .fd = -1 };
	size_t nc = (size_t)((cf->size + PHOS_IMAGE_HASH_CHUNK - 1) / PHOS_IMAGE_HASH_CHUNK);
	int r;

	snprintf(rel, sizeof(rel), "%s/%s", p->img->criu_dir, cf->name);
	r = open_new(tmp, rel, &s.fd, err, errlen);
	if (r < 0)
		return fail(p, r == -ENOSPC ? 507 : 500, r, err, errlen, "%s", err);
	s.chunk = XXH3_createState();
	s.hashes = calloc(nc + 1, sizeof(uint64_t));
	s.maxhashes = nc ? nc : 1;
	if (!s.chunk || !s.hashes) {
		r = fail(p, 500, -ENOMEM, err, errlen, "out of memory");
		goto out;
	}
	XXH3_64bits_reset(s.chunk);
	r = cf->size ? fetch_range(p, rel, 0, cf->size, &s, err, errlen) : 0;
	if (r == 0 && !s.mismatch && (s.chunk_fill > 0 || cf->size == 0))
		chunk_done(&s);   /* the short last chunk (an empty file hashes as one empty chunk) */
	if (r == 0 && (s.mismatch || phos_image_combine(s.hashes, s.nhashes) != cf->hash))
		r = fail(p, 502, -EBADMSG, err, errlen, "checksum mismatch in %s (fetched from the peer)", rel);
out:
	XXH3_freeState(s.chunk);
	free(s.hashes);
	free(s.mem);
	close(s.fd);
	return r;
}

/* gpu.data: every chunk of every extent, copied from a local snapshot when
 * one holds it, else fetched in runs of consecutive chunks. */
static int pull_gpu_data(struct pull *p, const char *tmp, char *err, size_t errlen)
{
	void *buf = malloc(PHOS_IMAGE_HASH_CHUNK);
	int fd = -1, r = 0;

	if (!buf)
		return fail(p, 500, -ENOMEM, err, errlen, "out of memory");
	r = open_new(tmp, "gpu.data", &fd, err, errlen);
	if (r < 0) {
		free(buf);
		return fail(p, 500, r, err, errlen, "%s", err);
	}
	/* the gaps between extents stay holes: no reader looks at them */
	if (ftruncate(fd, (off_t)p->img->data_bytes) < 0) {
		r = fail(p, errno == ENOSPC || errno == EFBIG ? 507 : 500, -errno, err, errlen, "gpu.data: %s",
			 strerror(errno));
		goto out;
	}
	for (size_t e = 0; e < p->next && r == 0; e++) {
		const struct inv_extent *x = &p->ext[e];
		size_t nc = (size_t)((x->size + PHOS_IMAGE_HASH_CHUNK - 1) / PHOS_IMAGE_HASH_CHUNK);

		for (size_t c = 0; c < nc && r == 0;) {
			uint64_t off = (uint64_t)c * PHOS_IMAGE_HASH_CHUNK;
			uint64_t len = x->size - off < PHOS_IMAGE_HASH_CHUNK ? x->size - off : PHOS_IMAGE_HASH_CHUNK;
			size_t run = 0;

			if (cancelled(p)) {
				r = fail(p, inv_draining ? 503 : 409, -ECANCELED, err, errlen, "the pull was cancelled");
				break;
			}
			if (local_copy(p, x->chunks[c], len, fd, x->offset + off, buf)) {
				p->reused += len;
				p->chunks_reused++;
				c++;
				continue;
			}
			/* a run of chunks that no local snapshot holds, up to one range */
			struct local_chunk key;
			while (c + run < nc && run < INV_EXPORT_RANGE_MAX / PHOS_IMAGE_HASH_CHUNK) {
				uint64_t o = (uint64_t)(c + run) * PHOS_IMAGE_HASH_CHUNK;

				key.hash = x->chunks[c + run];
				key.len = x->size - o < PHOS_IMAGE_HASH_CHUNK ? x->size - o : PHOS_IMAGE_HASH_CHUNK;
				if (run > 0 && bsearch(&key, p->local, p->nlocal, sizeof(key), local_cmp))
					break;
				run++;
			}
			uint64_t rlen = (uint64_t)(c + run) * PHOS_IMAGE_HASH_CHUNK > x->size
						? x->size - off : (uint64_t)run * PHOS_IMAGE_HASH_CHUNK;
			struct sink s = { .p = p, .fd = fd, .off = x->offset + off, .expect = x->chunks + c,
					  .maxhashes = run };
			s.chunk = XXH3_createState();
			s.hashes = calloc(run, sizeof(uint64_t));
			if (!s.chunk || !s.hashes) {
				r = fail(p, 500, -ENOMEM, err, errlen, "out of memory");
			} else {
				XXH3_64bits_reset(s.chunk);
				r = fetch_range(p, "gpu.data", x->offset + off, rlen, &s, err, errlen);
				if (r == 0 && !s.mismatch && s.chunk_fill > 0)
					chunk_done(&s);   /* the extent's short last chunk */
				if (r == 0 && (s.mismatch || s.nhashes != run))
					r = fail(p, 502, -EBADMSG, err, errlen,
						 "checksum mismatch in gpu.data chunk %zu of the buffer at offset %" PRIu64
						 " (fetched from the peer)", c + (s.nhashes ? s.nhashes - 1 : 0), x->offset);
			}
			XXH3_freeState(s.chunk);
			free(s.hashes);
			free(s.mem);
			p->chunks_fetched += run;
			c += run;
		}
	}
out:
	free(buf);
	close(fd);
	return r;
}

static int write_all_new(const char *dir, const char *rel, const char *data, size_t len, char *err, size_t errlen)
{
	int fd, r = open_new(dir, rel, &fd, err, errlen);

	if (r < 0)
		return r;
	for (size_t off = 0; off < len && r == 0;) {
		ssize_t w = write(fd, data + off, len - off);

		if (w < 0 && errno != EINTR)
			r = -errno, snprintf(err, errlen, "%s: %s", rel, strerror(errno));
		else if (w > 0)
			off += (size_t)w;
	}
	close(fd);
	return r;
}

static void set_phase(struct inv_function *f, const char *phase, int cancel_fd)
{
	pthread_mutex_lock(&f->lock);
	f->snap_phase = phase;
	f->snap_cancel_fd = cancel_fd;
	if (phase)
		f->snap_started = phos_now();
	pthread_mutex_unlock(&f->lock);
}

/* inv_snapshot_maker: the snapshot of f from the peer. */
static int pull_make(struct inv_function *f, void *arg, char *err, size_t errlen)
{
	struct pull *p = arg;
	char tmp[PATH_MAX], sub[PATH_MAX + 80];
	struct phos_image *check = NULL;
	int r;

	p->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (p->cancel_fd < 0)
		return fail(p, 500, -errno, err, errlen, "eventfd: %s", strerror(errno));
	set_phase(f, "pulling", p->cancel_fd);
	pthread_mutex_lock(&f->lock);
	r = f->removed || inv_draining;
	pthread_mutex_unlock(&f->lock);
	if (r) {
		r = fail(p, inv_draining ? 503 : 409, -ECANCELED, err, errlen, "cancelled before it began");
		goto out_phase;
	}
	r = phos_image_dir_begin(f->snapshot_dir, tmp, sizeof(tmp));
	if (r < 0) {
		fail(p, r == -ENOSPC ? 507 : 500, r, err, errlen, "cannot make the snapshot directory: %s", strerror(-r));
		goto out_phase;
	}
	snprintf(sub, sizeof(sub), "%s/modules", tmp);
	if (mkdir(sub, 0700) < 0) {
		r = fail(p, 500, -errno, err, errlen, "modules/: %s", strerror(errno));
		goto out_abort;
	}
	snprintf(sub, sizeof(sub), "%s/%s", tmp, p->img->criu_dir);
	if (mkdir(sub, 0700) < 0) {
		r = fail(p, 500, -errno, err, errlen, "%s/: %s", p->img->criu_dir, strerror(errno));
		goto out_abort;
	}
	local_index(p);
	if (phos_fault("pull_stall")) {
		/* tests: a pull in progress, until a remove or the drain cancels it (10 s at most) */
		struct pollfd pfd = { .fd = p->cancel_fd, .events = POLLIN };

		for (int i = 0; i < 100 && !cancelled(p); i++)
			poll(&pfd, 1, 100);
	}
	for (uint32_t i = 0; i < p->img->nmodules && r == 0; i++) {
		bool seen = false;   /* one file per fatbin, however many modules load it */

		for (uint32_t j = 0; j < i && !seen; j++)
			seen = !strcmp(p->img->modules[j].hash, p->img->modules[i].hash);
		if (!seen)
			r = pull_module(p, tmp, &p->img->modules[i], err, errlen);
	}
	for (uint32_t i = 0; i < p->img->ncpu_files && r == 0; i++)
		r = pull_cpu_file(p, tmp, &p->img->cpu_files[i], err, errlen);
	if (r == 0)
		r = pull_gpu_data(p, tmp, err, errlen);
	if (r < 0)
		goto out_abort;
	/* the manifest last: a directory without one is never a snapshot */
	r = write_all_new(tmp, "manifest.json", p->manifest, p->manifest_len, err, errlen);
	if (r < 0) {
		fail(p, r == -ENOSPC ? 507 : 500, r, err, errlen, "%s", err);
		goto out_abort;
	}
	r = phos_image_read(tmp, &check, err, errlen);
	phos_image_free(check);
	if (r < 0) {
		fail(p, 502, r, err, errlen, "the pulled snapshot does not read back: %s", err);
		goto out_abort;
	}
	if (cancelled(p)) {
		r = fail(p, inv_draining ? 503 : 409, -ECANCELED, err, errlen, "the pull was cancelled");
		goto out_abort;
	}
	set_phase(f, "committing", p->cancel_fd);
	r = phos_image_dir_commit(tmp, f->snapshot_dir);
	if (r < 0) {
		fail(p, r == -ENOSPC ? 507 : 500, r, err, errlen, "cannot commit the snapshot: %s", strerror(-r));
		goto out_abort;
	}
	inv_snapinfo_seed(f, p->manifest, p->manifest_len, p->ext, p->next);
	pthread_mutex_lock(&f->lock);
	f->generation++;
	f->prefetch_pending = p->img->nprefetch == 0;
	f->snapshot_s = phos_now() - p->started;
	pthread_mutex_unlock(&f->lock);
	goto out_phase;
out_abort:
	phos_image_dir_abort(tmp);
out_phase:
	set_phase(f, NULL, -1);
	close(p->cancel_fd);
	p->cancel_fd = -1;
	return r;
}

static int pull_status(int r, void *arg)
{
	struct pull *p = arg;

	if (p->code)
		return p->code;
	return r == -ENOSPC || r == -EDQUOT ? 507 : r == -ECANCELED ? 503 : 500;
}

static void pull_free(struct pull *p)
{
	for (size_t i = 0; p->ext && i < p->next; i++)
		free(p->ext[i].chunks);
	free(p->ext);
	for (unsigned i = 0; i < p->nsrc; i++)
		close(p->src_fd[i]);
	free(p->local);
	phos_image_free(p->img);
	json_decref(p->exp);
	explicit_bzero(p->auth, sizeof(p->auth));   /* the peer's token is for this pull only */
	for (struct curl_slist *h = p->headers; h; h = h->next)
		explicit_bzero(h->data, strlen(h->data));
	curl_slist_free_all(p->headers);
	if (p->curl)
		curl_easy_cleanup(p->curl);
	curl_url_cleanup(p->base);
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_start(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

int inv_pull_deploy(json_t *req, json_t **ret_body)
{
	struct pull p = { .cancel_fd = -1, .started = phos_now() };
	const char *key, *from, *token;
	char err[1024];
	json_t *val, *entry = NULL;
	int code;

	json_object_foreach(req, key, val)
		if (strcmp(key, "name") && strcmp(key, "from") && strcmp(key, "from_token"))
			return *ret_body = err_json("unknown field '%.64s' (a pull takes name, from and from_token)", key), 400;
	p.name = str_of(req, "name");
	from = str_of(req, "from");
	token = str_of(req, "from_token");
	if (!p.name || !inv_name_valid(p.name))
		return *ret_body = err_json("name must match [a-z0-9][a-z0-9-]{0,62}"), 400;
	if (!from)
		return *ret_body = err_json("from must be the peer invoker's URL"), 400;
	if (!token || !token_valid(token))
		return *ret_body = err_json("from_token must be the peer's admin token (16..%d printable characters)",
					    PULL_TOKEN_MAX), 400;
	if (url_check(&p, from, err, sizeof(err)) < 0) {
		pull_free(&p);
		return *ret_body = err_json("%s", err), 400;
	}
	pthread_once(&curl_once, curl_start);
	snprintf(p.auth, sizeof(p.auth), "Authorization: Bearer %s", token);
	p.curl = curl_easy_init();
	p.headers = curl_slist_append(NULL, p.auth);
	if (!p.curl || !p.headers) {
		pull_free(&p);
		return *ret_body = err_json("out of memory"), 500;
	}
	curl_easy_setopt(p.curl, CURLOPT_HTTPHEADER, p.headers);
	curl_easy_setopt(p.curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(p.curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(p.curl, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(p.curl, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(p.curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);   /* stalled for 30 s: give up */
	curl_easy_setopt(p.curl, CURLOPT_LOW_SPEED_TIME, 30L);
	curl_easy_setopt(p.curl, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(p.curl, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(p.curl, CURLOPT_BUFFERSIZE, 512L * 1024);

	if (export_fetch(&p, &entry, err, sizeof(err)) < 0) {
		code = p.code ? p.code : 502;
		phos_warn("pull of %s from %s: %s", p.name, from, err);
		pull_free(&p);
		return *ret_body = err_json("%s", err), code;
	}
	phos_info("pulling %s from %s: %" PRIu64 " bytes of gpu.data in %zu extents", p.name, from,
		  p.img->data_bytes, p.next);
	code = inv_function_deploy_made(entry, pull_make, pull_status, &p, ret_body);
	if (code == 201) {
		json_object_set_new(*ret_body, "pull",
				    json_pack("{s:s,s:I,s:I,s:I,s:I,s:f}", "from", from, "bytes_fetched",
					      (json_int_t)p.fetched, "bytes_reused", (json_int_t)p.reused,
					      "chunks_fetched", (json_int_t)p.chunks_fetched, "chunks_reused",
					      (json_int_t)p.chunks_reused, "seconds", phos_now() - p.started));
		phos_info("pulled %s from %s: %" PRIu64 " bytes fetched, %" PRIu64 " reused", p.name, from, p.fetched,
			  p.reused);
	} else {
		phos_warn("pull of %s from %s failed (%d)", p.name, from, code);
	}
	pull_free(&p);
	return code;
}
