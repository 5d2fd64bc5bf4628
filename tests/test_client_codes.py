"""Client codes (run-config client-code-dims): the server fixes some of G's latent dims per
queried client, so G can learn each writer's style at its code instead of one average of all.
Server-side, from names the untrusted server knows anyway: no client data, no privacy cost."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from fedgs.run_config import RunConfig
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.hparams import GSWGANConfig


def _config(code_dims: int, **changes) -> GSWGANConfig:
    small = GSWGANConfig(batch_size=4, critic_steps=1, generator_width=4, lr_generator=1e-2)
    return replace(small, client_code_dims=code_dims, **changes)


def test_each_client_has_one_fixed_code_from_the_run_seed() -> None:
    trainer = GeneratorTrainer(10, _config(3), seed=0)
    code_a = trainer.client_code("f0001_01")
    assert code_a.shape == (3,)
    assert torch.equal(code_a, GeneratorTrainer(10, _config(3), seed=0).client_code("f0001_01"))
    assert not torch.equal(code_a, trainer.client_code("f0002_02"))
    assert not torch.equal(code_a, GeneratorTrainer(10, _config(3), seed=1).client_code("f0001_01"))


def test_every_row_of_a_clients_batches_carries_its_code_and_free_dims_vary() -> None:
    trainer = GeneratorTrainer(10, _config(3, critic_steps=2), seed=0)
    trainer.propose(2, ["a", "b"])
    latents = trainer._pending[1]  # the answer batch's z, client a's rows then client b's
    assert torch.equal(latents[:4, -3:], trainer.client_code("a").expand(4, 3))
    assert torch.equal(latents[4:, -3:], trainer.client_code("b").expand(4, 3))
    assert len({tuple(row.tolist()) for row in latents[:, :-3]}) == 8


def test_codes_off_ignore_the_names() -> None:
    named = GeneratorTrainer(10, _config(0), seed=0).propose(2, ["a", "b"])
    plain = GeneratorTrainer(10, _config(0), seed=0).propose(2)
    for left, right in zip(named, plain, strict=True):
        assert torch.equal(left.images[-1], right.images[-1])


def test_codes_need_one_name_per_query() -> None:
    with pytest.raises(ValueError, match="2 client names, got 1"):
        GeneratorTrainer(10, _config(3), seed=0).propose(2, ["a"])


def _gap_after_training(code_dims: int) -> float:
    """Two clients whose replies pull G's images towards +1 and -1: the mean image of client
    a's batch minus client b's after training (G sees both in every step)."""
    trainer = GeneratorTrainer(10, _config(code_dims), seed=0)
    targets = {"a": 1.0, "b": -1.0}
    for _ in range(60):
        queries = trainer.propose(2, list(targets))
        replies = [
            query.images[-1].reshape(4, -1) - target  # the gradient of 0.5 |x - target|^2
            for query, target in zip(queries, targets.values(), strict=True)
        ]
        trainer.apply(replies)
    with torch.no_grad():
        first, second = trainer.propose(2, list(targets))
    trainer.apply([None, None])
    return float(first.images[-1].mean() - second.images[-1].mean())


def test_with_codes_g_learns_each_clients_target_without_it_averages() -> None:
    assert _gap_after_training(3) > 1.0
    assert abs(_gap_after_training(0)) < 0.5


def test_run_config_passes_it_to_gswgan_and_checks_it() -> None:
    assert RunConfig(client_code_dims=4).gswgan().client_code_dims == 4
    with pytest.raises(ValueError, match="below z_dim"):
        RunConfig(client_code_dims=10)
    with pytest.raises(ValueError, match="below z_dim"):
        RunConfig(client_code_dims=-1)
