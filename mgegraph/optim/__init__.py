"""Optimisers and learning-rate schedules."""
from .lr_scheduler import CosineAnnealingLR, LinearWarmup, LRScheduler, StepLR
from .optimizer import SGD, Adam, AdamW, Optimizer

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "LRScheduler", "StepLR", "CosineAnnealingLR",
           "LinearWarmup"]
