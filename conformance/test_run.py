"""`rapid-llm run`: a preset's model with random weights, prefilled and decoded through the planned ops.

Each preset runs with a few layers (DeepSeek-V3: four, so that one is MoE) and its widths divided by 16
(`--narrow 16`: full-width weights take minutes to draw on a 2-core CPU; `run` without it uses the
preset's shapes), in fp32 so that the native Triton rows serve under the interpreter (their tl.dot
rows serve fp32, not bf16, there).

Catches: a preset the step cannot build or run (MoE and MLA included), our rows' logits leaving the
all-reference run's tolerance, an op use whose serving row is not reported, a JSON document missing a
documented key, and a bad argument that runs anyway or ends in a traceback instead of one line and
exit status 2.
"""

from __future__ import annotations

import json

import pytest

from rapid_llm.cli import EXIT_USAGE, main
from rapid_llm.models import PRESETS
from rapid_llm.step.report import SCHEMA_VERSION

LAYERS = {"deepseek-v3": "4"}
TOP_KEYS = {
    "schema",
    "model",
    "config",
    "device",
    "prompt_lengths",
    "parameters",
    "build_seconds",
    "throughput",
    "uses",
    "fallbacks",
    "check",
}
USE_KEYS = {
    "kind",
    "name",
    "where",
    "rows",
    "reference_row",
    "calls",
    "ours_ms",
    "ours_percent",
    "reference_ms",
    "reference_percent",
}


def run_json(capsys, *argv):
    code = main(["run", "--json", *argv])
    return code, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("model", sorted(PRESETS))
def test_every_preset_runs_and_matches_the_all_reference_run(capsys, model):
    """Fails when a preset cannot be built or run, when our rows' final logits leave the tolerance of the
    all-reference run, when an op use has no serving row, or when the JSON misses a documented key."""
    code, doc = run_json(
        capsys, "--model", model, "--layers", LAYERS.get(model, "2"), "--narrow", "16", "--dtype", "fp32"
    )
    assert code == 0, doc["check"]
    assert doc["schema"] == SCHEMA_VERSION and set(doc) == TOP_KEYS
    check = doc["check"]
    assert check["ok"] and check["max_abs_diff"] <= check["tolerance"]["value"]
    assert len(check["max_abs_diff_per_step"]) == 1 + doc["config"]["decode_steps"]
    ops = [use for use in doc["uses"] if use["kind"] == "op"]
    assert ops and all(set(use) == USE_KEYS for use in doc["uses"])
    for use in ops:
        assert use["rows"] and use["reference_row"].startswith("torch/"), use
        assert use["calls"] > 0
    preset_ops = {use.op for use in PRESETS[model].op_uses()}
    ran = {use["name"] for use in ops}
    assert ran <= preset_ops, f"ops the preset does not list: {ran - preset_ops}"
    assert "rapid_llm check + plan lookup" in {u["name"] for u in doc["uses"] if u["kind"] == "torch"}
    assert "gemm.mm" in ran  # every preset's bf16 projections (lm_head at least) go through the op
    for fallback in doc["fallbacks"]:
        assert fallback["row"].startswith("torch/") and fallback["reason"]
    rates = doc["throughput"]["ours"]
    assert rates["prefill_tokens_per_s"] > 0 and rates["decode_tokens_per_s"] > 0


def test_the_text_report_names_the_row_of_every_op_use_and_the_check(capsys):
    """Fails when the default text omits an op use's serving row, the unserved work, or the logits check."""
    assert main(["run", "--narrow", "16", "--decode-steps", "2"]) == 0
    out = capsys.readouterr().out
    table = out.split("time per op use")[1].split("not served by rapid_llm")[0]
    op_lines = [line for line in table.splitlines() if line.strip() and "." in line.split()[0]]
    assert op_lines
    for line in op_lines:
        assert any(word.startswith(("torch/", "native/", "flashinfer/", "aot/", "jit/")) for word in line.split())
    assert "gemm.mm" in out and "lm_head" in out
    assert "final logits, ours vs all-reference" in out and "-> ok" in out


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--graph", "--model", "qwen3-30b-a3b"], "--graph"),
        (["--model", "llama-9"], "--model 'llama-9'"),
        (["--layers", "0"], "--layers 0"),
        (["--batch", "0"], "--batch 0"),
        (["--dtype", "fp8"], "--dtype"),
        (["--narrow", "0"], "--narrow 0"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(capsys, argv, needle):
    """Fails when a bad `run` argument (--graph without CUDA or for an MoE preset, an unknown preset, a count
    below 1) starts the run or prints a traceback instead of one `rapid-llm: ...` line with exit status 2."""
    assert main(["run", *argv]) == EXIT_USAGE
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rapid-llm: ") and needle in lines[0], captured.err
    assert captured.out == ""


def test_graph_decode_replays_what_eager_decode_gives():
    """Catches a captured decode step (GraphedDecode, `run --graph`) whose replays read stale inputs (token ids,
    positions, lengths, step plans not refreshed) or skip a write: every step's logits of the graph run equal
    the eager run's, bitwise, on the same tokens."""
    import attrs
    import torch

    from rapid_llm.step.run import RunConfig, run

    if not torch.cuda.is_available():
        pytest.skip("CUDA graphs need a CUDA device")
    config = RunConfig(layers=2, batch=3, prompt_len=12, decode_steps=5, device="cuda")
    eager, graphed = run(config), run(attrs.evolve(config, graph=True))
    for step, (a, b) in enumerate(zip(eager["ours"].logits, graphed["ours"].logits)):
        assert torch.equal(a, b), f"step {step}: max |diff| {(a - b).abs().max().item()}"
