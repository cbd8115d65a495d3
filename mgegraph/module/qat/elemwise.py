"""QAT ``Elemwise`` and ``Concat`` (MegEngine's ``module.qat.elemwise`` and
``module.qat.concat``): no weight, the output observed and fake-quantized."""
from __future__ import annotations

from ..concat import Concat as FloatConcat
from ..elemwise import Elemwise as FloatElemwise
from .module import QATModule

__all__ = ["Concat", "Elemwise"]


class Elemwise(FloatElemwise, QATModule):
    with_weight = False

    def forward(self, *inps):
        return self.apply_quant_activation(super().forward(*inps))


class Concat(FloatConcat, QATModule):
    with_weight = False

    def forward(self, inps, axis: int = 0):
        return self.apply_quant_activation(super().forward(inps, axis))
