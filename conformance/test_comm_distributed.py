"""The comm family across real ranks: gloo on the CPU, 2 and 4 processes on the loopback interface.

The parity suite (conformance/cases/comm.py) runs the ops over a one-rank group, where the sum is the input;
the reductions themselves, the cross-rank agreement check and the group argument's forms run here. Each test
spawns one world ("spawn" start method: every worker imports torch and the library fresh) whose ranks meet
at tcp://127.0.0.1:<a free port>, runs a scenario of several checks in it (one world per test keeps the
file fast: a spawn costs seconds), and reports back as JSON files in tmp_path (nothing is parsed from stdout).

Every wait is bounded: the process group's timeout (PG_TIMEOUT_S) bounds each collective, the world's
workers are joined against one deadline (JOIN_TIMEOUT_S) and a worker still alive at the deadline is killed
and named in the failure; every worker destroys its process group in a finally.

On GPUs (RAPID_LLM_COMM_TEST_DEVICE=cuda, one GPU per rank): the same scenarios, the ops' tensors on the
rank's GPU through NCCL (the group is "cpu:gloo,cuda:nccl": the scenarios' own bookkeeping stays on gloo),
with RAPID_LLM_CHECK_BOUNDS=1 so the agreement checks run on CUDA too. Inputs are drawn on the CPU and each
op call moves them (a strided view as the same view of its moved base) and moves the results back
(_OnDevice), so every check reads the same way. RAPID_LLM_FORCE picks the rows under test (the symmetric-
memory or DeepEP rows); RAPID_LLM_COMM_TEST_DTYPES narrows the dtypes (DeepEP: bf16,fp8) and
RAPID_LLM_COMM_TEST_EP_CASES the EP cases; RAPID_LLM_COMM_PARITY_REPORT=FILE appends each world's largest
differences from the float64 oracle. The scenarios of a rank that never calls are gloo-only (NCCL's
watchdog ends a timed-out process instead).
"""

from __future__ import annotations

import json
import math
import os
import time
import traceback
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from conformance.spawned_world import free_port, run_world, write_report

PG_TIMEOUT_S = 30
JOIN_TIMEOUT_S = 120
DEVICE = os.environ.get("RAPID_LLM_COMM_TEST_DEVICE", "cpu")
ON_GPU = DEVICE == "cuda"
ALL_REDUCE = "comm.all_reduce"
FUSED = "comm.all_reduce_add_rms_norm"
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
#: One rounding step of each dtype (relative): the transport adds in the payload's dtype.
UNIT = {"fp32": 2.0**-23, "fp16": 2.0**-10, "bf16": 2.0**-7}
#: The residual add and the norm, as conformance/cases/norm.py's fused_add_rms_norm tolerances (rtol, atol).
NORM_TOLERANCE = {"fp32": (1e-5, 1e-5), "fp16": (1e-3, 2e-3), "bf16": (1e-2, 8e-3)}


def _gloo_available() -> bool:
    return dist.is_available() and dist.is_gloo_available()


pytestmark = pytest.mark.skipif(not _gloo_available(), reason="torch.distributed's gloo backend is not available")
DTYPES_UNDER_TEST = os.environ.get("RAPID_LLM_COMM_TEST_DTYPES", "fp32,fp16,bf16,fp8").split(",")
#: RAPID_LLM_COMM_TEST_EP_CASES=name,...: only these EP cases (a forced row's shape limits: DeepEP's hidden % 8).
EP_CASES_UNDER_TEST = os.environ.get("RAPID_LLM_COMM_TEST_EP_CASES", "")


def _sum_tolerance(dtype: str, world: int) -> tuple[float, float]:
    """(rtol, atol) of a sum over `world` ranks against the float64 sum: world - 1 roundings of the dtype."""
    if dtype == "fp32":
        return 1e-5, 1e-5
    return UNIT[dtype] * world, UNIT[dtype] * world


# ---------------------------------------------------------------------------
# Spawning a world (the parent side)
# ---------------------------------------------------------------------------


def _run_world(tmp_path: Path, scenario: str, world: int, *, pg_timeout_s=PG_TIMEOUT_S, **options) -> list[dict]:
    """Run SCENARIOS[scenario] on `world` spawned gloo ranks; each rank's report (a dict), by rank.

    Fails the test naming every rank still alive at the join deadline (killed first), every rank that exited
    without reporting (with its exit code), and every rank whose scenario raised (with its traceback)."""
    if ON_GPU and torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} CUDA devices (one per rank); this machine has {torch.cuda.device_count()}")
    out_dir = tmp_path / f"{scenario}-world{world}"
    out_dir.mkdir()
    port = free_port()

    def args_of_rank(rank):
        return (scenario, world, port, pg_timeout_s, str(out_dir), options)

    reports = run_world(_worker, args_of_rank, world, out_dir, JOIN_TIMEOUT_S, f"{scenario}, world {world}")
    _append_parity_report(scenario, world, reports)
    return reports


def _append_parity_report(scenario: str, world: int, reports: list[dict]) -> None:
    """RAPID_LLM_COMM_PARITY_REPORT=FILE: append this world's largest |diff| per check (over its ranks)."""
    path = os.environ.get("RAPID_LLM_COMM_PARITY_REPORT")
    if not path:
        return
    worst: dict = {}
    for report in reports:
        for what, diff in report.get("max_abs_diff", {}).items():
            worst[what] = max(worst.get(what, 0.0), diff)
    entry = {
        "scenario": scenario,
        "world": world,
        "device": reports[0].get("device"),
        "force": os.environ.get("RAPID_LLM_FORCE", ""),
        "failures": sum(len(report["failures"]) for report in reports),
        "max_abs_diff": worst,
    }
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(entry) + "\n")


def _assert_no_failures(reports: list[dict]) -> None:
    failures = [f"rank {report['rank']}: {line}" for report in reports for line in report["failures"]]
    assert not failures, f"{len(failures)} failed checks:\n" + "\n".join(failures[:40])


# ---------------------------------------------------------------------------
# The worker side
# ---------------------------------------------------------------------------


#: The world's report folder, in a worker process (set by _worker).
_OUT_DIR = None


def _worker(rank, scenario, world, port, pg_timeout_s, out_dir, options):
    """One rank: init gloo over the loopback, run the scenario, write rank<r>.json (also when it raised)."""
    report = {"rank": rank, "failures": []}
    global _OUT_DIR
    _OUT_DIR = Path(out_dir)
    started = time.monotonic()
    try:
        if os.path.exists("/sys/class/net/lo"):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only
        scenario_fn = SCENARIOS[scenario]
        backend = "gloo"
        if ON_GPU:
            torch.cuda.set_device(rank)
            os.environ["RAPID_LLM_CHECK_BOUNDS"] = "1"  # the agreement checks on CUDA tensors too
            backend = "cpu:gloo,cuda:nccl"
            report["device"] = torch.cuda.get_device_name(rank)
        before = getattr(scenario_fn, "before_init", None)
        if before is not None:
            before(rank, world, report)
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=pg_timeout_s),
        )
        report["init_s"] = time.monotonic() - started
        try:
            scenario_fn(rank, world, report, **options)
            report["scenario_s"] = time.monotonic() - started - report["init_s"]
        finally:
            dist.destroy_process_group()
    except BaseException:  # reported to the parent, which fails the test with it
        report["crash"] = traceback.format_exc()
    write_report(out_dir, rank, report)


