# SPDX-License-Identifier: MIT
"""Snapshot pull between invokers (issue 13), on the sim device.

Two invokers run on this one machine, on two ports of 127.0.0.1 with separate
state dirs (not in network namespaces joined by a veth pair: the test needs
no privileges), A the peer and B the puller.

- A deploys pull_probe three times: probe-one and probe-two share their
  12 MiB "weights" buffer (same seed, 3 chunks of 4 MiB), probe-three does
  not. Each init appends a line to its own log file.
- Bad pulls on B get clear errors and leave nothing in B's state dir: a bad
  scheme, a URL with a path, a query or a user, no token, an unknown field
  (400), a function A does not have (404), a wrong token and a peer that is
  not listening (502). A's export/file route refuses paths outside the
  snapshot's list, escapes, bad ranges, a stale snapshot id, a snapshot
  replaced by a re-snapshot since the export (409) and no token.
- B pulls probe-one (HTTP): 201, bytes fetched, nothing reused; its cold start
  on B answers the sums the function computes from its initialised buffers,
  with the init count it had at init, and the init log still holds one line:
  B never ran the program. The pull survives a restart of B.
- B pulls probe-two with `phos-fn deploy --from`: the three weights chunks
  come from B's copy of probe-one (chunks_reused 3, 12 MiB), and it answers
  right.
- A fake peer (Python) sends exports crafted from a real one: not JSON, no
  export version, a newer image major, another stand-in build, a cuda
  snapshot (this invoker runs sim), a chunk list that does not combine to the
  manifest, a missing extent, a bad manifest, a bad registry entry, a bad
  snapshot id: each refused with its status (422/502), nothing left on B.
- A peer that claims a later export version is refused (422); a remove of
  the name while its pull runs cancels the pull (409, nothing left); too
  little free disk is 507.
- A byte of probe-three's gpu.data flipped on A after A indexed it: B's pull
  fails with 502 naming the checksum mismatch, and B holds nothing of it. The
  same flip before A ever indexed a fourth function's (new) snapshot: A
  refuses to export it,
  B answers 502.
"""
import http.client
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time

from harness import BUILD, PHOS_FN, check, done, fn_env, free_port, Invoker, procs, program

PROBE = program("tests", "integration", "pull_probe")
MiB = 1 << 20

tmp = tempfile.mkdtemp(prefix="phos-pull-test-")


