/* SPDX-License-Identifier: MIT */
/*
 * A function's life, above the registry (registry.c: the list and its files)
 * and the instances: a deploy (the snapshot taken, then the registry file
 * written), a snapshot taken again, a remove (in the order registry.c
 * gives), what a start does for the functions the registry loaded (a moved
 * session recalled, a rank's rendezvous), and the stop of every instance at
 * the end. The HTTP answers that describe a function are here too: they
 * count its instances.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "fault.h"
#include "invoker.h"
#include "log.h"
#include "registry.h"
#include "transfer.h"

json_t *inv_function_describe(struct inv_function *f)
{
	unsigned c[4];
	json_t *j;

	inv_instances_count(f, c);
	pthread_mutex_lock(&f->lock);
	/* (under the lock: a pull fills in its entry, inv_function_fill) */
	j = f->entry_pending ? json_pack("{s:s}", "name", f->name) : inv_function_entry(f);
	json_object_set_new(j, "status", json_string(f->ready ? "ready" : "deploying"));
	json_object_set_new(j, "snapshot", json_string(f->snapshot_dir));
	json_object_set_new(j, "snapshot_s", json_real(f->snapshot_s));
	json_object_set_new(j, "invocations", json_integer((json_int_t)f->count));
	json_object_set_new(j, "hot", json_boolean(f->hot));   /* (the registry's: read as it is) */
	if (f->moved_to)   /* calls are forwarded there */
		json_object_set_new(j, "moved_to", json_string(f->moved_to));
	if (f->snap_phase)   /* a deploy or re-snapshot in progress */
		json_object_set_new(j, "progress", json_pack("{s:s,s:I,s:I}", "phase", f->snap_phase, "elapsed_ms",
							     (json_int_t)((phos_now() - f->snap_started) * 1e3),
							     "timeout_ms", (json_int_t)(f->snap_timeout_ms ? f->snap_timeout_ms
											: f->limits.deploy_timeout_ms)));
	pthread_mutex_unlock(&f->lock);
	json_object_set_new(j, "instances", json_pack("{s:i,s:i,s:i,s:i}", "starting", c[0], "idle", c[1], "busy",
						      c[2], "stopping", c[3]));
	return j;
}

json_t *inv_function_list(void)
{
	json_t *a = json_array();
	struct inv_function *list[INV_MAX_FUNCTIONS];
	unsigned n = inv_function_all(list, INV_MAX_FUNCTIONS);

	for (unsigned i = 0; i < n; i++) {
		json_array_append_new(a, inv_function_describe(list[i]));
		inv_function_unref(list[i]);
	}
	return a;
}

/* PROGRAM ARGS... (the program runs as itself: its name in messages and in
 * /proc), and into ret_env NAME=VALUE for each of f's variables; NULL. */
static char **snapshot_argv(struct inv_function *f, char ***ret_env)
{
	size_t n = 1 + f->nargs + 1, ne = json_object_size(f->env) + 5, i = 0, k = 0;
	char **argv = calloc(n, sizeof(char *)), **env = calloc(ne, sizeof(char *));
	bool ok = argv && env;
	const char *key;
	json_t *val;

	if (ok) {
		ok &= !!(argv[i++] = strdup(f->program));
		for (unsigned a = 0; a < f->nargs; a++)
			ok &= !!(argv[i++] = strdup(f->args[a]));
		json_object_foreach(f->env, key, val)
			if (asprintf(&env[k++], "%s=%s", key, json_string_value(val)) < 0)
				env[k - 1] = NULL, ok = false;
		if (f->ranks.on) {   /* rendezvous.c; the deploy's env wins */
			char dir[PATH_MAX];
			const char *keys[4] = { "PHOS_RENDEZVOUS_DIR", "PHOS_NCCL_REINIT_DIR", "PHOS_RANK", "PHOS_NRANKS" };
			char vals[4][PATH_MAX];

			inv_rendezvous_path(f, dir, sizeof(dir));
			snprintf(vals[0], sizeof(vals[0]), "%s", dir);
			snprintf(vals[1], sizeof(vals[1]), "%s", dir);
			snprintf(vals[2], sizeof(vals[2]), "%u", f->ranks.rank);
			snprintf(vals[3], sizeof(vals[3]), "%u", f->ranks.nranks);
			for (int q = 0; q < 4 && ok; q++)
				if (!json_object_get(f->env, keys[q]) && asprintf(&env[k++], "%s=%s", keys[q], vals[q]) < 0)
					env[k - 1] = NULL, ok = false;
		}
	}
	if (!ok) {
		for (size_t m = 0; argv && m < i; m++)
			free(argv[m]);
		for (size_t m = 0; env && m < k; m++)
			free(env[m]);
		free(argv);
		free(env);
		return NULL;
	}
	*ret_env = env;
	return argv;
}

