/* SPDX-License-Identifier: MIT */
/*
 * The users a CRIU image's tasks run as (criu.h, phos_criu_image_users).
 *
 * A CRIU restore gives every task back the credentials of its image: a
 * snapshot pulled from a peer, or an instance moved from one, would run here
 * as whatever user the peer ran it as (a peer started with --run-as self: uid
 * 0 with every capability), whatever this invoker's own --run-as says. So the
 * image's credentials are read and held against ours before such an image is
 * taken.
 *
 * Where they are (CRIU's images/core.proto, creds.proto), in each task's and
 * thread's core-ID.img: two magic words, one entry (u32 size, then the
 * protobuf message):
 *
 *   core_entry.thread_core (5) ─▶ thread_core_entry.creds (10) ─▶ creds_entry
 *       uid 1, gid 2, euid 3, egid 4, suid 5, sgid 6, fsuid 7, fsgid 8,
 *       cap_prm 10, cap_eff 11 (repeated uint32: plain or packed)
 *
 * The reader walks protobuf's wire format by hand (varints and
 * length-delimited fields, bounded by the entry): it needs eleven numbers, not
 * a protobuf library.
 *
 * The files a restore opens (phos_criu_image_files): CRIU opens every regular
 * file of the image (a descriptor, a mapping, the cwd and root) by its path,
 * as root, before it gives the tasks their credentials; an image that names
 * a file its user may not open would hand the restored task that file. They
 * are in files.img (the common magic, then FILES_MAGIC; entries as above):
 *
 *   file_entry: type 1 (1 = REG), reg 3 ─▶ reg_file_entry: flags 2, name 6
 */
#include "criu.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"

#define CORE_MAGIC     0x55053847u   /* CRIU's magic.h: "Kolomna" */
#define CORE_MAX_BYTES (1u << 20)     /* a core entry is a few KiB */
#define CORE_MAX_FILES 4096
#define IMG_COMMON_MAGIC 0x54564319u
#define FILES_MAGIC      0x56303138u   /* "Toropets" */
#define FILES_MAX_BYTES  (16u << 20)
#define FILES_MAX        65536
#define FD_TYPE_REG      1

struct pb {
	const uint8_t *p, *end;
};

static bool varint(struct pb *b, uint64_t *ret)
{
	uint64_t v = 0;

	for (int shift = 0; shift < 64 && b->p < b->end; shift += 7) {
		uint8_t c = *b->p++;

		v |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80)) {
			*ret = v;
			return true;
		}
	}
	return false;
}

/* The next field of b: its number, wire type, and its value (a varint) or
 * its bytes (length-delimited, in *ret_sub). false at the end or on a
 * malformed field. */
static bool field(struct pb *b, uint32_t *ret_num, unsigned *ret_type, uint64_t *ret_v, struct pb *ret_sub)
{
	uint64_t key, len;

	if (b->p >= b->end || !varint(b, &key))
		return false;
	*ret_num = (uint32_t)(key >> 3);
	*ret_type = key & 7;
	switch (*ret_type) {
	case 0:
		return varint(b, ret_v);
	case 1:
		if (b->end - b->p < 8)
			return false;
		b->p += 8;
		return true;
	case 5:
		if (b->end - b->p < 4)
			return false;
		b->p += 4;
		return true;
	case 2:
		if (!varint(b, &len) || len > (uint64_t)(b->end - b->p))
			return false;
		ret_sub->p = b->p;
		ret_sub->end = b->p + len;
		b->p += len;
		return true;
	default:
		return false;
	}
}

/* The length-delimited field num of b (the last one), or false. */
static bool message_field(struct pb b, uint32_t num, struct pb *ret)
{
	uint32_t n;
	unsigned t;
	uint64_t v;
	struct pb sub;
	bool found = false;

	while (field(&b, &n, &t, &v, &sub))
		if (n == num && t == 2) {
			*ret = sub;
			found = true;
		}
	return found && b.p == b.end;
}

/* creds_entry into ret: the ids, and whether any capability is permitted or
 * effective. */
static bool creds_read(struct pb b, struct phos_criu_creds *ret)
{
	uint32_t n, seen = 0;
	unsigned t;
	uint64_t v;
	struct pb sub;

	memset(ret, 0, sizeof(*ret));
	while (field(&b, &n, &t, &v, &sub)) {
		if (n >= 1 && n <= 8 && t == 0) {
			uint32_t *ids[] = { &ret->uid, &ret->gid, &ret->euid, &ret->egid,
					    &ret->suid, &ret->sgid, &ret->fsuid, &ret->fsgid };

			*ids[n - 1] = (uint32_t)v;
			seen |= 1u << n;
		} else if ((n == 10 || n == 11) && t == 0) {
			ret->caps |= v != 0;
		} else if ((n == 10 || n == 11) && t == 2) {   /* packed */
			while (sub.p < sub.end && varint(&sub, &v))
				ret->caps |= v != 0;
		}
	}
	return b.p == b.end && seen == 0x1fe;   /* all eight ids */
}

