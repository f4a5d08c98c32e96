"""The model a run builds: a preset, cut to its first layers and optionally narrowed.

`narrowed(preset, divisor)` divides the widths (hidden, MLP and expert widths, head and expert
counts, vocab, q_lora_rank) by `divisor`, keeping each a multiple of 128 where a GEMM's K or N
needs it (the fp8 block GEMMs take K % 128 == 0) and keeping what the ops fix: head_dim, the MLA
latent (kv_lora_rank 512 + rope 64 = the 576-wide latent row mla_decode reads) and v_head_dim.
The GQA ratio (q heads per KV head) is kept. For tests and quick looks; a plain run uses the
preset's own shapes.

Layer kinds follow the preset: layer i is an MoE layer when the preset is MoE and i >=
num_dense_layers (DeepSeek-V3's first three layers are dense, so an MoE layer needs --layers 4).
"""

from __future__ import annotations

import attrs

from ..models import ModelPreset


def _round_up(value: int, multiple: int) -> int:
    return max(multiple, -(-value // multiple) * multiple)


def narrowed(preset: ModelPreset, divisor: int) -> ModelPreset:
    """The preset with its widths divided by `divisor` (1: the preset itself)."""
    if divisor == 1:
        return preset
    kv_heads = max(1, preset.num_kv_heads // divisor)
    group = preset.num_q_heads // preset.num_kv_heads
    changes = dict(
        hidden=_round_up(preset.hidden // divisor, 128),
        intermediate=_round_up(preset.intermediate // divisor, 128),
        vocab=_round_up(preset.vocab // divisor, 128),
        num_kv_heads=kv_heads,
        num_q_heads=kv_heads * group,
    )
    if preset.is_mla:  # one latent shared by every head: as many "kv heads" as q heads in the prefill form
        heads = max(1, preset.num_q_heads // divisor)
        changes.update(num_q_heads=heads, num_kv_heads=heads, q_lora_rank=_round_up(preset.q_lora_rank // divisor, 128))
    if preset.is_moe:
        experts = min(preset.num_experts, max(2 * preset.top_k, preset.num_experts // divisor))
        if experts % preset.n_group:
            raise ValueError(f"{preset.name} / {divisor}: {experts} experts do not split into {preset.n_group} groups")
        changes.update(num_experts=experts, moe_intermediate=_round_up(preset.moe_intermediate // divisor, 128))
    return attrs.evolve(preset, name=f"{preset.name}/{divisor}", **changes)


def is_moe_layer(preset: ModelPreset, layer: int) -> bool:
    return preset.is_moe and layer >= preset.num_dense_layers
