"""Memory overlap: an op that writes in place rejects arguments sharing a byte with what it writes, exactly.

ops/checks.py's may_overlap decides from the two views' index sets (byte
patterns), not from their spans: views into one storage that interleave
without sharing a byte (a fused projection's column slices, every other row,
a KV buffer and its token data side by side) are accepted, and any shared
byte, whatever the views' strides, offsets or dtypes, is rejected. The
oracle here is the set of bytes each view covers, enumerated.

Each op whose contract promises it (kvcache writes: token data, loc and
scales against buffer; norm.fused_add_rms_norm; gated activations' out;
embedding.rotary's q/k; the gemm ops' out) is called through the public
function and through a PlannedOp of every row that runs here: an aliasing
call raises OpInputError naming the argument and leaves memory untouched; a
call with disjoint views of one storage gives what the same call on separate
tensors gives.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch

import rapid_llm.kernels as kernels
from conformance.rows_here import loadable_rows, torch_device
from rapid_llm.kernels.ops import checks
from rapid_llm.kernels.ops.checks import OpInputError, may_overlap

DEVICE = torch_device()
FP8 = torch.float8_e4m3fn


def _bytes(t) -> set:
    """The byte addresses t's elements cover (enumerated: the oracle)."""
    size = t.element_size()
    starts = set()
    for index in itertools.product(*(range(n) for n in t.shape)):
        starts.add(t.data_ptr() + size * sum(i * s for i, s in zip(index, t.stride())))
    return {start + byte for start in starts for byte in range(size)}


# ---------------------------------------------------------------------------
# may_overlap against the enumerated byte sets
# ---------------------------------------------------------------------------


def _base():
    return torch.zeros(8192, dtype=torch.uint8)


def _rows(base, rows=64, width=32, dtype=torch.float32):
    """[rows, width] of dtype over base's bytes."""
    return base.view(dtype)[: rows * width].view(rows, width)


def _kv_buffer(base):
    return base.view(torch.float32)[: 64 * 4 * 8].view(64, 4, 8)


def _frombuffer_pair():
    """Two tensors with separate storages over one bytearray, the second starting 12 bytes in."""
    memory = bytearray(256)
    return (
        torch.frombuffer(memory, dtype=torch.float32, count=16),
        torch.frombuffer(memory, dtype=torch.float32, offset=12, count=4),
    )