def _kernels():
    from rapid_llm import kernels

    return _OnDevice(kernels) if ON_GPU else kernels


class _OnDevice:
    """The public ops with their tensors on this rank's GPU: each call moves every tensor argument there (a
    view as the same view of its moved base, so strides and overlaps stay), runs the op, copies the moved
    bases back (what the op wrote, in or outside a view, shows on the CPU tensors), and returns CPU results
    (an argument written in place and returned comes back as the caller's own object)."""

    def __init__(self, kernels):
        self._kernels = kernels

    def __getattr__(self, name):
        function = getattr(self._kernels, name)

        def call(*args, **kwargs):
            moved = {}  # id(CPU base) -> (CPU base, its GPU copy)
            device_args = [_to_gpu(arg, moved) for arg in args]
            device_kwargs = {key: _to_gpu(value, moved) for key, value in kwargs.items()}
            try:
                result = function(*device_args, **device_kwargs)
            finally:
                torch.cuda.synchronize()
                for base, copy in moved.values():
                    base.copy_(copy.cpu())
            originals = {id(gpu): cpu for cpu, gpu in zip(args, device_args) if isinstance(cpu, torch.Tensor)}
            return _to_cpu(result, originals)

        return call


def _to_gpu(value, moved):
    from rapid_llm.kernels.collectives import EpHandle

    if isinstance(value, EpHandle):
        library = tuple(t.cuda() for t in value.library)  # DeepEP's tensors live on the GPU; the rest moves
        return EpHandle(
            _to_gpu(value.token_in_rank, moved), _to_gpu(value.recv_counts, moved), value.library_name, library
        )
    if not isinstance(value, torch.Tensor):
        return value
    base = value if value._base is None else value._base
    if id(base) not in moved:
        moved[id(base)] = (base, base.cuda())
    copy = moved[id(base)][1]
    return copy.as_strided(value.shape, value.stride(), value.storage_offset())


def _to_cpu(value, originals):
    from rapid_llm.kernels.collectives import EpDispatch, EpHandle

    if isinstance(value, EpDispatch):
        return EpDispatch(*(_to_cpu(field, originals) for field in value))
    if isinstance(value, EpHandle):
        library = value.library  # kept on the GPU for DeepEP's combine
        return EpHandle(value.token_in_rank.cpu(), value.recv_counts.cpu(), value.library_name, library)
    if isinstance(value, tuple):
        return tuple(_to_cpu(item, originals) for item in value)
    if isinstance(value, torch.Tensor):
        return originals.get(id(value), value.cpu())
    return value


def _draw(shape, dtype: str, seed: int, *, layout: str = "contiguous"):
    """(x, base): x of `shape` in `dtype` drawn from `seed`, a view of `base` in the given layout:
    contiguous; rows_padded (each row of a wider buffer: non-contiguous); transposed (x = base.mT, 2-D)."""
    generator = torch.Generator().manual_seed(seed)

    def randn(size):
        return torch.randn(size, generator=generator, dtype=torch.float32).to(DTYPES[dtype])

    if layout == "contiguous":
        base = randn(shape)
        return base, base
    if layout == "rows_padded":
        base = randn((*shape[:-1], shape[-1] + 24))
        return base[..., : shape[-1]], base
    if layout == "transposed":
        rows, hidden = shape
        base = randn((hidden, rows))
        return base.mT, base
    raise ValueError(layout)


def _outside_view(x, base):
    """A bool mask over base's elements: True where x does not reach (what no write through x may change)."""
    positions = torch.arange(base.numel()).reshape(base.shape)
    view = positions.as_strided(x.shape, x.stride(), x.storage_offset() - base.storage_offset())
    mask = torch.ones(base.numel(), dtype=torch.bool)
    mask[view.reshape(-1)] = False
    return mask


def _bits(tensor):
    """The tensor's bit patterns (an integer view of a contiguous copy): equality is bitwise."""
    integer = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
    return tensor.contiguous().view(integer)


def _close(report, what, actual, expected, rtol, atol) -> None:
    """Records a failure unless |actual - expected| <= atol + rtol * |expected| everywhere (float64)."""
    actual, expected = actual.double(), expected.double()
    if actual.shape != expected.shape:
        report["failures"].append(f"{what}: shape {list(actual.shape)}, expected {list(expected.shape)}")
        return
    if actual.numel() == 0:
        return
    report.setdefault("max_abs_diff", {})[what] = float((actual - expected).abs().nan_to_num(nan=math.inf).max())
    excess = (actual - expected).abs() - (atol + rtol * expected.abs())
    if not bool((excess <= 0).all()) or not bool(torch.isfinite(actual).all()):
        index = int(torch.nan_to_num(excess, nan=math.inf).reshape(-1).argmax())
        report["failures"].append(
            f"{what}: max |diff| {float((actual - expected).abs().nan_to_num(nan=math.inf).max()):.3g} "
            f"(rtol {rtol:.3g}, atol {atol:.3g}); e.g. flat index {index}: "
            f"{float(actual.reshape(-1)[index])} vs {float(expected.reshape(-1)[index])}"
        )


def _expect(report, what, condition) -> None:
    if not condition:
        report["failures"].append(what)


def _outcome(call) -> dict:
    """What a call did: {"returned": True} or the exception's type, op, argument and message."""
    try:
        call()
    except Exception as error:  # recorded for the parent's assertions
        return {
            "raised": type(error).__name__,
            "op": getattr(error, "op", None),
            "argument": getattr(error, "argument", None),
            "message": str(error),
        }
    return {"returned": True}


def _gather_bits(tensor, world):
    """Every rank's copy of `tensor` (bit patterns), gathered over the default group."""
    mine = tensor.contiguous()
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    return [_bits(t) for t in gathered]


# --- all_reduce: values, out of place and in place ---------------------------------------------------

ALL_REDUCE_SHAPES = (
    ("1x7168", (1, 7168), "contiguous"),
    ("64x512", (64, 512), "contiguous"),
    ("3d_2x3x512", (2, 3, 512), "contiguous"),
    ("rows_padded_9x1000", (9, 1000), "rows_padded"),
    ("transposed_48x40", (48, 40), "transposed"),
    ("empty_0x256", (0, 256), "contiguous"),
)


