"""Fewer fake batches than critic steps: the server draws k batches, the client cycles them."""

from __future__ import annotations

import pytest
import torch

from fedgs.client.gswgan_session import GSWGANSession
from fedgs.comm import gswgan_update_bytes
from fedgs.protocols import common
from fedgs.run_config import RunConfig
from fedgs.simulations.simulate import EngineOptions
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.hparams import GSWGANConfig


def _run(tmp_path, critic_steps: int, fake_batches: int) -> RunConfig:
    return RunConfig(
        run_dir=str(tmp_path / f"run{len(list(tmp_path.iterdir()))}"),  # a fresh client
        generator_width=4,
        critic_width=4,
        batch_size=8,
        critic_steps=critic_steps,
        fake_batches=fake_batches,
    )


def _adam_steps(session: GSWGANSession) -> int:
    return int(session.critic.optimizer.state_dict()["state"][0]["step"])


def _answer(run: RunConfig, queried_batches: int) -> GSWGANSession:
    """A fresh client answers one query of ``queried_batches`` fake batches."""
    asking = GSWGANConfig(batch_size=8, critic_steps=queried_batches, generator_width=4)
    (query,) = GeneratorTrainer(10, asking, seed=0).propose(1)
    content = common.query_content(
        {common.FAKES: common.encode_fakes(query.images, query.labels)}, 1
    )
    session = GSWGANSession(run, 0)
    session.answer(content)
    return session


def test_the_server_draws_the_configured_number_of_distinct_batches() -> None:
    config = GSWGANConfig(batch_size=8, critic_steps=6, fake_batches=2, generator_width=4)
    queries = GeneratorTrainer(10, config, seed=0).propose(3)
    assert [len(q.images) for q in queries] == [2, 2, 2]
    assert not torch.equal(queries[0].images[0], queries[0].images[1])
    default = GSWGANConfig(batch_size=8, critic_steps=6, generator_width=4)
    assert [len(q.images) for q in GeneratorTrainer(10, default, seed=0).propose(1)] == [6]


def test_a_client_runs_its_critic_steps_on_fewer_batches(tmp_path) -> None:
    assert _adam_steps(_answer(_run(tmp_path, 5, 2), queried_batches=2)) == 5
    assert _adam_steps(_answer(_run(tmp_path, 3, 0), queried_batches=3)) == 3
    # a query with more batches than the client's critic steps: one step per batch, as before
    assert _adam_steps(_answer(_run(tmp_path, 2, 0), queried_batches=4)) == 4


def test_bytes_down_count_the_batches_sent() -> None:
    every = gswgan_update_bytes(RunConfig(batch_size=8, critic_steps=6))
    two = gswgan_update_bytes(RunConfig(batch_size=8, critic_steps=6, fake_batches=2))
    assert two["down"] * 3 == every["down"] and two["up"] == every["up"]


@pytest.mark.parametrize("fake_batches", [-1, 4])
def test_fake_batches_outside_zero_to_critic_steps_are_refused(fake_batches: int) -> None:
    with pytest.raises(ValueError, match="fake_batches"):
        GSWGANConfig(critic_steps=3, fake_batches=fake_batches)


def test_critic_steps_share_the_protocols_bound_on_fake_batches() -> None:
    GSWGANConfig(critic_steps=common.MAX_CRITIC_BATCHES)
    with pytest.raises(ValueError, match="critic_steps must be at most"):
        GSWGANConfig(critic_steps=common.MAX_CRITIC_BATCHES + 1)


def test_negative_server_threads_are_refused() -> None:
    with pytest.raises(ValueError, match="server threads"):
        EngineOptions(server_threads=-1)
