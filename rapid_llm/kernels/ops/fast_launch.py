"""Cached Triton launches: the second call of a kernel with the same specialisation skips Triton's binder.

    @fast_launch.cached
    @triton.jit
    def _rms_norm_kernel(x_ptr, ..., BLOCK_ROWS: tl.constexpr, ...): ...

    _rms_norm_kernel[grid](x, weight, out, x_row_stride, ..., **config)   # as with any @triton.jit kernel

`kernel[grid](*args, **config)` spends most of an eager call's host time in JITFunction.run: binding
and specialising every argument, rebuilding the cache key, parsing options, building launch metadata.
A `Launcher` holds one kernel with one fixed keyword set (constexprs and launch options; a `cached`
kernel keeps one per keyword set its call sites pass, runtime arguments positional). Its first call
with a given specialisation launches through `kernel[grid]` as usual (compiling, or finding the compiled
kernel), and keeps the returned compiled kernel under a key of everything Triton specialises a runtime
argument on; later calls with that key hand the arguments straight to the compiled kernel's launcher,
the same call JITFunction.run ends with. Same kernel, same arguments: the results are bit-identical.

The key (`specialisation_key`) is finer than Triton's own: per tensor its dtype and whether its data
pointer is 16-byte aligned; per int whether it is 1, its divisibility by 16 and its integer width class
(i32 / i64 / u64); per float its type; per bool and None the value; per TensorDescriptor (Triton's
and Gluon's) its dtype, base alignment, shape, strides, block shape, layout and padding; plus the current device. Any
other argument type, a constexpr passed positionally, launch hooks in use (profilers), a kernel with
pre-run hooks, or a Triton whose launch API differs from the one this module was written against
(checked once, on first use) send the call through `kernel[grid]`. Under Triton's interpreter every
call goes through `kernel[grid]`.

`stub_launches(compile_stub)` (CPU benchmarks and tests) replaces the first launch with a stub that
returns a compiled-kernel stand-in, and reads device and stream as 0: the host path runs without a GPU.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import threading

import torch

try:
    import triton
    from triton import knobs as _knobs
    from triton.runtime.jit import JITFunction
except ImportError:  # pragma: no cover - native rows need triton; their rows say so
    triton = _knobs = JITFunction = None

_DESCRIPTOR_TYPES = []
try:
    from triton.tools.tensor_descriptor import TensorDescriptor as _ToolsDescriptor

    _DESCRIPTOR_TYPES.append(_ToolsDescriptor)
except ImportError:  # pragma: no cover - every triton this package supports has it
    pass
try:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as _GluonDescriptor

    _DESCRIPTOR_TYPES.append(_GluonDescriptor)
except ImportError:  # pragma: no cover - Gluon is absent before triton 3.4
    pass
_DESCRIPTOR_TYPES = frozenset(_DESCRIPTOR_TYPES)

from .launch_override import active as _override_active
from .launch_override import apply as _apply

_Tensor = torch.Tensor
_I32_LOW, _I32_HIGH, _I64_HIGH = -(2**31), 2**31, 2**63

#: The launch call JITFunction.run ends with, in the Triton versions this module was written against
#: (3.6 and 3.9): the fast path makes the same call. A Triton whose run() reads otherwise is not used.
_LAUNCH_CALL = (
    "kernel.run(grid_0, grid_1, grid_2, stream, kernel.function, kernel.packed_metadata, launch_metadata,",
    "knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *bound_args.values())",
)

# The module's state: whether the launch API matched (None: not checked yet), the active stub, and
# (thread id, list) that host_replay records that thread's launches into (None: not recording).
_state = {"api": None, "stub": None, "recording": None}


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for host ints (triton.cdiv is a constexpr function: several times slower per call)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n (n >= 1), for host ints (as triton.next_power_of_2, without its overhead)."""
    return 1 << (n - 1).bit_length()


class _Unknown(Exception):
    """An argument whose specialisation this module does not model: the call takes kernel[grid]."""


