/* SPDX-License-Identifier: MIT */
/*
 * Periodic checkpoints and restart on failure, for `phos-fn run
 * --checkpointable` and `phos-fn restore` (issue 11; see cli.h).
 *
 *   DIR/ckpt-000001/   complete checkpoints, each committed atomically
 *   DIR/ckpt-000002/   (image.h), numbered on from the highest there; after
 *   ...                a commit only the newest --keep stay
 *
 * The interval is --checkpoint-every SECONDS, or `auto` with --mtbf SECONDS
 * (M, the expected time between failures): Young's interval sqrt(2 C M), C the
 * program's stall in the last checkpoint (the first is taken after
 * AUTO_FIRST_S to measure it), clamped to [AUTO_MIN_S, M]. A checkpoint that
 * fails (a full disk, say) fails alone: it is reported on stderr, nothing of
 * it stays, and the next one comes on time.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "cli.h"
#include "image.h"
#include "log.h"
#include "snapshotter.h"

#define AUTO_FIRST_S 0.5
#define AUTO_MIN_S 0.1
#define MAX_KEEP 1000
#define MAX_RESTARTS 1000
#define MAX_SECONDS (365.0 * 86400)

static int parse_seconds(const char *s, double *ret)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 0.01 && v <= MAX_SECONDS))
		return -EINVAL;
	*ret = v;
	return 0;
}

static int parse_count(const char *s, unsigned max, unsigned *ret)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v > max)
		return -EINVAL;
	*ret = (unsigned)v;
	return 0;
}

int cli_periodic_option(struct cli_periodic *p, int opt, const char *arg)
{
	switch (opt) {
	case CLI_OPT_CKPT_DIR:
		if (!*arg || strlen(arg) + 32 >= sizeof(p->dir)) {
			fprintf(stderr, "phos-fn: --checkpoint-dir: an empty or too long path\n");
			return -EINVAL;
		}
		snprintf(p->dir, sizeof(p->dir), "%s", arg);
		return 0;
	case CLI_OPT_CKPT_EVERY:
		p->auto_every = !strcmp(arg, "auto");
		if (!p->auto_every && parse_seconds(arg, &p->every_s) < 0) {
			fprintf(stderr, "phos-fn: --checkpoint-every takes seconds (0.01 to a year) or auto, not '%s'\n",
				arg);
			return -EINVAL;
		}
		p->enabled = true;
		return 0;
	case CLI_OPT_MTBF:
		if (parse_seconds(arg, &p->mtbf_s) < 0) {
			fprintf(stderr, "phos-fn: --mtbf takes seconds (0.01 to a year), not '%s'\n", arg);
			return -EINVAL;
		}
		return 0;
	case CLI_OPT_CKPT_MODE:
		if (phos_ckpt_mode_parse(arg, &p->mode) < 0) {
			fprintf(stderr, "phos-fn: unknown checkpoint mode '%s' (stw, cow or recopy)\n", arg);
			return -EINVAL;
		}
		return 0;
	case CLI_OPT_KEEP:
		if (parse_count(arg, MAX_KEEP, &p->keep) < 0 || p->keep < 1) {
			fprintf(stderr, "phos-fn: --keep takes 1 to %u checkpoints, not '%s'\n", MAX_KEEP, arg);
			return -EINVAL;
		}
		return 0;
	case CLI_OPT_RESTART:
		p->restart = true;
		/* an executor whose GPU context is lost for good exits (status 76),
		 * and the program restarts from its latest checkpoint */
		setenv("PHOS_EXIT_ON_FATAL", "1", 1);
		return 0;
	case CLI_OPT_MAX_RESTARTS:
		if (parse_count(arg, MAX_RESTARTS, &p->max_restarts) < 0) {
			fprintf(stderr, "phos-fn: --max-restarts takes 0 to %u, not '%s'\n", MAX_RESTARTS, arg);
			return -EINVAL;
		}
		return 0;
	default:
		return -ENOENT;
	}
}

/* The number of a checkpoint's directory name, or 0 for any other name. */
static unsigned ckpt_number(const char *name)
{
	unsigned n = 0;

	if (strncmp(name, "ckpt-", 5) || strlen(name) != 11)
		return 0;
	for (const char *c = name + 5; *c; c++) {
		if (*c < '0' || *c > '9')
			return 0;
		n = n * 10 + (unsigned)(*c - '0');
	}
	return n;
}

/* The numbers of DIR's checkpoints, ascending (*ret_n of them; the caller
 * frees *ret). */
static int list_ckpts(const char *dir, unsigned **ret, size_t *ret_n)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	unsigned *v = NULL;
	size_t n = 0, cap = 0;

	if (!d)
		return -errno;
	while ((e = readdir(d))) {
		unsigned k = ckpt_number(e->d_name);

		if (!k)
			continue;
		if (n == cap) {
			unsigned *nv = realloc(v, (cap = cap ? cap * 2 : 16) * sizeof(*v));

			if (!nv) {
				free(v);
				closedir(d);
				return -ENOMEM;
			}
			v = nv;
		}
		v[n++] = k;
	}
	closedir(d);
	for (size_t i = 1; i < n; i++)   /* few: insertion sort */
		for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
			unsigned t = v[j];

			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	*ret = v;
	*ret_n = n;
	return 0;
}

