/* SPDX-License-Identifier: MIT */
/* The control protocol (runtime/proto/control.h): every message type round trips
 * through the codec and through a socket (with its descriptor where it has
 * one), and malformed frames (truncated, oversized, unknown type, another
 * version, bad magic, strings without NUL or not UTF-8, wrong counts, stray
 * or missing descriptors) are refused with a reason, never read. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "control.h"

struct raw_hdr {
	uint32_t magic;
	uint16_t version, type;
	uint32_t length, reserved;
};

static int pair(int sv[2])
{
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		perror("socketpair");
		exit(1);
	}
	return 0;
}

/* Every message type: encode, decode; then send, receive. */
static void round_trips(void)
{
	uint64_t ids[] = { 7, 0, UINT64_MAX, 42 };
	char *dirs[] = { "/snap/a", "/snap/b with space", "/snap/\xff\xfe-not-utf8" };
	struct phos_ctl_msg in[PHOS_CTL_TYPE_END];
	int sv[2];

	memset(in, 0, sizeof(in));
	for (unsigned t = 1; t < PHOS_CTL_TYPE_END; t++) {
		in[t].type = (enum phos_ctl_type)t;
		in[t].fd = -1;
	}
	in[PHOS_CTL_HELLO].hello.pid = 12345;
	in[PHOS_CTL_READY].ready = (typeof(in[0].ready)){ 0.25, 1.5, 3.125, 1ull << 40, true };
	in[PHOS_CTL_DUMPED].dumped.gpu_dump_s = 0.5;
	in[PHOS_CTL_DUMPED].dumped.data_bytes = 123456789;
	phos_ctl_error_set(&in[PHOS_CTL_ERROR], "on-demand restore failed: checksum mismatch in buffer %d (é)", 3);
	in[PHOS_CTL_HOT_DONE].hot_done.n = 2;
	in[PHOS_CTL_HOT_DONE].hot_done.bytes = 1ull << 33;
	in[PHOS_CTL_TOUCHED].touched.ids = ids;
	in[PHOS_CTL_TOUCHED].touched.n = 4;
	in[PHOS_CTL_FALLBACKS].fallbacks = (typeof(in[0].fallbacks)){ 1, 2, 3, true, 5ull << 30, 6ull << 21 };
	in[PHOS_CTL_SHARE].share = (typeof(in[0].share)){ 7, 0x600000400000ull, 3ull << 20, 0xfeedull << 40 };
	in[PHOS_CTL_SHARED].share = (typeof(in[0].share)){ 8, 0x600000800000ull, 2ull << 20, 1 };
	in[PHOS_CTL_RESTORE].restore.on_demand = true;
	in[PHOS_CTL_RESTORE].restore.adopt.pid = 4242;
	in[PHOS_CTL_RESTORE].restore.adopt.fd = 7;
	strcpy(in[PHOS_CTL_RESTORE].restore.dir, "/var/lib/phos/snapshots/f/1");
	in[PHOS_CTL_HOT].hot.dirs = dirs;
	in[PHOS_CTL_HOT].hot.n = 3;
	in[PHOS_CTL_CHECKPOINT].checkpoint.mode = PHOS_CKPT_RECOPY;
	in[PHOS_CTL_CHECKPOINT].checkpoint.wait_stop = true;
	in[PHOS_CTL_PRECOPIED].precopied = (typeof(in[0].precopied)){ 4, 1ull << 35, 3ull << 20, (1ull << 35) + 4096 };
	strcpy(in[PHOS_CTL_CHECKPOINT].checkpoint.dir, "/ckpt/train.tmp-1");
	in[PHOS_CTL_CHECKPOINTED].checkpointed = (typeof(in[0].checkpointed)){ PHOS_CKPT_COW, 77, 1ull << 34, 0.125,
										 2.5, 9, 3, 1ull << 33,
										 5ull << 20, 6, true };
	in[PHOS_CTL_HELD].held.mode = PHOS_CKPT_COW;
	in[PHOS_CTL_HELD].held.seq = 1234;
	in[PHOS_CTL_HELD].held.copy_s = 0.375;
	strcpy(in[PHOS_CTL_PREPARE].prepare.dir, "/state/checkpoints/pre-ab.tmp-precopy");
	in[PHOS_CTL_PREPARED].prepared.bytes = 17ull << 30;
	in[PHOS_CTL_PREPARED].prepared.free = 60ull << 30;

	pair(sv);
	for (unsigned t = 1; t < PHOS_CTL_TYPE_END; t++) {
		struct phos_ctl_msg out[2];
		char err[256] = "";
		void *buf;
		size_t len;
		int r, dummy = -1;

		CHECK(phos_ctl_encode(&in[t], &buf, &len) == 0, "encode %s", phos_ctl_type_name(t));
		CHECK(len >= PHOS_CTL_HDR_SIZE, "frame of %s", phos_ctl_type_name(t));
		{
			unsigned type;
			uint32_t plen;

			CHECK(phos_ctl_header_check(buf, &type, &plen, err, sizeof(err)) == 0 && type == t &&
				      plen == len - PHOS_CTL_HDR_SIZE, "header of %s: %s", phos_ctl_type_name(t), err);
			r = phos_ctl_decode(type, (uint8_t *)buf + PHOS_CTL_HDR_SIZE, plen, &out[0], err, sizeof(err));
			CHECK(r == 0, "decode %s: %s", phos_ctl_type_name(t), err);
		}
		free(buf);
		if (t == PHOS_CTL_SERVE || t == PHOS_CTL_RESTORE || t == PHOS_CTL_SHARE || t == PHOS_CTL_SHARED) {
			dummy = open("/dev/null", O_RDONLY | O_CLOEXEC);
			in[t].fd = dummy;
		}
		CHECK(phos_ctl_send(sv[0], &in[t]) == 0, "send %s", phos_ctl_type_name(t));
		r = phos_ctl_recv(sv[1], 1000, &out[1], err, sizeof(err));
		CHECK(r == 0, "recv %s: %d %s", phos_ctl_type_name(t), r, err);
		if (r < 0)
			continue;
		for (int k = 0; k < 2; k++) {
			struct phos_ctl_msg *o = &out[k];

			CHECK(o->type == t, "type %u came back as %u", t, o->type);
			switch (t) {
			case PHOS_CTL_HELLO: CHECK(o->hello.pid == 12345, "hello pid"); break;
			case PHOS_CTL_READY:
				CHECK(o->ready.open_s == 0.25 && o->ready.load_s == 1.5 && o->ready.data_s == 3.125 &&
					      o->ready.data_bytes == 1ull << 40 && o->ready.on_demand, "ready fields");
				break;
			case PHOS_CTL_CHECKPOINT:
				CHECK(o->checkpoint.mode == PHOS_CKPT_RECOPY && o->checkpoint.wait_stop &&
					      !strcmp(o->checkpoint.dir, "/ckpt/train.tmp-1"),
				      "checkpoint fields");
				break;
			case PHOS_CTL_PRECOPIED:
				CHECK(o->precopied.rounds == 4 && o->precopied.precopy_bytes == 1ull << 35 &&
					      o->precopied.dirty_bytes == 3ull << 20 &&
					      o->precopied.data_end == (1ull << 35) + 4096,
				      "precopied fields");
				break;
			case PHOS_CTL_CHECKPOINTED:
				CHECK(o->checkpointed.mode == PHOS_CKPT_COW && o->checkpointed.seq == 77 &&
					      o->checkpointed.data_bytes == 1ull << 34 && o->checkpointed.stall_s == 0.125 &&
					      o->checkpointed.total_s == 2.5 && o->checkpointed.early == 9 &&
					      o->checkpointed.rounds == 3 && o->checkpointed.precopy_bytes == 1ull << 33 &&
					      o->checkpointed.stop_bytes == 5ull << 20 &&
					      o->checkpointed.reserve_copies == 6 && o->checkpointed.host_copy,
				      "checkpointed fields");
				break;
			case PHOS_CTL_HELD:
				CHECK(o->held.mode == PHOS_CKPT_COW && o->held.seq == 1234 && o->held.copy_s == 0.375,
				      "held fields");
				break;
			case PHOS_CTL_PREPARE:
				CHECK(!strcmp(o->prepare.dir, in[t].prepare.dir), "prepare dir '%s'", o->prepare.dir);
				break;
			case PHOS_CTL_PREPARED:
				CHECK(o->prepared.bytes == 17ull << 30 && o->prepared.free == 60ull << 30, "prepared fields");
				break;
			case PHOS_CTL_DUMPED:
				CHECK(o->dumped.gpu_dump_s == 0.5 && o->dumped.data_bytes == 123456789, "dumped fields");
				break;
			case PHOS_CTL_ERROR:
				CHECK(!strcmp(o->error.reason, in[t].error.reason), "error reason '%s'", o->error.reason);
				break;
			case PHOS_CTL_HOT_DONE:
				CHECK(o->hot_done.n == 2 && o->hot_done.bytes == 1ull << 33, "hot_done fields");
				break;
			case PHOS_CTL_TOUCHED:
				CHECK(o->touched.n == 4 && !memcmp(o->touched.ids, ids, sizeof(ids)), "touched ids");
				break;
			case PHOS_CTL_FALLBACKS:
				CHECK(o->fallbacks.opaque == 1 && o->fallbacks.overflow == 2 &&
					      o->fallbacks.validate_miss == 3 && o->fallbacks.restoring &&
					      o->fallbacks.shared_bytes == 5ull << 30 && o->fallbacks.cow_bytes == 6ull << 21,
				      "fallbacks fields");
				break;
			case PHOS_CTL_SHARE:
			case PHOS_CTL_SHARED:
				CHECK(!memcmp(&o->share, &in[t].share, sizeof(o->share)), "%s fields",
				      phos_ctl_type_name(t));
				break;
			case PHOS_CTL_RESTORE:
				CHECK(o->restore.on_demand && !strcmp(o->restore.dir, in[t].restore.dir) &&
					      o->restore.adopt.pid == 4242 && o->restore.adopt.fd == 7, "restore fields");
				break;
			case PHOS_CTL_HOT:
				CHECK(o->hot.n == 3, "hot count %zu", o->hot.n);
				for (size_t i = 0; i < 3 && i < o->hot.n; i++)
					CHECK(!strcmp(o->hot.dirs[i], dirs[i]), "hot dir %zu", i);
				break;
			default: break;
			}
		}
		/* The descriptor arrived as a new one, on the socket path only. */
		if (dummy >= 0) {
			struct stat a, b;

			CHECK(out[0].fd == -1, "a decoded %s has no descriptor", phos_ctl_type_name(t));
			CHECK(out[1].fd >= 0 && out[1].fd != dummy && fstat(out[1].fd, &a) == 0 && fstat(dummy, &b) == 0 &&
				      a.st_ino == b.st_ino && a.st_dev == b.st_dev,
			      "%s brought its descriptor", phos_ctl_type_name(t));
			close(dummy);
		} else {
			CHECK(out[1].fd == -1, "%s has no descriptor", phos_ctl_type_name(t));
		}
		phos_ctl_msg_exit(&out[0]);
		phos_ctl_msg_exit(&out[1]);
		CHECK(out[1].fd == -1, "exit leaves fd -1");
	}
	/* Empty lists travel too. */
	{
		struct phos_ctl_msg m = { .type = PHOS_CTL_TOUCHED, .fd = -1 }, o;
		char err[256];

		CHECK(phos_ctl_send(sv[0], &m) == 0, "send empty touched");
		CHECK(phos_ctl_recv(sv[1], 1000, &o, err, sizeof(err)) == 0 && o.type == PHOS_CTL_TOUCHED && o.touched.n == 0,
		      "empty touched");
		phos_ctl_msg_exit(&o);
		m = (struct phos_ctl_msg){ .type = PHOS_CTL_HOT, .fd = -1 };
		CHECK(phos_ctl_send(sv[0], &m) == 0, "send empty hot");
		CHECK(phos_ctl_recv(sv[1], 1000, &o, err, sizeof(err)) == 0 && o.type == PHOS_CTL_HOT && o.hot.n == 0,
		      "empty hot");
		phos_ctl_msg_exit(&o);
	}
	/* Biggest lists: the whole frame arrives though it exceeds a socket buffer. */
	{
		struct phos_ctl_msg m = { .type = PHOS_CTL_TOUCHED, .fd = -1 }, o;
		uint64_t *many = malloc(PHOS_CTL_TOUCHED_MAX * sizeof(*many));
		char err[256];
		pid_t pid;

		for (uint64_t i = 0; i < PHOS_CTL_TOUCHED_MAX; i++)
			many[i] = i * 3;
		m.touched.ids = many;
		m.touched.n = PHOS_CTL_TOUCHED_MAX;
		pid = fork();
		if (pid == 0)
			_exit(phos_ctl_send(sv[0], &m) == 0 ? 0 : 1);
		CHECK(phos_ctl_recv(sv[1], 5000, &o, err, sizeof(err)) == 0 && o.touched.n == PHOS_CTL_TOUCHED_MAX &&
			      !memcmp(o.touched.ids, many, PHOS_CTL_TOUCHED_MAX * sizeof(*many)),
		      "the largest touched list: %s", err);
		phos_ctl_msg_exit(&o);
		waitpid(pid, NULL, 0);
		free(many);
	}
	close(sv[0]);
	close(sv[1]);
}

