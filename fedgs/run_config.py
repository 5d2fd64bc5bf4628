"""The run configuration shared by the ServerApp, the ClientApp and ``fedgs simulate``.

Keys follow Flower's run-config convention (lower case, hyphenated) so the same settings work as
``flwr run . --run-config "steps=2000 noise-multiplier=1.07"`` against a SuperLink and as options
of ``fedgs simulate``. Every field belongs to one group by concern (GROUPS: data, training,
privacy, models, engine, outputs, experimental), which orders ``--help`` and docs/options.md.
The defaults here are mirrored, grouped the same way, in pyproject.toml's
``[tool.flwr.app.config]``; ``python -m fedgs.options_reference`` writes both docs/options.md
and (``--pyproject``) that table, and tests keep them in step.
"""

from __future__ import annotations

import argparse
import math
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from fedgs.algorithms import ALGORITHMS, STRATEGIES
from fedgs.privacy.client_sampling import RULES as CLIENT_SAMPLING_RULES
from fedgs.privacy.client_sampling import UNIFORM
from fedgs.training.hparams import MAX_WARM_START_STEPS, FedAvgGANConfig, GSWGANConfig

if TYPE_CHECKING:
    from fedgs.privacy.distributed_noise import Calibration
    from fedgs.training.dp_merf import MerfConfig

SECAGG_OPTIONS = ("secagg-min-survivors", "secagg-threshold", "secagg-degree", "secagg-bits")
# the secure sum's bound is an RDP one (fedgs.privacy.distributed_accounting), so only RDP
# accountants compose it soundly
SECAGG_ACCOUNTANTS = ("autodp-rdp", "dp-accounting-rdp")


def coerce(value: Any, default: Any, key: str, source: str = "run-config") -> Any:
    """Convert a run-config (or node-config) value to the type of its default (Flower sends
    TOML-typed values); ``source`` names the config in the error."""
    if isinstance(default, bool):
        if isinstance(value, str):
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"{source} '{key}' must be true or false, got '{value}'")
            return value.lower() in ("true", "1")
        return bool(value)
    try:
        return type(default)(value)
    except (TypeError, ValueError, OverflowError) as error:  # int(inf) overflows
        raise ValueError(
            f"{source} '{key}' must be a {type(default).__name__}, got {value!r}"
        ) from error


# The concerns the run config is grouped by, in the order `--help` and docs/options.md show them:
# key -> (title, what the group holds). Every field names one in its metadata.
GROUPS: dict[str, tuple[str, str]] = {
    "data": ("data", "Which data the clients hold; each client loads only its own partition."),
    "training": (
        "training",
        "The strategy, how long it runs and how the generator and each client's critic learn. "
        "The fedavg-*, datalens-* and pate-* keys, and those whose help starts with a strategy's "
        "name, belong to that strategy; the others apply to every strategy that uses them.",
    ),
    "privacy": (
        "privacy",
        "The noise, the clipping, how clients are sampled, and the accounting and budgets "
        "every reported epsilon rests on.",
    ),
    "models": ("models", "The networks: the generator G and the critics D."),
    "engine": (
        "engine and server",
        "Where the run computes, what travels on the wire, and how the server waits for clients.",
    ),
    "outputs": (
        "outputs and evaluation",
        "The run directory, checkpoints, snapshots, scoring during the run, and resuming.",
    ),
    "secagg": (
        "secure aggregation",
        "gswgan, fedavg-gan and dp-merf: each step's (round's) cohort answers through SecAgg+ "
        "with distributed discrete Gaussian noise, so the server learns only the cohort's noisy "
        "sum.",
    ),
    "experimental": (
        "experimental",
        "Options measured not to help, or inconclusive: off by default and kept for further "
        "measurement; each help names the results log entry with the measurements.",
    ),
}


@dataclass(frozen=True)
class SecureVector:
    """What a strategy's client encodes for a secure sum, and the noise the sum must carry: a
    vector of ``dimension`` values of L2 norm at most ``clip``, summed with per-coordinate noise
    std ``scale * multiplier`` (``multiplier``: the run's noise key, which keeps its meaning)."""

    clip: float
    dimension: int
    scale: float
    multiplier: float

    def central(self, sigma: float) -> float:
        """The noise multiplier a sum of noise std ``sigma`` carries, in the noise key's units."""
        return sigma / self.scale


@dataclass(frozen=True)
class SecAggSettings:
    """A secure step's SecAgg+ settings for a cohort of clients-per-step nodes, 0s resolved."""

    min_survivors: int  # m_min
    threshold: int  # t
    degree: int  # neighbours per client asked for (a smaller cohort may have fewer)
    bits: int

    def report(self) -> dict[str, int]:
        """The settings as privacy.json and the planner state them, with the colluders the
        threshold tolerates (t - 1)."""
        return {
            "min_survivors": self.min_survivors,
            "threshold": self.threshold,
            "colluders": self.threshold - 1,
            "degree": self.degree,
            "bits": self.bits,
        }


