"""Cases shared by the GPU suites: model-preset shapes, the rows to time, correctness helpers.

Shapes come from the model presets in rapid_llm/models.py (DESIGN §6), at
decode and prefill sizes; today that is:

  hidden 4096  Llama-3-8B, Mixtral-8x7B
  hidden 3584  Qwen2.5-7B
  hidden 2048  Qwen3-30B-A3B
  hidden 7168  DeepSeek-V3
  head_dim 128 per-head q/k norm (Qwen3: 32 query heads of 128), x = [tokens, 32, 128]

num_tokens 1, 16, 64 (decode batches) and 512, 4096, 16384, 32768
(prefill chunks). bf16 throughout, fp16 and fp32 at one shape.

Torch-free at import (collection on a CPU box must not need CUDA); the
helpers that touch tensors import torch when called.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest


def _hidden_presets():
    """(hidden, "model/model") per distinct hidden size of rapid_llm.models.PRESETS, in preset order."""
    from rapid_llm.models import PRESETS

    names: dict[int, list[str]] = {}
    for preset in PRESETS.values():
        names.setdefault(preset.hidden, []).append(preset.name)
    return tuple((hidden, "/".join(models)) for hidden, models in names.items())


def _qk_norm_preset():
    """(head_dim, query heads, model) of the first preset with per-head q/k norm (Qwen3)."""
    from rapid_llm.models import PRESETS

    preset = next(p for p in PRESETS.values() if p.qk_norm)
    return preset.head_dim, preset.num_q_heads, f"{preset.name} per-head q norm"


HIDDEN_PRESETS = _hidden_presets()
QK_NORM_HEAD_DIM, QK_NORM_HEADS, QK_NORM_MODEL = _qk_norm_preset()
DECODE_TOKENS = (1, 16, 64)
PREFILL_TOKENS = (512, 4096, 16384, 32768)
TOKENS = DECODE_TOKENS + PREFILL_TOKENS
OTHER_DTYPES_AT = {"tokens": 4096, "hidden": 4096}

DTYPE_LABELS = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class BenchShape:
    """One benchmark shape of a [tokens, hidden] (or per-head [tokens, heads, hidden]) activation.

    A shape descriptor for timing (ids, bytes, the model it comes from), not a
    parity case: conformance's cases (edge shapes, strides, tails) are a
    different set with a different job.
    """

    tokens: int
    hidden: int
    dtype: str
    heads: int | None = None  # set for per-head norms: x is [tokens, heads, hidden]
    model: str = ""

    @property
    def rows(self) -> int:
        return self.tokens * (self.heads or 1)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.tokens, self.heads, self.hidden) if self.heads else (self.tokens, self.hidden)

    @property
    def elements(self) -> int:
        return self.rows * self.hidden

    @property
    def id(self) -> str:
        heads = f"-heads={self.heads}" if self.heads else ""
        return f"tokens={self.tokens}{heads}-hidden={self.hidden}-{self.dtype}"

    def describe(self) -> dict:
        return {
            "tokens": self.tokens,
            "heads": self.heads,
            "hidden": self.hidden,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "model": self.model,
            "phase": "decode" if self.tokens in DECODE_TOKENS else "prefill",
        }


def hidden_shapes(hidden_presets=HIDDEN_PRESETS, *, per_head=True) -> list[BenchShape]:
    """bf16 at every (preset, token count); fp16 and fp32 at one shape."""
    shapes = [BenchShape(tokens, hidden, "bf16", model=model) for hidden, model in hidden_presets for tokens in TOKENS]
    if per_head:
        shapes += [
            BenchShape(tokens, QK_NORM_HEAD_DIM, "bf16", heads=QK_NORM_HEADS, model=QK_NORM_MODEL) for tokens in TOKENS
        ]
    shapes += [
        BenchShape(OTHER_DTYPES_AT["tokens"], OTHER_DTYPES_AT["hidden"], dtype, model=HIDDEN_PRESETS[0][1])
        for dtype in ("fp16", "fp32")
    ]
    return shapes


def table_arms(op: str) -> list[str]:
    """Every row of `op` in the default table (torch-free: reads the frozen rows)."""
    from rapid_llm.kernels.dispatcher import default_table

    return [row.name for row in default_table().rows(op)]


def torch_dtype(label: str):
    """The torch dtype of a dtype label ('bf16'), from the package's one map (ops/dtypes.py)."""
    from rapid_llm.kernels.ops.dtypes import TORCH_DTYPES

    return TORCH_DTYPES[label]


def bytes_per_element(label: str) -> int:
    return torch_dtype(label).itemsize


def forcing_planner(op: str, row_name: str):
    """A Planner of the probed environment and the default table that forces `row_name` for `op`."""
    import attrs

    from rapid_llm.kernels.dispatcher import Planner, default_table, probe_environment

    env = probe_environment()
    return Planner(attrs.evolve(env, force={**dict(env.force), op: row_name}), default_table())


