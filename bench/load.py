# SPDX-License-Identifier: MIT
"""The invoker under load (issue 10): requests per second and latency of a warm
function at concurrency 1, 8, 64, 256 and 1024, then a soak at one concurrency
with the invoker's RSS, open fds and threads sampled (they must stay flat).

Slow clients (issue 37): bench/trickle holds --trickle connections (4096)
from 8 loopback addresses (127.0.0.2-9), each sending a header byte every
second and never finishing; meanwhile a well-behaved client on 127.0.0.1
calls at concurrency 1 and 8. Its latency is compared with the same client
alone in the same run, and the invoker's threads and descriptors sampled.

The function is vecadd with 1024 elements on the sim device (this measures the
invoker: HTTP, queueing, the instance's framed channel; not a GPU), deployed
with max_instances 4 and a queue deep enough for the highest concurrency.
Clients are bench/loadgen (C, epoll, keep-alive, closed loop) on loopback.

Writes bench/results/load.json (records as the other benchmarks: bench "load")
and load.png when matplotlib is there; copies them to $OUT.

usage: python3 bench/load.py BUILD_DIR [--seconds 10] [--soak 600] [--soak-concurrency 64] [--trickle 4096]

Records of cases not run this time are kept from the file's earlier runs.
"""
import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import coldstart as C  # noqa: E402  (the invoker driver and its HTTP call)

RESULTS = os.path.join(HERE, "results")
DATE = datetime.date.today().isoformat()
records = []
REQUEST = json.dumps({"n": 1024, "seed": 1})


def record(case, metric, value, unit, **extra):
    r = {"bench": "load", "case": case, "system": "phos-invoker", "metric": metric, "value": value,
         "unit": unit, "device": f"sim ({os.cpu_count()}-core host)", "date": DATE}
    r.update(extra)
    records.append(r)
    print(f"  {case:12s} {metric:20s} {value!s:>12} {unit}", flush=True)


