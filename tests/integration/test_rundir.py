# SPDX-License-Identifier: MIT
"""Another local user cannot hold our dumps (issue 37, item 4).

CRIU dumps are serialized per working directory by an flock. The lock file
was /tmp/phos-criu-dump-<dev>-<ino>.lock, a name anyone could create first
and hold: held by nobody (functions run as nobody and share /tmp), a deploy
sat in its dumping phase until deploy_timeout_ms. Lock files and the CRIU
check's cache now live in our private runtime directory (runtime/rundir.h):

- with nobody holding the old lock name of the invoker's working directory,
  a deploy is snapshotted at once (201 well within its deploy_timeout_ms);
- a runtime directory that another user made (PHOS_RUNTIME_DIR pointing
  there, as /tmp/phos-fn-UID could be) is never used: nothing of ours is
  written into it, and the invoker still deploys and serves;
- our own runtime directory is 0700 and ours.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

from harness import check, done, Invoker, procs, program

MISBEHAVE = program("tests", "integration", "misbehave")
NOBODY = 65534

if os.geteuid() != 0:
    print("rundir: needs root (it acts as another user)")
    sys.exit(77)

tmp = tempfile.mkdtemp(prefix="phos-rundir-test-")
os.chmod(tmp, 0o755)
holders = []


def hold_as_nobody(path):
    """A process of nobody that creates path and holds an flock on it."""
    # (a session of its own: flock's child holds the lock, and goes with the group)
    p = subprocess.Popen(["flock", "-x", path, "-c", "echo held; exec sleep 600"], user=NOBODY, group=NOBODY,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd="/",
                         start_new_session=True)
    holders.append(p)
    return p.stdout.readline().strip() == "held"


def main():
    # --- the old lock name, held by nobody ---------------------------------------
    state = os.path.join(tmp, "state")
    inv = Invoker(state, tmp)
    cwd = os.readlink(f"/proc/{inv.p.pid}/cwd")
    st = os.stat(cwd)
    old = f"/tmp/phos-criu-dump-{st.st_dev:x}-{st.st_ino:x}.lock"
    # older versions left their locks in /tmp (root's, 0600): one at this name
    # (the inode of a directory of an earlier run) goes, so that nobody makes it
    if os.path.lexists(old) and os.lstat(old).st_uid != NOBODY:
        os.unlink(old)
    check(hold_as_nobody(old), f"nobody holds {old}")
    t = time.time()
    code, body = inv.call("POST", "/system/functions", {"name": "held", "program": MISBEHAVE,
                                                        "limits": {"deploy_timeout_ms": 20000}}, timeout=120)
    took = time.time() - t
    print(f"deploy with nobody holding {old}: {code} after {took:.2f} s", flush=True)
    check(code == 201 and took < 10, f"the deploy is not held by another user's lock: {code} {body} ({took:.1f} s)")
    code, body = inv.call("POST", "/function/held", {})
    check(code == 200 and body.get("gpu") == 1234, f"and serves: {code} {body}")
    inv.stop()
    for p in holders:
        try:
            os.killpg(p.pid, 9)
        except OSError:
            pass
    if os.path.lexists(old):
        os.unlink(old)
    rd = "/run/phos-fn"
    s = os.stat(rd)
    check(s.st_uid == 0 and (s.st_mode & 0o777) == 0o700, f"our runtime directory {rd} is 0700 and ours: "
          f"{oct(s.st_mode)} uid {s.st_uid}")

    # --- a runtime directory another user made ---------------------------------------
    foreign = os.path.join(tmp, "foreign")
    os.mkdir(foreign)
    os.chown(foreign, NOBODY, NOBODY)
    os.chmod(foreign, 0o777)
    inv = Invoker(os.path.join(tmp, "state2"), tmp, extra_env={"PHOS_RUNTIME_DIR": foreign,
                                                               "PHOS_CRIU_PROBE_CACHE": ""})
    code, body = inv.call("POST", "/system/functions", {"name": "f", "program": MISBEHAVE}, timeout=120)
    check(code == 201, f"with a foreign runtime directory named, the invoker still deploys: {code} {body}")
    code, body = inv.call("POST", "/function/f", {})
    check(code == 200 and body.get("gpu") == 1234, f"and serves: {code} {body}")
    inv.stop()
    check(os.listdir(foreign) == [], f"nothing of ours went into another user's directory: {os.listdir(foreign)}")


try:
    main()
finally:
    for p in holders:
        try:
            os.killpg(p.pid, 9)
        except OSError:
            pass
        p.wait()
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    shutil.rmtree(tmp, ignore_errors=True)
done("rundir")
