"""launch_fitting: a kernel configuration whose shared memory exceeds the device's is relaunched with
fewer pipeline stages, the fitted count is remembered, and one that never fits raises a clear error.

On the CPU a stand-in kernel raises Triton's OutOfResources above a stage limit (the interpreter never
does); on a CUDA device the MLA decode pointer kernel is launched at 6 stages of 64 heads x 64
positions (over 227 KiB on the H200) and must fall back and still match the float64 oracle.
Catches a fallback that never lowers the stages, loops forever, drops the remembered count, swallows
an unrelated resource error, or changes the result.
"""

from __future__ import annotations

import pytest
import torch

from conformance.cases import CASES, ORACLES, TOLERANCES, TORCH_DTYPES
from conformance.rows_here import planner_forcing, skip_reason, torch_device
from rapid_llm.kernels.dispatcher import NoEligibleKernel
from rapid_llm.kernels.ops import launch_fitting as fitting
from rapid_llm.kernels.ops.attention import MLA_DECODE


class _StageLimitedKernel:
    """kernel[grid](...) that fails like Triton when num_stages exceeds `limit` (a `resource` error)."""

    __name__ = "stage_limited_kernel"

    def __init__(self, limit, resource="shared memory"):
        self.limit, self.resource, self.launched = limit, resource, []

    def __getitem__(self, grid):
        def run(*args, **config):
            if config["num_stages"] > self.limit:
                raise _error(self.resource)
            self.launched.append(config["num_stages"])

        return run


def _error(resource):
    """Triton's OutOfResources(required, limit, name), or the RuntimeError launch_fitting catches without Triton."""
    try:
        return fitting.OutOfResources(1, 0, resource)
    except TypeError:
        return fitting.OutOfResources(f"out of resource: {resource}")


def test_lowers_the_stages_until_the_kernel_fits_and_remembers_them():
    kernel = _StageLimitedKernel(limit=2)
    device = torch.device("cpu")
    assert fitting.launch_fitting(kernel, (1,), device, BLOCK=64, num_stages=4) == 2
    assert kernel.launched == [2]
    assert fitting.launch_fitting(kernel, (1,), device, BLOCK=64, num_stages=4) == 2
    assert kernel.launched == [2, 2], "the second call should launch the remembered stage count at once"
    assert ({"BLOCK": 64, "num_stages": 4}, 2) in fitting.fitted(kernel)


def test_a_configuration_that_never_fits_names_the_kernel():
    kernel = _StageLimitedKernel(limit=0)
    with pytest.raises(fitting.KernelResourceError, match="stage_limited_kernel.*BLOCK.*one stage"):
        fitting.launch_fitting(kernel, (1,), torch.device("cpu"), BLOCK=128, num_stages=3)
    assert kernel.launched == []


def test_other_resource_errors_are_not_retried():
    kernel = _StageLimitedKernel(limit=0, resource="registers")
    with pytest.raises(fitting.OutOfResources, match="registers"):
        fitting.launch_fitting(kernel, (1,), torch.device("cpu"), BLOCK=32, num_stages=2)


@pytest.mark.skipif(
    torch.device(torch_device()).type != "cuda", reason="shared-memory limits exist on a CUDA device only"
)
def test_mla_decode_pointer_kernel_falls_back_to_fewer_stages_on_the_gpu():
    case = next(c for c in CASES[MLA_DECODE] if c.id == "ragged_page64")
    args, dims, layout = case.make(TORCH_DTYPES["bf16"], torch.device(torch_device()), torch.Generator().manual_seed(5))
    try:
        planner_forcing(MLA_DECODE, "native/mla_decode").plan(MLA_DECODE, dtype="bf16", shape=dims, layout=layout)
    except NoEligibleKernel as error:
        pytest.skip(skip_reason("native/mla_decode", error))
    from rapid_llm.kernels.ops.attention.mla_decode import triton as mla_decode  # after the skip: Triton may be hidden
    from rapid_llm.kernels.ops.launch_override import launch_override

    config = {"BLOCK_H": 64, "BLOCK_N": 64, "num_warps": 8, "num_stages": 6, "UNMASKED_BODY": True}
    with launch_override("native/mla_decode", splits=2, **config):
        got = mla_decode.mla_decode(*args)
    want = ORACLES[MLA_DECODE](*args)
    atol, rtol = TOLERANCES[(MLA_DECODE, "bf16")][0]
    torch.testing.assert_close(got.double(), want.double(), atol=atol, rtol=rtol)
    stages = [s for launched, s in fitting.fitted(mla_decode._mla_decode_kernel) if launched["num_stages"] == 6]
    assert stages and 1 <= stages[-1] < 6, f"6 stages of 64 x 64 latent tiles cannot fit; fitted: {stages}"
