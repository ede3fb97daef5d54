# SPDX-License-Identifier: MIT
"""A root invoker runs functions as nobody (issue 10, item 1), and CRIU still
snapshots and restores them (sim device; skipped when not root).

- deploy of `sh -c 'id -u; id -g; cat STATE/admin.token; exec misbehave'`:
  the function's user and group are nobody's (not 0), it could not read the
  admin token, and it has a /proc of its own pid namespace (its pid 1);
- the snapshot restores: calls are answered, by a process of nobody's uid;
- a re-snapshot dumps that restored process again, and a restarted invoker
  restores the function from its snapshot on disk;
- --run-as 65534:65533 takes a uid and gid; --run-as self runs it as root;
  --run-as of a user that is not one is refused at start.
"""
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time

from harness import BUILD, check, done, Invoker, procs, program

if os.geteuid() != 0:
    print("run_as: skipped, not root")
    sys.exit(77)

MISBEHAVE = program("tests", "integration", "misbehave")
MARK = "PHOS_INVOKER_STATE"
try:
    NOBODY = pwd.getpwnam("nobody")
    NOBODY_IDS = (NOBODY.pw_uid, NOBODY.pw_gid)
except KeyError:
    NOBODY_IDS = (65534, 65534)

tmp = tempfile.mkdtemp(prefix="phos-run-as-test-")
os.chmod(tmp, 0o755)
out = os.path.join(tmp, "out")    # where the functions write what they saw
os.mkdir(out)
os.chmod(out, 0o1777)
state = os.path.realpath(os.path.join(tmp, "state"))


def uids_of(state_dir):
    """{pid: (uid, gid)} of the function processes marked as this state dir's."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if f"{MARK}={state_dir}".encode() not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if not f.read().startswith(MISBEHAVE.encode()):
                    continue
            with open(f"/proc/{d}/status") as f:
                st = {line.split(":")[0]: line.split()[1] for line in f if line.startswith(("Uid", "Gid"))}
            found[int(d)] = (int(st["Uid"]), int(st["Gid"]))
        except (OSError, KeyError):
            pass
    return found


def settled_uids(state_dir):
    """uids_of, once no process of a restore in progress (CRIU's, still root
    until it gives the restored task its credentials) is among them."""
    for _ in range(100):
        ids = uids_of(state_dir)
        if ids and all(v == NOBODY_IDS for v in ids.values()):
            break
        time.sleep(0.1)
    return ids


def deploy(inv, name):
    seen = os.path.join(out, name)
    script = (f"id -u > {seen}.uid; id -g > {seen}.gid; cat {state}/admin.token > {seen}.token 2>/dev/null; "
              f"tr '\\0' ' ' < /proc/1/cmdline > {seen}.init; exec {MISBEHAVE}")
    st, body = inv.call("POST", "/system/functions", {"name": name, "program": "/bin/sh", "args": ["-c", script]},
                        timeout=300)
    check(st == 201, f"deploy {name}: {st} {body}")

    def read(ext):
        try:
            with open(f"{seen}.{ext}") as f:
                return f.read().strip()
        except OSError:
            return None
    return read


def main():
    inv = Invoker(state, tmp)
    read = deploy(inv, "ru")
    check(read("uid") == str(NOBODY_IDS[0]) and read("gid") == str(NOBODY_IDS[1]),
          f"the function runs as nobody: uid {read('uid')}, gid {read('gid')}")
    check(read("token") == "", f"it cannot read the admin token ({read('token')!r})")
    check((read("init") or "").startswith("/bin/sh -c id -u"),
          f"its /proc is its pid namespace's (pid 1 there is itself, not {read('init')!r})")
    for i in range(3):
        st, body = inv.call("POST", "/function/ru", {})
        check(st == 200 and body.get("gpu") == 1234, f"call {i} of the restored function: {st} {body}")
    ids = settled_uids(state)
    check(ids and all(v == NOBODY_IDS for v in ids.values()), f"the restored process is nobody's: {ids}")

    st, body = inv.call("POST", "/system/functions/ru/snapshot", timeout=300)
    check(st == 200, f"re-snapshot of the restored process: {st} {body}")
    st, body = inv.call("POST", "/function/ru", {})
    check(st == 200 and body.get("gpu") == 1234, f"a call after the re-snapshot: {st} {body}")
    inv.stop()

    inv = Invoker(state, tmp)
    st, body = inv.call("POST", "/function/ru", {})
    check(st == 200 and body.get("gpu") == 1234, f"a restarted invoker restores it from disk: {st} {body}")
    ids = settled_uids(state)
    check(ids and all(v == NOBODY_IDS for v in ids.values()), f"... as nobody: {ids}")
    inv.stop()

    inv = Invoker(state, tmp, extra=["--run-as", "65534:65533"])
    read = deploy(inv, "ids")
    check(read("uid") == "65534" and read("gid") == "65533", f"--run-as UID:GID: {read('uid')}:{read('gid')}")
    st, body = inv.call("POST", "/function/ids", {})
    check(st == 200, f"and it restores: {st} {body}")
    inv.stop()

    inv = Invoker(state, tmp, extra=["--run-as", "self"])
    read = deploy(inv, "root")
    check(read("uid") == "0", f"--run-as self: as the invoker's user ({read('uid')})")
    st, body = inv.call("POST", "/function/root", {})
    check(st == 200, f"and it restores: {st} {body}")
    inv.stop()

    p = subprocess.run([os.path.join(BUILD, "invoker", "phos-invoker"), "--state-dir", os.path.join(tmp, "s2"),
                        "--run-as", "no-such-user-here"], capture_output=True, text=True, timeout=30)
    check(p.returncode == 2 and "--run-as" in p.stderr, f"an unknown user is refused: {p.returncode} {p.stderr}")


try:
    main()
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
    if not os.environ.get("PHOS_KEEP_TMP"):
        shutil.rmtree(tmp, ignore_errors=True)
done("run_as")
