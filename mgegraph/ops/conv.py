"""Convolution and pooling over NCHW tensors: conv2d, max/avg pooling, adaptive pooling.

NOTE: like ``linear``, ``conv2d`` takes its bias as an optional third input so the bias add
happens in the convolution's kernel; epilogue fusion extends that kernel.
"""
from __future__ import annotations

from .._kernels import conv as K
from ..ir.types import TensorType
from .matmul import check_blas_dims, same_dtype
from .registry import FLOAT_DTYPES, REQUIRED, Launch, OpDef, register, require_dtypes


def _pair(attrs, key, minimum) -> tuple[int, int]:
    value = attrs[key]
    if (not isinstance(value, tuple) or len(value) != 2
            or not all(isinstance(v, int) and v >= minimum for v in value)):
        raise ValueError(f"{key} must be an int >= {minimum} or a pair of them, got {value!r}")
    return value


def _out_size(size, k, stride, pad, dilation=1) -> int:
    return (size + 2 * pad - dilation * (k - 1) - 1) // stride + 1


def _check_out(oh, ow, x, kernel):
    if oh <= 0 or ow <= 0:
        raise ValueError(f"output size would be {oh}x{ow}: the {x.shape[2]}x{x.shape[3]} input "
                         f"(with padding) is smaller than the {kernel[0]}x{kernel[1]} window")


def _require_nchw(name, x):
    require_dtypes(name, x, FLOAT_DTYPES)
    if x.ndim != 4:
        raise ValueError(f"input must be 4-D (N, C, H, W), got shape {x.shape}")


# -- conv2d ---------------------------------------------------------------------------------------
def _weight_dims(w, groups):
    """(out_channels, in_channels per group, kh, kw); a 5-D weight is MegEngine's grouped layout
    (groups, out/groups, in/groups, kh, kw), which has the same memory order as the 4-D one."""
    if w.ndim == 5:
        if w.shape[0] != groups:
            raise ValueError(f"5-D weight {w.shape} must have groups={groups} as its first dim")
        return w.shape[0] * w.shape[1], *w.shape[2:]
    if w.ndim != 4:
        raise ValueError(f"weight must be 4-D (out, in/groups, kh, kw), got shape {w.shape}")
    return w.shape


def _conv_geometry(in_types, attrs):
    """Validated (x, out_channels, in_channels per group, kernel, stride, padding, dilation)."""
    x, w = in_types[:2]
    stride, padding = _pair(attrs, "stride", 1), _pair(attrs, "padding", 0)
    dilation, groups = _pair(attrs, "dilation", 1), attrs["groups"]
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    oc, cg, kh, kw = _weight_dims(w, groups)
    c = x.shape[1]
    if c % groups or oc % groups:
        raise ValueError(f"groups={groups} must divide both the input's {c} channels and the "
                         f"weight's {oc} output channels")
    if cg * groups != c:
        raise ValueError(f"channel mismatch: the weight expects {cg * groups} input channels "
                         f"({cg} per group x {groups} groups), the input has {c}")
    return oc, cg, (kh, kw), stride, padding, dilation


def _conv2d_infer(in_types, attrs):
    if len(in_types) not in (2, 3):
        raise ValueError(f"takes (inp, weight) or (inp, weight, bias), got {len(in_types)} inputs")
    x = in_types[0]
    same_dtype(in_types)
    _require_nchw("conv2d", x)
    oc, _, kernel, stride, padding, dilation = _conv_geometry(in_types, attrs)
    if len(in_types) == 3 and in_types[2].shape not in ((oc,), (1, oc, 1, 1)):
        raise ValueError(f"bias must have shape ({oc},) or (1, {oc}, 1, 1), "
                         f"got {in_types[2].shape}")
    oh, ow = (_out_size(x.shape[2 + i], kernel[i], stride[i], padding[i], dilation[i])
              for i in range(2))
    effective = tuple(dilation[i] * (kernel[i] - 1) + 1 for i in range(2))
    _check_out(oh, ow, x, effective)
    return (TensorType((x.shape[0], oc, oh, ow), x.dtype),)


