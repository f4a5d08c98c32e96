"""comm family: collectives across the ranks of a torch.distributed process group (data only, torch-free).

Files: checks.py (the ops' argument checks), reference.py (the torch.distributed rows), groups.py (the
`group` argument: None, a ProcessGroup or its name), api.py (the public functions). The library never
creates a transport: the caller initialises torch.distributed (NCCL on GPUs, gloo on the CPU) and passes
its group (None: the default group).

Shared conventions:
  - every rank of the group calls the op with the same shapes, dtype and arguments (a collective); a call
    on a process outside the group is an error;
  - cross-rank agreement (shapes, dtypes) is checked by one small all_gather of the call's description on
    CPU tensors always and on CUDA under RAPID_LLM_CHECK_BOUNDS=1 (as index values are): a mismatch raises
    OpInputError on every rank instead of hanging or reducing garbage; unchecked otherwise;
  - sums run in the transport's arithmetic (NCCL and gloo add in the payload's dtype): a low-precision
    result may differ from the fp32 sum by world_size - 1 roundings of x's dtype.
"""

from ...dispatcher.contract import EXACT, FLOAT_DTYPE_LABELS, TOKEN_BUCKETS, OpContract
from ..rows import reference_row

ALL_REDUCE = "comm.all_reduce"
ALL_REDUCE_ADD_RMS_NORM = "comm.all_reduce_add_rms_norm"
_HERE = __name__

LAYOUT_TAGS = {}

_DIMS = (("num_tokens", TOKEN_BUCKETS), ("hidden", EXACT), ("world_size", EXACT))

CONTRACTS = (
    OpContract(
        op=ALL_REDUCE,
        parameters=("x", "group", "inplace"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=_DIMS,
        check=f"{_HERE}.checks:check_all_reduce",
        doc="""all_reduce(x, group=None, inplace=False) -> out

The sum of x over the ranks of `group` (a torch.distributed ProcessGroup, its
group_name, or None: the default group), on every rank. x: [..., hidden],
fp32/fp16/bf16, any strides, on the device the group's backend serves. inplace=False: out is a new
contiguous tensor and x is not modified; inplace=True: x holds the sum and is
returned (a non-contiguous x is summed through a contiguous copy, then copied
back). num_tokens = the product of x's leading dims.""",
    ),
    OpContract(
        op=ALL_REDUCE_ADD_RMS_NORM,
        parameters=("x", "residual", "weight", "eps", "group"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=_DIMS,
        check=f"{_HERE}.checks:check_all_reduce_add_rms_norm",
        doc="""all_reduce_add_rms_norm(x, residual, weight, eps, group=None) -> (x, residual), in place:

    s        = sum of x over the ranks of group          (as comm.all_reduce)
    residual <- residual + s                             (fp32 add, rounded once to residual's dtype)
    x        <- rms_norm(residual, weight, eps)          (as norm.fused_add_rms_norm)

What an engine does after o_proj and down_proj under tensor parallelism: x is
this rank's partial sum, residual the replicated residual stream (the same on
every rank before and after). x, residual: [..., hidden], same shape, dtype and
device, not sharing memory; weight: [hidden], x's dtype or fp32; eps >= 0.
Returns the same two tensor objects.""",
    ),
)

ROWS = (
    reference_row(
        ALL_REDUCE,
        f"{_HERE}.reference:all_reduce",
        FLOAT_DTYPE_LABELS,
        description="torch.distributed.all_reduce (SUM) on the group's backend",
    ),
    reference_row(
        ALL_REDUCE_ADD_RMS_NORM,
        f"{_HERE}.reference:all_reduce_add_rms_norm",
        FLOAT_DTYPE_LABELS,
        description="torch.distributed.all_reduce, then the fp32 residual add and RMSNorm (three steps)",
    ),
)
