# SPDX-License-Identifier: MIT
"""phos-fn sends an invoker's admin token to that invoker alone (issue 37,
item 3).

The CLI read STATE/admin.token (--state-dir, or the invoker's default state
dir) and sent it, as a bearer token, to whatever --gateway named, for every
command, invoke included, over plain http. Now (invoker/cli/cli_client.h):

- a fake invoker in Python on another loopback port records the
  Authorization headers it gets: `list`, `invoke` and `describe` sent there
  with --state-dir of a real invoker carry no token (a note says why), and
  the same commands to the real invoker (its STATE/listen) still work;
- an explicit --token-file goes where it is told, on loopback;
- in a network namespace of this test's own (only `lo`, with 192.0.2.1 on it
  too), a fake invoker at http://192.0.2.1 gets no request at all from a
  command with a token: the CLI refuses plain http to an address that is not
  loopback, saying so; with --insecure-http it sends it.
"""
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading

from harness import PHOS_FN, Invoker, check, done, fn_env, free_port, procs, program

MISBEHAVE = program("tests", "integration", "misbehave")
tmp = tempfile.mkdtemp(prefix="phos-cli-token-test-")
seen = []


class Fake(http.server.BaseHTTPRequestHandler):
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        seen.append((self.command, self.path, self.headers.get("Authorization")))
        body = b"[]" if self.path == "/system/functions" else b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = answer

    def log_message(self, *a):
        pass


def cli(*args, stdin=""):
    e = fn_env()
    e.pop("PHOS_GATEWAY", None)
    return subprocess.run([PHOS_FN, *args], input=stdin, capture_output=True, text=True, timeout=60, env=e)


def netns_part(tf):
    """The plain-http refusal, against 192.0.2.1 inside a namespace of our own."""
    port = free_port()
    script = f"""
set -e
ip link set lo up
ip addr add 192.0.2.1/32 dev lo
{sys.executable} -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        print("REQUEST", self.path, self.headers.get("Authorization"), flush=True)
        self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"[]")
    def log_message(self, *a): pass
s = http.server.HTTPServer(("192.0.2.1", {port}), H); s.timeout = 20
print("up", flush=True); s.handle_request()
' > {tmp}/fake.out 2>&1 &
for i in $(seq 100); do grep -q up {tmp}/fake.out 2>/dev/null && break; sleep 0.05; done
{PHOS_FN} list --gateway http://192.0.2.1:{port} --token-file {tf} > {tmp}/plain.out 2>&1 && echo plain-rc=0 || echo plain-rc=$?
{PHOS_FN} list --gateway http://192.0.2.1:{port} --token-file {tf} --insecure-http > {tmp}/insecure.out 2>&1 && echo insecure-rc=0 || echo insecure-rc=$?
wait
"""
    try:
        p = subprocess.run(["unshare", "-n", "sh", "-c", script], capture_output=True, text=True, timeout=60,
                           env=fn_env())
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"cli_token: no network namespace here ({e}): that part skipped", flush=True)
        return
    if "plain-rc" not in p.stdout:
        print(f"cli_token: no network namespace here ({p.stderr.strip()[-200:]}): that part skipped", flush=True)
        return
    fake = open(f"{tmp}/fake.out").read()
    plain = open(f"{tmp}/plain.out").read()
    check("plain-rc=0" not in p.stdout and "refusing" in plain and "--insecure-http" in plain,
          f"plain http to 192.0.2.1 with a token is refused: {p.stdout} {plain}")
    requests = [line for line in fake.splitlines() if line.startswith("REQUEST")]
    check(len(requests) == 1, f"only the --insecure-http command reached the fake invoker: {requests}")
    check("insecure-rc=0" in p.stdout and requests and "Bearer" in requests[0],
          f"with --insecure-http the token goes: {p.stdout} {requests}")


def main():
    state = os.path.join(tmp, "state")
    inv = Invoker(state, tmp)
    with open(os.path.join(state, "admin.token")) as f:
        token = f.read().strip()
    st, body = inv.call("POST", "/system/functions", {"name": "mb", "program": MISBEHAVE})
    check(st == 201, f"deploy: {st} {body}")

    fake = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    threading.Thread(target=fake.serve_forever, daemon=True).start()
    other = f"http://127.0.0.1:{fake.server_address[1]}"
    for args in (["list"], ["describe", "mb"], ["invoke", "mb"]):
        seen.clear()
        p = cli(*args, "--gateway", other, "--state-dir", state, stdin="{}")
        check(seen and all(a is None for _, _, a in seen),
              f"{args[0]} to another address with --state-dir sends no token: {seen} {p.stderr}")
        check("not sending the admin token" in p.stderr, f"... and says so: {p.stderr}")
        check(not any(token in str(a) for _, _, a in seen), "the token never reached the fake invoker")

    real = f"http://127.0.0.1:{inv.port}"
    p = cli("list", "--gateway", real, "--state-dir", state)
    check(p.returncode == 0 and "mb" in p.stdout and "not sending" not in p.stderr,
          f"the real invoker gets its own token: {p.returncode} {p.stderr}")
    p = cli("list", "--gateway", f"http://localhost:{inv.port}", "--state-dir", state)
    check(p.returncode == 0 and "mb" in p.stdout, f"... as localhost too: {p.returncode} {p.stderr}")
    p = cli("invoke", "mb", "--gateway", real, "--state-dir", state, stdin="{}")
    check(p.returncode == 0 and json.loads(p.stdout or "{}").get("gpu") == 1234, f"invoke works: {p.stderr}")

    tf = os.path.join(tmp, "token")
    with open(tf, "w") as f:
        f.write(token + "\n")
    os.chmod(tf, 0o600)
    seen.clear()
    p = cli("list", "--gateway", other, "--token-file", tf)
    check(p.returncode == 0 and seen and seen[0][2] == f"Bearer {token}",
          f"--token-file goes where it is told, on loopback: {seen} {p.stderr}")
    fake.shutdown()

    if os.geteuid() == 0 and shutil.which("unshare"):
        netns_part(tf)
    inv.stop()


try:
    main()
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
    shutil.rmtree(tmp, ignore_errors=True)
done("cli_token")
