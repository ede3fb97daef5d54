# SPDX-License-Identifier: MIT
"""Issue 12, transparency of copies, kernel parameters, limits and attributes:
ordinary CUDA programs (tests/transparency/xfer/) that check their own
answers run under phos-fn on the test device and, on a GPU
(PHOS_TEST_DEVICE=cuda), natively too, so that their checks are checked
against real CUDA."""
import os
import subprocess

from harness import DEVICE, check, done, fn_env, program, run

PROGRAMS = ["copy2d", "bigparams", "limits"]
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
for name in PHOS_ONLY:
    exe = program("tests", "transparency", "xfer", name)
    if not os.path.exists(exe):
        continue
    p = run(exe, device=DEVICE, timeout=300)
    check(p.returncode == 0 and f"{name}: ok" in p.stdout,
          f"{name} under phos-fn ({DEVICE}): exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
done("transparency_xfer")
