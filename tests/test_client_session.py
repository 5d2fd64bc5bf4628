"""A client's side without the engine: state on disk, its own budget, refusal of bad requests."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, RecordDict

from fedgs.client.common import RequestRefused
from fedgs.client.gswgan_session import GSWGANSession
from fedgs.client.state_store import ClientStateStore
from fedgs.protocols import common, gswgan
from fedgs.run_config import RunConfig
from fedgs.training.generator import GeneratorTrainer


@pytest.fixture()
def config(tmp_path) -> RunConfig:
    return RunConfig(
        run_dir=str(tmp_path / "run"),
        generator_width=4,
        critic_width=4,
        batch_size=8,
        critic_steps=2,
        warm_start_steps=2,
    )


def _query(config: RunConfig, seed: int = 0) -> RecordDict:
    trainer = GeneratorTrainer(10, config.gswgan(), seed=seed)
    (query,) = trainer.propose(1)
    return RecordDict({common.FAKES: common.encode_fakes(query.images, query.labels)})


def test_reply_holds_only_the_sanitized_gradient(config: RunConfig) -> None:
    reply = GSWGANSession(config, 0).answer(_query(config))
    assert set(reply.array_records) == {gswgan.SANITIZED}
    ((name, array),) = reply.array_records[gswgan.SANITIZED].items()
    assert name == gswgan.GRADIENT and array.numpy().shape == (8, 784)
    assert set(reply.config_records) == {common.CLIENT, common.POLICY_USED}
    assert not reply.metric_records  # no loss, norm or clipped fraction of private data
    assert dict(reply.config_records[common.POLICY_USED]) == {
        "strategy": "gswgan",
        "noise-multiplier": config.noise_multiplier,
        "clip-norm": config.clip_norm,
        "batch-size": 8,
        "delta": config.delta,
    }


def test_critic_and_ledger_survive_between_sessions(config: RunConfig) -> None:
    first = GSWGANSession(config, 1)
    first.warm_start(RecordDict())
    first.answer(_query(config))
    weights = {k: v.clone() for k, v in first.critic.critic.state_dict().items()}
    second = GSWGANSession(config, 1)  # a new process would see exactly this
    for key, value in second.critic.critic.state_dict().items():
        assert torch.equal(value, weights[key]), key
    assert second.warm_started
    assert second.ledger.query_counts() == {first.client_id: 1}
    second.answer(_query(config, seed=1))
    assert GSWGANSession(config, 1).ledger.query_counts() == {first.client_id: 2}
    assert GSWGANSession(config, 2).ledger.query_counts() == {}  # clients do not share state


def test_warm_start_is_idempotent(config: RunConfig) -> None:
    session = GSWGANSession(config, 0)
    reply = session.warm_start(RecordDict())
    assert not reply.metric_records and not reply.array_records  # nothing trained leaves
    trained = {k: v.clone() for k, v in session.critic.critic.state_dict().items()}
    again = GSWGANSession(config, 0)
    again.warm_start(RecordDict())
    assert again.warm_started
    for key, value in again.critic.critic.state_dict().items():
        assert torch.equal(value, trained[key]), key  # not trained a second time


def test_a_warm_start_reads_its_steps_as_the_gate_does(config: RunConfig) -> None:
    """A malformed step count is the server's mistake (ProtocolError); a record of another
    kind under the name is no step count (the run config's is used), not a KeyError."""
    session = GSWGANSession(config, 0)
    wrong = RecordDict({common.WARM_START_CONFIG: ConfigRecord({common.STEPS: "two"})})
    with pytest.raises(common.ProtocolError, match="warm-start 'steps'"):
        session.warm_start(wrong)
    endless = RecordDict({common.WARM_START_CONFIG: ConfigRecord({common.STEPS: 10**9})})
    with pytest.raises(common.ProtocolError, match="warm-start 'steps'"):
        session.warm_start(endless)  # the server would spend the node's compute without end
    assert not session.warm_started
    session.warm_start(RecordDict({common.WARM_START_CONFIG: ArrayRecord()}))
    assert session.warm_started


def test_budget_refuses_the_query_that_would_pass_it(config: RunConfig) -> None:
    one_query = GSWGANSession(config, 0)
    one_query.answer(_query(config))
    spent = one_query.ledger.epsilon_untrusted(one_query.client_id, config.delta, config.accountant)
    limited = config.with_updates(client_budget_epsilon=spent * 1.5, run_dir=config.run_dir + "-b")
    session = GSWGANSession(limited, 0)
    session.answer(_query(config))
    with pytest.raises(RequestRefused, match="privacy budget exhausted"):
        GSWGANSession(limited, 0).answer(_query(config))
    assert GSWGANSession(limited, 0).ledger.query_counts() == {session.client_id: 1}


def test_bad_requests_are_refused_without_side_effects(config: RunConfig) -> None:
    query = _query(config)
    images = query[common.FAKES][common.IMAGES].numpy().copy()
    images[0, 0, 0] = np.nan
    labels = query[common.FAKES][common.LABELS].numpy()
    bad = RecordDict(
        {common.FAKES: common.arrays_record({common.IMAGES: images, common.LABELS: labels})}
    )
    with pytest.raises(common.ProtocolError):
        GSWGANSession(config, 0).answer(bad)
    with pytest.raises(common.ProtocolError, match="missing"):
        GSWGANSession(config, 0).answer(RecordDict())
    assert GSWGANSession(config, 0).ledger.query_counts() == {}
    with pytest.raises(RequestRefused, match="does not exist"):
        GSWGANSession(config, 10_000)


def test_a_crash_mid_write_leaves_the_previous_state(tmp_path) -> None:
    store = ClientStateStore(tmp_path)
    store.save("f0001_02", {"value": torch.tensor([1.0])})
    # a writer killed after creating its temporary file but before the rename
    store.path("f0001_02").with_name(".partial.tmp").write_bytes(b"\x00garbage")
    assert torch.equal(store.load("f0001_02")["value"], torch.tensor([1.0]))
    store.save("f0001_02", {"value": torch.tensor([2.0])})
    assert torch.equal(store.load("f0001_02")["value"], torch.tensor([2.0]))
    assert store.load("someone-else") is None
    assert store.path("a/../b") != store.path("a_.._b")  # ids map to distinct, safe file names
