"""Convolution and pooling over NCHW tensors: conv2d, max/avg pooling, adaptive pooling, and
the backward ops their gradient rules are made of (each of which has a rule too).

NOTE: like ``linear``, ``conv2d`` takes its bias as an optional third input so the bias add
happens in the convolution's kernel; epilogue fusion extends that kernel. So does
``conv2d_backward_data`` (the transposed convolution): the epilogue pass gives it the bias added
after it as a third input, (weight, grad, bias), added to each cell once its sum is complete.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..ir.dims import ceil_div
from ..ir.errors import GraphError, OpError, user_location
from ..ir.facts import require_at_least
from ..ir.types import TensorType
from .autocast import gemm_operands
from .builder import apply, cast_to, graph_of
from .matmul import check_activation, same_dtype, through_activation
from .movement_api import arange, broadcast_to, reshape
from .reduce import sum as reduce_sum
from .registry import FLOAT_DTYPES, REQUIRED, OpDef, named, register, require_dtypes, same_shape


def _pair(attrs, key, minimum) -> tuple[int, int]:
    value = attrs[key]
    if (not isinstance(value, tuple) or len(value) != 2
            or not all(named(v) or (isinstance(v, int) and v >= minimum) for v in value)):
        raise ValueError(f"{key} must be an int >= {minimum} or a pair of them, got {value!r}")
    for v in value:
        if named(v):  # an image side given by a gradient rule (input_hw): a size >= minimum
            require_at_least(v, minimum, key)
    return value


def _out_size(size, k, stride, pad, dilation=1) -> int:
    return (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1


def _check_out(oh, ow, x, kernel):
    if named(oh, ow):  # a named image size: the window must fit, once it is bound
        for size in (oh, ow):
            require_at_least(size, 1, f"sliding a {kernel[0]}x{kernel[1]} window over "
                             f"{x.shape[2]}x{x.shape[3]}")
    elif oh <= 0 or ow <= 0:
        raise ValueError(f"output size would be {oh}x{ow}: the {x.shape[2]}x{x.shape[3]} input "
                         f"(with padding) is smaller than the {kernel[0]}x{kernel[1]} window")


def _require_nchw(name, x):
    require_dtypes(name, x, FLOAT_DTYPES)
    if x.ndim != 4:
        raise ValueError(f"input must be 4-D (N, C, H, W), got shape {x.shape}")


# -- conv2d ---------------------------------------------------------------------------------------
def weight_dims(w, groups):
    """(out_channels, in_channels per group, kh, kw); a 5-D weight is MegEngine's grouped layout
    (groups, out/groups, in/groups, kh, kw), which has the same memory order as the 4-D one."""
    if w.ndim == 5:
        if w.shape[0] != groups:
            raise ValueError(f"5-D weight {w.shape} must have groups={groups} as its first dim")
        return w.shape[0] * w.shape[1], *w.shape[2:]
    if w.ndim != 4:
        raise ValueError(f"weight must be 4-D (out, in/groups, kh, kw), got shape {w.shape}")
    return w.shape


def conv_geometry(in_types, attrs):
    """Validated (out_channels, in_channels per group, kernel, stride, padding, dilation)."""
    x, w = in_types[:2]
    stride, padding = _pair(attrs, "stride", 1), _pair(attrs, "padding", 0)
    dilation, groups = _pair(attrs, "dilation", 1), _groups(attrs)
    oc, cg, kh, kw = weight_dims(w, groups)
    c = x.shape[1]
    if named(c):  # named channels: the weight's must agree, and groups then divide them
        if oc % groups or not same_shape((cg * groups,), (c,), "conv2d's input channels"):
            raise ValueError(f"groups={groups} must divide the weight's {oc} output channels")
        return oc, cg, (kh, kw), stride, padding, dilation
    if c % groups or oc % groups:
        raise ValueError(f"groups={groups} must divide both the input's {c} channels and the "
                         f"weight's {oc} output channels")
    if cg * groups != c:
        raise ValueError(f"channel mismatch: the weight expects {cg * groups} input channels "
                         f"({cg} per group x {groups} groups), the input has {c}")
    return oc, cg, (kh, kw), stride, padding, dilation


def _groups(attrs) -> int:
    groups = attrs["groups"]
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    return groups


def _conv2d_infer(in_types, attrs):
    if len(in_types) not in (2, 3):
        raise ValueError(f"takes (inp, weight) or (inp, weight, bias), got {len(in_types)} inputs")
    x = in_types[0]
    same_dtype(in_types)
    _require_nchw("conv2d", x)
    oc, _, kernel, stride, padding, dilation = conv_geometry(in_types, attrs)
    if len(in_types) == 3 and in_types[2].shape not in ((oc,), (1, oc, 1, 1)):
        raise ValueError(f"bias must have shape ({oc},) or (1, {oc}, 1, 1), "
                         f"got {in_types[2].shape}")
    oh, ow = (_out_size(x.shape[2 + i], kernel[i], stride[i], padding[i], dilation[i])
              for i in range(2))
    effective = tuple(dilation[i] * (kernel[i] - 1) + 1 for i in range(2))
    _check_out(oh, ow, x, effective)
    return (TensorType((x.shape[0], oc, oh, ow), x.dtype),)


def _conv2d_epilogue_infer(in_types, attrs):
    check_activation(attrs)
    return _conv2d_infer(in_types, attrs)


# The backward ops rebuild the type of the operand they compute and check conv2d's shape rule
# against the output gradient they are given, so their errors read like conv2d's.
def _check_grad_shape(x, w, dy, attrs):
    (y,) = _conv2d_infer((x, w), attrs)
    if not same_shape(dy.shape, y.shape, "the convolution's output gradient"):
        raise ValueError(f"output gradient has shape {dy.shape}, but convolving a {x.shape} "
                         f"input with a {w.shape} weight gives {y.shape}")


def _backward_data_infer(in_types, attrs):
    if len(in_types) not in (2, 3):
        raise ValueError(f"takes (weight, grad) or (weight, grad, bias), got {len(in_types)} "
                         "inputs")
    w, dy = in_types[:2]
    same_dtype(in_types)
    _require_nchw("conv2d_backward_data", dy)
    _, cg, _, _ = weight_dims(w, _groups(attrs))
    c = cg * attrs["groups"]
    x = TensorType((dy.shape[0], c, *_pair(attrs, "input_hw", 1)), dy.dtype)
    _check_grad_shape(x, w, dy, attrs)
    if len(in_types) == 3 and in_types[2].shape not in ((c,), (1, c, 1, 1)):
        raise ValueError(f"bias must have shape ({c},) or (1, {c}, 1, 1), got {in_types[2].shape}")
    return (x,)


def _backward_filter_infer(in_types, attrs):
    x, dy = in_types
    same_dtype(in_types)
    _require_nchw("conv2d_backward_filter", x)
    _require_nchw("conv2d_backward_filter", dy)
    cg = x.shape[1] // _groups(attrs)
    w = TensorType((dy.shape[1], cg, *_pair(attrs, "kernel_size", 1)), x.dtype)
    _check_grad_shape(x, w, dy, attrs)
    return (w,)


# -- convolution gradients ------------------------------------------------------------------------
# conv2d is bilinear: <h, conv2d(x, w)> = <backward_data(w, h), x> = <backward_filter(x, h), w>.
# So each of the three ops' gradients is made of the other two, and any order works.
CONV_ATTRS = ("stride", "padding", "dilation", "groups")


def _conv_attrs(node) -> dict:
    return {key: node.attr[key] for key in CONV_ATTRS}


def conv2d_backward_data(weight, grad, input_hw, bias=None, **conv):
    """conv2d's input gradient, a transposed convolution: ``grad`` (N, OC, OH, OW) gives
    (N, C, *input_hw), plus ``bias`` ((C,) or (1, C, 1, 1)) where given. ``conv`` holds
    conv2d's attributes.

    >>> dx = conv2d_backward_data(w, dy, (32, 32), stride=(2, 2), padding=(1, 1),
    ...                           dilation=(1, 1), groups=1)
    """
    inputs = (weight, grad) if bias is None else (weight, grad, bias)
    return apply("conv2d_backward_data", inputs, input_hw=tuple(input_hw), **conv)


def conv2d_backward_filter(inp, grad, kernel_size, **conv):
    """conv2d's weight gradient (OC, C/groups, *kernel_size), summed over the batch.

    >>> dw = conv2d_backward_filter(x, dy, (3, 3), **conv)
    """
    return apply("conv2d_backward_filter", (inp, grad), kernel_size=tuple(kernel_size), **conv)


def _like(v, shape):
    """A 5-D (grouped) weight or a (1, OC, 1, 1) bias has the memory order of the 4-D or 1-D
    gradient computed for it, so a reshape (a view) is all it needs."""
    return v if v.shape == shape else reshape(v, shape)


def _conv2d_grad(node, out_grads):
    x, w = node.inputs[:2]
    g, conv = through_activation(node, out_grads[0]), _conv_attrs(node)
    # The filter gradient first: it reads x, whose buffer (often x's last use, or a value
    # rematerialisation just remade) can then die before the data gradient's output is made.
    dw = _like(conv2d_backward_filter(x, g, w.shape[-2:], **conv), w.shape)
    dx = conv2d_backward_data(w, g, x.shape[2:], **conv)
    if len(node.inputs) == 2:
        return dx, dw
    return dx, dw, _like(reduce_sum(g, axis=(0, 2, 3)), node.inputs[2].shape)


def _backward_data_grad(node, out_grads):
    w, dy = node.inputs[:2]
    h, conv = out_grads[0], _conv_attrs(node)
    dw = _like(conv2d_backward_filter(h, dy, w.shape[-2:], **conv), w.shape)
    if len(node.inputs) == 2:
        return dw, apply("conv2d", (h, w), **conv)
    db = _like(reduce_sum(h, axis=(0, 2, 3)), node.inputs[2].shape)
    return dw, apply("conv2d", (h, w), **conv), db


def _backward_filter_grad(node, out_grads):
    x, dy = node.inputs
    h, conv = out_grads[0], _conv_attrs(node)
    return conv2d_backward_data(h, dy, x.shape[2:], **conv), apply("conv2d", (x, h), **conv)


def _conv_flops(y, w) -> float:
    """A convolution's multiply-adds, the same for its two gradients: 2 per (output element,
    weight of its group), for output (or output gradient) ``y`` and weight (or its gradient)
    ``w``."""
    return 2.0 * y.size * math.prod(w.shape[1:])


_CONV = {"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1}
register(OpDef("conv2d", "matmul", _conv2d_epilogue_infer, attrs={**_CONV, "activation": "none"},
               grad=_conv2d_grad, flops=lambda node: _conv_flops(node.outputs[0], node.inputs[1])))
register(OpDef("conv2d_backward_data", "matmul", _backward_data_infer,
               attrs={**_CONV, "input_hw": REQUIRED}, grad=_backward_data_grad,
               flops=lambda node: _conv_flops(node.inputs[1], node.inputs[0])))
register(OpDef("conv2d_backward_filter", "matmul", _backward_filter_infer,
               attrs={**_CONV, "kernel_size": REQUIRED}, grad=_backward_filter_grad,
               flops=lambda node: _conv_flops(node.inputs[1], node.outputs[0])))


# -- conv2d on prepacked weights (inference) -----------------------------------------------------
# A backend whose convolution kernels read the weights in a layout of their own packs them
# once: the prepack pass (planner/passes/prepack.py) rewrites conv2d(x, w) with a w that reads
# only weights into conv2d_packed(x, conv2d_pack_weight(w)), and the prologue or constant
# folding computes the pack once instead of on every run. The packed layout: for each group,
# blocks of ``block`` output channels (the last zero-padded), each (input channels x taps,
# block): packed[g, b, c * kh * kw + t, r] = w[g * ocg + b * block + r, c, t].
def packed_weight_shape(weight_shape, groups, block) -> tuple[int, ...]:
    """The shape conv2d_pack_weight gives a conv2d weight of ``weight_shape``."""
    oc, cg, kh, kw = weight_shape
    return (groups, -(-oc // groups // block), cg * kh * kw, block)


def pack_weight_array(w: np.ndarray, groups: int, block: int) -> np.ndarray:
    """conv2d_pack_weight of a weight array, in NumPy: a copy into the packed layout."""
    oc, cg, kh, kw = weight_dims(w, groups)
    shape = packed_weight_shape((oc, cg, kh, kw), groups, block)
    padded = np.zeros((groups, shape[1] * block, shape[2]), w.dtype)
    padded[:, :oc // groups] = w.reshape(groups, oc // groups, shape[2])
    return np.ascontiguousarray(padded.reshape(groups, shape[1], block, shape[2])
                                .transpose(0, 1, 3, 2))


def _block(attrs) -> int:
    block = attrs["block"]
    if not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive int, got {block!r}")
    return block


def _pack_weight_infer(in_types, attrs):
    (w,) = in_types
    require_dtypes("conv2d_pack_weight", w, FLOAT_DTYPES)
    groups = _groups(attrs)
    oc, cg, kh, kw = weight_dims(w, groups)
    if oc % groups:
        raise ValueError(f"groups={groups} must divide the weight's {oc} output channels")
    return (TensorType(packed_weight_shape((oc, cg, kh, kw), groups, _block(attrs)), w.dtype),)


def _conv2d_packed_infer(in_types, attrs):
    check_activation(attrs)
    if len(in_types) not in (2, 3):
        raise ValueError(f"takes (inp, packed weight) or (inp, packed weight, bias), got "
                         f"{len(in_types)} inputs")
    x, wp = in_types[:2]
    groups, oc = _groups(attrs), attrs["out_channels"]
    kh, kw = _pair(attrs, "kernel_size", 1)
    if not isinstance(oc, int) or oc < 1 or oc % groups:
        raise ValueError(f"out_channels must be a positive multiple of groups={groups}, "
                         f"got {oc!r}")
    _require_nchw("conv2d_packed", x)
    w = TensorType((oc, x.shape[1] // groups, kh, kw), x.dtype)
    block = wp.shape[-1] if wp.ndim == 4 and wp.shape[-1] > 0 else 1
    if wp.shape != packed_weight_shape(w.shape, groups, block):
        raise ValueError(f"packed weight has shape {wp.shape}, but a {w.shape} weight packed "
                         f"by blocks of {block} channels has shape "
                         f"{packed_weight_shape(w.shape, groups, block)}")
    return _conv2d_infer((x, w, *in_types[2:]), attrs)


def _packed_flops(node) -> float:
    x, y = node.inputs[0], node.outputs[0]
    kh, kw = node.attr["kernel_size"]
    return 2.0 * y.size * (x.shape[1] // node.attr["groups"]) * kh * kw


register(OpDef("conv2d_pack_weight", "movement", _pack_weight_infer,
               attrs={"groups": 1, "block": REQUIRED}, flops_per_element=0.0))
# no gradient: it is made by a pass after autodiff, from weights no step writes
register(OpDef("conv2d_packed", "matmul", _conv2d_packed_infer,
               attrs={**_CONV, "activation": "none", "out_channels": REQUIRED,
                      "kernel_size": REQUIRED}, flops=_packed_flops))


# -- pooling --------------------------------------------------------------------------------------
AVG_MODES = ("average", "average_count_exclude_padding")


class Windows(NamedTuple):
    """A sliding-window pooling's validated geometry, per axis (H, W): padding before and after
    (ONNX's pads may differ), dilation (the step between a window's cells), output size."""
    kernel: tuple
    stride: tuple
    padding: tuple
    padding_end: tuple
    dilation: tuple
    out: tuple


def _pooled_size(size, k, stride, begin, end, dilation, ceil_mode):
    """PyTorch's and ONNX's output size: with ``ceil_mode`` a last partial window counts, unless
    it would start past the input and its left padding (it would read padding only)."""
    span = dilation * (k - 1) + 1
    total = size + begin + end - span
    if not ceil_mode:
        return total // stride + 1
    if named(size):
        # The last window starts at most stride - 1 cells past the end of the input and its
        # padding: it starts inside the input (and is kept) at any size when end + stride <= span
        if end + stride > span:
            raise ValueError(f"ceil_mode=True over a named image size {size}, with padding "
                             f"{end} after it and stride {stride} for a {span}-cell window: "
                             "whether a last window is kept would depend on its value")
        return ceil_div(total, stride) + 1
    out = -(-total // stride) + 1
    return out - 1 if (out - 1) * stride >= size + begin else out


def _taps(o, size, k, stride, begin, dilation) -> int:
    """How many of window o's cells lie inside the input (not in padding)."""
    start = o * stride - begin
    first = -(start // dilation) if start < 0 else 0  # the first cell at or past 0
    return max(min(k, -(-(size - start) // dilation)) - first, 0)


def _check_windows_see_input(x, geo):
    # The first windows (which may start in the left padding) and the last one (in the right
    # padding or a ceil-mode overhang) are the only ones that can miss the input.
    for i in range(2):
        size, k, s = x.shape[2 + i], geo.kernel[i], geo.stride[i]
        begin, d, n = geo.padding[i], geo.dilation[i], geo.out[i]
        if named(size, n):
            continue
        for o in sorted({*range(min(n, -(-begin // s) + 1)), n - 1}):
            if _taps(o, size, k, s, begin, d) == 0:
                raise ValueError(f"window {o} along {'HW'[i]} (kernel {k}, stride {s}, padding "
                                 f"{begin}, dilation {d}) reads padding only: the input is "
                                 f"{x.shape[2]}x{x.shape[3]}")


def window_geometry(x, attrs) -> Windows:
    """Validated geometry of a sliding-window pooling of x."""
    kernel, stride = _pair(attrs, "kernel_size", 1), _pair(attrs, "stride", 1)
    padding, dilation = _pair(attrs, "padding", 0), _pair(attrs, "dilation", 1)
    end = padding if attrs["padding_end"] is None else _pair(attrs, "padding_end", 0)
    if not isinstance(attrs["ceil_mode"], bool):
        raise TypeError(f"ceil_mode must be a bool, got {attrs['ceil_mode']!r}")
    span = tuple(dilation[i] * (kernel[i] - 1) + 1 for i in range(2))
    if any(p >= span[i] for pads in (padding, end) for i, p in enumerate(pads)):
        raise ValueError(f"padding {padding} (end {end}) must be smaller than the window "
                         f"{span[0]}x{span[1]} (kernel {kernel}, dilation {dilation}), "
                         "or some windows would see only padding")
    out = tuple(_pooled_size(x.shape[2 + i], kernel[i], stride[i], padding[i], end[i],
                             dilation[i], attrs["ceil_mode"]) for i in range(2))
    _check_out(*out, x, span)
    geo = Windows(kernel, stride, padding, end, dilation, out)
    _check_windows_see_input(x, geo)
    return geo


def _pooled(name, x, attrs, adaptive) -> TensorType:
    """The forward shape rule: the pooled type of an NCHW ``x``."""
    _require_nchw(name, x)
    if adaptive:
        if x.shape[2] == 0 or x.shape[3] == 0:
            raise ValueError(f"input spatial size {x.shape[2:]} must be positive")
        return TensorType(x.shape[:2] + _pair(attrs, "oshp", 1), x.dtype)
    if "mode" in attrs and attrs["mode"] not in AVG_MODES:
        raise ValueError(f"mode must be one of {AVG_MODES}, got {attrs['mode']!r}")
    return TensorType(x.shape[:2] + window_geometry(x, attrs).out, x.dtype)


def _check_pooled(name, x, dy, attrs, adaptive):
    want = _pooled(name, x, attrs, adaptive)
    if not same_shape(dy.shape, want.shape, "the pooling's output gradient"):
        raise ValueError(f"output gradient has shape {dy.shape}, but pooling a {x.shape} input "
                         f"gives {want.shape}")


def _pool_infer(name, adaptive):
    def infer(in_types, attrs):
        (x,) = in_types
        return (_pooled(name, x, attrs, adaptive),)
    return infer


# The forward poolings take per-tensor quantized int8 and uint8 values and keep their
# quantization: a max commutes with q -> s (q - z), which increases, and an average of
# s (q - z) is s (mean q - z), the mean rounded to an integer, half to even, a padded cell
# counted by "average" holding z, the real 0 (_kernels/pool_int.pxi computes it exactly). A max
# pools plain int8 and uint8 integers too (ONNX's MaxPool takes them): it is theirs whatever
# they stand for.
QUANT_POOL_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8))


def _integer_pool_infer(name, adaptive, plain=False):
    infer = _pool_infer(name, adaptive)

    def rule(in_types, attrs):
        (x,) = in_types
        if x.quant is None and not (plain and x.dtype in QUANT_POOL_DTYPES):
            return infer(in_types, attrs)  # the float rule refuses other integers
        if x.dtype not in QUANT_POOL_DTYPES or x.quant is not None and x.quant.per_channel:
            raise TypeError(f"{name} pools per-tensor quantized int8 or uint8 values, got {x}; "
                            "dequantize it first")
        # the geometry is the float rule's, read off a float stand-in of the same shape
        (y,) = infer((TensorType(x.shape, FLOAT_DTYPES[0]),), attrs)
        return (TensorType(y.shape, x.dtype, x.quant),)
    return rule


def _max_backward_infer(name, adaptive):
    # (x, dy) -> dx, where dy is the gradient of the pooled output
    def infer(in_types, attrs):
        x, dy = in_types
        same_dtype(in_types)
        _check_pooled(name, x, dy, attrs, adaptive)
        return (x,)
    return infer


def _select_infer(name, adaptive):
    # (x, h) -> pooled: h read at the cell where each window of x has its maximum
    def infer(in_types, attrs):
        x, h = in_types
        same_dtype(in_types)
        if not same_shape(h.shape, x.shape, "the values read"):
            raise ValueError(f"the values read must have the input's shape {x.shape}, "
                             f"got {h.shape}")
        return (_pooled(name, x, attrs, adaptive),)
    return infer


def _avg_backward_infer(name, adaptive):
    # (dy,) -> dx of shape (N, C, *input_hw)
    def infer(in_types, attrs):
        (dy,) = in_types
        _require_nchw(name, dy)
        x = TensorType(dy.shape[:2] + _pair(attrs, "input_hw", 1), dy.dtype)
        _check_pooled(name, x, dy, attrs, adaptive)
        return (x,)
    return infer


# -- pooling gradients ----------------------------------------------------------------------------
# Average pooling is linear, so its backward's gradient is the forward again. Max pooling is
# piecewise linear: its backward is linear in dy, with "select" (read at each window's argmax)
# as the adjoint, and piecewise constant in x, which therefore gets no gradient.
def _max_rules(backward, select):
    def forward_grad(node, out_grads):
        return (apply(backward, (node.inputs[0], out_grads[0]), **node.attr),)

    def backward_grad(node, out_grads):
        return None, apply(select, (node.inputs[0], out_grads[0]), **node.attr)

    def select_grad(node, out_grads):
        return None, apply(backward, (node.inputs[0], out_grads[0]), **node.attr)
    return forward_grad, backward_grad, select_grad


def _avg_rules(forward, backward):
    def forward_grad(node, out_grads):
        hw = node.inputs[0].shape[2:]
        return (apply(backward, (out_grads[0],), input_hw=hw, **node.attr),)

    def backward_grad(node, out_grads):
        attrs = {k: v for k, v in node.attr.items() if k != "input_hw"}
        return (apply(forward, (out_grads[0],), **attrs),)
    return forward_grad, backward_grad


def _register_max(prefix, attrs, adaptive):
    fwd, bwd, sel = (f"{prefix}max_pool2d{suffix}" for suffix in ("", "_backward", "_select"))
    rules = _max_rules(bwd, sel)
    register(OpDef(fwd, "nn", _integer_pool_infer(fwd, adaptive, plain=True), attrs=attrs,
                   grad=rules[0], quantized=True))
    for name, infer, rule in ((bwd, _max_backward_infer, rules[1]), (sel, _select_infer, rules[2])):
        register(OpDef(name, "nn", infer(name, adaptive), attrs=attrs, grad=rule))


def _register_avg(prefix, attrs, adaptive):
    fwd, bwd = f"{prefix}avg_pool2d", f"{prefix}avg_pool2d_backward"
    rules = _avg_rules(fwd, bwd)
    register(OpDef(fwd, "nn", _integer_pool_infer(fwd, adaptive), attrs=attrs, grad=rules[0],
                   quantized=True))
    register(OpDef(bwd, "nn", _avg_backward_infer(bwd, adaptive),
                   attrs={**attrs, "input_hw": REQUIRED}, grad=rules[1]))


# padding_end None: the same as padding (PyTorch's symmetric padding); ONNX's pads may differ
_WINDOW = {"kernel_size": REQUIRED, "stride": REQUIRED, "padding": (0, 0), "dilation": (1, 1),
           "padding_end": None, "ceil_mode": False}
_register_max("", _WINDOW, adaptive=False)
_register_avg("", {**_WINDOW, "mode": AVG_MODES[1]}, adaptive=False)
_register_max("adaptive_", {"oshp": REQUIRED}, adaptive=True)
_register_avg("adaptive_", {"oshp": REQUIRED}, adaptive=True)


# -- public functions (re-exported by mgegraph.functional) ---------------------------------------

__all__ = ["adaptive_avg_pool2d", "adaptive_max_pool2d", "avg_pool2d", "conv2d", "max_pool2d"]


def _as_pair(value):
    """An int becomes (v, v); a sequence becomes a tuple. The op's shape rule validates it."""
    if hasattr(value, "__index__"):
        return (int(value), int(value))
    try:
        return tuple(int(v) if hasattr(v, "__index__") else v for v in value)
    except TypeError:
        return value


# MegEngine's compute_mode "float32" asks float16 inputs to accumulate in float32: mgegraph's
# kernels always do (a half input computes in float32 and is rounded once, at the end)
COMPUTE_MODES = ("default", "float32")


def check_conv_modes(op: str, conv_mode, compute_mode) -> None:
    if conv_mode != "cross_correlation" or compute_mode not in COMPUTE_MODES:
        raise GraphError(f"{op} supports conv_mode='cross_correlation' and compute_mode "
                         f"'default' or 'float32', got {conv_mode!r}, {compute_mode!r} (at "
                         f"{user_location()})")


def conv2d(inp, weight, bias=None, stride=1, padding=0, dilation=1, groups=1,
           conv_mode="cross_correlation", compute_mode="default"):
    """2-D convolution (cross-correlation) of an NCHW input with an (out, in/groups, kh, kw)
    weight; bias is (out,) or (1, out, 1, 1).

    >>> y = F.conv2d(x, w, b, stride=2, padding=1)   # x: (8, 3, 32, 32), w: (16, 3, 3, 3)
    """
    check_conv_modes("conv2d", conv_mode, compute_mode)
    return apply("conv2d", tuple(gemm_operands(inp, weight, bias)), stride=_as_pair(stride), padding=_as_pair(padding),
                 dilation=_as_pair(dilation),
                 groups=int(groups) if hasattr(groups, "__index__") else groups)


def window_attrs(kernel_size, stride, padding, dilation, ceil_mode) -> dict:
    """The sliding-window attributes of the public pooling functions. ``padding`` is an int, a
    pair, or ((top, bottom), (left, right)) for padding that differs at the two ends."""
    kernel = _as_pair(kernel_size)
    begin, end = _as_pair(padding), None
    if isinstance(begin, tuple) and len(begin) == 2 and all(isinstance(p, (tuple, list))
                                                              for p in begin):
        (top, bottom), (left, right) = begin
        begin, end = _as_pair((top, left)), _as_pair((bottom, right))
    return {"kernel_size": kernel, "stride": kernel if stride is None else _as_pair(stride),
            "padding": begin, "padding_end": end, "dilation": _as_pair(dilation),
            "ceil_mode": bool(ceil_mode)}


def max_pool2d(inp, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """Max over sliding windows; padding counts as -inf. ``stride`` defaults to the window.
    ``dilation`` spaces a window's cells; ``ceil_mode`` keeps a last partial window (PyTorch's
    rule: one that starts inside the input or its left padding). ``return_indices`` also gives
    PyTorch's indices: where in its plane (h * W + w, int64) each maximum comes from.

    >>> y = F.max_pool2d(x, 2)   # (N, C, 32, 32) -> (N, C, 16, 16)
    >>> y, where = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    """
    attrs = window_attrs(kernel_size, stride, padding, dilation, ceil_mode)
    y = apply("max_pool2d", (inp,), **attrs)
    return (y, _argmax_cells(inp, attrs)) if return_indices else y


def _argmax_cells(inp, attrs):
    # max_pool2d_select reading each cell's own index picks the cell the gradient goes to: the
    # first maximum of the window (or its first NaN). A float holds the index exactly up to
    # 2^24 (float32) cells of a plane.
    h, w = inp.shape[2:]
    if inp.dtype in QUANT_POOL_DTYPES:  # indices of a float max are the same cells
        raise OpError("max_pool2d", [inp.type], f"return_indices of {inp.dtype} values: "
                      "dequantize or cast them to float first", user_location())
    bits = np.finfo(inp.dtype).nmant + 1
    reason = None
    if named(h, w):
        reason = f"return_indices over a named image size {h}x{w}"
    elif h * w > 2 ** bits:
        reason = (f"return_indices over {h}x{w} planes: {inp.dtype} holds cell indices "
                  f"exactly up to 2^{bits} (use float64)")
    if reason:
        raise OpError("max_pool2d", [inp.type], reason, user_location())
    cells = reshape(arange(h * w, dtype=inp.dtype, graph=graph_of(inp)), (1, 1, h, w))
    at = apply("max_pool2d_select", (inp, broadcast_to(cells, inp.shape)), **attrs)
    return cast_to(at, np.int64)


def _avg_mode(inp, mode, count_include_pad) -> str:
    # PyTorch's count_include_pad, where given, names MegEngine's mode; the two must agree
    if count_include_pad is None:
        return mode
    chosen = AVG_MODES[0] if count_include_pad else AVG_MODES[1]
    if mode not in (chosen, AVG_MODES[1]):
        raise OpError("avg_pool2d", [inp.type], f"count_include_pad={count_include_pad} "
                      f"contradicts mode={mode!r}", user_location())
    return chosen


def avg_pool2d(inp, kernel_size, stride=None, padding=0, mode="average_count_exclude_padding",
               *, ceil_mode=False, count_include_pad=None, dilation=1):
    """Mean over sliding windows; ``mode="average"`` (or PyTorch's ``count_include_pad=True``)
    counts padded cells in the divisor; a ``ceil_mode`` overhang past the padding never counts.

    >>> y = F.avg_pool2d(x, 3, stride=2, padding=1)
    >>> y = F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)
    """
    return apply("avg_pool2d", (inp,), mode=_avg_mode(inp, mode, count_include_pad),
                 **window_attrs(kernel_size, stride, padding, dilation, ceil_mode))


def adaptive_avg_pool2d(inp, oshp):
    """Mean over PyTorch's adaptive windows giving an ``oshp`` output; (1, 1) is global pooling.

    >>> y = F.adaptive_avg_pool2d(x, (1, 1))   # (N, C, 7, 7) -> (N, C, 1, 1)
    """
    return apply("adaptive_avg_pool2d", (inp,), oshp=_as_pair(oshp))


def adaptive_max_pool2d(inp, oshp):
    """Max over PyTorch's adaptive windows giving an ``oshp`` output.

    >>> y = F.adaptive_max_pool2d(x, 7)
    """
    return apply("adaptive_max_pool2d", (inp,), oshp=_as_pair(oshp))
