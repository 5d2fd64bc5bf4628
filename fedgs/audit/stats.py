"""The two ways an audit turns canary scores into an epsilon.

- ``gaussian_estimate``: the one-shot estimate of Andrew et al. (ICLR 2024, "One-shot empirical
  privacy estimation for federated learning"). Each canary's score is the cosine of its direction
  with the released aggregates; a Gaussian is fitted to the scores on each side of the
  neighbouring pair and the estimate is the epsilon of distinguishing the two fitted Gaussians.
  Their width is the spread of scores of fresh directions no client ever sent (the null): the
  mechanism's noise does not depend on the data, so this is the width on both sides, measured on
  many cheap samples instead of the few costly canaries. It is an estimate, not a bound: its
  bootstrap interval says how far sampling moves it, nothing more.
- ``one_run_lower_bound``: Steinke, Nasr and Jagielski (NeurIPS 2023, "Privacy auditing with one
  (1) training run"), Theorem 5.2: every canary's side is a fair coin; the auditor guesses r
  coins from the scores alone and gets v right; an (epsilon, delta)-DP mechanism makes v or more
  right with probability at most P[Bin(r, p) >= v] + 2 m delta max_i P[v - i <= Bin(r, p) < v] / i
  (p = e^eps / (1 + e^eps), m canaries). The largest epsilon that this p-value rejects at the
  significance level is a lower bound that holds with that confidence.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import optimize, special, stats

GUESS_FRACTIONS = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0)  # the r's tried, as shares of the canaries
BOOTSTRAP_SAMPLES = 500


def _log_delta(epsilon: float, mu: float) -> float:
    """log of the delta at ``epsilon`` of mu-GDP (Dong, Roth and Su 2022, Corollary 2.13)."""
    first = stats.norm.logcdf(-epsilon / mu + mu / 2)
    second = epsilon + stats.norm.logcdf(-epsilon / mu - mu / 2)
    return float(first + np.log1p(-np.exp(min(second - first, 0.0))))


def gdp_epsilon(mu: float, delta: float) -> float:
    """The epsilon at ``delta`` of two unit Gaussians ``mu`` apart: the exact privacy profile of
    a Gaussian mechanism of multiplier 1/mu (no accountant's slack)."""
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta!r}")
    if math.isnan(mu):
        raise ValueError("mu is NaN")
    mu = abs(mu)
    if math.isinf(mu):
        return math.inf
    if mu == 0 or _log_delta(0.0, mu) <= math.log(delta):
        return 0.0
    high = mu * mu / 2 + mu * math.sqrt(2 * math.log(1 / delta)) + 1.0  # delta(high) < delta
    return float(optimize.brentq(lambda e: _log_delta(e, mu) - math.log(delta), 0.0, high))


@dataclass(frozen=True)
class GaussianEstimate:
    """Andrew et al.'s estimate with the fitted Gaussians it came from."""

    epsilon: float
    interval: tuple[float, float]  # 95% bootstrap interval of the estimate
    mu: float  # the fitted means' distance in widths
    mean_in: float
    mean_out: float
    width: float  # the fitted Gaussians' common standard deviation
    null_mean: float
    null_std: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _width(groups: list[np.ndarray]) -> float:
    """The pooled standard deviation of ``groups`` about their own means."""
    squares = sum(float(np.sum((g - g.mean()) ** 2)) for g in groups)
    return math.sqrt(squares / sum(g.size - 1 for g in groups))


def _fit(inside: np.ndarray, outside: np.ndarray, others: list[np.ndarray]) -> tuple[float, float]:
    """(mu, width): the sides' distance in widths, and the width."""
    width = _width([inside, outside, *others])
    gap = float(np.mean(inside) - np.mean(outside))
    return (math.inf if width == 0 else gap / width), width


