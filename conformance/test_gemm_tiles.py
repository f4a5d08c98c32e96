"""The GEMM tile policy (rapid_llm/kernels/ops/gemm/tiles.py), on the CPU: token buckets, the heuristic
tables per GPU tier, refusals, the tuning store and resolve_tiles.

No GPU is needed: where the store path needs a CUDA device's facts (name, compute capability, shared
memory per block, SM count) they are faked, so the code that picks tiles on an H200 or an A10 runs here.
Every test starts and ends with tiles.forget() (no cached store or device facts leak between tests), the
user directory ($RAPID_LLM_TUNING_DIR) in a temporary folder, and the shipped store read from another
temporary folder, so a store file shipped later changes none of these tests.
"""

from __future__ import annotations

import inspect
import itertools
import json
import types
from importlib import resources

import pytest
import torch

from rapid_llm.kernels.dispatcher.contract import TOKEN_BUCKETS
from rapid_llm.kernels.ops.gemm import FP8_SPLIT_K_MAX_TOKENS, SPLIT_K_MAX_TOKENS, tiles

KERNELS = ("native/mm", "native/mm_splitk")
#: Every kernel the store may hold entries for (gemm.w8a16_mm's rows run the same kernels over int8 weights).
STORE_KERNELS = (
    *KERNELS,
    "native/mm_gemv",
    "native/w8a16_mm",
    "native/w8a16_mm_splitk",
    "native/w8a16_mm_gemv",
    "native/w4a16_mm",
    "native/w4a16_mm_gemv",
    "native/w4a16_mm_swap_ab",
)
#: The constexpr arguments each row's launch() sets itself (not knobs), beside the kernel it launches.
LAUNCH_CONSTEXPRS = {
    "native/mm": ("tiled", "_mm_kernel", {"HAS_BIAS", "HAS_SCALE", "EVEN_K", "NUM_PROGRAMS"}),
    "native/mm_splitk": ("splitk", "_partial_kernel", {"HAS_BIAS", "HAS_SCALE", "EVEN_K"}),
}


def _launched(kernel: str):
    """(the Triton kernel the row launches, its launch-set constexprs); skips in a cell without Triton."""
    from rapid_llm.kernels.dispatcher import probe_environment

    probe_environment()  # Triton's interpreter mode is set before the kernels are first imported
    pytest.importorskip("triton", reason="the native GEMM kernels are Triton kernels; Triton is absent in this cell")
    import importlib

    module, name, constexprs = LAUNCH_CONSTEXPRS[kernel]
    return getattr(importlib.import_module(f"rapid_llm.kernels.ops.gemm.mm.{module}"), name), constexprs


#: Knobs launch() consumes before the kernel sees them, and the launch options every row passes.
LAUNCH_KNOBS = {"native/mm": set(), "native/mm_splitk": {"SPLIT_K"}}
LAUNCH_OPTIONS = {"num_warps", "num_stages"}
#: m values across the token buckets each kernel serves (native/mm_splitk: m <= 16).
TOKENS = {"native/mm": (1, 2, 7, 16, 17, 64, 128, 129, 256, 257, 1000, 4096, 16384), "native/mm_splitk": (1, 2, 7, 16)}
#: The smallest shared memory per block of each tier (sm86/sm89: 99 KiB; Hopper: 227 KiB), by the sm
#: heuristic() is judged at.
TIER_LIMITS = {80: 99 * 1024, 86: 99 * 1024, 89: 99 * 1024, 90: 227 * 1024}
H200 = {"name": "NVIDIA H200", "major": 9, "minor": 0, "optin": 227 * 1024, "sms": 132}
A10 = {"name": "NVIDIA A10", "major": 8, "minor": 6, "optin": 99 * 1024, "sms": 72}
SHAPE = {"n": 4096, "k": 4096}


@pytest.fixture(autouse=True)
def _isolated_store(monkeypatch, tmp_path):
    monkeypatch.setenv("RAPID_LLM_TUNING_DIR", str(tmp_path / "user"))
    shipped = tmp_path / "shipped"
    monkeypatch.setattr(tiles, "resources", types.SimpleNamespace(files=lambda package: shipped))
    tiles.forget()
    yield
    tiles.forget()


def _fake_gpu(monkeypatch, gpu) -> torch.device:
    """CUDA device 0 as `gpu` says, for tiles.py only (no CUDA runtime is touched)."""
    props = types.SimpleNamespace(
        name=gpu["name"],
        major=gpu["major"],
        minor=gpu["minor"],
        shared_memory_per_block_optin=gpu["optin"],
        multi_processor_count=gpu["sms"],
    )
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index=None: props)
    monkeypatch.setattr(tiles, "multiprocessor_count", lambda device: gpu["sms"])
    return torch.device("cuda", 0)


