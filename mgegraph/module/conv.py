"""MegEngine's ``megengine.module.conv`` path: the convolutions."""
from ..nn.conv import (  # noqa: F401
    Conv1d,
    Conv3d,
    ConvTranspose2d,
    ConvTranspose3d,
    DeformableConv2d,
)
from ..nn.layers import Conv2d  # noqa: F401
from ..nn.local_conv import LocalConv2d, RegionRestrictedConv  # noqa: F401
from .conv_bn import ConvRelu2d  # noqa: F401  (MegEngine keeps it in module.conv)
from .conv_transpose_bn import ConvTransposeRelu2d  # noqa: F401  (likewise)
