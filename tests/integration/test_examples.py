# SPDX-License-Identifier: MIT
"""Every example function answers correctly through forwarding (sim device):
each response carries the largest absolute error against the function's own
CPU reference, and bad requests get a clear error without killing it."""
import os
import tempfile

from harness import check, done, program, read_trace, run, serve

EX = ("functions", "examples")


def expect_ok(name, resp, req):
    ok = resp.get("ok") is True and (resp.get("max_abs_err") is None or resp["max_abs_err"] <= resp["tol"])
    check(ok, f"{name} {req} -> {resp}")


def expect_error(name, resp, req):
    check("error" in resp and "ok" not in resp, f"{name} {req} should be refused, got {resp}")


def run_example(name, args, good, bad, **kw):
    reqs = good + bad
    p, out = serve(program(*EX, name), reqs, *args, **kw)
    check(p.returncode == 0, f"{name} exited {p.returncode}: {p.stderr[-2000:]}")
    check(len(out) == len(reqs), f"{name}: {len(out)} responses to {len(reqs)} requests: {p.stdout[-2000:]}")
    for req, resp in zip(reqs, out):
        (expect_ok if req in good else expect_error)(name, resp, req)
    return out


out = run_example("vecadd", ["--elements", 65536], [
    {"n": 4096, "seed": 7},
    {"n": 65536, "seed": 3, "alpha": -1.5, "scale": 2, "bias": 1},
    {},  # the inputs init left on the device
], ["not json", {"n": 10**12}, {"nn": 3}])
check(out[1].get("bias") == 1, "vecadd: the __device__ bias written by a request is read back")

run_example("gemm", [], [
    {"m": 128, "n": 64, "k": 96, "seed": 3},
    {"m": 64, "n": 64, "k": 64, "trans_a": True, "trans_b": True, "alpha": 0.5, "beta": 0.25},
    {"m": 32, "n": 48, "k": 16, "batch": 4},
    {"m": 40, "n": 40, "k": 40, "api": "gemmex"},
], [{"m": -1}, {"m": 8, "n": 8, "k": 8, "api": "nope"}])

run_example("mlp", ["--weights-mib", 4], [
    {"batch": 8, "seed": 1, "check": True},
    {"batch": 3, "seed": 2},
], [{"batch": 0}, "[1,2]"])

# Every kernel of the examples is exact (issue 9): on-demand restore never has
# to wait for a whole snapshot because of them (gemm launches no kernel of its own).
with tempfile.TemporaryDirectory() as tmp:
    for name, args, req in [("vecadd", ["--elements", 4096], {"n": 1000, "seed": 2}),
                            ("gemm", [], {"m": 32, "n": 32, "k": 32}),
                            ("mlp", ["--weights-mib", 4], {"batch": 2})]:
        tr = os.path.join(tmp, f"{name}.jsonl")
        _, out = serve(program(*EX, name), [req], *args, trace=tr)
        launches = [t for t in read_trace(tr) if t.get("op") == "launch"]
        check(out and out[0].get("ok") and (launches or name == "gemm"), f"{name}: traced run {out}")
        check(all(t.get("sets") == "exact" for t in launches),
              f"{name}: opaque launches {[t['kernel'] for t in launches if t.get('sets') != 'exact']}")

# mlp's weights file (the native cold start of bench/coldstart.py): saved
# weights load back to the same answers; a file of another shape is refused.
with tempfile.TemporaryDirectory() as tmp:
    wf = os.path.join(tmp, "w.bin")
    shape = ["--width", 64, "--layers", 3]
    gen = serve(program(*EX, "mlp"), [{"batch": 4}], *shape, "--save-weights", wf)[1]
    loaded = serve(program(*EX, "mlp"), [{"batch": 4}], *shape, "--weights-file", wf)[1]
    check(gen and gen == loaded and gen[0].get("ok"), f"mlp weights file: {gen} vs {loaded}")
    p = run(program(*EX, "mlp"), "--width", 64, "--layers", 4, "--weights-file", wf)
    check(p.returncode != 0 and "not a weights file of this shape" in p.stderr, f"mlp wrong shape: {p.stderr[-500:]}")
    p = run(program(*EX, "mlp"), "--weights-file", os.path.join(tmp, "none"))
    check(p.returncode != 0 and "cannot open the weights file" in p.stderr, f"mlp missing file: {p.stderr[-500:]}")

done("examples")
