"""Parity tolerances, keyed by (op, dtype): (atol, rtol), plus an op's accumulation bound.

Each family's case module (conformance/cases/<family>.py) holds its ops'
numbers with the reason for each; this is the one lookup conformance and the
perf suites' correctness-before-timing check both use.

An output element passes when |out - ref| <= atol + rtol * |ref| + bound,
where bound is 0 unless the op has an ACCUMULATION_BOUNDS entry (the fp8
GEMMs: the tensor-core accumulation term of their contract, per element,
computed from the call's inputs). NaN must match NaN.

Ops with a NOISE_TOLERANCES entry (relative_l2, element_rms) for the dtype
(output 0 only) add element_rms * rms(ref[t]) to the bound of every element
of row t (the first dimension), and each row must also satisfy
||out[t] - ref[t]||_2 <= relative_l2 * ||ref[t]||_2 + atol * sqrt(row size).
"""

import torch

from conformance.cases import ACCUMULATION_BOUNDS, NOISE_TOLERANCES, TOLERANCES


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


def _rows(tensor):
    """float64 [rows, row size] view of a tensor's rows (its first dimension)."""
    return tensor.double().flatten(1) if tensor.dim() > 1 else tensor.double()[:, None]


def noise_term(op: str, dtype: str, output: int, want):
    """(per-element extra tolerance, per-row L2 allowance factor) for ops with a noise tolerance, or None."""
    noise = NOISE_TOLERANCES.get((op, dtype)) if output == 0 else None
    if noise is None or want.dim() == 0:
        return None
    relative_l2, element_rms = noise
    rows = _rows(want)
    rms = rows.norm(dim=1) / max(rows.shape[1], 1) ** 0.5
    per_element = (element_rms * rms).reshape(-1, *([1] * (want.dim() - 1))).expand(want.shape)
    return per_element, relative_l2


def _assert_rows_within_noise(out, want, relative_l2: float, atol: float, describe: str) -> None:
    """Each row t: ||out[t] - ref[t]||_2 <= relative_l2 * ||ref[t]||_2 + atol * sqrt(row size)."""
    if out.numel() == 0:
        return
    reference = _rows(want)
    distance, size = (_rows(out) - reference).norm(dim=1), reference.norm(dim=1)
    allowed = relative_l2 * size + atol * reference.shape[1] ** 0.5
    bad = (distance > allowed).nonzero().flatten()
    if bad.numel():
        row = int(bad[0])
        raise AssertionError(
            f"{describe}: {bad.numel()} / {out.shape[0]} rows beyond the noise tolerance (relative L2 "
            f"{relative_l2:.3g}); first row {row}: ||diff|| {distance[row].item():.6g}, ||ref|| {size[row].item():.6g}, "
            f"allowed {allowed[row].item():.6g}"
        )


def assert_within_tolerance(
    op: str, dtype: str, output: int, out, want, *, args=None, specified=None, describe: str
) -> None:
    """Raise AssertionError (message starting with `describe`) unless `out` is within tolerance of `want`.

    `args` are the call's untouched inputs (for the accumulation term; None: no term). `specified`
    is a bool mask of the elements the contract specifies (None: all).
    """
    atol, rtol = tolerance(op, dtype, output)
    extra = accumulation_bound(op, args, output) if args is not None else None
    noise = noise_term(op, dtype, output, want)
    if noise is not None:
        if specified is not None:
            raise NotImplementedError(f"{op}: a noise tolerance with a partly specified output")
        _assert_rows_within_noise(out, want, noise[1], atol, describe)
        extra = noise[0] if extra is None else extra.to(noise[0].device) + noise[0]
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
