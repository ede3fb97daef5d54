# SPDX-License-Identifier: MIT
"""Forwarding benchmarks on the GPU, native and through phos-fn side by side in
one run (issue 2):

  - synchronous call round trip (target <= 10 us)
  - asynchronous launches per second through the channel (target >= 200k/s)
  - mlp steady-state request time, forwarded vs native (target <= 1.05x)

and the checks that belong to the same run: every example answers the same
forwarded as native, and the function process holds no GPU context.
Writes bench/results/forwarding.json (+ .png) and copies them to $OUT.

usage: python3 bench/forwarding.py BUILD_DIR
"""
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
PHOS_FN = os.path.join(BUILD, "invoker", "phos-fn")
EX = os.path.join(BUILD, "functions", "examples")
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
OUT = os.environ.get("OUT")
DATE = datetime.date.today().isoformat()

records = []
checks = []


def gpu_name():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
    except Exception as e:  # noqa: BLE001
        return f"unknown ({e})"


DEVICE = gpu_name()


def record(case, system, metric, value, unit):
    records.append({"bench": "forwarding", "case": case, "system": system, "metric": metric,
                    "value": value, "unit": unit, "device": DEVICE, "date": DATE})
    print(f"  {case:28s} {system:8s} {metric:16s} {value:12.3f} {unit}", flush=True)


def check(name, ok, detail=""):
    checks.append({"check": name, "ok": bool(ok), "detail": detail})
    print(f"  [{'ok' if ok else 'FAIL'}] {name} {detail}", flush=True)


def cmd(system, program, *args):
    if system == "native":
        return [program, *map(str, args)]
    return [PHOS_FN, "run", "--device", "cuda", "--", program, *map(str, args)]


