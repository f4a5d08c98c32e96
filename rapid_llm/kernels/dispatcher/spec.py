"""Kernel rows: the frozen data that dispatch() reads.

A `KernelSpec` row describes ONE implementation of ONE op and every condition
under which it may run: required optional libraries (with version ranges),
device capability, dtypes, shape constraints, layout tags, and a golden record
(measured parity against the reference). Rows are validated when they are
built, so a malformed row fails at import with a message naming the row.

This module is torch-free and imports nothing heavy: it sits on the import path
of every process that uses the library.
"""

from __future__ import annotations

import attrs

# ---------------------------------------------------------------------------
# Vocabularies. A row may only use names from these sets; build_tables() and
# the validators below reject anything else, so a typo never silently turns a
# row into one that can never (or always) match.
# ---------------------------------------------------------------------------

#: dtype labels and the torch dtype each one names.
DTYPE_TORCH_NAMES = {
    "fp32": "float32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "int64": "int64",
}
DTYPES = frozenset(DTYPE_TORCH_NAMES)
_DTYPE_ORDER = tuple(DTYPE_TORCH_NAMES)  # display order: widest float first

#: backend name -> implementation class. The class breaks priority ties:
#: our own kernels (native Triton, the CUDA extension) before external
#: libraries before the torch reference.
BACKEND_CLASSES = {
    "native": "native",
    "aot": "native",
    "jit": "native",
    "cublas": "external",
    "flashinfer": "external",
    "flash_attn": "external",
    "flash_mla": "external",
    "deep_gemm": "external",
    "deep_ep": "external",
    "symm_mem": "external",
    "torch": "reference",
}
CLASS_RANK = {"native": 2, "external": 1, "reference": 0}

DEVICE_KINDS = frozenset({"cpu", "cuda"})


class LibraryInfo:
    """An optional library: how to find its version and which modules it owns.

    `distributions` are the pip distribution names that provide it (checked in
    order with importlib.metadata); `modules` are the top-level import names
    that RAPID_LLM_HIDE_LIBS blocks. (A plain class: attrs classes cost ~2 ms
    each to create, and this module is on every process's import path.)
    """

    __slots__ = ("name", "distributions", "modules")

    def __init__(self, name: str, distributions: tuple[str, ...], modules: tuple[str, ...]):
        self.name, self.distributions, self.modules = name, distributions, modules

    def __repr__(self) -> str:
        return f"LibraryInfo({self.name!r}, {self.distributions!r}, {self.modules!r})"


#: The product's own optional libraries: Triton (its native kernels) and its CUDA extension (rapid_llm._C and
#: the JIT build: not a distribution, listed so that RAPID_LLM_HIDE_LIBS=cuda_extension makes its absence
#: cell). Every external library is declared by its backend package (backends/<name>/__init__.py: LIBRARY);
#: dispatcher/libraries.py merges the two.
CORE_LIBRARIES = {
    info.name: info
    for info in (
        LibraryInfo("triton", ("triton", "pytorch-triton"), ("triton",)),
        LibraryInfo("cuda_extension", (), ("rapid_llm._C",)),
    )
}


def version_key(text: str) -> tuple[int, ...]:
    """Release numbers of a version string: '2.11.0+cu130' -> (2, 11, 0).

    Local labels (+cu130) and suffixes (rc1, .post2, .dev0) end the release
    part; a pre-release therefore compares equal to its release. Trailing
    zeros are dropped ('3.0.0' == '3.0'). That is the
    right bias for "is this library new enough" checks, and it keeps
    `packaging` (slow to import) off the import path.
    """
    parts = []
    for piece in text.split("+", 1)[0].split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) != len(piece):
            break
    while len(parts) > 1 and parts[-1] == 0:  # '3.0' and '3.0.0' are one version
        parts.pop()
    return tuple(parts)


class _Unmeasured:
    """Priority of a row that has not been benchmarked: below every number."""

    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNMEASURED"

    def __reduce__(self):
        return (_Unmeasured, ())


UNMEASURED = _Unmeasured()


