"""Seeded random weights of a decoder, laid out as the step calls them.

Every weight is drawn from one generator in a fixed order, so a seed names one model. A projection
of fan-in K is uniform on [-a, a] with a = sqrt(3 / K) (variance 1 / K: activations stay of unit
scale through the layers), drawn as int8 levels times a / 127 (a quarter of the cost of
torch.uniform_, which dominates building a real-width model on the CPU). Norm weights are near 1;
biases and DeepSeek's router correction bias are small.

Layouts (a linear's weight is [N, K], out = x @ W.T):
  embed [vocab, hidden]; lm_head [vocab, hidden]; final_norm [hidden]
  GQA layer: qkv [(Hq + 2 Hk) D, hidden] (q heads, then k heads, then v heads; so k | v of one token
    is the [2 Hk, D] row update_kv_buffer writes); qkv_bias [(Hq + 2 Hk) D] or None; q_norm, k_norm [D]
    (Qwen3) or None; o [hidden, Hq D]
  MLA layer: q_a [q_lora, hidden]; q_a_norm [q_lora]; q_b [H (nope + rope), q_lora]; kv_a
    [kv_lora + rope, hidden]; kv_a_norm [kv_lora]; kv_b [H (nope + v), kv_lora]; o [hidden, H v]
  MLP: gate_up [2 I, hidden] (gate rows, then up rows: silu_and_mul's gate | up); down [hidden, I]
  MoE: router [E, hidden]; router_bias [E] fp32 (sigmoid_grouped only); experts_gate_up [E, 2 I, hidden];
    experts_down [E, hidden, I]; shared (an MLP) or None
An fp8 checkpoint (weights_fp8_block) stores every projection but the router and lm_head as
`Fp8Weight`: e4m3 values and one fp32 scale per 128 x 128 block (DeepSeek-V3's recipe).
"""

from __future__ import annotations

import math

import attrs
import torch

from ..models import ModelPreset
from .shapes import is_moe_layer

#: e4m3's largest finite value: a block's absmax maps to it.
FP8_MAX = 448.0
BLOCK = 128


@attrs.frozen
class Fp8Weight:
    """A block-scaled fp8 weight: w[n, k] = weight[n, k] * scale[n // 128, k // 128] (leading expert dim allowed)."""

    weight: torch.Tensor
    scale: torch.Tensor

    def dequantize(self, dtype=torch.float32) -> torch.Tensor:
        n = self.weight.shape[-2]
        scale = self.scale.repeat_interleave(BLOCK, -2)[..., :n, :].repeat_interleave(BLOCK, -1)
        return (self.weight.float() * scale).to(dtype)


def leaves(value):
    """Every weight of a (nested) weights dict: its tensors and Fp8Weights, in order (None entries skipped)."""
    if isinstance(value, dict):
        for item in value.values():
            yield from leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from leaves(item)
    elif isinstance(value, (torch.Tensor, Fp8Weight)):
        yield value


