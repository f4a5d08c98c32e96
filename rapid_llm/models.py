"""Model presets: the ops a model calls per forward pass, with the dims that decide their kernels.

Torch-free data. `ModelPreset.op_uses()` lists, in the order of the forward
pass, every call the model makes to an op the table has (a test holds the two
together): the op, where in the model, its fixed dims (the names of the op
contract's dims) and the dims that grow with the step's token count, which
`rapid-llm plan` sweeps over the token buckets. `ModelPreset.gaps()` lists
the work the model does that no op of the table serves yet (MLA's decode
weight absorption), so that `plan` shows what rapid_llm does not cover.

By default the plans assume one GPU holding the whole model, a bf16 KV cache,
and one sequence per prefill (max_seqlen = num_tokens). `op_uses(tp, ep)`
plans one rank of a parallel deployment (Megatron-style, as vLLM and SGLang
shard): tensor parallelism over tp ranks splits the attention heads (KV heads
replicated where there are fewer than tp), the column-parallel projections'
outputs (qkv, q_b, kv_b, gate_up) and the row-parallel ones' inputs (o_proj,
down_proj), the MLPs' and, without expert parallelism, the experts'
intermediate width, and the vocabulary of the embedding and lm_head; each
row-parallel output is summed across the ranks by comm.all_reduce_add_rms_norm
(the residual add and the next norm fused after it), the embedding's shards
by comm.all_reduce. Expert parallelism over ep ranks gives each rank E / ep
whole experts: the routed tokens go out by comm.ep_dispatch (fp8 with its
scales for an fp8 checkpoint, as DeepSeek-V3 serves) and come back by
comm.ep_combine; a rank's experts see at most min(top_k, ep) rows per token
of each rank (each token reaches at most that many ranks), the bound the
plans use. Numbers are from each model's published config.json.
"""

from __future__ import annotations

import attrs

#: The KV page size the plans assume (an engine setting, not a model property): 16 tokens for the GQA
#: KV buffer (vLLM's and SGLang's FlashInfer default), 64 for the MLA latent cache (FlashMLA's block size).
PAGE_SIZE = 16
MLA_PAGE_SIZE = 64
#: Activation dtype of the block-scaled fp8 GEMMs (DeepSeek-V3's checkpoint recipe).
FP8 = "fp8_e4m3"
#: The where-labels of the MoE ops (step/model.py records its calls under the same ones).
ROUTING = "MoE routing: router top-k"
ROUTED_EXPERTS = "routed experts: gate_up, SwiGLU, down, weighted combine"


def _pairs(dims) -> tuple[tuple[str, int], ...]:
    return tuple(dict(dims).items())


