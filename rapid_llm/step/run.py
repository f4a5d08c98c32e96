"""One `rapid-llm run`: build the model, run it with the rows dispatch selects and with every op on its
torch reference, compare the logits.

Prompts: `batch` prompts of seeded random token ids, ragged: prompt b has
prompt_len - b * prompt_len // (2 * batch) tokens (the first is the longest). Decode: `decode_steps`
steps of one token per sequence; the tokens are the all-reference run's greedy choices, fed to both
runs, so every step's logits of the two runs answer the same input. The all-reference run forces
every op to its `torch/` row (Environment.force), the same weights, a fresh cache.

Tolerance of the logits check (ours vs all-reference): rows of one op may differ by the rounding
of each output element to the activation dtype (the ops' contracts: fp32 math, one rounding) and,
for the reductions (norms, attention, GEMMs), by the order of a length-K fp32 sum (K u_32 relative,
u_32 = 2^-24). A difference made at one op use is carried to the logits with gain about 1: the
weights keep activations at unit scale and every sublayer is normalised. Worst case over the op uses
of the step (uses_per_layer x layers + 3), relative to the largest reference logit:
    tolerance = (2 u + K_max u_32) x op_uses x max|reference logits|
with u the unit roundoff of the activation dtype (fp32 2^-24, bf16 2^-8, fp16 2^-11) and K_max the
longest reduction (the widest GEMM input). An fp8 checkpoint's block GEMMs return bf16, so its u is at
least bf16's. (Its fp8 activations round identically in both runs unless an input already differs; a
one-step e4m3 flip of one element moves a length-K dot product by about 2^-3 / sqrt(K) of its scale,
below the bf16 term.)
"""

from __future__ import annotations

import sys
import time

import attrs
import torch

from ..kernels.dispatcher import Planner, default_table, probe_environment
from ..models import PRESETS, ModelPreset
from .cache import PagedCache
from .model import Batch, Decoder, rope_cache
from .recorder import Recorder
from .shapes import narrowed
from .weights import random_weights

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
UNIT_ROUNDOFF = {"fp32": 2.0**-24, "bf16": 2.0**-8, "fp16": 2.0**-11}


