"""fast_launch: a cached launch reuses a compiled kernel only for arguments Triton would compile alike.

A stub compile stands in for Triton (stub_launches: the first launch of each specialisation returns a
StubCompiled, later ones call its run()), so the cache key is tested on the CPU. Catches a key that
misses what Triton specialises on (pointer alignment, int == 1 / % 16 / width, dtype, descriptors), a
fast path that drops or reorders the trailing constexprs, one that caches what it cannot model (unknown
argument types, a positional constexpr), one that bypasses launch hooks, launch_override or an API it
does not know, and a cached kernel under Triton's interpreter.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="fast_launch wraps Triton's launches; Triton is absent in this cell")

import triton.language as tl  # noqa: E402  (after the importorskip)
from triton import knobs  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from rapid_llm.kernels.ops import fast_launch, launch_fitting  # noqa: E402
from rapid_llm.kernels.ops.launch_override import launch_override  # noqa: E402


def _body(x_ptr, n, scale, flag, BLOCK: tl.constexpr, MODE: tl.constexpr = 3):
    pass


def _kernel():
    """A real JITFunction (not the interpreter's stand-in, whatever TRITON_INTERPRET says)."""
    return JITFunction(_body)


class _Compiles:
    """stub_launches' compile stub that records every compile (one per specialisation the cache missed)."""

    def __init__(self):
        self.compiled = []

    def __call__(self, kernel, grid, args, config):
        compiled = fast_launch.StubCompiled(kernel, grid, args, config)
        compiled.calls = []
        compiled.run = lambda *arguments: compiled.calls.append(arguments)
        self.compiled.append(compiled)
        return compiled


@pytest.fixture
def compiles():
    stub = _Compiles()
    with fast_launch.stub_launches(stub):
        yield stub


def _x(dtype=torch.float16, offset=0):
    return torch.zeros(64, dtype=dtype)[offset:]


def test_a_second_call_with_the_same_specialisation_runs_the_compiled_kernel_directly(compiles):
    launch = fast_launch.Launcher(_kernel(), {"BLOCK": 64, "num_warps": 4})
    x = _x()
    launch((2,), x, 64, 0.5, True)
    launch((2, 3), x, 80, 0.25, True)  # 64 and 80: both i32 and divisible by 16
    assert len(compiles.compiled) == 1
    (run_arguments,) = compiles.compiled[0].calls
    # grid padded to 3 dims, stream 0, function, metadata, no launch metadata or hooks, then every argument
    # of the kernel in order: the call's, then BLOCK from the config and MODE's default
    assert run_arguments[:3] == (2, 3, 1)
    assert run_arguments[6:9] == (None, None, None)
    assert run_arguments[9:] == (x, 80, 0.25, True, 64, 3)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ((_x(), 64), (_x(offset=1), 64)),  # data pointer 16-byte aligned, then 2 bytes off
        ((_x(), 64), (_x(torch.bfloat16), 64)),  # dtype
        ((_x(), 64), (_x(), 1)),  # an int equal to 1 is a constant to Triton
        ((_x(), 64), (_x(), 65)),  # divisibility by 16
        ((_x(), 64), (_x(), 2**32)),  # i32 -> i64
        ((_x(), 2**32), (_x(), 2**63)),  # i64 -> u64
        ((_x(), 64), (_x(), -64)),  # still i32 and % 16: the same class (checked below), a control
    ],
    ids=["alignment", "dtype", "int_one", "int_multiple_of_16", "int_width_i64", "int_width_u64", "negative_same"],
)
def test_a_changed_specialisation_compiles_its_own_kernel(compiles, first, second):
    launch = fast_launch.Launcher(_kernel(), {"BLOCK": 64})
    launch((1,), *first, 0.5, True)
    launch((1,), *second, 0.5, True)
    same = fast_launch.specialisation_key((*first, 0.5, True)) == fast_launch.specialisation_key((*second, 0.5, True))
    assert len(compiles.compiled) == (1 if same else 2)
    assert same == (second[1] == -64)
    # each call ran the kernel compiled for its own arguments: the second through the stub's slow path,
    # and a repeat of it through the cache
    launch((1,), *second, 0.5, True)
    assert len(compiles.compiled[-1].calls) == (2 if same else 1)


def test_a_bool_value_and_none_are_part_of_the_key(compiles):
    launch = fast_launch.Launcher(_kernel(), {"BLOCK": 64})
    launch((1,), _x(), 64, 0.5, True)
    launch((1,), _x(), 64, 0.5, False)
    launch((1,), _x(), 64, 0.5, None)
    assert len(compiles.compiled) == 3


def test_an_argument_it_cannot_model_always_takes_the_slow_path(compiles):
    launch = fast_launch.Launcher(_kernel(), {"BLOCK": 64})
    for _ in range(3):
        launch((1,), _x(), "64", 0.5, True)  # a str: not modelled
    assert len(compiles.compiled) == 3
    assert all(not compiled.calls for compiled in compiles.compiled)


def test_a_constexpr_passed_positionally_is_never_cached(compiles):
    launch = fast_launch.Launcher(_kernel(), {})
    launch((1,), _x(), 64, 0.5, True, 64)  # BLOCK positionally: its value, not its class, selects the kernel
    launch((1,), _x(), 64, 0.5, True, 128)
    assert len(compiles.compiled) == 2
    assert all(not compiled.calls for compiled in compiles.compiled)


