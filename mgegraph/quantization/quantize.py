"""From a float model to its QAT form and to its int8 form (MegEngine's
``megengine.quantization.quantize``): ``quantize_qat`` swaps each quantisable module for its QAT
module and sets its ``QConfig``; ``quantize`` swaps each QAT module for its int8 layer;
``enable_observer``, ``disable_fake_quant`` and the others switch a model's parts.

Design: what maps to what is one table (``QUANTISABLE``: float class -> QAT class -> int8
class), which ``mapping=`` extends. The swap walks the module's attributes (lists, tuples and
dicts too) and replaces the outermost quantisable modules, leaving their inside as it is (a
ConvBn2d's conv and bn are the QAT module's own).

>>> qat = quantize_qat(model, qconfig=ema_fakequant_qconfig)   # train, or calibrate
>>> int8 = quantize(qat.eval())
"""
from __future__ import annotations

from copy import deepcopy

from ..ir.errors import GraphError
from ..module import batch_matmul_activation as float_bmm
from ..module import concat as float_concat
from ..module import conv_bn as float_conv_bn
from ..module import conv_transpose_bn as float_conv_transpose_bn
from ..module import elemwise as float_elemwise
from ..module import linear as float_linear
from ..module import linear_bn as float_linear_bn
from ..module import qat as QAT
from ..module import quant_dequant as float_stubs
from ..module import quantized as Quantized
from ..nn.conv import ConvTranspose2d as FloatConvTranspose2d
from ..nn.layers import Conv2d as FloatConv2d
from ..nn.layers import Linear as FloatLinear
from ..nn.module import Module
from .qconfig import QConfig, ema_fakequant_qconfig

__all__ = ["QUANTISABLE", "disable_fake_quant", "disable_observer", "enable_fake_quant",
           "enable_observer", "propagate_qconfig", "quantize", "quantize_qat", "reset_qconfig"]

# float module -> (its QAT module, its int8 layer)
QUANTISABLE = {
    FloatConv2d: (QAT.Conv2d, Quantized.Conv2d),
    float_conv_bn.ConvRelu2d: (QAT.ConvRelu2d, Quantized.ConvRelu2d),
    float_conv_bn.ConvBn2d: (QAT.ConvBn2d, Quantized.ConvBn2d),
    float_conv_bn.ConvBnRelu2d: (QAT.ConvBnRelu2d, Quantized.ConvBnRelu2d),
    FloatConvTranspose2d: (QAT.ConvTranspose2d, Quantized.ConvTranspose2d),
    float_conv_transpose_bn.ConvTransposeRelu2d: (QAT.ConvTransposeRelu2d,
                                                  Quantized.ConvTransposeRelu2d),
    float_conv_transpose_bn.ConvTransposeBn2d: (QAT.ConvTransposeBn2d,
                                                Quantized.ConvTransposeBn2d),
    float_conv_transpose_bn.ConvTransposeBnRelu2d: (QAT.ConvTransposeBnRelu2d,
                                                    Quantized.ConvTransposeBnRelu2d),
    FloatLinear: (QAT.Linear, Quantized.Linear),
    float_linear.LinearRelu: (QAT.LinearRelu, Quantized.LinearRelu),
    float_linear_bn.LinearBn1d: (QAT.LinearBn1d, Quantized.LinearBn1d),
    float_linear_bn.LinearBnRelu1d: (QAT.LinearBnRelu1d, Quantized.LinearBnRelu1d),
    float_bmm.BatchMatMulActivation: (QAT.BatchMatMulActivation,
                                      Quantized.BatchMatMulActivation),
    float_elemwise.Elemwise: (QAT.Elemwise, Quantized.Elemwise),
    float_concat.Concat: (QAT.Concat, Quantized.Concat),
    float_stubs.QuantStub: (QAT.QuantStub, Quantized.QuantStub),
    float_stubs.DequantStub: (QAT.DequantStub, Quantized.DequantStub),
}


