/* SPDX-License-Identifier: MIT */
/*
 * The channel: a byte ring of call records in a memfd shared by the function
 * process (producer) and its executor (consumer), futex wake-ups, and a Unix
 * socket for descriptors and hang-up detection. See channel.h for the picture.
 */
#include "channel.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define SHM_VERSION 4u   /* 2: host callback words; 3: the fence; 4: replies of at most 1 MiB */
#define HDR_SIZE ((uint64_t)sizeof(struct phos_rec_hdr))
#define PEER_CHECK_MS 100

/* Shared header at offset 0 of the memfd. Producer and consumer fields sit on
 * separate cache lines. */
struct phos_shm {
	uint64_t magic;
	uint32_t version;
	_Atomic uint32_t adoptions;   /* bumped by each executor that adopts it (a checkpoint's restore) */
	uint64_t ring_off, ring_size;
	uint64_t reply_off, reply_size;
	uint64_t total;

	_Alignas(64) _Atomic uint64_t head;      /* bytes published by the producer */
	_Atomic uint32_t head_futex;             /* bumped per publication */
	_Atomic uint32_t consumer_waiting;

	_Alignas(64) _Atomic uint64_t tail;      /* bytes released by the consumer */
	_Atomic uint32_t tail_futex;             /* bumped per release */
	_Atomic uint32_t producer_waiting;

	_Alignas(64) _Atomic uint32_t reply_futex;
	_Atomic uint32_t reply_waiting;

	/* host callbacks: the executor publishes cb_status then cb_due = seq; the
	 * function's callback thread runs callback seq and sets cb_done = seq */
	_Alignas(64) _Atomic uint32_t cb_due;
	_Atomic int32_t cb_status;
	_Alignas(64) _Atomic uint32_t cb_done;

	/* fenced sections (channel.h): the executor closes the fence (1), the
	 * function's threads count themselves in sections */
	_Alignas(64) _Atomic uint32_t fence;
	_Atomic uint32_t sections;
};

/* Producer: how deep this thread is in fenced sections (its records are
 * PHOS_REC_FENCED while > 0). */
static _Thread_local unsigned section_depth;

struct phos_channel {
	int sock;                /* -1 until attached (executor side) */
	int memfd;               /* executor side, until attached */
	struct phos_shm *shm;
	size_t shm_len;
	uint8_t *ring;
	struct phos_reply *reply;
	uint64_t next_seq;       /* producer */
	uint64_t pending_size;   /* consumer: size of the record handed out */
	unsigned spin_iters;
	int keep_fd;             /* function side: the memfd, kept open (channel.h, "adopting") */
	_Atomic bool kicked;     /* consumer: phos_channel_kick was called */
};

static uint64_t align8(uint64_t v)
{
	return (v + 7) & ~7ull;
}

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
	return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *addr)
{
	futex(addr, FUTEX_WAKE, INT_MAX, NULL);
}

/* Waits until *addr != val or the timeout passes (spurious returns are fine). */
static void futex_wait_ms(_Atomic uint32_t *addr, uint32_t val, int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	futex(addr, FUTEX_WAIT, val, &ts);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

static bool peer_gone(int sock)
{
	struct pollfd p = { .fd = sock, .events = POLLRDHUP };

	if (poll(&p, 1, 0) < 0)
		return errno != EINTR;
	return (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL)) != 0;
}

static unsigned spin_from_env(void)
{
	const char *s = getenv("PHOS_SPIN_US");
	long us = 50;

	if (s && *s) {
		char *end;
		long v = strtol(s, &end, 10);

		if (*end == '\0' && v >= 0 && v <= 10000)
			us = v;
	}
	/* A pause is about 30-40 ns on current x86; precision does not matter here. */
	return (unsigned)us * 30u;
}

static int channel_new(int sock, struct phos_shm *shm, size_t len, struct phos_channel **ret_ch)
{
	struct phos_channel *ch = calloc(1, sizeof(*ch));

	if (!ch)
		return -ENOMEM;
	ch->sock = sock;
	ch->memfd = -1;
	ch->keep_fd = -1;
	ch->shm = shm;
	ch->shm_len = len;
	ch->ring = (uint8_t *)shm + shm->ring_off;
	ch->reply = (struct phos_reply *)((uint8_t *)shm + shm->reply_off);
	ch->next_seq = 1;
	ch->spin_iters = spin_from_env();
	*ret_ch = ch;
	return 0;
}