def gaussian_estimate(
    inside: np.ndarray,
    outside: np.ndarray,
    null: np.ndarray,
    delta: float,
    rng: np.random.Generator,
    null_is_outside: bool = False,
) -> GaussianEstimate:
    """The estimate from scores of canaries on each side (``inside``: the side whose direction
    the score measures; ``outside``: its neighbour) and of never-sent directions (``null``).

    The two Gaussians share one width, pooled over the sides and the null: the mechanism's
    noise does not depend on the data, and the many null scores pin the width down where a
    few hundred canaries would leave it loose. ``null_is_outside`` (add-remove, where a canary
    left out is a direction nobody sent): the null scores join the outside side's mean too.
    """
    inside, outside, null = (np.asarray(a, dtype=np.float64) for a in (inside, outside, null))
    if min(inside.size, outside.size) < 2 or null.size < 2:
        raise ValueError("need at least two scores on each side and two null scores")

    def fit(inside: np.ndarray, outside: np.ndarray, null: np.ndarray) -> tuple[float, float]:
        if null_is_outside:
            return _fit(inside, np.concatenate([outside, null]), [])
        return _fit(inside, outside, [null])

    draws = [
        gdp_epsilon(
            fit(
                rng.choice(inside, inside.size),
                rng.choice(outside, outside.size),
                rng.choice(null, null.size),
            )[0],
            delta,
        )
        for _ in range(BOOTSTRAP_SAMPLES)
    ]
    low, high = np.quantile(draws, [0.025, 0.975])
    mu, width = fit(inside, outside, null)
    out = np.concatenate([outside, null]) if null_is_outside else outside
    return GaussianEstimate(
        gdp_epsilon(mu, delta),
        (float(low), float(high)),
        mu,
        float(inside.mean()),
        float(out.mean()),
        width,
        float(null.mean()),
        float(null.std(ddof=1)),
    )


def one_run_p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Steinke et al.'s p-value: the most probability an (epsilon, delta)-DP mechanism gives to
    ``v`` or more correct guesses out of ``r`` about ``m`` canaries' coins."""
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    p = float(special.expit(epsilon))
    beta = float(stats.binom.sf(v - 1, r, p))  # P[Bin(r, p) >= v]
    if delta == 0 or v == 0:
        return beta
    shifts = np.arange(1, v + 1)
    between = stats.binom.sf(v - shifts - 1, r, p) - beta  # P[v - i <= Bin(r, p) < v]
    return min(1.0, beta + 2 * m * delta * float(np.max(between / shifts)))


def one_run_lower_bound(m: int, r: int, v: int, delta: float, significance: float) -> float:
    """The largest epsilon whose p-value for (m, r, v) is at most ``significance`` (0 when even
    epsilon 0 is not rejected): with confidence 1 - significance, the mechanism is not
    (epsilon, delta)-DP for any smaller epsilon."""
    if not 0 < significance < 1:
        raise ValueError(f"significance must lie in (0, 1), got {significance!r}")

    def excess(epsilon: float) -> float:
        return significance - one_run_p_value(m, r, v, epsilon, delta)

    if excess(0.0) <= 0:
        return 0.0
    high = 1.0
    while excess(high) > 0:  # the p-value rises to P[v correct of v] = 1 as epsilon grows
        high *= 2
        if high > 1e4:
            return math.inf
    return float(optimize.brentq(excess, 0.0, high, xtol=1e-9))


@dataclass(frozen=True)
class OneRunBound:
    """Steinke et al.'s lower bound at the best guess count, with the counts it came from."""

    epsilon: float
    confidence: float
    canaries: int
    guesses: int
    correct: int
    guess_counts_tried: tuple[int, ...]  # Bonferroni: each tried at significance / len

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def one_run_audit(
    scores: np.ndarray,
    coins: np.ndarray,
    delta: float,
    significance: float = 0.05,
    centre: float | None = None,
) -> OneRunBound:
    """Guess coins from the scores alone, ``r`` canaries at a time, and bound epsilon.

    With a ``centre`` (replace-one: the null's mean score, midway between the two signs) the r
    canaries farthest from it are guessed, +1 above and -1 below; without one (add-remove) the
    r highest scores are guessed +1 (in). No guess reads a coin. Several r are tried; a
    Bonferroni correction keeps the stated confidence for the best of them.
    """
    scores, coins = np.asarray(scores, dtype=np.float64), np.asarray(coins)
    m = scores.size
    if m == 0 or coins.shape != scores.shape or not np.isin(coins, (-1, 1)).all():
        raise ValueError("need one coin in {-1, +1} per score")
    if centre is None:
        order, guesses = np.argsort(-scores, kind="stable"), np.ones(m, dtype=int)
    else:
        offsets = scores - centre
        order, guesses = np.argsort(-np.abs(offsets), kind="stable"), np.where(offsets > 0, 1, -1)
    counts = tuple(sorted({max(1, round(f * m)) for f in GUESS_FRACTIONS}))
    level = significance / len(counts)
    best = (0.0, counts[0], 0)
    for r in counts:
        chosen = order[:r]
        correct = int(np.sum(guesses[chosen] == coins[chosen]))
        bound = one_run_lower_bound(m, r, correct, delta, level)
        if bound > best[0]:
            best = (bound, r, correct)
    return OneRunBound(best[0], 1 - significance, m, best[1], best[2], counts)
