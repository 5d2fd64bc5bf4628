"""Audit runs: the real mechanisms driven with canary clients, scored from what the server sees.

An audit run calls the same functions the clients and the server call (``sanitize``,
``distributed_noise.encode``/``modular_sum``/``decode``, ``dp_fedavg.clip_delta``/``noisy_mean``)
with the run's noise multiplier, clip, batch size, cohort and steps, but no GAN: the privacy of a
release depends on what is clipped and noised, not on where the gradient came from, and a canary
is the worst case the accountant assumes (a client whose every contribution sits at the clip
norm, in one direction). The auditor sees every release (all iterates). Nothing is released: the
canaries are extra simulated clients of this run only and never reach a generator.

A canary is a random unit direction; its score sums, over the releases, the cosine of that
direction with the release. Null scores: the same sums for fresh directions nobody sent, each
orthogonal to its canary's (``orthogonal_units``, ``hadamard_rows``).
The neighbouring pair follows each mechanism's relation:

- replace-one (GS-WGAN, local noise and secure aggregation): each canary's coin picks its
  sign, +C v or -C v in every row (the two neighbours 2C apart that the accountant assumes);
- add-remove (Fed-Avg GAN): each canary's coin says whether it is in the population at all.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

import numpy as np
import torch

from fedgs.audit.stats import gdp_epsilon
from fedgs.privacy import distributed_noise
from fedgs.privacy.distributed_accounting import distributed_epsilon
from fedgs.privacy.dp_fedavg import clip_delta, noisy_mean
from fedgs.privacy.fedavg_ledger import FedAvgLedger
from fedgs.privacy.ledger import PrivacyLedger
from fedgs.privacy.randomness import SecureRandom
from fedgs.privacy.sanitizer import sanitize
from fedgs.privacy.threat_models import (
    ADD_REMOVE,
    REPLACE_ONE,
    SECURE_AGGREGATION,
    TRUSTED_SERVER,
    UNTRUSTED_SERVER,
)

ROW = 784  # one GS-WGAN gradient row: a 28 x 28 image's pixels
NULLS_PER_CANARY = 32  # fresh directions scored on each canary's releases (local, secure)


@dataclass(frozen=True)
class Ideal:
    """What a perfect audit with this score would converge to, and why."""

    epsilon: float
    note: str


@dataclass(frozen=True)
class Cost:
    """What the canaries cost: releases the auditor saw, canary contributions computed, noise
    coordinates drawn, seconds."""

    releases: int
    canary_contributions: int
    noise_draws: int
    seconds: float


@dataclass(frozen=True)
class Observation:
    """What an audit run leaves the auditor: scores, the coins to check guesses against, the
    accountant's figure for the same observation, and what the canaries cost."""

    scores: np.ndarray
    coins: np.ndarray  # +1 / -1 per canary
    null_scores: np.ndarray
    relation: str
    accountant: dict  # epsilon, threat model, accountant, delta, relation, ...
    ideal: Ideal
    cost: Cost


def unit_rows(rng: np.random.Generator, count: int, dimension: int) -> np.ndarray:
    """``count`` independent directions uniform on the unit sphere of R^dimension."""
    rows = rng.standard_normal((count, dimension))
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def orthogonal_units(rng: np.random.Generator, directions: np.ndarray, count: int) -> np.ndarray:
    """``count`` random unit directions per row of ``directions``, each orthogonal to its row:
    null directions that carry none of that canary's signal. (A merely random one would carry
    1/dimension of its energy, which in a 784-long row is a visible share of a strong canary.)"""
    fresh = rng.standard_normal((directions.shape[0], count, directions.shape[1]))
    fresh -= np.einsum("ncd,nd->nc", fresh, directions)[:, :, None] * directions[:, None, :]
    return fresh / np.linalg.norm(fresh, axis=2, keepdims=True)


def hadamard_rows(rng: np.random.Generator, count: int, dimension: int) -> np.ndarray:
    """``count`` distinct rows of the normalised Hadamard matrix of order ``dimension`` (a power
    of two), with one random sign per column: dense unit directions, exactly orthogonal to each
    other (float32). Fed-Avg GAN's canaries share every round they are sampled in; independent
    random directions would each carry about 1/dimension of every other's signal, and that
    cross-talk adds up over the rounds, inflating the spread the estimate divides by."""
    if dimension < 2 or dimension & (dimension - 1):
        raise ValueError(f"dimension must be a power of two, got {dimension}")
    if count > dimension:
        raise ValueError(f"{count} orthogonal directions need a dimension >= {count}")
    picked = rng.choice(dimension, count, replace=False)
    signs = np.where(rng.random(dimension) < 0.5, -1.0, 1.0) / math.sqrt(dimension)
    columns = np.arange(dimension)
    out = np.empty((count, dimension), dtype=np.float32)
    for start in range(0, count, 256):  # H[i, j] = (-1)^popcount(i & j)
        common = picked[start : start + 256, None] & columns[None, :]
        parity = np.zeros_like(common)
        while common.any():
            parity ^= common & 1
            common >>= 1
        out[start : start + 256] = (1 - 2 * parity) * signs
    return out


