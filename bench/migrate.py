#!/usr/bin/env python3
"""Moving a live session between two invokers, side by side (issue 13).

Two phos-invokers on this machine (two ports, two state dirs under --dir,
each with its own executors; the checkpoint crosses the host over loopback
HTTP as it would between hosts), `functions/examples/session` deployed on
both with S GiB of GPU state and max_instances 1. A client calls A without
pause (each call writes 64 KiB of the state and checks the whole state's
sum); the session is moved A->B in one mode, then B->A in the other, while
it calls. For each move:

  downtime_s  the longest time between two answers the client saw that
              overlaps the move
  total_s     the move's request, from the source's start to the target's
              restore
  transfer_gbs  bytes fetched by the target / its fetch time
  limit       the link: a TCP loopback stream between two processes of this
              machine, measured in the same run (link_gbs), and
              state bytes / link rate (the least a transfer takes)

Every call must be answered once and right (counter going on, exact sum).
Records {"bench": "migrate", "case": "session-<S>GiB", "system":
"phos-recopy" | "phos-stw" | "limit", "metric", "value", ...} in
bench/results/migrate.json, checks in migrate.checks.json, and a chart.
Target (issue 13): recopy downtime <= 10% of stw's at 16 GiB with a light
write load. stw holds the instance for the whole move; recopy pre-copies
while the session serves and stops only to copy and fetch what changed.

With --two-gpus the invokers own GPUs 0 and 1 (PHOS_GPU), one each (issue
15), and the results go to migrate-2gpu.json.

usage: bench/migrate.py BUILD [--sizes 1,4,16] [--dir /dev/shm] [--two-gpus] [--device cuda|sim --unit-mib 1024]
"""
import argparse
import datetime
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
records, checks = [], []


def log(msg):
    print(msg, flush=True)


def record(case, system, metric, value, unit):
    records.append({"bench": "migrate", "case": case, "system": system, "metric": metric, "value": value,
                    "unit": unit, "device": DEVICE, "date": DATE})


