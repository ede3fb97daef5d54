# SPDX-License-Identifier: MIT
"""What phos-invoker protects, tried as a hostile but fair client would (issue
10, items 1-5; sim device, loopback only):

1. the control plane always needs a token: STATE/admin.token is made (0600,
   64 hex digits) and phos-fn finds it by itself; no token, a text/plain
   deploy (415), a foreign Host or Origin (403) change nothing; invocation
   stays open on loopback, --protect-invoke closes it;
2. the state directory is 0700 (also when it was 0755), registry files and
   snapshot files are unreadable to another user; a token file readable by
   others, or shorter than 16 non-blank characters, is refused;
3. registry writes never follow a planted symlink (at the old predictable
   temp names, or at the registry file itself); an admin.token symlink is refused;
4. %00 and other control characters in the path or query are 400 (nothing
   invoked); a client-supplied "created" is refused; libmicrohttpd's own
   protocol errors leave the invoker serving; invocation errors show no
   absolute paths;
5. an idle half-sent request is dropped after --conn-timeout; one address
   cannot take more than --max-connections-per-ip connections; bodies are
   admitted against --body-memory (spilling off) by their Content-Length before they are
   buffered (503, and 413 for a body over the whole budget).
"""
import http.client
import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time

from harness import BUILD, PHOS_FN, TWINS, check, done, free_port, program

INVOKER = os.path.join(BUILD, "invoker", "phos-invoker")
MISBEHAVE = program("tests", "integration", "misbehave")

tmp = tempfile.mkdtemp(prefix="phos-security-test-")
os.chmod(tmp, 0o755)   # so that "nobody" could reach the state dir if its own mode let it
procs = []


def env(**extra):
    e = dict(os.environ, PHOS_SIM_TWINS=TWINS)
    if os.environ.get("PHOS_TEST_PRELOAD"):
        e["LD_PRELOAD"] = os.environ["PHOS_TEST_PRELOAD"]
    e.pop("PHOS_STATE_DIR", None)
    e.update(extra)
    return e


def start(state, extra=(), expect_fail=False):
    """(process, port); with expect_fail, (returncode, output) of an invoker that must not start."""
    port = free_port()
    logname = os.path.join(tmp, f"invoker-{port}.log")
    log = open(logname, "w")
    p = subprocess.Popen([INVOKER, "--listen", f"127.0.0.1:{port}", "--state-dir", state, "--device", "sim",
                          "--pool", "0", *extra], stdout=log, stderr=subprocess.STDOUT, env=env())
    procs.append(p)
    for _ in range(300):
        if p.poll() is not None:
            break
        try:
            if raw(port, b"GET /healthz HTTP/1.0\r\n\r\n").split(b"\r\n")[0].endswith(b" 200 OK"):
                if expect_fail:
                    return None, "it started"
                return p, port
        except OSError:
            pass
        time.sleep(0.05)
    if expect_fail:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
        return p.returncode, open(logname).read()
    raise SystemExit(f"phos-invoker did not start: {open(logname).read()}")


def stop(p):
    p.terminate()
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def raw(port, data, timeout=10, src=None):
    """Sends raw bytes, returns everything the server answers until it closes (or timeout)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(src, 0) if src else None)
    data = data.replace(b"Host: 127.0.0.1\r\n", b"Host: 127.0.0.1:%d\r\n" % port)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                b = s.recv(65536)
            except socket.timeout:
                break
            if not b:
                break
            out += b
            if b"\r\n\r\n" in out and b"Connection: close" not in out and len(out) > 4096 * 1024:
                break
        return out
    finally:
        s.close()


def request(port, method, path, body=None, headers=None, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    try:
        parsed = json.loads(data)
    except ValueError:
        parsed = data.decode(errors="replace")
    return r.status, parsed, hdrs


def as_nobody_can_read(path):
    """True when uid/gid 65534 can open path for reading (we run as root)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            with open(path, "rb") as f:
                f.read(1)
            os._exit(0)
        except BaseException:  # noqa: BLE001 - the child reports by exit status only
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.WEXITSTATUS(status) == 0