def _swapped(value, convert, seen: set):
    """``value`` with the outermost modules ``convert`` replaces replaced (containers rebuilt
    only where something inside changed)."""
    if isinstance(value, Module):
        new = convert(value)
        if new is not None:
            return new
        _swap_inside(value, convert, seen)
        return value
    if isinstance(value, (list, tuple)):
        items = [_swapped(v, convert, seen) for v in value]
        changed = any(a is not b for a, b in zip(items, value))
        return type(value)(items) if changed and isinstance(value, tuple) else (
            items if changed else value)
    if isinstance(value, dict):
        items = {k: _swapped(v, convert, seen) for k, v in value.items()}
        return items if any(items[k] is not value[k] for k in value) else value
    return value


def _swap_inside(module: Module, convert, seen: set) -> None:
    if id(module) in seen:
        return
    seen.add(id(module))
    for key, value in list(vars(module).items()):
        new = _swapped(value, convert, seen)
        if new is not value:
            setattr(module, key, new)


def _convert_root(module, convert):
    """``module`` with its quantisable parts converted: the root itself too, when it is one."""
    new = convert(module)
    if new is not None:
        return new
    _swap_inside(module, convert, set())
    return module


def quantize_qat(module: Module, inplace: bool = True, qconfig: QConfig = ema_fakequant_qconfig,
                 mapping: dict | None = None) -> Module:
    """``module`` with every quantisable float module (``QUANTISABLE``, and ``mapping``'s float
    class -> QAT class) swapped for its QAT module, all set to ``qconfig``. Modules marked
    ``quantize_disabled = True`` stay float."""
    if not isinstance(inplace, bool) or not isinstance(qconfig, QConfig):
        raise GraphError(f"quantize_qat: inplace must be a bool and qconfig a QConfig, got "
                         f"{inplace!r} and {type(qconfig).__name__}")
    table = {f: q for f, (q, _) in QUANTISABLE.items()} | dict(mapping or {})
    module = module if inplace else deepcopy(module)

    def convert(m):
        make = table.get(type(m))
        if make is None or getattr(m, "quantize_disabled", False):
            return None
        return make.from_float_module(m)
    module = _convert_root(module, convert)
    propagate_qconfig(module, qconfig)
    return module


def quantize(module: Module, inplace: bool = True, mapping: dict | None = None) -> Module:
    """``module`` with every QAT module swapped for its int8 layer (``QUANTISABLE``, and
    ``mapping``'s QAT class -> int8 class), each taking its scales from the QAT module's
    observers and fake quantizers as they are now."""
    table = {q: i for q, i in QUANTISABLE.values()} | dict(mapping or {})
    module = module if inplace else deepcopy(module)

    def convert(m):
        make = table.get(type(m))
        return None if make is None else make.from_qat_module(m)
    return _convert_root(module, convert)


def _each_qat(module: Module, method: str, *args) -> None:
    for m in module.modules():
        if isinstance(m, QAT.QATModule):
            getattr(m, method)(*args)


def propagate_qconfig(module: Module, qconfig: QConfig) -> None:
    """Set ``qconfig`` on every QAT module of ``module`` (new observers and fake quantizers)."""
    _each_qat(module, "set_qconfig", qconfig)


def reset_qconfig(module: Module, qconfig: QConfig, inplace: bool = True) -> Module:
    """New observers and fake quantizers from ``qconfig``, each started from the parameters
    the old ones found (``set_qparams`` where they have it: LSQ, PassiveObserver)."""
    module = module if inplace else deepcopy(module)

    def made(make, qparams):
        part = make() if make is not None else None
        if part is not None and qparams is not None and hasattr(part, "set_qparams"):
            part.set_qparams(qparams)
        return part
    for m in module.modules():
        if not isinstance(m, QAT.QATModule):
            continue
        if m.with_weight:
            qparams = m.get_weight_qparams()
            m.weight_observer = made(qconfig.weight_observer, qparams)
            m.weight_fake_quant = made(qconfig.weight_fake_quant, qparams)
        if m.with_act:
            qparams = m.get_activation_qparams()
            m.act_observer = made(qconfig.act_observer, qparams)
            m.act_fake_quant = made(qconfig.act_fake_quant, qparams)
    return module


def enable_fake_quant(module: Module) -> None:
    _each_qat(module, "set_fake_quant", True)


def disable_fake_quant(module: Module) -> None:
    _each_qat(module, "set_fake_quant", False)


def enable_observer(module: Module) -> None:
    _each_qat(module, "set_observer", True)


def disable_observer(module: Module) -> None:
    _each_qat(module, "set_observer", False)