/* The sender refuses what breaks a limit. */
static void encode_limits(void)
{
	struct phos_ctl_msg m = { .type = PHOS_CTL_TOUCHED, .fd = -1 };
	char *long_path = malloc(PHOS_CTL_PATH_MAX + 1);
	char *dirs[PHOS_CTL_HOT_MAX + 1];
	void *buf;
	size_t len;
	int sv[2];

	m.touched.n = PHOS_CTL_TOUCHED_MAX + 1;
	m.touched.ids = calloc(m.touched.n, sizeof(uint64_t));
	CHECK(phos_ctl_encode(&m, &buf, &len) == -EINVAL, "too many touched ids");
	free(m.touched.ids);
	for (size_t i = 0; i <= PHOS_CTL_HOT_MAX; i++)
		dirs[i] = "/a";
	m = (struct phos_ctl_msg){ .type = PHOS_CTL_HOT, .fd = -1, .hot = { dirs, PHOS_CTL_HOT_MAX + 1 } };
	CHECK(phos_ctl_encode(&m, &buf, &len) == -EINVAL, "too many hot dirs");
	dirs[0] = "";
	m.hot.n = 1;
	CHECK(phos_ctl_encode(&m, &buf, &len) == -EINVAL, "an empty hot dir");
	memset(long_path, 'a', PHOS_CTL_PATH_MAX);
	long_path[PHOS_CTL_PATH_MAX] = '\0';
	dirs[0] = long_path;
	CHECK(phos_ctl_encode(&m, &buf, &len) == -EINVAL, "a hot dir over the limit");
	m = (struct phos_ctl_msg){ .type = PHOS_CTL_ERROR, .fd = -1 };
	memset(m.error.reason, 'x', sizeof(m.error.reason));   /* no NUL */
	CHECK(phos_ctl_encode(&m, &buf, &len) == -EINVAL, "a reason without NUL");
	strcpy(m.error.reason, "bad \xc3");
	CHECK(phos_ctl_encode(&m, &buf, &len) == -EINVAL, "a reason that is not UTF-8");
	m = (struct phos_ctl_msg){ .type = (enum phos_ctl_type)PHOS_CTL_TYPE_END, .fd = -1 };
	CHECK(phos_ctl_encode(&m, &buf, &len) == -EINVAL, "an unknown type");
	pair(sv);
	m = (struct phos_ctl_msg){ .type = PHOS_CTL_SERVE, .fd = -1 };
	CHECK(phos_ctl_send(sv[0], &m) == -EINVAL, "SERVE without its descriptor");
	close(sv[0]);
	close(sv[1]);
	free(long_path);

	/* phos_ctl_error_set makes any text sendable. */
	{
		char big[3000];

		memset(big, 'y', sizeof(big));
		big[sizeof(big) - 1] = '\0';
		big[PHOS_CTL_REASON_MAX - 2] = '\xc3';   /* a sequence cut by the truncation */
		phos_ctl_error_set(&m, "%s", big);
		CHECK(m.type == PHOS_CTL_ERROR && strlen(m.error.reason) == PHOS_CTL_REASON_MAX - 1, "truncated");
		CHECK(m.error.reason[PHOS_CTL_REASON_MAX - 2] == '?', "a cut sequence becomes '?'");
		phos_ctl_error_set(&m, "line one\nline two \xff\xfe end");
		CHECK(!strcmp(m.error.reason, "line one line two ?? end"), "one clean line: '%s'", m.error.reason);
		CHECK(phos_ctl_encode(&m, &buf, &len) == 0, "a cleaned reason encodes");
		free(buf);
	}
}

