"""Targets that do nothing, for measuring what the dispatch layers themselves cost.

The plan-overhead benchmark binds `rms_norm_stub` into a PlannedOp through a
table of its own: with a target this cheap, the difference between calling
the PlannedOp and calling the function directly is the plan's per-call cost.
The signature matches the norm.rms_norm contract (x, weight, eps).
"""


def rms_norm_stub(x, weight, eps=1e-6):
    return x
