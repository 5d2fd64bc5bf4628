"""The mode-seeking term in G's loss (run-config diversity-weight): server-side, data-free."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from fedgs.models import mode_seeking_loss
from fedgs.run_config import RunConfig
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.hparams import GSWGANConfig


def _config(weight: float, **changes) -> GSWGANConfig:
    small = GSWGANConfig(batch_size=4, critic_steps=1, generator_width=4, lr_generator=1e-2)
    return replace(small, diversity_weight=weight, **changes)


def test_loss_is_large_for_identical_pairs_and_small_for_distinct_ones() -> None:
    z = torch.randn(6, 3)
    same = torch.ones(6, 1, 28, 28)
    distinct = torch.cat([torch.ones(3, 1, 28, 28), -torch.ones(3, 1, 28, 28)])
    assert mode_seeking_loss(same, z) > 1e4
    assert mode_seeking_loss(distinct, z) < 1.0


def test_loss_needs_even_paired_rows() -> None:
    with pytest.raises(ValueError, match="even number"):
        mode_seeking_loss(torch.zeros(3, 1, 28, 28), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="even number"):
        mode_seeking_loss(torch.zeros(4, 1, 28, 28), torch.zeros(2, 2))


def test_answer_batch_comes_in_label_sharing_pairs() -> None:
    trainer = GeneratorTrainer(10, _config(1.0), seed=0)
    first, second = trainer.propose(2)
    assert torch.equal(first.labels[-1], second.labels[-1])
    single = GeneratorTrainer(10, _config(1.0), seed=0).propose(1)[0].labels[-1]
    assert torch.equal(single[:2], single[2:])


def test_odd_batch_is_refused_by_the_config() -> None:
    with pytest.raises(ValueError, match="batch_size must be even"):
        _config(1.0, batch_size=3)
    assert _config(0.0, batch_size=3).batch_size == 3  # the paper's setting allows any size


def _pair_distance(trainer: GeneratorTrainer) -> float:
    """Mean |x1 - x2| of the raw G over fixed label-sharing latent pairs."""
    generator = torch.Generator().manual_seed(123)
    z = torch.randn(64, trainer.config.z_dim, generator=generator)
    y = torch.randint(10, (32,), generator=generator).repeat(2)
    trainer.generator.eval()
    with torch.no_grad():
        x1, x2 = trainer.generator(z, y).chunk(2)
    trainer.generator.train()
    return float((x1 - x2).abs().mean())


@pytest.mark.parametrize("weight", [0.0, 1.0])
def test_the_term_alone_spreads_pairs_apart(weight: float) -> None:
    """With no critic signal at all (zero replies), only the term can move G: off, G stays put;
    on, distinct latents of one label draw further-apart images."""
    trainer = GeneratorTrainer(10, _config(weight), seed=0)
    before = [p.detach().clone() for p in trainer.generator.parameters()]
    distance_before = _pair_distance(trainer)
    for _ in range(30):
        trainer.propose(2)
        assert trainer.apply([torch.zeros(4, 784), torch.zeros(4, 784)]) == 8
    moved = any(
        not torch.equal(a, b) for a, b in zip(before, trainer.generator.parameters(), strict=True)
    )
    if weight == 0:
        assert not moved
    else:
        assert moved
        assert _pair_distance(trainer) > 1.2 * distance_before


def test_run_config_passes_it_to_gswgan_and_refuses_it_elsewhere() -> None:
    config = RunConfig(diversity_weight=0.5, z_dim=32).gswgan()
    assert (config.diversity_weight, config.z_dim) == (0.5, 32)
    with pytest.raises(ValueError, match="diversity_weight must be >= 0"):
        RunConfig(diversity_weight=-1.0)
    with pytest.raises(ValueError, match="z_dim must be positive"):
        RunConfig(z_dim=0)
    for key, value in (("diversity_weight", 1.0), ("z_dim", 32)):
        with pytest.raises(ValueError, match="for gswgan only"):
            RunConfig(strategy="fedavg-gan", **{key: value})
