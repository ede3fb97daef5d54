# SPDX-License-Identifier: MIT
"""Issue 12, managed memory, run as ordinary CUDA programs
(tests/transparency/managed/):

- managed: cudaMallocManaged buffers written by kernels and read by the host
  after a synchronize with no copy (the tutorials' vector add); prefetch and
  advice hints; cudaMemset on managed memory; copies between managed and
  device memory with every kind the program may pass; a copy between managed
  buffers right after a kernel writes the source; cudaPointerGetAttributes
  says managed; one counter bumped by 63 launches on a stream it is attached
  to while the host adds to it between synchronizes; size 0 and bad flags
  refused;
- managed_serve: a function whose state lives in managed memory answers
  under phos-fn run and after a snapshot at phos_fn_serve is restored
  (stop-the-world and on demand), its table and counter carried over (the
  answers' call counts go on from where the snapshot was taken: 1, 2, 3 in
  each restore, as in the run);
- managed_var: a __managed__ variable is refused under phos-fn, clearly (the
  program's CUDA calls fail with cudaErrorNotSupported and the log names the
  variable), never answered wrongly; natively it passes.

Every launch reaches the executor (the trace), with managed memory outside
its read/write sets (it is not device memory a restore moves).
"""
import os
import shutil
import subprocess
import tempfile

from harness import DEVICE, check, done, program, read_trace, run, serve_everywhere

MANAGED = program("tests", "transparency", "managed", "managed")
SERVE = program("tests", "transparency", "managed", "managed_serve")
VAR = program("tests", "transparency", "managed", "managed_var")
REQS = "x\nx\nx\n"


def native(prog, stdin=""):
    return subprocess.run([prog], input=stdin, capture_output=True, text=True, timeout=300)


tmp = tempfile.mkdtemp(prefix="phos-managed-test-")
try:
    trace = os.path.join(tmp, "managed.trace")
    p = run(MANAGED, trace=trace)
    check(p.returncode == 0 and "managed: ok" in p.stdout,
          f"managed under phos-fn: rc {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    if DEVICE == "cuda":
        p = native(MANAGED)
        check(p.returncode == 0 and "managed: ok" in p.stdout, f"managed natively: rc {p.returncode}\n{p.stderr[-3000:]}")
    recs = read_trace(trace) if os.path.exists(trace) else []
    launches = [r for r in recs if r.get("op") == "launch"]
    by = {}
    for r in launches:
        by[r.get("kernel")] = by.get(r.get("kernel"), 0) + 1
    check(by.get("_Z6mg_addiPKfPf") == 4 and by.get("_Z7mg_bumpPiS_i") == 63, f"launches by kernel {by}")

    def check_answers(got, what):
        check(len(got) == 3, f"{what}: {len(got)} of 3 answers: {got}")
        for i, a in enumerate(got):
            check(a.get("ok") is True and a.get("calls") == i + 1, f"{what}: answer {i}: {a}")

    serve_everywhere(SERVE, REQS, check_answers, tmp)

    # a __managed__ variable: refused, never a wrong answer; the log (asked
    # for: the preload prints nothing by default) names the variable
    p = run(VAR, env={"PHOS_LOG": "warn"})
    check(p.returncode == 2 and "operation not supported" in p.stderr and "mg_value" in p.stderr,
          f"managed_var under phos-fn: rc {p.returncode}\n{p.stdout[-1000:]}\n{p.stderr[-2000:]}")
    if DEVICE == "cuda":
        p = native(VAR)
        check(p.returncode == 0 and "managed_var: ok" in p.stdout, f"managed_var natively: rc {p.returncode}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

done("transparency_managed")
