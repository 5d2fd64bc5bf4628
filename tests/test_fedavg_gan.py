"""Fed-Avg GAN: DP-FedAvg clipping and noise, its accounting, the client update, wire formats."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedgs import wire
from fedgs.comm import fedavg_protocol_bytes, gswgan_paper_bytes, gswgan_protocol_bytes
from fedgs.models.tfgan import TFGANDiscriminator, TFGANGenerator
from fedgs.privacy import FedAvgLedger
from fedgs.privacy.dp_fedavg import NonFiniteDeltaError, clip_delta, noisy_mean
from fedgs.training.fedavg_gan import FedAvgGANTrainer, local_critic_delta
from fedgs.training.hparams import FedAvgGANConfig


@settings(max_examples=200, deadline=None)
@given(
    scale=st.floats(1e-30, 1e30),
    clip=st.floats(1e-3, 10.0),
    seed=st.integers(0, 2**31),
)
def test_clipped_delta_norm_never_exceeds_the_bound(scale: float, clip: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    delta = [(rng.standard_normal(s) * scale).astype(np.float32) for s in [(3, 4), (5,), (2,)]]
    clipped, norm = clip_delta(delta, clip)
    clipped_norm = math.sqrt(sum(float((a**2).sum()) for a in clipped))
    assert clipped_norm <= clip * (1 + 1e-9)
    if norm <= clip:  # small deltas pass unchanged
        for a, b in zip(clipped, delta, strict=True):
            np.testing.assert_allclose(a, b.astype(np.float64), rtol=1e-12)
    else:  # large ones keep their direction
        assert clipped_norm == pytest.approx(clip, rel=1e-9)
        flat = np.concatenate([a.ravel() for a in clipped])
        orig = np.concatenate([b.ravel().astype(np.float64) for b in delta])
        assert np.dot(flat, orig) / (np.linalg.norm(flat) * np.linalg.norm(orig)) > 1 - 1e-9


def test_clip_and_noise_scale_equal_flowers_building_blocks() -> None:
    """fedgs/privacy stays framework-free; Flower's DP helpers are the reference it must equal."""
    from flwr.supercore.differential_privacy import clip_inputs_inplace, compute_stdv, get_norm

    rng = np.random.default_rng(0)
    for scale in (1e-3, 1.0, 50.0):
        delta = [rng.standard_normal(s) * scale for s in [(3, 4), (5,), (2,)]]
        flowers = [a.copy() for a in delta]
        clip_inputs_inplace(flowers, 0.1)
        ours, norm = clip_delta(delta, 0.1)
        assert norm == pytest.approx(get_norm(delta), rel=1e-12)
        for a, b in zip(ours, flowers, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12)
    out = noisy_mean([], [(200_000,)], 0.1, 2.0, 4)[0].astype(np.float64)
    assert out.std() == pytest.approx(compute_stdv(2.0, 0.1, 4), rel=0.02)


def test_non_finite_delta_is_refused_not_clipped() -> None:
    with pytest.raises(NonFiniteDeltaError):
        clip_delta([np.array([1.0, np.nan], dtype=np.float32)], 0.1)
    with pytest.raises(NonFiniteDeltaError):
        clip_delta([np.array([np.inf], dtype=np.float32)], 0.1)


def test_noise_std_is_z_times_s_over_m() -> None:
    s, z, m = 0.1, 2.0, 4
    out = noisy_mean([], [(400_000,)], s, z, m)[0].astype(np.float64)
    assert out.std() == pytest.approx(z * s / m, rel=0.01)
    assert abs(out.mean()) < 5 * (z * s / m) / math.sqrt(out.size)


def test_noise_is_fresh_every_call() -> None:
    a = noisy_mean([], [(1000,)], 0.1, 1.0, 2)[0]
    b = noisy_mean([], [(1000,)], 0.1, 1.0, 2)[0]
    assert not np.array_equal(a, b)


