# SPDX-License-Identifier: MIT
"""A remove cancels a deploy parked in CRIU at once (issue 10, item 12).

CRIU can hang for its whole PHOS_CRIU_TIMEOUT (300 s): CRIU 4.1.1 retries a
short read forever, a task it cannot seize keeps it waiting. The invoker runs
CRIU through a wrapper (PHOS_CRIU) that hangs in `criu dump` while a flag file
exists, with the hanging process a child of CRIU's pid (as CRIU's own helpers
would be). A deploy of a program that reaches phos_fn_serve then sits in its
"dumping" phase:

- DELETE of the function answers 200 within seconds (not after CRIU's 300 s
  or the remove's own 60 s bound), and the deploy answers 409 "cancelled";
- the hung CRIU and its child are gone, and so are the function and its
  executor (no zombies of the invoker), nothing of the function is left in
  the state dir;
- with the flag removed, the same name deploys and serves (no dump lock or
  temporary directory was left behind).
"""
import os
import shutil
import tempfile
import threading
import time

from harness import BUILD, check, done, Invoker, procs, program

MISBEHAVE = program("tests", "integration", "misbehave")
CRIU = os.environ.get("PHOS_CRIU") or os.path.join(BUILD, "criu", "criu")   # (tools/gpu-check sets it)

tmp = tempfile.mkdtemp(prefix="phos-deploy-cancel-test-")
state = os.path.join(tmp, "state")
flag = os.path.join(tmp, "hang-dump")
mark = f"36{os.getpid() % 100000:05d}"   # the hanging child's `sleep` argument, unique to this run
wrapper = os.path.join(tmp, "criu-wrapper")
with open(wrapper, "w") as f:
    f.write(f"""#!/bin/sh
if [ "$1" = dump ] && [ -e {flag} ]; then
  sleep {mark}
  exit 1
fi
exec {CRIU} "$@"
""")
os.chmod(wrapper, 0o755)


def procs_of(pattern):
    """pids whose command line contains pattern."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if pattern in f.read().replace(b"\0", b" ").decode(errors="replace"):
                        out.append(int(d))
            except OSError:
                pass
    return out


def kids(ppid):
    """{pid: state} of ppid's children."""
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    s = f.read()
            except OSError:
                continue
            rest = s[s.rindex(")") + 2:].split()
            if int(rest[1]) == ppid:
                out[int(d)] = rest[0]
    return out


def leftovers(name):
    snaps = os.path.join(state, "snapshots")
    return [d for d in os.listdir(snaps) if d == name or d.startswith(name + ".")] + \
        [f for f in os.listdir(os.path.join(state, "functions")) if f.startswith(name + ".")]


def main():
    inv = Invoker(state, tmp, extra_env={"PHOS_CRIU": wrapper})
    open(flag, "w").close()   # after its start: the invoker tries CRIU then, and refuses one that hangs
    base = set(kids(inv.p.pid))
    res = {}

    def deploy():
        res["r"] = inv.call("POST", "/system/functions", {"name": "parked", "program": MISBEHAVE}, timeout=400)

    th = threading.Thread(target=deploy)
    th.start()
    desc = {}
    for _ in range(1200):   # the program starts and reaches phos_fn_serve, CRIU dumps
        st, desc = inv.call("GET", "/system/functions/parked")
        if st == 200 and desc.get("progress", {}).get("phase") == "dumping" and procs_of(f"sleep {mark}"):
            break
        time.sleep(0.05)
    check(desc.get("progress", {}).get("phase") == "dumping" and procs_of(f"sleep {mark}"),
          f"the deploy is parked in criu dump: {desc}")

    t = time.time()
    st, body = inv.call("DELETE", "/system/functions/parked", timeout=400)
    took = time.time() - t
    check(st == 200 and body.get("status") == "removed", f"DELETE during the dump: {st} {body}")
    check(took < 10, f"... answered at once, not after CRIU's timeout ({took:.1f} s)")
    th.join(timeout=400)
    st, body = res.get("r", (0, {}))
    check(st == 409 and "cancelled" in str(body), f"the deploy was cancelled: {st} {body}")
    check(inv.call("GET", "/system/functions/parked")[0] == 404, "the function is gone")
    check(not leftovers("parked"), f"nothing of it left in the state dir: {leftovers('parked')}")
    settled = False
    for _ in range(200):
        left = {p: s for p, s in kids(inv.p.pid).items() if p not in base}
        settled = not procs_of(f"sleep {mark}") and not left
        if settled:
            break
        time.sleep(0.05)
    check(settled, f"CRIU, its child, the function and its executor are gone, no zombies: "
          f"{procs_of(f'sleep {mark}')} {left}")

    os.unlink(flag)
    st, body = inv.call("POST", "/system/functions", {"name": "parked", "program": MISBEHAVE}, timeout=300)
    check(st == 201, f"the name deploys again with a working CRIU: {st} {body}")
    st, body = inv.call("POST", "/function/parked", {})
    check(st == 200 and body.get("gpu") == 1234, f"and serves: {st} {body}")
    inv.stop()
    check(inv.p.returncode == 0, f"the invoker stopped cleanly ({inv.p.returncode})")


try:
    main()
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for pid in procs_of(f"sleep {mark}"):
        try:
            os.kill(pid, 9)
        except OSError:
            pass
    if not os.environ.get("PHOS_KEEP_TMP"):
        shutil.rmtree(tmp, ignore_errors=True)
done("deploy_cancel")
