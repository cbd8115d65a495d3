"""MegEngine's ``megengine.module.activation`` path: the activation modules."""
from ..nn.activation import LeakyReLU, PReLU, SiLU, Softmax  # noqa: F401
from ..nn.layers import GELU, ReLU, Sigmoid  # noqa: F401