/* Sends raw bytes on one end, receives on the other: the expected result and
 * a reason that says what was wrong. */
static void expect_refused(const char *what, const void *frame, size_t n, bool close_after, int want,
			   const char *reason_has)
{
	struct phos_ctl_msg m;
	char err[512] = "";
	int sv[2], r;

	pair(sv);
	CHECK(write(sv[0], frame, n) == (ssize_t)n, "%s: write", what);
	if (close_after)
		close(sv[0]);
	r = phos_ctl_recv(sv[1], 1000, &m, err, sizeof(err));
	CHECK(r == want, "%s: got %d (%s), want %d", what, r, err, want);
	CHECK(!reason_has || strstr(err, reason_has), "%s: reason '%s' lacks '%s'", what, err, reason_has);
	if (r == 0)
		phos_ctl_msg_exit(&m);
	if (!close_after)
		close(sv[0]);
	close(sv[1]);
}

static size_t frame(uint8_t *buf, uint32_t magic, uint16_t version, uint16_t type, uint32_t length,
		    const void *payload, size_t n)
{
	struct raw_hdr h = { magic, version, type, length, 0 };

	memcpy(buf, &h, sizeof(h));
	if (n)
		memcpy(buf + sizeof(h), payload, n);
	return sizeof(h) + n;
}