int phos_send_fd(int sock, int fd)
{
	char byte = 'F';
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			      .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *c;

	memset(&u, 0, sizeof(u));
	c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	for (;;) {
		ssize_t n = sendmsg(sock, &msg, MSG_NOSIGNAL);

		if (n == 1)
			return 0;
		if (n < 0 && errno == EINTR)
			continue;
		return n < 0 ? -errno : -EIO;
	}
}

/* One byte and, optionally, one descriptor (-1 when none came). */
static int recv_msg(int sock, char *ret_byte, int *ret_fd)
{
	char byte;
	struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} u;
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			      .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *c;
	ssize_t n;
	int fd;

	do
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -EPIPE;
	*ret_byte = byte;
	*ret_fd = -1;
	c = CMSG_FIRSTHDR(&msg);
	if (!c)
		return 0;
	if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int)))
		return -EBADMSG;
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	*ret_fd = fd;
	return 0;
}

int phos_recv_fd(int sock, int *ret_fd)
{
	char byte;
	int fd, r = recv_msg(sock, &byte, &fd);

	if (r < 0)
		return r;
	if (fd < 0)
		return -EBADMSG;
	*ret_fd = fd;
	return 0;
}

int phos_channel_make(size_t ring_bytes, struct phos_channel **ret_ch)
{
	long page = sysconf(_SC_PAGESIZE);
	uint64_t ring_off = 4096, reply_off, total;
	struct phos_shm *shm;
	int fd, r;

	if (ring_bytes < (2u << 20) || ring_bytes > (1u << 30) || ring_bytes % 4096)
		return -EINVAL;
	reply_off = ring_off + ring_bytes;
	total = reply_off + sizeof(struct phos_reply) + PHOS_REPLY_MAX;
	total = (total + (uint64_t)page - 1) & ~((uint64_t)page - 1);

	fd = memfd_create("phos-channel", MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)total) < 0) {
		r = -errno;
		goto err_fd;
	}
	shm = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (shm == MAP_FAILED) {
		r = -errno;
		goto err_fd;
	}
	shm->magic = PHOS_CHANNEL_MAGIC;
	shm->version = SHM_VERSION;
	shm->ring_off = ring_off;
	shm->ring_size = ring_bytes;
	shm->reply_off = reply_off;
	shm->reply_size = total - reply_off;
	shm->total = total;
	r = channel_new(-1, shm, total, ret_ch);
	if (r < 0) {
		munmap(shm, total);
		goto err_fd;
	}
	(*ret_ch)->memfd = fd;
	return 0;

err_fd:
	close(fd);
	return r;
}

int phos_channel_attach(struct phos_channel *ch, int sock)
{
	int r;

	if (ch->memfd < 0 || ch->sock >= 0) {
		close(sock);
		return -EINVAL;
	}
	ch->sock = sock;
	r = phos_send_fd(sock, ch->memfd);
	if (r < 0)
		return r;
	close(ch->memfd);
	ch->memfd = -1;
	return 0;
}

int phos_channel_serve_new(int sock, size_t ring_bytes, struct phos_channel **ret_ch)
{
	struct phos_channel *ch;
	int r = phos_channel_make(ring_bytes, &ch);

	if (r < 0) {
		close(sock);
		return r;
	}
	r = phos_channel_attach(ch, sock);
	if (r < 0) {
		phos_channel_free(ch);
		return r;
	}
	*ret_ch = ch;
	return 0;
}

/* Maps the channel memfd fd for the channel on sock. keep: the channel keeps
 * fd open (and closes it when freed); else, and on failure, fd is closed. */
