"""``QuantizedModule``: the base of the int8 layers (MegEngine's
``megengine.module.quantized.module``), made from a trained QAT module by ``from_qat_module``;
inference only."""
from __future__ import annotations

import numpy as np

from ...dtype import get_scale, get_zero_point
from ...ir.errors import GraphError
from ...nn.module import Buffer, Module
from ...ops.builder import graph_of
from ...ops.quantize import as_quantized, quantize
from ..qat.conv_bn import BnFolded

__all__ = ["QuantizedModule"]


class QuantizedModule(Module):
    """An int8 layer: its weights are quantized Buffers, its output quantized with the scale and
    zero point its QAT module's activation observer found (``output_dtype``)."""

    def __repr__(self) -> str:
        return "Quantized." + super().__repr__()

    def _set_output(self, qat) -> None:
        dtype = qat.get_activation_dtype()
        if dtype is None:
            raise GraphError(f"{type(qat).__name__} has no activation observer or fake "
                             f"quantizer to take the output's scale from")
        self.output_dtype = dtype

    def _take_weights(self, qat, layer: str):
        """This layer's int8 weight, its scale and zero point, and its float bias, from QAT
        module ``qat``: a ``BnFolded`` one's folded weight and bias (its inner layer, attribute
        ``layer``, holds the geometry, which is returned), else its own (``qat`` returned)."""
        if isinstance(qat, BnFolded):
            geometry = getattr(qat, layer)
            _, weight, bias = qat.fold(graph_of(geometry.weight))
        else:
            weight, bias, geometry = qat.weight, qat.bias, qat
        self.training = False
        self.weight, self.weight_scale, self.weight_zero_point = quantized_weight(
            weight, qat.get_weight_qparams())
        self.bias = None if bias is None else Buffer(np.asarray(bias, np.float32))
        self._set_output(qat)
        return geometry

    def int8_operands(self, inp) -> tuple:
        """(this layer's int8 weight as a value of ``inp``'s graph, its float bias in int32 units
        of input scale x weight scale, or None) for int8 input ``inp``, quantized per tensor."""
        scale = input_scale(inp, type(self).__name__)
        g = inp.graph
        weight = as_quantized(g.lift(self.weight), self.weight_scale, self.weight_zero_point)
        return weight, int32_bias(g, self.bias, scale * self.weight_scale)

    def requantized(self, real):
        """Float ``real`` quantized as this layer's output."""
        dtype = self.output_dtype
        return quantize(real, get_scale(dtype), get_zero_point(dtype), dtype.str)

    @property
    def out_params(self) -> dict:
        """The requantisation arguments of the int8 ops for this layer's output."""
        dtype = self.output_dtype
        return {"out_dtype": np.dtype(dtype.str).name, "out_scale": get_scale(dtype),
                "out_zero_point": get_zero_point(dtype)}


def input_scale(inp, owner: str) -> float:
    """The per-tensor scale of quantized ``inp``, or a GraphError naming ``owner``."""
    quant = inp.type.quant
    if quant is None or quant.per_channel:
        raise GraphError(f"{owner}: takes a value quantized per tensor (from a QuantStub or an "
                         f"int8 layer), got {inp.type}")
    return quant.scale


def int32_bias(g, bias, scale: float):
    """Float ``bias`` (a Buffer) in int32 units of ``scale``."""
    return None if bias is None else quantize(g.lift(bias), scale, 0, "int32")


def quantized_weight(weight, qparams) -> tuple:
    """(the integers as a Buffer, their scale) of float ``weight`` quantized with a QAT
    module's weight parameters: ``clip(rint(w / s) + z, qmin, qmax)`` in float32, the integers
    its fake quantizer stood for (a narrow range's -128 is never made)."""
    meta = qparams.dtype_meta
    if meta.cname is None:
        raise GraphError(f"weights fake-quantized to {meta.name} have no int8 form (no "
                         f"{meta.name} storage)")
    scale = np.float32(np.asarray(qparams.scale))
    zero_point = 0.0 if qparams.zero_point is None else float(np.asarray(qparams.zero_point))
    w = np.asarray(weight, np.float32)
    q = np.clip(np.rint(w / scale) + zero_point, meta.qmin, meta.qmax)
    return Buffer(q.astype(meta.np_dtype_str)), float(scale), int(zero_point)
