"""gemm family: op contracts, layout tags and rows (data only, torch-free).

Files: checks.py (the ops' argument checks), reference.py (torch rows),
tiles.py (the tile policy: tuning store, then a heuristic per GPU tier),
mm/ (gemm.mm's native kernels, one module each; mm/w4a16.py: gemm.w4a16_mm's), fp8/ (the native kernels
of gemm.fp8_block_mm and gemm.fp8_mm). The cuBLAS adapter lives in
rapid_llm/kernels/backends/cublas/, DeepGEMM's in backends/deep_gemm/gemm.py.

gemm.mm: out = x @ w.T (+ bias), w [N, K] as a checkpoint stores a linear
layer's weight; fp32 accumulation and one rounding to x's dtype on every row.

Shared conventions of the block-scaled fp8 GEMMs (DeepSeek-V3's recipe, the
one DeepGEMM implements on Hopper):
  - a: fp8 e4m3 activations [.., M, K], one fp32 scale per 1x128 group of a
    row (a_scale [.., M, K/128]): A[m, k] = a[m, k] * a_scale[m, k // 128];
  - b: fp8 e4m3 weights [.., N, K] ("NT": the product is A @ B.T), one fp32
    scale per 128x128 block (b_scale [.., ceil(N/128), K/128]):
    B[n, k] = b[n, k] * b_scale[n // 128, k // 128];
  - out = A @ B.T in bf16: the reference dequantizes to fp32, multiplies in
    fp32 and rounds once to bf16; other rows may accumulate in the fp8 tensor
    cores (DeepGEMM: promoted to fp32 every 128 of K). Accuracy every row
    promises, per output element:
      |out - exact| <= 2**-7 * (1 + |exact|)
                       + 2**-7 * sum over 32-wide k steps of max|A[m, step]| * max|B[n, step]|
    the first term one bf16 rounding, the second the truncation of Hopper's
    fp8 MMA (it adds a step's 32 products aligned to the largest, keeping
    ~14 bits). The second term matters only where one product dominates a
    step and the output cancels (an outlier activation): there a tensor-core
    row can be several bf16 steps of the output from the reference
    (conformance/cases/gemm.py has the derivation and the H200 measurement);
  - K % 128 == 0 (the scale block); a, b and the scales must be finite (e4m3
    NaN encodings and non-finite scales give unspecified output elements;
    not checked);
  - a_scale may have any strides: row-major, or the column-major TMA-aligned
    layout quantization.per_token_group_fp8(x, 128, column_major_scales=True)
    writes (what DeepGEMM reads without a copy);
  - out=None allocates the output; a given out is written in place, returned,
    must be bf16 of the output's shape and must not share memory with an input.
"""

from ...backends import deep_gemm as deep_gemm_backend
from ...dispatcher.contract import EXACT, TOKEN_BUCKETS, OpContract
from ...dispatcher.spec import CapabilityRequirement, GoldenRecord, KernelSpec, LibraryRequirement, ShapeConstraint
from ..common_rows import TRITON_DEVICES, TRITON_DOT_DEVICES, TRITON_FP8_DEVICES
from ..rows import SHARED_LAYOUT_TAGS, extension_rows, library_row, native_row, reference_row

MM = "gemm.mm"
W8A16_MM = "gemm.w8a16_mm"
W4A16_MM = "gemm.w4a16_mm"
FP8_BLOCK_MM = "gemm.fp8_block_mm"
FP8_MM = "gemm.fp8_mm"
FP8_GROUPED_MM_CONTIGUOUS = "gemm.fp8_grouped_mm_contiguous"
FP8_GROUPED_MM_MASKED = "gemm.fp8_grouped_mm_masked"
_HERE = __name__
_ADAPTERS = "rapid_llm.kernels.backends.deep_gemm.gemm"

#: The K extent of one scale (and the N extent of one weight scale block).
SCALE_BLOCK = 128
#: Rows per aligned block of the contiguous grouped layout: DeepGEMM's default
#: get_mk_alignment_for_contiguous_layout() on sm90 (its BLOCK_M for this layout).
M_ALIGNMENT = 128

FP8_DTYPES = frozenset({"fp8_e4m3"})