static int channel_map(int sock, int fd, bool keep, struct phos_channel **ret_ch)
{
	struct phos_shm *shm;
	struct stat st;
	int r;

	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto out;
	}
	if ((uint64_t)st.st_size < 4096 + (2u << 20)) {
		r = -EBADMSG;
		goto out;
	}
	shm = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (shm == MAP_FAILED) {
		r = -errno;
		goto out;
	}
	if (shm->magic != PHOS_CHANNEL_MAGIC || shm->version != SHM_VERSION ||
	    shm->total != (uint64_t)st.st_size || shm->ring_off < sizeof(*shm) ||
	    shm->ring_off + shm->ring_size > shm->reply_off ||
	    shm->reply_off + sizeof(struct phos_reply) + PHOS_REPLY_MAX > shm->total ||
	    shm->ring_size % 8) {
		munmap(shm, (size_t)st.st_size);
		r = -EBADMSG;
		goto out;
	}
	r = channel_new(sock, shm, (size_t)st.st_size, ret_ch);
	if (r < 0) {
		munmap(shm, (size_t)st.st_size);
	} else if (keep) {
		(*ret_ch)->keep_fd = fd;
		return 0;
	}
out:
	close(fd);
	return r;
}

int phos_channel_connect_new(int sock, struct phos_channel **ret_ch)
{
	int fd, r = phos_recv_fd(sock, &fd);

	if (r < 0)
		return r;
	return channel_map(sock, fd, true, ret_ch);
}

int phos_channel_adopt(int memfd, int sock, struct phos_channel **ret_ch)
{
	int r = channel_map(sock, memfd, false, ret_ch);

	if (r < 0)
		close(sock);
	else
		atomic_fetch_add(&(*ret_ch)->shm->adoptions, 1);
	/* a fence the checkpoint closed is the old executor's: open here */
	if (r == 0)
		phos_channel_fence_open(*ret_ch);
	return r;
}

uint32_t phos_channel_adoptions(const struct phos_channel *ch)
{
	return atomic_load_explicit(&ch->shm->adoptions, memory_order_acquire);
}

void phos_channel_kick(struct phos_channel *ch)
{
	atomic_store(&ch->kicked, true);
	atomic_fetch_add(&ch->shm->head_futex, 1);
	futex_wake_all(&ch->shm->head_futex);
}

int phos_channel_await(struct phos_channel *ch, struct phos_channel **ret_ch)
{
	char byte;
	int fd, r;

	r = recv_msg(ch->sock, &byte, &fd);
	if (r < 0)
		return r;
	if (fd < 0)
		return byte == 'R' ? 0 : -EBADMSG;
	r = channel_map(ch->sock, fd, true, ret_ch);
	if (r < 0)
		return r;
	ch->sock = -1; /* now the new channel's */
	phos_channel_free(ch);
	return 1;
}

int phos_channel_resume(struct phos_channel *ch)
{
	char byte = 'R';

	for (;;) {
		ssize_t n = send(ch->sock, &byte, 1, MSG_NOSIGNAL);

		if (n == 1)
			return 0;
		if (n < 0 && errno == EINTR)
			continue;
		return n < 0 ? -errno : -EIO;
	}
}

void phos_channel_free(struct phos_channel *ch)
{
	if (!ch)
		return;
	if (ch->shm)
		munmap(ch->shm, ch->shm_len);
	if (ch->sock >= 0)
		close(ch->sock);
	if (ch->memfd >= 0)
		close(ch->memfd);
	if (ch->keep_fd >= 0)
		close(ch->keep_fd);
	free(ch);
}

int phos_channel_socket(struct phos_channel *ch)
{
	return ch->sock;
}

void *phos_channel_shm(struct phos_channel *ch, size_t *ret_len)
{
	if (ret_len)
		*ret_len = ch->shm_len;
	return ch->shm;
}

/* --- producer --- */

