"""The CUDA extension's fp8-KV decode (jit/ build) at one shape and split count, called twice (profile the second).

    RAPID_LLM_JIT=1 ncu -k regex:decode_fp8_kernel --launch-skip 1 --launch-count 1 \\
        python -m perf.profiles.decode_fp8_extension BATCH LENGTH SPLITS

GQA 32/8 d128 page 16, pages in random order (perf.sweeps.attention_variants.decode_fp8_inputs); the op is
called directly with SPLITS, as perf.sweeps.decode_fp8_builds calls it.
"""

from __future__ import annotations

import sys

import torch


def main(argv=None) -> int:
    from perf.sweeps.attention_variants import decode_fp8_inputs
    from perf.sweeps.decode_fp8_builds import _call
    from rapid_llm.kernels import jit

    batch, length, splits = (int(value) for value in (argv if argv is not None else sys.argv[1:]))
    q, fp8, _, table, lens, scale, _ = decode_fp8_inputs(batch, length, torch.Generator(device="cuda").manual_seed(0))
    call = _call(jit.op("decode"), q, fp8, table, lens, scale, splits)
    for _ in range(2):
        call()
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
