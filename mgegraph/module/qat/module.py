"""``QATModule``: the base of quantization-aware training's modules (MegEngine's
``megengine.module.qat.module``). A QAT module computes as its float module, its weight and its
activation passed through the observer and fake quantizer its ``QConfig`` makes.

Design: ``from_float_module`` makes the QAT module share the float module's attributes (its
Parameters and Buffers themselves, no copy), so training it trains the model's weights; the
observers and fake quantizers are submodules, so their statistics live in the state dict. As
MegEngine's, a fake-quantized eager output carries its parameters (``Tensor.qparams``), which
the next layer's bias fake quantization reads (in a graph, they are the fake quantizer's).
"""
from __future__ import annotations

from ...nn.module import Module
from ...ops.builder import graph_of
from .qparams import fake_quant_bias

__all__ = ["QATModule"]


class QATModule(Module):
    """A module whose weight (``with_weight``) and output (``with_act``) are observed and
    fake-quantized as ``set_qconfig`` says."""

    with_weight = True
    with_act = True
    # none until set_qconfig makes them (class defaults: the float classes' __init__, which a QAT
    # class made directly runs, does not chain to this one's)
    act_observer = act_fake_quant = weight_observer = weight_fake_quant = None

    @classmethod
    def from_float_module(cls, float_module: Module) -> QATModule:
        """A QAT module computing as ``float_module``, sharing its parameters and state."""
        qat = cls.__new__(cls)
        vars(qat).update(vars(float_module))
        return qat

    def __repr__(self) -> str:
        return "QAT." + super().__repr__()

    def set_qconfig(self, qconfig) -> None:
        """Make the observers and fake quantizers ``qconfig`` says."""
        def made(make):
            return make() if make is not None else None
        if self.with_act:
            self.act_observer = made(qconfig.act_observer)
            self.act_fake_quant = made(qconfig.act_fake_quant)
        if self.with_weight:
            self.weight_observer = made(qconfig.weight_observer)
            self.weight_fake_quant = made(qconfig.weight_fake_quant)

    def _switch(self, enable: bool, *parts) -> None:
        for part in parts:
            if part is not None:
                part.enable() if enable else part.disable()

    def set_fake_quant(self, enable: bool) -> None:
        self._switch(enable, self.act_fake_quant if self.with_act else None,
                     self.weight_fake_quant if self.with_weight else None)

    def set_observer(self, enable: bool) -> None:
        self._switch(enable, self.act_observer if self.with_act else None,
                     self.weight_observer if self.with_weight else None)

    def _quantized(self, target, fake_quant, observer):
        qparams = None if observer is None else observer.observe(target)
        if fake_quant is not None:
            target = fake_quant(target, qparams)
            if hasattr(fake_quant, "get_qparams") and hasattr(target, "qparams"):
                qparams = fake_quant.get_qparams()  # a learned scale (LSQ, TQT)
        if qparams is not None and hasattr(target, "qparams"):  # an eager tensor carries them
            target.qparams.update(qparams)
        return target

    def apply_quant_weight(self, target, graph=None):
        """``target`` (the weight; a Parameter joins ``graph``, the input's) through the
        weight's observer and fake quantizer."""
        target = (graph or graph_of(target)).lift(target)
        return self._quantized(target, self.weight_fake_quant, self.weight_observer)

    def apply_quant_activation(self, target):
        """``target`` (an output) through the activation's observer and fake quantizer."""
        return self._quantized(target, self.act_fake_quant, self.act_observer)

    def apply_quant_bias(self, target, inp, w_qat):
        """``target`` (the bias) fake-quantized to qint32 in units of the input's scale times
        the weight's (``fake_quant_bias``), as the int8 layer will hold it, while both fake
        quantizers are on; else unchanged."""
        on = [q is not None and q.enabled for q in (self.act_fake_quant, self.weight_fake_quant)]
        if target is None or not all(on):
            return target
        return fake_quant_bias(graph_of(inp).lift(target), inp, w_qat)

    def _qparams(self, fake_quant, observer):
        if fake_quant is not None and hasattr(fake_quant, "get_qparams"):
            return fake_quant.get_qparams()
        return None if observer is None else observer.get_qparams()

    def get_weight_qparams(self):
        """The weight's parameters now (eager tensors), from its fake quantizer or observer."""
        return self._qparams(self.weight_fake_quant, self.weight_observer)

    def get_activation_qparams(self):
        """The output's parameters now (eager tensors)."""
        return self._qparams(self.act_fake_quant, self.act_observer)

    def _dtype(self, fake_quant, observer):
        holder = fake_quant if hasattr(fake_quant, "get_quantized_dtype") else observer
        return None if holder is None else holder.get_quantized_dtype()

    def get_weight_dtype(self):
        """The weight's quantized dtype (``mgegraph.dtype``)."""
        return self._dtype(self.weight_fake_quant, self.weight_observer)

    def get_activation_dtype(self):
        """The output's quantized dtype (``mgegraph.dtype``)."""
        return self._dtype(self.act_fake_quant, self.act_observer)
