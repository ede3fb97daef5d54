# SPDX-License-Identifier: MIT
"""Slow clients and the invoker's bounds (issue 37, item 5, and item 9's
SIGTERM under keep-alive load), over real HTTP on loopback (sim device):

- headers that trickle in (a byte every 0.4 s, each renewing the idle
  timeout): the connection is closed about --header-timeout after its accept,
  with no answer;
- a keep-alive connection that sends nothing after its answer is closed the
  same way; one that sends its next request at once is served;
- a body sent slower than --min-body-rate is closed after the grace; a large
  body sent at full speed is answered;
- 600 trickling connections from three other addresses (200 each, refreshed
  as they are cut): a client on 127.0.0.1 keeps getting answers, the
  invoker's thread count stays bounded (thread per connection before: one per
  trickler), /metrics counts the cut connections;
- SIGTERM while eight keep-alive clients call in a loop: every request sent
  gets an answer (200 or 503), none is reset or left unanswered; new
  connections are refused once the invoker stops listening.
"""
import http.client
import json
import os
import resource
import selectors
import signal
import socket
import sys
import tempfile
import threading
import time

from harness import check, done, Invoker, program

MISBEHAVE = program("tests", "integration", "misbehave")
H = "127.0.0.1"
HEADER_S = 2

tmp = tempfile.mkdtemp(prefix="phos-slow-test-")
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))


def threads(pid):
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("Threads:"):
                return int(ln.split()[1])
    return 0


def closed_after(s, limit):
    """Seconds until the peer closes s (reading what it sends), or None after
    limit; and the bytes it sent."""
    t0 = time.monotonic()
    got = b""
    s.settimeout(0.1)
    while time.monotonic() - t0 < limit:
        try:
            d = s.recv(4096)
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - t0, got
        if not d:
            return time.monotonic() - t0, got
        got += d
    return None, got


def trickle_headers(port):
    s = socket.create_connection((H, port), timeout=10)
    req = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100
    t0 = time.monotonic()
    ended = None
    for i, b in enumerate(req):
        try:
            s.send(bytes([b]))
        except OSError:
            ended = time.monotonic() - t0
            break
        w, _ = closed_after(s, 0.4)
        if w is not None:
            ended = time.monotonic() - t0
            break
        if time.monotonic() - t0 > 12:
            break
    s.close()
    check(ended is not None and ended < HEADER_S + 1.5,
          f"trickled headers: closed after {ended} s (--header-timeout {HEADER_S}), not held")


def keepalive_idle(port):
    c = http.client.HTTPConnection(H, port, timeout=10)
    c.request("GET", "/healthz")
    r = c.getresponse()
    r.read()
    check(r.status == 200, f"keep-alive: first answer {r.status}")
    # the next request at once: served on the same connection
    c.request("GET", "/healthz")
    r = c.getresponse()
    r.read()
    check(r.status == 200, f"keep-alive: second answer at once {r.status}")
    w, got = closed_after(c.sock, HEADER_S + 5)
    check(w is not None and w < HEADER_S + 1.5 and got == b"", f"an idle keep-alive connection is closed ({w} s)")
    c.close()


