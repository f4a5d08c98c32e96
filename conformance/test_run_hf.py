"""`rapid-llm run`'s model against Hugging Face transformers' own implementation of each architecture.

The HF model (LlamaForCausalLM, Qwen2ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM,
DeepseekV3ForCausalLM) is built from a config with the run's shapes (a few layers, widths narrowed by
16), gets our random weights (no download), and reads each prompt followed by the decode tokens the run
fed; its last logits must match the run's final logits in fp32 (eager attention).

Tolerance: as the run's own check (rapid_llm/step/run.py), with fp32 activations: both sides differ
only in the order of fp32 sums. DeepSeek-V3 is the exception: its HF reference has no fp8, so it gets
our fp8 weights dequantized, while our step also quantizes every projection's input per 1x128 group
to e4m3 (relative error up to 2^-4 per element, unit roundoff u = 2^-4, ~2^-4/sqrt(3) rms for uniform
rounding); over a length-K dot product the rounding errors add in quadrature, so an output moves by
about 2^-4/sqrt(3) of its scale, not K times it. Its bound is that relative error, times the
quantized projections in the chain (q_a/kv_a, q_b, kv_b, o, gate_up, down per layer, each feeding a
normalised sublayer), times max|logits|, and a check that the greedy tokens agree on most sequences is
not made (a 5% logit error can flip a near tie).

Catches: a model that is not the architecture it names (a wrong rotary pairing, q/k/v split, missing
Qwen2 bias or Qwen3 q/k norm, a router that is not the model's, a wrong MLA absorption or kv_b split,
a paged cache that returns another sequence's keys), which the all-reference comparison cannot see:
both of its runs share the model code.
"""

from __future__ import annotations

import math

import attrs
import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[test]')")

from rapid_llm.models import PRESETS
from rapid_llm.step.run import RunConfig, run
from rapid_llm.step.weights import Fp8Weight

NARROW = 16
LAYERS = {"deepseek-v3": 4}  # its first three layers are dense: the fourth is MoE


def _dense(w):
    return w.dequantize() if isinstance(w, Fp8Weight) else w.float()


