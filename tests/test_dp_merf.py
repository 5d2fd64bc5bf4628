"""DP-MERF (issue 43) without the engine: the feature map, the release, its wire format, the
client's one answer behind the gate, and the server's one query per writer."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from dp_accounting import dp_event
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from test_noise_source import _random_calls

from fedgs.algorithms import IDENTIFY
from fedgs.client import gate
from fedgs.client.common import RequestRefused
from fedgs.client.dp_merf_session import DpMerfSession
from fedgs.privacy import discrete_noise
from fedgs.privacy.accountants import get_accountant
from fedgs.privacy.events import mean_embedding_event
from fedgs.privacy.mean_embedding import ReleasedEmbedding, clip, release, writer_embedding
from fedgs.privacy.policy import NodePolicy, PolicyViolation
from fedgs.privacy.random_features import (
    LABEL_COORDINATE,
    FeatureSpec,
    RandomFeatures,
    mean_embedding,
)
from fedgs.privacy.release_ledger import ReleaseLedger
from fedgs.protocols import common, dp_merf, secagg
from fedgs.protocols.common import ProtocolError
from fedgs.run_config import RunConfig
from fedgs.server.dp_merf_strategy import DpMerfStrategy
from fedgs.training.dp_merf import MerfTrainer, class_weights

SPEC = FeatureSpec(features=64, bandwidth=20.0, seed=7)
SHAPE = (SPEC.dimension, 10)


@pytest.fixture()
def config(tmp_path) -> RunConfig:
    return RunConfig(
        strategy="dp-merf",
        run_dir=str(tmp_path / "run"),
        merf_features=SPEC.features,
        generator_width=4,
        merf_generator_steps=2,
        merf_batch_size=8,
    )


def _images(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(n, 1, 28, 28, generator=generator) * 2 - 1
    return images, torch.randint(10, (n,), generator=generator)


# --- the feature map and the release


def test_every_feature_row_has_norm_one_and_the_label_row_holds_the_class_shares() -> None:
    images, labels = _images(50, 0)
    rows = RandomFeatures(SPEC)(images).double()
    assert torch.allclose(rows.norm(dim=1), torch.ones(50, dtype=torch.float64), atol=1e-5)
    embedding = mean_embedding(rows, labels, 10)
    shares = torch.bincount(labels, minlength=10).double() / 50
    assert torch.allclose(embedding[0], LABEL_COORDINATE * shares, atol=1e-6)
    assert torch.allclose(class_weights(embedding.numpy()), shares, atol=1e-6)
    again = RandomFeatures(FeatureSpec(64, 20.0, 7))(images)  # public seed: the server's W
    assert torch.equal(again, RandomFeatures(SPEC)(images))


def test_a_bad_feature_map_is_refused() -> None:
    for features, bandwidth, seed in ((63, 1.0, 0), (0, 1.0, 0), (64, 0.0, 0), (64, 1.0, -1)):
        with pytest.raises(ValueError):
            FeatureSpec(features, bandwidth, seed)


def test_the_writer_embedding_is_within_the_clip_bound() -> None:
    images, labels = _images(30, 1)
    matrix = writer_embedding(RandomFeatures(SPEC), images, labels, 10)
    assert matrix.shape == SHAPE and np.linalg.norm(matrix) <= 1.0 + 1e-6
    for bound in (0.05, 0.3):
        assert np.linalg.norm(clip(matrix, bound)) <= bound * (1 + 1e-12)
    assert np.array_equal(clip(matrix, 10.0), matrix)  # inside the bound: unchanged
    big = np.full(SHAPE, 5.0)
    assert np.linalg.norm(clip(big, 1.0)) == pytest.approx(1.0)


def test_the_noise_std_is_two_c_sigma() -> None:
    """A statistical check that fails if the std is off by more than 3% (the estimate's own
    error over 60,000 draws is ~0.3%)."""
    c, sigma = 0.5, 2.0
    released = release(np.zeros((6000, 10)), c, sigma)
    expected = 2 * c * sigma * (1 + discrete_noise.ACCOUNTING_SLACK)
    assert released.values.std() == pytest.approx(expected, rel=0.03)
    assert abs(released.values.mean()) < 5 * expected / math.sqrt(60_000)
    assert (released.clip_norm, released.noise_multiplier) == (c, sigma)


def test_the_release_is_a_gaussian_of_multiplier_sigma() -> None:
    assert mean_embedding_event(0.6) == dp_event.GaussianDpEvent(0.6)
    with pytest.raises(ValueError):
        mean_embedding_event(0.0)


@pytest.mark.parametrize(
    "path",
    ["fedgs/privacy/mean_embedding.py", "client/dp_merf_session.py", "server/dp_merf_strategy.py"],
)
def test_no_seeded_generator_on_the_release_path(path: str) -> None:
    assert _random_calls(path) == []


# --- the wire


def test_the_query_carries_the_feature_map_and_nothing_else() -> None:
    content = dp_merf.encode_query(SPEC, 3)
    assert dp_merf.decode_query(content) == SPEC and common.query_step(content) == 3
    extra = dp_merf.encode_query(SPEC, 3)
    extra[dp_merf.FEATURES]["pixels"] = 1
    with pytest.raises(ProtocolError, match="needs the 'features' record"):
        dp_merf.decode_query(extra)
    bad = dp_merf.encode_query(SPEC, 3)
    bad[dp_merf.FEATURES]["features"] = 63
    with pytest.raises(ProtocolError, match="even"):
        dp_merf.decode_query(bad)
    arrays = dp_merf.encode_query(SPEC, 3)
    arrays["fakes"] = ArrayRecord({"x": Array(np.zeros(2))})
    with pytest.raises(ProtocolError, match="no arrays"):
        dp_merf.decode_query(arrays)


def test_only_a_released_embedding_is_encoded_and_the_server_checks_it() -> None:
    with pytest.raises(TypeError):
        dp_merf.encode_embedding(np.zeros(SHAPE))  # type: ignore[arg-type]
    released = release(np.zeros(SHAPE), 1.0, 1.0)
    record = dp_merf.encode_embedding(released)
    assert np.allclose(dp_merf.decode_embedding(record, SHAPE), released.values, atol=1e-5)
    with pytest.raises(ProtocolError, match="shape"):
        dp_merf.decode_embedding(record, (SHAPE[0] - 1, 10))
    with pytest.raises(ProtocolError, match="plausible"):
        dp_merf.decode_embedding(
            dp_merf.encode_embedding(ReleasedEmbedding(np.full(SHAPE, 1e3), 1.0, 1.0)),
            SHAPE,
            dp_merf.plausible_magnitude(1.0, 1.0),
        )
    with pytest.raises(ProtocolError, match="finite"):
        dp_merf.decode_embedding(
            dp_merf.encode_embedding(ReleasedEmbedding(np.full(SHAPE, np.nan), 1.0, 1.0)), SHAPE
        )


# --- the client: one answer, behind the gate


def _serve(config: RunConfig, partition: int = 0) -> RecordDict:
    policy = NodePolicy.from_run_config(config)
    return gate.serve(dp_merf.QUERY, dp_merf.encode_query(SPEC, 1), config, policy, partition)


def test_the_release_is_the_only_data_dependent_record_of_a_reply(
    config: RunConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbouring datasets (writer 0's data replaced): the replies differ in the noised
    matrix only; identity and policy records are equal, and there is nothing else."""
    replies = []
    for seed in (0, 1):
        session = DpMerfSession(config.with_updates(run_dir=f"{config.run_dir}-{seed}"), 0)
        images, labels = _images(40 + 20 * seed, seed)  # another size too: n is not sent
        # the dataset is the process's cached one: patched for this test only, then restored
        replaced = lambda partition, x=images, y=labels: (x, y)  # noqa: E731
        monkeypatch.setattr(session.dataset, "client_train", replaced)
        replies.append(session.answer(dp_merf.encode_query(SPEC, 1)))
    for reply in replies:
        assert set(reply.array_records) == {dp_merf.EMBEDDING}
        assert set(reply.config_records) == {common.CLIENT, common.POLICY_USED}
        assert not reply.metric_records
        assert set(reply.array_records[dp_merf.EMBEDDING]) == {dp_merf.VALUES}
        assert reply.array_records[dp_merf.EMBEDDING][dp_merf.VALUES].shape == SHAPE
    for key in (common.CLIENT, common.POLICY_USED):
        assert dict(replies[0][key]) == dict(replies[1][key])
    assert dict(replies[0][common.POLICY_USED]) == {
        "strategy": "dp-merf",
        "noise-multiplier": config.merf_noise_multiplier,
        "clip-norm": config.merf_clip_norm,
        "delta": config.delta,
    }