/* Waits until the ring has need free bytes; false when the consumer is gone. */
static bool wait_space(struct phos_channel *ch, uint64_t head, uint64_t need)
{
	struct phos_shm *s = ch->shm;
	unsigned spins = 0;

	for (;;) {
		uint64_t tail = atomic_load_explicit(&s->tail, memory_order_acquire);
		uint32_t v;

		if (s->ring_size - (head - tail) >= need)
			return true;
		if (spins++ < ch->spin_iters) {
			cpu_relax();
			continue;
		}
		v = atomic_load(&s->tail_futex);
		atomic_store(&s->producer_waiting, 1);
		tail = atomic_load(&s->tail);
		if (s->ring_size - (head - tail) >= need) {
			atomic_store(&s->producer_waiting, 0);
			return true;
		}
		futex_wait_ms(&s->tail_futex, v, PEER_CHECK_MS);
		atomic_store(&s->producer_waiting, 0);
		if (peer_gone(ch->sock))
			return false;
	}
}

uint64_t phos_channel_post(struct phos_channel *ch, uint32_t op, uint32_t flags,
			   const void *body, size_t body_len,
			   const void *payload, size_t payload_len)
{
	struct phos_shm *s = ch->shm;
	uint64_t head = atomic_load_explicit(&s->head, memory_order_relaxed);
	uint64_t len = (uint64_t)body_len + payload_len;
	uint64_t size = align8(HDR_SIZE + len);
	uint64_t pos = head % s->ring_size, rem = s->ring_size - pos;
	uint64_t need = size + (rem < size ? rem : 0);
	struct phos_rec_hdr *h;

	if (len > PHOS_REC_MAX_PAYLOAD + 4096 || need > s->ring_size)
		return 0;
	if (!wait_space(ch, head, need))
		return 0;
	if (rem < size) {
		/* Not enough room before the end: pad to the start. A tail too small
		 * for a header is skipped by both sides by the same rule. */
		if (rem >= HDR_SIZE) {
			h = (struct phos_rec_hdr *)(ch->ring + pos);
			memset(h, 0, sizeof(*h));
			h->op = PHOS_OP_NOP;
			h->len = (uint32_t)(rem - HDR_SIZE);
		}
		head += rem;
		pos = 0;
	}
	h = (struct phos_rec_hdr *)(ch->ring + pos);
	h->op = op;
	h->flags = flags | (section_depth ? PHOS_REC_FENCED : 0);
	h->len = (uint32_t)len;
	h->_pad = 0;
	h->seq = ch->next_seq++;
	if (body_len)
		memcpy(h + 1, body, body_len);
	if (payload_len)
		memcpy((uint8_t *)(h + 1) + body_len, payload, payload_len);
	atomic_store_explicit(&s->head, head + size, memory_order_release);
	atomic_fetch_add(&s->head_futex, 1);
	if (atomic_load(&s->consumer_waiting))
		futex_wake_all(&s->head_futex);
	return h->seq;
}

int phos_channel_call(struct phos_channel *ch, uint32_t op,
		      const void *body, size_t body_len,
		      const void *payload, size_t payload_len,
		      const struct phos_reply **ret_reply)
{
	struct phos_shm *s = ch->shm;
	uint64_t seq = phos_channel_post(ch, op, PHOS_REC_SYNC, body, body_len, payload, payload_len);
	unsigned spins = 0;

	if (!seq)
		return -EPIPE;
	for (;;) {
		uint32_t v;

		if (atomic_load_explicit((_Atomic uint64_t *)&ch->reply->seq, memory_order_acquire) == seq)
			break;
		if (spins++ < ch->spin_iters) {
			cpu_relax();
			continue;
		}
		v = atomic_load(&s->reply_futex);
		atomic_store(&s->reply_waiting, 1);
		if (atomic_load((_Atomic uint64_t *)&ch->reply->seq) == seq) {
			atomic_store(&s->reply_waiting, 0);
			break;
		}
		futex_wait_ms(&s->reply_futex, v, PEER_CHECK_MS);
		atomic_store(&s->reply_waiting, 0);
		if (atomic_load((_Atomic uint64_t *)&ch->reply->seq) != seq && peer_gone(ch->sock))
			return -EPIPE;
	}
	if (ch->reply->len > PHOS_REPLY_MAX)
		return -EBADMSG;
	*ret_reply = ch->reply;
	return 0;
}

/* --- consumer --- */