def _config(p, layers):
    common = dict(
        vocab_size=p.vocab,
        hidden_size=p.hidden,
        num_hidden_layers=layers,
        num_attention_heads=p.num_q_heads,
        num_key_value_heads=p.num_kv_heads,
        rms_norm_eps=p.norm_eps,
        rope_theta=p.rope_theta,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    name = p.name.split("/")[0]
    if name == "deepseek-v3":
        return transformers.DeepseekV3Config(
            **common,
            intermediate_size=p.intermediate,
            moe_intermediate_size=p.moe_intermediate,
            n_shared_experts=p.num_shared_experts,
            n_routed_experts=p.num_experts,
            num_experts_per_tok=p.top_k,
            n_group=p.n_group,
            topk_group=p.topk_group,
            routed_scaling_factor=p.routed_scaling_factor,
            first_k_dense_replace=p.num_dense_layers,
            norm_topk_prob=True,
            kv_lora_rank=p.kv_lora_rank,
            q_lora_rank=p.q_lora_rank,
            qk_rope_head_dim=p.qk_rope_head_dim,
            qk_nope_head_dim=p.head_dim,
            v_head_dim=p.v_head_dim,
            rope_scaling=None,
        )
    common["head_dim"] = p.head_dim
    if name == "mixtral-8x7b":
        return transformers.MixtralConfig(
            **common, intermediate_size=p.moe_intermediate, num_local_experts=p.num_experts, num_experts_per_tok=p.top_k
        )
    if name == "qwen3-30b-a3b":
        return transformers.Qwen3MoeConfig(
            **common,
            intermediate_size=p.intermediate,
            moe_intermediate_size=p.moe_intermediate,
            num_experts=p.num_experts,
            num_experts_per_tok=p.top_k,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        )
    if name == "qwen2.5-7b":
        return transformers.Qwen2Config(**common, intermediate_size=p.intermediate)
    return transformers.LlamaConfig(**common, intermediate_size=p.intermediate)


def _mlp(prefix, gate_up, down, names=("gate_proj", "up_proj", "down_proj")):
    gate_up = _dense(gate_up)
    width = gate_up.shape[0] // 2
    return {
        f"{prefix}.{names[0]}.weight": gate_up[:width],
        f"{prefix}.{names[1]}.weight": gate_up[width:],
        f"{prefix}.{names[2]}.weight": _dense(down),
    }


def _state_dict(p, weights):
    """Our weights under the HF model's parameter names (fused qkv and gate_up split; fp8 dequantized)."""
    name = p.name.split("/")[0]
    state = {
        "model.embed_tokens.weight": weights["embed"].float(),
        "model.norm.weight": weights["final_norm"].float(),
        "lm_head.weight": weights["lm_head"].float(),
    }
    for index, layer in enumerate(weights["layers"]):
        at = f"model.layers.{index}"
        state[f"{at}.input_layernorm.weight"] = layer["input_norm"].float()
        state[f"{at}.post_attention_layernorm.weight"] = layer["post_norm"].float()
        attention = f"{at}.self_attn"
        if p.is_mla:
            for ours, theirs in (("q_a", "q_a_proj"), ("q_b", "q_b_proj"), ("kv_a", "kv_a_proj_with_mqa")):
                state[f"{attention}.{theirs}.weight"] = _dense(layer[ours])
            state[f"{attention}.kv_b_proj.weight"] = _dense(layer["kv_b"])
            state[f"{attention}.q_a_layernorm.weight"] = layer["q_a_norm"].float()
            state[f"{attention}.kv_a_layernorm.weight"] = layer["kv_a_norm"].float()
        else:
            q_width, kv_width = p.num_q_heads * p.head_dim, p.num_kv_heads * p.head_dim
            qkv = _dense(layer["qkv"])
            splits = {"q_proj": (0, q_width), "k_proj": (q_width, kv_width), "v_proj": (q_width + kv_width, kv_width)}
            for proj, (start, width) in splits.items():
                state[f"{attention}.{proj}.weight"] = qkv[start : start + width]
                if layer["qkv_bias"] is not None:
                    state[f"{attention}.{proj}.bias"] = layer["qkv_bias"].float()[start : start + width]
            if layer["q_norm"] is not None:
                state[f"{attention}.q_norm.weight"] = layer["q_norm"].float()
                state[f"{attention}.k_norm.weight"] = layer["k_norm"].float()
        state[f"{attention}.o_proj.weight"] = _dense(layer["o"])
        if "mlp" in layer:
            state.update(_mlp(f"{at}.mlp", layer["mlp"]["gate_up"], layer["mlp"]["down"]))
            continue
        moe = layer["moe"]
        block, names = f"{at}.mlp", ("gate_proj", "up_proj", "down_proj")
        if name == "mixtral-8x7b":
            block, names = f"{at}.block_sparse_moe", ("w1", "w3", "w2")
        state[f"{block}.gate.weight"] = moe["router"].float()
        if moe["router_bias"] is not None:
            state[f"{block}.gate.e_score_correction_bias"] = moe["router_bias"]
        gate_up, down = _dense(moe["experts_gate_up"]), _dense(moe["experts_down"])
        for expert in range(p.num_experts):
            state.update(_mlp(f"{block}.experts.{expert}", gate_up[expert], down[expert], names))
        if moe["shared"] is not None:
            state.update(_mlp(f"{block}.shared_experts", moe["shared"]["gate_up"], moe["shared"]["down"]))
    return state


def _bound(p, result) -> float:
    check = result["check"]
    if not p.weights_fp8_block:
        return check["tolerance"]["value"]
    quantized_per_layer = 6  # q_a/kv_a (one quantized input), q_b, kv_b, o_proj, gate_up, down
    relative = 2.0**-4 / math.sqrt(3) * quantized_per_layer * result["config"].layers
    return relative * max(1.0, check["max_abs_reference_logit"])


def _hf_difference(model):
    """(max |our final logits - HF's|, the bound, the run's result)."""
    config = RunConfig(model=model, layers=LAYERS.get(model, 2), narrow=NARROW, dtype="fp32", decode_steps=3)
    result = run(config)
    p = result["preset"]
    hf = transformers.AutoModelForCausalLM.from_config(_config(p, config.layers), attn_implementation="eager")
    missing, unexpected = hf.load_state_dict(_state_dict(p, result["weights"]), strict=False)
    assert not unexpected, unexpected
    assert all("rotary" in key for key in missing), missing
    hf = hf.float().eval()
    fed = torch.stack(result["reference"].tokens, dim=1)  # [batch, decode_steps]
    generator = torch.Generator().manual_seed(config.seed + 1)
    worst = 0.0
    for b, n in enumerate(config.prompt_lengths()):
        prompt = torch.randint(0, p.vocab, (n,), generator=generator)
        with torch.no_grad():
            logits = hf(torch.cat((prompt, fed[b]))[None]).logits[0, -1]
        worst = max(worst, (logits - result["final_logits"][b]).abs().max().item())
    return worst, _bound(p, result)


@pytest.mark.parametrize("model", sorted(PRESETS))
def test_final_logits_match_transformers(model):
    """Fails when our step's final logits (fp32, a few layers, narrowed widths) leave the bound of HF's
    implementation of the architecture fed the same weights and tokens (module docstring)."""
    worst, bound = _hf_difference(model)
    assert worst <= bound, f"{model}: max |ours - transformers| = {worst:.3g} > {bound:.3g}"


def test_deepseek_mla_and_routing_match_transformers_tightly_without_fp8(monkeypatch):
    """Fails on an MLA or DeepSeek-routing error smaller than the fp8 bound (a wrong rope pairing in the
    rope part, a swapped W_UK/W_UV half, a routing group rule): DeepSeek-V3 with its projections kept in
    fp32 (no fp8 quantization) must match HF to the fp32 tolerance of the dense models."""
    _, fp8_bound = _hf_difference("deepseek-v3")
    monkeypatch.setitem(PRESETS, "deepseek-v3", attrs.evolve(PRESETS["deepseek-v3"], weights_fp8_block=0))
    worst, bound = _hf_difference("deepseek-v3")
    # the point of this test: a bound at least ten times tighter than the fp8 run's, so smaller errors show
    assert bound * 10 <= fp8_bound, f"the fp32 bound {bound:.3g} is not 10x tighter than fp8's {fp8_bound:.3g}"
    assert worst <= bound, f"max |ours - transformers| = {worst:.3g} > {bound:.3g}"
