# SPDX-License-Identifier: MIT
"""Device addresses are deterministic: two runs of one program get the same
pointers, at the fixed arena, and the same read/write sets call by call."""
import os
import tempfile

from harness import check, done, program, read_trace, run

ARENA = int(os.environ.get("PHOS_ARENA_BASE", "0x600000000000"), 0)
runs = []
with tempfile.TemporaryDirectory() as tmp:
    for i in range(2):
        trace = os.path.join(tmp, f"t{i}.jsonl")
        p = run(program("tests", "integration", "spec_probe"), trace=trace)
        check(p.returncode == 0, f"run {i} exited {p.returncode}: {p.stderr}")
        runs.append((p.stdout.strip(), read_trace(trace)))

check(runs[0][0] == runs[1][0], f"pointers differ: {runs[0][0]} vs {runs[1][0]}")
strip = lambda t: [(r["op"], r.get("kernel"), r["reads"], r["writes"]) for r in t if "reads" in r]
check(strip(runs[0][1]) == strip(runs[1][1]), "traces differ between runs")
import json
ptr = json.loads(runs[0][0])
check(ptr["a"] == ARENA, f"first allocation at the arena base, got {ptr['a']:#x}")
check(ptr["m"] % (2 << 20) == 0, "a 3 MiB allocation is 2 MiB aligned")
done("determinism")