def _write_store(folder, slug, entries, triton="3.4.0", date="2026-12-01"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{slug}.json"
    path.write_text(json.dumps({"triton": triton, "date": date, "entries": entries}))
    return path


def _entry(kernel="native/mm", dtype="bf16", bucket=(2, 16), n=4096, k=4096, **knobs):
    base = {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 4, "num_warps": 4, "num_stages": 2}
    if kernel == "native/mm_splitk":
        base = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 256, "SPLIT_K": 8, "num_warps": 4, "num_stages": 3}
    return {"kernel": kernel, "dtype": dtype, "m_bucket": list(bucket), "n": n, "k": k, "knobs": {**base, **knobs}}


def _constexpr_names(kernel) -> set:
    function = kernel
    while not inspect.isfunction(function):  # CachedKernel -> JITFunction / InterpretedFunction -> function
        function = function.fn
    return {name for name, p in inspect.signature(function).parameters.items() if "constexpr" in str(p.annotation)}


# ---------------------------------------------------------------------------
# Buckets


def test_m_bucket_is_the_contracts_token_bucket():
    """Catches the store keyed by other buckets than the ones dispatch plans by: an entry tuned at m = 16
    served at m = 17 (past native/mm_splitk's range, on another plan), or an empty call (m = 0) raising."""
    expected = {0: (1, 1), 1: (1, 1), 2: (2, 16), 16: (2, 16), 17: (17, 128), 128: (17, 128), 129: (129, 256)}
    expected |= {256: (129, 256), 257: (257, 512), 4096: (2049, 4096), 4097: (4097, 8192)}
    for m, bucket in expected.items():
        assert tiles.m_bucket(m) == bucket, m
    for m in range(1, 20000):
        assert tiles.m_bucket(m) == TOKEN_BUCKETS.bucket(m), m


# ---------------------------------------------------------------------------
# The heuristic


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("sm", [80, 90])
def test_heuristic_knobs_are_the_kernels_tile_parameters(kernel, sm):
    """Catches a tier's table missing a tile argument of its kernel (a launch error, on the GPU tier only:
    the CPU interpreter runs the sm80 table), or a tile Triton cannot build: tl.arange needs powers of
    two, tl.dot at least 16 per dim; and a split-K tile shorter than 16 rows, whose one row tile would
    leave rows 17.. of a 16-token call unwritten."""
    kernel_fn, set_by_launch = _launched(kernel)
    tile_arguments = _constexpr_names(kernel_fn) - set_by_launch
    for m in TOKENS[kernel]:
        knobs = tiles.heuristic(kernel, m, SHAPE["n"], SHAPE["k"], sm, 132)
        assert set(knobs) == tile_arguments | LAUNCH_KNOBS[kernel] | LAUNCH_OPTIONS, (m, knobs)
        for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K"):
            assert knobs[name] >= 16 and knobs[name] & (knobs[name] - 1) == 0, (m, knobs)
        assert knobs["num_warps"] in (1, 2, 4, 8, 16) and knobs["num_stages"] >= 1, (m, knobs)
        if kernel == "native/mm_splitk":
            assert knobs["BLOCK_M"] >= SPLIT_K_MAX_TOKENS and knobs["SPLIT_K"] >= 1, (m, knobs)


@pytest.mark.parametrize("kernel", KERNELS)
def test_heuristic_tiles_are_one_per_bucket(kernel):
    """Catches tiles picked from the raw m rather than its bucket: one plan (one bucket) would launch other
    tiles per call, and the store's per-bucket entry would replace tiles that vary inside the bucket."""
    top = 300 if kernel == "native/mm" else SPLIT_K_MAX_TOKENS
    for sm in (80, 90):
        for m in range(1, top + 1):
            high = tiles.m_bucket(m)[1]
            assert tiles.heuristic(kernel, m, 4096, 4096, sm, 132) == tiles.heuristic(
                kernel, high, 4096, 4096, sm, 132
            ), (sm, m)


@pytest.mark.parametrize("sm", [80, 90])
def test_tiled_tiles_grow_with_m(sm):
    """Catches a decode tile at prefill (16-row tiles read w M/16 times) or a prefill tile at decode (a
    128-row tile with one live row): BLOCK_M and the tile's area never shrink as m grows, start at
    tl.dot's 16 rows for one token and end larger."""
    sizes = [tiles.heuristic("native/mm", m, 4096, 4096, sm, 132) for m in TOKENS["native/mm"]]
    for smaller, larger in itertools.pairwise(sizes):
        assert larger["BLOCK_M"] >= smaller["BLOCK_M"], (smaller, larger)
        assert larger["BLOCK_M"] * larger["BLOCK_N"] >= smaller["BLOCK_M"] * smaller["BLOCK_N"], (smaller, larger)
    assert sizes[0]["BLOCK_M"] == 16
    assert sizes[-1]["BLOCK_M"] * sizes[-1]["BLOCK_N"] > sizes[0]["BLOCK_M"] * sizes[0]["BLOCK_N"]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_heuristic_tiles_fit_their_tiers_shared_memory(kernel, dtype):
    """Catches a Hopper-sized tile in the pre-Hopper table (or one past Hopper's 227 KiB): the launch
    runs out of shared memory, or the resolver silently sheds pipeline stages on every call."""
    for sm, limit in TIER_LIMITS.items():
        for m in TOKENS[kernel]:
            knobs = tiles.heuristic(kernel, m, 4096, 4096, sm, 132)
            assert tiles.refusal(knobs, dtype, limit, None) is None, (sm, m, knobs)


