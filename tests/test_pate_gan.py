"""PATE-GAN without the engine: the discrete Laplace noisy vote (checked statistically against its
exact distribution), the vote wire format, teacher and student training, the teacher's side."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from flwr.app import RecordDict

from fedgs.client.common import RequestRefused
from fedgs.client.pate_gan_session import PateTeacher, teacher_session
from fedgs.comm import pate_protocol_bytes
from fedgs.privacy.pate import noisy_labels
from fedgs.protocols import common, pate_gan
from fedgs.protocols.common import ProtocolError
from fedgs.run_config import RunConfig
from fedgs.training.hparams import GSWGANConfig
from fedgs.training.pate_gan import PateGANTrainer, TeacherDiscriminator


def real_label_probability(real: int, fake: int, scale: float) -> float:
    """P(real + L1 > fake + L2) for independent L1, L2 with P(y) proportional to exp(-|y|/b):
    the difference's distribution by convolution, summed over d > fake - real."""
    support = np.arange(-int(60 * scale) - 60, int(60 * scale) + 61)
    pmf = np.exp(-np.abs(support) / scale)
    pmf /= pmf.sum()
    difference = np.convolve(pmf, pmf)  # support -2K..2K
    values = np.arange(2 * support[0], 2 * support[-1] + 1)
    return float(difference[values > fake - real].sum())


@pytest.mark.parametrize(("real", "voters", "scale"), [(3, 10, 2.0), (5, 10, 1.0), (9, 10, 4.0)])
def test_noisy_labels_follow_the_discrete_laplace_law(real: int, voters: int, scale: float):
    n = 200_000
    labels = noisy_labels(np.full(n, real), voters, scale)
    expected = real_label_probability(real, voters - real, scale)
    assert abs(labels.mean() - expected) < 5 * math.sqrt(expected * (1 - expected) / n)


def test_noisy_labels_follow_a_clear_majority_and_are_fresh() -> None:
    votes = np.array([0, 10] * 500)
    labels = noisy_labels(votes, 10, 0.1)
    assert np.array_equal(labels, votes == 10)
    assert not np.array_equal(
        noisy_labels(np.full(1000, 5), 10, 1.0), noisy_labels(np.full(1000, 5), 10, 1.0)
    )
    with pytest.raises(ValueError):
        noisy_labels(np.array([11]), 10, 1.0)
    with pytest.raises(ValueError):
        noisy_labels(np.array([1]), 10, 0.0)


@pytest.mark.parametrize("samples", [1, 8, 37, 160])
def test_votes_round_trip_in_one_bit_each(samples: int) -> None:
    real = np.random.default_rng(samples).random(samples) < 0.5
    packed = pate_gan.encode_real_votes(real)
    assert common.record_arrays(packed)[pate_gan.REAL].nbytes == math.ceil(samples / 8)
    assert np.array_equal(pate_gan.decode_real_votes(packed, samples), real)


def test_up_bytes_are_one_bit_per_ballot_sample() -> None:
    cost = pate_protocol_bytes(32, teacher_steps=5, student_steps=5)
    assert cost["up"] == 20 and cost["down"] == 10 * 32 * (784 * 4 + 8)


@pytest.mark.parametrize(
    ("arrays", "samples"),
    [
        ({pate_gan.REAL: np.zeros(4, dtype=np.uint8)}, 40),  # wrong size for the ballot
        ({pate_gan.REAL: np.array([0, 0, 0, 0b11], dtype=np.uint8)}, 30),  # padding bit
        ({pate_gan.REAL: np.zeros(4, dtype=np.int32)}, 30),
        ({pate_gan.REAL: np.zeros(4, dtype=np.uint8), "logits": np.zeros(30)}, 30),
    ],
)
def test_server_refuses_malformed_votes(arrays: dict, samples: int) -> None:
    with pytest.raises(ProtocolError):
        pate_gan.decode_real_votes(common.arrays_record(arrays), samples)


CONFIG = GSWGANConfig(batch_size=8, generator_width=4, critic_width=4, lr_critic=1e-3)


