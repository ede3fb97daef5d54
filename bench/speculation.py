# SPDX-License-Identifier: MIT
"""Speculation on the GPU (issue 9), in one run:

  corpus   the verdicts of tests/unit/access_corpus.cu and whether each kernel
           answered under on-demand restore as under stop-the-world, read from
           the JSON that tests/gpu/test_corpus_ondemand.py wrote (--corpus)
  tables   cold start over HTTP of functions/examples/tables with 4 GiB in 8
           tables of 512 MiB, the first request touching one of them:
             phos-ondemand-exact   {"table": 7, "direct": true}: the kernel
                                   names the table (exact), only it is waited for
             phos-ondemand-opaque  {"table": 7}: the kernel finds the table in a
                                   device pointer table (opaque), so it waits
                                   for the whole restore
             phos-stw              stop-the-world restore, the same request
             limit                 touched bytes / pinned H2D (bench/bandwidth)
           including the first cold start after the call that records the
           prefetch order (first_cold_after_record_s).

Every answer is checked (the sum against the CPU reference). Targets: exact
within 1.2 x limit + 15 ms; opaque correct and no slower than 1.2 x
stop-the-world + 15 ms.

Writes bench/results/speculation.json (the corpus records and these), and
speculation.checks.json; copies them to $OUT.

usage: python3 bench/speculation.py BUILD_DIR [--corpus FILE] [--table-mib 512] [--reps 3]
"""
import argparse
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import coldstart as C  # noqa: E402  (the invoker driver and the record format)
import snapshot as S  # noqa: E402

NTAB = 8


def tables_answer(line):
    """What a tables answer must hold whichever kernel summed (timing-free)."""
    try:
        r = json.loads(line)
    except (TypeError, ValueError):
        return None
    return {k: r.get(k) for k in ("ok", "table", "sum", "expected")}


# The cost of validation for the examples: warm calls with every exact launch
# run as its validation twin (--validate-spec always: the twin checks each
# access, and the device is synchronized around it) against the same calls
# with validation off, one invoker each, in this run.
VALIDATION_CASES = [   # sizes where the kernels, not the request's host work, take the time
    ("vecadd", ["--elements", "1048576"], {"n": 1048576, "seed": 3}),
    ("mlp", ["--weights-mib", "64"], {"batch": 64, "seed": 1}),
    ("tables", ["--tables", "8", "--table-mib", "64"], {"table": 7, "direct": True}),
]


SIM_VALIDATION_CASES = [   # the sim device computes on the CPU: small sizes (a check of the harness)
    ("vecadd", ["--elements", "65536"], {"n": 65536, "seed": 3}),
    ("mlp", ["--weights-mib", "4"], {"batch": 4, "seed": 1}),
    ("tables", ["--tables", "8", "--table-mib", "2"], {"table": 7, "direct": True}),
]


