#!/usr/bin/env python3
"""All-reduce bus bandwidth, natively and forwarded by phos-fn, side by side
(issues 14 and 15).

Runs bench/nccl_bench with one process per rank, rank r on GPU r: natively
(the program on the real libraries, device r of the host), then under
`phos-fn run --gpu r` (each rank's calls forwarded to an executor that owns GPU
r), alternating for --rounds rounds and keeping each size's best. Writes
bench/results/nccl.json: per size (case `allreduce-<size>`) the bus bandwidth
of systems `native` and `phos-fn` (metric `busbw_GBps`), and for `phos-fn`
`busbw_ratio` (phos over native; sizes from 64 MiB up, target >= 0.95) or
`busbw_ratio_small` (smaller sizes, where the forwarding of each call shows);
bench/results/nccl.checks.json, and nccl.png when matplotlib is there. Every
run also checks the sums (nccl_bench exits 1 on a wrong one). The cold start
of tp_mlp on two GPUs is bench/tp_coldstart.py's: its records (cases
tp_mlp-*) share these files and stay when this script rewrites them.

usage: bench/nccl.py BUILD [--ranks N] [--min BYTES] [--max BYTES] [--rounds R]
Needs N GPUs (default: all, at least 2); exits 77 with fewer.
"""
import argparse
import datetime
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
MIB = 1 << 20


def gpus():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [ln.strip() for ln in out.splitlines() if ln.strip()]


def nccl_lib_dir():
    """pip's nvidia-nccl (the GPU image has it) for the native runs: the toolkit may have no libnccl."""
    for d in sorted(glob.glob("/usr/local/lib/python3*/*-packages/nvidia/nccl/lib") +
                    glob.glob("/usr/lib/python3*/*-packages/nvidia/nccl/lib")):
        return d
    return None


def ranks(cmds, envs, timeout=600):
    """Starts every rank at once; their JSON lines, by rank. Exits on any failure."""
    procs = [subprocess.Popen(c, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=e) for c, e in zip(cmds, envs)]
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise SystemExit(f"nccl: {' '.join(p.args)}: timed out")
        if p.returncode != 0:
            for q in procs:
                q.kill()
            raise SystemExit(f"nccl: {' '.join(p.args)}: exit {p.returncode}\n{err[-3000:]}")
        outs.append([json.loads(ln) for ln in out.splitlines() if ln.startswith("{")])
    return outs


def size_name(b):
    return f"{b // MIB}MiB" if b < 1 << 30 else f"{b >> 30}GiB"


def chart(path, sizes, best):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no chart)")
        return False
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for system, style in (("native", "o-"), ("phos-fn", "s--")):
        ax.plot([s / MIB for s in sizes], [best[system][s] for s in sizes], style, label=system)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (MiB)")
    ax.set_ylabel("all-reduce bus bandwidth (GB/s)")
    ax.set_title("NCCL all-reduce, one process per GPU: native vs forwarded")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--ranks", type=int, default=0)
    ap.add_argument("--min", type=int, default=MIB)
    ap.add_argument("--max", type=int, default=1 << 30)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    names = gpus()
    n = a.ranks or len(names)
    if n < 2 or len(names) < n:
        print(f"nccl: needs at least 2 GPUs and one per rank ({len(names)} here): skipped")
        return 77
    prog = os.path.join(a.build, "bench", "nccl_bench")
    phos_fn = os.path.join(a.build, "invoker", "phos-fn")
    base = dict(os.environ, NCCL_NVLS_ENABLE="0")
    base.pop("LD_PRELOAD", None)
    native_env = dict(base)
    lib = nccl_lib_dir()
    if lib:
        native_env["LD_LIBRARY_PATH"] = f"{base.get('LD_LIBRARY_PATH', '')}:{lib}".strip(":")
    tmp = tempfile.mkdtemp(prefix="phos-nccl-bench-")
    best = {"native": {}, "phos-fn": {}}
    try:
        for rnd in range(a.rounds):
            for system in ("native", "phos-fn"):
                idfile = os.path.join(tmp, f"id-{system}-{rnd}")
                args = ["--min", str(a.min), "--max", str(a.max)]
                if system == "native":
                    cmds = [[prog, str(r), str(n), idfile, *args] for r in range(n)]
                    envs = [native_env] * n
                else:
                    cmds = [[phos_fn, "run", "--device", "cuda", "--gpu", str(r), "--", prog, str(r), str(n), idfile,
                             *args] for r in range(n)]
                    envs = [base] * n
                outs = ranks(cmds, envs)
                # A size's time is its slowest rank's (they finish each all-reduce together).
                for rows in zip(*outs):
                    b = rows[0]["bytes"]
                    bw = min(r["busbw_GBps"] for r in rows)
                    best[system][b] = max(best[system].get(b, 0.0), bw)
                print(f"round {rnd} {system}: " + " ".join(
                    f"{size_name(rows[0]['bytes'])}={min(x['busbw_GBps'] for x in rows):.1f}" for rows in zip(*outs)),
                    flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    date = datetime.date.today().isoformat()
    device = f"{n} x {names[0]}"
    records, checks = [], []
    sizes = sorted(best["native"])
    for b in sizes:
        case = f"allreduce-{size_name(b)}"
        for system in ("native", "phos-fn"):
            records.append({"bench": "nccl", "case": case, "system": system, "metric": "busbw_GBps",
                            "value": round(best[system][b], 3), "unit": "GB/s", "device": device, "date": date})
        ratio = best["phos-fn"][b] / best["native"][b]
        metric = "busbw_ratio" if b >= 64 * MIB else "busbw_ratio_small"
        records.append({"bench": "nccl", "case": case, "system": "phos-fn", "metric": metric,
                        "value": round(ratio, 4), "unit": "x", "device": device, "date": date})
        if b >= 64 * MIB:
            checks.append({"check": f"{case}: phos-fn {best['phos-fn'][b]:.1f} GB/s >= 0.95 x native "
                                    f"{best['native'][b]:.1f} GB/s", "ok": ratio >= 0.95})
        print(f"  {case:18s} native {best['native'][b]:8.2f} GB/s  phos-fn {best['phos-fn'][b]:8.2f} GB/s  "
              f"{ratio:5.3f}x", flush=True)
    os.makedirs(RESULTS, exist_ok=True)
    files = ["nccl.json", "nccl.checks.json"]
    for name, data, key in zip(files, (records, checks), ("case", "check")):
        try:   # bench/tp_coldstart.py's cold-start records share the files: they stay
            with open(os.path.join(RESULTS, name)) as f:
                data = [x for x in json.load(f) if str(x.get(key, "")).startswith("tp_mlp-")] + data
        except (OSError, ValueError):
            pass
        with open(os.path.join(RESULTS, name), "w") as f:
            json.dump(data, f, indent=1)
    if chart(os.path.join(RESULTS, "nccl.png"), sizes, best):
        files.append("nccl.png")
    if os.environ.get("OUT"):
        for name in files:
            shutil.copy(os.path.join(RESULTS, name), os.environ["OUT"])
    bad = [c for c in checks if not c["ok"]]
    print(f"nccl: {len(checks) - len(bad)} of {len(checks)} checks passed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
