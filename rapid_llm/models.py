"""Model presets: the dimensions that decide which kernels a model needs.

Torch-free data. `ModelPreset.op_uses()` lists every op a transformer of
that shape calls per forward pass, with the op's named dims (num_tokens is
left out: `rapid-llm plan` sweeps it over the token buckets). Ops that the
table does not serve yet are reported by `plan` as such, not as errors.

Numbers are from each model's published config.json.
"""

from __future__ import annotations

import attrs

#: The KV page size the plans assume (an engine setting, not a model property): 16 tokens for the GQA
#: KV buffer (vLLM's and SGLang's FlashInfer default), 64 for the MLA latent cache (FlashMLA's block size).
PAGE_SIZE = 16
MLA_PAGE_SIZE = 64


@attrs.frozen
class OpUse:
    """One op a model calls, where in the model, and its fixed dims."""

    op: str
    where: str
    dims: tuple[tuple[str, int], ...] = attrs.field(converter=lambda d: tuple(dict(d).items()))


@attrs.frozen(kw_only=True)
class ModelPreset:
    name: str
    hidden: int
    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    num_experts: int = 0
    top_k: int = 0
    moe_intermediate: int = 0
    num_shared_experts: int = 0
    qk_norm: bool = False
    # Multi-head latent attention (DeepSeek): 0 means ordinary GQA attention.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    weights_fp8_block: int = 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    def op_uses(self) -> tuple[OpUse, ...]:
        h = self.hidden
        uses = [
            OpUse("embedding.vocab_embedding", "token embedding", {"vocab": self.vocab, "hidden": h}),
            OpUse("norm.rms_norm", "first input_layernorm, final norm", {"hidden": h}),
            OpUse("norm.fused_add_rms_norm", "residual add + layernorm between sublayers", {"hidden": h}),
        ]
        if self.qk_norm:
            uses.append(OpUse("norm.rms_norm", "per-head q/k norm", {"hidden": self.head_dim}))
        if self.is_mla:
            uses += [
                OpUse("norm.rms_norm", "MLA q_a_layernorm", {"hidden": self.q_lora_rank}),
                OpUse("norm.rms_norm", "MLA kv_a_layernorm", {"hidden": self.kv_lora_rank}),
                OpUse(
                    "embedding.rotary",
                    "rotary on the rope part of q/k",
                    {"head_dim": self.qk_rope_head_dim, "num_q_heads": self.num_q_heads, "num_kv_heads": 1},
                ),
                OpUse(
                    "kvcache.update_mla_buffer",
                    "latent KV cache write",
                    {"kv_lora_rank": self.kv_lora_rank, "rope_dim": self.qk_rope_head_dim},
                ),
                # absorbed q and latent rows: kv_lora_rank + rope dims wide; page 64 (FlashMLA's block size)
                OpUse(
                    "attention.mla_decode",
                    "MLA decode",
                    {
                        "num_q_heads": self.num_q_heads,
                        "head_dim": self.kv_lora_rank + self.qk_rope_head_dim,
                        "page_size": MLA_PAGE_SIZE,
                    },
                ),
                OpUse(
                    "attention.mla_prefill",
                    "MLA prefill",
                    {
                        "num_q_heads": self.num_q_heads,
                        "num_kv_heads": self.num_q_heads,
                        "head_dim": self.head_dim + self.qk_rope_head_dim,
                        "head_dim_v": self.v_head_dim,
                    },
                ),
            ]
        else:
            heads = {"num_q_heads": self.num_q_heads, "num_kv_heads": self.num_kv_heads, "head_dim": self.head_dim}
            uses += [
                OpUse("embedding.rotary", "rotary on q/k", heads),
                OpUse(
                    "kvcache.update_kv_buffer",
                    "KV cache write",
                    {"num_kv_heads": self.num_kv_heads, "head_dim": self.head_dim},
                ),
                OpUse("attention.prefill", "varlen causal prefill", {**heads, "head_dim_v": self.head_dim}),
                OpUse("attention.decode", "paged decode", {**heads, "page_size": PAGE_SIZE}),
            ]
        q_width = self.num_q_heads * self.head_dim
        kv_width = 2 * self.num_kv_heads * self.head_dim
        if not self.is_mla:
            uses.append(OpUse("gemm.mm", "qkv_proj", {"n": q_width + kv_width, "k": h}))
        uses.append(OpUse("gemm.mm", "o_proj", {"n": h, "k": self.num_q_heads * (self.v_head_dim or self.head_dim)}))
        if self.is_moe:
            uses += [
                OpUse("moe.topk_routing", "router top-k", {"num_experts": self.num_experts, "top_k": self.top_k}),
                OpUse(
                    "moe.fused_moe",
                    "routed experts",
                    {
                        "num_experts": self.num_experts,
                        "top_k": self.top_k,
                        "hidden": h,
                        "intermediate": self.moe_intermediate,
                    },
                ),
            ]
            act_width = self.moe_intermediate
        else:
            uses += [
                OpUse("gemm.mm", "gate_up_proj", {"n": 2 * self.intermediate, "k": h}),
                OpUse("gemm.mm", "down_proj", {"n": h, "k": self.intermediate}),
            ]
            act_width = self.intermediate
        uses.append(OpUse("activation.silu_and_mul", "SwiGLU activation", {"intermediate": act_width}))
        if self.weights_fp8_block:
            uses.append(
                OpUse(
                    "quantization.per_token_group_fp8",
                    "fp8 activations for block-scaled GEMMs",
                    {"hidden": h, "group_size": self.weights_fp8_block},
                )
            )
        uses.append(OpUse("gemm.mm", "lm_head", {"n": self.vocab, "k": h}))
        return tuple(uses)


PRESETS = {
    preset.name: preset
    for preset in (
        ModelPreset(
            name="llama-3-8b",
            hidden=4096,
            num_layers=32,
            num_q_heads=32,
            num_kv_heads=8,
            head_dim=128,
            intermediate=14336,
            vocab=128256,
        ),
        ModelPreset(
            name="qwen2.5-7b",
            hidden=3584,
            num_layers=28,
            num_q_heads=28,
            num_kv_heads=4,
            head_dim=128,
            intermediate=18944,
            vocab=152064,
        ),
        ModelPreset(
            name="mixtral-8x7b",
            hidden=4096,
            num_layers=32,
            num_q_heads=32,
            num_kv_heads=8,
            head_dim=128,
            intermediate=14336,
            vocab=32000,
            num_experts=8,
            top_k=2,
            moe_intermediate=14336,
        ),
        ModelPreset(
            name="qwen3-30b-a3b",
            hidden=2048,
            num_layers=48,
            num_q_heads=32,
            num_kv_heads=4,
            head_dim=128,
            intermediate=6144,
            vocab=151936,
            num_experts=128,
            top_k=8,
            moe_intermediate=768,
            qk_norm=True,
        ),
        ModelPreset(
            name="deepseek-v3",
            hidden=7168,
            num_layers=61,
            num_q_heads=128,
            num_kv_heads=128,
            head_dim=128,
            intermediate=18432,
            vocab=129280,
            num_experts=256,
            top_k=8,
            moe_intermediate=2048,
            num_shared_experts=1,
            q_lora_rank=1536,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            v_head_dim=128,
            weights_fp8_block=128,
        ),
    )
}


def preset(name: str) -> ModelPreset:
    key = name.strip().lower()
    if key not in PRESETS:
        raise KeyError(f"unknown model preset {name!r}; presets: {sorted(PRESETS)}")
    return PRESETS[key]
