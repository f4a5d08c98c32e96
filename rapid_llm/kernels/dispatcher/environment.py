"""The machine in front of us, as a frozen value.

`Device`, `Libraries` and `Environment` are hashable values that dispatch()
takes as arguments. `probe_environment()` is the ONLY impure step of the
dispatcher: it reads the RAPID_LLM_* environment variables, asks
importlib.metadata for library versions and, if torch is importable, asks
torch for the device. It runs once per process; changing os.environ later
changes nothing (tests pass their own mapping instead).

Environment variables read by the probe:

  RAPID_LLM_DENY             backends or rows never selected: ``flashinfer,native/rms_norm``
  RAPID_LLM_FORCE            rows forced per op: ``norm.rms_norm=native/rms_norm;elementwise.scale=torch/scale``
  RAPID_LLM_HIDE_LIBS        libraries treated as absent (and made unimportable): ``triton,flashinfer``
  RAPID_LLM_TRITON_INTERPRET ``1``: run native Triton rows on the CPU through Triton's interpreter
  RAPID_LLM_CHECK_BOUNDS     ``1``: the ops' value checks (index bounds, scale signs) also run on CUDA
                             tensors (a device sync per call: a debug mode; CPU tensors are always checked)
"""

from __future__ import annotations

import sys

import attrs

from .libraries import known_libraries
from .spec import DEVICE_KINDS, DTYPE_TORCH_NAMES


class Device(tuple):
    """Where kernels run: ``cpu`` or ``cuda`` with its SM version (90 = sm90). Immutable, hashable.

    `triton_interpreter` is set on a cpu device whose process opted into
    Triton's interpreter. (The GPU's marketing name lives in
    Environment.device_name: it takes no part in dispatch.)

    Why a tuple subclass with interned instances and an identity hash:
    dispatch() is memoised on its arguments, and this keeps the Device part of
    every memo lookup a pointer hash and a pointer compare, in C. Equal
    devices are the same object, so identity hashing stays consistent with
    equality.
    """

    _interned: dict = {}

    def __new__(cls, kind: str, sm: int | None = None, triton_interpreter: bool = False):
        value = (kind, sm, bool(triton_interpreter))
        device = cls._interned.get(value)
        if device is not None:
            return device
        if kind not in DEVICE_KINDS:
            raise ValueError(f"device kind must be one of {sorted(DEVICE_KINDS)}, got {kind!r}")
        if kind == "cpu" and sm is not None:
            raise ValueError("a cpu device has no SM version")
        if kind == "cuda" and triton_interpreter:
            raise ValueError("the Triton interpreter flag applies to cpu devices only")
        if sm is not None and (isinstance(sm, bool) or not isinstance(sm, int)):
            raise ValueError(f"sm must be an int such as 90, got {sm!r}")
        device = cls._interned[value] = super().__new__(cls, value)
        return device

    __hash__ = object.__hash__

    kind = property(lambda self: self[0], doc="'cpu' or 'cuda'")
    sm = property(lambda self: self[1], doc="compute capability major*10+minor, or None")
    triton_interpreter = property(lambda self: self[2], doc="cpu device running Triton's interpreter")

    def __repr__(self) -> str:
        return f"Device({self.kind!r}, sm={self.sm!r}, triton_interpreter={self.triton_interpreter!r})"

    def __str__(self) -> str:
        if self.kind == "cuda":
            return f"cuda:sm{self.sm}" if self.sm is not None else "cuda"
        return "cpu+triton-interpreter" if self.triton_interpreter else "cpu"

    def __reduce__(self):
        return (Device, tuple(self))

    @classmethod
    def parse(cls, text: str) -> "Device":
        """``cpu``, ``cpu+triton-interpreter``, ``cuda``, ``cuda:sm90`` or ``cuda:90``."""
        spec = text.strip().lower()
        if spec in ("cpu", "cpu+triton-interpreter", "cpu+interpreter"):
            return cls("cpu", triton_interpreter=spec != "cpu")
        kind, _, sm = spec.partition(":")
        if kind == "cuda":
            if not sm:
                return cls("cuda")
            digits = sm[2:] if sm.startswith("sm") else sm
            # 'cuda:0' is torch's device index, not a compute capability (the oldest is sm30).
            if digits.isdigit() and int(digits) >= 30:
                return cls("cuda", int(digits))
        raise ValueError(
            f"cannot parse device {text!r}; expected cpu, cpu+triton-interpreter, cuda or cuda:sm90 "
            "(an SM version, not a device index)"
        )


