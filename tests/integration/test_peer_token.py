# SPDX-License-Identifier: MIT
"""Invokers give each other a peer token, never their admin token (issue 37,
item 2), on the sim device.

Every move sent the source's admin token to the target as from_token (so
whoever controlled a target could deploy on the source), and a pull or a
rank's rendezvous needed the peer's admin token. Now each invoker has
STATE/peer.token besides STATE/admin.token (invoker/token.h):

- a fake target (Python) that A moves an instance to (live, then
  stop-the-world) logs the Authorization header and the from_token of each
  request it gets: the header is the to_token given, from_token is A's peer
  token, and A's admin token is nowhere in what A sent; the fake target
  refuses, and A's instance serves on;
- A's peer token gets 401 on the control plane (deploy, list, describe,
  remove, snapshot, logs, checkpoint, a migrate request, /metrics) and 200
  on the peer routes (the export of a deployed function, a migration
  record); the admin token is still taken on those;
- `phos-fn peer-token --state-dir A` prints A's peer token (0600, kept
  across a restart); without one it says so (exit 1);
- B pulls lc from A with A's peer token; a session moved A -> C with C's
  peer token (C runs --protect-invoke) is forwarded by A to C with it, and
  its calls answer with the state going on.
"""
import http.client
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading

from harness import PHOS_FN, Invoker, check, done, fn_env, live_instances, procs, program

LONG = program("tests", "integration", "long_call")
PROBE = program("tests", "integration", "pull_probe")
SESSION = program("functions", "examples", "session")
tmp = tempfile.mkdtemp(prefix="phos-peer-token-test-")
seen = []   # (method, path, Authorization, from_token, raw body) at the fake target


def read_token(inv, name):
    with open(os.path.join(inv.state, name)) as f:
        return f.read().strip()


def req(inv, method, path, token, body=None):
    """(status, parsed body) of a request to inv with this bearer token."""
    c = http.client.HTTPConnection("127.0.0.1", inv.port, timeout=120)
    h = {"Authorization": "Bearer " + token}
    if body is not None:
        body = json.dumps(body)
        h["Content-Type"] = "application/json"
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


