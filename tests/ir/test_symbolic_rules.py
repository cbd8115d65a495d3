"""Every op's shape rule with a named dimension against the same rule on the numbers.

Each registered op has a case here: a function ``(graph, b) -> outputs`` that makes the op's
node directly (``Graph.add_node``, so the rule itself is tested, not a public function) on
inputs holding ``b`` where the op allows a name (the batch axis, mostly; an image side or a
slice length where the rule computes with it). Built once with ``b = Dim("batch")`` and once
per number, the inferred types must agree after ``ir.dims.substitute`` wherever the facts the
rule recorded hold. Where a rule cannot take a name, ``REFUSED`` says so with the reason, and
the refusal must be an OpError naming the op.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import mgegraph  # noqa: F401  (registers the ops)
from mgegraph.ir import quant
from mgegraph.ir.dims import Dim
from mgegraph.ir.errors import FeedError, OpError
from mgegraph.ir.graph import Graph
from mgegraph.ir.specialize import substitute_type
from mgegraph.ops import elementwise_table as TABLE
from mgegraph.ops import quantized_pack
from mgegraph.ops.registry import all_ops

BATCH = Dim("batch")
BINDINGS = (1, 2, 7)
# made by Graph.input / param / const / assign, never by a rule that sees a name
SOURCES = {"input", "param", "const", "assign",
           "rng_uniform"}  # a draw whose shape is an attribute of ints: nothing to name


def _input(g: Graph, shape, dtype="float32"):
    return g.input(f"x{len(g.inputs)}", shape, dtype)


def _param(g: Graph, shape, dtype="float32"):
    return g.param(f"p{len(g.nodes)}", np.ones(shape, dtype))


def _node(op: str, make):
    """A case making ``op`` on inputs built from ``b``: ``make(g, b) -> (inputs, attrs)``."""
    def case(g, b):
        inputs, attrs = make(g, b)
        return g.add_node(op, tuple(inputs), attrs).outputs
    return case


CASES: dict = {}


def _case(op: str):
    def register(make):
        CASES[op] = _node(op, make)
        return make
    return register


# -- elementwise ------------------------------------------------------------------------------
for _entry in TABLE.OPS:
    if _entry.kind == "unary":
        _attrs = {"clip": {"lower": -1.0, "upper": 1.0},
                  "hardsigmoid": {"alpha": 0.2, "beta": 0.5}}.get(_entry.name, {})
        CASES[_entry.name] = _node(_entry.name, lambda g, b, a=_attrs: (
            [_input(g, (b, 3))], a))
    else:  # binary and comparisons: a named batch broadcast against a fixed operand
        CASES[_entry.name] = _node(_entry.name, lambda g, b: (
            [_input(g, (b, 1, 4)), _input(g, (3, 1))], {}))


@_case("where")
def _(g, b):
    return [_input(g, (b, 1), "bool"), _input(g, (1, 4)), _input(g, (b, 4))], {}


@_case("cast")
def _(g, b):
    return [_input(g, (b, 3))], {"dtype": "int32"}


@_case("fused_elementwise")
def _(g, b):
    code = (("load", 0, 0), ("load", 1, 1), ("add", 2, 0, 1), ("store", 0, 2))
    return [_input(g, (b, 4)), _input(g, (1, 4))], {"code": code, "shape": (b, 4),
                                                    "dtype": "float32"}


# -- reductions -------------------------------------------------------------------------------
for _name in ("sum", "prod", "mean", "var", "max", "min"):
    CASES[_name] = _node(_name, lambda g, b: ([_input(g, (b, 3, 5))],
                                              {"axis": (0, 2), "keepdims": True}))
for _name in ("argmax", "argmin"):
    CASES[_name] = _node(_name, lambda g, b: ([_input(g, (b, 3))], {"axis": 1}))


# -- movement ---------------------------------------------------------------------------------
@_case("reshape")
def _(g, b):
    return [_input(g, (b, 3, 4))], {"shape": (b, -1)}


@_case("transpose")
def _(g, b):
    return [_input(g, (b, 3, 4))], {"pattern": (2, "x", 0, 1)}


@_case("broadcast_to")
def _(g, b):
    return [_input(g, (1, 4))], {"shape": (2, b, 4)}


@_case("slice")
def _(g, b):  # x[1:, ::-2, -3:] on a named first and last axis
    return [_input(g, (b, 5, b + 1))], {"starts": (1, None, -3), "stops": (None, None, None),
                                        "steps": (1, -2, 1)}


@_case("slice_backward")
def _(g, b):
    return [_input(g, (b - 1, 3))], {"shape": (b, 5), "starts": (1, 1), "stops": (None, 4),
                                     "steps": (1, 1)}


@_case("concat")
def _(g, b):
    return [_input(g, (b, 3)), _input(g, (2, 3)), _input(g, (b, 3))], {"axis": 0}


@_case("split")
def _(g, b):
    return [_input(g, (b + 3, 2))], {"axis": 0, "ranges": ((0, 3), (3, b + 3))}


@_case("pad")
def _(g, b):
    return [_input(g, (b, 3))], {"pad_width": ((1, 2), (0, 1)), "mode": "reflect"}


@_case("pad_backward")
def _(g, b):
    return [_input(g, (b + 3, 4))], {"pad_width": ((1, 2), (0, 1)), "mode": "edge"}


@_case("gather")
def _(g, b):
    return [_input(g, (b, 5)), _input(g, (b, 2), "int64")], {"axis": 1}


@_case("scatter_add")
def _(g, b):
    return [_input(g, (b, 2)), _input(g, (b, 2), "int64")], {"axis": 1, "shape": (b, 5)}


@_case("take")
def _(g, b):
    return [_input(g, (b, 5)), _input(g, (3, b), "int64")], {"axis": 1}


@_case("index_add")
def _(g, b):
    return [_input(g, (3, b, 2)), _input(g, (b, 2), "int64")], {"axis": 1, "size": b + 1}


@_case("one_hot")
def _(g, b):
    return [_input(g, (b, 2), "int32")], {"num_classes": 6}


@_case("fill")
def _(g, b):
    return [], {"shape": (b, 3), "dtype": "float64", "value": b}


@_case("arange")
def _(g, b):
    return [], {"start": 1, "stop": 2 * b + 1, "step": 3, "dtype": "int32"}


@_case("linspace")
def _(g, b):
    return [], {"start": 0.0, "stop": 1.0, "num": b, "dtype": "float32"}


# -- matrix products --------------------------------------------------------------------------
@_case("matmul")
def _(g, b):  # batched, the named batch broadcast, the contraction named on both sides
    return [_input(g, (b, 1, 3, b)), _input(g, (2, b, 5))], {"transpose_b": False}


@_case("linear")
def _(g, b):
    return [_input(g, (b, 7, 4)), _param(g, (6, 4)), _param(g, (6,))], {"activation": "relu"}


@_case("addmm")
def _(g, b):
    return [_input(g, (b, 5)), _input(g, (3, b)), _input(g, (3, 5))], {"transpose_a": True}


# -- convolution and pooling ------------------------------------------------------------------
_CONV = {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2), "groups": 2}


@_case("conv2d")
def _(g, b):  # a named batch and a named image height
    return [_input(g, (b, 4, b + 6, 9)), _param(g, (6, 2, 3, 3)), _param(g, (6,))], _CONV


@_case("conv2d_backward_data")
def _(g, b):
    oh = (b + 5) // 2 + 1
    return [_param(g, (6, 2, 3, 3)), _input(g, (b, 6, oh, 5))], {**_CONV,
                                                                  "input_hw": (b + 6, 9)}


@_case("conv2d_backward_filter")
def _(g, b):
    oh = (b + 5) // 2 + 1
    return [_input(g, (b, 4, b + 6, 9)), _input(g, (b, 6, oh, 5))], {**_CONV,
                                                                      "kernel_size": (3, 3)}


@_case("conv2d_pack_weight")
def _(g, b):
    return [_input(g, (2 * b, 2, 3, 3))], {"groups": 2, "block": 2}


@_case("conv2d_packed")
def _(g, b):
    return [_input(g, (b, 4, b + 6, 9)), _param(g, (2, 2, 18, 2))], {
        **_CONV, "out_channels": 6, "kernel_size": (3, 3)}


_WINDOW = {"kernel_size": (3, 2), "stride": (2, 2), "padding": (1, 0)}


def _pooled(b):
    return (b + 5) // 2 + 1, 4


for _kind, _extra in (("max", {}), ("avg", {"mode": "average"})):
    CASES[f"{_kind}_pool2d"] = _node(f"{_kind}_pool2d", lambda g, b, e=_extra: (
        [_input(g, (b, 3, b + 6, 9))], {**_WINDOW, **e}))
    CASES[f"adaptive_{_kind}_pool2d"] = _node(f"adaptive_{_kind}_pool2d", lambda g, b: (
        [_input(g, (b, 3, b + 6, 9))], {"oshp": (2, 3)}))
CASES["max_pool2d_backward"] = _node("max_pool2d_backward", lambda g, b: (
    [_input(g, (b, 3, b + 6, 9)), _input(g, (b, 3, *_pooled(b)))], _WINDOW))
CASES["max_pool2d_select"] = _node("max_pool2d_select", lambda g, b: (
    [_input(g, (b, 3, b + 6, 9)), _input(g, (b, 3, b + 6, 9))], _WINDOW))
CASES["avg_pool2d_backward"] = _node("avg_pool2d_backward", lambda g, b: (
    [_input(g, (b, 3, *_pooled(b)))], {**_WINDOW, "input_hw": (b + 6, 9)}))
CASES["adaptive_max_pool2d_backward"] = _node("adaptive_max_pool2d_backward", lambda g, b: (
    [_input(g, (b, 3, b + 6, 9)), _input(g, (b, 3, 2, 3))], {"oshp": (2, 3)}))
CASES["adaptive_max_pool2d_select"] = _node("adaptive_max_pool2d_select", lambda g, b: (
    [_input(g, (b, 3, b + 6, 9)), _input(g, (b, 3, b + 6, 9))], {"oshp": (2, 3)}))
CASES["adaptive_avg_pool2d_backward"] = _node("adaptive_avg_pool2d_backward", lambda g, b: (
    [_input(g, (b, 3, 2, 3))], {"oshp": (2, 3), "input_hw": (b + 6, 9)}))


# -- detection and geometry (ops/vision.py) ---------------------------------------------------
_GRID = {"mode": "bicubic", "padding_mode": "border", "align_corners": True}
_REMAP = {"border_mode": "wrap", "scalar": 0.0, "interp_mode": "linear"}
for _name, _attrs, _points in (("grid_sample", _GRID, "grid"), ("remap", _REMAP, "map")):
    CASES[_name] = _node(_name, lambda g, b, a=_attrs: (
        [_input(g, (b, 3, b + 6, 9)), _input(g, (b, 4, 5, 2))], a))
    CASES[f"{_name}_backward_data"] = _node(f"{_name}_backward_data", lambda g, b, a=_attrs: (
        [_input(g, (b, 4, 5, 2)), _input(g, (b, 3, 4, 5))], {**a, "input_hw": (b + 6, 9)}))
    CASES[f"{_name}_backward_{_points}"] = _node(
        f"{_name}_backward_{_points}", lambda g, b, a=_attrs: (
            [_input(g, (b, 3, b + 6, 9)), _input(g, (b, 4, 5, 2)), _input(g, (b, 3, 4, 5))], a))
_ROI = {"roi_align": {"output_shape": (2, 3), "mode": "max"},
        "roi_pooling": {"output_shape": (2, 3), "mode": "average"}}
for _name, _attrs in _ROI.items():
    CASES[_name] = _node(_name, lambda g, b, a=_attrs: (
        [_input(g, (b, 3, b + 6, 9)), _input(g, (b + 1, 5))], a))
    CASES[f"{_name}_backward"] = _node(f"{_name}_backward", lambda g, b, a=_attrs: (
        [_input(g, (b, 3, b + 6, 9)), _input(g, (b + 1, 5)), _input(g, (b + 1, 3, 2, 3))], a))
CASES["roi_align_backward_rois"] = _node("roi_align_backward_rois", lambda g, b: (
    [_input(g, (b, 3, b + 6, 9)), _input(g, (b + 1, 5)), _input(g, (b + 1, 3, 2, 3))],
    _ROI["roi_align"]))
CASES["nms"] = _node("nms", lambda g, b: (
    [_input(g, (b, 4)), _input(g, (b,))], {"iou_thresh": 0.5, "max_output": 3}))


# -- nn -----------------------------------------------------------------------------------------
for _name in ("softmax", "log_softmax"):
    CASES[_name] = _node(_name, lambda g, b: ([_input(g, (b, 5))], {"axis": 0}))

_CE = {"axis": 1, "with_logits": True, "label_smooth": 0.1, "reduction": "mean"}


@_case("cross_entropy")
def _(g, b):
    return [_input(g, (b, 5, 2)), _input(g, (b, 2), "int64")], {**_CE, "reduction": "none"}


@_case("cross_entropy_backward")
def _(g, b):
    return [_input(g, (b, 5)), _input(g, (b,), "int64"), _input(g, ())], _CE


@_case("layer_norm")
def _(g, b):
    return [_input(g, (b, 3, 4)), _param(g, (4,)), _param(g, (4,))], {"normalized_shape": (4,)}


@_case("layer_norm_backward")
def _(g, b):
    return [_input(g, (b, 4)), _param(g, (4,)), _input(g, (b, 4))], {"normalized_shape": (4,)}


# group norm (ops/norm.py)
@_case("group_norm")
def _(g, b):
    return [_input(g, (b, 4, 3)), _param(g, (4,)), _param(g, (4,))], {"groups": 2}


@_case("group_norm_backward")
def _(g, b):
    return [_input(g, (b, 4, 3)), _param(g, (4,)), _input(g, (b, 4, 3))], {"groups": 2}


@_case("batch_norm")
def _(g, b):  # training: the statistics need more than one value per channel
    return [_input(g, (b, 3, 2, 2)), _param(g, (3,)), _param(g, (1, 3, 1, 1))], {
        "training": True}


@_case("batch_norm_backward")
def _(g, b):
    return [_input(g, (b, 3, 2)), _param(g, (3,)), _param(g, (3,)), _param(g, (3,)),
            _input(g, (b, 3, 2))], {}


@_case("dropout")
def _(g, b):
    return [_input(g, (b, 3)), _input(g, (), "int64")], {"drop_prob": 0.5, "seed": 3}


@_case("rng_gamma")
def _(g, b):
    return [_input(g, (b, 3)), _input(g, (), "int64")], {"seed": 5}


@_case("rng_poisson")
def _(g, b):
    return [_input(g, (b, 3)), _input(g, (), "int64")], {"seed": 5}


# -- resampling ----------------------------------------------------------------------------------
@_case("resize")
def _(g, b):
    return [_input(g, (b, 3, 5, 4))], {"size": (7, 2), "mode": "cubic"}


@_case("resize_backward")
def _(g, b):  # the gradient of a resize from a named image side
    return [_input(g, (2, 3, 7, 2))], {"size": (7, 2), "input_size": (b + 4, 4)}


# -- deformable sampling and correlation (ops/deform.py): a named batch ------------------------
_DEFORM_WINDOW = {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0), "dilation": (1, 2)}
_CORRELATION_ATTRS = {"kernel_size": 3, "max_displacement": 2, "stride1": 1, "stride2": 2,
                      "pad_size": 1, "is_multiply": False}


def _deform_inputs(g, b):  # x (b, 4, 7, 6), 2 deformable groups, a 3x2 window: 4x4 cells
    return [_input(g, (b, 4, 7, 6)), _input(g, (b, 24, 4, 4)), _input(g, (b, 12, 4, 4))]


CASES["deform_im2col"] = _node("deform_im2col",
                               lambda g, b: (_deform_inputs(g, b), _DEFORM_WINDOW))
CASES["deform_im2col_backward"] = _node("deform_im2col_backward", lambda g, b: (
    [*_deform_inputs(g, b), _input(g, (b, 24, 4, 4))], _DEFORM_WINDOW))
CASES["correlation"] = _node("correlation", lambda g, b: (
    [_input(g, (b, 3, 9, 8)), _input(g, (b, 3, 9, 8))], _CORRELATION_ATTRS))
CASES["correlation_backward"] = _node("correlation_backward", lambda g, b: (
    [_input(g, (b, 3, 9, 8)), _input(g, (b, 3, 9, 8)), _input(g, (b, 9, 5, 4))],
    _CORRELATION_ATTRS))

# grid_sample over volumes: x (b, 3, D, H, W), grid (b, 4, 5, 2, 3), dy (b, 3, 4, 5, 2)
_GRID3D = {"mode": "nearest", "padding_mode": "reflection", "align_corners": True}
CASES["grid_sample3d"] = _node("grid_sample3d", lambda g, b: (
    [_input(g, (b, 3, b + 2, 6, 5)), _input(g, (b, 4, 5, 2, 3))], _GRID3D))
CASES["grid_sample3d_backward_data"] = _node("grid_sample3d_backward_data", lambda g, b: (
    [_input(g, (b, 4, 5, 2, 3)), _input(g, (b, 3, 4, 5, 2))],
    {**_GRID3D, "input_dhw": (b + 2, 6, 5)}))
CASES["grid_sample3d_backward_grid"] = _node("grid_sample3d_backward_grid", lambda g, b: (
    [_input(g, (b, 3, b + 2, 6, 5)), _input(g, (b, 4, 5, 2, 3)), _input(g, (b, 3, 4, 5, 2))],
    _GRID3D))

# -- sorting and scans (ops/sorting.py), the sequence ops (ops/sequence.py) --------------------
CASES["sort"] = _node("sort", lambda g, b: ([_input(g, (b, 7))], {"descending": True}))
CASES["topk"] = _node("topk", lambda g, b: ([_input(g, (b, 7))], {"k": 3}))
for _name in ("cumsum", "cumprod"):
    CASES[_name] = _node(_name, lambda g, b, n=_name: (
        [_input(g, (b, 5, 3))], {"axis": 0, "exclusive": n == "cumsum", "reverse": True}))
CASES["cumprod_backward"] = _node("cumprod_backward", lambda g, b: (
    [_input(g, (b, 5)), _input(g, (b, 5))], {"axis": 0}))
CASES["embedding"] = _node("embedding", lambda g, b: (
    [_param(g, (10, 4)), _input(g, (b, 3), "int64")], {"padding_idx": 0}))
CASES["rms_norm"] = _node("rms_norm", lambda g, b: (
    [_input(g, (b, 3, 8)), _param(g, (8,))], {"normalized_shape": (8,), "eps": 1e-6}))
# attention (ops/attention.py): a named batch, 4 query heads over 2 key heads, a padding mask
_ATTENTION = {"scale": 0.5, "is_causal": True}


def _attention_inputs(g, b):
    return [_input(g, (b, 4, 5, 8)), _input(g, (b, 2, 7, 8)), _input(g, (b, 2, 7, 3)),
            _input(g, (b, 1, 1, 7), "bool")]


CASES["attention"] = _node("attention", lambda g, b: (_attention_inputs(g, b), _ATTENTION))
CASES["attention_backward"] = _node("attention_backward", lambda g, b: (
    [*_attention_inputs(g, b), _input(g, (b, 4, 5, 3)), _input(g, (b, 4, 5)),
     _input(g, (b, 4, 5, 3))], _ATTENTION))

# quantization (ops/quantize.py): per-channel parameters along a fixed axis of a named batch
_PER_CHANNEL = {"scales": (0.5, 0.25, 2.0), "zero_points": (1, 0, -3), "axis": 1}
CASES["quantize"] = _node("quantize", lambda g, b: (
    [_input(g, (b, 3, 4))], {**_PER_CHANNEL, "dtype": "int8"}))
CASES["dequantize"] = _node("dequantize", lambda g, b: (
    [g.input(f"x{len(g.inputs)}", (b, 3, 4), "uint8", quant.per_tensor(0.5, 128))],
    {"dtype": "float32"}))
CASES["as_quantized"] = _node("as_quantized", lambda g, b: (
    [_input(g, (b, 3, 4), "int8")], _PER_CHANNEL))
# the int8 compute ops (ops/quantized.py): a named batch, per-channel weights, an int32 bias
_REQUANT = {"out_dtype": "int8", "out_scale": 0.5, "out_zero_point": 0, "relu": True}


def _q8(g, shape, axis=None, dtype="uint8"):
    params = (quant.per_tensor(0.25, 128) if axis is None else
              quant.QuantParams((0.5,) * shape[axis], (0,) * shape[axis], axis))
    return g.input(f"x{len(g.inputs)}", shape, dtype, params)


CASES["quantized_conv2d"] = _node("quantized_conv2d", lambda g, b: (
    [_q8(g, (b, 4, 6, 5)), _q8(g, (6, 2, 3, 2), 0, "int8"), _input(g, (6,), "int32")],
    {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 1), "groups": 2, **_REQUANT}))
CASES["quantized_linear"] = _node("quantized_linear", lambda g, b: (
    [_q8(g, (b, 3, 5)), _q8(g, (4, 5), 0, "int8")], _REQUANT))
CASES["quantized_conv_transpose2d"] = _node("quantized_conv_transpose2d", lambda g, b: (
    [_q8(g, (b, 4, 5, 3)), _q8(g, (4, 3, 3, 2), None), _input(g, (6,), "int32")],
    {"stride": (2, 3), "padding": (1, 0), "output_padding": (1, 2), "dilation": (1, 1),
     "groups": 2, **_REQUANT}))
CASES["quantized_batch_matmul"] = _node("quantized_batch_matmul", lambda g, b: (
    [_q8(g, (b, 3, 5), 1, "int8"), _q8(g, (b, 5, 4)), _input(g, (3,), "int32")], _REQUANT))
CASES["quantized_add"] = _node("quantized_add", lambda g, b: (
    [_q8(g, (b, 3, 5)), _q8(g, (1, 5))], _REQUANT))
# fake quantization (ops/fake_quant.py): per channel along a fixed axis of a named batch
CASES["fake_quant"] = _node("fake_quant", lambda g, b: (
    [_input(g, (b, 3, 4)), _param(g, (3,)), _param(g, (3,))],
    {"qmin": -128, "qmax": 127, "axis": 1}))
# the int8 ops on prepacked weights (ops/quantized_pack.py): 6 outputs of 2 groups of 2x3x2
_PACKED = {"weight_shape": (6, 2, 3, 2), "weight_scales": (0.5,), "x_zero_point": 128,
           "x_dtype": "uint8"}


def _packed_weights(g, shape, groups=1):
    size = quantized_pack.packed_size(shape[0], math.prod(shape[1:]), groups)
    return _input(g, (size // 4,), "int32")


CASES["quantized_conv2d_packed"] = _node("quantized_conv2d_packed", lambda g, b: (
    [_q8(g, (b, 4, 6, 5)), _packed_weights(g, (6, 2, 3, 2), 2)],
    {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 1), "groups": 2, **_REQUANT,
     **_PACKED}))
CASES["quantized_linear_packed"] = _node("quantized_linear_packed", lambda g, b: (
    [_q8(g, (b, 3, 5)), _packed_weights(g, (4, 5))],
    {**_REQUANT, **_PACKED, "weight_shape": (4, 5)}))
# the transposed convolution's weight (4, 3, 3, 2) in 2 groups: 2 * 3 * 6 rows of 2 values;
# the batched matmul's a (1, 3, 5)
CASES["quantized_conv_transpose2d_packed"] = _node("quantized_conv_transpose2d_packed",
                                                   lambda g, b: (
    [_q8(g, (b, 4, 5, 3)), _input(g, (quantized_pack.packed_size(36, 2, 2) // 4,), "int32"),
     _input(g, (6,), "int32")],
    {"stride": (2, 3), "padding": (1, 0), "output_padding": (1, 2), "dilation": (1, 1),
     "groups": 2, **_REQUANT, **_PACKED, "weight_shape": (4, 3, 3, 2)}))
CASES["quantized_batch_matmul_packed"] = _node("quantized_batch_matmul_packed", lambda g, b: (
    [_q8(g, (b, 5, 4)), _packed_weights(g, (3, 5))],
    {**_REQUANT, **_PACKED, "weight_shape": (1, 3, 5)}))


# -- local_conv2d, region_restricted_conv (ops/local_conv.py): a named batch -------------------
# x (b, 4, 6, 5), 2 groups, a 3x2 window with padding (1, 0): 6x4 cells; ids int32
_LOCAL_WINDOW = {"stride": (1, 1), "padding": (1, 0), "dilation": (1, 1)}


def _local_inputs(g, b):
    return [_input(g, (b, 4, 6, 5)), _param(g, (2, 6, 4, 2, 3, 2, 3))]


def _region_inputs(g, b):
    return [_input(g, (b, 4, 6, 5)), _param(g, (2, 3, 2, 3, 2)),
            _input(g, (b, 6, 5), "int32"), _input(g, (b, 6, 4), "int32")]


CASES["local_conv2d"] = _node("local_conv2d", lambda g, b: (_local_inputs(g, b), _LOCAL_WINDOW))
CASES["local_conv2d_backward"] = _node("local_conv2d_backward", lambda g, b: (
    [*_local_inputs(g, b), _input(g, (b, 6, 6, 4))], _LOCAL_WINDOW))
CASES["region_restricted_conv"] = _node("region_restricted_conv",
                                        lambda g, b: (_region_inputs(g, b), _LOCAL_WINDOW))
CASES["region_restricted_conv_backward"] = _node("region_restricted_conv_backward", lambda g, b: (
    [*_region_inputs(g, b), _input(g, (b, 6, 6, 4))], _LOCAL_WINDOW))
# MegEngine's matinv and sliding windows (ops/linalg_inv.py, ops/sliding_window.py)
_SLIDING = {"kernel_size": (3, 2), "padding": (1, 0), "stride": (2, 1), "dilation": (1, 2)}
CASES["matinv"] = _node("matinv", lambda g, b: ([_input(g, (b, 3, 3))], {}))
CASES["sliding_window"] = _node("sliding_window", lambda g, b: (
    [_input(g, (b, 3, 6, 7))], _SLIDING))
CASES["sliding_window_transpose"] = _node("sliding_window_transpose", lambda g, b: (
    [_input(g, (b, 3, 3, 5, 3, 2))], {"output_size": (6, 7), **_SLIDING}))
# the collectives (ops/collective.py): a value summed over a group, and the planned pair
_GROUP = {"group": "0,1", "scale": 0.5}
CASES["all_reduce"] = _node("all_reduce", lambda g, b: ([_input(g, (b, 3))], _GROUP))
CASES["all_reduce_start"] = _node("all_reduce_start", lambda g, b: (
    [_input(g, (b, 3)), _input(g, (2, b))], _GROUP))
CASES["all_reduce_wait"] = _node("all_reduce_wait", lambda g, b: (
    [_input(g, (1,), "int64"), _input(g, (b, 3)), _input(g, (2, b))], _GROUP))


# -- where a rule cannot take a name: (op, make, what the error says) ---------------------------
REFUSED = {
    # reshape's -1 is found by exact division; a name divides only where its form shows it
    "reshape": (lambda g: ([_input(g, (BATCH, 3))], {"shape": (2, -1)}),
                "not known to be a multiple of 2"),
    # a slice bound past the end of a named axis would be clamped to a size not known yet,
    # and it can never lie inside it
    "slice": (lambda g: ([_input(g, (BATCH, 3))], {"starts": (0, 0), "stops": (BATCH + 1, 3),
                                                   "steps": (1, 1)}),
              "must be at least batch + 1 but never is"),
    # named sizes that can never agree
    "concat": (lambda g: ([_input(g, (BATCH, 3)), _input(g, (BATCH + 1, 2))], {"axis": 1}),
               "must be equal but never are"),
}
# the deform family's kernels read their channels and image sides as numbers
REFUSED["deform_im2col"] = (
    lambda g: ([_input(g, (1, 4, BATCH, 6)), _input(g, (1, 24, 4, 4)), _input(g, (1, 12, 4, 4))],
               _DEFORM_WINDOW), "needs its channels and sides as numbers")

# the local_conv family's kernels read their channels and image sides as numbers
REFUSED["local_conv2d"] = (
    lambda g: ([_input(g, (1, 4, BATCH, 5)), _param(g, (2, 6, 4, 2, 3, 2, 3))], _LOCAL_WINDOW),
    "needs its channels and sides as numbers")

# a pack of int8 weights (ops/quantized_pack.py) is laid out for their sizes in numbers
REFUSED["quantized_pack_weight"] = (
    lambda g: ([g.input("w", (2 * BATCH, 2, 3, 2), "int8", quant.per_tensor(0.5))],
               {"groups": 2, "x_zero_point": 128, "x_dtype": "uint8"}),
    "packs weights of a shape in numbers")
REFUSED["quantized_pack_transposed_weight"] = (
    lambda g: ([g.input("w", (2 * BATCH, 2, 3, 2), "int8", quant.per_tensor(0.5))],
               {"groups": 2, "x_zero_point": 128, "x_dtype": "uint8"}),
    "packs weights of a shape in numbers")
# ops whose every input is a weight of a shape in numbers: their case is a refusal above
WEIGHTS_ONLY = {"quantized_pack_weight", "quantized_pack_transposed_weight"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_with_a_named_dimension_matches_the_numbers(name):
    g = Graph()
    outputs = CASES[name](g, BATCH)
    (node,) = {v.node for v in outputs}
    assert any(t.symbolic for t in (*(v.type for v in node.inputs), *(v.type for v in outputs))) \
        or "batch" in str(node.attrs), f"the case of {name} holds no named dimension"
    compared = 0
    for n in BINDINGS:
        bindings = {"batch": n}
        try:
            g.constraints.check(bindings)
        except FeedError:
            continue  # the rule recorded a fact this size breaks (x[-3:] of 2 rows)
        want = [v.type for v in CASES[name](Graph(), n)]
        assert [substitute_type(v.type, bindings) for v in outputs] == want, (name, n)
        compared += 1
    assert compared >= 2, f"{name}: its facts ({g.constraints}) refuse most bindings"


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_rule_refuses_what_it_cannot_decide(name):
    make, why = REFUSED[name]
    g = Graph()
    inputs, attrs = make(g)
    with pytest.raises(OpError, match=name) as caught:
        g.add_node(name, tuple(inputs), attrs)
    assert why in str(caught.value) and "test_symbolic_rules.py" in str(caught.value)


def test_every_registered_op_has_a_case():
    missing = set(all_ops()) - set(CASES) - SOURCES - WEIGHTS_ONLY
    assert not missing, f"ops without a symbolic case: {sorted(missing)}"


@pytest.mark.parametrize("op, facts", [
    ("slice", ["batch - 2 >= 0"]),  # x[..., -3:] of batch + 1 columns
    ("batch_norm", []),  # 4*batch values per channel: always more than one
    ("concat", []),
    ("conv2d", []),  # (batch + 5)//2 + 1 rows are always at least 1
])
def test_facts_the_rules_record(op, facts):
    """A rule records what it cannot decide yet, naming the op, and nothing it can."""
    g = Graph()
    CASES[op](g, BATCH)
    assert [str(c) for c in g.constraints] == facts
    assert all(c.op == op and "test_symbolic_rules.py" in c.location for c in g.constraints)


def test_batch_statistics_of_a_named_batch_need_two_samples():
    g = Graph()
    g.add_node("batch_norm", (_input(g, (BATCH, 3)), _param(g, (3,)), _param(g, (3,))),
               {"training": True})
    assert [str(c) for c in g.constraints] == ["batch >= 2"]


def test_two_named_sizes_that_must_agree_are_one_fact():
    g = Graph()
    x, y = _input(g, (BATCH, 4)), _input(g, ("n", 4))
    g.add_node("concat", (x, y), {"axis": 1})
    g.add_node("matmul", (_input(g, (3, BATCH)), y), {})
    assert [str(c) for c in g.constraints] == ["batch == n"]
    assert next(iter(g.constraints)).op == "concat"
    with pytest.raises(FeedError, match="batch == n"):
        g.constraints.check({"batch": 1, "n": 8})