static void malformed(void)
{
	uint8_t b[8192];
	size_t n;

	/* An executor of the line protocol says "idle\n": not a frame at all. */
	expect_refused("text line", "idle\nidle\nidle\nidle\n", 20, true, -EPROTO, "magic");
	n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION + 1, PHOS_CTL_HELLO, 4, "\1\0\0\0", 4);
	{
		char want[64];

		snprintf(want, sizeof(want), "this build speaks version %u", PHOS_CTL_VERSION);
		expect_refused("another version", b, n, true, -EPROTONOSUPPORT, want);
	}
	/* wait_stop is for recopy only */
	n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_CHECKPOINT, 4, "\x80/d\0", 4);
	expect_refused("stw waiting for a stop", b, n, true, -EPROTO, "stop");
	n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_TYPE_END, 0, NULL, 0);
	expect_refused("unknown type", b, n, true, -EPROTO, "unknown");
	n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, 0, 0, NULL, 0);
	expect_refused("type 0", b, n, true, -EPROTO, "unknown");
	n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_TOUCHED, PHOS_CTL_MAX_PAYLOAD + 1, NULL, 0);
	expect_refused("oversized", b, n, false, -EPROTO, "at most");
	/* Truncated: the header, and the payload, cut by a hang-up or a silent peer. */
	n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_HELLO, 4, NULL, 0);
	expect_refused("header cut", b, 10, true, -EPROTO, "cut short");
	expect_refused("payload cut by hang-up", b, n, true, -EPROTO, "cut short");
	expect_refused("nothing at all", b, 0, true, -EPIPE, NULL);
	/* Fixed payloads of the wrong size. */
	n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_READY, 3, "abc", 3);
	expect_refused("short ready", b, n, true, -EPROTO, "ready");
	n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_IDLE, 1, "x", 1);
	expect_refused("idle with a payload", b, n, true, -EPROTO, "idle");
	{
		uint8_t fb[41] = { 0 };

		fb[24] = 2;
		n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_FALLBACKS, sizeof(fb), fb, sizeof(fb));
		expect_refused("a flag of 2", b, n, true, -EPROTO, "neither 0 nor 1");
	}
	{
		/* a shared buffer: id, address, size, hash (u64 each) */
		struct phos_ctl_msg m;
		char err[256] = "";
		uint64_t sh[4] = { 3, 0x600000100000ull, 2ull << 20, 9 }, small[4] = { 3, 0x600000200000ull, 4096, 9 },
			 noid[4] = { 0, 0x600000200000ull, 2ull << 20, 9 };

		CHECK(phos_ctl_decode(PHOS_CTL_SHARE, sh, sizeof(sh), &m, err, sizeof(err)) == -EPROTO &&
			      strstr(err, "2 MiB"), "a share at a misaligned address: %s", err);
		CHECK(phos_ctl_decode(PHOS_CTL_SHARED, small, sizeof(small), &m, err, sizeof(err)) == -EPROTO,
		      "a shared buffer smaller than a chunk");
		CHECK(phos_ctl_decode(PHOS_CTL_SHARE, noid, sizeof(noid), &m, err, sizeof(err)) == -EPROTO,
		      "a share of buffer 0");
		CHECK(phos_ctl_decode(PHOS_CTL_SHARE, sh, 16, &m, err, sizeof(err)) == -EPROTO, "a short share");
		m = (struct phos_ctl_msg){ .type = PHOS_CTL_SHARE, .fd = -1, .share = { 1, 0x600000200000ull, 2ull << 20, 0 } };
		CHECK(phos_ctl_send(-1, &m) == -EINVAL, "a share is not sent without its descriptor");
	}
	/* Strings. */
	n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_ERROR, 5, "abcde", 5);
	expect_refused("reason without NUL", b, n, true, -EPROTO, "NUL");
	n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_ERROR, 7, "ab\0cde", 7);
	expect_refused("bytes after the reason", b, n, true, -EPROTO, "NUL");
	n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_ERROR, 5, "a\xc0\xafz", 5);
	expect_refused("overlong UTF-8", b, n, true, -EPROTO, "UTF-8");
	n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_ERROR, 5, "a\xed\xa0\x80", 5);
	expect_refused("a surrogate", b, n, true, -EPROTO, "UTF-8");
	n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_ERROR, 0, NULL, 0);
	expect_refused("empty error", b, n, true, -EPROTO, "NUL");
	{
		uint8_t big[PHOS_CTL_REASON_MAX + 1];

		memset(big, 'z', sizeof(big) - 1);
		big[sizeof(big) - 1] = 0;
		n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_ERROR, sizeof(big), big, sizeof(big));
		expect_refused("reason over its limit", b, n, true, -EPROTO, "at most");
	}
	/* Lists. */
	{
		uint32_t c[2] = { 3, 0 };
		uint8_t pl[8 + 16];

		memcpy(pl, c, 8);
		n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_TOUCHED, sizeof(pl), pl, sizeof(pl));
		expect_refused("touched count over its ids", b, n, true, -EPROTO, "for 3 ids");
		c[0] = PHOS_CTL_TOUCHED_MAX + 1;
		n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_TOUCHED, 8, c, 8);
		expect_refused("touched over the limit", b, n, true, -EPROTO, "at most");
		n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_TOUCHED, 3, c, 3);
		expect_refused("touched without its count", b, n, true, -EPROTO, "count");
	}
	{
		uint8_t pl[64];
		uint32_t c = 2;

		memcpy(pl, &c, 4);
		memcpy(pl + 4, "/a\0/b", 5);   /* the second path lacks its NUL */
		n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_HOT, 9, pl, 9);
		expect_refused("hot path without NUL", b, n, true, -EPROTO, "path 1");
		memcpy(pl + 4, "/a\0\0", 4);   /* an empty second path */
		n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_HOT, 8, pl, 8);
		expect_refused("empty hot path", b, n, true, -EPROTO, "path 1");
		c = 1;
		memcpy(pl, &c, 4);
		memcpy(pl + 4, "/a\0junk", 7);
		n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_HOT, 11, pl, 11);
		expect_refused("bytes after the hot list", b, n, true, -EPROTO, "after");
		c = PHOS_CTL_HOT_MAX + 1;
		memcpy(pl, &c, 4);
		n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_HOT, 4, pl, 4);
		expect_refused("hot over the limit", b, n, true, -EPROTO, "at most");
	}
	/* RESTORE without its descriptor, and a descriptor where none belongs.
	 * Its payload: on_demand u8, adopt pid u32, adopt fd i32, the path. */
