"""Launch-config sweeps of native rotary, fp8 quantization, KV writes and gated activations on a GPU,
FlashInfer side by side (the evidence for those kernels' launch_config()).

    python -m perf.sweeps.launch_configs_rotary_fp8_kv_gated --out DIR [--skip SECTION ...]

(formerly ci/gpu_sweep_rotary_fp8.py; committed results: perf/results/h200/sweep_rotary_fp8_2026-11-29.json
for every section, and sweep_fp8_multiply, sweep_fp8_kv, sweep_kv_write, sweep_gated_2026-11-29.json
for runs of some sections with --skip, each recording its command.)

One process, so every figure is a ratio against the same run's copy
bandwidth (perf/gpu_timing.py: CUDA events, 512 MiB L2 flush before each
call, median; decode sizes also by CUDA-graph replay):

  rotary       BLOCK_HEADS x num_warps for NeoX 32/8 and 28/4 heads x 128 at
               64 / 4096 / 32768 tokens, the heuristic's pick marked
  fp8          bitwise parity of native per_token_fp8 / per_token_group_fp8 /
               update_kv_buffer_fp8 against the torch reference, then times
               (group kernel: BLOCK_GROUPS x num_warps)
  flashinfer   rmsnorm, fused_add_rmsnorm, silu_and_mul, gelu_tanh_and_mul,
               rope (cos/sin cache and pos_ids) against our native rows, with
               the JIT compile time of each module (skipped if not importable)
  mid-size     rms_norm at 512 / 4096 tokens vs a copy of the same bytes
  kv_write     bf16 and e4m3 KV writes: tokens per program x block x warps
  gated        silu_and_mul: block x warps at the presets' sizes, FlashInfer in the same run
  extension    explain() of elementwise.scale here (aot/scale when rapid_llm._C is built)

Writes DIR/sweep_rotary_fp8.json and prints a table last.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
import traceback

if not __package__:  # run as a file (python perf/sweeps/...py): the repository root on sys.path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch
import triton

from perf import gpu_timing

RESULTS: dict = {"sections": {}}
FLUSH = None


def timed(fn, *, graph=False) -> dict:
    event = gpu_timing.event_timer(fn, flush=FLUSH, iterations=40)
    out = {"event_us": round(event.median_us, 2)}
    if graph:
        out["graph_us"] = round(gpu_timing.graph_timer(fn).median_us, 3)
    return out


def timed_with_config(module, config: dict, call, *, graph=False) -> dict:
    """timed(call) with module.launch_config answering `config` (the kernels read it at each call)."""
    original = module.launch_config
    module.launch_config = lambda *_: config
    try:
        return timed(call, graph=graph)
    finally:
        module.launch_config = original


def bandwidth(entry: dict, nbytes: int, copy_gbps: float) -> dict:
    gbps = nbytes / (entry["event_us"] * 1e-6) / 1e9
    entry.update(bytes=nbytes, TBps=round(gbps / 1e3, 3), pct_copy=round(100 * gbps / copy_gbps, 1))
    return entry


def section(name):
    def wrap(fn):
        def run(*args):
            started = time.time()
            try:
                RESULTS["sections"][name] = fn(*args)
            except Exception:  # keep the other sections' evidence
                RESULTS["sections"][name] = {"error": traceback.format_exc()}
            print(f"[{name}] {time.time() - started:.1f} s", flush=True)

        return run

    return wrap


def _rope_inputs(tokens, q_heads, k_heads, head_dim=128, max_position=8192):
    g = torch.Generator(device="cuda").manual_seed(tokens)
    q = torch.randn((tokens, q_heads * head_dim), device="cuda", generator=g).bfloat16()
    k = torch.randn((tokens, k_heads * head_dim), device="cuda", generator=g).bfloat16()
    inverse = 1.0 / 10000 ** (torch.arange(0, head_dim, 2, device="cuda", dtype=torch.float32) / head_dim)
    angles = torch.arange(max_position, device="cuda", dtype=torch.float32)[:, None] * inverse[None, :]
    cache = torch.cat((angles.cos(), angles.sin()), dim=-1)
    positions = torch.randint(0, max_position, (tokens,), device="cuda", generator=g)
    return positions, q, k, cache


@section("rotary")
def sweep_rotary(copy_gbps):
    from rapid_llm.kernels.ops.embedding import rotary as module

    rows = []
    for q_heads, k_heads in ((32, 8), (28, 4)):
        for tokens in (64, 4096, 32768):
            positions, q, k, cache = _rope_inputs(tokens, q_heads, k_heads)
            nbytes = 2 * (q.numel() + k.numel()) * 2 + tokens * (128 * 4 + 8)
            picked = module.launch_config(q_heads, k_heads, 128)
            for block_heads in (1, 2, 4, 8, 16, 32):
                for warps in (1, 2, 4, 8):
                    config = {"BLOCK_HEADS": block_heads, "BLOCK_HALF": 64, "num_warps": warps}
                    fn = lambda: module.launch(positions, q, k, 128, cache, True, q_heads, k_heads, 128, config)  # noqa: E731
                    entry = bandwidth(timed(fn, graph=tokens <= 64), nbytes, copy_gbps)
                    entry.update(
                        q_heads=q_heads,
                        k_heads=k_heads,
                        tokens=tokens,
                        block_heads=block_heads,
                        num_warps=warps,
                        heuristic=(config == picked),
                    )
                    rows.append(entry)
    return rows


@section("fp8")
def check_fp8(copy_gbps):
    from rapid_llm.kernels.ops.kvcache import reference as kv_ref
    from rapid_llm.kernels.ops.kvcache import update_kv_buffer_fp8 as kv_native
    from rapid_llm.kernels.ops.quantization import fp8_quant
    from rapid_llm.kernels.ops.quantization import reference as q_ref

    out = {"parity": [], "timing": [], "group_sweep": []}
    g = torch.Generator(device="cuda").manual_seed(0)
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for tokens, hidden, group, column_major in (
            (1, 4096, None, False),
            (33, 7168, 128, True),
            (17, 5120, None, False),
            (3, 20000, None, False),
            (64, 4096, 128, False),
            (9, 96, 32, True),
        ):
            x = (torch.randn((tokens, hidden), device="cuda", generator=g) * 7).to(dtype)
            x[:, ::97] = 3e3
            if group is None:
                got, want = fp8_quant.per_token_fp8(x), q_ref.per_token_fp8(x)
            else:
                got = fp8_quant.per_token_group_fp8(x, group, column_major)
                want = q_ref.per_token_group_fp8(x, group, column_major)
            out["parity"].append(
                {
                    "op": "per_token_fp8" if group is None else "per_token_group_fp8",
                    "dtype": str(dtype),
                    "shape": [tokens, hidden],
                    "group": group,
                    "column_major": column_major,
                    "q_bitwise_equal": torch.equal(got[0].view(torch.uint8), want[0].view(torch.uint8)),
                    "scale_equal": torch.equal(got[1], want[1]),
                    "scale_strides_equal": got[1].stride() == want[1].stride(),
                }
            )
        kv = (torch.randn((37, 16, 128), device="cuda", generator=g) * 3).to(dtype)
        loc = torch.randperm(300, device="cuda", generator=g)[:37].to(torch.int32)
        buffer = torch.zeros((300, 16, 128), device="cuda").to(torch.float8_e4m3fn)
        scales = torch.tensor([0.02], device="cuda"), torch.tensor([0.05], device="cuda")
        a = kv_native.update_kv_buffer_fp8(kv, loc, buffer.clone(), *scales)
        b = kv_ref.update_kv_buffer_fp8(kv, loc, buffer.clone(), *scales)
        out["parity"].append(
            {
                "op": "update_kv_buffer_fp8",
                "dtype": str(dtype),
                "bitwise_equal": torch.equal(a.view(torch.uint8), b.view(torch.uint8)),
            }
        )

    for tokens in (1, 64, 4096, 32768):
        for hidden in (4096, 7168):
            x = torch.randn((tokens, hidden), device="cuda", generator=g).bfloat16()
            nbytes = x.numel() * 3 + tokens * (hidden // 128) * 4
            for name, fn in (
                ("native/per_token_group_fp8", lambda: fp8_quant.per_token_group_fp8(x, 128, True)),
                ("torch/per_token_group_fp8", lambda: q_ref.per_token_group_fp8(x, 128, True)),
                ("native/per_token_fp8", lambda: fp8_quant.per_token_fp8(x)),
                ("torch/per_token_fp8", lambda: q_ref.per_token_fp8(x)),
            ):
                entry = bandwidth(timed(fn, graph=tokens <= 64), nbytes, copy_gbps)
                entry.update(row=name, tokens=tokens, hidden=hidden)
                out["timing"].append(entry)
            if tokens in (64, 4096, 32768):
                scale = torch.empty((tokens, hidden // 128), device="cuda")
                token_scale = torch.empty((tokens, 1), device="cuda")
                variants = [
                    ("group128", 128, scale, {"BLOCK_GROUPS": bg, "BLOCK": 128, "SINGLE_PASS": True, "num_warps": w})
                    for bg in (2, 4, 8, 16, 32)
                    for w in (1, 2, 4, 8)
                ]
                variants += [
                    (
                        "per_token",
                        hidden,
                        token_scale,
                        {
                            "BLOCK_GROUPS": 1,
                            "BLOCK": triton.next_power_of_2(hidden),
                            "SINGLE_PASS": True,
                            "num_warps": w,
                        },
                    )
                    for w in (2, 4, 8, 16)
                ]
                variants += [
                    ("group128", 128, scale, {"BLOCK_GROUPS": bg, "BLOCK": 128, "SINGLE_PASS": True, "num_warps": w})
                    for bg, w in ((8, 2), (16, 2), (16, 4))
                ]
                for kind, group, out_scale, config in variants:
                    entry = bandwidth(
                        timed_with_config(
                            fp8_quant,
                            config,
                            lambda: fp8_quant.quantize_groups(x, group, out_scale, "native/per_token_group_fp8"),
                            graph=tokens <= 64,
                        ),
                        nbytes,
                        copy_gbps,
                    )
                    entry.update(
                        kind=kind,
                        tokens=tokens,
                        hidden=hidden,
                        block_groups=config["BLOCK_GROUPS"],
                        num_warps=config["num_warps"],
                        heuristic=(config == fp8_quant.launch_config(group, tokens * hidden // group, 132)),
                    )
                    out["group_sweep"].append(entry)
    for tokens in (1, 64, 32768):
        kv = torch.randn((tokens, 16, 128), device="cuda", generator=g).bfloat16()
        rows = max(4 * tokens, 65536)
        loc = torch.randperm(rows, device="cuda", generator=g)[:tokens].to(torch.int32)
        buffer = torch.zeros((rows, 16, 128), device="cuda").to(torch.float8_e4m3fn)
        scales = torch.tensor([0.02], device="cuda"), torch.tensor([0.05], device="cuda")
        nbytes = kv.numel() * 3 + tokens * 4
        entry = bandwidth(
            timed(lambda: kv_native.update_kv_buffer_fp8(kv, loc, buffer, *scales), graph=tokens <= 64),
            nbytes,
            copy_gbps,
        )
        entry.update(row="native/update_kv_buffer_fp8", tokens=tokens)
        out["timing"].append(entry)
        # The e4m3 KV write's launch knobs are swept in the kv_write section.
    # Wide rows (two-pass per-token path): warps.
    x = torch.randn((8192, 32768), device="cuda", generator=g).bfloat16()
    token_scale = torch.empty((8192, 1), device="cuda")
    for warps in (4, 8, 16):
        config = {"BLOCK_GROUPS": 1, "BLOCK": 4096, "SINGLE_PASS": False, "num_warps": warps}
        entry = bandwidth(
            timed_with_config(
                fp8_quant, config, lambda: fp8_quant.quantize_groups(x, 32768, token_scale, "native/per_token_fp8")
            ),
            x.numel() * 3,
            copy_gbps,
        )
        entry.update(
            kind="per_token_two_pass",
            tokens=8192,
            hidden=32768,
            block_groups=1,
            num_warps=warps,
            heuristic=(config == fp8_quant.launch_config(32768, 8192, 132)),
        )
        out["group_sweep"].append(entry)
    return out


@section("kv_write")
def sweep_kv_write(copy_gbps):
    """bf16 and e4m3 KV writes: BLOCK_TOKENS x BLOCK x num_warps at 4 and 8 KV heads of 128."""
    from rapid_llm.kernels.ops.kvcache import update_kv_buffer as bf16_module
    from rapid_llm.kernels.ops.kvcache import update_kv_buffer_fp8 as fp8_module

    rows_out = []
    g = torch.Generator(device="cuda").manual_seed(5)
    for kv_heads in (4, 8):
        width = 2 * kv_heads * 128
        for tokens in (64, 32768):
            kv = torch.randn((tokens, 2 * kv_heads, 128), device="cuda", generator=g).bfloat16()
            rows = max(4 * tokens, 65536)
            loc = torch.randperm(rows, device="cuda", generator=g)[:tokens].to(torch.int32)
            buffers = {
                "bf16": torch.zeros((rows, 2 * kv_heads, 128), device="cuda").bfloat16(),
                "fp8": torch.zeros((rows, 2 * kv_heads, 128), device="cuda").to(torch.float8_e4m3fn),
            }
            scales = torch.tensor([0.02], device="cuda"), torch.tensor([0.05], device="cuda")
            for kind, module in (("bf16", bf16_module), ("fp8", fp8_module)):
                buffer = buffers[kind]
                nbytes = kv.numel() * (4 if kind == "bf16" else 3) + tokens * 4
                call = (
                    (lambda: module.update_kv_buffer(kv, loc, buffer))
                    if kind == "bf16"
                    else (lambda: module.update_kv_buffer_fp8(kv, loc, buffer, *scales))
                )
                picked = module.launch_config(width)
                for block_tokens in (1, 2, 4):
                    for block in (1024, 2048):
                        if block > width:
                            continue
                        for warps in (2, 4, 8):
                            config = {"BLOCK_TOKENS": block_tokens, "BLOCK": block, "num_warps": warps}
                            entry = bandwidth(
                                timed_with_config(module, config, call, graph=tokens <= 64), nbytes, copy_gbps
                            )
                            entry.update(
                                kind=kind,
                                kv_heads=kv_heads,
                                tokens=tokens,
                                block_tokens=block_tokens,
                                block=block,
                                num_warps=warps,
                                heuristic=(config == picked),
                            )
                            rows_out.append(entry)
    return rows_out


@section("gated")
def sweep_gated(copy_gbps):
    """silu_and_mul: BLOCK x num_warps at the presets' intermediate sizes, FlashInfer in the same run."""
    from rapid_llm.kernels.ops.activation import gated

    try:
        import flashinfer
    except ImportError:
        flashinfer = None
    rows_out = []
    g = torch.Generator(device="cuda").manual_seed(7)
    for d, tokens in ((18944, 16384), (14336, 16384), (14336, 32768), (768, 16384), (768, 32768)):
        x = torch.randn((tokens, 2 * d), device="cuda", generator=g).bfloat16()
        out = torch.empty((tokens, d), device="cuda", dtype=torch.bfloat16)
        nbytes = x.numel() * 2 + out.numel() * 2
        picked = gated.launch_config(d)
        for block, warps, flat in [(b, w, f) for b in (1024, 2048, 4096) for w in (2, 4, 8) for f in (False, True)]:
            config = {"BLOCK": block, "num_warps": warps, "FLAT": flat}
            entry = bandwidth(
                timed_with_config(gated, config, lambda: gated.gated_activation("silu", x, out)), nbytes, copy_gbps
            )
            entry.update(
                arm="native", d=d, tokens=tokens, block=block, num_warps=warps, flat=flat, heuristic=(config == picked)
            )
            rows_out.append(entry)
        if flashinfer is not None:
            flashinfer.activation.silu_and_mul(x, out)
            entry = bandwidth(timed(lambda: flashinfer.activation.silu_and_mul(x, out)), nbytes, copy_gbps)
            entry.update(arm="flashinfer", d=d, tokens=tokens, block=None, num_warps=None, heuristic=False)
            rows_out.append(entry)
    return rows_out