static void snapshot_phase(void *arg, const char *phase)
{
	struct inv_function *f = arg;

	pthread_mutex_lock(&f->lock);
	f->snap_phase = phase;
	pthread_mutex_unlock(&f->lock);
}

void inv_function_cancel_snapshot(struct inv_function *f)
{
	if (f->snap_cancel_fd >= 0)
		(void)!eventfd_write(f->snap_cancel_fd, 1);
}

/* The HTTP status of a failed snapshot at deploy: the client's program (it
 * cannot be run, ends or is killed before phos_fn_serve, never gets there
 * within deploy_timeout_ms) is 422, a full disk 507, anything else ours: 500. */
static int snapshot_status(int r)
{
	switch (r) {
	case -ENOEXEC: case -EACCES: case -ENOENT: case -ECHILD: case -ETIMEDOUT: case -ELIBBAD:
		return 422;
	case -ENOSPC: case -EDQUOT:
		return 507;
	default:
		return 500;
	}
}

/* ... and of a deploy: cancelled by a remove 409, by the drain 503. */
static int deploy_status(int r, bool removed)
{
	if (removed)
		return 409;
	if (r == -ECANCELED)
		return 503;
	return snapshot_status(r);
}

/* Takes f's snapshot (replacing the old one atomically), within
 * limits.deploy_timeout_ms (-ETIMEDOUT), cancelled by remove or the drain
 * (-ECANCELED). */
static int take_snapshot(struct inv_function *f, char *err, size_t errlen)
{
	struct phos_runtime_paths p = inv_cfg.paths;
	struct phos_snapshot_stats st;
	struct phos_snapshot_ctl sc = { .timeout_ms = f->limits.deploy_timeout_ms, .phase = snapshot_phase, .arg = f };
	char **env = NULL, **argv = snapshot_argv(f, &env), gpu_list[64];
	int r;

	if (!argv)
		return phos_errf_rc(err, errlen, -ENOMEM, "out of memory");
	r = inv_rendezvous_prepare(f, err, errlen);
	if (r < 0)
		goto out;
	sc.cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (sc.cancel_fd < 0) {
		r = -errno;
		phos_errf(err, errlen, "eventfd: %s", strerror(errno));
		goto out;
	}
	p.device = f->device;
	p.fn_env = env;
	p.gpus = inv_gpu_list(f, gpu_list, sizeof(gpu_list));
	if (strcmp(p.device, "sim"))
		p.sim_twins = NULL;
	pthread_rwlock_wrlock(&f->snap_lock);
	/* A removal renames the snapshot away under this lock after marking f:
	 * a snapshot committed now would be owned by nothing. */
	pthread_mutex_lock(&f->lock);
	r = f->removed || inv_draining ? -ECANCELED : 0;
	if (r == 0) {
		f->snap_cancel_fd = sc.cancel_fd;
		f->snap_started = phos_now();
		f->snap_phase = "starting";
	}
	pthread_mutex_unlock(&f->lock);
	if (r == 0)
		r = phos_snapshot_run(&p, argv, f->snapshot_dir, STDERR_FILENO, &sc, &st, err, errlen);
	else
		phos_errf(err, errlen, "cancelled before it began");
	pthread_mutex_lock(&f->lock);
	f->snap_cancel_fd = -1;
	f->snap_phase = NULL;
	pthread_mutex_unlock(&f->lock);
	pthread_rwlock_unlock(&f->snap_lock);
	close(sc.cancel_fd);
out:
	for (char **a = argv; *a; a++)
		free(*a);
	free(argv);
	for (char **e = env; e && *e; e++)
		free(*e);
	free(env);
	if (r == 0) {
		pthread_mutex_lock(&f->lock);
		f->snapshot_s = st.total_s;
		f->generation++;
		f->prefetch_pending = true;
		pthread_mutex_unlock(&f->lock);
	}
	return r;
}

static int take_snapshot_made(struct inv_function *f, void *arg, char *err, size_t errlen)
{
	return take_snapshot(f, err, errlen);
}

/* A deploy of f (built, not listed yet) whose snapshot make takes: see
 * inv_function_deploy_pending (invoker.h). */
