"""Events and accountants against independent computations: autodp and dp-accounting called
directly, and closed forms of the Gaussian mechanism."""

from __future__ import annotations

import math

import numpy as np
import pytest
from autodp import rdp_acct, rdp_bank
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import optimize, special

from fedgs.privacy import (
    ACCOUNTANT_NAMES,
    UnsupportedEventError,
    centralized_shared_step_epsilon,
    fedavg_round_event,
    get_accountant,
    gswgan_query_event,
    paper_epsilon,
    trusted_sampler_event,
    untrusted_client_event,
)

AUTODP, RDP, PLD = "autodp-rdp", "dp-accounting-rdp", "dp-accounting-pld"


def autodp_gaussian_epsilon(sigma: float, compositions: float, delta: float) -> float:
    acct = rdp_acct.anaRDPacct()
    acct.compose_mechanism(lambda a: rdp_bank.RDP_gaussian({"sigma": sigma}, a), coeff=compositions)
    return acct.get_eps(delta)


def analytic_gaussian_epsilon(mu: float, delta: float) -> float:
    """Exact epsilon of a Gaussian mechanism with sensitivity / std = mu (Balle & Wang 2018)."""

    def excess(eps: float) -> float:
        log_first = special.log_ndtr(mu / 2 - eps / mu)
        log_second = eps + special.log_ndtr(-mu / 2 - eps / mu)
        return math.exp(log_first) - math.exp(log_second) - delta

    return optimize.brentq(excess, 0.0, 10 * mu * mu + 100, xtol=1e-10)


def test_paper_federated_figure():
    # Federated EMNIST: K=866, T=30k, B=32, sigma=1.07, delta=1.15e-3 -> paper 5.99e2
    eps = paper_epsilon("federated", 866, 30_000, 32, 1.07, 1.15e-3)
    assert eps == pytest.approx(598.6, abs=1.0)
    # the same figure from autodp by hand: 34.64 queries of 32 Gaussians, RDP composed fractionally
    assert eps == pytest.approx(autodp_gaussian_epsilon(1.07, 32 * 30_000 / 866, 1.15e-3))


def test_paper_centralized_figure():
    # MNIST: 1000 subsets, B=32, T=20k, sigma=1.07, delta=1e-5 -> paper 10
    eps = paper_epsilon("centralized", 1000, 20_000, 32, 1.07, 1e-5)
    assert eps == pytest.approx(9.99, abs=0.05)


def test_centralized_shared_step_is_much_larger_than_the_papers():
    shared = centralized_shared_step_epsilon(1000, 2_000, 32, 1.07, 1e-5)
    assert shared > 10 * paper_epsilon("centralized", 1000, 2_000, 32, 1.07, 1e-5)


@pytest.mark.parametrize("accountant", [AUTODP, RDP])
def test_untrusted_client_equals_direct_composition(accountant):
    sigma, batch, queries, delta = 1.07, 32, 12, 1e-5
    event = untrusted_client_event({(sigma, batch): queries})
    ours = get_accountant(accountant).epsilon(event, delta)
    if accountant == AUTODP:
        direct = autodp_gaussian_epsilon(sigma, batch * queries, delta)
    elif accountant == RDP:
        per_row = dp_event.GaussianDpEvent(sigma)
        direct = (
            rdp_privacy_accountant.RdpAccountant()
            .compose(per_row, count=batch * queries)
            .get_epsilon(delta)
        )
    assert ours == pytest.approx(direct, rel=1e-3)
    # the discrete Gaussian's RDP is the continuous one's, so the RDP figure is never below
    # the exact epsilon of a continuous Gaussian of the same multiplier
    assert ours >= analytic_gaussian_epsilon(math.sqrt(batch * queries) / sigma, delta)


