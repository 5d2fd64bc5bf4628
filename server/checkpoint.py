"""Server checkpoints: everything needed to resume a run so that epsilon never goes back.

One file every N steps holds the step, the run's trainer state (models, optimizers, RNG states)
and the client sampler's state. The privacy ledger is not in it: it goes in its own file before
and after *every* step's messages (``FederatedRun.save_privacy_state``), because queries sent
after the last checkpoint were paid for even though a resumed run repeats those steps. The
sampler's state is kept only when sampling is reproducible by choice (a fixed sampling seed):
secret sampling must stay unpredictable, so a resumed run draws a fresh secret seed. Files are
replaced atomically: a crash mid-write leaves the previous version readable.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedgs.training.run_dir import write_atomic

CHECKPOINT_NAME = "checkpoint.pt"
LEDGER_NAME = "ledger.json"  # GS-WGAN's per-client ledger, saved every step


def save_checkpoint(
    run_dir: Path, step: int, trainer: dict[str, Any], sampler: dict[str, Any] | None
) -> None:
    """The one checkpoint body of every run: ``{"step", "trainer", "sampler"}``."""
    buffer = io.BytesIO()
    torch.save({"step": step, "trainer": trainer, "sampler": sampler}, buffer)
    write_atomic(Path(run_dir) / CHECKPOINT_NAME, buffer.getvalue())


def load_checkpoint(run_dir: Path) -> tuple[int, dict[str, Any], dict[str, Any] | None] | None:
    """(step, trainer state, sampler state) of the run's checkpoint; None when there is none.

    GS-WGAN checkpoints written before issue 19 kept the trainer state at the top level.
    """
    path = Path(run_dir) / CHECKPOINT_NAME
    if not path.exists():
        return None
    payload = torch.load(path, map_location="cpu", weights_only=True)
    return int(payload["step"]), payload.get("trainer", payload), payload.get("sampler")


def restore_sampler(sampler: np.random.Generator, saved: dict | None) -> None:
    """A fixed-seed sampler continues where it stopped; a secret one keeps its fresh seed."""
    if saved is not None:
        sampler.bit_generator.state = saved
