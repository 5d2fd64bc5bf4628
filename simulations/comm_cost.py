"""``fedgs comm-cost``: bytes per generator update of every strategy, measured on real messages.

Each variant is a short real run on Flower's simulation engine (same data, same seed); the
ServerApp logs the serialized size of every message it sends and receives (``bytes_down`` /
``bytes_up`` in metrics.csv). A message's size depends on the protocol and the networks, not on
how long anything trained, so one step per variant is the default (``--steps`` for more). The
table puts the measured bytes per participating client next to the analytic float32 payload of
the protocol actually used and the GS-WGAN paper's table, and each run's epsilon (after the
measured steps) with its threat model, accountant, delta and neighbouring relation.

Fed-Avg GAN is measured twice: with the paper's networks (the GS-WGAN paper's comparison, whose
ratio is mostly the size of a 6.56M-parameter critic) and with the networks fedgs trains (the
like-for-like comparison with fedgs' GS-WGAN).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from fedgs.algorithms import algorithm
from fedgs.privacy.report import block_key, headline, load_privacy
from fedgs.run_config import RunConfig
from fedgs.simulations.simulate import EngineOptions, run_simulation


@dataclass(frozen=True)
class Variant:
    label: str
    strategy: str
    wire_dtype: str
    critic_steps: int | None = None  # GS-WGAN n_dis override (None: the configured one)
    fedavg_models: str = "paper"  # Fed-Avg GAN's networks: the paper's, or fedgs' ("gswgan")


VARIANTS = (
    Variant("GS-WGAN, n_dis = 1 (the paper's protocol)", "gswgan", "float32", critic_steps=1),
    Variant("GS-WGAN", "gswgan", "float32"),
    Variant("GS-WGAN, float16 wire", "gswgan", "float16"),
    Variant("GS-WGAN, bfloat16 wire", "gswgan", "bfloat16"),
    Variant("Fed-Avg GAN", "fedavg-gan", "float32"),
    Variant("Fed-Avg GAN, float16 wire", "fedavg-gan", "float16"),
    Variant("Fed-Avg GAN, fedgs' networks", "fedavg-gan", "float32", fedavg_models="gswgan"),
    Variant("DataLens, top-k sign votes", "datalens", "float32"),
    Variant("PATE-GAN, one-bit votes", "pate-gan", "float32"),
)
PAPER_PROTOCOL, FEDGS_PROTOCOL = VARIANTS[0].label, VARIANTS[1].label
FEDAVG_PAPER, FEDAVG_FEDGS = "Fed-Avg GAN", "Fed-Avg GAN, fedgs' networks"
# privacy.json section of each strategy's headline epsilon (most specific first) and the
# neighbouring relation its accountant uses (fedgs.privacy.accountants): GS-WGAN's queries and
# the teachers' votes replace one client's data; DP-FedAvg's Poisson rounds add or remove one.
EPSILON_SECTIONS = {
    "trusted_aggregator": "replace-one client",
    "trusted_server": "add/remove-one client",
    "untrusted_server": "replace-one client",
}
COLUMNS = (
    "variant",
    "strategy",
    "wire_dtype",
    "models",
    "down_bytes_per_client",
    "up_bytes_per_client",
    "total_bytes_per_client",
    "analytic_float32_bytes",
    "measured_over_analytic",
    "paper_table_bytes",
    "client_updates",
    "epsilon",
    "threat_model",
    "accountant",
    "delta",
    "neighbouring",
)


def _measured(run_dir: Path) -> tuple[float, float, int]:
    """Mean bytes down and up per participating client over the run's steps."""
    with (run_dir / "metrics.csv").open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if int(r["answered"] or 0) > 0]
    if not rows:
        raise RuntimeError(f"{run_dir}: no step had an answering client")
    clients = sum(int(r["answered"]) for r in rows)
    down = sum(int(r["bytes_down"]) * int(r["answered"]) / int(r["sampled"]) for r in rows)
    return down / clients, sum(int(r["bytes_up"]) for r in rows) / clients, clients


def _epsilon(run_dir: Path) -> dict:
    """The run's headline epsilon with its threat model, accountant, delta and neighbours."""
    privacy = load_privacy(run_dir / "privacy.json")
    block = headline(privacy)
    return {
        "epsilon": float(block["epsilon"]),
        "threat_model": block["threat_model"],
        "accountant": block.get("accountant", privacy["accountant"]),
        "delta": float(privacy["delta"]),
        "neighbouring": EPSILON_SECTIONS[block_key(block["threat_model"])],
    }


def _analytic(config: RunConfig) -> int:
    """Float32 payload bytes per client update of the protocol as configured."""
    cost = algorithm(config.strategy).update_bytes_of(config)
    if cost is None:
        raise ValueError(f"strategy {config.strategy!r} states no bytes per update")
    return cost["down"] + cost["up"]


def _models(config: RunConfig) -> str:
    """The networks a variant's run trained (GS-WGAN's bytes do not depend on them)."""
    if config.strategy == "fedavg-gan" and config.fedavg_models == "paper":
        return "the paper's networks"
    return f"fedgs' networks, width {config.generator_width}/{config.critic_width}"


