# SPDX-License-Identifier: MIT
"""Modules are sent to the executor at their first use, as CUDA's lazy loading
loads them (preload/cudart/launch.c): lazy_modules has two fatbins and uses one.

- its snapshot holds the used module with every kernel and variable of it
  (lz_counter, which the host never names, included: a kernel may write
  it), and nothing of the unused one;
- the restored function answers as the original did;
- with CUDA_MODULE_LOADING=EAGER both modules are in the snapshot, as CUDA
  loads every module then.

A pooled executor loads the modules of its hot snapshots while idle and
keeps those of a function it served (ctxpool/calls/exec_module.c): a restore of
that snapshot takes them, the first one included. The
stateful function changes its __device__ variable at every call; its
second cold start in the same executor (a cached module) must answer with
the snapshot's value again, not the last call's.
"""
import json
import os
import shutil
import tempfile
import time

from harness import DEVICE, Invoker, answers, check, done, live_instances, phos, program

PROG = program("tests", "integration", "lazy_modules")
WANT = sum(3 * i + 1 for i in range(1000))

tmp = tempfile.mkdtemp(prefix="phos-lazy-test-")
try:
    for eager in (False, True):
        snap = os.path.join(tmp, "eager" if eager else "lazy")
        env = {"CUDA_MODULE_LOADING": "EAGER"} if eager else {}
        p = phos("snapshot", "--device", DEVICE, "-o", snap, "--", PROG, extra_env=env, timeout=120)
        check(p.returncode == 0, f"snapshot (eager {eager}): rc {p.returncode} {p.stderr[-1500:]}")
        if p.returncode != 0:
            continue
        with open(os.path.join(snap, "manifest.json")) as f:
            man = json.load(f)
        kernels = sorted(k["name"] for k in man.get("kernels", []))
        variables = sorted(v["name"] for v in man.get("variables", []))
        if eager:
            check(len(man.get("modules", [])) == 2, f"eager: both modules: {man.get('modules')}")
            check("_Z9lz_unusedPf" in kernels and "lz_other_var" in variables,
                  f"eager: the unused module's kernel and variable: {kernels} {variables}")
        else:
            check(len(man.get("modules", [])) == 1, f"lazy: the used module only: {man.get('modules')}")
            check(kernels == ["_Z7lz_fillPii", "_Z7lz_idlePi"] and variables == ["lz_counter"],
                  f"lazy: every kernel and variable of the used module, none of the other: {kernels} {variables}")
        p = phos("restore", "--device", DEVICE, snap, stdin="{}\n{}\n", timeout=120)
        got = answers(p)
        check(p.returncode == 0 and [g.get("sum") for g in got] == [WANT, WANT],
              f"restored (eager {eager}): {got} rc {p.returncode} {p.stderr[-1000:]}")

    p = phos("run", "--device", DEVICE, "--", PROG, stdin="{}\n")
    check(p.returncode == 0 and [g.get("sum") for g in answers(p)] == [WANT], f"run: {p.stdout} {p.stderr[-1000:]}")

    inv = Invoker(os.path.join(tmp, "state"), tmp, extra=["--pool", "1"], device=DEVICE,
                  extra_env={"PHOS_LOG": "debug"})
    try:
        st, body = inv.call("POST", "/system/functions", {"name": "stateful", "args": ["5"],
                                                          "program": program("tests", "integration", "stateful"),
                                                          "limits": {"idle_ms": 200}})
        check(st == 201, f"deploy stateful: {st} {body}")
        seen = []
        for round_ in range(2):
            for _ in range(300):   # the pooled executor is free again, its hot snapshots pinned
                st, metrics, _ = inv.request("GET", "/metrics")
                pending = [ln for ln in str(metrics).splitlines() if ln.startswith("phos_pool_hot_pending ")]
                if not live_instances(inv, "stateful") and pending and pending[0].split()[-1] == "0":
                    break
                time.sleep(0.05)
            time.sleep(0.5)
            for i in range(2):
                st, body, h = inv.request("POST", "/function/stateful", {})
                seen.append((h.get("x-cold-start"), body.get("counter") if isinstance(body, dict) else body,
                             body.get("scale") if isinstance(body, dict) else None))
        check([s[:2] for s in seen] == [("true", 100), ("false", 101), ("true", 100), ("false", 101)],
              f"cold, warm, cold, warm: {seen}")
        check(len(seen) == 4 and seen[2][2] == seen[0][2] and seen[1][2] != seen[0][2],
              f"the restored variable has the snapshot's value, not the last call's: {seen}")
        # the first cold start takes the module the pool loaded with the hot
        # snapshot, the second the one it kept from the first
        hits = inv.logtext().count("already loaded (an earlier function")
        check(hits == 2, f"both cold starts took a module already loaded: {hits} of 2")
    finally:
        inv.stop()
finally:
    shutil.rmtree(tmp, ignore_errors=True)

done("lazy_modules")
