"""Host replay: a native row's launches without its Python, once per argument structure.

    replayer = host_replay.replayer(kernel_entry)   # None where replay is not available
    out = replayer(x, weight, eps)                 # as kernel_entry(x, weight, eps)

An eager call of a native row spends its host time in Python: the op's check, the launch policy, the
launch arguments, Triton's launcher, torch.empty. For a given argument *structure* all of that is the
same on every call: only data pointers change. A `rapid_llm._host.Replayer` (csrc/host/replay.cc, built
with the optional extension) keys each call on that structure (per tensor: device, dtype, sizes,
strides, data pointer mod 16; per int/float/bool/None/str: its value; the distance between tensors whose
memory spans overlap; the current device). The first call with a key runs the Python entry while
`record()` watches it, and the replayer keeps what it did as a program:

- the tensors it allocated (torch.empty & co.: sizes, strides, dtype), seen by a TorchDispatchMode;
- the kernels it launched through fast_launch's cached kernels (CUfunction, grid, threads, shared
  memory, and each parameter Triton passes: a constant, a pointer at a fixed byte offset from an
  argument's or an allocation's data pointer, or a TMA descriptor over such a pointer, expanded as
  Triton's launcher expands it and re-encoded by the replay when its address changes), with the
  parameter sizes checked against the loaded function (cuFuncGetParamInfo);
- what it returned (arguments, allocations, views of allocations, None, tuples).

Later calls with the key replay the program in C++: allocate, launch on the current stream, return.
A call is recorded only if the program captures everything the entry did; otherwise its key is marked
skip with the reason and keeps running the Python entry: any other aten op ran (a copy, a fill, a host
read such as .item()), a Triton kernel launched outside the cached kernels (counted by Triton's launch
hook), a pointer outside the arguments and the call's allocations, a scratch buffer (per-launch memory),
a grid given as a function, a result it cannot name.

Replay is suspended (every call runs Python) while a launch override or forced value checks are active
(`suspended()`), and is never used on the CPU, under Triton's interpreter, for tensor subclasses
(FakeTensor under torch.compile), tensors that require grad, or keyword arguments.
"""

from __future__ import annotations

import contextlib
import struct
import threading

import torch

from . import fast_launch, launch_override

try:
    from torch.utils._python_dispatch import TorchDispatchMode
except ImportError:  # pragma: no cover - every torch this package supports has it
    TorchDispatchMode = object

#: Parameter and result kinds of a program (csrc/host/replay.cc: ParamKind, ResultKind).
CONSTANT, ARG_POINTER, ALLOC_POINTER, ARG_TENSOR_MAP, ALLOC_TENSOR_MAP = 0, 1, 2, 3, 4
RESULT_ARG, RESULT_ALLOC, RESULT_VIEW, RESULT_NONE, RESULT_TUPLE = 0, 1, 2, 3, 4

#: Triton's TMA element types on the device -> the host enum (CUtensorMapDataType), as its launcher maps them.
_TMA_DTYPE_TO_HOST = {**{i: i for i in range(16)}, 8: 10, 9: 8, 10: 9}
_TENSOR_MAP_BYTES = 128
_TENSOR_MAP_META = frozenset({"swizzle", "elem_size", "elem_type", "block_size", "fp4_padded"})

