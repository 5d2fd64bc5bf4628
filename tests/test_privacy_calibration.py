"""Noise calibration: the smallest multiplier meeting a target, checked with the accountants."""

from __future__ import annotations

import pytest

from fedgs.privacy import (
    calibrate_noise_multiplier,
    get_accountant,
    trusted_sampler_event,
    untrusted_client_event,
)


@pytest.mark.parametrize(
    ("accountant", "queries", "target", "tolerance"),
    [
        ("autodp-rdp", 51, 10.0, 1e-3),
        ("dp-accounting-rdp", 34.64, 100.0, 1e-3),
    ],
)
def test_untrusted_calibration_hits_the_target(accountant, queries, target, tolerance):
    sigma = calibrate_noise_multiplier(
        target,
        1e-5,
        batch_size=32,
        queries_per_client=queries,
        accountant=accountant,
        tolerance=tolerance,
        search_range=(0.5, 50.0),
    )
    acct = get_accountant(accountant)

    def eps(s: float) -> float:
        return acct.epsilon(untrusted_client_event({(s, 32): queries}), 1e-5)

    assert eps(sigma) <= target < eps(sigma - tolerance)


def test_trusted_sampler_calibration_hits_the_target():
    acct = get_accountant("autodp-rdp")
    sigma = calibrate_noise_multiplier(
        5.0,
        1e-5,
        batch_size=1,
        steps=200,
        clients=50,
        model="trusted-sampler",
        accountant=acct,
        tolerance=0.1,
        search_range=(0.5, 1.2),
    )

    def eps(s: float) -> float:
        return acct.epsilon(trusted_sampler_event(200, 50, 1, s, 1), 1e-5)

    assert eps(sigma) <= 5.0 < eps(sigma - 0.1)


def test_more_queries_need_more_noise():
    sigmas = [
        calibrate_noise_multiplier(
            8.0, 1e-5, batch_size=32, queries_per_client=n, model="untrusted", tolerance=0.01
        )
        for n in (10, 40)
    ]
    assert sigmas[0] < sigmas[1]


def test_unreachable_and_bad_requests_raise():
    with pytest.raises(ValueError, match="unreachable"):
        calibrate_noise_multiplier(
            1e-3, 1e-5, batch_size=32, queries_per_client=1000, search_range=(0.1, 2.0)
        )
    with pytest.raises(ValueError, match="queries_per_client"):
        calibrate_noise_multiplier(1.0, 1e-5, batch_size=32)
    with pytest.raises(ValueError, match="steps and clients"):
        calibrate_noise_multiplier(1.0, 1e-5, batch_size=32, model="trusted-sampler")
    with pytest.raises(ValueError, match="delta"):
        calibrate_noise_multiplier(1.0, 2.0, batch_size=32, queries_per_client=1)
    with pytest.raises(ValueError, match="target_epsilon"):
        calibrate_noise_multiplier(0.0, 1e-5, batch_size=32, queries_per_client=1)