def priority_rank(priority) -> tuple[int, int]:
    """Sort key for a priority: every measured number outranks UNMEASURED."""
    if priority is UNMEASURED:
        return (0, 0)
    return (1, priority)


# ---------------------------------------------------------------------------
# Conditions
# ---------------------------------------------------------------------------


def _check_library_name(instance, attribute, value):
    if not isinstance(value, str) or not value.isidentifier():
        raise ValueError(f"a library name is an identifier (flash_mla), got {value!r}")


@attrs.frozen
class LibraryRequirement:
    """An optional library the row needs, installed at a version in [min_version, below_version). The name must
    be a known library (dispatcher/libraries.py): build_tables() checks it."""

    name: str = attrs.field(validator=_check_library_name)
    min_version: str | None = None
    below_version: str | None = None

    def describe(self) -> str:
        bounds = []
        if self.min_version:
            bounds.append(f">={self.min_version}")
        if self.below_version:
            bounds.append(f"<{self.below_version}")
        return self.name + (" " + ",".join(bounds) if bounds else "")

    def check(self, installed_version: str | None) -> tuple[bool, str]:
        """(ok, observed text) for the installed version (None: not installed)."""
        if installed_version is None:
            return False, "not installed"
        key = version_key(installed_version)
        if self.min_version and key < version_key(self.min_version):
            return False, f"{installed_version} installed (too old)"
        if self.below_version and key >= version_key(self.below_version):
            return False, f"{installed_version} installed (too new)"
        return True, f"{installed_version} installed"


def _check_device_kind(instance, attribute, value):
    if value not in DEVICE_KINDS:
        raise ValueError(f"device must be one of {sorted(DEVICE_KINDS)}, got {value!r}")


def _optional_set(value):
    return value if value is None else _to_frozenset(value)


@attrs.frozen
class CapabilityRequirement:
    """Where a row can run. A row's requirements are OR-ed.

    `device="cuda"` with optional `min_sm`/`max_sm` (compute capability as
    major*10+minor: 80 = Ampere, 90 = Hopper). `device="cpu"` with
    `triton_interpreter=True` means: on the CPU only when the process opted
    into running Triton kernels through Triton's interpreter
    (RAPID_LLM_TRITON_INTERPRET=1), which is how CI exercises native kernels.

    `dtypes` (with its `reason`) narrows this one capability to the dtypes
    whose results are right there, e.g. the interpreter for fp32/fp16 only
    where it computes a row's bf16 products wrongly: the row is not eligible
    where its result is known wrong, and explain() says why.
    """

    device: str = attrs.field(validator=_check_device_kind)
    min_sm: int | None = None
    max_sm: int | None = None
    triton_interpreter: bool = False
    dtypes: frozenset[str] | None = attrs.field(default=None, converter=_optional_set)
    reason: str = ""

    def __attrs_post_init__(self):
        if self.device == "cpu" and (self.min_sm is not None or self.max_sm is not None):
            raise ValueError("a cpu capability cannot name SM versions")
        if self.device == "cuda" and self.triton_interpreter:
            raise ValueError("triton_interpreter applies to the cpu device only")
        if self.dtypes is not None:
            if not isinstance(self.dtypes, frozenset) or not self.dtypes or not self.dtypes <= DTYPES:
                raise ValueError(f"capability dtypes must be a non-empty set of {sorted(DTYPES)}, got {self.dtypes!r}")
            if not self.reason:
                raise ValueError("a capability that narrows dtypes must say why (reason=)")
        elif self.reason:
            raise ValueError("a capability's reason explains its dtypes: give dtypes= too")

    def describe(self) -> str:
        if self.device == "cpu":
            # The variable that opts in, named where the requirement is shown (explain, errors, matrix).
            text = "cpu via the Triton interpreter (RAPID_LLM_TRITON_INTERPRET=1)" if self.triton_interpreter else "cpu"
        else:
            text = "cuda"
            if self.min_sm is not None:
                text += f" sm>={self.min_sm}"
            if self.max_sm is not None:
                text += f" sm<={self.max_sm}"
        if self.dtypes is not None:
            order = sorted(self.dtypes, key=_DTYPE_ORDER.index)
            text += f" for {', '.join(order)} only: {self.reason}"
        return text

    def accepts(self, device, dtype: str | None = None) -> bool:
        """Whether a query on `device` (and of `dtype`, when given) may run here."""
        if device.kind != self.device:
            return False
        if dtype is not None and self.dtypes is not None and dtype not in self.dtypes:
            return False
        if self.device == "cpu":
            return device.triton_interpreter or not self.triton_interpreter
        if self.min_sm is not None and (device.sm is None or device.sm < self.min_sm):
            return False
        if self.max_sm is not None and (device.sm is None or device.sm > self.max_sm):
            return False
        return True


