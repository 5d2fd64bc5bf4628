"""GS-WGAN networks: conditional ResNet generator, conditional DCGAN critic."""

from fedgs.models.discriminator import ConditionalDCGANDiscriminator
from fedgs.models.ema import make_ema
from fedgs.models.generator import ConditionalResNetGenerator
from fedgs.models.losses import critic_loss, generator_upstream_gradient, mode_seeking_loss

__all__ = [
    "ConditionalDCGANDiscriminator",
    "ConditionalResNetGenerator",
    "critic_loss",
    "generator_upstream_gradient",
    "make_ema",
    "mode_seeking_loss",
]