def _api_matches() -> bool:
    """Whether the installed Triton launches as this module expects (checked once, on first use)."""
    if _state["api"] is None:
        ok = False
        if JITFunction is not None and not _interpreting():
            try:
                source = " ".join(inspect.getsource(JITFunction.run).split())
                ok = all(" ".join(part.split()) in source for part in _LAUNCH_CALL)
            except (OSError, TypeError):
                ok = False
        _state["api"] = ok
    return _state["api"]


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _wide_int_class(value: int) -> int:
    """The class of an int outside i32: i64 (4) or u64 (6), plus its divisibility by 16."""
    width = 4 if value < _I64_HIGH else 6
    return width + (value % 16 == 0)


def _descriptor_key(descriptor) -> tuple:
    base = descriptor.base
    return (
        base.dtype,
        base.data_ptr() % 16 == 0,
        tuple(descriptor.shape),
        tuple(descriptor.strides),
        tuple(descriptor.block_shape),
        getattr(descriptor, "layout", None),  # Gluon's descriptors only
        descriptor.padding,
        getattr(descriptor, "round_f32_to_tf32", None),  # Triton's, from 3.7 on
    )


def specialisation_key(args: tuple) -> tuple:
    """A key equal for two argument tuples only if Triton compiles both alike (see the module docstring).
    Raises _Unknown for an argument type it does not model. Ints are classed as 1 (a constant to Triton),
    2/3 (i32, not / divisible by 16), 4/5 (i64), 6/7 (u64)."""
    key = []
    append = key.append
    for value in args:
        kind = type(value)
        if kind is int:  # the most common argument: inline, no call
            if value == 1:
                append(1)
            elif _I32_LOW <= value < _I32_HIGH:
                append(3 if value % 16 == 0 else 2)
            else:
                append(_wide_int_class(value))
        elif kind is _Tensor or isinstance(value, _Tensor):
            append(value.dtype)
            append(value.data_ptr() % 16 == 0)
        elif kind is float:
            append(float)
        elif kind is bool or value is None:
            append((kind, value))
        elif kind in _DESCRIPTOR_TYPES:
            append(_descriptor_key(value))
        else:
            raise _Unknown(kind)
    return tuple(key)


