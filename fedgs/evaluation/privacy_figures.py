"""Every epsilon of a run, each with the threat model, accountant, delta and neighbouring
relation it holds under (and whether it holds at all: a fixed sampling seed voids the amplified
figures).

The run's own figures come from its privacy.json. The paper-compatible figure is recomputed here
(autodp RDP, the GS-WGAN paper's accountant and model) so a reduced reproduction can be compared
with the paper's table; it is labelled as such and never replaces the run's guarantee.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from fedgs.algorithms import algorithm
from fedgs.evaluation.run_files import RunFiles
from fedgs.privacy.report import epsilon_blocks


@dataclass(frozen=True)
class EpsilonFigure:
    label: str
    threat_model: str
    accountant: str
    epsilon: float | None
    delta: float
    note: str = ""
    neighbouring: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """Threat model, accountant, delta and neighbouring relation in one phrase."""
        return (
            f"{self.threat_model}, {self.accountant}, delta={self.delta:g}, "
            f"{self.neighbouring or 'see note'}"
        )


VOID = "does NOT hold (fixed sampling seed)"
LOCAL_NOISE_ONLY = "local noise only (if secure aggregation's assumptions fail)"

_LABELS = {
    "secure-aggregation": "run guarantee (secure aggregation: the server sees cohorts' noisy sums)",
    "untrusted-server": "run guarantee (max over clients)",
    "trusted-sampler": "trusted sampler (amplification by secret sampling)",
    "trusted-server": "run guarantee (DP-FedAvg, server sees unnoised deltas)",
    "trusted-aggregator": "run guarantee (teachers' votes noised by the server)",
}


def run_figures(run: RunFiles) -> list[EpsilonFigure]:
    """The epsilons the run reported: every privacy.json block with an epsilon.

    A block without a threat model is a guarantee the strategy does not give (Fed-Avg GAN and
    the teacher strategies against an untrusted server: epsilon null, with a note).
    """
    privacy = run.privacy
    delta = float(privacy["delta"])
    relation = privacy["neighbouring"]
    figures = []
    for key, block in epsilon_blocks(privacy).items():
        given = "threat_model" in block
        model = block["threat_model"] if given else key.replace("_", "-")
        epsilon = block["epsilon"]
        label = _LABELS.get(model, model) if given else "no guarantee"
        if block.get("local_noise_only"):
            label = LOCAL_NOISE_ONLY
        figures.append(
            EpsilonFigure(
                label=VOID if block.get("holds") is False else label,
                threat_model=model,
                accountant=block.get("accountant", "-"),
                epsilon=None if epsilon is None else float(epsilon),
                delta=delta,
                note=block.get("assumption") or block.get("note") or block.get("error", ""),
                neighbouring=block.get("neighbouring", relation),
            )
        )
    order = list(_LABELS)
    return sorted(
        figures,
        key=lambda f: order.index(f.threat_model) if f.threat_model in order else len(order),
    )


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
    relation = (
        "one sample (the paper's sample-level relation)"
        if setting == "centralized"
        else "replace-one client"
    )
    return EpsilonFigure(
        "paper-compatible",
        "paper",
        PAPER_ACCOUNTANT,
        epsilon,
        float(privacy["delta"]),
        model,
        relation,
    )


def all_figures(run: RunFiles) -> list[EpsilonFigure]:
    paper = paper_figure(run)
    return [*run_figures(run), *([paper] if paper else [])]


def headline(run: RunFiles) -> EpsilonFigure | None:
    """The run's own guarantee: the threat model its report names as its headline (a secure
    run: secure aggregation, never the local-noise-only figure beside it), else the strongest
    it gives a finite epsilon under (GS-WGAN, DP-MERF: untrusted server; Fed-Avg GAN: trusted
    server; teachers: trusted aggregator)."""
    named = run.privacy.get("headline")
    for figure in run_figures(run):
        if figure.label in ("no guarantee", VOID, LOCAL_NOISE_ONLY):
            continue
        if figure.threat_model == named or (
            named is None and figure.threat_model != "trusted-sampler"
        ):
            return figure
    return None


# how figures and legends name the strategies (their run-config names elsewhere)
STRATEGY_NAMES = {
    "gswgan": "GS-WGAN",
    "fedavg-gan": "Fed-Avg GAN",
    "datalens": "DataLens",
    "pate-gan": "PATE-GAN",
    "dp-merf": "DP-MERF",
}


def series_label(strategy: str, threat_model: str) -> str:
    """A privacy-utility curve's name, e.g. "GS-WGAN (untrusted server)": only runs of one
    strategy under one threat model have comparable epsilons, so only they share a line."""
    return f"{STRATEGY_NAMES.get(strategy, strategy)} ({threat_model.replace('-', ' ')})"


def curve_epsilon(run: RunFiles) -> tuple[str, float] | None:
    """(threat model, epsilon) placing the run on a privacy-utility curve: its headline figure,
    or infinity when it added no noise (noise 0: no finite guarantee under any threat model, the
    non-private upper bound); None when no epsilon of the run holds."""
    noise = run.privacy.get("noise_multiplier")
    if noise is None:
        noise = run.setting(algorithm(run.strategy).noise_key)
    if noise is not None and float(noise) == 0.0:
        return algorithm(run.strategy).threat_model, math.inf
    figure = headline(run)
    if figure is None or figure.epsilon is None:
        return None
    return figure.threat_model, figure.epsilon
