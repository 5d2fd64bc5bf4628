"""fedgs audit: the statistics against hand-computed cases, the real mechanisms pass, deliberately
broken ones fail, and the command line.

The mechanisms' noise comes from the operating system (no seed anywhere), so each audit here is
a random experiment: sizes are chosen so a wrong verdict needs a several-standard-error fluke.
Tolerance (also in docs/privacy.md): against the real mechanism the estimate lies in
[0.85, 1.0] x the accountant's epsilon when the statistic can see the whole mechanism (GS-WGAN,
local and secure): the accountant's RDP conversion sits 3-8% above the exact Gaussian epsilon,
and the estimate of that exact figure moves by a few percent at these sizes.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from dp_accounting import get_sigma_gaussian
from scipy import stats

from fedgs import cli
from fedgs.audit import cli as audit_cli
from fedgs.audit import runs, sabotage
from fedgs.audit.report import assess, verdict_line
from fedgs.audit.stats import (
    gdp_epsilon,
    one_run_audit,
    one_run_lower_bound,
    one_run_p_value,
)
from fedgs.privacy import discrete_noise, distributed_noise
from fedgs.run_config import RunConfig

DELTA = 1e-5
LOW, HIGH = 0.85, 1.0  # the stated tolerance, as a share of the accountant's epsilon


def _local(rng_seed: int = 0, sabotaged: str | None = None, **kw) -> dict:
    settings = (
        dict(
            canaries=400,
            queries=1,
            batch_size=4,
            clip_norm=1.0,
            noise_multiplier=0.2,
            delta=DELTA,
            accountant="autodp-rdp",
        )
        | kw
    )
    rng = np.random.default_rng(rng_seed)
    with sabotage.sabotaged(sabotaged):
        observation = runs.audit_local(
            rng=rng, known_noise=sabotage.noise_known_to_auditor(sabotaged), **settings
        )
    return assess(observation, DELTA, rng)


def _secure(canaries: int, sigma: float, sabotaged: str | None = None) -> dict:
    config = RunConfig(
        secure_aggregation=True, clients_per_step=3, batch_size=2, noise_multiplier=sigma
    )
    rng = np.random.default_rng(1)
    with sabotage.sabotaged(sabotaged):
        observation = runs.audit_secure(
            canaries=canaries,
            steps=1,
            batch_size=2,
            params=config.secure_noise().params,
            delta=DELTA,
            rng=rng,
            known_noise=sabotage.noise_known_to_auditor(sabotaged),
        )
    return assess(observation, DELTA, rng)


def _within_tolerance(result: dict) -> None:
    ratio = result["estimate_over_accountant"]
    assert result["verdict"] == "passed", result
    assert LOW <= ratio <= HIGH, result


def _fails(result: dict) -> None:
    accountant = result["accountant"]["epsilon"]
    assert result["verdict"] == "failed"
    assert result["estimate"]["interval"][0] > accountant
    assert verdict_line(result).startswith("AUDIT FAILED: empirical epsilon ")


# --- the statistics ---------------------------------------------------------------------------


def test_lower_bound_all_guesses_right_by_hand() -> None:
    """m = r = v = 10, delta 0: the p-value is p^10, so the bound solves p^10 = 0.05 with
    p = e^eps / (1 + e^eps): p = 0.05^0.1 = 0.741134, eps = log(0.741134 / 0.258866) = 1.051873."""
    assert one_run_lower_bound(10, 10, 10, 0.0, 0.05) == pytest.approx(1.051873, abs=1e-5)


def test_p_value_with_delta_by_enumeration() -> None:
    """Theorem 5.2's p-value from the binomial's terms written out, at m 20, r 10, v 9."""
    m, r, v, eps, delta = 20, 10, 9, 1.0, 1e-3
    p = math.exp(eps) / (1 + math.exp(eps))
    pmf = [math.comb(r, k) * p**k * (1 - p) ** (r - k) for k in range(r + 1)]
    beta = sum(pmf[v:])
    alpha = max(sum(pmf[v - i : v]) / i for i in range(1, v + 1))
    expected = beta + 2 * m * delta * alpha
    assert one_run_p_value(m, r, v, eps, delta) == pytest.approx(expected, rel=1e-9)
    bound = one_run_lower_bound(m, r, v, delta, 0.05)
    assert one_run_p_value(m, r, v, bound, delta) == pytest.approx(0.05, rel=1e-6)


def test_lower_bound_is_zero_for_chance_guessing() -> None:
    assert one_run_lower_bound(100, 100, 50, DELTA, 0.05) == 0.0


def test_one_run_audit_uses_no_coin_to_guess() -> None:
    """The same scores with the coins flipped: the guesses stay, so the count of right ones is
    what is left (here: none right, bound 0)."""
    scores = np.linspace(-1, 1, 40)
    coins = np.where(scores > 0, 1, -1)
    right = one_run_audit(scores, coins, DELTA, centre=0.0)
    wrong = one_run_audit(scores, -coins, DELTA, centre=0.0)
    assert right.epsilon > 0 and right.correct == right.guesses
    assert wrong.epsilon == 0.0


@pytest.mark.parametrize("mu", [0.3, 1.0, 4.0, 12.0])
def test_gdp_epsilon_matches_dp_accounting(mu: float) -> None:
    """Our exact Gaussian epsilon against dp-accounting's inverse (the sigma of a Gaussian
    mechanism meeting (eps, delta)) and the analytic Gaussian's delta formula."""
    eps = gdp_epsilon(mu, DELTA)
    assert get_sigma_gaussian(eps, DELTA) == pytest.approx(1 / mu, rel=1e-4)
    delta = stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)
    assert delta == pytest.approx(DELTA, rel=1e-4)


