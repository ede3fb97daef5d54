/* SPDX-License-Identifier: MIT */
/*
 * A deploy's "ranks" (rendezvous.c says what they are for): checked, kept
 * and described with the function's registry entry, and the rendezvous
 * folder's path. The rendezvous itself (the folder, the mirror thread) is in
 * rendezvous.c, above the registry.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "invoker.h"
#include "log.h"
#include "pull.h"

#define RDV_MAX_NRANKS 64

int inv_ranks_parse(json_t *j, struct inv_ranks *ret, char *err, size_t errlen)
{
	json_t *rank = json_object_get(j, "rank"), *nranks = json_object_get(j, "nranks");
	json_t *leader = json_object_get(j, "leader"), *token = json_object_get(j, "leader_token");
	const char *key;
	json_t *val;

	memset(ret, 0, sizeof(*ret));
	if (!json_is_object(j))
		return phos_errf_rc(err, errlen, -EINVAL, "ranks must be an object");
	json_object_foreach(j, key, val)
		if (strcmp(key, "rank") && strcmp(key, "nranks") && strcmp(key, "leader") && strcmp(key, "leader_token"))
			return phos_errf_rc(err, errlen, -EINVAL, "ranks: unknown field '%.64s'", key);
	if (!json_is_integer(nranks) || json_integer_value(nranks) < 1 || json_integer_value(nranks) > RDV_MAX_NRANKS)
		return phos_errf_rc(err, errlen, -EINVAL, "ranks.nranks must be an integer in 1..%d", RDV_MAX_NRANKS);
	if (!json_is_integer(rank) || json_integer_value(rank) < 0 || json_integer_value(rank) >= json_integer_value(nranks))
		return phos_errf_rc(err, errlen, -EINVAL, "ranks.rank must be an integer in 0..nranks-1");
	ret->on = true;
	ret->rank = (unsigned)json_integer_value(rank);
	ret->nranks = (unsigned)json_integer_value(nranks);
	if (ret->rank == 0) {
		if (leader || token)
			return phos_errf_rc(err, errlen, -EINVAL, "ranks: rank 0 is the leader: no leader or leader_token");
		return 0;
	}
	if (!json_is_string(leader) || !json_is_string(token))
		return phos_errf_rc(err, errlen, -EINVAL, "ranks: rank %u needs leader (its rank 0's invoker) and leader_token "
				"(that invoker's peer token)", ret->rank);
	{
		struct pull p = { .cancel_fd = -1 };
		char why[512];
		int r = pull_url_check(&p, json_string_value(leader), why, sizeof(why));

		curl_url_cleanup(p.base);
		if (r < 0)
			return phos_errf_rc(err, errlen, -EINVAL, "ranks.leader: %s", strncmp(why, "from: ", 6) ? why : why + 6);
	}
	if (!pull_token_valid(json_string_value(token)))
		return phos_errf_rc(err, errlen, -EINVAL, "ranks.leader_token must be rank 0's peer token (16..%d printable "
				"characters)", PULL_TOKEN_MAX);
	ret->leader = strdup(json_string_value(leader));
	ret->leader_token = strdup(json_string_value(token));
	if (!ret->leader || !ret->leader_token) {
		inv_ranks_free(ret);
		return phos_errf_rc(err, errlen, -ENOMEM, "out of memory");
	}
	return 0;
}

void inv_ranks_free(struct inv_ranks *r)
{
	free(r->leader);
	if (r->leader_token)
		explicit_bzero(r->leader_token, strlen(r->leader_token));
	free(r->leader_token);
	r->leader = r->leader_token = NULL;
}

json_t *inv_ranks_json(const struct inv_ranks *r, bool with_token)
{
	json_t *j = json_pack("{s:I,s:I}", "rank", (json_int_t)r->rank, "nranks", (json_int_t)r->nranks);

	if (j && r->leader)
		json_object_set_new(j, "leader", json_string(r->leader));
	if (j && r->leader_token && with_token)
		json_object_set_new(j, "leader_token", json_string(r->leader_token));
	return j;
}

void inv_rendezvous_path(const struct inv_function *f, char *buf, size_t len)
{
	snprintf(buf, len, "%s.rendezvous/%s", inv_cfg.state_dir, f->name);
}
