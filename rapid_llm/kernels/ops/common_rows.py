"""Conditions and evidence shared by many rows (torch-free data).

Native Triton rows need Triton >= 3.0 and run on CUDA sm80+ (Ampere and
newer: bf16 arithmetic and the 16-byte vector loads our kernels are tuned
for; older GPUs are not tested) or, when the process opted in with
RAPID_LLM_TRITON_INTERPRET=1, on the CPU through Triton's interpreter.
"""

from ..dispatcher.spec import CapabilityRequirement, LibraryRequirement

TRITON = LibraryRequirement("triton", min_version="3.0")
TRITON_DEVICES = (CapabilityRequirement("cuda", min_sm=80), CapabilityRequirement("cpu", triton_interpreter=True))

#: Native rows whose kernels multiply bf16 tiles with tl.dot (the attention kernels): CUDA sm80+, or the
#: CPU interpreter for fp32 and fp16 only. Triton's interpreter (triton 3.9, the top of the range
#: pyproject allows) computes tl.dot on bf16 operands wrongly, orders of magnitude off, while its fp32 and
#: fp16 products are exact: such a row would return garbage in bf16 there, with no error.
#: (INTERPRETER_DOT is that interpreter capability alone, for rows with their own CUDA requirement.)
INTERPRETER_BF16_DOT = "Triton's interpreter computes tl.dot on bf16 operands wrongly (garbage, no error)"
INTERPRETER_DOT = CapabilityRequirement(
    "cpu", triton_interpreter=True, dtypes=("fp32", "fp16"), reason=INTERPRETER_BF16_DOT
)
TRITON_DOT_DEVICES = (CapabilityRequirement("cuda", min_sm=80), INTERPRETER_DOT)

#: Native rows that cast to fp8 e4m3 need the hardware cast of sm89+ (Ada, Hopper). Not the CPU
#: interpreter: its fp32 -> e4m3 cast drops the carry when rounding up a mantissa (127.99 becomes
#: 64, not 128), so its results are wrong; these rows are verified on the GPU only.
TRITON_FP8_DEVICES = (CapabilityRequirement("cuda", min_sm=89),)
#: Native rows that only read fp8 e4m3 (an fp8 KV cache) and widen it: the hardware conversion of sm89+,
#: or the CPU interpreter, whose e4m3 -> fp16/fp32 widening is exact (only its rounding casts are wrong).
TRITON_FP8_READ_DEVICES = (
    CapabilityRequirement("cuda", min_sm=89),
    CapabilityRequirement("cpu", triton_interpreter=True),
)

#: Rows of the CUDA extension (aot/ and jit/): CUDA sm80+ like the native rows; the code runs on
#: the archs the build targets (TORCH_CUDA_ARCH_LIST).
CUDA_EXTENSION_DEVICES = (CapabilityRequirement("cuda", min_sm=80),)
