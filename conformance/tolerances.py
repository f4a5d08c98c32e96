"""Parity tolerances, keyed by (op, dtype): (atol, rtol), plus an op's accumulation bound.

Each family's case module (conformance/cases/<family>.py) holds its ops'
numbers with the reason for each; this is the one lookup conformance and the
perf suites' correctness-before-timing check both use.

An output element passes when |out - ref| <= atol + rtol * |ref| + bound,
where bound is 0 unless the op has an ACCUMULATION_BOUNDS entry (the fp8
GEMMs: the tensor-core accumulation term of their contract, per element,
computed from the call's inputs). NaN must match NaN.
"""

import torch

from conformance.cases import ACCUMULATION_BOUNDS, TOLERANCES


def tolerance(op: str, dtype: str, output: int = 0) -> tuple[float, float]:
    """(atol, rtol) for output number `output` of the op (ops with several outputs may list one pair each)."""
    value = TOLERANCES[(op, dtype)]
    return value[output] if isinstance(value[0], tuple) else value


def accumulation_bound(op: str, args, output: int = 0):
    """The per-element accumulation term for output `output` of a call with `args`, or None (no term)."""
    bound_fn = ACCUMULATION_BOUNDS.get(op)
    if bound_fn is None:
        return None
    bounds = bound_fn(*args)
    bounds = bounds if isinstance(bounds, tuple) else (bounds,)
    return bounds[output] if output < len(bounds) else None


def assert_within_tolerance(
    op: str, dtype: str, output: int, out, want, *, args=None, specified=None, describe: str
) -> None:
    """Raise AssertionError (message starting with `describe`) unless `out` is within tolerance of `want`.

    `args` are the call's untouched inputs (for the accumulation term; None: no term). `specified`
    is a bool mask of the elements the contract specifies (None: all).
    """
    atol, rtol = tolerance(op, dtype, output)
    extra = accumulation_bound(op, args, output) if args is not None else None
    if specified is not None:
        out, want = out[specified], want[specified]
        extra = extra[specified] if extra is not None else None
    if extra is None:
        torch.testing.assert_close(
            out.float(), want.float(), atol=atol, rtol=rtol, equal_nan=True, msg=lambda m: f"{describe}: {m}"
        )
        return
    out, want = out.double(), want.double()
    diff = (out - want).abs()
    allowed = atol + rtol * want.abs() + extra.to(out.device)
    ok = (diff <= allowed) | (torch.isnan(out) & torch.isnan(want))
    if not bool(ok.all()):
        bad = (~ok).nonzero()
        index = tuple(bad[0].tolist())
        raise AssertionError(
            f"{describe}: {bad.shape[0]} / {ok.numel()} elements beyond atol {atol:.3g} + rtol {rtol:.3g} * |ref| + "
            f"accumulation bound; first at {index}: got {out[index].item():.6g}, ref {want[index].item():.6g}, "
            f"allowed |diff| {allowed[index].item():.6g} (accumulation term {extra[index].item():.6g})"
        )