def test_gaussian_rdp_closed_form():
    # RDP of one query: alpha * B / (2 sigma^2); dp-accounting exposes its RDP curve
    sigma, batch = 1.3, 8
    acct = rdp_privacy_accountant.RdpAccountant()
    acct.compose(untrusted_client_event({(sigma, batch): 3}))
    np.testing.assert_allclose(acct.rdp, 3 * acct.orders * batch / (2 * sigma**2), rtol=1e-9)
    assert gswgan_query_event(sigma, batch).noise_multiplier == pytest.approx(sigma / 8**0.5)


@pytest.mark.parametrize("queries", [1, 34.64, 55])
def test_autodp_is_the_classic_rdp_conversion_of_the_gaussian(queries):
    # min over alpha of alpha*c + log(1/delta)/(alpha-1), c = queries*B/(2 sigma^2):
    # c + 2 sqrt(c log(1/delta))  (the brief's sanity check: ~598.5 for the paper)
    delta = 1.15e-3
    c = queries * 32 / (2 * 1.07**2)
    closed = c + 2 * math.sqrt(c * math.log(1 / delta))
    event = untrusted_client_event({(1.07, 32): queries})
    assert get_accountant(AUTODP).epsilon(event, delta) == pytest.approx(closed, rel=1e-6)


def test_fractional_count_interpolates_linearly_in_rdp():
    delta = 1e-4
    low, mid, high = (
        get_accountant(RDP).epsilon(untrusted_client_event({(1.0, 4): n}), delta)
        for n in (10, 10.5, 11)
    )
    assert low < mid < high
    direct = autodp_gaussian_epsilon(1.0, 4 * 10.5, delta)
    assert get_accountant(AUTODP).epsilon(untrusted_client_event({(1.0, 4): 10.5}), delta) == (
        pytest.approx(direct)
    )


@pytest.mark.parametrize("queries", [1, 30, 900])
def test_pld_refuses_the_discrete_gaussian(queries):
    # the noise is a discrete Gaussian: only its RDP is proven the continuous Gaussian's
    event = untrusted_client_event({(1.07, 32): queries})
    with pytest.raises(UnsupportedEventError, match="discrete Gaussian"):
        get_accountant(PLD).epsilon(event, 1e-5)


def test_fedavg_events_take_the_general_poisson_bound():
    round_event = fedavg_round_event(10, 3400, 1.0)
    event = dp_event.SelfComposedDpEvent(round_event, 500)
    acct = rdp_acct.anaRDPacct()  # Zhu and Wang's bound for any mechanism with this RDP curve
    acct.compose_poisson_subsampled_mechanisms1(
        lambda a: rdp_bank.RDP_gaussian({"sigma": 1.0}, a), 10 / 3400, coeff=500
    )
    ours = get_accountant(AUTODP).epsilon(event, 1e-5)
    assert ours == pytest.approx(acct.get_eps(1e-5))
    # never below the tight figure of a continuous Gaussian, which it must bound
    continuous = rdp_privacy_accountant.RdpAccountant().compose(event).get_epsilon(1e-5)
    assert continuous <= ours < 3 * continuous
    for name, reason in ((RDP, "Poisson-sampled Gaussian assumes"), (PLD, "discrete Gaussian")):
        with pytest.raises(UnsupportedEventError, match=reason):
            get_accountant(name).epsilon(event, 1e-5)


@pytest.mark.parametrize("scale", [0.5, 2.0, 10.0])
def test_discrete_laplace_is_accounted_as_randomized_response(scale):
    # DLap(b) shifted by 1 is randomized response with epsilon 1/b: its RDP, composed
    event = dp_event.SelfComposedDpEvent(dp_event.DiscreteLaplaceDpEvent(1 / scale, 1), 50)
    truth = math.exp(1 / scale) / (1 + math.exp(1 / scale))
    acct = rdp_acct.anaRDPacct()
    acct.compose_mechanism(lambda a: rdp_bank.RDP_randresponse({"p": truth}, a), coeff=50)
    assert get_accountant(AUTODP).epsilon(event, 1e-5) == pytest.approx(acct.get_eps(1e-5))
    assert get_accountant(AUTODP).epsilon(event, 1e-5) <= 50 / scale * 1.001  # ~pure bound
    pld = get_accountant(PLD).epsilon(event, 1e-5)
    exact = pld_privacy_accountant.PLDAccountant().compose(event).get_epsilon(1e-5)
    assert exact <= pld * (1 + 1e-9) and pld <= 50 / scale