# --- GS-WGAN, local noise ---------------------------------------------------------------------


def test_local_real_mechanism_passes_within_tolerance() -> None:
    result = _local()
    _within_tolerance(result)
    assert result["accountant"]["threat_model"] == "untrusted-server"
    assert result["canaries"]["released"].startswith("nothing")


@pytest.mark.parametrize("broken", sabotage.SABOTAGES)
def test_local_broken_mechanism_fails(broken: str) -> None:
    """sigma 4, B 4, one query: the accountant says 2.5; a tenth of the noise, or noise the
    auditor can subtract, and both figures exceed it."""
    result = _local(sabotaged=broken, noise_multiplier=4.0)
    _fails(result)
    assert result["lower_bound"]["epsilon"] > result["accountant"]["epsilon"]


def test_sabotage_puts_the_real_noise_back() -> None:
    threads, shares = discrete_noise._discrete_gaussian_threads, distributed_noise.discrete_gaussian
    with pytest.raises(RuntimeError), sabotage.sabotaged(sabotage.SCALED_DOWN):
        assert discrete_noise._discrete_gaussian_threads is not threads
        raise RuntimeError
    assert discrete_noise._discrete_gaussian_threads is threads
    assert distributed_noise.discrete_gaussian is shares


# --- GS-WGAN, secure aggregation --------------------------------------------------------------


def test_secure_real_mechanism_passes() -> None:
    """A small audit (400 canaries): passes, and the estimate is close to the accountant's."""
    result = _secure(400, 0.15)
    assert result["verdict"] == "passed"
    assert result["accountant"]["accountant"] == "ddg-rdp"
    assert LOW <= result["estimate_over_accountant"] <= 1.05


@pytest.mark.slow
def test_secure_real_mechanism_within_tolerance() -> None:
    """2,000 canaries: the estimate's error is small beside the accountant's 3% slack."""
    _within_tolerance(_secure(2000, 0.15))


@pytest.mark.parametrize("broken", sabotage.SABOTAGES)
def test_secure_broken_mechanism_fails(broken: str) -> None:
    result = _secure(400, 3.0, broken)
    _fails(result)
    assert result["lower_bound"]["epsilon"] > result["accountant"]["epsilon"]


# --- Fed-Avg GAN ------------------------------------------------------------------------------


def _fedavg(sabotaged: str | None = None) -> dict:
    rng = np.random.default_rng(2)
    with sabotage.sabotaged(sabotaged):
        observation = runs.audit_fedavg(
            canaries=600,
            rounds=40,
            clients_per_round=10,
            clients=20,
            clip_norm=0.1,
            noise_multiplier=1.0,
            dimension=2048,
            delta=DELTA,
            accountant="autodp-rdp",
            rng=rng,
            known_noise=sabotage.noise_known_to_auditor(sabotaged),
        )
    return assess(observation, DELTA, rng)


def test_fedavg_real_mechanism_passes_below_the_accountant() -> None:
    """The summed cosine cannot tell which rounds sampled a canary, so it reaches the epsilon of
    its own Gaussian (``ideal``), well below the amplified bound; the estimate must be near
    that figure and below the accountant's."""
    result = _fedavg()
    assert result["verdict"] == "passed"
    assert result["estimate"]["epsilon"] < result["accountant"]["epsilon"]
    assert result["estimate"]["epsilon"] == pytest.approx(result["ideal"]["epsilon"], rel=0.35)


def test_fedavg_scaled_down_noise_fails() -> None:
    _fails(_fedavg(sabotage.SCALED_DOWN))


# --- the command line -------------------------------------------------------------------------


def test_cli_help(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["audit", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "never a guarantee" in text and "--sabotage" in text
    assert all(strategy in text for strategy in audit_cli.STRATEGIES)


SMALL = ["--batch-size", "4", "--queries-per-canary", "1", "--canaries", "200"]


def test_cli_small_run_writes_json_and_plot(tmp_path, capsys) -> None:
    code = cli.main(["audit", "--out", str(tmp_path), "--noise-multiplier", "0.3", *SMALL])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "accountant's epsilon" in out and "AUDIT PASSED" in out
    result = json.loads((tmp_path / "audit.json").read_text())
    assert result["settings"]["strategy"] == "gswgan" and result["canaries"]["count"] == 200
    assert (tmp_path / "audit.png").stat().st_size > 1000


def test_cli_sabotaged_run_exits_non_zero(tmp_path, capsys) -> None:
    argv = ["audit", "--out", str(tmp_path), "--noise-multiplier", "4", *SMALL]
    code = cli.main([*argv, "--sabotage", "noise-scaled-down"])
    out = capsys.readouterr().out
    assert code == 1
    assert "AUDIT FAILED: empirical epsilon" in out and "exceeds the accountant's" in out


def test_cli_reads_a_run_config_file(tmp_path, capsys) -> None:
    recipe = tmp_path / "run.toml"
    recipe.write_text('dataset = "embedded"\nrun-dir = "runs/x"\nnoise-multiplier = 0.5\n')
    code = cli.main(["audit", "--config", str(recipe), "--out", str(tmp_path / "o"), *SMALL])
    assert code == 0, capsys.readouterr()
    result = json.loads((tmp_path / "o" / "audit.json").read_text())
    assert "sigma 0.5" in result["title"]
