"""The critics' label-mismatch term: real images under wrong labels are scored as fakes."""

from __future__ import annotations

import pytest
import torch

from fedgs.client.gswgan_session import GSWGANSession
from fedgs.models import ConditionalDCGANDiscriminator, critic_loss
from fedgs.models.losses import generator_upstream_gradient
from fedgs.protocols import common
from fedgs.run_config import RunConfig
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.hparams import GSWGANConfig

CLASSES = 4


def _images_whose_class_is_visible(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Class k lights up quadrant k of a dark image: the label is a function of the image."""
    rng = torch.Generator().manual_seed(seed)
    labels = torch.randint(CLASSES, (count,), generator=rng)
    images = torch.full((count, 1, 28, 28), -1.0)
    for i, k in enumerate(labels.tolist()):
        row, col = divmod(k, 2)
        images[i, 0, row * 14 + 3 : row * 14 + 11, col * 14 + 3 : col * 14 + 11] = 1.0
    return images + 0.05 * torch.randn(images.shape, generator=rng), labels


def _label_share(mismatch_weight: float) -> float:
    """Median share of the input gradient -grad_x D(x, y) that depends on the label y (its
    distance from the mean over labels, relative to its norm), on held-out real images. Clipping
    keeps a row's direction, so this share is what the generator can learn its labels from."""
    torch.manual_seed(0)
    critic = ConditionalDCGANDiscriminator(CLASSES, width=8)
    optimizer = torch.optim.Adam(critic.parameters(), lr=1e-3, betas=(0.5, 0.9))
    images, labels = _images_whose_class_is_visible(512, seed=1)
    for step in range(60):
        batch = slice((step * 32) % 512, (step * 32) % 512 + 32)
        fake = torch.rand(32, 1, 28, 28) * 2 - 1  # label-free noise: no label signal from fakes
        fake_labels = torch.randint(CLASSES, (32,))
        loss = critic_loss(
            critic,
            images[batch],
            labels[batch],
            fake,
            fake_labels,
            mismatch_weight=mismatch_weight,
        ).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    test_images, test_labels = _images_whose_class_is_visible(200, seed=2)
    grads = torch.stack(
        [
            generator_upstream_gradient(critic, test_images, torch.full_like(test_labels, k))
            for k in range(CLASSES)
        ]
    )  # (classes, images, 784): -grad_x D(x, k)
    own = grads[test_labels, torch.arange(test_labels.shape[0])]
    label_part = own - grads.mean(dim=0)
    return float((label_part.norm(dim=1) / own.norm(dim=1)).median())


def test_mismatch_term_teaches_the_critic_its_labels() -> None:
    with_term = _label_share(1.0)
    without = _label_share(0.0)
    assert with_term > 1.5 * without


def test_mismatch_term_is_zero_weight_by_default_and_refuses_negative_weights() -> None:
    assert GSWGANConfig().label_mismatch_weight == 0.0
    with pytest.raises(ValueError, match="label_mismatch_weight"):
        GSWGANConfig(label_mismatch_weight=-1.0)


def test_annealed_weight_falls_linearly_to_zero_at_its_step() -> None:
    annealed = GSWGANConfig(label_mismatch_weight=2.0, label_mismatch_until=100)
    weights = [annealed.label_mismatch_at(step) for step in (0, 50, 100, 5000)]
    assert weights == [2.0, 1.0, 0.0, 0.0]
    assert GSWGANConfig(label_mismatch_weight=2.0).label_mismatch_at(10**6) == 2.0
    with pytest.raises(ValueError, match="label_mismatch_until"):
        GSWGANConfig(label_mismatch_until=-1)


def _critic_after_one_query(tmp_path, weight: float, until: int, step: int) -> dict:
    """A client's critic after answering one query of server ``step``, through its session."""
    run = RunConfig(
        run_dir=str(tmp_path / f"run{len(list(tmp_path.iterdir()))}"),  # a fresh client
        generator_width=4,
        critic_width=4,
        batch_size=8,
        critic_steps=2,
        label_mismatch_weight=weight,
        label_mismatch_until=until,
    )
    (query,) = GeneratorTrainer(10, run.gswgan(), seed=0).propose(1)
    content = common.query_content(
        {common.FAKES: common.encode_fakes(query.images, query.labels)}, step
    )
    session = GSWGANSession(run, 0)
    torch.manual_seed(0)  # the gradient penalty's interpolation draws
    session.answer(content)
    return session.critic.critic.state_dict()


def _same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[name], b[name]) for name in a)


def test_a_client_applies_the_schedule_at_the_step_the_query_carries(tmp_path) -> None:
    without = _critic_after_one_query(tmp_path, 0.0, 0, 7)
    assert _same(_critic_after_one_query(tmp_path, 2.0, 7, 7), without)  # annealed away
    assert _same(_critic_after_one_query(tmp_path, 0.0, 0, 7), without)  # deterministic
    assert not _same(_critic_after_one_query(tmp_path, 2.0, 7, 3), without)  # still on
