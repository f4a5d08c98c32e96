"""The decoder step: prefill of a ragged batch, or one decode token per sequence, through the planned ops.

Per layer (pre-norm residual stream, as Llama, Qwen, Mixtral and DeepSeek-V3):
    x, residual = fused_add_rms_norm(x, residual, input_norm)   (layer 0: residual = x, x = rms_norm(x))
    x = attention(x)
    x, residual = fused_add_rms_norm(x, residual, post_norm)
    x = mlp(x) or moe(x)
then fused_add_rms_norm with the final norm and lm_head on each sequence's last token.

GQA attention: qkv projection (+ bias for Qwen2), per-head q/k rms_norm (Qwen3), NeoX rotary,
update_kv_buffer of the k | v rows, then `prefill` (the prompts are fresh: ragged causal attention
over their own k, v) or paged `decode` over the cache. sm_scale = D^-0.5.

MLA (DeepSeek-V3): q = q_b(rms_norm(q_a(x))), [T, H, 128 nope + 64 rope]; kv_a(x) = latent [512] |
k_rope [64]; the latent is normalised, k_rope and q's rope part rotated (GPT-J pairs: DeepSeek's
interleaved rope), and latent | k_rope written to the latent cache (update_mla_buffer). Prefill
expands the latent with kv_b into per-head k_nope | v and runs `mla_prefill` on q [T, H, 192],
k = k_nope | k_rope [T, H, 192], v [T, H, 128]. Decode stays in the latent space: q_nope times
kv_b's k half per head (W_UK) gives the latent query, `mla_decode` attends the cache, and the
output times kv_b's v half (W_UV) returns to [H, 128] (both products plain torch: no op serves
them). sm_scale = 192^-0.5 (YaRN's mscale is not modelled: the runs are far shorter than the
context where it applies).

MoE: the router (a GEMM), then moe.topk_routing: softmax top-k renormalised (Mixtral, Qwen3-MoE)
or DeepSeek-V3's grouped sigmoid. The routed experts: moe.fused_moe (gate_up, SwiGLU, down and the
weighted combine in one op), over bf16 experts or DeepSeek-V3's e4m3 experts with their 128 x 128
block scales; plus DeepSeek's shared expert (an MLP).

fp8 checkpoints: every projection's input is quantized per 1x128 group (per_token_group_fp8; once
where several projections share it) and multiplied by fp8_block_mm, which returns bf16.
"""

from __future__ import annotations

import torch

from ..models import ROUTED_EXPERTS, ROUTING, ModelPreset
from .recorder import Recorder
from .shapes import is_moe_layer
from .weights import Fp8Weight

#: The where-labels of `rapid-llm plan` (models.py), so that a run's uses read like its plan.
EMBEDDING, FIRST_NORM, ADD_NORM = (
    "token embedding",
    "first input_layernorm, final norm",
    ("residual add + layernorm between sublayers"),
)


def rope_cache(max_position: int, rotary_dim: int, theta: float, device) -> torch.Tensor:
    """[max_position, rotary_dim] fp32: cos | sin of position * theta^(-2i / rotary_dim)."""
    inverse = 1.0 / theta ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    angles = torch.arange(max_position, dtype=torch.float64)[:, None] * inverse[None, :]
    return torch.cat((angles.cos(), angles.sin()), dim=-1).float().to(device)


class Batch:
    """One step's tokens: ids, positions and sequences [T]; cu_seqlens/max_seqlen for prefill; last rows."""

    def __init__(self, ids, positions, sequences, last, cu_seqlens=None, max_seqlen=None):
        self.ids, self.positions, self.sequences, self.last = ids, positions, sequences, last
        self.cu_seqlens, self.max_seqlen = cu_seqlens, max_seqlen

    @property
    def is_prefill(self) -> bool:
        return self.cu_seqlens is not None


