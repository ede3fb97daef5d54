/* SPDX-License-Identifier: MIT */
/*
 * The puller side of a snapshot pull (transfer.h): POST /system/functions
 * {"name": N, "from": "http://host-a:8080", "from_token": T} fetches N's
 * registry entry and snapshot from the peer invoker at "from" (libcurl),
 * verifies every byte against the manifest, and commits it like a deploy,
 * without running the program.
 *
 *   request checks (400) ─▶ listed as deploying (phase "export": describe
 *   shows it, a remove cancels it) ─▶ GET export (502 unreachable, bad token,
 *   bad answer; 404 no such function there) ─▶ compatibility (422: export
 *   version, image major, device, GPU model, stand-in build) ─▶ chunk lists
 *   checked against the manifest (502) ─▶ free disk (507) ─▶ the registry
 *   entry taken (phase "pulling") ─▶
 *   modules, cpu/ files, gpu.data chunks into snapshots/N.tmp-*: each chunk a
 *   local snapshot holds is copied and re-hashed, the others fetched in ranges
 *   of up to 64 MiB, streamed to disk and hashed as they come (a mismatch:
 *   502, the temporary removed) ─▶ manifest.json last, read back ─▶ commit ─▶
 *   functions/N.json
 *
 * The whole pull has a deadline, the request's deploy_timeout_ms (default
 * INV_PULL_TIMEOUT_MS) from its start: a peer that trickles bytes just
 * above libcurl's low-speed limit fails it then (504), as a remove (409) or
 * the drain (503) do at any time, every transfer aborted within about a
 * second (pull_cancelled, libcurl's progress callback) and the temporary
 * removed. The transfers themselves are in pull_fetch.c. Memory is bounded: the
 * export document (at most 64 MiB), one 4 MiB buffer for local copies;
 * fetched bytes go from libcurl's buffer to the file.
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
#include "criu.h"
#include "pull.h"
#include "transfer.h"


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

void inv_gpu_models(char *buf, size_t len)
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
		return pull_fail(p, 422, -EPROTONOSUPPORT, err, errlen, "the snapshot is of device '%.32s', unknown here",
			    img->device);
	if (strcmp(inv_cfg.device, "cuda"))
		return pull_fail(p, 422, -EPROTONOSUPPORT, err, errlen,
			    "the snapshot was taken on a GPU (%.128s); this invoker runs the %s device", img->gpu_name,
			    inv_cfg.device);
	inv_gpu_models(models, sizeof(models));
	if (!inv_gpu_model_here(img->gpu_name, models))
		return pull_fail(p, 422, -EPROTONOSUPPORT, err, errlen,
			    "the snapshot was taken on a %.128s; this host has none (%.128s)", img->gpu_name, models);
	return 0;
}

bool inv_gpu_model_here(const char *name, const char *models)
{
	size_t n = strlen(name);

	if (!models[0])
		return true;   /* no GPU information here (no driver): nothing to compare */
	for (const char *m = models; *m;) {
		size_t k = strcspn(m, "\n");

		if (k == n && !strncmp(m, name, n))
			return true;
		m += k + (m[k] == '\n');
	}
	return false;
}

