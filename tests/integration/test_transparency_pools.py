# SPDX-License-Identifier: MIT
"""Issue 12, stream-ordered allocation, memory pools and host callbacks, run
as ordinary CUDA programs (tests/transparency/pools/):

- pools: cudaMallocAsync / cudaFreeAsync on the default pool and on created
  pools, attributes, trimming, the current pool, maximum sizes, errors;
- callbacks: cudaLaunchHostFunc / cudaStreamAddCallback in stream order, on a
  thread of their own, and their errors; and (`apart`) a callback that waits
  for the program's work on another stream, which must go on meanwhile (the
  device's callback thread asks for it, not the dispatcher: the driver's on
  a GPU, one per callback on sim);
- callbacks checkpointed while callbacks wait for the program's next call,
  every mode: each checkpoint ends, the program and a restored copy end
  right (a stop that held the program while such a callback was out drained
  the device for ever);
- pool_serve checkpointed while it runs (issue 11), every mode: its pools,
  their attributes and live blocks (the destroyed pool's too) are in the
  image and made again by the restoring executor; the restored run answers
  as the uninterrupted one;
- pool_serve: a snapshot at phos_fn_serve with pool blocks alive (and one
  cached free block, which must not be in the image) restores them at the same
  addresses, in their pool, with its settings: stop-the-world and on demand;
  a block of a pool destroyed before the snapshot can still be freed after it.

Under phos-fn the programs run with `strict` (checks of what phos-fn
guarantees beyond CUDA's contract); with PHOS_TEST_DEVICE=cuda they also run
natively, without it, so that the programs themselves are checked against CUDA.
"""
import json
import os
import shutil
import subprocess
import tempfile
import time

from harness import DEVICE, PHOS_FN, answers, check, checkpoint_while_running, done, fn_env, phos, program, run

POOLS = program("tests", "transparency", "pools", "pools")
CALLBACKS = program("tests", "transparency", "pools", "callbacks")
SERVE = program("tests", "transparency", "pools", "pool_serve")
REQS = "x\nx\nx\n"


def native(prog, *args, stdin=""):
    return subprocess.run([prog, *args], input=stdin, capture_output=True, text=True, timeout=300)


