# SPDX-License-Identifier: MIT
"""Moving an instance between two invokers in network namespaces of their own
(issue 13), on the sim device: invokers A and B each in a network namespace
of its own, with one veth whose other end is on a bridge in this namespace (where the
test's clients are), so that A and B reach each other only over that link,
with their own addresses (not loopback: --token-file, tokens on every
control route), as two hosts would.

- functions/examples/session (max_instances 1) moved A->B while a client
  calls A without pause: every call answered once and right, the counter
  going on across the move (calls during it wait, then A forwards them);
- the link cut for good in the middle of a pre-copy slowed down on it
  (tc tbf on B's side, 64 MiB of state): the move fails on A within a
  bounded time (TCP keepalive on the peer connections: about 20 s, where
  the wait for the target's answer was up to an hour), A serves on with its
  state, B ends its fetch and holds nothing of the move; with the link up
  again, the same move succeeds and the counter goes on on B.

Needs root and network namespaces (unshare, nsenter, veth, bridge, tc): exits 77
where they cannot be made. test_migrate.py covers the rest on loopback.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from harness import DEVICE, Invoker, NetNamespaces, check, done, free_port, live_instances, program, sh

SESSION = program("functions", "examples", "session")
TAG = f"{os.getpid() % 100000}"
BR = f"phbr{TAG}"
HOST_IF = {"a": f"phva{TAG}", "b": f"phvb{TAG}"}   # the bridge's ends (in this namespace)
NET = "10.231.77"
ADDR = {"a": f"{NET}.2", "b": f"{NET}.3"}


nets = NetNamespaces(BR, HOST_IF, NET, ADDR, r"\b(ph(?:br|va|vb)\d+)\b")
ns_cmd = nets.cmd

try:
    nets.setup()
except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
    nets.teardown()
    print(f"migrate_netns: cannot make network namespaces here ({e}): skipped")
    sys.exit(77)

tmp = tempfile.mkdtemp(prefix="phos-migrate-netns-")
invs = {}


def start(k):
    """Invoker k in its namespace, on its address, with a token file in its state dir."""
    state = os.path.join(tmp, k)
    os.makedirs(state, mode=0o700, exist_ok=True)
    tok = os.path.join(state, "admin.token")
    if not os.path.exists(tok):
        with open(os.open(tok, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(f"token-of-{k}-{os.urandom(12).hex()}\n")
    return Invoker(state, tmp, device=DEVICE, host=ADDR[k], port=free_port(),
                   extra=["--token-file", tok], wrap=ns_cmd(k))


def url(inv):
    return f"http://{inv.host}:{inv.port}"


def token(inv):
    with open(os.path.join(inv.state, "admin.token")) as f:
        return f.read().strip()


def follow(inv, mid, ends=("done", "failed", "aborted"), limit=180):
    m = {}
    end = time.time() + limit
    while time.time() < end:
        st, m = inv.call("GET", f"/system/migrations/{mid}")
        if m.get("state") in ends:
            break
        time.sleep(0.1)
    return m


try:
    a, b = invs["a"], invs["b"] = start("a"), start("b")
    # they reach each other over the bridge only: not on loopback
    check(sh(*ns_cmd("a", "python3", "-c",
                     f"import socket; socket.create_connection(('{ADDR['b']}', {b.port}), 5)"), ok=False) == 0,
          "A reaches B's address over the link")
    for inv, mib in ((a, 64), (b, 64)):
        st, body = inv.call("POST", "/system/functions", {
            "name": "sess", "program": SESSION,
            "args": ["--state-mib", str(mib), "--block-mib", "1", "--write-kib", "16"],
            "limits": {"timeout_ms": 60000, "max_instances": 1}})
        check(st == 201, f"deploy sess on {url(inv)}: {st} {body}")

    # --- the session moved A -> B under calls, across the link ------------------------
    seen = []
    stop = threading.Event()

    def client(inv):
        while not stop.is_set():
            seen.append(inv.call("POST", "/function/sess", {}))

    seen.append(a.call("POST", "/function/sess", {}))
    th = threading.Thread(target=client, args=(a,))
    th.start()
    time.sleep(0.3)
    sid = live_instances(a, "sess")[0]["instance"]
    st, body = a.call("POST", f"/system/functions/sess/instances/{sid}/migrate",
                      {"to": url(b), "to_token": token(b)}, timeout=300)
    check(st == 200 and body.get("state") == "done" and body.get("precopy_reused_bytes", 0) >= 32 << 20,
          f"session moved between namespaces under load (the unwritten blocks from B's snapshot): {st} {body}")
    moved_at = len(seen)
    time.sleep(0.5)
    stop.set()
    th.join()
    st, desc = a.call("GET", "/system/functions/sess")
    check(desc.get("moved_to") == url(b), f"A says where sess went: {desc.get('moved_to')}")
    seen.append(b.call("POST", "/function/sess", {}))
    bad = [x for x in seen if x[0] != 200 or not x[1].get("ok")]
    check(not bad, f"every call of the session answered right: {bad[:3]}")
    counters = [x[1].get("counter") for x in seen if x[0] == 200]
    check(counters == list(range(1, len(seen) + 1)) and moved_at > 2,
          f"each call answered once, the counter going on across the move: {counters[:4]}...{counters[-4:]}")

    # --- back to A, then the link cut for good in the middle of a slowed pre-copy ------------
    sid = live_instances(b, "sess")[0]["instance"]
    st, body = b.call("POST", f"/system/functions/sess/instances/{sid}/migrate",
                      {"to": url(a), "to_token": token(a), "mode": "stw"}, timeout=300)
    check(st == 200, f"moved back to A: {st} {body}")
    st, got = a.call("POST", "/function/sess", {})
    count = got.get("counter", 0) if st == 200 else 0
    check(st == 200 and count == len(seen) + 1, f"A serves it again: {st} {got}")
    # every block written (none as in B's snapshot: all of it crosses the link), then
    # 80 Mbit/s towards B: 64 MiB of pre-copy take about 7 s
    st, got = a.call("POST", "/function/sess", {"write_kib": 65536})
    count += 1
    check(st == 200 and got.get("ok") and got.get("counter") == count, f"a call writing every block: {st} {got}")
    sh("tc", "qdisc", "add", "dev", HOST_IF["b"], "root", "tbf", "rate", "80mbit", "burst", "64kb",
       "latency", "400ms")
    sid = live_instances(a, "sess")[0]["instance"]
    st, body = a.call("POST", f"/system/functions/sess/instances/{sid}/migrate",
                      {"to": url(b), "to_token": token(b), "async": True})
    mid = body.get("migration", "") if isinstance(body, dict) else ""
    check(st == 202 and len(mid) == 32, f"an async move: {st} {body}")
    m = follow(a, mid, ends=("precopy", "done", "failed", "aborted"), limit=60)
    time.sleep(1.5)
    sh("ip", "link", "set", HOST_IF["b"], "down")
    t_cut = time.time()
    m = follow(a, mid, limit=150)
    took = time.time() - t_cut
    check(m.get("state") == "failed" and "serves on here" in json.dumps(m.get("result")),
          f"the cut link fails the move: {m}")
    check(took < 90, f"in bounded time after the cut ({took:.1f} s)")
    print(f"link cut in the pre-copy: the move failed {took:.1f} s later", flush=True)
    st, got = a.call("POST", "/function/sess", {})
    check(st == 200 and got.get("ok") and got.get("counter") == count + 1,
          f"A serves on with its state: {st} {got} (counter {count + 1})")
    sh("ip", "link", "set", HOST_IF["b"], "up")
    sh("tc", "qdisc", "del", "dev", HOST_IF["b"], "root")
    left = None
    end = time.time() + 90
    while time.time() < end:   # B gives its fetch up on its own (keepalive, low speed)
        left = [f for f in os.listdir(os.path.join(b.state, "checkpoints"))]
        if not left and live_instances(b, "sess") == []:
            break
        time.sleep(0.5)
    check(left == [] and live_instances(b, "sess") == [], f"B holds nothing of the failed move: {left}")
    # the link is back: the same move succeeds
    st, body = a.call("POST", f"/system/functions/sess/instances/{sid}/migrate",
                      {"to": url(b), "to_token": token(b)}, timeout=300)
    check(st == 200 and body.get("state") == "done", f"with the link back, the move succeeds: {st} {body}")
    st, got = b.call("POST", "/function/sess", {})
    check(st == 200 and got.get("counter") == count + 2, f"the counter goes on on B: {st} {got}")
finally:
    for inv in invs.values():
        inv.stop()
    nets.teardown()
    shutil.rmtree(tmp, ignore_errors=True)

done("migrate_netns")
