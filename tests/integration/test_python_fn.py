# SPDX-License-Identifier: MIT
"""Python functions (issue 16's contract, no PyTorch): the phos_fn module
(preload/python/phos_fn.py) and functions/examples/py_gemm.py, which
computes C = s A B with cuBLAS through ctypes and checks it against a Python
reference:

- under `phos-fn run` its requests are answered through the stand-in's
  phos_fn_serve_impl, every answer matching the reference;
- snapshotted at phos_fn.serve and restored, it answers as before, with the
  same checksum for the same request;
- deployed on an invoker (run as nobody) and called over HTTP, likewise;
- a handler that raises answers 500 with {"error": ...} and the function
  goes on; a handler returning an error status and a non-JSON body keeps
  them;
- without the stand-in (no libcudart.so.13 with phos_fn_serve_impl) the
  module serves one request per line on stdin, as fn.h's fallback.
"""
import os
import shutil
import subprocess
import sys
import tempfile

from harness import DEVICE, Invoker, answers, check, done, phos, procs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY_GEMM = os.path.join(ROOT, "functions", "examples", "py_gemm.py")
MODULE_DIR = os.path.join(ROOT, "preload", "python")
PY = sys.executable
# The invoker runs functions as nobody: a Python that user may run (Debian's).
SYS_PY = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else PY
# The sanitizer pass preloads ASan into the functions: Python leaves objects
# allocated at exit by design, which LeakSanitizer would report as the
# user's process ends (abort): leaks are not checked in this test's processes.
ENV = {"ASAN_OPTIONS": "abort_on_error=1:detect_leaks=0"} if os.environ.get("PHOS_TEST_PRELOAD") else {}


tmp = tempfile.mkdtemp(prefix="phos-python-test-")
try:
    # under phos-fn run
    p = phos("run", "--device", DEVICE, "--", PY, PY_GEMM, stdin='{"scale": 2}\n{"scale": "x"}\n{}\n', timeout=120,
             extra_env=ENV)
    got = answers(p)
    check(p.returncode == 0 and len(got) == 3, f"run: rc {p.returncode} {got} {p.stderr[-800:]}")
    if len(got) == 3:
        check(got[0].get("ok") and got[0]["scale"] == 2.0 and got[2].get("ok") and got[2]["scale"] == 1.0,
              f"run: answers match the reference: {got}")
        check("ValueError" in got[1].get("error", ""), f"a handler that raises answers its error: {got[1]}")
        run_sum = got[0].get("checksum")

    # snapshot at phos_fn.serve, restore
    snap = os.path.join(tmp, "snap")
    p = phos("snapshot", "--device", DEVICE, "-o", snap, "--", PY, PY_GEMM, timeout=120, extra_env=ENV)
    check(p.returncode == 0 and os.path.exists(os.path.join(snap, "manifest.json")), f"snapshot: {p.stderr[-800:]}")
    p = phos("restore", "--device", DEVICE, snap, stdin='{"scale": 2}\n', timeout=120, extra_env=ENV)
    got = answers(p)
    check(p.returncode == 0 and len(got) == 1 and got[0].get("ok") and got[0].get("checksum") == run_sum,
          f"restored: {got} (run's checksum {run_sum}) {p.stderr[-800:]}")

    # through an invoker
    inv = Invoker(os.path.join(tmp, "state"), tmp, device=DEVICE, extra_env=ENV)
    st, desc = inv.call("POST", "/system/functions", {"name": "pygemm", "program": SYS_PY, "args": [PY_GEMM]},
                        timeout=300)
    check(st == 201, f"deploy: {st} {desc}")
    for body, want in (({"scale": 2}, 200), ({"scale": "x"}, 500), ({}, 200)):
        st, ans = inv.call("POST", "/function/pygemm", body, timeout=120)
        check(st == want and isinstance(ans, dict) and (ans.get("ok") if want == 200 else "ValueError" in
                                                         ans.get("error", "")),
              f"invoke {body}: {st} {ans} {'' if st == want else inv.logtext()[-1500:]}")
        if body == {"scale": 2} and st == 200:
            check(ans.get("checksum") == run_sum, f"the same checksum through the invoker: {ans} vs {run_sum}")

    # statuses and bodies a handler chooses; natively, the stdin/stdout fallback
    prog = ("import sys; sys.path.insert(0, %r); import phos_fn\n"
            "def h(r):\n"
            "    j = r.json()\n"
            "    if j.get('fail'): return 422, {'why': 'asked to'}\n"
            "    if j.get('text'): return 'plain text'\n"
            "    return {'got': j}\n"
            "sys.exit(phos_fn.serve(h))\n") % MODULE_DIR
    p = phos("run", "--device", DEVICE, "--", PY, "-c", prog, stdin='{"a": 1}\n{"fail": 1}\n{"text": 1}\n',
             timeout=120, extra_env=ENV)
    check(p.returncode == 0 and p.stdout.splitlines() == ['{"got": {"a": 1}}', '{"why": "asked to"}', 'plain text'],
          f"handler bodies under phos-fn run: {p.stdout!r} {p.stderr[-500:]}")
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)
    env.pop("LD_PRELOAD", None)
    n = subprocess.run([PY, "-c", prog], input='{"a": 2}\n\n{"fail": 1}\n', capture_output=True, text=True,
                       timeout=60, env=env)
    check(n.returncode == 0 and n.stdout.splitlines() == ['{"got": {"a": 2}}', '{"why": "asked to"}'],
          f"native fallback: {n.returncode} {n.stdout!r} {n.stderr[-500:]}")
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
    shutil.rmtree(tmp, ignore_errors=True)

done("python_fn")
