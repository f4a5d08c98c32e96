"""Conditions and evidence shared by many rows (torch-free data).

Native Triton rows need Triton >= 3.0 and run on CUDA sm80+ (Ampere and
newer: bf16 arithmetic and the 16-byte vector loads our kernels are tuned
for; older GPUs are not tested) or, when the process opted in with
RAPID_LLM_TRITON_INTERPRET=1, on the CPU through Triton's interpreter.
"""

from ..dispatcher.spec import CapabilityRequirement, LibraryRequirement

TRITON = LibraryRequirement("triton", min_version="3.0")
TRITON_DEVICES = (
    CapabilityRequirement("cuda", min_sm=80),
    CapabilityRequirement("cpu", triton_interpreter=True),
)

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

#: The GPU parity run the verified rows cite (one file per run: conformance/test_evidence.py checks that it
#: exists, holds every citing row measured on CUDA, and that each row's max |diff| is within its record).
H200_PARITY = "perf/results/h200/parity_2026-11-30.json"

#: The external-library rows' evidence (ci/gpu_library_evidence on the H200, all five libraries present):
#: the parity run of every external row (phase golden) their golden records cite, and the benchmark run
#: (phase bench: each library row beside our native row) their priorities come from.
LIBRARY_PARITY = "perf/results/h200/libraries_2026-12-01/parity_libraries.json"
LIBRARY_BENCH = "perf/results/h200/libraries_2026-12-01/bench_libraries.json"

#: The native attention rows' evidence (ci/gpu_attention_evidence on the H200, the libraries present as
#: peers): one parity run per row (parity_native_<row>.json, cited by that row's golden record), the
#: benchmark run beside the library rows (priorities) and the tile sweep (launch heuristics).
ATTENTION_RESULTS = "perf/results/h200/attention_2026-12-01"
ATTENTION_BENCH = "perf/results/h200/attention_2026-12-01/bench_attention.json"
ATTENTION_SWEEP = "perf/results/h200/attention_2026-12-01/sweep_attention_tiles.json"
