"""``QConfig`` (MegEngine's ``megengine.quantization.qconfig``): how a QAT module observes and
fake-quantizes its weight and its activation, as four constructors (classes or
``functools.partial``s), and MegEngine's predefined configurations.

Weights use ``qint8_narrow`` ([-127, 127]): a sum of products of two -128s would overflow
int16 accumulators, MegEngine's reason. The ``reduce_range`` configurations use ``qint7_narrow``
([-63, 63]) for weights, as ONNX Runtime's and PyTorch's ``reduce_range`` do on x86 without
VNNI: a little accuracy for AVX2's vpmaddubsw int8 tile, exact on such weights (and only where
the packed weights' bytes prove it, so any int8 weights still run, on the widening tile). The
4-bit configuration (``ema_lowbit_fakequant_qconfig``) fake-quantizes to [-8, 7] for training
only: no 4-bit storage, so ``quantize`` refuses it.

>>> quantize_qat(model, qconfig=ema_fakequant_qconfig)
"""
from __future__ import annotations

from collections import namedtuple
from functools import partial

from ..nn.module import Module
from .fake_quant import LSQ, TQT, FakeQuantize
from .observer import (
    ExponentialMovingAverageObserver,
    HistogramObserver,
    MinMaxObserver,
    PassiveObserver,
)

__all__ = ["QConfig", "calibration_qconfig", "calibration_reduce_range_qconfig",
           "easyquant_qconfig", "ema_fakequant_qconfig", "ema_fakequant_reduce_range_qconfig",
           "ema_lowbit_fakequant_qconfig", "lsq_qconfig", "min_max_fakequant_qconfig",
           "passive_qconfig", "tqt_qconfig"]


class QConfig(namedtuple("QConfig", ["weight_observer", "act_observer", "weight_fake_quant",
                                     "act_fake_quant"])):
    """Constructors (not instances) of the weight's and the activation's observer and fake
    quantizer; None for none."""

    def __new__(cls, weight_observer, act_observer, weight_fake_quant, act_fake_quant):
        if isinstance(act_observer, Module) or isinstance(weight_observer, Module):
            # MegEngine's ValueError
            raise ValueError("QConfig must not receive observer instance, "  # noqa: TRY004
                             "please pass observer class generator using "
                             "`partial(Observer, ...)` instead")
        return super().__new__(cls, weight_observer, act_observer, weight_fake_quant,
                               act_fake_quant)


min_max_fakequant_qconfig = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint8_narrow"),
    act_observer=partial(MinMaxObserver, dtype="qint8"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint8_narrow"),
    act_fake_quant=partial(FakeQuantize, dtype="qint8"),
)
ema_fakequant_qconfig = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint8_narrow"),
    act_observer=partial(ExponentialMovingAverageObserver, dtype="qint8"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint8_narrow"),
    act_fake_quant=partial(FakeQuantize, dtype="qint8"),
)
ema_lowbit_fakequant_qconfig = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint4"),
    act_observer=partial(ExponentialMovingAverageObserver, dtype="qint4"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint4"),
    act_fake_quant=partial(FakeQuantize, dtype="qint4"),
)
# post-training calibration: observers only, a histogram's searched range for activations
calibration_qconfig = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint8_narrow"),
    act_observer=partial(HistogramObserver, dtype="qint8"),
    weight_fake_quant=None,
    act_fake_quant=None,
)
# 7-bit weights (qint7_narrow), 8-bit activations: AVX2's vpmaddubsw int8 tile
ema_fakequant_reduce_range_qconfig = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint7_narrow"),
    act_observer=partial(ExponentialMovingAverageObserver, dtype="qint8"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint7_narrow"),
    act_fake_quant=partial(FakeQuantize, dtype="qint8"),
)
calibration_reduce_range_qconfig = QConfig(
    weight_observer=partial(MinMaxObserver, dtype="qint7_narrow"),
    act_observer=partial(HistogramObserver, dtype="qint8"),
    weight_fake_quant=None,
    act_fake_quant=None,
)
passive_qconfig = QConfig(
    weight_observer=partial(PassiveObserver, dtype="qint8_narrow"),
    act_observer=partial(PassiveObserver, dtype="qint8"),
    weight_fake_quant=partial(FakeQuantize, dtype="qint8_narrow"),
    act_fake_quant=partial(FakeQuantize, dtype="qint8"),
)
easyquant_qconfig = passive_qconfig
# learned step sizes (LSQ) started from min-max observers' parameters (reset_qconfig)
lsq_qconfig = QConfig(
    weight_observer=None,
    act_observer=None,
    weight_fake_quant=partial(LSQ, dtype="qint8_narrow"),
    act_fake_quant=partial(LSQ, dtype="qint8"),
)
# learned base-2 scales (TQT), started from observers' parameters (reset_qconfig)
tqt_qconfig = QConfig(
    weight_observer=None,
    act_observer=None,
    weight_fake_quant=partial(TQT, dtype="qint8_narrow"),
    act_fake_quant=partial(TQT, dtype="qint8"),
)
