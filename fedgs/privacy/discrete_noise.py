"""Noise on integers, so the floating-point pattern of a release says nothing about its input.

Why not ``x + gaussian()`` in floats: a textbook float sampler reaches only some doubles, and
which doubles ``x + noise`` can round to depends on ``x``; an observer who sees the release can
rule out inputs (Mironov 2012 for Laplace, Jin et al. 2022 for Gaussian samplers). Here every
mechanism releases integers (or integers times a fixed power-of-two grid step): the input is
rounded to the grid, integer noise is added in exact integer arithmetic, and any later float
conversion is a fixed function of that integer, i.e. post-processing.

Samplers, from the ChaCha20 stream of ``fedgs.privacy.randomness`` (Canonne, Kamath, Steinke
2020, Algorithms 2 and 3, vectorized):

- discrete Laplace, P(y) proportional to exp(-|y| / b), for any float scale b (taken as the
  exact fraction t/s that the float is);
- discrete Gaussian, P(y) proportional to exp(-y^2 / (2 sigma^2)), by rejection from a discrete
  Laplace. Its Renyi divergences between integer shifts are at most the continuous Gaussian's
  (alpha * shift^2 / (2 sigma^2), equal for integer shifts), so every RDP accountant of the
  continuous Gaussian bounds it; its PLD is not the continuous one's, and fedgs does not use one.

Exactness: the samplers use uniform integers by rejection and coins of probability >= e^-1 only
(``SecureRandom.bernoulli_exp``), so every probability they realise is within a relative
~1e-13 of the ideal one, tails included; the privacy loss of a sample moves by at most twice
that. Rejection rounds are independent of the value finally accepted, so the time a sampler takes
says nothing about the noise it returned beyond the largest geometric run of a batch.

The grid mechanism (:func:`add_discrete_gaussian`) rounds each block of ``dimension`` values to a
power-of-two step g with g * sqrt(dimension) <= sensitivity * GRID_SLACK. Rounding moves a block by
at most g * sqrt(dimension) / 2, so neighbouring blocks are at most sensitivity * (1 +
GRID_SLACK) apart on the grid (plus float64 rounding of the input, far below the rest of
ACCOUNTING_SLACK). The noise is drawn at scale noise_std * (1 + ACCOUNTING_SLACK), so the noise
multiplier asked for, noise_std / sensitivity, holds on the grid and the accountant uses it as it
is: rounding costs 0.0015% more noise, not a different epsilon.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from fedgs.privacy.randomness import SecureRandom

ACCOUNTING_SLACK = 2.0**-16  # relative sensitivity the accountant adds for the grid
GRID_SLACK = ACCOUNTING_SLACK / 2  # what the grid may use of it; the rest covers float64 rounding
MAX_SCALE_NUMERATOR = 2**56  # discrete Laplace scales t/s with t above this could overflow int64
_E_INV = math.exp(-1.0)
PARALLEL_THREADS = 4  # most threads one large draw is split over
PARALLEL_MIN_CHUNK = 2**19  # draws below two of these stay on one thread (a reply: 25,088)


def _fill(count: int, draw: Callable[[int], np.ndarray], acceptance: float) -> np.ndarray:
    """``count`` accepted samples from ``draw(n)`` (which returns the accepted part of n tries,
    about ``acceptance`` * n of them). Accepted samples are i.i.d., so keeping the first
    ``count`` of them is unbiased."""
    parts, have = [], 0
    while have < count:
        need = count - have
        accepted = draw(int(need / acceptance * 1.05) + 16)
        parts.append(accepted)
        have += accepted.size
    return np.concatenate(parts)[:count] if parts else np.empty(0, dtype=np.int64)


def _geometric(rng: SecureRandom, count: int) -> np.ndarray:
    """V with P(V >= k) = e^-k: the run of heads of independent e^-1 coins."""
    runs = np.zeros(count, dtype=np.int64)
    active = np.arange(count)
    while active.size:
        heads = rng.uniform(active.size) < _E_INV
        active = active[heads]
        runs[active] += 1
    return runs


def discrete_laplace(rng: SecureRandom, scale: float, count: int) -> np.ndarray:
    """``count`` i.i.d. integers with P(y) proportional to exp(-|y| / scale) (int64)."""
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"discrete Laplace scale must be positive and finite, got {scale!r}")
    t, s = float(scale).as_integer_ratio()  # scale = t / s exactly
    if t > MAX_SCALE_NUMERATOR:
        raise ValueError(f"discrete Laplace scale {scale:g} is too large to sample exactly")

    def draw(tries: int) -> np.ndarray:
        u = rng.integers_below(t, tries)
        u = u[rng.bernoulli_exp(u / t)]  # U uniform on [0, t), kept with probability e^(-U/t)
        magnitude = (u + t * _geometric(rng, u.size)) // s
        negative = (rng.words(u.size) & np.uint64(1)).astype(bool)
        keep = ~(negative & (magnitude == 0))  # -0 and +0 are one value: drop half of them
        return np.where(negative, -magnitude, magnitude)[keep]

    return _fill(count, draw, acceptance=0.6)  # 1 - 1/e, less the rejected -0


def discrete_gaussian(rng: SecureRandom, sigma: float, count: int) -> np.ndarray:
    """``count`` i.i.d. integers with P(y) proportional to exp(-y^2 / (2 sigma^2)) (int64)."""
    if not (sigma > 0 and math.isfinite(sigma)):
        raise ValueError(f"discrete Gaussian sigma must be positive and finite, got {sigma!r}")
    # CKS take t = floor(sigma) + 1; any t > 0 is exact, and a power of two near sigma keeps
    # acceptance at 0.65-0.76 while U needs no division or rejection
    t = 2 ** max(0, round(math.log2(sigma)))
    centre, two_var = sigma * sigma / t, 2.0 * sigma * sigma

    def draw(tries: int) -> np.ndarray:
        y = discrete_laplace(rng, float(t), tries)
        gamma = (np.abs(y).astype(np.float64) - centre) ** 2 / two_var
        return y[rng.bernoulli_exp(gamma)]

    return _fill(count, draw, acceptance=0.5)  # 0.52 at sigma 0.5, 0.65-0.76 above


def grid_step(sensitivity: float, dimension: int) -> float:
    """The power-of-two grid step for blocks of ``dimension`` values of L2 ``sensitivity``."""
    if not (sensitivity > 0 and math.isfinite(sensitivity)) or dimension < 1:
        raise ValueError(f"need sensitivity > 0 and dimension >= 1, got {sensitivity}, {dimension}")
    return 2.0 ** math.floor(math.log2(sensitivity * GRID_SLACK / math.sqrt(dimension)))


def add_discrete_gaussian(
    values: np.ndarray, noise_std: float, sensitivity: float, dimension: int
) -> np.ndarray:
    """``values`` (float64, size a multiple of ``dimension``) rounded to the grid, plus grid-step
    times discrete Gaussian noise of scale ``noise_std`` (widened by the grid's slack): float64
    multiples of the grid step, a Gaussian mechanism of multiplier noise_std / sensitivity.

    ``sensitivity`` is the L2 distance between two neighbours' blocks of ``dimension`` values;
    a fresh key draws the noise, so two calls never share a stream.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size % dimension:
        raise ValueError(f"{values.size} values do not split into blocks of {dimension}")
    if not np.isfinite(values).all():
        raise ValueError("values hold NaN or inf; nothing may be released from them")
    if not (noise_std > 0 and math.isfinite(noise_std)):
        raise ValueError(f"noise std must be positive and finite, got {noise_std!r}")
    step = grid_step(sensitivity, dimension)
    on_grid = np.rint(values / step)  # exact: step is a power of two
    scale = noise_std * (1.0 + ACCOUNTING_SLACK) / step
    noise = _discrete_gaussian_threads(scale, values.size)
    return (on_grid + noise.reshape(values.shape)) * step


def _discrete_gaussian_threads(sigma: float, count: int) -> np.ndarray:
    """``count`` discrete Gaussians; a large draw (DP-FedAvg's millions of coordinates) is split
    over up to ``PARALLEL_THREADS`` threads, each with its own key (NumPy releases the GIL in the
    array work, so the cores a waiting server leaves idle share it)."""
    threads = min(PARALLEL_THREADS, os.cpu_count() or 1, max(1, count // PARALLEL_MIN_CHUNK))
    if threads == 1:
        return discrete_gaussian(SecureRandom(), sigma, count)
    sizes = [count // threads + (i < count % threads) for i in range(threads)]
    with ThreadPoolExecutor(threads) as pool:
        parts = pool.map(lambda size: discrete_gaussian(SecureRandom(), sigma, size), sizes)
        return np.concatenate(list(parts))
