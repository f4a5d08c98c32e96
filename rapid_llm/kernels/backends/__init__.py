"""Adapters to external libraries (FlashInfer, FlashAttention, ...), one package per library.

Each adapter is imported only through a row's lazy target. None exist yet:
the first arrive with the attention and GEMM families.
"""