def test_a_writer_releases_once_and_pays_one_event(config: RunConfig) -> None:
    reply = _serve(config)
    values = reply.array_records[dp_merf.EMBEDDING][dp_merf.VALUES].numpy()
    assert values.shape == SHAPE and np.isfinite(values).all()
    ledger = DpMerfSession(config, 0).ledger
    assert ledger.counts() == {"embedded-000": 1}
    assert ledger.signature("embedded-000") == ((mean_embedding_event(0.6), 1),)
    with pytest.raises(RequestRefused, match="already released"):
        _serve(config)
    assert DpMerfSession(config, 0).ledger.counts() == {"embedded-000": 1}  # refusal: free


def test_a_release_past_the_writer_budget_is_refused(config: RunConfig) -> None:
    tight = config.with_updates(client_budget_epsilon=5.0)  # one release at sigma 0.6: 9.39
    with pytest.raises(RequestRefused, match="above this writer's budget of 5"):
        _serve(tight, 1)
    assert DpMerfSession(tight, 1).ledger.counts() == {}
    reply = _serve(config.with_updates(client_budget_epsilon=10.0), 1)  # 9.39 fits 10
    assert dp_merf.EMBEDDING in reply.array_records


def test_the_deployment_default_budget_holds_for_dp_merf_nodes(config: RunConfig) -> None:
    policy = NodePolicy.deployment_default("dp-merf")
    allowed = gate.allowed_message_types(policy)
    assert policy.epsilon_budget == 10.0 and allowed == (dp_merf.QUERY, IDENTIFY, secagg.SECAGG)
    loud = config.with_updates(merf_noise_multiplier=0.4)  # epsilon 15.1 per release
    content = dp_merf.encode_query(SPEC, 1)
    # the default floor (sigma 1) refuses it first; a node that lowers it keeps the budget
    with pytest.raises(PolicyViolation, match="merf-noise-multiplier 0.4 is below"):
        gate.serve(dp_merf.QUERY, content, loud, policy, 2)
    with pytest.raises(RequestRefused, match="budget of 10"):
        gate.serve(dp_merf.QUERY, content, loud, replace(policy, min_noise_multiplier=0.1), 2)