def option(default: Any, group: str, help: str) -> Any:
    """A run-config field: its default, its group (a key of GROUPS) and its help."""
    if group not in GROUPS:
        raise ValueError(f"unknown run-config group {group!r} (known: {', '.join(GROUPS)})")
    return field(default=default, metadata={"group": group, "help": help})


@dataclass(frozen=True)
class RunConfig:
    # Fields keep their historical order: the deployed app's pyproject.toml (fedgs.deploy.
    # app_bundle), and so the app hash data holders allowlist, follows it. Each field's group
    # (GROUPS), not this order, arranges --help, docs/options.md and pyproject.toml.
    dataset: str = option(
        "embedded",
        "data",
        "embedded (offline default), femnist (one client per writer: Parquet shards or LEAF "
        "output), mnist (IDX) or saved",
    )
    data_dir: str = option(
        "",
        "data",
        "femnist: a folder of Parquet shards or LEAF output (default $FEDGS_FEMNIST); mnist: "
        "the IDX folder. A deployed node reads its own (node-config data-dir), never the run "
        "config's, which is the server's copy",
    )
    labels: str = option("digits", "data", "femnist labels: digits, merged36 or all62")
    num_clients: int = option(
        0,
        "data",
        "embedded/mnist: number of virtual clients; femnist: the first N writers "
        "(0 = loader default: 50, 1000, every writer)",
    )
    strategy: str = option(
        "gswgan",
        "training",
        "gswgan (untrusted server), fedavg-gan (DP-FedAvg, trusted server), the teacher "
        "ensembles datalens (TopAgg) and pate-gan (trusted aggregator), or dp-merf (one-shot "
        "private mean embeddings, untrusted server)",
    )
    steps: int = option(200, "training", "private generator steps (fedavg-gan: rounds)")
    wire_dtype: str = option(
        "float32",
        "engine",
        "float payload format on the wire: float32, float16 or bfloat16",
    )
    warm_start_steps: int = option(
        20,
        "training",
        "non-private critic pre-training steps per client (no privacy cost; at most 10,000: the "
        "node's compute)",
    )
    public_pretrain_steps: int = option(
        0,
        "training",
        "gswgan: steps of non-private pre-training of G on the server on digits rendered from "
        "matplotlib's fonts (public data, no client data, no privacy cost; recorded in "
        "privacy.json as public_data); 0 = off",
    )
    clients_per_step: int = option(1, "training", "clients queried per generator step (m)")
    client_sampling: str = option(
        UNIFORM,
        "privacy",
        "gswgan: uniform (m nodes uniformly at random each step, as in the paper) or "
        "least-queried (the m nodes that paid the fewest queries so far, ties at random: every "
        "client answers about equally often, so more steps fit an untrusted-server epsilon; the "
        "trusted-sampler figure then does not hold)",
    )
    batch_size: int = option(
        32, "training", "fake batch size B (and a node's real batch; at most 4096: its memory)"
    )
    critic_steps: int = option(
        5, "training", "critic steps per generator step (n_dis; at most 64: the node's compute)"
    )
    fake_batches: int = option(
        0,
        "training",
        "gswgan: distinct fake batches the server draws per query, cycled over the critic "
        "steps (fewer G forwards and bytes down per step); 0 = one per critic step",
    )
    noise_multiplier: float = option(1.07, "privacy", "sigma; per-row noise std is 2*C*sigma")
    clip_norm: float = option(1.0, "privacy", "per-sample clipping bound C")
    gradient_smoothing: float = option(
        0.0,
        "training",
        "server-side Gaussian blur (sigma, pixels) of the sanitized gradients before they "
        "reach G: post-processing, no privacy cost; 0 = off, as in the paper",
    )
    label_mismatch_weight: float = option(
        0.0,
        "training",
        "critics also score their real images under wrong labels as fakes, with this weight "
        "(teaches labels early; local training, no privacy cost); 0 = off, as in the paper",
    )
    label_mismatch_until: int = option(
        0,
        "experimental",
        "experimental: measured no help (results/log/synthetic-data.md; one seed: annealed to 0 "
        "at step 4,000, CNN 0.328 against 0.314 constant, within the retraining noise). gswgan: "
        "the label-mismatch weight falls linearly to 0 at this step (labels taught early, no "
        "prototype pull late); 0 = the weight stays constant",
    )
    diversity_weight: float = option(
        0.0,
        "experimental",
        "experimental: measured no help (results/log/synthetic-data.md; one seed: W = 1 CNN "
        "0.155 against 0.169 without, the variety white patches, not handwriting; W = 0.05 "
        "0.191, inconclusive). gswgan: weight of the mode-seeking term (Mao et al. 2019) in G's "
        "loss: "
        "distinct latents of one label pushed to distinct images (server-side, no client data, "
        "no privacy cost); 0 = off, as in the paper",
    )
    z_dim: int = option(10, "models", "gswgan: latent dimension of G (its z; at most 1024)")
    client_code_dims: int = option(
        0,
        "experimental",
        "experimental: measured no help (results/log/synthetic-data.md; two seeds, D = 5: CNN "
        "0.212 against 0.168 at seed 0, 0.083 against 0.092 at seed 1, inconclusive). gswgan: "
        "this many of G's z-dim latent dims are fixed per queried client (a code from the run "
        "seed and the client's name; the server knows whom it asks), so G can learn each "
        "writer's style at its code; sampling draws them at random; no client data, no privacy "
        "cost; 0 = off, as in the paper",
    )
    lr_generator: float = option(1e-4, "training", "Adam learning rate of G")
    lr_critic: float = option(1e-4, "training", "Adam learning rate of each private critic")
    generator_width: int = option(
        16, "models", "G channel width (64 = paper size; at most 256: a node's memory)"
    )
    critic_width: int = option(
        16, "models", "D channel width (64 = paper size; at most 256: a node's memory)"
    )
    beta1: float = option(
        0.5,
        "training",
        "Adam beta1 of G and critics (paper: 0.5; 0.9 averages noisy steps longer)",
    )
    ema_decay: float = option(0.999, "training", "EMA decay of G used for samples")
    # Fed-Avg GAN (batch-size and, for fedavg-models=gswgan, the widths are shared)
    fedavg_models: str = option(
        "paper",
        "models",
        "fedavg-gan networks: paper (TF-GAN MNIST, 13.3M/6.56M) or gswgan",
    )
    fedavg_clients_per_round: int = option(
        10, "training", "fedavg-gan: expected clients per round (Poisson, q = m/K)"
    )
    fedavg_critic_steps: int = option(
        6, "training", "fedavg-gan: client critic SGD steps per round (n_D; at most 64)"
    )
    fedavg_generator_steps: int = option(
        6, "training", "fedavg-gan: server generator SGD steps per round (n_G)"
    )
    fedavg_lr_client: float = option(5e-4, "training", "fedavg-gan: client SGD learning rate")
    fedavg_lr_server: float = option(
        1.0, "training", "fedavg-gan: server learning rate on the mean delta"
    )
    fedavg_lr_generator: float = option(5e-3, "training", "fedavg-gan: generator SGD learning rate")
    fedavg_clip_norm: float = option(
        0.1,
        "privacy",
        "fedavg-gan: L2 bound S on each client's critic delta; the noise is z*S whatever the "
        "deltas are. 0.1 is the paper's; with the gswgan models a FEMNIST writer's delta has "
        "norm ~0.01 (metrics.csv: received_delta_norm_mean), so at 0.1 nothing is clipped "
        "and the noise is ten times what it need be",
    )
    fedavg_noise_multiplier: float = option(
        0.01, "privacy", "fedavg-gan: z; noise std z*S on the sum of deltas"
    )
    # teacher ensembles (datalens, pate-gan): batch-size, widths, lr-critic (teachers; the PATE
    # student), lr-generator, beta1 and warm-start-steps are shared; datalens uses critic-steps
    teachers_per_step: int = option(
        10, "training", "datalens/pate-gan: teachers (clients) sampled per step (m)"
    )
    datalens_top_k: int = option(
        200, "privacy", "datalens: coordinates each teacher votes on per sample (k)"
    )
    datalens_noise_std: float = option(
        5.0, "privacy", "datalens: std of the Gaussian noise on every vote sum"
    )
    datalens_threshold: float = option(
        0.3,
        "training",
        "datalens: keep a coordinate where |noisy vote sum| > threshold * m",
    )
    pate_laplace_scale: float = option(
        1.0,
        "privacy",
        "pate-gan: Laplace scale b on each vote count ((2/b, 0)-DP per sample)",
    )
    pate_teacher_steps: int = option(
        5, "training", "pate-gan: teacher steps per generator step (n_T)"
    )
    pate_student_steps: int = option(
        5, "training", "pate-gan: student steps per generator step (n_S)"
    )
    delta: float = option(1e-5, "privacy", "delta of every reported (epsilon, delta)")
    accountant: str = option(
        "autodp-rdp", "privacy", "autodp-rdp, dp-accounting-rdp or dp-accounting-pld"
    )
    max_minutes: float = option(
        0.0,
        "training",
        "wall-clock budget of the run in minutes, warm start included: the step that starts "
        "after it is the last (scored and checkpointed); 0 = no limit",
    )
    target_epsilon: float = option(
        0.0,
        "privacy",
        "stop before the run epsilon (untrusted server) passes this; 0 = off",
    )
    client_budget_epsilon: float = option(
        0.0,
        "privacy",
        "each client refuses queries past this epsilon (untrusted server); 0 = no budget. "
        "Simulation: every node's policy budget; deployment: may only tighten each node's own "
        "policy-epsilon-budget",
    )
    # compute (GS-WGAN: server and clients; the other strategies run on the CPU)
    device: str = option("auto", "engine", "auto (a GPU when the process sees one), cpu or cuda")
    client_num_gpus: float = option(
        0.0,
        "engine",
        "simulation: GPU share of each Ray client (0.25 = four clients per GPU; 0 = clients "
        "on the CPU)",
    )
    run_dir: str = option("runs/simulate", "outputs", "output directory of the run")
    state_dir: str = option("", "outputs", "client state directory ('' = RUN_DIR/client-state)")
    checkpoint_every: int = option(100, "outputs", "checkpoint every N steps")
    snapshot_every: int = option(
        0,
        "outputs",
        "keep the generator every N steps in RUN_DIR/snapshots/step_N/, a run directory of its "
        "own at the epsilon paid by then (0 = off)",
    )
    eval_every: int = option(100, "outputs", "score and save sample grids every N steps (0 = off)")
    eval_samples: int = option(1000, "outputs", "samples per evaluation")
    seed: int = option(
        0,
        "training",
        "seed of latents and initialisation (never of client sampling or DP noise)",
    )
    sampling_seed: int = option(
        -1,
        "privacy",
        "client sampling: -1 = secret OS randomness (default); N >= 0 = reproducible sampling "
        "from seed N, and then the amplified epsilons (trusted sampler, Fed-Avg GAN's Poisson "
        "sampling) do not hold",
    )
    min_nodes: int = option(
        0, "engine", "wait for this many nodes before starting (0 = clients-per-step)"
    )
    reply_timeout: float = option(600.0, "engine", "seconds to wait for client replies")
    max_unanswered_steps: int = option(
        5,
        "engine",
        "stop the run with the first client error after this many consecutive steps in which "
        "no asked client answered (0 = never stop)",
    )
    resume: bool = option(False, "outputs", "continue from RUN_DIR's checkpoint")
    secure_aggregation: bool = option(
        False,
        "secagg",
        "the cohort answers through SecAgg+ with its shares of a distributed discrete "
        "Gaussian; the server learns only the cohort's noisy sum. gswgan: every node of a step "
        "gets the same fake batches, the sum's noise std is 2*C*sigma per coordinate; "
        "fedavg-gan: a fixed cohort of fedavg-clients-per-round nodes (uniform, not Poisson) "
        "sends its critic deltas, the sum's noise std is z*S (each noise key keeps its "
        "meaning); the cohort needs >= 3 nodes",
    )
    secagg_min_survivors: int = option(
        0,
        "secagg",
        "m_min: the fewest clients whose sum may be released (a step with fewer aborts and "
        "releases nothing); the noise is split so that m_min - (threshold - 1) of them carry "
        "it; 0 = max(3, m - m // 10) for the cohort m (clients-per-step; fedavg-gan: "
        "fedavg-clients-per-round)",
    )
    secagg_threshold: int = option(
        0,
        "secagg",
        "t: Shamir shares needed to rebuild a client's secrets; the server may collude with "
        "t - 1 clients and the noise assumes it does; 0 = the smallest valid, d // 2 + 1 for d "
        "neighbours",
    )
    secagg_degree: int = option(
        0, "secagg", "neighbours each client shares secrets with; 0 = every other (complete)"
    )
    secagg_bits: int = option(32, "secagg", "modulus bits k of the secure sum (mod 2^k)")
    ray_address: str = option(
        "",
        "engine",
        "simulation: a running Ray cluster to join (HOST:PORT of its head, or auto) instead of "
        "starting a local Ray; its nodes run the ClientApps, so state-dir must then be an "
        "absolute path on storage every node mounts at that path (docs/running.md); '' = local",
    )
    # dp-merf (one-shot private mean embeddings): steps caps its query rounds and
    # clients-per-step sizes them (rounds = min(steps, ceil(writers / clients-per-step)))
    merf_features: int = option(
        1000,
        "training",
        "dp-merf: random Fourier features D of the Gaussian kernel (even; D/2 cos/sin pairs); "
        "each writer releases a (D + 1) x classes matrix",
    )
    merf_bandwidth: float = option(
        7.0,
        "training",
        "dp-merf: length scale of the Gaussian kernel on flattened images in [-1, 1] (about a "
        "third of the median distance between two digits: narrower than the median tells "
        "classes apart; on FEMNIST at epsilon 10, CNN accuracy 0.63 at 20, 0.81 at 10, 0.85 "
        "at 7)",
    )
    merf_clip_norm: float = option(
        1.0,
        "privacy",
        "dp-merf: L2 bound C on each writer's mean embedding; the noise scales with it. Its "
        "norm is <= 1, so 1 never clips, but a FEMNIST digit writer's is 0.23-0.43 (median "
        "0.27): C = 0.25 cuts the noise 4x (secure epsilon 1, seed 0: CNN 0.28 -> 0.71)",
    )
    merf_noise_multiplier: float = option(
        0.6,
        "privacy",
        "dp-merf: sigma; each writer adds noise std 2*C*sigma to every coordinate of its one "
        "release (0.6: epsilon 9.4 per writer, untrusted server, delta 1e-5)",
    )
    merf_generator_steps: int = option(
        1000, "training", "dp-merf: server steps training G on the released embedding"
    )
    merf_lr: float = option(1e-3, "training", "dp-merf: Adam learning rate of G")
    merf_batch_size: int = option(
        200, "training", "dp-merf: generated images per step of G's training"
    )

    @classmethod
    def from_user_config(cls, *layers: Mapping[str, Any]) -> RunConfig:
        """Merge Flower user-config layers (later wins); unknown keys are an error."""
        known = {f.name.replace("_", "-"): f for f in fields(cls)}
        values: dict[str, Any] = {}
        for layer in layers:
            for key, value in layer.items():
                if key in ("partition-id", "num-partitions") or key.startswith("policy-"):
                    continue  # node identity and privacy policy, not run configuration
                if key not in known:
                    raise ValueError(
                        f"unknown run-config key '{key}' (known: {', '.join(sorted(known))})"
                    )
                values[known[key].name] = coerce(value, known[key].default, key)
        return cls(**values)

    def to_user_config(self) -> dict[str, Any]:
        return {f.name.replace("_", "-"): getattr(self, f.name) for f in fields(self)}

    def with_updates(self, **changes: Any) -> RunConfig:
        return replace(self, **changes)

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r} (known: {', '.join(STRATEGIES)})")
        from fedgs.device import DEVICES
        from fedgs.wire import WIRE_DTYPES

        if self.device not in DEVICES:
            raise ValueError(f"unknown device {self.device!r} (known: {', '.join(DEVICES)})")
        if self.client_num_gpus < 0:
            raise ValueError(f"client-num-gpus must be >= 0, got {self.client_num_gpus}")
        if self.max_unanswered_steps < 0:
            raise ValueError(f"max-unanswered-steps must be >= 0, got {self.max_unanswered_steps}")
        if self.snapshot_every < 0:
            raise ValueError(f"snapshot-every must be >= 0, got {self.snapshot_every}")
        if self.max_minutes < 0:
            raise ValueError(f"max-minutes must be >= 0, got {self.max_minutes}")
        if self.strategy == "gswgan" and self.noise_multiplier <= 0:
            raise ValueError(
                "gswgan needs noise-multiplier > 0: every reply is a Gaussian mechanism the "
                f"ledger accounts (got {self.noise_multiplier}); for a non-private reference "
                "use fedavg-gan with fedavg-noise-multiplier 0"
            )
        if self.public_pretrain_steps < 0:
            raise ValueError(
                f"public-pretrain-steps must be >= 0, got {self.public_pretrain_steps}"
            )
        if self.client_sampling not in CLIENT_SAMPLING_RULES:
            raise ValueError(
                f"unknown client-sampling {self.client_sampling!r} "
                f"(known: {', '.join(CLIENT_SAMPLING_RULES)})"
            )
        self._refuse_other_strategies_options()
        self._check_data_and_seed()
        # the settings the strategy's server and clients build from it, with their own checks
        if self.strategy in ("gswgan", "datalens", "pate-gan"):  # the teachers keep critics
            self.gswgan()  # diversity-weight >= 0, z-dim > 0, ...
        if self.strategy == "fedavg-gan":
            self.fedavg_gan()  # positive learning rates and clip, ...
        if self.strategy == "dp-merf":
            self.dp_merf()  # an even D, sigma > 0, ...
        # a DataLens teacher votes on k of each sample's 784 pixels
        if self.strategy == "datalens" and not 1 <= self.datalens_top_k <= 784:
            raise ValueError(f"datalens-top-k must lie in [1, 784], got {self.datalens_top_k}")
        if self.sampling_seed < -1:
            raise ValueError(
                f"sampling-seed must be -1 (secret) or a seed >= 0, got {self.sampling_seed}"
            )

        if self.wire_dtype not in WIRE_DTYPES:
            raise ValueError(
                f"unknown wire-dtype {self.wire_dtype!r} (known: {', '.join(WIRE_DTYPES)})"
            )
        if self.ray_address:
            self._check_ray_address()
        if self.secure_aggregation:
            self._check_secure_aggregation()
        else:
            defaults = RunConfig.__dataclass_fields__
            for key in SECAGG_OPTIONS:
                if getattr(self, key.replace("-", "_")) != defaults[key.replace("-", "_")].default:
                    raise ValueError(f"{key} is set but secure-aggregation is off")

    def _check_data_and_seed(self) -> None:
        """Settings a client loads its data and seeds its generators with: each one checked
        here, not when a node opens its data (its error would then read as the node's)."""
        from fedgs.data.names import DATASET_NAMES, LABEL_MODES

        if self.dataset not in DATASET_NAMES:
            raise ValueError(
                f"unknown dataset {self.dataset!r} (known: {', '.join(DATASET_NAMES)})"
            )
        if self.labels not in LABEL_MODES:
            raise ValueError(f"unknown labels {self.labels!r} (known: {', '.join(LABEL_MODES)})")
        if self.num_clients < 0:
            raise ValueError(f"num-clients must be >= 0 (0 = the default), got {self.num_clients}")
        if not 0 <= self.seed < 2**32:
            raise ValueError(f"seed must lie in [0, 2^32), got {self.seed}")
        if not 0 <= self.warm_start_steps <= MAX_WARM_START_STEPS:
            raise ValueError(
                f"warm-start-steps must lie in [0, {MAX_WARM_START_STEPS}], "
                f"got {self.warm_start_steps}"
            )

    def _check_ray_address(self) -> None:
        """A cluster runs a client on any node, step after step: its critic and privacy ledger
        must be one folder all nodes share, or the ledger forks and the epsilon is wrong."""
        host, _, port = self.ray_address.rpartition(":")
        if self.ray_address != "auto" and (not host or not port.isdigit() or "://" in host):
            raise ValueError(
                f"ray-address must be HOST:PORT of the cluster's head or auto, got "
                f"{self.ray_address!r} (Ray Client's ray:// is not supported: run fedgs "
                "simulate on a node of the cluster)"
            )
        if not self.state_dir.startswith("/"):
            raise ValueError(
                "ray-address needs state-dir: an absolute path on storage every node of the "
                "cluster mounts at that path (NFS, a cluster file system), where each client's "
                "critic and privacy ledger live; a client runs on any node, step after step"
            )

    @property
    def merf_dimension(self) -> int:
        """Values of one DP-MERF release: (D + 1) x classes (FEMNIST's label mode; the other
        datasets hold the ten digits). A node checks it against its own data before encoding."""
        from fedgs.data.names import LABEL_CLASSES

        classes = LABEL_CLASSES[self.labels] if self.dataset == "femnist" else 10
        return (self.merf_features + 1) * classes

    @property
    def secure_cohort(self) -> int:
        """m: the nodes of a secure step (the strategy's cohort key, ``fedgs.algorithms``)."""
        key = ALGORITHMS[self.strategy].cohort_key
        if key is None:
            raise ValueError(f"{self.strategy} is never answered through secure aggregation")
        return int(getattr(self, key.replace("-", "_")))

    def _check_secure_aggregation(self) -> None:
        """Refuse settings no secure step could run with, each with its reason."""
        entry = ALGORITHMS[self.strategy]
        if not entry.secure:
            served = ", ".join(a.name for a in ALGORITHMS.values() if a.secure)
            raise ValueError(
                f"secure-aggregation is implemented for {served} only, not {self.strategy!r}"
            )
        m = self.secure_cohort
        if m < 3:
            raise ValueError(
                f"secure-aggregation needs {entry.cohort_key} >= 3 (a sum of fewer hides no one), "
                f"got {m}"
            )
        if self.strategy == "fedavg-gan" and self.fedavg_noise_multiplier <= 0:
            raise ValueError(
                "secure-aggregation needs fedavg-noise-multiplier > 0: the clients' noise shares "
                "are all that stands between the server and each delta"
            )
        if self.client_code_dims:
            raise ValueError(
                "secure-aggregation sends every node of a step the same fake batches, so they "
                "carry no client code: set client-code-dims 0"
            )
        if self.accountant not in SECAGG_ACCOUNTANTS:
            raise ValueError(
                f"secure-aggregation needs an RDP accountant ({', '.join(SECAGG_ACCOUNTANTS)}): "
                f"the distributed discrete Gaussian's bound is an RDP one, got {self.accountant}"
            )
        from fedgs.data.federated import PIXELS

        self.secagg_settings()
        length = self.merf_dimension if self.strategy == "dp-merf" else self.batch_size * PIXELS
        try:
            # fedavg-gan's vector is its critic's parameters, whose count the run knows: its
            # calibration here stands for any length (the modulus must hold m clients' sum)
            self.secure_noise(self.secure_vector(length))
        except ValueError as error:
            raise ValueError(f"secure-aggregation noise (secagg-bits, ...): {error}") from None

    def secagg_settings(self) -> SecAggSettings:
        """m_min, t, the degree and the bits of a full cohort (clients-per-step nodes), the 0s
        resolved; ValueError when SecAgg+ could not run with them."""
        from fedgs.secagg import SecAggError
        from fedgs.secagg.graph import check_degree, neighbour_count

        m = self.secure_cohort
        degree = self.secagg_degree or m - 1
        if degree < 2:
            raise ValueError(f"secagg-degree must be 0 (complete) or >= 2, got {degree}")
        try:  # every node parses the run config at every message: no O(m^2) graph here
            check_degree(m, degree)
        except SecAggError as error:
            key = ALGORITHMS[self.strategy].cohort_key
            raise ValueError(f"secagg-degree {degree} with {key} {m}: {error}") from None
        d = neighbour_count(m, degree)
        threshold = self.secagg_threshold or d // 2 + 1
        if not d // 2 + 1 <= threshold <= d:
            raise ValueError(
                f"secagg-threshold must lie in [{d // 2 + 1}, {d}] for {d} neighbours (more than "
                f"half of them, so no two disjoint halves rebuild a secret), got {threshold}"
            )
        m_min = self.secagg_min_survivors or max(3, m - m // 10)
        if not threshold <= m_min <= m:
            raise ValueError(
                f"secagg-min-survivors must lie in [{threshold}, {m}] (at least the threshold, "
                f"so one survivor beyond the t - 1 colluders carries noise; at most "
                f"the cohort), got {m_min}"
            )
        return SecAggSettings(m_min, threshold, degree, self.secagg_bits)

    def secure_vector(self, dimension: int) -> SecureVector:
        """What this run's strategy encodes for a secure sum, ``dimension`` values long, and the
        noise the sum must carry: the noise its trusted counterpart adds, so each noise key keeps
        its meaning. GS-WGAN: B rows of 784 (``dimension`` = B * 784) each clipped to C, so clip
        C*sqrt(B), and std 2*C*sigma, as one client's local noise without secure aggregation.
        Fed-Avg GAN: the critic's parameters (``dimension`` of them) clipped to S together, and
        std z*S on the sum, as DP-FedAvg's server adds (``fedgs.privacy.dp_fedavg``). DP-MERF:
        the mean embedding ((D + 1) x classes values) clipped to C, and std 2*C*sigma on the
        sum, as one writer's local noise (``fedgs.privacy.mean_embedding``)."""
        if self.strategy == "fedavg-gan":
            s = self.fedavg_clip_norm
            return SecureVector(s, dimension, s, self.fedavg_noise_multiplier)
        if self.strategy == "dp-merf":
            c = self.merf_clip_norm
            return SecureVector(c, dimension, 2 * c, self.merf_noise_multiplier)
        if self.strategy != "gswgan":
            raise ValueError(f"{self.strategy} is never answered through secure aggregation")
        from fedgs.data.federated import PIXELS

        rows, rest = divmod(dimension, PIXELS)
        if rows < 1 or rest:
            raise ValueError(f"a GS-WGAN secure vector is whole rows of {PIXELS}, got {dimension}")
        c = self.clip_norm
        return SecureVector(c * math.sqrt(rows), dimension, 2 * c, self.noise_multiplier)

    def secure_noise(self, vector: SecureVector | None = None) -> Calibration:
        """The distributed discrete Gaussian of a secure step for ``vector`` (default: GS-WGAN's,
        B rows): the sum carries per-coordinate std ``vector.scale * vector.multiplier`` against
        t - 1 colluders, for up to a full cohort of encodings. The multiplier is nudged up by
        float ulps until the sum's noise is not below the asked one, so a client's exact check
        never refuses it."""
        from fedgs.data.federated import PIXELS
        from fedgs.privacy.distributed_noise import calibrate

        if vector is None:
            if self.strategy != "gswgan":
                raise ValueError(f"{self.strategy}'s secure vector: pass secure_vector(length)")
            vector = self.secure_vector(self.batch_size * PIXELS)
        settings = self.secagg_settings()
        multiplier = vector.scale * vector.multiplier / vector.clip
        while True:
            calibration = calibrate(
                vector.clip,
                vector.dimension,
                settings.bits,
                settings.min_survivors,
                multiplier,
                math.exp(-0.5),
                max_clients=self.secure_cohort,
                colluders=settings.threshold - 1,
                rotate=True,
            )
            if vector.central(calibration.params.sigma) >= vector.multiplier:
                return calibration
            multiplier = math.nextafter(multiplier, math.inf)

    def _refuse_other_strategies_options(self) -> None:
        """A key another strategy owns (fedgs.algorithms), set away from its default: an error
        rather than a run that silently ignores it."""
        defaults = RunConfig.__dataclass_fields__
        for other in ALGORITHMS.values():
            if other.name == self.strategy:
                continue
            for key in other.own_options:
                name = key.replace("-", "_")
                if name not in defaults:
                    raise ValueError(f"strategy {other.name!r} owns an unknown key {key!r}")
                if getattr(self, name) != defaults[name].default:
                    raise ValueError(
                        f"{key} is implemented for {other.name} only, not {self.strategy!r}"
                    )

    def fedavg_gan(self) -> FedAvgGANConfig:
        return FedAvgGANConfig(
            models=self.fedavg_models,
            clients_per_round=self.fedavg_clients_per_round,
            critic_steps=self.fedavg_critic_steps,
            generator_steps=self.fedavg_generator_steps,
            batch_size=self.batch_size,
            lr_client=self.fedavg_lr_client,
            lr_server=self.fedavg_lr_server,
            lr_generator=self.fedavg_lr_generator,
            clip_norm=self.fedavg_clip_norm,
            noise_multiplier=self.fedavg_noise_multiplier,
            generator_width=self.generator_width,
            critic_width=self.critic_width,
        )

    def dp_merf(self) -> MerfConfig:
        """DP-MERF's settings (imported here: the module needs torch, the run config does not)."""
        from fedgs.training.dp_merf import MerfConfig

        return MerfConfig(
            features=self.merf_features,
            bandwidth=self.merf_bandwidth,
            clip_norm=self.merf_clip_norm,
            noise_multiplier=self.merf_noise_multiplier,
            generator_steps=self.merf_generator_steps,
            lr=self.merf_lr,
            batch_size=self.merf_batch_size,
            generator_width=self.generator_width,
            ema_decay=self.ema_decay,
        )

    def gswgan(self) -> GSWGANConfig:
        return GSWGANConfig(
            batch_size=self.batch_size,
            critic_steps=self.critic_steps,
            fake_batches=self.fake_batches,
            noise_multiplier=self.noise_multiplier,
            clip_norm=self.clip_norm,
            gradient_smoothing=self.gradient_smoothing,
            label_mismatch_weight=self.label_mismatch_weight,
            label_mismatch_until=self.label_mismatch_until,
            diversity_weight=self.diversity_weight,
            z_dim=self.z_dim,
            client_code_dims=self.client_code_dims,
            lr_generator=self.lr_generator,
            lr_critic=self.lr_critic,
            generator_width=self.generator_width,
            critic_width=self.critic_width,
            ema_decay=self.ema_decay,
            beta1=self.beta1,
        )


def add_arguments(
    parser: argparse.ArgumentParser, names: Iterable[str] | None = None
) -> dict[str, argparse._ArgumentGroup]:
    """One ``--key`` option per RunConfig field (or per field in ``names``), with its help and
    default, so every command speaks the run-config's language; one argument group per concern
    (GROUPS, in its order). Returns every group by its key, so a command can add its own options
    to a concern; a group with none of the fields has no description, and argparse shows it
    only if the command adds to it."""
    wanted = None if names is None else set(names)
    groups = {key: parser.add_argument_group(title) for key, (title, _) in GROUPS.items()}
    for f in sorted(fields(RunConfig), key=lambda f: list(GROUPS).index(f.metadata["group"])):
        if wanted is not None and f.name not in wanted:
            continue
        group = groups[f.metadata["group"]]
        # pre-wrapped, as commands with a raw description formatter print it as it is
        group.description = textwrap.fill(GROUPS[f.metadata["group"]][1], 76)
        option = "--" + f.name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        if isinstance(f.default, bool):
            group.add_argument(option, action="store_true", help=help_text)
        elif f.default is not MISSING:
            group.add_argument(
                option, type=type(f.default), default=f.default, help=f"{help_text} (%(default)s)"
            )
    return groups


def from_namespace(args: argparse.Namespace) -> RunConfig:
    """The RunConfig of parsed options; fields a command does not offer keep their defaults."""
    values = {
        f.name: getattr(args, f.name)
        for f in fields(RunConfig)
        if getattr(args, f.name, None) is not None
    }
    return RunConfig(**values)
