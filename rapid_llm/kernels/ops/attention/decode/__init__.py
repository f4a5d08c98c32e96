"""attention.decode's native kernels, each its own row (ops/attention/__init__.py):

triton.py  native/decode (KV of q's dtype) and native/decode_fp8 (fp8-e4m3 KV): one Triton kernel
cuda.py    aot/decode_fp8 and jit/decode_fp8: the CUDA extension's fp8-KV decode, built ahead or on first use
launch.py  the Triton kernel's launch policy (tiles, split counts)
"""
