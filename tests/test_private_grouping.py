"""The debugging scenario's private grouping (issue 44, item 1): each writer's randomized-response
bit, the server's grouping from the bits alone, and the end-to-end epsilon per writer.

The accountant figures are recomputed here straight from autodp and dp-accounting, not through
fedgs' accountants, so a wrong event or a wrong composition in fedgs shows as a mismatch.
"""

from __future__ import annotations

import csv
import inspect
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from autodp import rdp_acct, rdp_bank
from dp_accounting import dp_event, privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from fedgs.cli import main
from fedgs.debugging import grouping
from fedgs.debugging.grouping import (
    end_to_end_epsilons,
    generator_target,
    groups_from_release,
    randomized_response,
    release_bits,
    release_probability,
    truth_probability,
)
from fedgs.debugging.report import grouping_privacy
from fedgs.debugging.scoring import NORMAL, SUSPECTED, assign_groups, choose_thresholds
from fedgs.privacy.accountants import get_accountant
from fedgs.privacy.events import gswgan_query_event, randomized_response_event
from fedgs.privacy.ledger import PrivacyLedger
from fedgs.privacy.randomness import SecureRandom
from fedgs.simulations.debug_scenario import ScenarioOptions, _group

DELTA = 1e-5


def _autodp_epsilon(grouping_epsilon: float, sigma: float, batch: int, queries: int) -> float:
    """autodp alone: randomized response's RDP plus ``queries`` Gaussians of sigma / sqrt(B)."""
    acct = rdp_acct.anaRDPacct()
    truth = math.exp(grouping_epsilon) / (1.0 + math.exp(grouping_epsilon))
    acct.compose_mechanism(lambda a: rdp_bank.RDP_randresponse({"p": truth}, a))
    if queries:
        multiplier = sigma / math.sqrt(batch)
        acct.compose_mechanism(
            lambda a: rdp_bank.RDP_gaussian({"sigma": multiplier}, a), coeff=queries
        )
    return float(acct.get_eps(DELTA))


def _google_rdp_epsilon(grouping_epsilon: float, sigma: float, batch: int, queries: int) -> float:
    """dp-accounting's RDP accountant on its own randomized-response event and the Gaussians."""
    acct = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=privacy_accountant.NeighboringRelation.REPLACE_ONE
    )
    acct.compose(dp_event.RandomizedResponseDpEvent(2.0 / (1.0 + math.exp(grouping_epsilon)), 2))
    multiplier = sigma / math.sqrt(batch)
    acct.compose(dp_event.GaussianDpEvent(multiplier), queries)
    return float(acct.get_epsilon(DELTA))


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_flip_probability_matches_randomized_response(epsilon: float) -> None:
    draws = 20_000
    kept = sum(randomized_response(True, epsilon, SecureRandom()) for _ in range(draws))
    truth = math.exp(epsilon) / (1.0 + math.exp(epsilon))
    assert truth_probability(epsilon) == pytest.approx(truth, rel=1e-12)
    spread = math.sqrt(truth * (1 - truth) / draws)
    assert abs(kept / draws - truth) < 5 * spread  # a false alarm once in ~3.5 million runs
    # a false bit flips the same way
    released = [randomized_response(False, epsilon, SecureRandom()) for _ in range(draws)]
    assert abs(sum(released) / draws - (1 - truth)) < 5 * spread


def test_the_coin_comes_from_secure_random_only(monkeypatch) -> None:
    """release_bits asks SecureRandom for every coin: a stub that always says "keep" makes the
    release the truth, whatever numpy's or torch's generators hold."""

    class Keep:
        def uniform(self, count: int) -> np.ndarray:
            return np.zeros(count)

    monkeypatch.setattr(grouping, "SecureRandom", Keep)
    release = release_bits(np.array([0.1, 0.9, 0.4, 0.6]), 0.5, 0.01)
    assert release.released_low.tolist() == [True, False, True, False]
    assert not release.flipped.any()