def test_without_noise_the_mean_has_a_fixed_denominator() -> None:
    d1 = [np.array([0.03, 0.04]), np.array([0.0])]
    d2 = [np.array([-0.01, 0.0]), np.array([0.02])]
    out = noisy_mean([d1, d2], [(2,), (1,)], 0.1, 0.0, expected_clients=4)
    np.testing.assert_allclose(out[0], [0.005, 0.01], rtol=1e-6)
    np.testing.assert_allclose(out[1], [0.005], rtol=1e-6)


def test_accounting_reproduces_the_paper_figure_and_reports_a_tighter_one() -> None:
    """Fed-Avg GAN paper setting (K = 866, m = 10, z = 0.01, 1,000 rounds): the paper's ~1e7
    (9.99e6) is the tight Poisson-sampled RDP of the continuous Gaussian; at z = 0.01 it is
    looser than no amplification at all, which the ledger reports (1,000 Gaussians of z = 0.01)."""
    from autodp import rdp_acct, rdp_bank

    paper = rdp_acct.anaRDPacct()
    paper.compose_poisson_subsampled_mechanisms(
        lambda a: rdp_bank.RDP_gaussian({"sigma": 0.01}, a), 10 / 866, coeff=1000
    )
    assert paper.get_eps(1.15e-3) == pytest.approx(9.99e6, rel=0.01)
    ledger = FedAvgLedger(0.01)
    for _ in range(1000):
        ledger.record_round(10, 866)
    rho = 1000 / (2 * 0.01**2)  # zCDP of the unamplified composition
    unamplified = rho + 2 * math.sqrt(rho * math.log(1 / 1.15e-3))
    assert ledger.epsilon(1.15e-3, "autodp-rdp") == pytest.approx(unamplified, rel=1e-3)


def test_accounting_bounds_flowers_own_rdp_accountant() -> None:
    """An independent path: Flower's RdpAccountant for Poisson-sampled *continuous* Gaussian
    releases. Our noise is a discrete Gaussian, so the ledger takes autodp's general Poisson bound,
    which must lie above Flower's tight continuous figure but not far; Google's RDP accountant,
    whose Poisson analysis is the continuous one's, is refused."""
    from flwr.supercore.privacy_accounting import (
        GaussianPrivacyEvent,
        NeighboringRelation,
        PrivacyConfig,
        SamplingMethod,
    )
    from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

    flower = RdpAccountant(
        PrivacyConfig(
            target_delta=1e-5,
            population_size=866,
            neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
            sampling_method=SamplingMethod.POISSON,
        )
    )
    flower.compose(GaussianPrivacyEvent(1.0, 10, 866), 300)
    flower.compose(GaussianPrivacyEvent(1.0, 25, 866), 200)
    ledger = FedAvgLedger(1.0)
    for m, n in ((10, 300), (25, 200)):
        for _ in range(n):
            ledger.record_round(m, 866)
    continuous = flower.get_epsilon(1e-5)
    assert continuous <= ledger.epsilon(1e-5, "autodp-rdp") < 3 * continuous
    with pytest.raises(ValueError, match="discrete Gaussian"):
        ledger.epsilon(1e-5, "dp-accounting-rdp")
    with pytest.raises(ValueError, match="discrete Gaussian"):
        ledger.epsilon(1e-5, "dp-accounting-pld")


def test_ledger_round_trips_and_reports_its_threat_model() -> None:
    ledger = FedAvgLedger(0.5)
    for _ in range(7):
        ledger.record_round(3, 20)
    restored = FedAvgLedger.from_dict(ledger.to_dict())
    assert restored.rounds == 7
    assert restored.epsilon(1e-5) == ledger.epsilon(1e-5)
    summary = ledger.summary(1e-5)
    assert summary["trusted_server"]["threat_model"] == "trusted-server"
    assert summary["untrusted_server"]["epsilon"] is None  # no guarantee; JSON has no infinity
    assert FedAvgLedger(0.0).epsilon(1e-5) == 0.0  # nothing released yet


