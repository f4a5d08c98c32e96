"""rapid_llm: kernels for LLM inference engines, selected by data, explained on demand.

Torch-free at import. The public API lives in `rapid_llm.kernels`.
"""

__version__ = "0.1.0"


def __getattr__(name):
    if name == "kernels":
        import importlib

        return importlib.import_module("rapid_llm.kernels")
    raise AttributeError(f"module 'rapid_llm' has no attribute {name!r}")