@attrs.frozen
class OpUse:
    """One call a model makes to an op: where in the model, its fixed dims, and the dims that grow with the
    step's token count.

    per_token maps a dim to its multiple of the step's tokens: num_tokens 1 for a per-token op, top_k for the
    rows of a routed expert GEMM, the head count for a per-head norm; round_up rounds such a dim up to a
    multiple (a buffer the engine sizes in whole tiles). dtype None is the model's activation dtype
    (`plan --dtype`); the fp8 GEMMs take fp8 operands whatever the activations are. The call provides every
    layout tag its op's check can derive except those in not_provided (tags that describe another setup,
    e.g. an fp8 KV cache).
    """

    op: str
    where: str
    dims: tuple[tuple[str, int], ...] = attrs.field(converter=_pairs)
    per_token: tuple[tuple[str, int], ...] = attrs.field(default=(("num_tokens", 1),), converter=_pairs)
    round_up: tuple[tuple[str, int], ...] = attrs.field(default=(), converter=_pairs)
    dtype: str | None = None
    not_provided: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset)

    def shape(self, tokens: int) -> dict[str, int]:
        """Every dim of the call in a step of `tokens` tokens."""
        multiple_of = dict(self.round_up)
        grown = {}
        for name, factor in self.per_token:
            step = multiple_of.get(name, 1)
            grown[name] = -(-factor * tokens // step) * step  # ceil to a multiple of step
        return {**dict(self.dims), **grown}


@attrs.frozen
class Gap:
    """Work the model does that no op of the table serves yet: `plan` lists it, so the gap is seen."""

    what: str
    where: str
    dims: tuple[tuple[str, int], ...] = attrs.field(default=(), converter=_pairs)


@attrs.frozen(kw_only=True)
class ModelPreset:
    name: str
    hidden: int
    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    #: the q/k head dim; under MLA the part without rotary (DeepSeek's qk_nope_head_dim)
    head_dim: int
    #: the dense MLP's width: every layer of a dense model, the first num_dense_layers of an MoE model
    intermediate: int
    vocab: int
    num_experts: int = 0
    top_k: int = 0
    moe_intermediate: int = 0
    num_shared_experts: int = 0
    #: MoE models whose first layers are dense MLPs (DeepSeek-V3's first_k_dense_replace)
    num_dense_layers: int = 0
    qk_norm: bool = False
    # Multi-head latent attention (DeepSeek): 0 means ordinary GQA attention.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    #: 128: the checkpoint's projections are fp8 with 128x128 weight blocks, served by the fp8 GEMM ops (their
    #: activations quantized per 1x128 group); 0: bf16 projections, which no op of the table serves yet
    weights_fp8_block: int = 0
    # What `rapid-llm run` needs to build the model (config.json's values; no op's dispatch depends on them).
    #: rotary base (rope_theta) and the RMSNorm epsilon (rms_norm_eps)
    rope_theta: float = 10000.0
    norm_eps: float = 1e-6
    #: q/k/v projections with a bias (Qwen2's attention)
    qkv_bias: bool = False
    #: MoE router: "softmax" (softmax over the experts, top-k, renormalised: Mixtral, Qwen3-MoE) or "sigmoid_grouped"
    #: (DeepSeek-V3: sigmoid scores, top-k within the best topk_group of n_group expert groups chosen with a
    #: correction bias, renormalised, times routed_scaling_factor)
    router: str = "softmax"
    n_group: int = 1
    topk_group: int = 1
    routed_scaling_factor: float = 1.0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def has_dense_mlp(self) -> bool:
        return not self.is_moe or self.num_dense_layers > 0

    def op_uses(self, tp: int = 1, ep: int = 1) -> tuple[OpUse, ...]:
        """Every call to an op of the table, in forward-pass order (each layer kind's calls once), on one rank
        of tp-way tensor and ep-way expert parallelism (module docstring)."""
        return tuple(step for step in self._forward(tp, ep) if isinstance(step, OpUse))

    def gaps(self, tp: int = 1, ep: int = 1) -> tuple[Gap, ...]:
        """The work no op of the table serves yet, in forward-pass order."""
        return tuple(step for step in self._forward(tp, ep) if isinstance(step, Gap))

    def parallelism_errors(self, tp: int, ep: int) -> list[str]:
        """Why this model cannot be split tp / ep ways (an empty list: it can)."""
        errors = []
        if tp < 1 or ep < 1:
            return [f"tp and ep must be >= 1 (got tp={tp}, ep={ep})"]
        kv = self.num_q_heads if self.is_mla else self.num_kv_heads
        if self.num_q_heads % tp or (kv % tp and tp % kv):
            errors.append(f"tp={tp} does not split {self.num_q_heads} attention heads ({kv} KV heads) evenly")
        widths = [self.intermediate] if self.has_dense_mlp else []
        widths += [self.num_shared_experts * self.moe_intermediate] if self.num_shared_experts else []
        widths += [self.moe_intermediate] if self.is_moe and ep == 1 else []
        if any(width % tp for width in widths):
            errors.append(f"tp={tp} does not split the MLP widths {widths} evenly")
        if ep > 1 and not self.is_moe:
            errors.append(f"ep={ep}: {self.name} has no experts to split")
        elif ep > 1 and self.num_experts % ep:
            errors.append(f"ep={ep} does not split {self.num_experts} experts evenly")
        return errors

    # The forward pass, one step at a time: an op use where the table has the op, a gap where it has none.
    # One walk for both keeps a projection in one place whichever it is (fp8 use or bf16 gap).

    def _forward(self, tp: int = 1, ep: int = 1):
        h = self.hidden
        yield OpUse("embedding.vocab_embedding", "token embedding", {"hidden": h})
        if tp > 1:
            yield OpUse("comm.all_reduce", "vocab-parallel embedding: the shards' rows summed", _world(h, tp))
        yield OpUse("norm.rms_norm", "first input_layernorm, final norm", {"hidden": h})
        if tp == 1:
            yield OpUse("norm.fused_add_rms_norm", "residual add + layernorm between sublayers", {"hidden": h})
        yield from self._mla(tp) if self.is_mla else self._gqa(tp)
        if tp > 1:
            yield OpUse("comm.all_reduce_add_rms_norm", "o_proj all-reduce + residual add + layernorm", _world(h, tp))
        if self.has_dense_mlp:
            yield from self._mlp("dense MLP" if self.is_moe else "MLP", self.intermediate, tp)
        if self.is_moe:
            yield from self._moe(tp, ep)
        if tp > 1:
            where = "MLP output all-reduce + residual add + next layernorm"
            yield OpUse("comm.all_reduce_add_rms_norm", where, _world(h, tp))
        yield OpUse("gemm.mm", "lm_head", {"n": -(-self.vocab // tp), "k": h})
        if tp > 1:
            yield Gap("all-gather", "lm_head: the vocab-sharded logits gathered", {"world_size": tp})

    def _linear(self, where: str, n: int, k: int):
        """A projection (weight [n, k]) on every token: an fp8 block GEMM for an fp8 checkpoint (its input
        quantized by the _quantize step before it), gemm.mm for a bf16 one."""
        if not self.weights_fp8_block:
            yield OpUse("gemm.mm", where, {"n": n, "k": k})
            return
        yield OpUse("gemm.fp8_block_mm", where, {"n": n, "k": k}, dtype=FP8)

    def _quantize(self, where: str, width: int, rows_per_token: int = 1):
        """fp8 activations for the next fp8 GEMMs (none under bf16 weights)."""
        if self.weights_fp8_block:
            yield OpUse(
                "quantization.per_token_group_fp8",
                f"fp8 input of {where}",
                {"hidden": width},
                {"num_tokens": rows_per_token},
            )

    def _gqa(self, tp: int = 1):
        # this rank's heads (KV heads replicated where there are fewer than tp)
        q_heads, kv_heads = self.num_q_heads // tp, max(1, self.num_kv_heads // tp)
        heads = {"num_q_heads": q_heads, "num_kv_heads": kv_heads, "head_dim": self.head_dim}
        q_width, kv_width = q_heads * self.head_dim, kv_heads * self.head_dim
        yield from self._quantize("qkv_proj", self.hidden)
        yield from self._linear("qkv_proj", q_width + 2 * kv_width, self.hidden)
        if self.qk_norm:  # per head: tokens x heads rows of head_dim
            yield OpUse("norm.rms_norm", "per-head q norm", {"hidden": self.head_dim}, {"num_tokens": q_heads})
            yield OpUse("norm.rms_norm", "per-head k norm", {"hidden": self.head_dim}, {"num_tokens": kv_heads})
        yield OpUse("embedding.rotary", "rotary on q/k", heads)
        yield OpUse("kvcache.update_kv_buffer", "KV cache write", {"num_kv_heads": kv_heads, "head_dim": self.head_dim})
        yield OpUse(
            "attention.prefill",
            "varlen causal prefill",
            {**heads, "head_dim_v": self.head_dim},
            {"num_tokens": 1, "max_seqlen": 1},
        )
        yield OpUse(
            "attention.prefill_paged", "prefill over cached pages (chunked prefill)", {**heads, "page_size": PAGE_SIZE}
        )
        yield OpUse("attention.decode", "paged decode", {**heads, "page_size": PAGE_SIZE}, not_provided={"kv:fp8_e4m3"})
        yield from self._quantize("o_proj", q_width)
        yield from self._linear("o_proj", self.hidden, q_width)

    def _mla(self, tp: int = 1):
        h, heads, rope = self.hidden, self.num_q_heads // tp, self.qk_rope_head_dim
        latent = self.kv_lora_rank + rope  # one latent cache row: the compressed KV and the shared rope key
        yield from self._quantize("q_a_proj, kv_a_proj_with_mqa", h)
        yield from self._linear("q_a_proj", self.q_lora_rank, h)
        yield from self._linear("kv_a_proj_with_mqa", latent, h)
        yield OpUse("norm.rms_norm", "MLA q_a_layernorm", {"hidden": self.q_lora_rank})
        yield OpUse("norm.rms_norm", "MLA kv_a_layernorm", {"hidden": self.kv_lora_rank})
        yield from self._quantize("q_b_proj", self.q_lora_rank)
        yield from self._linear("q_b_proj", heads * (self.head_dim + rope), self.q_lora_rank)
        yield OpUse(
            "embedding.rotary",
            "rotary on the rope part of q/k",
            {"head_dim": rope, "num_q_heads": heads, "num_kv_heads": 1},
        )
        yield OpUse(
            "kvcache.update_mla_buffer", "latent KV cache write", {"kv_lora_rank": self.kv_lora_rank, "rope_dim": rope}
        )
        # Prefill expands the latent to per-head k_nope and v (kv_b_proj) and runs attention over whole heads.
        yield from self._quantize("kv_b_proj (prefill)", self.kv_lora_rank)
        yield from self._linear("kv_b_proj (prefill)", heads * (self.head_dim + self.v_head_dim), self.kv_lora_rank)
        yield OpUse(
            "attention.mla_prefill",
            "MLA prefill",
            {
                "num_q_heads": heads,
                "num_kv_heads": heads,
                "head_dim": self.head_dim + rope,
                "head_dim_v": self.v_head_dim,
            },
            {"num_tokens": 1, "max_seqlen": 1},
        )
        # Decode stays in the latent space: kv_b_proj's halves multiply q and the output per head instead.
        yield Gap("bf16 batched GEMM", "MLA decode weight absorption: q_nope x W_UK, latent output x W_UV")
        yield OpUse(
            "attention.mla_decode", "MLA decode", {"num_q_heads": heads, "head_dim": latent, "page_size": MLA_PAGE_SIZE}
        )
        yield from self._quantize("o_proj", heads * self.v_head_dim)
        yield from self._linear("o_proj", h, heads * self.v_head_dim)

    def _mlp(self, label: str, width: int, tp: int = 1):
        """A SwiGLU MLP (its input quantized first in an fp8 checkpoint); tp ranks each hold width / tp."""
        width //= tp
        yield from self._quantize(f"{label} gate_up_proj", self.hidden)
        yield from self._linear(f"{label} gate_up_proj", 2 * width, self.hidden)
        yield OpUse("activation.silu_and_mul", f"{label} SwiGLU", {"intermediate": width})
        yield from self._quantize(f"{label} down_proj", width)
        yield from self._linear(f"{label} down_proj", self.hidden, width)

    def _moe(self, tp: int = 1, ep: int = 1):
        width = self.moe_intermediate
        # DeepSeek-V3's sigmoid router scores in fp32 (step/model.py), the softmax routers in the activations' dtype
        gate_dtype = "fp32" if self.router == "sigmoid_grouped" else None
        experts = {"num_experts": self.num_experts, "top_k": self.top_k}
        yield OpUse("gemm.mm", "MoE router gate", {"n": self.num_experts, "k": self.hidden}, dtype=gate_dtype)
        yield OpUse("moe.topk_routing", ROUTING, experts, dtype=gate_dtype)
        if self.num_shared_experts:
            yield from self._mlp("shared expert", self.num_shared_experts * width, tp)
        # fp8 block weights (DeepSeek-V3): the same op over e4m3 experts and their 128 x 128 block scales
        dtype = FP8 if self.weights_fp8_block else None
        if ep == 1:
            dims = {"hidden": self.hidden, "intermediate": width // tp, **experts}
            yield OpUse("moe.fused_moe", ROUTED_EXPERTS, dims, dtype=dtype)
            return
        # expert parallelism: whole experts, E / ep per rank; a token's rows reach at most min(top_k, ep) ranks
        rows = min(self.top_k, ep)
        yield OpUse(
            "comm.ep_dispatch",
            "EP dispatch: tokens to their experts' ranks",
            {"hidden": self.hidden, **experts, "world_size": ep},
            dtype=dtype,
        )
        local = {
            "hidden": self.hidden,
            "intermediate": width,
            "num_experts": self.num_experts // ep,
            "top_k": self.top_k,
        }
        yield OpUse(
            "moe.fused_moe", f"{ROUTED_EXPERTS} (this rank's experts)", local, {"num_tokens": rows}, dtype=dtype
        )
        combine = {"hidden": self.hidden, "world_size": ep}
        yield OpUse("comm.ep_combine", "EP combine: results back, added per token", combine, {"num_tokens": rows})


def _world(hidden: int, ranks: int) -> dict:
    return {"hidden": hidden, "world_size": ranks}


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
            rope_theta=500000.0,
            norm_eps=1e-5,
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
            rope_theta=1000000.0,
            norm_eps=1e-6,
            qkv_bias=True,
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
            rope_theta=1000000.0,
            norm_eps=1e-5,
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
            rope_theta=1000000.0,
            norm_eps=1e-6,
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
            num_dense_layers=3,
            q_lora_rank=1536,
            kv_lora_rank=512,
            qk_rope_head_dim=64,
            v_head_dim=128,
            weights_fp8_block=128,
            rope_theta=10000.0,
            norm_eps=1e-6,
            router="sigmoid_grouped",
            n_group=8,
            topk_group=4,
            routed_scaling_factor=2.5,
        ),
    )
}


def preset(name: str) -> ModelPreset:
    key = name.strip().lower()
    if key not in PRESETS:
        raise KeyError(f"unknown model preset {name!r}; presets: {sorted(PRESETS)}")
    return PRESETS[key]
