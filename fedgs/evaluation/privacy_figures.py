"""Every epsilon of a run, each with the threat model and accountant it holds under.

The run's own figures come from its privacy.json. The paper-compatible figure is recomputed here
(autodp RDP, the GS-WGAN paper's accountant and model) so a reduced reproduction can be compared
with the paper's table; it is labelled as such and never replaces the run's guarantee.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from fedgs.evaluation.run_files import RunFiles


@dataclass(frozen=True)
class EpsilonFigure:
    label: str
    threat_model: str
    accountant: str
    epsilon: float | None
    delta: float
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _block(privacy: dict, key: str, label: str, delta: float) -> EpsilonFigure | None:
    block = privacy.get(key)
    if not block or "threat_model" not in block:
        return None
    epsilon = block.get("epsilon")
    return EpsilonFigure(
        label=label,
        threat_model=block["threat_model"],
        accountant=block.get("accountant", privacy.get("accountant", "")),
        epsilon=None if epsilon is None else float(epsilon),
        delta=delta,
        note=block.get("assumption", "") or block.get("error", ""),
    )


def run_figures(run: RunFiles) -> list[EpsilonFigure]:
    """The epsilons the run reported (privacy.json), strongest threat model first."""
    privacy = run.privacy
    delta = float(privacy["delta"])
    blocks = (
        ("untrusted_server", "run guarantee (max over clients)"),
        ("trusted_sampler", "trusted sampler (amplification by secret sampling)"),
        ("trusted_server", "run guarantee (DP-FedAvg, server sees unnoised deltas)"),
    )
    figures = [f for key, label in blocks if (f := _block(privacy, key, label, delta))]
    untrusted = privacy.get("untrusted_server", {})
    if privacy.get("strategy") == "fedavg-gan" and math.isinf(untrusted.get("epsilon", 0.0)):
        figures.append(
            EpsilonFigure(
                "untrusted server", "untrusted-server", "-", math.inf, delta, untrusted["note"]
            )
        )
    return figures


def paper_figure(run: RunFiles) -> EpsilonFigure | None:
    """The GS-WGAN paper's figure for this run's setting, or None (Fed-Avg GAN, unknown K)."""
    if run.strategy != "gswgan":
        return None
    from fedgs.privacy.paper import PAPER_ACCOUNTANT, paper_epsilon

    privacy = run.privacy
    clients = run.num_clients
    if clients is None:
        return None
    setting = run.runner
    per_step = int(run.setting("clients-per-step", 1))
    if setting == "centralized" and per_step != 1:
        return None
    epsilon = paper_epsilon(
        setting,
        clients,
        int(privacy["steps"]),
        int(privacy["batch_size"]),
        float(privacy["noise_multiplier"]),
        float(privacy["delta"]),
        clients_per_step=per_step,
    )
    model = (
        "per-sample subsampled composition, q = 1/K, B*T times (the paper's privacy_analysis)"
        if setting == "centralized"
        else "untrusted server at the expected query count T*M/K"
    )
    return EpsilonFigure(
        "paper-compatible", "paper", PAPER_ACCOUNTANT, epsilon, float(privacy["delta"]), model
    )


def all_figures(run: RunFiles) -> list[EpsilonFigure]:
    paper = paper_figure(run)
    return [*run_figures(run), *([paper] if paper else [])]


def headline_epsilon(run: RunFiles) -> float | None:
    """The run's own guarantee: untrusted server (GS-WGAN) or trusted server (Fed-Avg GAN)."""
    privacy = run.privacy
    key = "trusted_server" if privacy.get("strategy") == "fedavg-gan" else "untrusted_server"
    value = privacy.get(key, {}).get("epsilon")
    return None if value is None else float(value)