void inv_driver_version(char *buf, size_t len)
{
	FILE *f = fopen("/proc/driver/nvidia/version", "re");
	char line[512];

	buf[0] = '\0';
	if (!f)
		return;
	/* "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Thu ...", or
	 * "... UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...":
	 * the first word after "Kernel Module" made of digits and dots */
	if (fgets(line, sizeof(line), f)) {
		char *m = strstr(line, "Kernel Module");

		for (m = m ? m + strlen("Kernel Module") : NULL; m && *m;) {
			size_t k;

			m += strspn(m, " \t\n");
			k = strcspn(m, " \t\n");
			if (k && strspn(m, "0123456789.") == k && memchr(m, '.', k)) {
				snprintf(buf, len, "%.*s", (int)k, m);
				break;
			}
			m += k;
		}
	}
	fclose(f);
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
		return pull_fail(p, 502, -EBADMSG, err, errlen, "the export lists %zu extents, the manifest %zu",
			    json_array_size(arr), want);
	p->ext = calloc(want + 1, sizeof(*p->ext));
	if (!p->ext)
		return pull_fail(p, 500, -ENOMEM, err, errlen, "out of memory");
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
			return pull_fail(p, 502, -EBADMSG, err, errlen, "the export's extent %zu does not match the manifest", i);
		x->chunks = calloc(nc, sizeof(uint64_t));
		if (!x->chunks)
			return pull_fail(p, 500, -ENOMEM, err, errlen, "out of memory");
		for (size_t j = 0; j < nc; j++)
			if (hex_u64(json_string_value(json_array_get(c, j)), &x->chunks[j]) < 0)
				return pull_fail(p, 502, -EBADMSG, err, errlen, "the export's extent %zu: a bad chunk hash", i);
		if (phos_image_combine(x->chunks, nc) != hash)
			return pull_fail(p, 502, -EBADMSG, err, errlen,
				    "the peer's chunk hashes of gpu.data [%" PRIu64 ", +%" PRIu64 ") do not combine to "
				    "the manifest's checksum", off, size);
	}
	/* gpu.data is its extents, each at the next aligned offset (as the
	 * executor writes it): a larger data_bytes would be a sparse file of the
	 * peer's choosing (512 GiB passed the 1 TiB limit), made here */
	uint64_t end = 0;

	for (i = 0; i < want; i++)
		if (phos_image_next_offset(p->ext[i].offset, p->ext[i].size) > end)
			end = phos_image_next_offset(p->ext[i].offset, p->ext[i].size);
	if (img->data_bytes > end)
		return pull_fail(p, 502, -EBADMSG, err, errlen,
			    "the peer's manifest makes gpu.data %" PRIu64 " bytes, its extents end at %" PRIu64,
			    img->data_bytes, end);
	return 0;
}