def proc_sample(pid):
    """(RSS KiB, open fds, threads) of pid and its threads."""
    rss = thr = 0
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                rss = int(ln.split()[1])
            elif ln.startswith("Threads:"):
                thr = int(ln.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd")), thr


LOADGEN = None


def loadgen(build, port, c, secs, grace=120):
    p = subprocess.run([LOADGEN or os.path.join(build, "bench", "loadgen"), "127.0.0.1", str(port), "/function/vecadd",
                        REQUEST, str(c), str(secs)], capture_output=True, text=True, timeout=secs + grace)
    if p.returncode != 0:
        raise RuntimeError(f"loadgen c={c}: {p.stderr[-1000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def trickle_case(a, inv, system="phos-invoker"):
    """The well-behaved client alone, then among a.trickle trickling connections."""
    case = f"trickle-{a.trickle}x{a.trickle_sources}" + ("" if system == "phos-invoker" else f"-{system}")

    def measure(c):
        try:
            r = loadgen(a.build, inv.port, c, a.seconds, grace=20)
            if not r["requests"]:   # no answer at all: no latency to speak of
                r.update(p50_ms=None, p99_ms=None, locked_out=True)
            return r
        except (RuntimeError, subprocess.TimeoutExpired) as e:   # locked out: no connection at all
            return {"p50_ms": None, "p99_ms": None, "rps": 0.0, "errors": None, "status": {}, "failed": str(e)[-300:]}

    alone = measure(1)
    total = 3600   # ended below
    tp = subprocess.Popen([os.path.join(a.build, "bench", "trickle"), "127.0.0.1", str(inv.port), str(a.trickle),
                           str(a.trickle_sources), str(total), "1000"], stdout=subprocess.PIPE, text=True)
    samples, stop = [], threading.Event()

    def sampler():
        while not stop.wait(0.5):
            samples.append(proc_sample(inv.p.pid))

    rest = proc_sample(inv.p.pid)
    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    time.sleep(6)     # every connection opened, the first ones past --header-timeout
    under1 = measure(1)
    under8 = measure(8)
    tp.terminate()
    out, _ = tp.communicate(timeout=60)
    stop.set()
    th.join()
    t = json.loads(out.strip().splitlines()[-1])
    try:
        _, m, _, _ = C.call(inv.port, "GET", "/metrics", timeout=10)
    except OSError:
        m = b""
    cut = [int(ln.split()[1]) for ln in m.decode(errors="replace").splitlines()
           if ln.startswith("phos_http_connections_cut_total ")]
    mark = len(records)
    record(case, "p50_alone_c1", alone["p50_ms"], "ms")
    record(case, "p99_alone_c1", alone["p99_ms"], "ms")
    record(case, "p50_c1", under1["p50_ms"], "ms")
    record(case, "p99_c1", under1["p99_ms"], "ms")
    record(case, "p99_c8", under8["p99_ms"], "ms")
    record(case, "requests_per_s_c1", round(under1["rps"], 1), "req/s")
    record(case, "requests_per_s_c8", round(under8["rps"], 1), "req/s")
    record(case, "errors", [under1["errors"], under8["errors"]], "requests",
           status=[under1["status"], under8["status"]], failed=[under1.get("failed"), under8.get("failed")])
    if under1["p99_ms"] is not None and alone["p99_ms"]:
        record(case, "p99_ratio_to_alone", round(under1["p99_ms"] / max(alone["p99_ms"], 1e-3), 2), "x")
    record(case, "trickling_open_median", t["open_median"], "connections", trickle=t)
    record(case, "cut_by_deadline", cut[0] if cut else None, "connections")
    record(case, "invoker_threads_rest_max", [rest[2], max(s[2] for s in samples)], "threads")
    record(case, "invoker_fds_rest_max", [rest[1], max(s[1] for s in samples)], "fds")
    for r in records[mark:]:
        r["system"] = system


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--seconds", type=float, default=10, help="per concurrency level")
    ap.add_argument("--levels", default="1,8,64,256,1024")
    ap.add_argument("--soak", type=float, default=600, help="seconds of the RSS soak (0: none)")
    ap.add_argument("--soak-concurrency", type=int, default=64)
    ap.add_argument("--invoker-args", default="--max-connections 8192 --max-connections-per-ip 1024 --pool 2",
                    help="(an older invoker, for a comparison, knows fewer options)")
    ap.add_argument("--trickle", type=int, default=4096, help="trickling connections (0: none)")
    ap.add_argument("--trickle-sources", type=int, default=8)
    ap.add_argument("--baseline-invoker", help="an older phos-invoker to run the trickle case on too, in the same "
                    "run, with its own defaults (as NAME=PATH)")
    ap.add_argument("--name", default="load", help="results as bench/results/NAME.json")
    ap.add_argument("--loadgen", help="the load generator (default BUILD_DIR/bench/loadgen)")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    a.device = "sim"
    global LOADGEN
    LOADGEN = a.loadgen
    C.A = a
    os.environ.setdefault("PHOS_SIM_TWINS", os.path.join(a.build, "functions", "examples",
                                                         "libphos-twins-examples.so"))
    os.environ["PHOS_LOG"] = "warn"
    levels = [int(x) for x in a.levels.split(",") if x]
    a.workdir = tempfile.mkdtemp(prefix="phos-load-")
    state = os.path.join(a.workdir, "state")
    inv = C.Invoker(state, a.invoker_args.split())
    try:
        prog = os.path.join(a.build, "functions", "examples", "vecadd")
        st, body, _, _ = C.call(inv.port, "POST", "/system/functions",
                                {"name": "vecadd", "program": prog, "args": ["--elements", "1024"], "device": "sim",
                                 "limits": {"max_instances": 4, "max_inflight": 1024, "timeout_ms": 60000,
                                            "idle_ms": 3600000}})
        if st != 201:
            raise RuntimeError(f"deploy: {st} {body[:500]!r}")
        for _ in range(20):     # warm: instances restored
            C.call(inv.port, "POST", "/function/vecadd", REQUEST)
        for c in levels:
            r = loadgen(a.build, inv.port, c, a.seconds)
            case = f"c{c}"
            record(case, "requests_per_s", round(r["rps"], 1), "req/s")
            record(case, "p50", r["p50_ms"], "ms")
            record(case, "p99", r["p99_ms"], "ms")
            record(case, "errors", r["errors"], "requests", status=r["status"])
            rss, fds, thr = proc_sample(inv.p.pid)
            record(case, "invoker_rss", rss, "KiB")
        if a.trickle > 0:
            trickle_case(a, inv)
            if a.baseline_invoker:
                name, path = a.baseline_invoker.split("=", 1)
                old = C.Invoker(os.path.join(a.workdir, "state-old"), ["--pool", "2"], binary=path)
                try:
                    st, body, _, _ = C.call(old.port, "POST", "/system/functions",
                                            {"name": "vecadd", "program": prog, "args": ["--elements", "1024"],
                                             "device": "sim", "limits": {"max_instances": 4, "max_inflight": 1024,
                                                                         "timeout_ms": 60000, "idle_ms": 3600000}})
                    if st != 201:
                        raise RuntimeError(f"deploy on {name}: {st} {body[:500]!r}")
                    for _ in range(20):
                        C.call(old.port, "POST", "/function/vecadd", REQUEST)
                    trickle_case(a, old, system=name)
                finally:
                    old.stop()
        if a.soak > 0:
            samples = []
            stop = threading.Event()

            def sampler():
                t0 = time.time()
                while not stop.wait(5):
                    samples.append((round(time.time() - t0, 1), *proc_sample(inv.p.pid)))

            samples.append((0.0, *proc_sample(inv.p.pid)))
            th = threading.Thread(target=sampler, daemon=True)
            th.start()
            r = loadgen(a.build, inv.port, a.soak_concurrency, a.soak)
            stop.set()
            th.join()
            samples.append((round(a.soak, 1), *proc_sample(inv.p.pid)))
            case = f"soak-c{a.soak_concurrency}-{int(a.soak)}s"
            record(case, "requests_per_s", round(r["rps"], 1), "req/s")
            record(case, "p99", r["p99_ms"], "ms")
            record(case, "errors", r["errors"], "requests", status=r["status"])
            # after the first minute (pools and caches filled), RSS must not grow
            settled = [s for s in samples if s[0] >= 60] or samples
            record(case, "invoker_rss_start", samples[0][1], "KiB")
            record(case, "invoker_rss_after_60s", settled[0][1], "KiB")
            record(case, "invoker_rss_end", samples[-1][1], "KiB")
            record(case, "invoker_rss_growth_after_60s", samples[-1][1] - settled[0][1], "KiB")
            record(case, "invoker_fds_start_end", [samples[0][2], samples[-1][2]], "fds")
            record(case, "invoker_threads_start_end", [samples[0][3], samples[-1][3]], "threads")
            record(case, "series", [list(s) for s in samples], "[s, rss KiB, fds, threads]")
    finally:
        inv.stop()
        shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"{a.name}.json")
    ran = {r["case"] for r in records}
    try:
        with open(path) as f:
            kept = [r for r in json.load(f) if r.get("case") not in ran]
    except (OSError, ValueError):
        kept = []
    with open(path, "w") as f:
        json.dump(kept + records, f, indent=1)
    if levels:
        chart(os.path.join(RESULTS, f"{a.name}.png"), levels)
    if os.environ.get("OUT"):
        for n in (f"{a.name}.json", f"{a.name}.png"):
            if os.path.exists(os.path.join(RESULTS, n)):
                shutil.copy(os.path.join(RESULTS, n), os.environ["OUT"])
    return 0


def chart(path, levels):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no chart)")
        return
    get = {(r["case"], r["metric"]): r["value"] for r in records}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    xs = list(range(len(levels)))
    axes[0].bar(xs, [get.get((f"c{c}", "requests_per_s"), 0) for c in levels], color="#2a7")
    axes[0].set_xticks(xs)
    axes[0].set_xticklabels([str(c) for c in levels])
    axes[0].set_xlabel("concurrent clients")
    axes[0].set_ylabel("requests/s")
    ax2 = axes[0].twinx()
    ax2.plot(xs, [get.get((f"c{c}", "p50"), 0) for c in levels], "k.-", label="p50")
    ax2.plot(xs, [get.get((f"c{c}", "p99"), 0) for c in levels], "r.-", label="p99")
    ax2.set_yscale("log")
    ax2.set_ylabel("latency (ms)")
    ax2.legend(fontsize=8, loc="upper left")
    series = [r["value"] for r in records if r["metric"] == "series"]
    if series:
        s = series[0]
        axes[1].plot([p[0] for p in s], [p[1] / 1024 for p in s], "b-")
        axes[1].set_xlabel("soak time (s)")
        axes[1].set_ylabel("invoker RSS (MiB)")
        axes[1].set_ylim(bottom=0)
    fig.suptitle(f"phos-invoker under load, warm vecadd on the sim device, {os.cpu_count()}-core host, {DATE}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
