# SPDX-License-Identifier: MIT
"""The cluster's costs (issue 41), side by side in one run: etcd started
here, invokers A and B with a small function (vecadd, deployed on A with
"replicas": 2, so B pulls it) and C, a member without it, all on this
host's loopback.

  hop       CALLS sequential calls, warm: to A directly, and through C
            (C forwards each to A or B: one extra HTTP hop). Reported: the
            median and p99 of each, the forwarding's added median, and the
            floor of a hop measured in the same run: an empty HTTP round
            trip (GET /healthz of A).
  load      CLIENTS clients (more than the function's max_instances, 4)
            calling for SECONDS: all at A directly, and all
            through C. Reported: calls per second, the median and p99
            latency, and how C spread the calls over A and B (X-Phos-Served-By).

Every answer is checked (vecadd's ok). Writes bench/results/cluster.json
and copies it to $OUT.

usage: python3 bench/cluster.py BUILD_DIR [--device cuda|sim] [--calls 300] [--clients 8] [--seconds 10]
"""
import argparse
import datetime
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
REQ = {"n": 4096, "seed": 3}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpu_name(device):
    if device != "cuda":
        return "sim (not a measurement)"
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.strip().splitlines()[0]
    except Exception as e:  # noqa: BLE001
        return f"unknown ({e})"


def find_etcd():
    for p in (shutil.which("etcd"), "/opt/phos-deps/usr/bin/etcd"):
        if p and os.access(p, os.X_OK):
            return p
    sys.exit("cluster bench: no etcd (Debian's etcd-server; on the GPU machine, its .deb in .deps/debs/bookworm)")


