/* SPDX-License-Identifier: MIT */
/*
 * phos-criu-sockdiag.so: preloaded into CRIU for dumps (criu.h), so that a
 * program holding no internet socket is not held frozen while CRIU walks the
 * host's socket tables.
 *
 * Once it has frozen the tree, CRIU asks the kernel's sock_diag for every
 * socket of the network namespace, family by family: unix, then TCP, UDP,
 * UDP-lite and raw over IPv4 and IPv6, then packet and netlink. Each TCP
 * query walks the whole established hash, which the kernel sizes by the
 * host's memory, and each answer grows with the host's connections: on the
 * H200 host (128 GiB) the eight internet queries took 8.3 of the 20.9 ms a
 * checkpoint held `train` frozen (CRIU's log, 2026-12-02), for a program
 * whose only sockets are its channel and its stdio.
 *
 *   CRIU                                  this shim (in CRIU's process)
 *   seize the tree (frozen from here)
 *   sendmsg(sock_diag, AF_INET[6] dump) ─▶ first time: does any process of
 *                                          the tree hold a socket that is not
 *                                          a unix one (pidfd_getfd +
 *                                          SO_DOMAIN, every fd table)?
 *                                          no: not sent; the next recvmsg
 *                                          answers "no such family" (ENOENT)
 *                                          yes, or not sure: sent as asked
 *
 * "No such family" is what CRIU hears from a kernel built without that diag
 * module: it logs "Sockects collect procedure ... -2" and goes on, and an
 * internet socket it later meets among the files fails the dump ("Sockets
 * ... are not collected"), except a raw one, which it dumps as unconnected,
 * as on such kernels. The answer is made only when the check passed while
 * the tree was frozen, so no such socket is there to meet; a socket that
 * travels in a unix socket's queue (SCM_RIGHTS) is not in any fd table, and
 * a TCP or UDP one would fail the dump, never make a wrong image.
 *
 * Active only in a process named criu, with PHOS_CRIU_SOCKDIAG_PID set to
 * the root of the dumped tree, whose network namespace is CRIU's own (CRIU
 * fails a dump of another one when a family is missing). It takes
 * LD_PRELOAD out of CRIU's environment, so that CRIU's action scripts run
 * without it. Plain libc; never built with sanitizers (it is preloaded into
 * a program that is not).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/inet_diag.h>
#include <linux/kcmp.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#define TREE_MAX 4096   /* processes of a tree we look through; more: not sure */

#define EXPORT __attribute__((visibility("default")))

static ssize_t (*real_sendmsg)(int, const struct msghdr *, int);
static ssize_t (*real_recvmsg)(int, struct msghdr *, int);

static pid_t root_pid;            /* 0: inert */
static int verdict = -1;          /* -1 not asked yet, 0 pass queries through, 1 answer them */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int pending_fd = -1;       /* a query not sent: its answer is owed */
static __u32 pending_seq;

__attribute__((constructor)) static void sockdiag_init(void)
{
	const char *pid_s = getenv("PHOS_CRIU_SOCKDIAG_PID");
	const char *name = strrchr(program_invocation_name, '/');
	struct stat a, b;
	char path[64];
	long v;

	real_sendmsg = (ssize_t (*)(int, const struct msghdr *, int))dlsym(RTLD_NEXT, "sendmsg");
	real_recvmsg = (ssize_t (*)(int, struct msghdr *, int))dlsym(RTLD_NEXT, "recvmsg");
	name = name ? name + 1 : program_invocation_name;
	/* the wrapper's shell and the loader pass it on to CRIU: only CRIU acts */
	if (strcmp(name, "criu") != 0)
		return;
	unsetenv("LD_PRELOAD");
	if (!real_sendmsg || !real_recvmsg || !pid_s)
		return;
	v = strtol(pid_s, NULL, 10);
	if (v <= 1 || v > 1 << 22)
		return;
	snprintf(path, sizeof(path), "/proc/%ld/ns/net", v);
	if (stat("/proc/self/ns/net", &a) < 0 || stat(path, &b) < 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev)
		return;
	root_pid = (pid_t)v;
}

/* The parent of pid from /proc/PID/stat (0: unknown). */
static pid_t parent_of(const char *pid_s)
{
	char path[64], buf[512], *paren;
	int fd, ppid = 0;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%.20s/stat", pid_s);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	paren = strrchr(buf, ')');   /* the name may hold spaces and parentheses */
	if (!paren || sscanf(paren + 1, " %*c %d", &ppid) != 1)
		return 0;
	return (pid_t)ppid;
}

/* The tree rooted at root_pid into tree (root first): its size, or -1 when
 * it has more than TREE_MAX processes or /proc cannot be read. */
static int tree_collect(pid_t *tree)
{
	static pid_t pids[TREE_MAX * 8], ppids[TREE_MAX * 8];
	struct dirent *de;
	size_t all = 0;
	int n = 1;
	DIR *d;

	tree[0] = root_pid;
	d = opendir("/proc");
	if (!d)
		return -1;
	while ((de = readdir(d))) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		if (all == sizeof(pids) / sizeof(pids[0])) {
			closedir(d);
			return -1;
		}
		pids[all] = (pid_t)strtol(de->d_name, NULL, 10);
		ppids[all++] = parent_of(de->d_name);
	}
	closedir(d);
	for (int k = 0; k < n; k++)   /* breadth first: the children of tree[k] */
		for (size_t i = 0; i < all; i++)
			if (ppids[i] == tree[k] && pids[i] != root_pid) {
				if (n == TREE_MAX)
					return -1;
				tree[n++] = pids[i];
			}
	return n;
}

