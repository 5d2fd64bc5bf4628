"""Exponential moving average of the generator, used for evaluation and samples."""

from __future__ import annotations

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel


def make_ema(model: nn.Module, decay: float = 0.999) -> AveragedModel:
    """torch's AveragedModel with an EMA that warms up: the decay after n updates is
    min(decay, (1 + n) / (10 + n)), so a short run is not dominated by the initial weights
    (with a fixed 0.999, 60% of the average is still the first step's weights after 500 steps).

    Call ``.update_parameters(model)`` after each step. Buffers (batch-norm statistics) are
    averaged too, so the EMA copy can run in eval mode.
    """
    if not 0.0 <= decay < 1.0:
        raise ValueError(f"EMA decay must be in [0, 1), got {decay}")

    def average(
        averaged: torch.Tensor, current: torch.Tensor, updates: torch.Tensor
    ) -> torch.Tensor:
        n = float(updates)
        rate = min(decay, (1.0 + n) / (10.0 + n))
        return rate * averaged + (1.0 - rate) * current

    return AveragedModel(model, avg_fn=average, use_buffers=True)
