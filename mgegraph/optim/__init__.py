"""Optimisers, learning-rate schedules and gradient clipping (MegEngine's names)."""
from .adagrad import Adadelta, Adagrad
from .adam import Adam, AdamW
from .clip_grad import clip_grad_norm, clip_grad_value
from .lamb import LAMB
from .lr_scheduler import CosineAnnealingLR, LinearWarmup, LRScheduler, MultiStepLR, StepLR
from .optimizer import Optimizer, required
from .sgd import SGD

__all__ = ["LAMB", "SGD", "Adadelta", "Adagrad", "Adam", "AdamW", "CosineAnnealingLR",
           "LRScheduler", "LinearWarmup", "MultiStepLR", "Optimizer", "StepLR", "clip_grad_norm",
           "clip_grad_value", "required"]