def test_trusted_sampler_matches_autodp_and_dp_accounting_directly():
    steps, clients, sigma, batch, delta = 500, 100, 2.0, 4, 1e-5
    event = trusted_sampler_event(steps, clients, 1, sigma, batch)
    acct = rdp_acct.anaRDPacct()
    acct.compose_subsampled_mechanism(
        lambda a: rdp_bank.RDP_gaussian({"sigma": sigma / batch**0.5}, a),
        prob=1 / clients,
        coeff=steps,
    )
    assert get_accountant(AUTODP).epsilon(event, delta) == pytest.approx(acct.get_eps(delta))
    direct = (
        rdp_privacy_accountant.RdpAccountant(
            neighboring_relation=rdp_privacy_accountant.NeighborRel.REPLACE_ONE
        )
        .compose(event)
        .get_epsilon(delta)
    )
    assert get_accountant(RDP).epsilon(event, delta) == pytest.approx(direct)


@pytest.mark.parametrize("accountant", [AUTODP, RDP])
def test_trusted_sampler_below_untrusted_expected(accountant):
    # q < 1 in a regime where subsampling amplifies (moderate per-query privacy loss)
    steps, clients, sigma, batch, delta = 1_000, 100, 1.07, 1, 1e-5
    acct = get_accountant(accountant)
    trusted = acct.epsilon(trusted_sampler_event(steps, clients, 1, sigma, batch), delta)
    expected = acct.epsilon(untrusted_client_event({(sigma, batch): steps / clients}), delta)
    assert trusted < expected


@pytest.mark.parametrize("accountant", [AUTODP, RDP])
def test_monotone_in_queries_and_noise(accountant):
    acct = get_accountant(accountant)

    def eps(sigma: float, queries: float) -> float:
        return acct.epsilon(untrusted_client_event({(sigma, 16): queries}), 1e-5)

    assert eps(1.0, 5) < eps(1.0, 6) < eps(1.0, 20)
    assert eps(2.0, 10) < eps(1.5, 10) < eps(1.0, 10)


def test_no_queries_costs_nothing():
    for name in ACCOUNTANT_NAMES:
        assert get_accountant(name).epsilon(untrusted_client_event({}), 1e-5) == 0.0


def test_unsupported_events_raise_clear_errors():
    wor = trusted_sampler_event(10, 100, 1, 1.0, 1)
    with pytest.raises(UnsupportedEventError, match="no sampling without replacement"):
        get_accountant(PLD).epsilon(wor, 1e-5)
    mixed = dp_event.ComposedDpEvent([wor, fedavg_round_event(1, 100, 1.0)])
    for name in (AUTODP, RDP):
        with pytest.raises(UnsupportedEventError, match="Poisson"):
            get_accountant(name).epsilon(mixed, 1e-5)
    for name in ACCOUNTANT_NAMES:
        with pytest.raises(UnsupportedEventError, match=name):
            get_accountant(name).epsilon(dp_event.UnsupportedDpEvent(), 1e-5)


def test_bad_inputs():
    with pytest.raises(ValueError, match="unknown accountant"):
        get_accountant("moments")
    with pytest.raises(ValueError, match="delta"):
        get_accountant(RDP).epsilon(untrusted_client_event({(1.0, 1): 1}), 1.0)
    with pytest.raises(ValueError, match="noise_multiplier"):
        gswgan_query_event(0.0, 32)
    with pytest.raises(ValueError, match="batch_size"):
        gswgan_query_event(1.0, 0)
    with pytest.raises(ValueError, match="clients_per_step"):
        trusted_sampler_event(10, 5, 6, 1.0, 1)
