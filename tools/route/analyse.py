#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The route of one call through the invoker's source files (issue 40), from a
trace of tools/route/hook.c: calls, the files it passes through, its stays
(maximal runs of steps, calls and returns, inside one file), and the calls
that climb from a lower layer to a higher one (a hook is such a climb).

usage: analyse.py BINARY TRACE [--list]
"""
import collections
import subprocess
import sys

# layers of the invoker process, highest first (a call to a higher rank climbs)
RANKS = [("invoker/http/", 6), ("invoker/cli/", 6), ("invoker/peer/", 4), ("invoker/cluster/", 4),
         ("invoker/", 5), ("snapshotter/", 3), ("ctxpool/", 2), ("runtime/", 1)]


def rank(path):
    for prefix, r in RANKS:
        if prefix in path:
            return r
    return 0


def where(binary, addrs):
    """offset -> (function, source file relative to the tree)"""
    p = subprocess.run(["addr2line", "-f", "-e", binary] + [hex(a) for a in addrs], capture_output=True,
                       text=True, check=True)
    lines = p.stdout.split("\n")
    out = {}
    for i, a in enumerate(addrs):
        fn, loc = lines[2 * i], lines[2 * i + 1]
        path = loc.split(":")[0]
        for top in ("invoker/", "snapshotter/", "ctxpool/", "runtime/", "preload/"):
            k = path.find("/" + top)
            if k >= 0:
                path = path[k + 1:]
                break
        out[a] = (fn, path)
    return out


def main():
    binary, trace = sys.argv[1], sys.argv[2]
    events = []
    with open(trace) as f:
        for line in f:
            parts = line.split()
            events.append((parts[0], int(parts[1], 16)))
    names = where(binary, sorted({a for _, a in events}))
    TREE = ("invoker/", "snapshotter/", "ctxpool/", "runtime/", "preload/")
    stack, steps, climbs, crossings, calls = [], [], [], collections.Counter(), 0
    for kind, a in events:
        if kind == "E":
            fn, path = names[a]
            if not path.startswith(TREE) and stack:
                path = stack[-1][1]   # a header's inline function: its caller's file
            if stack:
                caller = stack[-1]
                if path != caller[1]:
                    crossings[(caller[1], path)] += 1
                if rank(path) > rank(caller[1]):
                    climbs.append((caller, (fn, path)))
            stack.append((fn, path))
            steps.append(path)
            calls += 1
        else:
            stack.pop()
            if stack:
                steps.append(stack[-1][1])
    stays = [p for i, p in enumerate(steps) if i == 0 or steps[i - 1] != p]
    files = collections.Counter(stays)
    print(f"calls {calls}, files {len(files)}, stays {len(stays)}, calls between files "
          f"{sum(crossings.values())} ({len(crossings)} file pairs), climbs {len(climbs)}")
    for path, n in files.most_common():
        print(f"  {n:4d} stays  {path}")
    for (a, b), n in sorted(crossings.items(), key=lambda kv: -kv[1]):
        print(f"  {n:4d} calls  {a} -> {b}")
    for (cf, cp), (fn, p) in collections.Counter(climbs).keys():
        print(f"  climb: {cf} ({cp}) -> {fn} ({p})")
    if "--list" in sys.argv:
        for p in stays:
            print("   ", p)

if __name__ == "__main__":
    main()
