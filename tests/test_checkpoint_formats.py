"""Server checkpoints: the one body every run writes, and GS-WGAN's flat one from before it."""

from __future__ import annotations

from pathlib import Path

import torch

from fedgs.server.checkpoint import CHECKPOINT_NAME, load_checkpoint, save_checkpoint
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.hparams import GSWGANConfig

CONFIG = GSWGANConfig(generator_width=4, critic_width=4)


def test_a_checkpoint_restores_the_trainer(tmp_path: Path) -> None:
    trainer, other = GeneratorTrainer(10, CONFIG, seed=0), GeneratorTrainer(10, CONFIG, seed=1)
    save_checkpoint(tmp_path, 7, trainer.state_dict(), {"state": 1})
    step, state, sampler = load_checkpoint(tmp_path)
    other.load_state_dict(state)
    assert (step, sampler) == (7, {"state": 1})
    for a, b in zip(trainer.generator.parameters(), other.generator.parameters(), strict=True):
        assert torch.equal(a, b)


def test_gswgan_checkpoints_from_before_issue_19_still_load(tmp_path: Path) -> None:
    """They kept the trainer's state at the top level, next to the step and the sampler."""
    trainer = GeneratorTrainer(10, CONFIG, seed=0)
    torch.save({"step": 3, **trainer.state_dict(), "sampler": None}, tmp_path / CHECKPOINT_NAME)
    step, state, sampler = load_checkpoint(tmp_path)
    restored = GeneratorTrainer(10, CONFIG, seed=1)
    restored.load_state_dict(state)
    assert step == 3 and sampler is None
    assert torch.equal(restored.rng.get_state(), trainer.rng.get_state())


def test_no_checkpoint(tmp_path: Path) -> None:
    assert load_checkpoint(tmp_path) is None