def validation_cost(a, calls=15):
    cases = SIM_VALIDATION_CASES if a.sim else VALIDATION_CASES
    for mode in ("off", "always"):
        state = os.path.join(a.workdir, f"validate-{mode}")
        shutil.rmtree(state, ignore_errors=True)
        inv = None
        try:
            inv = C.Invoker(state, ["--validate-spec", mode])
            for name, args, req in cases:
                st, body, _, _ = C.call(inv.port, "POST", "/system/functions",
                                        {"name": name, "program": os.path.join(a.build, "functions", "examples", name),
                                         "args": args, "device": a.device,
                                         "limits": {"idle_ms": 1000, "timeout_ms": 900000}})
                if st != 201:
                    raise S.StepError(f"deploy {name}: {st} {body[:500]!r}")
                inv.settled(name)
                times = []
                for i in range(calls + 1):   # the first is the cold start
                    st, body, _, dt = C.call(inv.port, "POST", f"/function/{name}", req, timeout=a.call_timeout)
                    ans = json.loads(body) if st == 200 else {}
                    if st != 200 or not ans.get("ok", True):
                        raise S.StepError(f"{name} with validation {mode}: {st} {body[:300]!r}")
                    if i:
                        times.append(dt)
                times.sort()
                C.record(f"validation-{name}", f"phos-validate-{mode}", "warm_response_s", times[len(times) // 2], "s")
        except (S.StepError, OSError, ValueError) as e:
            C.error(f"validation-{mode}", "phos", "run", str(e))
        finally:
            if inv:
                inv.stop()
    for name, _, _ in cases:
        t = {r["system"]: r["value"] for r in C.records if r["case"] == f"validation-{name}"}
        if "phos-validate-off" in t and "phos-validate-always" in t:
            C.record(f"validation-{name}", "phos-validate-always", "warm_over_unvalidated",
                     t["phos-validate-always"] / t["phos-validate-off"], "x")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("build")
    p.add_argument("--corpus", help="JSON written by tests/gpu/test_corpus_ondemand.py")
    p.add_argument("--table-mib", type=int, default=512)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--workdir", default=os.environ.get("PHOS_BENCH_DIR", "/var/tmp/phos-bench-speculation"))
    p.add_argument("--call-timeout", type=float, default=300)
    p.add_argument("--sim", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--validation-only", action="store_true", help="only the cost of validation for the examples")
    a = p.parse_args()
    a.build = os.path.abspath(a.build)
    a.device = "sim" if a.sim else "cuda"
    a.warm_calls = 1
    if a.sim:
        os.environ.setdefault("PHOS_SIM_TWINS", os.path.join(a.build, "functions", "examples",
                                                             "libphos-twins-examples.so"))
    C.A = S.A = a
    S.answer = tables_answer       # C.measure compares answers with it
    os.makedirs(a.workdir, exist_ok=True)
    os.makedirs(C.RESULTS, exist_ok=True)
    C.DEVICE = S.DEVICE = S.gpu_info()[0] if not a.sim else "sim"
    if not a.sim:
        rc, _, out, err = S.sh([os.path.join(a.build, "bench", "bandwidth"), "--mib", 1024, "--reps", 5], 300,
                               env=S.native_env())
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if rc == 0 and lines:
            C.BW.update(json.loads(lines[-1]))
            C.record("bandwidth-1GiB", "limit", "h2d_pinned", C.BW["h2d_pinned_gbs"], "GB/s")
    if a.validation_only:
        validation_cost(a)
        return finish(a)
    prog = os.path.join(a.build, "functions", "examples", "tables")
    args = ["--tables", str(NTAB), "--table-mib", str(a.table_mib)]
    case = f"tables-{NTAB * a.table_mib // 1024}GiB-1of{NTAB}"
    exact_req = {"table": NTAB - 1, "direct": True}
    opaque_req = {"table": NTAB - 1}
    state = os.path.join(a.workdir, "state")
    shutil.rmtree(state, ignore_errors=True)
    got = {}
    inv = None
    try:
        C.log(f"== {case}: deploy, then the call that records the prefetch order")
        inv = C.Invoker(state, [])
        st, body, _, _ = C.call(inv.port, "POST", "/system/functions",
                                {"name": "tables", "program": prog, "args": args, "device": a.device,
                                 "limits": {"idle_ms": 1000, "timeout_ms": 900000}})
        if st != 201:
            raise S.StepError(f"deploy: {st} {body[:1000]!r}")
        inv.settled("tables")
        st, body, _, _ = C.call(inv.port, "POST", "/function/tables", exact_req, timeout=a.call_timeout)
        want = S.answer(body)
        C.check(f"{case}: the recording call answers the right sum", st == 200 and want and want.get("ok"),
                body[:300])
        with open(os.path.join(state, "snapshots", "tables", "manifest.json")) as f:
            man = json.load(f)
        sizes = {b["id"]: b["size"] for b in man["buffers"]}
        touched = sum(sizes.get(i, 0) for i in man.get("prefetch", []))
        C.record(case, "phos-ondemand-exact", "touched_bytes", touched, "B")
        C.record(case, "phos-ondemand-exact", "snapshot_gpu_bytes", man.get("gpu_bytes", 0), "B")
        if C.BW.get("h2d_pinned_gbs"):
            C.record(case, "limit", "touched_over_h2d_s", touched / (C.BW["h2d_pinned_gbs"] * 1e9), "s")
        # the first cold start after the recording call: the same invoker
        inv.settled("tables")
        st, body, hdrs, dt = C.call(inv.port, "POST", "/function/tables", exact_req, timeout=a.call_timeout)
        C.check(f"{case}: first cold start after recording answers", st == 200 and S.answer(body) == want,
                body[:300])
        C.record(case, "phos-ondemand-exact", "first_cold_after_record_s", dt, "s")
        inv.stop()
        inv = None
        for system, mode, req, w in [("phos-ondemand-exact", "on-demand", exact_req, want),
                                     ("phos-ondemand-opaque", "on-demand", opaque_req, want),
                                     ("phos-stw", "stop-the-world", exact_req, want)]:
            C.log(f"== {case}: {system}")
            inv = C.Invoker(state, ["--restore", mode])

            def cold(inv=inv, req=req):
                inv.settled("tables")
                return C.call(inv.port, "POST", "/function/tables", req, timeout=a.call_timeout)

            got[system] = C.measure(case, system, cold,
                                    lambda inv=inv, req=req: C.call(inv.port, "POST", "/function/tables", req,
                                                                    timeout=a.call_timeout),
                                    w, a.reps, warmup=True)
            inv.stop()
            inv = None
    except (S.StepError, OSError, ValueError) as e:
        C.error(case, "phos", "run", str(e))
    finally:
        if inv:
            inv.stop()

    validation_cost(a)

    lim = [r["value"] for r in C.records if r["case"] == case and r["metric"] == "touched_over_h2d_s"]
    if lim and got.get("phos-ondemand-exact"):
        t = got["phos-ondemand-exact"]
        C.record(case, "phos-ondemand-exact", "first_response_over_limit", t / lim[0], "x")
        C.check(f"{case}: exact first response {1e3 * t:.1f} ms <= 1.2 x touched/H2D + 15 ms "
                f"({1e3 * (1.2 * lim[0] + 0.015):.1f} ms)", t <= 1.2 * lim[0] + 0.015)
    first = [r["value"] for r in C.records if r["metric"] == "first_cold_after_record_s"]
    if lim and first:
        C.check(f"{case}: first cold start after recording {1e3 * first[0]:.1f} ms <= 1.2 x touched/H2D + 15 ms",
                first[0] <= 1.2 * lim[0] + 0.015)
    if got.get("phos-ondemand-opaque") and got.get("phos-stw"):
        o, s = got["phos-ondemand-opaque"], got["phos-stw"]
        C.record(case, "phos-ondemand-opaque", "first_response_over_stw", o / s, "x")
        C.check(f"{case}: opaque first response {1e3 * o:.1f} ms within 1.2 x stop-the-world + 15 ms "
                f"({1e3 * s:.1f} ms)", o <= 1.2 * s + 0.015)

    return finish(a)


def finish(a):
    """Writes the records and checks (with the corpus' records when given); 1 if a check failed."""
    records = []
    if a.corpus and os.path.exists(a.corpus):
        with open(a.corpus) as f:
            records = json.load(f)
    records += [dict(r, bench="speculation") for r in C.records]
    for name, data in [("speculation.json", records), ("speculation.checks.json", C.checks)]:
        with open(os.path.join(C.RESULTS, name), "w") as f:
            json.dump(data, f, indent=1)
        if C.OUT:
            shutil.copy(os.path.join(C.RESULTS, name), C.OUT)
    bad = [c for c in C.checks if not c["ok"]]
    C.log(f"speculation: {len(C.checks) - len(bad)} of {len(C.checks)} checks passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
