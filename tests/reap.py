#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs one test (meson's exe_wrapper: `reap.py TEST ARGS...`) so that nothing
it started outlives it, even when meson kills it on its timeout.

meson ends a test that ran over its time with SIGTERM to the test's process
group, then SIGKILL half a second later. Invokers, executors, CRIU and the
functions they restore leave that group (setsid, pid namespaces), so they
used to survive their test and go on restoring beside the next ones. Here the
wrapper is a child subreaper: every orphan of the test's tree is reparented
to it (or to a subreaper below it, such as an invoker, whose own orphans come
to us when it dies), so the tree can always be found by parent links in
/proc. When the test ends, or on SIGTERM/SIGINT, every descendant is killed
(SIGKILL, until none is left; a few milliseconds), and the test's status is
passed on. Leftovers of a test that ended by itself are named on stderr.
"""
import ctypes
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def descendants(root):
    """Pids of every process below root, by the parent links of /proc."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def comm(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
    except OSError:
        return "?"


def kill_tree(quiet):
    """SIGKILLs every descendant and reaps what comes to us, until none is
    left (bounded: 5 s)."""
    me, named = os.getpid(), False
    end = time.monotonic() + 5
    while time.monotonic() < end:
        left = descendants(me)
        if not left:
            return
        if not quiet and not named:
            print(f"reap: {len(left)} process(es) outlived the test: "
                  + "; ".join(f"{p} {comm(p)}" for p in left[:8]), file=sys.stderr)
            named = True
        for p in left:
            try:
                os.kill(p, signal.SIGSTOP)   # no more forks while we go
            except OSError:
                pass
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        time.sleep(0.005)


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: reap.py TEST [ARGS...]")
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    test = subprocess.Popen(sys.argv[1:])

    def stop(sig, frame):
        kill_tree(quiet=True)
        os._exit(128 + sig)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    rc = test.wait()
    kill_tree(quiet=False)
    sys.exit(rc if rc >= 0 else 128 - rc)


if __name__ == "__main__":
    main()
