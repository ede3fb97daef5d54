/* SPDX-License-Identifier: MIT */
/* The control protocol's codec and socket I/O (see control.h). */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "control.h"
#include "log.h"

#define CTL_MAX_FDS 4   /* room to receive (and close) a few more than the one allowed */

struct ctl_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t length;
	uint32_t reserved;
};
_Static_assert(sizeof(struct ctl_hdr) == PHOS_CTL_HDR_SIZE, "frame header layout");

/* Fixed-size payloads, packed as they travel. */
struct __attribute__((packed)) ctl_hello { uint32_t pid; };
struct __attribute__((packed)) ctl_ready { double open_s, load_s, data_s; uint64_t data_bytes; uint8_t on_demand; };
struct __attribute__((packed)) ctl_dumped { double gpu_dump_s; uint64_t data_bytes; };
struct __attribute__((packed)) ctl_hot_done { uint64_t n, bytes; };
struct __attribute__((packed)) ctl_fallbacks {
	uint64_t opaque, overflow, validate_miss;
	uint8_t restoring;
	uint64_t shared_bytes, cow_bytes;
};
struct __attribute__((packed)) ctl_share { uint64_t id, addr, size, hash; };
struct __attribute__((packed)) ctl_checkpointed {
	uint8_t mode;
	uint64_t seq, data_bytes;
	double stall_s, total_s;
	uint64_t early;
	uint32_t rounds;
	uint64_t precopy_bytes, stop_bytes, reserve_copies;
	uint8_t host_copy;
};
struct __attribute__((packed)) ctl_restore { uint8_t on_demand; uint32_t adopt_pid; int32_t adopt_fd; };
struct __attribute__((packed)) ctl_held { uint8_t mode; uint64_t seq; double copy_s; };
struct __attribute__((packed)) ctl_precopied { uint32_t rounds; uint64_t precopy_bytes, dirty_bytes, data_end; };

/* CHECKPOINT's first byte: the mode, and this bit for wait_stop. */
#define CKPT_WAIT_STOP 0x80u

static const char *const type_names[PHOS_CTL_TYPE_END] = {
	[PHOS_CTL_HELLO] = "hello",         [PHOS_CTL_IDLE] = "idle",
	[PHOS_CTL_READY] = "ready",         [PHOS_CTL_DUMPED] = "dumped",
	[PHOS_CTL_ERROR] = "error",         [PHOS_CTL_HOT_DONE] = "hot-done",
	[PHOS_CTL_TOUCHED] = "touched",     [PHOS_CTL_FALLBACKS] = "fallbacks",
	[PHOS_CTL_SERVE] = "serve",         [PHOS_CTL_RESTORE] = "restore",
	[PHOS_CTL_HOT] = "hot",             [PHOS_CTL_ASK_TOUCHED] = "ask-touched",
	[PHOS_CTL_ASK_FALLBACKS] = "ask-fallbacks",
	[PHOS_CTL_CHECKPOINTED] = "checkpointed", [PHOS_CTL_HELD] = "held",
	[PHOS_CTL_CHECKPOINT] = "checkpoint",
	[PHOS_CTL_RESUME] = "resume",
	[PHOS_CTL_PRECOPIED] = "precopied", [PHOS_CTL_STOP] = "stop",
	[PHOS_CTL_PREPARE] = "prepare",     [PHOS_CTL_PREPARED] = "prepared",
	[PHOS_CTL_UNPREPARE] = "unprepare",
	[PHOS_CTL_SHARE] = "share",         [PHOS_CTL_SHARED] = "shared",
	[PHOS_CTL_ASK_COPIED] = "ask-copied", [PHOS_CTL_COPIED] = "copied",
};

static const char *const mode_names[PHOS_CKPT_MODE_END] = {
	[PHOS_CKPT_STW] = "stw", [PHOS_CKPT_COW] = "cow", [PHOS_CKPT_RECOPY] = "recopy",
};

const char *phos_ckpt_mode_name(unsigned mode)
{
	return mode < PHOS_CKPT_MODE_END ? mode_names[mode] : "unknown";
}

