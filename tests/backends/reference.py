"""A NumPy reference backend: the second implementation of ``mgegraph.backend.Backend``.

It proves the seam (a device plugs in below the planner without a line in ``mgegraph/ops/`` or
``mgegraph/planner/``) and is the oracle later backends compare with: each kernel is a few
lines of NumPy, and the executable runs the very plan the CPU backend gets, with temporaries and
workspaces carved out of one arena at the plan's offsets, so a wrong offset or a liveness bug of
the planner gives wrong numbers here as well.

Design: a lowering returns an empty ``Launch`` (the cross-entropy ops ask for a workspace); a
kernel reads what it needs from the instruction (op, attributes) and from its arrays (shapes,
dtypes) instead of a parameter block, so no kernel depends on a block's layout. Every kernel
computes its whole result before it writes the planned output buffers (``out[...] = ...``,
never rebinding), since an in-place op's output may be its input's bytes.

>>> mg.register_backend("reference", ReferenceBackend)
>>> (y_value,) = mg.compile([y], device="reference").run({"x": x_value})
"""
from __future__ import annotations

import sys

import numpy as np

from mgegraph.backend import FusionLimits, HeldPlan, KernelTable, Launch, kernel_name
from mgegraph.host_memory import host_arena
from mgegraph.ir.errors import KernelError
from mgegraph.plan import check_feeds, dead_values, host_buffers

FLOATS = ("float32", "float64")
INTS = ("int32", "int64")
# Arena offsets are multiples of this, the CPU's cache line: where the kernels of the two
# backends ask for the same workspaces, their plans then agree byte for byte (test_reference).
ALIGNMENT = 64
# The interpreter of fused programs holds every value as an array and calls NumPy once per
# step: it has no input, output or register limit; NumPy arrays have at most 32 dimensions.
FUSION = FusionLimits(max_inputs=sys.maxsize, max_outputs=sys.maxsize,
                      max_registers=sys.maxsize, max_dims=32)


# -- elementwise: one table for the unfused kernels and the fused interpreter ---------------------
def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


_UNARY = {
    "neg": np.negative, "abs": np.abs, "sign": np.sign, "square": np.square, "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "reciprocal": np.reciprocal, "exp": np.exp,
    "log": np.log, "log1p": np.log1p, "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
    "floor": np.floor, "ceil": np.ceil, "sigmoid": _sigmoid, "relu": lambda x: np.maximum(x, 0),
    "silu": lambda x: x * _sigmoid(x), "softplus": lambda x: np.logaddexp(x, 0),
}
_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
    "maximum": np.maximum, "minimum": np.minimum,
    "relu_backward": lambda y, g: np.where(y > 0, g, 0),
}
COMPARISONS = {
    "equal": np.equal, "not_equal": np.not_equal, "less": np.less,
    "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal,
}
# op -> (array operands, names of its float attributes, NumPy function of both). In a fused
# program the attributes are constants named by the operands after the arrays (leaky_relu's
# slope in b, clip's bounds in b and c: mgegraph/ops/fused.py).
ELEMENTWISE = {
    **{op: (1, (), fn) for op, fn in _UNARY.items()},
    **{op: (2, (), fn) for op, fn in (_BINARY | COMPARISONS).items()},
    "where": (3, (), lambda cond, x, y: np.where(cond != 0, x, y)),
    "leaky_relu": (1, ("negative_slope",), lambda x, slope: np.where(x > 0, x, x * slope)),
    "clip": (1, ("lower", "upper"), np.clip),
}


def _elementwise(ins, args, outs, ws):
    _, names, fn = ELEMENTWISE[ins.op]
    attrs = dict(ins.attrs)
    outs[0][...] = fn(*args, *(attrs[n] for n in names))


def _lower_fused(node) -> Launch:
    steps = {step[0] for step in node.attr["code"]} - {"load", "const", "store"}
    unknown = sorted(steps - ELEMENTWISE.keys())
    if unknown:
        raise ValueError(f"the reference backend's fused interpreter has no op {unknown}")
    return Launch()


def _fused(ins, args, outs, ws):
    """A fused program's steps ``(op, dst, a, b, c)``, one NumPy call each, in its dtype."""
    attrs = dict(ins.attrs)
    dtype = outs[0].dtype
    k = [dtype.type(v) for v in attrs["constants"]]
    values, stores = {}, {}
    for op, dst, a, b, c in attrs["code"]:
        if op == "load":
            values[dst] = args[a]
        elif op == "const":
            values[dst] = k[a]
        elif op == "store":
            stores[dst] = values[a]
        else:
            arity, names, fn = ELEMENTWISE[op]
            operands = (a, b, c)
            values[dst] = fn(*(values[v] for v in operands[:arity]),
                             *(k[i] for i in operands[arity:arity + len(names)]))
    # copies first: a stored load may read an input that an earlier output overwrites in place
    results = [np.array(stores[i], dtype) for i in range(len(outs))]
    for out, result in zip(outs, results):
        out[...] = result