/* The creds of one core-ID.img at dirfd/name. */
static int core_creds(int dirfd, const char *name, struct phos_criu_creds *ret, char *err, size_t errlen)
{
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	uint8_t *buf = NULL;
	uint32_t head[3];
	struct pb core, tc, cr;
	int r = -EBADMSG;

	if (fd < 0) {
		phos_errf(err, errlen, "%s: %s", name, strerror(errno));
		return -errno;
	}
	if (read(fd, head, sizeof(head)) != (ssize_t)sizeof(head) || head[1] != CORE_MAGIC || !head[2] ||
	    head[2] > CORE_MAX_BYTES) {
		phos_errf(err, errlen, "%s: not a CRIU core image", name);
		goto out;
	}
	buf = malloc(head[2]);
	if (!buf || read(fd, buf, head[2]) != (ssize_t)head[2]) {
		phos_errf(err, errlen, "%s: cut short", name);
		r = buf ? -EBADMSG : -ENOMEM;
		goto out;
	}
	core = (struct pb){ buf, buf + head[2] };
	if (!message_field(core, 5, &tc) || !message_field(tc, 10, &cr) || !creds_read(cr, ret)) {
		phos_errf(err, errlen, "%s: no credentials in it", name);
		goto out;
	}
	r = 0;
out:
	free(buf);
	close(fd);
	return r;
}

/* Calls each(dirfd, name, arg, err, errlen) for every core-ID.img of the
 * CRIU image in dir (at most CORE_MAX_FILES), until one returns nonzero:
 * that, or 0; -EBADMSG when there is none. */
static int each_core(const char *dir, int (*each)(int dfd, const char *name, void *arg, char *err, size_t errlen),
		     void *arg, char *err, size_t errlen)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	unsigned n = 0;
	int r = 0;

	if (!d) {
		r = -errno;
		phos_errf(err, errlen, "%s: %s", dir, strerror(-r));
		return r;
	}
	while (r == 0 && (de = readdir(d))) {
		size_t len = strlen(de->d_name);

		if (strncmp(de->d_name, "core-", 5) || len < 10 || strcmp(de->d_name + len - 4, ".img"))
			continue;
		if (++n > CORE_MAX_FILES) {
			phos_errf(err, errlen, "%s: more than %u tasks", dir, CORE_MAX_FILES);
			r = -E2BIG;
			break;
		}
		r = each(dirfd(d), de->d_name, arg, err, errlen);
	}
	closedir(d);
	if (r == 0 && n == 0) {
		phos_errf(err, errlen, "%s: no task in the CRIU image", dir);
		r = -EBADMSG;
	}
	return r;
}

/* each_core: one task's creds held against want. */
static int core_user_check(int dfd, const char *name, void *arg, char *err, size_t errlen)
{
	const struct phos_criu_creds *want = arg;
	struct phos_criu_creds c;
	int r = core_creds(dfd, name, &c, err, errlen);

	if (r == 0 && (c.uid != want->uid || c.euid != want->uid || c.suid != want->uid || c.fsuid != want->uid ||
		       c.gid != want->gid || c.egid != want->gid || c.sgid != want->gid || c.fsgid != want->gid ||
		       (c.caps && !want->caps))) {
		phos_errf(err, errlen, "a task of the image runs as uid %u gid %u%s (%s); functions here run as uid "
			  "%u gid %u%s", c.euid, c.egid, c.caps ? " with capabilities" : "", name, want->uid,
			  want->gid, want->caps ? "" : " without capabilities");
		r = -EPERM;
	}
	return r;
}

int phos_criu_image_users(const char *dir, const struct phos_criu_creds *want, char *err, size_t errlen)
{
	return each_core(dir, core_user_check, (void *)want, err, errlen);
}

struct reg_file {
	char *name;   /* malloc'ed */
	uint32_t flags;
	bool dir;     /* a directory here (stat by root, not the image's word) */
};