LAYOUT_TAGS = {
    "x:rows": SHARED_LAYOUT_TAGS["x:rows"],
    "w:rows": "the weight w [N, K] has unit stride along K (any row stride): a checkpoint's linear weight or a "
    "row slice of a fused one",
    "w:gptq": 'gemm.w4a16_mm\'s int4 weight is packed along K (packing "gptq" or "gptq_v2": qweight [K/8, N], '
    "a word's nibbles are 8 k of one column)",
    "bias:unit": "gemm.mm's bias is None or has unit stride (what cuBLASLt's bias epilogue reads; torch.addmm "
    "takes another path for a strided bias, which rounded twice on the H200)",
    "a:tma": "the fp8 operand a has unit stride along K, a 16-byte-aligned start and row stride, rows that do not "
    "overlap, and (3-D) groups packed without gaps: what DeepGEMM's TMA loads read",
    "b:tma": "the fp8 weight b has unit stride along K, a 16-byte-aligned start and row stride, rows that do not "
    "overlap, and (3-D) groups packed without gaps (as a:tma)",
    "out:tma": "the caller's out= (if any) has unit stride along N, a 16-byte-aligned start and row stride, rows that "
    "do not overlap, and (3-D) groups packed without gaps: what DeepGEMM's TMA stores write",
    "a:dense": "gemm.fp8_mm's a is a dense row-major [M, K] (row stride K, unit stride along K): what "
    "torch._scaled_mm's row-wise kernel assumes (packed strides)",
    "b:dense": "gemm.fp8_mm's b is a dense row-major [N, K] (row stride K), so b.t() is the dense column-major "
    "mat2 torch._scaled_mm's row-wise kernel assumes",
    "a_scale:aligned": "the activation scales start at a 16-byte-aligned address (DeepGEMM hands scales already in "
    "its TMA-aligned layout to TMA as they are)",
    "b_scale:dense": "the weight scales are row-major or column-major without gaps (3-D: groups packed without gaps)",
    "m_indices:contiguous": "the per-row group ids m_indices are contiguous",
    "masked_m:contiguous": "the per-group row counts masked_m are contiguous",
}

_VALUES = """checked (OpInputError) for CPU tensors always and on CUDA under
RAPID_LLM_CHECK_BOUNDS=1 (one device sync); unchecked otherwise, when a value
outside the contract gives unspecified output (a library row may read out of
bounds)"""

