# SPDX-License-Identifier: MIT
"""What phos-fn run adds to a program's start (issue 12), side by side in one
run: a short CUDA program (vecadd: its init, one request, exit) started

  native          the program alone, on the real CUDA libraries
  phos-fresh      phos-fn run --executor fresh: a new executor and context
  phos-lent       phos-fn run from a `phos-fn pool` started beforehand: a warm
                  executor with its context, lent through the socket

each RUNS times, alternating, on one GPU. Reported: the median and the best
wall time of each, and what each phos form adds over native (median minus
native's median). Every answer must be right.

Writes bench/results/startup.json (records as the other benchmarks) and
copies it to $OUT.

usage: python3 bench/startup.py BUILD_DIR [--device cuda|sim] [--runs 15]
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
DATE = datetime.date.today().isoformat()
REQ = '{"n":1048576,"seed":3}\n'


def gpu_name(device):
    if device != "cuda":
        return "sim (not a measurement)"
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.strip().splitlines()[0]
    except Exception as e:  # noqa: BLE001
        return f"unknown ({e})"


def timed(cmd, env):
    t0 = time.monotonic()
    p = subprocess.run(cmd, input=REQ, capture_output=True, text=True, timeout=120, env=env)
    dt = time.monotonic() - t0
    ok = p.returncode == 0 and '"ok":true' in p.stdout
    return dt, ok, p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--runs", type=int, default=15)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    phos_fn = os.path.join(build, "invoker", "phos-fn")
    vecadd = os.path.join(build, "functions", "examples", "vecadd")
    device = gpu_name(a.device)
    tmp = tempfile.mkdtemp(prefix="phos-startup-")
    sock = os.path.join(tmp, "executors.sock")
    env = dict(os.environ, PHOS_RUN_EXECUTOR="fresh")
    if a.device == "sim":
        env["PHOS_SIM_TWINS"] = os.path.join(build, "functions", "examples", "libphos-twins-examples.so")
    pool = subprocess.Popen([phos_fn, "pool", "--device", a.device, "--size", "2", "--socket", sock],
                            stderr=subprocess.PIPE, text=True, env=env)
    for _ in range(600):
        if os.path.exists(sock):
            break
        time.sleep(0.05)
    time.sleep(1.0)   # the executors finish warming (cuBLAS) before the first lend
    forms = {
        "native": [vecadd] if a.device == "cuda" else None,
        "phos-fresh": [phos_fn, "run", "--device", a.device, "--executor", "fresh", "--", vecadd],
        "phos-lent": [phos_fn, "run", "--device", a.device, "--executor", sock, "--", vecadd],
    }
    times = {k: [] for k, v in forms.items() if v}
    bad = []
    try:
        for i in range(a.runs + 1):   # run 0 warms the page cache and the driver
            for name, cmd in forms.items():
                if not cmd:
                    continue
                dt, ok, p = timed(cmd, env)
                if not ok:
                    bad.append((name, i, p.returncode, p.stderr[-400:]))
                elif i:
                    times[name].append(dt)
    finally:
        pool.send_signal(signal.SIGTERM)
        try:
            pool.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pool.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    records = []

    def record(case, system, metric, value, unit, **extra):
        r = {"bench": "startup", "case": case, "system": system, "metric": metric, "value": value, "unit": unit,
             "device": device, "date": DATE}
        r.update(extra)
        records.append(r)
        print(f"  {case:10s} {system:11s} {metric:14s} {value:10.4f} {unit}", flush=True)

    for name, ts in times.items():
        if ts:
            record("vecadd", name, "median_s", statistics.median(ts), "s", runs=len(ts))
            record("vecadd", name, "best_s", min(ts), "s", runs=len(ts))
    base = statistics.median(times["native"]) if times.get("native") else None
    for name in ("phos-fresh", "phos-lent"):
        if base is not None and times.get(name):
            record("vecadd", name, "added_s", statistics.median(times[name]) - base, "s")
    if times.get("phos-fresh") and times.get("phos-lent"):
        record("vecadd", "phos-lent", "saved_vs_fresh_s",
               statistics.median(times["phos-fresh"]) - statistics.median(times["phos-lent"]), "s")
    record("vecadd", "all", "wrong_answers", len(bad), "runs", failures=[str(b) for b in bad[:5]])
    os.makedirs(RESULTS, exist_ok=True)
    out = os.path.join(RESULTS, "startup.json" if a.device == "cuda" else "startup-sim.json")
    with open(out, "w") as f:
        json.dump(records, f, indent=1)
    if os.environ.get("OUT"):
        shutil.copy(out, os.environ["OUT"])
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