/* reg_file_entry into ret. */
static bool reg_read(struct pb b, struct reg_file *ret)
{
	uint32_t n;
	unsigned t;
	uint64_t v;
	struct pb sub, name = { NULL, NULL };

	ret->flags = 0;
	while (field(&b, &n, &t, &v, &sub)) {
		if (n == 2 && t == 0)
			ret->flags = (uint32_t)v;
		else if (n == 6 && t == 2)
			name = sub;
	}
	if (b.p != b.end || !name.p || name.end == name.p || name.end - name.p >= PATH_MAX ||
	    memchr(name.p, 0, (size_t)(name.end - name.p)))
		return false;
	ret->name = strndup((const char *)name.p, (size_t)(name.end - name.p));
	return ret->name != NULL;
}

/* In a child as uid/gid (no supplementary groups): the index of the first
 * file (not a directory) it may not open as the image has it open, or -1. Only
 * async-signal-safe calls after the fork. */
static long first_refused(const struct reg_file *f, size_t n, uid_t uid, gid_t gid, int *ret_errno)
{
	int pfd[2], st;
	long ans[2] = { -1, 0 };
	pid_t pid;

	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -2;
	pid = fork();
	if (pid < 0) {
		close(pfd[0]);
		close(pfd[1]);
		return -2;
	}
	if (pid == 0) {
		long out[2] = { -2, 0 };

		if (setgroups(0, NULL) == 0 && setresgid(gid, gid, gid) == 0 && setresuid(uid, uid, uid) == 0) {
			out[0] = -1;
			for (size_t i = 0; i < n && out[0] == -1; i++) {
				if (f[i].dir)
					continue;
				int fd = open(f[i].name, (int)(f[i].flags & O_ACCMODE) | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);

				if (fd >= 0)
					close(fd);
				else if (errno != ENOENT)   /* gone: CRIU restores it from the image, not from here */
					out[0] = (long)i, out[1] = errno;
			}
		}
		(void)!write(pfd[1], out, sizeof(out));
		_exit(0);
	}
	close(pfd[1]);
	if (read(pfd[0], ans, sizeof(ans)) != (ssize_t)sizeof(ans))
		ans[0] = -2;
	close(pfd[0]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	*ret_errno = (int)ans[1];
	return ans[0];
}

/* files.img of dir, whole, checked to be a CRIU files image: its bytes in
 * *ret_buf (the caller frees them) and *ret_size, or -errno (err). */
static int files_img_read(const char *dir, uint8_t **ret_buf, size_t *ret_size, char *err, size_t errlen)
{
	char path[PATH_MAX];
	struct stat sb;
	uint8_t *buf = NULL;
	uint32_t magic[2];
	int fd, r = -EBADMSG;

	snprintf(path, sizeof(path), "%s/reg-files.img", dir);
	if (access(path, F_OK) == 0) {   /* CRIU before 3.15 kept them apart: not read here */
		phos_errf(err, errlen, "reg-files.img: an image of an old CRIU");
		return -EBADMSG;
	}
	if ((size_t)snprintf(path, sizeof(path), "%s/files.img", dir) >= sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		phos_errf(err, errlen, "files.img: %s", strerror(errno));
		return -errno;
	}
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode) || sb.st_size < 8 || sb.st_size > FILES_MAX_BYTES) {
		phos_errf(err, errlen, "files.img: not a CRIU files image (or over %u MiB)", FILES_MAX_BYTES >> 20);
		goto out;
	}
	buf = malloc((size_t)sb.st_size + 1);
	if (!buf) {
		r = -ENOMEM;
		goto out;
	}
	if (pread(fd, buf, (size_t)sb.st_size, 0) != sb.st_size) {
		phos_errf(err, errlen, "files.img: cut short");
		goto out;
	}
	memcpy(magic, buf, sizeof(magic));
	if (magic[0] != IMG_COMMON_MAGIC || magic[1] != FILES_MAGIC) {
		phos_errf(err, errlen, "files.img: not a CRIU files image");
		goto out;
	}
	*ret_buf = buf;
	*ret_size = (size_t)sb.st_size;
	buf = NULL;
	r = 0;
out:
	free(buf);
	close(fd);
	return r;
}

/* The regular files among files.img's entries (size bytes at buf, after its
 * 8-byte magic) into files (FILES_MAX of them), *ret_n set as they are
 * read. 0 or -errno (err). */
