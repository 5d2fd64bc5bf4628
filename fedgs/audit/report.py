"""An audit run's verdict: the accountant's epsilon beside the empirical estimate and lower bound.

The audit fails when the data contradict the accountant: Steinke et al.'s lower bound (itself a
95% confidence statement) exceeds the accountant's epsilon, or the whole 95% bootstrap interval
of Andrew et al.'s estimate lies above it. A point estimate above the figure whose interval still
reaches below it is reported, not failed: at a tight accountant, sampling alone puts it there.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from fedgs.audit.runs import Observation
from fedgs.audit.stats import gaussian_estimate, one_run_audit
from fedgs.privacy.threat_models import REPLACE_ONE


def assess(
    observation: Observation, delta: float, rng: np.random.Generator, significance: float = 0.05
) -> dict[str, Any]:
    """Both empirical figures, the accountant's, and the verdict, as plain data."""
    scores, coins, null = observation.scores, observation.coins, observation.null_scores
    # replace-one: the neighbour is the canary with the opposite sign; add-remove: a canary left
    # out is a direction nobody sent, like the null ones
    replace_one = observation.relation == REPLACE_ONE
    estimate = gaussian_estimate(
        scores[coins > 0], scores[coins < 0], null, delta, rng, null_is_outside=not replace_one
    )
    centre = float(np.mean(null)) if replace_one else None
    bound = one_run_audit(scores, coins, delta, significance, centre)
    accountant = observation.accountant["epsilon"]
    offending = [
        value
        for value, beyond in (
            (bound.epsilon, bound.epsilon > accountant),
            (estimate.epsilon, estimate.interval[0] > accountant),
        )
        if beyond
    ]
    return {
        "verdict": "failed" if offending else "passed",
        "exceeding_epsilon": max(offending) if offending else None,
        "accountant": observation.accountant,
        "estimate": estimate.to_json() | {"method": "Andrew et al. 2024, one-shot Gaussian fit"},
        "lower_bound": bound.to_json()
        | {"method": "Steinke, Nasr and Jagielski 2023, Theorem 5.2"},
        "ideal": {"epsilon": observation.ideal.epsilon, "what": observation.ideal.note},
        "estimate_over_accountant": estimate.epsilon / accountant if accountant else math.inf,
        "relation": observation.relation,
        "observation": "all iterates: the auditor sees every release of the audit run",
        "canaries": {
            "count": int(scores.size),
            "side_plus": int(np.sum(coins > 0)),
            "null_directions": int(null.size),
            "releases_seen": observation.cost.releases,
            "canary_contributions": observation.cost.canary_contributions,
            "noise_coordinates_drawn": observation.cost.noise_draws,
            "seconds": observation.cost.seconds,
            "released": "nothing: canaries are extra simulated clients of the audit run only",
        },
    }


def _number(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.4g}"


def verdict_line(result: dict[str, Any]) -> str:
    """The one line a script or a reader checks first."""
    accountant = _number(result["accountant"]["epsilon"])
    if result["verdict"] == "failed":
        return (
            f"AUDIT FAILED: empirical epsilon {_number(result['exceeding_epsilon'])} exceeds the "
            f"accountant's {accountant}"
        )
    line = f"AUDIT PASSED: no empirical epsilon exceeds the accountant's {accountant}"
    if result["estimate"]["epsilon"] > result["accountant"]["epsilon"]:
        line += " (the point estimate is above it, within its sampling interval: add canaries)"
    return line


def summary_text(result: dict[str, Any], title: str) -> str:
    """The printed report: each figure with what it is."""
    acct, est, low = result["accountant"], result["estimate"], result["lower_bound"]
    cost = result["canaries"]
    interval = f"[{_number(est['interval'][0])}, {_number(est['interval'][1])}]"
    return "\n".join(
        [
            f"fedgs audit: {title} ({result['observation']})",
            f"  accountant's epsilon  {_number(acct['epsilon'])}  ({acct['threat_model']}, "
            f"{acct['accountant']}, delta {acct['delta']:g}, {acct['neighbouring']})",
            f"  empirical estimate    {_number(est['epsilon'])}  95% bootstrap interval {interval} "
            f"(Andrew et al.: Gaussians {_number(est['mu'])} widths apart)",
            f"  one-run lower bound   {_number(low['epsilon'])}  at {low['confidence']:.0%} "
            f"confidence ({low['correct']} of {low['guesses']} guesses right, {low['canaries']} "
            "canaries; Steinke et al.)",
            f"  ideal for this score  {_number(result['ideal']['epsilon'])}  "
            f"({result['ideal']['what']})",
            f"  estimate / accountant {result['estimate_over_accountant']:.3f}",
            f"  canaries: {cost['count']} ({cost['side_plus']} on the + side), "
            f"{cost['canary_contributions']} canary contributions in {cost['releases_seen']} "
            f"releases, {cost['noise_coordinates_drawn']:,} noise draws, "
            f"{cost['seconds']:.1f} s; released: nothing",
            verdict_line(result),
        ]
    )


def write(result: dict[str, Any], observation: Observation, out: Path, title: str) -> list[Path]:
    """audit.json and audit.png (the canaries' and the null's scores) under ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "audit.json", out / "audit.png"]
    paths[0].write_text(json.dumps(result | {"title": title}, indent=2) + "\n", encoding="utf-8")
    est = result["estimate"]
    width = est["width"] or 1.0

    def scaled(values: np.ndarray) -> np.ndarray:
        return (values - est["null_mean"]) / width

    figure, axes = plt.subplots(figsize=(6.4, 3.6))
    coins = observation.coins
    for values, label in (
        (observation.null_scores, "null (directions nobody sent)"),
        (observation.scores[coins > 0], "canaries, + side"),
        (observation.scores[coins < 0], "canaries, - side (or left out)"),
    ):
        if values.size:
            axes.hist(scaled(values), bins=40, density=True, alpha=0.5, label=label)
    axes.set_xlabel("summed cosine, in fitted widths from the null mean")
    axes.set_ylabel("density")
    axes.set_title(f"{title}: estimate {_number(est['epsilon'])}", fontsize=9)
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(paths[1], dpi=100)
    plt.close(figure)
    return paths
