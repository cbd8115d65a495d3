"""The op registry: one declarative OpDef per op, the single list of ops every stage reads."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from ..ir.dims import Dim
from ..ir.errors import GraphError, OpError
from ..ir.facts import require_equal
from ..ir.graph import install
from ..ir.types import (
    CORE_DTYPES,
    FLOAT_DTYPES,  # noqa: F401  (re-exported)
    HALF_DTYPES,
    SMALL_INT_DTYPES,
    TensorType,
    is_float,
)
from . import elementwise_table as _TABLE

REQUIRED = object()  # marks an attribute without a default
# the dtypes every kernel family implements; the small integers are added by the tables whose
# kernels have them (WITH_SMALL_INTS, WITH_SMALL_INTS_NUMERIC)
ALL_DTYPES = CORE_DTYPES
NUMERIC_DTYPES = tuple(d for d in CORE_DTYPES if d != np.dtype(np.bool_))
WITH_SMALL_INTS = ALL_DTYPES + SMALL_INT_DTYPES
WITH_SMALL_INTS_NUMERIC = NUMERIC_DTYPES + SMALL_INT_DTYPES
# every dtype: what the kernels of the ops that move or convert bytes take (BYTE_MOVING_OPS)
MOVED_DTYPES = WITH_SMALL_INTS + HALF_DTYPES

# Op categories are plain strings that passes and pictures test.
CATEGORIES = ("source", "elementwise", "reduce", "matmul", "movement", "nn", "collective")
# Recomputing an op up to this many FLOPs per output element is "cheap" (softmax and the
# norms are 6-12; a GEMM or a convolution is 2k, k in the hundreds): rematerialisation
# prefers recomputing those and keeping the outputs of the dear ones.
CHEAP_FLOPS_PER_ELEMENT = 16.0


@dataclass(frozen=True)
class Remake:
    """How rematerialisation recomputes some outputs of a node more cheaply than by running it
    again: op ``op`` with ``attrs`` on ``inputs`` (Vars of the node's graph: its inputs, or its
    own outputs, which are then always kept), making the node's outputs at ``outputs``;
    ``flops`` per run. Its results must equal the node's bitwise."""

    op: str
    attrs: Mapping[str, object]
    inputs: tuple
    outputs: tuple[int, ...]
    flops: float


@dataclass(frozen=True)
class OpDef:
    """What one op means, whatever device runs it. ``infer`` maps (input types, attrs) to
    output types and raises ValueError or TypeError with a reason. How a device runs the op
    (its kernel, the dtypes the kernel implements, the lowering to a parameter block) is that
    device's backend's: ``mgegraph.backend``; the CPU's in ``mgegraph/_kernels/lowering/``.
    """

    name: str
    category: str
    infer: Callable[[tuple[TensorType, ...], dict], tuple[TensorType, ...]]
    attrs: Mapping[str, object] = field(default_factory=dict)
    # output 0 may overwrite a dying input: any input of its shape and element size for an
    # elementwise op (whose every output may), input 0 for others (their kernels read an
    # element before writing it)
    inplace: bool = False
    # Node -> byte offset of output 0 inside input 0's buffer when the output can be a view of
    # it (no kernel runs), or None when the kernel must copy.
    view: Callable | None = None
    grad: Callable | None = None       # gradient rule (autodiff issue)
    flops_per_element: float = 1.0     # rough cost per output element, for planners
    # Node -> exact FLOPs of one run where the shapes give them (GEMMs, convolutions, whose
    # flops_per_element is then unused); the rematerialisation planner prices recomputation
    # with ``cost``.
    flops: Callable | None = None
    # Node -> Remake or None: a cheaper way to recompute it (training batch norm from the
    # statistics it saved); None: rematerialisation runs the node again.
    remake: Callable | None = None
    # its rule takes quantized types (``TensorType.quant``) and gives its outputs' parameters
    # itself; every other op refuses them, or keeps them as they are (QUANT_KEEPING_OPS)
    quantized: bool = False
    # outputs that are inputs ``in_place_from``, ``in_place_from + 1``... written in place by the
    # kernel (their buffers, no new ones): a collective's wait, whose outputs are the bytes
    # MPI reduced (ops/collective.py); None for every other op
    in_place_from: int | None = None

    def complete_attrs(self, attrs: Mapping, in_types, location: str) -> dict:
        unknown = set(attrs) - set(self.attrs)
        if unknown:
            raise OpError(self.name, in_types, f"unknown attribute(s) {sorted(unknown)}; "
                          f"{self.name} takes {sorted(self.attrs) or 'none'}", location)
        full = {}
        for key, default in self.attrs.items():
            if key in attrs:
                full[key] = attrs[key]
            elif default is REQUIRED:
                raise OpError(self.name, in_types, f"missing attribute {key!r}", location)
            else:
                full[key] = default
        return full

    def view_offset(self, node) -> int | None:
        """Where ``node``'s output 0 sits in input 0's buffer when it is a view of it (no
        kernel runs), else None."""
        return self.view(node) if self.view is not None else None

    def cost(self, node) -> float:
        """FLOPs of one run of ``node``: the op's own formula, else ``flops_per_element`` per
        output element. A view or a source costs nothing."""
        if self.category == "source" or self.view_offset(node) is not None:
            return 0.0
        if self.flops is not None:
            return float(self.flops(node))
        return self.flops_per_element * sum(v.size for v in node.outputs)

    def cheap(self, node) -> bool:
        """Cheap to recompute: at most ``CHEAP_FLOPS_PER_ELEMENT`` per output element
        (elementwise ops, norms, movement, views), unlike a GEMM or a convolution."""
        elements = max(sum(v.size for v in node.outputs), 1)
        return self.cost(node) <= CHEAP_FLOPS_PER_ELEMENT * elements



