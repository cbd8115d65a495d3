"""The nn ops' parameter blocks (softmax, cross entropy, the norms, dropout and the backward
ops), read by _kernels/nn.pyx and by csrc_cuda/softmax.cu, norm.cu and dropout.cu."""
from __future__ import annotations

import math

import numpy as np

from ..backend import Launch
from ..ops.nn import REDUCTIONS
from ..ops.registry import FLOAT_DTYPES, normalize_axis
from .layout import one_thread, pack

# The structs' fields, in the kernels' order (nn.pyx exports its own *_FIELDS)
FIELDS = {
    "SOFTMAX_FIELDS": ("outer", "n", "inner", "take_log"),
    "CROSS_ENTROPY_FIELDS": ("outer", "classes", "inner", "with_logits", "reduction",
                             "label_is_int64"),
    "LAYER_NORM_FIELDS": ("rows", "n"),
    "BATCH_NORM_FIELDS": ("batch", "channels", "inner", "training", "threads"),
    "BATCH_NORM_BACKWARD_FIELDS": ("batch", "channels", "inner"),
    "DROPOUT_FIELDS": ("size", "seed", "has_step"),
}
# cross entropy's reductions, as the kernels number them
REDUCTION_CODES = {name: code for code, name in enumerate(REDUCTIONS)}


def _split(shape, axis: int) -> tuple[int, int, int]:
    """(outer, axis length, inner) sizes of a contiguous ``shape`` around ``axis``."""
    if not shape:
        return 1, 1, 1
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


def _softmax_lower(take_log: bool):
    def lower(node) -> Launch:
        (x,) = node.inputs
        outer, n, inner = _split(x.shape, normalize_axis(node.attr["axis"], x.ndim))
        return Launch(pack(FIELDS["SOFTMAX_FIELDS"], outer=outer, n=n, inner=inner,
                           take_log=take_log))
    return lower


def _ce_lower(node) -> Launch:
    pred, label = node.inputs[:2]  # cross_entropy_backward also takes d loss
    a = node.attr
    outer, classes, inner = _split(pred.shape, normalize_axis(a["axis"], pred.ndim))
    ints = pack(FIELDS["CROSS_ENTROPY_FIELDS"], outer=outer, classes=classes, inner=inner,
                with_logits=a["with_logits"], reduction=REDUCTION_CODES[a["reduction"]],
                label_is_int64=label.dtype == np.dtype(np.int64))
    return Launch(ints, (float(a["label_smooth"]),))


def _ln_lower(node) -> Launch:
    x, shape = node.inputs[0], node.attr["normalized_shape"]
    ints = pack(FIELDS["LAYER_NORM_FIELDS"], rows=math.prod(x.shape[:x.ndim - len(shape)]),
                n=math.prod(shape))
    return Launch(ints, (float(node.attr["eps"]),))


def _ln_backward_lower(node) -> Launch:
    launch = _ln_lower(node)
    n = math.prod(node.attr["normalized_shape"])
    return Launch(launch.ints, launch.floats, workspace=2 * 8 * n)  # dweight, dbias in double


def _bn_lower(threads):
    def lower(node) -> Launch:
        x = node.inputs[0]
        ints = pack(FIELDS["BATCH_NORM_FIELDS"], batch=x.shape[0], channels=x.shape[1],
                    inner=math.prod(x.shape[2:]), training=node.attr["training"],
                    threads=threads(node))
        return Launch(ints, (float(node.attr["eps"]),))
    return lower


def _bn_backward_lower(node) -> Launch:
    x = node.inputs[0]
    ints = pack(FIELDS["BATCH_NORM_BACKWARD_FIELDS"], batch=x.shape[0], channels=x.shape[1],
                inner=math.prod(x.shape[2:]))
    return Launch(ints, (float(node.attr["eps"]),))


def _dropout_lower(node) -> Launch:
    seed = int(node.attr["seed"]) & (2**64 - 1)
    seed = seed - 2**64 if seed >= 2**63 else seed  # the kernel reads it back as uint64
    ints = pack(FIELDS["DROPOUT_FIELDS"], size=node.inputs[0].size, seed=seed,
                has_step=len(node.inputs) == 2)
    return Launch(ints, (float(node.attr["drop_prob"]),))


def implement(table, threads=one_thread) -> None:
    """Register the nn ops on ``table``; ``threads(node)`` fills batch norm's threads field."""
    for op, kernel, lower in (  # (op, kernel family, lowering)
            ("softmax", "softmax", _softmax_lower(False)),
            ("log_softmax", "softmax", _softmax_lower(True)),
            ("cross_entropy", "cross_entropy", _ce_lower),
            ("cross_entropy_backward", "cross_entropy_backward", _ce_lower),
            ("layer_norm", "layer_norm", _ln_lower),
            ("layer_norm_backward", "layer_norm_backward", _ln_backward_lower),
            ("batch_norm", "batch_norm", _bn_lower(threads)),
            ("batch_norm_backward", "batch_norm_backward", _bn_backward_lower),
            ("dropout", "dropout", _dropout_lower)):
        table.implement(op, kernel=kernel, dtypes=FLOAT_DTYPES, lower=lower)
