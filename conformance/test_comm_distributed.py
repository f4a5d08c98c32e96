"""The comm family across real ranks: gloo on the CPU, 2 and 4 processes on the loopback interface.

The parity suite (conformance/cases/comm.py) runs the ops over a one-rank group, where the sum is the input;
the reductions themselves, the cross-rank agreement check and the group argument's forms run here. Each test
spawns one world ("spawn" start method: every worker imports torch and the library fresh) whose ranks meet
at tcp://127.0.0.1:<a free port>, runs a scenario of several checks in it (one world per test keeps the
file fast: a spawn costs seconds), and reports back as JSON files in tmp_path (nothing is parsed from stdout).

Every wait is bounded: the process group's timeout (PG_TIMEOUT_S) bounds each collective, the world's
workers are joined against one deadline (JOIN_TIMEOUT_S) and a worker still alive at the deadline is killed
and named in the failure; every worker destroys its process group in a finally.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import socket
import time
import traceback
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

PG_TIMEOUT_S = 30
JOIN_TIMEOUT_S = 120
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


def _sum_tolerance(dtype: str, world: int) -> tuple[float, float]:
    """(rtol, atol) of a sum over `world` ranks against the float64 sum: world - 1 roundings of the dtype."""
    if dtype == "fp32":
        return 1e-5, 1e-5
    return UNIT[dtype] * world, UNIT[dtype] * world


# ---------------------------------------------------------------------------
# Spawning a world (the parent side)
# ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _run_world(tmp_path: Path, scenario: str, world: int, *, pg_timeout_s=PG_TIMEOUT_S, **options) -> list[dict]:
    """Run SCENARIOS[scenario] on `world` spawned gloo ranks; each rank's report (a dict), by rank.

    Fails the test naming every rank still alive at the join deadline (killed first), every rank that exited
    without reporting (with its exit code), and every rank whose scenario raised (with its traceback)."""
    context = multiprocessing.get_context("spawn")
    out_dir = tmp_path / f"{scenario}-world{world}"
    out_dir.mkdir()
    port = _free_port()
    workers = [
        context.Process(
            target=_worker,
            args=(scenario, rank, world, port, pg_timeout_s, str(out_dir), options),
            name=f"{scenario}-rank{rank}",
            daemon=True,
        )
        for rank in range(world)
    ]
    started = time.monotonic()
    try:
        for worker in workers:
            worker.start()
        deadline = started + JOIN_TIMEOUT_S
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
    finally:
        hung = [(rank, worker.pid) for rank, worker in enumerate(workers) if worker.is_alive()]
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join(10)
    if hung:
        names = ", ".join(f"rank {rank} (pid {pid})" for rank, pid in hung)
        pytest.fail(f"{scenario}, world {world}: {names} still running after {JOIN_TIMEOUT_S} s (a hang): killed")
    reports, problems = [], []
    for rank, worker in enumerate(workers):
        path = out_dir / f"rank{rank}.json"
        if not path.exists():
            problems.append(f"rank {rank} exited with code {worker.exitcode} without reporting")
            continue
        report = json.loads(path.read_text())
        if report.get("crash"):
            problems.append(f"rank {rank} raised:\n{report['crash']}")
        reports.append(report)
    if problems:
        pytest.fail(f"{scenario}, world {world}:\n" + "\n".join(problems))
    return reports


def _assert_no_failures(reports: list[dict]) -> None:
    failures = [f"rank {report['rank']}: {line}" for report in reports for line in report["failures"]]
    assert not failures, f"{len(failures)} failed checks:\n" + "\n".join(failures[:40])


# ---------------------------------------------------------------------------
# The worker side
# ---------------------------------------------------------------------------


#: The world's report folder, in a worker process (set by _worker).
_OUT_DIR = None


def _worker(scenario, rank, world, port, pg_timeout_s, out_dir, options):
    """One rank: init gloo over the loopback, run the scenario, write rank<r>.json (also when it raised)."""
    report = {"rank": rank, "failures": []}
    global _OUT_DIR
    _OUT_DIR = Path(out_dir)
    started = time.monotonic()
    try:
        if os.path.exists("/sys/class/net/lo"):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only
        scenario_fn = SCENARIOS[scenario]
        before = getattr(scenario_fn, "before_init", None)
        if before is not None:
            before(rank, world, report)
        dist.init_process_group(
            "gloo",
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
    path = Path(out_dir) / f"rank{rank}.json"
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(report))
    partial.replace(path)


def _kernels():
    from rapid_llm import kernels

    return kernels


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
    integer = {2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()]
    return tensor.contiguous().view(integer)


def _close(report, what, actual, expected, rtol, atol) -> None:
    """Records a failure unless |actual - expected| <= atol + rtol * |expected| everywhere (float64)."""
    actual, expected = actual.double(), expected.double()
    if actual.shape != expected.shape:
        report["failures"].append(f"{what}: shape {list(actual.shape)}, expected {list(expected.shape)}")
        return
    if actual.numel() == 0:
        return
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
        (d, s, i) for d in DTYPES for s in ALL_REDUCE_SHAPES for i in (False, True)
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
        (d, s) for d in DTYPES for s in FUSED_SHAPES
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


# --- a rank failing before the collective -----------------------------------------------------------


def _scenario_rank_raises(rank, world, report, stay_s=0.0):
    """Rank 1 fails its call's local check (an int32 x) and never joins the collective; then it either exits
    (stay_s 0: its sockets close) or stays alive `stay_s` seconds (the others' collective must time out)."""
    kernels = _kernels()
    started = time.monotonic()
    if rank == 1:
        report["outcome"] = _outcome(lambda: kernels.all_reduce(torch.ones(4, 64, dtype=torch.int32)))
        # staying: until every other rank has reported (its call failed), at most stay_s
        others = [_OUT_DIR / f"rank{r}.json" for r in range(world) if r != 1]
        while time.monotonic() - started < stay_s and not all(path.exists() for path in others):
            time.sleep(0.05)
    else:
        report["outcome"] = _outcome(lambda: kernels.all_reduce(torch.ones(4, 64)))
    report["seconds"] = time.monotonic() - started


SCENARIOS = {
    "all_reduce": _scenario_all_reduce,
    "fused": _scenario_fused,
    "mismatch": _scenario_mismatch,
    "groups": _scenario_groups,
    "rank_raises": _scenario_rank_raises,
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


@pytest.mark.parametrize(
    "world,stay_s", [(2, 0.0), (4, 0.0), (2, 30.0)], ids=["world2-rank-exits", "world4-rank-exits", "world2-rank-stays"]
)
def test_rank_raising_before_the_collective(tmp_path, world, stay_s):
    """Rank 1's call fails its local check (an int32 x) and it never joins the collective. The other ranks
    must end with an exception, not hang: at once when rank 1's process exits (its connections close), and
    within the process group's timeout (5 s here) when it stays alive. Catches: a collective (or the
    agreement check's all_gather) waiting without a bound, and a rank reporting success for a sum it never
    received."""
    pg_timeout_s = 5
    started = time.monotonic()
    reports = _run_world(tmp_path, "rank_raises", world, pg_timeout_s=pg_timeout_s, stay_s=stay_s)
    elapsed = time.monotonic() - started
    assert elapsed < JOIN_TIMEOUT_S
    failing = reports[1]["outcome"]
    assert failing.get("raised") == "OpInputError" and failing["argument"] == "x", f"rank 1: {failing}"
    for report in reports:
        if report["rank"] == 1:
            continue
        outcome = report["outcome"]
        assert "raised" in outcome, f"rank {report['rank']} returned from a collective rank 1 never joined"
        assert outcome["message"], f"rank {report['rank']}: an exception without a message: {outcome}"
        # bounded by the process group's timeout (plus slack for a loaded machine), not by the join deadline
        limit = pg_timeout_s + 20
        assert report["seconds"] < limit, f"rank {report['rank']} took {report['seconds']:.1f} s to fail: {outcome}"