# --- the server: every writer once, charged when sent


@pytest.fixture()
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a ServerApp process sets before any Message is made."""
    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


class _Grid:
    def __init__(self, nodes: list[int]) -> None:
        self.nodes = nodes

    def get_node_ids(self) -> list[int]:
        return self.nodes


def _strategy(config: RunConfig, ledger: ReleaseLedger, per_round: int) -> DpMerfStrategy:
    trainer = MerfTrainer(10, config.dp_merf(), SPEC)
    return DpMerfStrategy(trainer, ledger, np.random.default_rng(0), per_round)


@pytest.mark.usefixtures("_task_identity")
def test_each_node_is_asked_once_and_charged_when_sent(config: RunConfig) -> None:
    ledger = ReleaseLedger()
    strategy = _strategy(config, ledger, 3)
    grid = _Grid([11, 12, 13, 14, 15])
    event = mean_embedding_event(config.merf_noise_multiplier)
    asked = []
    for step in (1, 2, 3):
        messages = list(strategy.configure_train(step, ArrayRecord(), ConfigRecord(), grid))
        assert all(m.metadata.message_type == dp_merf.QUERY for m in messages)
        assert all(dp_merf.decode_query(m.content) == SPEC for m in messages)
        asked.append(sorted(m.metadata.dst_node_id for m in messages))
        # paid when sent, before any reply: one release per node asked, to the node's label
        assert ledger.unattributed_count() == sum(len(a) for a in asked)
        strategy.aggregate_train(step, [])  # nobody answered: still paid
    assert [len(a) for a in asked] == [3, 2, 0]
    assert sorted(asked[0] + asked[1]) == grid.nodes
    assert ledger.counts() == {}  # no reply named a writer
    assert ledger.signature("anyone", worst=True) == ((event, 5),)  # counted for every writer
    # a fresh strategy over the same ledger (a resumed run) asks none of them again
    again = _strategy(config, ledger, 3)
    assert list(again.configure_train(1, ArrayRecord(), ConfigRecord(), grid)) == []


@pytest.mark.usefixtures("_task_identity")
def test_replies_are_summed_attributed_and_fitted_at_the_last_round(config: RunConfig) -> None:
    ledger, released = ReleaseLedger(), []
    strategy = _strategy(config, ledger, 2)
    strategy.on_release = released.append
    grid = _Grid([21, 22, 23])
    for step in (1, 2):
        strategy.final = step == 2
        messages = list(strategy.configure_train(step, ArrayRecord(), ConfigRecord(), grid))
        replies = [
            Message(
                DpMerfSession(config, m.metadata.dst_node_id - 21).answer(m.content), reply_to=m
            )
            for m in messages
        ]
        _, metrics = strategy.aggregate_train(step, replies)
        assert metrics["answered"] == len(messages)
    assert strategy.trainer.replies == 3 and len(released) == 1
    assert metrics["generator_loss"] > 0 and strategy.trainer.fitted_steps == 2
    assert ledger.counts() == {f"embedded-00{i}": 1 for i in range(3)}
    assert ledger.unattributed_count() == 0


def test_the_headline_is_the_untrusted_server_epsilon_of_one_release() -> None:
    ledger = ReleaseLedger()
    for client in ("a", "b"):
        ledger.record(client, mean_embedding_event(0.6))
    summary = ledger.summary(1e-5, "autodp-rdp")
    untrusted = summary["untrusted_server"]
    expected = get_accountant("autodp-rdp").epsilon(dp_event.GaussianDpEvent(0.6), 1e-5)
    assert untrusted["epsilon"] == pytest.approx(expected) and 9 < expected < 10
    assert untrusted["threat_model"] == "untrusted-server"
    assert untrusted["accountant"] == "autodp-rdp" and untrusted["neighbouring"] == "replace-one"
    assert summary["trusted_sampler"]["epsilon"] is None
    assert summary["queries"]["max"] == 1 and summary["queries"]["clients_queried"] == 2
    assert ReleaseLedger.from_json(ledger.to_json()).to_dict() == ledger.to_dict()


def test_g_is_fitted_to_the_mean_of_the_releases(config: RunConfig) -> None:
    trainer = MerfTrainer(10, config.dp_merf(), SPEC)
    images, labels = _images(40, 3)
    target = writer_embedding(RandomFeatures(SPEC), images, labels, 10)
    trainer.add(target + 1.0)
    trainer.add(target - 1.0)
    assert np.allclose(trainer.released(), target)
    before = [p.clone() for p in trainer.generator.generator.parameters()]
    loss = trainer.fit(target)
    assert math.isfinite(loss) and trainer.fitted_steps == 2
    after = list(trainer.generator.generator.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))
    restored = MerfTrainer(10, config.dp_merf(), SPEC)
    restored.load_state_dict(trainer.state_dict())
    assert restored.replies == 2 and np.allclose(restored.released(), target)