def test_the_release_is_the_servers_only_per_writer_input() -> None:
    assert list(inspect.signature(groups_from_release).parameters) == ["released_low"]
    released = np.array([True, False, False, True, True])
    assert groups_from_release(released).tolist() == [
        SUSPECTED,
        NORMAL,
        NORMAL,
        SUSPECTED,
        SUSPECTED,
    ]
    with pytest.raises(ValueError, match="normal group"):
        groups_from_release(np.ones(3, bool))


def test_neighbouring_writers_change_the_release_by_at_most_e_to_the_epsilon() -> None:
    """Exact probabilities of every release vector of four writers: replacing one writer's data
    (its bit changes) moves each probability by a factor of at most e^eps, and reaches it."""
    epsilon, writers = 1.3, 4

    def probability(bits: tuple[bool, ...], release: tuple[bool, ...]) -> float:
        return math.prod(
            release_probability(b, r, epsilon) for b, r in zip(bits, release, strict=True)
        )

    for bits in itertools.product([False, True], repeat=writers):
        assert sum(
            probability(bits, r) for r in itertools.product([False, True], repeat=writers)
        ) == pytest.approx(1.0)
        for changed in range(writers):
            neighbour = tuple(not b if i == changed else b for i, b in enumerate(bits))
            ratios = [
                probability(bits, r) / probability(neighbour, r)
                for r in itertools.product([False, True], repeat=writers)
            ]
            assert max(ratios) == pytest.approx(math.exp(epsilon), rel=1e-12)
            assert max(ratios) <= math.exp(epsilon) * (1 + 1e-12)
    # the accountant's event is this pure epsilon: the tight PLD gives eps at a tiny delta
    pld = get_accountant("dp-accounting-pld").epsilon(randomized_response_event(epsilon), 1e-12)
    assert pld == pytest.approx(epsilon, abs=1e-3)


@pytest.mark.parametrize("accountant", ["autodp-rdp", "dp-accounting-rdp"])
def test_end_to_end_epsilon_is_the_accountants_composition(accountant: str) -> None:
    sigma, batch, grouping_epsilon = 5.7, 8, 2.0
    query = gswgan_query_event(sigma, batch)
    ledger = PrivacyLedger()
    for _ in range(8):
        ledger.record("a", query)
    for _ in range(5):
        ledger.record("b", query)
    ledger.record_unattributed("node-7", query)  # counts for every writer
    signatures = {w: ledger.signature(w, worst=True) for w in ("a", "b", "never-asked")}
    epsilons = end_to_end_epsilons(signatures, grouping_epsilon, DELTA, accountant)
    independent = _autodp_epsilon if accountant == "autodp-rdp" else _google_rdp_epsilon
    for writer, queries in (("a", 9), ("b", 6), ("never-asked", 1)):
        expected = independent(grouping_epsilon, sigma, batch, queries)
        assert epsilons[writer] == pytest.approx(expected, rel=1e-9)
    assert epsilons["a"] > epsilons["b"] > epsilons["never-asked"] > 0


def test_generator_target_leaves_the_queries_the_end_to_end_target_allows() -> None:
    sigma, batch, target, grouping_epsilon = 5.7, 8, 10.0, 2.0
    query = gswgan_query_event(sigma, batch)
    own, queries = generator_target(target, grouping_epsilon, query, DELTA, "autodp-rdp")
    assert _autodp_epsilon(grouping_epsilon, sigma, batch, queries) <= target
    assert _autodp_epsilon(grouping_epsilon, sigma, batch, queries + 1) > target
    acct = get_accountant("autodp-rdp")
    before = acct.epsilon(dp_event.SelfComposedDpEvent(query, queries), DELTA)
    after = acct.epsilon(dp_event.SelfComposedDpEvent(query, queries + 1), DELTA)
    assert before < own < after  # the stop lets n* queries through and never n* + 1
    with pytest.raises(ValueError, match="leaves no query"):
        generator_target(2.0, grouping_epsilon, query, DELTA, "autodp-rdp")


