"""Opcode histogram of a Triton kernel's compiled SASS (what the inner loop spends its instructions on).

    python -m perf.profiles.sass_histogram TRITON_CACHE_DIR KERNEL_NAME [TOP]

For every KERNEL_NAME.cubin under the cache directory (one per specialization: dtype, constexprs,
warps): its metadata (num_warps, num_stages, shared bytes, the source's constexpr values where Triton
records them) and the TOP most frequent opcodes of `cuobjdump -sass`, static counts over the whole
kernel (loop bodies count once).
"""

from __future__ import annotations

import collections
import glob
import json
import os
import re
import subprocess
import sys

_INSTRUCTION = re.compile(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


def histogram(cubin: str) -> collections.Counter:
    sass = subprocess.run(["cuobjdump", "-sass", cubin], capture_output=True, text=True, check=True).stdout
    counts = collections.Counter()
    for line in sass.splitlines():
        match = _INSTRUCTION.match(line)
        if match:
            counts[match.group(1).split(".")[0]] += 1
    return counts


def main(argv=None) -> int:
    args = argv or sys.argv[1:]
    cache, name = args[0], args[1]
    top = int(args[2]) if len(args) > 2 else 25
    for cubin in sorted(glob.glob(os.path.join(cache, "**", f"{name}.cubin"), recursive=True)):
        meta_path = cubin[: -len(".cubin")] + ".json"
        meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
        keep = {k: meta.get(k) for k in ("num_warps", "num_stages", "shared", "maxnreg") if k in meta}
        counts = histogram(cubin)
        print(f"== {cubin}\n   {keep} total {sum(counts.values())}")
        print("   " + ", ".join(f"{op} {n}" for op, n in counts.most_common(top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