def measure(
    base: RunConfig, out: Path, options: EngineOptions, variants: tuple[Variant, ...] = VARIANTS
) -> list[dict]:

    rows = []
    for variant in variants:
        slug = "".join(c if c.isalnum() else "-" for c in variant.label.lower())
        config = base.with_updates(
            critic_steps=variant.critic_steps or base.critic_steps,
            strategy=variant.strategy,
            wire_dtype=variant.wire_dtype,
            fedavg_models=variant.fedavg_models,
            run_dir=str(out / "runs" / slug),
            eval_every=0,
            warm_start_steps=0,
            checkpoint_every=base.steps,
        )
        run_simulation(config, options)
        down, up, clients = _measured(Path(config.run_dir))
        analytic = _analytic(config)
        rows.append(
            {
                "variant": variant.label,
                "strategy": variant.strategy,
                "wire_dtype": variant.wire_dtype,
                "models": _models(config),
                "down_bytes_per_client": round(down),
                "up_bytes_per_client": round(up),
                "total_bytes_per_client": round(down + up),
                "analytic_float32_bytes": analytic,
                "measured_over_analytic": round((down + up) / analytic, 4),
                "paper_table_bytes": algorithm(variant.strategy).paper_bytes,
                "client_updates": clients,
            }
            | _epsilon(Path(config.run_dir))
        )
    return rows


def comparisons(rows: list[dict]) -> list[str]:
    """Both ratios: the paper's (its networks against its protocol) and fedgs' like-for-like
    (each measured pair that is present)."""
    total = {r["variant"]: r["total_bytes_per_client"] for r in rows}
    lines = []
    if FEDAVG_PAPER in total and PAPER_PROTOCOL in total:
        ratio = total[FEDAVG_PAPER] / total[PAPER_PROTOCOL]
        lines.append(
            f"Paper-sized networks (the GS-WGAN paper's comparison): {FEDAVG_PAPER} with the "
            f"paper's networks / {PAPER_PROTOCOL}: {ratio:,.0f}x, float32; mostly the size of "
            "the paper's critic, which fedgs' GS-WGAN never trains."
        )
    if FEDAVG_FEDGS in total:
        ratios = [
            f"/ {label}: {total[FEDAVG_FEDGS] / total[label]:,.1f}x"
            for label in (FEDGS_PROTOCOL, PAPER_PROTOCOL)
            if label in total
        ]
        lines.append(
            f"Like-for-like (the networks fedgs trains): {FEDAVG_FEDGS} {'; '.join(ratios)} "
            "(float32)."
        )
    return lines


def _epsilon_cell(row: dict) -> str:
    return (
        f"{row['epsilon']:.4g} ({row['threat_model']}; {row['accountant']}; "
        f"delta {row['delta']:g}; {row['neighbouring']})"
    )


def table_lines(rows: list[dict], base: RunConfig) -> list[str]:
    """The markdown table with its header, both comparisons and the upload ratios."""
    from fedgs.comm import gswgan_paper_bytes

    lines = [
        f"Bytes per participating client per generator update (B = {base.batch_size}, "
        f"GS-WGAN n_dis = {base.critic_steps}, Fed-Avg GAN n_D = {base.fedavg_critic_steps}, "
        f"{base.steps} step{'s' if base.steps != 1 else ''} each; serialized Flower messages, "
        "transport framing excluded). "
        f"DataLens: k = {base.datalens_top_k}, n_dis = {base.critic_steps}; PATE-GAN: "
        f"n_T = {base.pate_teacher_steps}, n_S = {base.pate_student_steps}; both "
        f"{base.teachers_per_step} teachers per step. Epsilon: after these few measured steps "
        "only (not a training run's), each with its threat model, accountant, delta and "
        "neighbouring relation.",
        "",
        "| variant | networks | down | up | total | analytic float32 | measured / analytic "
        "| paper table | epsilon (threat model; accountant; delta; neighbours) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        paper = "-" if r["paper_table_bytes"] is None else f"{r['paper_table_bytes']:.3g}"
        lines.append(
            f"| {r['variant']} | {r['models']} | {r['down_bytes_per_client']:,} | "
            f"{r['up_bytes_per_client']:,} | {r['total_bytes_per_client']:,} | "
            f"{r['analytic_float32_bytes']:,} | {r['measured_over_analytic']:.3f} | {paper} "
            f"| {_epsilon_cell(r)} |"
        )
    lines += ["", *comparisons(rows)]
    up = {r["variant"]: r["up_bytes_per_client"] for r in rows}
    for r in rows:
        if r["strategy"] in ("datalens", "pate-gan") and FEDGS_PROTOCOL in up:
            gswgan_up = up[FEDGS_PROTOCOL]
            ratio = gswgan_up / r["up_bytes_per_client"]
            lines.append(f"Upload, GS-WGAN / {r['variant']}: {ratio:,.0f}x")
    lines.append(
        "The paper's analytic GS-WGAN figure (one fake batch down, one gradient batch up, "
        f"float32) is {gswgan_paper_bytes(base.batch_size):,} bytes; with n_dis > 1 fedgs sends "
        "the n_dis fake batches the client's critic steps train on."
    )
    return lines


def write_outputs(rows: list[dict], out: Path, base: RunConfig) -> dict[str, Path]:
    """comm_cost.csv, comm_cost.md and comm_cost.png (log-scale bars) in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = {"csv": out / "comm_cost.csv", "md": out / "comm_cost.md", "png": out / "comm_cost.png"}
    with paths["csv"].open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    lines = table_lines(rows, base)
    paths["md"].write_text("\n".join(lines) + "\n")

    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [r["variant"] for r in rows]
    ax.barh(labels, [r["total_bytes_per_client"] for r in rows], color="tab:blue", label="measured")
    ax.scatter(
        [r["analytic_float32_bytes"] for r in rows],
        labels,
        color="black",
        marker="|",
        s=200,
        label="analytic float32",
        zorder=3,
    )
    ax.set_xscale("log")
    ax.set_xlim(left=1e4)  # bars start at 10 kB so their lengths compare on the log scale
    ax.set_xlabel("bytes per participating client per update (log scale)")
    ax.invert_yaxis()
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(paths["png"], dpi=120)
    plt.close(fig)
    return paths