def test_teacher_learns_to_tell_its_data_from_fakes() -> None:
    real = torch.rand(64, 1, 28, 28) * 2 - 1
    labels = torch.randint(10, (64,))
    teacher = TeacherDiscriminator(real, labels, 10, CONFIG, seed=0)
    fake = -torch.ones(8, 1, 28, 28)
    fake_labels = torch.randint(10, (8,))
    stats = teacher.train_on([(fake, fake_labels)] * 30)
    assert stats.steps == 30 and math.isfinite(stats.loss)
    assert teacher.vote(real[:32], labels[:32]).float().mean() > 0.9
    assert teacher.vote(fake, fake_labels).float().mean() < 0.1


def test_student_and_generator_train_on_noisy_labels_only() -> None:
    trainer = PateGANTrainer(10, CONFIG, seed=0)
    training, ballot = trainer.propose(teacher_batches=2, ballot_batches=3)
    assert len(training.images) == 2 and len(ballot.images) == 3
    assert ballot.images[0].shape == (8, 1, 28, 28)
    student = [p.detach().clone() for p in trainer.student.parameters()]
    generator = [p.detach().clone() for p in trainer.generator.generator.parameters()]
    stats = trainer.apply(torch.arange(24) % 2 == 0)
    assert stats.real_fraction == 0.5 and math.isfinite(stats.generator_loss)
    learned = zip(student, trainer.student.parameters(), strict=True)
    assert any(not torch.equal(a, b) for a, b in learned)
    moved = zip(generator, trainer.generator.generator.parameters(), strict=True)
    assert any(not torch.equal(a, b) for a, b in moved)
    # no teacher answered: nothing trains, the ballot is dropped
    trainer.propose(1, 1)
    before = [p.detach().clone() for p in trainer.student.parameters()]
    assert trainer.apply(None) is None
    kept = zip(before, trainer.student.parameters(), strict=True)
    assert all(torch.equal(a, b) for a, b in kept)
    with pytest.raises(RuntimeError, match="propose"):
        trainer.apply(torch.ones(8, dtype=torch.bool))


@pytest.fixture()
def config(tmp_path) -> RunConfig:
    return RunConfig(
        run_dir=str(tmp_path / "run"),
        strategy="pate-gan",
        generator_width=4,
        critic_width=4,
        batch_size=8,
        warm_start_steps=2,
    )


def _query(teacher_batches: int = 2, ballot_batches: int = 3) -> RecordDict:
    training, ballot = PateGANTrainer(10, CONFIG, seed=0).propose(teacher_batches, ballot_batches)
    return RecordDict(
        {
            key: common.encode_fakes(batches.images, batches.labels)
            for key, batches in ((common.FAKES, training), (pate_gan.BALLOT, ballot))
        }
    )


def test_teacher_replies_with_one_bit_per_ballot_sample(config: RunConfig) -> None:
    reply = PateTeacher(config, 0).answer(_query())
    assert set(reply.array_records) == {pate_gan.VOTES}
    assert pate_gan.decode_real_votes(reply.array_records[pate_gan.VOTES], 24).shape == (24,)
    assert set(reply.config_records) == {common.CLIENT, common.POLICY_USED}
    assert not reply.metric_records  # no loss or logit gap of the teacher's data
    assert reply[common.POLICY_USED]["strategy"] == "pate-gan"
    with pytest.raises(ProtocolError, match="ballot"):
        PateTeacher(config, 0).answer(RecordDict({common.FAKES: _query()[common.FAKES]}))


def test_teacher_warm_starts_its_classifier_once(config: RunConfig) -> None:
    session = teacher_session(config, 1)
    assert isinstance(session.critic, TeacherDiscriminator)
    first = session.warm_start(RecordDict())
    assert not first.metric_records and not first.array_records  # nothing trained leaves
    trained = {k: v.clone() for k, v in session.critic.critic.state_dict().items()}
    again = teacher_session(config, 1)
    again.warm_start(RecordDict())
    assert all(torch.equal(v, trained[k]) for k, v in again.critic.critic.state_dict().items())


def test_teacher_with_an_untrusted_server_budget_refuses(config: RunConfig) -> None:
    with pytest.raises(RequestRefused, match="trusted aggregator"):
        PateTeacher(config.with_updates(client_budget_epsilon=10.0), 0)
