"""Communication cost: the serialized size of real Flower messages, and the analytic figures.

``message_bytes`` is the size of the protobuf Flower puts on the wire for a message (metadata,
record structure and the arrays' bytes); transport framing (HTTP/gRPC, TLS) is not included.
The analytic figures count float payloads only, as the papers' tables do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flwr.app import Message
from flwr.common.serde import message_to_proto

if TYPE_CHECKING:
    from fedgs.run_config import RunConfig

PIXELS = 784
FLOAT32_BYTES = 4
LABEL_BYTES = 8  # int64 labels


def message_bytes(message: Message) -> int:
    """Bytes of the message as Flower serializes it."""
    return message_to_proto(message).ByteSize()


def gswgan_paper_bytes(batch_size: int) -> int:
    """One fake batch down and one gradient batch up, float32 (200,704 bytes at B = 32)."""
    return 2 * batch_size * PIXELS * FLOAT32_BYTES


def gswgan_protocol_bytes(
    batch_size: int, fake_batches: int, float_bytes: int = FLOAT32_BYTES
) -> dict[str, int]:
    """fedgs' GS-WGAN protocol: the query's fake batches (+ labels; n_dis unless fewer are
    cycled) down, one gradient batch up."""
    return {
        "down": fake_batches * batch_size * (PIXELS * float_bytes + LABEL_BYTES),
        "up": batch_size * PIXELS * float_bytes,
    }


def fedavg_protocol_bytes(
    critic_values: int,
    critic_parameters: int,
    batch_size: int,
    critic_steps: int,
    float_bytes: int = FLOAT32_BYTES,
) -> dict[str, int]:
    """Fed-Avg GAN: D's state (parameters and buffers) and n_D fake batches down, D's delta up."""
    return {
        "down": critic_values * float_bytes
        + critic_steps * batch_size * (PIXELS * float_bytes + LABEL_BYTES),
        "up": critic_parameters * float_bytes,
    }


def datalens_protocol_bytes(
    batch_size: int, top_k: int, critic_steps: int, float_bytes: int = FLOAT32_BYTES
) -> dict[str, int]:
    """DataLens: n_dis fake batches (+ labels) down; per row a 784-bit vote mask and one sign
    bit per vote (at most k) up (``fedgs.protocols.datalens``)."""
    return {
        "down": critic_steps * batch_size * (PIXELS * float_bytes + LABEL_BYTES),
        "up": batch_size * (PIXELS // 8 + (top_k + 7) // 8),
    }


def pate_protocol_bytes(
    batch_size: int, teacher_steps: int, student_steps: int, float_bytes: int = FLOAT32_BYTES
) -> dict[str, int]:
    """PATE-GAN: n_T training and n_S ballot batches (+ labels) down, one bit per ballot sample
    up (``fedgs.protocols.pate_gan``)."""
    return {
        "down": (teacher_steps + student_steps) * batch_size * (PIXELS * float_bytes + LABEL_BYTES),
        "up": (student_steps * batch_size + 7) // 8,
    }


# A strategy's float32 payload per client update as configured: its registry entry's
# ``update_bytes`` (fedgs.algorithms), which the communication table quotes beside the
# measured messages.


def gswgan_update_bytes(config: RunConfig) -> dict[str, int]:
    return gswgan_protocol_bytes(config.batch_size, config.gswgan().fakes_per_query)


def datalens_update_bytes(config: RunConfig) -> dict[str, int]:
    return datalens_protocol_bytes(config.batch_size, config.datalens_top_k, config.critic_steps)


def pate_update_bytes(config: RunConfig) -> dict[str, int]:
    return pate_protocol_bytes(
        config.batch_size, config.pate_teacher_steps, config.pate_student_steps
    )


def fedavg_update_bytes(config: RunConfig) -> dict[str, int]:
    """Counts the configured critic's values (parameters and buffers) and parameters."""
    from fedgs.training.fedavg_gan import build_models

    fedavg = config.fedavg_gan()
    _, critic = build_models(fedavg, 10)
    values = sum(t.numel() for t in critic.state_dict().values())
    parameters = sum(p.numel() for p in critic.parameters())
    return fedavg_protocol_bytes(values, parameters, fedavg.batch_size, fedavg.critic_steps)