for prog, name in ((POOLS, "pools"), (CALLBACKS, "callbacks")):
    # (apart: a callback waiting for another stream's work, which must go on:
    # the device's callback thread asks for callbacks, not the dispatcher)
    p = run(prog, "strict", *(["apart"] if name == "callbacks" else []))
    check(p.returncode == 0 and f"{name}: ok" in p.stdout + p.stderr,
          f"{name} under phos-fn: rc {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    if DEVICE == "cuda":
        p = native(prog, *(["apart"] if name == "callbacks" else []))
        check(p.returncode == 0, f"{name} natively: rc {p.returncode}\n{p.stderr[-3000:]}")

if True:   # checkpoints while callbacks wait for the program
    tmpc = tempfile.mkdtemp(prefix="phos-callbacks-ckpt-")
    try:
        checkpoint_while_running(CALLBACKS, ("loop", "1500"), "callbacks: ok", tmpc,
                                 "callbacks loop (checkpoints while callbacks wait for the program)", pause=0.3,
                                 restore=("stw",))
    finally:
        shutil.rmtree(tmpc, ignore_errors=True)


def check_answers(got, what):
    check(len(got) == 3, f"{what}: {len(got)} of 3 answers")
    for i, a in enumerate(got):
        check(a.get("ok") is True and a.get("reused") is True and a.get("callbacks") == i + 2
              and a.get("threshold") == 64 << 20 and a.get("orphan") == ("freed" if i == 0 else "none"),
              f"{what}: answer {i}: {a}")


ref = answers(run(SERVE, stdin=REQS))
check_answers(ref, "phos-fn run")
if DEVICE == "cuda":
    nat = [json.loads(line) for line in native(SERVE, stdin=REQS).stdout.splitlines() if line.startswith("{")]
    check_answers(nat, "native")

tmp = tempfile.mkdtemp(prefix="phos-pools-test-")
try:
    snap = os.path.join(tmp, "snap")
    p = phos("snapshot", "--device", DEVICE, "-o", snap, "--", SERVE)
    check(p.returncode == 0, f"snapshot: rc {p.returncode}: {p.stderr[-3000:]}")
    if p.returncode == 0:
        with open(os.path.join(snap, "manifest.json")) as f:
            bufs = json.load(f)["buffers"]
        # a (1 MiB, default pool), b (2 MiB), c (1 MiB) and the block of a
        # destroyed pool (512 KiB) are alive; the 4 MiB block freed before
        # phos_fn_serve is cached in the pool, not state.
        check(sorted(b["size"] for b in bufs) == [512 << 10, 1 << 20, 1 << 20, 2 << 20],
              f"snapshot buffers: {[(hex(b['addr']), b['size']) for b in bufs]}")
        for mode in ([], ["--on-demand"]):
            r = phos("restore", "--device", DEVICE, *mode, snap, stdin=REQS)
            got = answers(r)
            what = "restore " + (" ".join(mode) or "stop-the-world")
            check(r.returncode == 0, f"{what}: rc {r.returncode}: {r.stderr[-3000:]}")
            check_answers(got, what)
            # the same addresses and the same pool usage as the original process
            check([(a.get("a"), a.get("b"), a.get("c"), a.get("used")) for a in got] ==
                  [(a.get("a"), a.get("b"), a.get("c"), a.get("used")) for a in ref],
                  f"{what}: answers differ from the original:\n  {got}\n  {ref}")

    # --- a checkpoint of the running program (issue 11), every mode ---
    # Taken while it waits for its first request (or, when asked earlier, in
    # its init): no restore at phos_fn_serve makes its pools again, so the
    # restoring executor must, from the image ("pools", "pool_blocks"): the
    # default pool's block, the created pool's two with its threshold, and
    # the orphan of the destroyed pool, which the first request frees. The
    # restored run answers as the uninterrupted one, at the same addresses.
    run_env = {"PHOS_RUN_DIR": os.path.join(tmp, "run")}
    for mode in ("stw", "cow", "recopy"):
        ck = os.path.join(tmp, "ck-" + mode)
        p = subprocess.Popen([PHOS_FN, "run", "--checkpointable", "--device", DEVICE, "--", SERVE],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=fn_env(run_env))
        try:
            deadline = time.monotonic() + 60
            while True:   # until phos-fn run listens and the program has its channel (its first CUDA call)
                c = phos("checkpoint", "--mode", mode, "-o", ck, str(p.pid), extra_env=run_env, timeout=300)
                early = "has it made a CUDA call yet" in c.stderr or "takes no checkpoints" in c.stderr
                if c.returncode == 0 or not early or p.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            check(c.returncode == 0, f"{mode}: checkpoint of pool_serve: {c.returncode} {c.stderr[-800:]}")
        finally:
            p.kill()
            p.communicate(timeout=60)
        if c.returncode != 0:
            continue
        with open(os.path.join(ck, "manifest.json")) as f:
            man = json.load(f)
        gone = [q for q in man.get("pools", []) if q.get("gone")]
        check(len(man.get("pools", [])) >= 2 and len(man.get("pool_blocks", [])) >= 3,
              f"{mode}: the checkpoint's pools: {man.get('pools')} {man.get('pool_blocks')}")
        r = phos("restore", "--device", DEVICE, ck, stdin=REQS, timeout=300)
        got = answers(r)
        check(r.returncode == 0, f"{mode}: restore of the checkpoint: rc {r.returncode}: {r.stderr[-3000:]}")
        check_answers(got, f"{mode}: restored from the checkpoint ({len(gone)} destroyed pool(s) in it)")
        check([(a.get("a"), a.get("b"), a.get("c"), a.get("used")) for a in got] ==
              [(a.get("a"), a.get("b"), a.get("c"), a.get("used")) for a in ref],
              f"{mode}: the restored run's answers differ from the uninterrupted one:\n  {got}\n  {ref}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

done("transparency_pools")