static int deploy_run(struct inv_function *f, inv_snapshot_maker make, int (*status)(int r, void *arg), void *arg,
		      json_t **ret_body)
{
	char err[1024];
	bool save_failed = false, removed;
	int r = inv_registry_add(f, ret_body);   /* listed as "deploying": a second deploy gets 409 */

	if (r)
		return r;
	if (inv_rendezvous_start(f) < 0)   /* a rank > 0 meets its leader from the snapshot run on */
		phos_warn("%s: no rendezvous thread: rank %u cannot meet its leader", f->name, f->ranks.rank);

	if (f->entry_pending)
		phos_info("deploying %s: pulled from a peer", f->name);
	else
		phos_info("deploying %s: snapshot of %s", f->name, f->program);
	err[0] = '\0';
	r = make(f, arg, err, sizeof(err));
	if (r == 0 && phos_fault("registry_kill"))
		raise(SIGKILL);   /* a crash between the two writes: the next start sweeps */
	if (r == 0 && (r = inv_function_save(f)) < 0) {
		/* Nothing would own the snapshot: roll it back. */
		int d = inv_snapshot_discard(f);

		save_failed = true;
		snprintf(err, sizeof(err), "cannot write the registry: %s", strerror(-r));
		if (d < 0)
			phos_err("%s: cannot remove the snapshot of a failed deploy: %s", f->name, strerror(-d));
	}
	/* A remove during the deploy (it waits for deploy_done) wins over a
	 * snapshot that committed all the same. */
	pthread_mutex_lock(&f->lock);
	removed = f->removed;
	if (r == 0 && !removed)
		f->ready = f->deploy_done = true;
	pthread_mutex_unlock(&f->lock);
	if (r < 0 || removed) {
		/* a registry we cannot write is ours (500), or a full disk (507) */
		int code = save_failed && !removed ? (r == -ENOSPC || r == -EDQUOT ? 507 : 500)
			   : removed || !status ? deploy_status(r, removed) : status(r, arg);

		if (r == 0) {
			char path[PATH_MAX];
			int d;

			snprintf(path, sizeof(path), "%s/functions/%s.json", inv_cfg.state_dir, f->name);
			unlink(path);
			d = inv_snapshot_discard(f);
			if (d < 0)
				phos_err("%s: cannot remove the snapshot of a cancelled deploy: %s", f->name, strerror(-d));
		}
		inv_registry_unlist(f);
		pthread_mutex_lock(&f->lock);
		f->deploy_done = true;
		pthread_cond_broadcast(&f->cond);
		pthread_mutex_unlock(&f->lock);
		inv_rendezvous_drop(f);
		if (removed)
			*ret_body = inv_err_json("deploy cancelled: function %s was removed", f->name);
		else
			*ret_body = inv_err_json("%s%s", status && !save_failed ? "" : "snapshot failed: ", err);
		phos_warn("deploy of %s: %s", f->name, removed ? "cancelled by remove" : err);
		inv_function_unref(f);
		inv_function_unref(f);
		return code;
	}
	inv_hot_update();
	*ret_body = inv_function_describe(f);
	inv_function_unref(f);
	return 201;
}

int inv_function_deploy(json_t *req, json_t **ret_body)
{
	char err[1024];
	struct inv_function *f;

	f = inv_function_parse(req, true, err, sizeof(err));
	if (!f) {
		*ret_body = inv_err_json("%s", err);
		return 400;
	}
	return deploy_run(f, take_snapshot_made, NULL, NULL, ret_body);
}

int inv_function_deploy_pending(const char *name, inv_snapshot_maker make, int (*status)(int r, void *arg),
				void *arg, json_t **ret_body)
{
	char err[1024] = "out of memory";
	json_t *entry = json_pack("{s:s,s:s}", "name", name, "program", "/");   /* (a stand-in until filled) */
	struct inv_function *f = entry ? inv_function_parse(entry, false, err, sizeof(err)) : NULL;

	json_decref(entry);
	if (!f) {
		*ret_body = inv_err_json("%s", err);
		return 500;   /* (the name was checked: out of memory) */
	}
	f->entry_pending = true;
	return deploy_run(f, make, status, arg, ret_body);
}

int inv_function_resnapshot(const char *name, json_t **ret_body)
{
	struct inv_function *f = inv_function_get(name);
	char err[1024];
	int r;

	if (!f) {
		*ret_body = inv_err_json("no function %s", name);
		return 404;
	}
	r = take_snapshot(f, err, sizeof(err));
	if (r < 0) {
		bool removed;

		pthread_mutex_lock(&f->lock);
		removed = f->removed;
		pthread_mutex_unlock(&f->lock);
		inv_function_unref(f);
		*ret_body = removed ? inv_err_json("no function %s (removed)", name) : inv_err_json("snapshot failed: %s", err);
		return removed ? 404 : deploy_status(r, false);
	}
	inv_instances_stop_idle(f, true); /* the next calls start from the new snapshot */
	inv_hot_update();                 /* the new gpu.data is pinned, the old one let go */
	*ret_body = inv_function_describe(f);
	inv_function_unref(f);
	return 200;
}