class Libraries(tuple):
    """Installed optional libraries: sorted (name, version) pairs. Immutable, interned, hashable in C.

    Built from a mapping or pairs: ``Libraries({"triton": "3.6.0"})``.
    """

    _interned: dict = {}

    def __new__(cls, versions=()):
        items = versions.items() if hasattr(versions, "items") else versions
        value = tuple(sorted(dict(items).items()))
        libraries = cls._interned.get(value)
        if libraries is None:
            libraries = cls._interned[value] = super().__new__(cls, value)
        return libraries

    # Interned like Device (equal values are one object), so the memo key hashes a pointer.
    __hash__ = object.__hash__

    def __reduce__(self):
        return (Libraries, (tuple(self),))

    @property
    def versions(self) -> tuple[tuple[str, str], ...]:
        return tuple(self)

    def __repr__(self) -> str:
        return f"Libraries({dict(self)!r})"

    def get(self, name: str) -> str | None:
        for lib, version in self:
            if lib == name:
                return version
        return None

    def as_dict(self) -> dict[str, str]:
        return dict(self)

    def without(self, names) -> "Libraries":
        return Libraries([(k, v) for k, v in self if k not in names])

    @classmethod
    def parse(cls, specs) -> "Libraries":
        """From ``["flashinfer=0.6.0", "triton=3.6.0"]`` (the CLI's --lib)."""
        pairs = []
        for spec in specs:
            name, sep, version = spec.partition("=")
            if not sep or not version:
                raise ValueError(f"--lib expects NAME=VERSION, got {spec!r}")
            if name not in known_libraries():
                raise ValueError(f"unknown library {name!r}; known: {sorted(known_libraries())}")
            pairs.append((name, version))
        return cls(pairs)


def _frozen_names(value) -> frozenset[str]:
    return frozenset(value)


def _force_pairs(value) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(dict(value).items()))


@attrs.frozen(cache_hash=True)
class Environment:
    """Everything dispatch needs to know about this process, frozen."""

    device: Device
    libs: Libraries = attrs.field(factory=Libraries)
    deny: frozenset[str] = attrs.field(factory=frozenset, converter=_frozen_names)
    force: tuple[tuple[str, str], ...] = attrs.field(default=(), converter=_force_pairs)
    hidden_libs: frozenset[str] = attrs.field(factory=frozenset, converter=_frozen_names)
    triton_interpret: bool = False
    check_bounds: bool = False
    torch_version: str | None = attrs.field(default=None, eq=False)
    cuda_devices: tuple[str, ...] = attrs.field(default=(), eq=False, converter=tuple)
    device_name: str | None = attrs.field(default=None, eq=False)

    def forced_row(self, op: str) -> str | None:
        for forced_op, row in self.force:
            if forced_op == op:
                return row
        return None


# ---------------------------------------------------------------------------
# Parsing of the environment variables (pure helpers; the probe calls them)
# ---------------------------------------------------------------------------


def _split_list(text: str) -> list[str]:
    return [item.strip() for item in text.replace(";", ",").split(",") if item.strip()]


def parse_force(text: str) -> dict[str, str]:
    """``norm.rms_norm=native/rms_norm;attention.decode=flashinfer/decode`` -> {op: row}."""
    forced = {}
    for item in text.replace(",", ";").split(";"):
        item = item.strip()
        if not item:
            continue
        op, sep, row = item.partition("=")
        if not sep or "." not in op or "/" not in row:
            raise ValueError(
                f"RAPID_LLM_FORCE: expected '<op>=<row>' items such as 'norm.rms_norm=native/rms_norm', got {item!r}"
            )
        if op.strip() in forced:
            raise ValueError(f"RAPID_LLM_FORCE names {op.strip()!r} twice")
        forced[op.strip()] = row.strip()
    return forced


def parse_hidden_libs(text: str) -> frozenset[str]:
    names = frozenset(_split_list(text))
    unknown = names - set(known_libraries())
    if unknown:
        raise ValueError(
            f"RAPID_LLM_HIDE_LIBS: unknown libraries {sorted(unknown)}; known: {sorted(known_libraries())}"
        )
    return names


def parse_flag(name: str, text: str | None) -> bool:
    """'1/true/yes/on' -> True, ''/'0/false/no/off' -> False; anything else is an error naming the variable."""
    value = (text or "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}: expected 1/0 (or true/false, yes/no, on/off), got {text!r}")


# ---------------------------------------------------------------------------
# Import blocker for hidden libraries
# ---------------------------------------------------------------------------


def install_import_blocker(hidden: frozenset[str]) -> None:
    """Make the hidden libraries' modules behave as if uninstalled.

    Each top-level module is set to None in sys.modules, Python's own marker
    for "this import must fail": `import triton` raises ModuleNotFoundError
    and `importlib.util.find_spec("triton")` returns None, which is exactly
    what code probing for an optional module (torch included) sees when it is
    not installed. (A meta-path finder that raises would break such probes.)
    """
    modules = sorted(m for name in hidden for m in known_libraries()[name].modules)
    already = [m for m in modules if sys.modules.get(m) is not None]
    if already:
        raise RuntimeError(
            f"RAPID_LLM_HIDE_LIBS hides {sorted(hidden)} but {already} was imported before "
            "rapid_llm probed the environment; set the variable before the process starts"
        )
    for module in modules:
        sys.modules[module] = None


# ---------------------------------------------------------------------------
# The probe
# ---------------------------------------------------------------------------


#: Triton's interpreter runs kernels with numpy, which warns where the GPU silently follows IEEE
#: (exp overflowing to inf for a saturated gate, a cast overflowing to inf): noise, not errors.
INTERPRETER_WARNINGS_MODULE = r"triton\.runtime\.interpreter"


