"""DeepGEMM adapters for the gemm family (tokenspeed-deepgemm 2.5, sm90).

    fp8_gemm_nt(a, a_scale, b, b_scale, out=None)
        -> deep_gemm.fp8_gemm_nt((a, a_scale), (b, b_scale), out)
    m_grouped_contiguous(a, a_scale, b, b_scale, m_indices, out=None)
        -> deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, a_scale), (b, b_scale), out, m_indices)
    m_grouped_masked(a, a_scale, b, b_scale, masked_m, expected_m, out=None)
        -> deep_gemm.m_grouped_fp8_gemm_nt_masked((a, a_scale), (b, b_scale), out, masked_m, expected_m)

Our arguments are DeepGEMM's, pair for pair: e4m3 operands with fp32 scales at
its default sm90 recipe (1, 128, 128) (1x128 activation groups, 128x128 weight
blocks), bf16 out written in place, int32 group tensors read on the device.
Unchecked: gemm/checks.py ran before, and the row's layout tags hold (a, b and
out TMA-ready, b_scale dense, the group tensor contiguous, a_scale 16-byte
aligned). No copies here: DeepGEMM itself turns a_scale into its TMA-aligned
column-major layout ([.., M, K/128] with strides (1, ceil(M/4)*4) per group)
and does so only when a_scale is not already in it: the scales that
quantization.per_token_group_fp8(x, 128, column_major_scales=True) writes go
to the kernel as they are; row-major scales cost DeepGEMM one transpose
kernel per call.

DeepGEMM JIT-compiles a kernel the first time it meets a shape (N and K are
compiled in; M picks the tile sizes), then keeps it in its on-disk cache. The
adapters log to "rapid_llm.backends.deep_gemm": at INFO the first call of each
(function, N, K, groups) with its host time (compile or cache load included),
and any later call slower than COMPILE_LOG_SECONDS on the host (a compile for
new tile sizes). Host time only: no synchronisation, so
a warmed-up call can be captured in a CUDA graph (warm every shape up before
capture: a compile during capture is not capturable).
"""

from __future__ import annotations

import logging
import time

import torch

LOGGER = logging.getLogger("rapid_llm.backends.deep_gemm")
#: A call that holds the host this long was a JIT compile (or a disk-cache load), not a launch (~10 us).
COMPILE_LOG_SECONDS = 0.05
#: (function, N, K, groups, device) keys whose first call was logged: bounded by the model's weight shapes.
_SEEN: set = set()


def _launch(function: str, n: int, k: int, groups: int, m: int, device, launch) -> None:
    key = (function, n, k, groups, device)
    start = time.perf_counter()
    launch()
    seconds = time.perf_counter() - start
    first = key not in _SEEN
    if first or seconds >= COMPILE_LOG_SECONDS:
        _SEEN.add(key)
        LOGGER.info(
            "deep_gemm.%s %s call for N=%d K=%d groups=%d (M=%d) on %s: %.1f ms on the host "
            "(DeepGEMM JIT-compiles or loads the kernel for this shape)",
            function,
            "first" if first else "slow",
            n,
            k,
            groups,
            m,
            device,
            seconds * 1e3,
        )


def _output(out, shape, like):
    return torch.empty(shape, dtype=torch.bfloat16, device=like.device) if out is None else out


def fp8_gemm_nt(a, a_scale, b, b_scale, out=None):
    import deep_gemm  # first load only; a broken install is the row's rejection reason

    out = _output(out, (a.shape[0], b.shape[0]), a)
    if a.shape[0]:  # DeepGEMM returns early on M == 0 too; skipping it keeps an empty call off the log
        _launch(
            "fp8_gemm_nt",
            b.shape[0],
            a.shape[1],
            1,
            a.shape[0],
            a.device,
            lambda: deep_gemm.fp8_gemm_nt((a, a_scale), (b, b_scale), out),
        )
    return out


def m_grouped_contiguous(a, a_scale, b, b_scale, m_indices, out=None):
    import deep_gemm

    out = _output(out, (a.shape[0], b.shape[1]), a)
    if a.shape[0]:
        _launch(
            "m_grouped_fp8_gemm_nt_contiguous",
            b.shape[1],
            a.shape[1],
            b.shape[0],
            a.shape[0],
            a.device,
            lambda: deep_gemm.m_grouped_fp8_gemm_nt_contiguous((a, a_scale), (b, b_scale), out, m_indices),
        )
    return out


def m_grouped_masked(a, a_scale, b, b_scale, masked_m, expected_m, out=None):
    import deep_gemm

    out = _output(out, (a.shape[0], a.shape[1], b.shape[1]), a)
    if a.shape[1]:  # DeepGEMM asserts M_max > 0: with no rows there is nothing to compute
        _launch(
            "m_grouped_fp8_gemm_nt_masked",
            b.shape[1],
            a.shape[2],
            b.shape[0],
            a.shape[1],
            a.device,
            lambda: deep_gemm.m_grouped_fp8_gemm_nt_masked((a, a_scale), (b, b_scale), out, masked_m, expected_m),
        )
    return out