def whole_input(node) -> int:
    """``OpDef.view`` of ops whose output is always its input's bytes (reshape)."""
    return 0


_REGISTRY: dict[str, OpDef] = {}


# The ops that move or convert bytes, whatever the element type: their kernels take the small
# integers and the half types as they are.
BYTE_MOVING_OPS = ("input", "param", "const", "cast", "where", "reshape", "transpose",
                   "broadcast_to", "slice", "slice_backward", "concat", "split", "pad", "gather",
                   "take", "fill")

# The ops with kernels for the small integers (SMALL_INT_DTYPES), and for which of them: the
# elementwise table's ops list theirs; movement and casts move or convert all three; the
# reductions read uint8 as they read bool. Every other op's rule refuses them, naming the dtype.
SMALL_INT_OPS: dict[str, tuple[np.dtype, ...]] = {
    **dict.fromkeys(BYTE_MOVING_OPS, SMALL_INT_DTYPES),
    **dict.fromkeys(("sum", "prod", "mean", "var", "max", "min", "argmax", "argmin"),
                    (np.dtype(np.uint8),)),
    **{op.name: tuple(d for d in SMALL_INT_DTYPES if d in op.dtypes) for op in _TABLE.OPS},
    # the image resamplers take a camera's uint8 frame and round their results back to uint8
    **dict.fromkeys(("resize", "remap"), (np.dtype(np.uint8),)),
}


def _refusing_small_ints(name: str, infer: Callable) -> Callable:
    allowed = SMALL_INT_OPS.get(name, ())

    def checked(in_types, attrs):
        out_types = infer(in_types, attrs)
        for t in (*in_types, *out_types):
            if t.dtype in SMALL_INT_DTYPES and t.dtype not in allowed:
                raise TypeError(f"{name} has no kernels for {t.dtype}; cast to int32 or "
                                f"float32 first (x.astype(...))")
        return out_types
    return checked


# The ops whose kernels take the half-precision floats (HALF_DTYPES) as they are: those that
# move or convert bytes, and the assigns that copy them. Every other op means on a half type
# what it means on float32, its results rounded to that type (``_computing_in_float32``);
# planner.passes.half makes the casts.
HALF_NATIVE_OPS = frozenset((*BYTE_MOVING_OPS, "assign"))
FLOAT32 = np.dtype(np.float32)


def half_result(in_types) -> np.dtype | None:
    """The half type an op computing in float32 rounds its float results to: the one half type
    among its inputs when no other float is (float16 with float32 gives float32, as NumPy)."""
    floats = {t.dtype for t in in_types if is_float(t.dtype)}
    if len(floats) == 1 and floats <= set(HALF_DTYPES):
        return floats.pop()
    return None


def _computing_in_float32(infer: Callable) -> Callable:
    def widened(in_types, attrs):
        if not any(t.dtype in HALF_DTYPES for t in in_types):
            return infer(in_types, attrs)
        wide = tuple(TensorType(t.shape, FLOAT32) if t.dtype in HALF_DTYPES else t
                     for t in in_types)
        try:
            out_types = infer(wide, attrs)
        except (TypeError, ValueError) as exc:
            halves = sorted({str(t.dtype) for t in in_types if t.dtype in HALF_DTYPES})
            raise type(exc)(f"{exc} (its {' and '.join(halves)} inputs compute as float32)") \
                from None
        narrow = half_result(in_types)
        if narrow is None:
            return out_types
        return tuple(TensorType(t.shape, narrow) if t.dtype == FLOAT32 else t for t in out_types)
    return widened


# The ops that keep a per-tensor quantization as it is: they move integers without changing what
# each stands for (a reshape of qs8(0.05) values is qs8(0.05)). Every other op without its own
# rule for quantized types (OpDef.quantized) refuses them: an integer add of two scales, or a
# cast to float that forgot the scale, would be a wrong number given silently.
QUANT_KEEPING_OPS = frozenset(("reshape", "transpose", "broadcast_to", "slice", "split",
                               "concat", "gather", "take"))


