"""`rapid-llm plan`: the model presets name every op their architecture calls, and the default text has one
line per run of token buckets that select one row.

Catches: a preset omitting ops its model calls (DeepSeek-V3's plan listed neither its fp8 GEMMs nor its
MLA projections), a preset naming an op or a dim the table does not have (the plan would quietly report
it unserved, or never match a measured bucket: prefill was planned without max_seqlen), projection
shapes that are not the published config's, bf16 GEMMs disappearing from the plan instead of showing
as not served, and the default text listing every bucket again or merging buckets that select
different rows.
"""

from __future__ import annotations

import json
import re

import pytest

from rapid_llm.cli import main
from rapid_llm.kernels.dispatcher import build_tables
from rapid_llm.kernels.dispatcher.rankings import Ranking, RankingStore
from rapid_llm.kernels.dispatcher.table import OpTable
from rapid_llm.models import PRESETS

TABLE = build_tables()

_GQA = {
    "embedding.vocab_embedding",
    "norm.rms_norm",
    "norm.fused_add_rms_norm",
    "embedding.rotary",
    "kvcache.update_kv_buffer",
    "attention.prefill",
    "attention.prefill_paged",
    "attention.decode",
    "activation.silu_and_mul",
    "gemm.mm",
}
#: A bf16 MoE model without dense layers: its MLPs are routed experts (router GEMM, top-k routing, the fused
#: experts, whose SwiGLU is inside them).
_GQA_MOE = (_GQA - {"activation.silu_and_mul"}) | {"moe.topk_routing", "moe.fused_moe"}
#: The table's ops each architecture calls, written from the models' designs (not read from the presets).
ARCHITECTURE_OPS = {
    "llama-3-8b": _GQA,
    "qwen2.5-7b": _GQA,
    "mixtral-8x7b": _GQA_MOE,
    "qwen3-30b-a3b": _GQA_MOE,
    "deepseek-v3": {
        "embedding.vocab_embedding",
        "norm.rms_norm",
        "norm.fused_add_rms_norm",
        "quantization.per_token_group_fp8",
        "gemm.fp8_block_mm",
        "embedding.rotary",
        "kvcache.update_mla_buffer",
        "attention.mla_prefill",
        "attention.mla_decode",
        "activation.silu_and_mul",
        "gemm.mm",  # its bf16 lm_head
        "moe.topk_routing",
        "moe.fused_moe",
    },
}

#: DeepSeek-V3's fp8 projections, (n, k) from its config.json: hidden 7168, q_lora_rank 1536, kv_lora_rank
#: 512, qk_nope 128 + qk_rope 64, v_head 128, 128 heads, dense intermediate 18432, moe_intermediate 2048.
DEEPSEEK_V3_PROJECTIONS = {
    "q_a_proj": (1536, 7168),
    "kv_a_proj_with_mqa": (512 + 64, 7168),
    "q_b_proj": (128 * (128 + 64), 1536),
    "kv_b_proj": (128 * (128 + 128), 512),
    "o_proj": (7168, 128 * 128),
    "dense MLP gate_up_proj": (2 * 18432, 7168),
    "dense MLP down_proj": (7168, 18432),
    "shared expert gate_up_proj": (2 * 2048, 7168),
    "shared expert down_proj": (7168, 2048),
}


