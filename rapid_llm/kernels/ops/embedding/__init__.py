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
        description="Triton: one program per (token, column block), int64 row offsets, no host sync",
    ),
)
