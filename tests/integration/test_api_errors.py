# SPDX-License-Identifier: MIT
"""Unsupported APIs, malformed fatbins, freed buffers and bad handles give clean
CUDA errors, and the function process keeps working."""
from harness import check, done, program, run

p = run(program("tests", "integration", "api_errors"), env={"PHOS_LOG": "warn"})
print(p.stdout)
check(p.returncode == 0, f"api_errors exited {p.returncode}: {p.stderr[-2000:]}")
check("all error paths clean" in p.stdout, "api_errors did not finish")
# The unforwarded API is named once in the log when logging is on.
check(p.stderr.count("cudaGraphAddExternalSemaphoresSignalNode") == 1,
      f"cudaGraphAddExternalSemaphoresSignalNode named once in the log: {p.stderr[-2000:]}")
# A fatbin bigger than one record travels through a shared region and works.
p = run(program("tests", "integration", "big_module"))
check(p.returncode == 0 and '"ok":true' in p.stdout, f"big_module: {p.returncode} {p.stdout} {p.stderr[-2000:]}")
done("api_errors")