int phos_ckpt_mode_parse(const char *s, enum phos_ckpt_mode *ret)
{
	for (unsigned i = 0; s && i < PHOS_CKPT_MODE_END; i++) {
		if (!strcmp(s, mode_names[i])) {
			*ret = (enum phos_ckpt_mode)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *phos_ctl_type_name(unsigned type)
{
	return type > 0 && type < PHOS_CTL_TYPE_END ? type_names[type] : "unknown";
}

static bool carries_fd(unsigned type)
{
	return type == PHOS_CTL_SERVE || type == PHOS_CTL_RESTORE || type == PHOS_CTL_SHARE ||
	       type == PHOS_CTL_SHARED;
}

/* RESTORE's first byte: on_demand, and this bit for share. */
#define RESTORE_SHARE 0x2u

/* A shared buffer: a whole number of 2 MiB chunks at a 2 MiB-aligned address
 * (what one mapping covers), of a known buffer (id > 0). */
static bool share_ok(uint64_t id, uint64_t addr, uint64_t size)
{
	const uint64_t chunk = 2ull << 20;

	return id > 0 && size >= chunk && addr % chunk == 0 && addr + size > addr;
}

/* Length of the UTF-8 sequence at s (n bytes left) when it is well-formed
 * (shortest form, no surrogates, at most U+10FFFF), else 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	size_t len;
	uint32_t cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		len = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, cp = s[0] & 0x07;
	else
		return 0;
	if (n < len)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
		return 0;
	return len;
}

static bool utf8_valid(const char *s, size_t n)
{
	for (size_t i = 0, k; i < n; i += k)
		if (!(k = utf8_seq((const unsigned char *)s + i, n - i)))
			return false;
	return true;
}

/* --- encoding --- */

struct wbuf {
	uint8_t *p;
	size_t len, cap;
	bool failed;
};

static void put(struct wbuf *w, const void *data, size_t n)
{
	if (w->failed || n == 0)   /* an empty list may come as NULL */
		return;
	if (w->len + n > w->cap) {
		size_t cap = w->cap ? w->cap : 256;
		uint8_t *p;

		while (cap < w->len + n)
			cap *= 2;
		p = realloc(w->p, cap);
		if (!p) {
			w->failed = true;
			return;
		}
		w->p = p;
		w->cap = cap;
	}
	memcpy(w->p + w->len, data, n);
	w->len += n;
}

/* A path: 1..PHOS_CTL_PATH_MAX-1 bytes, no NUL (bounded by strnlen). */
static bool path_ok(const char *s, size_t *ret_len)
{
	size_t n = s ? strnlen(s, PHOS_CTL_PATH_MAX) : 0;

	*ret_len = n;
	return n > 0 && n < PHOS_CTL_PATH_MAX;
}

/* A RESTORE's adoption: none (both 0), or a pid and a descriptor number
 * (the kernel's limit on open files is below 2^20 on every system). */
static bool adopt_ok(uint32_t pid, int32_t fd)
{
	return (pid == 0 && fd == 0) || (pid > 0 && pid <= INT32_MAX && fd >= 0 && fd < (1 << 20));
}

/* The answers of a checkpoint in progress (CHECKPOINTED, HELD, PRECOPIED):
 * false for a mode out of range. */
static bool put_checkpoint_answer(struct wbuf *w, const struct phos_ctl_msg *m)
{
	switch (m->type) {
	case PHOS_CTL_CHECKPOINTED:
		if ((unsigned)m->checkpointed.mode >= PHOS_CKPT_MODE_END)
			return false;
		put(w, &(struct ctl_checkpointed){ (uint8_t)m->checkpointed.mode, m->checkpointed.seq,
						    m->checkpointed.data_bytes, m->checkpointed.stall_s,
						    m->checkpointed.total_s, m->checkpointed.early, m->checkpointed.rounds,
						    m->checkpointed.precopy_bytes, m->checkpointed.stop_bytes,
						    m->checkpointed.reserve_copies, m->checkpointed.host_copy ? 1 : 0 },
		    sizeof(struct ctl_checkpointed));
		return true;
	case PHOS_CTL_HELD:
		if ((unsigned)m->held.mode >= PHOS_CKPT_MODE_END)
			return false;
		put(w, &(struct ctl_held){ (uint8_t)m->held.mode, m->held.seq, m->held.copy_s }, sizeof(struct ctl_held));
		return true;
	default:   /* PRECOPIED */
		put(w, &(struct ctl_precopied){ m->precopied.rounds, m->precopied.precopy_bytes, m->precopied.dirty_bytes,
						 m->precopied.data_end },
		    sizeof(struct ctl_precopied));
		return true;
	}
}

/* The messages that carry a folder's path (RESTORE, PREPARE, CHECKPOINT,
 * HOT): their payload after the header. False when m does not check out. */
static bool put_paths(struct wbuf *w, const struct phos_ctl_msg *m)
{
	size_t n;

	switch (m->type) {
	case PHOS_CTL_RESTORE:
		if (!path_ok(m->restore.dir, &n) || !adopt_ok(m->restore.adopt.pid, m->restore.adopt.fd))
			return false;
		if (m->restore.share && m->restore.adopt.pid)
			return false;   /* a checkpoint's buffers are its own */
		put(w, &(struct ctl_restore){ (uint8_t)((m->restore.on_demand ? 1 : 0) |
							 (m->restore.share ? RESTORE_SHARE : 0)),
					      m->restore.adopt.pid, m->restore.adopt.fd },
		    sizeof(struct ctl_restore));
		put(w, m->restore.dir, n + 1);
		break;
	case PHOS_CTL_PREPARE:
		if (!path_ok(m->prepare.dir, &n))
			return false;
		put(w, m->prepare.dir, n + 1);
		break;
	case PHOS_CTL_CHECKPOINT: {
		uint8_t mode = (uint8_t)m->checkpoint.mode | (m->checkpoint.wait_stop ? CKPT_WAIT_STOP : 0);

		if ((unsigned)m->checkpoint.mode >= PHOS_CKPT_MODE_END || !path_ok(m->checkpoint.dir, &n) ||
		    (m->checkpoint.wait_stop && m->checkpoint.mode != PHOS_CKPT_RECOPY))
			return false;
		put(w, &mode, 1);
		put(w, m->checkpoint.dir, n + 1);
		break;
	}
	case PHOS_CTL_HOT: {
		uint32_t count = (uint32_t)m->hot.n;

		if (m->hot.n > PHOS_CTL_HOT_MAX || (m->hot.n && !m->hot.dirs))
			return false;
		put(w, &count, sizeof(count));
		for (size_t i = 0; i < m->hot.n; i++) {
			if (!path_ok(m->hot.dirs[i], &n))
				return false;
			put(w, m->hot.dirs[i], n + 1);
		}
		break;
	}
	default:
		break;
	}
	return true;
}

int phos_ctl_encode(const struct phos_ctl_msg *m, void **ret_buf, size_t *ret_len)
{
	struct wbuf w = { 0 };
	struct ctl_hdr h = { .magic = PHOS_CTL_MAGIC, .version = PHOS_CTL_VERSION, .type = (uint16_t)m->type };
	size_t n;

	if (m->type == 0 || (unsigned)m->type >= PHOS_CTL_TYPE_END)
		return -EINVAL;
	put(&w, &h, sizeof(h));
	switch (m->type) {
	case PHOS_CTL_HELLO:
		put(&w, &(struct ctl_hello){ m->hello.pid }, sizeof(struct ctl_hello));
		break;
	case PHOS_CTL_READY:
		put(&w, &(struct ctl_ready){ m->ready.open_s, m->ready.load_s, m->ready.data_s, m->ready.data_bytes,
					     m->ready.on_demand },
		    sizeof(struct ctl_ready));
		break;
	case PHOS_CTL_DUMPED:
		put(&w, &(struct ctl_dumped){ m->dumped.gpu_dump_s, m->dumped.data_bytes }, sizeof(struct ctl_dumped));
		break;
	case PHOS_CTL_ERROR:
		n = strnlen(m->error.reason, PHOS_CTL_REASON_MAX);
		if (n == PHOS_CTL_REASON_MAX || !utf8_valid(m->error.reason, n))
			goto bad;
		put(&w, m->error.reason, n + 1);
		break;
	case PHOS_CTL_HOT_DONE:
		put(&w, &(struct ctl_hot_done){ m->hot_done.n, m->hot_done.bytes }, sizeof(struct ctl_hot_done));
		break;
	case PHOS_CTL_TOUCHED:
	case PHOS_CTL_COPIED: {
		uint32_t count[2] = { (uint32_t)m->touched.n, 0 };

		if (m->touched.n > PHOS_CTL_TOUCHED_MAX || (m->touched.n && !m->touched.ids))
			goto bad;
		put(&w, count, sizeof(count));
		put(&w, m->touched.ids, m->touched.n * sizeof(uint64_t));
		break;
	}
	case PHOS_CTL_FALLBACKS:
		put(&w, &(struct ctl_fallbacks){ m->fallbacks.opaque, m->fallbacks.overflow, m->fallbacks.validate_miss,
						 m->fallbacks.restoring, m->fallbacks.shared_bytes,
						 m->fallbacks.cow_bytes },
		    sizeof(struct ctl_fallbacks));
		break;
	case PHOS_CTL_SHARE:
	case PHOS_CTL_SHARED:
		if (!share_ok(m->share.id, m->share.addr, m->share.size))
			goto bad;
		put(&w, &(struct ctl_share){ m->share.id, m->share.addr, m->share.size, m->share.hash },
		    sizeof(struct ctl_share));
		break;
	case PHOS_CTL_CHECKPOINTED:
	case PHOS_CTL_HELD:
	case PHOS_CTL_PRECOPIED:
		if (!put_checkpoint_answer(&w, m))
			goto bad;
		break;
	case PHOS_CTL_PREPARED:
		put(&w, &m->prepared.bytes, sizeof(uint64_t));
		put(&w, &m->prepared.free, sizeof(uint64_t));
		break;
	case PHOS_CTL_RESTORE:
	case PHOS_CTL_PREPARE:
	case PHOS_CTL_CHECKPOINT:
	case PHOS_CTL_HOT:
		if (!put_paths(&w, m))
			goto bad;
		break;
	default:   /* IDLE, SERVE, ASK_*: no payload */
		break;
	}
	if (w.failed) {
		free(w.p);
		return -ENOMEM;
	}
	((struct ctl_hdr *)w.p)->length = (uint32_t)(w.len - sizeof(h));
	*ret_buf = w.p;
	*ret_len = w.len;
	return 0;
bad:
	free(w.p);
	return -EINVAL;
}

/* --- decoding --- */

int phos_ctl_header_check(const void *hdr, unsigned *ret_type, uint32_t *ret_len, char *err, size_t errlen)
{
	struct ctl_hdr h;

	memcpy(&h, hdr, sizeof(h));
	if (h.magic != PHOS_CTL_MAGIC) {
		phos_errf(err, errlen, "not a control frame (magic %08x, expected %08x): a peer of another protocol?",
			  h.magic, PHOS_CTL_MAGIC);
		return -EPROTO;
	}
	if (h.version != PHOS_CTL_VERSION) {
		phos_errf(err, errlen, "the peer speaks control protocol version %u, this build speaks version %u",
			  h.version, PHOS_CTL_VERSION);
		return -EPROTONOSUPPORT;
	}
	if (h.type == 0 || h.type >= PHOS_CTL_TYPE_END) {
		phos_errf(err, errlen, "unknown control message type %u", h.type);
		return -EPROTO;
	}
	if (h.length > PHOS_CTL_MAX_PAYLOAD) {
		phos_errf(err, errlen, "a %s message of %u bytes (at most %u)", phos_ctl_type_name(h.type), h.length,
			  PHOS_CTL_MAX_PAYLOAD);
		return -EPROTO;
	}
	if (h.reserved) {
		phos_errf(err, errlen, "a %s message with reserved bits set", phos_ctl_type_name(h.type));
		return -EPROTO;
	}
	*ret_type = h.type;
	*ret_len = h.length;
	return 0;
}

/* The NUL-terminated string at p (at most left bytes, and less than max with
 * its NUL): its length, or -1 when its NUL is missing within bounds. */
static long str_at(const uint8_t *p, size_t left, size_t max)
{
	const uint8_t *nul = memchr(p, 0, left < max ? left : max);

	return nul ? nul - p : -1;
}

/* "a NAME message with a flag that is neither 0 nor 1" */
static int bad_bool(const char *name, char *err, size_t errlen)
{
	phos_errf(err, errlen, "a %s message with a flag that is neither 0 nor 1", name);
	return -EPROTO;
}

/* The messages of a fixed size (checked by the caller) into *m. */
/* A checkpoint's answers (CHECKPOINTED, HELD, PRECOPIED): the mirror of
 * put_checkpoint_answer. */
static int decode_checkpoint_answer(unsigned type, const uint8_t *p, struct phos_ctl_msg *m, char *err,
				    size_t errlen)
{
	switch (type) {
	case PHOS_CTL_CHECKPOINTED: {
		struct ctl_checkpointed c;

		memcpy(&c, p, sizeof(c));
		if (c.mode >= PHOS_CKPT_MODE_END) {
			phos_errf(err, errlen, "a checkpointed message of unknown mode %u", c.mode);
			return -EPROTO;
		}
		m->checkpointed.mode = (enum phos_ckpt_mode)c.mode;
		m->checkpointed.seq = c.seq;
		m->checkpointed.data_bytes = c.data_bytes;
		m->checkpointed.stall_s = c.stall_s;
		m->checkpointed.total_s = c.total_s;
		m->checkpointed.early = c.early;
		m->checkpointed.rounds = c.rounds;
		m->checkpointed.precopy_bytes = c.precopy_bytes;
		m->checkpointed.stop_bytes = c.stop_bytes;
		m->checkpointed.reserve_copies = c.reserve_copies;
		m->checkpointed.host_copy = c.host_copy != 0;
		return 0;
	}
	case PHOS_CTL_HELD: {
		struct ctl_held h;

		memcpy(&h, p, sizeof(h));
		if (h.mode >= PHOS_CKPT_MODE_END) {
			phos_errf(err, errlen, "a held message of unknown mode %u", h.mode);
			return -EPROTO;
		}
		m->held.mode = (enum phos_ckpt_mode)h.mode;
		m->held.seq = h.seq;
		m->held.copy_s = h.copy_s;
		return 0;
	}
	case PHOS_CTL_PRECOPIED: {
		struct ctl_precopied c;

		memcpy(&c, p, sizeof(c));
		m->precopied.rounds = c.rounds;
		m->precopied.precopy_bytes = c.precopy_bytes;
		m->precopied.dirty_bytes = c.dirty_bytes;
		m->precopied.data_end = c.data_end;
		return 0;
	}
	default:
		return 0;
	}
}

static int decode_fixed(unsigned type, const uint8_t *p, struct phos_ctl_msg *m, const char *name, char *err,
			size_t errlen)
{
	switch (type) {
	case PHOS_CTL_HELLO: {
		struct ctl_hello h;

		memcpy(&h, p, sizeof(h));
		m->hello.pid = h.pid;
		return 0;
	}
	case PHOS_CTL_READY: {
		struct ctl_ready r;

		memcpy(&r, p, sizeof(r));
		if (r.on_demand > 1)
			return bad_bool(name, err, errlen);
		m->ready.open_s = r.open_s;
		m->ready.load_s = r.load_s;
		m->ready.data_s = r.data_s;
		m->ready.data_bytes = r.data_bytes;
		m->ready.on_demand = r.on_demand;
		return 0;
	}
	case PHOS_CTL_DUMPED: {
		struct ctl_dumped d;

		memcpy(&d, p, sizeof(d));
		m->dumped.gpu_dump_s = d.gpu_dump_s;
		m->dumped.data_bytes = d.data_bytes;
		return 0;
	}
	case PHOS_CTL_HOT_DONE: {
		struct ctl_hot_done h;

		memcpy(&h, p, sizeof(h));
		m->hot_done.n = h.n;
		m->hot_done.bytes = h.bytes;
		return 0;
	}
	case PHOS_CTL_FALLBACKS: {
		struct ctl_fallbacks f;

		memcpy(&f, p, sizeof(f));
		if (f.restoring > 1)
			return bad_bool(name, err, errlen);
		m->fallbacks.opaque = f.opaque;
		m->fallbacks.overflow = f.overflow;
		m->fallbacks.validate_miss = f.validate_miss;
		m->fallbacks.restoring = f.restoring;
		m->fallbacks.shared_bytes = f.shared_bytes;
		m->fallbacks.cow_bytes = f.cow_bytes;
		return 0;
	}
	case PHOS_CTL_SHARE:
	case PHOS_CTL_SHARED: {
		struct ctl_share c;

		memcpy(&c, p, sizeof(c));
		if (!share_ok(c.id, c.addr, c.size)) {
			phos_errf(err, errlen, "a %s message of buffer %" PRIu64 " at %#" PRIx64 " of %" PRIu64
				  " bytes (an id, and a 2 MiB-aligned address)", name, c.id, c.addr, c.size);
			return -EPROTO;
		}
		m->share.id = c.id;
		m->share.addr = c.addr;
		m->share.size = c.size;
		m->share.hash = c.hash;
		return 0;
	}
	case PHOS_CTL_CHECKPOINTED:
	case PHOS_CTL_HELD:
	case PHOS_CTL_PRECOPIED:
		return decode_checkpoint_answer(type, p, m, err, errlen);
	case PHOS_CTL_PREPARED:
		memcpy(&m->prepared.bytes, p, sizeof(uint64_t));
		memcpy(&m->prepared.free, p + sizeof(uint64_t), sizeof(uint64_t));
		return 0;
	default:
		return 0;
	}
}

/* A checkpoint message: a mode byte, then a path. */
static int decode_checkpoint(const uint8_t *p, size_t len, struct phos_ctl_msg *m, char *err, size_t errlen)
{
	long n;

	if (len < 2 || (p[0] & ~CKPT_WAIT_STOP) >= PHOS_CKPT_MODE_END ||
	    ((p[0] & CKPT_WAIT_STOP) && (p[0] & ~CKPT_WAIT_STOP) != PHOS_CKPT_RECOPY)) {
		phos_errf(err, errlen, "a checkpoint message without its mode and path (or waiting for a "
			  "stop in a mode that has none)");
		return -EPROTO;
	}
	n = str_at(p + 1, len - 1, PHOS_CTL_PATH_MAX);
	if (n <= 0 || (size_t)n + 2 != len) {
		phos_errf(err, errlen, "a checkpoint message whose path is not one NUL-terminated string of 1 "
			  "to %u bytes", PHOS_CTL_PATH_MAX - 1);
		return -EPROTO;
	}
	m->checkpoint.mode = (enum phos_ckpt_mode)(p[0] & ~CKPT_WAIT_STOP);
	m->checkpoint.wait_stop = (p[0] & CKPT_WAIT_STOP) != 0;
	memcpy(m->checkpoint.dir, p + 1, (size_t)n + 1);

	return 0;
}

/* A prepare message: one path. */
static int decode_prepare(const uint8_t *p, size_t len, struct phos_ctl_msg *m, char *err, size_t errlen)
{
	long n;

	n = len ? str_at(p, len, PHOS_CTL_PATH_MAX) : -1;
	if (n <= 0 || (size_t)n + 1 != len) {
		phos_errf(err, errlen, "a prepare message whose path is not one NUL-terminated string of 1 to %u "
			  "bytes", PHOS_CTL_PATH_MAX - 1);
		return -EPROTO;
	}
	memcpy(m->prepare.dir, p, (size_t)n + 1);

	return 0;
}

/* An error message: one UTF-8 reason. */
static int decode_error(const uint8_t *p, size_t len, struct phos_ctl_msg *m, char *err, size_t errlen)
{
	long n;

	n = len ? str_at(p, len, PHOS_CTL_REASON_MAX) : -1;
	if (n < 0 || (size_t)n + 1 != len) {
		phos_errf(err, errlen, "an error message whose reason is not one NUL-terminated string of at "
			  "most %u bytes", PHOS_CTL_REASON_MAX - 1);
		return -EPROTO;
	}
	if (!utf8_valid((const char *)p, (size_t)n)) {
		phos_errf(err, errlen, "an error message whose reason is not UTF-8");
		return -EPROTO;
	}
	memcpy(m->error.reason, p, (size_t)n + 1);

	return 0;
}

/* A touched or copied message (name): a count, then that many buffer ids. */
static int decode_touched(const uint8_t *p, size_t len, const char *name, struct phos_ctl_msg *m, char *err,
			  size_t errlen)
{
	uint32_t count[2];

	if (len < sizeof(count)) {
		phos_errf(err, errlen, "a %s message of %zu bytes (shorter than its count)", name, len);
		return -EPROTO;
	}
	memcpy(count, p, sizeof(count));
	if (count[0] > PHOS_CTL_TOUCHED_MAX || count[1]) {
		phos_errf(err, errlen, "a %s message of %u ids (at most %u)", name, count[0], PHOS_CTL_TOUCHED_MAX);
		return -EPROTO;
	}
	if (len != sizeof(count) + (size_t)count[0] * sizeof(uint64_t)) {
		phos_errf(err, errlen, "a %s message of %zu bytes for %u ids", name, len, count[0]);
		return -EPROTO;
	}
	m->touched.n = count[0];
	m->touched.ids = malloc(count[0] ? count[0] * sizeof(uint64_t) : 1);
	if (!m->touched.ids)
		return -ENOMEM;
	memcpy(m->touched.ids, p + sizeof(count), count[0] * sizeof(uint64_t));

	return 0;
}

/* A restore message: its mode and adoption, then a path. */
static int decode_restore(const uint8_t *p, size_t len, struct phos_ctl_msg *m, char *err, size_t errlen)
{
	struct ctl_restore c;
	long n;

	if (len < sizeof(c) + 1) {
		phos_errf(err, errlen, "a restore message without its mode, adoption and path");
		return -EPROTO;
	}
	memcpy(&c, p, sizeof(c));
	if (c.on_demand & ~(1u | RESTORE_SHARE) || !adopt_ok(c.adopt_pid, c.adopt_fd) ||
	    (c.on_demand & RESTORE_SHARE && c.adopt_pid)) {
		phos_errf(err, errlen, "a restore message with mode %u, adopting pid %" PRIu32 " fd %" PRId32
			  " (mode bits 1 and 2; pid and fd both 0, or a pid and a descriptor number without"
			  " sharing)",
			  c.on_demand, c.adopt_pid, c.adopt_fd);
		return -EPROTO;
	}
	n = str_at(p + sizeof(c), len - sizeof(c), PHOS_CTL_PATH_MAX);
	if (n <= 0 || (size_t)n + 1 + sizeof(c) != len) {
		phos_errf(err, errlen, "a restore message whose path is not one NUL-terminated string of 1 to %u "
			  "bytes", PHOS_CTL_PATH_MAX - 1);
		return -EPROTO;
	}
	m->restore.on_demand = c.on_demand & 1;
	m->restore.share = (c.on_demand & RESTORE_SHARE) != 0;
	m->restore.adopt.pid = c.adopt_pid;
	m->restore.adopt.fd = c.adopt_fd;
	memcpy(m->restore.dir, p + sizeof(c), (size_t)n + 1);

	return 0;
}

/* A hot message: a count, then that many paths. */
static int decode_hot(const uint8_t *p, size_t len, struct phos_ctl_msg *m, char *err, size_t errlen)
{
	uint32_t count;
	size_t off = sizeof(count);
	long n;

	if (len < sizeof(count)) {
		phos_errf(err, errlen, "a hot message of %zu bytes (shorter than its count)", len);
		return -EPROTO;
	}
	memcpy(&count, p, sizeof(count));
	if (count > PHOS_CTL_HOT_MAX) {
		phos_errf(err, errlen, "a hot list of %u snapshots (at most %u)", count, PHOS_CTL_HOT_MAX);
		return -EPROTO;
	}
	m->hot.dirs = calloc(count + 1, sizeof(char *));
	if (!m->hot.dirs)
		return -ENOMEM;
	for (uint32_t i = 0; i < count; i++) {
		n = off < len ? str_at(p + off, len - off, PHOS_CTL_PATH_MAX) : -1;
		if (n <= 0) {
			phos_errf(err, errlen, "a hot list whose path %u is missing, empty, unterminated or "
				  "longer than %u bytes", i, PHOS_CTL_PATH_MAX - 1);
			phos_ctl_msg_exit(m);
			return -EPROTO;
		}
		m->hot.dirs[i] = strdup((const char *)p + off);
		if (!m->hot.dirs[i]) {
			phos_ctl_msg_exit(m);
			return -ENOMEM;
		}
		m->hot.n = i + 1;
		off += (size_t)n + 1;
	}
	if (off != len) {
		phos_errf(err, errlen, "a hot list with %zu bytes after its %u paths", len - off, count);
		phos_ctl_msg_exit(m);
		return -EPROTO;
	}

	return 0;
}

int phos_ctl_decode(unsigned type, const void *payload, size_t len, struct phos_ctl_msg *ret, char *err,
		    size_t errlen)
{
	const uint8_t *p = payload;
	struct phos_ctl_msg m = { .type = (enum phos_ctl_type)type, .fd = -1 };
	const char *name = phos_ctl_type_name(type);
	size_t want = 0;
	int r;

	switch (type) {
	case PHOS_CTL_HELLO: want = sizeof(struct ctl_hello); break;
	case PHOS_CTL_READY: want = sizeof(struct ctl_ready); break;
	case PHOS_CTL_DUMPED: want = sizeof(struct ctl_dumped); break;
	case PHOS_CTL_HOT_DONE: want = sizeof(struct ctl_hot_done); break;
	case PHOS_CTL_FALLBACKS: want = sizeof(struct ctl_fallbacks); break;
	case PHOS_CTL_CHECKPOINTED: want = sizeof(struct ctl_checkpointed); break;
	case PHOS_CTL_HELD: want = sizeof(struct ctl_held); break;
	case PHOS_CTL_PRECOPIED: want = sizeof(struct ctl_precopied); break;
	case PHOS_CTL_PREPARED: want = 2 * sizeof(uint64_t); break;
	case PHOS_CTL_SHARE:
	case PHOS_CTL_SHARED: want = sizeof(struct ctl_share); break;
	case PHOS_CTL_UNPREPARE:
	case PHOS_CTL_STOP:
	case PHOS_CTL_RESUME:
	case PHOS_CTL_IDLE:
	case PHOS_CTL_SERVE:
	case PHOS_CTL_ASK_TOUCHED:
	case PHOS_CTL_ASK_COPIED:
	case PHOS_CTL_ASK_FALLBACKS: want = 0; break;
	case PHOS_CTL_ERROR:
	case PHOS_CTL_TOUCHED:
	case PHOS_CTL_COPIED:
	case PHOS_CTL_RESTORE:
	case PHOS_CTL_CHECKPOINT:
	case PHOS_CTL_PREPARE:
	case PHOS_CTL_HOT: want = SIZE_MAX; break;   /* variable: checked below */
	default:
		phos_errf(err, errlen, "unknown control message type %u", type);
		return -EPROTO;
	}
	if (want != SIZE_MAX && len != want) {
		phos_errf(err, errlen, "a %s message of %zu bytes (it has %zu)", name, len, want);
		return -EPROTO;
	}
	if (len > PHOS_CTL_MAX_PAYLOAD) {
		phos_errf(err, errlen, "a %s message of %zu bytes (at most %u)", name, len, PHOS_CTL_MAX_PAYLOAD);
		return -EPROTO;
	}
	switch (type) {
	case PHOS_CTL_CHECKPOINT: r = decode_checkpoint(p, len, &m, err, errlen); break;
	case PHOS_CTL_PREPARE: r = decode_prepare(p, len, &m, err, errlen); break;
	case PHOS_CTL_ERROR: r = decode_error(p, len, &m, err, errlen); break;
	case PHOS_CTL_TOUCHED:
	case PHOS_CTL_COPIED: r = decode_touched(p, len, name, &m, err, errlen); break;
	case PHOS_CTL_RESTORE: r = decode_restore(p, len, &m, err, errlen); break;
	case PHOS_CTL_HOT: r = decode_hot(p, len, &m, err, errlen); break;
	default: r = decode_fixed(type, p, &m, name, err, errlen);
	}
	if (r < 0)
		return r;
	*ret = m;
	return 0;
}

/* --- sockets --- */

int phos_ctl_send(int sock, const struct phos_ctl_msg *m)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct iovec iov;
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	void *buf;
	size_t len, off = 0;
	int r;

	if (carries_fd(m->type) && m->fd < 0)
		return -EINVAL;
	r = phos_ctl_encode(m, &buf, &len);
	if (r < 0)
		return r;
	if (carries_fd(m->type)) {
		struct cmsghdr *c;

		memset(&u, 0, sizeof(u));
		msg.msg_control = u.buf;
		msg.msg_controllen = sizeof(u.buf);
		c = CMSG_FIRSTHDR(&msg);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &m->fd, sizeof(int));
	}
	/* A big frame (a hot list, touched ids) may go out in parts. */
	while (off < len) {
		ssize_t n;

		iov = (struct iovec){ .iov_base = (uint8_t *)buf + off, .iov_len = len - off };
		n = sendmsg(sock, &msg, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? (errno == ECONNRESET ? -EPIPE : -errno) : -EIO;
			break;
		}
		off += (size_t)n;
		msg.msg_control = NULL;   /* the descriptor went with the first part */
		msg.msg_controllen = 0;
	}
	free(buf);
	return r;
}

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n && i < CTL_MAX_FDS; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* Waits until sock is readable or deadline_ms passes (<0: forever). 1, 0 on
 * timeout, or -errno. */
static int wait_readable(int sock, long long deadline_ms)
{
	for (;;) {
		struct pollfd p = { .fd = sock, .events = POLLIN };
		long long left = deadline_ms < 0 ? -1 : deadline_ms - (long long)(phos_now() * 1000);
		int n;

		if (deadline_ms >= 0 && left < 0)
			left = 0;
		n = poll(&p, 1, left > 1000000000 ? 1000000000 : (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		return n > 0;
	}
}

/* Reads len bytes into buf, taking descriptors that come with them into fds
 * (*nfds grows). Returns 0, -ETIMEDOUT, -EPIPE (closed; *ret_got says how much
 * came), or -errno. */
static int read_full(int sock, void *buf, size_t len, long long deadline_ms, int *fds, int *nfds, size_t *ret_got)
{
	size_t got = 0;
	int r = 0;

	while (got < len) {
		union {
			struct cmsghdr h;
			char buf[CMSG_SPACE(sizeof(int) * CTL_MAX_FDS)];
		} u;
		struct iovec iov = { .iov_base = (uint8_t *)buf + got, .iov_len = len - got };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
				      .msg_controllen = sizeof(u.buf) };
		ssize_t n;

		r = wait_readable(sock, deadline_ms);
		if (r == 0)
			r = -ETIMEDOUT;
		if (r < 0)
			break;
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0) {
			r = errno == ECONNRESET ? -EPIPE : -errno;
			break;
		}
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			for (size_t k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++) {
				int fd;

				memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
				if (*nfds < CTL_MAX_FDS)
					fds[*nfds] = fd;
				else
					close(fd);
				(*nfds)++;   /* counts them all: extras make the frame wrong */
			}
		}
		if (msg.msg_flags & MSG_CTRUNC)   /* more than there was room for */
			(*nfds)++;
		if (n == 0) {
			r = -EPIPE;
			break;
		}
		got += (size_t)n;
		r = 0;
	}
	*ret_got = got;
	return r;
}