/* The record at tail, skipping padding; NULL when the ring is empty. */
static const struct phos_rec_hdr *peek(struct phos_channel *ch)
{
	struct phos_shm *s = ch->shm;

	for (;;) {
		uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
		uint64_t head = atomic_load_explicit(&s->head, memory_order_acquire);
		uint64_t pos = tail % s->ring_size, rem = s->ring_size - pos;
		const struct phos_rec_hdr *h;
		uint64_t size;

		if (tail == head)
			return NULL;
		if (rem < HDR_SIZE) {
			atomic_store_explicit(&s->tail, tail + rem, memory_order_release);
			continue;
		}
		h = (const struct phos_rec_hdr *)(ch->ring + pos);
		size = align8(HDR_SIZE + h->len);
		if (size > rem || size > head - tail) {
			/* A corrupt record: the producer broke the protocol. Drop everything. */
			phos_err("channel: corrupt record at %llu (len %u)", (unsigned long long)tail, h->len);
			atomic_store_explicit(&s->tail, head, memory_order_release);
			return NULL;
		}
		if (h->op == PHOS_OP_NOP && h->seq == 0) {
			atomic_store_explicit(&s->tail, tail + rem, memory_order_release);
			continue;
		}
		ch->pending_size = size;
		return h;
	}
}

int phos_channel_next(struct phos_channel *ch, int timeout_ms, const struct phos_rec_hdr **ret_hdr)
{
	struct phos_shm *s = ch->shm;
	struct timespec start, now;
	unsigned spins = 0;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		const struct phos_rec_hdr *h = peek(ch);
		uint32_t v;
		long waited;

		if (h) {
			*ret_hdr = h;
			return 1;
		}
		if (atomic_exchange(&ch->kicked, false))
			return 0;
		if (spins++ < ch->spin_iters) {
			cpu_relax();
			continue;
		}
		v = atomic_load(&s->head_futex);
		atomic_store(&s->consumer_waiting, 1);
		h = peek(ch);
		if (h) {
			atomic_store(&s->consumer_waiting, 0);
			*ret_hdr = h;
			return 1;
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		waited = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
		if (timeout_ms >= 0 && waited >= timeout_ms) {
			atomic_store(&s->consumer_waiting, 0);
			return peer_gone(ch->sock) ? -EPIPE : 0;
		}
		futex_wait_ms(&s->head_futex, v, timeout_ms < 0 || timeout_ms - waited > PEER_CHECK_MS ?
							 PEER_CHECK_MS : (int)(timeout_ms - waited));
		atomic_store(&s->consumer_waiting, 0);
		if (!peek(ch) && peer_gone(ch->sock))
			return -EPIPE;
	}
}

void phos_channel_consume(struct phos_channel *ch, const struct phos_rec_hdr *hdr)
{
	struct phos_shm *s = ch->shm;
	uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed);

	(void)hdr;
	atomic_store_explicit(&s->tail, tail + ch->pending_size, memory_order_release);
	ch->pending_size = 0;
	atomic_fetch_add(&s->tail_futex, 1);
	if (atomic_load(&s->producer_waiting))
		futex_wake_all(&s->tail_futex);
}

/* --- fenced sections --- */

int phos_channel_section_enter(struct phos_channel *ch)
{
	struct phos_shm *s = ch->shm;

	if (section_depth) {
		section_depth++;
		return 0;
	}
	for (;;) {
		/* seq_cst both sides: either the executor sees this section, or
		 * this thread sees its closed fence */
		atomic_fetch_add(&s->sections, 1);
		if (!atomic_load(&s->fence))
			break;
		atomic_fetch_sub(&s->sections, 1);
		while (atomic_load(&s->fence)) {
			futex_wait_ms(&s->fence, 1, PEER_CHECK_MS);
			if (atomic_load(&s->fence) && peer_gone(ch->sock))
				return -EPIPE;
		}
	}
	section_depth = 1;
	return 0;
}

void phos_channel_section_leave(struct phos_channel *ch)
{
	if (!section_depth || --section_depth)
		return;
	atomic_fetch_sub(&ch->shm->sections, 1);
	/* a closed fence waits for this: the consumer looks at once */
	if (atomic_load(&ch->shm->fence)) {
		atomic_fetch_add(&ch->shm->head_futex, 1);
		futex_wake_all(&ch->shm->head_futex);
	}
}

