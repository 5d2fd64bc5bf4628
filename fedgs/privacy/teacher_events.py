"""What one teacher (client) releases per step of the teacher-ensemble strategies, as events.

Both strategies add their noise on the server (trusted aggregator,
``threat_models.TRUSTED_AGGREGATOR``) and the unit of privacy is one client. Neighbouring
datasets replace one client's data (the relation GS-WGAN uses too), which may change every vote
that client casts:

- **DataLens TopAgg**: a teacher's vote is a B x 784 matrix with at most k entries of +-1 per row.
  Replacing the teacher's data changes a row by at most 2 sqrt(k) in L2 (same support, every
  sign flipped), the matrix by at most 2 sqrt(k B). The server adds N(0, s^2) to every coordinate
  of the vote sum, so one step is one Gaussian of multiplier s / (2 sqrt(k B)) for each voting
  teacher. (The official DataLens code accounts sqrt(2k) per sample, a smaller sensitivity.)
- **PATE-GAN**: per generated sample the server counts (fake, real) votes and adds discrete
  Laplace noise DLap(b) (P(y) proportional to exp(-|y|/b)) to each count. Replacing a teacher
  moves its vote from one count to the other: each count moves by 1, so each sample's release is
  two discrete Laplace mechanisms of parameter 1/b and sensitivity 1 ((2/b, 0)-DP together,
  PATE's 2 gamma with gamma = 1/b); a step composes one such release per sample the teacher voted
  on. A discrete Laplace shifted by 1 is exactly randomized response with epsilon 1/b, whose
  Renyi divergence is larger than the continuous Laplace's: it is accounted as what runs. This is
  the data-independent bound; PATE's data-dependent (moments) bound would be smaller when the
  teachers agree, and fedgs does not report it. (Ledgers before the discrete Laplace recorded
  continuous Laplace steps, ``LAPLACE``, and still load as such.)
"""

from __future__ import annotations

import math

from dp_accounting import dp_event

GAUSSIAN, LAPLACE = "gaussian", "laplace"  # the mechanisms of ledger files before version 3


def teacher_step_event(mechanism: str, multiplier: float, releases: int) -> dp_event.DpEvent:
    """One answered step for one voting teacher: ``releases`` releases of ``mechanism`` at
    ``multiplier``; raises ValueError for invalid ones."""
    if not multiplier > 0 or math.isinf(multiplier):
        raise ValueError(f"noise multiplier must be a positive finite number, got {multiplier!r}")
    if int(releases) != releases or releases < 1:
        raise ValueError(f"releases per step must be a positive integer, got {releases!r}")
    if mechanism == GAUSSIAN:
        base: dp_event.DpEvent = dp_event.GaussianDpEvent(float(multiplier))
    elif mechanism == LAPLACE:
        base = dp_event.LaplaceDpEvent(float(multiplier))
    else:
        raise ValueError(f"unknown teacher mechanism {mechanism!r}")
    return base if releases == 1 else dp_event.SelfComposedDpEvent(base, int(releases))


def datalens_step_event(noise_std: float, top_k: int, batch_size: int) -> dp_event.DpEvent:
    """One DataLens step for one voting teacher: Gaussian of multiplier s / (2 sqrt(k B))."""
    if not noise_std > 0 or math.isinf(noise_std):
        raise ValueError(f"noise std must be a positive finite number, got {noise_std!r}")
    if top_k < 1 or batch_size < 1:
        raise ValueError(f"top-k and batch size must be >= 1, got {top_k} and {batch_size}")
    return teacher_step_event(GAUSSIAN, float(noise_std) / (2.0 * math.sqrt(top_k * batch_size)), 1)


def pate_step_event(laplace_scale: float, queries: int) -> dp_event.DpEvent:
    """One PATE-GAN step for one voting teacher: ``queries`` samples, each two discrete Laplace
    counts of parameter 1/b and sensitivity 1."""
    if not laplace_scale > 0 or math.isinf(laplace_scale):
        raise ValueError(f"Laplace scale must be a positive finite number, got {laplace_scale!r}")
    if int(queries) != queries or queries < 1:
        raise ValueError(f"a step must label at least one sample, got {queries}")
    count = dp_event.DiscreteLaplaceDpEvent(1.0 / float(laplace_scale), 1)
    return dp_event.SelfComposedDpEvent(count, 2 * int(queries))