int phos_ctl_recv(int sock, int timeout_ms, struct phos_ctl_msg *ret, char *err, size_t errlen)
{
	uint8_t hdr[PHOS_CTL_HDR_SIZE];
	uint8_t *payload = NULL;
	int fds[CTL_MAX_FDS] = { -1, -1, -1, -1 }, nfds = 0, r;
	long long now = (long long)(phos_now() * 1000), rest;
	struct phos_ctl_msg m;
	uint32_t len;
	unsigned type;
	size_t got;

	if (err && errlen)
		*err = '\0';
	r = wait_readable(sock, timeout_ms < 0 ? -1 : now + timeout_ms);
	if (r == 0)
		return -ETIMEDOUT;
	if (r < 0)
		return r;
	rest = timeout_ms < 0 ? -1 : (long long)(phos_now() * 1000) +
				      (timeout_ms > PHOS_CTL_REST_MS ? timeout_ms : PHOS_CTL_REST_MS);
	r = read_full(sock, hdr, sizeof(hdr), rest, fds, &nfds, &got);
	if (r == -EPIPE && got == 0) {
		phos_errf(err, errlen, "the peer closed the control socket");
		goto out;
	}
	if (r == -EPIPE || r == -ETIMEDOUT) {
		phos_errf(err, errlen, "a control frame cut short after %zu of %u header bytes", got, PHOS_CTL_HDR_SIZE);
		r = -EPROTO;
	}
	if (r < 0)
		goto out;
	r = phos_ctl_header_check(hdr, &type, &len, err, errlen);
	if (r < 0)
		goto out;
	payload = malloc(len ? len : 1);
	if (!payload) {
		r = -ENOMEM;
		goto out;
	}
	r = read_full(sock, payload, len, rest, fds, &nfds, &got);
	if (r == -EPIPE || r == -ETIMEDOUT) {
		phos_errf(err, errlen, "a %s message cut short after %zu of %u bytes", phos_ctl_type_name(type), got,
			  len);
		r = -EPROTO;
	}
	if (r < 0)
		goto out;
	if (nfds != (carries_fd(type) ? 1 : 0)) {
		phos_errf(err, errlen, "a %s message with %d descriptors (it takes %d)", phos_ctl_type_name(type), nfds,
			  carries_fd(type) ? 1 : 0);
		r = -EPROTO;
		goto out;
	}
	r = phos_ctl_decode(type, payload, len, &m, err, errlen);
	if (r < 0)
		goto out;
	if (nfds) {
		m.fd = fds[0];
		nfds = 0;
	}
	*ret = m;
out:
	close_fds(fds, nfds);
	free(payload);
	return r;
}