#define RS(od, pid, fd, path) od, pid, 0, 0, 0, fd, 0, 0, 0, path
	n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_RESTORE, 12, (const char[]){ RS(1, 0, 0, '/'), 'a', 0 },
		  12);
	expect_refused("restore without descriptor", b, n, true, -EPROTO, "descriptor");
	{
		struct phos_ctl_msg m;
		char err[256] = "";
		const char no_nul[] = { RS(1, 0, 0, '/'), 'a' }, empty[] = { RS(1, 0, 0, 0) },
			   mode2[] = { RS(4, 0, 0, '/'), 'a', 0 }, plain[] = { RS(0, 0, 0, '/'), 'a', 0 },
			   shared[] = { RS(3, 0, 0, '/'), 'a', 0 }, share_adopt[] = { RS(2, 9, 5, '/'), 'a', 0 },
			   adopt[] = { RS(1, 9, 5, '/'), 'a', 0 },
			   fd_only[] = { RS(1, 0, 5, '/'), 'a', 0 }, old_v5[] = { 1, '/', 'a', 0 };
		char neg_fd[sizeof(adopt)], big_pid[sizeof(adopt)];

		memcpy(neg_fd, adopt, sizeof(adopt));
		memset(neg_fd + 5, 0xff, 4);    /* fd -1 */
		memcpy(big_pid, adopt, sizeof(adopt));
		memset(big_pid + 1, 0xff, 4);   /* pid 2^32 - 1 */
		/* the payload checks behind the descriptor check */
		CHECK(phos_ctl_decode(PHOS_CTL_RESTORE, no_nul, sizeof(no_nul), &m, err, sizeof(err)) == -EPROTO &&
			      strstr(err, "path"), "restore path without NUL: %s", err);
		CHECK(phos_ctl_decode(PHOS_CTL_RESTORE, empty, sizeof(empty), &m, err, sizeof(err)) == -EPROTO &&
			      strstr(err, "path"), "restore with an empty path: %s", err);
		CHECK(phos_ctl_decode(PHOS_CTL_RESTORE, mode2, sizeof(mode2), &m, err, sizeof(err)) == -EPROTO,
		      "restore mode 4");
		CHECK(phos_ctl_decode(PHOS_CTL_RESTORE, share_adopt, sizeof(share_adopt), &m, err, sizeof(err)) == -EPROTO,
		      "a checkpoint's restore that shares");
		CHECK(phos_ctl_decode(PHOS_CTL_RESTORE, shared, sizeof(shared), &m, err, sizeof(err)) == 0 &&
			      m.restore.on_demand && m.restore.share, "an on-demand restore that shares: %s", err);
		CHECK(phos_ctl_decode(PHOS_CTL_RESTORE, old_v5, sizeof(old_v5), &m, err, sizeof(err)) == -EPROTO &&
			      strstr(err, "adoption"), "restore of version 5's shape: %s", err);
		CHECK(phos_ctl_decode(PHOS_CTL_RESTORE, big_pid, sizeof(big_pid), &m, err, sizeof(err)) == -EPROTO &&
			      strstr(err, "adopting"), "restore adopting pid 2^32-1: %s", err);
		CHECK(phos_ctl_decode(PHOS_CTL_RESTORE, fd_only, sizeof(fd_only), &m, err, sizeof(err)) == -EPROTO,
		      "restore adopting an fd of no pid");
		CHECK(phos_ctl_decode(PHOS_CTL_RESTORE, neg_fd, sizeof(neg_fd), &m, err, sizeof(err)) == -EPROTO,
		      "restore adopting fd -1");
		CHECK(phos_ctl_decode(PHOS_CTL_RESTORE, plain, sizeof(plain), &m, err, sizeof(err)) == 0 &&
			      !m.restore.on_demand && !m.restore.adopt.pid && !strcmp(m.restore.dir, "/a") && m.fd == -1,
		      "restore decodes: %s", err);
		CHECK(phos_ctl_decode(PHOS_CTL_RESTORE, adopt, sizeof(adopt), &m, err, sizeof(err)) == 0 &&
			      m.restore.on_demand && m.restore.adopt.pid == 9 && m.restore.adopt.fd == 5 &&
			      !strcmp(m.restore.dir, "/a"), "restore adopting decodes: %s", err);
		{
			struct phos_ctl_msg bad = { .type = PHOS_CTL_RESTORE, .fd = -1,
						    .restore = { .on_demand = true, .adopt = { 0, 3 }, .dir = "/a" } };
			void *buf = NULL;
			size_t len;

			CHECK(phos_ctl_encode(&bad, &buf, &len) == -EINVAL, "an fd to adopt of no pid is not encoded");
			free(buf);
		}
#undef RS
		CHECK(phos_ctl_decode(77, "", 0, &m, err, sizeof(err)) == -EPROTO && strstr(err, "unknown"),
		      "decode of an unknown type");
		CHECK(phos_ctl_decode(PHOS_CTL_PREPARE, "/a", 2, &m, err, sizeof(err)) == -EPROTO && strstr(err, "path"),
		      "prepare path without NUL: %s", err);
		CHECK(phos_ctl_decode(PHOS_CTL_PREPARE, "\0", 1, &m, err, sizeof(err)) == -EPROTO, "prepare, empty path");
		CHECK(phos_ctl_decode(PHOS_CTL_PREPARE, "/a\0b", 4, &m, err, sizeof(err)) == -EPROTO,
		      "prepare, bytes after the path");
		CHECK(phos_ctl_decode(PHOS_CTL_PREPARED, "12345678", 8, &m, err, sizeof(err)) == -EPROTO,
		      "prepared of 8 bytes");
		CHECK(phos_ctl_decode(PHOS_CTL_UNPREPARE, "x", 1, &m, err, sizeof(err)) == -EPROTO,
		      "unprepare with a payload");
	}
	{
		int sv[2], fd = open("/dev/null", O_RDONLY | O_CLOEXEC), before, after;
		struct phos_ctl_msg m = { .type = PHOS_CTL_SERVE, .fd = fd };
		char err[256] = "";
		void *buf;
		size_t len;

		/* A SERVE frame re-labelled IDLE, its descriptor attached: refused,
		 * and the descriptor closed, not leaked. */
		pair(sv);
		CHECK(phos_ctl_encode(&m, &buf, &len) == 0, "encode serve");
		((struct raw_hdr *)buf)->type = PHOS_CTL_IDLE;
		{
			union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int))]; } u;
			struct iovec iov = { buf, len };
			struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
					     .msg_controllen = sizeof(u.b) };
			struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

			memset(&u, 0, sizeof(u));
			c = CMSG_FIRSTHDR(&mh);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &fd, sizeof(int));
			CHECK(sendmsg(sv[0], &mh, 0) == (ssize_t)len, "sendmsg");
		}
		free(buf);
		before = dup(0);
		close(before);
		CHECK(phos_ctl_recv(sv[1], 1000, &m, err, sizeof(err)) == -EPROTO && strstr(err, "descriptor"),
		      "a stray descriptor: %s", err);
		after = dup(0);   /* the lowest free number: the same if nothing leaked */
		CHECK(after == before, "the stray descriptor was closed (%d, %d)", before, after);
		close(after);
		close(fd);
		close(sv[0]);
		close(sv[1]);
	}
}