# -- GEMMs, reductions, movement ------------------------------------------------------------------
def _matmul(ins, args, outs, ws):
    attrs = dict(ins.attrs)
    a, b = args
    if attrs["transpose_a"] and a.ndim >= 2:
        a = np.swapaxes(a, -1, -2)
    if attrs["transpose_b"] and b.ndim >= 2:
        b = np.swapaxes(b, -1, -2)
    outs[0][...] = np.matmul(a, b)


def _linear(ins, args, outs, ws):
    """x @ w.T (+ bias), then the epilogue's activation."""
    x, w, *bias = args
    y = x @ w.T
    if bias:
        y = y + bias[0]
    if dict(ins.attrs)["activation"] == "relu":
        y = np.maximum(y, 0)
    outs[0][...] = y


_REDUCTIONS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}


def _reduce(ins, args, outs, ws):
    attrs = dict(ins.attrs)
    outs[0][...] = _REDUCTIONS[ins.op](args[0], axis=attrs["axis"], keepdims=attrs["keepdims"])


def _arg_reduce(ins, args, outs, ws):
    """argmax and argmin along one axis, or over the flattened input (every axis)."""
    attrs, (x,) = dict(ins.attrs), args
    axes = attrs["axis"]
    axis = None if axes is None or len(axes) == x.ndim else axes[0]
    fn = np.argmax if ins.op == "argmax" else np.argmin
    outs[0][...] = fn(x, axis=axis, keepdims=attrs["keepdims"])


def _fill(ins, args, outs, ws):
    outs[0][...] = dict(ins.attrs)["value"]


def _copy(ins, args, outs, ws):
    """copy, assign (its value into the param's buffer) and broadcast_to."""
    outs[0][...] = args[0]


def _cast(ins, args, outs, ws):
    outs[0][...] = args[0].astype(outs[0].dtype)


def _transpose(ins, args, outs, ws):
    """The pattern names input axes, and "x" for a new axis of size 1."""
    axes = [p for p in dict(ins.attrs)["pattern"] if p != "x"]
    outs[0][...] = np.transpose(args[0], axes).reshape(outs[0].shape)


# -- cross entropy --------------------------------------------------------------------------------
def _lower_cross_entropy(node) -> Launch:
    # the log-probabilities, in planned memory: a misplaced workspace corrupts the loss
    return Launch(workspace=node.inputs[0].type.nbytes)


def _log_probs(pred, attrs, ws) -> np.ndarray:
    logp = ws.view(pred.dtype).reshape(pred.shape)
    axis = attrs["axis"]
    if attrs["with_logits"]:
        np.subtract(pred, pred.max(axis, keepdims=True), out=logp)
        logp -= np.log(np.exp(logp).sum(axis, keepdims=True))
    else:
        np.log(pred, out=logp)
    return logp


def _targets(label, logp, attrs) -> np.ndarray:
    """The label-smoothed one-hot distribution over the class axis."""
    axis = attrs["axis"] % logp.ndim
    classes = logp.shape[axis]
    if label.size and (label.min() < 0 or label.max() >= classes):
        raise KernelError(f"a label is out of range [0, {classes})")
    ids = np.arange(classes).reshape([-1 if d == axis else 1 for d in range(logp.ndim)])
    onehot = np.expand_dims(label, axis) == ids
    smooth = attrs["label_smooth"]
    return (onehot * (1 - smooth) + smooth / classes).astype(logp.dtype)


def _cross_entropy(ins, args, outs, ws):
    pred, label = args
    attrs = dict(ins.attrs)
    logp = _log_probs(pred, attrs, ws)
    losses = -(_targets(label, logp, attrs) * logp).sum(attrs["axis"])
    outs[0][...] = {"none": losses, "sum": losses.sum(), "mean": losses.mean()}[attrs["reduction"]]


def _cross_entropy_backward(ins, args, outs, ws):
    pred, label, dloss = args
    attrs = dict(ins.attrs)
    logp = _log_probs(pred, attrs, ws)
    target = _targets(label, logp, attrs)
    dpred = np.exp(logp) - target if attrs["with_logits"] else -target / pred
    if attrs["reduction"] == "none":
        dloss = np.expand_dims(dloss, attrs["axis"])
    elif attrs["reduction"] == "mean":
        dloss = dloss / label.size
    outs[0][...] = dpred * dloss


# -- the backend ----------------------------------------------------------------------------------
def _no_parameters(node) -> Launch:
    return Launch()