# ---------------------------------------------------------------------------
# Refusals


def test_refusal_refuses_tiles_over_the_shared_memory_limit():
    """Catches a store entry tuned on a larger part (or by hand) launched where it cannot fit: the
    refusal names the bytes needed and the limit; a tile exactly at the limit still launches."""
    knobs = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_stages": 4}
    need = 4 * (128 + 256) * 64 * 2
    reason = tiles.refusal(knobs, "bf16", need - 1, None)
    assert reason is not None and "shared memory" in reason and str(need) in reason and str(need - 1) in reason
    assert tiles.refusal(knobs, "bf16", need, None) is None
    assert tiles.refusal(knobs, "fp8_e4m3", need - 1, None) is None  # one byte per element: half of it


def test_refusal_lets_the_one_token_kernels_split_k_with_one_row():
    """Catches the 16-row rule of the split-K tensor-core kernels applied to the one-token kernels, which
    split K with BLOCK_M 1: their store entries would be refused (the heuristic served instead) and the
    heuristic's own stages cut to 2 as if shared memory were short."""
    one_token = tiles.heuristic("native/w4a16_mm_gemv", 1, 8192, 8192, 90, 132)
    assert one_token["BLOCK_M"] == 1 and "SPLIT_K" in one_token
    assert tiles.refusal(one_token, "bf16", 227 * 1024, None, "native/w4a16_mm_gemv") is None
    reason = tiles.refusal({**one_token, "BLOCK_K": 128}, "bf16", 227 * 1024, None, "native/mm_splitk")
    assert reason is not None and "BLOCK_M 1" in reason


def test_refusal_refuses_block_k_not_a_multiple_of_the_scale_group():
    """Catches a K tile that straddles two scale groups (a block-scaled GEMM would apply one scale to
    both): BLOCK_K 64 under a 128 group is refused, 256 is not, and no group means no such rule."""
    knobs = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "num_stages": 2}
    reason = tiles.refusal(knobs, "fp8_e4m3", 227 * 1024, 128)
    assert reason is not None and "BLOCK_K 64" in reason and "128" in reason
    assert tiles.refusal({**knobs, "BLOCK_K": 256}, "fp8_e4m3", 227 * 1024, 128) is None
    assert tiles.refusal(knobs, "fp8_e4m3", 227 * 1024, None) is None


@pytest.mark.parametrize("kernel", ["native/fp8_block_mm_gemv", "native/fp8_block_mm_swap_ab"])
def test_refusal_refuses_a_tile_across_two_weight_blocks(kernel):
    """Catches a store entry whose BLOCK_N does not divide the 128-row weight block served to a kernel that
    reads one weight scale per tile and K step (columns of the next block would get this block's scale)."""
    knobs = {**tiles.heuristic(kernel, 1, 7168, 7168, 90, 132), "BLOCK_N": 48}
    reason = tiles.refusal(knobs, "fp8_e4m3", 227 * 1024, 128, kernel)
    assert reason is not None and "BLOCK_N 48" in reason
    assert tiles.refusal({**knobs, "BLOCK_N": 64}, "fp8_e4m3", 227 * 1024, 128, kernel) is None
    per_column = {**knobs, "BLOCK_M": 16, "BLOCK_K": 128, "SPLIT_K": 1}  # splitk reads a scale per column
    assert tiles.refusal(per_column, "fp8_e4m3", 227 * 1024, 128, "native/fp8_block_mm_splitk") is None


# ---------------------------------------------------------------------------
# The store


def test_store_reads_the_user_file_in_the_tuning_dir(tmp_path):
    """Catches perf/tune_gemm.py's output in $RAPID_LLM_TUNING_DIR never read (tiles stay the heuristic's
    with no sign of it), or its entries keyed so that no lookup finds them."""
    path = _write_store(tmp_path / "user", "nvidia_h200", [_entry(), _entry("native/mm_splitk", bucket=(1, 1))])
    entries = tiles.store("nvidia_h200")
    assert set(entries) == {
        ("native/mm", "bf16", (2, 16), 4096, 4096),
        ("native/mm_splitk", "bf16", (1, 1), 4096, 4096),
    }
    entry = entries[("native/mm", "bf16", (2, 16), 4096, 4096)]
    assert entry["knobs"] == _entry()["knobs"]
    assert (entry["file"], entry["triton"], entry["date"]) == (str(path), "3.4.0", "2026-12-01")
    assert tiles.store("nvidia_h100_80gb_hbm3") == {}


