#!/usr/bin/env python3
"""Host memory copies natively and under phos-fn (issue 12), side by side.

Runs bench/hostcopy (pageable, registered and pinned host memory; H2D and D2H;
64 MiB and 1 GiB by default) natively and under `phos-fn run`, in this run,
and writes bench/results/hostcopy.json: records per case with systems `native`
and `phos` (metric `gbs`, GB/s, decimal) and `phos_over_native` (the target is
>= 0.8 for each), plus bench/results/hostcopy.checks.json.

usage: bench/hostcopy.py BUILD [--mib 64,1024] [--reps 10] [--device cuda|sim]
"""
import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr[-3000:]}")
    return [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--mib", default="64,1024")
    ap.add_argument("--reps", default="10")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    prog = [os.path.join(a.build, "bench", "hostcopy"), "--mib", a.mib, "--reps", a.reps]
    gpu = "sim"
    if a.device == "cuda":
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True).stdout.strip().splitlines()[0]
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    results = {}
    if a.device == "cuda":
        results["native"] = run(prog, env)
    results["phos"] = run([os.path.join(a.build, "invoker", "phos-fn"), "run", "--device", a.device, "--", *prog], env)
    date = datetime.date.today().isoformat()
    records, checks = [], []
    key = lambda r: f"{r['kind']}-{r['dir']}-{r['mib']}MiB"
    for system, rows in results.items():
        for r in rows:
            records.append({"bench": "hostcopy", "case": key(r), "system": system, "metric": "gbs",
                            "value": r["gbs"], "unit": "GB/s", "device": gpu, "date": date})
    native = {key(r): r["gbs"] for r in results.get("native", [])}
    for r in results["phos"]:
        if key(r) in native:
            ratio = r["gbs"] / native[key(r)]
            records.append({"bench": "hostcopy", "case": key(r), "system": "phos", "metric": "phos_over_native",
                            "value": ratio, "unit": "x", "device": gpu, "date": date})
            checks.append({"check": f"{key(r)}: phos {r['gbs']:.2f} GB/s >= 0.8 x native {native[key(r)]:.2f}",
                           "ok": ratio >= 0.8})
            print(f"  {key(r):28s} native {native[key(r)]:7.2f} GB/s  phos {r['gbs']:7.2f} GB/s  {ratio:5.2f}x "
                  f"{'ok' if ratio >= 0.8 else 'LOW'}", flush=True)
        else:
            print(f"  {key(r):28s} phos {r['gbs']:7.2f} GB/s", flush=True)
    out = os.path.join(HERE, "results")
    os.makedirs(out, exist_ok=True)
    for name, data in (("hostcopy.json", records), ("hostcopy.checks.json", checks)):
        with open(os.path.join(out, name), "w") as f:
            json.dump(data, f, indent=1)
        if os.environ.get("OUT"):
            shutil.copy(os.path.join(out, name), os.environ["OUT"])
    bad = [c for c in checks if not c["ok"]]
    print(f"hostcopy: {len(checks) - len(bad)} of {len(checks)} checks passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
