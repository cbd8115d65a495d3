"""``QuantizedModule``: the base of the int8 layers (MegEngine's
``megengine.module.quantized.module``), made from a trained QAT module by ``from_qat_module``;
inference only."""
from __future__ import annotations

import numpy as np

from ...dtype import get_scale, get_zero_point
from ...ir.errors import GraphError
from ...nn.module import Buffer, Module

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

    @property
    def out_params(self) -> dict:
        """The requantisation arguments of the int8 ops for this layer's output."""
        dtype = self.output_dtype
        return {"out_dtype": np.dtype(dtype.str).name, "out_scale": get_scale(dtype),
                "out_zero_point": get_zero_point(dtype)}


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