class Conn:
    """One keep-alive connection to an invoker."""

    def __init__(self, port, token=None):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        self.h = {"Content-Type": "application/json"}
        if token:
            self.h["Authorization"] = f"Bearer {token}"

    def req(self, method, path, body=None):
        self.c.request(method, path, body=json.dumps(body) if body is not None else None, headers=self.h)
        r = self.c.getresponse()
        data = r.read()
        return r.status, data, r.getheader("X-Phos-Served-By")


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    tmp = tempfile.mkdtemp(prefix="phos-cluster-bench-")
    os.chmod(tmp, 0o711)
    procs = []
    try:
        eport, epeer = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{eport}"
        procs.append(subprocess.Popen([find_etcd(), "--name", "bench", "--data-dir", os.path.join(tmp, "etcd"),
                                       "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
                                       "--listen-peer-urls", f"http://127.0.0.1:{epeer}",
                                       "--initial-advertise-peer-urls", f"http://127.0.0.1:{epeer}",
                                       "--initial-cluster", f"bench=http://127.0.0.1:{epeer}"],
                                      stdout=open(os.path.join(tmp, "etcd.log"), "w"), stderr=subprocess.STDOUT))
        tokfile = os.path.join(tmp, "cluster.token")
        with open(os.open(tokfile, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(os.urandom(24).hex() + "\n")
        inv = {}

        def start(k):
            port = free_port()
            state = os.path.join(tmp, k)
            os.makedirs(os.path.join(tmp, f"cwd-{k}"))
            procs.append(subprocess.Popen(
                [os.path.join(build, "invoker", "phos-invoker"), "--listen", f"127.0.0.1:{port}", "--state-dir",
                 state, "--device", a.device, "--cluster", etcd_url, "--cluster-token-file", tokfile],
                stdout=open(os.path.join(tmp, f"invoker-{k}.log"), "w"), stderr=subprocess.STDOUT,
                cwd=os.path.join(tmp, f"cwd-{k}")))
            inv[k] = port
            for _ in range(400):
                try:
                    if Conn(port).req("GET", "/healthz")[0] == 200:
                        break
                except OSError:
                    time.sleep(0.05)
            else:
                sys.exit(f"invoker {k} did not start: {open(os.path.join(tmp, f'invoker-{k}.log')).read()[-2000:]}")
            admin[k] = open(os.path.join(tmp, k, "admin.token")).read().strip()

        admin = {}
        start("a")
        start("b")
        ca = Conn(inv["a"], admin["a"])
        for _ in range(100):   # A sees B, then deploys with a replica on it (C comes after: it has none)
            st, body, _ = ca.req("GET", "/system/cluster")
            if st == 200 and len(json.loads(body).get("members", [])) == 2:
                break
            time.sleep(0.2)
        st, body, _ = ca.req("POST", "/system/functions", {
            "name": "vecadd", "program": os.path.join(build, "functions", "examples", "vecadd"),
            "args": ["--elements", "65536"], "limits": {"max_instances": 4, "timeout_ms": 60000}, "replicas": 2})
        deployed = json.loads(body)
        if st != 201 or [r.get("status") for r in deployed.get("replicas", [])] != [201]:
            sys.exit(f"deploy: {st} {body[:1000]}")
        start("c")
        for _ in range(100):   # C sees vecadd on A and B
            st, body, _ = Conn(inv["c"], admin["c"]).req("GET", "/system/cluster")
            ms = json.loads(body).get("members", [])
            if sum(1 for m in ms if m.get("functions", {}).get("vecadd", {}).get("ready")) == 2:
                break
            time.sleep(0.2)

        view = json.loads(body)   # (C's last look at the cluster: each member's record, its GPUs included)

        def call(conn, forwarded):
            t0 = time.perf_counter()
            st, body, by = conn.req("POST", "/function/vecadd", REQ)
            dt = time.perf_counter() - t0
            if st != 200 or not json.loads(body).get("ok"):
                raise SystemExit(f"a call answered {st}: {body[:300]}")
            if bool(by) != forwarded:   # C has no vecadd: each of its calls is another member's
                raise SystemExit(f"a call {'through C was not forwarded' if forwarded else 'to A was forwarded'}")
            return dt, by

        # -- one extra hop, warm, sequential
        direct, via, floor = Conn(inv["a"]), Conn(inv["c"]), Conn(inv["a"])
        for _ in range(20):
            call(direct, False)
            call(via, True)
        t_direct, t_via, t_floor = [], [], []
        for _ in range(a.calls):
            t0 = time.perf_counter()
            floor.req("GET", "/healthz")
            t_floor.append(time.perf_counter() - t0)
            t_direct.append(call(direct, False)[0])
            t_via.append(call(via, True)[0])
        hop = {
            "calls": a.calls,
            "direct_ms": {"median": statistics.median(t_direct) * 1e3, "p99": pct(t_direct, 99) * 1e3},
            "forwarded_ms": {"median": statistics.median(t_via) * 1e3, "p99": pct(t_via, 99) * 1e3},
            "http_round_trip_ms": {"median": statistics.median(t_floor) * 1e3, "p99": pct(t_floor, 99) * 1e3},
        }
        hop["added_median_ms"] = hop["forwarded_ms"]["median"] - hop["direct_ms"]["median"]
        hop["added_over_round_trip"] = hop["added_median_ms"] / hop["http_round_trip_ms"]["median"]
        hop["forwarded_over_direct"] = hop["forwarded_ms"]["median"] / hop["direct_ms"]["median"]
        print(f"hop: direct {hop['direct_ms']['median']:.3f} ms, forwarded {hop['forwarded_ms']['median']:.3f} ms "
              f"(+{hop['added_median_ms']:.3f} ms, {hop['added_over_round_trip']:.2f}x an empty round trip of "
              f"{hop['http_round_trip_ms']['median']:.3f} ms)", flush=True)

        # -- clients calling for a while: at A only, and through C
        def under_load(port, forwarded):
            lat, by, stop = [], {}, time.monotonic() + a.seconds
            lock = threading.Lock()

            errors = []

            def client():
                conn = Conn(port)
                try:
                    while time.monotonic() < stop:
                        dt, who = call(conn, forwarded)
                        with lock:
                            lat.append(dt)
                            by[who or "direct"] = by.get(who or "direct", 0) + 1
                except (SystemExit, OSError, ValueError) as e:
                    errors.append(str(e))

            ts = [threading.Thread(target=client) for _ in range(a.clients)]
            t0 = time.monotonic()
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            wall = time.monotonic() - t0
            if errors:
                raise SystemExit(f"under load: {errors[:3]}")
            return {"clients": a.clients, "seconds": wall, "calls": len(lat), "calls_per_s": len(lat) / wall,
                    "median_ms": statistics.median(lat) * 1e3, "p99_ms": pct(lat, 99) * 1e3,
                    "served_by": {("A" if k == f"http://127.0.0.1:{inv['a']}" else
                                   "B" if k == f"http://127.0.0.1:{inv['b']}" else k): v for k, v in by.items()}}

        load = {"direct_to_A": under_load(inv["a"], False), "through_C": under_load(inv["c"], True)}
        load["through_C_over_direct_throughput"] = (load["through_C"]["calls_per_s"] /
                                                    load["direct_to_A"]["calls_per_s"])
        for k in ("direct_to_A", "through_C"):
            r = load[k]
            print(f"load {k}: {r['calls_per_s']:.0f} calls/s, median {r['median_ms']:.2f} ms, p99 "
                  f"{r['p99_ms']:.2f} ms, served by {r['served_by']}", flush=True)
        out = {"bench": "cluster", "date": datetime.date.today().isoformat(), "device": a.device,
               "gpu": gpu_name(a.device), "host_cpus": os.cpu_count(), "function": "vecadd --elements 65536",
               "request": REQ, "hop": hop, "load": load,
               "gpus_in_records": {m.get("url"): m.get("gpus") for m in view.get("members", [])},
               "note": "three invokers and etcd on one host's loopback: the hop is an HTTP forward within the "
                       "host, not across a network"}
        os.makedirs(RESULTS, exist_ok=True)
        path = os.path.join(RESULTS, "cluster.json")
        with open(path, "w") as f:
            json.dump(out, f, indent=1)
        if os.environ.get("OUT"):
            shutil.copy(path, os.environ["OUT"])
        print(f"wrote {path}")
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