CONTRACTS = (
    OpContract(
        op=MM,
        parameters=("x", "w", "bias"),
        dtypes=frozenset({"fp32", "fp16", "bf16"}),
        dims=(("num_tokens", TOKEN_BUCKETS), ("n", EXACT), ("k", EXACT)),
        layouts=("x:rows", "w:rows", "bias:unit"),
        check=f"{_HERE}.checks:check_mm",
        doc="""mm(x, w, bias=None) -> out [..., N]

out[..., n] = sum_k x[..., k] * w[n, k] + bias[n]

x: [..., K] float32, float16 or bfloat16, K >= 1, any leading dims (M = the
product of them, M >= 0: the token count the plan buckets), any strides.
w: [N, K] in x's dtype, N >= 1, any strides (the layout a checkpoint's
linear weight has: "NT"). bias: None or [N] in x's dtype, any stride.
out: a new contiguous tensor [..., N] in x's dtype. All on x's device.
Numerics: products accumulated in fp32, rounded once to x's dtype; float32
inputs are multiplied in full fp32 unless the process enabled TF32
(torch.backends.cuda.matmul.allow_tf32), as torch's own matmul.""",
    ),
    OpContract(
        op=W8A16_MM,
        parameters=("x", "w_q", "w_scale", "bias"),
        dtypes=frozenset({"fp16", "bf16"}),
        dims=(("num_tokens", TOKEN_BUCKETS), ("n", EXACT), ("k", EXACT)),
        layouts=("x:rows", "w:rows"),
        check=f"{_HERE}.checks:check_w8a16_mm",
        doc="""w8a16_mm(x, w_q, w_scale, bias=None) -> out [..., N]

out[..., n] = w_scale[n] * sum_k x[..., k] * w_q[n, k] + bias[n]

Weight-only int8, symmetric, one scale per output channel: the layout of
compressed-tensors' W8A16 channel-wise checkpoints (vLLM's "w8a16"):
weight int8 [N, K] as stored (no repack), weight_scale [N, 1] (or [N]).
x: [..., K] float16 or bfloat16, K >= 1, any strides; w_q: [N, K] int8, N >= 1,
any strides; w_scale: [N] or [N, 1], float32 or x's dtype, any strides;
bias: None or [N] in x's dtype. out: a new contiguous tensor [..., N] in x's
dtype. All on x's device. Numerics: x * w_q products (int8 exact in x's
dtype) accumulated in fp32, times the scale in fp32, plus the bias, rounded
once to x's dtype.""",
    ),
    OpContract(
        op=W4A16_MM,
        parameters=("x", "qweight", "scales", "qzeros", "group_size", "packing", "bias"),
        dtypes=frozenset({"fp16", "bf16"}),
        dims=(("num_tokens", TOKEN_BUCKETS), ("n", EXACT), ("k", EXACT)),
        layouts=("x:rows", "w:gptq"),
        check=f"{_HERE}.checks:check_w4a16_mm",
        doc="""w4a16_mm(x, qweight, scales, qzeros, group_size, packing, bias=None) -> out [..., N]

out[..., n] = sum_k x[..., k] * W[k, n] + bias[n],
W[k, n] = (q[k, n] - z[k // g, n]) * scales[k // g, n]   (g = group_size)

Weight-only int4 with one scale and one zero per group of g consecutive k and
output column n, read as the checkpoint stores it (no repack). q and z are
4-bit values (0..15) packed eight to an int32 word; nibble i of a word is
bits 4i..4i+3 ((word >> 4i) & 15, the sign bit of the word being data).

packing="gptq" (AutoGPTQ / GPTQModel "gptq" v1 format, as vLLM's GPTQ and
exllama paths read it): qweight int32 [K/8, N] packed along K: q[k, n] is
nibble k % 8 of qweight[k // 8, n]; qzeros int32 [K/g, N/8] packed along N:
z[j, n] = (nibble n % 8 of qzeros[j, n // 8]) + 1 (v1 stores zero - 1; the
zero used is the stored value plus one, 1..16). Act-order checkpoints
(desc_act with a g_idx permutation) are not accepted: the op takes no g_idx
and reads every k in order.

packing="gptq_v2" (GPTQModel's checkpoint_format "gptq_v2"): the "gptq"
layout with the zeros stored as they are: z = the nibble, 0..15. It is also
what awq_to_gptq_v2 makes of an AWQ checkpoint at load time, so that AWQ
weights take the GPTQ kernels.

packing="awq" (AutoAWQ GEMM format, vLLM's "awq"): qweight int32 [K, N/8]
packed along N in AutoAWQ's interleaved order [0, 2, 4, 6, 1, 3, 5, 7]:
nibble i of qweight[k, c] holds column 8c + order[i], i.e. column 8c + j is
nibble [0, 4, 1, 5, 2, 6, 3, 7][j] (vLLM's AWQ_REVERSE_ORDER); qzeros int32
[K/g, N/8] packed the same way, z = the nibble (no offset).

x: [..., K] float16 or bfloat16, K >= 1, any leading dims (M = their
product, M >= 0); group_size: 64 or 128, dividing K (so K % 8 == 0);
N >= 8 with N % 8 == 0; scales: [K/g, N] float16, bfloat16 or float32;
bias: None or [N] in x's dtype. qweight, qzeros, scales and bias may have
any strides. out: a new contiguous tensor [..., N] in x's dtype. All on x's
device. Numerics: as the reference, which dequantizes W to fp32 (exact: an
integer of at most 5 bits times the stored scale) and multiplies in fp32;
every row accumulates in fp32 and rounds once to x's dtype.""",
    ),
    OpContract(
        op=FP8_BLOCK_MM,
        parameters=("a", "a_scale", "b", "b_scale", "out"),
        dtypes=FP8_DTYPES,
        dims=(("num_tokens", TOKEN_BUCKETS), ("n", EXACT), ("k", EXACT)),
        layouts=("a:tma", "b:tma", "out:tma", "a_scale:aligned", "b_scale:dense"),
        check=f"{_HERE}.checks:check_fp8_block_mm",
        doc="""fp8_block_mm(a, a_scale, b, b_scale, out=None) -> out [M, N] bf16

out[m, n] = sum_k a[m, k] * a_scale[m, k // 128] * b[n, k] * b_scale[n // 128, k // 128]

a: [M, K] float8_e4m3fn, M >= 0, K > 0 and K % 128 == 0; a_scale: [M, K/128]
float32, any strides (row-major or column-major TMA-aligned); b: [N, K]
float8_e4m3fn (the weight, "NT"), N >= 1; b_scale: [ceil(N/128), K/128]
float32 (the last row of blocks covers the N % 128 tail). out: None, or
bfloat16 [M, N] (any strides, no memory shared with an input). All on a's
device; every tensor may be strided. Numerics: see the gemm family's
conventions (ops/gemm/__init__.py).""",
    ),
    OpContract(
        op=FP8_MM,
        parameters=("a", "a_scale", "b", "b_scale", "out_dtype", "bias"),
        dtypes=FP8_DTYPES,
        dims=(("num_tokens", TOKEN_BUCKETS), ("n", EXACT), ("k", EXACT)),
        layouts=("a:tma", "b:tma", "a:dense", "b:dense", "bias:unit"),
        check=f"{_HERE}.checks:check_fp8_mm",
        doc="""fp8_mm(a, a_scale, b, b_scale, out_dtype=torch.bfloat16, bias=None) -> out [M, N]

out[m, n] = a_scale[m] * b_scale[n] * sum_k a[m, k] * b[n, k] + bias[n]

fp8 e4m3 activations with one scale per token (or per tensor) times fp8 e4m3 weights with one scale per
output channel (or per tensor): the layout of FP8 W8A8 checkpoints with channel-wise weight scales
(compressed-tensors "channel" strategy, weight_scale [N, 1]) and dynamic per-token activations.
a: [M, K] float8_e4m3fn, M >= 0, K >= 1; a_scale: float32 [M, 1] (per token: the scale
quantization.per_token_fp8 returns) or [1] / [1, 1] (per tensor); b: [N, K] float8_e4m3fn (the weight,
"NT"), N >= 1; b_scale: float32 [N, 1] (per output channel, as the checkpoint stores it) or [1] / [1, 1]
(per tensor); [1, N] is refused (one layout per meaning). Where M or N is 1 the two readings agree.
out_dtype: torch.bfloat16 (the one output dtype: torch._scaled_mm's row-wise scaling writes bf16 only);
bias: None or bfloat16 [N]. Every tensor may be strided; all on a's device. out: a new contiguous
bfloat16 [M, N].
Numerics: A = a * a_scale and B = b * b_scale are exact in fp32; the reference multiplies them in fp32,
adds the bias and rounds once. Rows may accumulate in the fp8 tensor cores, promoted to fp32 at least
every 128 of K (the native rows: every K step; cuBLAS without fast accumulation). Accuracy every row
promises, per output element, as the block-scaled fp8 GEMMs' (see the family's conventions above, same
reasoning: one bf16 rounding, and the truncation of Hopper's fp8 MMA per 32-wide k step):
  |out - exact| <= 2**-7 * (1 + |exact|) + 2**-7 * sum over 32-wide k steps of max|A[m, step]| * max|B[n, step]|
Scales must be finite and positive, a and b finite (not checked; otherwise unspecified output).""",
    ),
    OpContract(
        op=FP8_GROUPED_MM_CONTIGUOUS,
        parameters=("a", "a_scale", "b", "b_scale", "m_indices", "out"),
        dtypes=FP8_DTYPES,
        dims=(("num_tokens", TOKEN_BUCKETS), ("n", EXACT), ("k", EXACT), ("num_groups", EXACT)),
        layouts=("a:tma", "b:tma", "out:tma", "a_scale:aligned", "b_scale:dense", "m_indices:contiguous"),
        check=f"{_HERE}.checks:check_fp8_grouped_mm_contiguous",
        doc=f"""fp8_grouped_mm_contiguous(a, a_scale, b, b_scale, m_indices, out=None) -> out [M, N] bf16

The MoE expert GEMM over tokens sorted by expert (DeepGEMM's m-grouped
contiguous layout): row m multiplies the weights of group g = m_indices[m],
out[m] = fp8_block_mm(a[m], a_scale[m], b[g], b_scale[g]).

a: [M, K] float8_e4m3fn with M % 128 == 0 (M may be 0), K % 128 == 0;
a_scale: [M, K/128] float32, any strides; b: [G, N, K] float8_e4m3fn, G >= 1;
b_scale: [G, ceil(N/128), K/128] float32; m_indices: [M] int32, any stride;
out: None or bfloat16 [M, N]. All on a's device, no memory shared with out.

Group ids: m_indices[m] in [0, G) names row m's group; a negative id marks a
padding row (engines write -1). Rows are grouped in aligned blocks: each block
of 128 rows (rows 128*j .. 128*j + 127) holds rows of ONE group followed only
by padding rows (a block may be all padding). Engines pad each group's rows to
a multiple of 128 (DeepGEMM's get_m_alignment_for_contiguous_layout()), which
satisfies this. Group ids >= G, and blocks that break the rule, are errors
{_VALUES}.

Specified output: the rows with m_indices[m] >= 0. The rows of padding rows
are unspecified (a row may leave them unwritten, write zeros, or write the
product with its block's group; the reference writes zeros).""",
    ),
    OpContract(
        op=FP8_GROUPED_MM_MASKED,
        parameters=("a", "a_scale", "b", "b_scale", "masked_m", "expected_m", "out"),
        dtypes=FP8_DTYPES,
        dims=(("num_groups", EXACT), ("max_m", EXACT), ("n", EXACT), ("k", EXACT)),
        layouts=("a:tma", "b:tma", "out:tma", "a_scale:aligned", "b_scale:dense", "masked_m:contiguous"),
        check=f"{_HERE}.checks:check_fp8_grouped_mm_masked",
        doc=f"""fp8_grouped_mm_masked(a, a_scale, b, b_scale, masked_m, expected_m, out=None) -> out [G, M_max, N] bf16

The MoE expert GEMM over a fixed-capacity buffer per group (DeepGEMM's
m-grouped masked layout, what DeepEP's low-latency dispatch produces; CUDA
graph friendly: the row counts stay on the device). For each group g and
m < masked_m[g]: out[g, m] = fp8_block_mm(a[g, m], a_scale[g, m], b[g], b_scale[g]).

a: [G, M_max, K] float8_e4m3fn, G >= 1, M_max >= 0, K % 128 == 0; a_scale:
[G, M_max, K/128] float32, any strides; b: [G, N, K] float8_e4m3fn; b_scale:
[G, ceil(N/128), K/128] float32; masked_m: [G] int32, any stride, the rows
used per group; expected_m: a Python int >= 1, a hint of the typical
masked_m (DeepGEMM picks its tile sizes by it; it never changes a result);
out: None or bfloat16 [G, M_max, N]. All on a's device, no memory shared
with out.

masked_m values outside [0, M_max] are errors {_VALUES}.

Specified output: out[g, :masked_m[g]]. The rows out[g, masked_m[g]:] are
unspecified (a row may leave them unwritten or write anything there; the
reference writes zeros).""",
    ),
)