static int reg_files_parse(const uint8_t *buf, size_t size, struct reg_file *files, size_t *ret_n, char *err,
			   size_t errlen)
{
	size_t off = 8;

	while (off < size) {
		uint32_t len, num;
		unsigned t;
		uint64_t v, type = 0;
		struct pb e, sub, reg = { NULL, NULL };

		if (size - off < 4 || (memcpy(&len, buf + off, 4), len > size - off - 4)) {
			phos_errf(err, errlen, "files.img: an entry past its end");
			return -EBADMSG;
		}
		e = (struct pb){ buf + off + 4, buf + off + 4 + len };
		off += 4 + len;
		while (field(&e, &num, &t, &v, &sub)) {
			if (num == 1 && t == 0)
				type = v;
			else if (num == 3 && t == 2)
				reg = sub;
		}
		if (e.p != e.end) {
			phos_errf(err, errlen, "files.img: a malformed entry");
			return -EBADMSG;
		}
		if (type != FD_TYPE_REG)
			continue;
		if (*ret_n == FILES_MAX) {
			phos_errf(err, errlen, "files.img: more than %u files", FILES_MAX);
			return -E2BIG;
		}
		if (!reg.p || !reg_read(reg, &files[*ret_n])) {
			phos_errf(err, errlen, "files.img: a regular file without a name");
			return -EBADMSG;
		}
		(*ret_n)++;
	}
	return 0;
}

int phos_criu_image_files(const char *dir, uid_t uid, gid_t gid, char *err, size_t errlen)
{
	uint8_t *buf = NULL;
	struct reg_file *files = NULL;
	size_t n = 0, size = 0;
	int r, why = 0;

	r = files_img_read(dir, &buf, &size, err, errlen);
	if (r < 0)
		return r;
	files = calloc(FILES_MAX, sizeof(*files));
	r = files ? reg_files_parse(buf, size, files, &n, err, errlen) : -ENOMEM;
	if (r == 0) {
		long bad;

		/* Directories are let through: the cwd and root of every task are
		 * among them (the invoker's own working directory, which its user
		 * may not cross), and a descriptor of one gives a listing, not
		 * contents. */
		for (size_t i = 0; i < n; i++) {
			struct stat fs;

			files[i].dir = stat(files[i].name, &fs) == 0 && S_ISDIR(fs.st_mode);
		}
		bad = first_refused(files, n, uid, gid, &why);
		if (bad == -2) {
			phos_errf(err, errlen, "cannot check the image's files as uid %u", (unsigned)uid);
			r = -EIO;
		} else if (bad >= 0) {
			phos_errf(err, errlen, "the image opens %s, which uid %u may not open here (%s)", files[bad].name,
				  (unsigned)uid, strerror(why));
			r = -EPERM;
		}
	}
	for (size_t i = 0; files && i < n; i++)
		free(files[i].name);
	free(files);
	free(buf);
	return r;
}

/* ---- re-owning an image (phos_criu_image_reown) ---- */

struct out {
	uint8_t *p;
	size_t len, cap;
};

static bool put(struct out *o, const void *d, size_t n)
{
	if (o->len + n > o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 256;
		uint8_t *p;

		while (cap < o->len + n)
			cap *= 2;
		if (!(p = realloc(o->p, cap)))
			return false;
		o->p = p;
		o->cap = cap;
	}
	memcpy(o->p + o->len, d, n);
	o->len += n;
	return true;
}

static bool put_varint(struct out *o, uint64_t v)
{
	uint8_t b[10];
	size_t n = 0;

	do {
		b[n] = (uint8_t)(v & 0x7f);
		v >>= 7;
		b[n] |= v ? 0x80 : 0;
		n++;
	} while (v);
	return put(o, b, n);
}

static bool put_message(struct out *o, uint32_t num, const struct out *m)
{
	return put_varint(o, (uint64_t)num << 3 | 2) && put_varint(o, m->len) && put(o, m->p, m->len);
}

/* creds_entry with the eight ids uid/gid, no inheritable, permitted,
 * effective or ambient capability (the same count of words, zero), no
 * supplementary group; the rest (bounding set, securebits, LSM, no_new_privs)
 * as it was. */
static bool creds_reown(struct pb in, uint32_t uid, uint32_t gid, struct out *o)
{
	uint32_t n;
	unsigned t;
	uint64_t v;
	struct pb sub;

	for (const uint8_t *start = in.p; field(&in, &n, &t, &v, &sub); start = in.p) {
		bool cap = n == 9 || n == 10 || n == 11 || n == 19;   /* inh, prm, eff, amb */
		bool ok;

		if (n >= 1 && n <= 8 && t == 0) {
			ok = put_varint(o, (uint64_t)n << 3) && put_varint(o, n % 2 ? uid : gid);
		} else if (cap && t == 0) {
			ok = put_varint(o, (uint64_t)n << 3) && put_varint(o, 0);
		} else if (cap && t == 2) {   /* packed: as many zero words */
			size_t words = 0;

			while (sub.p < sub.end && varint(&sub, &v))
				words++;
			ok = put_varint(o, (uint64_t)n << 3 | 2) && put_varint(o, words);
			for (size_t i = 0; ok && i < words; i++)
				ok = put_varint(o, 0);
		} else if (n == 14) {         /* groups */
			ok = true;
		} else {
			ok = put(o, start, (size_t)(in.p - start));
		}
		if (!ok)
			return false;
	}
	return in.p == in.end;
}