def test_grouping_epsilon_zero_is_the_old_exact_grouping() -> None:
    accuracies = np.array([0.05, 0.9, 0.1, 0.5, 0.8, 0.95, 0.02, 0.7])
    options = ScenarioOptions(grouping_epsilon=0.0)
    groups, release, thresholds = _group(options, accuracies, None, None, None)
    old = choose_thresholds(accuracies, options.suspect_quantile, options.normal_quantile)
    assert release is None
    assert groups.tolist() == assign_groups(accuracies, old).tolist()
    assert thresholds["suspect_max"] == old.suspect_max
    assert thresholds["normal_min"] == old.normal_min
    label = grouping_privacy(None)
    assert "Not privacy-accounted" in label and "NOT an end-to-end guarantee" in label
    assert "Private" in grouping_privacy(2.0)


def test_private_grouping_takes_one_threshold() -> None:
    accuracies = np.array([0.05, 0.9, 0.1, 0.95])
    options = ScenarioOptions(suspect_max_accuracy=0.5, grouping_epsilon=50.0)
    groups, release, thresholds = _group(options, accuracies, None, None, None)
    assert release is not None and thresholds["suspect_max"] == 0.5
    assert groups.tolist() == [SUSPECTED, NORMAL, SUSPECTED, NORMAL]  # eps 50: no flip
    two = ScenarioOptions(suspect_max_accuracy=0.5, normal_min_accuracy=0.7)
    with pytest.raises(ValueError, match="one threshold"):
        _group(two, accuracies, None, None, None)


TINY = [
    "--num-clients", "8", "--holdout-fraction", "0.25",
    "--steps", "30", "--warm-start-steps", "0", "--critic-steps", "1", "--batch-size", "8",
    "--generator-width", "4", "--critic-width", "4", "--eval-every", "0",
    "--detect-samples", "40", "--ray-cpus", "1", "--threads", "1",
    "--noise-multiplier", "5.7", "--client-sampling", "least-queried",
    "--target-epsilon", "10", "--grouping-epsilon", "2",
]  # fmt: skip


@pytest.mark.slow
def test_private_scenario_end_to_end(tmp_path: Path, capsys) -> None:
    out = tmp_path / "scenario"
    assert main(["debug-scenario", *TINY, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "end-to-end epsilon per writer (max over writers)" in printed

    summary = json.loads((out / "summary.json").read_text())
    with (out / "writers.csv").open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["role"] == "population"]
    # the groups are the released bits, nothing else
    for row in rows:
        assert row["group"] == (SUSPECTED if row["released_low"] == "1" else NORMAL)
    block = summary["split"]["grouping"]
    assert block["epsilon"] == 2.0 and block["writers"] == len(rows) == 6
    assert block["flipped"] == sum(r["true_low"] != r["released_low"] for r in rows)
    assert block["released_low"] == sum(r["released_low"] == "1" for r in rows)

    # each writer's end-to-end epsilon: the bit and its own group's ledger, composed by autodp
    end = summary["end_to_end"]
    assert end["threat_model"] == "untrusted-server" and end["neighbouring"] == "replace-one"
    assert end["accountant"] == "autodp-rdp" and end["delta"] == DELTA
    expected: dict[str, dict[str, float]] = {SUSPECTED: {}, NORMAL: {}}
    for group, members in expected.items():
        ledger = PrivacyLedger.from_json((out / f"gan-{group}" / "ledger.json").read_text())
        for row in (r for r in rows if r["group"] == group):
            queries = sum(n for _, n in ledger.signature(row["writer"], worst=True))
            members[row["writer"]] = _autodp_epsilon(2.0, 5.7, 8, queries)
            assert float(row["end_to_end_epsilon"]) == pytest.approx(members[row["writer"]])
        assert end["per_group"][group] == pytest.approx(max(members.values()), rel=1e-9)
    assert end["epsilon"] == pytest.approx(max(end["per_group"].values()), rel=1e-9)
    assert end["epsilon"] <= 10.0 and end["queries_per_writer"] == 8
    assert summary["gan"]["config"]["target-epsilon"] == pytest.approx(end["generator_target"])

    report = (out / "REPORT.md").read_text()
    assert "End-to-end epsilon per writer (max over writers)" in report
    assert "randomized response with epsilon 2" in report
    assert summary["split"]["privacy"] in report and "Private" in summary["split"]["privacy"]
