"""The host (CPU) path of the public ops, measurable without a GPU: cases and a stub launch.

Engines that run eagerly pay each op's Python host path on every call: the check, the plan lookup, the
launch policy, Triton's launch. `stub_host_path()` makes that path run on the CPU exactly as on a GPU
but for the launch itself: the default planner plans for a CPU device with Triton rows eligible (as under
RAPID_LLM_TRITON_INTERPRET=1, but with Triton's real JIT functions, not the interpreter), and
fast_launch.stub_launches() makes the first launch of each kernel specialisation return a stub compiled
kernel whose run() does nothing; later calls take the cached launch path a GPU takes; value checks
(index bounds) are off, as for CUDA tensors. The measured time is then the host path minus Triton's C
launcher (the cuLaunchKernel call).

`CASES` are the decode-step shapes perf/host_cost.py times on the GPU (Llama-3-8B-like layers, DeepSeek
MLA), one per op, built by `case_args(name, torch, device)`.
"""

from __future__ import annotations

import contextlib

#: name -> (op id, public function name in rapid_llm.kernels, row the stub path must select on the CPU)
CASES = {
    "rms_norm": ("norm.rms_norm", "rms_norm", "native/rms_norm"),
    "fused_add_rms_norm": ("norm.fused_add_rms_norm", "fused_add_rms_norm", "native/fused_add_rms_norm"),
    "silu_and_mul": ("activation.silu_and_mul", "silu_and_mul", "native/silu_and_mul"),
    "rotary": ("embedding.rotary", "rotary", "native/rotary"),
    "update_kv_buffer": ("kvcache.update_kv_buffer", "update_kv_buffer", "native/update_kv_buffer"),
    "decode": ("attention.decode", "decode", "native/decode"),
    "mla_decode": ("attention.mla_decode", "mla_decode", "native/mla_decode"),
}

#: Cases timed on the GPU only (perf/host_cost.py): their Triton rows need a GPU (Gluon, TMA).
GPU_CASES = {"prefill": ("attention.prefill", "prefill", "native/prefill_gluon")}

HIDDEN, INTERMEDIATE = 4096, 14336
PREFILL_TOKENS = 128
Q_HEADS, KV_HEADS, HEAD_DIM, PAGE = 32, 8, 128, 16
DECODE_LENGTH = 1024
MLA_HEADS, MLA_LATENT, MLA_PAGE, MLA_LENGTH = 16, 576, 64, 32768
#: Cases whose Triton rows the CPU stub path reaches only in fp16 (the interpreter's bf16 tl.dot condition).
FP16_ON_CPU = frozenset({"decode", "mla_decode"})


def case_args(name: str, torch, device, dtype=None) -> tuple:
    """The arguments of one call of case `name` on `device` (batch 1, one decode token) in `dtype` (default
    bf16; the CPU stub path takes fp16 for attention: its Triton rows are not eligible for bf16 there)."""
    bf16 = dtype or torch.bfloat16
    generator = torch.Generator(device="cpu").manual_seed(0)

    def randn(*shape, dtype=bf16):
        return torch.randn(shape, generator=generator).to(device=device, dtype=dtype)

    if name == "rms_norm":
        return randn(1, HIDDEN), randn(HIDDEN), 1e-6
    if name == "fused_add_rms_norm":
        return randn(1, HIDDEN), randn(1, HIDDEN), randn(HIDDEN), 1e-6
    if name == "silu_and_mul":
        return (randn(1, 2 * INTERMEDIATE),)
    if name == "rotary":
        positions = torch.tensor([DECODE_LENGTH - 1], device=device)
        cache = randn(8192, HEAD_DIM, dtype=torch.float32)
        return positions, randn(1, Q_HEADS * HEAD_DIM), randn(1, KV_HEADS * HEAD_DIM), HEAD_DIM, cache, True
    if name == "update_kv_buffer":
        loc = torch.tensor([DECODE_LENGTH - 1], device=device)
        return randn(1, 2 * KV_HEADS, HEAD_DIM), loc, randn(4 * DECODE_LENGTH, 2 * KV_HEADS, HEAD_DIM)
    if name == "decode":
        pages = DECODE_LENGTH // PAGE
        page_table = torch.arange(pages, dtype=torch.int32, device=device).view(1, pages)
        seq_lens = torch.tensor([DECODE_LENGTH], dtype=torch.int32, device=device)
        kv = randn(pages * PAGE, 2 * KV_HEADS, HEAD_DIM)
        return randn(1, Q_HEADS, HEAD_DIM), kv, page_table, seq_lens, PAGE, HEAD_DIM**-0.5
    if name == "mla_decode":
        pages = MLA_LENGTH // MLA_PAGE
        page_table = torch.arange(pages, dtype=torch.int32, device=device).view(1, pages)
        seq_lens = torch.tensor([MLA_LENGTH], dtype=torch.int32, device=device)
        latent = randn(pages * MLA_PAGE, MLA_LATENT)
        return randn(1, MLA_HEADS, MLA_LATENT), latent, page_table, seq_lens, MLA_PAGE, 192**-0.5
    if name == "prefill":  # one sequence of PREFILL_TOKENS, GQA 32/8, D 128
        q = randn(PREFILL_TOKENS, Q_HEADS, HEAD_DIM)
        k, v = randn(PREFILL_TOKENS, KV_HEADS, HEAD_DIM), randn(PREFILL_TOKENS, KV_HEADS, HEAD_DIM)
        cu_seqlens = torch.tensor([0, PREFILL_TOKENS], dtype=torch.int32, device=device)
        return q, k, v, cu_seqlens, PREFILL_TOKENS, HEAD_DIM**-0.5
    raise KeyError(f"unknown host-path case {name!r}; cases: {sorted([*CASES, *GPU_CASES])}")


def public_arguments(function, args: tuple) -> tuple:
    """The argument tuple a public op function hands to its op (args plus its defaults): the key its host
    Replayer sees (`replayer.lookup(public_arguments(...))`)."""
    import inspect

    bound = inspect.signature(function).bind(*args)
    bound.apply_defaults()
    return tuple(bound.arguments.values())


@contextlib.contextmanager
def stub_host_path():
    """Within the block the public ops run their host path on the CPU with stub launches (module docstring).

    Yields the planner the public ops use (installed as the default planner; the previous one is restored)."""
    import triton

    from rapid_llm.kernels.dispatcher import Device, Environment, Libraries, Planner
    from rapid_llm.kernels.dispatcher import plan as plan_module
    from rapid_llm.kernels.ops import fast_launch
    from rapid_llm.kernels.ops.checks import value_checks

    if fast_launch._interpreting():
        raise RuntimeError("stub_host_path needs Triton's JIT functions: unset TRITON_INTERPRET")
    environment = Environment(
        device=Device("cpu", triton_interpreter=True),
        libs=Libraries({"triton": triton.__version__}),
        triton_interpret=True,
    )
    planner = Planner(environment)
    saved = plan_module._DEFAULT_PLANNER
    plan_module._DEFAULT_PLANNER = planner
    try:
        # value checks off, as for CUDA tensors by default (on the CPU they would read every index)
        with fast_launch.stub_launches(), value_checks(False):
            yield planner
    finally:
        plan_module._DEFAULT_PLANNER = saved


__all__ = ["CASES", "FP16_ON_CPU", "GPU_CASES", "case_args", "public_arguments", "stub_host_path"]