def test_paper_models_have_the_papers_sizes() -> None:
    g, d = TFGANGenerator(10), TFGANDiscriminator(10)
    g_params = sum(p.numel() for p in g.parameters())
    d_params = sum(p.numel() for p in d.parameters())
    assert g_params == pytest.approx(13.3e6, rel=0.01)
    assert d_params == pytest.approx(6.56e6, rel=0.01)
    z, y = torch.randn(4, g.z_dim), torch.randint(10, (4,))
    images = g(z, y)
    assert images.shape == (4, 1, 28, 28) and images.abs().max() <= 1
    assert d(images, y).shape == (4,)


def test_local_update_reports_exactly_the_parameter_change() -> None:
    config = FedAvgGANConfig(models="gswgan", generator_width=4, critic_width=4, batch_size=8)
    trainer = FedAvgGANTrainer(10, config, seed=0)
    critic = trainer.critic
    start = {n: p.detach().clone() for n, p in critic.named_parameters()}
    images, labels = trainer.propose()
    real = torch.rand(8, 1, 28, 28) * 2 - 1
    result = local_critic_delta(
        critic,
        lambda: (real, torch.randint(10, (8,))),
        list(zip(images, labels, strict=True)),
        config,
    )
    assert set(result.delta) == set(start)
    for name, p in critic.named_parameters():
        np.testing.assert_allclose(result.delta[name], (p.detach() - start[name]).numpy())
    assert any(np.abs(d).max() > 0 for d in result.delta.values())


def test_server_update_applies_the_mean_then_trains_the_generator() -> None:
    config = FedAvgGANConfig(models="gswgan", generator_width=4, critic_width=4, lr_server=0.5)
    trainer = FedAvgGANTrainer(10, config, seed=0)
    before_d = {n: p.detach().clone() for n, p in trainer.critic.named_parameters()}
    before_g = [p.detach().clone() for p in trainer.generator.parameters()]
    mean = {n: np.full(p.shape, 0.01, np.float32) for n, p in trainer.critic.named_parameters()}
    trainer.apply(mean)
    for name, p in trainer.critic.named_parameters():
        torch.testing.assert_close(p.detach(), before_d[name] + 0.005)
    assert any(
        not torch.equal(a, b) for a, b in zip(before_g, trainer.generator.parameters(), strict=True)
    )


@pytest.mark.parametrize("dtype,tolerance", [("float32", 0), ("float16", 1e-3), ("bfloat16", 8e-3)])
def test_wire_formats_round_trip(dtype: str, tolerance: float) -> None:
    values = np.random.default_rng(0).standard_normal(10_000).astype(np.float32)
    packed = wire.encode(values, dtype)
    assert packed.nbytes == values.nbytes // (1 if dtype == "float32" else 2)
    restored = wire.decode(packed)
    assert restored.dtype == np.float32
    np.testing.assert_allclose(restored, values, rtol=tolerance, atol=tolerance)


def test_wire_rejects_unknown_formats() -> None:
    with pytest.raises(wire.WireFormatError):
        wire.encode(np.zeros(3, np.float32), "int8")
    with pytest.raises(wire.WireFormatError):
        wire.decode(np.zeros(3, np.float64))


def test_analytic_byte_counts() -> None:
    assert gswgan_paper_bytes(32) == 200_704  # the figure
    assert gswgan_protocol_bytes(32, 1)["down"] + gswgan_protocol_bytes(32, 1)["up"] == (
        200_704 + 32 * 8
    )
    d = TFGANDiscriminator(10)
    n = sum(p.numel() for p in d.parameters())
    cost = fedavg_protocol_bytes(n, n, 32, 6)
    assert cost["up"] == 4 * n
    assert cost["down"] + cost["up"] > 100 * gswgan_paper_bytes(32)
