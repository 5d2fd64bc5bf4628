"""Exponential moving average of the generator, used for evaluation and samples."""

from __future__ import annotations

from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


def make_ema(model: nn.Module, decay: float = 0.999) -> AveragedModel:
    """torch's AveragedModel with EMA averaging; call ``.update_parameters(model)`` after a step.

    Buffers (batch-norm statistics) are averaged too, so the EMA copy can run in eval mode.
    """
    if not 0.0 <= decay < 1.0:
        raise ValueError(f"EMA decay must be in [0, 1), got {decay}")
    return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)
