"""GS-WGAN hyper-parameters in one place, with the official code's defaults."""

from __future__ import annotations

from dataclasses import asdict, dataclass

# a client runs max(batches sent, critic_steps) critic steps per query (Fed-Avg GAN: critic_steps
# SGD steps per round), and the server sets both: one bound, so no run config can make a client
# train without end
MAX_CRITIC_STEPS = 64
# a warm start trains a node's critic before any query (no privacy cost, but the node's compute):
# the server asks for its length, so it is bounded too (the recipes ask for 1-30)
MAX_WARM_START_STEPS = 10_000
# the server sets the size of what a node builds and trains: the width of its nets (the paper's
# are 64 wide), G's latent size (a node's warm start runs a local G), the batch it draws from its
# data (and the fakes it is sent); each bounded, so no run config can make a node allocate tens
# of GB
MAX_NET_WIDTH = 256
MAX_Z_DIM = 1024
MAX_BATCH = 4096


def _check_sizes(config: object) -> None:
    for name, bound in (
        ("generator_width", MAX_NET_WIDTH),
        ("critic_width", MAX_NET_WIDTH),
        ("z_dim", MAX_Z_DIM),
        ("batch_size", MAX_BATCH),
    ):
        value = getattr(config, name, 0)
        if value > bound:
            raise ValueError(f"{name} must be at most {bound}, got {value}")


@dataclass(frozen=True)
class GSWGANConfig:
    """Everything that shapes a GS-WGAN run except the data and the number of steps."""

    batch_size: int = 32
    z_dim: int = 10
    critic_steps: int = 5  # n_dis: critic updates per generator step
    # distinct fake batches per query, cycled over the critic steps (G's forwards, not the
    # critic's updates, dominate a CPU step); 0 = one per critic step, as in the paper
    fake_batches: int = 0
    gp_weight: float = 10.0
    drift_weight: float = 1e-3
    lr_generator: float = 1e-4
    lr_critic: float = 1e-4
    beta1: float = 0.5
    beta2: float = 0.9
    noise_multiplier: float = 1.07
    clip_norm: float = 1.0
    ema_decay: float = 0.999
    generator_width: int = 64
    critic_width: int = 64
    # server-side Gaussian blur (pixels) of the sanitized gradients; 0 = off (the paper)
    gradient_smoothing: float = 0.0
    # weight of real images under wrong labels scored as fakes by the critics; 0 = off (the paper)
    label_mismatch_weight: float = 0.0
    # the weight falls linearly from label_mismatch_weight at step 0 to 0 at this server step, so
    # the term teaches the labels early and stops favouring one prototype later; 0 = constant
    label_mismatch_until: int = 0
    # weight of the server-side mode-seeking term in G's loss (no data, no privacy cost); 0 = off
    diversity_weight: float = 0.0
    # latent dims fixed per queried client (a code the server picks from the client's name), so G
    # can learn each writer's style at its code rather than one average of all; 0 = off (paper)
    client_code_dims: int = 0

    def __post_init__(self) -> None:
        positive = (
            "batch_size",
            "z_dim",
            "critic_steps",
            "lr_generator",
            "lr_critic",
            "clip_norm",
            "generator_width",
            "critic_width",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in (
            "noise_multiplier",
            "gradient_smoothing",
            "label_mismatch_weight",
            "diversity_weight",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.critic_steps > MAX_CRITIC_STEPS:
            raise ValueError(
                f"critic_steps must be at most {MAX_CRITIC_STEPS}, got {self.critic_steps}"
            )
        _check_sizes(self)
        if not 0 <= self.fake_batches <= self.critic_steps:
            raise ValueError(
                f"fake_batches must be between 0 (one per critic step) and critic_steps "
                f"({self.critic_steps}), got {self.fake_batches}"
            )
        if self.label_mismatch_until < 0:
            raise ValueError(f"label_mismatch_until must be >= 0, got {self.label_mismatch_until}")
        if not 0 <= self.client_code_dims < self.z_dim:
            raise ValueError(
                f"client_code_dims must be >= 0 and below z_dim ({self.z_dim}, which keeps a "
                f"free latent dim per sample), got {self.client_code_dims}"
            )
        if self.diversity_weight > 0 and self.batch_size % 2:
            raise ValueError(
                "the mode-seeking term (diversity_weight) pairs the rows of each fake batch: "
                f"batch_size must be even, got {self.batch_size}"
            )

    @property
    def fakes_per_query(self) -> int:
        """How many distinct fake batches the server draws for one client's query."""
        return self.fake_batches or self.critic_steps

    def label_mismatch_at(self, step: int) -> float:
        """The label-mismatch weight the critics use for a query of this server step."""
        if self.label_mismatch_until == 0:
            return self.label_mismatch_weight
        return self.label_mismatch_weight * max(0.0, 1.0 - step / self.label_mismatch_until)

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


@dataclass(frozen=True)
class FedAvgGANConfig:
    """Fed-Avg GAN (DP-FedAvg on the critic) with the paper's defaults."""

    models: str = "paper"  # "paper": TF-GAN MNIST networks; "gswgan": fedgs' GS-WGAN networks
    clients_per_round: int = 10  # m: expected clients per round (Poisson sampling, q = m / K)
    critic_steps: int = 6  # n_D: client SGD steps on the critic per round
    generator_steps: int = 6  # n_G: server SGD steps on G per round
    batch_size: int = 32
    lr_client: float = 5e-4
    lr_server: float = 1.0
    lr_generator: float = 5e-3
    clip_norm: float = 0.1  # S: bound on each client's critic delta (L2, all parameters)
    noise_multiplier: float = 0.01  # z: noise std z * S on the sum of clipped deltas
    gp_weight: float = 10.0
    drift_weight: float = 1e-3
    generator_width: int = 16  # used by models="gswgan" only
    critic_width: int = 16  # used by models="gswgan" only

    def __post_init__(self) -> None:
        if self.models not in ("paper", "gswgan"):
            raise ValueError(f"models must be 'paper' or 'gswgan', got {self.models!r}")
        for name in (
            "clients_per_round",
            "critic_steps",
            "batch_size",
            "lr_client",
            "lr_server",
            "clip_norm",
            "generator_width",
            "critic_width",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.generator_steps < 0 or self.lr_generator <= 0:
            raise ValueError("generator_steps must be >= 0 and lr_generator positive")
        if self.critic_steps > MAX_CRITIC_STEPS:  # a node's SGD steps per round
            raise ValueError(
                f"critic_steps must be at most {MAX_CRITIC_STEPS}, got {self.critic_steps}"
            )
        _check_sizes(self)
        if self.noise_multiplier < 0:
            raise ValueError(f"noise_multiplier must be >= 0, got {self.noise_multiplier}")

    def to_dict(self) -> dict[str, float | int | str]:
        return asdict(self)