def _keeping_quantization(name: str, infer: Callable) -> Callable:
    keeps = name in QUANT_KEEPING_OPS

    def checked(in_types, attrs):
        quantized = [t for t in in_types if t.quant is not None]
        if not quantized:
            return infer(in_types, attrs)
        if not keeps:
            raise TypeError(f"{name} has no kernels for quantized values ({quantized[0]}); "
                            f"dequantize them first")
        params = {t.quant for t in quantized}
        data = {t.dtype for t in quantized}
        if len(params) > 1 or any(t.quant is None and t.dtype in data for t in in_types):
            raise TypeError(f"{name} needs its quantized inputs to share one quantization, got "
                            f"{', '.join(str(t) for t in in_types)}; requantize them first")
        (quant,) = params
        if quant.per_channel:
            raise TypeError(f"{name} takes per-tensor quantized values only, got {quantized[0]}"
                            f" (per-channel values feed the integer GEMMs and convolutions)")
        plain = tuple(TensorType(t.shape, t.dtype) for t in in_types)
        return tuple(TensorType(t.shape, t.dtype, quant) if t.dtype in data else t
                     for t in infer(plain, attrs))
    return checked


def register(opdef: OpDef) -> OpDef:
    # an op with a rule for quantized types checks the integer types it takes itself
    if not opdef.quantized and SMALL_INT_OPS.get(opdef.name) != SMALL_INT_DTYPES:
        opdef = replace(opdef, infer=_refusing_small_ints(opdef.name, opdef.infer))
    if opdef.name not in HALF_NATIVE_OPS:
        opdef = replace(opdef, infer=_computing_in_float32(opdef.infer))
    if not opdef.quantized:
        opdef = replace(opdef, infer=_keeping_quantization(opdef.name, opdef.infer))
    if opdef.name in _REGISTRY:
        raise GraphError(f"op {opdef.name!r} is registered twice")
    if opdef.category not in CATEGORIES:
        raise GraphError(f"op {opdef.name!r}: unknown category {opdef.category!r}")
    _REGISTRY[opdef.name] = opdef
    return opdef


def get_op(name: str) -> OpDef:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise GraphError(f"no op named {name!r}; known ops: {', '.join(sorted(_REGISTRY))}") from None


def all_ops() -> dict[str, OpDef]:
    return dict(_REGISTRY)


install("get_op", get_op)  # Graph.add_node finds ops by name through this


# -- the walker, for the gradients of gradient rules -----------------------------------------------
# Design: a dedicated backward op's own gradient (grad of grad) differentiates a composed
# reference with the reverse-mode walker, which sits a layer above the ops (mgegraph.autodiff).
# Only that walker calls gradient rules, and it installs its ``grad`` here when it loads, so a
# rule finds it whenever one runs.
_WALKER: list[Callable] = []


def install_walker(grad: Callable) -> None:
    """Plug in ``grad(loss, wrt) -> [gradient of loss w.r.t. each of wrt]`` (mgegraph.autodiff)."""
    _WALKER[:] = [grad]


def walker_grad(loss, wrt: list) -> list:
    """The installed walker's ``grad(loss, wrt)``, for a gradient rule."""
    if not _WALKER:
        raise GraphError("a gradient rule ran before mgegraph.autodiff, the walker that calls "
                         "them, was imported")
    return _WALKER[0](loss, wrt)


# -- small helpers shared by shape rules -----------------------------------------------------------
def int_pair(attrs, key: str, minimum: int) -> tuple[int, int]:
    """Attribute ``key`` checked as a pair of ints (not bools) of at least ``minimum`` (a
    window's stride, padding or dilation); a ValueError names it otherwise."""
    value = attrs[key]
    if (not isinstance(value, tuple) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= minimum
                       for v in value)):
        raise ValueError(f"{key} must be a pair of ints >= {minimum}, got {value!r}")
    return value


def normalize_axis(axis: int, ndim: int) -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise ValueError(f"axis {axis} is out of range for {ndim}-d input")
    return axis % max(ndim, 1)


def normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    """None -> all axes; int or sequence -> sorted unique non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    result = tuple(sorted({normalize_axis(int(a), ndim) for a in axes}))
    if len(result) != len(axes):
        raise ValueError(f"repeated axis in {axis}")
    return result


def require_dtypes(opdef_name: str, t: TensorType, allowed, what="input"):
    """A TypeError unless ``t``'s dtype is allowed; a half type is where float32 is (the op
    computes on it in float32)."""
    if t.dtype not in allowed and not (t.dtype in HALF_DTYPES and FLOAT32 in allowed):
        names = ", ".join(str(d) for d in allowed)
        raise TypeError(f"{what} dtype {t.dtype} is not supported by {opdef_name} (needs {names})")


def named(*sizes) -> bool:
    """Whether any of ``sizes`` is a named dimension (a ``Dim``), known only when bound."""
    return any(isinstance(d, Dim) for d in sizes)


def same_shape(a: tuple, b: tuple, what: str) -> bool:
    """Whether shapes ``a`` and ``b`` agree. Numbers are compared now; a named size whose
    form differs from the other's (``batch`` against ``n``) is taken to agree, and the fact
    is recorded (``ir.facts.require_equal``) to be checked when the names are bound."""
    if len(a) != len(b):
        return False
    if any(x != y and not named(x, y) for x, y in zip(a, b)):
        return False
    for x, y in zip(a, b):
        if x != y:
            require_equal(x, y, what)
    return True