int inv_image_run_as(const char *dir, struct phos_image *img, bool *ret_reowned, char *err, size_t errlen)
{
	const struct phos_criu_user *u = inv_cfg.paths.run_as;
	struct phos_criu_creds want = { .uid = u ? u->uid : geteuid(), .gid = u ? u->gid : getegid(),
					.caps = !u && geteuid() == 0 };
	char cpu[PATH_MAX];
	int r;

	*ret_reowned = false;
	if ((size_t)snprintf(cpu, sizeof(cpu), "%s/%s", dir, img->criu_dir) >= sizeof(cpu))
		return -ENAMETOOLONG;
	r = phos_criu_image_users(cpu, &want, err, errlen);
	if (r == -EPERM && u) {
		/* another user's: made ours, and the manifest's list of its files made again */
		if ((r = phos_criu_image_reown(cpu, u->uid, u->gid, err, errlen)) == 0 &&
		    (r = phos_image_cpu_hash(dir, img, err, errlen)) == 0) {
			r = phos_image_write_manifest(dir, img);
			if (r < 0)
				phos_errf(err, errlen, "cannot write the re-owned image's manifest: %s", strerror(-r));
		}
		if (r == 0)
			r = phos_criu_image_users(cpu, &want, err, errlen);   /* as it is now */
		if (r == -EPERM)
			r = -EBADMSG;   /* re-owned and still not ours: a malformed image */
		*ret_reowned = r == 0;
	}
	/* the files CRIU opens as root for it: only those its user may open */
	if (r == 0 && u)
		r = phos_criu_image_files(cpu, u->uid, u->gid, err, errlen);
	return r;
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
	r = pull_http_get(p, path, NULL, &s, err, errlen);
	curl_easy_setopt(p->curl, CURLOPT_LOW_SPEED_TIME, 30L);
	if (r < 0) {
		free(s.mem);
		return r;
	}
	p->exp = json_loadb(s.mem ? s.mem : "", s.len, JSON_REJECT_DUPLICATES, &je);
	free(s.mem);
	if (!json_is_object(p->exp))
		return pull_fail(p, 502, -EBADMSG, err, errlen, "the peer's export is not a JSON object: %s", je.text);
	if (!json_is_integer(json_object_get(p->exp, "export_version")) ||
	    json_integer_value(json_object_get(p->exp, "export_version")) != INV_EXPORT_VERSION)
		return pull_fail(p, 422, -EPROTONOSUPPORT, err, errlen,
			    "the peer speaks export version %lld, this invoker %d: upgrade the older one",
			    (long long)json_integer_value(json_object_get(p->exp, "export_version")), INV_EXPORT_VERSION);
	fmt = json_object_get(p->exp, "format");
	if (!json_is_integer(json_object_get(fmt, "major")) ||
	    json_integer_value(json_object_get(fmt, "major")) != PHOS_IMAGE_MAJOR)
		return pull_fail(p, 422, -EPROTONOSUPPORT, err, errlen,
			    "the peer's snapshot is of format %lld.x, this invoker reads %d.x",
			    (long long)json_integer_value(json_object_get(fmt, "major")), PHOS_IMAGE_MAJOR);
	if (!str_of(p->exp, "standin") || strcmp(str_of(p->exp, "standin"), inv_standin_build()))
		return pull_fail(p, 422, -EPROTONOSUPPORT, err, errlen,
			    "the peer's CUDA stand-ins are another build (%.32s, here %s): CRIU would not restore its "
			    "snapshot here; install the same phos-fn build on both hosts",
			    str_of(p->exp, "standin") ? str_of(p->exp, "standin") : "none", inv_standin_build());
	p->snapshot_id = str_of(p->exp, "snapshot");
	if (!p->snapshot_id || strlen(p->snapshot_id) != 32 || strspn(p->snapshot_id, "0123456789abcdef") != 32)
		return pull_fail(p, 502, -EBADMSG, err, errlen, "the peer's export has no snapshot id");
	if (!str_of(p->exp, "name") || strcmp(str_of(p->exp, "name"), p->name))
		return pull_fail(p, 502, -EBADMSG, err, errlen, "the peer exported another function");
	p->manifest = str_of(p->exp, "manifest");
	p->manifest_len = json_string_length(json_object_get(p->exp, "manifest"));
	if (!p->manifest)
		return pull_fail(p, 502, -EBADMSG, err, errlen, "the peer's export has no manifest");
	r = phos_image_parse(p->manifest, p->manifest_len, &p->img, why, sizeof(why));
	if (r < 0)
		return pull_fail(p, r == -EPROTONOSUPPORT ? 422 : 502, r, err, errlen, "the peer's %s", why);
	if (p->img->ncpu_files == 0)
		return pull_fail(p, 502, -EBADMSG, err, errlen, "the peer's manifest has no CPU image checksums");
	if ((size_t)p->img->nmodules + p->img->ncpu_files + 1 > INV_EXPORT_MAX_FILES)
		return pull_fail(p, 502, -E2BIG, err, errlen, "the peer's snapshot has more than %u files",
			    (unsigned)INV_EXPORT_MAX_FILES);
	r = compatible(p, err, errlen);
	if (r < 0)
		return r;
	entry = json_object_get(p->exp, "function");
	if (!json_is_object(entry) || !str_of(entry, "name") || strcmp(str_of(entry, "name"), p->name) ||
	    !str_of(entry, "device") || strcmp(str_of(entry, "device"), p->img->device))
		return pull_fail(p, 502, -EBADMSG, err, errlen,
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
		return pull_fail(p, 507, -EFBIG, err, errlen, "the snapshot is %" PRIu64 " bytes, over the limit of %llu",
			    total, PULL_BYTES_MAX);
	{
		char dir[PATH_MAX];

		snprintf(dir, sizeof(dir), "%s/snapshots", inv_cfg.state_dir);
		int sr = statvfs(dir, &vfs);

		if (sr == 0 && phos_fault("pull_nospace"))
			vfs.f_bavail = 0;   /* tests: a full disk */
		if (sr == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < total + PULL_DISK_MARGIN)
			return pull_fail(p, 507, -ENOSPC, err, errlen,
				    "the snapshot needs %" PRIu64 " MiB, %llu MiB are free", total >> 20,
				    (unsigned long long)((uint64_t)vfs.f_bavail * vfs.f_frsize >> 20));
	}
	*ret_entry = entry;
	return 0;
}

/* f's pull is in phase (NULL: over), which a remove cancels through
 * cancel_fd; its elapsed time counts from the pull's start. */
static void set_phase(struct inv_function *f, const struct pull *p, const char *phase, int cancel_fd)
{
	pthread_mutex_lock(&f->lock);
	f->snap_phase = phase;
	f->snap_cancel_fd = cancel_fd;
	f->snap_started = p->started;
	f->snap_timeout_ms = phase ? p->timeout_ms : 0;
	pthread_mutex_unlock(&f->lock);
}

/* Every file of p's snapshot into the temporary directory tmp: the
 * modules (one file per fatbin), the CRIU image, gpu.data, each chunk a
 * local snapshot holds copied, the rest fetched, all verified. 0 or a
 * failure recorded in p. */
static int pull_files(struct pull *p, const char *tmp, char *err, size_t errlen)
{
	int r;

	pull_local_index(p);
	if (phos_fault("pull_stall")) {
		/* tests: a pull in progress, until a remove or the drain cancels it (10 s at most) */
		struct pollfd pfd = { .fd = p->cancel_fd, .events = POLLIN };

		for (int i = 0; i < 100 && !pull_cancelled(p); i++)
			poll(&pfd, 1, 100);
	}
	r = pull_image_files(p, tmp, err, errlen);
	return r == 0 ? pull_gpu_data(p, tmp, err, errlen) : r;
}

/* The manifest written last (a directory without one is never a
 * snapshot), the snapshot read back, and its CRIU image made to run as
 * our functions run (*ret_reowned when it was re-owned). 0 or a failure
 * recorded in p. */
static int pull_seal(struct pull *p, const char *tmp, bool *ret_reowned, char *err, size_t errlen)
{
	struct phos_image *check = NULL;
	char why[512];
	int r;

	r = pull_write_new(tmp, "manifest.json", p->manifest, p->manifest_len, err, errlen);
	if (r < 0) {
		p->code = r == -ENOSPC ? 507 : 500;   /* (err says why) */
		return r;
	}
	r = phos_image_read(tmp, &check, why, sizeof(why));
	if (r < 0)
		return pull_fail(p, 502, r, err, errlen, "the pulled snapshot does not read back: %s", why);
	/* it runs here as our functions run, whatever user the peer ran it as */
	r = inv_image_run_as(tmp, check, ret_reowned, why, sizeof(why));
	phos_image_free(check);
	if (r < 0)
		return pull_fail(p, r == -EPERM ? 422 : 502, r, err, errlen, "the peer's snapshot: %s", why);
	return 0;
}

/* inv_snapshot_maker: the registry entry and snapshot of f from the peer.
 * Listed from the start (phase "export" while the export document comes,
 * then "pulling", "committing"), cancelled in any phase by a remove, the
 * drain or the deadline. */
static int pull_make(struct inv_function *f, void *arg, char *err, size_t errlen)
{
	struct pull *p = arg;
	char tmp[PATH_MAX], why[512];
	bool reowned = false;
	json_t *entry = NULL;
	int r;

	p->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (p->cancel_fd < 0)
		return pull_fail(p, 500, -errno, err, errlen, "eventfd: %s", strerror(errno));
	set_phase(f, p, "export", p->cancel_fd);
	pthread_mutex_lock(&f->lock);
	r = f->removed || inv_draining;
	pthread_mutex_unlock(&f->lock);
	if (r) {
		r = pull_fail(p, inv_draining ? 503 : 409, -ECANCELED, err, errlen, "cancelled before it began");
		goto out_phase;
	}
	r = export_fetch(p, &entry, err, errlen);
	if (r == 0 && (r = inv_function_fill(f, entry, why, sizeof(why))) < 0)
		pull_fail(p, 502, -EBADMSG, err, errlen, "the registry entry: %s", why);
	if (r < 0)
		goto out_phase;
	phos_info("pulling %s: %" PRIu64 " bytes of gpu.data in %zu extents", p->name, p->img->data_bytes, p->next);
	set_phase(f, p, "pulling", p->cancel_fd);
	r = phos_image_dir_begin(f->snapshot_dir, tmp, sizeof(tmp));
	if (r < 0) {
		pull_fail(p, r == -ENOSPC ? 507 : 500, r, err, errlen, "cannot make the snapshot directory: %s", strerror(-r));
		goto out_phase;
	}
	r = pull_files(p, tmp, err, errlen);
	if (r == 0)
		r = pull_seal(p, tmp, &reowned, err, errlen);
	if (r < 0)
		goto out_abort;
	if (pull_cancelled(p)) {
		r = pull_fail_stopped(p, err, errlen);
		goto out_abort;
	}
	set_phase(f, p, "committing", p->cancel_fd);
	r = phos_image_dir_commit(tmp, f->snapshot_dir);
	if (r < 0) {
		pull_fail(p, r == -ENOSPC ? 507 : 500, r, err, errlen, "cannot commit the snapshot: %s", strerror(-r));
		goto out_abort;
	}
	if (!reowned)   /* else the manifest is ours now: the export reads it from disk */
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
	set_phase(f, p, NULL, -1);
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

int inv_pull_deploy(json_t *req, json_t **ret_body)
{
	struct pull p = { .cancel_fd = -1, .started = phos_now(), .timeout_ms = INV_PULL_TIMEOUT_MS };
	json_t *val, *timeout = json_object_get(req, "deploy_timeout_ms");
	const char *key, *from, *token;
	char err[1024];
	int code;

	json_object_foreach(req, key, val)
		if (strcmp(key, "name") && strcmp(key, "from") && strcmp(key, "from_token") &&
		    strcmp(key, "deploy_timeout_ms"))
			return *ret_body = inv_err_json("unknown field '%.64s' (a pull takes name, from, from_token and "
						    "deploy_timeout_ms)", key), 400;
	p.name = str_of(req, "name");
	from = str_of(req, "from");
	token = str_of(req, "from_token");
	if (!p.name || !inv_name_valid(p.name))
		return *ret_body = inv_err_json("name must match [a-z0-9][a-z0-9-]{0,62}"), 400;
	if (timeout && (!json_is_integer(timeout) || json_integer_value(timeout) < 100 ||
			json_integer_value(timeout) > 3600000))
		return *ret_body = inv_err_json("deploy_timeout_ms (the whole pull's) must be 100..3600000"), 400;
	if (timeout)
		p.timeout_ms = (unsigned)json_integer_value(timeout);
	p.deadline = p.started + p.timeout_ms / 1e3;
	if (!from)
		return *ret_body = inv_err_json("from must be the peer invoker's URL"), 400;
	if (!token || !pull_token_valid(token))
		return *ret_body = inv_err_json("from_token must be the peer's peer token (phos-fn peer-token there; 16..%d "
					    "printable characters)",
					    PULL_TOKEN_MAX), 400;
	if (pull_url_check(&p, from, err, sizeof(err)) < 0) {
		pull_free(&p);
		return *ret_body = inv_err_json("%s", err), 400;
	}
	if (pull_curl_open(&p, token) < 0) {
		pull_free(&p);
		return *ret_body = inv_err_json("out of memory"), 500;
	}
	phos_info("pulling %s from %s (within %u ms)", p.name, from, p.timeout_ms);
	code = inv_function_deploy_pending(p.name, pull_make, pull_status, &p, ret_body);
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