#: Triton scalar parameter types -> bytes (little-endian integers).
_INT_BYTES = {"i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "u1": 1, "u8": 1, "u16": 2, "u32": 4, "u64": 8}

_aten = torch.ops.aten
#: Allocations a program repeats (fresh memory, contents unspecified).
_ALLOCATIONS = frozenset(
    {
        _aten.empty.memory_format,
        _aten.empty_strided.default,
        _aten.empty_like.default,
        _aten.new_empty.default,
        _aten.new_empty_strided.default,
    }
)

_state = {"module": None, "problem": None, "recording": False}


def _module():
    """rapid_llm._host, or None (with _state["problem"] saying why)."""
    if _state["module"] is None and _state["problem"] is None:
        try:
            from rapid_llm import _host
        except ImportError as error:
            _state["problem"] = f"rapid_llm._host is not built ({error}; RAPID_LLM_BUILD_EXT=host builds it)"
        else:
            problem = _host.driver_problem() if torch.cuda.is_available() else "no CUDA device"
            if problem is None:
                _state["module"] = _host
            else:
                _state["problem"] = problem
    return _state["module"]


def available() -> tuple[bool, str]:
    """(True, "") when replayers can be made here, else (False, the reason)."""
    if fast_launch._interpreting():
        return False, "Triton's interpreter runs the kernels"
    if _module() is None:
        return False, _state["problem"]
    return True, ""


def replayable(row_name: str, device_kind: str) -> bool:
    """Whether a row's entry may be replayed: our own Triton kernels (native/ rows) on a CUDA device. Other
    backends launch through code the recording cannot see (a library's own launcher, the CUDA extension)."""
    return row_name.startswith("native/") and device_kind == "cuda" and available()[0]


def replayer(entry, record=None):
    """A Replayer in front of `entry` (module docstring), recording with `record(replayer, args)` (default:
    record(replayer, args, entry)), or None where replay is not available."""
    module = _module() if available()[0] else None
    if module is None:
        return None
    return module.Replayer(entry, record or _record_entry)


def _record_entry(replayer, args: tuple):
    return record(replayer, args, replayer.impl)


@contextlib.contextmanager
def suspended():
    """Within the block every replayer runs its Python entry (launch overrides, forced value checks)."""
    module = _module()
    if module is None:
        yield
        return
    module.suspend(1)
    try:
        yield
    finally:
        module.suspend(-1)


launch_override.WHILE_ACTIVE.append(suspended)


def record(replayer, args: tuple, run):
    """run(*args) while recording; registers the program with replayer (or marks the key skip, with the
    reason). Returns run's result. An exception from run propagates and registers nothing."""
    if _state["recording"]:  # an entry that calls another replayed entry: the outer one records it all
        return run(*args)
    recording = _Recording()
    with recording:
        result = run(*args)
    program, reason = recording.program(args, result)
    if program is None:
        replayer.skip(args, reason)
        return result
    try:
        replayer.add(args, program)
    except (ValueError, RuntimeError, TypeError) as error:
        replayer.skip(args, f"the program was refused: {error}")
    return result


class _Allocations(TorchDispatchMode):
    """Notes every allocation; any aten op other than an allocation or a view makes the call unrecordable."""

    def __init__(self, recording):
        super().__init__()
        self.recording = recording

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _ALLOCATIONS:
            self.recording.allocs.append(out)
        elif not func.is_view and self.recording.problem is None:
            self.recording.problem = f"the entry ran {func} (only allocations, views and cached Triton launches replay)"
        return out


class _Recording:
    """The launches, allocations and Triton launch-hook calls of one entry call (record())."""

    def __init__(self):
        self.launches: list = []
        self.allocs: list = []
        self.problem: str | None = None
        self.hook_calls = 0

    def _hook(self, *_):
        if threading.get_ident() == self._thread:  # another thread's launches are not this call's
            self.hook_calls += 1

    def __enter__(self):
        from triton import knobs

        self._thread = threading.get_ident()
        self._saved_hook = knobs.runtime.launch_enter_hook
        knobs.runtime.launch_enter_hook = self._hook  # counts every Triton launch, cached or not
        fast_launch._state["recording"] = (self._thread, self.launches)
        _state["recording"] = True
        self._mode = _Allocations(self)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        from triton import knobs

        self._mode.__exit__(*exc)
        _state["recording"] = False
        fast_launch._state["recording"] = None
        knobs.runtime.launch_enter_hook = self._saved_hook
        return False

    def program(self, args: tuple, result):
        """(program for Replayer.add, None), or (None, why this call cannot be replayed)."""
        if self.problem is not None:
            return None, self.problem
        if self.hook_calls != len(self.launches):
            return None, (
                f"{self.hook_calls - len(self.launches)} Triton launch(es) outside fast_launch's cached kernels"
            )
        device = torch.cuda.current_device()
        spans = _spans(args)
        allocs = []
        for tensor in self.allocs:
            if tensor.device.type != "cuda" or tensor.device.index != device or tensor.layout != torch.strided:
                return None, f"an allocation on {tensor.device} (replay allocates on cuda:{device}, strided)"
            allocs.append((tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype))
        kernels = []
        for launch in self.launches:
            kernel, reason = _kernel(launch, args, spans, self.allocs)
            if kernel is None:
                return None, reason
            kernels.append(kernel)
        result_spec, reason = _result(result, args, self.allocs)
        if result_spec is None:
            return None, reason
        return (device, allocs, kernels, result_spec), None


def _spans(args: tuple) -> list:
    """(argument index, first byte, end byte) of every tensor argument (empty ones: first == end)."""
    spans = []
    for index, value in enumerate(args):
        if isinstance(value, torch.Tensor):
            start = value.data_ptr()
            extent = 0
            if value.numel() > 0:
                extent = (1 + sum((size - 1) * stride for size, stride in zip(value.shape, value.stride()))) * (
                    value.element_size()
                )
            spans.append((index, start, start + extent))
    return spans


def _pointer(address: int, args: tuple, spans: list, allocs: list):
    """(kind, index, byte offset) naming `address`, or None when it is in no argument or allocation."""
    for index, start, end in spans:
        if start <= address < end or address == start:
            return ARG_POINTER, index, address - start
    for index, tensor in enumerate(allocs):
        start = tensor.data_ptr()
        end = start + tensor.untyped_storage().nbytes()
        if start <= address < end or address == start:
            return ALLOC_POINTER, index, address - start
    return None


def _kernel(launch, args: tuple, spans: list, allocs: list):
    """One launch as Replayer.add's kernel tuple, or (None, reason)."""
    launcher, compiled, grid, positional = launch
    trailing = launcher.trailing_values(len(positional))
    if trailing is None:
        return None, f"{launcher.kernel.__name__}: a parameter has no value to repeat"
    if callable(grid) or not all(type(size) is int for size in grid) or not 1 <= len(grid) <= 3:
        return None, f"{launcher.kernel.__name__}: the grid {grid!r} is not a tuple of 1-3 ints"
    metadata = compiled.metadata
    name = launcher.kernel.__name__
    if getattr(metadata, "num_ctas", 1) != 1:
        return None, f"{name}: clusters (num_ctas > 1) are not replayed"
    if getattr(metadata, "global_scratch_size", 0) or getattr(metadata, "profile_scratch_size", 0):
        return None, f"{name}: the kernel needs per-launch scratch memory"
    signature = list(getattr(getattr(compiled, "src", None), "signature", {}).values())
    values = (*positional, *trailing)
    if len(signature) != len(values):
        return None, f"{name}: {len(signature)} signature entries for {len(values)} parameters"
    descriptor_meta = list(getattr(metadata, "tensordesc_meta", None) or [])
    descriptors = 0
    params = []
    for kind, value in zip(signature, values):
        if kind == "constexpr":
            continue
        if not isinstance(kind, str):
            return None, f"{name}: a parameter of type {kind!r}"
        if kind.startswith("tensordesc"):
            meta = descriptor_meta[descriptors] if descriptor_meta else None
            descriptors += 1
            expanded, reason = _descriptor(name, value, meta, args, spans, allocs)
            if expanded is None:
                return None, reason
            params.extend(expanded)
        elif kind.startswith("*"):
            address = value.data_ptr() if isinstance(value, torch.Tensor) else value
            if type(address) is not int:
                return None, f"{name}: a pointer parameter given {type(value).__name__}"
            named = (CONSTANT, 0, 0) if address == 0 else _pointer(address, args, spans, allocs)
            if named is None:
                return None, f"{name}: a pointer outside the arguments and the call's allocations"
            params.append((*named, 8))
        elif kind in _INT_BYTES:
            size = _INT_BYTES[kind]
            params.append((CONSTANT, 0, int(value) & ((1 << (8 * size)) - 1), size))
        elif kind in ("fp32", "f32"):
            params.append((CONSTANT, 0, struct.unpack("<I", struct.pack("<f", float(value)))[0], 4))
        elif kind == "fp64":
            params.append((CONSTANT, 0, struct.unpack("<Q", struct.pack("<d", float(value)))[0], 8))
        else:
            return None, f"{name}: a parameter of type {kind!r} (half-float scalars are not replayed)"
    grid3 = (*grid, 1, 1)[:3]
    kernel = (
        int(compiled.function),
        grid3,
        32 * metadata.num_warps,
        metadata.shared,
        bool(getattr(metadata, "launch_pdl", False)),
        bool(getattr(metadata, "launch_cooperative_grid", False)),
        params,
    )
    return kernel, None


def _descriptor(name: str, descriptor, meta, args: tuple, spans: list, allocs: list):
    """A tensor-descriptor parameter as Triton's launcher expands it: with the kernel's TMA metadata, the
    CUtensorMap (re-encoded by the replay for each new address) then shape (i32) and strides (i64); without
    it, base pointer, shape and strides (i64), padding (i1), shape (i32), strides (i64). (params, None) or
    (None, reason)."""
    base = getattr(descriptor, "base", None)
    if not isinstance(base, torch.Tensor):
        return None, f"{name}: a tensor-descriptor parameter given {type(descriptor).__name__}"
    shape, strides = [int(size) for size in descriptor.shape], [int(stride) for stride in descriptor.strides]
    named = _pointer(base.data_ptr(), args, spans, allocs)
    if named is None:
        return None, f"{name}: a descriptor over memory outside the arguments and the call's allocations"
    kind, index, offset = named
    i32 = [(CONSTANT, 0, size & 0xFFFFFFFF, 4) for size in shape]
    i64 = lambda values: [(CONSTANT, 0, value & (2**64 - 1), 8) for value in values]  # noqa: E731
    if meta is None:
        padding = (CONSTANT, 0, int(descriptor.padding == "nan"), 1)
        return [(kind, index, offset, 8), *i64(shape), *i64(strides), padding, *i32, *i64(strides)], None
    if set(meta) - _TENSOR_MAP_META or strides[-1] != 1:
        return None, f"{name}: a TMA descriptor this replay does not model ({sorted(meta)}, strides {strides})"
    if meta["fp4_padded"]:
        shape = [*shape[:-1], 2 * shape[-1]]
        i32 = [(CONSTANT, 0, size & 0xFFFFFFFF, 4) for size in shape]
    geometry = (
        _TMA_DTYPE_TO_HOST[meta["elem_type"]],
        meta["swizzle"],
        1 if descriptor.padding == "nan" else 0,  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA / NONE
        shape[::-1],
        [meta["elem_size"] * stride for stride in strides[:-1]][::-1],
        list(meta["block_size"])[::-1],
    )
    map_kind = ARG_TENSOR_MAP if kind == ARG_POINTER else ALLOC_TENSOR_MAP
    return [(map_kind, index, offset, _TENSOR_MAP_BYTES, geometry), *i32, *i64(strides)], None


def _result(result, args: tuple, allocs: list):
    """(result spec, None) naming each returned object by argument or allocation, or (None, reason)."""
    if result is None:
        return (RESULT_NONE,), None
    if type(result) is tuple:
        children = []
        for item in result:
            child, reason = _result(item, args, allocs)
            if child is None:
                return None, reason
            children.append(child)
        return (RESULT_TUPLE, children), None
    if type(result) is torch.Tensor:
        for index, value in enumerate(args):
            if result is value:
                return (RESULT_ARG, index), None
        for index, tensor in enumerate(allocs):
            if result.untyped_storage().data_ptr() != tensor.untyped_storage().data_ptr():
                continue
            if result.dtype != tensor.dtype:
                break
            same = result.data_ptr() == tensor.data_ptr() and result.shape == tensor.shape
            if same and result.stride() == tensor.stride():
                return (RESULT_ALLOC, index), None
            offset = result.storage_offset() - tensor.storage_offset()
            return (RESULT_VIEW, index, tuple(result.shape), tuple(result.stride()), offset), None
    return None, f"the entry returned {type(result).__name__} that is neither an argument nor an allocation"


__all__ = ["available", "record", "replayable", "replayer", "suspended"]
