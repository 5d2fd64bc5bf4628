"""Server checkpoints: everything needed to resume a run so that epsilon never goes back.

Generator, EMA, optimizer, RNG states and the step go in one file every N steps; the privacy
ledger goes in its own file before and after *every* step's messages, because queries sent after
the last checkpoint were paid for even though a resumed run repeats those steps. The client
sampler's state is kept only when sampling is reproducible by choice (a fixed sampling seed):
secret sampling must stay unpredictable, so a resumed run draws a fresh secret seed. Both files
are replaced atomically: a crash mid-write leaves the previous version readable.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedgs.privacy import PrivacyLedger
from fedgs.privacy.client_sampling import ClientSampling
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.run_dir import write_atomic

CHECKPOINT_NAME = "checkpoint.pt"
LEDGER_NAME = "ledger.json"


@dataclass
class ServerState:
    step: int
    trainer: GeneratorTrainer
    ledger: PrivacyLedger
    sampler: np.random.Generator
    sampling: ClientSampling


def save_ledger(run_dir: Path, ledger: PrivacyLedger) -> None:
    write_atomic(Path(run_dir) / LEDGER_NAME, ledger.to_json().encode())


def load_ledger(run_dir: Path) -> PrivacyLedger | None:
    """The ledger a killed run left (None when it paid nothing yet)."""
    path = Path(run_dir) / LEDGER_NAME
    return PrivacyLedger.from_json(path.read_text()) if path.exists() else None


def save_checkpoint(run_dir: Path, state: ServerState) -> Path:
    trainer = state.trainer
    payload = {
        "step": state.step,
        "generator": trainer.generator.state_dict(),
        "ema": trainer.ema.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "latent_rng": trainer.rng.get_state(),
        "sampler": state.sampling.saved_state(state.sampler),
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    path = Path(run_dir) / CHECKPOINT_NAME
    write_atomic(path, buffer.getvalue())
    save_ledger(run_dir, state.ledger)
    return path


def load_checkpoint(run_dir: Path, state: ServerState) -> bool:
    """Restore ``state`` in place from the run directory; False when there is no checkpoint.

    The ledger is not in the checkpoint: ``load_ledger`` reads its own per-step file, which
    includes the steps after the checkpoint (and exists even when no checkpoint was written).
    """
    path = Path(run_dir) / CHECKPOINT_NAME
    if not path.exists():
        return False
    payload = torch.load(path, map_location="cpu", weights_only=True)
    state.step = int(payload["step"])
    state.trainer.generator.load_state_dict(payload["generator"])
    state.trainer.ema.load_state_dict(payload["ema"])
    state.trainer.optimizer.load_state_dict(payload["optimizer"])
    state.trainer.rng.set_state(payload["latent_rng"])
    restore_sampler(state.sampler, payload.get("sampler"))
    return True


def restore_sampler(sampler: np.random.Generator, saved: dict | None) -> None:
    """A fixed-seed sampler continues where it stopped; a secret one keeps its fresh seed."""
    if saved is not None:
        sampler.bit_generator.state = saved
