"""Teacher-ensemble accounting (DataLens, PATE-GAN) against independent computations: closed forms
of the Gaussian mechanism and of randomized response (the discrete Laplace shifted by one), written
out here rather than taken from a library."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from test_privacy_accountants import analytic_gaussian_epsilon

from fedgs.privacy import get_accountant
from fedgs.privacy.events import compose_counts
from fedgs.privacy.teacher_events import (
    datalens_step_event,
    pate_step_event,
    teacher_step_event,
)
from fedgs.privacy.teacher_ledger import TeacherLedger

AUTODP, RDP, PLD = "autodp-rdp", "dp-accounting-rdp", "dp-accounting-pld"


def laplace_rdp(order: float, epsilon0: float) -> float:
    """RDP of the Laplace mechanism with pure-DP parameter epsilon0 (Mironov 2017, Prop. 6)."""
    a = order
    return math.log(
        a / (2 * a - 1) * math.exp((a - 1) * epsilon0)
        + (a - 1) / (2 * a - 1) * math.exp(-a * epsilon0)
    ) / (a - 1)


def randomized_response_rdp(order: float, epsilon0: float) -> float:
    """RDP of binary randomized response that tells the truth with probability e^e0 / (1 + e^e0),
    which is what a discrete Laplace of parameter e0 shifted by one is."""
    log_p, log_q = -math.log1p(math.exp(-epsilon0)), -math.log1p(math.exp(epsilon0))
    a = order  # log(p^a q^(1-a) + q^a p^(1-a)) in log space: no overflow at large orders
    return float(np.logaddexp(a * log_p + (1 - a) * log_q, a * log_q + (1 - a) * log_p)) / (a - 1)


def classic_rdp_epsilon(rdp, delta: float) -> float:
    """min over orders of rdp(a) + log(1/delta) / (a - 1): the conversion autodp uses."""
    orders = np.concatenate([np.linspace(1.01, 10, 2000), np.linspace(10, 2000, 20000)])
    return min(rdp(a) + math.log(1 / delta) / (a - 1) for a in orders)


def test_datalens_multiplier_is_noise_over_replace_one_sensitivity() -> None:
    # a B x 784 vote with at most k entries of +-1 per row moves by 2 sqrt(k B) in L2
    event = datalens_step_event(noise_std=80.0, top_k=200, batch_size=32)
    assert isinstance(event, dp_event.GaussianDpEvent)
    assert event.noise_multiplier == pytest.approx(80.0 / (2 * math.sqrt(200 * 32)))


@pytest.mark.parametrize("steps", [1, 7, 40])
def test_datalens_client_epsilon_matches_the_analytic_gaussian(steps: int) -> None:
    kind = datalens_step_event(noise_std=300.0, top_k=50, batch_size=16)
    ledger = TeacherLedger()
    for _ in range(steps):
        ledger.record("writer", kind)
    # `steps` Gaussians of multiplier s compose to one of multiplier s / sqrt(steps); the
    # discrete Gaussian's RDP is the continuous one's, so its RDP figures never go below the
    # continuous Gaussian's exact epsilon, and PLD (not proven for it) is refused
    exact = analytic_gaussian_epsilon(math.sqrt(steps) / kind.noise_multiplier, 1e-5)
    for name in (AUTODP, RDP):
        assert exact <= ledger.epsilon("writer", 1e-5, name) <= 1.5 * exact
    with pytest.raises(ValueError, match="discrete Gaussian"):
        ledger.epsilon("writer", 1e-5, PLD)


def test_one_pate_release_is_pure_two_over_b() -> None:
    # DLap(b) on each of the two counts, each moved by 1: two randomized responses of epsilon
    # a = 1/b, (2/b, 0)-DP together. Their privacy loss is 2a with probability p^2 (p = e^a /
    # (1 + e^a)), so just below 2a: delta(eps) = p^2 (1 - e^(eps - 2a)),
    # i.e. eps = 2a + log(1 - delta / p^2)
    b, delta = 4.0, 1e-5
    kind = pate_step_event(b, 1)
    assert kind == dp_event.SelfComposedDpEvent(dp_event.DiscreteLaplaceDpEvent(1 / b, 1), 2)
    p = math.exp(1 / b) / (1 + math.exp(1 / b))
    exact = 2 / b + math.log(1 - delta / p**2)
    pld = get_accountant(PLD).epsilon(kind, delta)
    assert pld == pytest.approx(exact, rel=1e-3)
    assert pld >= exact * (1 - 1e-9)


@pytest.mark.parametrize(("b", "queries", "steps"), [(20.0, 64, 3), (50.0, 160, 10)])
def test_pate_client_epsilon_matches_randomized_response_rdp_by_hand(
    b: float, queries: int, steps: int
):
    kind = pate_step_event(b, queries)
    event = compose_counts({kind: steps})
    n, eps0, delta = queries * steps, 2 / b, 1e-5
    by_hand = classic_rdp_epsilon(lambda a: 2 * n * randomized_response_rdp(a, 1 / b), delta)
    assert get_accountant(AUTODP).epsilon(event, delta) == pytest.approx(by_hand, rel=0.01)
    # dp-accounting converts RDP more tightly; PLD is tighter still; all beat basic composition
    rdp = get_accountant(RDP).epsilon(event, delta)
    pld = get_accountant(PLD).epsilon(event, delta)
    assert pld <= rdp * 1.001 <= by_hand * 1.01
    assert rdp < n * eps0


def test_ledger_reports_the_most_voted_client_and_round_trips() -> None:
    kind = pate_step_event(10.0, 32)
    ledger = TeacherLedger()
    for client, steps in (("b", 3), ("a", 3), ("c", 1)):
        for _ in range(steps):
            ledger.record(client, kind)
    epsilon, worst = ledger.epsilon_max(1e-5, RDP)
    assert worst == "a"  # ties go to the smallest id
    assert epsilon == pytest.approx(ledger.epsilon("b", 1e-5, RDP))
    assert epsilon > ledger.epsilon("c", 1e-5, RDP) > 0
    assert ledger.step_counts() == {"a": 3, "b": 3, "c": 1}
    again = TeacherLedger.from_json(ledger.to_json())
    assert again.to_dict() == ledger.to_dict()
    assert again.epsilon_max(1e-5, RDP) == (epsilon, "a")
    summary = ledger.summary(1e-5, RDP)
    assert summary["trusted_aggregator"]["threat_model"] == "trusted-aggregator"
    assert summary["trusted_aggregator"]["epsilon"] == epsilon
    assert summary["untrusted_server"]["epsilon"] is None  # no guarantee: strict JSON, no Infinity
    assert summary["votes"] == {
        "clients_voted": 3,
        "total_steps": 7,
        "min": 1,
        "median": 3,
        "max": 3,
        "counted_when": "sent (charged whether or not the votes came back)",
        "unattributed": 0,
    }


def test_unattributed_steps_move_to_their_client_or_count_for_every_client() -> None:
    kind = pate_step_event(10.0, 32)
    ledger = TeacherLedger()
    ledger.record("a", kind)
    ledger.record_unattributed("node-4", kind)
    ledger.record_unattributed("node-5", kind)
    ledger.attribute("node-4", "b")
    assert ledger.step_counts() == {"a": 1, "b": 1} and ledger.unattributed_count() == 1
    # node-5's client is unknown (a run killed before its reply): every client may be it
    two = TeacherLedger()
    two.record("a", kind)
    two.record("a", kind)
    assert ledger.epsilon_max(1e-5, RDP) == (two.epsilon("a", 1e-5, RDP), "a")
    again = TeacherLedger.from_json(ledger.to_json())
    assert again.to_dict() == ledger.to_dict() and again.unattributed_count() == 1


@pytest.mark.parametrize(
    "kind", [("gaussian", 0.0, 1), ("laplace", -1.0, 1), ("cauchy", 1.0, 1), ("laplace", 1.0, 0)]
)
def test_bad_kinds_are_refused(kind) -> None:
    with pytest.raises(ValueError):
        teacher_step_event(*kind)


def test_version_2_teacher_ledgers_load_with_the_same_epsilons() -> None:
    """Rows of mechanism, multiplier, releases and count (version 2, as main wrote before
    issue 19) read back to the events they charged then (a continuous Laplace for PATE-GAN);
    written again as version 3."""
    pate, lens = teacher_step_event("laplace", 5.0, 32), datalens_step_event(400.0, 10, 8)
    old = {
        "version": 2,
        "steps": {"a": [["laplace", 5.0, 32, 3]], "b": [["gaussian", lens.noise_multiplier, 1, 2]]},
        "unattributed": {"node-4": [["laplace", 5.0, 32, 1]]},
    }
    loaded = TeacherLedger.from_dict(old)
    same = TeacherLedger()
    for _ in range(3):
        same.record("a", pate)
    for _ in range(2):
        same.record("b", lens)
    same.record_unattributed("node-4", pate)
    assert loaded.to_dict() == same.to_dict() and loaded.to_dict()["version"] == 3
    assert loaded.summary(1e-5, RDP) == same.summary(1e-5, RDP)
    assert TeacherLedger.from_dict({**old, "version": 1}).to_dict() == same.to_dict()