@section("extension")
def extension_explain(copy_gbps):
    """explain() for elementwise.scale on this machine (the aot/scale row when rapid_llm._C is built)."""
    from rapid_llm.kernels.dispatcher import dispatch_for

    out = {}
    for elements in (4096, 134217728):
        x = torch.empty(elements, device="cuda", dtype=torch.bfloat16)
        selection = dispatch_for("elementwise.scale", x, layout=frozenset({"x:contiguous"}), num_elements=elements)
        out[str(elements)] = selection.explanation.render_text()
    return out


@section("flashinfer")
def flashinfer_side_by_side(copy_gbps):
    import flashinfer

    from rapid_llm.kernels.ops.activation import gated as gated_native
    from rapid_llm.kernels.ops.embedding import rotary as rotary_native
    from rapid_llm.kernels.ops.norm import fused_add_rms_norm as fused_native
    from rapid_llm.kernels.ops.norm import rms_norm as rms_native

    out = {"version": flashinfer.__version__, "compile_s": {}, "rows": []}
    g = torch.Generator(device="cuda").manual_seed(1)

    def first_call(name, fn):
        started = time.time()
        fn()
        torch.cuda.synchronize()
        out["compile_s"][name] = round(time.time() - started, 1)

    x = torch.randn((64, 4096), device="cuda", generator=g).bfloat16()
    w = torch.randn(4096, device="cuda", generator=g).bfloat16()
    first_call("norm", lambda: flashinfer.norm.fused_add_rmsnorm(x.clone(), x.clone(), w, 1e-6))
    first_call("norm.rmsnorm", lambda: flashinfer.norm.rmsnorm(x, w, 1e-6))
    first_call("silu_and_mul", lambda: flashinfer.activation.silu_and_mul(x))
    first_call("gelu_tanh_and_mul", lambda: flashinfer.activation.gelu_tanh_and_mul(x))
    positions, q, k, cache = _rope_inputs(64, 32, 8)
    first_call("rope", lambda: flashinfer.rope.apply_rope_with_cos_sin_cache_inplace(positions, q, k, 128, cache, True))
    first_call(
        "rope.pos_ids",
        lambda: flashinfer.rope.apply_rope_pos_ids_inplace(q.view(64, 32, 128), k.view(64, 8, 128), positions.int()),
    )

    for tokens in (1, 16, 64, 4096, 32768):
        graph = tokens <= 64
        x = torch.randn((tokens, 4096), device="cuda", generator=g).bfloat16()
        r = torch.randn((tokens, 4096), device="cuda", generator=g).bfloat16()
        arms = {
            "rms_norm": (
                x.numel() * 4,
                {
                    "native": lambda: rms_native.rms_norm(x, w, 1e-6),
                    "flashinfer": lambda: flashinfer.norm.rmsnorm(x, w, 1e-6),
                },
            ),
            "fused_add_rms_norm": (
                x.numel() * 8,
                {
                    "native": lambda: fused_native.fused_add_rms_norm(x, r, w, 1e-6),
                    "flashinfer": lambda: flashinfer.norm.fused_add_rmsnorm(x, r, w, 1e-6),
                },
            ),
        }
        gate = torch.randn((tokens, 2 * 14336), device="cuda", generator=g).bfloat16()
        act_out = torch.empty((tokens, 14336), device="cuda", dtype=torch.bfloat16)
        arms["silu_and_mul"] = (
            gate.numel() * 3,
            {
                "native": lambda: gated_native.silu_and_mul(gate, act_out),
                "flashinfer": lambda: flashinfer.activation.silu_and_mul(gate, act_out),
            },
        )
        arms["gelu_tanh_and_mul"] = (
            gate.numel() * 3,
            {
                "native": lambda: gated_native.gelu_tanh_and_mul(gate, act_out),
                "flashinfer": lambda: flashinfer.activation.gelu_tanh_and_mul(gate, act_out),
            },
        )
        positions, q, k, cache = _rope_inputs(tokens, 32, 8)
        q3, k3, pos32 = q.view(tokens, 32, 128), k.view(tokens, 8, 128), positions.int()
        arms["rotary"] = (
            2 * (q.numel() + k.numel()) * 2 + tokens * (128 * 4 + 8),
            {
                "native": lambda: rotary_native.rotary(positions, q, k, 128, cache, True),
                "flashinfer": lambda: flashinfer.rope.apply_rope_with_cos_sin_cache_inplace(
                    positions, q, k, 128, cache, True
                ),
                "flashinfer.pos_ids": lambda: flashinfer.rope.apply_rope_pos_ids_inplace(q3, k3, pos32),
            },
        )
        for op, (nbytes, fns) in arms.items():
            for arm, fn in fns.items():
                entry = bandwidth(timed(fn, graph=graph), nbytes, copy_gbps)
                entry.update(op=op, arm=arm, tokens=tokens)
                out["rows"].append(entry)
    return out