int cli_periodic_check(struct cli_periodic *p)
{
	unsigned *v = NULL;
	size_t n = 0;
	int r;

	if (!p->enabled && !p->restart && !p->dir[0])
		return 0;
	if (!p->dir[0]) {
		fprintf(stderr, "phos-fn: --checkpoint-every and --restart-on-failure need --checkpoint-dir DIR\n");
		return -EINVAL;
	}
	if (p->auto_every && !p->mtbf_s) {
		fprintf(stderr, "phos-fn: --checkpoint-every auto needs --mtbf SECONDS (the expected time between "
				"failures)\n");
		return -EINVAL;
	}
	if (mkdir(p->dir, 0700) < 0 && errno != EEXIST) {
		fprintf(stderr, "phos-fn: --checkpoint-dir %s: %s\n", p->dir, strerror(errno));
		return -errno;
	}
	r = list_ckpts(p->dir, &v, &n);
	if (r < 0) {
		fprintf(stderr, "phos-fn: --checkpoint-dir %s: %s\n", p->dir, strerror(-r));
		return r;
	}
	p->seq = n ? v[n - 1] : 0;
	free(v);
	if (p->seq >= 999999) {
		fprintf(stderr, "phos-fn: %s holds checkpoint number %u: no more numbers\n", p->dir, p->seq);
		return -ERANGE;
	}
	p->next_at = phos_now() + (p->auto_every ? AUTO_FIRST_S : p->every_s);
	return 0;
}

int cli_periodic_wait_ms(const struct cli_periodic *p)
{
	double left;

	if (!p || !p->enabled)
		return -1;
	left = p->next_at - phos_now();
	return left <= 0 ? 0 : left > 3600 ? 3600000 : (int)(left * 1000) + 1;
}

/* Keeps the newest p->keep checkpoints of p->dir. */
static void prune(const struct cli_periodic *p)
{
	unsigned *v = NULL;
	size_t n = 0;
	char path[PATH_MAX];

	if (list_ckpts(p->dir, &v, &n) < 0)
		return;
	for (size_t i = 0; i + p->keep < n; i++) {
		snprintf(path, sizeof(path), "%s/ckpt-%06u", p->dir, v[i]);
		phos_image_dir_remove(path);
	}
	free(v);
}

void cli_periodic_tick(struct cli_periodic *p, const struct phos_checkpoint_target *t)
{
	struct phos_checkpoint_stats st;
	char out[PATH_MAX], err[1024];
	double interval;
	int r;

	if (!p || !p->enabled || phos_now() < p->next_at)
		return;
	snprintf(out, sizeof(out), "%s/ckpt-%06u", p->dir, p->seq + 1);
	r = phos_checkpoint_take(t, p->mode, out, &st, err, sizeof(err));
	if (r == -EAGAIN && !p->taken && p->restarts == 0) {
		/* The program has not made its first CUDA call: nothing to take yet. */
		p->next_at = phos_now() + AUTO_MIN_S;
		return;
	}
	if (r < 0) {
		fprintf(stderr, "phos-fn: periodic checkpoint %u (%s) failed, the program goes on: %s\n", p->seq + 1,
			phos_ckpt_mode_name(p->mode), err);
	} else {
		p->seq++;
		p->taken++;
		p->last_stall_s = st.stall_s;
		prune(p);
		phos_debug("periodic checkpoint %u (%s): stall %.3f s, total %.3f s", p->seq,
			   phos_ckpt_mode_name(p->mode), st.stall_s, st.total_s);
	}
	interval = p->every_s;
	if (p->auto_every) {
		/* Young: sqrt(2 C M), C the stall measured (a failed one: the first guess). */
		double c = p->last_stall_s > 0 ? p->last_stall_s : AUTO_FIRST_S / 100;

		interval = sqrt(2 * c * p->mtbf_s);
		interval = interval < AUTO_MIN_S ? AUTO_MIN_S : interval > p->mtbf_s ? p->mtbf_s : interval;
		p->every_s = interval;
	}
	p->next_at = phos_now() + interval;
}

bool cli_executor_failed(pid_t exe)
{
	siginfo_t si = { 0 };

	if (exe <= 0 || waitid(P_PID, (id_t)exe, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid != exe)
		return false;   /* still running (or not ours) */
	return si.si_code != CLD_EXITED || si.si_status != 0;
}

bool cli_executor_status_failed(int status)
{
	return !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}

int cli_periodic_restart(struct cli_periodic *p, const char *why, char *buf, size_t len)
{
	if (p->restarts >= p->max_restarts) {
		fprintf(stderr, "phos-fn: %s; %u restart(s) were allowed (--max-restarts)\n", why, p->max_restarts);
		return -1;
	}
	if (cli_periodic_latest(p->dir, buf, len) < 0) {
		fprintf(stderr, "phos-fn: %s before any checkpoint: nothing to restart from\n", why);
		return -1;
	}
	p->restarts++;
	fprintf(stderr, "phos-fn: %s; restarting from %s (restart %u of %u)\n", why, buf, p->restarts, p->max_restarts);
	return 0;
}

int cli_periodic_latest(const char *dir, char *buf, size_t len)
{
	unsigned *v = NULL;
	size_t n = 0;
	int r = list_ckpts(dir, &v, &n);

	if (r < 0)
		return r;
	r = -ENOENT;
	/* The newest that reads back whole; a damaged one is passed over. */
	for (size_t i = n; i-- > 0;) {
		struct phos_image *img = NULL;
		char why[256] = "not a checkpoint of a running program";

		snprintf(buf, len, "%s/ckpt-%06u", dir, v[i]);
		if (phos_image_read(buf, &img, why, sizeof(why)) == 0 && img->checkpoint.present) {
			phos_image_free(img);
			r = 0;
			break;
		}
		phos_image_free(img);
		fprintf(stderr, "phos-fn: %s is passed over: %s\n", buf, why);
	}
	free(v);
	return r;
}