#: DeepGEMM's fp8 GEMMs with fp32 scales are Hopper kernels (sm90a WGMMA + TMA). On sm100 the library
#: converts the fp32 scales to UE8M0 (powers of two) first, a different result: so sm90 only.
DEEP_GEMM_DEVICES = (CapabilityRequirement("cuda", min_sm=90, max_sm=90),)
#: N: the kernels trap unless N % 8 == 0 and store out through TMA (16-byte rows); every N in DeepGEMM's
#: own sm90 tests (and every DeepSeek-V3 projection) is a multiple of 64: the row claims that until GPU
#: evidence covers smaller steps.
_DEEP_GEMM_N = ShapeConstraint("n", multiple_of=64)


def _deep_gemm_row(function, op, *, shape, layout, max_abs_diff, description) -> KernelSpec:
    """A DeepGEMM row (tokenspeed-deepgemm 2.5, backends/deep_gemm/gemm.py:<function>): JIT-compiled on the
    first call of each shape (host time, logged by the adapter; warm up before CUDA-graph capture). No host
    read of device values: masked_m and m_indices are read by the kernel, so the launches are capturable.
    max_abs_diff: the largest |diff| vs the op's torch row over its parity cases on the H200 (evidence
    h200.libraries.parity); priority 10: the only measured non-reference row of its op (evidence
    h200.libraries.bench)."""
    return library_row(
        f"deep_gemm/{function}",
        op,
        f"{_ADAPTERS}:{function}",
        library=deep_gemm_backend.REQUIREMENT,
        capability=DEEP_GEMM_DEVICES,
        dtypes=FP8_DTYPES,
        shape=shape,
        layout=layout,
        parity=(max_abs_diff, "h200.libraries.parity"),
        priority=10,
        graph_safe=True,
        description=description,
    )