class Decoder:
    def __init__(self, preset: ModelPreset, weights: dict, cache, recorder: Recorder, rope: torch.Tensor):
        self.p, self.w, self.cache, self.rec, self.rope = preset, weights, cache, recorder, rope
        self.eps = preset.norm_eps
        if preset.is_mla:  # kv_b's halves per head, for decode's absorbed products
            for layer in weights["layers"]:
                kv_b = layer["kv_b"]
                kv_b = kv_b.dequantize() if isinstance(kv_b, Fp8Weight) else kv_b
                heads = kv_b.view(preset.num_q_heads, preset.head_dim + preset.v_head_dim, preset.kv_lora_rank)
                dtype = weights["embed"].dtype
                layer["w_uk"] = heads[:, : preset.head_dim].to(dtype)
                layer["w_uv"] = heads[:, preset.head_dim :].to(dtype)

    # -- projections ------------------------------------------------------------------------------

    def quantize(self, x, where: str):
        return self.rec.op("quantization.per_token_group_fp8", f"fp8 input of {where}", x)

    def linear(self, x, w, where: str, bias=None, quantized=None):
        """x @ w.T (+ bias): an fp8 block GEMM for an Fp8Weight (x quantized here unless given), else gemm.mm."""
        if isinstance(w, Fp8Weight):
            xq, scale = quantized or self.quantize(x, where)
            return self.rec.op("gemm.fp8_block_mm", where, xq, scale, w.weight, w.scale).to(x.dtype)
        return self.rec.op("gemm.mm", where, x, w, bias)

    def norm(self, x, weight, where: str):
        return self.rec.op("norm.rms_norm", where, x, weight, self.eps)

    # -- the step ---------------------------------------------------------------------------------

    def forward(self, batch: Batch) -> torch.Tensor:
        """Logits [B, vocab] fp32 of each sequence's last token of this step."""
        rec, w = self.rec, self.w
        rec.begin_step()  # every layer of this step shares its attention step plans
        x = rec.op("embedding.vocab_embedding", EMBEDDING, batch.ids, w["embed"])
        loc = self.cache.slots(batch.sequences, batch.positions)
        residual = None
        for index, layer in enumerate(w["layers"]):
            moe = is_moe_layer(self.p, index)
            x, residual = self.layer(layer, x, residual, batch, loc, self.cache.buffers[index], moe)
        x, residual = rec.op("norm.fused_add_rms_norm", ADD_NORM, x, residual, w["final_norm"], self.eps)
        last = rec.torch("copy", "last token of each sequence", x.index_select, 0, batch.last)
        return rec.op("gemm.mm", "lm_head", last, w["lm_head"]).float()

    def layer(self, layer, x, residual, batch: Batch, loc, buffer, moe: bool):
        """One decoder layer: (x, residual) -> (x, residual); residual None before the first layer."""
        rec = self.rec
        if residual is None:
            residual, x = x, self.norm(x, layer["input_norm"], FIRST_NORM)
        else:
            x, residual = rec.op("norm.fused_add_rms_norm", ADD_NORM, x, residual, layer["input_norm"], self.eps)
        attend = self.mla if self.p.is_mla else self.gqa
        x = attend(layer, x, batch, loc, buffer)
        x, residual = rec.op("norm.fused_add_rms_norm", ADD_NORM, x, residual, layer["post_norm"], self.eps)
        x = self.moe(layer["moe"], x) if moe else self.mlp(layer["mlp"], x)
        return x, residual

    def gqa(self, layer, x, batch: Batch, loc, buffer):
        p, rec = self.p, self.rec
        tokens, hq, hk, d = x.shape[0], p.num_q_heads, p.num_kv_heads, p.head_dim
        qkv = self.linear(x, layer["qkv"], "qkv_proj", layer["qkv_bias"])
        q, k, v = qkv[:, : hq * d], qkv[:, hq * d : (hq + hk) * d], qkv[:, (hq + hk) * d :]
        if layer["q_norm"] is not None:
            for part, heads, name in ((q, hq, "q"), (k, hk, "k")):
                normed = self.norm(part.view(tokens, heads, d), layer[f"{name}_norm"], f"per-head {name} norm")
                rec.torch("copy", "per-head q/k norm back into qkv", part.copy_, normed.view(tokens, heads * d))
        rec.op("embedding.rotary", "rotary on q/k", batch.positions, q, k, d, self.rope, True)
        rec.op("kvcache.update_kv_buffer", "KV cache write", qkv[:, hq * d :].view(tokens, 2 * hk, d), loc, buffer)
        q = q.view(tokens, hq, d)
        if batch.is_prefill:
            out = rec.op(
                "attention.prefill",
                "varlen causal prefill",
                q,
                k.view(tokens, hk, d),
                v.view(tokens, hk, d),
                batch.cu_seqlens,
                batch.max_seqlen,
                d**-0.5,
            )
        else:
            cache = self.cache
            out = rec.op(
                "attention.decode",
                "paged decode",
                q,
                buffer,
                cache.page_table,
                cache.seq_lens,
                cache.page_size,
                d**-0.5,
            )
        return self.linear(out.reshape(tokens, hq * d), layer["o"], "o_proj")

    def mla(self, layer, x, batch: Batch, loc, buffer):
        p, rec = self.p, self.rec
        tokens, heads, nope, rope, rank = x.shape[0], p.num_q_heads, p.head_dim, p.qk_rope_head_dim, p.kv_lora_rank
        shared = self.quantize(x, "q_a_proj, kv_a_proj_with_mqa") if p.weights_fp8_block else None
        q_a = self.norm(
            self.linear(x, layer["q_a"], "q_a_proj", quantized=shared), layer["q_a_norm"], "MLA q_a_layernorm"
        )
        kv_a = self.linear(x, layer["kv_a"], "kv_a_proj_with_mqa", quantized=shared)
        latent = self.norm(kv_a[:, :rank], layer["kv_a_norm"], "MLA kv_a_layernorm")
        k_rope = kv_a[:, rank:]
        q = self.linear(q_a, layer["q_b"], "q_b_proj").view(tokens, heads, nope + rope)
        q_rope = rec.torch("copy", "q's rope part to rows", lambda: q[..., nope:].reshape(tokens, heads * rope))
        rec.op(
            "embedding.rotary",
            "rotary on the rope part of q/k",
            batch.positions,
            q_rope,
            k_rope,
            rope,
            self.rope,
            False,
        )
        rec.op("kvcache.update_mla_buffer", "latent KV cache write", latent, k_rope, loc, buffer)
        q_rope = q_rope.view(tokens, heads, rope)
        scale = (nope + rope) ** -0.5
        if batch.is_prefill:
            kv = self.linear(latent, layer["kv_b"], "kv_b_proj (prefill)").view(tokens, heads, nope + p.v_head_dim)
            with rec.timed("copy", "MLA prefill q, k of nope | rope"):
                q_full = torch.cat((q[..., :nope], q_rope), dim=-1)
                k_full = torch.cat((kv[..., :nope], k_rope[:, None, :].expand(tokens, heads, rope)), dim=-1)
            out = rec.op(
                "attention.mla_prefill",
                "MLA prefill",
                q_full,
                k_full,
                kv[..., nope:],
                batch.cu_seqlens,
                batch.max_seqlen,
                scale,
            )
        else:
            absorb = "MLA decode weight absorption: q_nope x W_UK, latent output x W_UV"
            with rec.timed("batched GEMM", absorb):
                q_latent = torch.bmm(q[..., :nope].transpose(0, 1), layer["w_uk"]).transpose(0, 1)
                q_full = torch.cat((q_latent, q_rope), dim=-1)
            cache = self.cache
            latent_out = rec.op(
                "attention.mla_decode",
                "MLA decode",
                q_full,
                buffer,
                cache.page_table,
                cache.seq_lens,
                cache.page_size,
                scale,
            )
            with rec.timed("batched GEMM", absorb):
                out = torch.bmm(latent_out.transpose(0, 1), layer["w_uv"].transpose(1, 2)).transpose(0, 1)
        return self.linear(out.reshape(tokens, heads * p.v_head_dim), layer["o"], "o_proj")

    def mlp(self, layer, x, label: str | None = None, quantized=None):
        label = label or ("dense MLP" if self.p.is_moe else "MLP")
        h = self.linear(x, layer["gate_up"], f"{label} gate_up_proj", quantized=quantized)
        act = self.rec.op("activation.silu_and_mul", f"{label} SwiGLU", h)
        return self.linear(act, layer["down"], f"{label} down_proj")

    # -- MoE --------------------------------------------------------------------------------------

    def route(self, layer, x):
        """(expert ids [T, top_k] int32, weights [T, top_k] fp32) of each token: moe.topk_routing."""
        p = self.p
        if p.router == "sigmoid_grouped":
            # DeepSeek-V3 scores its experts in fp32 (the reference implementation's gate)
            logits = self.rec.op("gemm.mm", "MoE router gate", x.float(), layer["router"].float())
            routing = (logits, p.top_k, True, "sigmoid", layer["router_bias"], p.n_group, p.topk_group)
            weights, ids = self.rec.op("moe.topk_routing", ROUTING, *routing, p.routed_scaling_factor)
        else:
            logits = self.rec.op("gemm.mm", "MoE router gate", x, layer["router"])
            weights, ids = self.rec.op("moe.topk_routing", ROUTING, logits, p.top_k)
        return ids, weights

    def moe(self, layer, x):
        """The routed experts through moe.fused_moe (bf16 experts, or e4m3 experts with their block scales),
        plus DeepSeek's shared expert as an MLP."""
        ids, weights = self.route(layer, x)
        gate_up, down = layer["experts_gate_up"], layer["experts_down"]
        if isinstance(gate_up, Fp8Weight):
            # fp8 experts take bf16 activations (quantized per 1x128 group inside) and return bf16
            experts = (gate_up.weight, down.weight, weights, ids, "silu", gate_up.scale, down.scale)
            out = self.rec.op("moe.fused_moe", ROUTED_EXPERTS, x.to(torch.bfloat16), *experts).to(x.dtype)
        else:
            out = self.rec.op("moe.fused_moe", ROUTED_EXPERTS, x, gate_up, down, weights, ids)
        if layer["shared"] is not None:
            out = out + self.mlp(layer["shared"], x, "shared expert")
        return out
