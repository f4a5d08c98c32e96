"""embedding family rows (data only, torch-free). Contracts: ops/interfaces.py."""

from ...dispatcher.spec import GoldenRecord, KernelSpec
from ..common_rows import TRITON, TRITON_DEVICES
from ..interfaces import FLOAT_DTYPES

ROWS = (
    KernelSpec(
        name="torch/vocab_embedding",
        op="embedding.vocab_embedding",
        backend="torch",
        target="rapid_llm.kernels.ops.embedding.reference:vocab_embedding",
        dtypes=FLOAT_DTYPES,
        golden=GoldenRecord.reference(),
        # Checking ids for negatives reads them on the host: a device sync, not capturable.
        graph_safe=False,
        description="PyTorch reference: masked index_select; checks ids on the host",
    ),
    KernelSpec(
        name="native/vocab_embedding",
        op="embedding.vocab_embedding",
        backend="native",
        target="rapid_llm.kernels.ops.embedding.vocab_embedding:vocab_embedding",
        dtypes=FLOAT_DTYPES,
        libraries=(TRITON,),
        capability=TRITON_DEVICES,
        layout=("table:rows",),
        # Bitwise equal to torch/vocab_embedding on every case (H200 and CPU interpreter).
        golden=GoldenRecord(verified=True, max_abs_diff=0.0, baseline="torch/vocab_embedding",
                            evidence="perf/results/h200/parity_2026-11-29_run6.json"),
        # 3.77 TB/s (89% of copy) for 32768 ids into a 152064 x 4096 bf16 table, 1.04x torch's
        # F.embedding; 1.3-1.6 us per call at 1-64 tokens in graph replay; the reference syncs on
        # its id check (perf/results/h200/bench_h200.json).
        priority=10,
        description="Triton: one program per (token, column block), int64 row offsets, no host sync",
    ),
    KernelSpec(
        name="torch/rotary",
        op="embedding.rotary",
        backend="torch",
        target="rapid_llm.kernels.ops.embedding.reference:rotary",
        dtypes=FLOAT_DTYPES,
        golden=GoldenRecord.reference(),
        # The position check reads positions on the host: a device sync, not capturable.
        graph_safe=False,
        description="fp32 PyTorch reference (NeoX and GPT-J), checks positions on the host",
    ),
    KernelSpec(
        name="native/rotary",
        op="embedding.rotary",
        backend="native",
        target="rapid_llm.kernels.ops.embedding.rotary:rotary",
        dtypes=FLOAT_DTYPES,
        libraries=(TRITON,),
        capability=TRITON_DEVICES,
        layout=("qk:rows",),
        # Largest |diff| vs torch/rotary: 0.015625 in bf16 on the H200 (one bf16 step).
        golden=GoldenRecord(verified=True, max_abs_diff=0.015625, baseline="torch/rotary",
                            evidence="perf/results/h200/parity_2026-11-29_run8.json"),
        # 3.76-3.89 TB/s (88-91% of copy) at 32768 tokens, 32/8 heads of 128, bf16, above
        # FlashInfer's 3.61 TB/s in the same run; ~14x torch eager; 1.6-1.7 us per call at decode
        # sizes in graph replay (perf/results/h200/sweep_rotary_fp8_2026-11-29.json, bench_h200.json).
        priority=10,
        description="Triton: one program per (token, q or k), all heads as one tile, no host sync",
    ),
)
