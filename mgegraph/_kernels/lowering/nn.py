"""CPU lowerings of the nn ops (softmax, cross entropy, the norms, dropout and the backward ops):
the parameter blocks of _kernels/nn.pyx."""
from __future__ import annotations

import math

import numpy as np

from ...backend import Launch
from ...ops.nn import REDUCTIONS
from ...ops.registry import FLOAT_DTYPES, normalize_axis
from .. import nn as K
from .layout import pack
from .threads import node_threads


def _split(shape, axis: int) -> tuple[int, int, int]:
    """(outer, axis length, inner) sizes of a contiguous ``shape`` around ``axis``."""
    if not shape:
        return 1, 1, 1
    return math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


def _softmax_lower(take_log: bool):
    def lower(node) -> Launch:
        (x,) = node.inputs
        outer, n, inner = _split(x.shape, normalize_axis(node.attr["axis"], x.ndim))
        return Launch(pack(K.SOFTMAX_FIELDS, outer=outer, n=n, inner=inner, take_log=take_log))
    return lower


def _ce_lower(node) -> Launch:
    pred, label = node.inputs[:2]  # cross_entropy_backward also takes d loss
    a = node.attr
    outer, classes, inner = _split(pred.shape, normalize_axis(a["axis"], pred.ndim))
    ints = pack(K.CROSS_ENTROPY_FIELDS, outer=outer, classes=classes, inner=inner,
                with_logits=a["with_logits"], reduction=K.REDUCTIONS[a["reduction"]],
                label_is_int64=label.dtype == np.dtype(np.int64))
    return Launch(ints, (float(a["label_smooth"]),))


def _ln_lower(node) -> Launch:
    x, shape = node.inputs[0], node.attr["normalized_shape"]
    ints = pack(K.LAYER_NORM_FIELDS, rows=math.prod(x.shape[:x.ndim - len(shape)]),
                n=math.prod(shape))
    return Launch(ints, (float(node.attr["eps"]),))


def _ln_backward_lower(node) -> Launch:
    launch = _ln_lower(node)
    n = math.prod(node.attr["normalized_shape"])
    return Launch(launch.ints, launch.floats, workspace=2 * 8 * n)  # dweight, dbias in double


def _bn_lower(node) -> Launch:
    x = node.inputs[0]
    ints = pack(K.BATCH_NORM_FIELDS, batch=x.shape[0], channels=x.shape[1],
                inner=math.prod(x.shape[2:]), training=node.attr["training"],
                threads=node_threads(node))
    return Launch(ints, (float(node.attr["eps"]),))


def _bn_backward_lower(node) -> Launch:
    x = node.inputs[0]
    ints = pack(K.BATCH_NORM_BACKWARD_FIELDS, batch=x.shape[0], channels=x.shape[1],
                inner=math.prod(x.shape[2:]))
    return Launch(ints, (float(node.attr["eps"]),))


def _dropout_lower(node) -> Launch:
    seed = int(node.attr["seed"]) & (2**64 - 1)
    seed = seed - 2**64 if seed >= 2**63 else seed  # the kernel reads it back as uint64
    ints = pack(K.DROPOUT_FIELDS, size=node.inputs[0].size, seed=seed,
                has_step=len(node.inputs) == 2)
    return Launch(ints, (float(node.attr["drop_prob"]),))


_OPS = (  # (op, kernel family, lowering)
    ("softmax", "softmax", _softmax_lower(False)),
    ("log_softmax", "softmax", _softmax_lower(True)),
    ("cross_entropy", "cross_entropy", _ce_lower),
    ("cross_entropy_backward", "cross_entropy_backward", _ce_lower),
    ("layer_norm", "layer_norm", _ln_lower),
    ("layer_norm_backward", "layer_norm_backward", _ln_backward_lower),
    ("batch_norm", "batch_norm", _bn_lower),
    ("batch_norm_backward", "batch_norm_backward", _bn_backward_lower),
    ("dropout", "dropout", _dropout_lower),
)


def implement(table) -> None:
    if set(REDUCTIONS) != set(K.REDUCTIONS):
        raise ImportError(f"nn.pyx's reductions {sorted(K.REDUCTIONS)} differ from "
                          f"cross_entropy's {sorted(REDUCTIONS)}")
    for op, kernel, lower in _OPS:
        table.implement(op, kernel=kernel, dtypes=FLOAT_DTYPES, lower=lower)