def test_user_entry_overrides_the_shipped_entry_with_the_same_key(tmp_path):
    """Catches the shipped store winning over the user's (a retune on the user's own GPU ignored), or the
    user's file replacing the shipped one wholesale (the shipped entries it does not retune lost)."""
    shipped_other = _entry(bucket=(17, 128))
    _write_store(tmp_path / "shipped" / "tuning", "nvidia_h200", [_entry(), shipped_other])
    user = _write_store(tmp_path / "user", "nvidia_h200", [_entry(BLOCK_N=128)], triton="3.5.0")
    entries = tiles.store("nvidia_h200")
    mine = entries[("native/mm", "bf16", (2, 16), 4096, 4096)]
    assert mine["knobs"]["BLOCK_N"] == 128 and mine["file"] == str(user) and mine["triton"] == "3.5.0"
    assert entries[("native/mm", "bf16", (17, 128), 4096, 4096)]["knobs"] == shipped_other["knobs"]


def test_forget_makes_a_newly_written_store_visible(tmp_path):
    """Catches forget() leaving the store cached: entries perf/tune_gemm.py just wrote stay unseen until
    the process restarts."""
    assert tiles.store("nvidia_h200") == {}
    _write_store(tmp_path / "user", "nvidia_h200", [_entry()])
    tiles.forget()
    assert ("native/mm", "bf16", (2, 16), 4096, 4096) in tiles.store("nvidia_h200")


def test_store_entry_round_trips_through_a_store_file(tmp_path, monkeypatch):
    """Catches the writer (store_entry, what perf/tune_gemm.py saves) and the reader disagreeing on the
    key: an entry tuned at m = 16 must serve every m of its bucket on the GPU it was tuned on."""
    device = _fake_gpu(monkeypatch, H200)
    knobs = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 256, "SPLIT_K": 4, "num_warps": 4, "num_stages": 3}
    written = tiles.store_entry("native/mm_splitk", "fp16", 16, 14336, 4096, knobs, us=12.3456)
    _write_store(tmp_path / "user", tiles.model_slug("NVIDIA H200"), [json.loads(json.dumps(written))])
    for m in (2, 9, 16):
        assert tiles.resolve_tiles("native/mm_splitk", m, 14336, 4096, "fp16", device).knobs == knobs, m


# ---------------------------------------------------------------------------
# resolve_tiles


def test_resolve_serves_a_store_entry_for_its_key_only(tmp_path, monkeypatch):
    """Catches an entry served outside its key (another m bucket, dtype, n or k: tiles tuned for one
    shape launched on another) or not served inside it; the source names the file it came from."""
    device = _fake_gpu(monkeypatch, H200)
    path = _write_store(tmp_path / "user", "nvidia_h200", [_entry()])
    for m in (2, 7, 16):
        served = tiles.resolve_tiles("native/mm", m, 4096, 4096, "bf16", device)
        assert served.knobs == _entry()["knobs"] and served.source.startswith(f"store {path}"), served
    for m, n, k, dtype in ((1, 4096, 4096, "bf16"), (17, 4096, 4096, "bf16"), (7, 4096, 4096, "fp16")):
        served = tiles.resolve_tiles("native/mm", m, n, k, dtype, device)
        assert served.knobs == tiles.heuristic("native/mm", m, n, k, 90, 132), (m, n, k, dtype)
        assert served.source.startswith("heuristic sm90+"), served
    for n, k in ((4096, 14336), (14336, 4096)):
        assert tiles.resolve_tiles("native/mm", 7, n, k, "bf16", device).source.startswith("heuristic"), (n, k)


def test_resolve_refuses_a_store_entry_over_shared_memory(tmp_path, monkeypatch):
    """Catches a store entry launched where it does not fit (an A100-sized or hand-edited tile on a part
    with less shared memory: an out-of-resources launch error): the heuristic serves and says why."""
    device = _fake_gpu(monkeypatch, A10)
    big = _entry(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_stages=4)  # 4 x 384 x 64 x 2 = 192 KiB
    _write_store(tmp_path / "user", "nvidia_a10", [big])
    served = tiles.resolve_tiles("native/mm", 7, 4096, 4096, "bf16", device)
    assert served.knobs == tiles.heuristic("native/mm", 7, 4096, 4096, 86, 72)
    assert "store entry refused" in served.source and "shared memory" in served.source, served
    assert served.source.startswith("heuristic sm80-89"), served


