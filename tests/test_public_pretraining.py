"""Public pretraining of G (issue 21): font-rendered digits, a server-side phase with no privacy
cost, recorded wherever the run's results are."""

from __future__ import annotations

import pytest
import torch

from fedgs.data.public_digits import cached_digits, render_digits
from fedgs.run_config import RunConfig
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.hparams import GSWGANConfig
from fedgs.training.public_pretraining import pretrain_generator, public_data_record
from fedgs.training.run_dir import _privacy_lines


def test_rendered_digits_are_femnist_framed_balanced_and_seeded():
    images, labels = render_digits(40, seed=3)
    assert images.shape == (40, 1, 28, 28)
    assert images.min() >= -1.0 and images.max() <= 1.0
    assert torch.equal(torch.bincount(labels), torch.full((10,), 4))
    ink = (images > 0).float().mean()
    assert 0.02 < ink < 0.15  # thin strokes on a dark frame, like FEMNIST (0.037)
    assert (images[:, 0, 0, :] == -1).all()  # nothing touches the top border row
    again, _ = render_digits(40, seed=3)
    other, _ = render_digits(40, seed=4)
    assert torch.equal(images, again)
    assert not torch.equal(images, other)
    # two renderings of one digit differ (random font, thinning, rotation, shear, size, shift)
    assert not torch.equal(images[0], images[10])


def test_rendering_refuses_an_empty_set():
    with pytest.raises(ValueError, match="count"):
        render_digits(0)


def test_cached_digits_render_once(tmp_path):
    first = cached_digits(12, seed=1, cache_dir=tmp_path)
    (stored,) = tmp_path.glob("public_digits-*.pt")
    assert not list(tmp_path.glob("*.tmp"))
    stored.write_bytes(b"")  # a second call must read the file, not render again
    with pytest.raises(Exception):  # noqa: B017 (torch's error for an empty file)
        cached_digits(12, seed=1, cache_dir=tmp_path)
    stored.unlink()
    assert torch.equal(cached_digits(12, seed=1, cache_dir=tmp_path)[0], first[0])


def test_pretraining_moves_g_and_restarts_its_ema_and_optimizer():
    config = GSWGANConfig(batch_size=4, generator_width=4, critic_width=4)
    trainer = GeneratorTrainer(10, config, seed=0)
    before = [p.detach().clone() for p in trainer.generator.parameters()]
    images, labels = render_digits(20)
    done = pretrain_generator(trainer, images, labels, steps=2, batch_size=4)
    assert done.steps == 2 and done.images == 20
    after = list(trainer.generator.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    ema = dict(trainer.ema.module.named_parameters())
    assert all(torch.equal(ema[n], p) for n, p in trainer.generator.named_parameters())
    assert not trainer.optimizer.state  # fresh Adam moments for the private steps


def test_pretraining_needs_a_step():
    trainer = GeneratorTrainer(10, GSWGANConfig(generator_width=4, critic_width=4))
    with pytest.raises(ValueError, match="steps"):
        pretrain_generator(trainer, *render_digits(10), steps=0)


def test_run_config_checks_public_pretraining():
    assert RunConfig(public_pretrain_steps=5).public_pretrain_steps == 5
    with pytest.raises(ValueError, match="public-pretrain-steps must be >= 0"):
        RunConfig(public_pretrain_steps=-1)
    with pytest.raises(ValueError, match="noise-multiplier > 0"):
        RunConfig(noise_multiplier=0.0)
    with pytest.raises(ValueError, match="gswgan only"):
        RunConfig(strategy="fedavg-gan", public_pretrain_steps=5)


def test_privacy_json_and_summary_say_when_public_data_was_used():
    assert public_data_record(0) == {}
    record = public_data_record(300)["public_data"]
    assert record["pretrain_steps"] == 300 and "fonts" in record["source"]
    privacy = {
        "strategy": "gswgan",
        "delta": 1e-5,
        "neighbouring": "replace-one",
        "steps": 3,
        "untrusted_server": {"epsilon": 12.0, "accountant": "autodp-rdp"},
        "trusted_sampler": {"epsilon": 5.0, "accountant": "autodp-rdp"},
        "queries": {"max": 3, "median": 1, "clients_queried": 3},
    }
    assert not any("public data" in line for line in _privacy_lines(privacy))
    lines = _privacy_lines(privacy | public_data_record(300))
    assert any("public data: G pre-trained for 300 steps" in line for line in lines)


def test_pretrained_generator_is_cached_per_initial_weights_and_settings(tmp_path):
    """The second run with the same seed reads G from the cache and ends where the first did;
    another initial G or other phase settings train anew (the cache cannot hand a run a G
    pre-trained for someone else's settings)."""
    import fedgs.training.public_pretraining as phase

    config = GSWGANConfig(batch_size=4, generator_width=4, critic_width=4)
    phase.PUBLIC_IMAGES, saved = 20, phase.PUBLIC_IMAGES
    try:
        first = GeneratorTrainer(10, config, seed=0)
        before = torch.get_rng_state()
        done = phase.pretrain_on_public_digits(first, steps=2, seed=0, cache_dir=tmp_path)
        assert not done.cached
        assert torch.equal(torch.get_rng_state(), before)  # a hit and a miss: same global RNG
        (stored,) = (tmp_path / "public_pretraining").glob("generator-*.pt")
        assert not list(stored.parent.glob("*.tmp"))

        again = GeneratorTrainer(10, config, seed=0)
        hit = phase.pretrain_on_public_digits(again, steps=2, seed=0, cache_dir=tmp_path)
        assert hit.cached and hit.steps == 2 and hit.images == 20
        for a, b in zip(first.generator.parameters(), again.generator.parameters(), strict=True):
            assert torch.equal(a, b)
        assert not again.optimizer.state  # restarted as after a trained phase

        noisier = replace_config(config, noise_multiplier=5.0)  # private settings: same G
        assert phase.pretrain_on_public_digits(
            GeneratorTrainer(10, noisier, seed=0), steps=2, seed=0, cache_dir=tmp_path
        ).cached
        other_init = GeneratorTrainer(10, config, seed=1)
        assert not phase.pretrain_on_public_digits(
            other_init, steps=2, seed=0, cache_dir=tmp_path
        ).cached
        wider = GeneratorTrainer(10, replace_config(config, critic_width=8), seed=0)
        assert not phase.pretrain_on_public_digits(
            wider, steps=2, seed=0, cache_dir=tmp_path
        ).cached
        assert len(list((tmp_path / "public_pretraining").glob("generator-*.pt"))) == 3
    finally:
        phase.PUBLIC_IMAGES = saved


def replace_config(config: GSWGANConfig, **changes: object) -> GSWGANConfig:
    from dataclasses import replace

    return replace(config, **changes)