def _hooks_idle() -> bool:
    """Whether no launch hook would see this launch (profilers such as proton add them)."""
    runtime = _knobs.runtime
    for hook in (runtime.launch_enter_hook, runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return False
    return True


def _device_and_stream() -> tuple:
    if _state["stub"] is not None:
        return 0, 0
    current = _state.get("current")
    if current is None:
        from triton.runtime import driver

        # bound once: the lazy driver proxy resolves its attributes on every access
        current = _state["current"] = (driver.active.get_current_device, driver.active.get_current_stream)
    device = current[0]()
    return device, current[1](device)


class Launcher:
    """One kernel with one fixed keyword set: `launcher(grid, *args)` launches kernel[grid](*args, **config).

    args are the kernel's leading runtime arguments, positionally; config holds its constexprs and launch
    options (hashable values). See the module docstring for when a call skips Triton's binder."""

    __slots__ = ("_direct", "_entries", "_pre_run_hooks", "config", "kernel")

    def __init__(self, kernel, config: dict):
        self.kernel = kernel
        self.config = dict(config)
        self._entries: dict = {}
        self._direct = JITFunction is not None and isinstance(kernel, JITFunction)
        # pre-run hooks see every call's arguments: while the kernel has any, it takes kernel[grid]
        self._pre_run_hooks = getattr(kernel, "pre_run_hooks", None) if self._direct else None

    def __call__(self, grid, *args):
        if (
            self._direct
            and _state["recording"] is None
            and not self._pre_run_hooks
            and (_state["stub"] is not None or _api_matches())
            and _hooks_idle()
        ):
            try:
                key = specialisation_key(args)
            except _Unknown:
                return self._launch(grid, args, None)
            device, stream = _device_and_stream()
            entry = self._entries.get((device, key))
            if entry is not None:
                run, function, metadata, tail, used_globals = entry
                if not used_globals or _globals_unchanged(used_globals):
                    size = len(grid)
                    run(
                        grid[0],
                        grid[1] if size > 1 else 1,
                        grid[2] if size > 2 else 1,
                        stream,
                        function,
                        metadata,
                        None,  # launch metadata: only launch hooks read it, and none is set (_hooks_idle)
                        None,
                        None,
                        *args,
                        *tail,
                    )
                    return None
            return self._launch(grid, args, (device, key))
        return self._launch(grid, args, None)

    def _launch(self, grid, args, key):
        """kernel[grid](*args, **config) (the stub's, under stub_launches); remembers the compiled kernel under key."""
        stub = _state["stub"]
        if stub is not None and self._direct:
            compiled = stub(self.kernel, grid, args, self.config)
        else:
            compiled = self.kernel[grid](*args, **self.config)
        recording = _state["recording"]
        if recording is not None and self._direct and recording[0] == threading.get_ident():
            recording[1].append((self, compiled, grid, args))
        if key is not None:
            entry = self._entry(compiled, len(args))
            if entry is not None:
                self._entries[key] = entry

    def _entry(self, compiled, positional: int):
        """(run, function, packed metadata, trailing argument values, used globals), or None when this launch
        cannot be repeated directly (an unknown compiled-kernel shape, a constexpr among the positional
        arguments, a trailing parameter without a value)."""
        tail = self.trailing_values(positional)
        if tail is None:
            return None
        try:
            run, function, metadata = compiled.run, compiled.function, compiled.packed_metadata
        except AttributeError:
            return None
        if function is None or not callable(run):
            return None
        used_globals = tuple(getattr(self.kernel, "used_global_vals", {}).items())
        return run, function, metadata, tail, used_globals

    def trailing_values(self, positional: int):
        """The values of the kernel's parameters after the first `positional` (from the config, else their
        defaults), or None when a positional one is a constexpr or a trailing one has no value."""
        params = self.kernel.params
        if positional > len(params) or any(param.is_constexpr for param in params[:positional]):
            return None
        tail = []
        for param in params[positional:]:
            if param.name in self.config:
                tail.append(self.config[param.name])
            elif param.default is not inspect.Parameter.empty:
                tail.append(param.default)
            else:
                return None
        return tuple(tail)

    def clear(self) -> None:
        """Forget the compiled kernels (the next call of each specialisation takes kernel[grid] again)."""
        self._entries.clear()


def _globals_unchanged(used_globals) -> bool:
    """JITFunction.run's check that the globals a kernel read when compiled still hold their values."""
    missing = object()
    for (name, _), (value, namespace) in used_globals:
        if namespace.get(name, missing) != value:
            return False  # the slow path raises Triton's own error
    return True


class StubCompiled:
    """A compiled-kernel stand-in for stub_launches: run() counts the launches and does nothing else."""

    def __init__(self, kernel, grid, args, config):
        self.kernel, self.grid, self.args, self.config = kernel, grid, args, config
        self.function = 1
        self.packed_metadata = ()
        self.launches = 0

    def run(self, *arguments):
        self.launches += 1


@contextlib.contextmanager
def stub_launches(compile_stub=StubCompiled):
    """Within the block, a Launcher's first launch of each specialisation calls compile_stub(kernel, grid,
    args, config) instead of kernel[grid] and caches what it returns; device and stream read as 0. The
    caches of every Launcher are cleared on entry and exit, so no stub outlives the block."""
    _clear_all()
    saved = _state["stub"]
    _state["stub"] = compile_stub
    try:
        yield
    finally:
        _state["stub"] = saved
        _clear_all()


def _clear_all() -> None:
    for kernel in _KERNELS:
        kernel.clear()


class LaunchPolicy:
    """A kernel's launch policy, cached: `policy.get(sizes)` is launch_override.apply(row, policy(*sizes)).

    The policy builds a fresh dict of knobs from host-known sizes; a sweep's launch_override for `row`
    replaces some (row None: the policy applies the override itself, and may return any value). Without an active override the knobs are built once per `sizes` tuple and shared, so a
    steady-state call builds no dict: read them (or pass them as **knobs), never change them. At most
    `limit` size tuples are kept (a policy of the token count cannot grow without bound)."""

    __slots__ = ("_cache", "limit", "policy", "row")

    def __init__(self, row: str, policy, limit: int = 4096):
        self.row, self.policy, self.limit = row, policy, limit
        self._cache: dict = {}

    def get(self, sizes: tuple) -> dict:
        found = self._cache.get(sizes)
        if found is not None and not _override_active():
            return found
        knobs = self.policy(*sizes)
        if self.row is not None:
            knobs = _apply(self.row, knobs)
        if not _override_active() and len(self._cache) < self.limit:
            self._cache[sizes] = knobs
        return knobs


class DescriptorCache:
    """TMA descriptors reused across calls: `get(cls, tensor, shape, strides, block_shape, layout)` returns
    the descriptor built for the same memory (data pointer, dtype), shape, strides, block and layout.

    For long-lived tensors (a KV cache): building a descriptor runs Triton's validation on every call. A
    cached descriptor keeps its tensor alive, so the same data pointer cannot name new memory while it is
    cached; at most `capacity` are kept (the oldest goes first), which bounds the memory a dropped cache
    can be held by."""

    __slots__ = ("_entries", "capacity")

    def __init__(self, capacity: int = 4):
        self.capacity = capacity
        self._entries: dict = {}

    def get(self, cls, tensor, shape: tuple, strides: tuple, block_shape: tuple, layout=None):
        key = (cls, tensor.data_ptr(), tensor.dtype, tensor.device, shape, strides, block_shape, layout)
        found = self._entries.get(key)
        if found is None:
            arguments = (tensor, list(shape), list(strides), list(block_shape))
            found = cls(*arguments, layout) if layout is not None else cls(*arguments)
            if len(self._entries) >= self.capacity:
                del self._entries[next(iter(self._entries))]
            self._entries[key] = found
        return found

    def row_boxes(self, cls, matrix, rows: int, boxes) -> list:
        """get() for a row-major matrix [R, C] with unit column stride: one descriptor per (box width,
        layout) of `boxes`, each box `rows` rows tall (layout None for Triton's descriptors)."""
        shape, strides = tuple(matrix.shape), (matrix.stride(0), 1)
        return [self.get(cls, matrix, shape, strides, (rows, width), layout) for width, layout in boxes]

    def clear(self) -> None:
        self._entries.clear()


class CachedKernel:
    """A launched @triton.jit kernel whose `kernel[grid](*args, **config)` goes through a Launcher per config.

    Made by the `cached` decorator; every other attribute is the JIT function's. Use it for kernels that are
    launched, never for @triton.jit helpers called from other kernels."""

    __slots__ = ("__name__", "_launchers", "fn")

    def __init__(self, fn):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", repr(fn))
        self._launchers: dict = {}

    def __getitem__(self, grid):
        return functools.partial(self._launch, grid)

    def _launch(self, grid, *args, **config):
        key = tuple(config.items())  # one call site passes its knobs in one order
        found = self._launchers.get(key)
        if found is None:
            found = self._launchers[key] = Launcher(self.fn, config)
        return found(grid, *args)

    def launcher(self, config: dict) -> Launcher:
        """The Launcher of this kernel with `config` (what kernel[grid](..., **config) uses)."""
        key = tuple(config.items())
        found = self._launchers.get(key)
        if found is None:
            found = self._launchers[key] = Launcher(self.fn, config)
        return found

    def clear(self) -> None:
        for found in self._launchers.values():
            found.clear()

    def __getattr__(self, name):
        return getattr(self.fn, name)

    def __repr__(self) -> str:
        return f"cached({self.fn!r})"


def cached(fn):
    """Decorator over @triton.jit (or @gluon.jit) of a launched kernel: `fn[grid](...)` launches through
    Launchers (module docstring). Under Triton's interpreter (not a JITFunction) it returns fn unchanged."""
    if JITFunction is None or not isinstance(fn, JITFunction):
        return fn
    return _KERNELS.append(CachedKernel(fn)) or _KERNELS[-1]


#: Every CachedKernel, for stub_launches' clearing.
_KERNELS: list = []


__all__ = [
    "CachedKernel",
    "DescriptorCache",
    "LaunchPolicy",
    "Launcher",
    "StubCompiled",
    "cached",
    "cdiv",
    "next_power_of_2",
    "specialisation_key",
    "stub_launches",
]
