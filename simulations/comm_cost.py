"""``fedgs comm-cost``: bytes per generator update of every strategy, measured on real messages.

Each variant is a short real run on Flower's simulation engine (same data, same seed); the
ServerApp logs the serialized size of every message it sends and receives (``bytes_down`` /
``bytes_up`` in metrics.csv). The table puts the measured bytes per participating client next to
the analytic float32 payload of the protocol actually used and the GS-WGAN paper's table, and
each run's epsilon under its own threat model (after the few measured steps) from privacy.json.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from fedgs.run_config import RunConfig
from fedgs.simulations.simulate import EngineOptions, run_simulation


@dataclass(frozen=True)
class Variant:
    label: str
    strategy: str
    wire_dtype: str
    critic_steps: int | None = None  # GS-WGAN n_dis override (None: the configured one)


VARIANTS = (
    Variant("GS-WGAN, n_dis = 1 (the paper's protocol)", "gswgan", "float32", critic_steps=1),
    Variant("GS-WGAN", "gswgan", "float32"),
    Variant("GS-WGAN, float16 wire", "gswgan", "float16"),
    Variant("GS-WGAN, bfloat16 wire", "gswgan", "bfloat16"),
    Variant("Fed-Avg GAN", "fedavg-gan", "float32"),
    Variant("Fed-Avg GAN, float16 wire", "fedavg-gan", "float16"),
    Variant("DataLens, top-k sign votes", "datalens", "float32"),
    Variant("PATE-GAN, one-bit votes", "pate-gan", "float32"),
)
# privacy.json section of each strategy's headline epsilon, most specific first
EPSILON_SECTIONS = ("trusted_aggregator", "trusted_server", "untrusted_server")
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


def _epsilon(run_dir: Path) -> tuple[float, str]:
    """The run's headline epsilon and the threat model it holds under."""
    privacy = json.loads((run_dir / "privacy.json").read_text())
    section = next(s for s in EPSILON_SECTIONS if s in privacy)
    return float(privacy[section]["epsilon"]), section.replace("_", "-")


def _analytic(config: RunConfig) -> int:
    """Float32 payload bytes per client update of the protocol as configured."""
    from fedgs.comm import (
        datalens_protocol_bytes,
        fedavg_protocol_bytes,
        gswgan_protocol_bytes,
        pate_protocol_bytes,
    )
    from fedgs.training.fedavg_gan import build_models

    if config.strategy == "gswgan":
        cost = gswgan_protocol_bytes(config.batch_size, config.critic_steps)
    elif config.strategy == "datalens":
        k, n_dis = config.datalens_top_k, config.critic_steps
        cost = datalens_protocol_bytes(config.batch_size, k, n_dis)
    elif config.strategy == "pate-gan":
        cost = pate_protocol_bytes(
            config.batch_size, config.pate_teacher_steps, config.pate_student_steps
        )
    else:
        fedavg = config.fedavg_gan()
        _, critic = build_models(fedavg, 10)
        values = sum(t.numel() for t in critic.state_dict().values())
        parameters = sum(p.numel() for p in critic.parameters())
        cost = fedavg_protocol_bytes(values, parameters, fedavg.batch_size, fedavg.critic_steps)
    return cost["down"] + cost["up"]


def measure(base: RunConfig, out: Path, options: EngineOptions) -> list[dict]:
    from fedgs.comm import PAPER_BYTES

    rows = []
    for variant in VARIANTS:
        slug = "".join(c if c.isalnum() else "-" for c in variant.label.lower())
        config = base.with_updates(
            critic_steps=variant.critic_steps or base.critic_steps,
            strategy=variant.strategy,
            wire_dtype=variant.wire_dtype,
            run_dir=str(out / "runs" / slug),
            eval_every=0,
            warm_start_steps=0,
            checkpoint_every=base.steps,
        )
        run_simulation(config, options)
        down, up, clients = _measured(Path(config.run_dir))
        analytic = _analytic(config)
        epsilon, threat_model = _epsilon(Path(config.run_dir))
        rows.append(
            {
                "variant": variant.label,
                "strategy": variant.strategy,
                "wire_dtype": variant.wire_dtype,
                "models": config.fedavg_models if variant.strategy == "fedavg-gan" else "gswgan",
                "down_bytes_per_client": round(down),
                "up_bytes_per_client": round(up),
                "total_bytes_per_client": round(down + up),
                "analytic_float32_bytes": analytic,
                "measured_over_analytic": round((down + up) / analytic, 4),
                "paper_table_bytes": PAPER_BYTES.get(variant.strategy),
                "client_updates": clients,
                "epsilon": epsilon,
                "threat_model": threat_model,
            }
        )
    return rows


def write_outputs(rows: list[dict], out: Path, base: RunConfig) -> dict[str, Path]:
    """comm_cost.csv, comm_cost.md and comm_cost.png (log-scale bars) in ``out``."""
    import matplotlib

    from fedgs.comm import gswgan_paper_bytes

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = {"csv": out / "comm_cost.csv", "md": out / "comm_cost.md", "png": out / "comm_cost.png"}
    with paths["csv"].open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        f"Bytes per participating client per generator update (B = {base.batch_size}, "
        f"GS-WGAN n_dis = {base.critic_steps}, Fed-Avg GAN n_D = {base.fedavg_critic_steps}, "
        f"{base.steps} steps each; serialized Flower messages, transport framing excluded). "
        f"DataLens: k = {base.datalens_top_k}, n_dis = {base.critic_steps}; PATE-GAN: "
        f"n_T = {base.pate_teacher_steps}, n_S = {base.pate_student_steps}; both "
        f"{base.teachers_per_step} teachers per step. Epsilon (delta = {base.delta:g}): after "
        "these few steps, each under its own threat model.",
        "",
        "| variant | down | up | total | analytic float32 | measured / analytic | paper table "
        "| epsilon (threat model) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        paper = "-" if r["paper_table_bytes"] is None else f"{r['paper_table_bytes']:.3g}"
        lines.append(
            f"| {r['variant']} ({r['models']} models) | {r['down_bytes_per_client']:,} | "
            f"{r['up_bytes_per_client']:,} | {r['total_bytes_per_client']:,} | "
            f"{r['analytic_float32_bytes']:,} | {r['measured_over_analytic']:.3f} | {paper} "
            f"| {r['epsilon']:.4g} ({r['threat_model']}) |"
        )
    fedavg = next(r for r in rows if r["variant"] == "Fed-Avg GAN")["total_bytes_per_client"]
    lines.append("")
    for variant in VARIANTS[:2]:
        gswgan = next(r for r in rows if r["variant"] == variant.label)
        ratio = fedavg / gswgan["total_bytes_per_client"]
        lines.append(f"Fed-Avg GAN / {variant.label} (float32): {ratio:,.0f}x")
    gswgan_up = next(r for r in rows if r["variant"] == "GS-WGAN")["up_bytes_per_client"]
    for r in rows:
        if r["strategy"] in ("datalens", "pate-gan"):
            ratio = gswgan_up / r["up_bytes_per_client"]
            lines.append(f"Upload, GS-WGAN / {r['variant']}: {ratio:,.0f}x")
    lines.append(
        "The paper's analytic GS-WGAN figure (one fake batch down, one gradient batch up, "
        f"float32) is {gswgan_paper_bytes(base.batch_size):,} bytes; with n_dis > 1 fedgs sends "
        "the n_dis fake batches the client's critic steps train on."
    )
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
