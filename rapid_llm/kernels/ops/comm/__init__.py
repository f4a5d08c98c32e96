"""comm family: collectives across the ranks of a torch.distributed process group (data only, torch-free).

Files: checks.py (the ops' argument checks), reference.py (the torch.distributed rows), api.py (the public
functions); the `group` argument's forms and the EP handle are in rapid_llm/kernels/collectives.py, shared
with the library adapters. The library never creates a transport: the caller initialises torch.distributed (NCCL on GPUs, gloo on the CPU) and passes
its group (None: the default group).

Shared conventions:
  - every rank of the group calls the op with the same shapes, dtype and arguments (a collective); a call
    on a process outside the group is an error;
  - cross-rank agreement (shapes, dtypes) is checked by one small all_gather of the call's description on
    CPU tensors always and on CUDA under RAPID_LLM_CHECK_BOUNDS=1 (as index values are): a mismatch, or a
    rank whose own arguments fail their check, raises OpInputError on every rank instead of hanging or
    reducing garbage; unchecked otherwise;
  - sums run in the transport's arithmetic (NCCL and gloo add in the payload's dtype): a low-precision
    result may differ from the fp32 sum by world_size - 1 roundings of x's dtype.
"""

from ...backends import deep_ep as deep_ep_backend
from ...dispatcher.contract import EXACT, FLOAT_DTYPE_LABELS, TOKEN_BUCKETS, OpContract
from ...dispatcher.spec import UNMEASURED, CapabilityRequirement, GoldenRecord, KernelSpec, ShapeConstraint
from ..rows import library_row, native_row, reference_row

ALL_REDUCE = "comm.all_reduce"
ALL_REDUCE_ADD_RMS_NORM = "comm.all_reduce_add_rms_norm"
EP_DISPATCH = "comm.ep_dispatch"
EP_COMBINE = "comm.ep_combine"
#: DeepSeek-V3's fp8 activation groups: one float32 scale per 128 consecutive elements of a token.
FP8_GROUP = 128
_HERE = __name__

#: The handle a combine reads carries a library's own layout (DeepEP's handle tuple), which only that
#: library's row reads: its combine row requires the tag, the other rows read the shared layout.
LAYOUT_TAGS = {"handle:deep_ep": "the handle carries DeepEP's layout (made by deep_ep/ep_dispatch)"}

_DIMS = (("num_tokens", TOKEN_BUCKETS), ("hidden", EXACT), ("world_size", EXACT))
_EP_DIMS = (
    ("num_tokens", TOKEN_BUCKETS),
    ("hidden", EXACT),
    ("top_k", EXACT),
    ("num_experts", EXACT),
    ("world_size", EXACT),
)
EP_DISPATCH_DTYPES = FLOAT_DTYPE_LABELS | {"fp8_e4m3"}