_MM_DTYPES = frozenset({"fp16", "bf16"})
#: The fp8 GEMMs' decode-shaped kernels' token range (fp8/splitk.py, made for m <= 64; its grid covers any
#: m): the edge of the 17-128 token bucket, since a row's range must end at one.
FP8_SPLIT_K_MAX_TOKENS = 128


def _fp8_native_row(name, op, target, *, parity, shape=(), description) -> KernelSpec:
    """A row of ops/gemm/fp8/'s kernels: fp8 tl.dot needs sm89+ and is wrong under the CPU interpreter
    (TRITON_FP8_DEVICES); a and b read with unit stride along K (a:tma, b:tma). Priority 5: below DeepGEMM
    until a measured ranking puts it first."""
    return native_row(
        name,
        op,
        f"{_HERE}.fp8.{target}",
        dtypes=FP8_DTYPES,
        capability=TRITON_FP8_DEVICES,
        shape=shape,
        layout=("a:tma", "b:tma"),
        parity=parity,
        priority=5,
        description=description,
    )


#: The decode-shaped kernel's token range (it multiplies a 16-row tile).
SPLIT_K_MAX_TOKENS = 16


def _gemv_row(name, op, function, *, parity, description) -> KernelSpec:
    """A row of mm/gemv.py's one-token kernel (no tl.dot: the CPU interpreter runs it in every dtype);
    priority 5: below the tensor-core rows until a measured ranking puts it first."""
    return native_row(
        name,
        op,
        f"{_HERE}.mm.gemv:{function}",
        dtypes=_MM_DTYPES,
        capability=TRITON_DEVICES,
        shape=(ShapeConstraint("num_tokens", max=1),),
        layout=("x:rows", "w:rows"),
        parity=parity,
        priority=5,
        description=description,
    )


