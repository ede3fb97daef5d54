/* SPDX-License-Identifier: MIT */
/*
 * Fault injection at named points, for tests (CRIU's CRIU_FAULT style).
 *
 *   PHOS_FAULT="uio_write:3,criu_dump"
 *
 * arms the point "uio_write" to fail on its 4th hit (after 3 that pass) and
 * "criu_dump" on its first. A point fails once, then passes again. Unknown
 * names are ignored. Points in use: uio_write, uio_read, gpu_data_alloc (the
 * space for gpu.data: a full disk), criu_dump, criu_restore, snapshot_commit,
 * snapshot_kill (the snapshotter SIGKILLs itself there), snapshot_executor_kill
 * (the snapshotter SIGKILLs its executor between the GPU and the CPU dump),
 * registry_write (the
 * invoker's write of a function's registry file, after its snapshot),
 * registry_kill (the invoker SIGKILLs itself just before that write),
 * ctl_version (an executor's HELLO claims the next control protocol version),
 * checkpoint_kill (an executor SIGKILLs itself halfway through writing a
 * checkpoint's device state), checkpoint_controller_kill (phos-fn run
 * SIGKILLs itself between a checkpoint's CPU dump and its commit),
 * export_newer (an invoker's snapshot export claims the next export version),
 * pull_stall (a snapshot pull waits, up to 10 s, for a remove or drain to cancel it),
 * pull_nospace (a snapshot pull finds no free disk), migrate_stall (the
 * target of a move waits 10 s before it fetches the checkpoint, for a test
 * to kill it there), migrate_file_cut (the source of a move fails a
 * request for a range of the checkpoint: the link cut mid-transfer),
 * migrate_precopy_stale (the target's pre-copy of a move finds its first
 * buffer changed at the stop), channel_late (an executor waits 1 s before
 * it hands the function its channel, as a slow device open would),
 * pool_adopt_refused (a pooled executor refuses a checkpoint's restore, as
 * one of another arena would: the controller restores it on an executor of
 * its own), prepare_gpu_full (an executor prepared for a move reports no
 * free device memory), migrate_source_kill (the source of a live move
 * SIGKILLs itself once its target has taken the instance, before it stops
 * its own copy), buffer_place (a restore cannot map a buffer, as on a full
 * GPU, while its engine may be streaming into those mapped before).
 */
#pragma once

#include <stdbool.h>

/* True when the named point should fail now. Thread-safe. */
bool phos_fault(const char *point);