def slow_body(port):
    s = socket.create_connection((H, port), timeout=10)
    s.sendall(b"POST /function/mb HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Content-Length: 100000\r\n\r\n{\"pad\":\"")
    t0 = time.monotonic()
    ended = None
    while time.monotonic() - t0 < 15:
        try:
            s.send(b"x" * 50)   # 100 B/s
        except OSError:
            ended = time.monotonic() - t0
            break
        w, got = closed_after(s, 0.5)
        if w is not None:
            ended = time.monotonic() - t0
            break
    s.close()
    check(ended is not None and ended < 2 * HEADER_S + 2, f"a body at 100 B/s is cut after the grace ({ended} s)")
    # at full speed, a large body is answered
    body = json.dumps({"pad": "y" * (2 << 20)})
    c = http.client.HTTPConnection(H, port, timeout=60)
    c.request("POST", "/function/mb", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    check(r.status == 200 and json.loads(data).get("gpu") == 1234, f"a 2 MiB body at full speed: {r.status}")


class Tricklers:
    """n connections from each source address, each sending a header byte
    every 0.5 s; reopened when the invoker closes them."""

    def __init__(self, port, sources, n):
        self.port, self.sources, self.n = port, sources, n
        self.sel = selectors.DefaultSelector()
        self.stop = False
        self.opened = self.closed = 0
        self.th = threading.Thread(target=self.run, daemon=True)
        self.th.start()

    def open_one(self, src):
        s = socket.socket()
        s.setblocking(False)
        s.bind((src, 0))
        try:
            s.connect((H, self.port))
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            return
        self.sel.register(s, selectors.EVENT_READ, src)
        self.opened += 1
        self.conns[s] = 0

    def run(self):
        self.conns = {}
        for src in self.sources:
            for _ in range(self.n):
                self.open_one(src)
        last = 0.0
        while not self.stop:
            for key, _ in self.sel.select(timeout=0.1):
                s = key.fileobj
                try:
                    d = s.recv(4096)
                except OSError:
                    d = b""
                if not d:       # closed by the invoker: another one in its place
                    self.sel.unregister(s)
                    del self.conns[s]
                    s.close()
                    self.closed += 1
                    self.open_one(key.data)
            if time.monotonic() - last > 0.5:
                last = time.monotonic()
                for s, i in list(self.conns.items()):
                    try:
                        s.send(b"GET /healthz HTTP/1.1\r\nX: "[i:i + 1] or b"a")
                        self.conns[s] = i + 1
                    except OSError:
                        pass
        for s in list(self.conns):
            s.close()


def crowd(inv):
    base = threads(inv.p.pid)
    t = Tricklers(inv.port, ["127.0.0.2", "127.0.0.3", "127.0.0.4"], 200)
    lat, most, bad = [], base, []
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3 * HEADER_S + 2:
        a = time.monotonic()
        try:
            st, body = inv.call("POST", "/function/mb", {}, timeout=10)
        except OSError as e:
            st, body = 0, repr(e)
        lat.append(time.monotonic() - a)
        if st != 200:
            bad.append((st, str(body)[:100]))
        most = max(most, threads(inv.p.pid))
        time.sleep(0.05)
    t.stop = True
    t.th.join(timeout=10)
    lat.sort()
    p99 = lat[int(len(lat) * 0.99) - 1] if lat else 99
    print(f"crowd: {len(lat)} calls, p99 {p99 * 1000:.1f} ms, threads {base} -> {most}, "
          f"tricklers opened {t.opened}, cut {t.closed}", flush=True)
    check(not bad, f"calls from 127.0.0.1 among 600 tricklers all answered: {bad[:3]}")
    check(len(lat) > 20 and p99 < 1.0, f"... promptly: {len(lat)} calls, p99 {p99 * 1000:.0f} ms")
    check(most < base + 40, f"the invoker's threads stay bounded: {base} at rest, {most} among 600 tricklers")
    check(t.closed >= 300, f"the tricklers were cut and came back ({t.closed} cut)")
    st, m = inv.call("GET", "/metrics")
    cut = [ln for ln in str(m).splitlines() if ln.startswith("phos_http_connections_cut_total ")]
    check(cut and int(cut[0].split()[1]) >= 300, f"/metrics counts the cut connections: {cut}")


def sigterm_under_keepalive(inv):
    outcome = {"answered": 0, "503": 0, "refused": 0, "cut": []}
    lock = threading.Lock()
    go = threading.Event()

    def client():
        c = http.client.HTTPConnection(H, inv.port, timeout=30)
        while True:
            try:
                c.request("POST", "/function/mb", body=json.dumps({"sleep_ms": 20}),
                          headers={"Content-Type": "application/json"})
            except ConnectionRefusedError:
                with lock:
                    outcome["refused"] += 1
                return
            except (OSError, http.client.HTTPException) as e:
                with lock:
                    outcome["cut"].append(f"send: {e!r}")
                return
            try:
                r = c.getresponse()
                r.read()
            except (OSError, http.client.HTTPException) as e:
                with lock:
                    outcome["cut"].append(f"answer: {e!r}")
                return
            with lock:
                outcome["answered"] += 1
                outcome["503"] += r.status == 503
            if r.status not in (200, 503):
                with lock:
                    outcome["cut"].append(f"status {r.status}")
            go.set()

    ths = [threading.Thread(target=client) for _ in range(8)]
    for th in ths:
        th.start()
    go.wait(timeout=30)
    time.sleep(1.0)
    inv.p.send_signal(signal.SIGTERM)
    for th in ths:
        th.join(timeout=60)
    rc = inv.p.wait(timeout=60)
    print(f"SIGTERM under keep-alive load: {outcome['answered']} answered ({outcome['503']} of them 503), "
          f"{outcome['refused']} refused connects, cut: {outcome['cut'][:3]}", flush=True)
    check(rc == 0, f"the invoker exited cleanly: {rc}")
    check(not outcome["cut"], f"no request reset or left unanswered: {outcome['cut'][:5]}")
    check(outcome["503"] >= 1, "requests during the drain got 503")
    check(outcome["refused"] == 8, f"each client ended on a refused connect ({outcome['refused']})")


state = os.path.join(tmp, "state")
inv = Invoker(state, tmp, extra=["--header-timeout", str(HEADER_S), "--min-body-rate", "1000",
                                 "--drain-timeout", "5"])
st, body = inv.call("POST", "/system/functions", {"name": "mb", "program": MISBEHAVE,
                                                  "limits": {"max_instances": 2, "max_body_bytes": 4 << 20}})
check(st == 201, f"deploy mb: {st} {body}")
st, body = inv.call("POST", "/function/mb", {})
check(st == 200 and body.get("gpu") == 1234, f"mb answers: {st} {body}")
parts = sys.argv[1:] or ["headers", "keepalive", "body", "crowd", "sigterm"]
if "headers" in parts:
    trickle_headers(inv.port)
if "keepalive" in parts:
    keepalive_idle(inv.port)
if "body" in parts:
    slow_body(inv.port)
if "crowd" in parts:
    crowd(inv)
if "sigterm" in parts:
    sigterm_under_keepalive(inv)
else:
    inv.stop()
done("slow_clients")
