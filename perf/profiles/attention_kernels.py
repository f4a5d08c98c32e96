"""One native attention row at a benchmark shape, called twice (the second call is the one to profile).

    ncu --clock-control none -k regex:_kernel --launch-skip 1 --launch-count 1 \\
        python -m perf.profiles.attention_kernels CASE [ROW]

CASE: decode_bf16 | decode_fp8 (GQA 32/8 d128 page 16, B=64 L=4096), mla_16 | mla_128 (page 64, B=64
L=4096, Hq 16 / 128), prefill (4 x 4096 causal GQA 32/8 d128), prefill_16x1024 (16 x 1024, the same heads),
mla_prefill (4 x 4096, 16 heads, 192 / 128), prefill_paged (4 chunks of 512 after 4096, page 16). ROW: the
row to run (default: the one dispatch selects here); RAPID_LLM_PROFILE_CONFIG holds a JSON dict of launch
knobs for it (rapid_llm.kernels.ops.launch_override), e.g. {"splits": 2}.
"""

from __future__ import annotations

import json
import os
import sys

import torch

from perf.sweeps.attention_tiles import _pages


def _decode(kv: str):
    g = torch.Generator(device="cuda").manual_seed(0)
    table, pages = _pages(64, 4096, 16)
    values = torch.randn((pages * 16, 16, 128), device="cuda", generator=g)
    q = torch.randn((64, 32, 128), device="cuda", generator=g).bfloat16()
    lens = torch.full((64,), 4096, dtype=torch.int32, device="cuda")
    if kv == "fp8":
        scale = (values.abs().amax() / 448).reshape(1)
        return "attention.decode", (
            q,
            (values / scale).to(torch.float8_e4m3fn),
            table,
            lens,
            16,
            128**-0.5,
            scale,
            scale,
        )
    return "attention.decode", (q, values.bfloat16(), table, lens, 16, 128**-0.5)


def _mla(heads: int):
    g = torch.Generator(device="cuda").manual_seed(1)
    table, pages = _pages(64, 4096, 64)
    cache = torch.randn((pages * 64, 576), device="cuda", generator=g).bfloat16()
    q = torch.randn((64, heads, 576), device="cuda", generator=g).bfloat16()
    lens = torch.full((64,), 4096, dtype=torch.int32, device="cuda")
    return "attention.mla_decode", (q, cache, table, lens, 64, 192**-0.5)


def _prefill(heads=32, kv_heads=8, dim=128, dim_v=128, length=4096):
    g = torch.Generator(device="cuda").manual_seed(2)
    q = torch.randn((16384, heads, dim), device="cuda", generator=g).bfloat16()
    k = torch.randn((16384, kv_heads, dim), device="cuda", generator=g).bfloat16()
    v = torch.randn((16384, kv_heads, dim_v), device="cuda", generator=g).bfloat16()
    cu = torch.arange(0, 16385, length, dtype=torch.int32, device="cuda")
    op = "attention.mla_prefill" if dim == 192 else "attention.prefill"
    return op, (q, k, v, cu, length, dim**-0.5, True, False)


def _prefill_paged():
    g = torch.Generator(device="cuda").manual_seed(3)
    table, pages = _pages(4, 4608, 16)
    buffer = torch.randn((pages * 16, 16, 128), device="cuda", generator=g).bfloat16()
    q = torch.randn((4 * 512, 32, 128), device="cuda", generator=g).bfloat16()
    cu = torch.arange(0, 4 * 512 + 1, 512, dtype=torch.int32, device="cuda")
    lens = torch.full((4,), 4608, dtype=torch.int32, device="cuda")
    return "attention.prefill_paged", (q, buffer, table, cu, lens, 512, 16, 128**-0.5, True, False)


CASES = {
    "decode_bf16": lambda: _decode("bf16"),
    "decode_fp8": lambda: _decode("fp8"),
    "mla_16": lambda: _mla(16),
    "mla_128": lambda: _mla(128),
    "prefill": _prefill,
    "prefill_16x1024": lambda: _prefill(length=1024),
    "mla_prefill": lambda: _prefill(16, 16, 192, 128),
    "prefill_paged": _prefill_paged,
}


def main(argv=None) -> int:
    import attrs

    from rapid_llm.kernels.dispatcher import Planner, probe_environment
    from rapid_llm.kernels.ops.launch_override import launch_override

    argv = argv or sys.argv[1:]
    op, args = CASES[argv[0]]()
    env = probe_environment()
    if len(argv) > 1:
        env = attrs.evolve(env, force={**dict(env.force), op: argv[1]})
    planner = Planner(env)
    _, layout, dims = planner.check_for(op)(*args)
    planned = planner.plan(op, dtype="bf16", shape=dict(dims), layout=layout)
    print(planned.explain(), file=sys.stderr)
    with launch_override(planned.row.name, **json.loads(os.environ.get("RAPID_LLM_PROFILE_CONFIG", "{}"))):
        for _ in range(2):
            planned(*args)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
