"""Bad input to the attention ops: a clear OpInputError naming the op and the argument, before any kernel.

Runs through the public functions on the CPU (where index values are always checked). Each test builds
one valid call, breaks one thing, and expects the error to name what broke. Failures caught: a row
reading past the page table or the buffer because a length or page id was not checked, GQA with
heads that do not divide, a layout the contract does not describe accepted silently, and an
unchecked bad value crashing the reference row instead of giving an unspecified result.
"""

from __future__ import annotations

import pytest
import torch

import rapid_llm.kernels as rk
from rapid_llm.kernels.dispatcher.contract import OpInputError
from rapid_llm.kernels.ops.checks import value_checks


def _decode_args(batch=2, heads=4, kv_heads=2, dim=16, page=4, lens=(5, 9), pages=8):
    q = torch.randn(batch, heads, dim)
    buffer = torch.randn(pages * page, 2 * kv_heads, dim)
    table = torch.arange(batch * 3, dtype=torch.int32).view(batch, 3)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    return [q, buffer, table, seq_lens, page, dim**-0.5]


def _prefill_args(lengths=(3, 5), heads=4, kv_heads=2, dim=16):
    tokens = sum(lengths)
    q, k, v = torch.randn(tokens, heads, dim), torch.randn(tokens, kv_heads, dim), torch.randn(tokens, kv_heads, dim)
    cu = torch.tensor([0, lengths[0], tokens], dtype=torch.int32)
    return [q, k, v, cu, max(lengths), dim**-0.5, True, False]


def _expect(fn, args, op, argument, fragment=""):
    with pytest.raises(OpInputError) as info:
        fn(*args)
    assert info.value.op == op and info.value.argument == argument, str(info.value)
    assert fragment in str(info.value)


def test_valid_calls_pass():
    assert rk.decode(*_decode_args()).shape == (2, 4, 16)
    assert rk.prefill(*_prefill_args()).shape == (8, 4, 16)


def test_decode_seq_len_past_the_page_table():
    args = _decode_args(lens=(5, 13))  # 3 pages of 4 = 12 positions
    _expect(rk.decode, args, "attention.decode", "seq_lens", "max_pages * page_size = 12")


def test_decode_page_id_past_the_buffer():
    args = _decode_args()
    args[2] = args[2].clone()
    args[2][1, 2] = 8  # the buffer has 8 pages; sequence 1 (9 tokens) uses its third page
    _expect(rk.decode, args, "attention.decode", "page_table", "page ids in [0, 8)")


def test_decode_unused_page_table_entries_are_not_read():
    args = _decode_args()
    args[2] = args[2].clone()
    args[2][0, 2] = 10_000  # sequence 0 has 5 tokens: 2 pages; its third entry is never read
    assert torch.isfinite(rk.decode(*args)).all()


def test_decode_empty_sequence_is_zeros_with_lse_minus_inf():
    """Catches an empty request (seq_lens 0: an engine's padding) rejected, or answered with NaN (0 / 0) or
    another sequence's values instead of FlashInfer's zeros and lse -inf."""
    out, lse = rk.decode(*_decode_args(lens=(0, 9)), return_lse=True)
    assert (out[0] == 0).all() and (lse[0] == float("-inf")).all()
    assert torch.isfinite(out[1]).all() and torch.isfinite(lse[1]).all()


def test_decode_length_below_the_query_tokens():
    """Catches num_q_tokens = 2 with a sequence of 1 position (its queries' K/V not all in the cache)."""
    args = _decode_args(batch=4, lens=(0, 1, 4, 9), pages=16)
    args[2] = torch.arange(6, dtype=torch.int32).view(2, 3)
    args[3] = torch.tensor([1, 9], dtype=torch.int32)
    _expect(rk.decode, [*args, None, None, -1, 0.0, None, False, 2], "attention.decode", "seq_lens", "lengths 0")


def test_decode_heads_that_do_not_divide():
    args = _decode_args(heads=3)
    _expect(rk.decode, args, "attention.decode", "kv_buffer", "dividing q's 3")


def test_decode_buffer_rows_not_a_multiple_of_page_size():
    args = _decode_args()
    args[1] = args[1][:-1]
    _expect(rk.decode, args, "attention.decode", "kv_buffer", "divisible by page_size")


def test_decode_int64_page_table():
    args = _decode_args()
    args[2] = args[2].long()
    _expect(rk.decode, args, "attention.decode", "page_table", "torch.int32")


def test_decode_buffer_dtype_differs_from_q():
    args = _decode_args()
    args[1] = args[1].half()
    _expect(rk.decode, args, "attention.decode", "kv_buffer", "dtype")


def test_prefill_cu_seqlens_not_ending_at_the_token_count():
    args = _prefill_args()
    args[3] = torch.tensor([0, 3, 7], dtype=torch.int32)
    _expect(rk.prefill, args, "attention.prefill", "cu_seqlens", "last offset == 8")


