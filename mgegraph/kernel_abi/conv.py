"""The Conv parameter block of conv2d and its two backward ops, read by _kernels/conv.pyx and
csrc_cuda/conv.cu. The backward ops, which compute x or w instead, walk the same layouts, so they
take the same parameters.

The geometry and the epilogue come first; the fields from ``path`` on say how the CPU runs the
convolution (which of its ways, its instruction set, threads, a transposed GEMM, packed
weights): conv.cu reads the fields before them alone. A device's ``launch`` fills the block
(the CPU's: _kernels/lowering/conv.py).
"""
from __future__ import annotations

from ..backend import Launch
from ..ops.conv import conv_geometry
from ..ops.registry import FLOAT_DTYPES
from .layout import pack
from .matmul import activation_code

FIELDS = ("batch", "cin", "h", "w", "cout", "oh", "ow", "kh", "kw", "sh", "sw", "ph", "pw", "dh",
          "dw", "groups", "has_bias", "path", "activation", "isa", "threads", "transposed",
          "packed")
OPS = ("conv2d", "conv2d_backward_data", "conv2d_backward_filter")


def geometry(x, w, y, attrs) -> dict[str, int]:
    """The geometry fields of convolving ``x`` by ``w`` into ``y`` (types)."""
    oc, _, (kh, kw), stride, padding, dilation = conv_geometry((x, w), attrs)
    return dict(batch=x.shape[0], cin=x.shape[1], h=x.shape[2], w=x.shape[3], cout=oc,
                oh=y.shape[2], ow=y.shape[3], kh=kh, kw=kw, sh=stride[0], sw=stride[1],
                ph=padding[0], pw=padding[1], dh=dilation[0], dw=dilation[1],
                groups=attrs["groups"])


def plain_launch(op, x, w, y, attrs, has_bias=False, activation=0) -> Launch:
    """The block of a device whose kernels read the geometry and epilogue alone: the CPU's
    fields at their plainest (the direct path, one thread), no workspace."""
    return Launch(pack(FIELDS, **geometry(x, w, y, attrs), has_bias=has_bias,
                       activation=activation, path=0, isa=0, threads=1, transposed=0, packed=0))


def _lowerings(launch):
    """Node -> ``launch(op, x, w, y, attrs, has_bias, activation)`` of the convolution of x by
    w into y (activation: ACTIVATION_CODES' code), for each of the three ops."""
    def conv2d(node):
        x, w = node.inputs[:2]
        return launch("conv2d", x.type, w.type, node.outputs[0].type, node.attr,
                      len(node.inputs) == 3, activation_code(node.attr))

    def backward_data(node):  # its bias: the epilogue pass's (bufs w, dy, [bias,] dx)
        w, dy = node.inputs[:2]
        return launch(node.op.name, node.outputs[0].type, w.type, dy.type, node.attr,
                      len(node.inputs) == 3)

    def backward_filter(node):
        x, dy = node.inputs
        return launch(node.op.name, x.type, node.outputs[0].type, dy.type, node.attr)
    return dict(zip(OPS, (conv2d, backward_data, backward_filter)))


def implement(table, launch=plain_launch, candidates=None) -> None:
    """Register conv2d and its gradients on ``table``; ``launch(op, x, w, y, attrs, has_bias,
    activation)`` (types of the convolution of x by w into y) gives the device's block, and
    ``candidates`` (the same arguments) the tuple of every way the device can run it
    (``OpImpl.candidates``), where it has several."""
    ways = _lowerings(candidates) if candidates is not None else {}
    for op, lower in _lowerings(launch).items():
        table.implement(op, kernel=op, dtypes=FLOAT_DTYPES, lower=lower, candidates=ways.get(op))