# (id, builder -> (a, b), expected): each id names the mistake a span- or stride-based test makes there.
PAIRS = [
    ("kv_rows_inside_their_buffer", lambda base: (_kv_buffer(base)[10:14], _kv_buffer(base)), True),
    ("buffer_around_kv_rows", lambda base: (_kv_buffer(base), _kv_buffer(base)[10:14]), True),
    ("adjacent_row_blocks", lambda base: (_kv_buffer(base)[10:14], _kv_buffer(base)[14:20]), False),
    ("row_blocks_sharing_one_row", lambda base: (_kv_buffer(base)[10:14], _kv_buffer(base)[13:20]), True),
    ("fused_qkv_column_slices", lambda base: (_rows(base)[:, :16], _rows(base)[:, 16:24]), False),
    ("column_slices_sharing_a_column", lambda base: (_rows(base)[:, :17], _rows(base)[:, 16:24]), True),
    ("even_and_odd_rows", lambda base: (_rows(base)[::2], _rows(base)[1::2]), False),
    ("every_third_row_and_every_second_row", lambda base: (_rows(base)[::3], _rows(base)[::2]), True),
    ("rows_0_mod_4_and_rows_2_mod_4", lambda base: (_rows(base)[::4], _rows(base)[2::4]), False),
    ("even_rows_left_and_odd_rows_right_columns", lambda base: (_rows(base)[::2, :4], _rows(base)[1::2, 4:8]), False),
    ("even_rows_and_all_rows_of_their_columns", lambda base: (_rows(base)[::2, :4], _rows(base)[1:, 2:8]), True),
    ("strides_4_and_6_rows_never_meeting", lambda base: (_rows(base)[0:8:4], _rows(base)[2:20:6]), False),
    ("strides_4_and_6_rows_meeting_at_row_8", lambda base: (_rows(base)[0:12:4], _rows(base)[2:20:6]), True),
    ("a_view_and_its_transpose", lambda base: (_rows(base, 16, 16), _rows(base, 16, 16).t()), True),
    ("transposed_columns_and_the_next_column", lambda base: (_rows(base)[:, :4].t(), _rows(base)[:, 4:5]), False),
    ("transposed_columns_and_a_column_of_theirs", lambda base: (_rows(base)[:, :4].t(), _rows(base)[:, 3:5]), True),
    (
        "fp8_rows_and_an_fp32_scale_in_their_padding",
        lambda base: (base.view(FP8)[: 64 * 48].view(64, 48)[:, :32], base[40:44].view(torch.float32)),
        False,
    ),
    (
        "fp8_rows_and_an_fp32_scale_over_a_rows_last_bytes",
        lambda base: (base.view(FP8)[: 64 * 48].view(64, 48)[:, :32], base[76:80].view(torch.float32)),
        True,
    ),
    (
        "bf16_rows_over_fp8_columns_of_the_same_bytes",
        lambda base: (
            base.view(torch.bfloat16)[: 32 * 64].view(32, 64)[:, 16:],
            base.view(FP8)[: 32 * 128].view(32, 128)[:, :32],
        ),
        False,
    ),
    ("an_expanded_row_and_that_row", lambda base: (_rows(base)[3:4].expand(5, 32), _rows(base)[3]), True),
    ("an_expanded_row_and_the_next_row", lambda base: (_rows(base)[3:4].expand(5, 32), _rows(base)[4]), False),
    (
        "overlapping_windows_and_a_gap_free_block",
        lambda base: (base.view(torch.float32).as_strided((5, 8), (4, 1)), base.view(torch.float32)[23:31]),
        True,
    ),
    (
        "overlapping_windows_and_the_block_after_them",
        lambda base: (base.view(torch.float32).as_strided((5, 8), (4, 1)), base.view(torch.float32)[24:32]),
        False,
    ),
    ("separate_storages_over_one_memory", lambda base: _frombuffer_pair(), True),
    (
        "an_int32_loc_over_the_buffers_last_bytes",
        lambda base: (_kv_buffer(base), base.view(torch.int32)[64 * 4 * 8 - 2 : 64 * 4 * 8 + 2]),
        True,
    ),
    (
        "an_int32_loc_just_past_the_buffer",
        lambda base: (_kv_buffer(base), base.view(torch.int32)[64 * 4 * 8 : 64 * 4 * 8 + 4]),
        False,
    ),
]


@pytest.mark.parametrize("build, expected", [pytest.param(b, e, id=i) for i, b, e in PAIRS])
def test_may_overlap_is_exact_on_views_of_one_memory(build, expected):
    """Catches row offsets compared with row counts the wrong way round (kv = buffer[10:14] accepted),
    byte-span tests rejecting interleaved views that share no byte, and stride-equality tests that miss
    overlaps between transposed, expanded, differently typed or separately stored views."""
    a, b = build(_base())
    assert (len(_bytes(a) & _bytes(b)) > 0) is expected, "the oracle disagrees with the case's label"
    assert may_overlap(a, b) is expected and may_overlap(b, a) is expected


def _random_view(memory, generator):
    dtype = generator.choice([torch.uint8, torch.float16, torch.float32, torch.float64])
    flat = memory.view(dtype)
    for _ in range(100):
        dims = generator.randint(1, 3)
        shape = [generator.randint(1, 5) for _ in range(dims)]
        if generator.random() < 0.5:
            strides = [generator.randint(0, 12) for _ in range(dims)]
        else:  # a slice of a contiguous tensor with padded rows, dims possibly permuted
            step, strides = 1, []
            for size in reversed(shape):
                strides.insert(0, step)
                step *= size + generator.randint(0, 3)
            order = list(range(dims))
            generator.shuffle(order)
            shape, strides = [shape[d] for d in order], [strides[d] for d in order]
        extent = sum((n - 1) * s for n, s in zip(shape, strides)) + 1
        if extent <= flat.numel():
            return flat.as_strided(shape, strides, generator.randint(0, flat.numel() - extent))
    return flat[:1]