def check(name, ok, detail=""):
    checks.append({"check": name, "ok": bool(ok), "detail": detail})
    log(f"  check {'ok  ' if ok else 'FAIL'} {name} {detail}")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Invoker:
    def __init__(self, name, gpu=None):
        self.port = free_port()
        self.state = os.path.join(A.dir, name)
        self.log = open(os.path.join(A.dir, name + ".log"), "w")
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        env.setdefault("PHOS_LOG", "info")   # (the moves itemised in its log)
        if gpu is not None:   # this invoker's executors own that GPU (issue 15: one invoker per GPU)
            env["PHOS_GPU"] = str(gpu)
            env["NCCL_NVLS_ENABLE"] = "0"
        if A.device == "sim":
            b = A.build
            env["PHOS_SIM_TWINS"] = os.path.join(b, "functions", "examples", "libphos-twins-examples.so")
        cwd = os.path.join(A.dir, name + "-cwd")
        os.makedirs(cwd)
        self.p = subprocess.Popen([os.path.join(A.build, "invoker", "phos-invoker"), "--listen",
                                   f"127.0.0.1:{self.port}", "--state-dir", self.state, "--device", A.device],
                                  stdout=self.log, stderr=subprocess.STDOUT, cwd=cwd, env=env)
        for _ in range(400):
            try:
                if self.call("GET", "/healthz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise SystemExit(f"invoker {name} did not start")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def token(self):
        with open(os.path.join(self.state, "admin.token")) as f:
            return f.read().strip()

    def call(self, method, path, body=None, timeout=900):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {}
        if path.startswith("/system/") and os.path.exists(os.path.join(self.state, "admin.token")):
            h["Authorization"] = "Bearer " + self.token()
        if body is not None:
            h["Content-Type"] = "application/json"
            body = json.dumps(body)
        try:
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            data = r.read()
        finally:
            c.close()
        try:
            return r.status, json.loads(data)
        except ValueError:
            return r.status, data.decode(errors="replace")

    def stop(self):
        self.p.terminate()
        try:
            self.p.wait(60)
        except subprocess.TimeoutExpired:
            self.p.kill()


def link_gbs(total=2 << 30, chunk=8 << 20):
    """A TCP loopback stream between two processes: GB/s."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    pid = os.fork()
    if pid == 0:
        c = socket.create_connection(("127.0.0.1", port))
        buf = bytes(chunk)
        sent = 0
        while sent < total:
            sent += c.send(buf)
        c.close()
        os._exit(0)
    conn, _ = srv.accept()
    buf = bytearray(chunk)
    got, t0 = 0, time.perf_counter()
    while got < total:
        n = conn.recv_into(buf)
        if not n:
            break
        got += n
    dt = time.perf_counter() - t0
    conn.close()
    srv.close()
    os.waitpid(pid, 0)
    return got / dt / 1e9


class Client(threading.Thread):
    """Calls a session without pause; keeps (finish time, status, answer)."""

    def __init__(self, inv):
        super().__init__(daemon=True)
        self.inv, self.stop, self.seen = inv, threading.Event(), []

    def run(self):
        while not self.stop.is_set():
            try:
                st, body = self.inv.call("POST", "/function/session", {})
            except OSError as e:
                st, body = 0, str(e)
            self.seen.append((time.perf_counter(), st, body))

    def max_gap(self, t0, t1):
        ts = [t for t, _, _ in self.seen]
        gaps = [b - a for a, b in zip(ts, ts[1:]) if b >= t0 and a <= t1]
        return max(gaps) if gaps else None


def main():
    global A, DEVICE, DATE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--sizes", default="1,4,16")
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--unit-mib", type=int, default=1024, help="MiB per size unit (sim dry runs use less)")
    ap.add_argument("--two-gpus", action="store_true",
                    help="one invoker per GPU (GPUs 0 and 1; issue 15); results in migrate-2gpu.json")
    A = ap.parse_args()
    A.build = os.path.abspath(A.build)
    A.dir = tempfile.mkdtemp(prefix="phos-migrate-bench-", dir=A.dir)
    DATE = datetime.date.today().isoformat()
    DEVICE = "sim"
    if A.device == "cuda":
        DEVICE = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                text=True).stdout.strip().splitlines()[0]
    invs = []
    try:
        link = link_gbs()
        log(f"link (TCP loopback): {link:.2f} GB/s")
        a, b = (Invoker("a", 0), Invoker("b", 1)) if A.two_gpus else (Invoker("a"), Invoker("b"))
        invs = [a, b]
        for size in [int(s) for s in A.sizes.split(",")]:
            case = f"session-{size}GiB"
            mib = size * A.unit_mib
            log(f"== {case}")
            for inv in (a, b):
                st, body = inv.call("DELETE", "/system/functions/session")
                st, body = inv.call("POST", "/system/functions", {
                    "name": "session", "program": os.path.join(A.build, "functions", "examples", "session"),
                    "args": ["--state-mib", str(mib), "--write-kib", "64"],
                    "limits": {"max_instances": 1, "timeout_ms": 900000, "deploy_timeout_ms": 900000}})
                if st != 201:
                    check(f"{case}: deployed", False, f"{st} {body}")
                    raise SystemExit(1)
            client = Client(a)
            client.start()
            time.sleep(1.0)
            state_bytes = mib << 20
            for src, dst, mode in ((a, b, "stw"), (b, a, "recopy")):
                st, logs = src.call("GET", "/system/logs?name=session&tail=1")
                inst = [i for i in logs.get("instances", []) if i.get("state") != "exited"]
                if not inst:
                    check(f"{case}: {mode}: an instance to move", False, str(logs)[:300])
                    continue
                t0 = time.perf_counter()
                st, body = src.call("POST", f"/system/functions/session/instances/{inst[0]['instance']}/migrate",
                                    {"to": dst.url, "to_token": dst.token(), "mode": mode})
                t1 = time.perf_counter()
                time.sleep(1.0)
                ok = st == 200 and body.get("state") == "done"
                check(f"{case}: {mode}: moved", ok, "" if ok else f"{st} {str(body)[:300]}")
                if not ok:
                    continue
                gap = client.max_gap(t0, t1)
                record(case, f"phos-{mode}", "downtime_s", gap, "s")
                record(case, f"phos-{mode}", "total_s", t1 - t0, "s")
                record(case, f"phos-{mode}", "checkpoint_s", body.get("checkpoint_s"), "s")
                record(case, f"phos-{mode}", "fetch_s", body.get("fetch_s"), "s")
                record(case, f"phos-{mode}", "restore_s", body.get("restore_s"), "s")
                for k in ("precopy_fetch_s", "verify_s", "stop_stall_s", "source_stop_s", "commit_s"):
                    if body.get(k) is not None:
                        record(case, f"phos-{mode}", k, body[k], "s")
                for k in ("precopy_bytes", "precopy_reused_bytes", "refetched_bytes", "stop_bytes"):
                    if body.get(k) is not None:
                        record(case, f"phos-{mode}", k, body[k], "B")
                if body.get("fetch_s"):
                    record(case, f"phos-{mode}", "transfer_gbs", body["bytes"] / body["fetch_s"] / 1e9, "GB/s")
                log(f"  {mode}: downtime {gap:.3f} s, total {t1 - t0:.3f} s; the move says: "
                    + ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in body.items()
                                if k not in ("state", "to", "mode")))
                # what other links would give: the same move with what crosses during the stop at their
                # rate (stw: all of it; recopy: what was fetched again, and the CPU image)
                during_stop = body["bytes"] if mode != "recopy" else body["bytes"] - body.get("precopy_bytes", 0)
                fixed = (body.get("checkpoint_s", 0) if mode != "recopy" else body.get("stop_stall_s", 0) +
                         body.get("verify_s", 0))
                for gbit in (25, 100, 400):
                    est = fixed + max(during_stop, 0) / (gbit / 8 * 1e9) + body.get("restore_s", 0)
                    record(case, f"phos-{mode}", f"downtime_est_{gbit}gbit_s", est, "s")
            client.stop.set()
            client.join(900)
            record(case, "limit", "link_gbs", link, "GB/s")
            record(case, "limit", "downtime_s", state_bytes / (link * 1e9), "s")
            record(case, "limit", "total_s", state_bytes / (link * 1e9), "s")
            bad = [(s, b) for _, s, b in client.seen if s != 200 or not isinstance(b, dict) or not b.get("ok")]
            counters = [b.get("counter") for _, s, b in client.seen if s == 200 and isinstance(b, dict)]
            check(f"{case}: every call answered right", not bad, str(bad[:2])[:300])
            check(f"{case}: each call once, the counter going on", counters == list(range(1, len(counters) + 1)),
                  f"{len(counters)} calls")
            down = {m: next((r["value"] for r in records if r["case"] == case and r["system"] == f"phos-{m}"
                             and r["metric"] == "downtime_s"), None) for m in ("stw", "recopy")}
            if size >= 16 and down["stw"] and down["recopy"]:
                check(f"{case}: recopy downtime <= 10% of stw's", down["recopy"] <= 0.1 * down["stw"],
                      f"{down['recopy']:.3f} vs {down['stw']:.3f} s")
    finally:
        for inv in invs:
            inv.stop()
        for inv in ("a.log", "b.log"):   # the invokers' own itemised moves
            if os.environ.get("OUT") and os.path.exists(os.path.join(A.dir, inv)):
                shutil.copy(os.path.join(A.dir, inv), os.path.join(os.environ["OUT"], "migrate-" + inv))
        shutil.rmtree(A.dir, ignore_errors=True)
    os.makedirs(RESULTS, exist_ok=True)
    base = "migrate-2gpu" if A.two_gpus else "migrate"
    if A.two_gpus:
        for r in records:
            r["gpus"] = "one invoker per GPU (0 and 1)"
    names = [base + ".json", base + ".checks.json"]
    for name, data in zip(names, (records, checks)):
        with open(os.path.join(RESULTS, name), "w") as f:
            json.dump(data, f, indent=1)
    if chart(os.path.join(RESULTS, base + ".png")):
        names.append(base + ".png")
    if os.environ.get("OUT"):
        for n in names:
            shutil.copy(os.path.join(RESULTS, n), os.environ["OUT"])
    bad = [c for c in checks if not c["ok"]]
    log(f"migrate: {len(checks) - len(bad)} of {len(checks)} checks passed")
    return 1 if bad else 0


def chart(path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("(no matplotlib: no chart)")
        return False
    cases = sorted({r["case"] for r in records}, key=lambda c: int(c[8:-3]))
    systems = ["phos-stw", "phos-recopy", "limit"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    w = 0.25
    for k, s in enumerate(systems):
        vals = [next((r["value"] for r in records if r["case"] == c and r["system"] == s
                      and r["metric"] == "downtime_s"), 0) or 0 for c in cases]
        ax.bar([i + (k - 1) * w for i in range(len(cases))], vals, w, label=s)
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels(cases)
    ax.set_ylabel("downtime (s): longest gap a client saw")
    ax.set_title(f"moving a session between two invokers, {DEVICE}, {DATE}; limit = state / loopback link")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


if __name__ == "__main__":
    sys.exit(main())