def test_resolve_refuses_a_store_entry_whose_block_k_splits_a_scale_group(tmp_path, monkeypatch):
    """Catches the block_k_multiple a caller passes being ignored: an entry with BLOCK_K 64 served to a
    caller whose scale groups are 128 wide; the same entry is served to a caller without groups."""
    device = _fake_gpu(monkeypatch, H200)
    _write_store(tmp_path / "user", "nvidia_h200", [_entry(BLOCK_K=64)])
    refused = tiles.resolve_tiles("native/mm", 7, 4096, 4096, "bf16", device, block_k_multiple=128)
    assert refused.knobs != _entry(BLOCK_K=64)["knobs"]
    assert "store entry refused" in refused.source and "BLOCK_K 64" in refused.source, refused
    served = tiles.resolve_tiles("native/mm", 7, 4096, 4096, "bf16", device)
    assert served.knobs == _entry(BLOCK_K=64)["knobs"], served


def test_pre_hopper_heuristic_fits_its_part(monkeypatch):
    """Catches Hopper tiles resolved on an sm86 part (99 KiB per block): every bucket's tiles fit it and
    come from the pre-Hopper table."""
    device = _fake_gpu(monkeypatch, A10)
    for kernel in KERNELS:
        for m in TOKENS[kernel]:
            served = tiles.resolve_tiles(kernel, m, 4096, 4096, "bf16", device)
            assert served.source.startswith("heuristic sm80-89"), served
            assert tiles.refusal(served.knobs, "bf16", A10["optin"], None) is None, (kernel, m, served)


def test_resolve_on_a_cpu_device_is_the_interpreter_heuristic(tmp_path, monkeypatch):
    """Catches the CPU path (Triton's interpreter) asking torch.cuda for device facts, an error on every
    machine without CUDA, or serving a store entry or a Hopper table to the interpreter."""

    def no_cuda(index=None):
        raise AssertionError("resolve_tiles on a CPU device asked torch.cuda for device properties")

    monkeypatch.setattr(torch.cuda, "get_device_properties", no_cuda)
    _write_store(tmp_path / "user", "nvidia_h200", [_entry()])
    for kernel in KERNELS:
        for m in TOKENS[kernel]:
            served = tiles.resolve_tiles(kernel, m, 4096, 4096, "bf16", torch.device("cpu"))
            expected = tiles.Tiles(tiles.heuristic(kernel, m, 4096, 4096, 80, 1), "heuristic (CPU interpreter)")
            assert served == expected, (kernel, m, served)


# ---------------------------------------------------------------------------
# Shipped store files


def _shipped_files():
    folder = resources.files("rapid_llm.kernels.ops.gemm").joinpath("tuning")
    return sorted(path for path in folder.iterdir() if path.name.endswith(".json")) if folder.is_dir() else []


@pytest.mark.parametrize("path", _shipped_files() or [None], ids=lambda path: getattr(path, "name", "none"))
def test_shipped_store_files_are_well_formed(path):
    """Catches a shipped entry no lookup can find (an m_bucket that is not a token bucket, an unknown
    kernel or dtype), knobs its kernel cannot launch with, or tiles past its GPU tier's shared memory."""
    if path is None:
        pytest.skip("no store file shipped in rapid_llm/kernels/ops/gemm/tuning/ yet")
    document = json.loads(path.read_text())
    assert document.get("triton") and document.get("date"), path.name
    tier_limit = TIER_LIMITS[90] if any(name in path.name for name in ("h100", "h200", "h800", "gh200")) else None
    for entry in document["entries"]:
        kernel, knobs = entry["kernel"], entry["knobs"]
        # FP8_KERNELS lists the tensor-core kernels whose BLOCK_K is the scale group; the Gluon kernel (triton
        # 3.6's Gluon) and the one-token CUDA-core kernel are fp8 store kernels too
        fp8 = kernel in FP8_KERNELS or kernel in ("native/fp8_block_mm_gluon", "native/fp8_block_mm_gemv")
        assert kernel in STORE_KERNELS or fp8, entry
        assert entry["dtype"] in (("fp8_e4m3",) if fp8 else ("fp16", "bf16")), entry
        low, high = entry["m_bucket"]
        assert TOKEN_BUCKETS.bucket(low) == (low, high) == TOKEN_BUCKETS.bucket(high), entry
        assert set(knobs) == set(tiles.heuristic(kernel, high, entry["n"], entry["k"], 90, 132)), entry
        if kernel.endswith("_splitk"):
            assert high <= (FP8_SPLIT_K_MAX_TOKENS if fp8 else SPLIT_K_MAX_TOKENS), entry
            # the bf16 split-K kernel has one row tile (it covers the bucket); the fp8 one loops over row tiles
            assert fp8 or knobs["BLOCK_M"] >= SPLIT_K_MAX_TOKENS, entry
        if kernel == "native/fp8_block_mm_gemv":  # whole scale groups per K step, one weight block per program
            assert knobs["BLOCK_K"] % 128 == 0 and 128 % knobs["BLOCK_N"] == 0, entry
        elif kernel.startswith("native/fp8_block"):
            assert knobs["BLOCK_K"] == 128, entry  # one activation and one weight scale per K step
        if tier_limit is not None:
            assert tiles.refusal(knobs, entry["dtype"], tier_limit, None, kernel) is None, entry


