"""The host (CPU) cost of one call of each public op on the GPU machine, against the peers' own calls.

    python -m perf.host_cost --json OUT.json [--calls 200] [--rounds 25]

What an eager engine pays on the host per op call: time.perf_counter() over `--calls` back-to-back calls
without synchronisation (after warm-up; the device is synchronised between batches, outside the clock, so
the launch queue never fills and the number stays the host's, not the GPU's), per arm:

    public     rapid_llm.kernels.<op>(...)             the check, the plan lookup, the kernel's host path
                                                       (a host replay of them, with rapid_llm._host built)
    impl       PlannedOp.impl(...) of the same plan    the kernel entry alone (what a step plan's layers call;
                                                       a host replay of it, with rapid_llm._host built)
    python     PlannedOp.kernel(...)                   the kernel entry's Python, never replayed
    peer       the peer library's own call, driven as an engine drives it: FlashInfer's rmsnorm /
               fused_add_rmsnorm / silu_and_mul / rope; its decode wrapper's run() after one plan(); FlashMLA
               with its schedule computed once; FA3's varlen forward. Absent when the library does not import.
    torch.add  the host's yardstick (one tiny ATen op)

Before timing, each case checks that the public op and the impl (replayed) return exactly what the
Python entry returns on the same inputs (`replay_equal`), and records each replayer's verdict for the
case's arguments ("replay", or why its calls run Python). Arms are interleaved round by round (each round times every arm once, in turn), and the median over the
rounds is reported. Cases (bf16, batch 1, one decode token): perf/host_path.py CASES (rms_norm 1x4096,
fused_add_rms_norm, silu_and_mul, rotary, update_kv_buffer, decode B=1 L=1024 GQA 32/8 D=128 page 16,
mla_decode B=1 L=32768 Hq=16 latent 576 page 64) plus prefill 1x128 (32/8 heads, D=128).
Prints a table and writes JSON (device, versions, command, numbers).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import statistics
import sys
import time

from perf.host_path import CASES, GPU_CASES, case_args, public_arguments


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _flashinfer():
    # FlashInfer 0.6.0's JIT reads tvm_ffi.libinfo without importing it (see perf/peers.py)
    import tvm_ffi.libinfo  # noqa: F401
    import flashinfer

    return flashinfer


def _peer(name: str, args):
    """(label, callable running the peer's own call once) for case `name`, or (None, reason) when absent."""
    try:
        if name == "rms_norm":
            flashinfer = _flashinfer()
            x, weight, eps = args
            return "flashinfer.norm.rmsnorm", lambda: flashinfer.norm.rmsnorm(x, weight, eps)
        if name == "fused_add_rms_norm":
            flashinfer = _flashinfer()
            x, residual, weight, eps = args
            return "flashinfer.norm.fused_add_rmsnorm", lambda: flashinfer.norm.fused_add_rmsnorm(
                x, residual, weight, eps
            )
        if name == "silu_and_mul":
            flashinfer = _flashinfer()
            (x,) = args
            return "flashinfer.activation.silu_and_mul", lambda: flashinfer.activation.silu_and_mul(x)
        if name == "rotary":
            flashinfer = _flashinfer()
            positions, q, k, head_dim, cache, is_neox = args
            rope = flashinfer.rope.apply_rope_with_cos_sin_cache_inplace
            return "flashinfer.rope.apply_rope_with_cos_sin_cache_inplace", lambda: rope(
                positions, q, k, head_dim, cache, is_neox
            )
        if name == "decode":
            from rapid_llm.kernels.backends.flashinfer import attention

            run = attention.plan_decode(*args[:6])  # plan() once, as an engine does per step
            q, buffer = args[0], args[1]
            return "flashinfer decode wrapper run() (planned once)", lambda: run(q, buffer)
        if name == "mla_decode":
            from rapid_llm.kernels.backends.flash_mla import attention

            run = attention.plan_mla_decode(*args)  # the split schedule once, as an engine does per step
            q, cache = args[0], args[1]
            return "flash_mla (schedule once)", lambda: run(q, cache)
        if name == "prefill":
            try:
                from fa3_fwd_interface import flash_attn_varlen_func
            except ImportError:
                from flash_attn_interface import flash_attn_varlen_func
            q, k, v, cu_seqlens, max_seqlen, sm_scale = args
            return "fa3 flash_attn_varlen_func", lambda: flash_attn_varlen_func(
                q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, softmax_scale=sm_scale, causal=True
            )
    except Exception as error:  # a missing or broken library: the arm is absent, its reason recorded
        return None, f"{type(error).__name__}: {str(error)[:200]}"
    return None, "no peer for this op"


def _per_call_s(torch, call, calls: int) -> float:
    torch.cuda.synchronize()  # an empty queue: the batch below measures the host, not a full queue
    started = time.perf_counter()
    for _ in range(calls):
        call()
    elapsed = time.perf_counter() - started
    torch.cuda.synchronize()
    return elapsed / calls


def _arms(torch, kernels, name: str) -> tuple[dict, dict]:
    """({arm: callable}, facts) for case `name`."""
    from rapid_llm.kernels.dispatcher import default_planner

    op, function, _ = {**CASES, **GPU_CASES}[name]
    public, args = getattr(kernels, function), case_args(name, torch, "cuda")
    planner = default_planner()
    planned = planner.plan_for(op, *args)
    arms = {
        "public": lambda: public(*args),
        "impl": lambda: planned.impl(*args),
        "python": lambda: planned.kernel(*args),
    }
    facts = {"op": op, "row": planned.row.name, **_replay_facts(torch, planner, planned, public, op, args)}
    label, peer = _peer(name, args)
    if label is None:
        facts["peer_absent"] = peer
    else:
        arms["peer"] = peer
        facts["peer"] = label
    yardstick = torch.ones(4, device="cuda")
    arms["torch.add"] = lambda: torch.add(yardstick, yardstick)
    return arms, facts


def _replay_facts(torch, planner, planned, public, op: str, args: tuple) -> dict:
    """Whether the replayed calls return what the Python entry returns, and each replayer's verdict."""
    from rapid_llm.kernels.ops import host_replay

    ok, reason = host_replay.available()
    if not ok:
        return {"replay": reason}
    for _ in range(3):  # the first calls plan and record; later ones replay
        public(*args), planned.impl(*args)
    equal = True
    for call in (public, planned.impl):  # in-place ops: every arm starts from the same inputs
        inputs = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        expected_inputs = tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)
        got, expected = call(*inputs), planned.kernel(*expected_inputs)
        equal = equal and _same(torch, got, expected) and _same(torch, inputs, expected_inputs)
    verdicts = {}
    for arm, replayer, key in (
        ("public", planner.replayers.get(op), public_arguments(public, args)),
        ("impl", planned.impl, args),
    ):
        verdicts[arm] = replayer.lookup(key) if hasattr(replayer, "lookup") else "no replayer"
    return {"replay_equal": equal, "replay": verdicts}


