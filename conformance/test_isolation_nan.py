"""Attention: one request's NaN never reaches another; NaN propagates where it is read; exact, bounded references.

The one semantics every attention row follows (the attention contracts): a NaN in a
query's q or in a K row it attends makes its out and lse NaN; a NaN in an attended V
element makes that out element NaN. Another sequence's tokens, positions past a
sequence's seq_len and buffer rows no sequence uses (e.g. SGLang's padding slot 0 that
unused page-table entries name) never affect a query, even if NaN or inf. A non-finite
K/V of a later token of the same sequence (masked by causality) may reach that
sequence's earlier queries: kernels that multiply whole tiles compute 0 * NaN there, as
the peer libraries do; it never leaves the sequence. Every row that runs
here (the reference; native Triton rows under RAPID_LLM_TRITON_INTERPRET=1),
in fp32, fp16 and bf16, is called through a PlannedOp forcing it, on inputs
poisoned one way at a time, and compared with the same call on clean inputs:
untouched queries must come out bitwise equal, touched ones NaN. The ragged prefill library rows
need the call site's promise qkv:finite (their kernels do not isolate non-finite values), which
these calls do not make: they skip with that reason, and the last test holds dispatch to it.

Also: the weights are exact with logits near 5e4 (exp(s - lse) in fp32 is
0.2% off there); the reference rows' memory stays within a small multiple of
the call's inputs + output (measured in a subprocess: peak RSS), and split
into many small steps they still match the float64 oracle.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from conformance.rows_here import TABLE, planner_forcing, skip_reason, torch_device
from rapid_llm.kernels.dispatcher import Device, Libraries, NoEligibleKernel, dispatch
from rapid_llm.kernels.ops.checks import value_checks
from rapid_llm.kernels.ops.attention import DECODE, FINITE, MLA_DECODE, MLA_PREFILL, PREFILL, PREFILL_PAGED, checks

DEVICE = torch_device()
NAN = float("nan")
#: fp16 reaches the native rows that serve half precision only (TMA and Gluon kernels, on the GPU); bf16 the
#: library rows (FlashInfer, FA3, FlashMLA serve bf16 only)
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DTYPE_IDS = ["fp32", "fp16", "bf16"]
_CHECKS = {
    PREFILL: checks.check_prefill,
    MLA_PREFILL: checks.check_mla_prefill,
    DECODE: checks.check_decode,
    MLA_DECODE: checks.check_mla_decode,
    PREFILL_PAGED: checks.check_prefill_paged,
}


def _rows(op):
    return [row.name for row in TABLE.rows(op)]


def _call(op, row, args):
    """args through a PlannedOp forcing `row` (the op's check first); skips when the row cannot run here."""
    _, layout, dims = _CHECKS[op](*args)
    label = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[args[0].dtype]
    try:
        planned = planner_forcing(op, row).plan(op, dtype=label, shape=dict(dims), layout=layout)
    except NoEligibleKernel as error:
        pytest.skip(skip_reason(row, error))
    result = planned(*args)
    return result if isinstance(result, tuple) else (result, None)


def _randn(*shape, generator, scale=1.0, dtype=torch.float32):
    return (torch.randn(shape, generator=generator) * scale).to(dtype).to(DEVICE)


def _same(got, want, where=None):
    """Bitwise equal (NaN positions included) on the selected rows."""
    got, want = (got, want) if where is None else (got[where], want[where])
    return torch.equal(torch.isnan(got), torch.isnan(want)) and torch.equal(got.nan_to_num(), want.nan_to_num())


# ---------------------------------------------------------------------------
# Ragged prefill (prefill, mla_prefill): sequences of 5, 9 and 4 tokens
# ---------------------------------------------------------------------------

_LENGTHS = (5, 9, 4)
_STARTS = (0, 5, 14)


def _ragged(op, dtype):
    generator = torch.Generator().manual_seed(11)
    heads, kv_heads, dim, value_dim = (2, 2, 192, 128) if op == MLA_PREFILL else (4, 2, 128, 128)
    tokens = sum(_LENGTHS)
    q = _randn(tokens, heads, dim, generator=generator, dtype=dtype)
    k = _randn(tokens, kv_heads, dim, generator=generator, dtype=dtype)
    v = _randn(tokens, kv_heads, value_dim, generator=generator, dtype=dtype)
    cu_seqlens = torch.tensor([0, *torch.tensor(_LENGTHS).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    return [q, k, v, cu_seqlens, max(_LENGTHS), dim**-0.5, True, True]


def _tokens_of(sequence):
    return slice(_STARTS[sequence], _STARTS[sequence] + _LENGTHS[sequence])


RAGGED = [pytest.param(op, row, id=row) for op in (PREFILL, MLA_PREFILL) for row in _rows(op)]


@pytest.mark.parametrize("op, row", RAGGED)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
class TestRaggedIsolation:
    @pytest.mark.parametrize("poison", [NAN, float("inf")], ids=["nan", "inf"])
    def test_value_poison_in_one_sequence_stays_in_it(self, op, row, dtype, poison, request):
        """Catches sequences padded with the next sequence's tokens (a NaN V leaking into its neighbours
        through 0 * NaN): a NaN/inf in sequence 1's first V row changes nothing of sequences 0 and 2."""
        args = _ragged(op, dtype)
        clean = _call(op, row, args)
        args[2] = args[2].clone()
        args[2][_STARTS[1], 0, 3] = poison
        out, lse = _call(op, row, args)
        for other in (0, 2):
            assert _same(out, clean[0], _tokens_of(other)) and _same(lse, clean[1], _tokens_of(other)), (
                f"sequence {other} changed by a poisoned V of sequence 1"
            )
        group = args[0].shape[1] // args[1].shape[1]
        if math.isnan(poison):  # every query of sequence 1 attends its first token
            assert torch.isnan(out[_tokens_of(1), :group, 3]).all(), "an attended NaN V did not reach the output"

    def test_nan_key_makes_its_sequences_out_and_lse_nan(self, op, row, dtype, request):
        """Catches lse = where(l > 0, m + log l, -inf) (or a finite max that skipped the NaN): an attended NaN
        key must give NaN out and lse, and leave the other sequences bitwise unchanged."""
        args = _ragged(op, dtype)
        clean = _call(op, row, args)
        args[1] = args[1].clone()
        args[1][_STARTS[1], 0, 0] = NAN
        out, lse = _call(op, row, args)
        group = args[0].shape[1] // args[1].shape[1]
        assert torch.isnan(out[_tokens_of(1), :group]).all(), "out of a query attending a NaN key is not NaN"
        assert torch.isnan(lse[_tokens_of(1), :group]).all(), (
            f"lse of a query attending a NaN key: {lse[_tokens_of(1), :group].flatten().tolist()}"
        )
        for other in (0, 2):
            assert _same(out, clean[0], _tokens_of(other)) and _same(lse, clean[1], _tokens_of(other))

    def test_nan_query_poisons_only_its_own_row(self, op, row, dtype, request):
        args = _ragged(op, dtype)
        clean = _call(op, row, args)
        args[0] = args[0].clone()
        token = _STARTS[1] + 2
        args[0][token, 1, 5] = NAN
        out, lse = _call(op, row, args)
        assert torch.isnan(out[token, 1]).all() and torch.isnan(lse[token, 1]), "a NaN query's row is not NaN"
        others = torch.ones(out.shape[:2], dtype=torch.bool, device=DEVICE)
        others[token, 1] = False
        assert _same(out, clean[0], others) and _same(lse, clean[1], others), "a NaN query changed another row"

    @pytest.mark.parametrize("poison", [NAN, float("inf")], ids=["nan", "inf"])
    def test_a_last_tokens_poison_stays_in_its_sequence(self, op, row, dtype, poison, request):
        """Catches a causal tile that reaches past its sequence: a NaN/inf in the K/V of sequence 1's last token
        must leave sequences 0 and 2 bitwise unchanged (sequence 1's earlier queries are unspecified), and
        make the last query, which attends it, NaN."""
        args = _ragged(op, dtype)
        clean = _call(op, row, args)
        last = _STARTS[1] + _LENGTHS[1] - 1
        args[1], args[2] = args[1].clone(), args[2].clone()
        args[1][last] = poison
        args[2][last] = poison
        out, lse = _call(op, row, args)
        for other in (0, 2):
            assert _same(out, clean[0], _tokens_of(other)) and _same(lse, clean[1], _tokens_of(other)), (
                f"a poisoned K/V of sequence 1 changed sequence {other}"
            )
        if math.isnan(poison):
            assert torch.isnan(out[last]).all() and torch.isnan(lse[last]).all()


# ---------------------------------------------------------------------------
# Paged (decode, mla_decode, prefill_paged): page 0 is SGLang's padding slot, named by unused table entries
# ---------------------------------------------------------------------------

_SEQ_LENS = (5, 19, 3)
_PAGE = 4
_MLA_PAGE = 64


def _page_table(generator, page):
    """[B, 7] pages of _SEQ_LENS (shuffled over pages 1..14; page 0 never used), unused entries 0."""
    needed = [math.ceil(n / page) for n in _SEQ_LENS]
    order = (torch.randperm(14, generator=generator) + 1).tolist()
    table = torch.zeros((len(_SEQ_LENS), 7), dtype=torch.int32)
    cursor = 0
    for b, count in enumerate(needed):
        table[b, :count] = torch.tensor(order[cursor : cursor + count], dtype=torch.int32)
        cursor += count
    return table.to(DEVICE)


def _unused_rows(table, rows, page):
    """Bool [rows]: buffer rows no position < seq_len of any sequence names (page 0, unused pages, page tails)."""
    used = torch.zeros(rows, dtype=torch.bool)
    for b, length in enumerate(_SEQ_LENS):
        for position in range(length):
            used[_row_of(table, b, position, page)] = True
    return ~used.to(DEVICE)


def _row_of(table, sequence, position, page):
    return int(table[sequence, position // page]) * page + position % page


def _decode_args(op, generator, dtype, mla_heads):
    """decode: GQA 4/2 heads of 128, pages of 4 rows; mla_decode: pages of 64 rows (what its TMA and Gluon rows
    serve), mla_heads query heads."""
    page = _MLA_PAGE if op == MLA_DECODE else _PAGE
    table = _page_table(generator, page)
    seq_lens = torch.tensor(_SEQ_LENS, dtype=torch.int32, device=DEVICE)
    rows = 15 * page
    if op == MLA_DECODE:
        return [
            _randn(3, mla_heads, 576, generator=generator, dtype=dtype),
            _randn(rows, 576, generator=generator, dtype=dtype),
            table,
            seq_lens,
            page,
            192**-0.5,
        ]
    return [
        _randn(3, 4, 128, generator=generator, dtype=dtype),
        _randn(rows, 4, 128, generator=generator, dtype=dtype),
        table,
        seq_lens,
        _PAGE,
        128**-0.5,
        None,
        None,
    ]


def _prefill_paged_args(generator, dtype):
    table = _page_table(generator, _PAGE)
    new_tokens = (2, 6, 3)
    q = _randn(sum(new_tokens), 4, 128, generator=generator, dtype=dtype)
    cu = torch.tensor([0, 2, 8, 11], dtype=torch.int32, device=DEVICE)
    seq_lens = torch.tensor(_SEQ_LENS, dtype=torch.int32, device=DEVICE)
    return [
        q,
        _randn(15 * _PAGE, 4, 128, generator=generator, dtype=dtype),
        table,
        cu,
        seq_lens,
        6,
        _PAGE,
        128**-0.5,
        True,
        True,
    ]


#: (op, row, MLA query heads): MLA decode with 16 heads (its few-heads kernels) and 64 (the ping-pong kernel)
PAGED = [
    pytest.param(op, row, heads, id=row if op != MLA_DECODE else f"{row}-{heads}_heads")
    for op in (DECODE, MLA_DECODE, PREFILL_PAGED)
    for row in _rows(op)
    for heads in ((16, 64) if op == MLA_DECODE else (16,))
]


def _paged_args(op, dtype, mla_heads):
    generator = torch.Generator().manual_seed(12)
    if op == PREFILL_PAGED:
        return _prefill_paged_args(generator, dtype)
    return _decode_args(op, generator, dtype, mla_heads)


def _page_of(op, args):
    return args[6] if op == PREFILL_PAGED else args[4]


def _query_sequences(op):
    """Per sequence, the output rows of its queries."""
    if op == PREFILL_PAGED:
        return [slice(0, 2), slice(2, 8), slice(8, 11)]
    return [slice(b, b + 1) for b in range(len(_SEQ_LENS))]


@pytest.mark.parametrize("op, row, mla_heads", PAGED)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
class TestPagedIsolation:
    @pytest.mark.parametrize("poison", [NAN, float("inf")], ids=["nan", "inf"])
    def test_unused_buffer_rows_never_reach_any_sequence(self, op, row, mla_heads, dtype, poison, request):
        """Catches positions past seq_len read from buffer row 0 (or any row) and masked by a zero weight:
        SGLang's padding slot 0 and every row no sequence uses hold NaN/inf, and no output may change."""
        args = _paged_args(op, dtype, mla_heads)
        clean = _call(op, row, args)
        args[1] = args[1].clone()
        args[1][_unused_rows(args[2].cpu(), args[1].shape[0], _page_of(op, args))] = poison
        out, lse = _call(op, row, args)
        assert _same(out, clean[0]), "a buffer row no sequence uses changed an output"
        if lse is not None:
            assert _same(lse, clean[1]), "a buffer row no sequence uses changed an lse"

    def test_nan_in_one_sequences_key_stays_in_it(self, op, row, mla_heads, dtype, request):
        """Catches a NaN K row of sequence 1 reaching sequences 0 and 2, or not reaching its own lse."""
        args = _paged_args(op, dtype, mla_heads)
        clean = _call(op, row, args)
        args[1] = args[1].clone()
        # position 0's K head 0 (MLA: the latent's first dim, a key and a value element)
        args[1][_row_of(args[2].cpu(), 1, 0, _page_of(op, args)), 0] = NAN
        out, lse = _call(op, row, args)
        mine = _query_sequences(op)[1]
        heads = slice(0, 2) if op != MLA_DECODE else slice(None)
        assert torch.isnan(out[mine, heads]).all(), "out of a query attending a NaN key is not NaN"
        if lse is not None:
            assert torch.isnan(lse[mine, heads]).all(), f"lse attending a NaN key: {lse[mine, heads].tolist()}"
        for other in (0, 2):
            rows = _query_sequences(op)[other]
            assert _same(out, clean[0], rows), f"sequence {other} changed by sequence 1's NaN key"
            if lse is not None:
                assert _same(lse, clean[1], rows)

    def test_nan_query_poisons_only_its_own_row(self, op, row, mla_heads, dtype, request):
        """Catches a NaN query's lse left finite or -inf (a max that skips NaN, a sum tested with l > 0), or
        its NaN reaching another query or head."""
        args = _paged_args(op, dtype, mla_heads)
        clean = _call(op, row, args)
        args[0] = args[0].clone()
        token = 4 if op == PREFILL_PAGED else 1
        args[0][token, 1, 5] = NAN
        out, lse = _call(op, row, args)
        assert torch.isnan(out[token, 1]).all(), "a NaN query's output row is not NaN"
        others = torch.ones(out.shape[:2], dtype=torch.bool, device=DEVICE)
        others[token, 1] = False
        assert _same(out, clean[0], others), "a NaN query changed another query's output"
        if lse is not None:
            assert torch.isnan(lse[token, 1]) and _same(lse, clean[1], others), "lse of a NaN query is not NaN"

    @pytest.mark.parametrize("poison", [NAN, float("inf")], ids=["nan", "inf"])
    def test_a_new_tokens_poison_stays_in_its_sequence(self, op, row, mla_heads, dtype, poison, request):
        """prefill_paged, causal: a NaN/inf in the K/V of sequence 1's last new token must not change another
        sequence's queries (sequence 1's earlier queries are unspecified); its last query attends it: NaN."""
        if op != PREFILL_PAGED:
            pytest.skip("one query per sequence: no causal mask among queries")
        args = _paged_args(op, dtype, mla_heads)
        clean = _call(op, row, args)
        args[1] = args[1].clone()
        args[1][_row_of(args[2].cpu(), 1, _SEQ_LENS[1] - 1, _PAGE)] = poison
        out, lse = _call(op, row, args)
        others = torch.ones(out.shape[0], dtype=torch.bool, device=DEVICE)
        others[_query_sequences(op)[1]] = False  # sequence 1's queries: its last one (position 18) attends the token
        assert _same(out, clean[0], others) and _same(lse, clean[1], others), (
            "a poisoned K/V of sequence 1 changed another sequence's query"
        )
        if math.isnan(poison):
            assert torch.isnan(out[7]).all() and torch.isnan(lse[7]).all()


@pytest.mark.parametrize("op, row", [pytest.param(op, row, id=row) for op in (DECODE, MLA_DECODE) for row in _rows(op)])
def test_empty_sequence_gives_zeros_and_leaves_the_others(op, row, request):
    """seq_lens[b] = 0 (an engine's padding request) gives zeros for that query on every row (no key: out 0),
    the others unchanged, with its pages full of NaN. Catches a row returning NaN (0 / 0) there, reading an
    empty sequence's page-table entries, or an empty sequence's garbage reaching its neighbours."""
    args = _paged_args(op, torch.float32, 16)
    clean = _call(op, row, args)
    args[3] = args[3].clone()
    args[3][1] = 0
    args[1] = args[1].clone()
    args[1][[_row_of(args[2].cpu(), 1, p, _page_of(op, args)) for p in range(_SEQ_LENS[1])]] = NAN
    out, _ = _call(op, row, args)
    assert torch.equal(out[1], torch.zeros_like(out[1])), "a query with no key is not 0"
    assert _same(out, clean[0], [0, 2]), "an empty sequence changed another sequence's output"


@pytest.mark.parametrize("row", _rows(MLA_DECODE))
def test_fp8_latent_unused_rows_holding_nan_bytes_never_reach_any_sequence(row, request):
    """The fp8 latent cache: e4m3 NaN (0x7f) in every row no sequence uses changes no output, and a NaN byte in
    sequence 1's latent stays in sequence 1."""
    generator = torch.Generator().manual_seed(14)
    table = _page_table(generator, _MLA_PAGE)
    q = _randn(3, 16, 576, generator=generator).half()
    cache = (_randn(15 * _MLA_PAGE, 576, generator=generator) * 8).to(torch.float8_e4m3fn)
    scale = torch.tensor([0.125], device=DEVICE)
    lens = torch.tensor(_SEQ_LENS, dtype=torch.int32, device=DEVICE)
    args = [q, cache, table, lens, _MLA_PAGE, 192**-0.5, -1, 0.0, 1, scale]
    clean = _call(MLA_DECODE, row, args)
    args[1] = cache.clone()
    args[1].view(torch.uint8)[_unused_rows(table.cpu(), cache.shape[0], _MLA_PAGE)] = 0x7F
    args[1].view(torch.uint8)[_row_of(table.cpu(), 1, 2, _MLA_PAGE), 3] = 0x7F
    out, _ = _call(MLA_DECODE, row, args)
    assert _same(out, clean[0], [0, 2]), "an unused fp8 row or sequence 1's NaN changed another sequence"
    assert torch.isnan(out[1]).any(), "sequence 1's NaN latent element did not reach its own output"


@pytest.mark.parametrize("row", _rows(PREFILL_PAGED))
@pytest.mark.parametrize("poison", [NAN, float("inf")], ids=["nan", "inf"])
def test_tree_masked_poison_stays_in_its_sequence(row, poison, request):
    """prefill_paged with a tree mask: a NaN/inf K/V at a draft position of sequence 1 that no query attends
    (its bits clear) must not change sequences 0 and 2 (sequence 1's queries are unspecified)."""
    args = _paged_args(PREFILL_PAGED, torch.float32, 16)
    new_tokens, lengths = (2, 6, 3), _SEQ_LENS
    masks = []
    for n, length in zip(new_tokens, lengths):
        mask = torch.ones((n, length), dtype=torch.bool)
        mask[:, length - n :] = torch.eye(n, dtype=torch.bool) | torch.tril(torch.ones(n, n, dtype=torch.bool), -2)
        masks.append(mask)
    masks[1][:, lengths[1] - 2] = False  # sequence 1's fifth draft token: no query sees it
    packed, offsets = [], [0]
    for mask in masks:
        bits = torch.cat([mask.flatten(), torch.zeros((-mask.numel()) % 8, dtype=torch.bool)]).view(-1, 8)
        packed.append((bits.long() << torch.arange(8)).sum(-1).to(torch.uint8))
        offsets.append(offsets[-1] + packed[-1].numel())
    args[8] = False
    args += [-1, 0.0, None, torch.cat(packed).to(DEVICE), torch.tensor(offsets, dtype=torch.int32, device=DEVICE)]
    clean = _call(PREFILL_PAGED, row, args)
    args[1] = args[1].clone()
    args[1][_row_of(args[2].cpu(), 1, lengths[1] - 2, _PAGE)] = poison
    out, lse = _call(PREFILL_PAGED, row, args)
    others = torch.ones(out.shape[0], dtype=torch.bool, device=DEVICE)
    others[_query_sequences(PREFILL_PAGED)[1]] = False
    assert _same(out, clean[0], others) and _same(lse, clean[1], others), "a tree-hidden poison left its sequence"


@pytest.mark.parametrize("row", _rows(DECODE))
def test_fp8_unused_rows_holding_nan_bytes_never_reach_any_sequence(row, request):
    """The fp8 buffer: e4m3 NaN (0x7f) in every row no sequence uses (page 0 included) changes no output, and a
    NaN byte in sequence 1's K makes its output NaN (catches a widening that reads 0x7f as 480, as Triton's
    interpreter does) without reaching the others."""
    generator = torch.Generator().manual_seed(13)
    table = _page_table(generator, _PAGE)
    q = _randn(3, 4, 128, generator=generator).half()
    buffer = (_randn(15 * _PAGE, 4, 128, generator=generator) * 8).to(torch.float8_e4m3fn)
    scale = torch.tensor([0.125], device=DEVICE)
    args = [q, buffer, table, torch.tensor(_SEQ_LENS, dtype=torch.int32, device=DEVICE), _PAGE, 128**-0.5, scale, scale]
    clean = _call(DECODE, row, args)
    args[1] = buffer.clone()
    args[1].view(torch.uint8)[_unused_rows(table.cpu(), buffer.shape[0], _PAGE)] = 0x7F
    out, _ = _call(DECODE, row, args)
    assert _same(out, clean[0]), "an unused fp8 row changed an output"
    args[1].view(torch.uint8)[_row_of(table.cpu(), 1, 2, _PAGE), 0, 3] = 0x7F  # K head 0 of position 2
    out, _ = _call(DECODE, row, args)
    assert torch.isnan(out[1, :2]).all(), "a NaN e4m3 key byte did not make its sequence's output NaN"
    assert _same(out, clean[0], [0, 2]), "sequence 1's NaN key reached another sequence"


# ---------------------------------------------------------------------------
# Exact weights at large logits
# ---------------------------------------------------------------------------

_BIG = 46000.0


def _big_logit_case(op):
    """Inputs where keys 0-2 of each sequence have logit 46000, key 3 has 0, V (value dim 0) = 1 on keys 0-2
    and 0 on key 3: every query's out[..., 0] is exactly 1 (lse 46000 + log(n attended keys)). The lse
    is not representable near 46000 (fp32 spacing 2**-8), so exp(s - lse) misses 1/n by ~0.2%."""
    keys = torch.zeros(4, 64)
    keys[:3, 0] = 1.0
    values = torch.zeros(4, 64)
    values[:3, 0] = 1.0
    if op in (PREFILL, MLA_PREFILL):
        dim, value_dim = (192, 128) if op == MLA_PREFILL else (64, 64)
        q = torch.zeros(4, 2, dim)
        q[:, :, 0] = _BIG
        k = torch.zeros(4, 2, dim)
        k[:, :, :64] = keys[:, None]
        v = torch.zeros(4, 2, value_dim)
        v[:, :, :64] = values[:, None]
        return [
            q.to(DEVICE),
            k.to(DEVICE),
            v.to(DEVICE),
            torch.tensor([0, 4], dtype=torch.int32, device=DEVICE),
            4,
            1.0,
            False,
            True,
        ]
    table = torch.tensor([[1]], dtype=torch.int32, device=DEVICE)
    lens = torch.tensor([4], dtype=torch.int32, device=DEVICE)
    if op == MLA_DECODE:
        cache = torch.zeros(8, 576)
        cache[4:, :64] = keys  # the latent's dim 0 is both the key's and the value's
        q = torch.zeros(1, 16, 576)
        q[..., 0] = _BIG
        return [q.to(DEVICE), cache.to(DEVICE), table, lens, 4, 1.0]
    buffer = torch.zeros(8, 2, 64)
    buffer[4:, 0], buffer[4:, 1] = keys, values
    q = torch.zeros(1, 2, 64)
    q[..., 0] = _BIG
    if op == DECODE:
        return [q.to(DEVICE), buffer.to(DEVICE), table, lens, 4, 1.0, None, None]
    return [
        q.to(DEVICE),
        buffer.to(DEVICE),
        table,
        torch.tensor([0, 1], dtype=torch.int32, device=DEVICE),
        lens,
        1,
        4,
        1.0,
        False,
        True,
    ]


EXACT = [
    pytest.param(op, row, id=row)
    for op in (PREFILL, MLA_PREFILL, DECODE, MLA_DECODE, PREFILL_PAGED)
    for row in _rows(op)
]


@pytest.mark.parametrize("op, row", EXACT)
def test_weights_are_exact_at_logits_near_5e4(op, row, request):
    """Catches exp(s - lse) in fp32 (torch/decode gave 0.998 for 1.0): weights must be taken against the
    running max, exact at the max, so n equal top logits weigh exactly 1/n each."""
    out, lse = _call(op, row, _big_logit_case(op))
    assert (out[..., 0] - 1.0).abs().max().item() <= 1e-6, f"out should be 1: {out[..., 0].flatten().tolist()}"
    if lse is not None:
        assert (lse - (_BIG + math.log(3.0))).abs().max().item() <= 2**-7


# ---------------------------------------------------------------------------
# Reference memory: a small multiple of the call's inputs + output
# ---------------------------------------------------------------------------

_MEMORY_PROBE = textwrap.dedent("""
    import json, resource, sys, torch
    from rapid_llm.kernels.ops.attention import reference
    generator = torch.Generator().manual_seed(0)
    randn = lambda *shape: torch.randn(shape, generator=generator)
    op = sys.argv[1]
    def pages(batch, length, page):
        return torch.arange(batch * length // page, dtype=torch.int32).view(batch, -1)
    if op == "mla_decode":    # 4 sequences x 2048 positions, 128 heads: 2.4 GB if the latent is repeated per head
        args = (randn(4, 128, 576), randn(4 * 2048, 576), pages(4, 2048, 64), torch.full((4,), 2048, dtype=torch.int32),
                64, 0.07)
    elif op == "decode":      # GQA 32/8 heads, 8 x 2048 positions
        args = (randn(8, 32, 128), randn(8 * 2048, 16, 128), pages(8, 2048, 16),
                torch.full((8,), 2048, dtype=torch.int32), 16, 0.08)
    elif op == "prefill":     # one 1024-token sequence, 32 query heads: 32 x 1024 x 1024 logits
        args = (randn(1024, 32, 64), randn(1024, 8, 64), randn(1024, 8, 64), torch.tensor([0, 1024], dtype=torch.int32),
                1024, 0.125, True, True)
    elif op == "mla_prefill": # one 1536-token sequence, 16 heads of 192 / 128
        args = (randn(1536, 16, 192), randn(1536, 16, 192), randn(1536, 16, 128),
                torch.tensor([0, 1536], dtype=torch.int32), 1536, 0.07, True, True)
    else:                     # prefill_paged: 2 x 512 new tokens after 1536 cached, 32 query heads
        args = (randn(1024, 32, 64), randn(2 * 2048, 16, 64), pages(2, 2048, 16),
                torch.tensor([0, 512, 1024], dtype=torch.int32), torch.full((2,), 2048, dtype=torch.int32), 512, 16,
                0.125, True, True)
    inputs = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
    torch.ones(64, 64) @ torch.ones(64, 64)  # the BLAS's own buffers are not the row's
    def peak_kib():
        return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM"))
    def rss_kib():
        return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS"))
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")  # reset the peak to the current RSS
    except OSError:
        pass  # the peak then includes building the inputs: an overestimate, never an underestimate
    before = rss_kib()
    # a row that blows up fails here with MemoryError instead of taking the machine's memory
    with open("/proc/self/statm") as handle:
        virtual = int(handle.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (virtual + (3 << 30), resource.RLIM_INFINITY))
    try:
        result = getattr(reference, op)(*args)
    except (MemoryError, RuntimeError) as error:
        print(json.dumps({"error": str(error)[:200]}))
        sys.exit(0)
    outs = result if isinstance(result, tuple) else (result,)
    print(json.dumps({"inputs": inputs, "output": sum(o.numel() * o.element_size() for o in outs),
                      "extra": (peak_kib() - before) * 1024}))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak RSS from /proc/self/status (Linux)")
@pytest.mark.parametrize("op", ["prefill", "mla_prefill", "prefill_paged", "decode", "mla_decode"])
def test_reference_memory_is_a_small_multiple_of_inputs_and_output(op):
    """Catches a reference materialising per-head copies of K/V (mla_decode repeated the latent per query
    head: ~36 GB at B=16, 128 heads, 4096 tokens) or whole padded logits of a group: the extra peak memory of
    one call stays within 3 x max(64 MiB, inputs + output) on shapes where that was exceeded 2-100x."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    environment = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    completed = subprocess.run(
        [sys.executable, "-c", _MEMORY_PROBE, op],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
        check=True,
    )
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert "error" not in report, f"torch/{op} ran out of its 3 GiB allowance: {report['error']}"
    bound = 3 * max(64 << 20, report["inputs"] + report["output"])
    assert report["extra"] <= bound, (
        f"torch/{op} took {report['extra'] / 2**20:.0f} MiB beyond its inputs ({report['inputs'] / 2**20:.0f} "
        f"MiB) and output ({report['output'] / 2**20:.0f} MiB); bound {bound / 2**20:.0f} MiB"
    )


@pytest.mark.parametrize("op", [PREFILL, MLA_PREFILL, PREFILL_PAGED, DECODE, MLA_DECODE])
def test_reference_in_small_steps_matches_the_oracle(op, monkeypatch):
    """Catches a reference right in one step and wrong across steps (the running max rescaled wrongly
    between key chunks, rows or heads of a chunk stored in the wrong place): with a 64 KiB step budget every
    CPU parity case runs in many key, row, head and sequence chunks, and must still match the float64 oracle."""
    from conformance.cases import CASES, ORACLES
    from rapid_llm.kernels.ops.attention import reference

    monkeypatch.setattr(reference, "_MIN_STEP_BYTES", 1 << 16)
    monkeypatch.setattr(reference, "_MAX_STEP_BYTES", 1 << 16)
    function = getattr(reference, op.split(".")[1])
    for case in CASES[op]:
        if case.gpu_only:
            continue
        args, _, _ = case.make(torch.float32, DEVICE, torch.Generator().manual_seed(3))
        got, want = function(*args), ORACLES[op](*args)
        got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        for mine, theirs in zip(got, want):
            torch.testing.assert_close(mine.double(), theirs.double(), atol=2e-4, rtol=2e-4, msg=case.id)


# ---------------------------------------------------------------------------
# Rows whose kernels cannot isolate non-finite values: served only under the call site's promise
# ---------------------------------------------------------------------------

_LIBRARIES_PRESENT = Libraries({"triton": "3.6.0", "flash_attn": "0.0.3", "flashinfer": "0.6.0"})


@pytest.mark.parametrize("op", [PREFILL, MLA_PREFILL])
def test_ragged_library_rows_serve_only_callers_that_promise_finite_values(op):
    """Catches FA3's or FlashInfer's ragged prefill selected for a checked call: on the H200 (bf16 cases of
    this file) their kernels carried a NaN/inf V of one sequence into its neighbours, and FA3 returned a
    non-NaN lse for a NaN query or key. They need qkv:finite, which no check derives."""
    library_rows = [row for row in TABLE.rows(op) if row.backend in ("flash_attn", "flashinfer")]
    assert library_rows and all(FINITE in row.layout for row in library_rows)
    contract = TABLE.contracts[op]
    shape = {"num_tokens": 4096, "max_seqlen": 1024, "num_q_heads": 16, "num_kv_heads": 16}
    shape.update(head_dim=192, head_dim_v=128) if op == MLA_PREFILL else shape.update(head_dim=128, head_dim_v=128)
    query = dict(device=Device("cuda", 90), dtype="bf16", shape=shape, libs=_LIBRARIES_PRESENT, table=TABLE)
    checked = dispatch(op, layout=contract.layouts, **query)
    assert checked.row.backend not in ("flash_attn", "flashinfer")
    for row in library_rows:
        failures = [check.render() for check in checked.explanation.verdict(row.name).failures]
        assert any(FINITE in failure for failure in failures), failures
    promised = dispatch(op, layout=contract.tags, **query)
    assert {row.name for row in library_rows} <= {
        verdict.row for verdict in promised.explanation.verdicts if not verdict.failures
    }