# kernel family -> (its function, the ops it runs, their dtypes)
FAMILIES = {
    "elementwise": (_elementwise, sorted(ELEMENTWISE.keys() - COMPARISONS.keys()), FLOATS),
    "compare": (_elementwise, sorted(COMPARISONS), FLOATS + INTS),
    "fused": (_fused, ["fused_elementwise"], FLOATS),
    "matmul": (_matmul, ["matmul"], FLOATS),
    "linear": (_linear, ["linear"], FLOATS),
    "reduce": (_reduce, sorted(_REDUCTIONS), FLOATS),
    "arg_reduce": (_arg_reduce, ["argmax", "argmin"], FLOATS),
    "fill": (_fill, ["fill"], FLOATS + INTS),
    "copy": (_copy, ["copy", "assign", "broadcast_to"], FLOATS + INTS),
    "cast": (_cast, ["cast"], FLOATS + INTS + ("bool",)),
    "transpose": (_transpose, ["transpose"], FLOATS + INTS),
    "cross_entropy": (_cross_entropy, ["cross_entropy"], FLOATS),
    "cross_entropy_backward": (_cross_entropy_backward, ["cross_entropy_backward"], FLOATS),
}
_LOWER = {"fused_elementwise": _lower_fused, "cross_entropy": _lower_cross_entropy,
          "cross_entropy_backward": _lower_cross_entropy}
# which input's dtype picks the kernel, where it is not the first input's
_DISPATCH = {"fused_elementwise": -1, "where": 1}


class ReferenceBackend(KernelTable):
    """``mg.compile(device="reference")`` once registered: NumPy kernels keyed by (op, dtype)."""

    name = "reference"
    alignment = ALIGNMENT
    fusion = FUSION

    def __init__(self):
        super().__init__(self.name)
        entries = {}
        for family, (fn, ops, dtypes) in FAMILIES.items():
            for op in ops:
                self.implement(op, family, dtypes, _LOWER.get(op, _no_parameters),
                               _DISPATCH.get(op, 0))
            entries.update({kernel_name(family, d): fn for d in dtypes})
        self.resolve(entries)

    def allocate(self, nbytes: int, alignment: int) -> np.ndarray:
        return host_arena(nbytes, alignment)

    def executable(self, plan) -> ReferenceExecutable:
        return ReferenceExecutable(plan, self)


# -- the executable -------------------------------------------------------------------------------
class ReferenceExecutable:
    """A plan's memory (one arena, persistent buffers) and the loop over its kernels.

    ``buffers`` maps each slot to its array, carved as the CPU backend carves them: temporaries
    and workspaces are the arena's bytes at their offsets, inputs, params, consts and outputs
    have buffers of their own, a shared param is the param's array itself, and a view is its
    root's bytes from ``view_offset`` on.
    """

    plan = HeldPlan()  # weakly: the plan owns this executable
    timed = False  # a profile does not see its runs
    writes_out = False  # Plan.run copies into out= arrays

    def __init__(self, plan, backend: ReferenceBackend):
        self.plan = plan
        self.arena = backend.allocate(plan.memory.arena_bytes, plan.memory.options.alignment)
        self.buffers = host_buffers(plan, self.arena)
        b = self.buffers
        self.calls = [(ins, backend.kernel_by_name(ins.kernel), [b[s] for s in ins.inputs],
                       [b[s] for s in ins.outputs],
                       None if ins.workspace is None else b[ins.workspace])
                      for ins in plan.instructions]
        self.poison = _poison_after(plan) if plan.memory.options.poison else {}

    def run(self, feeds: dict) -> list[np.ndarray]:
        plan, buffers = self.plan, self.buffers
        check_feeds(plan, feeds)
        for name, slot in plan.feeds.items():
            np.copyto(buffers[slot], feeds[name], casting="no")
        with np.errstate(all="ignore"):  # inf and NaN are results, as in the CPU kernels
            for step, (ins, kernel, args, outs, ws) in enumerate(self.calls):
                try:
                    kernel(ins, args, outs, ws)
                except KernelError as exc:
                    raise KernelError(f"{ins.op} (kernel {ins.kernel}, node made at "
                                      f"{ins.location}): {exc}") from None
                for slot in self.poison.get(step, ()):
                    _fill_poison(buffers[slot])
        return [buffers[s].copy() for s in plan.outputs]


def _poison_after(plan) -> dict[int, list[int]]:
    """memory="debug": step -> the arena slots whose last reader it is."""
    after: dict[int, list[int]] = {}
    for step, slot in dead_values(plan):
        after.setdefault(step, []).append(slot)
    return after


def _fill_poison(buffer: np.ndarray) -> None:
    if buffer.dtype.kind == "f":
        buffer[...] = np.nan
    else:  # 0xFF bytes: NaN too where a kernel reads a byte workspace as floats
        buffer.reshape(-1).view(np.uint8)[...] = 0xFF