def _conv2d_lower(node):
    x, y = node.inputs[0].type, node.outputs[0].type
    oc, cg, (kh, kw), stride, padding, dilation = _conv_geometry(
        [v.type for v in node.inputs], node.attr)
    groups, npix, kdim = node.attr["groups"], y.shape[2] * y.shape[3], cg * kh * kw
    direct = (kh, kw) == (1, 1) and stride == (1, 1) and padding == (0, 0)
    use_col = not direct and kdim > 0
    ints = (*x.shape, oc, *y.shape[2:], kh, kw, *stride, *padding, *dilation, groups,
            int(len(node.inputs) == 3), int(use_col))
    assert len(ints) == K.CONV_NINTS
    check_blas_dims(x.dtype, oc // groups, npix, kdim)
    # one (batch element, group) im2col matrix, reused for all of them
    return Launch(ints, workspace=kdim * npix * x.dtype.itemsize if use_col else 0)


register(OpDef("conv2d", "matmul", _conv2d_infer,
               attrs={"stride": (1, 1), "padding": (0, 0), "dilation": (1, 1), "groups": 1},
               kernel="conv2d", dtypes=FLOAT_DTYPES, lower=_conv2d_lower,
               flops_per_element=256.0))  # really 2 * C/groups * kh * kw


# -- pooling --------------------------------------------------------------------------------------
AVG_MODES = ("average", "average_count_exclude_padding")


def _window_geometry(x, attrs):
    kernel, stride = _pair(attrs, "kernel_size", 1), _pair(attrs, "stride", 1)
    padding = _pair(attrs, "padding", 0)
    if padding[0] >= kernel[0] or padding[1] >= kernel[1]:
        raise ValueError(f"padding {padding} must be smaller than kernel_size {kernel}, "
                         "or some windows would see only padding")
    oh, ow = (_out_size(x.shape[2 + i], kernel[i], stride[i], padding[i]) for i in range(2))
    _check_out(oh, ow, x, kernel)
    return kernel, stride, padding, (oh, ow)


def _pool_infer(name):
    def infer(in_types, attrs):
        (x,) = in_types
        _require_nchw(name, x)
        if "mode" in attrs and attrs["mode"] not in AVG_MODES:
            raise ValueError(f"mode must be one of {AVG_MODES}, got {attrs['mode']!r}")
        oh, ow = _window_geometry(x, attrs)[3]
        return (TensorType(x.shape[:2] + (oh, ow), x.dtype),)
    return infer


def _pool_lower(node):
    x = node.inputs[0].type
    kernel, stride, padding, out = _window_geometry(x, node.attr)
    mode = K.POOL_MODES[node.attr.get("mode", "max")]
    ints = (mode, x.shape[0] * x.shape[1], *x.shape[2:], *out, *kernel, *stride, *padding)
    assert len(ints) == K.POOL_NINTS
    return Launch(ints)


def _adaptive_infer(name):
    def infer(in_types, attrs):
        (x,) = in_types
        _require_nchw(name, x)
        oshp = _pair(attrs, "oshp", 1)
        if x.shape[2] == 0 or x.shape[3] == 0:
            raise ValueError(f"input spatial size {x.shape[2:]} must be positive")
        return (TensorType(x.shape[:2] + oshp, x.dtype),)
    return infer


def _adaptive_lower(mode):
    def lower(node):
        x, y = node.inputs[0].type, node.outputs[0].type
        ints = (K.POOL_MODES[mode], x.shape[0] * x.shape[1], *x.shape[2:], *y.shape[2:],
                0, 0, 0, 0, 0, 0)  # windows come from the sizes alone
        assert len(ints) == K.POOL_NINTS
        return Launch(ints)
    return lower


_WINDOW = {"kernel_size": REQUIRED, "stride": REQUIRED, "padding": (0, 0)}
register(OpDef("max_pool2d", "nn", _pool_infer("max_pool2d"), attrs=_WINDOW, kernel="pool2d",
               dtypes=FLOAT_DTYPES, lower=_pool_lower))
register(OpDef("avg_pool2d", "nn", _pool_infer("avg_pool2d"),
               attrs={**_WINDOW, "mode": AVG_MODES[1]}, kernel="pool2d", dtypes=FLOAT_DTYPES,
               lower=_pool_lower))
for _name, _mode in (("adaptive_max_pool2d", "adaptive_max"),
                     ("adaptive_avg_pool2d", "adaptive_average")):
    register(OpDef(_name, "nn", _adaptive_infer(_name), attrs={"oshp": REQUIRED},
                   kernel="pool2d", dtypes=FLOAT_DTYPES, lower=_adaptive_lower(_mode)))


# -- public functions (re-exported by mgegraph.functional) ---------------------------------------
from .builder import apply, promote  # noqa: E402

__all__ = ["conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d"]


def _as_pair(value):
    """An int becomes (v, v); a sequence becomes a tuple. The op's shape rule validates it."""
    if hasattr(value, "__index__"):
        return (int(value), int(value))
    try:
        return tuple(int(v) if hasattr(v, "__index__") else v for v in value)
    except TypeError:
        return value


def conv2d(inp, weight, bias=None, stride=1, padding=0, dilation=1, groups=1,
           conv_mode="cross_correlation", compute_mode="default"):
    """2-D convolution (cross-correlation) of an NCHW input with an (out, in/groups, kh, kw)
    weight; bias is (out,) or (1, out, 1, 1).

    >>> y = F.conv2d(x, w, b, stride=2, padding=1)   # x: (8, 3, 32, 32), w: (16, 3, 3, 3)
    """
    if conv_mode != "cross_correlation" or compute_mode != "default":
        raise ValueError("conv2d supports conv_mode='cross_correlation' and "
                         f"compute_mode='default' only, got {conv_mode!r}, {compute_mode!r}")
    operands = promote(inp, weight) if bias is None else promote(inp, weight, bias)
    return apply("conv2d", tuple(operands), stride=_as_pair(stride), padding=_as_pair(padding),
                 dilation=_as_pair(dilation),
                 groups=int(groups) if hasattr(groups, "__index__") else groups)


def max_pool2d(inp, kernel_size, stride=None, padding=0):
    """Max over sliding windows; padding counts as -inf. ``stride`` defaults to the window.

    >>> y = F.max_pool2d(x, 2)   # (N, C, 32, 32) -> (N, C, 16, 16)
    """
    kernel = _as_pair(kernel_size)
    return apply("max_pool2d", (inp,), kernel_size=kernel,
                 stride=kernel if stride is None else _as_pair(stride), padding=_as_pair(padding))


def avg_pool2d(inp, kernel_size, stride=None, padding=0, mode="average_count_exclude_padding"):
    """Mean over sliding windows; ``mode="average"`` counts padded cells in the divisor.

    >>> y = F.avg_pool2d(x, 3, stride=2, padding=1)
    """
    kernel = _as_pair(kernel_size)
    return apply("avg_pool2d", (inp,), kernel_size=kernel,
                 stride=kernel if stride is None else _as_pair(stride), padding=_as_pair(padding),
                 mode=mode)


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
