"""Parity tolerances, keyed by (op, dtype): (atol, rtol) for torch.testing.assert_close.

Each family's case module (conformance/cases/<family>.py) holds its ops'
numbers with the reason for each; this is the one lookup conformance and the
perf suites' correctness-before-timing check both use.
"""

from conformance.cases import TOLERANCES


def tolerance(op: str, dtype: str, output: int = 0) -> tuple[float, float]:
    """(atol, rtol) for output number `output` of the op (ops with several outputs may list one pair each)."""
    value = TOLERANCES[(op, dtype)]
    return value[output] if isinstance(value[0], tuple) else value