def silence_interpreter_float_warnings() -> None:
    import warnings

    warnings.filterwarnings("ignore", category=RuntimeWarning, module=INTERPRETER_WARNINGS_MODULE)


def installed_library_versions() -> dict[str, str]:
    """name -> version for every known optional library that pip says is installed."""
    from importlib import metadata

    found = {}
    for info in known_libraries().values():
        for dist in info.distributions:
            try:
                found[info.name] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return found


def _probe_torch(triton_interpret: bool):
    """(device, torch version, names of visible CUDA devices, current device's name); cpu without a GPU."""
    import warnings

    try:
        with warnings.catch_warnings():
            # A CPU torch without numpy warns at import; rapid_llm needs numpy only for Triton's
            # interpreter (the test extra), so the warning is noise for `rapid-llm plan`.
            warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
            import torch
    except ImportError:
        return Device("cpu", triton_interpreter=triton_interpret), None, (), None
    if torch.cuda.is_available():
        index = torch.cuda.current_device()
        major, minor = torch.cuda.get_device_capability(index)
        names = tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        return Device("cuda", major * 10 + minor), torch.__version__, names, names[index]
    return Device("cpu", triton_interpreter=triton_interpret), torch.__version__, (), None


#: Process-wide probes: key None is this machine; a Device key is a described device (CLI --device).
_PROBED: dict = {}


def probe_environment(environ=None, *, device: Device | None = None, refresh: bool = False) -> Environment:
    """Build the process's Environment (cached after the first call).

    Pass `device` to describe another device: torch is then not imported
    (the CLI's --device). Pass `environ` (a mapping) to probe from that
    mapping instead of os.environ; such probes are not cached and install no
    import blocker.
    """
    process_wide = environ is None
    cache_key = device
    if process_wide and cache_key in _PROBED and not refresh:
        return _PROBED[cache_key]
    if environ is None:
        import os

        environ = os.environ
    hidden = parse_hidden_libs(environ.get("RAPID_LLM_HIDE_LIBS", ""))
    triton_interpret = parse_flag("RAPID_LLM_TRITON_INTERPRET", environ.get("RAPID_LLM_TRITON_INTERPRET"))
    check_bounds = parse_flag("RAPID_LLM_CHECK_BOUNDS", environ.get("RAPID_LLM_CHECK_BOUNDS"))
    if process_wide:
        install_import_blocker(hidden)
        if triton_interpret:
            # Triton picks interpreter or compiler when a kernel is decorated,
            # i.e. when our kernel modules are first imported (lazily, after this).
            environ.setdefault("TRITON_INTERPRET", "1")
            silence_interpreter_float_warnings()
    libs = Libraries(installed_library_versions()).without(hidden)
    if device is None:
        device, torch_version, cuda_devices, device_name = _probe_torch(triton_interpret)
    else:
        torch_version, cuda_devices, device_name = None, (), None
    env = Environment(
        device=device,
        libs=libs,
        deny=_split_list(environ.get("RAPID_LLM_DENY", "")),
        force=parse_force(environ.get("RAPID_LLM_FORCE", "")),
        hidden_libs=hidden,
        triton_interpret=triton_interpret,
        check_bounds=check_bounds,
        torch_version=torch_version,
        cuda_devices=cuda_devices,
        device_name=device_name,
    )
    if process_wide:
        _PROBED[cache_key] = env
    return env


# ---------------------------------------------------------------------------
# Tensors -> (device, dtype label). Duck-typed: no torch import needed here.
# ---------------------------------------------------------------------------

_TORCH_NAME_TO_LABEL = {f"torch.{name}": label for label, name in DTYPE_TORCH_NAMES.items()}
_DTYPE_LABELS: dict = {}
_DEVICES: dict = {}


def dtype_label(torch_dtype) -> str:
    """torch.bfloat16 -> 'bf16'. Unknown dtypes give their torch name (no row serves them)."""
    label = _DTYPE_LABELS.get(torch_dtype)
    if label is None:
        text = str(torch_dtype)
        label = _TORCH_NAME_TO_LABEL.get(text, text.removeprefix("torch."))
        _DTYPE_LABELS[torch_dtype] = label
    return label


def clear_conversions() -> None:
    """Forget the cached tensor -> label/device conversions (plan.clear_memo() calls this)."""
    _DTYPE_LABELS.clear()
    _DEVICES.clear()


def device_of(torch_device, triton_interpret: bool) -> Device:
    """torch.device('cuda:0') -> Device('cuda', 90). Cached per torch device."""
    key = (torch_device, triton_interpret)
    device = _DEVICES.get(key)
    if device is None:
        if torch_device.type == "cuda":
            import torch

            index = torch_device.index if torch_device.index is not None else torch.cuda.current_device()
            major, minor = torch.cuda.get_device_capability(index)
            device = Device("cuda", major * 10 + minor)
        elif torch_device.type == "cpu":
            device = Device("cpu", triton_interpreter=triton_interpret)
        else:
            raise ValueError(f"rapid_llm serves cpu and cuda tensors; got a tensor on {torch_device}")
        _DEVICES[key] = device
    return device