def test_prefill_decreasing_offsets():
    args = _prefill_args()
    args[3] = torch.tensor([0, 6, 5], dtype=torch.int32)
    args[0], args[1], args[2] = args[0][:5], args[1][:5], args[2][:5]
    _expect(rk.prefill, args, "attention.prefill", "cu_seqlens", "non-decreasing")


def test_prefill_max_seqlen_too_small():
    args = _prefill_args()
    args[4] = 4
    _expect(rk.prefill, args, "attention.prefill", "cu_seqlens", "max_seqlen")


def test_prefill_k_with_other_token_count():
    args = _prefill_args()
    args[1] = args[1][:-1]
    _expect(rk.prefill, args, "attention.prefill", "k", "8 tokens")


def test_prefill_causal_must_be_a_bool():
    args = _prefill_args()
    args[6] = 1
    _expect(rk.prefill, args, "attention.prefill", "causal", "a bool")


@pytest.mark.parametrize(
    "argument,value,fragment",
    [
        ("window_left", -2, "an int >= -1"),
        ("window_left", 4.0, "an int >= -1"),
        ("window_left", True, "an int >= -1"),
        ("logits_soft_cap", -1.0, ">= 0"),
        ("logits_soft_cap", float("inf"), "finite"),
        ("logits_soft_cap", float("nan"), ">= 0"),
        ("logits_soft_cap", "30", "real number"),
    ],
)
def test_window_and_soft_cap_values(argument, value, fragment):
    """Catches a negative window (other than -1: off), a float or bool window, and a negative, infinite, NaN or
    non-numeric soft cap passed to a kernel (a NaN cap would silently turn every logit into NaN)."""
    features = {"window_left": -1, "logits_soft_cap": 0.0, argument: value}
    decode_args = _decode_args() + [None, None, *features.values()]
    _expect(rk.decode, decode_args, "attention.decode", argument, fragment)
    _expect(rk.prefill, _prefill_args() + list(features.values()), "attention.prefill", argument, fragment)


@pytest.mark.parametrize(
    "sinks", [torch.zeros(4, dtype=torch.float16), torch.zeros(5), torch.zeros(1, 4), [0.0] * 4], ids=str
)
def test_sinks_must_be_one_fp32_logit_per_query_head(sinks):
    """Catches sinks of another dtype, of a head count not q's, of two dims, or not a tensor reaching a kernel
    (which would read a wrong head's sink or past the tensor)."""
    _expect(rk.decode, _decode_args() + [None, None, -1, 0.0, sinks], "attention.decode", "sinks")
    _expect(rk.prefill, _prefill_args() + [-1, 0.0, sinks], "attention.prefill", "sinks")


def test_mla_prefill_head_dims():
    args = _prefill_args(dim=128, heads=2, kv_heads=2)
    _expect(rk.mla_prefill, args, "attention.mla_prefill", "q", "192")


def test_mla_decode_needs_576_wide_rows():
    q = torch.randn(2, 4, 512)
    cache = torch.randn(16, 512)
    table = torch.zeros(2, 2, dtype=torch.int32)
    args = [q, cache, table, torch.tensor([3, 4], dtype=torch.int32), 8, 0.1]
    _expect(rk.mla_decode, args, "attention.mla_decode", "q", "576")


def _mla_args(batch=2, heads=4, lens=(3, 4), fp8=False):
    q = torch.randn(batch, heads, 576)
    cache = torch.randn(32, 576)
    scale = None
    if fp8:
        cache, scale = cache.to(torch.float8_e4m3fn), torch.ones(1)
    table = torch.arange(2 * batch, dtype=torch.int32).view(batch, 2)
    return [q, cache, table, torch.tensor(lens, dtype=torch.int32), 8, 0.1, -1, 0.0, 1, scale]


@pytest.mark.parametrize(
    "change,argument,fragment",
    [
        ({9: None}, "latent_scale", "one-element torch.float32"),
        ({9: torch.ones(2)}, "latent_scale", "one-element"),
        ({9: torch.ones(1, dtype=torch.float16)}, "latent_scale", "torch.float32"),
        ({9: torch.full((1,), float("inf"))}, "latent_scale", "positive, finite"),
        ({9: torch.zeros(1)}, "latent_scale", "positive, finite"),
        ({8: 3}, "num_q_tokens", "dividing q's 2 rows"),
        ({8: 9}, "num_q_tokens", "1..8"),
    ],
)
def test_mla_decode_fp8_scale_and_query_tokens(change, argument, fragment):
    """Catches an fp8 latent cache read without its scale (or with a malformed, zero or infinite one: every
    output scaled wrong), and a num_q_tokens that does not split q's rows into whole sequences."""
    args = _mla_args(fp8=True)
    for index, value in change.items():
        args[index] = value
    _expect(rk.mla_decode, args, "attention.mla_decode", argument, fragment)


