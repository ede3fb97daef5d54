# SPDX-License-Identifier: MIT
"""A pull is listed, cancellable and bounded in every phase (issue 37, item
9), on the sim device.

A pull first GETs the peer's export document, and only then was it listed:
during that phase describe said 404, a remove could not cancel it, and a
peer trickling bytes just above libcurl's low-speed limit (1 KiB/s) kept it
going for ever (10 minutes a stall for the export, then on for the files).
Now the pull is listed as deploying from its start (progress.phase
"export", then "pulling"), DELETE cancels it in any phase, and the whole
pull has a deadline (the request's deploy_timeout_ms, else 600 s).

A fake peer (Python) trickles 2 KiB/s: for "slow-export" the export
document itself (blanks before the JSON), for "slow-files" every file
range (its export, taken from a real invoker A's pull_probe, comes at
once). On the puller B:

- each pull shows in describe and in the list while in its phase;
- a DELETE cancels it: the DELETE answers within 3 s, the pull gets 409, the
  peer sees its connection closed, the name is free, and nothing of it is
  left in B's state dir;
- with deploy_timeout_ms 2000 (3000 for the files) the pull fails with 504
  naming deploy_timeout_ms, within a second and a half of its deadline,
  leaving nothing;
- a bad deploy_timeout_ms is 400; `phos-fn deploy --from --limit
  deploy_timeout_ms=MS` passes it on; a pull from A within its deadline works.
"""
import http.server
import json
import os
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time

from harness import PHOS_FN, Invoker, check, done, fn_env, procs, program

PROBE = program("tests", "integration", "pull_probe")
tmp = tempfile.mkdtemp(prefix="phos-pull-cancel-test-")
stop = threading.Event()
closed = []   # (path, monotonic time) of each trickle whose client went away
exports = {}  # name: export document (bytes) served at once


