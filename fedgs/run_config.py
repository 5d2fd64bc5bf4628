"""The run configuration shared by the ServerApp, the ClientApp and ``fedgs simulate``.

Keys follow Flower's run-config convention (lower case, hyphenated) so the same settings work as
``flwr run . --run-config "steps=2000 noise-multiplier=1.07"`` against a SuperLink and as options
of ``fedgs simulate``. The defaults here are mirrored in pyproject.toml's
``[tool.flwr.app.config]`` (a test keeps the two in step).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any

from fedgs.algorithms import ALGORITHMS, STRATEGIES
from fedgs.privacy.client_sampling import RULES as CLIENT_SAMPLING_RULES
from fedgs.privacy.client_sampling import UNIFORM
from fedgs.training.hparams import FedAvgGANConfig, GSWGANConfig


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
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"{source} '{key}' must be a {type(default).__name__}, got {value!r}"
        ) from error


@dataclass(frozen=True)
class RunConfig:
    # data (each client loads only its own partition)
    dataset: str = field(
        default="embedded",
        metadata={"help": "embedded (offline default), femnist (LEAF), mnist (IDX) or saved"},
    )
    data_dir: str = field(default="", metadata={"help": "LEAF output or MNIST IDX folder"})
    labels: str = field(
        default="digits", metadata={"help": "femnist labels: digits, merged36 or all62"}
    )
    num_clients: int = field(
        default=0,
        metadata={
            "help": "embedded/mnist: number of virtual clients; femnist: the first N writers "
            "(0 = loader default: 50, 1000, every writer)"
        },
    )
    strategy: str = field(
        default="gswgan",
        metadata={
            "help": "gswgan (untrusted server), fedavg-gan (DP-FedAvg, trusted server), or the "
            "teacher ensembles datalens (TopAgg) and pate-gan (trusted aggregator)"
        },
    )
    steps: int = field(
        default=200, metadata={"help": "private generator steps (fedavg-gan: rounds)"}
    )
    wire_dtype: str = field(
        default="float32",
        metadata={"help": "float payload format on the wire: float32, float16 or bfloat16"},
    )
    # GS-WGAN
    warm_start_steps: int = field(
        default=20,
        metadata={"help": "non-private critic pre-training steps per client (no privacy cost)"},
    )
    public_pretrain_steps: int = field(
        default=0,
        metadata={
            "help": "gswgan: steps of non-private pre-training of G on the server on digits "
            "rendered from matplotlib's fonts (public data, no client data, no privacy cost; "
            "recorded in privacy.json as public_data); 0 = off"
        },
    )
    clients_per_step: int = field(
        default=1, metadata={"help": "clients queried per generator step (m)"}
    )
    client_sampling: str = field(
        default=UNIFORM,
        metadata={
            "help": "gswgan: uniform (m nodes uniformly at random each step, as in the paper) "
            "or least-queried (the m nodes that paid the fewest queries so far, ties at random: "
            "every client answers about equally often, so more steps fit an untrusted-server "
            "epsilon; the trusted-sampler figure then does not hold)"
        },
    )
    batch_size: int = field(default=32, metadata={"help": "fake batch size B"})
    critic_steps: int = field(
        default=5, metadata={"help": "critic steps per generator step (n_dis)"}
    )
    fake_batches: int = field(
        default=0,
        metadata={
            "help": "gswgan: distinct fake batches the server draws per query, cycled over the "
            "critic steps (fewer G forwards and bytes down per step); 0 = one per critic step"
        },
    )
    noise_multiplier: float = field(
        default=1.07, metadata={"help": "sigma; per-row noise std is 2*C*sigma"}
    )
    clip_norm: float = field(default=1.0, metadata={"help": "per-sample clipping bound C"})
    gradient_smoothing: float = field(
        default=0.0,
        metadata={
            "help": "server-side Gaussian blur (sigma, pixels) of the sanitized gradients before "
            "they reach G: post-processing, no privacy cost; 0 = off, as in the paper"
        },
    )
    label_mismatch_weight: float = field(
        default=0.0,
        metadata={
            "help": "critics also score their real images under wrong labels as fakes, with "
            "this weight (teaches labels early; local training, no privacy cost); 0 = off, "
            "as in the paper"
        },
    )
    label_mismatch_until: int = field(
        default=0,
        metadata={
            "help": "gswgan: the label-mismatch weight falls linearly to 0 at this step (labels "
            "taught early, no prototype pull late); 0 = the weight stays constant"
        },
    )
    diversity_weight: float = field(
        default=0.0,
        metadata={
            "help": "gswgan: weight of the mode-seeking term (Mao et al. 2019) in G's loss: "
            "distinct latents of one label pushed to distinct images, against one prototype per "
            "class (server-side, no client data, no privacy cost); 0 = off, as in the paper"
        },
    )
    z_dim: int = field(default=10, metadata={"help": "gswgan: latent dimension of G (its z)"})
    client_code_dims: int = field(
        default=0,
        metadata={
            "help": "gswgan: this many of G's z-dim latent dims are fixed per queried client (a "
            "code from the run seed and the client's name; the server knows whom it asks), so G "
            "can learn each writer's style at its code instead of one average; sampling draws "
            "them at random; no client data, no privacy cost; 0 = off, as in the paper"
        },
    )
    lr_generator: float = field(default=1e-4, metadata={"help": "Adam learning rate of G"})
    lr_critic: float = field(
        default=1e-4, metadata={"help": "Adam learning rate of each private critic"}
    )
    generator_width: int = field(default=16, metadata={"help": "G channel width (64 = paper size)"})
    critic_width: int = field(default=16, metadata={"help": "D channel width (64 = paper size)"})
    beta1: float = field(
        default=0.5,
        metadata={
            "help": "Adam beta1 of G and critics (paper: 0.5; 0.9 averages noisy steps longer)"
        },
    )
    ema_decay: float = field(default=0.999, metadata={"help": "EMA decay of G used for samples"})
    # Fed-Avg GAN (batch-size and, for fedavg-models=gswgan, the widths are shared)
    fedavg_models: str = field(
        default="paper",
        metadata={"help": "fedavg-gan networks: paper (TF-GAN MNIST, 13.3M/6.56M) or gswgan"},
    )
    fedavg_clients_per_round: int = field(
        default=10, metadata={"help": "fedavg-gan: expected clients per round (Poisson, q = m/K)"}
    )
    fedavg_critic_steps: int = field(
        default=6, metadata={"help": "fedavg-gan: client critic SGD steps per round (n_D)"}
    )
    fedavg_generator_steps: int = field(
        default=6, metadata={"help": "fedavg-gan: server generator SGD steps per round (n_G)"}
    )
    fedavg_lr_client: float = field(
        default=5e-4, metadata={"help": "fedavg-gan: client SGD learning rate"}
    )
    fedavg_lr_server: float = field(
        default=1.0, metadata={"help": "fedavg-gan: server learning rate on the mean delta"}
    )
    fedavg_lr_generator: float = field(
        default=5e-3, metadata={"help": "fedavg-gan: generator SGD learning rate"}
    )
    fedavg_clip_norm: float = field(
        default=0.1, metadata={"help": "fedavg-gan: L2 bound S on each client's critic delta"}
    )
    fedavg_noise_multiplier: float = field(
        default=0.01, metadata={"help": "fedavg-gan: z; noise std z*S on the sum of deltas"}
    )
    # teacher ensembles (datalens, pate-gan): batch-size, widths, lr-critic (teachers; the PATE
    # student), lr-generator, beta1 and warm-start-steps are shared; datalens uses critic-steps
    teachers_per_step: int = field(
        default=10, metadata={"help": "datalens/pate-gan: teachers (clients) sampled per step (m)"}
    )
    datalens_top_k: int = field(
        default=200, metadata={"help": "datalens: coordinates each teacher votes on per sample (k)"}
    )
    datalens_noise_std: float = field(
        default=5.0, metadata={"help": "datalens: std of the Gaussian noise on every vote sum"}
    )
    datalens_threshold: float = field(
        default=0.3,
        metadata={"help": "datalens: keep a coordinate where |noisy vote sum| > threshold * m"},
    )
    pate_laplace_scale: float = field(
        default=1.0,
        metadata={"help": "pate-gan: Laplace scale b on each vote count ((2/b, 0)-DP per sample)"},
    )
    pate_teacher_steps: int = field(
        default=5, metadata={"help": "pate-gan: teacher steps per generator step (n_T)"}
    )
    pate_student_steps: int = field(
        default=5, metadata={"help": "pate-gan: student steps per generator step (n_S)"}
    )
    delta: float = field(
        default=1e-5, metadata={"help": "delta of every reported (epsilon, delta)"}
    )
    accountant: str = field(
        default="autodp-rdp",
        metadata={"help": "autodp-rdp, dp-accounting-rdp or dp-accounting-pld"},
    )
    max_minutes: float = field(
        default=0.0,
        metadata={
            "help": "wall-clock budget of the run in minutes, warm start included: the step "
            "that starts after it is the last (scored and checkpointed); 0 = no limit"
        },
    )
    target_epsilon: float = field(
        default=0.0,
        metadata={"help": "stop before the run epsilon (untrusted server) passes this; 0 = off"},
    )
    client_budget_epsilon: float = field(
        default=0.0,
        metadata={
            "help": "each client refuses queries past this epsilon (untrusted server); 0 = no "
            "budget. Simulation: every node's policy budget; deployment: may only tighten each "
            "node's own policy-epsilon-budget"
        },
    )
    # compute (GS-WGAN: server and clients; the other strategies run on the CPU)
    device: str = field(
        default="auto",
        metadata={"help": "auto (a GPU when the process sees one), cpu or cuda"},
    )
    client_num_gpus: float = field(
        default=0.0,
        metadata={
            "help": "simulation: GPU share of each Ray client (0.25 = four clients per GPU; "
            "0 = clients on the CPU)"
        },
    )
    # outputs
    run_dir: str = field(default="runs/simulate", metadata={"help": "output directory of the run"})
    state_dir: str = field(
        default="", metadata={"help": "client state directory ('' = RUN_DIR/client-state)"}
    )
    checkpoint_every: int = field(default=100, metadata={"help": "checkpoint every N steps"})
    snapshot_every: int = field(
        default=0,
        metadata={
            "help": "keep the generator every N steps in RUN_DIR/snapshots/step_N/, a run "
            "directory of its own at the epsilon paid by then (0 = off)"
        },
    )
    eval_every: int = field(
        default=100, metadata={"help": "score and save sample grids every N steps (0 = off)"}
    )
    eval_samples: int = field(default=1000, metadata={"help": "samples per evaluation"})
    seed: int = field(
        default=0,
        metadata={
            "help": "seed of latents and initialisation (never of client sampling or DP noise)"
        },
    )
    sampling_seed: int = field(
        default=-1,
        metadata={
            "help": "client sampling: -1 = secret OS randomness (default); N >= 0 = reproducible "
            "sampling from seed N, and then the amplified epsilons (trusted sampler, Fed-Avg "
            "GAN's Poisson sampling) do not hold"
        },
    )
    min_nodes: int = field(
        default=0,
        metadata={"help": "wait for this many nodes before starting (0 = clients-per-step)"},
    )
    reply_timeout: float = field(
        default=600.0, metadata={"help": "seconds to wait for client replies"}
    )
    max_unanswered_steps: int = field(
        default=5,
        metadata={
            "help": "stop the run with the first client error after this many consecutive steps "
            "in which no asked client answered (0 = never stop)"
        },
    )
    resume: bool = field(default=False, metadata={"help": "continue from RUN_DIR's checkpoint"})

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
        if self.strategy == "gswgan":
            self.gswgan()  # its own checks (diversity-weight >= 0, z-dim > 0, ...)
        if self.sampling_seed < -1:
            raise ValueError(
                f"sampling-seed must be -1 (secret) or a seed >= 0, got {self.sampling_seed}"
            )

        if self.wire_dtype not in WIRE_DTYPES:
            raise ValueError(
                f"unknown wire-dtype {self.wire_dtype!r} (known: {', '.join(WIRE_DTYPES)})"
            )

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


def add_arguments(parser: argparse.ArgumentParser, names: Iterable[str] | None = None) -> None:
    """One ``--key`` option per RunConfig field (or per field in ``names``), with its help and
    default, so every command speaks the run-config's language."""
    wanted = None if names is None else set(names)
    group = parser.add_argument_group("run config (the same keys as Flower's --run-config)")
    for f in fields(RunConfig):
        if wanted is not None and f.name not in wanted:
            continue
        option = "--" + f.name.replace("_", "-")
        help_text = f.metadata.get("help", "")
        if isinstance(f.default, bool):
            group.add_argument(option, action="store_true", help=help_text)
        elif f.default is not MISSING:
            group.add_argument(
                option, type=type(f.default), default=f.default, help=f"{help_text} (%(default)s)"
            )


def from_namespace(args: argparse.Namespace) -> RunConfig:
    """The RunConfig of parsed options; fields a command does not offer keep their defaults."""
    values = {
        f.name: getattr(args, f.name)
        for f in fields(RunConfig)
        if getattr(args, f.name, None) is not None
    }
    return RunConfig(**values)