def _scenario_all_reduce(rank, world, report):
    kernels = _kernels()
    for case_index, (dtype, (name, shape, layout), inplace) in enumerate(
        (d, s, i) for d in DTYPES if d in DTYPES_UNDER_TEST for s in ALL_REDUCE_SHAPES for i in (False, True)
    ):
        what = f"all_reduce {dtype} {name} inplace={inplace}"
        x, base = _draw(shape, dtype, 1000 * case_index + rank, layout=layout)
        base_before = base.clone()
        outside = _outside_view(x, base)
        expected = sum(
            _draw(shape, dtype, 1000 * case_index + other, layout=layout)[0].double() for other in range(world)
        )
        out = kernels.all_reduce(x, inplace=inplace)
        rtol, atol = _sum_tolerance(dtype, world)
        _close(report, what, out, expected, rtol, atol)
        _expect(report, f"{what}: dtype {out.dtype}", out.dtype == x.dtype)
        _expect(
            report,
            f"{what}: writes outside x's view",
            torch.equal(_bits(base).reshape(-1)[outside], _bits(base_before).reshape(-1)[outside]),
        )
        if inplace:
            _expect(report, f"{what}: did not return x itself", out is x)
        else:
            _expect(report, f"{what}: returned x itself", out is not x)
            _expect(report, f"{what}: out not contiguous (strides {out.stride()})", out.is_contiguous())
            _expect(
                report,
                f"{what}: out shares x's storage",
                out.numel() == 0 or out.untyped_storage().data_ptr() != base.untyped_storage().data_ptr(),
            )
            _expect(report, f"{what}: x was modified", torch.equal(_bits(base), _bits(base_before)))
        # Every rank holds the same sum, bit for bit.
        copies = _gather_bits(out, world)
        _expect(report, f"{what}: ranks' sums differ", all(torch.equal(c, copies[0]) for c in copies))


# --- all_reduce_add_rms_norm ------------------------------------------------------------------------

FUSED_SHAPES = (
    # name, shape, layout of x and residual, weight: "dtype" / "fp32" / "strided", eps
    ("1x7168", (1, 7168), "contiguous", "dtype", 1e-6),
    ("64x512", (64, 512), "contiguous", "dtype", 1e-6),
    ("3d_2x3x256_weight_fp32", (2, 3, 256), "contiguous", "fp32", 1e-6),
    ("rows_padded_5x1000_strided_weight", (5, 1000), "rows_padded", "strided", 1e-6),
    ("eps_0.5", (4, 256), "contiguous", "dtype", 0.5),  # an eps of the order of mean(x**2): a dropped eps fails
)


def _oracle_rms_norm(residual, weight, eps):
    stored = residual.double()
    return stored * torch.rsqrt(stored.square().mean(dim=-1, keepdim=True) + eps) * weight.double()


def _scenario_fused(rank, world, report):
    kernels = _kernels()
    for case_index, (dtype, (name, shape, layout, weight_kind, eps)) in enumerate(
        (d, s) for d in DTYPES if d in DTYPES_UNDER_TEST for s in FUSED_SHAPES
    ):
        what = f"all_reduce_add_rms_norm {dtype} {name}"
        seed = 1000 * case_index
        x, x_base = _draw(shape, dtype, seed + rank, layout=layout)
        # The residual stream is replicated: the same on every rank (its own seed).
        residual, residual_base = _draw(shape, dtype, seed + 999, layout=layout)
        hidden = shape[-1]
        weight_generator = torch.Generator().manual_seed(seed + 998)
        weight_dtype = torch.float32 if weight_kind == "fp32" else DTYPES[dtype]
        step = 2 if weight_kind == "strided" else 1
        weight = (1.0 + 0.25 * torch.randn(hidden * step, generator=weight_generator)).to(weight_dtype)[::step]
        weight_before = weight.clone()
        residual_before = residual.clone()
        x_outside, residual_outside = _outside_view(x, x_base), _outside_view(residual, residual_base)
        x_base_before, residual_base_before = x_base.clone(), residual_base.clone()

        total = sum(_draw(shape, dtype, seed + other, layout=layout)[0].double() for other in range(world))
        expected_residual = (residual_before.double() + total).to(DTYPES[dtype])

        out = kernels.all_reduce_add_rms_norm(x, residual, weight, eps)
        _expect(
            report,
            f"{what}: did not return (x, residual) themselves",
            isinstance(out, tuple) and len(out) == 2 and out[0] is x and out[1] is residual,
        )
        rtol, atol = _sum_tolerance(dtype, world)
        # residual: the float64 sum added, rounded once (plus the transport's world - 1 roundings of the sum)
        _close(report, f"{what}: residual", residual, expected_residual, rtol + UNIT[dtype], atol + UNIT[dtype])
        # x: the norm of the stored residual (not of the unrounded sum, not of the residual before the add)
        norm_rtol, norm_atol = NORM_TOLERANCE[dtype]
        _close(
            report,
            f"{what}: x vs rms_norm(stored residual)",
            x,
            _oracle_rms_norm(residual, weight, eps),
            norm_rtol,
            norm_atol,
        )
        # x against the oracle's own residual: the norm tolerance widened by the sum's
        _close(
            report,
            f"{what}: x vs the float64 oracle",
            x,
            _oracle_rms_norm(expected_residual, weight, eps),
            norm_rtol + 2 * rtol,
            norm_atol + 2 * atol,
        )
        _expect(report, f"{what}: weight was modified", torch.equal(_bits(weight), _bits(weight_before)))
        for tensor_name, base, before, outside in (
            ("x", x_base, x_base_before, x_outside),
            ("residual", residual_base, residual_base_before, residual_outside),
        ):
            _expect(
                report,
                f"{what}: writes outside {tensor_name}'s view",
                torch.equal(_bits(base).reshape(-1)[outside], _bits(before).reshape(-1)[outside]),
            )
        # The residual stream stays replicated: bit for bit the same on every rank (and so does x).
        for tensor_name, tensor in (("residual", residual), ("x", x)):
            copies = _gather_bits(tensor, world)
            differing = [r for r, c in enumerate(copies) if not torch.equal(c, copies[0])]
            _expect(report, f"{what}: {tensor_name} differs from rank 0's on ranks {differing}", not differing)


# --- cross-rank agreement ---------------------------------------------------------------------------


