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

GS-WGAN under secure aggregation is measured at cohort sizes m (``SECAGG_COHORTS``) on one secure
step in this process (``measure_secure``): the strategy builds the secure queries and drives its
four round trips through ``SecureExchange``; behind a stand-in grid, m nodes run fedgs' own node
code (``fedgs.client.secure_node``: the gate, SecAgg+'s stages, the state kept between them),
with random clipped rows encoded with the query's noise in place of a critic's gradient (a
message's size does not depend on the values). Every message and reply is a real Flower
``Message``, measured serialized, with the message ids the in-memory grid and the engine give.
"""

from __future__ import annotations

import contextlib
import csv
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from uuid import uuid4

import numpy as np

from fedgs.algorithms import algorithm
from fedgs.privacy.report import block_key, headline, load_privacy
from fedgs.run_config import SECAGG_ACCOUNTANTS, RunConfig
from fedgs.simulations.simulate import EngineOptions, run_simulation

if TYPE_CHECKING:
    from flwr.app import Message

    from fedgs.client.common import SecureContribution
    from fedgs.client.gate import Admitted


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
    "secure_aggregation": "replace-one client",
    "trusted_aggregator": "replace-one client",
    "trusted_server": "add/remove-one client",
    "untrusted_server": "replace-one client",
}
SECAGG_COHORTS = (10, 50, 100)  # cohort sizes m of the secure rows (complete graph)
ROUND_TRIPS = ("query", "share keys", "masked input", "unmask")  # of a secure step
COLUMNS = (
    "variant",
    "strategy",
    "wire_dtype",
    "models",
    "cohort",
    "round_trips",
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
                "cohort": "",
                "round_trips": 1,
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


@contextlib.contextmanager
def _serverapp_identity(run_id: int) -> Iterator[None]:
    """The task identity a ServerApp process has before it makes a Message (the simulation's:
    a random run id, the SuperLink's node id, task 1); the previous one restored after."""
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    names = ("_run_id", "_node_id", "_task_id")
    saved = [getattr(TaskIdentity, name) for name in names]
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = run_id, SUPERLINK_NODE_ID, 1
    try:
        yield
    finally:
        for name, value in zip(names, saved, strict=True):
            setattr(TaskIdentity, name, value)


class SecureNodes:
    """m in-process nodes behind a grid, each serving every message with fedgs' node code
    (``fedgs.client.secure_node.serve``, its SecAgg+ state in its own Context); a secure query's
    contribution is random rows clipped to C, encoded with the query's noise share, in place of
    a critic's gradient. ``trips``: each round trip's bytes down and up and its messages."""

    def __init__(self, config: RunConfig, nodes: list[int], seed: int) -> None:
        from flwr.app import Context, RecordDict

        from fedgs.privacy.policy import NodePolicy

        self.config, self.policy = config, NodePolicy.from_run_config(config)
        self.partitions = {node: k for k, node in enumerate(nodes)}
        self.contexts = {
            node: Context(run_id=0, node_id=node, node_config={}, state=RecordDict(), run_config={})
            for node in nodes
        }
        self.rng = np.random.default_rng(seed)
        self.trips: list[tuple[int, int, int]] = []

    def get_node_ids(self) -> list[int]:
        return list(self.partitions)

    def send_and_receive(self, messages: list[Message], timeout: float) -> list[Message]:
        """Each message measured as the ServerApp sends it, then given an id as the in-memory
        grid pushes it; each reply given its id as the engine returns it, then measured."""
        from flwr.app import Message

        from fedgs.client import secure_node
        from fedgs.comm import message_bytes

        down = sum(message_bytes(m) for m in messages)
        replies = []
        for message in messages:
            message.metadata.__dict__["_message_id"] = str(uuid4())
            node = message.metadata.dst_node_id
            content = secure_node.serve(
                message,
                self.contexts[node],
                self.config,
                self.policy,
                self.partitions[node],
                self._contribution,
            )
            reply = Message(content, reply_to=message)
            reply.metadata.__dict__["_message_id"] = str(uuid4())
            replies.append(reply)
        self.trips.append((down, sum(message_bytes(r) for r in replies), len(messages)))
        return replies

    def _contribution(self, request: Admitted, partition_id: int) -> SecureContribution:
        """What a GS-WGAN session answers a secure query with, its gradient stood in."""
        from fedgs.client.common import SecureContribution
        from fedgs.privacy.distributed_noise import encode
        from fedgs.privacy.randomness import SecureRandom
        from fedgs.protocols import common, secagg

        _, noise, rotation_seed = secagg.read_setup(request.content)
        clip = request.config.clip_norm
        rows = self.rng.normal(size=(noise.dimension // common.PIXELS, common.PIXELS))
        rows *= clip / np.maximum(clip, np.linalg.norm(rows, axis=1, keepdims=True))
        values = encode(rows.ravel(), noise, SecureRandom(), rotation_seed)
        used = {
            "strategy": "gswgan",
            "batch-size": request.config.batch_size,
            "delta": request.config.delta,
            "noise-multiplier": noise.sigma / (2 * clip),
            "m-min": noise.m_min,
        }
        client = f"client-{partition_id}"
        return SecureContribution(values, common.reply_content({}, client, partition_id, used))


def secure_config(base: RunConfig, cohort: int) -> RunConfig:
    """GS-WGAN with secure aggregation over ``cohort`` nodes: complete graph, the default
    threshold and fewest survivors, float32 fakes; an RDP accountant (the base's if it is one)."""
    accountant = base.accountant if base.accountant in SECAGG_ACCOUNTANTS else "autodp-rdp"
    return base.with_updates(
        strategy="gswgan",
        wire_dtype="float32",
        secure_aggregation=True,
        clients_per_step=cohort,
        secagg_degree=0,
        secagg_threshold=0,
        secagg_min_survivors=0,
        client_code_dims=0,
        accountant=accountant,
        client_sampling=RunConfig.__dataclass_fields__["client_sampling"].default,
    )


def secure_step(base: RunConfig, cohort: int, seed: int = 0) -> dict:
    """One secure GS-WGAN step over ``cohort`` in-process nodes: the row (bytes per client per
    direction over the four round trips, the epsilon after it) with ``per_round_trip``."""
    from flwr.app import ArrayRecord, ConfigRecord

    from fedgs.privacy import PrivacyLedger
    from fedgs.privacy.accountants import get_accountant
    from fedgs.privacy.threat_models import SECURE_AGGREGATION
    from fedgs.server.gswgan_strategy import GSWGANStrategy
    from fedgs.training.generator import GeneratorTrainer

    config = secure_config(base, cohort)
    settings, noise = config.secagg_settings(), config.secure_noise().params
    ids: set[int] = set()  # 64-bit node ids, as the simulation engine draws them
    draw = np.random.default_rng(seed)
    while len(ids) < cohort:
        ids.add(int(draw.integers(2, 2**63)))
    grid = SecureNodes(config, sorted(ids), seed)
    ledger = PrivacyLedger()
    with _serverapp_identity(secrets.randbits(63)):
        strategy = GSWGANStrategy(
            GeneratorTrainer(10, config.gswgan(), seed=config.seed),  # G's classes: no byte
            ledger,
            np.random.default_rng(seed),
            cohort,
            config.wire_dtype,
            node_wait=config.reply_timeout,
            secure=(settings, noise),
        )
        queries = list(strategy.configure_train(1, ArrayRecord(), ConfigRecord(), grid))  # type: ignore[arg-type]
        exchanged = strategy.exchange(grid, queries, config.reply_timeout)  # type: ignore[arg-type]
        _, metrics = strategy.aggregate_train(1, exchanged.replies)
    answered = int(metrics["answered"]) if metrics else 0
    if answered != cohort or len(grid.trips) != len(ROUND_TRIPS):
        raise RuntimeError(
            f"the secure step over {cohort} nodes released no full sum ({answered} answered, "
            f"{len(grid.trips)} round trips): {metrics}"
        )
    down, up = sum(t[0] for t in grid.trips), sum(t[1] for t in grid.trips)
    if (down, up) != (exchanged.bytes_down, exchanged.bytes_up):  # what a run's metrics log
        raise RuntimeError(
            f"measured {down, up} bytes, the driver counted "
            f"{exchanged.bytes_down, exchanged.bytes_up}"
        )
    down, up = down / cohort, up / cohort
    # the analytic payload: the plain query's fake batches down, the int64 masked vector up
    analytic = algorithm("gswgan").update_bytes_of(config)["down"] + 8 * noise.padded_dimension
    acct = get_accountant(config.accountant)
    return {
        "variant": f"GS-WGAN, secure aggregation, m = {cohort}",
        "strategy": "gswgan",
        "wire_dtype": config.wire_dtype,
        "models": _models(config),
        "cohort": cohort,
        "round_trips": len(grid.trips),
        "down_bytes_per_client": round(down),
        "up_bytes_per_client": round(up),
        "total_bytes_per_client": round(down + up),
        "analytic_float32_bytes": analytic,
        "measured_over_analytic": round((down + up) / analytic, 4),
        "paper_table_bytes": None,
        "client_updates": answered,
        "epsilon": float(ledger.epsilon_max(config.delta, acct)[0]),
        "threat_model": SECURE_AGGREGATION,
        "accountant": acct.name,
        "delta": float(config.delta),
        "neighbouring": EPSILON_SECTIONS[block_key(SECURE_AGGREGATION)],
        "per_round_trip": [
            {"round_trip": name, "down": round(d / n), "up": round(u / n)}
            for name, (d, u, n) in zip(ROUND_TRIPS, grid.trips, strict=True)
        ],
        "secagg": {
            "threshold": settings.threshold,
            "min_survivors": settings.min_survivors,
            "bits": settings.bits,
            "padded_dimension": noise.padded_dimension,
        },
    }


def measure_secure(base: RunConfig, cohorts: tuple[int, ...] = SECAGG_COHORTS) -> list[dict]:
    """The secure rows, one per cohort size."""
    return [secure_step(base, m) for m in cohorts]


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
        "| variant | networks | round trips | down | up | total | analytic float32 "
        "| measured / analytic | paper table | epsilon (threat model; accountant; delta; "
        "neighbours) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        paper = "-" if r["paper_table_bytes"] is None else f"{r['paper_table_bytes']:.3g}"
        lines.append(
            f"| {r['variant']} | {r['models']} | {r['round_trips']} | "
            f"{r['down_bytes_per_client']:,} | "
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
    return lines + secure_lines(rows)


def secure_lines(rows: list[dict]) -> list[str]:
    """The secure rows' note and their bytes per round trip (none without secure rows)."""
    secure = [r for r in rows if r.get("per_round_trip")]
    if not secure:
        return []
    plain = {r["variant"]: r for r in rows}.get(FEDGS_PROTOCOL)
    first = secure[0]["secagg"]
    lines = [
        "",
        "GS-WGAN with secure aggregation (SecAgg+, complete graph, the default threshold "
        f"t = d // 2 + 1 and fewest survivors; k = {first['bits']} bits): one secure step in one "
        "process, the strategy's own queries and driver, fedgs' node code on each of m nodes "
        "(random clipped rows stand in for the critics' gradients), every message and reply a "
        "real serialized Flower message. Its analytic payload: the query's fake batches down, "
        f"the int64 masked vector of {first['padded_dimension']:,} values up (8 bytes each); "
        "the keys, shares and unmask lists are the rest. Bytes per client per round trip:",
        "",
        "| m | t | round trip | down | up |",
        "| ---: | ---: | --- | ---: | ---: |",
    ]
    for r in secure:
        for trip in r["per_round_trip"]:
            lines.append(
                f"| {r['cohort']} | {r['secagg']['threshold']} | {trip['round_trip']} | "
                f"{trip['down']:,} | {trip['up']:,} |"
            )
    if plain is not None:
        lines.append("")
        for r in secure:
            up = r["up_bytes_per_client"] / plain["up_bytes_per_client"]
            total = r["total_bytes_per_client"] / plain["total_bytes_per_client"]
            lines.append(
                f"{r['variant']} / {FEDGS_PROTOCOL}: {r['round_trips']} round trips against "
                f"{plain['round_trips']}; up {up:.2f}x, total {total:.2f}x."
            )
    return lines


def secure_round_trip_rows(rows: list[dict]) -> list[dict]:
    """comm_cost_secagg.csv: one row per secure row and round trip."""
    return [
        {"cohort": r["cohort"], "threshold": r["secagg"]["threshold"]}
        | {
            "round_trip": trip["round_trip"],
            "down_bytes_per_client": trip["down"],
            "up_bytes_per_client": trip["up"],
        }
        for r in rows
        if r.get("per_round_trip")
        for trip in r["per_round_trip"]
    ]


def write_outputs(rows: list[dict], out: Path, base: RunConfig) -> dict[str, Path]:
    """comm_cost.csv, comm_cost.md and comm_cost.png (log-scale bars) in ``out``; with secure
    rows, comm_cost_secagg.csv (their bytes per round trip) too."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = {"csv": out / "comm_cost.csv", "md": out / "comm_cost.md", "png": out / "comm_cost.png"}
    with paths["csv"].open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    trips = secure_round_trip_rows(rows)
    if trips:
        paths["secagg_csv"] = out / "comm_cost_secagg.csv"
        with paths["secagg_csv"].open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(trips[0]))
            writer.writeheader()
            writer.writerows(trips)
    lines = table_lines(rows, base)
    paths["md"].write_text("\n".join(lines) + "\n")

    fig, ax = plt.subplots(figsize=(8, 4 + 0.25 * max(0, len(rows) - 9)))
    labels = [r["variant"] for r in rows]
    colors = ["tab:orange" if r.get("per_round_trip") else "tab:blue" for r in rows]
    ax.barh(labels, [r["total_bytes_per_client"] for r in rows], color=colors, label="measured")
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