/* A deploy being removed: cancel its snapshot and wait (bounded) for the
 * deploy to clean up after itself. f->lock held. */
static int remove_deploying(struct inv_function *f, json_t **ret_body)
{
	double end = phos_now() + 60;

	f->removed = true;
	inv_function_cancel_snapshot(f);
	while (!f->deploy_done && phos_now() < end) {
		struct timespec abs;

		clock_gettime(CLOCK_REALTIME, &abs);
		abs.tv_sec += 1;
		pthread_cond_timedwait(&f->cond, &f->lock, &abs);
	}
	if (!f->deploy_done) {
		*ret_body = inv_err_json("function %s: its deploy did not stop within 60 s", f->name);
		return 503;
	}
	*ret_body = json_pack("{s:s,s:s}", "name", f->name, "status", "removed");
	return 200;
}

int inv_function_remove(const char *name, json_t **ret_body)
{
	struct inv_function *f = inv_function_get(name);
	char path[PATH_MAX], tmp[PATH_MAX];
	int code, r;

	if (!f) {
		*ret_body = inv_err_json("no function %s", name);
		return 404;
	}
	pthread_mutex_lock(&f->lock);
	if (!f->ready && !f->removed && !f->deploy_done) {
		code = remove_deploying(f, ret_body);
		pthread_mutex_unlock(&f->lock);
		inv_function_unref(f);
		return code;
	}
	if (f->removed || !f->ready) {
		pthread_mutex_unlock(&f->lock);
		inv_function_unref(f);
		*ret_body = inv_err_json("no function %s", name);
		return 404;
	}
	f->removed = true;
	inv_function_cancel_snapshot(f);   /* a re-snapshot in progress */
	pthread_mutex_unlock(&f->lock);
	/* Unlisted and "being removed" in one step: a deploy of the name gets 409
	 * until its snapshot is gone, so it can never lose the new one. */
	inv_registry_removing(f, true);
	inv_hot_update();
	/* The registry file first: a crash from here on leaves a snapshot that
	 * nothing owns, which the next start sweeps. */
	snprintf(path, sizeof(path), "%s/functions/%s.json", inv_cfg.state_dir, f->name);
	if (unlink(path) < 0 && errno != ENOENT)
		phos_err("%s: cannot remove %s: %s", f->name, path, strerror(errno));
	inv_move_forget(f->name);   /* a new deploy of the name starts its own session */
	r = inv_snapshot_rename_away(f, tmp, sizeof(tmp));
	if (r < 0 && r != -ENOENT)
		phos_err("%s: cannot move the snapshot away: %s", f->name, strerror(-r));
	inv_instances_stop_all(f);
	inv_rendezvous_drop(f);
	if (f->share && inv_pool_for(f))
		phos_pool_share(inv_pool_for(f), f->snapshot_dir, false);   /* the GPU memory held for it */
	if (r == 0 && (r = inv_remove_tree(tmp)) < 0)
		phos_err("%s: cannot delete %s: %s", f->name, tmp, strerror(-r));
	inv_registry_removing(f, false);
	*ret_body = json_pack("{s:s,s:s}", "name", f->name, "status", "removed");
	inv_function_unref(f); /* the registry's */
	inv_function_unref(f);
	return 200;
}

void inv_functions_start(void)
{
	struct inv_function *list[INV_MAX_FUNCTIONS];
	unsigned n = inv_function_all(list, INV_MAX_FUNCTIONS);

	for (unsigned i = 0; i < n; i++) {
		inv_move_recall(list[i]);   /* its session went elsewhere before our start */
		if (inv_rendezvous_start(list[i]) < 0)
			phos_warn("%s: no rendezvous thread: rank %u cannot meet its leader", list[i]->name,
				  list[i]->ranks.rank);
		inv_function_unref(list[i]);
	}
}

void inv_functions_stop(void)
{
	struct inv_function *list[INV_MAX_FUNCTIONS];
	unsigned n = inv_registry_exit(list, INV_MAX_FUNCTIONS);

	for (unsigned i = 0; i < n; i++) {
		inv_instances_stop_all(list[i]);
		inv_function_unref(list[i]);
	}
}