/* Whether every socket in pid's fd tables is a unix one: 1, 0 (another
 * family), -1 (not sure). */
static int process_only_unix(pid_t pid)
{
	char path[64], link[64];
	struct dirent *de;
	int pidfd, r = 1;
	DIR *d;

	/* threads that do not share the process's fd table: not sure */
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while ((de = readdir(d))) {
		long tid = strtol(de->d_name, NULL, 10);

		if (tid > 0 && tid != pid && syscall(SYS_kcmp, pid, (pid_t)tid, KCMP_FILES, 0, 0) != 0) {
			closedir(d);
			return -1;
		}
	}
	closedir(d);

	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d) {
		close(pidfd);
		return -1;
	}
	while (r == 1 && (de = readdir(d))) {
		int domain = 0, fd;
		socklen_t len = sizeof(domain);
		ssize_t n;

		if (de->d_name[0] == '.')
			continue;
		n = readlinkat(dirfd(d), de->d_name, link, sizeof(link) - 1);
		if (n < 0) {
			r = -1;
			break;
		}
		link[n] = '\0';
		if (strncmp(link, "socket:[", 8) != 0)
			continue;
		fd = (int)syscall(SYS_pidfd_getfd, pidfd, (int)strtol(de->d_name, NULL, 10), 0);
		if (fd < 0) {
			r = -1;
			break;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0)
			r = -1;
		else if (domain != AF_UNIX)
			r = 0;
		close(fd);
	}
	closedir(d);
	close(pidfd);
	return r;
}

/* 1 when no process of the (frozen) tree holds a socket other than a unix
 * one, else 0. */
static int tree_only_unix(void)
{
	static pid_t tree[TREE_MAX];
	int n = tree_collect(tree);

	if (n <= 0)
		return 0;
	for (int i = 0; i < n; i++)
		if (process_only_unix(tree[i]) != 1)
			return 0;
	return 1;
}

/* Whether msg is a sock_diag dump of an internet family on fd. */
static bool inet_dump(int fd, const struct msghdr *msg, __u32 *ret_seq)
{
	const struct nlmsghdr *h;
	const struct inet_diag_req_v2 *req;
	int domain = 0, proto = 0;
	socklen_t len = sizeof(int);

	if (!msg || msg->msg_iovlen < 1 || !msg->msg_iov ||
	    msg->msg_iov[0].iov_len < NLMSG_LENGTH(sizeof(struct inet_diag_req_v2)))
		return false;
	h = msg->msg_iov[0].iov_base;
	req = NLMSG_DATA(h);
	if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || !(h->nlmsg_flags & NLM_F_DUMP) ||
	    (req->sdiag_family != AF_INET && req->sdiag_family != AF_INET6))
		return false;
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0 || domain != AF_NETLINK)
		return false;
	len = sizeof(int);
	if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) < 0 || proto != NETLINK_SOCK_DIAG)
		return false;
	*ret_seq = h->nlmsg_seq;
	return true;
}

EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	size_t sent = 0;
	__u32 seq;

	if (!real_sendmsg) {
		errno = ENOSYS;
		return -1;
	}
	if (!root_pid || !inet_dump(fd, msg, &seq))
		return real_sendmsg(fd, msg, flags);
	pthread_mutex_lock(&lock);
	if (verdict < 0)
		verdict = tree_only_unix();
	if (verdict != 1 || pending_fd >= 0) {
		pthread_mutex_unlock(&lock);
		return real_sendmsg(fd, msg, flags);
	}
	pending_seq = seq;
	__atomic_store_n(&pending_fd, fd, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&lock);
	for (size_t i = 0; i < msg->msg_iovlen; i++)   /* all of it, as if sent */
		sent += msg->msg_iov[i].iov_len;
	return (ssize_t)sent;
}

EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	struct {
		struct nlmsghdr h;
		int error;
	} done;

	if (!real_recvmsg) {
		errno = ENOSYS;
		return -1;
	}
	if (__atomic_load_n(&pending_fd, __ATOMIC_ACQUIRE) != fd)   /* every other socket: straight through */
		return real_recvmsg(fd, msg, flags);
	pthread_mutex_lock(&lock);
	if (pending_fd != fd || !msg || msg->msg_iovlen < 1 || msg->msg_iov[0].iov_len < sizeof(done)) {
		pthread_mutex_unlock(&lock);
		return real_recvmsg(fd, msg, flags);
	}
	memset(&done, 0, sizeof(done));
	done.h.nlmsg_len = NLMSG_LENGTH(sizeof(int));
	done.h.nlmsg_type = NLMSG_DONE;
	done.h.nlmsg_flags = NLM_F_MULTI;
	done.h.nlmsg_seq = pending_seq;
	done.error = -ENOENT;   /* as from a kernel without the family's diag */
	memcpy(msg->msg_iov[0].iov_base, &done, sizeof(done));
	if (msg->msg_name && msg->msg_namelen >= sizeof(struct sockaddr_nl)) {
		struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };

		memcpy(msg->msg_name, &kernel, sizeof(kernel));
		msg->msg_namelen = sizeof(kernel);
	}
	msg->msg_controllen = 0;
	msg->msg_flags = 0;
	if (!(flags & MSG_PEEK))
		__atomic_store_n(&pending_fd, -1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&lock);
	return (ssize_t)sizeof(done);
}
