"""The CUDA extension's fp8-KV decode (jit/ build) at one shape and split count, called three times (profile the last
call's launches: --launch-skip 2 skips the first call's decode and merge kernels, or the first two calls' decode
kernel with one split).

    RAPID_LLM_JIT=1 ncu -k regex:'decode_fp8_kernel|merge_kernel' --launch-skip 2 --launch-count 2 \\
        python -m perf.profiles.decode_fp8_extension BATCH LENGTH SPLITS [LIBRARY]

LIBRARY: a build of perf.sweeps.decode_fp8_builds (DIR/builds/<tag>/rapid_llm_fp8_<tag>.so) instead of the jit/ one.

GQA 32/8 d128 page 16, pages in random order (perf.sweeps.attention_variants.decode_fp8_inputs); the op is
called directly with SPLITS, as perf.sweeps.decode_fp8_builds calls it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch


def main(argv=None) -> int:
    from perf.sweeps.attention_variants import decode_fp8_inputs
    from perf.sweeps.decode_fp8_builds import _call
    from rapid_llm.kernels import jit

    args = argv if argv is not None else sys.argv[1:]
    batch, length, splits = (int(value) for value in args[:3])
    if len(args) > 3:  # a variant build: its op namespace is the library's name
        library = Path(args[3])
        torch.ops.load_library(str(library))
        op = getattr(torch.ops, library.stem).decode
    else:
        op = jit.op("decode")
    q, fp8, _, table, lens, scale, _ = decode_fp8_inputs(batch, length, torch.Generator(device="cuda").manual_seed(0))
    call = _call(op, q, fp8, table, lens, scale, splits)
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