# ---------------------------------------------------------------------------
# The fp8 GEMMs' kernels (ops/gemm/fp8/): one kernel per module serving both ops' rows

FP8_KERNELS = {
    "native/fp8_block_mm": ("tiled", "_fp8_mm_kernel", set()),
    "native/fp8_mm": ("tiled", "_fp8_mm_kernel", set()),
    "native/fp8_block_mm_splitk": ("splitk", "_fp8_partial_kernel", {"SPLIT_K"}),
    "native/fp8_mm_splitk": ("splitk", "_fp8_partial_kernel", {"SPLIT_K"}),
    "native/fp8_block_mm_swap_ab": ("swap_ab", "_fp8_swap_ab_kernel", {"SPLIT_K"}),
}
#: Constexprs the fp8 launches set themselves (not knobs).
FP8_LAUNCH_CONSTEXPRS = {"BLOCK_SCALES", "SCALE_K", "HAS_BIAS", "EVEN_K", "NUM_PROGRAMS"}


@pytest.mark.parametrize("kernel", sorted(FP8_KERNELS))
@pytest.mark.parametrize("sm", [89, 90])
def test_fp8_heuristic_knobs_are_the_kernels_tile_parameters(kernel, sm):
    """Catches an fp8 table missing a tile argument of its kernel (a launch error on the GPU only: these rows
    never run under the interpreter), a tile tl.dot cannot build (powers of two, at least 16 per dim), a
    BLOCK_K other than the 128-wide scale group (the block-scaled kernels' static_assert), or a tile past
    its tier's shared memory."""
    pytest.importorskip("triton", reason="the native GEMM kernels are Triton kernels; Triton is absent in this cell")
    import importlib

    module, name, launch_knobs = FP8_KERNELS[kernel]
    kernel_fn = getattr(importlib.import_module(f"rapid_llm.kernels.ops.gemm.fp8.{module}"), name)
    tile_arguments = _constexpr_names(kernel_fn) - FP8_LAUNCH_CONSTEXPRS
    for m in (1, 16, 64, 128, 4096):
        knobs = tiles.heuristic(kernel, m, 7168, 7168, sm, 132)
        assert set(knobs) == tile_arguments | launch_knobs | LAUNCH_OPTIONS, (m, knobs)
        assert knobs["BLOCK_K"] == 128, (m, knobs)
        for dim in ("BLOCK_M", "BLOCK_N"):
            assert knobs[dim] >= 16 and knobs[dim] & (knobs[dim] - 1) == 0, (m, knobs)
        assert tiles.refusal(knobs, "fp8_e4m3", TIER_LIMITS[sm], 128, kernel) is None, (sm, m, knobs)


