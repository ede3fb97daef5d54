# SPDX-License-Identifier: MIT
"""1e6 asynchronous calls across four streams, with event waits and memsets."""
import json

from harness import check, done, program, run

p = run(program("tests", "integration", "stress"), 1000000, timeout=600)
check(p.returncode == 0, f"stress exited {p.returncode}: {p.stderr[-2000:]}")
if p.returncode == 0:
    r = json.loads(p.stdout.strip().splitlines()[-1])
    check(r["ok"] and r["calls"] >= 1000000, f"stress result {r}")
done("stress")
