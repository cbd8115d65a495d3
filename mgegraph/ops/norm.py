"""Group norm as one op (instance norm is its one-channel-per-group case), and its backward.

Design: composed as layer_norm over (N, groups, -1) and a per-channel affine, a training step
ran three times slower than PyTorch's (`benchmarks/fresh_process.py group-norm`): five passes
over the tensor forward and seven backward. The op's kernel takes each group's statistics in
two passes (mean, then squared deviations, in double) and writes y with the affine folded into
one multiply-add per element; its backward reads x and dy twice per group and gives dweight
and dbias too. The backward op's own gradient (grad of grad) differentiates a composed
reference twice, as layer norm's does (``ops.nn.affine_norm_rules``).

Inputs x (N, C, ...), weight and bias (C,); attributes groups (dividing C), eps and activation
("none", "relu" or "relu6": what the epilogue pass, planner/passes/epilogue.py, folds in from a
relu or clip(0, 6) that follows, applied to y as it is written; the backward op has none).
"""
from __future__ import annotations

from ..ir.graph import Var
from .builder import apply_multi
from .elementwise import rsqrt
from .matmul import EPILOGUE_ACTIVATIONS, through_activation
from .movement_api import reshape
from .nn import affine_norm_rules, same_dtype
from .reduce import mean as reduce_mean
from .reduce import var as reduce_var
from .registry import FLOAT_DTYPES, REQUIRED, OpDef, register, require_dtypes


def _infer(in_types, attrs):
    x, weight, bias = in_types
    require_dtypes("group_norm", x, FLOAT_DTYPES)
    activation = attrs.get("activation", "none")  # the backward op has none
    if activation not in EPILOGUE_ACTIVATIONS:
        raise ValueError(f"activation must be one of {EPILOGUE_ACTIVATIONS}, got {activation!r}")
    if x.ndim < 2:
        raise ValueError(f"input must be at least 2-d (N, C, ...), got {x.ndim}-d")
    groups, c = attrs["groups"], x.shape[1]
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1 or c % groups:
        raise ValueError(f"groups must be an int >= 1 dividing the {c} channels, got {groups!r}")
    for what, t in (("weight", weight), ("bias", bias)):
        same_dtype(x, t, what)
        if t.shape != (c,):
            raise ValueError(f"{what} shape {t.shape} must be ({c},)")
    return (x,)


def reference(x: Var, weight: Var, bias: Var, attrs) -> Var:
    """group_norm composed of reductions and elementwise ops (for grad of grad)."""
    grouped = reshape(x, (x.shape[0], attrs["groups"], -1))
    centred = grouped - reduce_mean(grouped, 2, keepdims=True)
    y = reshape(centred * rsqrt(reduce_var(grouped, 2, keepdims=True) + attrs["eps"]), x.shape)
    per_channel = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    return y * reshape(weight, per_channel) + reshape(bias, per_channel)


_, _backward_infer, _backward_grad = affine_norm_rules("group_norm_backward", _infer, reference)


def _grad(node, out_grads):
    x, weight, _ = node.inputs
    dy = through_activation(node, out_grads[0])  # a fused activation's gradient first
    return apply_multi("group_norm_backward", (x, weight, dy), groups=node.attr["groups"],
                       eps=node.attr["eps"])


ATTRS = {"groups": REQUIRED, "eps": 1e-5}
# Per element: two statistics passes and one multiply-add; backward: two sums and dx.
register(OpDef("group_norm", "nn", _infer, attrs={**ATTRS, "activation": "none"}, grad=_grad,
               inplace=True, flops_per_element=6))
# Inputs x, weight, dy; outputs dx, dweight, dbias (the bias does not enter the gradients).
register(OpDef("group_norm_backward", "nn", _backward_infer, attrs=ATTRS, grad=_backward_grad,
               inplace=True, flops_per_element=10))