/* Every proper prefix of every payload is refused (a frame's length says
 * exactly what it holds), and random byte flips are either refused with a
 * reason or decode to a message that encodes again: never a crash or an
 * overread (the sanitizer run checks that). */
static void prefixes_and_mutations(void)
{
	uint64_t ids[] = { 1, 2, 3 };
	char *dirs[] = { "/x", "/yy" };
	struct phos_ctl_msg in[] = {
		{ .type = PHOS_CTL_HELLO, .fd = -1, .hello = { 9 } },
		{ .type = PHOS_CTL_READY, .fd = -1, .ready = { 1, 2, 3, 4, true } },
		{ .type = PHOS_CTL_DUMPED, .fd = -1, .dumped = { 1, 2 } },
		{ .type = PHOS_CTL_ERROR, .fd = -1, .error = { "checksum mismatch ü" } },
		{ .type = PHOS_CTL_HOT_DONE, .fd = -1, .hot_done = { 1, 2 } },
		{ .type = PHOS_CTL_TOUCHED, .fd = -1, .touched = { ids, 3 } },
		{ .type = PHOS_CTL_FALLBACKS, .fd = -1, .fallbacks = { 1, 2, 3, false } },
		{ .type = PHOS_CTL_RESTORE, .fd = -1, .restore = { .share = true, .dir = "/snap" } },
		{ .type = PHOS_CTL_SHARE, .fd = -1, .share = { 4, 0x600000400000ull, 5ull << 20, 77 } },
		{ .type = PHOS_CTL_HOT, .fd = -1, .hot = { dirs, 2 } },
	};
	unsigned seed = 12345;

	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		const char *name = phos_ctl_type_name(in[i].type);
		struct phos_ctl_msg m;
		uint8_t *buf, *copy;
		size_t len, plen;
		char err[256];
		void *raw;

		CHECK(phos_ctl_encode(&in[i], &raw, &len) == 0, "encode %s", name);
		buf = raw;
		plen = len - PHOS_CTL_HDR_SIZE;
		for (size_t k = 0; k < plen; k++) {
			/* a copy of exactly k bytes, so that an overread is the sanitizer's to see */
			copy = malloc(k ? k : 1);
			memcpy(copy, buf + PHOS_CTL_HDR_SIZE, k);
			err[0] = '\0';
			CHECK(phos_ctl_decode(in[i].type, copy, k, &m, err, sizeof(err)) == -EPROTO && err[0],
			      "%s cut to %zu of %zu bytes was taken", name, k, plen);
			free(copy);
		}
		for (int round = 0; round < 2000; round++) {
			unsigned type;
			uint32_t l;
			int r;

			copy = malloc(len);
			memcpy(copy, buf, len);
			for (int flips = 1 + (int)(rand_r(&seed) % 3); flips > 0; flips--)
				copy[rand_r(&seed) % len] ^= (uint8_t)(1u << (rand_r(&seed) % 8));
			r = phos_ctl_header_check(copy, &type, &l, err, sizeof(err));
			if (r == 0 && l > len - PHOS_CTL_HDR_SIZE) {   /* a receiver would wait for more */
				free(copy);
				continue;
			}
			if (r == 0)
				r = phos_ctl_decode(type, copy + PHOS_CTL_HDR_SIZE, l, &m, err, sizeof(err));
			CHECK(r == 0 || r == -EPROTO || r == -EPROTONOSUPPORT, "%s mutated: %d", name, r);
			if (r == 0) {
				void *again;
				size_t alen;

				/* what decodes is a valid message: it encodes (SERVE and
				 * RESTORE need a descriptor to be sent, not to encode) */
				if (phos_ctl_encode(&m, &again, &alen) == 0)
					free(again);
				else
					CHECK(0, "%s mutated into an unencodable %s", name, phos_ctl_type_name(m.type));
				phos_ctl_msg_exit(&m);
			}
			free(copy);
		}
		free(buf);
	}
}