int phos_ctl_peek(int sock, struct phos_ctl_msg *ret, char *err, size_t errlen)
{
	uint8_t buf[PHOS_CTL_HDR_SIZE + PHOS_CTL_REASON_MAX + 64];
	uint32_t len;
	unsigned type;
	ssize_t n;
	int r;

	do
		n = recv(sock, buf, sizeof(buf), MSG_PEEK | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? -EAGAIN : errno == ECONNRESET ? -EPIPE : -errno;
	if (n == 0)
		return -EPIPE;
	if ((size_t)n < PHOS_CTL_HDR_SIZE)
		return -EAGAIN;
	r = phos_ctl_header_check(buf, &type, &len, err, errlen);
	if (r < 0)
		return r;
	if (len > sizeof(buf) - PHOS_CTL_HDR_SIZE)
		return -EMSGSIZE;
	if ((size_t)n < PHOS_CTL_HDR_SIZE + len)
		return -EAGAIN;
	if (carries_fd(type)) {
		phos_errf(err, errlen, "a %s message cannot be peeked at (it carries a descriptor)",
			  phos_ctl_type_name(type));
		return -EPROTO;
	}
	return phos_ctl_decode(type, buf + PHOS_CTL_HDR_SIZE, len, ret, err, errlen);
}

void phos_ctl_wait_close(int sock)
{
	char buf[256];
	ssize_t n;

	while ((n = read(sock, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR))
		;
}

void phos_ctl_error_set(struct phos_ctl_msg *m, const char *fmt, ...)
{
	char *s = m->error.reason;
	va_list ap;
	size_t n;
	int k;

	m->type = PHOS_CTL_ERROR;
	m->fd = -1;
	va_start(ap, fmt);
	k = vsnprintf(s, PHOS_CTL_REASON_MAX, fmt, ap);
	va_end(ap);
	if (k < 0)
		k = 0;
	n = (size_t)k < PHOS_CTL_REASON_MAX ? (size_t)k : PHOS_CTL_REASON_MAX - 1;
	s[n] = '\0';
	/* A cut may split a sequence: its bytes become '?' like any other bad one. */
	for (size_t i = 0, len; i < n; i += len) {
		len = utf8_seq((const unsigned char *)s + i, n - i);
		if (!len) {
			s[i] = '?';
			len = 1;
		} else if (len == 1 && (s[i] == '\n' || s[i] == '\r')) {
			s[i] = ' ';
		}
	}
}

void phos_ctl_msg_exit(struct phos_ctl_msg *m)
{
	if (!m)
		return;
	if (m->type == PHOS_CTL_TOUCHED || m->type == PHOS_CTL_COPIED)
		free(m->touched.ids);
	if (m->type == PHOS_CTL_HOT && m->hot.dirs) {
		for (size_t i = 0; i < m->hot.n; i++)
			free(m->hot.dirs[i]);
		free(m->hot.dirs);
	}
	if (carries_fd(m->type) && m->fd >= 0)
		close(m->fd);
	memset(m, 0, sizeof(*m));
	m->fd = -1;
}
