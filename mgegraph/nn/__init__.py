"""Modules, layers, initialisations and losses."""
from . import init
from .activation import (CELU, ELU, SELU, Hardshrink, Hardsigmoid, Hardswish, Hardtanh, Identity,
                         LeakyReLU, LogSigmoid, LogSoftmax, Mish, PReLU, ReLU6, SiLU, Softmax,
                         Softplus, Softshrink, Softsign)
from .conv import (
    Conv1d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
    DeformableConv2d,
)
from .layers import (GELU, AdaptiveAvgPool2d, AvgPool2d, Conv2d, Dropout, Embedding, Flatten,
                     LayerNorm, Linear, MaxPool2d, ReLU, Sequential, Sigmoid, Tanh)
from .losses import (binary_cross_entropy_with_logits, cross_entropy, l1_loss, mse_loss,
                     nll_loss)
from .module import Buffer, Module, Parameter
from .norm import (BatchNorm1d, BatchNorm2d, GroupNorm, InstanceNorm, InstanceNorm2d,
                   LocalResponseNorm)
from .pooling import (AdaptiveMaxPool2d, AvgPool1d, GlobalAvgPool2d, GlobalMaxPool2d, LPPool1d,
                      LPPool2d, MaxPool1d, MaxUnpool2d)
from .resample import (ConstantPad2d, PixelShuffle, PixelUnshuffle, ReflectionPad2d,
                       ReplicationPad2d, Upsample, ZeroPad2d)

__all__ = ["Module", "Parameter", "Buffer", "Sequential", "Linear", "Conv2d", "BatchNorm2d",
           "LayerNorm", "Embedding", "Dropout", "ReLU", "GELU", "Sigmoid", "Tanh", "MaxPool2d",
           "AvgPool2d", "AdaptiveAvgPool2d", "Flatten", "init", "cross_entropy", "nll_loss",
           "mse_loss", "l1_loss", "binary_cross_entropy_with_logits"]
# the activation modules (nn/activation.py)
__all__ += ["CELU", "ELU", "SELU", "Hardshrink", "Hardsigmoid", "Hardswish", "Hardtanh",
            "Identity", "LeakyReLU", "LogSigmoid", "LogSoftmax", "Mish", "PReLU", "ReLU6", "SiLU",
            "Softmax", "Softplus", "Softshrink", "Softsign"]
# convolutions other than Conv2d (nn/conv.py)
__all__ += ["Conv1d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"]
# MegEngine's deformable convolution layer (nn/conv.py)
__all__ += ["DeformableConv2d"]
# normalisation layers (nn/norm.py; BatchNorm2d lived in layers.py before)
__all__ += ["BatchNorm1d", "GroupNorm", "InstanceNorm", "InstanceNorm2d", "LocalResponseNorm"]
# pooling modules (nn/pooling.py)
__all__ += ["AdaptiveMaxPool2d", "AvgPool1d", "GlobalAvgPool2d", "GlobalMaxPool2d", "LPPool1d",
            "LPPool2d", "MaxPool1d", "MaxUnpool2d"]
# resampling and padding (nn/resample.py)
__all__ += ["ConstantPad2d", "PixelShuffle", "PixelUnshuffle", "ReflectionPad2d",
            "ReplicationPad2d", "Upsample", "ZeroPad2d"]
# RMS norm (nn/norm.py), for sequence models
from .norm import RMSNorm

__all__ += ["RMSNorm"]
# multi-head attention (nn/attention.py), MegEngine's MultiHeadAttn under both its names
from .attention import MultiHeadAttention, MultiHeadAttn

__all__ += ["MultiHeadAttention", "MultiHeadAttn"]
# MegEngine's Elemwise module and SyncBatchNorm (statistics over a distributed group)
# (nn/elemwise.py, nn/sync_norm.py)
from .elemwise import Elemwise
from .sync_norm import SyncBatchNorm

__all__ += ["Elemwise", "SyncBatchNorm"]
# recurrent layers and cells (nn/rnn.py)
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNCell

__all__ += ["GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNCell"]
# MegEngine's sliding-window layers (nn/sliding_window.py)
from .sliding_window import SlidingWindow, SlidingWindowTranspose

__all__ += ["SlidingWindow", "SlidingWindowTranspose"]
# MegEngine's locally connected and region-restricted convolution layers (nn/local_conv.py)
from .local_conv import LocalConv2d, RegionRestrictedConv

__all__ += ["LocalConv2d", "RegionRestrictedConv"]