def test_may_overlap_matches_the_byte_sets_of_random_strided_views():
    """Catches any view geometry (dtype, offset, stride 0, permuted or padded dims) the named cases miss:
    1500 seeded random pairs over one 512-byte memory, each answer compared with the enumerated bytes."""
    generator, memory = random.Random(20261201), torch.zeros(512, dtype=torch.uint8)
    for _ in range(1500):
        a, b = _random_view(memory, generator), _random_view(memory, generator)
        expected = len(_bytes(a) & _bytes(b)) > 0
        assert may_overlap(a, b) is expected, (
            a.dtype,
            a.shape,
            a.stride(),
            a.storage_offset(),
            b.dtype,
            b.shape,
            b.stride(),
            b.storage_offset(),
            expected,
        )


def test_may_overlap_matches_the_byte_sets_of_row_views_of_one_row_stride():
    """Catches a wrong closed form for the commonest pair (q, k, v slices of a fused projection: two row views
    with one row stride, in any dtypes and widths, rows narrower or wider than the stride): 1500 seeded random
    pairs over one 512-byte memory, each answer compared with the enumerated bytes."""
    generator, memory = random.Random(20261204), torch.zeros(512, dtype=torch.uint8)
    dtypes = (torch.uint8, torch.bfloat16, torch.float32)
    for _ in range(1500):
        row_bytes = 4 * generator.randint(1, 12)

        def view():
            dtype = generator.choice(dtypes)
            size = torch.empty(0, dtype=dtype).element_size()
            rows, columns = generator.randint(2, 6), generator.randint(1, 2 * row_bytes // size)
            extent = (rows - 1) * row_bytes + columns * size
            offset = generator.randint(0, (memory.numel() - extent) // size)
            return memory.view(dtype).as_strided((rows, columns), (row_bytes // size, 1), offset)

        a, b = view(), view()
        expected = len(_bytes(a) & _bytes(b)) > 0
        assert may_overlap(a, b) is expected, (a.shape, a.stride(), a.storage_offset(), b.shape, b.storage_offset())


def test_may_overlap_out_of_steps_answers_may_overlap(monkeypatch):
    """Catches the give-up path answering "disjoint": past its step budget the check must reject."""
    rows = _rows(_base())
    every_fourth, every_sixth = rows[0:8:4], rows[2:20:6]  # rows 0, 4 and 2, 8, 14: disjoint
    assert may_overlap(every_fourth, every_sixth) is False
    monkeypatch.setattr(checks, "_OVERLAP_STEPS", 0)
    assert may_overlap(every_fourth, every_sixth) is True
    assert may_overlap(rows[:4], rows[8:12]) is False  # disjoint spans need no step


def test_may_overlap_decides_long_interleaved_views_without_giving_up():
    """Catches a check whose cost (and give-up point) grows with the row count: 2**20 interleaved rows."""
    wide = torch.empty(1 << 20, 48, dtype=torch.float16)
    assert may_overlap(wide[:, :32], wide[:, 32:]) is False
    assert may_overlap(wide[::2], wide[1::2]) is False
    assert may_overlap(wide[::2, :8], wide[(1 << 20) - 2 :, 7:9]) is True


# ---------------------------------------------------------------------------
# The ops that promise it
# ---------------------------------------------------------------------------


def _params(op, public, dtype="fp32"):
    return [pytest.param(fn, id=name) for name, fn in loadable_rows(op, dtype)] + [pytest.param(public, id="public")]


def _float_buffer(rows=64, heads=4, dim=8):
    return torch.randn(rows, heads, dim, generator=torch.Generator().manual_seed(1)).to(DEVICE)


def _loc(ids):
    return torch.tensor(ids, dtype=torch.int64, device=DEVICE)


def _expect_rejected(fn, args, argument, written):
    """fn(*args) raises OpInputError naming `argument` as overlapping, and leaves `written` untouched."""
    before = [t.clone() for t in written]
    with pytest.raises(OpInputError) as info:
        fn(*args)
    assert info.value.argument == argument and "overlapping" in str(info.value), str(info.value)
    for tensor, saved in zip(written, before):
        assert torch.equal(tensor.view(torch.uint8), saved.view(torch.uint8)), "a rejected call wrote memory"


KV_ROWS = _params("kvcache.update_kv_buffer", kernels.update_kv_buffer)
KV_FP8_ROWS = _params("kvcache.update_kv_buffer_fp8", kernels.update_kv_buffer_fp8)
MLA_ROWS = _params("kvcache.update_mla_buffer", kernels.update_mla_buffer)
MLA_FP8_ROWS = _params("kvcache.update_mla_buffer_fp8", kernels.update_mla_buffer_fp8)


@pytest.mark.parametrize("fn", KV_ROWS)
class TestUpdateKvBufferAliasing:
    def test_kv_rows_of_the_buffer_are_rejected(self, fn):
        """Catches kv = buffer[10:14] accepted: the rows written are read by later programs."""
        buffer = _float_buffer()
        _expect_rejected(fn, (buffer[10:14], _loc([1, 2, 12, 40]), buffer), "kv", [buffer])

    def test_every_other_buffer_row_as_kv_is_rejected(self, fn):
        buffer = _float_buffer()
        _expect_rejected(fn, (buffer[20:28:2], _loc([0, 1, 2, 3]), buffer), "kv", [buffer])

    def test_kv_transposed_over_buffer_rows_is_rejected(self, fn):
        """Catches a stride test that only knows [T, 2*Hk, D] row views: kv's heads and dims swapped."""
        buffer = _float_buffer(heads=8, dim=8)
        _expect_rejected(fn, (buffer[30:33].transpose(1, 2), _loc([0, 1, 2]), buffer), "kv", [buffer])

    def test_loc_over_buffer_bytes_is_rejected(self, fn):
        """Catches slot ids read from bytes the same call overwrites."""
        buffer = _float_buffer()
        loc = buffer.view(-1).view(torch.int32)[-2:]
        loc.copy_(torch.tensor([62, 63], dtype=torch.int32))
        _expect_rejected(fn, (torch.randn(2, 4, 8, device=DEVICE), loc, buffer), "loc", [buffer])

    def test_kv_and_buffer_side_by_side_in_one_storage_are_written(self, fn):
        """Catches a conservative test rejecting disjoint views of one allocation (an engine's arena)."""
        storage = _float_buffer(rows=68)
        buffer, kv = storage[:64], storage[64:]
        expected = buffer.clone()
        expected[[5, 9, 60, 0]] = kv.clone()
        fn(kv, _loc([5, 9, 60, 0]), buffer)
        assert torch.equal(buffer, expected)

    def test_kv_interleaved_with_buffer_rows_is_written(self, fn):
        """Catches interleaved, disjoint views (buffer rows even, token rows odd) rejected or misread."""
        storage = torch.randn(64, 2, 4, 8, generator=torch.Generator().manual_seed(2)).to(DEVICE)
        buffer, kv = storage[:, 0], storage[:3, 1]
        expected = buffer.clone()
        expected[[7, 3, 50]] = kv.clone()
        fn(kv, _loc([7, 3, 50]), buffer)
        assert torch.equal(buffer, expected)


def _fp8_arena(rows=64, heads=4, dim=16, extra=256):
    """(bytes, buffer): an e4m3 buffer [rows, heads, dim] at the start of a larger byte arena."""
    arena = torch.zeros(rows * heads * dim + extra, dtype=torch.uint8, device=DEVICE)
    return arena, arena[: rows * heads * dim].view(FP8).view(rows, heads, dim)


def _scale(value=0.05):
    return torch.tensor([value], dtype=torch.float32, device=DEVICE)


@pytest.mark.parametrize("fn", KV_FP8_ROWS)
class TestUpdateKvBufferFp8Aliasing:
    def test_kv_over_the_fp8_buffers_bytes_is_rejected(self, fn):
        """Catches a dtype-blind test: fp32 token data whose bytes are buffer rows the call writes."""
        arena, buffer = _fp8_arena()
        kv = arena[256 : 256 + 2 * 4 * 16 * 4].view(torch.float32).view(2, 4, 16)
        _expect_rejected(fn, (kv, _loc([0, 1]), buffer, _scale(), _scale()), "kv", [buffer])

    def test_v_scale_inside_the_buffer_is_rejected(self, fn):
        """Catches a scale read after a row write replaced its bytes."""
        arena, buffer = _fp8_arena()
        v_scale = arena[64:68].view(torch.float32)
        v_scale.fill_(0.05)
        kv = torch.randn(2, 4, 16, device=DEVICE)
        _expect_rejected(fn, (kv, _loc([0, 1]), buffer, _scale(), v_scale), "v_scale", [buffer])

    def test_kv_and_scales_after_the_buffer_in_one_arena_are_written(self, fn):
        arena, buffer = _fp8_arena(extra=2 * 4 * 16 * 4 + 8)
        start = buffer.numel()
        kv = arena[start : start + 512].view(torch.float32).view(2, 4, 16)
        kv.copy_(torch.randn(2, 4, 16, generator=torch.Generator().manual_seed(3)).to(DEVICE))
        k_scale, v_scale = (
            arena[start + 512 : start + 516].view(torch.float32),
            arena[start + 516 :].view(torch.float32),
        )
        k_scale.fill_(0.05)
        v_scale.fill_(0.02)
        separate = torch.zeros_like(buffer)
        kernels.update_kv_buffer_fp8(kv.clone(), _loc([3, 40]), separate, k_scale.clone(), v_scale.clone())
        fn(kv, _loc([3, 40]), buffer, k_scale, v_scale)
        assert torch.equal(buffer.view(torch.uint8), separate.view(torch.uint8))


def _mla_buffer(rows=64, rank=24, rope=8):
    return torch.randn(rows, rank + rope, generator=torch.Generator().manual_seed(4)).to(DEVICE)


@pytest.mark.parametrize("fn", MLA_ROWS)
class TestUpdateMlaBufferAliasing:
    def test_latent_rows_of_the_buffer_are_rejected(self, fn):
        """Catches latent = buffer[10:14] accepted (the latent read from rows the call overwrites)."""
        buffer = _mla_buffer()
        rope = torch.randn(4, 8, device=DEVICE)
        _expect_rejected(fn, (buffer[10:14, :24], rope, _loc([1, 2, 12, 40]), buffer), "latent", [buffer])

    def test_rope_columns_of_the_buffer_are_rejected(self, fn):
        buffer = _mla_buffer()
        latent = torch.randn(4, 24, device=DEVICE)
        _expect_rejected(fn, (latent, buffer[50:54, 24:], _loc([1, 2, 3, 4]), buffer), "rope", [buffer])

    def test_latent_and_rope_of_one_projection_beside_the_buffer_are_written(self, fn):
        """Catches the usual call (latent | rope slices of one [T, R + P] projection, here sharing the
        buffer's allocation) rejected or misread."""
        storage = _mla_buffer(rows=67)
        buffer, projection = storage[:64], storage[64:]
        expected = buffer.clone()
        expected[[63, 0, 17]] = projection.clone()
        fn(projection[:, :24], projection[:, 24:], _loc([63, 0, 17]), buffer)
        assert torch.equal(buffer, expected)


@pytest.mark.parametrize("fn", MLA_FP8_ROWS)
class TestUpdateMlaBufferFp8Aliasing:
    def test_latent_over_the_fp8_buffers_bytes_is_rejected(self, fn):
        arena = torch.zeros(64 * 32 + 64, dtype=torch.uint8, device=DEVICE)
        buffer = arena[: 64 * 32].view(FP8).view(64, 32)
        latent = arena[64 * 32 - 32 : 64 * 32 + 64].view(torch.float32).view(1, 24)
        rope = torch.randn(1, 8, device=DEVICE)
        _expect_rejected(fn, (latent, rope, _loc([5]), buffer, _scale()), "latent", [buffer])

    def test_scale_inside_the_buffer_is_rejected(self, fn):
        arena = torch.zeros(64 * 32, dtype=torch.uint8, device=DEVICE)
        buffer = arena.view(FP8).view(64, 32)
        scale = arena[128:132].view(torch.float32)
        scale.fill_(0.05)
        _expect_rejected(
            fn,
            (torch.randn(1, 24, device=DEVICE), torch.randn(1, 8, device=DEVICE), _loc([0]), buffer, scale),
            "scale",
            [buffer],
        )


NORM_ROWS = _params("norm.fused_add_rms_norm", kernels.fused_add_rms_norm)


@pytest.mark.parametrize("fn", NORM_ROWS)
class TestFusedAddRmsNormAliasing:
    def test_residual_as_the_transpose_of_x_is_rejected(self, fn):
        """Catches a row-stride test that takes x and x.t() (same bytes, another order) for disjoint."""
        x = torch.randn(8, 8, device=DEVICE)
        _expect_rejected(fn, (x, x.t(), torch.ones(8, device=DEVICE), 1e-6), "residual", [x])

    def test_x_and_residual_on_alternate_rows_are_accepted(self, fn):
        """Catches interleaved, disjoint rows (x even, residual odd) rejected by a span test."""
        storage = torch.randn(8, 16, generator=torch.Generator().manual_seed(5)).to(DEVICE)
        x, residual = storage[::2], storage[1::2]
        want_x, want_residual = fn(x.clone(), residual.clone(), torch.ones(16, device=DEVICE), 1e-6)
        got_x, got_residual = fn(x, residual, torch.ones(16, device=DEVICE), 1e-6)
        assert torch.equal(got_x, want_x) and torch.equal(got_residual, want_residual)


GATED_ROWS = [
    param
    for op, public in (
        ("activation.silu_and_mul", kernels.silu_and_mul),
        ("activation.gelu_tanh_and_mul", kernels.gelu_tanh_and_mul),
    )
    for param in _params(op, public)
]


@pytest.mark.parametrize("fn", GATED_ROWS)
class TestGatedActivationAliasing:
    def test_out_over_every_other_column_of_x_is_rejected(self, fn):
        """Catches a strided out (every other column of x) overlapping both halves of x accepted."""
        x = torch.randn(4, 8, device=DEVICE)
        _expect_rejected(fn, (x, x[:, ::2]), "out", [x])

    def test_out_beside_x_in_one_tensor_is_written(self, fn):
        """Catches out = the columns after x in one [T, 3d] tensor (disjoint) rejected or misread."""
        storage = torch.randn(4, 12, generator=torch.Generator().manual_seed(6)).to(DEVICE)
        x, out = storage[:, :8], storage[:, 8:]
        expected = fn(x.clone())
        fn(x, out)
        assert torch.equal(out, expected)


ROTARY_ROWS = _params("embedding.rotary", kernels.rotary)


@pytest.mark.parametrize("fn", ROTARY_ROWS)
class TestRotaryAliasing:
    def test_positions_over_the_bytes_of_q_are_rejected(self, fn):
        """Catches positions read from q's bytes after q's rotation overwrote them."""
        q = torch.zeros(3, 16, device=DEVICE)
        positions = q.view(torch.int32)[:, 0]
        _expect_rejected(
            fn,
            (positions, q, torch.randn(3, 8, device=DEVICE), 8, torch.randn(16, 8, device=DEVICE), True),
            "positions",
            [q],
        )

    def test_k_on_even_rows_shifted_into_q_is_rejected(self, fn):
        """Catches strided q (rows 0, 2, 4) and k (rows 2, 4, 6) of one tensor taken for disjoint."""
        storage = torch.randn(8, 16, device=DEVICE)
        _expect_rejected(
            fn,
            (
                torch.arange(3, device=DEVICE),
                storage[0:6:2],
                storage[2:8:2, :8],
                8,
                torch.randn(16, 8, device=DEVICE),
                True,
            ),
            "k",
            [storage],
        )


BLOCK_MM_ROWS = _params("gemm.fp8_block_mm", kernels.fp8_block_mm, "fp8_e4m3")


def _block_mm_inputs(m=4, n=128, k=128):
    generator = torch.Generator().manual_seed(7)
    a = (torch.randn(m, k, generator=generator) * 8).to(FP8).to(DEVICE)
    b = (torch.randn(n, k, generator=generator) * 8).to(FP8).to(DEVICE)
    scales = (torch.rand(m + math.ceil(n / 128), k // 128, generator=generator) + 0.5).div(448).to(DEVICE)
    return a, scales[:m], b, scales[m:]


@pytest.mark.parametrize("fn", BLOCK_MM_ROWS)
class TestFp8BlockMmAliasing:
    def test_out_over_the_last_bytes_of_b_is_rejected(self, fn):
        """Catches a dtype-blind test: bf16 out whose bytes straddle the end of the fp8 weight."""
        a, a_scale, b, b_scale = _block_mm_inputs()
        arena = torch.zeros(b.numel() + 4 * 128 * 2, dtype=torch.uint8, device=DEVICE)
        weight = arena[: b.numel()].view(FP8).view(b.shape)
        weight.copy_(b)
        out = arena[b.numel() - 2 : b.numel() - 2 + 4 * 128 * 2].view(torch.bfloat16).view(4, 128)
        _expect_rejected(fn, (a, a_scale, weight, b_scale, out), "out", [weight])

    def test_out_in_the_padding_columns_of_a_is_written(self, fn):
        """Catches a span test rejecting out interleaved with a's rows (a: the first K bytes of each row)."""
        a, a_scale, b, b_scale = _block_mm_inputs()
        arena = torch.zeros(4, 128 + 256, dtype=torch.uint8, device=DEVICE)
        a_view = arena[:, :128].view(FP8)
        a_view.copy_(a)
        out = arena[:, 128:].view(torch.bfloat16)
        fn(a_view, a_scale, b, b_scale, out)
        assert torch.equal(out, fn(a, a_scale, b, b_scale))


CONTIGUOUS_ROWS = _params("gemm.fp8_grouped_mm_contiguous", kernels.fp8_grouped_mm_contiguous, "fp8_e4m3")
MASKED_ROWS = _params("gemm.fp8_grouped_mm_masked", kernels.fp8_grouped_mm_masked, "fp8_e4m3")


def _grouped_weights(generator, groups=2, n=128, k=256):
    b = (torch.randn(groups, n, k, generator=generator) * 8).to(FP8).to(DEVICE)
    return b, (torch.rand(groups, 1, k // 128, generator=generator) + 0.5).div(448).to(DEVICE)


@pytest.mark.parametrize("fn", CONTIGUOUS_ROWS)
def test_grouped_contiguous_out_over_the_tail_of_a_is_rejected(fn):
    """Catches out= starting inside the last row of a (different dtypes, one arena): rows of a read after
    the output overwrote them."""
    generator = torch.Generator().manual_seed(8)
    arena = torch.zeros(128 * 256 + 128 * 128 * 2, dtype=torch.uint8, device=DEVICE)
    a = arena[: 128 * 256].view(FP8).view(128, 256)
    a.copy_((torch.randn(128, 256, generator=generator) * 8).to(FP8))
    out = arena[128 * 256 - 64 : 128 * 256 - 64 + 128 * 128 * 2].view(torch.bfloat16).view(128, 128)
    a_scale = (torch.rand(128, 2, generator=generator) + 0.5).div(448).to(DEVICE)
    b, b_scale = _grouped_weights(generator)
    ids = torch.zeros(128, dtype=torch.int32, device=DEVICE)
    _expect_rejected(fn, (a, a_scale, b, b_scale, ids, out), "out", [a])


@pytest.mark.parametrize("fn", MASKED_ROWS)
def test_grouped_masked_out_over_masked_m_is_rejected(fn):
    """Catches masked_m (the rows each group computes) read from bytes of out the call overwrites."""
    generator = torch.Generator().manual_seed(9)
    a = (torch.randn(2, 128, 256, generator=generator) * 8).to(FP8).to(DEVICE)
    a_scale = (torch.rand(2, 128, 2, generator=generator) + 0.5).div(448).to(DEVICE)
    b, b_scale = _grouped_weights(generator)
    out = torch.zeros(2, 128, 128, dtype=torch.bfloat16, device=DEVICE)
    masked_m = out.view(torch.int32).reshape(-1)[:2]
    masked_m.copy_(torch.tensor([3, 0], dtype=torch.int32))
    _expect_rejected(fn, (a, a_scale, b, b_scale, masked_m, 64, out), "out", [out])
