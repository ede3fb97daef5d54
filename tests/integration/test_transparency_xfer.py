# SPDX-License-Identifier: MIT
"""Issue 12, transparency of copies, kernel parameters, limits and attributes:
ordinary CUDA programs (tests/transparency/xfer/) that check their own
answers run under phos-fn on the test device and, on a GPU
(PHOS_TEST_DEVICE=cuda), natively too, so that their checks are checked
against real CUDA."""
import json
import os
import shutil
import subprocess
import tempfile

from harness import DEVICE, check, done, fn_env, phos, program, run

PROGRAMS = ["copy2d", "bigparams", "limits", "pageable"]
# phos-fn's own checks: under phos-fn only
PHOS_ONLY = ["proto2d"]

for name in PROGRAMS:
    exe = program("tests", "transparency", "xfer", name)
    if not os.path.exists(exe):
        continue
    # "phos": the program also checks what only phos-fn promises
    p = run(exe, "phos", device=DEVICE, timeout=300)
    check(p.returncode == 0 and f"{name}: ok" in p.stdout,
          f"{name} under phos-fn ({DEVICE}): exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    if DEVICE == "cuda":
        env = fn_env()
        env.pop("LD_PRELOAD", None)
        n = subprocess.run([exe], capture_output=True, text=True, timeout=300, env=env)
        check(n.returncode == 0 and f"{name}: ok" in n.stdout,
              f"{name} natively: exit {n.returncode}\n{n.stdout[-2000:]}\n{n.stderr[-3000:]}")
# Staged pageable copies must not refill a staging half before the device is
# done with it: the sim device's host copies slowed down make a missing wait
# show as wrong bytes.
if DEVICE == "sim":
    exe = program("tests", "transparency", "xfer", "pageable")
    if os.path.exists(exe):
        p = run(exe, device=DEVICE, timeout=300, env={"PHOS_SIM_COPY_DELAY_US": "2000"})
        check(p.returncode == 0 and "pageable: ok" in p.stdout,
              f"pageable with slow sim copies: exit {p.returncode}\n{p.stderr[-3000:]}")
for name in PHOS_ONLY:
    exe = program("tests", "transparency", "xfer", name)
    if not os.path.exists(exe):
        continue
    p = run(exe, device=DEVICE, timeout=300)
    check(p.returncode == 0 and f"{name}: ok" in p.stdout,
          f"{name} under phos-fn ({DEVICE}): exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
# A pooled executor puts back the limits and default-stream attributes a
# function changed: restored five times on a pool of two executors, every
# instance of ctxreset (which changes them on each call) finds the values the
# first one found.
fn = program("tests", "transparency", "xfer", "ctxreset")
if os.path.exists(fn):
    tmp = tempfile.mkdtemp(prefix="phos-xfer-test-")
    try:
        snap = os.path.join(tmp, "snap")
        p = phos("snapshot", "--device", DEVICE, "-o", snap, "--", fn)
        check(p.returncode == 0, f"ctxreset snapshot: {p.stderr[-3000:]}")
        p = subprocess.run([program("tests", "integration", "pool_check"), snap, "5"], input="{}\n",
                           capture_output=True, text=True, timeout=300, env=fn_env())
        runs = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        check(p.returncode == 0 and len(runs) == 5, f"ctxreset pool_check: rc {p.returncode} {p.stderr[-2000:]}")
        first = [json.loads(a) if isinstance(a, str) else a for a in (runs[0]["answers"] if runs else [])]
        check(len(first) == 1 and "stack" in first[0], f"ctxreset answered {runs[:1]}")
        check(len({r["executor"] for r in runs}) < len(runs), f"executors reused: {[r['executor'] for r in runs]}")
        check(all(r["exit"] == 0 for r in runs), f"ctxreset exits: {[r['exit'] for r in runs]}")
        for r in runs[1:]:
            got = [json.loads(a) if isinstance(a, str) else a for a in r["answers"]]
            check(got == first, f"instance {r['i']} on executor {r['executor']} found {got}, the first found {first}")
        # What init set is part of the snapshot: a limit, and a stream's
        # attributes (yield = 3, its priority the greatest, below 0).
        if first:
            a = first[0]
            check(a.get("heap") == a.get("want_heap"), f"the heap limit init set was not restored: {a}")
            check(a.get("spolicy") == 3 and a.get("sprio", 0) < 0,
                  f"the stream attributes init set were not restored: {a}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
done("transparency_xfer")