def expected(wseed, pseed, mib=12):
    """The sums pull_probe answers: uint32 (i * 2654435761 + seed) mod 2^32."""
    def s(n, seed):
        return sum((i * 2654435761 + seed) & 0xffffffff for i in range(n))
    return s(mib * MiB // 4, wseed), s(MiB // 4, pseed)


def lines(path):
    try:
        with open(path) as f:
            return f.read().count("\n")
    except FileNotFoundError:
        return 0


def post_call(inv, name):
    """(status, JSON answer, X-Cold-Start) of one call."""
    c = http.client.HTTPConnection("127.0.0.1", inv.port, timeout=120)
    try:
        c.request("POST", f"/function/{name}", body="{}", headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        cold = r.getheader("X-Cold-Start")
    finally:
        c.close()
    try:
        return r.status, json.loads(data), cold
    except ValueError:
        return r.status, data.decode(errors="replace"), cold


def raw_get(inv, path, token=True):
    """(status, bytes) of a GET with A's token (or none)."""
    c = http.client.HTTPConnection("127.0.0.1", inv.port, timeout=60)
    h = {}
    if token:
        with open(os.path.join(inv.state, "admin.token")) as f:
            h["Authorization"] = "Bearer " + f.read().strip()
    try:
        c.request("GET", path, headers=h)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def leftovers(state, name):
    """Anything of name in a state dir."""
    snaps = [s for s in os.listdir(os.path.join(state, "snapshots")) if s == name or s.startswith(name + ".")]
    snaps += [s for s in os.listdir(os.path.join(state, "snapshots")) if ".tmp-" in s]
    regs = [r for r in os.listdir(os.path.join(state, "functions")) if r.startswith(name)]
    return snaps + regs


def flip_byte(state, name, extent=0, at=4097):
    """Flips one byte inside an extent of name's gpu.data on disk (in place:
    the inode stays, as bit rot or a bad disk would leave it)."""
    snap = os.path.join(state, "snapshots", name)
    with open(os.path.join(snap, "manifest.json")) as f:
        bufs = sorted(json.load(f)["buffers"], key=lambda b: b["offset"])
    off = bufs[extent]["offset"] + at
    with open(os.path.join(snap, "gpu.data"), "r+b") as f:
        f.seek(off)
        b = f.read(1)
        f.seek(off)
        f.write(bytes([b[0] ^ 0x5a]))
    return off


def fake_peer_checks(b, exp, token):
    """A peer of our own (Python) answers exports crafted from a real one
    (probe-one's): each is refused with the status its fault deserves, and B
    holds nothing afterwards."""
    def variant(name, change):
        e = json.loads(json.dumps(exp))
        e["name"] = name
        e["function"]["name"] = name
        m = json.loads(e["manifest"])
        change(e, m)
        e["manifest"] = json.dumps(m) if m is not None else e.get("manifest")
        return json.dumps(e).encode()

    def cuda(e, m):
        m["device"] = "cuda"
        e["function"]["device"] = "cuda"

    def bad_chunk(e, m):
        c = e["extents"][0]["chunks"]
        c[0] = "%016x" % (int(c[0], 16) ^ 1)

    answers = {
        "fake-notjson": (b"not json", 502, "not a JSON object"),
        "fake-version": (variant("fake-version", lambda e, m: e.pop("export_version")), 422, "export version"),
        "fake-major": (variant("fake-major", lambda e, m: e["format"].update(major=2)), 422, "format 2.x"),
        "fake-standin": (variant("fake-standin", lambda e, m: e.update(standin="0" * 16)), 422, "stand-ins"),
        "fake-cuda": (variant("fake-cuda", cuda), 422, "GPU"),
        "fake-chunks": (variant("fake-chunks", bad_chunk), 502, "do not combine"),
        "fake-extents": (variant("fake-extents", lambda e, m: e["extents"].pop()), 502, "extents"),
        "fake-manifest": (variant("fake-manifest", lambda e, m: m.pop("buffers")), 502, "manifest"),
        "fake-entry": (variant("fake-entry", lambda e, m: e["function"].update(program="relative")), 502,
                       "registry entry"),
        "fake-id": (variant("fake-id", lambda e, m: e.update(snapshot="../x")), 502, "snapshot id"),
        # issue 37, item 9: a sparse 512 GiB gpu.data was accepted
        "fake-sparse": (variant("fake-sparse", lambda e, m: m.update(data_bytes=512 << 30)), 502,
                        "its extents end at"),
    }

    class Peer(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            name = self.path.split("/")[3] if self.path.count("/") >= 4 else ""
            body = answers.get(name, (b'{"error":"no"}',))[0]
            ok = self.headers.get("Authorization") == "Bearer " + token and name in answers
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Peer)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        for name, (_, want, words) in answers.items():
            st, ans = b.call("POST", "/system/functions", {"name": name, "from": f"http://127.0.0.1:{srv.server_port}",
                                                           "from_token": token}, timeout=120)
            err = ans.get("error", "") if isinstance(ans, dict) else str(ans)
            check(st == want and words in err, f"{name}: want {want} '{words}', got {st} {ans}")
            check(leftovers(b.state, name) == [], f"{name}: nothing left on B")
    finally:
        srv.shutdown()


def main():
    a = Invoker(os.path.join(tmp, "a"), tmp)
    b = Invoker(os.path.join(tmp, "b"), tmp)
    with open(os.path.join(a.state, "admin.token")) as f:
        token_a = f.read().strip()
    peer = f"http://127.0.0.1:{a.port}"
    # A root invoker runs functions as nobody (--run-as): their init logs go
    # to a folder anyone may write, under a tmp dir anyone may cross.
    logdir = os.path.join(tmp, "inits")
    os.mkdir(logdir)
    os.chmod(tmp, 0o711)
    os.chmod(logdir, 0o1777)
    logs = {n: os.path.join(logdir, f"{n}.inits") for n in ("probe-one", "probe-two", "probe-three", "probe-four")}
    seeds = {"probe-one": (7, 1), "probe-two": (7, 2), "probe-three": (9, 3), "probe-four": (11, 4)}
    for name, (w, p) in seeds.items():
        st, body = a.call("POST", "/system/functions", {"name": name, "program": PROBE, "args": [str(w), str(p), "12"],
                                                      "env": {"PULL_INIT_LOG": logs[name]}}, timeout=300)
        check(st == 201, f"deploy {name} on A: {st} {body}")
        check(lines(logs[name]) == 1, f"{name}: one init on A, log has {lines(logs[name])}")

    # -- bad pulls: clear errors, nothing left on B
    def pull(body, what, want, words=()):
        st, ans = b.call("POST", "/system/functions", body, timeout=300)
        err = ans.get("error", "") if isinstance(ans, dict) else str(ans)
        check(st == want and all(w in err for w in words), f"{what}: want {want} {words}, got {st} {ans}")
        return st, ans

    good = {"name": "probe-one", "from": peer, "from_token": token_a}
    pull(dict(good, **{"from": f"ftp://127.0.0.1:{a.port}"}), "ftp scheme", 400, ("scheme",))
    pull(dict(good, **{"from": "file:///etc/passwd"}), "file scheme", 400, ("scheme",))
    pull(dict(good, **{"from": "not a url"}), "not a URL", 400)
    pull(dict(good, **{"from": peer + "/system/functions"}), "URL with a path", 400, ("path",))
    pull(dict(good, **{"from": peer + "/?x=1"}), "URL with a query", 400, ("query",))
    pull(dict(good, **{"from": f"http://u:p@127.0.0.1:{a.port}"}), "URL with a user", 400, ("user",))
    pull(dict(good, **{"from": 42}), "from not a string", 400)
    pull({"name": "probe-one", "from": peer}, "no token", 400, ("from_token",))
    pull(dict(good, program="/bin/true"), "a pull with deploy fields", 400, ("unknown field",))
    pull(dict(good, name="Bad_Name"), "bad name", 400)
    pull(dict(good, name="nosuch"), "unknown function on the peer", 404, ("no function nosuch",))
    pull(dict(good, from_token="x" * 64), "wrong token", 502, ("token",))
    pull(dict(good, **{"from": f"http://127.0.0.1:{free_port()}"}), "peer not listening", 502, ("reach",))
    check(b.call("GET", "/system/functions")[1] == [], "B lists nothing after the bad pulls")
    check(leftovers(b.state, "probe") == [], f"B holds nothing: {leftovers(b.state, 'probe')}")

    # -- the user a snapshot runs as is this invoker's, not the peer's (issue 37,
    # item 1: from a peer with --run-as self a pulled function ran here as uid 0,
    # and read this invoker's admin token). CRIU gives a restored task the
    # credentials of its image, so an image of another user is refused.
    if os.geteuid() == 0:
        r = Invoker(os.path.join(tmp, "r"), tmp, extra=["--run-as", "self"])
        with open(os.path.join(r.state, "admin.token")) as f:
            token_r = f.read().strip()
        st, body = r.call("POST", "/system/functions", {"name": "probe-root", "program": PROBE,
                                                        "args": ["7", "5", "1"], "env": {"PULL_SHOW_UID": "1"}},
                          timeout=300)
        check(st == 201, f"deploy probe-root on a peer running functions as root: {st} {body}")
        st, out, _ = post_call(r, "probe-root")
        check(st == 200 and out.get("uid") == 0 and out.get("capeff", "0").strip("0") != "",
              f"probe-root runs as root with capabilities on that peer: {st} {out}")
        # pulled by an invoker running functions as nobody: re-owned on arrival
        pull({"name": "probe-root", "from": f"http://127.0.0.1:{r.port}", "from_token": token_r},
             "a snapshot running as root, pulled by an invoker running functions as nobody", 201)
        st, out, _ = post_call(b, "probe-root")
        want_w, want_p = expected(7, 5, mib=1)
        check(st == 200 and out.get("uid") == 65534 and out.get("capeff") == "0000000000000000" and
              out.get("weights") == want_w and out.get("private") == want_p,
              f"probe-root pulled runs here as nobody without capabilities, with its state: {st} {out}")
        st, _ = b.call("DELETE", "/system/functions/probe-root")
        check(st == 200, f"probe-root removed from B: {st}")
        st, ans = r.call("POST", "/system/functions", {"name": "probe-one", "from": peer, "from_token": token_a},
                         timeout=300)
        check(st == 422 and "uid 65534" in str(ans) and "functions here run as uid 0" in str(ans),
              f"and the other way: a snapshot of nobody is not pulled by a peer running functions as root: "
              f"{st} {ans}")
        r.stop()
        # ... nor is one of the right user that holds a file open which that user
        # may not open here: CRIU opens an image's files as root, before the task
        # gets its credentials, and would hand it the file. A peer's image may
        # name any file; here one that was 0644 at the dump and is 0600 now.
        secret = os.path.join(logdir, "secret")
        with open(secret, "w") as f:
            f.write("topsecret42\n")
        os.chmod(secret, 0o644)
        st, body = a.call("POST", "/system/functions", {"name": "probe-keep", "program": PROBE, "args": ["7", "6", "1"],
                                                        "env": {"PULL_KEEP_OPEN": secret}}, timeout=300)
        check(st == 201, f"deploy probe-keep on A (it keeps {secret} open): {st} {body}")
        st, out, _ = post_call(a, "probe-keep")
        check(st == 200 and out.get("kept") == "topsecret42_", f"probe-keep reads the file it holds: {st} {out}")
        os.chmod(secret, 0o600)
        pull({"name": "probe-keep", "from": peer, "from_token": token_a},
             "a snapshot holding a file its user may not open here", 422, ("secret", "uid 65534 may not open"))
        check(leftovers(b.state, "probe") == [], f"B holds nothing of it: {leftovers(b.state, 'probe')}")
        st, _ = a.call("DELETE", "/system/functions/probe-keep")
        check(st == 200, f"probe-keep removed from A: {st}")

    # -- A's export routes: the list, and only it
    st, exp = a.call("GET", "/system/functions/probe-one/export")
    check(st == 200 and exp.get("export_version") == 1 and len(exp.get("snapshot", "")) == 32,
          f"export of probe-one: {st} {str(exp)[:300]}")
    sid = exp.get("snapshot", "")
    wchunks = [e["chunks"] for e in exp.get("extents", []) if e["size"] == 12 * MiB]
    check(len(wchunks) == 1 and len(wchunks[0]) == 3, f"the weights buffer has 3 chunk hashes: {wchunks}")
    check(exp.get("function", {}).get("env", {}).get("PULL_INIT_LOG") == logs["probe-one"],
          "the registry entry travels with its env")
    cpu = [f["path"] for f in exp.get("files", []) if f["path"].startswith("cpu/")]
    check(cpu and all("hash" in f for f in exp["files"] if f["path"].startswith("cpu/")), f"cpu files listed: {cpu}")
    base = "/system/functions/probe-one/export/file"
    st, data = raw_get(a, f"{base}?snapshot={sid}&path=gpu.data&offset=0&length=4096")
    check(st == 200 and len(data) == 4096, f"a gpu.data range: {st} {len(data)}")
    st, data = raw_get(a, f"{base}?snapshot={sid}&path={cpu[0]}&offset=0&length=1")
    check(st == 200 and len(data) == 1, f"a cpu file range: {st}")
    for q, want in ((f"snapshot={sid}&path=../../admin.token&offset=0&length=10", 400),
                    (f"snapshot={sid}&path=cpu/../../../admin.token&offset=0&length=10", 400),
                    (f"snapshot={sid}&path=/etc/passwd&offset=0&length=10", 400),
                    (f"snapshot={sid}&path=manifest.json&offset=0&length=10", 404),
                    (f"snapshot={sid}&path=cpu/nope.img&offset=0&length=10", 404),
                    (f"snapshot={sid}&path=gpu.data&offset=0&length=0", 400),
                    (f"snapshot={sid}&path=gpu.data&offset=0&length={(64 << 20) + 1}", 400),
                    (f"snapshot={sid}&path=gpu.data&offset=-1&length=10", 400),
                    (f"snapshot={sid}&path=gpu.data&offset={1 << 40}&length=10", 416),
                    (f"snapshot={'0' * 32}&path=gpu.data&offset=0&length=10", 409),
                    ("path=gpu.data&offset=0&length=10", 400)):
        st, data = raw_get(a, f"{base}?{q}")
        check(st == want, f"export/file?{q}: want {want}, got {st} {data[:200]}")
    check(raw_get(a, f"{base}?snapshot={sid}&path=gpu.data&offset=0&length=10", token=False)[0] == 401,
          "export/file without the token is 401")
    check(raw_get(a, "/system/functions/probe-one/export", token=False)[0] == 401, "export without the token is 401")
    # a re-snapshot between the export and a range: 409, the puller must start again
    st, exp4 = a.call("GET", "/system/functions/probe-four/export")
    check(st == 200, f"export of probe-four: {st}")
    st, _ = a.call("POST", "/system/functions/probe-four/snapshot", timeout=300)
    check(st == 200, f"re-snapshot of probe-four: {st}")
    st, data = raw_get(a, f"/system/functions/probe-four/export/file?snapshot={exp4.get('snapshot')}"
                          "&path=gpu.data&offset=0&length=10")
    check(st == 409 and b"changed" in data, f"a range of a replaced snapshot: {st} {data[:200]}")

    # -- pull probe-one over HTTP: a cold start on B that never ran init
    st, ans = pull(good, "pull of probe-one", 201)
    pr = ans.get("pull", {}) if isinstance(ans, dict) else {}
    check(pr.get("bytes_fetched", 0) >= 13 * MiB and pr.get("bytes_reused") == 0,
          f"probe-one fetched everything, reused nothing: {pr}")
    check(ans.get("status") == "ready", f"probe-one is ready on B: {ans}")
    pull(good, "a second pull of probe-one", 409, ("exists",))
    want_w, want_p = expected(7, 1)
    st, out, cold = post_call(b, "probe-one")
    check(st == 200 and out == {"weights": want_w, "private": want_p, "inits": 1, "calls": 1} and cold == "true",
          f"probe-one's cold start on B: {st} {out} cold={cold}")
    check(lines(logs["probe-one"]) == 1, f"B ran no init of probe-one: the log has {lines(logs['probe-one'])} lines")
    st, out_a, _ = post_call(a, "probe-one")
    check(st == 200 and out_a.get("weights") == want_w, f"A answers the same: {out_a}")

    # -- pull probe-two with the CLI: the shared weights come from probe-one's copy
    tokfile = os.path.join(tmp, "peer.token")
    with open(tokfile, "w") as f:
        f.write(token_a + "\n")
    os.chmod(tokfile, 0o600)
    r = subprocess.run([PHOS_FN, "deploy", "--gateway", f"http://127.0.0.1:{b.port}", "--state-dir", b.state,
                        "--from", peer, "--from-token-file", tokfile, "probe-two"],
                       capture_output=True, text=True, timeout=300, env=fn_env())
    try:
        pr = json.loads(r.stdout).get("pull", {})
    except ValueError:
        pr = {}
    check(r.returncode == 0 and pr.get("chunks_reused") == 3 and pr.get("bytes_reused") == 12 * MiB and
          pr.get("bytes_fetched", 0) >= MiB, f"phos-fn deploy --from probe-two reuses 3 chunks: {r.returncode} "
          f"{pr} {r.stderr[-500:]}")
    want_w, want_p = expected(7, 2)
    st, out, cold = post_call(b, "probe-two")
    check(st == 200 and out == {"weights": want_w, "private": want_p, "inits": 1, "calls": 1},
          f"probe-two on B: {st} {out}")
    check(lines(logs["probe-two"]) == 1, "B ran no init of probe-two")
    r = subprocess.run([PHOS_FN, "deploy", "--gateway", f"http://127.0.0.1:{b.port}", "--state-dir", b.state,
                        "--from", peer, "probe-three"], capture_output=True, text=True, timeout=60,
                       env={k: v for k, v in fn_env().items() if k != "PHOS_FROM_TOKEN_FILE"})
    check(r.returncode == 2 and "from-token-file" in r.stderr, f"deploy --from without a token: {r.returncode} {r.stderr}")

    # -- a corrupted chunk on A: B's pull fails and leaves nothing
    st, _ = a.call("GET", "/system/functions/probe-three/export")   # A indexes it while it is intact
    check(st == 200, f"export of intact probe-three: {st}")
    flip_byte(a.state, "probe-three")
    st, ans = pull(dict(good, name="probe-three"), "pull of a corrupted chunk", 502, ("checksum mismatch",))
    check(b.call("GET", "/system/functions/probe-three")[0] == 404, "probe-three is not on B")
    check(leftovers(b.state, "probe-three") == [] and not [s for s in os.listdir(os.path.join(b.state, "snapshots"))
                                                           if ".tmp-" in s],
          f"B holds nothing of probe-three: {leftovers(b.state, 'probe-three')}")
    # the same before A ever indexed it: A refuses to export a corrupt snapshot
    flip_byte(a.state, "probe-four", extent=1)
    pull(dict(good, name="probe-four"), "pull of a snapshot corrupt on A", 502, ("corrupt",))
    check(leftovers(b.state, "probe-four") == [], "B holds nothing of probe-four")
    check(sorted(f["name"] for f in b.call("GET", "/system/functions")[1]) == ["probe-one", "probe-two"],
          "B lists the two pulled functions only")

    # -- a peer that sends a bad export: refused before anything is written
    fake_peer_checks(b, exp, token_a)

    # -- the pull outlives a restart of B; a pulled function can be removed
    b.stop()
    b2 = Invoker(b.state, tmp, fault="pull_stall,pull_nospace")
    st, out, cold = post_call(b2, "probe-one")
    check(st == 200 and out.get("weights") == expected(7, 1)[0] and out.get("inits") == 1,
          f"probe-one after B's restart: {st} {out}")
    check(b2.call("DELETE", "/system/functions/probe-two")[0] == 200 and leftovers(b2.state, "probe-two") == [],
          "a pulled function is removed like any other")
    # -- a peer of a later phos-fn (PHOS_FAULT export_newer: its export claims
    # the next version) is refused before anything is fetched; then pulled again
    a.stop()
    a2 = Invoker(a.state, tmp, fault="export_newer")
    # B's instances of a pulled snapshot carry A's owner mark (it is in the
    # CRIU image): A's start-up sweep must leave them to B, which is alive
    st, out, cold = post_call(b2, "probe-one")
    check(st == 200 and cold == "false", f"B's warm instance of probe-one outlived A's restart: {st} {out} cold={cold}")
    check("left running by an earlier invoker" not in a2.logtext(), "A's sweep ended none of B's processes")
    good["from"] = f"http://127.0.0.1:{a2.port}"
    st, ans = b2.call("POST", "/system/functions", dict(good, name="probe-two"), timeout=300)
    check(st == 422 and "export version 2" in ans.get("error", ""), f"a newer peer is refused: {st} {ans}")
    check(leftovers(b2.state, "probe-two") == [], "nothing left of the refused pull")
    # a full disk (PHOS_FAULT pull_nospace) is 507 before anything is written
    st, ans = b2.call("POST", "/system/functions", dict(good, name="probe-two"), timeout=300)
    check(st == 507 and "free" in ans.get("error", ""), f"no free disk: {st} {ans}")
    check(leftovers(b2.state, "probe-two") == [], "nothing left of the pull refused for disk")
    # a remove while the pull runs (PHOS_FAULT pull_stall holds it after the
    # export) cancels it: 409, nothing left, the name free
    res = {}
    t = threading.Thread(target=lambda: res.update(
        r=b2.call("POST", "/system/functions", dict(good, name="probe-two"), timeout=300)))
    t.start()
    phase = None
    for _ in range(200):
        st, desc = b2.call("GET", "/system/functions/probe-two")
        phase = desc.get("progress", {}).get("phase") if st == 200 else None
        if phase == "pulling":
            break
        time.sleep(0.05)
    check(phase == "pulling", f"describe shows the pull in progress: {phase}")
    st, ans = b2.call("DELETE", "/system/functions/probe-two")
    t.join(60)
    check(st == 200 and res.get("r", (0,))[0] == 409, f"a remove cancels the pull: {st} {ans} {res}")
    check(leftovers(b2.state, "probe-two") == [], f"nothing left of the cancelled pull: {leftovers(b2.state, 'probe-two')}")
    st, ans = b2.call("POST", "/system/functions", dict(good, name="probe-two"), timeout=300)
    check(st == 201 and ans.get("pull", {}).get("chunks_reused") == 3, f"pulled again after a remove: {st} {ans}")
    check(lines(logs["probe-one"]) == 1 and lines(logs["probe-two"]) == 1, "no init ran anywhere but on A")
    b2.stop()
    a2.stop()


try:
    main()
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
    shutil.rmtree(tmp, ignore_errors=True)
done("pull")
