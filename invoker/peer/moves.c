/* SPDX-License-Identifier: MIT */
/*
 * Where a moved session went, kept across our restarts in
 * STATE/moves/NAME.json (invoker.h: inv_move_note, inv_move_recall,
 * inv_move_forget). Below the move itself (migrate.c) and a function's life
 * (deploy.c), which both keep it.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "invoker.h"
#include "log.h"
#include "pull.h"

static void move_note_path(const char *name, char *buf, size_t len)
{
	snprintf(buf, len, "%s/moves/%s.json", inv_cfg.state_dir, name);
}

void inv_move_note(const char *name, const char *to, const char *token)
{
	char path[PATH_MAX];
	json_t *j = json_pack("{s:s,s:s}", "to", to, "token", token);
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	int r;

	snprintf(path, sizeof(path), "%s/moves", inv_cfg.state_dir);
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		r = -errno;
	else if (!text)
		r = -ENOMEM;
	else {
		move_note_path(name, path, sizeof(path));
		r = inv_write_atomic(path, text, strlen(text));
	}
	if (r < 0)
		phos_err("%s: cannot write down where its session went (%s): a restart would start it again here",
			 name, strerror(-r));
	if (text)
		explicit_bzero(text, strlen(text));
	free(text);
	json_decref(j);
}

void inv_move_forget(const char *name)
{
	char path[PATH_MAX];

	move_note_path(name, path, sizeof(path));
	if (unlink(path) < 0 && errno != ENOENT)
		phos_err("%s: cannot remove %s: %s", name, path, strerror(errno));
}

void inv_move_recall(struct inv_function *f)
{
	char path[PATH_MAX];
	const char *to, *token;
	json_error_t je;
	struct stat st;
	json_t *j;

	move_note_path(f->name, path, sizeof(path));
	if (lstat(path, &st) < 0)
		return;
	j = S_ISREG(st.st_mode) && st.st_size < 4 * PULL_URL_MAX ? json_load_file(path, JSON_REJECT_DUPLICATES, &je)
								   : NULL;
	to = json_string_value(json_object_get(j, "to"));
	token = json_string_value(json_object_get(j, "token"));
	if (f->limits.max_instances != 1 || !to || !token || strlen(to) >= PULL_URL_MAX ||
	    strlen(token) >= PULL_TOKEN_MAX || (strncmp(to, "http://", 7) && strncmp(to, "https://", 8))) {
		phos_err("%s: dropping %s: not a move of its session", f->name, path);
		unlink(path);
	} else if ((f->moved_to = strdup(to)) && (f->moved_token = strdup(token))) {
		phos_warn("%s: its session went to %s before this start: calls are forwarded there", f->name, to);
	} else {
		free(f->moved_to);
		f->moved_to = NULL;
	}
	json_decref(j);
}