class FakeTarget(http.server.BaseHTTPRequestHandler):
    """Refuses every move (409) after logging what it was sent."""
    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            tok = json.loads(raw).get("from_token")
        except (ValueError, AttributeError):
            tok = None
        seen.append((self.command, self.path, self.headers.get("Authorization"), tok, raw))
        body = b'{"error":"a fake target: refused"}'
        self.send_response(409)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def main():
    a = Invoker(os.path.join(tmp, "a"), tmp)
    admin_a, peer_a = read_token(a, "admin.token"), read_token(a, "peer.token")
    check(len(peer_a) == 64 and peer_a != admin_a, f"A has a peer token of its own: {len(peer_a)}")
    mode = os.stat(os.path.join(a.state, "peer.token")).st_mode & 0o777
    check(mode == 0o600, f"peer.token is 0600: {oct(mode)}")
    st, body = a.call("POST", "/system/functions", {"name": "lc", "program": LONG,
                                                    "limits": {"timeout_ms": 60000, "max_instances": 2}})
    check(st == 201, f"deploy lc on A: {st} {body}")
    st, body = a.call("POST", "/function/lc", {"steps": 2})
    check(st == 200 and body.get("step") == 2, f"a first call on A: {st} {body}")
    iid = live_instances(a, "lc")[0]["instance"]

    # -- what a source sends its target
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeTarget)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    to_token = "t" * 40
    try:
        for mode in ("recopy", "stw"):
            st, body = a.call("POST", f"/system/functions/lc/instances/{iid}/migrate",
                              {"to": f"http://127.0.0.1:{srv.server_port}", "to_token": to_token, "mode": mode},
                              timeout=300)
            check(st == 502 and "serves on here" in str(body) and "fake target" in str(body),
                  f"{mode}: the fake target refuses the move: {st} {body}")
    finally:
        srv.shutdown()
    moves = [s for s in seen if s[1] == "/system/functions/lc/instances"]
    check(len(moves) >= 2, f"the fake target got the moves: {[(s[0], s[1]) for s in seen]}")
    check(all(s[2] == "Bearer " + to_token for s in moves),
          f"each request carries the to_token given: {[s[2] for s in moves]}")
    with_from = [s for s in moves if s[3] is not None]
    check(len(with_from) >= 2 and all(s[3] == peer_a for s in with_from),
          f"from_token is A's peer token: {[(s[3] or '')[:8] for s in with_from]}")
    check(not [s for s in seen if admin_a in (s[2] or "") or admin_a.encode() in s[4]],
          "A's admin token is in no header or body the target got")
    st, body = a.call("POST", "/function/lc", {"steps": 1})
    check(st == 200 and body.get("step") == 3, f"A's instance serves on with its state: {st} {body}")

    # -- what the peer token opens on A, and what it does not
    refused = [("POST", "/system/functions", {"name": "evil", "program": "/bin/true"}),
               ("POST", "/system/functions", {"name": "lc2", "from": "http://127.0.0.1:1", "from_token": "x" * 20}),
               ("GET", "/system/functions", None), ("GET", "/system/functions/lc", None),
               ("DELETE", "/system/functions/lc", None), ("POST", "/system/functions/lc/snapshot", None),
               ("GET", "/system/logs?name=lc", None), ("GET", "/metrics", None),
               ("POST", f"/system/functions/lc/instances/{iid}/checkpoint", {"mode": "stw"}),
               ("POST", f"/system/functions/lc/instances/{iid}/migrate",
                {"to": "http://127.0.0.1:1", "to_token": "x" * 20})]
    for method, path, body in refused:
        st, ans = req(a, method, path, peer_a, body)
        check(st == 401, f"the peer token on {method} {path}: want 401, got {st} {ans}")
    st, ans = req(a, "GET", "/system/functions/lc", admin_a)
    check(st == 200 and ans.get("status") == "ready", f"lc is still there: {st} {ans}")
    st, exp = req(a, "GET", "/system/functions/lc/export", peer_a)
    check(st == 200 and exp.get("name") == "lc" and len(exp.get("snapshot", "")) == 32,
          f"the peer token reads the export: {st} {str(exp)[:200]}")
    st, _ = req(a, "GET", "/system/functions/lc/export", admin_a)
    check(st == 200, f"and the admin token too: {st}")
    st, _ = req(a, "GET", "/system/functions/lc/export", "x" * 64)
    check(st == 401, f"and no other: {st}")
    st, ans = req(a, "GET", "/system/migrations/" + "0" * 32, peer_a)
    check(st == 404, f"the peer token reaches a migration record (none: 404): {st} {ans}")

    # -- phos-fn peer-token
    r = subprocess.run([PHOS_FN, "peer-token", "--state-dir", a.state], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and r.stdout == peer_a + "\n", f"phos-fn peer-token prints it: {r.returncode} {r.stderr}")
    empty = os.path.join(tmp, "empty")
    os.mkdir(empty, 0o700)
    r = subprocess.run([PHOS_FN, "peer-token", "--state-dir", empty], capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "no peer token" in r.stderr and not r.stdout,
          f"a state dir without one: {r.returncode} {r.stdout} {r.stderr}")
    a.stop()
    a = Invoker(a.state, tmp, port=a.port)
    check(read_token(a, "peer.token") == peer_a, "the peer token is kept across a restart")

    # -- a pull with the peer token
    b = Invoker(os.path.join(tmp, "b"), tmp)
    tf = os.path.join(tmp, "a.peer")
    with open(tf, "w") as f:
        f.write(peer_a + "\n")
    os.chmod(tf, 0o600)
    r = subprocess.run([PHOS_FN, "deploy", "--gateway", f"http://127.0.0.1:{b.port}", "--state-dir", b.state,
                        "--from", f"http://127.0.0.1:{a.port}", "--from-token-file", tf, "lc"],
                       capture_output=True, text=True, timeout=300, env=fn_env())
    check(r.returncode == 0 and '"pull"' in r.stdout, f"B pulls lc from A with A's peer token: {r.returncode} "
          f"{r.stdout[-300:]} {r.stderr[-500:]}")
    st, body = b.call("POST", "/function/lc", {"steps": 1})
    check(st == 200 and body.get("step") == 1, f"the pulled lc answers on B: {st} {body}")
    b.stop()

    # -- a session moved to C with C's peer token; A forwards its calls to C
    # (which protects invocation) with that token
    c = Invoker(os.path.join(tmp, "c"), tmp, extra=["--protect-invoke"])
    peer_c = read_token(c, "peer.token")
    sess = {"name": "sess", "program": SESSION, "args": ["--state-mib", "8", "--block-mib", "1", "--write-kib", "16"],
            "limits": {"timeout_ms": 60000, "max_instances": 1}}
    for inv in (a, c):
        st, body = inv.call("POST", "/system/functions", sess)
        check(st == 201, f"deploy sess on {inv.port}: {st} {body}")
    st, first = a.call("POST", "/function/sess", {})
    check(st == 200 and first.get("counter") == 1, f"a first call of the session on A: {st} {first}")
    sid = live_instances(a, "sess")[0]["instance"]
    st, body = a.call("POST", f"/system/functions/sess/instances/{sid}/migrate",
                      {"to": f"http://127.0.0.1:{c.port}", "to_token": peer_c}, timeout=300)
    check(st == 200 and body.get("state") == "done", f"the session moves to C with C's peer token: {st} {body}")
    st, body = a.call("POST", "/function/sess", {})
    check(st == 200 and body.get("counter") == 2 and live_instances(a, "sess") == [],
          f"A forwards its call to C, with C's peer token (C protects invocation): {st} {body}")
    st, body = c.call("POST", "/function/sess", {})
    check(st == 401, f"C does protect invocation: {st} {body}")
    st, body = req(c, "POST", "/function/sess", peer_c, {})
    check(st == 200 and body.get("counter") == 3, f"the peer token calls it there: {st} {body}")
    for inv in (a, c):
        inv.stop()

    # -- an instance moved from a source running functions as root (--run-as
    # self) to one running them as nobody: re-owned on arrival (issue 37, item 1)
    if os.geteuid() == 0:
        r = Invoker(os.path.join(tmp, "r"), tmp, extra=["--run-as", "self"])
        t = Invoker(os.path.join(tmp, "t"), tmp)
        probe = {"name": "who", "program": PROBE, "args": ["3", "4", "1"], "env": {"PULL_SHOW_UID": "1"},
                 "limits": {"timeout_ms": 60000, "max_instances": 1}}
        for inv in (r, t):
            st, body = inv.call("POST", "/system/functions", probe)
            check(st == 201, f"deploy who on {inv.port}: {st} {body}")
        st, first = r.call("POST", "/function/who", {})
        check(st == 200 and first.get("uid") == 0 and first.get("calls") == 1,
              f"who runs as root on the source: {st} {first}")
        wid = live_instances(r, "who")[0]["instance"]
        st, body = r.call("POST", f"/system/functions/who/instances/{wid}/migrate",
                          {"to": f"http://127.0.0.1:{t.port}", "to_token": read_token(t, "peer.token")}, timeout=300)
        check(st == 200 and body.get("state") == "done", f"who moves to the nobody target: {st} {body}")
        st, body = t.call("POST", "/function/who", {})
        check(st == 200 and body.get("calls") == 2 and body.get("uid") == 65534 and
              body.get("capeff") == "0000000000000000" and body.get("weights") == first.get("weights"),
              f"the moved instance goes on there as nobody without capabilities: {st} {body}")
        for inv in (r, t):
            inv.stop()


try:
    main()
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
    shutil.rmtree(tmp, ignore_errors=True)
done("peer_token")
