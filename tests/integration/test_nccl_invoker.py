# SPDX-License-Identifier: MIT
"""A multi-GPU function through invokers (issues 14 and 15): tp_mlp's two
ranks are two functions of two invokers on this machine (on cuda each
invoker's executors own one GPU: PHOS_GPU=r in its environment; on sim both
share the sim device and its shared-memory collectives).

- the two deploys run together (the ranks meet in ncclCommInitRank through
  the unique-id file) and both snapshot at phos_fn_serve;
- the first calls, sent to both at once, are cold starts: each invoker
  restores its rank, and the ranks' communicator is made again at its first
  use, the ranks meeting through PHOS_NCCL_REINIT_DIR; both answer the
  forward pass's match with the CPU reference, as rank r of 2;
- more calls to both at once answer the same, warm; no meeting file is left.

Needs two GPUs on cuda (exits 77 with fewer).
"""
import json
import os
import shutil
import sys
import tempfile
import threading
import time

from harness import DEVICE, Invoker, check, done, gpu_count, procs, program

TP_MLP = program("functions", "examples", "tp_mlp")


if DEVICE == "cuda" and gpu_count() < 2:
    print("nccl_invoker: needs two GPUs: skipped")
    sys.exit(77)

tmp = tempfile.mkdtemp(prefix="phos-nccl-invoker-test-")


def both(calls):
    """Runs calls (functions returning a result) at once; their results in order."""
    out = [None] * len(calls)

    def run(i):
        try:
            out[i] = calls[i]()
        except Exception as e:   # a failed call is a result to check, not a crash
            out[i] = (None, str(e))

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


try:
    rdir = os.path.join(tmp, "reinit")
    os.makedirs(rdir)
    idfile = os.path.join(tmp, "tp.id")
    invs = []
    for r in range(2):
        env = {"PHOS_NCCL_REINIT_DIR": rdir, "PHOS_NCCL_TIMEOUT_MS": "30000"}
        if DEVICE == "cuda":
            env["PHOS_GPU"] = str(r)
        # --run-as self: the ranks read and write the id file in this test's
        # private temporary directory
        invs.append(Invoker(os.path.join(tmp, f"state{r}"), tmp, extra=["--run-as", "self"], extra_env=env,
                            device=DEVICE))

    got = both([lambda r=r: invs[r].call("POST", "/system/functions",
                                         {"name": "tp", "program": TP_MLP, "args": [str(r), "2", idfile]},
                                         timeout=300) for r in range(2)])
    for r, (st, desc) in enumerate(got):
        check(st == 201, f"deploy of rank {r}: {st} {desc}")

    for attempt in ("cold", "warm", "warm again"):
        t0 = time.monotonic()
        got = both([lambda r=r: invs[r].call("POST", "/function/tp", {}, timeout=120) for r in range(2)])
        took = time.monotonic() - t0
        for r, (st, ans) in enumerate(got):
            check(st == 200 and isinstance(ans, dict) and ans.get("ok") and ans.get("rank") == r
                  and ans.get("nranks") == 2,
                  f"{attempt} call of rank {r}: {st} {ans} {'' if st == 200 else invs[r].logtext()[-1500:]}")
        print(f"{attempt} calls of both ranks: {took:.3f} s", flush=True)
    check(os.listdir(rdir) == [], f"no meeting file is left: {os.listdir(rdir)}")
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
    shutil.rmtree(tmp, ignore_errors=True)

done("nccl_invoker")