ROWS = (
    reference_row(
        MM,
        f"{_HERE}.reference:mm",
        frozenset({"fp32", "fp16", "bf16"}),
        description="PyTorch reference: fp32 operands, fp32 matmul, one rounding to x's dtype",
    ),
    KernelSpec(
        name="cublas/linear",
        op=MM,
        backend="cublas",
        target="rapid_llm.kernels.backends.cublas.gemm:mm",
        available="rapid_llm.kernels.backends.cublas:available",
        capability=(CapabilityRequirement("cuda", min_sm=70),),
        dtypes=frozenset({"fp32", "fp16", "bf16"}),
        layout=("bias:unit",),
        golden=GoldenRecord(
            verified=True, max_abs_diff=0.03125, baseline="torch/mm", evidence="h200.gemm.parity.cublas_flinear"
        ),
        # the fastest row at every measured bucket above 16 tokens (h200.gemm.bench.mm.presets): first where unmeasured
        priority=20,
        graph_safe=True,
        description="torch.nn.functional.linear: cuBLASLt GEMM, fp32 accumulation, bias in its epilogue",
    ),
    native_row(
        "native/mm",
        MM,
        f"{_HERE}.mm.tiled:mm",
        dtypes=_MM_DTYPES,
        capability=TRITON_DOT_DEVICES,
        layout=("x:rows", "w:rows"),
        parity=(0.03125, "h200.gemm.parity.mm"),
        priority=10,
        description="Triton persistent tiled GEMM, grouped tile order, tiles from ops/gemm/tiles.py",
    ),
    native_row(
        "native/mm_splitk",
        MM,
        f"{_HERE}.mm.splitk:mm",
        dtypes=_MM_DTYPES,
        capability=TRITON_DOT_DEVICES,
        shape=(ShapeConstraint("num_tokens", max=SPLIT_K_MAX_TOKENS),),
        layout=("x:rows", "w:rows"),
        parity=(0.015625, "h200.gemm.parity.mm"),
        # ties or beats cuBLAS at half the measured decode buckets (h200.gemm.bench.mm.presets); measured buckets rank it
        priority=15,
        description="Triton decode GEMM (M <= 16): the weight stream split over K, fp32 slices added in order",
    ),
    _gemv_row(
        "native/mm_gemv",
        MM,
        "mm",
        parity=(0.00048828125, "h200.gemm.parity.gemv"),
        description="Triton one-token GEMM on the CUDA cores: weight tiles kept in their load registers, fp32 FMAs",
    ),
    reference_row(
        W8A16_MM,
        f"{_HERE}.reference:w8a16_mm",
        _MM_DTYPES,
        description="PyTorch reference: fp32 x @ fp32 w_q.T, times the channel scales in fp32, one rounding",
    ),
    native_row(
        "native/w8a16_mm",
        W8A16_MM,
        f"{_HERE}.mm.tiled:w8a16_mm",
        dtypes=_MM_DTYPES,
        capability=TRITON_DOT_DEVICES,
        layout=("x:rows", "w:rows"),
        parity=(0.015625, "h200.gemm.parity.mm"),
        priority=10,
        description="native/mm's tiled kernel reading int8 weights (converted in registers), scales in the epilogue",
    ),
    native_row(
        "native/w8a16_mm_splitk",
        W8A16_MM,
        f"{_HERE}.mm.splitk:w8a16_mm",
        dtypes=_MM_DTYPES,
        capability=TRITON_DOT_DEVICES,
        shape=(ShapeConstraint("num_tokens", max=SPLIT_K_MAX_TOKENS),),
        layout=("x:rows", "w:rows"),
        parity=(0.0078125, "h200.gemm.parity.mm"),
        priority=15,
        description="native/mm_splitk's decode kernel streaming int8 weights (half the bytes), scales per slice",
    ),
    _gemv_row(
        "native/w8a16_mm_gemv",
        W8A16_MM,
        "w8a16_mm",
        parity=(1.9073486328125e-06, "h200.gemm.parity.gemv"),
        description="native/mm_gemv's one-token kernel over int8 weights (widened in registers), scales per column",
    ),
    # CUDA sm80+ (mma.sync m16n8k16)
    *extension_rows(
        W8A16_MM,
        f"{_HERE}.mm.w8a16_cuda:w8a16_mma",
        dtypes=_MM_DTYPES,
        shape=(ShapeConstraint("num_tokens", max=SPLIT_K_MAX_TOKENS),),
        layout=("x:rows", "w:rows"),
        parity={"aot": None, "jit": None},
        priority=5,
        description="CUDA extension: decode int8 GEMM (M <= 16) with mma.sync, each lane's 16 bytes of a weight "
        "row converted exactly (fp16: byte permutes under 1024; bf16: through fp32) straight into the A operand, "
        "one block per 32 rows, K over its 8 (or 16) warps, summed in shared memory, the channel scale once",
    ),
    reference_row(
        W4A16_MM,
        f"{_HERE}.reference:w4a16_mm",
        _MM_DTYPES,
        description="PyTorch reference: unpack and dequantize the int4 weight to fp32, fp32 matmul, one rounding",
    ),
    native_row(
        "native/w4a16_mm_gemv",
        W4A16_MM,
        f"{_HERE}.mm.w4a16:gemv",
        dtypes=_MM_DTYPES,
        capability=TRITON_DEVICES,
        shape=(ShapeConstraint("num_tokens", max=1),),
        layout=("x:rows",),
        parity=(0.001953125, "h200.gemm.parity.w4a16_gemv"),
        # below native/w4a16_mm where no measured ranking decides (the one-token bucket ranks it first:
        # h200.gemm.bench.w4a16.tuned)
        priority=5,
        description="Triton one-token int4 GEMM on the CUDA cores: packed words unpacked in registers, a "
        "scale and zero per group, split over K",
    ),
    native_row(
        "native/w4a16_mm_swap_ab",
        W4A16_MM,
        f"{_HERE}.mm.w4a16_swap_ab:mm",
        dtypes=_MM_DTYPES,
        capability=TRITON_DOT_DEVICES,
        shape=(ShapeConstraint("num_tokens", max=SPLIT_K_MAX_TOKENS),),
        layout=("x:rows",),
        parity=(0.0078125, "h100.gemm.parity.swap_ab"),
        priority=5,
        description="Triton decode int4 GEMM (M <= 16) on the tensor cores: nibble pairs ORed into 16-bit floats, "
        "the (q - zero) weight tile on the MMA's M side, tokens on its N side; split over K",
    ),
    # CUDA sm80+ (mma.sync m16n8k16), GPTQ words only: AWQ checkpoints take it through awq_to_gptq_v2 at load
    *extension_rows(
        W4A16_MM,
        f"{_HERE}.mm.w4a16_cuda:w4a16_mma",
        dtypes=_MM_DTYPES,
        shape=(ShapeConstraint("num_tokens", max=SPLIT_K_MAX_TOKENS),),
        layout=("x:rows", "w:gptq"),
        parity={"aot": None, "jit": None},
        priority=5,
        description="CUDA extension: decode int4 GEMM (M <= 16) with mma.sync, each lane's GPTQ words "
        "dequantized by lop3 straight into the A operand (k order permuted alike in x: no repack), one block "
        "per 32 columns, K over its 8 (or 16) warps, summed in shared memory",
    ),
    native_row(
        "native/w4a16_mm",
        W4A16_MM,
        f"{_HERE}.mm.w4a16:mm",
        dtypes=_MM_DTYPES,
        capability=TRITON_DOT_DEVICES,
        layout=("x:rows",),
        parity=(0.015625, "h200.gemm.parity.w4a16"),
        priority=10,
        description="Triton int4 GEMM: each K step's (q - zero) tile built in registers for tl.dot, the "
        "group scale on the fp32 product; split over K for decode token counts",
    ),
    reference_row(
        FP8_BLOCK_MM,
        f"{_HERE}.reference:fp8_block_mm",
        FP8_DTYPES,
        description="PyTorch reference: dequantize a and b to fp32, fp32 matmul, one rounding to bf16",
    ),
    reference_row(
        FP8_GROUPED_MM_CONTIGUOUS,
        f"{_HERE}.reference:fp8_grouped_mm_contiguous",
        FP8_DTYPES,
        description="PyTorch reference: one fp32 matmul of every row per group, rows kept by a device "
        "mask (no host sync; G times the work of the GEMM)",
    ),
    reference_row(
        FP8_GROUPED_MM_MASKED,
        f"{_HERE}.reference:fp8_grouped_mm_masked",
        FP8_DTYPES,
        description="PyTorch reference: one fp32 matmul per group over all M_max rows, rows past masked_m "
        "zeroed by a device mask (no host sync)",
    ),
    _fp8_native_row(
        "native/fp8_block_mm",
        FP8_BLOCK_MM,
        "tiled:fp8_block_mm",
        parity=(0.03125, "h200.gemm.parity.fp8.rerun"),
        description="Triton persistent tiled fp8 GEMM, grouped tile order, each 128-wide K step's fp32 product "
        "scaled by its a and b block scales",
    ),
    native_row(
        "native/fp8_block_mm_gluon",
        FP8_BLOCK_MM,
        f"{_HERE}.fp8.gluon:fp8_block_mm_gluon",
        dtypes=FP8_DTYPES,
        # wgmma is sm90a; Gluon's API as of the triton it was written against
        capability=(CapabilityRequirement("cuda", min_sm=90, max_sm=90),),
        libraries=(LibraryRequirement("triton", min_version="3.6", below_version="3.7"),),
        shape=(ShapeConstraint("num_tokens", min=129),),
        layout=("a:tma", "b:tma", "out:tma"),
        parity=(0.03125, "h200.gemm.parity.fp8_gluon"),
        # above native/fp8_block_mm: faster at every prefill shape of h200.gemm.bench.fp8_block.gluon
        priority=6,
        description="Gluon persistent warp-specialized fp8 GEMM (sm90): a TMA producer warp (operands and row "
        "scales), two consumer warpgroups each scaling its K step's product while the other's runs, TMA stores",
    ),
    _fp8_native_row(
        "native/fp8_block_mm_splitk",
        FP8_BLOCK_MM,
        "splitk:fp8_block_mm",
        parity=(0.015625, "h200.gemm.parity.fp8.rerun"),
        shape=(ShapeConstraint("num_tokens", max=FP8_SPLIT_K_MAX_TOKENS),),
        description="Triton decode fp8 GEMM (M <= 128): the weight stream split over K, fp32 slices added in order",
    ),
    _fp8_native_row(
        "native/fp8_block_mm_swap_ab",
        FP8_BLOCK_MM,
        "swap_ab:fp8_block_mm",
        parity=(1.0, "h100.gemm.parity.swap_ab"),
        shape=(ShapeConstraint("num_tokens", max=FP8_SPLIT_K_MAX_TOKENS),),
        description="Triton decode fp8 GEMM (M <= 128) with the operands swapped: weight rows on the MMA's M "
        "side, tokens on its N side (fp8 wgmma at 16-token tiles); K split, fp32 slices added in order",
    ),
    _fp8_native_row(
        "native/fp8_block_mm_gemv",
        FP8_BLOCK_MM,
        "gemv:fp8_block_mm_gemv",
        parity=(0.0009765625, "h200.gemm.parity.fp8_gemv"),
        shape=(ShapeConstraint("num_tokens", max=1),),
        description="Triton one-token fp8 GEMM on the CUDA cores: e4m3 weight tiles widened in registers, both "
        "block scales folded into the activation row per K group, fp32 FMAs",
    ),
    reference_row(
        FP8_MM,
        f"{_HERE}.reference:fp8_mm",
        FP8_DTYPES,
        description="PyTorch reference: dequantize a and b to fp32 with their scales, fp32 matmul, bias, one rounding",
    ),
    KernelSpec(
        name="cublas/scaled_mm",
        op=FP8_MM,
        backend="cublas",
        target="rapid_llm.kernels.backends.cublas.gemm:fp8_mm",
        available="rapid_llm.kernels.backends.cublas:available",
        capability=(CapabilityRequirement("cuda", min_sm=89),),
        dtypes=FP8_DTYPES,
        # cuBLASLt's fp8 GEMM (and torch's row-wise CUTLASS kernel): K and N multiples of 16
        shape=(ShapeConstraint("n", multiple_of=16), ShapeConstraint("k", multiple_of=16)),
        layout=("a:tma", "b:tma", "a:dense", "b:dense", "bias:unit"),
        golden=GoldenRecord(
            verified=True, max_abs_diff=0.03125, baseline="torch/fp8_mm", evidence="h200.gemm.parity.fp8.rerun"
        ),
        priority=10,
        graph_safe=True,
        description="torch._scaled_mm: cuBLASLt fp8 GEMM (per-tensor scales) or the row-wise scaled kernel "
        "(per-token x per-channel), no fast accumulation",
    ),
    _fp8_native_row(
        "native/fp8_mm",
        FP8_MM,
        "tiled:fp8_mm",
        parity=(0.03125, "h200.gemm.parity.fp8.rerun"),
        description="ops/gemm/fp8's tiled kernel with per-token/per-channel scales (and the bias) on the fp32 tile",
    ),
    _fp8_native_row(
        "native/fp8_mm_splitk",
        FP8_MM,
        "splitk:fp8_mm",
        parity=(0.03125, "h200.gemm.parity.fp8.rerun"),
        shape=(ShapeConstraint("num_tokens", max=FP8_SPLIT_K_MAX_TOKENS),),
        description="ops/gemm/fp8's split-K decode kernel with per-token/per-channel scales per slice",
    ),
    _deep_gemm_row(
        "fp8_gemm_nt",
        FP8_BLOCK_MM,
        shape=(_DEEP_GEMM_N,),
        layout=("a:tma", "b:tma", "out:tma", "a_scale:aligned", "b_scale:dense"),
        # Largest |diff| vs torch/fp8_block_mm on the H200: 1.0 on the outlier case, whose outputs reach 260
        # (median 65) and whose accumulation term is >= 1.5 everywhere; 0.0156 elsewhere.
        max_abs_diff=1.0,
        description="deep_gemm.fp8_gemm_nt: sm90 1D2D block-scaled fp8 GEMM (TMA, WGMMA, fp32 promotion per 128 K)",
    ),
    _deep_gemm_row(
        "m_grouped_contiguous",
        FP8_GROUPED_MM_CONTIGUOUS,
        shape=(_DEEP_GEMM_N,),
        layout=("a:tma", "b:tma", "out:tma", "a_scale:aligned", "b_scale:dense", "m_indices:contiguous"),
        max_abs_diff=0.03125,
        description="deep_gemm.m_grouped_fp8_gemm_nt_contiguous: one 128-row block per group tile, padding "
        "blocks skipped",
    ),
    _deep_gemm_row(
        "m_grouped_masked",
        FP8_GROUPED_MM_MASKED,
        # M_max: DeepGEMM stores out through one TMA view of [G * M_max, N] in tiles of 64 or 128 rows, so
        # the last tile of a group with M_max % 128 != 0 would spill into the next group's rows.
        shape=(_DEEP_GEMM_N, ShapeConstraint("max_m", multiple_of=128)),
        layout=("a:tma", "b:tma", "out:tma", "a_scale:aligned", "b_scale:dense", "masked_m:contiguous"),
        # Captured in a CUDA graph and replayed on the H200, equal to the eager call on the rows the contract
        # specifies (evidence h200.libraries.graph_capture.masked_groups,
        # h200.libraries.graph_capture.masked_n_tail).
        max_abs_diff=0.015625,
        description="deep_gemm.m_grouped_fp8_gemm_nt_masked: per-group tiles up to masked_m (read on the device)",
    ),
)