def _scenario_mismatch(rank, world, report):
    """Each rank records the outcome of each mismatched call; then a matched call must still sum right."""
    kernels = _kernels()
    odd = world - 1 if world > 2 else 1
    outcomes = report["outcomes"] = {}

    def rows(odd_rank, extra=1):
        return 3 + (extra if rank == odd_rank else 0)

    # one more row on rank 1, in place: nothing may be written on any rank
    x = torch.full((rows(1), 64), float(rank + 1))
    x_before = x.clone()
    outcomes["shape_rank1"] = _outcome(lambda: kernels.all_reduce(x, inplace=True))
    outcomes["shape_rank1_x_unchanged"] = torch.equal(x, x_before)
    # another dtype on rank 1
    dtype = torch.float16 if rank == 1 else torch.float32
    outcomes["dtype_rank1"] = _outcome(lambda: kernels.all_reduce(torch.ones(3, 64, dtype=dtype)))
    # another hidden size on the last rank (world 4: ranks 1 and 2 agree with rank 0)
    hidden = 65 if rank == odd else 64
    outcomes["hidden_last_rank"] = _outcome(lambda: kernels.all_reduce(torch.ones(3, hidden)))
    # the fused op, one more row on rank 1
    n = rows(1)
    xf, rf, wf = torch.ones(n, 64), torch.ones(n, 64), torch.ones(64)
    outcomes["fused_shape_rank1"] = _outcome(lambda: kernels.all_reduce_add_rms_norm(xf, rf, wf))
    outcomes["fused_residual_unchanged"] = torch.equal(rf, torch.ones(n, 64))
    # another op on rank 1 (same x)
    if rank == 1:
        outcomes["op_rank1"] = _outcome(
            lambda: kernels.all_reduce_add_rms_norm(torch.ones(3, 64), torch.ones(3, 64), torch.ones(64))
        )
    else:
        outcomes["op_rank1"] = _outcome(lambda: kernels.all_reduce(torch.ones(3, 64)))
    # After all that, the group still works: a matched call sums right (no collective left half-done).
    out = kernels.all_reduce(torch.full((2, 64), float(rank + 1)))
    _close(report, "matched all_reduce after the mismatches", out, torch.full((2, 64), world * (world + 1) / 2.0), 0, 0)


# --- the group argument -----------------------------------------------------------------------------


def _groups_before_init(rank, world, report):
    kernels = _kernels()
    report["outcomes"] = {
        "all_reduce_uninitialised": _outcome(lambda: kernels.all_reduce(torch.ones(2, 8))),
        "fused_uninitialised": _outcome(
            lambda: kernels.all_reduce_add_rms_norm(torch.ones(2, 8), torch.ones(2, 8), torch.ones(8))
        ),
    }


def _scenario_groups(rank, world, report):
    """World 4: the default group as None, as the WORLD object, as its name, and a new_group of every rank by
    name; subgroups [0, 1] and [2, 3] reducing side by side, by object and by name; ranks 2 and 3 calling
    with [0, 1]'s group (object and name) and with a group of the wrong type."""
    kernels = _kernels()
    outcomes = report["outcomes"]

    def x_of(r):
        return torch.randn(4, 96, generator=torch.Generator().manual_seed(77 + r))

    def sum_of(ranks):
        return sum(x_of(r).double() for r in ranks)

    everyone = dist.new_group(list(range(world)))
    low = dist.new_group([0, 1])
    high = dist.new_group([2, 3])
    names = [None] * world
    dist.all_gather_object(names, low.group_name if rank < 2 else None)
    low_name = names[0]

    world_group = dist.group.WORLD
    forms = {
        "None": None,
        "WORLD": world_group,
        "WORLD.group_name": world_group.group_name,
        "new_group(all)": everyone,
        "new_group(all).group_name": everyone.group_name,
    }
    results = {}
    for form, group in forms.items():
        results[form] = kernels.all_reduce(x_of(rank), group=group)
        _close(report, f"all_reduce group={form}", results[form], sum_of(range(world)), 1e-5, 1e-5)
        residual, weight = torch.ones(4, 96), torch.ones(96)
        kernels.all_reduce_add_rms_norm(x_of(rank), residual, weight, group=group)
        _close(
            report, f"all_reduce_add_rms_norm group={form}: residual", residual, 1 + sum_of(range(world)), 1e-5, 1e-5
        )
    for form, result in results.items():
        _expect(report, f"group={form} differs from group=None", torch.equal(result, results["None"]))

    mine = low if rank < 2 else high
    members = (0, 1) if rank < 2 else (2, 3)
    by_object = kernels.all_reduce(x_of(rank), group=mine)
    _close(report, f"all_reduce over the subgroup {members} (object)", by_object, sum_of(members), 1e-5, 1e-5)
    by_name = kernels.all_reduce(x_of(rank), group=mine.group_name)
    _close(report, f"all_reduce over the subgroup {members} (name)", by_name, sum_of(members), 1e-5, 1e-5)
    _expect(report, f"subgroup {members}: name and object differ", torch.equal(by_object, by_name))
    residual = torch.zeros(4, 96)
    kernels.all_reduce_add_rms_norm(x_of(rank), residual, torch.ones(96), group=mine.group_name)
    _close(
        report, f"all_reduce_add_rms_norm over the subgroup {members}: residual", residual, sum_of(members), 1e-5, 1e-5
    )
    if rank >= 2:
        # `low` on these ranks is what new_group returns to a non-member
        outcomes["non_member_object"] = _outcome(lambda: kernels.all_reduce(x_of(rank), group=low))
        outcomes["non_member_name"] = _outcome(lambda: kernels.all_reduce(x_of(rank), group=low_name))
        outcomes["non_member_fused"] = _outcome(
            lambda: kernels.all_reduce_add_rms_norm(x_of(rank), torch.ones(4, 96), torch.ones(96), group=low_name)
        )
    outcomes["unknown_name"] = _outcome(lambda: kernels.all_reduce(x_of(rank), group="no-such-group"))
    outcomes["wrong_type"] = _outcome(lambda: kernels.all_reduce(x_of(rank), group=3))
    dist.barrier()


_scenario_groups.before_init = _groups_before_init


# --- expert parallelism: ep_dispatch then ep_combine ------------------------------------------------

#: name, tokens on rank r (a function of r and the world), hidden, top_k, experts per rank, how ids are drawn,
#: x's layout. Ids: "random" (distinct experts per token, some on the same rank), "padded" (every third slot
#: -1, token 1 idle), "one_rank" (every id on the last rank), "duplicates" (token 0 names one expert twice).
EP_CASES = (
    ("random_h256", lambda r, w: 10 + 3 * r, 256, 4, 4, "random", "contiguous"),
    ("rank0_empty_h1000", lambda r, w: 0 if r == 0 else 7 + r, 1000, 3, 2, "random", "contiguous"),
    ("all_to_last_rank_h7", lambda r, w: 5 + r, 7, 2, 2, "one_rank", "contiguous"),
    ("padded_idle_rows_padded", lambda r, w: 9 + r, 96, 4, 3, "padded", "rows_padded"),
    ("duplicates_transposed", lambda r, w: 6, 40, 2, 2, "duplicates", "transposed"),
)