def load_row(op: str, row_name: str, *, dtype: str, shape: dict, layout):
    """(PlannedOp running the row, KernelSpec), or pytest.skip with the reason this row cannot run here.

    The plan forces the row on the probed environment (forcing bypasses only
    the golden gate, so an unverified native row is still timed). Calling the
    PlannedOp runs the op's argument check and confirms the row accepts the
    arguments before the kernel: the suites make their correctness call that
    way (the benchmark's inputs are inputs the op accepts) and time
    `planned.impl`, the unchecked kernel, as the peers are unchecked calls.
    A skip carries the explain() tree, so the report doubles as the support matrix.
    """
    from rapid_llm.kernels.dispatcher import NoEligibleKernel

    planner = forcing_planner(op, row_name)
    try:
        planned = planner.plan(op, dtype=dtype, shape=shape, layout=layout)
    except NoEligibleKernel as error:  # not eligible, or its target failed to load: the tree says which
        pytest.skip(f"{row_name} is not eligible here:\n{error.explanation.render_text()}")
    assert planned.row.name == row_name, f"forcing {row_name} planned {planned.row.name}"
    return planned, planned.row


def reference_row(op: str):
    """(name, kernel) of the op's reference row (its unchecked target; it always loads)."""
    from rapid_llm.kernels.dispatcher import default_table
    from rapid_llm.kernels.dispatcher.select import resolve_target

    row = default_table().reference(op)
    fn, reason = resolve_target(row.target, row.available)
    assert fn is not None, f"the reference row {row.name} must always load: {reason}"
    return row.name, fn


def check_against_reference(
    op: str, dtype: str, got, expected, *, arm: str, reference: str, case: str, args=None, specified=None
) -> dict:
    """Every output of `arm` against the reference row's, at conformance's tolerance for (op, dtype, output).

    The tolerances are conformance.tolerances.tolerance(op, dtype, output):
    one table for parity and for the check before timing, so a row the
    conformance suite accepts is never refused here, nor the reverse (pass
    the call's `args` for ops with an accumulation bound, and `specified`, a
    bool mask of the elements the contract specifies, for ops that leave
    some unspecified). Outputs are compared as float (fp8 included), shapes
    and dtypes must match.
    Returns what the suites record: max |diff| over the outputs, whether
    every output is bitwise equal, and the (atol, rtol) used per output.
    """
    import torch

    from conformance.tolerances import assert_within_tolerance, tolerance

    outputs = got if isinstance(got, tuple) else (got,)
    wanted = expected if isinstance(expected, tuple) else (expected,)
    assert len(outputs) == len(wanted), f"{arm} returned {len(outputs)} tensors, {reference} {len(wanted)}"
    max_abs_diff, bitwise, tolerances = 0.0, True, []
    for index, (out, want) in enumerate(zip(outputs, wanted)):
        assert out.shape == want.shape and out.dtype == want.dtype, (
            f"{arm} output {index}: {out.dtype}{list(out.shape)}, {reference} {want.dtype}{list(want.shape)}"
        )
        tolerances.append(tolerance(op, dtype, index))
        assert_within_tolerance(
            op,
            dtype,
            index,
            out,
            want,
            args=args,
            specified=specified,
            describe=f"{arm} output {index} vs {reference} on {case}",
        )
        if specified is not None:
            out, want = out[specified], want[specified]
        if out.numel():
            max_abs_diff = max(max_abs_diff, (out.float() - want.float()).abs().max().item())
        bitwise = bitwise and torch.equal(out.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8))
    return {"max_abs_diff": max_abs_diff, "bitwise_equal": bitwise, "tolerance": tolerances}


def describe_check(result: dict, reference: str) -> str:
    """The `correctness` string of extra_info for a check_against_reference result."""
    pairs = ", ".join(f"atol={atol:.3g} rtol={rtol:.3g}" for atol, rtol in dict.fromkeys(result["tolerance"]))
    exact = "; bitwise equal" if result["bitwise_equal"] else ""
    return f"vs {reference}: max_abs_diff={result['max_abs_diff']:.3g} ({pairs}, conformance.tolerances){exact}"


def ulp_distance(actual, expected) -> int:
    """Largest distance in units in the last place between two same-dtype float tensors.

    Floats are mapped onto a monotonic integer line (sign-magnitude to
    two's complement), so neighbours differ by one whatever their binade
    and +0/-0 coincide. NaNs must be absent (asserted).
    """
    import torch

    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    assert not torch.isnan(actual).any() and not torch.isnan(expected).any(), "NaN in a result"
    bits = {torch.bfloat16: (torch.int16, 16), torch.float16: (torch.int16, 16), torch.float32: (torch.int32, 32)}
    int_dtype, width = bits[actual.dtype]

    def ordered(tensor):
        raw = tensor.contiguous().view(int_dtype).to(torch.int64)
        return torch.where(raw < 0, -(raw + (1 << (width - 1))), raw)

    if actual.numel() == 0:
        return 0
    return int((ordered(actual) - ordered(expected)).abs().max().item())