class Peer(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def trickle(self, total, byte):
        """Sends total bytes of byte at 2 KiB/s (just above libcurl's 1 KiB/s
        low-speed limit; a small file in eight pieces a second apart), until
        the client goes away or the test ends."""
        sent = 0
        try:
            while sent < total and not stop.is_set():
                n = min(2048, max(1, total // 8), total - sent)
                self.wfile.write(byte * n)
                self.wfile.flush()
                sent += n
                for _ in range(10):   # a second, watching for the client's close (EOF)
                    if select.select([self.connection], [], [], 0.1)[0] and \
                            not self.connection.recv(1, socket.MSG_PEEK):
                        raise ConnectionResetError("closed by the client")
        except OSError:
            closed.append((self.path, time.monotonic()))

    def do_GET(self):
        parts = self.path.split("?")[0].split("/")
        name = parts[3] if len(parts) > 4 else ""
        if self.path.endswith("/export") and name in exports:
            body = exports[name]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path.endswith("/export") and name == "slow-export":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(64 << 20))
            self.end_headers()
            self.trickle(64 << 20, b" ")
            return
        if "/export/file?" in self.path:
            length = int(self.path.split("length=")[1].split("&")[0])
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(length))
            self.end_headers()
            self.trickle(length, b"\0")
            return
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


def leftovers(state, name):
    snaps = [s for s in os.listdir(os.path.join(state, "snapshots")) if s == name or s.startswith(name + ".")]
    snaps += [s for s in os.listdir(os.path.join(state, "snapshots")) if ".tmp-" in s]
    return snaps + [r for r in os.listdir(os.path.join(state, "functions")) if r.startswith(name)]


def pull_async(b, req):
    """Starts POST /system/functions req on b in a thread: (thread, result
    dict with "r" = (status, body) and "t" = when it was answered)."""
    res = {}

    def run():
        res["r"] = b.call("POST", "/system/functions", req, timeout=120)
        res["t"] = time.monotonic()
    th = threading.Thread(target=run)
    th.start()
    return th, res


def wait_phase(b, name, phase, within=10):
    """describe's progress.phase of name on b once it is phase (or the last seen)."""
    seen = None
    end = time.monotonic() + within
    while time.monotonic() < end:
        st, desc = b.call("GET", f"/system/functions/{name}")
        seen = (st, desc.get("status") if isinstance(desc, dict) else desc,
                desc.get("progress", {}).get("phase") if isinstance(desc, dict) else None)
        if seen[2] == phase:
            break
        time.sleep(0.05)
    return seen


def cancel_case(b, peer, name, phase):
    """A pull of name from the fake peer, seen in phase, then removed."""
    th, res = pull_async(b, {"name": name, "from": peer, "from_token": "x" * 32})
    seen = wait_phase(b, name, phase)
    check(seen[0] == 200 and seen[1] == "deploying" and seen[2] == phase,
          f"{name}: describe shows the pull in its {phase} phase: {seen}")
    time.sleep(1.5)   # well inside a trickled transfer
    st, lst = b.call("GET", "/system/functions")
    check(st == 200 and [f.get("status") for f in lst if f.get("name") == name] == ["deploying"],
          f"{name}: the list shows it deploying: {st} {lst}")
    before = len(closed)
    t0 = time.monotonic()
    st, ans = b.call("DELETE", f"/system/functions/{name}")
    took = time.monotonic() - t0
    th.join(30)
    print(f"{name}: DELETE in the {phase} phase answered in {took:.2f} s", flush=True)
    check(st == 200 and took < 3, f"{name}: the remove answers at once: {st} {ans} in {took:.2f} s")
    check(res.get("r", (0,))[0] == 409 and res.get("t", 1e9) - t0 < 3,
          f"{name}: the pull ends with 409 within 3 s: {res}")
    time.sleep(0.5)
    check(len(closed) > before and closed[-1][1] - t0 < 2,
          f"{name}: the peer saw the transfer closed within 2 s: {[(p, t - t0) for p, t in closed]}")
    check(b.call("GET", f"/system/functions/{name}")[0] == 404, f"{name}: not listed after the remove")
    check(leftovers(b.state, name) == [], f"{name}: nothing left: {leftovers(b.state, name)}")


def deadline_case(b, peer, name, timeout_ms):
    """A pull of name from the fake peer with deploy_timeout_ms: 504 at its deadline."""
    t0 = time.monotonic()
    st, ans = b.call("POST", "/system/functions", {"name": name, "from": peer, "from_token": "x" * 32,
                                                    "deploy_timeout_ms": timeout_ms}, timeout=120)
    took = time.monotonic() - t0
    print(f"{name}: deploy_timeout_ms {timeout_ms} ended the pull after {took:.2f} s", flush=True)
    check(st == 504 and "deploy_timeout_ms" in str(ans), f"{name}: the deadline fails the pull: {st} {ans}")
    check(timeout_ms / 1e3 - 0.1 < took < timeout_ms / 1e3 + 1.5, f"{name}: at its deadline: {took:.2f} s")
    check(b.call("GET", f"/system/functions/{name}")[0] == 404 and leftovers(b.state, name) == [],
          f"{name}: nothing left: {leftovers(b.state, name)}")


def main():
    a = Invoker(os.path.join(tmp, "a"), tmp)
    b = Invoker(os.path.join(tmp, "b"), tmp)
    st, body = a.call("POST", "/system/functions", {"name": "probe", "program": PROBE, "args": ["7", "1", "1"]},
                      timeout=300)
    check(st == 201, f"deploy probe on A: {st} {body}")
    st, exp = a.call("GET", "/system/functions/probe/export")
    check(st == 200 and isinstance(exp, dict), f"A's export of probe: {st}")
    for name in ("slow-files", "slow-files-deadline"):
        e = json.loads(json.dumps(exp))
        e["name"] = name
        e["function"]["name"] = name
        exports[name] = json.dumps(e).encode()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Peer)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    peer = f"http://127.0.0.1:{srv.server_port}"
    try:
        for bad in (50, 3600001, "2000", 1.5):
            st, ans = b.call("POST", "/system/functions", {"name": "x", "from": peer, "from_token": "x" * 32,
                                                            "deploy_timeout_ms": bad})
            check(st == 400 and "deploy_timeout_ms" in str(ans), f"deploy_timeout_ms {bad!r}: {st} {ans}")
        cancel_case(b, peer, "slow-export", "export")
        cancel_case(b, peer, "slow-files", "pulling")
        deadline_case(b, peer, "slow-export", 2000)
        deadline_case(b, peer, "slow-files-deadline", 3000)
        tf = os.path.join(tmp, "fake.token")
        with open(tf, "w") as f:
            f.write("x" * 32 + "\n")
        os.chmod(tf, 0o600)
        t0 = time.monotonic()
        r = subprocess.run([PHOS_FN, "deploy", "--gateway", f"http://127.0.0.1:{b.port}", "--state-dir", b.state,
                            "--from", peer, "--from-token-file", tf, "--limit", "deploy_timeout_ms=2000",
                            "slow-export"], capture_output=True, text=True, timeout=60, env=fn_env())
        check(r.returncode == 1 and "504" in r.stderr and "deploy_timeout_ms" in r.stderr and
              time.monotonic() - t0 < 4, f"phos-fn deploy --from --limit deploy_timeout_ms=2000: {r.returncode} "
              f"{r.stderr[-300:]}")
        st, ans = b.call("POST", "/system/functions", {"name": "probe", "from": f"http://127.0.0.1:{a.port}",
                                                        "from_token": open(os.path.join(a.state, "peer.token")).read().strip(),
                                                        "deploy_timeout_ms": 60000}, timeout=300)
        check(st == 201 and ans.get("status") == "ready", f"a pull within its deadline: {st} {ans}")
        st, out = b.call("POST", "/function/probe", {})
        check(st == 200 and out.get("calls") == 1 and "weights" in out, f"the pulled probe answers: {st} {out}")
    finally:
        stop.set()
        srv.shutdown()
    for inv in (a, b):
        inv.stop()


try:
    main()
finally:
    stop.set()
    for p in procs:
        if p.poll() is None:
            p.kill()
    shutil.rmtree(tmp, ignore_errors=True)
done("pull_cancel")
