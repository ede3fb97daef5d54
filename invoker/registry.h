/* SPDX-License-Identifier: MIT */
/*
 * The registry's list and files (registry.c), for what changes them
 * (deploy.c). Everyone else looks functions up through invoker.h.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#define INV_MAX_FUNCTIONS 1024

struct inv_function;

/* A function from its registry entry or a deploy request (deploying: the
 * request's own checks too); NULL with err. inv_function_free frees one that
 * was never listed. */
struct inv_function *inv_function_parse(json_t *j, bool deploying, char *err, size_t errlen);
void inv_function_free(struct inv_function *f);
/* Lists f as deploying, with a ref of the list's: 0, or 409 (the name is
 * taken or being removed) or 507 (too many) with *ret_body, f freed. */
int inv_registry_add(struct inv_function *f, json_t **ret_body);
/* Takes f off the list (a deploy that failed). */
void inv_registry_unlist(struct inv_function *f);
/* A remove: begin takes f off the list and keeps its name taken; the end
 * frees the name. */
void inv_registry_removing(struct inv_function *f, bool begin);
/* Up to max listed functions into list, each with a ref the caller drops:
 * how many. */
unsigned inv_function_all(struct inv_function **list, unsigned max);
/* Empties the list: its functions into list with the list's refs (the
 * caller drops them), how many. */
unsigned inv_registry_exit(struct inv_function **list, unsigned max);
/* Writes f's registry file, atomically: 0 or -errno. */
int inv_function_save(struct inv_function *f);
/* Renames f's snapshot away under its write lock (ret_tmp: the new name), or
 * deletes it (renamed away first); -ENOENT when there is none. */
int inv_snapshot_rename_away(struct inv_function *f, char *ret_tmp, size_t len);
int inv_snapshot_discard(struct inv_function *f);
/* Deletes a tree (not through symlinks or mount points): 0 or -errno. */
int inv_remove_tree(const char *path);
