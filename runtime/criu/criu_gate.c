/* SPDX-License-Identifier: MIT */
/*
 * phos-criu-gate: CRIU's action script for a dump made ready ahead
 * (criu.h, phos_criu_dump_ahead). At the pre-dump action, which CRIU runs
 * after its start-up and before it seizes the task, it connects to the
 * caller's abstract unix socket named by $PHOS_CRIU_GATE_SOCK (CRIU closes
 * the descriptors it was given, but keeps its environment), writes 'r' and
 * waits for one byte: 'g' lets CRIU go on (exit 0); anything else, or the
 * caller gone, fails the dump before it has touched the task (exit 1).
 * At the post-dump action (the image whole, the task still frozen) it
 * connects again, writes 'd' (phos_criu_dump_go_then) and waits for the
 * caller to close (at most a second), never failing the dump. Every other action passes at once.
 */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(void)
{
	const char *action = getenv("CRTOOLS_SCRIPT_ACTION"), *name = getenv("PHOS_CRIU_GATE_SOCK");
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len;
	ssize_t n;
	char c = 0;
	int fd;

	bool pre = action && !strcmp(action, "pre-dump"), post = action && !strcmp(action, "post-dump");

	if (!pre && !post)
		return 0;
	if (!name || !*name || (len = strlen(name)) >= sizeof(sa.sun_path) - 1)
		return pre ? 1 : 0;
	memcpy(sa.sun_path + 1, name, len);   /* abstract: a leading NUL */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len)) < 0)
		return pre ? 1 : 0;
	if (post) {
		/* A word, not a question: the dump goes on whatever becomes of
		 * it. The gate stays until the caller has read it (it closes
		 * the connection), at most a second, so that the caller can see
		 * that its writer is CRIU's child. */
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (write(fd, "d", 1) == 1)
			(void)poll(&p, 1, 1000);
		return 0;
	}
	if (write(fd, "r", 1) != 1)
		return 1;
	do
		n = read(fd, &c, 1);
	while (n < 0 && errno == EINTR);
	return n == 1 && c == 'g' ? 0 : 1;
}