def _same(torch, a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(_same(torch, x, y) for x, y in zip(a, b))
    return a == b


def measure(names, calls: int, rounds: int, warmup: int) -> dict:
    import torch

    import rapid_llm.kernels as kernels

    results = {}
    for name in names:
        arms, facts = _arms(torch, kernels, name)
        for call in arms.values():  # warm-up: compiles, plans, fills every launch cache
            for _ in range(warmup):
                call()
        torch.cuda.synchronize()
        samples = {arm: [] for arm in arms}
        for _ in range(rounds):
            for arm, call in arms.items():  # interleaved: each round times every arm once
                samples[arm].append(_per_call_s(torch, call, calls))
        facts["us_per_call"] = {arm: statistics.median(values) * 1e6 for arm, values in samples.items()}
        facts["us_per_call_min"] = {arm: min(values) * 1e6 for arm, values in samples.items()}
        results[name] = facts
        print(_row(name, facts), flush=True)
    return results


def _row(name: str, facts: dict) -> str:
    us = facts["us_per_call"]
    peer = f"{us['peer']:7.1f}" if "peer" in us else "      -"
    ratio = f"{us['public'] / us['peer']:5.2f}x" if "peer" in us else "     -"
    return (
        f"{name:20s} {us['public']:7.1f} {us['impl']:7.1f} {us['python']:7.1f} {peer} {ratio} {us['torch.add']:7.1f}   "
        f"{facts['row']}  | {facts.get('peer') or facts.get('peer_absent')} | replay {facts.get('replay')} "
        f"equal={facts.get('replay_equal')}"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", required=True, help="write the results here")
    parser.add_argument("--calls", type=int, default=200, help="calls per timed batch (default 200)")
    parser.add_argument("--rounds", type=int, default=25, help="interleaved rounds (default 25)")
    parser.add_argument("--warmup", type=int, default=50, help="warm-up calls per arm (default 50)")
    parser.add_argument("--cases", default=",".join([*CASES, *GPU_CASES]), help="comma-separated case names")
    args = parser.parse_args(argv)

    import torch
    import triton

    if not torch.cuda.is_available():
        print("perf.host_cost needs a CUDA device", file=sys.stderr)
        return 2
    names = [name.strip() for name in args.cases.split(",") if name.strip()]
    print(f"host µs per call (median of {args.rounds} interleaved rounds x {args.calls} calls, no sync)")
    print(
        f"{'case':20s} {'public':>7s} {'impl':>7s} {'python':>7s} {'peer':>7s} {'pub/peer':>6s} {'add':>7s}   row | peer"
    )
    results = measure(names, args.calls, args.rounds, args.warmup)
    document = {
        "what": "host CPU time per op call, time.perf_counter over back-to-back calls without sync (perf/host_cost.py)",
        "command": " ".join([sys.executable, "-m", "perf.host_cost", *(argv if argv is not None else sys.argv[1:])]),
        "device": torch.cuda.get_device_name(),
        "host": {"machine": platform.machine(), "processor": platform.processor(), "python": platform.python_version()},
        "versions": {
            "torch": torch.__version__,
            "triton": triton.__version__,
            "flashinfer": _version("flashinfer-python"),
            "flash_mla": _version("sgl-flash-mla") or _version("flash_mla"),
            "fa3": _version("fa3-fwd"),
        },
        "calls": args.calls,
        "rounds": args.rounds,
        "cases": results,
    }
    with open(args.json, "w", encoding="utf-8") as out:
        json.dump(document, out, indent=2)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