/* in copied to o, its one field path[0] (a message) replaced by that message
 * re-owned: depth levels down path, creds_entry re-owned at the last. */
static bool nested_reown(struct pb in, const uint32_t *path, unsigned depth, uint32_t uid, uint32_t gid,
			 struct out *o)
{
	uint32_t n;
	unsigned t;
	uint64_t v;
	struct pb sub;
	unsigned found = 0;

	for (const uint8_t *start = in.p; field(&in, &n, &t, &v, &sub); start = in.p) {
		if (n == path[0] && t == 2) {
			struct out m = { 0 };
			bool ok = depth == 1 ? creds_reown(sub, uid, gid, &m) :
				  nested_reown(sub, path + 1, depth - 1, uid, gid, &m);

			ok = ok && put_message(o, n, &m);
			free(m.p);
			if (!ok)
				return false;
			found++;
		} else if (!put(o, start, (size_t)(in.p - start))) {
			return false;
		}
	}
	return in.p == in.end && found == 1;
}

/* One core-ID.img at dirfd/name rewritten (a temporary file renamed over it). */
static int core_reown(int dirfd, const char *name, uint32_t uid, uint32_t gid, char *err, size_t errlen)
{
	static const uint32_t path[] = { 5, 10 };   /* thread_core, creds */
	int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), r = -EBADMSG;
	struct out o = { 0 };
	uint8_t *buf = NULL;
	struct stat sb;
	char tmp[NAME_MAX + 8];

	if (fd < 0) {
		phos_errf(err, errlen, "%s: %s", name, strerror(errno));
		return -errno;
	}
	if (fstat(fd, &sb) < 0 || sb.st_size < 12 || sb.st_size > CORE_MAX_BYTES + 12) {
		phos_errf(err, errlen, "%s: not a CRIU core image", name);
		goto out;
	}
	buf = malloc((size_t)sb.st_size);
	if (!buf || pread(fd, buf, (size_t)sb.st_size, 0) != sb.st_size) {
		phos_errf(err, errlen, "%s: cut short", name);
		r = buf ? -EBADMSG : -ENOMEM;
		goto out;
	}
	uint32_t head[3];

	memcpy(head, buf, sizeof(head));
	if (head[1] != CORE_MAGIC || !head[2] || head[2] > (uint64_t)sb.st_size - 12) {
		phos_errf(err, errlen, "%s: not a CRIU core image", name);
		goto out;
	}
	if (!put(&o, buf, 12) ||   /* the magics and the size, set below */
	    !nested_reown((struct pb){ buf + 12, buf + 12 + head[2] }, path, 2, uid, gid, &o) ||
	    !put(&o, buf + 12 + head[2], (size_t)sb.st_size - 12 - head[2])) {
		phos_errf(err, errlen, "%s: no credentials to re-own", name);
		goto out;
	}
	head[2] = (uint32_t)(o.len - 12 - ((size_t)sb.st_size - 12 - head[2]));
	memcpy(o.p + 8, &head[2], 4);
	snprintf(tmp, sizeof(tmp), "%s.tmp", name);
	int w = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (w < 0 || write(w, o.p, o.len) != (ssize_t)o.len || fsync(w) < 0) {
		r = -(errno ? errno : EIO);
		phos_errf(err, errlen, "%s: %s", tmp, strerror(-r));
		if (w >= 0)
			close(w);
		unlinkat(dirfd, tmp, 0);
		goto out;
	}
	close(w);
	if (renameat(dirfd, tmp, dirfd, name) < 0) {
		r = -errno;
		phos_errf(err, errlen, "%s: %s", name, strerror(errno));
		unlinkat(dirfd, tmp, 0);
		goto out;
	}
	r = 0;
out:
	free(o.p);
	free(buf);
	close(fd);
	return r;
}

/* each_core: one task re-owned to the ids in arg ({uid, gid}). */
static int core_reown_each(int dfd, const char *name, void *arg, char *err, size_t errlen)
{
	const uint32_t *ids = arg;

	return core_reown(dfd, name, ids[0], ids[1], err, errlen);
}

int phos_criu_image_reown(const char *dir, uint32_t uid, uint32_t gid, char *err, size_t errlen)
{
	uint32_t ids[2] = { uid, gid };

	return each_core(dir, core_reown_each, ids, err, errlen);
}
