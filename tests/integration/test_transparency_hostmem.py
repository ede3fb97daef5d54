# SPDX-License-Identifier: MIT
"""Issue 12, host memory: cudaHostRegister'ed memory (tests/transparency/hostmem/).

Under phos-fn (`strict`) the registered pages must be the memfd shared with the
executor, so that copies from and to them are DMA, not records through the
call channel; the bytes around the buffer in its first and last pages are
unchanged; copies are right; double registration and unregistering memory
that is not registered give CUDA's errors; the memory stays usable after
cudaHostUnregister. Mapped memory (cudaHostAllocMapped, cudaHostRegisterMapped,
cudaHostGetDevicePointer): kernels write host memory the host then reads.
With PHOS_TEST_DEVICE=cuda the programs also run natively.

Registered memory in a checkpoint (issue 11): hostreg checkpointed in each
mode while its memory is registered, and restored where the driver's own
mappings take every address still free where the regions were (fault
driver_takes_regions, as an H200 did): the restoring executor reserved
them before it opened the device, so it maps them at their device
addresses again, and each restored run ends well.
"""
import shutil
import subprocess
import tempfile

from harness import DEVICE, check, checkpoint_while_running, done, program, run

HOSTREG = program("tests", "transparency", "hostmem", "hostreg")
MAPPED = program("tests", "transparency", "hostmem", "mapped")

p = run(HOSTREG, "strict")
check(p.returncode == 0 and "hostreg: ok" in p.stdout, f"hostreg under phos-fn: rc {p.returncode}\n{p.stderr[-3000:]}")
if DEVICE == "cuda":
    p = subprocess.run([HOSTREG], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"hostreg natively: rc {p.returncode}\n{p.stderr[-3000:]}")
# mapped memory: kernels write host memory through its device pointer and,
# when the executor could map it at the same address, through the host pointer
p = run(MAPPED)
check(p.returncode == 0 and "mapped: ok" in p.stdout, f"mapped under phos-fn: rc {p.returncode}\n{p.stderr[-3000:]}")
check("the device pointer is the host pointer" in p.stdout, f"the executor maps the region at its address: {p.stdout}")
if DEVICE == "cuda":
    p = subprocess.run([MAPPED], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"mapped natively: rc {p.returncode}\n{p.stderr[-3000:]}")

tmp = tempfile.mkdtemp(prefix="phos-hostmem-test-")
try:
    errs = checkpoint_while_running(HOSTREG, ("loop", "1200"), "hostreg: ok", tmp, "hostreg loop",
                                    restore_env={"PHOS_FAULT": "driver_takes_regions"})
    check("injected fault: host region" in errs and " taken" not in errs,
          f"every registered region's address was kept for it: {errs[-2000:]}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
done("transparency_hostmem")
