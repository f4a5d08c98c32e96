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
BYTES_PER_ELEMENT = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class Case:
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
        return {"tokens": self.tokens, "heads": self.heads, "hidden": self.hidden, "dtype": self.dtype,
                "shape": list(self.shape), "model": self.model, "phase": "decode" if self.tokens in DECODE_TOKENS
                else "prefill"}


def hidden_cases(hidden_presets=HIDDEN_PRESETS, *, per_head=True) -> list[Case]:
    """bf16 at every (preset, token count); fp16 and fp32 at one shape."""
    cases = [Case(tokens, hidden, "bf16", model=model) for hidden, model in hidden_presets for tokens in TOKENS]
    if per_head:
        cases += [Case(tokens, QK_NORM_HEAD_DIM, "bf16", heads=QK_NORM_HEADS, model=QK_NORM_MODEL)
                  for tokens in TOKENS]
    cases += [Case(OTHER_DTYPES_AT["tokens"], OTHER_DTYPES_AT["hidden"], dtype, model=HIDDEN_PRESETS[0][1])
              for dtype in ("fp16", "fp32")]
    return cases


def table_arms(op: str) -> list[str]:
    """Every row of `op` in the default table (torch-free: reads the frozen rows)."""
    from rapid_llm.kernels.dispatcher import default_table

    return [row.name for row in default_table().rows(op)]


def torch_dtype(label: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[label]


def load_row(op: str, row_name: str, *, dtype: str, shape: dict, layout):
    """(callable, KernelSpec) of the row, or pytest.skip with the reason this row cannot run here.

    Eligibility comes from dispatch() forced to the row on the probed
    environment (forcing bypasses only the golden gate, so an unverified
    native row is still timed), then the target is imported. A skip carries
    the explain() tree, so the report doubles as the support matrix.
    """
    from rapid_llm.kernels.dispatcher import default_table, probe_environment
    # dispatch from its submodule: the package attribute of that name can be the submodule itself
    from rapid_llm.kernels.dispatcher.dispatch import NoEligibleKernel, dispatch, resolve_target

    env = probe_environment()
    table = default_table()
    try:
        dispatch(op, device=env.device, dtype=dtype, shape=shape, layout=layout, libs=env.libs, table=table,
                 force=row_name)
    except NoEligibleKernel as error:
        pytest.skip(f"{row_name} is not eligible here:\n{error.explanation.render_text()}")
    row = table.rows_by_name[row_name]
    fn, reason = resolve_target(row.target, row.available)
    if fn is None:
        pytest.skip(f"{row_name} failed to load: {reason}")
    return fn, row


def reference_row(op: str):
    from rapid_llm.kernels.dispatcher import default_table
    from rapid_llm.kernels.dispatcher.dispatch import resolve_target

    row = default_table().reference(op)
    fn, reason = resolve_target(row.target, row.available)
    assert fn is not None, f"the reference row {row.name} must always load: {reason}"
    return row.name, fn


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