def write_token(path, text, mode):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def main():
    state = os.path.join(tmp, "state")
    os.makedirs(os.path.join(state, "functions"))
    os.chmod(state, 0o755)       # as an older invoker left it
    os.chmod(os.path.join(state, "functions"), 0o755)
    outside = os.path.join(tmp, "outside.txt")
    with open(outside, "w") as f:
        f.write("precious\n")
    os.chmod(outside, 0o644)

    # item 3: symlinks at the names the old registry writer used (NAME.json.tmp.<tid>),
    # for every tid the invoker may get, and at the registry file itself
    for tid in range(os.getpid(), os.getpid() + 3000):
        os.symlink(outside, os.path.join(state, "functions", f"sec.json.tmp.{tid}"))
    os.symlink(outside, os.path.join(state, "functions", "sec.json"))

    inv, port = start(state)

    # --- item 1: the admin token ---
    tok_path = os.path.join(state, "admin.token")
    st_tok = os.lstat(tok_path)
    token = open(tok_path).read().strip()
    check(stat.S_ISREG(st_tok.st_mode) and stat.S_IMODE(st_tok.st_mode) == 0o600,
          f"admin.token is a 0600 file: {oct(st_tok.st_mode)}")
    check(len(token) >= 32 and all(c in "0123456789abcdef" for c in token), f"admin.token: 32+ hex digits ({len(token)})")
    auth = {"Authorization": f"Bearer {token}"}
    jauth = dict(auth, **{"Content-Type": "application/json"})
    deploy = {"name": "sec", "program": MISBEHAVE, "limits": {"max_body_bytes": 3 << 20}}
    evil = {"name": "evil", "program": "/bin/sh", "args": ["-c", f"id > {tmp}/pwned"]}

    st, body, h = request(port, "POST", "/system/functions", evil, {"Content-Type": "application/json"})
    check(st == 401 and "token" in body.get("error", "") and h.get("www-authenticate") == "Bearer",
          f"deploy without a token on loopback: 401 ({st} {body})")
    check(request(port, "GET", "/system/functions")[0] == 401, "list without a token: 401")
    check(request(port, "GET", "/metrics")[0] == 401, "metrics without a token: 401")
    check(request(port, "DELETE", "/system/functions/sec")[0] == 401, "remove without a token: 401")
    check(request(port, "GET", "/system/functions", headers={"Authorization": "Bearer " + token[:-1] + "x"})[0] == 401,
          "a token one character off: 401")
    st, body, _ = request(port, "POST", "/system/functions", evil, dict(auth, **{"Content-Type": "text/plain"}))
    check(st == 415 and "application/json" in body.get("error", ""), f"text/plain deploy: 415 ({st} {body})")
    st, body, _ = request(port, "POST", "/system/functions", json.dumps(evil), auth)
    check(st == 415, f"deploy without a content type: 415 ({st} {body})")
    # a web page's fetch: foreign Host (DNS rebinding) or foreign Origin, even with a body that would deploy
    for hdrs, why in [({"Host": f"evil.example:{port}"}, "foreign Host"),
                      ({"Host": f"127.0.0.1:{port + 1}"}, "Host with another port"),
                      ({"Origin": "http://evil.example"}, "foreign Origin"),
                      ({"Origin": "null"}, "Origin null"),
                      ({"Origin": f"http://127.0.0.1:{port}/x"}, "Origin with a path")]:
        st, body, _ = request(port, "POST", "/system/functions", evil, dict(jauth, **hdrs))
        check(st == 403 and "error" in body, f"{why}: 403 ({st} {body})")
    st, body, _ = request(port, "POST", "/function/sec", {}, {"Host": f"evil.example:{port}"})
    check(st == 403, f"invocation with a foreign Host: 403 ({st} {body})")
    out = raw(port, b"GET /system/functions HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n"
              b"Authorization: Bearer " + token.encode() + b"\r\nConnection: close\r\n\r\n")
    check(out.startswith(b"HTTP/1.1 403"), f"two Host headers: 403 ({out[:60]!r})")
    check(not os.path.exists(os.path.join(tmp, "pwned")), "nothing ran")
    st, body, _ = request(port, "GET", "/system/functions", headers=auth)
    check(st == 200 and body == [], f"nothing deployed by the refused requests: {st} {body}")
    for hdrs, why in [({"Host": f"localhost:{port}"}, "Host localhost"),
                      ({"Host": f"[::1]:{port}"}, "Host [::1]"),
                      ({"Origin": f"http://127.0.0.1:{port}"}, "our own Origin"),
                      ({"Origin": f"http://localhost:{port}"}, "Origin localhost")]:
        st, body, _ = request(port, "GET", "/system/functions", headers=dict(auth, **hdrs))
        check(st == 200, f"{why} is served: {st} {body}")

    # the CLI finds the token in the state dir (--state-dir, or $PHOS_STATE_DIR)
    gw = ["--gateway", f"http://127.0.0.1:{port}"]
    p = subprocess.run([PHOS_FN, "deploy", *gw, "--state-dir", state, "--name", "sec", "--limit",
                        "max_body_bytes=3145728", "--", MISBEHAVE], capture_output=True, text=True, timeout=120, env=env())
    check(p.returncode == 0 and json.loads(p.stdout or "{}").get("status") == "ready",
          f"phos-fn deploy with --state-dir: {p.stderr}")
    p = subprocess.run([PHOS_FN, "list", *gw], capture_output=True, text=True, timeout=30,
                       env=env(PHOS_STATE_DIR=state))
    check(p.returncode == 0 and "sec" in p.stdout, f"phos-fn list with $PHOS_STATE_DIR: {p.stderr}")
    p = subprocess.run([PHOS_FN, "list", *gw], capture_output=True, text=True, timeout=30,
                       env=env(HOME=os.path.join(tmp, "nohome"), XDG_STATE_HOME=os.path.join(tmp, "noxdg")))
    check(p.returncode != 0 and "401" in p.stderr and "--token-file" in p.stderr,
          f"phos-fn without the token: 401 with a hint: {p.stderr}")

    # invocation stays open on loopback; so does reading an async call by its id
    st, body, _ = request(port, "POST", "/function/sec", {"hello": 1})
    check(st == 200 and body.get("calls") == 1, f"invoke without a token: {st} {body}")
    st, body, _ = request(port, "POST", "/async-function/sec", {"hello": 2})
    check(st == 202 and "call_id" in body, f"async invoke without a token: {st} {body}")
    cid = body.get("call_id", "x")
    for _ in range(200):
        st, body, _ = request(port, "GET", f"/system/calls/{cid}")
        if st != 200 or body.get("status") not in ("queued", "running"):
            break
        time.sleep(0.05)
    check(st == 200 and body.get("code") == 200, f"the async result by its id, without a token: {st} {body}")

    # --- item 2: private state ---
    def mode(p):
        return stat.S_IMODE(os.lstat(p).st_mode)

    check(mode(state) == 0o700, f"state dir 0700 (was 0755): {oct(mode(state))}")
    for sub in ("functions", "snapshots"):
        check(mode(os.path.join(state, sub)) == 0o700, f"{sub}/ 0700: {oct(mode(os.path.join(state, sub)))}")
    reg = os.path.join(state, "functions", "sec.json")
    check(os.path.isfile(reg) and not os.path.islink(reg) and mode(reg) == 0o600, f"registry file 0600: {oct(mode(reg))}")
    loose = []
    snapdir = os.path.join(state, "snapshots", "sec")
    for root, dirs, files in os.walk(snapdir):
        for n in dirs + files:
            p = os.path.join(root, n)
            if not os.path.islink(p) and mode(p) & 0o077:
                loose.append((p, oct(mode(p))))
    check(os.path.isdir(os.path.join(snapdir, "cpu")) and not loose, f"snapshot files private: {loose[:5]}")
    if os.geteuid() == 0:
        cpu_files = [os.path.join(snapdir, "cpu", n) for n in os.listdir(os.path.join(snapdir, "cpu"))]
        os.chmod(state, 0o755)   # even where the directory is reachable, the files are not
        os.chmod(os.path.join(state, "functions"), 0o755)
        os.chmod(os.path.join(state, "snapshots"), 0o755)
        os.chmod(snapdir, 0o755)
        os.chmod(os.path.join(snapdir, "cpu"), 0o755)
        check(as_nobody_can_read(outside), "the nobody probe works (it reads a 0644 file)")
        check(not as_nobody_can_read(reg), "nobody cannot read the registry file (its env)")
        check(not as_nobody_can_read(tok_path), "nobody cannot read admin.token")
        check(cpu_files and not any(as_nobody_can_read(f) for f in cpu_files), "nobody cannot read the CRIU images")
        os.chmod(state, 0o700)

    # --- item 3: nothing written through a symlink ---
    check(open(outside).read() == "precious\n", "the file behind the planted symlinks is untouched")
    left = [n for n in os.listdir(os.path.join(state, "functions")) if n.startswith(".sec.json.tmp")]
    check(not left, f"no temp file left: {left}")

    # --- item 4: control characters, created, MHD errors, paths ---
    def calls_of(name):
        _, text, _ = request(port, "GET", "/metrics", headers=auth)
        for line in text.splitlines():
            if line.startswith(f'phos_invocation_duration_seconds_count{{function="{name}"}} '):
                return float(line.split()[-1])
        return 0.0

    before = calls_of("sec")
    for path in ["/function/sec%00junk", "/function/sec%00", "/function/sec%0a", "/function/sec%1F",
                 "/function/sec%7f", "/async-function/sec%00x", "/function/sec?x=%00", "/function/sec?a=b%0d%0a"]:
        st, body, _ = request(port, "POST", path, {"hello": 1})
        check(st == 400 and "control character" in str(body), f"{path}: 400 ({st} {body})")
    st, body, _ = request(port, "GET", "/system/logs?name=sec%00x&tail=5", headers=auth)
    check(st == 400, f"NUL in a query value: 400 ({st} {body})")
    # tail takes digits alone (issue 37, item 9: " 5" and "+5" passed strtol)
    for tail in ("%205", "+5", "5%20", "", "0", "100001", "0x10", "1e3"):
        st, body, _ = request(port, "GET", f"/system/logs?name=sec&tail={tail}", headers=auth)
        check(st == 400 and "tail=" in str(body), f"tail={tail}: 400 ({st} {body})")
    st, body, _ = request(port, "GET", "/system/logs?name=sec&tail=5", headers=auth)
    check(st == 200, f"tail=5: 200 ({st} {body})")
    check(calls_of("sec") == before, f"nothing was invoked by them ({before} -> {calls_of('sec')})")
    st, body, _ = request(port, "POST", "/system/functions", {"name": "dated", "program": MISBEHAVE, "created": 1.0},
                          jauth)
    check(st == 400 and "created" in body.get("error", ""), f"client-supplied created: 400 ({st} {body})")

    # libmicrohttpd's own protocol errors: its status, the connection closed,
    # never a hang, a crash or a call, and a JSON body like every other answer
    # (our patched build of it, docs/invoker-api.md, "What the invoker protects").
    before = calls_of("sec")
    mhd = [(b"POST /function/sec HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n",
            "bad chunking", b"400"),
           (b"POST /function/sec HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 12abc\r\n\r\n{}", "bad Content-Length",
            b"400"),
           (b"GET /healthz HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n", "an HTTP/2.0 line", b"505"),
           (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n", "a huge header",
            b"431")]
    for data, why, want in mhd:
        try:
            out = raw(port, data)
        except OSError as e:
            out = repr(e).encode()
        head, _, rest = out.partition(b"\r\n\r\n")
        status = out.split(b" ", 2)[1] if out.startswith(b"HTTP/1.") else b""
        check(status == want and b"Connection: close" in head, f"{why}: {want.decode()}, closed ({out[:160]!r})")
        check(b"Content-Type: application/json" in head and head.count(b"Content-Length:") == 1,
              f"{why}: one JSON answer ({head!r})")
        try:
            err = json.loads(rest.decode())
        except ValueError:
            err = None
        check(isinstance(err, dict) and isinstance(err.get("error"), str) and len(err["error"]) > 8
              and "<" not in err["error"], f"{why}: a JSON error body ({rest[:200]!r})")
        check(inv.poll() is None, f"{why}: the invoker is alive")
    check(calls_of("sec") == before, f"none of them invoked the function ({before} -> {calls_of('sec')})")
    # our own 4xx bodies are JSON, for these too
    out = raw(port, b"POST /function/sec HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
              b"Content-Length: 4194304\r\n\r\n")
    head, _, rest = out.partition(b"\r\n\r\n")
    check(head.startswith(b"HTTP/1.1 413") and b"Content-Type: application/json" in head and b'"error"' in rest,
          f"413 is JSON: {out[:200]!r}")

    # an invocation that fails inside the invoker shows no absolute path to a caller without a token
    st, body, _ = request(port, "POST", "/system/functions", {"name": "sec2", "program": MISBEHAVE}, jauth)
    check(st == 201, f"deploy sec2: {st} {body}")
    snap2 = os.path.join(state, "snapshots", "sec2")
    os.unlink(os.path.join(snap2, "gpu.data"))
    st, body, _ = request(port, "POST", "/function/sec2", {"hello": 1})
    text = json.dumps(body)
    print(f"a broken snapshot answers: {st} {text[:300]}", flush=True)
    check(st >= 500 and "error" in body and tmp not in text and "/snapshots/" not in text,
          f"an error from a broken snapshot names no path: {st} {text[:300]}")
    stop(inv)

    # --- item 2: token files ---
    tf = os.path.join(tmp, "token")
    for text, fmode, why, want in [("0123456789abcdefXYZ\n", 0o644, "readable by others", "chmod 600"),
                                   ("0123456789abcdefXYZ\n", 0o640, "readable by the group", "chmod 600"),
                                   ("0123456789abcde\n", 0o600, "15 characters", "16 characters"),
                                   ("   0123456789\t  \n", 0o600, "blank-padded short", "16 characters"),
                                   ("01234567 89abcdef\n", 0o600, "a blank inside", "blank")]:
        write_token(tf, text, fmode)
        rc, out = start(os.path.join(tmp, "state-tf"), ["--token-file", tf], expect_fail=True)
        check(rc not in (0, None) and want in out, f"token file {why}: refused ({rc}: {out[-300:]})")
    write_token(tf, "0123456789abcdefXYZ\n", 0o644)
    p = subprocess.run([PHOS_FN, "list", "--gateway", "http://127.0.0.1:1", "--token-file", tf], capture_output=True,
                       text=True, timeout=30, env=env())
    check(p.returncode != 0 and "chmod 600" in p.stderr, f"phos-fn refuses a loose token file too: {p.stderr}")
    write_token(tf, "  0123456789abcdef  \n", 0o600)
    p2, port2 = start(os.path.join(tmp, "state-tf"), ["--token-file", tf, "--protect-invoke"])
    check(request(port2, "GET", "/system/functions", headers={"Authorization": "Bearer 0123456789abcdef"})[0] == 200,
          "a 16-character token (blanks around it trimmed) works")
    check(not os.path.exists(os.path.join(tmp, "state-tf", "admin.token")), "no admin.token made with --token-file")
    st, body, _ = request(port2, "POST", "/function/nope", {})
    check(st == 401, f"--protect-invoke: invocation needs the token ({st})")
    stop(p2)
    # a planted admin.token symlink (to a file anyone may read) is not used
    st3 = os.path.join(tmp, "state-link")
    os.makedirs(st3, mode=0o700)
    write_token(os.path.join(tmp, "known"), "known-token-0123456789\n", 0o600)
    os.symlink(os.path.join(tmp, "known"), os.path.join(st3, "admin.token"))
    rc, out = start(st3, expect_fail=True)
    check(rc not in (0, None) and "admin.token" in out, f"admin.token as a symlink: refused ({rc}: {out[-300:]})")

    # --- item 5: connections and body memory ---
    st5 = os.path.join(tmp, "state5")
    p5, port5 = start(st5, ["--conn-timeout", "2", "--max-connections-per-ip", "6", "--body-memory", "2097152",
                            "--body-spill", "0"])
    tok5 = open(os.path.join(st5, "admin.token")).read().strip()
    st, body, _ = request(port5, "POST", "/system/functions",
                          {"name": "big", "program": MISBEHAVE, "limits": {"max_body_bytes": 3 << 20}},
                          {"Authorization": f"Bearer {tok5}", "Content-Type": "application/json"})
    check(st == 201, f"deploy big: {st} {body}")
    # a half-sent request is dropped after --conn-timeout
    s = socket.create_connection(("127.0.0.1", port5), timeout=20)
    s.sendall(b"POST /function/big HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Le" % port5)
    t0 = time.monotonic()
    try:
        got = s.recv(4096)
    except OSError:
        got = b""
    waited = time.monotonic() - t0
    s.close()
    check(waited < 15 and not got.startswith(b"HTTP/1.1 2"), f"a half-sent request is dropped ({waited:.1f} s, {got[:60]!r})")

    # one address cannot hold more than --max-connections-per-ip; another one is still served
    # (a connection of before may still count for a moment after its close: MHD
    # forgets it when its polling thread cleans up; one refused is opened again)
    held = []
    t_held = time.monotonic()
    while len(held) < 6 and time.monotonic() - t_held < 10:
        c = socket.create_connection(("127.0.0.1", port5), timeout=10)
        c.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % port5)   # never finished
        time.sleep(0.1)
        c.setblocking(False)
        try:
            alive = c.recv(1) != b""
        except BlockingIOError:
            alive = True
        except OSError:
            alive = False
        c.setblocking(True)
        c.settimeout(10)
        if alive:
            held.append(c)
        else:
            c.close()
            time.sleep(0.2)
    check(len(held) == 6, f"six connections held from 127.0.0.1 ({len(held)})")
    time.sleep(0.3)
    extra = socket.create_connection(("127.0.0.1", port5), timeout=10)
    try:
        extra.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        refused = b" 200 OK" not in extra.recv(4096).split(b"\r\n")[0]
    except OSError:
        refused = True
    extra.close()
    check(refused, "a 7th connection from 127.0.0.1 is refused")
    try:
        other = raw(port5, b"GET /healthz HTTP/1.0\r\n\r\n", src="127.0.0.2")
    except OSError as e:
        other = repr(e).encode()
    check(other.startswith(b"HTTP/1.1 200"), f"127.0.0.2 is served meanwhile: {other[:80]!r}")
    for c in held:
        c.close()
    time.sleep(0.5)

    # bodies: admitted by Content-Length against the 2 MiB budget before buffering
    a = socket.create_connection(("127.0.0.1", port5), timeout=20)
    size_a = 1536 << 10
    body_a = b'{"pad":"' + b"a" * (size_a - 10) + b'"}'
    # Expect: 100-continue: the invoker says "continue" once it has admitted the body
    a.sendall(b"POST /function/big HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n" % port5 +
              b"Expect: 100-continue\r\nContent-Length: " + str(len(body_a)).encode() + b"\r\n\r\n")
    cont = a.recv(4096)
    check(cont.startswith(b"HTTP/1.1 100"), f"the first body is admitted: {cont[:80]!r}")
    a.sendall(body_a[:1024])
    out = raw(port5, b"POST /function/big HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Connection: close\r\nContent-Length: 1048576\r\n\r\n")
    head, _, rest = out.partition(b"\r\n\r\n")
    check(head.startswith(b"HTTP/1.1 503") and b"Retry-After" in head and b"error" in rest,
          f"a second body over the budget: 503 at once ({out[:200]!r})")
    a.sendall(body_a[1024:])
    ans = b""
    a.settimeout(30)
    while b"\r\n\r\n" not in ans:
        b = a.recv(65536)
        if not b:
            break
        ans += b
    a.close()
    check(ans.startswith(b"HTTP/1.1 200"), f"the admitted body is served: {ans[:100]!r}")
    for _ in range(50):   # the first request's budget is given back as it completes
        try:
            st, body, _ = request(port5, "POST", "/function/big", b'{"pad":"' + b"b" * (1 << 20) + b'"}')
        except (BrokenPipeError, ConnectionResetError):
            # still over the budget: the 503 came, and the connection closed,
            # while the client was still sending the body
            st, body = 503, "(closed while sending)"
        if st != 503:
            break
        time.sleep(0.1)
    check(st == 200, f"the budget came back: {st} {str(body)[:200]}")
    out = raw(port5, b"POST /function/big HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
              b"Content-Length: 2621440\r\n\r\n")
    check(out.startswith(b"HTTP/1.1 413") and b"body-memory" in out, f"a body over the whole budget: 413 ({out[:200]!r})")
    stop(p5)


try:
    main()
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    shutil.rmtree(tmp, ignore_errors=True)
done("security")