def _optional_int_tuple(value):
    return None if value is None else tuple(int(v) for v in value)


@attrs.frozen
class ShapeConstraint:
    """A condition on one named dimension of the call (`head_dim one_of (64, 128, 256)`)."""

    dim: str
    min: int | None = None
    max: int | None = None
    multiple_of: int | None = None
    one_of: tuple[int, ...] | None = attrs.field(default=None, converter=_optional_int_tuple)

    def __attrs_post_init__(self):
        if (self.min, self.max, self.multiple_of, self.one_of) == (None, None, None, None):
            raise ValueError(f"shape constraint on {self.dim!r} constrains nothing")

    def describe(self) -> str:
        parts = []
        if self.min is not None:
            parts.append(f">={self.min}")
        if self.max is not None:
            parts.append(f"<={self.max}")
        if self.multiple_of is not None:
            parts.append(f"multiple of {self.multiple_of}")
        if self.one_of is not None:
            parts.append(f"one of {self.one_of}")
        return f"{self.dim} " + ", ".join(parts)

    def accepts(self, value: int | None) -> bool:
        if value is None:
            return False
        if self.min is not None and value < self.min:
            return False
        if self.max is not None and value > self.max:
            return False
        if self.multiple_of is not None and value % self.multiple_of:
            return False
        if self.one_of is not None and value not in self.one_of:
            return False
        return True


@attrs.frozen
class GoldenRecord:
    """Measured parity of a row against its op's reference row.

    `max_abs_diff` is the largest absolute difference seen over the
    conformance cases (all dtypes, all machines the evidence covers);
    conformance fails when a fresh measurement exceeds it. `evidence` names the
    committed result file. Unverified rows are excluded from default dispatch.
    """

    verified: bool
    max_abs_diff: float | None = None
    baseline: str = ""
    evidence: str = ""

    def __attrs_post_init__(self):
        if self.verified and self.baseline != "self":
            if self.max_abs_diff is None or not self.evidence or not self.baseline:
                raise ValueError("a verified golden record needs max_abs_diff, baseline and evidence")

    @classmethod
    def reference(cls) -> "GoldenRecord":
        """The reference row is the baseline itself."""
        return cls(verified=True, max_abs_diff=0.0, baseline="self", evidence="")

    @classmethod
    def unverified(cls) -> "GoldenRecord":
        return cls(verified=False)


# ---------------------------------------------------------------------------
# The row
# ---------------------------------------------------------------------------


def _check_target(instance, attribute, value):
    if value is None:
        return
    module, sep, function = value.partition(":")
    if not sep or not module or not function.isidentifier():
        raise ValueError(f"row {instance.name!r}: {attribute.name} must be 'module:function', got {value!r}")


def _to_tuple(value):
    """Lists to tuples; anything else is kept for __attrs_post_init__ to reject by the row's name."""
    return tuple(value) if isinstance(value, (list, tuple)) else value


def _to_frozenset(value):
    """Collections to frozensets; a bare string is kept (frozenset('bf16') would split it into letters)."""
    return frozenset(value) if isinstance(value, (list, tuple, set, frozenset)) else value


