"""External libraries: one package per library, each with its availability probe (and, as rows arrive,
the thin adapters that translate our op contracts to the library's API).

    backends/<library>/__init__.py   REQUIREMENT (the version range the adapters are written and tested
                                     for), available() -> (ok, reason): installed, in range, imports
    backends/probe.py                the shared probe

Torch-free and library-free at import: a library is imported only by its probe
(at a row's load(), or by `rapid-llm doctor`), so a missing or broken library
is a reason in explain(), never a crash. LIBRARY_PROBES maps each library to
its package; `rapid-llm doctor` shows every probe's verdict.
"""

LIBRARY_PROBES = {
    "flashinfer": "rapid_llm.kernels.backends.flashinfer",
    "flash_attn": "rapid_llm.kernels.backends.flash_attn",
    "flash_mla": "rapid_llm.kernels.backends.flash_mla",
    "deep_gemm": "rapid_llm.kernels.backends.deep_gemm",
    "deep_ep": "rapid_llm.kernels.backends.deep_ep",
}