def quantize_blocks(w: torch.Tensor) -> Fp8Weight:
    """fp32 [..., N, K] (K % 128 == 0) -> e4m3 values and per-128x128-block scales absmax / 448."""
    *lead, n, k = w.shape
    rows = -(-n // BLOCK) * BLOCK
    padded = torch.nn.functional.pad(w, (0, 0, 0, rows - n)).view(*lead, rows // BLOCK, BLOCK, k // BLOCK, BLOCK)
    scale = padded.abs().amax(dim=(-3, -1)).clamp_min(1e-12) / FP8_MAX
    values = (padded / scale[..., :, None, :, None]).to(torch.float8_e4m3fn)
    return Fp8Weight(values.view(*lead, rows, k)[..., :n, :].contiguous(), scale.float())


class _Draw:
    """The one generator a model's weights come from, in a fixed order, on the weights' device (a GPU draws
    billions of values in a second; the same seed gives the same weights on one kind of device)."""

    def __init__(self, seed: int, dtype: torch.dtype, device: str):
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.dtype, self.device = dtype, device

    def uniform(self, shape, bound: float, dtype=None) -> torch.Tensor:
        levels = torch.randint(-127, 128, shape, dtype=torch.int8, generator=self.generator, device=self.device)
        return levels.to(dtype or self.dtype).mul_(bound / 127)

    def linear(self, *shape, fp8: bool = False):
        bound = math.sqrt(3.0 / shape[-1])
        if fp8:
            return quantize_blocks(self.uniform(shape, bound, torch.float32))
        return self.uniform(shape, bound)

    def norm(self, width: int) -> torch.Tensor:
        return self.uniform((width,), 0.2).add_(1.0)


def _mlp(draw: _Draw, hidden: int, width: int, fp8: bool) -> dict:
    return {"gate_up": draw.linear(2 * width, hidden, fp8=fp8), "down": draw.linear(hidden, width, fp8=fp8)}


def _attention(draw: _Draw, p: ModelPreset, fp8: bool) -> dict:
    h = p.hidden
    if p.is_mla:
        heads, rope = p.num_q_heads, p.qk_rope_head_dim
        return {
            "q_a": draw.linear(p.q_lora_rank, h, fp8=fp8),
            "q_a_norm": draw.norm(p.q_lora_rank),
            "q_b": draw.linear(heads * (p.head_dim + rope), p.q_lora_rank, fp8=fp8),
            "kv_a": draw.linear(p.kv_lora_rank + rope, h, fp8=fp8),
            "kv_a_norm": draw.norm(p.kv_lora_rank),
            "kv_b": draw.linear(heads * (p.head_dim + p.v_head_dim), p.kv_lora_rank, fp8=fp8),
            "o": draw.linear(h, heads * p.v_head_dim, fp8=fp8),
        }
    width = (p.num_q_heads + 2 * p.num_kv_heads) * p.head_dim
    return {
        "qkv": draw.linear(width, h, fp8=fp8),
        "qkv_bias": draw.uniform((width,), 0.1) if p.qkv_bias else None,
        "q_norm": draw.norm(p.head_dim) if p.qk_norm else None,
        "k_norm": draw.norm(p.head_dim) if p.qk_norm else None,
        "o": draw.linear(h, p.num_q_heads * p.head_dim, fp8=fp8),
    }


def _moe(draw: _Draw, p: ModelPreset, fp8: bool) -> dict:
    e, h, width = p.num_experts, p.hidden, p.moe_intermediate
    return {
        "router": draw.linear(e, h),
        "router_bias": draw.uniform((e,), 0.05, torch.float32) if p.router == "sigmoid_grouped" else None,
        "experts_gate_up": draw.linear(e, 2 * width, h, fp8=fp8),
        "experts_down": draw.linear(e, h, width, fp8=fp8),
        "shared": _mlp(draw, h, p.num_shared_experts * width, fp8) if p.num_shared_experts else None,
    }


def random_weights(p: ModelPreset, layers: int, *, seed: int, dtype: torch.dtype, device: str) -> dict:
    """The weights of the preset's first `layers` layers, embedding, final norm and lm_head (layout above)."""
    draw = _Draw(seed, dtype, device)
    fp8 = bool(p.weights_fp8_block)
    weights = {"embed": draw.uniform((p.vocab, p.hidden), 1.0), "layers": []}
    for index in range(layers):
        layer = {"input_norm": draw.norm(p.hidden), "post_norm": draw.norm(p.hidden), **_attention(draw, p, fp8)}
        if is_moe_layer(p, index):
            layer["moe"] = _moe(draw, p, fp8)
        else:
            layer["mlp"] = _mlp(draw, p.hidden, p.intermediate, fp8)
        weights["layers"].append(layer)
    weights["final_norm"] = draw.norm(p.hidden)
    weights["lm_head"] = draw.linear(p.vocab, p.hidden)
    return weights
