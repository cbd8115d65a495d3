"""MegEngine's ``megengine.module.init`` path: its initialisers, from ``nn.init``."""
from ..nn.init import (  # noqa: F401
    calculate_correct_fan,
    calculate_fan_in_and_fan_out,
    calculate_gain,
    fill_,
    msra_normal_,
    msra_uniform_,
    normal_,
    ones_,
    uniform_,
    xavier_normal_,
    xavier_uniform_,
    zeros_,
)