def run_json(system, program, *args, stdin=None, timeout=600):
    p = subprocess.run(cmd(system, program, *args), input=stdin, capture_output=True, text=True,
                       timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{system} {program} exited {p.returncode}: {p.stderr[-3000:]}")
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def micro():
    print("forwarding micro-benchmarks", flush=True)
    prog = os.path.join(BUILD, "bench", "forwarding")
    res = {}
    for system in ("native", "phos"):
        r = run_json(system, prog, 200000, 1000000)[-1]
        res[system] = r
        record("sync_call", system, "round_trip", r["sync_rtt_us"], "us")
        record("async_launch", system, "throughput", r["launches_per_s"], "launches/s")
        record("async_launch_post", system, "throughput", r["post_per_s"], "launches/s")
    check("sync round trip <= 10 us", res["phos"]["sync_rtt_us"] <= 10, f"{res['phos']['sync_rtt_us']:.2f} us")
    check("async launches >= 200k/s", res["phos"]["launches_per_s"] >= 200e3,
          f"{res['phos']['launches_per_s']:.0f}/s")


class Server:
    """A function process answering one JSON line per request line."""

    def __init__(self, system, program, *args):
        self.p = subprocess.Popen(cmd(system, program, *args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, bufsize=1)

    def ask(self, req):
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("function died: " + self.p.stderr.read()[-3000:])
        return json.loads(line)

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=300)
        return self.p.returncode


def has_gpu_mapping(pid):
    """Whether a process maps the driver (libcuda) or a GPU device file."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            maps = f.read()
    except OSError:
        return None
    return "libcuda.so" in maps or "/dev/nvidia" in maps


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def mlp_steady(weights_mib=1024, batch=64, warmup=5, n=50):
    print(f"mlp steady state ({weights_mib} MiB of weights, batch {batch})", flush=True)
    prog = os.path.join(EX, "mlp")
    means = {}
    for system in ("native", "phos"):
        s = Server(system, prog, "--weights-mib", weights_mib)
        for i in range(warmup):
            s.ask({"batch": batch, "seed": i, "check": False})
        times = []
        for i in range(n):
            t0 = time.perf_counter()
            r = s.ask({"batch": batch, "seed": 1000 + i, "check": False})
            times.append((time.perf_counter() - t0) * 1e3)
            if not r.get("ok"):
                check(f"mlp {system} answers", False, str(r))
        if system == "phos":
            # The function process (phos-fn's child that is not the executor) holds no GPU state.
            kids = children(s.p.pid)
            gpu = {k: has_gpu_mapping(k) for k in kids}
            names = {}
            for k in kids:
                try:
                    names[k] = open(f"/proc/{k}/comm").read().strip()
                except OSError:
                    names[k] = "?"
            fn = [k for k in kids if names[k] != "phos-executor"]
            ex = [k for k in kids if names[k] == "phos-executor"]
            smi = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                                  "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
            smi_pids = {int(line.split(",")[0]) for line in smi.splitlines() if line.split(",")[0].strip().isdigit()}
            check("function process maps no GPU driver or device", fn and not any(gpu[k] for k in fn),
                  f"function {fn} {[gpu[k] for k in fn]}, executor {ex} {[gpu[k] for k in ex]}")
            check("nvidia-smi lists no context of the function process", not (set(fn) & smi_pids),
                  f"nvidia-smi: {smi!r}")
        check(f"mlp {system} exits cleanly", s.close() == 0)
        means[system] = statistics.mean(times)
        record(f"mlp-{weights_mib}MiB-b{batch}", system, "request_mean", means[system], "ms")
        record(f"mlp-{weights_mib}MiB-b{batch}", system, "request_median", statistics.median(times), "ms")
    ratio = means["phos"] / means["native"]
    record(f"mlp-{weights_mib}MiB-b{batch}", "phos", "ratio_vs_native", ratio, "x")
    check("mlp forwarded <= 1.05x native", ratio <= 1.05, f"{ratio:.3f}x")


def same_answers():
    print("examples: forwarded vs native", flush=True)
    cases = {
        "vecadd": ([], [{"n": 4096, "seed": 7}, {"n": 1 << 20, "seed": 3, "alpha": -1.5, "scale": 2, "bias": 1}, {}]),
        "gemm": ([], [{"m": 512, "n": 256, "k": 384, "seed": 3}, {"m": 64, "n": 64, "k": 64, "trans_a": True,
                      "trans_b": True, "alpha": 0.5, "beta": 0.25}, {"m": 32, "n": 48, "k": 16, "batch": 4},
                      {"m": 40, "n": 40, "k": 40, "api": "gemmex"}]),
        "mlp": (["--weights-mib", 256], [{"batch": 8, "seed": 1, "check": True}, {"batch": 3, "seed": 2}]),
    }
    for name, (args, reqs) in cases.items():
        stdin = "".join(json.dumps(r) + "\n" for r in reqs)
        native = run_json("native", os.path.join(EX, name), *args, stdin=stdin)
        phos = run_json("phos", os.path.join(EX, name), *args, stdin=stdin)
        ok = len(native) == len(reqs) and all(r.get("ok") for r in phos)
        check(f"{name}: every forwarded answer ok", ok, f"{len(phos)} answers")
        check(f"{name}: forwarded answers identical to native", native == phos,
              "" if native == phos else f"native {native} phos {phos}")


def chart(path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    get = {(r["case"], r["system"], r["metric"]): r["value"] for r in records}
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    panels = [("sync_call", "round_trip", "sync call round trip (us)", 10, "target"),
              ("async_launch", "throughput", "async launches / s", 200e3, "target"),
              (next(r["case"] for r in records if r["case"].startswith("mlp")), "request_mean",
               "mlp request (ms)", None, None)]
    for ax, (case, metric, title, target, tl) in zip(axes, panels):
        vals = [get.get((case, s, metric), 0) for s in ("native", "phos")]
        ax.bar(["native", "phos"], vals, color=["#888", "#2a7"])
        if target:
            ax.axhline(target, color="r", ls="--", lw=1, label=tl)
            ax.legend()
        ax.set_title(title)
    fig.suptitle(f"forwarding, {DEVICE}, {DATE}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    os.makedirs(RESULTS, exist_ok=True)
    for step in (micro, same_answers, mlp_steady):
        try:
            step()
        except Exception as e:  # noqa: BLE001
            check(step.__name__, False, repr(e))
    with open(os.path.join(RESULTS, "forwarding.json"), "w") as f:
        json.dump(records, f, indent=1)
    with open(os.path.join(RESULTS, "forwarding.checks.json"), "w") as f:
        json.dump(checks, f, indent=1)
    chart(os.path.join(RESULTS, "forwarding.png"))
    if OUT:
        for name in ("forwarding.json", "forwarding.checks.json", "forwarding.png"):
            if os.path.exists(os.path.join(RESULTS, name)):
                shutil.copy(os.path.join(RESULTS, name), OUT)
    failed = [c for c in checks if not c["ok"]]
    print(f"forwarding: {len(checks) - len(failed)}/{len(checks)} checks ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
