"""The GEMM family's tile policy: `resolve_tiles(kernel, m, n, k, dtype, device)` -> Tiles.

    tiles = resolve_tiles("native/mm", m=7, n=4096, k=4096, dtype="bf16", device=x.device)
    tiles.knobs   # {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4, "GROUP_M": 8}
    tiles.source  # where they came from: "store <path>" or "heuristic sm90 ..." (+ why a store entry was refused)

Order: the tuning store, then a heuristic table per GPU tier. The store is one JSON file per GPU model:
shipped as package data (gemm/tuning/<model>.json) and a user file of the same name in
$RAPID_LLM_TUNING_DIR (default ~/.cache/rapid_llm/tuning), whose entries win. Entries are keyed by
(kernel, dtype, m bucket, n, k) and record the triton version and date they were measured with; they
are filled offline by perf/tune_gemm.py on the GPU (one bounded call), never by autotuning at import or
at a call. An entry whose tiles would not fit the device (shared memory, BLOCK_K not a multiple of the
format's scale group) is refused with the reason, and the heuristic serves.

Tiers: Hopper (sm90+, 227 KiB of shared memory per block) and pre-Hopper (sm80-89: 99-163 KiB), so a
Hopper tile is never offered before Hopper. m buckets: the contract's token buckets (1, 2-16, 17-128,
then powers of two), so one entry serves every m of its bucket; m is a runtime argument of the kernels
(not specialised), so serving new m never recompiles.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import re
from importlib import resources
from pathlib import Path

import torch

from ...dispatcher.contract import TOKEN_BUCKETS
from .. import launch_override
from ..device_facts import multiprocessor_count

#: Bytes per element of the dtypes the native GEMM rows serve.
_ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8_e4m3": 1}
#: Shared memory a block may use where torch does not report it, by compute capability major.
_OPTIN_FALLBACK = {9: 227 * 1024, 8: 99 * 1024}


class Tiles:
    """Launch knobs and where they came from (a plain, comparable value)."""

    __slots__ = ("knobs", "source")

    def __init__(self, knobs: dict, source: str):
        self.knobs, self.source = dict(knobs), source

    def __eq__(self, other) -> bool:
        return isinstance(other, Tiles) and (self.knobs, self.source) == (other.knobs, other.source)

    def __repr__(self) -> str:
        return f"Tiles({self.knobs}, source={self.source!r})"


def m_bucket(m: int) -> tuple[int, int]:
    """(low, high) of the contract's token bucket holding m (m >= 0; 0 shares 1's bucket)."""
    return TOKEN_BUCKETS.bucket(max(m, 1))


def model_slug(name: str) -> str:
    """A GPU's name as a store file name: 'NVIDIA H200' -> 'nvidia_h200'."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def shared_memory_limit(device: torch.device) -> int:
    """Bytes of shared memory one block may use (opt-in maximum) on a CUDA device."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _optin(index)


@functools.lru_cache(maxsize=None)
def _optin(index: int) -> int:
    props = torch.cuda.get_device_properties(index)
    return getattr(props, "shared_memory_per_block_optin", 0) or _OPTIN_FALLBACK.get(props.major, 48 * 1024)


def shared_memory_bytes(knobs: dict, dtype: str, kernel: str = "") -> int:
    """The pipelined operand tiles' shared memory: stages x (BLOCK_M + BLOCK_N) x BLOCK_K elements, two
    weight tiles for a gate_up kernel (0 for a kernel without BLOCK_K or stages: native/w4a16_mm_gemv steps
    by whole groups in registers, the one-token kernels keep their tiles in registers)."""
    if "BLOCK_K" not in knobs or "num_stages" not in knobs:
        return 0
    weight_rows = knobs["BLOCK_N"] * (2 if kernel.endswith(".gate_up") else 1)
    return knobs["num_stages"] * (knobs["BLOCK_M"] + weight_rows) * knobs["BLOCK_K"] * _ELEMENT_BYTES[dtype]


#: Kernels that apply one scale of a row and of a column per K step: BLOCK_K must equal the scale group.
ONE_SCALE_PER_STEP = frozenset(
    {
        "native/fp8_block_mm",
        "native/fp8_block_mm_gluon",
        "native/fp8_block_mm_splitk",
        "native/fp8_block_mm_swap_ab",
        "native/fused_moe_fp8_block.gate_up",
        "native/fused_moe_fp8_block.down",
    }
)
#: Kernels that read one weight block scale per tile and K step: BLOCK_N must divide the scale block.
ONE_WEIGHT_BLOCK_PER_TILE = frozenset(
    {
        "native/fp8_block_mm_gemv",
        "native/fp8_block_mm_swap_ab",
        "native/fused_moe_fp8_block.gate_up",
        "native/fused_moe_fp8_block.down",
        "native/fused_moe_slots_fp8_block.gate_up",
        "native/fused_moe_slots_fp8_block.down",
    }
)


def refusal(knobs: dict, dtype: str, limit: int, block_k_multiple: int | None, kernel: str = "") -> str | None:
    """Why these knobs cannot launch here, or None."""
    need = shared_memory_bytes(knobs, dtype, kernel)
    if limit and need > limit:
        return f"needs {need} bytes of shared memory, the device allows {limit} per block"
    if block_k_multiple and knobs.get("BLOCK_K", block_k_multiple) % block_k_multiple:
        return f"BLOCK_K {knobs['BLOCK_K']} is not a multiple of the scale group {block_k_multiple}"
    if block_k_multiple and kernel in ONE_SCALE_PER_STEP and knobs["BLOCK_K"] != block_k_multiple:
        return f"BLOCK_K {knobs['BLOCK_K']} is not the scale group {block_k_multiple} (one scale per K step)"
    if block_k_multiple and kernel in ONE_WEIGHT_BLOCK_PER_TILE and block_k_multiple % knobs["BLOCK_N"]:
        return f"BLOCK_N {knobs['BLOCK_N']} does not divide the weight block {block_k_multiple} (one scale a tile)"
    # native/mm_splitk's one row tile covers every m <= 16 (the one-token kernels split K with BLOCK_M 1)
    if "SPLIT_K" in knobs and knobs["BLOCK_M"] < 16 and not kernel.endswith("_gemv"):
        return f"BLOCK_M {knobs['BLOCK_M']} of the split-K kernel is below its 16 rows"
    return None


# ---------------------------------------------------------------------------
# Heuristics: one table per kernel and tier, by m bucket's upper bound


def _tiled(m: int, n: int, k: int, hopper: bool) -> dict:
    """native/mm: output tiles sized by m (decode-shaped m wastes little of BLOCK_M), grouped along M."""
    if m <= 16:
        knobs = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4}
    elif m <= 64:
        knobs = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4}
    elif m <= 256 or not hopper:
        knobs = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}
    else:
        knobs = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}
    knobs["GROUP_M"] = 8
    return knobs


def _split_k(m: int, n: int, k: int, hopper: bool, programs: int) -> dict:
    """native/mm_splitk (m <= 16): BLOCK_N columns per program, K split so the grid covers the SMs about
    twice (the weight stream is the whole cost: every SM must pull it)."""
    block_n, block_k = 64, 128 if hopper else 64
    columns = -(-n // block_n)
    k_blocks = -(-k // block_k)
    split = max(1, min(k_blocks, -(-2 * programs // columns), 16))
    return {
        "BLOCK_M": 16,
        "BLOCK_N": block_n,
        "BLOCK_K": block_k,
        "SPLIT_K": split,
        "num_warps": 4,
        "num_stages": 4 if hopper else 3,
    }


def _fp8_tiled(m: int, n: int, k: int, hopper: bool) -> dict:
    """native/fp8_block_mm and native/fp8_mm: BLOCK_K 128 (the scale group: one scale per K step), output
    tiles sized by m; 128 x 128 at large m (the per-step fp32 product is a second tile of registers beside
    the accumulator, so 128 x 256 would spill)."""
    if m <= 16:
        knobs = {"BLOCK_M": 16, "BLOCK_N": 64, "num_warps": 4, "num_stages": 4}
    elif m <= 128:
        knobs = {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 4}
    else:
        knobs = {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 4 if hopper else 3}
    return {**knobs, "BLOCK_K": 128, "GROUP_M": 8}


def _fp8_gluon() -> dict:
    """native/fp8_block_mm_gluon (prefill m, sm90): its one tile (128 x 128 x 128: two 64-row consumer
    warpgroups and a producer warp; num_warps is the consumers'), grouped 8 row tiles per column sweep, in 5
    ring slots of 32.5 KiB (its most, beside the output buffers)."""
    return {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": 5}


def _fp8_split_k(m: int, n: int, k: int, hopper: bool, programs: int) -> dict:
    """native/fp8_block_mm_splitk and native/fp8_mm_splitk (m <= 64): 64 weight rows x 128 of K per step
    (8 KiB of fp8), K split so the grid covers the SMs about twice; a row tile covering the bucket's m."""
    block_n, block_k = 64, 128
    columns = -(-n // block_n)
    split = max(1, min(-(-k // block_k), -(-2 * programs // columns), 16))
    return {
        "BLOCK_M": 16 if m <= 16 else 64,
        "BLOCK_N": block_n,
        "BLOCK_K": block_k,
        "SPLIT_K": split,
        "num_warps": 4,
        "num_stages": 4 if hopper else 3,
    }


def _fp8_swap_ab(m: int, n: int, k: int, hopper: bool, programs: int) -> dict:
    """native/fp8_block_mm_swap_ab (m <= 128): 64 weight rows (the MMA's M side: one warpgroup) x 128 of K per
    step, a token tile covering the bucket's m (16, 32 or 64 per program), K split as _fp8_split_k."""
    return {**_fp8_split_k(m, n, k, hopper, programs), "BLOCK_M": 16 if m <= 16 else 32 if m <= 32 else 64}


def _w4a16_swap_ab(m: int, n: int, k: int, hopper: bool, programs: int) -> dict:
    """native/w4a16_mm_swap_ab (m <= 16): 64 weight columns (the MMA's M side: one warpgroup) per program, one
    16-token tile, K split in whole groups so the grid covers the SMs about twice."""
    block_n = 64
    groups = max(1, k // 128)
    split = max(1, min(groups, -(-2 * programs // -(-n // block_n)), 32))
    return {"BLOCK_M": 16, "BLOCK_N": block_n, "SPLIT_K": split, "num_warps": 4, "num_stages": 2}


_HEURISTICS = {
    "native/mm": lambda m, n, k, hopper, programs: _tiled(m, n, k, hopper),
    "native/mm_splitk": _split_k,
    "native/mm_gemv": lambda m, n, k, hopper, programs: _gemv(n, programs, element_bytes=2),
    "native/w8a16_mm_gemv": lambda m, n, k, hopper, programs: _gemv(n, programs, element_bytes=1),
    # int8 weights: the same kernels (the weight tile is half the bytes; the bf16 table is a safe fit)
    "native/w8a16_mm": lambda m, n, k, hopper, programs: _tiled(m, n, k, hopper),
    "native/w8a16_mm_splitk": _split_k,
    "native/fp8_block_mm": lambda m, n, k, hopper, programs: _fp8_tiled(m, n, k, hopper),
    "native/fp8_mm": lambda m, n, k, hopper, programs: _fp8_tiled(m, n, k, hopper),
    "native/fp8_block_mm_gluon": lambda m, n, k, hopper, programs: _fp8_gluon(),
    "native/fp8_block_mm_splitk": _fp8_split_k,
    "native/fp8_block_mm_swap_ab": _fp8_swap_ab,
    # whole scale groups per K step (1 KiB of e4m3 weight row), BLOCK_N 4-32: divides the 128-row weight block
    "native/fp8_block_mm_gemv": lambda m, n, k, hopper, programs: _gemv(n, programs, element_bytes=1),
    "native/fp8_mm_splitk": _fp8_split_k,
    "native/w4a16_mm": lambda m, n, k, hopper, programs: _w4a16(m, n, k, hopper, programs),
    "native/w4a16_mm_gemv": lambda m, n, k, hopper, programs: _w4a16_gemv(n, k, programs),
    "native/w4a16_mm_swap_ab": _w4a16_swap_ab,
    # moe.fused_moe's GEMMs: m is the rows an expert gets (slots / experts, rounded up), n and k the GEMM's
    "native/fused_moe.gate_up": lambda m, n, k, hopper, programs: _moe_sorted(m, hopper, gate_up=True),
    "native/fused_moe.down": lambda m, n, k, hopper, programs: _moe_sorted(m, hopper, gate_up=False),
    "native/fused_moe_fp8_block.gate_up": lambda m, n, k, hopper, programs: _moe_sorted_fp8(m, gate_up=True),
    "native/fused_moe_fp8_block.down": lambda m, n, k, hopper, programs: _moe_sorted_fp8(m, gate_up=False),
    # whole 128-wide scale groups per K step, BLOCK_N within one weight block (_moe_slots' widest: 16, 32)
    "native/fused_moe_slots_fp8_block.gate_up": lambda m, n, k, hopper, programs: _moe_slots(
        m, n // 2, programs, 16, 256
    ),
    "native/fused_moe_slots_fp8_block.down": lambda m, n, k, hopper, programs: _moe_slots(m, n, programs, 32, 256),
    "native/fused_moe_slots.gate_up": lambda m, n, k, hopper, programs: _moe_slots(m, n // 2, programs, 16, 256),
    "native/fused_moe_slots.down": lambda m, n, k, hopper, programs: _moe_slots(m, n, programs, 32, 256),
}


def _moe_sorted(m: int, hopper: bool, gate_up: bool) -> dict:
    """native/fused_moe's GEMMs over the expert-sorted layout: BLOCK_M (the layout's block size, shared by
    both GEMMs) sized by an expert's rows; the gate_up program multiplies a gate and an up tile of BLOCK_N
    columns each (two weight tiles per K step: half the down GEMM's BLOCK_N for the same shared memory)."""
    if m <= 16:
        knobs = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3}
    elif m <= 128:
        knobs = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3}
    else:
        knobs = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3 if hopper else 2}
    if gate_up:
        knobs["BLOCK_N"] //= 2
    return knobs


def _moe_sorted_fp8(m: int, gate_up: bool) -> dict:
    """native/fused_moe_fp8_block: _moe_sorted's tiles with BLOCK_K 128 (one scale group per K step: the
    activation tile is quantized per row of the step) and BLOCK_N at most 128 (one weight scale block)."""
    knobs = {**_moe_sorted(m, True, gate_up), "BLOCK_K": 128}
    knobs["BLOCK_N"] = min(knobs["BLOCK_N"], 128)
    return knobs


def _moe_slots(rows: int, columns: int, programs: int, widest: int, block_k: int) -> dict:
    """native/fused_moe_slots (decode): BLOCK_N output columns a program, for each of `rows` rows (m: the
    slots for gate_up, the tokens for down), the [BLOCK_N, BLOCK_K] products
    kept in registers (gate_up keeps two: a gate and an up tile, hence its narrower widest); BLOCK_N as
    small as keeps several programs per SM (their loads in flight hide the memory latency), at least 4."""
    block_n = widest
    while block_n > 4 and rows * -(-columns // block_n) < 4 * programs:
        block_n //= 2
    return {"BLOCK_N": block_n, "BLOCK_K": block_k, "num_warps": 4}


def _w4a16(m: int, n: int, k: int, hopper: bool, programs: int) -> dict:
    """native/w4a16_mm. m > 16: on Hopper 128 x 64 x 64 in 4 stages, before Hopper gemm.mm's output tiles
    (BLOCK_K is capped at the group size by the launch). m <= 16: native/mm_splitk's tiles with the grid
    covering the SMs about four times, not twice (a quarter of bf16's bytes per weight element: more
    programs in flight to keep the loads coming)."""
    if m > 16 and hopper:
        # the tile every large-m shape tuned to on the H200 (h200.gemm.tuning.w4a16_large)
        return {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4, "SPLIT_K": 1}
    if m > 16:  # no GROUP_M: its grid is (N tiles, M tiles), not persistent
        knobs = {name: value for name, value in _tiled(m, n, k, hopper).items() if name != "GROUP_M"}
        # at most 128 columns: each K step's product is a second fp32 tile beside the accumulator (the group
        # scale multiplies it before it is added), 2 x 128 x 256 / 256 threads would spill
        return {**knobs, "BLOCK_N": min(knobs["BLOCK_N"], 128), "SPLIT_K": 1}
    return _split_k(m, n, k, hopper, 2 * programs)


def _w4a16_gemv(n: int, k: int, programs: int) -> dict:
    """native/w4a16_mm_gemv (M == 1): 64 columns per program (a [16, 64] int32 tile per group of 128 for GPTQ),
    K split in runs of whole groups (of 128: the launch caps SPLIT_K at the group count) until the grid holds
    about eight programs per SM."""
    block_n = 64
    split = max(1, min(-(-k // 128), -(-8 * programs // -(-n // block_n)), 32))
    return {"BLOCK_M": 1, "BLOCK_N": block_n, "SPLIT_K": split, "num_warps": 4, "num_stages": 3}


def heuristic(kernel: str, m: int, n: int, k: int, sm: int, programs: int) -> dict:
    """The tier's table entry for the upper bound of m's bucket (what dispatch judged the row by)."""
    high = m_bucket(m)[1]
    return _HEURISTICS[kernel](high, n, k, sm >= 90, programs)


def _gemv(n: int, programs: int, element_bytes: int) -> dict:
    """native/mm_gemv and native/w8a16_mm_gemv (M == 1): 1 KiB of weight row per K step, and columns per
    program few enough for several programs per SM (their loads in flight hide the memory latency)."""
    block_n = 4
    while block_n < 32 and -(-n // (2 * block_n)) >= 8 * programs:
        block_n *= 2
    return {"BLOCK_M": 1, "BLOCK_N": block_n, "BLOCK_K": 1024 // element_bytes, "num_warps": 4, "num_stages": 3}


# ---------------------------------------------------------------------------
# The store


def user_directory() -> Path:
    return Path(os.environ.get("RAPID_LLM_TUNING_DIR") or Path.home() / ".cache" / "rapid_llm" / "tuning")


def _read(path) -> list:
    try:
        with open(path, encoding="utf-8") as handle:
            document = json.load(handle)
    except FileNotFoundError:
        return []
    entries = document.get("entries", [])
    for entry in entries:
        entry.setdefault("triton", document.get("triton"))
        entry.setdefault("date", document.get("date"))
        entry["file"] = str(path)
    return entries


@functools.lru_cache(maxsize=None)
def store(slug: str) -> dict:
    """{(kernel, dtype, m bucket, n, k): entry} of the shipped file, then the user's (which wins)."""
    shipped = resources.files(__package__).joinpath("tuning", f"{slug}.json")
    entries = {}
    for entry in [*_read(shipped), *_read(user_directory() / f"{slug}.json")]:
        key = (entry["kernel"], entry["dtype"], tuple(entry["m_bucket"]), entry["n"], entry["k"])
        entries[key] = entry
    return entries


def forget() -> None:
    """Drop the cached store and device facts (after writing a store file)."""
    store.cache_clear()
    _optin.cache_clear()
    _resolved.cache_clear()


# ---------------------------------------------------------------------------


def resolve_tiles(
    kernel: str, m: int, n: int, k: int, dtype: str, device: torch.device, block_k_multiple: int | None = None
) -> Tiles:
    """The launch knobs of `kernel` (a native GEMM row: native/mm, native/mm_splitk, native/mm_gemv,
    native/w8a16_mm, native/w8a16_mm_splitk, native/w8a16_mm_gemv, native/w4a16_mm(_gemv, _swap_ab),
    native/fp8_block_mm(_splitk, _swap_ab, _gemv, _gluon), native/fp8_mm(_splitk)) for an m x n x k product
    in dtype on device: the store's entry for (kernel, dtype, m's bucket, n, k) if it fits, else the tier's heuristic
    (module docstring). Cached per bucket."""
    if device.type != "cuda":  # Triton's interpreter: any tile runs; small ones keep it fast
        tiles = Tiles(heuristic(kernel, m, n, k, 80, 1), "heuristic (CPU interpreter)")
    else:
        index = device.index if device.index is not None else torch.cuda.current_device()
        tiles = _resolved(kernel, m_bucket(m), n, k, dtype, index, block_k_multiple)
    if launch_override.active():  # a sweep's or a test's knobs replace some (the one launch-knob hook)
        return Tiles(launch_override.apply(kernel, dict(tiles.knobs)), tiles.source + "; launch_override")
    return tiles


@functools.lru_cache(maxsize=4096)
def _resolved(kernel, bucket, n, k, dtype, index, block_k_multiple) -> Tiles:
    props = torch.cuda.get_device_properties(index)
    sm = props.major * 10 + props.minor
    limit = _optin(index)
    programs = multiprocessor_count(torch.device("cuda", index))
    refused = ""
    entry = store(model_slug(props.name)).get((kernel, dtype, bucket, n, k))
    if entry is not None:
        reason = refusal(entry["knobs"], dtype, limit, block_k_multiple, kernel)
        if reason is None:
            return Tiles(entry["knobs"], f"store {entry['file']} (triton {entry['triton']}, {entry['date']})")
        refused = f"; store entry refused: {reason}"
    knobs = heuristic(kernel, bucket[1], n, k, sm, programs)
    while refusal(knobs, dtype, limit, None, kernel) and knobs["num_stages"] > 2:
        knobs["num_stages"] -= 1  # a pre-Hopper part: fewer stages in flight before smaller tiles
    tier = "sm90+" if sm >= 90 else "sm80-89"
    return Tiles(knobs, f"heuristic {tier}, m bucket {bucket[0]}-{bucket[1]}{refused}")


def store_entry(kernel: str, dtype: str, m: int, n: int, k: int, knobs: dict, us: float) -> dict:
    """One store entry as perf/tune_gemm.py writes it."""
    return {
        "kernel": kernel,
        "dtype": dtype,
        "m_bucket": list(m_bucket(m)),
        "n": n,
        "k": k,
        "knobs": knobs,
        "us": round(us, 3),
        "date": datetime.date.today().isoformat(),
    }


__all__ = ["Tiles", "forget", "heuristic", "m_bucket", "model_slug", "resolve_tiles", "store", "store_entry"]