def run(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().out


def plan_json(capsys, *argv):
    code, out = run(capsys, "plan", *argv, "--json")
    assert code == 0
    return json.loads(out)


#: (tp, ep) splits every preset is planned under here (ep only where the model has experts).
SPLITS = [(1, 1), (2, 1), (8, 1), (1, 2), (2, 2), (8, 8)]


@pytest.mark.parametrize("model", sorted(PRESETS))
@pytest.mark.parametrize("tp,ep", SPLITS)
def test_a_preset_names_only_table_ops_with_exactly_their_contract_dims(model, tp, ep):
    """Catches: an op id the table lacks (a typo would be reported as unserved, silently), a dim name the
    contract lacks (never judged), and a contract dim the preset leaves out (its bucket never matches a
    measured one: prefill planned without max_seqlen), a dtype or layout tag the op does not define; on one
    GPU and under tensor / expert parallelism (a comm op planned without its world_size)."""
    if PRESETS[model].parallelism_errors(tp, ep):
        pytest.skip(f"{model} cannot be split tp={tp} ep={ep}: {PRESETS[model].parallelism_errors(tp, ep)}")
    for use in PRESETS[model].op_uses(tp, ep):
        assert use.op in TABLE.contracts, f"{model}: {use.op} ({use.where}) is not an op of the table"
        contract = TABLE.contracts[use.op]
        assert set(use.shape(1)) == set(contract.dim_names), f"{model}: {use.op} ({use.where})"
        assert (use.dtype or "bf16") in contract.dtypes, f"{model}: {use.op} ({use.where})"
        assert use.not_provided <= contract.tags, f"{model}: {use.op} ({use.where})"


@pytest.mark.parametrize("model", sorted(PRESETS))
def test_the_plan_lists_every_table_op_the_architecture_calls(capsys, model):
    """Catches: a preset omitting an op its model calls (DeepSeek-V3's plan omitted gemm.fp8_block_mm,
    gemm.fp8_grouped_mm_masked, and listed attention.mla_decode as not served)."""
    doc = plan_json(capsys, "--model", model, "--device", "cuda:sm90", "--lib", "triton=3.6.0")
    assert {entry["op"] for entry in doc["plans"]} == ARCHITECTURE_OPS[model]


def test_deepseek_v3_plans_its_projections_with_the_published_shapes(capsys):
    """Catches: the MLA projections (q_a, kv_a, q_b, kv_b, o) or the MLP / shared expert GEMMs missing from
    DeepSeek-V3's plan, or planned with a shape that is not its config's; its routed experts not planned as
    one moe.fused_moe over fp8 weights; and its bf16 lm_head not planned as gemm.mm."""
    doc = plan_json(capsys, "--model", "deepseek-v3", "--device", "cuda:sm90", "--max-tokens", "1")
    planned = {
        entry["where"].replace(" (prefill)", ""): (entry["dims"]["n"], entry["dims"]["k"])
        for entry in doc["plans"]
        if entry["op"] == "gemm.fp8_block_mm"
    }
    assert planned == DEEPSEEK_V3_PROJECTIONS
    experts = [(e["explanation"]["query"]["dtype"], e["dims"]) for e in doc["plans"] if e["op"] == "moe.fused_moe"]
    assert experts == [("fp8_e4m3", {"hidden": 7168, "intermediate": 2048, "num_experts": 256, "top_k": 8})]
    assert ("lm_head", {"n": 129280, "k": 7168}) in [
        (e["where"], e["dims"]) for e in doc["plans"] if e["op"] == "gemm.mm"
    ]


def test_bf16_models_plan_their_projections_as_gemm_mm(capsys):
    """Catches: a bf16 model's projections (qkv, o, gate_up, down, lm_head) missing from its plan or planned
    with other dims than its config's (Llama-3-8B: hidden 4096, 32/8 heads of 128, intermediate 14336)."""
    doc = plan_json(capsys, "--model", "llama-3-8b", "--device", "cuda:sm90", "--max-tokens", "1")
    planned = {e["where"]: (e["dims"]["n"], e["dims"]["k"]) for e in doc["plans"] if e["op"] == "gemm.mm"}
    assert planned == {
        "qkv_proj": (6144, 4096),
        "o_proj": (4096, 4096),
        "MLP gate_up_proj": (28672, 4096),
        "MLP down_proj": (4096, 14336),
        "lm_head": (128256, 4096),
    }
    assert not any(gap["what"] == "bf16 GEMM" for gap in doc["not_served_yet"])


def _table_with_measured_rms_norm_buckets():
    """The default rows, plus two measurements of hidden 4096 on sm90: at 2-16 tokens flashinfer/rmsnorm
    (priority 5, below native/rms_norm's 10) was the faster, so only that bucket selects it; at 17-128
    native/rms_norm was, which keeps the row its priority gives it there."""

    def measured(low, high, order):
        return Ranking(
            op="norm.rms_norm",
            dtype="bf16",
            device_class="cuda:sm90",
            bucket=(("num_tokens", low, high), ("hidden", 4096, 4096)),
            order=order,
            device="test GPU",
            evidence="test",
        )

    rankings = RankingStore(
        [
            measured(2, 16, (("flashinfer/rmsnorm", 5.0), ("native/rms_norm", 6.5))),
            measured(17, 128, (("native/rms_norm", 6.0), ("flashinfer/rmsnorm", 9.0))),
        ]
    )
    rows = [row for op in TABLE.ops for row in TABLE.rows(op)]
    return OpTable.from_rows(rows, TABLE.contracts, rankings, TABLE.layout_tags)


#: Llama-3-8B on a described sm90 with Triton and FlashInfer, buckets 1 .. 513-1024.
PLAN_SM90 = (
    *("plan", "--model", "llama-3-8b", "--device", "cuda:sm90", "--no-local-libs"),
    *("--lib", "triton=3.6.0", "--lib", "flashinfer=0.6.0", "--max-tokens", "1000"),
)


def _cells(line: str) -> list[str]:
    """A default-text line's cells: op, what, tokens, row, (reason); columns are 2+ spaces apart."""
    return re.split(r"\s{2,}", line.strip())


def test_the_default_text_has_one_line_per_run_of_buckets_that_select_one_row(capsys, monkeypatch):
    """Catches: the default text listing every bucket (6 lines per op use here), merging buckets that select
    different rows into one range, hiding the measurement that made a row win behind every row's fate, or
    dropping the measured bucket inside a run that priority otherwise decides."""
    monkeypatch.setattr("rapid_llm.kernels.dispatcher.default_table", _table_with_measured_rms_norm_buckets)
    code, text = run(capsys, *PLAN_SM90)
    assert code == 0
    lines = [_cells(line) for line in text.splitlines() if line.startswith("norm.rms_norm ")]
    first_norm = [cells[2:] for cells in lines if cells[1] == "first input_layernorm, final norm"]
    assert first_norm == [
        ["tokens 1", "native/rms_norm", "(priority 10)"],
        ["tokens 2-16", "flashinfer/rmsnorm", "(measured 5.0 µs vs 6.5 µs for native/rms_norm)"],
        [
            "tokens 17-1024",
            "native/rms_norm",
            "(priority 10; at 17-128: measured 6.0 µs vs 9.0 µs for flashinfer/rmsnorm)",
        ],
    ]
    unchanged = [_cells(line) for line in text.splitlines() if line.startswith("norm.fused_add_rms_norm ")]
    assert [cells[2:] for cells in unchanged] == [["all tokens", "native/fused_add_rms_norm", "(priority 10)"]]
    assert "ranked below" not in text, "the default text must not list every other row's fate"


def test_verbose_prints_every_bucket_with_every_rows_fate(capsys, monkeypatch):
    """Catches: --verbose merging buckets like the default text, or dropping the per-row detail."""
    monkeypatch.setattr("rapid_llm.kernels.dispatcher.default_table", _table_with_measured_rms_norm_buckets)
    code, text = run(capsys, *PLAN_SM90, "--verbose")
    assert code == 0
    lines = [line for line in text.splitlines() if line.startswith("norm.rms_norm ") and "input_layernorm" in line]
    tokens = [line.split("final norm")[1].split()[0] for line in lines]
    assert tokens == ["1", "2-16", "17-128", "129-256", "257-512", "513-1024"]
    assert all("torch/rms_norm ranked below (reference)" in line for line in lines)
    assert "measured on test GPU" in lines[1]


def _where(doc, op):
    return {entry["where"]: entry for entry in doc["plans"] if entry["op"] == op}


def test_tensor_parallel_plan_lists_its_all_reduces_and_one_ranks_shapes(capsys):
    """`plan --tp 2` for Llama-3-8B: the embedding's all-reduce and one all_reduce_add_rms_norm after each
    sublayer (in place of the fused add + norm), each over world_size 2 and served by a named row; one rank's
    projections (qkv 32 / 2 q heads + 2 x 8 / 2 KV heads of 128; o_proj's k halved; gate_up 2 x 14336 / 2;
    lm_head's vocab halved) and attention heads; the logits' all-gather listed as not served. Catches a TP
    plan listing no collective, keeping the unsharded shapes, or planning a collective without its ranks."""
    doc = plan_json(capsys, "--model", "llama-3-8b", "--tp", "2", "--device", "cuda:sm90", "--max-tokens", "64")
    assert (doc["tp"], doc["ep"]) == (2, 1)
    ops = {entry["op"] for entry in doc["plans"]}
    assert ops == (_GQA - {"norm.fused_add_rms_norm"}) | {"comm.all_reduce", "comm.all_reduce_add_rms_norm"}
    fused = _where(doc, "comm.all_reduce_add_rms_norm")
    assert len(fused) == 2 and all(e["dims"] == {"hidden": 4096, "world_size": 2} for e in fused.values())
    assert all(e["selected"] for e in doc["plans"] if e["op"].startswith("comm.")), doc["plans"]
    gemms = {where: (e["dims"]["n"], e["dims"]["k"]) for where, e in _where(doc, "gemm.mm").items()}
    assert gemms["qkv_proj"] == ((16 + 2 * 4) * 128, 4096)
    assert gemms["o_proj"] == (4096, 16 * 128)
    assert gemms["MLP gate_up_proj"] == (14336, 4096) and gemms["MLP down_proj"] == (4096, 7168)
    assert gemms["lm_head"] == (128256 // 2, 4096)
    decode = _where(doc, "attention.decode")["paged decode"]["dims"]
    assert (decode["num_q_heads"], decode["num_kv_heads"]) == (16, 4)
    assert [gap["what"] for gap in doc["not_served_yet"]] == ["all-gather"]


def test_expert_parallel_plan_lists_dispatch_combine_and_the_local_experts(capsys):
    """`plan --ep 2` for DeepSeek-V3: comm.ep_dispatch (fp8 with its scales, top-8 of 256, world_size 2),
    moe.fused_moe over this rank's 128 experts with up to min(top_k, ep) = 2 rows per token, and
    comm.ep_combine, each served by a named row; no all-reduce without tensor parallelism. Catches an EP plan
    keeping every expert on every rank, or leaving a token's way out or back unplanned."""
    doc = plan_json(capsys, "--model", "deepseek-v3", "--ep", "2", "--device", "cuda:sm90", "--max-tokens", "1")
    ops = [entry["op"] for entry in doc["plans"]]
    assert ops.index("comm.ep_dispatch") < ops.index("moe.fused_moe") < ops.index("comm.ep_combine")
    assert not {"comm.all_reduce", "comm.all_reduce_add_rms_norm"} & set(ops)
    (dispatch,) = _where(doc, "comm.ep_dispatch").values()
    assert dispatch["explanation"]["query"]["dtype"] == "fp8_e4m3"
    assert dispatch["dims"] == {"hidden": 7168, "num_experts": 256, "top_k": 8, "world_size": 2}
    (experts,) = _where(doc, "moe.fused_moe").values()
    assert experts["dims"]["num_experts"] == 128
    # one token: up to two ranks' rows, the 2-16 bucket (judged at its upper bound)
    assert experts["explanation"]["query"]["shape"]["num_tokens"] == 16
    (combine,) = _where(doc, "comm.ep_combine").values()
    assert combine["dims"] == {"hidden": 7168, "world_size": 2}
    assert all(entry["selected"] for entry in (dispatch, experts, combine))


@pytest.mark.parametrize(
    "argv, words",
    [
        (("--model", "llama-3-8b", "--ep", "2"), "no experts"),
        (("--model", "llama-3-8b", "--tp", "3"), "32 attention heads"),
        (("--model", "mixtral-8x7b", "--ep", "3"), "8 experts"),
        (("--model", "llama-3-8b", "--tp", "0"), ">= 1"),
    ],
)
def test_a_split_the_model_does_not_allow_is_a_usage_error(capsys, argv, words):
    """Catches a plan for a split that cannot exist (experts on a dense model, heads that do not divide)
    printed as if it could: exit 2 and one line naming the reason."""
    code = main(["plan", *argv])
    assert code == 2
    assert words in capsys.readouterr().err
