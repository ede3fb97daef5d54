/* SPDX-License-Identifier: MIT */
/*
 * The puller's transfers (pull.h): GETs to the peer through libcurl, streamed
 * into files of the temporary snapshot and hashed as they arrive, and copies
 * of the chunks that a local snapshot already holds.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fdio.h"
#include "invoker.h"
#include "log.h"
#include "forward.h"
#include "pull.h"

/* ---- HTTP ---- */


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

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_start(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un);

int pull_curl_open(struct pull *p, const char *token)
{
	pthread_once(&curl_once, curl_start);
	snprintf(p->auth, sizeof(p->auth), "Authorization: Bearer %s", token);
	p->curl = curl_easy_init();
	p->headers = curl_slist_append(NULL, p->auth);
	if (!p->curl || !p->headers)
		return -ENOMEM;
	curl_easy_setopt(p->curl, CURLOPT_HTTPHEADER, p->headers);
	curl_easy_setopt(p->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(p->curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(p->curl, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(p->curl, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(p->curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);   /* stalled for 30 s: give up */
	curl_easy_setopt(p->curl, CURLOPT_LOW_SPEED_TIME, 30L);
	curl_easy_setopt(p->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(p->curl, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(p->curl, CURLOPT_BUFFERSIZE, 512L * 1024);
	pull_curl_keepalive(p->curl);
	return 0;
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *arg)
{
	struct sink *s = arg;
	size_t n = size * nmemb;

	if (!s->status)
		curl_easy_getinfo(s->p->curl, CURLINFO_RESPONSE_CODE, &s->status);
	if (pull_cancelled(s->p))
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
	return pull_cancelled(arg) ? 1 : 0;
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
int pull_http_get(struct pull *p, const char *path, const char *query, struct sink *s, char *err, size_t errlen)
{
	char *url = NULL, msg[400];
	CURLcode cr;
	int r = 0;

	s->status = 0;
	if (curl_url_set(p->base, CURLUPART_PATH, path, 0) != CURLUE_OK ||
	    curl_url_set(p->base, CURLUPART_QUERY, query, 0) != CURLUE_OK ||
	    curl_url_get(p->base, CURLUPART_URL, &url, 0) != CURLUE_OK)
		return pull_fail(p, 500, -ENOMEM, err, errlen, "cannot build the peer's URL");
	curl_easy_setopt(p->curl, CURLOPT_URL, url);
	/* the progress callback ends a transfer at the deadline (and on a
	 * cancel) within about a second; this backs it (0: no limit) */
	if (p->deadline) {
		double left = p->deadline - phos_now();

		curl_easy_setopt(p->curl, CURLOPT_TIMEOUT_MS, left > 0 ? (long)(left * 1e3) + 1 : 1L);
	} else {
		curl_easy_setopt(p->curl, CURLOPT_TIMEOUT_MS, 0L);
	}
	curl_easy_setopt(p->curl, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(p->curl, CURLOPT_WRITEDATA, s);
	curl_easy_setopt(p->curl, CURLOPT_XFERINFODATA, p);
	cr = curl_easy_perform(p->curl);
	curl_url_set(p->base, CURLUPART_QUERY, NULL, 0);
	if (!s->status)
		curl_easy_getinfo(p->curl, CURLINFO_RESPONSE_CODE, &s->status);
	curl_free(url);
	if (pull_cancelled(p))
		return pull_fail_stopped(p, err, errlen);
	if (s->mismatch)
		return 0;   /* the caller names the chunk */
	if (s->write_error)
		return pull_fail(p, s->werr == ENOSPC || s->werr == EDQUOT ? 507 : 500, -s->werr, err, errlen,
			    "writing the snapshot: %s", strerror(s->werr));
	if (cr != CURLE_OK && s->status == 200)
		return pull_fail(p, 502, -EIO, err, errlen, "peer: %s%s", curl_easy_strerror(cr),
			    s->len >= s->max && s->fd < 0 ? " (answer too large)" : "");
	if (cr != CURLE_OK)
		return pull_fail(p, 502, -EHOSTUNREACH, err, errlen, "cannot reach the peer: %s", curl_easy_strerror(cr));
	if (s->status == 200)
		return 0;
	peer_error(s, msg, sizeof(msg));
	if (s->status == 401)
		r = pull_fail(p, 502, -EACCES, err, errlen, "the peer refused the token (401): from_token must be the peer's peer token "
				  "(phos-fn peer-token there)");
	else if (s->status == 404 && strstr(path, "/export") && !query)
		r = pull_fail(p, 404, -ENOENT, err, errlen, "the peer has no function %s", p->name);
	else
		r = pull_fail(p, 502, -EIO, err, errlen, "the peer answered %ld: %s", s->status, msg);
	return r;
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
void pull_local_index(struct pull *p)
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

		if (inv_snapinfo_get(g, true, &si, err, sizeof(err)) == 0) {
			char id[33];

			/* the gpu.data the hashes are of, unless a re-snapshot replaced it since */
			pthread_rwlock_rdlock(&g->snap_lock);
			snprintf(path, sizeof(path), "%s/gpu.data", g->snapshot_dir);
			if (inv_snapshot_id(g->snapshot_dir, id) == 0 && !strcmp(id, si->id))
				fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
			pthread_rwlock_unlock(&g->snap_lock);
		} else {
			phos_warn("pull of %s: the chunks of %s are not reused: %s", p->name, g->name, err);
		}
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
	if (p->nlocal)
		qsort(p->local, p->nlocal, sizeof(*p->local), local_cmp);
}

/* Copies a chunk of hash and len from a local snapshot to fd at off: true
 * when one was found whose bytes still hash right. */
static bool local_copy(struct pull *p, uint64_t hash, uint64_t len, int fd, uint64_t off, void *buf)
{
	struct local_chunk key = { .hash = hash, .len = len };
	struct local_chunk *l = p->nlocal ? bsearch(&key, p->local, p->nlocal, sizeof(key), local_cmp) : NULL;

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
	return phos_pwrite_all(fd, buf, len, off) == 0;
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
	char urlpath[200], q[512];
	int r;

	if (p->file_route[0])
		snprintf(urlpath, sizeof(urlpath), "%s", p->file_route);
	else
		snprintf(urlpath, sizeof(urlpath), "/system/functions/%s/export/file", p->name);
	while (len > 0 && !s->mismatch) {
		uint64_t n = len < INV_EXPORT_RANGE_MAX ? len : INV_EXPORT_RANGE_MAX;
		uint64_t before = s->got;

		r = query_of(p, path, off, n, q, sizeof(q));
		if (r < 0)
			return pull_fail(p, 500, r, err, errlen, "path too long");
		free(s->mem);
		s->mem = NULL;
		s->len = s->cap = 0;
		r = pull_http_get(p, urlpath, q, s, err, errlen);
		if (r < 0)
			return r;
		if (!s->mismatch && s->got - before != n)
			return pull_fail(p, 502, -EBADMSG, err, errlen, "%s: the peer sent %" PRIu64 " of %" PRIu64 " bytes",
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
		return phos_errf_rc(err, errlen, -ENAMETOOLONG, "path too long");
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return phos_errf_rc(err, errlen, -errno, "%s: %s", rel, strerror(errno));
	*ret_fd = fd;
	return 0;
}

/* A module: its XXH3-128 must be its name. */
int pull_module(struct pull *p, const char *tmp, const struct phos_image_module *m, char *err, size_t errlen)
{
	char rel[128], hex[33];
	struct sink s = { .p = p, .fd = -1 };
	XXH128_hash_t h;
	int r;

	snprintf(rel, sizeof(rel), "modules/%s.fatbin", m->hash);
	r = open_new(tmp, rel, &s.fd, err, errlen);
	if (r < 0)
		return pull_fail(p, r == -ENOSPC ? 507 : 500, r, err, errlen, "%s", err);
	s.whole = XXH3_createState();
	if (!s.whole) {
		close(s.fd);
		return pull_fail(p, 500, -ENOMEM, err, errlen, "out of memory");
	}
	XXH3_128bits_reset(s.whole);
	r = fetch_range(p, rel, 0, m->size, &s, err, errlen);
	h = XXH3_128bits_digest(s.whole);
	snprintf(hex, sizeof(hex), "%016llx%016llx", (unsigned long long)h.high64, (unsigned long long)h.low64);
	XXH3_freeState(s.whole);
	free(s.mem);
	close(s.fd);
	if (r == 0 && strcmp(hex, m->hash))
		r = pull_fail(p, 502, -EBADMSG, err, errlen, "checksum mismatch in %s (fetched from the peer)", rel);
	return r;
}

/* A file of the CRIU image: its chunked hash must be the manifest's. */
int pull_cpu_file(struct pull *p, const char *tmp, const struct phos_image_file *cf, char *err, size_t errlen)
{
	char rel[160];
	struct sink s = { .p = p, .fd = -1 };
	size_t nc = (size_t)((cf->size + PHOS_IMAGE_HASH_CHUNK - 1) / PHOS_IMAGE_HASH_CHUNK);
	int r;

	snprintf(rel, sizeof(rel), "%s/%s", p->img->criu_dir, cf->name);
	r = open_new(tmp, rel, &s.fd, err, errlen);
	if (r < 0)
		return pull_fail(p, r == -ENOSPC ? 507 : 500, r, err, errlen, "%s", err);
	s.chunk = XXH3_createState();
	s.hashes = calloc(nc + 1, sizeof(uint64_t));
	s.maxhashes = nc ? nc : 1;
	if (!s.chunk || !s.hashes) {
		r = pull_fail(p, 500, -ENOMEM, err, errlen, "out of memory");
		goto out;
	}
	XXH3_64bits_reset(s.chunk);
	r = cf->size ? fetch_range(p, rel, 0, cf->size, &s, err, errlen) : 0;
	if (r == 0 && !s.mismatch && (s.chunk_fill > 0 || cf->size == 0))
		chunk_done(&s);   /* the short last chunk (an empty file hashes as one empty chunk) */
	if (r == 0 && (s.mismatch || phos_image_combine(s.hashes, s.nhashes) != cf->hash))
		r = pull_fail(p, 502, -EBADMSG, err, errlen, "checksum mismatch in %s (fetched from the peer)", rel);
out:
	XXH3_freeState(s.chunk);
	free(s.hashes);
	free(s.mem);
	close(s.fd);
	return r;
}

/* gpu.data: every chunk of every extent, copied from a local snapshot when
 * one holds it, else fetched in runs of consecutive chunks. */
int pull_gpu_data(struct pull *p, const char *tmp, char *err, size_t errlen)
{
	void *buf = malloc(PHOS_IMAGE_HASH_CHUNK);
	int fd = -1, r = 0;

	if (!buf)
		return pull_fail(p, 500, -ENOMEM, err, errlen, "out of memory");
	r = open_new(tmp, "gpu.data", &fd, err, errlen);
	if (r < 0) {
		free(buf);
		return pull_fail(p, 500, r, err, errlen, "%s", err);
	}
	/* the gaps between extents stay holes: no reader looks at them */
	if (ftruncate(fd, (off_t)p->img->data_bytes) < 0) {
		r = pull_fail(p, errno == ENOSPC || errno == EFBIG ? 507 : 500, -errno, err, errlen, "gpu.data: %s",
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

			if (pull_cancelled(p)) {
				r = pull_fail_stopped(p, err, errlen);
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
				if (run > 0 && p->nlocal && bsearch(&key, p->local, p->nlocal, sizeof(key), local_cmp))
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
				r = pull_fail(p, 500, -ENOMEM, err, errlen, "out of memory");
			} else {
				XXH3_64bits_reset(s.chunk);
				r = fetch_range(p, "gpu.data", x->offset + off, rlen, &s, err, errlen);
				if (r == 0 && !s.mismatch && s.chunk_fill > 0)
					chunk_done(&s);   /* the extent's short last chunk */
				if (r == 0 && (s.mismatch || s.nhashes != run))
					r = pull_fail(p, 502, -EBADMSG, err, errlen,
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

int pull_file_range(struct pull *p, int fd, const char *path, uint64_t off, uint64_t len, char *err, size_t errlen)
{
	struct sink s = { .p = p, .fd = fd, .off = off };
	int r = len ? fetch_range(p, path, off, len, &s, err, errlen) : 0;

	free(s.mem);
	return r;
}

int pull_gpu_data_whole(struct pull *p, const char *tmp, char *err, size_t errlen)
{
	struct sink s = { .p = p, .fd = -1 };
	int r = open_new(tmp, "gpu.data", &s.fd, err, errlen);

	if (r < 0)
		return pull_fail(p, r == -ENOSPC ? 507 : 500, r, err, errlen, "%s", err);
	/* (no chunk hashing: the sink only writes) */
	r = p->img->data_bytes ? fetch_range(p, "gpu.data", 0, p->img->data_bytes, &s, err, errlen) : 0;
	free(s.mem);
	close(s.fd);
	return r;
}

int pull_write_new(const char *dir, const char *rel, const char *data, size_t len, char *err, size_t errlen)
{
	int fd, r = open_new(dir, rel, &fd, err, errlen);

	if (r < 0)
		return r;
	for (size_t off = 0; off < len && r == 0;) {
		ssize_t w = write(fd, data + off, len - off);

		if (w < 0 && errno != EINTR)
			r = phos_errf_rc(err, errlen, -errno, "%s: %s", rel, strerror(errno));
		else if (w > 0)
			off += (size_t)w;
	}
	close(fd);
	return r;
}

int pull_image_files(struct pull *p, const char *tmp, char *err, size_t errlen)
{
	char sub[PATH_MAX + 100];
	int r = 0;

	snprintf(sub, sizeof(sub), "%s/modules", tmp);
	if (mkdir(sub, 0700) < 0)
		return pull_fail(p, 500, -errno, err, errlen, "modules/: %s", strerror(errno));
	snprintf(sub, sizeof(sub), "%s/%s", tmp, p->img->criu_dir);
	if (mkdir(sub, 0700) < 0)
		return pull_fail(p, 500, -errno, err, errlen, "%s/: %s", p->img->criu_dir, strerror(errno));
	for (uint32_t i = 0; i < p->img->nmodules && r == 0; i++) {
		bool seen = false;   /* one file per fatbin, however many modules load it */

		for (uint32_t j = 0; j < i && !seen; j++)
			seen = !strcmp(p->img->modules[j].hash, p->img->modules[i].hash);
		if (!seen)
			r = pull_module(p, tmp, &p->img->modules[i], err, errlen);
	}
	for (uint32_t i = 0; i < p->img->ncpu_files && r == 0; i++)
		r = pull_cpu_file(p, tmp, &p->img->cpu_files[i], err, errlen);
	return r;
}
