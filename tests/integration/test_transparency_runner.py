# SPDX-License-Identifier: MIT
"""Issue 12, the transparency runner (bench/transparency.py) on the sim device:
it finds every program of tests/transparency/*/ without a list, runs each
under phos-fn, and counts a run as passing only when it exited 0 and was
really forwarded (not refused by the guard, calls in the executor's trace).
A new area is found without editing the runner; a refused program, one that
never calls CUDA, and one whose output must match native but does not, count
as failures and fail the run."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

from harness import BUILD, check, done, program

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "transparency.py")
EXPECTED = ["blas/blas_helpers", "blas/blas_level", "blas/blas_ex", "blas/blas_lu", "blas/blas_batched", "blas/blas_sets", "blas/blas_sym",
            "pools/pools", "pools/callbacks", "pools/pool_serve",
            "graphs/graphs", "graphs/graph_nodes", "graphs/launch_ex", "graphs/ptds", "graphs/graph_serve", "guard/rpath_cudart", "guard/dlopen_cudart",
            "textures/arrays", "textures/textures", "textures/texture_serve",
            "managed/managed", "managed/managed_serve",
            # public programs we did not write (NVIDIA CUB's examples), with sim twins
            "cub/example_device_reduce", "cub/example_device_scan", "cub/example_device_radix_sort",
            "cub/example_block_reduce"]


def runner(out, *extra):
    return subprocess.run([sys.executable, RUNNER, BUILD, "--device", "sim", "--out", out,
                           *(extra or ("--native", "no"))],
                          capture_output=True, text=True, timeout=900)


def by(records):
    return {(r["case"], r["system"], r["metric"]): r for r in records}


tmp = tempfile.mkdtemp(prefix="phos-runner-test-")
try:
    out = os.path.join(tmp, "transparency.json")
    p = runner(out)
    check(p.returncode == 0, f"runner: rc {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    with open(out) as f:
        recs = json.load(f)
    r = by(recs)
    for case in EXPECTED:
        ok = r.get((case, "phos", "passed"), {})
        check(ok.get("value") == 1 and ok.get("forwarded_ops", 0) > 0, f"{case}: phos {ok}")
        check(r.get((case, "phos", "seconds"), {}).get("value", 0) > 0, f"{case}: no seconds")
    check(r.get(("guard/driver_probe", "phos", "skipped"), {}).get("value") == 1, "driver_probe not skipped")
    check(r.get(("managed/managed_var", "phos", "skipped"), {}).get("value") == 1, "managed_var not skipped")
    check(r.get(("blas/blas_xt", "phos", "passed"), {}).get("value") == 1, "blas_xt (cublasXt) not passing under phos")
    for name in ("sort", "histogram", "run_length_encoding", "sum"):
        sk = r.get(("thrust/" + name, "phos", "skipped"), {})
        check(sk.get("value") == 1 and "GPU only" in sk.get("why", ""), f"thrust/{name} on sim: {sk}")
    check(not [x for x in recs if x["system"] == "native"], "native records without --native")
    passed = [x for x in recs if x["metric"] == "passed" and x["system"] == "phos" and x["case"] != "total"]
    total = r.get(("total", "phos", "passed"), {})
    check(total.get("value") == sum(x["value"] for x in passed) and total.get("programs") == len(passed),
          f"totals {total} against {len(passed)} programs")
    with open(os.path.join(tmp, "transparency.checks.json")) as f:
        check(all(c["ok"] for c in json.load(f)), "checks not ok")

    # A new area, found without a list: one good program, one that the guard
    # refuses, one that never calls CUDA.
    area = os.path.join(tmp, "areas", "newarea")
    os.makedirs(area)
    os.symlink(program("tests", "transparency", "guard", "rpath_cudart"), os.path.join(area, "good"))
    os.symlink(program("tests", "transparency", "guard", "driver_probe"), os.path.join(area, "probe"))
    os.symlink(shutil.which("true"), os.path.join(area, "nocuda"))
    # prints which libcudart serves it: natively its own copy, under phos-fn ours
    os.symlink(program("tests", "transparency", "guard", "rpath_cudart"), os.path.join(area, "printer"))
    with open(os.path.join(area, "runner.json"), "w") as f:
        # a driver mapped by hand: refused (one reached by dlopen would be served by the driver stand-in)
        json.dump({"probe": {"args": ["mmap", program("tests", "transparency", "guard", "libcuda.so.1")],
                             "refused": "a probe of the guard, refused by design"},
                   "printer": {"same_output": True}}, f)
    out2 = os.path.join(tmp, "new.json")
    p = runner(out2, "--programs", os.path.join(tmp, "areas"), "--native", "yes")
    check(p.returncode == 1, f"runner with failing programs: rc {p.returncode}\n{p.stdout[-2000:]}")
    with open(out2) as f:
        r = by(json.load(f))
    check(r.get(("newarea/good", "phos", "passed"), {}).get("value") == 1, "newarea/good did not pass")
    probe = r.get(("newarea/probe", "phos", "passed"), {})
    check(probe.get("value") == 0 and probe.get("forwarded") == 0 and "refused by the guard" in probe.get("why", ""),
          f"the refused probe: {probe}")
    nocuda = r.get(("newarea/nocuda", "phos", "passed"), {})
    # (exit 0: a program that ends before it takes its channel is no failure
    # of the executor's)
    check(nocuda.get("value") == 0 and nocuda.get("forwarded_ops") == 0 and nocuda.get("exit") == 0,
          f"a program without CUDA calls: {nocuda}")
    printer = r.get(("newarea/printer", "phos", "passed"), {})
    check(printer.get("value") == 0 and printer.get("exit") == 0 and "differs" in printer.get("why", ""),
          f"a program whose output differs from native: {printer}")
    check(r.get(("newarea/printer", "native", "passed"), {}).get("exit") is not None, "no native run with --native yes")
    # a program refused by design (runner.json "refused") is named as such, not as a failure
    with open(os.path.join(tmp, "new.checks.json")) as f:
        checks = json.load(f)
    known = [c for c in checks if "by design" in c["check"]]
    failed = [c for c in checks if "passes under phos" in c["check"]]
    check(known and "newarea/probe" in known[0]["detail"] and failed and "newarea/probe" not in failed[0]["detail"]
          and "newarea/nocuda" in failed[0]["detail"], f"the refused program's place in the checks: {checks}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

done("transparency_runner")