def test_mla_decode_scale_with_a_cache_of_q_dtype():
    """Catches a latent_scale silently ignored (or applied) on a cache of q's dtype."""
    args = _mla_args()
    args[9] = torch.ones(1)
    _expect(rk.mla_decode, args, "attention.mla_decode", "latent_scale", "None (scales belong to an fp8 cache)")


def test_mla_decode_fp8_cache_named_in_the_dtype_error():
    args = _mla_args()
    args[1] = args[1].half()
    _expect(rk.mla_decode, args, "attention.mla_decode", "latent_cache", "float8_e4m3fn (with latent_scale)")


def test_mla_decode_empty_sequence_is_zeros():
    out = rk.mla_decode(*_mla_args(lens=(0, 4)))
    assert (out[0] == 0).all() and torch.isfinite(out[1]).all() and out[1].abs().sum() > 0


def test_prefill_paged_fewer_kv_positions_than_new_tokens():
    q = torch.randn(6, 4, 16)
    buffer = torch.randn(32, 4, 16)
    table = torch.arange(4, dtype=torch.int32).view(2, 2)
    cu = torch.tensor([0, 4, 6], dtype=torch.int32)
    seq_lens = torch.tensor([3, 6], dtype=torch.int32)  # sequence 0 has 4 new tokens but 3 positions
    args = [q, buffer, table, cu, seq_lens, 4, 8, 0.25, True, False]
    _expect(rk.prefill_paged, args, "attention.prefill_paged", "seq_lens", "new tokens")


def test_unchecked_bad_page_ids_give_a_result_not_a_crash():
    """With value checks off (as on CUDA without RAPID_LLM_CHECK_BOUNDS), the contract promises an
    unspecified result, never an out-of-bounds read: the reference row clamps before it gathers."""
    args = _decode_args()
    args[2] = torch.full_like(args[2], 1 << 20)
    with value_checks(False):
        out = rk.decode(*args)
    assert out.shape == (2, 4, 16)


def _one_sequence_paged(new_tokens=2, length=10):
    q = torch.randn(new_tokens, 2, 16)
    buffer = torch.randn(16, 4, 16)  # 16 rows: 2 KV heads of K, then 2 of V
    table = torch.tensor([[0, 1]], dtype=torch.int32)
    cu = torch.tensor([0, new_tokens], dtype=torch.int32)
    lens = torch.tensor([length], dtype=torch.int32)
    return [q, buffer, table, cu, lens, new_tokens, 8, 0.25, True, False, -1, 0.0, None]


def test_tree_mask_bit_order_is_flashinfers_little_endian():
    """Catches the packed mask read in another bit order or layout than FlashInfer's packed_custom_mask: query 0
    may see only position 9 (element 9: byte 1, bit 1), query 1 only position 0 (element 10: byte 1, bit 2), so
    each output is exactly that position's V row."""
    args = _one_sequence_paged()
    out = rk.prefill_paged(
        *args, torch.tensor([0x00, 0x06, 0x00], dtype=torch.uint8), torch.tensor([0, 3], dtype=torch.int32)
    )
    values = args[1][:, 2:]  # rows 0..9 are positions 0..9 (pages 0 and 1)
    torch.testing.assert_close(out[0], values[9], rtol=0, atol=1e-6)
    torch.testing.assert_close(out[1], values[0], rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    "mask,indptr,argument,fragment",
    [
        (torch.zeros(3, dtype=torch.uint8), None, "mask_indptr", "comes with custom_mask"),
        (None, torch.tensor([0, 3], dtype=torch.int32), "custom_mask", "comes with mask_indptr"),
        (torch.zeros(3, dtype=torch.bool), torch.tensor([0, 3], dtype=torch.int32), "custom_mask", "torch.uint8"),
        (torch.zeros(3, dtype=torch.uint8), torch.tensor([0, 2], dtype=torch.int32), "mask_indptr", "3 for sequence 0"),
        (
            torch.zeros(3, dtype=torch.uint8),
            torch.tensor([1, 4], dtype=torch.int32),
            "mask_indptr",
            "<= custom_mask's 3",
        ),
        (torch.zeros(3, dtype=torch.uint8), torch.tensor([0, 3], dtype=torch.int64), "mask_indptr", "torch.int32"),
    ],
)
def test_tree_mask_arguments(mask, indptr, argument, fragment):
    """Catches a tree mask without its offsets (or the reverse), an unpacked bool mask taken as bytes, and a
    segment shorter than its n_b * seq_lens[b] bits or past the mask's end (a kernel reading past it)."""
    args = _one_sequence_paged() + [mask, indptr]
    _expect(rk.prefill_paged, args, "attention.prefill_paged", argument, fragment)