/* Timeouts, peeking, waiting for the close. */
static void sockets(void)
{
	struct phos_ctl_msg m, o;
	char err[256] = "";
	uint8_t b[64];
	int sv[2];
	size_t n;

	pair(sv);
	CHECK(phos_ctl_recv(sv[1], 0, &o, err, sizeof(err)) == -ETIMEDOUT, "nothing there: timeout 0");
	CHECK(phos_ctl_recv(sv[1], 50, &o, err, sizeof(err)) == -ETIMEDOUT, "nothing there: timeout 50");
	CHECK(phos_ctl_peek(sv[1], &o, err, sizeof(err)) == -EAGAIN, "nothing to peek at");
	/* A frame that started but stops: cut short after the rest's time. */
	n = frame(b, PHOS_CTL_MAGIC, PHOS_CTL_VERSION, PHOS_CTL_HELLO, 4, NULL, 0);
	CHECK(write(sv[0], b, 8) == 8, "half a header");
	CHECK(phos_ctl_peek(sv[1], &o, err, sizeof(err)) == -EAGAIN, "half a header is not peeked");
	CHECK(write(sv[0], b + 8, n - 8) == (ssize_t)(n - 8), "the rest of the header");
	CHECK(phos_ctl_peek(sv[1], &o, err, sizeof(err)) == -EAGAIN, "a header without its payload is not peeked");
	CHECK(write(sv[0], "\x05\0\0\0", 4) == 4, "payload");
	CHECK(phos_ctl_peek(sv[1], &o, err, sizeof(err)) == 0 && o.type == PHOS_CTL_HELLO && o.hello.pid == 5,
	      "peek a whole hello");
	CHECK(phos_ctl_peek(sv[1], &o, err, sizeof(err)) == 0 && o.type == PHOS_CTL_HELLO, "peeking consumes nothing");
	CHECK(phos_ctl_recv(sv[1], 0, &o, err, sizeof(err)) == 0 && o.type == PHOS_CTL_HELLO && o.hello.pid == 5,
	      "then it is received");
	/* An error at the front, then more behind it: peek sees the error. */
	phos_ctl_error_set(&m, "on-demand restore failed: read error");
	CHECK(phos_ctl_send(sv[0], &m) == 0, "send error");
	CHECK(phos_ctl_send(sv[0], &(struct phos_ctl_msg){ .type = PHOS_CTL_IDLE, .fd = -1 }) == 0, "send idle");
	CHECK(phos_ctl_peek(sv[1], &o, err, sizeof(err)) == 0 && o.type == PHOS_CTL_ERROR &&
		      !strcmp(o.error.reason, "on-demand restore failed: read error"), "peek the error");
	CHECK(phos_ctl_recv(sv[1], 0, &o, err, sizeof(err)) == 0 && o.type == PHOS_CTL_ERROR, "recv error");
	CHECK(phos_ctl_recv(sv[1], 0, &o, err, sizeof(err)) == 0 && o.type == PHOS_CTL_IDLE, "recv idle");
	/* A frame too big to peek at. */
	{
		uint64_t ids[300] = { 0 };

		m = (struct phos_ctl_msg){ .type = PHOS_CTL_TOUCHED, .fd = -1, .touched = { ids, 300 } };
		CHECK(phos_ctl_send(sv[0], &m) == 0, "send touched");
		CHECK(phos_ctl_peek(sv[1], &o, err, sizeof(err)) == -EMSGSIZE, "too big to peek");
		CHECK(phos_ctl_recv(sv[1], 0, &o, err, sizeof(err)) == 0 && o.touched.n == 300, "recv it");
		phos_ctl_msg_exit(&o);
	}
	/* The writer goes: wait_close returns, recv says closed. */
	CHECK(write(sv[0], "junk", 4) == 4, "junk");
	close(sv[0]);
	phos_ctl_wait_close(sv[1]);
	CHECK(phos_ctl_recv(sv[1], 0, &o, err, sizeof(err)) == -EPIPE, "closed");
	CHECK(phos_ctl_peek(sv[1], &o, err, sizeof(err)) == -EPIPE, "closed, peeked");
	close(sv[1]);
	/* Sending to a closed peer: -EPIPE, no SIGPIPE. */
	pair(sv);
	close(sv[1]);
	CHECK(phos_ctl_send(sv[0], &(struct phos_ctl_msg){ .type = PHOS_CTL_IDLE, .fd = -1 }) == -EPIPE, "peer gone");
	close(sv[0]);
}

int main(void)
{
	round_trips();
	encode_limits();
	malformed();
	prefixes_and_mutations();
	sockets();
	CHECK(!strcmp(phos_ctl_type_name(PHOS_CTL_READY), "ready") && !strcmp(phos_ctl_type_name(999), "unknown"),
	      "type names");
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	return failures ? 1 : 0;
}