#: DeepEP's wheel is built for sm90; its intranode kernels take 2, 4 or 8 ranks (its tuned configs), a
#: warp lane per top-k slot (top_k <= 32), and copy 16-byte vectors of a bf16 row (hidden % 8 == 0).
DEEP_EP_DEVICES = (CapabilityRequirement("cuda", min_sm=90, max_sm=90),)
_DEEP_EP_SHAPE = (ShapeConstraint("world_size", one_of=(2, 4, 8)), ShapeConstraint("hidden", multiple_of=8))

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
    OpContract(
        op=EP_DISPATCH,
        parameters=("x", "topk_ids", "topk_weights", "num_experts", "group", "x_scale"),
        dtypes=EP_DISPATCH_DTYPES,
        dims=_EP_DIMS,
        check=f"{_HERE}.checks:check_ep_dispatch",
        doc=f"""ep_dispatch(x, topk_ids, topk_weights, num_experts, group=None, x_scale=None)
    -> EpDispatch(x, x_scale, topk_ids, topk_weights, tokens_per_expert, handle)

Expert parallelism's first exchange: every token goes to the ranks that hold
its top-k experts. The E = num_experts experts are split evenly over the W
ranks of `group` (E % W == 0): rank r holds experts r*E/W .. (r+1)*E/W - 1.
Each rank passes its own tokens (T may differ between ranks, 0 included).

x: [T, H] float32, float16 or bfloat16, any strides; or float8_e4m3fn with
x_scale float32 [T, H / {FP8_GROUP}] (H % {FP8_GROUP} == 0), one scale per {FP8_GROUP} consecutive
elements of a token (quantization.per_token_group_fp8's), any strides.
topk_ids: [T, k] int32 or int64 (k >= 1), any strides, each in [0, E) or
-1 (an unused slot: it sends nothing); ids are errors outside [-1, E) where
values are checked, and unchecked, every row treats them as -1.
topk_weights: [T, k] float32, any strides.

Returns, on each rank (R = the rows it received):
  x:  [R, H] of x's dtype, new and contiguous: one row per (token, rank
      holding at least one of its experts), the token sent once to a rank
      however many of its experts live there; ordered by source rank, then
      by the token's index on its source rank;
  x_scale: [R, H / {FP8_GROUP}] float32 (the rows' scales), or None for a float x;
  topk_ids: [R, k] of topk_ids' dtype: the slot's expert as a local id
      (id - rank * E / W) where it lives on this rank, else -1;
  topk_weights: [R, k] float32: the slot's weight where its id is local,
      else 0;
  tokens_per_expert: [E / W] int32: the received rows that name each local
      expert in at least one slot;
  handle: an EpHandle (rapid_llm/kernels/collectives.py) for ep_combine.
Bitwise: rows are copies. Not CUDA-graph safe (R is known after the counts
exchange, a device-to-host read).""",
    ),
    OpContract(
        op=EP_COMBINE,
        parameters=("y", "handle", "group"),
        dtypes=FLOAT_DTYPE_LABELS,
        dims=_DIMS,
        layouts=LAYOUT_TAGS,
        check=f"{_HERE}.checks:check_ep_combine",
        doc="""ep_combine(y, handle, group=None) -> out [T, H]

Expert parallelism's second exchange: each received row's result goes back
to its token's rank, and a token's results from all ranks are added:
  out[t] = sum over the ranks r that token t was sent to of y_r[its row on r]
in fp32, rounded once to y's dtype (0 for a token sent nowhere).
y: [R, H] float32, float16 or bfloat16, any strides, R = the rows the
matching ep_dispatch received on this rank, in that order: the rank's own
weighted sum over its local experts, sum_j topk_weights[i, j] *
expert(topk_ids[i, j], x[i]) (combine adds no weights). handle: that
ep_dispatch's EpHandle, on the same group. num_tokens = R (the rows sent
back). Not CUDA-graph safe (the counts are read on the host).""",
    ),
)

#: torch's symmetric-memory kernels: peers' buffers read over NVLink (one node, at most 8 GPUs), float and
#: bf16 only (their dispatch), 16-byte vectors of a row; two-shot splits the message into equal shares per
#: rank (2, 4 or 8: a multiple of 8 elements divides evenly).
_SYMM_MEM_DTYPES = frozenset({"fp32", "bf16"})
_SYMM_MEM_HIDDEN = ShapeConstraint("hidden", multiple_of=8)
_SYMM_MEM_SHAPES = {
    "one_shot": (ShapeConstraint("world_size", max=8), _SYMM_MEM_HIDDEN),
    "two_shot": (ShapeConstraint("world_size", one_of=(2, 4, 8)), _SYMM_MEM_HIDDEN),
}


def _symm_mem_row(function: str, op: str, description: str) -> KernelSpec:
    return KernelSpec(
        name=f"symm_mem/{function}",
        op=op,
        backend="symm_mem",
        target=f"rapid_llm.kernels.backends.symm_mem.all_reduce:{function}",
        available="rapid_llm.kernels.backends.symm_mem:available",
        capability=(CapabilityRequirement("cuda", min_sm=80),),
        dtypes=_SYMM_MEM_DTYPES,
        shape=_SYMM_MEM_SHAPES[function.partition("_all")[0]],
        golden=GoldenRecord.unverified(),
        priority=UNMEASURED,
        # graph-capturable once the group's buffer holds the message (an eager call at that size first)
        graph_safe=True,
        description=description,
    )


