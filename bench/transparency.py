#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The transparency suite as a whole (issue 12): every program of
tests/transparency/*/ natively (only where a GPU is) and under `phos-fn run`
(sim in CI, cuda on the GPU), each judged by its exit status.

    bench/transparency.py BUILD [--device auto|sim|cuda] [--native auto|yes|no]
                          [--programs DIR] [--out FILE]

Programs are found, not listed: every executable that the build put in a
folder of BUILD/tests/transparency/ (an area) is one. A new area needs no edit
here. An area may say more in a runner.json beside its sources (or beside its
programs, for --programs):

    {"dlopen_cudart": {"args": ["{dir}/lib/libcudart.so.13"]},
     "pool_serve": {"stdin": "x\\nx\\n"},
     "driver_probe": {"skip": "a probe of the guard, not a CUDA program"},
     "big_sample": {"sim": false, "why": "no sim twin for its kernels"},
     "xt_syrk": {"refused": "cublasXt's syrk is not run"},
     "sort": {"same_output": true}}

({dir}: the program's folder.) A program that phos-fn refuses by design
("refused") still counts 0 under phos, but does not fail the run. A program
that prints its results instead of checking them ("same_output") passes under
phos only with the native run's output, byte for byte (where native runs). A program passes under phos only if it was
really forwarded: phos-fn did not refuse it (its guard, runtime/guard/guard.h: no
real libcuda mapped, no /dev/nvidia* opened, no real libcudart loaded) and the
executor's trace holds its calls. Writes bench/results/transparency.json:
per program, records for systems native and phos with metrics passed (1/0)
and seconds (or one record with metric skipped and why), then the totals
(case "total": passed programs of how many, seconds); and transparency.checks.json beside it. Exits
1 when a program that passes natively fails under phos (or, without native
runs, when any fails under phos).
"""
import argparse
import datetime
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUARD_EXIT = 121   # runtime/guard/guard.h
TIMEOUT_S = 300


def has_gpu():
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def device_name(device):
    if device != "cuda":
        return "sim"
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=60)
        return p.stdout.strip().splitlines()[0]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return "cuda"


def is_program(path):
    if not os.path.isfile(path) or not os.access(path, os.X_OK) or ".so" in os.path.basename(path):
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def area_config(programs_dir, area):
    """The area's runner.json: beside its programs first, then its sources."""
    for d in (os.path.join(programs_dir, area), os.path.join(ROOT, "tests", "transparency", area)):
        path = os.path.join(d, "runner.json")
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
    return {}


def discover(programs_dir):
    """[(area, name, path, config)] of every program, sorted."""
    found = []
    for area_dir in sorted(glob.glob(os.path.join(programs_dir, "*"))):
        if not os.path.isdir(area_dir):
            continue
        area = os.path.basename(area_dir)
        cfg = area_config(programs_dir, area)
        for path in sorted(glob.glob(os.path.join(area_dir, "*"))):
            if is_program(path):
                name = os.path.basename(path)
                found.append((area, name, path, cfg.get(name, {})))
    return found


def sim_twins(build):
    """Every sim twin plugin the build made (PHOS_SIM_TWINS)."""
    return ":".join(sorted(glob.glob(os.path.join(build, "**", "libphos-twins-*.so"), recursive=True)))


def run_one(cmd, stdin, env):
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = 124, str(e.stdout or ""), f"timed out after {TIMEOUT_S} s"
    return rc, time.monotonic() - t0, out, err


def trace_ops(path):
    ops = 0
    try:
        with open(path) as f:
            for line in f:
                if line.strip() and json.loads(line).get("op") != "reply":
                    ops += 1
    except (OSError, ValueError):
        pass
    return ops


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build")
    ap.add_argument("--device", default="auto", choices=["auto", "sim", "cuda"])
    ap.add_argument("--native", default="auto", choices=["auto", "yes", "no"])
    ap.add_argument("--programs", help="folder of areas (default BUILD/tests/transparency)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "transparency.json"))
    a = ap.parse_args()

    build = os.path.abspath(a.build)
    gpu = has_gpu()
    device = a.device if a.device != "auto" else ("cuda" if gpu else "sim")
    native = gpu if a.native == "auto" else a.native == "yes"
    phos_fn = os.path.join(build, "invoker", "phos-fn")
    programs_dir = a.programs or os.path.join(build, "tests", "transparency")
    base_env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "LD_AUDIT")}
    phos_env = dict(os.environ, PHOS_SIM_TWINS=sim_twins(build))
    if os.environ.get("PHOS_TEST_PRELOAD"):   # sanitizer builds (tools/test --sanitize): the runtime first
        phos_env["LD_PRELOAD"] = os.environ["PHOS_TEST_PRELOAD"]
    dev, date = device_name(device), datetime.date.today().isoformat()

    records, failures, known = [], [], []

    def record(case, system, metric, value, unit, **extra):
        r = {"bench": "transparency", "case": case, "system": system, "metric": metric, "value": value,
             "unit": unit, "device": dev, "date": date}
        r.update(extra)
        records.append(r)

    def skip(case, why):
        record(case, "phos", "skipped", 1, "", why=why)
        print(f"{case:40s} skipped: {why}", flush=True)

    progs = discover(programs_dir)
    if not progs:
        print(f"transparency: no programs under {programs_dir}", file=sys.stderr)
        return 1
    tmp = tempfile.mkdtemp(prefix="phos-transparency-")
    for area, name, path, cfg in progs:
        case = f"{area}/{name}"
        if cfg.get("skip"):
            skip(case, cfg["skip"])
            continue
        args = [s.replace("{dir}", os.path.dirname(path)) for s in cfg.get("args", [])]
        stdin = cfg.get("stdin", "")
        nat_ok, nat_out = None, None
        if native:
            rc, secs, nat_out, err = run_one([path, *args], stdin, base_env)
            nat_ok = rc == 0
            record(case, "native", "passed", int(nat_ok), "", exit=rc)
            record(case, "native", "seconds", round(secs, 3), "s")
        if device == "sim" and cfg.get("sim") is False:
            skip(case, "GPU only: " + cfg.get("why", "no sim twins"))
            continue
        trace = os.path.join(tmp, name + ".trace")
        rc, secs, out, err = run_one([phos_fn, "run", "--device", device, "--trace", trace, "--", path, *args],
                                     stdin, phos_env)
        ops = trace_ops(trace)
        refused = rc == GUARD_EXIT and "refusing" in err
        forwarded = not refused and ops > 0
        # a program that prints its results instead of checking them: the same output as natively
        same = not cfg.get("same_output") or nat_out is None or out == nat_out
        ok = rc == 0 and forwarded and same
        last = (err.strip().splitlines() or [""])[-1][:300]
        why = "" if ok else ("refused by the guard: " + last if refused else
                             "exit 0 but no call reached the executor: " + last if rc == 0 and not forwarded else
                             "its output differs from the native run's" if rc == 0 else f"exit {rc}: " + last)
        record(case, "phos", "passed", int(ok), "", exit=rc, forwarded=int(forwarded), forwarded_ops=ops,
               **({"why": why} if why else {}))
        record(case, "phos", "seconds", round(secs, 3), "s")
        print(f"{case:40s} native {'-' if nat_ok is None else int(nat_ok)}  phos {int(ok)}  "
              f"{secs:6.2f} s  {ops} ops{'  ' + why if why else ''}", flush=True)
        if not ok and nat_ok is not False:
            if cfg.get("refused"):
                known.append(f"{case}: {cfg['refused']}")
            else:
                failures.append(f"{case}: {why}")

    ran = [r for r in records if r["metric"] == "passed"]
    for system in ("native", "phos"):
        mine = [r for r in ran if r["system"] == system]
        if mine:
            record("total", system, "passed", sum(r["value"] for r in mine), "programs", programs=len(mine))
            record("total", system, "seconds", round(sum(r["value"] for r in records if r["system"] == system
                                                          and r["metric"] == "seconds" and r["case"] != "total"), 3), "s")
    checks = [{"check": "every program that passes natively (every one, without native runs) passes under phos, "
                        "really forwarded", "ok": not failures, "detail": "; ".join(failures)},
              {"check": "programs phos-fn refuses by design (runner.json \"refused\"), failing under phos",
               "ok": True, "detail": "; ".join(known)}]
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(records, f, indent=1)
    with open(os.path.splitext(a.out)[0] + ".checks.json", "w") as f:
        json.dump(checks, f, indent=1)
    tot = {(r["system"], r["metric"]): r for r in records if r["case"] == "total"}
    for system in ("native", "phos"):
        if (system, "passed") in tot:
            t = tot[(system, "passed")]
            print(f"transparency: {system} {t['value']}/{t['programs']} passed, "
                  f"{tot[(system, 'seconds')]['value']:.1f} s")
    print(f"transparency: {sum(r['metric'] == 'skipped' for r in records)} skipped; wrote {a.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