@attrs.frozen(kw_only=True)
class RunConfig:
    model: str = "llama-3-8b"
    layers: int = 2
    batch: int = 2
    prompt_len: int = 16
    decode_steps: int = 4
    dtype: str = "bf16"
    seed: int = 0
    narrow: int = 1
    device: str = "cpu"
    graph: bool = False  # our decode steps after the first: one captured CUDA graph, replayed (CUDA only)

    def preset(self) -> ModelPreset:
        return narrowed(PRESETS[self.model], self.narrow)

    def prompt_lengths(self) -> list[int]:
        return [max(1, self.prompt_len - b * self.prompt_len // (2 * self.batch)) for b in range(self.batch)]


class Progress:
    """A one-line bar on stderr, drawn only on a terminal and only once the run has taken `after` seconds."""

    def __init__(self, total: int, after: float = 2.0, stream=None):
        self.total, self.done, self.after = total, 0, after
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.drawn = False
        self.enabled = hasattr(self.stream, "isatty") and self.stream.isatty()

    def step(self, label: str) -> None:
        self.done += 1
        if not self.enabled or time.perf_counter() - self.start < self.after:
            return
        filled = 30 * self.done // self.total
        self.stream.write(f"\r[{'#' * filled}{' ' * (30 - filled)}] {self.done}/{self.total} {label:<40}")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * 80 + "\r")
            self.stream.flush()


def _synchronize(device: str):
    return torch.cuda.synchronize if device.startswith("cuda") else None


def reference_environment(env, table):
    """env with every op forced to its torch reference row."""
    return attrs.evolve(env, force={op: table.reference(op).name for op in table.ops})


@attrs.define
class Pass:
    """One run of the model: its recorder, the logits of every step, the tokens it fed, seconds per phase."""

    recorder: Recorder
    logits: list
    tokens: list
    seconds: dict


class GraphedDecode:
    """The decode step captured once as a CUDA graph and replayed for every later step (`--graph`).

    Every op of the step is planned graph_safe_only (the paged attention ops through their step plans,
    made by the eager first decode step and refreshed before each replay: StepPlan.update). The captured
    step reads its inputs from fixed tensors: the token ids and positions [B] here, the cache's page table
    and lengths; a replay runs every kernel of the step with no host work but the refresh. Not for MoE
    presets: their routing sizes each expert's GEMM on the host (rapid_llm/step/model.py)."""

    def __init__(self, preset, weights, cache, rope, recorder: Recorder, batch: int, device):
        self.recorder = Recorder(recorder.planner, steps=recorder.steps, frozen=True)
        self.ids = torch.zeros(batch, dtype=torch.long, device=device)
        self.positions = torch.zeros(batch, dtype=torch.long, device=device)
        sequences = torch.arange(batch, device=device)
        step = Batch(ids=self.ids, positions=self.positions, sequences=sequences, last=sequences)
        decoder = Decoder(preset, weights, cache, self.recorder, rope)
        self.cache = cache
        self.graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.graph(self.graph):
            self.logits = decoder.forward(step)

    def step(self, next_ids: torch.Tensor) -> torch.Tensor:
        """One decode step: the tokens in, positions from the lengths, lengths + 1, plans refreshed, replay."""
        self.ids.copy_(next_ids)
        self.positions.copy_(self.cache.seq_lens)
        self.cache.seq_lens += 1
        self.recorder.update_steps()
        self.graph.replay()
        return self.logits.clone()


def run_pass(
    config: RunConfig, preset: ModelPreset, weights, planner, progress, label: str, feed=None, decode_planner=None
) -> Pass:
    """Prefill, then decode_steps steps; feed: the decode tokens to use (else greedy from this pass's logits).
    decode_planner: the planner of the decode steps (default planner); with config.graph the steps after the
    first replay a captured graph (GraphedDecode)."""
    device = config.device
    lengths = config.prompt_lengths()
    generator = torch.Generator().manual_seed(config.seed + 1)
    prompts = [torch.randint(0, preset.vocab, (n,), generator=generator) for n in lengths]
    capacity = max(lengths) + config.decode_steps
    cache = PagedCache(
        preset,
        len(weights["layers"]),
        config.batch,
        capacity,
        dtype=weights["embed"].dtype,
        device=device,
        seed=config.seed,
    )
    recorder = Recorder(planner, _synchronize(device))
    rope = rope_cache(capacity, preset.qk_rope_head_dim or preset.head_dim, preset.rope_theta, device)
    decoder = Decoder(preset, weights, cache, recorder, rope)
    cu = torch.tensor([0, *lengths]).cumsum(0)
    batch = Batch(
        ids=torch.cat(prompts).to(device),
        positions=torch.cat([torch.arange(n) for n in lengths]).to(device),
        sequences=torch.cat([torch.full((n,), b) for b, n in enumerate(lengths)]).to(device),
        last=(cu[1:] - 1).to(device),
        cu_seqlens=cu.to(device, torch.int32),
        max_seqlen=max(lengths),
    )
    logits, tokens, seconds = [], [], {}
    recorder.phase = "prefill"
    start = time.perf_counter()
    logits.append(decoder.forward(batch))
    cache.seq_lens.copy_(torch.tensor(lengths, dtype=torch.int32))
    seconds["prefill"] = time.perf_counter() - start
    progress.step(f"{label}: prefill")
    recorder.phase = "decode"
    recorder.planner = decode_planner or planner
    sequences = torch.arange(config.batch, device=device)
    seconds["decode"] = 0.0
    graphed = None
    for step in range(config.decode_steps):
        next_ids = feed[step] if feed is not None else logits[-1].argmax(-1)
        tokens.append(next_ids)
        if graphed is None and step > 0 and decode_planner is not None and config.graph:
            graphed = GraphedDecode(preset, weights, cache, rope, recorder, config.batch, device)
        start = time.perf_counter()
        if graphed is not None:
            logits.append(graphed.step(next_ids.to(device)))
            torch.cuda.synchronize()
        else:
            positions = cache.seq_lens.long()
            cache.seq_lens += 1
            step_batch = Batch(ids=next_ids.to(device), positions=positions, sequences=sequences, last=sequences)
            logits.append(decoder.forward(step_batch))
        seconds["decode"] += time.perf_counter() - start
        progress.step(f"{label}: decode step {step + 1}/{config.decode_steps}")
    return Pass(recorder, logits, tokens, seconds)


def op_uses_per_step(recorder: Recorder) -> int:
    """Op calls of one prefill step (the chain of roundings the tolerance counts)."""
    return sum(use.calls.get("prefill", 0) for use in recorder.uses.values() if use.kind == "op")


def tolerance(config: RunConfig, preset: ModelPreset, ours: Pass, reference_max: float) -> dict:
    """The logits check's bound (module docstring) and its terms."""
    label = config.dtype
    if preset.weights_fp8_block and UNIT_ROUNDOFF[label] < UNIT_ROUNDOFF["bf16"]:
        label = "bf16"
    widest = max(
        preset.hidden,
        preset.intermediate,
        preset.moe_intermediate,
        preset.num_q_heads * max(preset.head_dim, preset.v_head_dim),
    )
    uses = op_uses_per_step(ours.recorder)
    per_use = 2 * UNIT_ROUNDOFF[label] + widest * UNIT_ROUNDOFF["fp32"]
    return {
        "value": per_use * uses * max(reference_max, 1.0),
        "unit_roundoff": UNIT_ROUNDOFF[label],
        "longest_reduction": widest,
        "op_uses": uses,
        "rule": "(2 u + K_max 2^-24) x op_uses x max(1, max|reference logits|)",
    }


def run(config: RunConfig) -> dict:
    """Build, run both ways, compare. Returns the parts the report prints (report.py)."""
    preset = config.preset()
    torch.manual_seed(config.seed)
    progress = Progress(total=2 * (1 + config.decode_steps) + 1)
    start = time.perf_counter()
    weights = random_weights(preset, config.layers, seed=config.seed, dtype=DTYPES[config.dtype], device=config.device)
    build_seconds = time.perf_counter() - start
    progress.step("weights")
    table = default_table()
    env = probe_environment()
    ref_planner = Planner(reference_environment(env, table), table)
    reference = run_pass(config, preset, weights, ref_planner, progress, "all-reference")
    decode_planner = Planner(env, table, graph_safe_only=True) if config.graph else None
    ours = run_pass(
        config,
        preset,
        weights,
        Planner(env, table),
        progress,
        "ours",
        feed=reference.tokens,
        decode_planner=decode_planner,
    )
    progress.close()
    final_ours, final_ref = ours.logits[-1], reference.logits[-1]
    reference_max = final_ref.abs().max().item()
    bound = tolerance(config, preset, ours, reference_max)
    diff = (final_ours - final_ref).abs().max().item()
    step_diffs = [(a - b).abs().max().item() for a, b in zip(ours.logits, reference.logits)]
    return {
        "config": config,
        "preset": preset,
        "env": env,
        "table": table,
        "build_seconds": build_seconds,
        "ours": ours,
        "reference": reference,
        "check": {
            "max_abs_diff": diff,
            "max_abs_diff_per_step": step_diffs,
            "max_abs_reference_logit": reference_max,
            "tolerance": bound,
            "ok": diff <= bound["value"] and bool(torch.isfinite(final_ours).all()),
            "same_greedy_tokens": bool((final_ours.argmax(-1) == final_ref.argmax(-1)).all()),
        },
        "final_logits": final_ours,
        "weights": weights,
    }