ROWS = (
    reference_row(
        ALL_REDUCE,
        f"{_HERE}.reference:all_reduce",
        FLOAT_DTYPE_LABELS,
        description="torch.distributed.all_reduce (SUM) on the group's backend",
    ),
    _symm_mem_row(
        "one_shot_all_reduce",
        ALL_REDUCE,
        "torch.ops.symm_mem.one_shot_all_reduce_copy over a symmetric buffer per group: every rank reads "
        "every peer's copy of x and sums (decode sizes)",
    ),
    _symm_mem_row(
        "two_shot_all_reduce",
        ALL_REDUCE,
        "torch.ops.symm_mem.two_shot_all_reduce_out over a symmetric buffer per group: reduce-scatter, "
        "then all-gather through the peers' buffers",
    ),
    reference_row(
        ALL_REDUCE_ADD_RMS_NORM,
        f"{_HERE}.reference:all_reduce_add_rms_norm",
        FLOAT_DTYPE_LABELS,
        description="torch.distributed.all_reduce, then the fp32 residual add and RMSNorm (three steps)",
    ),
    _symm_mem_row(
        "one_shot_all_reduce_add_rms_norm",
        ALL_REDUCE_ADD_RMS_NORM,
        "symm_mem/one_shot_all_reduce's sum into x, then norm.fused_add_rms_norm's planned row",
    ),
    reference_row(
        EP_DISPATCH,
        f"{_HERE}.reference:ep_dispatch",
        EP_DISPATCH_DTYPES,
        graph_safe=False,
        description="a counts exchange (all_to_all_single), then one all_to_all_single per payload",
    ),
    reference_row(
        EP_COMBINE,
        f"{_HERE}.reference:ep_combine",
        FLOAT_DTYPE_LABELS,
        graph_safe=False,
        description="all_to_all_single of the rows back to their tokens' ranks, an fp32 index_add",
    ),
    native_row(
        "native/ep_dispatch",
        EP_DISPATCH,
        f"{_HERE}.ep_dispatch:ep_dispatch",
        dtypes=EP_DISPATCH_DTYPES,
        parity=None,
        priority=UNMEASURED,
        graph_safe=False,  # the counts are read on the host
        description="every payload of a row packed into one exchange: a Triton pack kernel, one "
        "all_to_all_single, a Triton unpack kernel (per-expert counts by atomics)",
    ),
    native_row(
        "native/ep_combine",
        EP_COMBINE,
        f"{_HERE}.ep_combine:ep_combine",
        dtypes=FLOAT_DTYPE_LABELS,
        parity=None,
        priority=UNMEASURED,
        graph_safe=False,
        description="all_to_all_single of the rows back, then one Triton kernel summing each token's rows in fp32",
    ),
    library_row(
        "deep_ep/ep_dispatch",
        EP_DISPATCH,
        "rapid_llm.kernels.backends.deep_ep.ep:ep_dispatch",
        library=deep_ep_backend.REQUIREMENT,
        capability=DEEP_EP_DEVICES,
        dtypes=frozenset({"bf16", "fp8_e4m3"}),
        shape=(*_DEEP_EP_SHAPE, ShapeConstraint("top_k", max=32)),
        parity=None,
        priority=UNMEASURED,
        graph_safe=False,  # the received count is read on the host
        description="DeepEP intranode normal mode over NVLink: its layout kernel, then Buffer.dispatch (one "
        "deep_ep.Buffer per group, sized by its hints)",
    ),
    library_row(
        "deep_ep/ep_combine",
        EP_COMBINE,
        "rapid_llm.kernels.backends.deep_ep.ep:ep_combine",
        library=deep_ep_backend.REQUIREMENT,
        capability=DEEP_EP_DEVICES,
        dtypes=frozenset({"bf16"}),
        shape=_DEEP_EP_SHAPE,
        layout=("handle:deep_ep",),
        parity=None,
        priority=UNMEASURED,
        graph_safe=False,
        description="DeepEP intranode normal mode: Buffer.combine over the handle deep_ep/ep_dispatch made",
    ),
)
