/* SPDX-License-Identifier: MIT */
/*
 * phos_fn_serve_impl: the function's entry point under phos-fn (include/phos/fn.h).
 *
 * Tells the executor that init is done (SERVE, the snapshot point: a snapshot
 * is dumped while phos_preload_serve_point waits, and a restored copy wakes up
 * there with a new executor), then serves
 * requests: one request per line on stdin, or framed ones (below), answered
 * on the stdout the function was started with. The function's own stdout is
 * moved to its stderr (the instance's log) first, so that a handler that
 * prints cannot corrupt the stream of answers.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

/* fn.h declares phos_fn_serve_impl weak for the function's side; defined after
 * that declaration ours would be weak too, so the header sees another name. */
#define phos_fn_serve_impl phos_fn_serve_impl_weak_decl_
#include <phos/fn.h>
#undef phos_fn_serve_impl

#include "internal.h"
#include "log.h"

PHOS_EXPORT int phos_fn_serve_impl(phos_fn_handler handler, void *state);

/* Largest framed request body accepted (the invoker enforces its own, smaller limit). */
#define MAX_FRAME (256u << 20)

/* Reads exactly len bytes from f into a new NUL-terminated buffer. */
static char *read_body(FILE *f, size_t len)
{
	char *b = malloc(len + 1);

	if (!b)
		return NULL;
	if (len && fread(b, 1, len, f) != len) {
		free(b);
		return NULL;
	}
	b[len] = '\0';
	return b;
}

/*
 * Requests come one per line on stdin, or framed (what the invoker sends, so
 * that bodies may hold any bytes):
 *
 *   PHOS-FRAME <len> <content-type>\n<len bytes>
 *       →   PHOS-FRAME <len> <status> <content-type>\n<len bytes>
 *
 * where status is the handler's return value (0 = success) and content-type
 * the handler's resp->content_type when it is a plain token (else
 * application/json). A line request gets a line response.
 */

/* resp->content_type when it can go on the frame line, else the default. */
static const char *response_type(const struct phos_fn_response *resp)
{
	const char *t = resp->content_type;
	size_t n = 0;

	if (!t)
		return "application/json";
	for (; t[n]; n++)
		if (t[n] <= ' ' || t[n] > '~' || n >= 127)
			return "application/json";
	return n ? t : "application/json";
}

/* The stream answers go to: a private copy of stdout, with stdout itself
 * pointed at stderr. Falls back to stdout when either step fails. */
static FILE *answers_open(void)
{
	int fd;
	FILE *f;

	fflush(stdout);
	fd = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
	if (fd < 0)
		return stdout;
	f = fdopen(fd, "w");
	if (!f) {
		close(fd);
		return stdout;
	}
	if (dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
		fclose(f);
		return stdout;
	}
	return f;
}

static int serve_loop(phos_fn_handler handler, void *state)
{
	char *line = NULL, ctype[128];
	FILE *out = answers_open();
	size_t cap = 0;
	ssize_t n;

	while ((n = getline(&line, &cap, stdin)) >= 0) {
		struct phos_fn_request req;
		struct phos_fn_response resp;
		unsigned long long flen;
		char *body = NULL;
		bool framed = false;
		int rc;

		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (!strncmp(line, "PHOS-FRAME ", 11)) {
			ctype[0] = '\0';
			if (sscanf(line + 11, "%llu %127s", &flen, ctype) < 1 || flen > MAX_FRAME ||
			    !(body = read_body(stdin, (size_t)flen)))
				break; /* the stream is out of step: nothing sensible can follow */
			framed = true;
			req.body = body;
			req.len = (size_t)flen;
			req.content_type = ctype[0] ? ctype : "application/json";
		} else {
			if (n == 0)
				continue;
			req.body = line;
			req.len = (size_t)n;
			req.content_type = "application/json";
		}
		memset(&resp, 0, sizeof(resp));
		rc = handler(state, &req, &resp);
		fflush(stdout);   /* what the handler printed, into the log before the answer */
		if (framed) {
			fprintf(out, "PHOS-FRAME %zu %d %s\n", resp.body ? resp.len : 0, rc, response_type(&resp));
			if (resp.body)
				fwrite(resp.body, 1, resp.len, out);
		} else {
			if (resp.body)
				fwrite(resp.body, 1, resp.len, out);
			else if (rc)
				fprintf(out, "{\"error\":\"handler failed with %d\"}", rc);
			fputc('\n', out);
		}
		fflush(out);
		free(resp.body);
		free(body);
	}
	free(line);
	if (out != stdout)
		fclose(out);
	return 0;
}

/*
 * Under phos-fn the function is the init of its own pid namespace, and the
 * kernel drops a signal that an init sends itself while its action is the
 * default: abort()'s SIGABRT did nothing, glibc then fell back to an illegal
 * instruction and the function was reported as killed by SIGSEGV. So, as
 * such an init, SIGABRT ends the process the way the default action would be
 * reported: a note on stderr and exit status 128 + SIGABRT (what a shell and
 * the invoker read as "killed by SIGABRT"). A handler of the program's own
 * replaces this one.
 */
static void abort_as_init(int sig)
{
	static const char note[] = "phos: the function aborted (SIGABRT)\n";

	(void)!write(STDERR_FILENO, note, sizeof(note) - 1);
	_exit(128 + sig);
}

__attribute__((constructor)) static void serve_signals_init(void)
{
	struct sigaction sa = { .sa_handler = abort_as_init };
	struct sigaction old;

	if (getpid() != 1 || sigaction(SIGABRT, NULL, &old) < 0 || old.sa_handler != SIG_DFL)
		return;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGABRT, &sa, NULL);
}

PHOS_EXPORT int phos_fn_serve_impl(phos_fn_handler handler, void *state)
{
	int r;

	if (!handler)
		return 1;
	r = phos_preload_serve_point();
	if (r)
		/* Not under an executor (or it refused): serve anyway, the handler's
		 * CUDA calls report the problem. */
		phos_warn("SERVE failed (%d); serving without the runtime", r);
	r = serve_loop(handler, state);
	phos_preload_goodbye();
	return r;
}