def _ep_inputs(case, dtype, rank, world, seed):
    """Rank `rank`'s (x, topk_ids, topk_weights, x_scale) for an EP case: every rank can rebuild any rank's."""
    name, tokens_of, hidden, top_k, per_rank, ids_kind, layout = case
    tokens, experts = tokens_of(rank, world), per_rank * world
    generator = torch.Generator().manual_seed(seed + rank)
    ids = torch.rand((tokens, experts), generator=generator).argsort(dim=1)[:, :top_k].contiguous()
    if ids_kind == "one_rank":
        ids = torch.rand((tokens, per_rank), generator=generator).argsort(dim=1)[:, :top_k] + (world - 1) * per_rank
    elif ids_kind == "padded":
        ids.view(-1)[::3] = -1
        if tokens > 1:
            ids[1] = -1
    elif ids_kind == "duplicates" and tokens:
        ids[0, 1] = ids[0, 0]
    weights = torch.rand((tokens, top_k), generator=generator)
    scale = None
    if dtype == "fp8":
        x = (torch.randn((tokens, hidden), generator=generator) * 4).to(torch.float8_e4m3fn)
        scale = torch.rand((tokens, hidden // 128), generator=generator) + 0.5
        return x, ids, weights, scale
    x, _ = _draw((tokens, hidden), dtype, seed + 100 + rank, layout=layout)
    return x, ids, weights, scale


def _ep_expected(case, dtype, me, world, seed):
    """What rank `me` receives: (rows as float64 per source, scales, local ids, weights, tokens per expert,
    (source, token) per row) from every rank's inputs, in source-rank then token order."""
    per_rank = case[4]
    experts = per_rank * world
    rows, scales, ids, weights, origin = [], [], [], [], []
    for source in range(world):
        x, topk_ids, topk_weights, scale = _ep_inputs(case, dtype, source, world, seed)
        mine = (topk_ids >= me * per_rank) & (topk_ids < (me + 1) * per_rank) & (topk_ids < experts)
        for token in torch.nonzero(mine.any(dim=1)).reshape(-1).tolist():
            rows.append(x[token])
            scales.append(None if scale is None else scale[token])
            ids.append(torch.where(mine[token], topk_ids[token] - me * per_rank, -1))
            weights.append(torch.where(mine[token], topk_weights[token], 0.0))
            origin.append((source, token))
    top_k, hidden = case[3], case[2]
    x_dtype = torch.float8_e4m3fn if dtype == "fp8" else DTYPES[dtype]
    stacked_ids = torch.stack(ids) if ids else torch.empty((0, top_k), dtype=torch.int64)
    per_expert = torch.tensor([int((stacked_ids == e).any(dim=1).sum()) for e in range(per_rank)], dtype=torch.int32)
    return (
        torch.stack(rows) if rows else torch.empty((0, hidden), dtype=x_dtype),
        torch.stack(scales) if scales and scales[0] is not None else None,
        stacked_ids,
        torch.stack(weights) if weights else torch.empty((0, top_k)),
        per_expert,
        origin,
    )


def _ep_result_rows(received_x, rank, dtype):
    """What rank `rank`'s experts return for its received rows (any function of the row and the rank works:
    combine must add each rank's own back to the token's rank)."""
    return (received_x.double() * (rank + 1) - 0.5 * rank).to(DTYPES[dtype])


def _scenario_ep(rank, world, report):
    kernels = _kernels()
    dtypes = [d for d in ("fp32", "fp16", "bf16", "fp8") if d in DTYPES_UNDER_TEST]
    cases = [c for c in EP_CASES if not EP_CASES_UNDER_TEST or c[0] in EP_CASES_UNDER_TEST.split(",")]
    for case_index, (dtype, case) in enumerate((d, c) for d in dtypes for c in cases):
        if dtype == "fp8" and case[2] % 128:
            continue
        name, tokens_of, hidden, top_k, per_rank = case[:5]
        what = f"ep {dtype} {name}"
        seed = 1000 * case_index
        experts = per_rank * world
        x, ids, weights, scale = _ep_inputs(case, dtype, rank, world, seed)
        before = [t.clone() for t in (x, ids, weights) if t is not None]
        result = kernels.ep_dispatch(x, ids, weights, experts, x_scale=scale)
        want_x, want_scale, want_ids, want_weights, want_counts, origin = _ep_expected(case, dtype, rank, world, seed)
        _expect(report, f"{what}: x {result.x.dtype} {list(result.x.shape)}", result.x.dtype == x.dtype)
        _expect(
            report,
            f"{what}: x rows differ (bitwise)",
            result.x.shape == want_x.shape and torch.equal(_bits(result.x), _bits(want_x)),
        )
        _expect(
            report,
            f"{what}: x_scale",
            (result.x_scale is None) == (want_scale is None)
            and (want_scale is None or torch.equal(result.x_scale, want_scale)),
        )
        _expect(
            report,
            f"{what}: topk_ids {result.topk_ids.tolist()} vs {want_ids.tolist()}",
            result.topk_ids.dtype == ids.dtype and torch.equal(result.topk_ids.long(), want_ids),
        )
        _expect(report, f"{what}: topk_weights", torch.equal(result.topk_weights, want_weights))
        _expect(
            report,
            f"{what}: tokens_per_expert {result.tokens_per_expert.tolist()} vs {want_counts.tolist()}",
            torch.equal(result.tokens_per_expert, want_counts),
        )
        owners = torch.where(ids >= 0, ids // per_rank, world)
        want_in_rank = torch.stack([(owners == r).any(dim=1) for r in range(world)], dim=1).reshape(-1, world)
        _expect(report, f"{what}: handle.token_in_rank", torch.equal(result.handle.token_in_rank, want_in_rank))
        _expect(
            report,
            f"{what}: inputs modified",
            all(
                torch.equal(_bits(a), _bits(b)) if a.is_floating_point() else torch.equal(a, b)
                for a, b in zip([t for t in (x, ids, weights) if t is not None], before)
            ),
        )
        if dtype == "fp8":
            continue  # combine takes float results
        # combine: each rank returns its own function of its rows; a token gets the sum over the ranks it went to
        y = _ep_result_rows(result.x, rank, dtype)
        out = kernels.ep_combine(y, result.handle)
        tokens = x.shape[0]
        expected = torch.zeros((tokens, hidden), dtype=torch.float64)
        for other in range(world):
            rows_there = _ep_expected(case, dtype, other, world, seed)[0]
            came_from = _ep_expected(case, dtype, other, world, seed)[5]
            values = _ep_result_rows(rows_there, other, dtype).double()
            for row, (source, token) in enumerate(came_from):
                if source == rank:
                    expected[token] += values[row]
        unit = UNIT[dtype]
        _close(report, f"{what}: combine", out, expected.to(DTYPES[dtype]), unit, unit)
        _expect(report, f"{what}: combine dtype {out.dtype}", out.dtype == y.dtype)


def _scenario_ep_errors(rank, world, report):
    """Each rank records the outcome of each bad call (one rank's own arguments failing, a mismatch, a group
    of the wrong size for the experts); then a matched dispatch and combine must still work."""
    kernels = _kernels()
    outcomes = report["outcomes"] = {}
    x, weights = torch.ones(4, 64), torch.rand(4, 2)
    ids = torch.tensor([[0, 1], [2, 3], [1, 2], [3, 0]])
    past = ids + (100 if rank == 1 else 0)
    outcomes["ids_past_rank1"] = _outcome(lambda: kernels.ep_dispatch(x, past, weights, 4 * world))
    hidden = 65 if rank == world - 1 else 64
    outcomes["hidden_last_rank"] = _outcome(lambda: kernels.ep_dispatch(torch.ones(4, hidden), ids, weights, 4 * world))
    outcomes["experts_not_divisible"] = _outcome(lambda: kernels.ep_dispatch(x, ids, weights, 4 * world + 1))
    result = kernels.ep_dispatch(x * (rank + 1), ids, weights, 4 * world)
    extra = torch.cat([result.x, x[:1]]) if rank == 1 else result.x  # one row more than rank 1 received
    outcomes["combine_rows_rank1"] = _outcome(lambda: kernels.ep_combine(extra, result.handle))
    out = kernels.ep_combine(result.x, result.handle)
    # ids 0..3 all live on rank 0: every token went there once and comes back as itself
    _close(report, "matched dispatch and combine after the errors", out, x * (rank + 1), 0, 0)


# --- the DeepEP rows' glue, over a stand-in for deep_ep ---------------------------------------------


class _FakeDeepEpBuffer:
    """deep_ep.Buffer's intranode normal-mode interface as its docstrings state it (layout; dispatch returning
    local ids, zeroed weights, and the handle (rank_prefix_matrix [W, W]: row i = the tokens ranks 0..i send
    to each rank, ..., is_token_in_rank, ...); combine summing without weights), computed with the
    reference rows over gloo. It checks the adapter's plumbing (the handle it builds, the counts it
    derives), not DeepEP."""

    def __init__(self, group, num_nvl_bytes=0, num_rdma_bytes=0):
        self.group = group

    @staticmethod
    def get_dispatch_config(ranks):
        return _FakeConfig()

    get_combine_config = get_dispatch_config

    def get_dispatch_layout(self, topk_idx, num_experts):
        world = self.group.size()
        owner = torch.where(topk_idx >= 0, topk_idx // (num_experts // world), world)
        in_rank = torch.zeros((topk_idx.shape[0], world + 1), dtype=torch.bool).scatter_(1, owner, True)[:, :world]
        per_expert = torch.stack([(topk_idx == e).any(dim=1).sum() for e in range(num_experts)]).int()
        return in_rank.sum(dim=0).int(), None, per_expert, in_rank, None

    def dispatch(self, x, num_tokens_per_rank, is_token_in_rank, num_tokens_per_expert, topk_idx, topk_weights):
        from rapid_llm.kernels.ops.comm import reference

        rows, scale = x if isinstance(x, tuple) else (x, None)
        assert topk_idx.dtype == torch.int64 and rows.is_contiguous()
        experts = num_tokens_per_expert.shape[0]
        sent = reference.ep_dispatch(rows, topk_idx, topk_weights, experts, self.group, scale)
        counts = [torch.empty_like(num_tokens_per_rank) for _ in range(self.group.size())]
        dist.all_gather(counts, num_tokens_per_rank, group=self.group)
        prefix = torch.stack(counts).cumsum(dim=0).int()
        empty = torch.zeros(1, dtype=torch.int32)
        handle = (prefix, empty, empty, empty, is_token_in_rank, empty)
        received = sent.x if scale is None else (sent.x, sent.x_scale)
        return received, sent.topk_ids, sent.topk_weights, [], handle, None

    def combine(self, y, handle):
        from rapid_llm.kernels.collectives import EpHandle
        from rapid_llm.kernels.ops.comm import reference

        prefix = handle[0][:, dist.get_rank(self.group)].long()
        recv_counts = torch.diff(prefix, prepend=prefix.new_zeros(1))
        return reference.ep_combine(y, EpHandle(handle[4], recv_counts), self.group), None, None


class _FakeConfig:
    def get_nvl_buffer_size_hint(self, hidden_bytes, ranks):
        return hidden_bytes * ranks


def _scenario_deep_ep_glue(rank, world, report):
    """The deep_ep rows' adapters (called directly: the stand-in is no installed DeepEP) against the reference
    rows, bitwise: every output of dispatch (fp8 with scales and bf16), the handle's shared layout, and
    combine."""
    import sys
    import types

    from rapid_llm.kernels.ops.comm import reference

    sys.modules["deep_ep"] = types.SimpleNamespace(Buffer=_FakeDeepEpBuffer)
    from rapid_llm.kernels.backends.deep_ep import ep as adapter

    for dtype, case in (("bf16", EP_CASES[0]), ("fp8", EP_CASES[3]), ("bf16", EP_CASES[1])):
        if dtype == "fp8" and case[2] % 128:
            case = ("fp8_h256", case[1], 256, *case[3:])
        what = f"deep_ep glue {dtype} {case[0]}"
        x, ids, weights, scale = _ep_inputs(case, dtype, rank, world, 5)
        experts = case[4] * world
        got = adapter.ep_dispatch(x, ids.int(), weights, experts, None, scale)
        want = reference.ep_dispatch(x, ids.int(), weights, experts, None, scale)
        for name, a, b in zip(
            ("x", "x_scale", "topk_ids", "topk_weights", "tokens_per_expert", "token_in_rank", "recv_counts"),
            got.compared(),
            want.compared(),
        ):
            _expect(
                report,
                f"{what}: {name} differs",
                a.dtype == b.dtype
                and torch.equal(_bits(a) if a.is_floating_point() else a, _bits(b) if b.is_floating_point() else b),
            )
        _expect(report, f"{what}: handle", got.handle.library_name == "deep_ep" and len(got.handle.library) == 6)
        if dtype == "fp8":
            continue
        y = _ep_result_rows(got.x, rank, dtype)
        _expect(
            report,
            f"{what}: combine differs",
            torch.equal(adapter.ep_combine(y, got.handle), reference.ep_combine(y, want.handle)),
        )


# --- a rank failing before the collective -----------------------------------------------------------


def _scenario_rank_raises(rank, world, report, stay_s=0.0, how="never_calls", op="all_reduce"):
    """Rank 1 either fails its call's local check (how="check": an int32 x, or an expert id past the count)
    or raises before calling at all (how="never_calls": the engine's own code failed); then it either exits
    (stay_s 0: its sockets close) or stays alive `stay_s` seconds (the others' collective must time out)."""
    kernels = _kernels()
    started = time.monotonic()
    x, ids, weights = torch.ones(4, 64), torch.tensor([[0, 1]] * 4), torch.rand(4, 2)
    if rank == 1 and how == "check":
        x, ids = (x.int(), ids) if op == "all_reduce" else (x, ids + 1000)

    def call():
        if rank == 1 and how == "never_calls":
            raise RuntimeError("rank 1 failed before its collective")
        if op == "all_reduce":
            return kernels.all_reduce(x)
        return kernels.ep_combine(*(lambda r: (r.x, r.handle))(kernels.ep_dispatch(x, ids, weights, 2 * world)))

    report["outcome"] = _outcome(call)
    if rank == 1:
        # staying: until every other rank has reported (its call failed), at most stay_s
        others = [_OUT_DIR / f"rank{r}.json" for r in range(world) if r != 1]
        while time.monotonic() - started < stay_s and not all(path.exists() for path in others):
            time.sleep(0.05)
    report["seconds"] = time.monotonic() - started


SCENARIOS = {
    "all_reduce": _scenario_all_reduce,
    "fused": _scenario_fused,
    "mismatch": _scenario_mismatch,
    "groups": _scenario_groups,
    "rank_raises": _scenario_rank_raises,
    "ep": _scenario_ep,
    "ep_errors": _scenario_ep_errors,
    "deep_ep_glue": _scenario_deep_ep_glue,
}


# ---------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("world", [2, 4])
def test_all_reduce_sums_over_ranks(tmp_path, world):
    """all_reduce equals the float64 sum of every rank's own input (fp32 1e-5; fp16/bf16 within world - 1
    roundings), in fp32/fp16/bf16, at [1, 7168], [64, 512], a 3-D x, a row-padded and a transposed x and an
    empty batch, out of place and in place. Catches: a sum over fewer ranks (or of rank 0's input only), a
    mean instead of a sum, a sum in a narrower type, an out-of-place call writing x or returning it (or a
    view of its storage, or a non-contiguous result), an in-place call returning a new tensor or leaving a
    strided x unwritten (summed through a copy never copied back), writes past a strided view's rows, ranks
    ending with different bits, and an empty batch failing in the transport."""
    _assert_no_failures(_run_world(tmp_path, "all_reduce", world))


@pytest.mark.parametrize("world", [2, 4])
def test_all_reduce_add_rms_norm_over_ranks(tmp_path, world):
    """all_reduce_add_rms_norm: residual equals the float64 oracle (the sum of every rank's x added to the
    replicated residual, rounded once to its dtype) and x equals the float64 RMSNorm of the stored residual,
    for fp32/fp16/bf16, with an fp32 weight, a strided weight, row-padded x and residual and a large eps; the
    same two objects come back, the weight is untouched, and residual and x are bitwise the same on every
    rank afterwards. Catches: the norm before the reduction (of the local partial sum), the norm of the old
    residual, a residual not reduced at all, a dropped eps or weight, a residual that diverges across ranks
    (the replicated stream silently splitting), and new tensors returned instead of writing in place."""
    _assert_no_failures(_run_world(tmp_path, "fused", world))


def _assert_raised_on_x(outcome, op, rank_named, where):
    assert outcome.get("raised") == "OpInputError", f"{where}: expected OpInputError, got {outcome}"
    assert outcome["op"] == op and outcome["argument"] == "x", f"{where}: {outcome}"
    assert f"on rank {rank_named}" in outcome["message"], f"{where}: the message names no rank {rank_named}: {outcome}"


@pytest.mark.parametrize("world", [2, 4])
def test_mismatched_calls_raise_on_every_rank(tmp_path, world):
    """A rank calling with one more row, another dtype, another hidden size, or the other comm op makes every
    rank raise OpInputError on "x" naming the odd rank ("on rank 1"; the last rank when it is the odd one), in
    bounded time; an in-place x and the fused op's residual are left unwritten; and the group still works
    afterwards (a matched all_reduce sums right). Catches: a collective of mismatched sizes hanging or
    reducing garbage, an error raised on the odd rank only (the others then hang in the next collective), a
    message that does not say which rank differs, and a check that leaves a collective half-done."""
    reports = _run_world(tmp_path, "mismatch", world)
    _assert_no_failures(reports)
    odd = world - 1 if world > 2 else 1
    for report in reports:
        where = f"world {world}, rank {report['rank']}"
        outcomes = report["outcomes"]
        _assert_raised_on_x(outcomes["shape_rank1"], ALL_REDUCE, 1, f"{where}, one more row on rank 1")
        assert outcomes["shape_rank1_x_unchanged"], f"{where}: the in-place x was written before the error"
        _assert_raised_on_x(outcomes["dtype_rank1"], ALL_REDUCE, 1, f"{where}, fp16 on rank 1")
        _assert_raised_on_x(outcomes["hidden_last_rank"], ALL_REDUCE, odd, f"{where}, hidden 65 on rank {odd}")
        _assert_raised_on_x(outcomes["fused_shape_rank1"], FUSED, 1, f"{where}, fused op, one more row on rank 1")
        assert outcomes["fused_residual_unchanged"], f"{where}: the fused op wrote residual before the error"
        op = FUSED if report["rank"] == 1 else ALL_REDUCE
        _assert_raised_on_x(outcomes["op_rank1"], op, 1, f"{where}, the other op on rank 1")


def test_group_forms_and_subgroups(tmp_path):
    """World 4: group=None, the WORLD object, its group_name and a new_group of every rank (object and name)
    give the same sum, for both ops; subgroups [0, 1] and [2, 3] reduce among themselves side by side, by
    object and by name; ranks 2 and 3 calling with [0, 1]'s group (what new_group returned them, or its name)
    get OpInputError on "group", as do an unknown name, a group of the wrong type, and a call before
    init_process_group. Catches: a name resolved to the wrong group (or not at all), a subgroup reduced over
    the whole world, a non-member entering a collective it has no part in (it would hang or corrupt), and an
    uninitialised process group failing inside torch rather than with the op's error."""
    world = 4
    reports = _run_world(tmp_path, "groups", world)
    _assert_no_failures(reports)
    for report in reports:
        rank, outcomes = report["rank"], report["outcomes"]
        expected = {
            "all_reduce_uninitialised": ALL_REDUCE,
            "fused_uninitialised": FUSED,
            "unknown_name": ALL_REDUCE,
            "wrong_type": ALL_REDUCE,
        }
        if rank >= 2:
            expected.update(non_member_object=ALL_REDUCE, non_member_name=ALL_REDUCE, non_member_fused=FUSED)
        for key, op in expected.items():
            outcome = outcomes[key]
            assert outcome.get("raised") == "OpInputError", f"rank {rank}, {key}: expected OpInputError, got {outcome}"
            assert (outcome["op"], outcome["argument"]) == (op, "group"), f"rank {rank}, {key}: {outcome}"
        if rank >= 2:  # new_group's value outside the group: named as such, not as a wrong type
            assert "a group without this process" in outcomes["non_member_object"]["message"], outcomes


@pytest.mark.parametrize("op", ["all_reduce", "ep"])
@pytest.mark.parametrize(
    "world,stay_s", [(2, 0.0), (4, 0.0), (2, 30.0)], ids=["world2-rank-exits", "world4-rank-exits", "world2-rank-stays"]
)
def test_rank_raising_before_the_collective(tmp_path, world, stay_s, op):
    """Rank 1 raises before its collective (its own code failed) and never joins. The other ranks must end
    with an exception, not hang: at once when rank 1's process exits (its connections close), and within the
    process group's timeout (5 s here) when it stays alive. For all_reduce and for ep_dispatch + ep_combine.
    Catches: a collective (or the agreement check's all_gather) waiting without a bound, and a rank
    reporting success for a sum or an exchange it never completed."""
    if ON_GPU:
        pytest.skip("gloo only: NCCL's watchdog ends a process whose collective timed out (no exception to see)")
    pg_timeout_s = 5
    started = time.monotonic()
    reports = _run_world(tmp_path, "rank_raises", world, pg_timeout_s=pg_timeout_s, stay_s=stay_s, op=op)
    elapsed = time.monotonic() - started
    assert elapsed < JOIN_TIMEOUT_S
    assert reports[1]["outcome"].get("raised") == "RuntimeError", f"rank 1: {reports[1]['outcome']}"
    for report in reports:
        if report["rank"] == 1:
            continue
        outcome = report["outcome"]
        assert "raised" in outcome, f"rank {report['rank']} returned from a collective rank 1 never joined"
        assert outcome["message"], f"rank {report['rank']}: an exception without a message: {outcome}"
        # bounded by the process group's timeout (plus slack for a loaded machine), not by the join deadline
        limit = pg_timeout_s + 20
        assert report["seconds"] < limit, f"rank {report['rank']} took {report['seconds']:.1f} s to fail: {outcome}"


@pytest.mark.parametrize("op", ["all_reduce", "ep"])
def test_rank_failing_its_check_makes_every_rank_raise(tmp_path, op):
    """Rank 1's call fails its own check (all_reduce: an int32 x; ep_dispatch: an expert id past the count),
    rank 1 staying alive: every rank raises OpInputError at once (well inside the process group's timeout),
    rank 1 naming its argument and the others naming rank 1. Catches: the checked rank raising alone while
    its peers wait in the collective for the timeout (or forever under NCCL's defaults)."""
    world, pg_timeout_s = 2, 30
    reports = _run_world(tmp_path, "rank_raises", world, pg_timeout_s=pg_timeout_s, stay_s=30.0, how="check", op=op)
    failing = reports[1]["outcome"]
    argument = "x" if op == "all_reduce" else "topk_ids"
    assert failing.get("raised") == "OpInputError" and failing["argument"] == argument, f"rank 1: {failing}"
    other = reports[0]["outcome"]
    assert other.get("raised") == "OpInputError" and other["argument"] == "group", f"rank 0: {other}"
    assert "rank 1" in other["message"], other
    assert reports[0]["seconds"] < pg_timeout_s / 2, f"rank 0 took {reports[0]['seconds']:.1f} s: a timeout"


@pytest.mark.parametrize("world", [2, 4])
def test_ep_dispatch_and_combine_over_ranks(tmp_path, world):
    """ep_dispatch delivers, on every rank, exactly the rows the float64 oracle built from every rank's inputs
    says (bitwise, in source-rank then token order; scales with fp8), with local ids (-1 for other ranks'
    experts), weights zeroed with them, per-expert counts and the handle's token_in_rank; ep_combine adds
    each rank's results back to the token's rank (within one rounding of the float64 sum). In fp32, fp16,
    bf16 and fp8 with per-128 scales; token counts differing per rank, a rank with no tokens, every id on the
    last rank, -1 slots and an idle token, a token naming one expert twice, hidden 7, 96, 256 and 1000, and
    strided (row-padded, transposed) x. Catches: a token sent twice to one rank (one per expert), rows out of
    order, ids left global or weights of other ranks' slots kept, combine adding into the wrong token or
    dropping a rank's share, a rank with zero tokens failing the exchange, and inputs written."""
    _assert_no_failures(_run_world(tmp_path, "ep", world))


@pytest.mark.parametrize("world", [2, 4])
def test_ep_bad_calls_raise_on_every_rank(tmp_path, world):
    """Ids past the expert count on rank 1 make rank 1 raise on "topk_ids" and every other rank raise on
    "group" naming rank 1 (none enters the exchange); another hidden size on the last rank raises on "x" on
    every rank naming it; experts that do not divide over the group raise on "num_experts" everywhere; a
    combine with the wrong row count on rank 1 raises on "y" there and names rank 1 elsewhere; afterwards a
    matched dispatch and combine still work. Catches: one rank raising while the others hang in the
    exchange, a message that names no rank, and a bad call leaving the group unusable."""
    reports = _run_world(tmp_path, "ep_errors", world)
    _assert_no_failures(reports)
    for report in reports:
        rank, outcomes = report["rank"], report["outcomes"]
        expectations = {
            "ids_past_rank1": ("topk_ids" if rank == 1 else "group", "rank 1" if rank != 1 else "at ["),
            "hidden_last_rank": ("x", f"on rank {world - 1}"),
            "experts_not_divisible": ("num_experts", f"{world} ranks"),
            "combine_rows_rank1": ("y" if rank == 1 else "group", "rank 1" if rank != 1 else "rows"),
        }
        for key, (argument, phrase) in expectations.items():
            outcome = outcomes[key]
            assert outcome.get("raised") == "OpInputError", f"rank {rank}, {key}: expected OpInputError, got {outcome}"
            assert outcome["argument"] == argument, f"rank {rank}, {key}: {outcome}"
            assert phrase in outcome["message"], f"rank {rank}, {key}: no {phrase!r} in {outcome['message']}"


@pytest.mark.parametrize("world", [2, 4])
def test_deep_ep_adapter_glue_matches_the_reference(tmp_path, world):
    """The deep_ep rows' adapters over a stand-in Buffer that follows DeepEP's documented interface (the
    reference rows underneath): the dispatch outputs, the handle's token_in_rank and the recv_counts the
    adapter derives from rank_prefix_matrix, and combine, all bitwise the reference's. Catches the adapter
    reading rank_prefix_matrix along the wrong axis (counts of what this rank sends instead of receives),
    ids left int64 where the caller passed int32, fp8 scales dropped, and a handle that combine cannot use.
    DeepEP itself runs on two GPUs only (perf/test_comm_bench.py and the GPU parity run)."""
    if ON_GPU:
        pytest.skip("the stand-in is for the CPU: on GPUs the deep_ep rows run for real (RAPID_LLM_FORCE)")
    _assert_no_failures(_run_world(tmp_path, "deep_ep_glue", world))


@pytest.mark.parametrize("world", [2, 4])
def test_native_ep_rows_over_ranks(tmp_path, monkeypatch, world):
    """The EP scenario (every dtype and case of test_ep_dispatch_and_combine_over_ranks) with native/ep_dispatch
    and native/ep_combine forced on every rank (the Triton pack, unpack and sum kernels; the CPU interpreter
    here). Catches a packed row's sections overlapping or misaligned, ids localised for the wrong rank,
    per-expert counts counting a repeated expert twice, rows unpacked out of order, and a combine summing
    the wrong rows."""
    monkeypatch.setenv("RAPID_LLM_FORCE", "comm.ep_dispatch=native/ep_dispatch;comm.ep_combine=native/ep_combine")
    if not ON_GPU:
        monkeypatch.setenv("RAPID_LLM_TRITON_INTERPRET", "1")
    _assert_no_failures(_run_world(tmp_path, "ep", world))
