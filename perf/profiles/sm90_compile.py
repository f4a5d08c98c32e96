"""Compile a Triton kernel for sm90 on a machine without a GPU: registers, spills, shared memory, SASS.

    from perf.profiles.sm90_compile import compile_sm90
    report = compile_sm90(kernel, *args, **constexprs_and_launch_options)

The arguments are those of a launch (CPU tensors stand in for device tensors: only their dtype and
alignment matter; triton.tools.tensor_descriptor.TensorDescriptor objects over CPU tensors work too).
A stand-in driver reports a CUDA sm90 target, so the JIT specializes and compiles exactly as it would on
the H200 (ptxas and cuobjdump come with Triton's wheel) and nothing is launched. Run it under the
triton version of the GPU image (3.6.0) for numbers that match the device: a venv with triton==3.6.0
and the CPU torch wheel is enough.

Returns {"registers", "spill_stores", "spill_loads", "stack", "shared", "opcodes" (Counter), "sass", "ttgir",
"ptx"} (the PTX shows where the compiler's own barriers went, e.g. around TMA copies).
Used to try kernel variants (register pressure, spills, which MMA instructions) before any device time.
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.runtime import driver as driver_config

_INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


class _Sm90StandIn:
    """The few driver calls JITFunction.run makes before compiling (device, stream, target)."""

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")


def _tool(name: str) -> str:
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def compile_sm90(kernel, *args, **kwargs) -> dict:
    previous = driver_config._active
    driver_config.set_active(_Sm90StandIn())
    try:
        kernel.device_caches.clear()
        compiled = kernel.warmup(*args, grid=(1,), **kwargs)
    finally:
        driver_config._active = previous
        kernel.device_caches.clear()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "kernel.cubin")
        with open(path, "wb") as handle:
            handle.write(compiled.asm["cubin"])
        usage = subprocess.run([_tool("cuobjdump"), "-res-usage", path], capture_output=True, text=True).stdout
        sass = subprocess.run([_tool("cuobjdump"), "-sass", path], capture_output=True, text=True).stdout
    fields = dict(re.findall(r"(REG|STACK|SHARED|LOCAL):(\d+)", usage))
    opcodes = collections.Counter()
    for line in sass.splitlines():
        match = _INSTRUCTION.match(line)
        if match:
            opcodes[match.group(1).split(".")[0]] += 1
    return {
        "registers": int(fields.get("REG", 0)),
        "stack": int(fields.get("STACK", 0)),
        "shared": compiled.metadata.shared,
        "spill_stores": opcodes.get("STL", 0),
        "spill_loads": opcodes.get("LDL", 0),
        "opcodes": opcodes,
        "sass": sass,
        "ttgir": compiled.asm.get("ttgir", ""),
        "ptx": compiled.asm.get("ptx", ""),
    }


def summary(report: dict, top: int = 12) -> str:
    ops = ", ".join(f"{op} {n}" for op, n in report["opcodes"].most_common(top))
    return (
        f"regs {report['registers']} stack {report['stack']} STL {report['spill_stores']} "
        f"LDL {report['spill_loads']} shared {report['shared']} | {ops}"
    )


__all__ = ["compile_sm90", "summary"]
