"""DataLens TopAgg without the engine: top-k sign votes, their wire format and size, the noisy vote
aggregation (noise scale checked statistically), and the teacher's side."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, RecordDict
from hypothesis import given, settings
from hypothesis import strategies as st

from fedgs.client.common import RequestRefused
from fedgs.client.datalens_session import DataLensTeacher
from fedgs.comm import datalens_protocol_bytes
from fedgs.privacy.sanitizer import NonFiniteGradientError
from fedgs.privacy.topagg import aggregate_votes, top_k_signs
from fedgs.protocols import common, datalens
from fedgs.protocols.common import ProtocolError
from fedgs.run_config import RunConfig
from fedgs.training.generator import GeneratorTrainer


def test_top_k_signs_keeps_the_largest_coordinates_signs() -> None:
    gradients = torch.randn(16, 784, generator=torch.Generator().manual_seed(0))
    votes = top_k_signs(gradients, 50)
    assert votes.dtype == torch.int8 and votes.shape == (16, 784)
    assert ((votes != 0).sum(dim=1) == 50).all()
    for row, vote in zip(gradients, votes, strict=True):
        kept = vote != 0
        assert row.abs()[kept].min() >= row.abs()[~kept].max()
        assert torch.equal(vote[kept], torch.sign(row[kept]).to(torch.int8))


def test_top_k_signs_refuses_what_it_cannot_bound() -> None:
    with pytest.raises(NonFiniteGradientError):
        top_k_signs(torch.tensor([[1.0, float("nan")]]), 1)
    with pytest.raises(ValueError, match="top-k"):
        top_k_signs(torch.zeros(2, 784), 785)


@settings(max_examples=60, deadline=None)
@given(
    batch=st.integers(1, 33),
    top_k=st.integers(1, 784),
    density=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**31),
)
def test_votes_round_trip_and_size(batch: int, top_k: int, density: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    votes = np.zeros((batch, 784), dtype=np.int8)
    for row in votes:  # up to k non-zeros per row, anywhere, either sign
        count = int(round(density * top_k))
        where = rng.choice(784, size=count, replace=False)
        row[where] = rng.choice([-1, 1], size=count)
    packed = datalens.encode_votes(torch.from_numpy(votes), top_k)
    arrays = common.record_arrays(packed)
    assert arrays[datalens.MASK].shape == (batch, 98)
    assert arrays[datalens.SIGNS].shape == (batch, math.ceil(top_k / 8))
    assert sum(a.nbytes for a in arrays.values()) == datalens_protocol_bytes(batch, top_k, 1)["up"]
    decoded = datalens.decode_votes(packed, batch, top_k)
    assert np.array_equal(decoded.numpy(), votes)


def test_votes_are_a_fraction_of_a_float_gradient() -> None:
    # the paper's MNIST setting k = 200, B = 32: 123 bytes per row against 3,136 for float32
    up = datalens_protocol_bytes(32, 200, critic_steps=1)["up"]
    assert up == 32 * (98 + 25)
    assert 32 * 784 * 4 / up > 25


def _tampered(packed: ArrayRecord, how: str) -> ArrayRecord:
    arrays = {k: v.copy() for k, v in common.record_arrays(packed).items()}
    if how == "too-many":
        arrays[datalens.MASK][0] = 0xFF
    elif how == "padding":
        arrays[datalens.SIGNS][0, -1] |= 1
    elif how == "dtype":
        arrays[datalens.MASK] = arrays[datalens.MASK].astype(np.int16)
    elif how == "shape":
        arrays[datalens.SIGNS] = arrays[datalens.SIGNS][:-1]
    elif how == "extra":
        arrays["gradient"] = np.zeros((4, 784), dtype=np.float32)
    return common.arrays_record(arrays)


@pytest.mark.parametrize("how", ["too-many", "padding", "dtype", "shape", "extra"])
def test_server_refuses_votes_the_analysis_does_not_cover(how: str) -> None:
    votes = top_k_signs(torch.randn(4, 784, generator=torch.Generator().manual_seed(1)), 12)
    votes[0, (votes[0] != 0).nonzero()[-1]] = 0  # row 0 has 11 votes: its last sign bit is padding
    packed = datalens.encode_votes(votes, 12)
    with pytest.raises(ProtocolError):
        datalens.decode_votes(_tampered(packed, how), 4, 12)


def test_aggregation_noise_has_the_configured_std() -> None:
    # two teachers that cancel: the sum is 0, so a coordinate survives the threshold t * m
    # exactly when the discrete Gaussian noise |Z| > t * m, whose probability the pmf gives
    votes = torch.from_numpy(np.random.default_rng(2).choice([-1, 1], size=(128, 784))).to(
        torch.int8
    )
    noise_std, threshold, teachers = 2.0, 0.5, 2
    vote = aggregate_votes([votes, -votes], noise_std, threshold, teachers)
    rate = vote.agreed_fraction
    n = votes.numel()
    support = np.arange(-100, 101)
    pmf = np.exp(-(support**2) / (2 * noise_std**2))
    expected = float(pmf[np.abs(support) > threshold * teachers].sum() / pmf.sum())
    assert abs(rate - expected) < 5 * math.sqrt(expected * (1 - expected) / n)
    # the same rate at a std 10% off is far outside the band: the test can fail
    wider = np.exp(-(support**2) / (2 * (1.1 * noise_std) ** 2))
    assert abs(float(wider[np.abs(support) > 1].sum() / wider.sum()) - expected) > 0.03
    assert abs(float(vote.direction.mean())) < 5 / math.sqrt(n)  # symmetric signs


def test_aggregation_keeps_agreed_votes_and_thresholds_weak_ones() -> None:
    votes = top_k_signs(torch.randn(8, 784, generator=torch.Generator().manual_seed(3)), 100)
    agreed = aggregate_votes([votes] * 10, noise_std=1e-6, threshold=0.5, teachers=10)
    assert torch.equal(agreed.direction, votes.float())
    # 10 sampled teachers, only 4 answered: a sum of 4 does not pass 0.5 * 10
    weak = aggregate_votes([votes] * 4, noise_std=1e-6, threshold=0.5, teachers=10)
    assert weak.agreed_fraction == 0.0
    again = aggregate_votes([votes] * 4, noise_std=3.0, threshold=0.0, teachers=10)
    assert not torch.equal(again.direction, aggregate_votes([votes] * 4, 3.0, 0.0, 10).direction)


@pytest.fixture()
def config(tmp_path) -> RunConfig:
    return RunConfig(
        run_dir=str(tmp_path / "run"),
        strategy="datalens",
        generator_width=4,
        critic_width=4,
        batch_size=8,
        critic_steps=2,
        datalens_top_k=20,
    )


def _query(config: RunConfig) -> RecordDict:
    (query,) = GeneratorTrainer(10, config.gswgan(), seed=0).propose(1)
    return RecordDict({common.FAKES: common.encode_fakes(query.images, query.labels)})


def test_teacher_replies_with_packed_votes_only(config: RunConfig) -> None:
    reply = DataLensTeacher(config, 0).answer(_query(config))
    assert set(reply.array_records) == {datalens.VOTES}
    votes = datalens.decode_votes(reply.array_records[datalens.VOTES], 8, 20)
    assert ((votes != 0).sum(dim=1) <= 20).all() and (votes != 0).any()
    assert set(reply.config_records) == {common.CLIENT, common.POLICY_USED}
    assert not reply.metric_records  # no loss or distance of the teacher's data
    assert dict(reply[common.POLICY_USED]) == {"strategy": "datalens", "batch-size": 8}


def test_teacher_critic_persists_between_queries(config: RunConfig) -> None:
    first = DataLensTeacher(config, 1)
    first.answer(_query(config))
    weights = first.session.critic.critic.state_dict()
    second = DataLensTeacher(config, 1)
    for key, value in second.session.critic.critic.state_dict().items():
        assert torch.equal(value, weights[key]), key


def test_teacher_with_an_untrusted_server_budget_refuses(config: RunConfig) -> None:
    with pytest.raises(RequestRefused, match="trusted aggregator"):
        DataLensTeacher(config.with_updates(client_budget_epsilon=10.0), 0)
