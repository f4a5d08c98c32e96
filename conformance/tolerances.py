"""Parity tolerances, in one place, keyed by (op, dtype): (atol, rtol) for torch.testing.assert_close.

Why these numbers:
- elementwise.scale is one fp32 multiply and one rounding in every row: exact.
- embedding.vocab_embedding and kvcache.update_kv_buffer copy rows: exact.
- the norm and activation rows accumulate in fp32 in different orders and may use an
  approximate rsqrt, so outputs can differ by one rounding step of the output
  dtype: bf16 has 8 significant bits (one step is 2**-7 relative at worst),
  fp16 has 11 (2**-10), fp32 sums over ~1e4 elements differ by ~1e-6.
"""

TOLERANCES = {
    # fp8 e4m3 has 3 mantissa bits: a different rounding of x / scale before the cast (fp32 in the
    # rows, float64 in the oracle) can move a value by one e4m3 step: 2**-3 relative for normal
    # values, 2**-9 absolute in the subnormal range (the step below 2**-6). The scales are one fp32
    # division (rows) or a float64 one rounded to fp32 (oracle): one fp32 ulp, 2**-23 relative.
    **{(op, dtype): ((2.0 ** -9, 0.125), (0.0, 2.0 ** -23))
       for op in ("quantization.per_token_fp8", "quantization.per_token_group_fp8") for dtype in ("fp32", "fp16", "bf16")},
    # The fp8 KV write: the same single rounding (x / scale cast to e4m3) as the quantization ops.
    **{("kvcache.update_kv_buffer_fp8", dtype): (2.0 ** -9, 0.125) for dtype in ("fp32", "fp16", "bf16")},
    ("embedding.vocab_embedding", "fp32"): (0.0, 0.0),
    ("embedding.vocab_embedding", "fp16"): (0.0, 0.0),
    ("embedding.vocab_embedding", "bf16"): (0.0, 0.0),
    # Rotary: two fp32 products and a sum per output, one rounding; cos/sin read from the same cache.
    ("embedding.rotary", "fp32"): (1e-5, 1e-5),
    ("embedding.rotary", "fp16"): (1e-3, 2e-3),
    ("embedding.rotary", "bf16"): (1e-2, 8e-3),
    ("kvcache.update_kv_buffer", "fp32"): (0.0, 0.0),
    ("kvcache.update_kv_buffer", "fp16"): (0.0, 0.0),
    ("kvcache.update_kv_buffer", "bf16"): (0.0, 0.0),
    ("elementwise.scale", "fp32"): (0.0, 0.0),
    ("elementwise.scale", "fp16"): (0.0, 0.0),
    ("elementwise.scale", "bf16"): (0.0, 0.0),
    ("norm.rms_norm", "fp32"): (1e-5, 1e-5),
    ("norm.rms_norm", "fp16"): (1e-3, 2e-3),
    ("norm.rms_norm", "bf16"): (1e-2, 8e-3),
    # The stored residual is one rounding of an fp32 add (the same in every row); the normalised
    # output then differs as rms_norm's does.
    ("norm.fused_add_rms_norm", "fp32"): (1e-5, 1e-5),
    ("norm.fused_add_rms_norm", "fp16"): (1e-3, 2e-3),
    ("norm.fused_add_rms_norm", "bf16"): (1e-2, 8e-3),
    # One fp32 activation (exp-based, implementations differ by a few fp32 ulp) times up, one
    # rounding: one step of the output dtype at most, as for rms_norm.
    ("activation.silu_and_mul", "fp32"): (1e-5, 1e-5),
    ("activation.silu_and_mul", "fp16"): (1e-3, 2e-3),
    ("activation.silu_and_mul", "bf16"): (1e-2, 8e-3),
    ("activation.gelu_tanh_and_mul", "fp32"): (1e-5, 1e-5),
    ("activation.gelu_tanh_and_mul", "fp16"): (1e-3, 2e-3),
    ("activation.gelu_tanh_and_mul", "bf16"): (1e-2, 8e-3),
}


def tolerance(op: str, dtype: str, output: int = 0) -> tuple[float, float]:
    """(atol, rtol) for output number `output` of the op (ops with several outputs may list one pair each)."""
    value = TOLERANCES[(op, dtype)]
    return value[output] if isinstance(value[0], tuple) else value
