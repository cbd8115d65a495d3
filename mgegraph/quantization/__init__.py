"""Quantization, MegEngine's way (``megengine.quantization``): observers find scales, fake
quantizers train with them, ``quantize_qat`` makes a float model's QAT form and ``quantize`` its
int8 form (``mgegraph.module.qat``, ``mgegraph.module.quantized``).

>>> import mgegraph.quantization as Q
>>> Q.quantize_qat(model, qconfig=Q.ema_fakequant_qconfig)   # then train a few epochs
>>> Q.quantize(model.eval())                                  # int8 layers
"""
from .fake_quant import LSQ, TQT, FakeQuantize
from .observer import (
    ExponentialMovingAverageObserver,
    HistogramObserver,
    MinMaxObserver,
    Observer,
    PassiveObserver,
    SyncExponentialMovingAverageObserver,
    SyncMinMaxObserver,
)
from .qconfig import (
    QConfig,
    calibration_qconfig,
    calibration_reduce_range_qconfig,
    easyquant_qconfig,
    ema_fakequant_qconfig,
    ema_fakequant_reduce_range_qconfig,
    ema_lowbit_fakequant_qconfig,
    lsq_qconfig,
    min_max_fakequant_qconfig,
    passive_qconfig,
    tqt_qconfig,
)
from .quantize import (
    disable_fake_quant,
    disable_observer,
    enable_fake_quant,
    enable_observer,
    propagate_qconfig,
    quantize,
    quantize_qat,
    reset_qconfig,
)
from .utils import LSQParams, QParams, QuantMode, create_qparams, fake_quant_bias, fake_quant_tensor

__all__ = [
    "LSQ",
    "TQT",
    "ExponentialMovingAverageObserver",
    "FakeQuantize",
    "HistogramObserver",
    "LSQParams",
    "MinMaxObserver",
    "Observer",
    "PassiveObserver",
    "SyncExponentialMovingAverageObserver",
    "SyncMinMaxObserver",
    "QConfig",
    "QParams",
    "QuantMode",
    "calibration_qconfig",
    "calibration_reduce_range_qconfig",
    "create_qparams",
    "disable_fake_quant",
    "disable_observer",
    "easyquant_qconfig",
    "ema_fakequant_qconfig",
    "ema_fakequant_reduce_range_qconfig",
    "ema_lowbit_fakequant_qconfig",
    "enable_fake_quant",
    "enable_observer",
    "fake_quant_bias",
    "fake_quant_tensor",
    "lsq_qconfig",
    "min_max_fakequant_qconfig",
    "passive_qconfig",
    "propagate_qconfig",
    "quantize",
    "quantize_qat",
    "reset_qconfig",
    "tqt_qconfig",
]
