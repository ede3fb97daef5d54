#!/usr/bin/env python3
"""CUDA graph launches natively and under phos-fn (issue 12), side by side.

Runs bench/graphs (a chain of K tiny kernels captured from a stream, and a
conditional while loop of K rounds) natively, under `phos-fn run` with the
graph made on the device (the default: one record a launch), and under
`phos-fn run` with PHOS_GRAPHS=replay (graphs without conditional nodes
replayed node by node, as before; the while loop is made on the device
either way), all in this run. Writes bench/results/graphs.json:
records per case with systems `native`, `phos-replay` and `phos-device`,
metric `seconds_per_launch`, and `over_native` for each phos system; and
bench/results/graphs.checks.json: every run's results right, and a graph
made on the device within 2x of native per launch (plus 20 us for the
record) where native takes 50 us or more.

usage: bench/graphs.py BUILD [--sizes 10,100,1000] [--reps 50]
"""
import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, env):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr[-3000:]}")
    return {r["case"]: r for r in (json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{"))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--reps", default="50")
    a = ap.parse_args()
    prog = [os.path.join(a.build, "bench", "graphs"), "--sizes", a.sizes, "--reps", a.reps]
    phos = [os.path.join(a.build, "invoker", "phos-fn"), "run", "--device", "cuda", "--"]
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout.strip().splitlines()[0]
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop("PHOS_GRAPHS", None)
    results = {"native": run(prog, env), "phos-replay": run(phos + prog, dict(env, PHOS_GRAPHS="replay"))}
    results["phos-device"] = run(phos + prog, env)
    date = datetime.date.today().isoformat()
    records, checks = [], []
    for system, rows in results.items():
        for case, r in rows.items():
            records.append({"bench": "graphs", "case": case, "system": system, "metric": "seconds_per_launch",
                            "value": r["seconds_per_launch"], "unit": "s", "kernels": r["kernels"],
                            "device": gpu, "date": date})
            checks.append({"check": f"{case} {system}: the result is right", "ok": bool(r["ok"])})
    print(f"  {'case':12s} {'native':>11s} {'phos replay':>13s} {'phos device':>13s}   replay/native "
          "device/native", flush=True)
    for case, nat in results["native"].items():
        n = nat["seconds_per_launch"]
        cells = []
        for system in ("phos-replay", "phos-device"):
            r = results[system].get(case)
            if r is None:
                cells.append(None)
                continue
            cells.append(r["seconds_per_launch"])
            records.append({"bench": "graphs", "case": case, "system": system, "metric": "over_native",
                            "value": r["seconds_per_launch"] / n, "unit": "x", "device": gpu, "date": date})
        dev = results["phos-device"].get(case)
        if dev and n >= 50e-6:
            ok = dev["seconds_per_launch"] <= 2 * n + 20e-6
            checks.append({"check": f"{case}: made on the device, {dev['seconds_per_launch'] * 1e6:.1f} us a launch "
                                    f"<= 2 x native {n * 1e6:.1f} us + 20 us", "ok": ok})
        fmt = lambda v: f"{v * 1e6:10.1f} us" if v is not None else f"{'-':>13s}"
        ratio = lambda v: f"{v / n:8.2f}x" if v is not None else f"{'-':>9s}"
        print(f"  {case:12s} {n * 1e6:8.1f} us {fmt(cells[0])} {fmt(cells[1])}   {ratio(cells[0])}     "
              f"{ratio(cells[1])}", flush=True)
    out = os.path.join(HERE, "results")
    os.makedirs(out, exist_ok=True)
    for name, data in (("graphs.json", records), ("graphs.checks.json", checks)):
        with open(os.path.join(out, name), "w") as f:
            json.dump(data, f, indent=1)
        if os.environ.get("OUT"):
            shutil.copy(os.path.join(out, name), os.environ["OUT"])
    bad = [c for c in checks if not c["ok"]]
    for c in bad:
        print(f"  FAILED: {c['check']}")
    print(f"graphs: {len(checks) - len(bad)} of {len(checks)} checks passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