@attrs.frozen(kw_only=True, cache_hash=True)
class KernelSpec:
    """One implementation of one op, and the conditions under which it may run."""

    name: str
    op: str
    backend: str
    target: str = attrs.field(validator=_check_target)
    dtypes: frozenset[str] = attrs.field(converter=_to_frozenset)
    available: str | None = attrs.field(default=None, validator=_check_target)
    libraries: tuple[LibraryRequirement, ...] = attrs.field(default=(), converter=_to_tuple)
    capability: tuple[CapabilityRequirement, ...] = attrs.field(default=(), converter=_to_tuple)
    shape: tuple[ShapeConstraint, ...] = attrs.field(default=(), converter=_to_tuple)
    layout: frozenset[str] = attrs.field(default=frozenset(), converter=_to_frozenset)
    golden: GoldenRecord = attrs.field(factory=GoldenRecord.unverified)
    priority: object = UNMEASURED
    graph_safe: bool = True
    description: str = ""
    #: "module:function" of the row's per-step preparation (rapid_llm/step/plans.py): called once per forward
    #: step with the op's arguments, it returns a callable with the op's signature that every layer's call of
    #: that step runs (FlashInfer's plan(), FlashMLA's split schedule, a launch policy computed once). None:
    #: a step runs the row's target in every call.
    step: str | None = attrs.field(default=None, validator=_check_target)
    #: Capturable in a CUDA graph when called through its step plan (a row that is not graph_safe on its own):
    #: the preparation (made outside the captured region) keeps fixed-capacity buffers, so the prepared call
    #: captures once and replays for any batch contents up to that capacity after StepPlan.update().
    step_graph_safe: bool = False

    def __attrs_post_init__(self):
        def fail(message):
            raise ValueError(f"KernelSpec {self.name!r}: {message}")

        family, dot, op_name = self.op.partition(".")
        if not dot or not family or not op_name:
            fail(f"op must be '<family>.<op>', got {self.op!r}")
        if self.backend not in BACKEND_CLASSES:
            fail(f"unknown backend {self.backend!r}; known: {sorted(BACKEND_CLASSES)}")
        prefix, slash, impl = self.name.partition("/")
        if not slash or not impl:
            fail("name must be '<backend>/<impl>'")
        if prefix != self.backend:
            fail(f"name prefix {prefix!r} must equal backend {self.backend!r}")
        for field, kind in (
            ("dtypes", frozenset),
            ("layout", frozenset),
            ("libraries", tuple),
            ("capability", tuple),
            ("shape", tuple),
        ):
            if not isinstance(getattr(self, field), kind):
                fail(f"{field} must be a list, tuple or set, got {getattr(self, field)!r}")
        if not isinstance(self.golden, GoldenRecord):
            fail(f"golden must be a GoldenRecord, got {self.golden!r}")
        if self.priority is not UNMEASURED and (isinstance(self.priority, bool) or not isinstance(self.priority, int)):
            fail(f"priority must be an int or UNMEASURED, got {self.priority!r}")
        if not self.dtypes:
            fail("dtypes is empty")
        unknown = self.dtypes - DTYPES
        if unknown:
            fail(f"unknown dtypes {sorted(unknown)}; known: {sorted(DTYPES)}")
        for item, kind in (
            *((lib, LibraryRequirement) for lib in self.libraries),
            *((cap, CapabilityRequirement) for cap in self.capability),
            *((con, ShapeConstraint) for con in self.shape),
        ):
            if not isinstance(item, kind):
                fail(f"expected {kind.__name__}, got {item!r}")
        if self.step_graph_safe and self.step is None:
            fail("step_graph_safe needs a step (the per-step preparation that makes the call capturable)")
        if self.is_reference:
            if self.capability or self.libraries or self.shape or self.layout:
                fail("the reference row must be eligible everywhere (no conditions)")
            if self.golden != GoldenRecord.reference():
                fail("the reference row's golden record must be GoldenRecord.reference()")
        elif self.golden.baseline == "self":
            fail("only the reference row may be its own golden baseline")

    @property
    def implementation_class(self) -> str:
        return BACKEND_CLASSES[self.backend]

    @property
    def is_reference(self) -> bool:
        return self.implementation_class == "reference"

    def rank_key(self) -> tuple:
        """Ascending sort key: higher priority, then native > external > reference, then name."""
        has, value = priority_rank(self.priority)
        return (-has, -value, -CLASS_RANK[self.implementation_class], self.name)