def _coins(rng: np.random.Generator, count: int) -> np.ndarray:
    return np.where(rng.random(count) < 0.5, 1, -1)


def audit_local(
    *,
    canaries: int,
    queries: int,
    batch_size: int,
    clip_norm: float,
    noise_multiplier: float,
    delta: float,
    accountant: str,
    rng: np.random.Generator,
    known_noise: bool = False,
) -> Observation:
    """GS-WGAN with local noise: the server sees every reply. Each canary answers ``queries``
    queries with B rows s C v (norm C each); the reply is ``sanitize``'s output."""
    start = time.perf_counter()
    directions = unit_rows(rng, canaries, ROW)
    coins = _coins(rng, canaries)
    ledger = PrivacyLedger()
    scores = np.zeros(canaries)
    nulls = np.zeros((canaries, NULLS_PER_CANARY))
    zeros = torch.zeros(batch_size, ROW)
    null_directions = orthogonal_units(rng, directions, NULLS_PER_CANARY)
    for i in range(canaries):
        row = torch.from_numpy(coins[i] * clip_norm * directions[i]).float()
        rows = row.expand(batch_size, ROW).contiguous()
        fresh = null_directions[i]
        for _ in range(queries):
            ledger.record_query(f"canary-{i}", noise_multiplier, batch_size)
            reply = sanitize(rows, clip_norm, noise_multiplier).values.double().numpy()
            if known_noise:
                reply -= sanitize(zeros, clip_norm, noise_multiplier).values.double().numpy()
            # a direction repeated in every row, over sqrt(B): unit length in R^(B x 784)
            summed, norm = reply.sum(axis=0), float(np.linalg.norm(reply))
            scores[i] += summed @ directions[i] / math.sqrt(batch_size) / norm
            nulls[i] += fresh @ summed / math.sqrt(batch_size) / norm
    epsilon, _ = ledger.epsilon_untrusted_max(delta, accountant)
    figure = {
        "epsilon": epsilon,
        "threat_model": UNTRUSTED_SERVER,
        "accountant": accountant,
        "delta": delta,
        "neighbouring": REPLACE_ONE,
        "queries_per_client": queries,
        "event": f"{queries} queries of B = {batch_size} rows at sigma {noise_multiplier}",
    }
    mu = math.sqrt(queries * batch_size) / noise_multiplier
    calls = canaries * queries * (2 if known_noise else 1)
    ideal = Ideal(
        gdp_epsilon(mu, delta),
        f"exact epsilon of the Gaussian the replies form (multiplier sigma / sqrt(kB)), "
        f"mu = {mu:.4g}",
    )
    cost = Cost(
        canaries * queries,
        canaries * queries,
        calls * batch_size * ROW,
        time.perf_counter() - start,
    )
    return Observation(scores, coins, nulls.ravel(), REPLACE_ONE, figure, ideal, cost)