void phos_channel_fence_close(struct phos_channel *ch)
{
	atomic_store(&ch->shm->fence, 1);
}

bool phos_channel_fence_settled(struct phos_channel *ch)
{
	struct phos_shm *s = ch->shm;
	uint64_t tail, head;

	if (!atomic_load(&s->fence) || atomic_load(&s->sections))
		return false;
	/* every section ended after its records were published (the release of
	 * head comes before the section's leave) */
	tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
	head = atomic_load_explicit(&s->head, memory_order_acquire);
	while (tail < head) {
		uint64_t pos = tail % s->ring_size, rem = s->ring_size - pos;
		const struct phos_rec_hdr *h;
		uint64_t size;

		if (rem < HDR_SIZE) {
			tail += rem;
			continue;
		}
		h = (const struct phos_rec_hdr *)(ch->ring + pos);
		size = align8(HDR_SIZE + h->len);
		if (size > rem || size > head - tail)
			return false;   /* corrupt: the consumer drops it, then this looks again */
		if (h->op == PHOS_OP_NOP && h->seq == 0) {
			tail += rem;
			continue;
		}
		if (h->flags & PHOS_REC_FENCED)
			return false;
		tail += size;
	}
	return true;
}

void phos_channel_fence_open(struct phos_channel *ch)
{
	if (atomic_exchange(&ch->shm->fence, 0))
		futex_wake_all(&ch->shm->fence);
}

void *phos_channel_reply_data(struct phos_channel *ch)
{
	return ch->reply + 1;
}

void phos_channel_reply(struct phos_channel *ch, uint64_t seq, int32_t status, int32_t blas_status,
			uint32_t len)
{
	struct phos_shm *s = ch->shm;

	ch->reply->status = status;
	ch->reply->blas_status = blas_status;
	ch->reply->len = len;
	atomic_store_explicit((_Atomic uint64_t *)&ch->reply->seq, seq, memory_order_release);
	atomic_fetch_add(&s->reply_futex, 1);
	if (atomic_load(&s->reply_waiting))
		futex_wake_all(&s->reply_futex);
}

/* --- host callbacks --- */

int phos_channel_callback_run(struct phos_channel *ch, uint32_t seq, int32_t status)
{
	atomic_store_explicit(&ch->shm->cb_status, status, memory_order_relaxed);
	atomic_store_explicit(&ch->shm->cb_due, seq, memory_order_release);
	futex_wake_all(&ch->shm->cb_due);
	for (;;) {
		uint32_t done = atomic_load_explicit(&ch->shm->cb_done, memory_order_acquire);

		if (done == seq)
			return 0;
		if (ch->sock >= 0 && peer_gone(ch->sock))
			return -EPIPE;
		futex_wait_ms(&ch->shm->cb_done, done, PEER_CHECK_MS);
	}
}

int phos_channel_callback_next(struct phos_channel *ch, int timeout_ms, uint32_t *ret_seq, int32_t *ret_status)
{
	uint32_t due = atomic_load_explicit(&ch->shm->cb_due, memory_order_acquire);

	if (due == atomic_load_explicit(&ch->shm->cb_done, memory_order_acquire)) {
		futex_wait_ms(&ch->shm->cb_due, due, timeout_ms);
		due = atomic_load_explicit(&ch->shm->cb_due, memory_order_acquire);
	}
	if (due == atomic_load_explicit(&ch->shm->cb_done, memory_order_acquire))
		return ch->sock >= 0 && peer_gone(ch->sock) ? -EPIPE : 0;
	*ret_seq = due;
	*ret_status = atomic_load_explicit(&ch->shm->cb_status, memory_order_relaxed);
	return 1;
}

void phos_channel_callback_done(struct phos_channel *ch, uint32_t seq)
{
	_Atomic uint32_t *w = &ch->shm->cb_done;

	atomic_store_explicit(w, seq, memory_order_release);
	futex_wake_all(w);
}
