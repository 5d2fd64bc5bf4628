"""Server checkpoints: everything needed to resume a run so that epsilon never goes back.

Generator, EMA, optimizer, privacy ledger, RNG states and the step, in one file replaced
atomically: a crash mid-write leaves the previous checkpoint readable.
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedgs.privacy import PrivacyLedger
from fedgs.training.generator import GeneratorTrainer

CHECKPOINT_NAME = "checkpoint.pt"


@dataclass
class ServerState:
    step: int
    trainer: GeneratorTrainer
    ledger: PrivacyLedger
    sampler: np.random.Generator


def save_checkpoint(run_dir: Path, state: ServerState) -> Path:
    trainer = state.trainer
    payload = {
        "step": state.step,
        "generator": trainer.generator.state_dict(),
        "ema": trainer.ema.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "latent_rng": trainer.rng.get_state(),
        "ledger": state.ledger.to_json(),
        "sampler": state.sampler.bit_generator.state,
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    path = Path(run_dir) / CHECKPOINT_NAME
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(buffer.getbuffer())
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return path


def load_checkpoint(run_dir: Path, state: ServerState) -> bool:
    """Restore ``state`` in place from the run directory; False when there is no checkpoint."""
    path = Path(run_dir) / CHECKPOINT_NAME
    if not path.exists():
        return False
    payload = torch.load(path, map_location="cpu", weights_only=False)
    state.step = int(payload["step"])
    state.trainer.generator.load_state_dict(payload["generator"])
    state.trainer.ema.load_state_dict(payload["ema"])
    state.trainer.optimizer.load_state_dict(payload["optimizer"])
    state.trainer.rng.set_state(payload["latent_rng"])
    state.ledger = PrivacyLedger.from_json(payload["ledger"])
    state.sampler.bit_generator.state = payload["sampler"]
    return True
