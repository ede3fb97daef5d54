/* SPDX-License-Identifier: MIT */
/* Shared between the snapshotter's files, not part of its interface. */
#pragma once

#include "snapshotter.h"

/* pool.c: the pooled half of phos_instance_wait: the executor scrubs itself and
 * comes back to its pool (or is replaced). */
void phos_pool_return(struct phos_instance *inst);
