"""DataLens TopAgg (Wang et al., CCS 2021): top-k sign votes by clients, a noisy vote by the server.

Client: each row of the upstream gradient (one generated sample) keeps its k largest-magnitude
coordinates as their signs, zeros elsewhere: a vote in {-1, 0, +1} with at most k non-zeros,
whatever the gradient was, which is what bounds a teacher's influence (``teacher_events``).
Server: sum the votes of the teachers that answered, add discrete Gaussian noise of scale s to
every coordinate (the sum is an integer vector, so no grid is needed; the discrete Gaussian's RDP
is the continuous one's, see ``fedgs.privacy.discrete_noise``), and keep
+1 / -1 where the noisy sum passes +-beta * m (m = teachers *sampled*, a data-independent count),
0 elsewhere. The official code's deterministic variant (``convert2topk``); no stochastic rounding.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fedgs.privacy.discrete_noise import discrete_gaussian
from fedgs.privacy.randomness import SecureRandom
from fedgs.privacy.sanitizer import NonFiniteGradientError


def top_k_signs(gradients: torch.Tensor, top_k: int) -> torch.Tensor:
    """int8 votes (B, D): the signs of each row's ``top_k`` largest-magnitude coordinates."""
    rows = gradients.detach().flatten(1)
    if not 1 <= top_k <= rows.shape[1]:
        raise ValueError(f"top-k must lie in [1, {rows.shape[1]}], got {top_k}")
    if not bool(torch.isfinite(rows).all()):
        raise NonFiniteGradientError("gradient holds NaN or inf values; refusing to vote")
    index = rows.abs().topk(top_k, dim=1).indices
    votes = torch.zeros(rows.shape, dtype=torch.int8)
    votes.scatter_(1, index, torch.sign(rows.gather(1, index)).to(torch.int8))
    return votes


@dataclass(frozen=True)
class AggregatedVote:
    """The thresholded noisy vote (float, entries in {-1, 0, +1}) and how much of it survived."""

    direction: torch.Tensor
    agreed_fraction: float


def aggregate_votes(
    votes: Sequence[torch.Tensor],
    noise_std: float,
    threshold: float,
    teachers: int,
) -> AggregatedVote:
    """sum(votes) + discrete Gaussian noise of scale s per coordinate, thresholded at
    +-``threshold`` * ``teachers``.

    ``votes`` are the answering teachers' (B, D) votes (at least one); ``teachers`` is the number
    sampled, so the threshold does not depend on who answered. The noise comes from a fresh
    ChaCha20 key (``fedgs.privacy.randomness``).
    """
    if not votes:
        raise ValueError("aggregate_votes needs at least one vote")
    if not (noise_std > 0 and math.isfinite(noise_std)) or threshold < 0 or teachers < 1:
        raise ValueError("noise std must be positive and finite, threshold >= 0, teachers >= 1")
    total = torch.stack([v.to(torch.int64) for v in votes]).sum(dim=0)
    noise = discrete_gaussian(SecureRandom(), noise_std, total.numel())
    noisy = total + torch.from_numpy(noise).reshape(total.shape)
    bound = threshold * teachers
    direction = (noisy > bound).to(torch.float32) - (noisy < -bound).to(torch.float32)
    return AggregatedVote(direction, float((direction != 0).float().mean()))
