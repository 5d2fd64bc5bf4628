"""GS-WGAN hyper-parameters in one place, with the official code's defaults (ALGORITHMS.md s.1)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class GSWGANConfig:
    """Everything that shapes a GS-WGAN run except the data and the number of steps."""

    batch_size: int = 32
    z_dim: int = 10
    critic_steps: int = 5  # n_dis: critic updates per generator step
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
        if self.noise_multiplier < 0:
            raise ValueError(f"noise_multiplier must be >= 0, got {self.noise_multiplier}")

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)