@section("mid_size")
def mid_size(copy_gbps):
    from rapid_llm.kernels.ops.norm import rms_norm as rms_native

    rows = []
    for tokens in (512, 2048, 4096, 16384):
        x = torch.randn((tokens, 4096), device="cuda").bfloat16()
        w = torch.randn(4096, device="cuda").bfloat16()
        src = torch.empty(x.numel() * 2, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        copy = bandwidth(timed(lambda: dst.copy_(src)), 2 * src.numel(), copy_gbps)
        native = bandwidth(timed(lambda: rms_native.rms_norm(x, w, 1e-6)), x.numel() * 4, copy_gbps)
        rows.append(
            {
                "tokens": tokens,
                "same_size_copy": copy,
                "native_rms_norm": native,
                "pct_of_same_size_copy": round(100 * native["TBps"] / copy["TBps"], 1),
            }
        )
    return rows


def main() -> int:
    global FLUSH
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--skip", nargs="*", default=[])
    args = parser.parse_args()
    FLUSH = torch.empty(gpu_timing.FLUSH_BYTES, dtype=torch.int8, device="cuda")
    copy = gpu_timing.measure_copy_bandwidth()
    RESULTS.update(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
        command=" ".join(sys.argv),
        device=torch.cuda.get_device_name(),
        torch=torch.__version__,
        triton=triton.__version__,
        copy=copy,
    )
    for name, fn in (
        ("fp8", check_fp8),
        ("rotary", sweep_rotary),
        ("mid_size", mid_size),
        ("kv_write", sweep_kv_write),
        ("gated", sweep_gated),
        ("extension", extension_explain),
        ("flashinfer", flashinfer_side_by_side),
    ):
        if name not in args.skip:
            fn(copy["GBps"])
    with open(f"{args.out}/sweep_rotary_fp8.json", "w") as handle:
        json.dump(RESULTS, handle, indent=1, default=str)
    _print_summary(RESULTS)
    return 0


def _print_summary(results):
    sections = results["sections"]
    print(f"copy {results['copy']['GBps'] / 1e3:.2f} TB/s")
    for name, value in sections.items():
        if isinstance(value, dict) and "error" in value:
            print(f"{name}: ERROR\n{value['error'][-1500:]}")
    rotary = sections.get("rotary")
    if isinstance(rotary, list):
        for key in {(r["q_heads"], r["tokens"]) for r in rotary}:
            cases = [r for r in rotary if (r["q_heads"], r["tokens"]) == key]
            best = min(cases, key=lambda r: r.get("graph_us") or r["event_us"])
            pick = next(r for r in cases if r["heuristic"])
            print(
                f"rotary {key}: best BH={best['block_heads']} w={best['num_warps']} {best['TBps']} TB/s "
                f"{best.get('graph_us')}; heuristic {pick['TBps']} TB/s {pick.get('graph_us')}"
            )
    fp8 = sections.get("fp8")
    if isinstance(fp8, dict) and "parity" in fp8:
        bad = [
            p for p in fp8["parity"] if not all(v for k, v in p.items() if isinstance(v, bool) and k != "column_major")
        ]
        print(f"fp8 parity: {len(fp8['parity']) - len(bad)} ok, {len(bad)} mismatched {bad[:3]}")
        for r in fp8["timing"]:
            print(
                f"  {r['row']:28s} T={r['tokens']:6d} H={r.get('hidden', '')} {r['TBps']} TB/s {r['pct_copy']}% "
                f"graph {r.get('graph_us')}"
            )
        keys = {(r["kind"], r["tokens"], r["hidden"]) for r in fp8["group_sweep"]}
        for key in sorted(keys):
            cases = [r for r in fp8["group_sweep"] if (r["kind"], r["tokens"], r["hidden"]) == key]
            best = min(cases, key=lambda r: r.get("graph_us") or r["event_us"])
            pick = [r for r in cases if r["heuristic"]]
            print(
                f"  sweep {key}: best BG={best['block_groups']} w={best['num_warps']} {best['TBps']} TB/s "
                f"graph {best.get('graph_us')}; heuristic {[(p['TBps'], p.get('graph_us')) for p in pick]}"
            )
    flash = sections.get("flashinfer")
    if isinstance(flash, dict) and "rows" in flash:
        print(f"flashinfer {flash['version']} compile {flash['compile_s']}")
        for r in flash["rows"]:
            print(
                f"  {r['op']:20s} {r['arm']:20s} T={r['tokens']:6d} {r['TBps']} TB/s {r['pct_copy']}% "
                f"graph {r.get('graph_us')}"
            )
    kv = sections.get("kv_write")
    if isinstance(kv, list):
        for key in sorted({(r["kind"], r["kv_heads"], r["tokens"]) for r in kv}):
            cases = [r for r in kv if (r["kind"], r["kv_heads"], r["tokens"]) == key]
            best = min(cases, key=lambda r: r.get("graph_us") or r["event_us"])
            pick = [r for r in cases if r["heuristic"]]
            print(
                f"kv {key}: best T={best['block_tokens']} B={best['block']} w={best['num_warps']} "
                f"{best['TBps']} TB/s graph {best.get('graph_us')}; heuristic "
                f"{[(p['TBps'], p.get('graph_us')) for p in pick]}"
            )
    gated_rows = sections.get("gated")
    if isinstance(gated_rows, list):
        for key in sorted({(r["d"], r["tokens"]) for r in gated_rows}):
            cases = [r for r in gated_rows if (r["d"], r["tokens"]) == key]
            native = [r for r in cases if r["arm"] == "native"]
            best = max(native, key=lambda r: r["TBps"])
            best_flat = max((r for r in native if r.get("flat")), key=lambda r: r["TBps"])
            best_2d = max((r for r in native if not r.get("flat")), key=lambda r: r["TBps"])
            print(
                f"  2d best B={best_2d['block']} w={best_2d['num_warps']} {best_2d['TBps']}; flat best "
                f"B={best_flat['block']} w={best_flat['num_warps']} {best_flat['TBps']}"
            )
            pick = [r["TBps"] for r in native if r["heuristic"]]
            peer = [r["TBps"] for r in cases if r["arm"] == "flashinfer"]
            print(
                f"gated d={key[0]} T={key[1]}: best B={best['block']} w={best['num_warps']} {best['TBps']} TB/s; "
                f"heuristic {pick}; flashinfer {peer}"
            )
    for text in (sections.get("extension") or {}).values():
        print(text)
    for r in sections.get("mid_size") or []:
        if isinstance(r, dict) and "tokens" in r:
            print(
                f"mid rms_norm T={r['tokens']}: {r['native_rms_norm']['TBps']} TB/s, copy same size "
                f"{r['same_size_copy']['TBps']} TB/s -> {r['pct_of_same_size_copy']}%"
            )


if __name__ == "__main__":
    raise SystemExit(main())