def audit_secure(
    *,
    canaries: int,
    steps: int,
    batch_size: int,
    params: distributed_noise.DistributedNoiseParams,
    delta: float,
    rng: np.random.Generator,
    known_noise: bool = False,
) -> Observation:
    """GS-WGAN under secure aggregation: the server sees only each cohort's decoded sum.

    Each cohort is the threat model's worst case: m_min survivors of whom t - 1 collude with the
    server. The colluders' encodings are the server's own knowledge and cancel exactly from the
    sum mod 2^k, and SecAgg+'s masks cancel in the sum by construction, so a cohort here is the
    m_min - (t - 1) honest survivors, every one a canary, summed by ``modular_sum`` and read by
    ``decode``. Each canary takes part in ``steps`` cohorts.
    """
    start = time.perf_counter()
    honest = params.noisy_clients
    canaries = -(-canaries // honest) * honest  # whole cohorts
    if params.dimension != batch_size * ROW:
        raise ValueError(f"params are for {params.dimension} values, not B = {batch_size} rows")
    clip_row = params.clip / math.sqrt(batch_size)  # C: params.clip is C sqrt(B)
    directions = unit_rows(rng, canaries, ROW)
    coins = _coins(rng, canaries)
    vectors = np.repeat(coins[:, None] * clip_row * directions, batch_size, axis=0)
    vectors = vectors.reshape(canaries, batch_size * ROW)
    fresh = orthogonal_units(rng, directions, NULLS_PER_CANARY)
    scores = np.zeros(canaries)
    nulls = np.zeros((canaries, NULLS_PER_CANARY))
    zero = np.zeros(params.dimension)
    encodings = 0
    for _ in range(steps):
        for cohort in rng.permutation(canaries).reshape(-1, honest):
            seed = os.urandom(32)  # the cohort's public rotation seed, as the server draws it

            def decoded(inputs: list[np.ndarray], seed: bytes = seed) -> np.ndarray:
                parts = [distributed_noise.encode(x, params, SecureRandom(), seed) for x in inputs]
                return distributed_noise.decode(
                    distributed_noise.modular_sum(parts, params), params, seed
                )

            total = decoded([vectors[i] for i in cohort])
            encodings += honest
            if known_noise:
                total = total - decoded([zero] * honest)
                encodings += honest
            summed = total.reshape(batch_size, ROW).sum(axis=0)
            norm = float(np.linalg.norm(total)) * math.sqrt(batch_size)
            scores[cohort] += directions[cohort] @ summed / norm
            nulls[cohort] += np.einsum("ncd,d->nc", fresh[cohort], summed) / norm
    result = distributed_epsilon(params, steps, delta, REPLACE_ONE)
    figure = {
        "epsilon": result.epsilon,
        "threat_model": SECURE_AGGREGATION,
        "accountant": result.accountant,
        "delta": delta,
        "neighbouring": REPLACE_ONE,
        "steps_per_client": steps,
        "m_min": params.m_min,
        "colluders": params.colluders,
        "order": result.order,
    }
    mu = math.sqrt(steps) * 2 * params.clip / params.sigma
    ideal = Ideal(
        gdp_epsilon(mu, delta),
        f"exact epsilon of a Gaussian with the honest survivors' noise, mu = {mu:.4g} (the "
        "discrete noise sum and the rounding are ignored)",
    )
    cost = Cost(
        canaries * steps // honest,
        canaries * steps,
        encodings * params.padded_dimension,
        time.perf_counter() - start,
    )
    return Observation(scores, coins, nulls.ravel(), REPLACE_ONE, figure, ideal, cost)


def audit_fedavg(
    *,
    canaries: int,
    rounds: int,
    clients_per_round: int,
    clients: int,
    clip_norm: float,
    noise_multiplier: float,
    dimension: int,
    delta: float,
    accountant: str,
    rng: np.random.Generator,
    known_noise: bool = False,
) -> Observation:
    """Fed-Avg GAN (DP-FedAvg, trusted server): the auditor sees every round's noised mean.

    A canary in the population is Poisson-sampled with q = m / K each round, by the server's
    secret sampler, and its delta is S v (``hadamard_rows``; the null directions are further
    rows, so orthogonal to every canary); ``clip_delta`` and ``noisy_mean`` make the release.
    The run's other clients are left out: their deltas, fixed and known in the worst case the
    accountant covers, add nothing the auditor could not subtract.
    """
    start = time.perf_counter()
    q = clients_per_round / clients
    directions = hadamard_rows(rng, 2 * canaries, dimension)
    directions, fresh = directions[:canaries], directions[canaries:]
    coins = _coins(rng, canaries)  # +1: in the population; -1: never sent
    members = np.flatnonzero(coins > 0)
    ledger = FedAvgLedger(noise_multiplier)
    sampler = SecureRandom()
    scores, nulls = np.zeros(canaries), np.zeros(canaries)
    shapes = [(dimension,)]
    draws = contributions = 0
    for _ in range(rounds):
        sampled = members[sampler.random(members.size) < q]
        deltas = [clip_delta([clip_norm * directions[i]], clip_norm)[0] for i in sampled]
        contributions += len(deltas)
        ledger.record_round(clients_per_round, clients)
        release = noisy_mean(deltas, shapes, clip_norm, noise_multiplier, clients_per_round)[0]
        release = release.astype(np.float64)
        draws += dimension
        if known_noise:
            release -= noisy_mean([], shapes, clip_norm, noise_multiplier, clients_per_round)[0]
            draws += dimension
        norm = float(np.linalg.norm(release))
        scores += directions @ release / norm
        nulls += fresh @ release / norm
    summary = ledger.summary(delta, accountant)
    figure = {
        "epsilon": summary["trusted_server"]["epsilon"],
        "threat_model": TRUSTED_SERVER,
        "accountant": summary["accountant"],
        "delta": delta,
        "neighbouring": ADD_REMOVE,
        "rounds": rounds,
        "q": q,
    }
    mu = q * math.sqrt(rounds) / noise_multiplier
    ideal = Ideal(
        gdp_epsilon(mu, delta),
        f"epsilon of the summed cosine's Gaussian, mu = q sqrt(T) / z = {mu:.4g}: the score "
        "cannot tell the rounds that sampled a canary, so it does not see the whole mechanism",
    )
    cost = Cost(rounds, contributions, draws, time.perf_counter() - start)
    return Observation(scores, coins, nulls, ADD_REMOVE, figure, ideal, cost)