def test_a_launch_hook_sees_every_launch(compiles):
    launch = fast_launch.Launcher(_kernel(), {"BLOCK": 64})
    launch((1,), _x(), 64, 0.5, True)
    hook = knobs.runtime.launch_enter_hook
    seen = []
    profiler = seen.append
    if hasattr(hook, "add"):
        hook.add(profiler)
    else:
        knobs.runtime.launch_enter_hook = profiler
    try:
        launch((1,), _x(), 64, 0.5, True)
    finally:
        if hasattr(hook, "remove"):
            hook.remove(profiler)
        else:
            knobs.runtime.launch_enter_hook = hook
    assert len(compiles.compiled) == 2  # the hooked call went through kernel[grid] (here: the stub)
    assert not compiles.compiled[0].calls


def test_a_kernel_with_a_pre_run_hook_takes_the_slow_path(compiles):
    kernel = _kernel()
    launch = fast_launch.Launcher(kernel, {"BLOCK": 64})
    launch((1,), _x(), 64, 0.5, True)
    kernel.add_pre_run_hook(lambda *args, **kwargs: None)  # added after the first launch: still honoured
    launch((1,), _x(), 64, 0.5, True)
    assert len(compiles.compiled) == 2
    assert not compiles.compiled[0].calls


class _RecordingJIT(JITFunction):
    """A JITFunction whose kernel[grid](...) records the launch instead of compiling (Triton's own slow path)."""

    def run(self, *args, grid, warmup, **kwargs):
        self.launches.append((grid, args, kwargs))


def test_without_the_launch_api_it_was_written_for_every_call_takes_kernel_grid(monkeypatch):
    kernel = _RecordingJIT(_body)
    kernel.launches = []
    monkeypatch.setitem(fast_launch._state, "api", False)
    launch = fast_launch.Launcher(kernel, {"BLOCK": 64})
    for _ in range(2):
        launch((1,), _x(), 64, 0.5, True)
    assert [grid for grid, _, _ in kernel.launches] == [(1,), (1,)]
    assert kernel.launches[0][2]["BLOCK"] == 64
    assert not launch._entries


def test_the_installed_triton_launches_as_coded_against():
    """The source check itself: it must accept this Triton (else every launch here is the slow path)."""
    if fast_launch._interpreting():
        pytest.skip("under TRITON_INTERPRET the fast path is off by design")
    fast_launch._state["api"] = None
    assert fast_launch._api_matches()


def test_under_the_interpreter_kernels_are_left_alone():
    class Interpreted:  # what triton.jit returns under TRITON_INTERPRET=1: not a JITFunction
        def __getitem__(self, grid):
            return lambda *args, **config: ("launched", grid, args, config)

    interpreted = Interpreted()
    assert fast_launch.cached(interpreted) is interpreted
    assert fast_launch.Launcher(interpreted, {"BLOCK": 64})._direct is False


def test_a_launch_policy_is_cached_except_under_launch_override():
    built = []

    def policy(hidden):
        built.append(hidden)
        return {"BLOCK": hidden, "num_warps": 4}

    cached = fast_launch.LaunchPolicy("native/test_row", policy)
    assert cached.get((64,)) is cached.get((64,))
    assert built == [64]
    with launch_override("native/test_row", num_warps=8):
        assert cached.get((64,)) == {"BLOCK": 64, "num_warps": 8}
    assert cached.get((64,)) == {"BLOCK": 64, "num_warps": 4}
    with launch_override("native/test_row", WARPS=8), pytest.raises(ValueError, match="unknown knobs"):
        cached.get((64,))


def test_a_descriptor_is_reused_only_for_the_same_memory_and_box():
    class Descriptor:
        def __init__(self, base, shape, strides, block_shape):
            self.base, self.shape, self.strides, self.block_shape = base, shape, strides, block_shape

    cache = fast_launch.DescriptorCache(capacity=2)
    a, b = torch.zeros(8, 4), torch.zeros(8, 4)
    first = cache.get(Descriptor, a, (8, 4), (4, 1), (2, 4))
    assert cache.get(Descriptor, a, (8, 4), (4, 1), (2, 4)) is first
    assert cache.get(Descriptor, b, (8, 4), (4, 1), (2, 4)) is not first  # other memory
    assert cache.get(Descriptor, a, (8, 4), (4, 1), (4, 4)).block_shape == [4, 4]  # other box
    assert len(cache._entries) == 2  # capacity: the oldest went


def test_launch_fitting_steady_state_launches_the_fitted_stages():
    launched = []

    class Kernel:
        __name__ = "steady_state_kernel"

        def __getitem__(self, grid):
            def run(*args, **config):
                if config["num_stages"] > 2:
                    raise launch_fitting.OutOfResources(1, 0, "shared memory")
                launched.append((grid, args, config["num_stages"]))

            return run

    kernel, device = Kernel(), torch.device("cpu")
    try:
        assert launch_fitting.launch_fitting(kernel, (1,), device, 7, BLOCK=64, num_stages=4) == 2
        assert launch_fitting.launch_fitting(kernel, (2,), device, 8, BLOCK=64, num_stages=4) == 2
    finally:
        launch_fitting.forget()
    assert launched == [((1,), (7,), 2), ((2,), (8,), 2)]


def test_a_tensor_descriptor_keys_by_its_box_dtype_and_shape():
    from triton.tools.tensor_descriptor import TensorDescriptor

    matrix = torch.zeros(64, 32, dtype=torch.float16)

    def key(block, base=matrix):
        return fast_launch.specialisation_key((TensorDescriptor(base, list(base.shape), [base.stride(0), 1], block),))

    assert key([16, 32]) == key([16, 32])
    assert key([16, 32]) != key([32, 32])
    assert key([16, 32]) != key([16, 32], base=matrix.to(torch.bfloat16))
    assert key([16, 32]) != key([16, 32], base=matrix[:32])