def test_fp8_split_k_covers_the_sms_at_decode():
    """Catches a decode grid that leaves SMs idle while the weight streams: at DeepSeek-V3's 7168 x 7168
    and 2112 x 7168 the split-K grid has at least one program per SM of the H200's 132."""
    for n in (7168, 2112):
        knobs = tiles.heuristic("native/fp8_block_mm_splitk", 1, n, 7168, 90, 132)
        assert -(-n // knobs["BLOCK_N"]) * knobs["SPLIT_K"] >= 132, (n, knobs)


def test_fp8_gluon_heuristic_offers_tiles_its_kernel_launches():
    """Catches the Gluon kernel's heuristic offering a tile or a ring its launch refuses (more slots than fit
    beside the output buffers, another tile shape: a ValueError on the GPU only, where the row runs)."""
    pytest.importorskip("triton", reason="the Gluon kernel's module imports Triton; Triton is absent in this cell")
    from rapid_llm.kernels.ops.gemm.fp8 import gluon

    for m, n in ((129, 7168), (200, 2112), (4096, 7168), (16384, 24576)):
        knobs = tiles.heuristic("native/fp8_block_mm_gluon", m, n, 7168, 90, 132)
        assert (knobs["BLOCK_M"], knobs["BLOCK_N"], knobs["BLOCK_K"]) == (gluon.BLOCK_M, 128, 128), knobs
        assert 1 <= knobs["num_stages"] <= gluon.MAX_STAGES, knobs


def test_resolve_refuses_a_block_fp8_entry_of_two_scale_groups_per_step(tmp_path, monkeypatch):
    """Catches a store entry with BLOCK_K 256 served to the block-scaled kernel, which applies one scale per
    K step (its static_assert fails at compile time); the same BLOCK_K serves the per-channel kernel."""
    device = _fake_gpu(monkeypatch, H200)
    knobs = {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 256, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
    entries = [
        {"kernel": kernel, "dtype": "fp8_e4m3", "m_bucket": [17, 128], "n": 7168, "k": 7168, "knobs": knobs}
        for kernel in ("native/fp8_block_mm", "native/fp8_mm")
    ]
    _write_store(tmp_path / "user", "nvidia_h200", entries)
    refused = tiles.resolve_tiles("native/fp8_block_mm", 64, 7168, 7168, "fp8_e4m3", device, block_k_multiple=128)
    assert refused.knobs["BLOCK_K"] == 128 and "is not the scale group 128" in refused.source, refused
    served = tiles.resolve_tiles("native/fp8_mm", 64, 7168, 7168, "fp8_e4m3", device)
    assert served.knobs == knobs, served


@pytest.mark.parametrize("kernel", sorted(FP8_KERNELS))
def test_fp8_tuning_candidates_have_the_heuristics_knobs(kernel):
    """Catches a perf/tune_gemm.py candidate the fp8 kernel cannot launch (a knob missing or extra: every
    candidate fails on the GPU, and the store keeps the heuristic without saying why), or a block-scaled
    candidate with two scale groups per K step (refused at resolve time: a tuned entry never served)."""
    pytest.importorskip("triton", reason="perf/tune_gemm.py imports the Triton kernels; Triton is absent in this cell")
    from perf import tune_gemm

    knobs = set(tiles.heuristic(kernel, 1, 7168, 7168, 90, 132))
    for candidate in tune_gemm.CANDIDATES[kernel]:
        assert set(candidate) == knobs, candidate
        if kernel in tiles.ONE_SCALE_PER_STEP:
            assert candidate["BLOCK_K"] == 128, candidate
    assert any(tune_gemm._fits(kernel, c, 64, TIER_LIMITS[90], "fp8_e4m3") for c in tune_gemm.CANDIDATES[kernel])


#: gemm.w4a16_mm's kernels: (module in ops/gemm/mm/, its kernel function, its launch function, constexprs the
#: launch sets, knobs the launch consumes, token counts it serves).
W4A16_KERNELS = {
    "native/w4a16_mm": (
        "w4a16",
        "_mm_kernel",
        "launch_mm",
        {"AWQ", "V1_ZEROS", "GROUP", "HAS_BIAS"},
        {"SPLIT_K"},
        TOKENS["native/mm"],
    ),
    "native/w4a16_mm_gemv": (
        "w4a16",
        "_gemv_kernel",
        "launch_gemv",
        {"AWQ", "V1_ZEROS", "GROUP", "HAS_BIAS", "ASM"},
        {"SPLIT_K", "BLOCK_M"},
        (1,),
    ),
    "native/w4a16_mm_swap_ab": (
        "w4a16_swap_ab",
        "_w4a16_swap_ab_kernel",
        "launch",
        {"AWQ", "V1_ZEROS", "GROUP", "HAS_BIAS", "ASM"},
        {"SPLIT_K"},
        (1, 16),
    ),
}


@pytest.mark.parametrize("kernel", sorted(W4A16_KERNELS))
@pytest.mark.parametrize("sm", [80, 90])
def test_w4a16_heuristic_knobs_are_the_kernels_tile_parameters(kernel, sm):
    """Catches a gemm.w4a16_mm table entry naming a knob its kernel does not take (native/mm's GROUP_M: a launch
    error on the GPU only) or missing one, a tile Triton cannot build (powers of two; tl.dot: >= 16), or a
    split below 1."""
    from rapid_llm.kernels.dispatcher import probe_environment

    probe_environment()  # Triton's interpreter mode is set before the kernels are first imported
    pytest.importorskip("triton", reason="the native GEMM kernels are Triton kernels; Triton is absent in this cell")
    import importlib

    module, name, _, set_by_launch, consumed, tokens = W4A16_KERNELS[kernel]
    kernel_fn = getattr(importlib.import_module(f"rapid_llm.kernels.ops.gemm.mm.{module}"), name)
    tile_arguments = _constexpr_names(kernel_fn) - set_by_launch
    for m in tokens:
        knobs = tiles.heuristic(kernel, m, SHAPE["n"], SHAPE["k"], sm, 132)
        assert set(knobs) == tile_arguments | consumed | LAUNCH_OPTIONS, (m, knobs)
        for tile in {"BLOCK_M", "BLOCK_N", "BLOCK_K"} & tile_arguments:
            assert knobs[tile] >= 16 and knobs[tile] & (knobs[tile] - 1) == 0, (m, knobs)
        assert knobs["SPLIT_K"] >= 1 and knobs["num_warps"] in (1, 2, 4, 8, 16), (m, knobs)


@pytest.mark.parametrize("kernel", sorted(W4A16_KERNELS))
def test_w4a16_tuning_candidates_have_the_heuristics_knobs(kernel):
    """Catches perf/tune_gemm.py timing (and storing) a candidate with knobs the kernel does not take or lacks:
    a store entry that fails at its first launch on the GPU."""
    from rapid_llm.kernels.dispatcher import probe_environment

    probe_environment()  # Triton's interpreter mode is set before the kernels are first imported
    pytest.importorskip("triton", reason="perf/tune_gemm imports the Triton kernels")
    from perf.tune_gemm import CANDIDATES

    expected = set(tiles.heuristic(kernel, 1, SHAPE["n"], SHAPE["k"], 90, 132))
    for knobs in CANDIDATES[kernel]:
        assert set(knobs) == expected, knobs


@pytest.mark.parametrize("kernel", sorted(W4A16_KERNELS))
@pytest.mark.parametrize("packing", ["gptq", "awq"])
def test_w4a16_tuning_candidates_compute_the_product(kernel, packing):
    """Catches a tile perf/tune_gemm.py may store that computes a wrong product under some packing (16 columns
    of AWQ words, a BLOCK_K above the group, a split longer than the groups, SPLIT_K 1's direct write): every
    fifth candidate launched on an fp16 GPTQ / AWQ layer of group 64 (Triton's interpreter), against the torch
    reference. N = 72 and K = 320 are multiples of no tile."""
    from rapid_llm.kernels.dispatcher import probe_environment

    if not probe_environment().device.triton_interpreter:
        pytest.skip(
            "runs the kernels under Triton's CPU interpreter (RAPID_LLM_TRITON_INTERPRET=1; on the GPU, "
            "perf/tune_gemm.py checks the tile it stores)"
        )
    pytest.importorskip("triton", reason="the native GEMM kernels are Triton kernels; Triton is absent in this cell")
    import importlib

    from conformance.cases.gemm import _int4_weights
    from perf.tune_gemm import CANDIDATES
    from rapid_llm.kernels.ops.gemm.reference import w4a16_mm

    generator = torch.Generator().manual_seed(0)
    qweight, scales, qzeros = _int4_weights(72, 320, 64, packing, generator, torch.float16)
    m = 1 if kernel == "native/w4a16_mm_gemv" else 5
    x = torch.randn((m, 320), generator=generator).half()
    expected = w4a16_mm(x, qweight, scales, qzeros, 64, packing).float()
    module, _, launch_name, _, _, _ = W4A16_KERNELS[kernel]
    launch = getattr(importlib.import_module(f"rapid_llm.kernels.ops.gemm.mm.{module}"), launch_name)
    for knobs in CANDIDATES[kernel][::5]:
        out = torch.full((m, 72), float("nan"), dtype=torch.float16)
        launch(x, qweight, scales, qzeros, 64, packing, None, out, knobs)
        difference = (out.float() - expected).abs().max().item()
        assert difference <= 2**-10 * (1 + expected.abs().max().item()), (knobs, difference)


# ---------------------------------------------------------------------------
# Serving new token counts never recompiles


#: Kernel arguments whose value follows the call's token count: Triton specialises an int argument on
#: == 1 and on divisibility by 16, so a specialised one compiles a new kernel for some new m while serving.
#: stride_ask is the block-scaled kernels' a_scale stride along K: the padded M of the column-major layout.
TOKEN_ARGUMENTS = ("M", "total", "stride_ask")


def _launched_gemm_kernels():
    """(file, kernel name, its arguments, its do_not_specialize names) of every jit-decorated function of
    ops/gemm whose name ends in _kernel (the launched ones), read from the source: under the interpreter the
    decorator returns an object without the specialisation settings, and Gluon's module needs triton 3.6."""
    import ast
    import pathlib

    import rapid_llm.kernels.ops.gemm as gemm

    found = []
    for path in sorted(pathlib.Path(gemm.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.FunctionDef) and node.name.endswith("_kernel")):
                continue
            jit = [d for d in node.decorator_list if "jit" in ast.unparse(d)]
            if not jit:
                continue
            unspecialised = set()
            for decorator in jit:
                for keyword in getattr(decorator, "keywords", ()):
                    if keyword.arg == "do_not_specialize":
                        unspecialised |= set(ast.literal_eval(keyword.value))
            found.append((path.name, node.name, [a.arg for a in node.args.args], unspecialised))
    return found


def test_token_count_arguments_are_not_specialised():
    """Catches a GEMM kernel that recompiles while serving a new token count: an argument carrying m (M, a
    flat M * N, or the padded-M stride of column-major activation scales) left to Triton's specialisation."""
    kernels = _launched_gemm_kernels()
    assert len(kernels) >= 8, [name for _, name, _, _ in kernels]  # every mm/ and fp8/ module's kernels were read
    for path, name, arguments, unspecialised in kernels:
        carried = set(TOKEN_ARGUMENTS) & set(arguments)
        if "stride_ask" in carried and "M" not in arguments:
            carried.discard("stride_ask")  # one-token kernels: a_scale's stride is fixed for m == 1
        assert carried <= unspecialised, (path, name, sorted(carried - unspecialised))
