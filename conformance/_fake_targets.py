"""Targets, availability probes and row builders for the dispatcher's unit tests.

Each target returns (its own name, the positional args, the keyword args), so
a test can tell which row's function ran and that the call's arguments reached
it untouched. Test rows name these as f"{__name__}:<function>", so they work
whether this file is imported as `conformance._fake_targets` or `_fake_targets`.

Torch-free on purpose: the dispatcher tests must not need torch.
"""

from __future__ import annotations

from rapid_llm.kernels.dispatcher import GoldenRecord, KernelSpec
from rapid_llm.kernels.dispatcher.contract import EXACT, TOKEN_BUCKETS, OpContract


def fast(*args, **kwargs):
    return ("fast", args, kwargs)


def slow(*args, **kwargs):
    return ("slow", args, kwargs)


def other(*args, **kwargs):
    return ("other", args, kwargs)


def reference(*args, **kwargs):
    return ("reference", args, kwargs)


def probe_ok():
    return True, "fake library present"


PROBE_REFUSAL = "the fake library refuses this machine"


def probe_says_no():
    return False, PROBE_REFUSAL


PROBE_EXPLOSION = "fake probe exploded"


def probe_raises():
    raise RuntimeError(PROBE_EXPLOSION)


#: A module that does not exist: a row pointing here fails at load(), like a
#: broken or uninstalled optional library.
MISSING_MODULE = "conformance._missing_module"


def target(function: str) -> str:
    """'module:function' for a function of this module."""
    return f"{__name__}:{function}"


# ---------------------------------------------------------------------------
# Builders for test tables (shared by test_dispatch.py and test_plan.py).
# ---------------------------------------------------------------------------

OP = "test.op"
OTHER_OP = "test.other"
OP_DTYPES = frozenset({"fp32", "fp16", "bf16"})

CONTRACTS = {
    OP: OpContract(
        op=OP,
        parameters=("x", "weight", "eps"),
        dtypes=OP_DTYPES,
        dims=(("num_tokens", TOKEN_BUCKETS), ("hidden", EXACT)),
        layouts=("x:rows",),
        doc="test op: a norm-like contract with a bucketed and an exact dim",
    ),
    OTHER_OP: OpContract(
        op=OTHER_OP,
        parameters=("x",),
        dtypes=OP_DTYPES,
        dims=(("num_elements", TOKEN_BUCKETS),),
        layouts=("x:contiguous",),
        doc="a second test op, so deny/force names can belong to another op",
    ),
}

VERIFIED = GoldenRecord(verified=True, max_abs_diff=0.0, baseline="torch/ref", evidence="conformance/fake.json")


def spec(name: str, **fields) -> KernelSpec:
    """A verified, condition-free row of test.op; `fields` override anything."""
    backend = name.partition("/")[0]
    values = dict(
        name=name,
        op=OP,
        backend=backend,
        target=target("fast"),
        dtypes=OP_DTYPES,
        golden=VERIFIED if backend != "torch" else GoldenRecord.reference(),
    )
    values.update(fields)
    return KernelSpec(**values)


def reference_row(op: str = OP, name: str = "torch/ref", **fields) -> KernelSpec:
    """The reference (torch) row an op's table needs; targets `reference` unless overridden."""
    fields.setdefault("target", target("reference"))
    return spec(name, op=op, **fields)
