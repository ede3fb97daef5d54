# SPDX-License-Identifier: MIT
"""One process driving several GPUs: `phos-fn run --gpus A,B` gives the
function one executor over both (phos-executor --gpus).

- multi_gpu.cu: the device count, per-thread selection, allocations on the
  selected device, a __device__ variable per device, kernels, events and
  cuBLAS on device 1, peer access checked as CUDA checks it, peer copies both
  ways;
- tp_mlp --one-process 2 (ncclCommInitAll over both devices, the all-reduces
  of both ranks in one group) matches its CPU reference at init and in a
  served request, small and with generated weights;
- tp_mlp --threads 2 (a thread per GPU: ncclCommInitRank, ncclAllReduce and
  cudaStreamSynchronize outside any group, in each thread) answers the same,
  under phos-fn run, restored both ways from a snapshot, and through the
  invoker (its own communicators, not the pooled executor's warm set);
- nccl_calls threads 2: every forwarded NCCL call from a thread per GPU
  (collectives, groups, send/recv, queries, finalize, destroy); a split of
  such a communicator is refused (ncclInvalidUsage, with the reason);
- snapshots (`phos-fn snapshot --gpus 0,1`) and restores onto an executor of
  two GPUs: multi_gpu --serve answers with each device's variable, buffer,
  CUDA array and stream as they were, stop-the-world and on demand (a kernel on device 1
  reading device 1's and, through peer access, device 0's buffers while they
  are still coming in: both promoted, the answers right); tp_mlp --one-process's communicators are made again
  together (both ranks in this process) and its answers match the reference;
- through the invoker: a deploy with "gpus": 2 snapshots tp_mlp
  --one-process 2 over both GPUs and its cold and warm calls answer as the
  reference (the cold start from the pooled executor over both GPUs, its
  communicators the executor's warm set); bad
  "gpus" values are refused with 400, a checkpoint of its running instance
  (it holds NCCL communicators) with the reason, and it serves on;
- limits.checkpoint_ms over two GPUs: long_call deployed with "gpus": 2 is
  checkpointed during a long call (every GPU drained and read), its
  executor killed mid-call, and the call resumes on a copy restored over two
  GPUs, answering what an uninterrupted call answers; the next call carries
  its state on;
- checkpoints of the running multi_gpu --serve over two GPUs (`phos-fn run
  --checkpointable --gpus 0,1`), every mode, between two requests: the
  original serves on, and the checkpoint restores over two GPUs, stop-the-world
  and on demand, with its request counters (one in each device's memory)
  carrying on, its __device__ variable read where the restore put it (moved
  on sim by PHOS_SIM_VAR_SKEW, by the driver on the GPU); onto one GPU it is
  refused, and so is one whose program took the variable's address
  (cudaGetSymbolAddress: "given" in its manifest) where the variable moved;
- what is refused, with its reason: a GPU named twice or not there, such a
  snapshot restored onto one GPU, a program
  that wants two devices from an executor of one.

On sim the host has PHOS_SIM_GPUS=2 GPUs. With PHOS_TEST_DEVICE=cuda
(tools/gpu-check) it runs where the host has two GPUs, and also runs tp_mlp
natively to compare; with one GPU it is skipped.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from harness import (DEVICE, PHOS_FN, Invoker, answers, check, done, fn_env, gpu_count, live_instances,
                     long_call_reference, phos, procs, program, read_trace)
from harness import ask as ask_line

MULTI = program("tests", "integration", "multi_gpu")
TP_MLP = program("functions", "examples", "tp_mlp")
LONG = program("tests", "integration", "long_call")
SIM = DEVICE != "cuda"


if not SIM and gpu_count() < 2:
    print("multi_gpu: needs two GPUs: skipped")
    sys.exit(77)

ENV = {"PHOS_SIM_GPUS": "2"} if SIM else {"NCCL_NVLS_ENABLE": "0"}


def run(args, prog_args, stdin="", timeout=120):
    return subprocess.run([PHOS_FN, "run", "--device", DEVICE, *args, "--", *prog_args], input=stdin,
                          capture_output=True, text=True, timeout=timeout, env=fn_env(ENV))


# --- CUDA's semantics over two devices ---
p = run(["--gpus", "0,1"], [MULTI])
recs = answers(p)
checks = {r["check"]: r for r in recs if "check" in r}
check(p.returncode == 0 and recs and recs[-1].get("done"), f"multi_gpu: rc {p.returncode}: {p.stderr[-800:]}")
for name in ("count", "set_bad", "get_default", "alloc_per_device", "var_per_device", "kernel_event_peer_copy",
             "peer_copy_back", "blas_device1", "peer_access", "driver_contexts", "properties_1", "properties_bad",
             "sync"):
    check(checks.get(name, {}).get("ok"), f"multi_gpu {name}: {checks.get(name)}")

# the same program with one device sees one, and says so
p = run(["--gpu", "0"], [MULTI])
recs = answers(p)
check(p.returncode == 1 and recs and recs[0].get("check") == "count" and recs[0].get("count") == 1,
      f"multi_gpu on one GPU: {recs[:1]} {p.stderr[-300:]}")

# --- tp_mlp, one process driving both GPUs ---
REQ = "{}\n{}\n"
for extra in ([], ["--weights-mib", "8", "--width", "256"]):
    p = run(["--gpus", "0,1"], [TP_MLP, "--one-process", "2", *extra], stdin=REQ)
    recs = answers(p)
    check(p.returncode == 0 and len(recs) == 3, f"tp_mlp --one-process 2 {extra}: rc {p.returncode}, {recs}: "
                                                f"{p.stderr[-800:]}")
    for r in recs:
        check(r.get("rank") == "all" and r.get("nranks") == 2 and r.get("ok") is True and
              r.get("max_abs_err") is not None and r["max_abs_err"] <= r["tol"], f"tp_mlp one-process answer {r}")
    check(len({str(r.get("sample")) for r in recs}) == 1, f"tp_mlp one-process: answers differ: {recs}")
    if not SIM:
        native = subprocess.run([TP_MLP, "--one-process", "2", *extra], input=REQ, capture_output=True, text=True,
                                timeout=120, env=dict(os.environ, NCCL_NVLS_ENABLE="0"))
        nrecs = answers(native)
        check(native.returncode == 0 and nrecs and nrecs[0].get("ok") is True,
              f"tp_mlp one-process natively: {native.returncode} {nrecs} {native.stderr[-500:]}")
        check(not nrecs or not recs or nrecs[0].get("sample") == recs[0].get("sample"),
              f"tp_mlp one-process: native {nrecs[:1]} vs phos {recs[:1]}")

# --- tp_mlp --threads 2: a thread per GPU, ncclCommInitRank and ncclAllReduce
# outside any group, cudaStreamSynchronize per thread (the ranks meet in the
# one executor's dispatcher, which must never wait for a peer thread) ---
p = run(["--gpus", "0,1"], [TP_MLP, "--threads", "2"], stdin=REQ)
trecs = answers(p)
check(p.returncode == 0 and len(trecs) == 3 and all(r.get("rank") == "threads" and r.get("ok") is True for r in trecs),
      f"tp_mlp --threads 2: rc {p.returncode}, {trecs}: {p.stderr[-800:]}")
if not SIM:
    native = subprocess.run([TP_MLP, "--threads", "2"], input=REQ, capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, NCCL_NVLS_ENABLE="0"))
    nrecs = answers(native)
    check(native.returncode == 0 and nrecs and nrecs[0].get("ok") is True and
          all(r.get("sample") == nrecs[0].get("sample") for r in trecs),
          f"tp_mlp --threads 2 natively: {native.returncode} {nrecs} vs phos {trecs[:1]} {native.stderr[-500:]}")

# every forwarded NCCL call of nccl_calls from two threads of one process, a
# GPU each (init, collectives, groups, send/recv, finalize and destroy)
CALLS = program("tests", "integration", "nccl_calls")
p = run(["--gpus", "0,1"], [CALLS, "threads", "0", "2", "-"])
recs = answers(p)
oks = {(r.get("rank"), r.get("check")): r.get("ok") for r in recs if "check" in r}
check(p.returncode == 0 and len(oks) > 60 and all(oks.values()) and {k[0] for k in oks} == {0, 1},
      f"nccl_calls threads 2: rc {p.returncode}, failed {sorted(k for k, v in oks.items() if not v)}, "
      f"{len(oks)} checks: {p.stderr[-800:]}")
if not SIM:
    native = subprocess.run([CALLS, "threads", "0", "2", "-"], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, NCCL_NVLS_ENABLE="0"))
    nat = {(r.get("rank"), r.get("check")) for r in answers(native) if r.get("ok")}
    check(native.returncode == 0 and nat == set(oks), f"nccl_calls threads 2 natively: {native.returncode} "
                                                      f"{sorted(set(oks) ^ nat)} {native.stderr[-500:]}")
# a split of such a communicator is refused (it would wait in the executor's
# one dispatcher for the other thread's split), with a line saying why
p = run(["--gpus", "0,1"], [CALLS, "threadsplit", "0", "2", "-"])
res = {r.get("rank"): r.get("result") for r in answers(p) if r.get("check") == "split_result"}
check(p.returncode == 0 and res == {0: 5, 1: 5} and
      "ncclCommSplit of a communicator whose other ranks are in this process" in p.stderr,
      f"a split of ranks that are threads: rc {p.returncode} {res} {p.stderr[-600:]}")

# --- refused, with the reason ---
p = run(["--gpus", "0,0"], [MULTI])
check(p.returncode != 0 and "GPU 0 is named twice" in p.stderr, f"--gpus 0,0: {p.returncode} {p.stderr[-300:]}")
p = run(["--gpus", "0,7"], [MULTI])
check(p.returncode != 0 and "GPU 7 (--gpus or PHOS_GPUS) is not there" in p.stderr,
      f"--gpus 0,7: {p.returncode} {p.stderr[-300:]}")
p = run(["--gpus", "0,"], [MULTI])
check(p.returncode != 0 and "bad GPU list" in p.stderr, f"--gpus 0,: {p.returncode} {p.stderr[-300:]}")
p = run(["--gpu", "0"], [TP_MLP, "--one-process", "2"])
check(p.returncode == 1 and "needs 2 devices, 1 seen" in p.stderr, f"one-process on one GPU: {p.stderr[-300:]}")

# --- snapshots over two GPUs, restored onto two ---
tmp = tempfile.mkdtemp(prefix="phos-multi-gpu-")
try:
    snap = os.path.join(tmp, "multi")
    p = phos("snapshot", "--device", DEVICE, "--gpus", "0,1", "-o", snap, "--", MULTI, "--serve", extra_env=ENV,
             timeout=120)
    check(p.returncode == 0 and os.path.exists(os.path.join(snap, "manifest.json")),
          f"snapshot of multi_gpu --serve: {p.returncode} {p.stderr[-600:]}")
    if p.returncode == 0:
        with open(os.path.join(snap, "manifest.json")) as f:
            man = json.load(f)
        devs = sorted({v.get("device", 0) for v in man["variables"]})
        adevs = sorted(a.get("device", 0) for a in man.get("arrays", []))
        check(man.get("devices") == 2 and devs == [0, 1] and any(s.get("device") == 1 for s in man["streams"]) and
              adevs == [0, 1], f"manifest of two devices: devices {man.get('devices')}, variable copies on {devs}, "
                               f"arrays on {adevs}")
        p = phos("restore", "--device", DEVICE, "--gpus", "0,1", snap, stdin="{}\n{}\n", extra_env=ENV, timeout=120)
        got = answers(p)
        check(p.returncode == 0 and len(got) == 2 and all(g.get("ok") for g in got),
              f"multi_gpu restored over two GPUs: {p.returncode} {got} {p.stderr[-600:]}")
        # on demand: the request's first kernel (on device 1) reads device
        # 1's buffer (its stream waits for that buffer's flag on device 1)
        # and device 0's through peer access (held back on the CPU until that
        # buffer is in); the restore is slowed so that both are still coming
        trace = os.path.join(tmp, "multi-trace.jsonl")
        p = phos("restore", "--device", DEVICE, "--gpus", "0,1", "--on-demand", "--stats", os.path.join(tmp, "st"),
                 snap, stdin="{}\n{}\n", extra_env={**ENV, "PHOS_TRACE": trace, "PHOS_RESTORE_THROTTLE_MIBPS": "1"},
                 timeout=120)
        got = answers(p)
        check(p.returncode == 0 and len(got) == 2 and all(g.get("ok") for g in got),
              f"multi_gpu restored on demand over two GPUs: {p.returncode} {got} {p.stderr[-600:]}")
        with open(os.path.join(tmp, "st")) as f:
            stats = json.loads(f.read().splitlines()[-1])
        check(stats.get("on_demand") is True, f"the restore over two GPUs ran on demand: {stats}")
        # r0: device 0's last buffer (1 MiB), read through peer access; q1:
        # device 1's 100 bytes, which the same kernel writes
        promoted = {t["buf"] for t in read_trace(trace) if t.get("op") == "restore_promote"}
        r0 = [b["id"] for b in man["buffers"] if b["size"] == 1 << 20]
        q1 = [b["id"] for b in man["buffers"] if b["size"] == 100]
        check(len(q1) == 1 and len(r0) == 1 and set(q1 + r0) <= promoted,
              f"both devices' buffers promoted by the request: r0 {r0}, q1 {q1} in {promoted}")
        p = phos("restore", "--device", DEVICE, "--gpu", "0", snap, stdin="{}\n", extra_env=ENV, timeout=120)
        check(p.returncode != 0 and "taken over 2 GPUs; this executor owns 1" in p.stderr,
              f"a snapshot of two GPUs restored onto one: {p.returncode} {p.stderr[-400:]}")

    # --- checkpoints of the running program over two GPUs (issue 11) ---
    # Taken between two requests, every mode: the original serves on; the
    # checkpoint restores over two GPUs (stop-the-world and on demand) and
    # its counters, one in each device's memory, carry on from the
    # checkpoint's; onto one GPU it is refused.
    run_env = {**ENV, "PHOS_RUN_DIR": os.path.join(tmp, "run")}

    def ask(p):
        return ask_line(p, "{}")

    # On sim the restores move mg_var (PHOS_SIM_VAR_SKEW), as the driver does
    # on the GPU: the program never took its address, so its runtime asks
    # again and reads it where it is now. "give" took it (cudaGetSymbolAddress):
    # its restore is refused where the variable moved.
    moved = {"PHOS_SIM_VAR_SKEW": "4096"} if SIM else {}
    for mode in ("stw", "cow", "recopy", "give"):
        ck = os.path.join(tmp, "ck-" + mode)
        c = None
        p = subprocess.Popen([PHOS_FN, "run", "--checkpointable", "--device", DEVICE, "--gpus", "0,1", "--", MULTI,
                              "--serve", *(["--give"] if mode == "give" else [])], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=fn_env(run_env))
        try:
            while True:   # its checks, then {"done":true} (read whole: select does not see Python's buffer)
                line = p.stdout.readline()
                if not line or '"done"' in line:
                    break
            a = ask(p)
            check(a.get("ok") is True and a.get("n0") == 1, f"{mode}: multi_gpu serving before the checkpoint: {a}")
            c = phos("checkpoint", "--mode", "stw" if mode == "give" else mode, "-o", ck, str(p.pid), extra_env=run_env,
                     timeout=300)
            check(c.returncode == 0, f"{mode}: checkpoint over two GPUs: {c.returncode} {c.stderr[-500:]}")
            a = ask(p)
            check(a.get("ok") is True and a.get("n0") == 2 and a.get("n1") == 2, f"{mode}: the original serves on: {a}")
        finally:
            # phos-fn run, its executor and its program (the init of its own
            # pid namespace: not in phos-fn's process group)
            try:
                with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                kids = []
            for pid in [p.pid, *kids]:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            p.communicate(timeout=60)
        if c is None or c.returncode != 0:
            continue
        with open(os.path.join(ck, "manifest.json")) as f:
            man = json.load(f)
        given = sorted(v.get("device", 0) for v in man["variables"] if v.get("given"))
        check(man.get("devices") == 2 and man.get("checkpoint", {}).get("mode") == ("stw" if mode == "give" else mode)
              and given == ([0, 1] if mode == "give" else []),
              f"{mode}: the checkpoint's manifest: devices {man.get('devices')}, {man.get('checkpoint')}, "
              f"variables given on {given}")
        if mode == "give":
            r = phos("restore", "--device", DEVICE, "--gpus", "0,1", ck, stdin="{}\n", extra_env={**ENV, **moved},
                     timeout=120)
            if SIM or r.returncode != 0:   # (on the GPU the variable may stay in place, rarely)
                check(r.returncode != 0 and "the program was given its address" in r.stderr,
                      f"a checkpoint whose program took a moved variable's address: {r.returncode} {r.stderr[-400:]}")
            continue
        for how in ([], ["--on-demand"]):
            r = phos("restore", "--device", DEVICE, "--gpus", "0,1", *how, ck, stdin="{}\n{}\n",
                     extra_env={**ENV, **moved}, timeout=120)
            got = answers(r)
            check(r.returncode == 0 and [(g.get("ok"), g.get("n0"), g.get("n1")) for g in got] ==
                  [(True, 2, 2), (True, 3, 3)],
                  f"{mode}: the checkpoint over two GPUs restored {how}: {r.returncode} {got} {r.stderr[-600:]}")
    r = phos("restore", "--device", DEVICE, "--gpu", "0", os.path.join(tmp, "ck-stw"), stdin="{}\n", extra_env=ENV,
             timeout=120)
    check(r.returncode != 0 and "taken over 2 GPUs; this executor owns 1" in r.stderr,
          f"a checkpoint of two GPUs restored onto one: {r.returncode} {r.stderr[-400:]}")

    snap = os.path.join(tmp, "tp")
    p = phos("snapshot", "--device", DEVICE, "--gpus", "0,1", "-o", snap, "--", TP_MLP, "--one-process", "2",
             extra_env=ENV, timeout=120)
    # the function's init line: phos-fn snapshot passes its output on to stderr
    init = [json.loads(x) for x in p.stderr.splitlines() if x.startswith('{"rank"')]
    check(p.returncode == 0 and init and init[0].get("ok"), f"snapshot of tp_mlp --one-process 2: {p.returncode} "
                                                           f"{init} {p.stderr[-600:]}")
    # the thread-per-GPU shape snapshotted: its ranks are made again together
    # at the restore (not from a warm set: they are used from threads), and
    # both ways of restoring answer as the one-process shape did
    snapt = os.path.join(tmp, "tpt")
    pt = phos("snapshot", "--device", DEVICE, "--gpus", "0,1", "-o", snapt, "--", TP_MLP, "--threads", "2",
              extra_env=ENV, timeout=120)
    check(pt.returncode == 0, f"snapshot of tp_mlp --threads 2: {pt.returncode} {pt.stderr[-600:]}")
    if pt.returncode == 0:
        for how in ([], ["--on-demand"]):
            q = phos("restore", "--device", DEVICE, "--gpus", "0,1", *how, snapt, stdin="{}\n{}\n", extra_env=ENV,
                     timeout=120)
            got = answers(q)
            check(q.returncode == 0 and len(got) == 2 and init and
                  all(g.get("ok") and g.get("rank") == "threads" and g.get("sample") == init[0].get("sample")
                      for g in got), f"tp_mlp --threads 2 restored {how}: {q.returncode} {got} {q.stderr[-600:]}")
    if p.returncode == 0:
        for rnd in range(2):   # twice from one snapshot: a fresh set of communicators each time
            p = phos("restore", "--device", DEVICE, "--gpus", "0,1", snap, stdin="{}\n{}\n", extra_env=ENV,
                     timeout=120)
            got = answers(p)
            check(p.returncode == 0 and len(got) == 2 and init and
                  all(g.get("ok") and g.get("sample") == init[0].get("sample") for g in got),
                  f"tp_mlp one-process restored ({rnd}): {p.returncode} {got} {p.stderr[-600:]}")

    # --- through the invoker: "gpus": 2 ---
    inv = Invoker(os.path.join(tmp, "state"), tmp, extra_env={**ENV, "PHOS_LOG": "info"}, device=DEVICE)
    for bad in (0, 9, "2"):
        st, ans = inv.call("POST", "/system/functions", {"name": "bad", "program": TP_MLP, "gpus": bad})
        check(st == 400 and "gpus must be an integer in 1..8" in str(ans), f"deploy with gpus {bad!r}: {st} {ans}")
    st, ans = inv.call("POST", "/system/functions", {"name": "tp2", "program": TP_MLP,
                                                     "args": ["--one-process", "2"], "gpus": 2}, timeout=300)
    check(st == 201, f"deploy of tp_mlp over two GPUs: {st} {ans} {inv.logtext()[-1500:]}")
    st, desc = inv.call("GET", "/system/functions/tp2")
    check(st == 200 and isinstance(desc, dict) and desc.get("gpus") == 2, f"describe: {st} {desc}")
    ref = init[0].get("sample") if init else None

    def pool_metric(state):
        st, text = inv.call("GET", "/metrics")
        for ln in str(text).splitlines():
            if ln.startswith(f'phos_pool_executors{{state="{state}"}}'):
                return int(ln.split()[-1])
        return -1

    # the pool over two GPUs (one executor) is made with the deploy: wait for
    # it, so that the cold start takes it (nothing else here uses a pool)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (pool_metric("starting") == 0 and pool_metric("busy") == 0):
        time.sleep(0.1)
    idle0 = pool_metric("idle")
    for attempt in ("cold", "warm"):
        st, ans = inv.call("POST", "/function/tp2", {}, timeout=120)
        check(st == 200 and isinstance(ans, dict) and ans.get("ok") and ans.get("rank") == "all" and
              ans.get("sample") == ref, f"{attempt} call over two GPUs: {st} {ans} "
                                        f"{'' if st == 200 else inv.logtext()[-1500:]}")
        if attempt == "cold":
            check(pool_metric("busy") == 1, f"the cold start took the pooled executor over two GPUs: idle before "
                                            f"{idle0}, busy now {pool_metric('busy')}")
            # its communicators: the pooled executor's warm set, made while it was idle
            log = inv.logtext()
            check("a warm communicator over 2 GPUs is ready" in log and
                  "the function took the warm communicator over 2 GPUs" in log,
                  f"the restored function took the warm communicator: {log[-1500:]}")
    # a checkpoint of the running instance is refused with the reason, and the
    # instance serves on as before
    live = live_instances(inv, "tp2")
    check(len(live) == 1, f"one live instance of tp2: {live}")
    if live:
        st, ans = inv.call("POST", f"/system/functions/tp2/instances/{live[0]['instance']}/checkpoint", {"mode": "stw"},
                           timeout=120)
        check(st >= 400 and "NCCL communicators" in str(ans), f"checkpoint of a program holding NCCL: {st} {ans}")
        st, ans = inv.call("POST", "/function/tp2", {}, timeout=120)
        check(st == 200 and isinstance(ans, dict) and ans.get("ok") and ans.get("sample") == ref and
              len(live_instances(inv, "tp2")) == 1, f"after the refused checkpoint: {st} {ans}")
    def replace(old, name, args):
        """Removes function old, deploys name (TP_MLP args over two GPUs) and
        waits for the pooled executor to be idle again."""
        st, _ = inv.call("DELETE", f"/system/functions/{old}", timeout=120)
        check(st in (200, 204), f"remove {old}: {st}")
        st, ans = inv.call("POST", "/system/functions", {"name": name, "program": TP_MLP, "args": args, "gpus": 2},
                           timeout=300)
        check(st == 201, f"deploy of {name} ({args}): {st} {ans} {inv.logtext()[-1500:]}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (pool_metric("starting") == 0 and pool_metric("busy") == 0):
            time.sleep(0.1)

    # the pooled executor, scrubbed after tp2 is removed, makes a new warm set,
    # which the next function's cold start takes in turn
    replace("tp2", "tp3", ["--one-process", "2"])
    st, ans = inv.call("POST", "/function/tp3", {}, timeout=120)
    log = inv.logtext()
    check(st == 200 and isinstance(ans, dict) and ans.get("ok") and ans.get("sample") == ref and
          log.count("the function took the warm communicator over 2 GPUs") == 2,
          f"a second function took a second warm set: {st} {ans} "
          f"{log.count('the function took the warm communicator')} {log[-1500:]}")
    # a thread per GPU through the invoker: its cold start makes its own
    # (nonblocking) communicators, not the pooled executor's warm set
    replace("tp3", "tpt", ["--threads", "2"])
    for attempt in ("cold", "warm"):
        st, ans = inv.call("POST", "/function/tpt", {}, timeout=120)
        check(st == 200 and isinstance(ans, dict) and ans.get("ok") and ans.get("rank") == "threads" and
              ans.get("sample") == ref, f"{attempt} call of tp_mlp --threads 2: {st} {ans} "
                                        f"{'' if st == 200 else inv.logtext()[-1500:]}")
    log = inv.logtext()
    check(log.count("the function took the warm communicator over 2 GPUs") == 2,
          f"the thread-per-GPU function took no warm set: {log.count('the function took the warm communicator')}")

    # --- limits.checkpoint_ms over two GPUs: a lost call resumes ---
    st, ans = inv.call("POST", "/system/functions", {"name": "lc2", "program": LONG, "gpus": 2,
                                                     "limits": {"timeout_ms": 120000, "checkpoint_ms": 300}},
                       timeout=300)
    check(st == 201, f"deploy of long_call over two GPUs with checkpoint_ms: {st} {ans}")
    plan = [2, 400]   # 4 s: two checkpoints (0.2 s or more each on a 2-core host) surely come before its end
    st, ans = inv.call("POST", "/function/lc2", {"steps": plan[0]}, timeout=120)
    check(st == 200 and ans == long_call_reference(plan[:1])[0], f"lc2's first call: {st} {ans}")
    res = {}

    def long_call():
        res["ans"] = inv.call("POST", "/function/lc2", {"steps": plan[1], "pause_us": 10000}, timeout=180)

    th = threading.Thread(target=long_call)
    th.start()
    end, cur = time.time() + 30, None
    while time.time() < end:
        cur = next((i for i in live_instances(inv, "lc2") if i.get("state") == "busy"), None)
        if cur and cur.get("checkpoints", 0) >= 2:
            break
        time.sleep(0.05)
    check(cur and cur.get("checkpoints", 0) >= 2, f"the long call over two GPUs was checkpointed: {cur}")
    try:
        os.kill(cur.get("executor_pid"), signal.SIGKILL) if cur else None
    except (ProcessLookupError, TypeError):
        check(False, f"lc2's executor killed mid-call: {cur}")
    th.join()
    want = long_call_reference(plan)[-1]
    check(res.get("ans", (0,))[0] == 200 and res["ans"][1] == want,
          f"the call resumed over two GPUs and answered as if never lost: {res.get('ans')} (want {want}) "
          f"{inv.logtext()[-1500:]}")
    plan.append(1)
    st, ans = inv.call("POST", "/function/lc2", {"steps": 1}, timeout=120)
    check(st == 200 and ans == long_call_reference(plan)[-1], f"lc2 carries its state on: {st} {ans}")
    inv.stop()
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
    shutil.rmtree(tmp, ignore_errors=True)

done("multi_gpu")
