"""The distributed discrete Gaussian: what a client sends when the server sees only a sum.

Why: with secure aggregation the server learns the sum mod 2^k of the cohort's integer vectors
and nothing else, so no single party can add the noise; each client adds its share (Kairouz, Liu
and Steinke, ICML 2021, "The Distributed Discrete Gaussian Mechanism for Federated Learning with
Secure Aggregation"). A client's float vector is

1. clipped to L2 norm ``clip`` (the whole vector: B rows of norm C make ``clip = C * sqrt(B)``);
2. optionally rotated, zero-padded to a power of two d', by a randomized Walsh-Hadamard transform
   (random signs, then the normalised Hadamard matrix). The signs come from a public seed the
   server hands the whole cohort, so every client and the decoder use the same rotation. It
   spreads a vector's mass over all coordinates, which keeps the sum's coordinates small and
   away from the modulus; it is orthogonal, so it changes no norm and plays no part in privacy;
3. scaled by ``gamma`` (integer units per float unit; the paper's gamma is its reciprocal, the
   grid step) and stochastically rounded to integers, the rounding retried until the integer
   vector's squared L2 norm is at most ``max_norm_squared``: the bound an unconditional rounding
   meets with probability >= 1 - beta (the paper's Proposition 22). The accountant
   (``fedgs.privacy.distributed_accounting``) uses exactly that bound, so the retry enforces the
   sensitivity instead of hoping for it;
4. given discrete Gaussian noise N_Z(0, client_sigma^2) per coordinate and reduced mod 2^k.

The server decodes the (secure) sum: centred residues in [-2^(k-1), 2^(k-1)), divided by gamma,
rotated back, cropped to d. ``sigma`` is the target central noise std in float units: the
``m_min - colluders`` honest survivors (the fewest whose noise the adversary does not know)
together carry it, ``(m_min - colluders) * client_sigma^2 = (sigma * gamma)^2``; more survivors
only add noise.

Randomness: the rounding coins and the noise come from ``SecureRandom`` (ChaCha20 keyed by the
OS), never from numpy or torch generators, nor from Flower's quantizer (np.random). The rotation
signs come from ChaCha20 keyed by HKDF-SHA256 of the public seed: they must be reproducible by
everyone, and are not secret.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from fedgs.privacy.discrete_noise import discrete_gaussian
from fedgs.privacy.randomness import SecureRandom

MAX_BITS = 62  # residues, rounded values and noise stay exact in int64 below this
MIN_SEED_BYTES = 16
MAX_ROUNDING_TRIES = 1000  # a try fails with probability <= beta, so 1000 fail with <= beta^1000
DEFAULT_WRAP_PROBABILITY = 1e-6
_ROTATION_INFO = b"fedgs distributed discrete Gaussian: rotation signs"


class RoundingError(RuntimeError):
    """Conditional rounding missed its norm bound ``MAX_ROUNDING_TRIES`` times in a row."""


def _check_int(name: str, value: int, low: int, high: float = math.inf) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or not low <= value <= high
    ):
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")


def _check_positive(name: str, value: float) -> None:
    if isinstance(value, bool) or not (float(value) > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")


def padded_size(dimension: int, rotate: bool) -> int:
    """The encoded length: ``dimension`` rounded up to a power of two when rotating."""
    return 1 << (dimension - 1).bit_length() if rotate else dimension


@dataclass(frozen=True)
class DistributedNoiseParams:
    """Everything a client needs to encode and the server to decode and account.

    ``dimension``: the float vector's length d. ``clip``: its L2 clip norm c. ``bits``: the
    modulus 2^bits of the secure sum. ``gamma``: integer units per float unit. ``beta``: the
    conditional rounding's failure probability per try (0: the bound that always holds).
    ``sigma``: target central noise std per coordinate, float units. ``m_min``: the fewest
    survivors the protocol accepts; ``colluders``: how many of them may share their noise with
    the server (the protocol's t - 1 for the full secure-aggregation threat model).
    ``rotate``: apply the randomized Walsh-Hadamard rotation.
    """

    dimension: int
    clip: float
    bits: int
    gamma: float
    beta: float
    sigma: float
    m_min: int
    colluders: int = 0
    rotate: bool = True

    def __post_init__(self) -> None:
        _check_int("dimension", self.dimension, 1)
        _check_positive("clip", self.clip)
        _check_int("bits", self.bits, 2, MAX_BITS)
        _check_positive("gamma", self.gamma)
        if not 0 <= self.beta < 1:
            raise ValueError(f"beta must lie in [0, 1), got {self.beta!r}")
        _check_positive("sigma", self.sigma)
        _check_int("m_min", self.m_min, 1)
        _check_int("colluders", self.colluders, 0, self.m_min - 1)
        if not isinstance(self.rotate, bool):
            raise ValueError(f"rotate must be a bool, got {self.rotate!r}")
        if self.clip * self.gamma + math.sqrt(self.padded_dimension) >= 2.0 ** (MAX_BITS - 1):
            raise ValueError(
                f"clip * gamma = {self.clip * self.gamma:g} leaves no room in int64; lower gamma"
            )

    @property
    def padded_dimension(self) -> int:
        """d': the encoded vector's length."""
        return padded_size(self.dimension, self.rotate)

    @property
    def noisy_clients(self) -> int:
        """The fewest clients whose noise the adversary does not know: m_min - colluders."""
        return self.m_min - self.colluders

    @property
    def client_sigma(self) -> float:
        """Each client's discrete Gaussian parameter, integer units."""
        return self.sigma * self.gamma / math.sqrt(self.noisy_clients)

    @property
    def noise_multiplier(self) -> float:
        """Target central noise std over the clip norm."""
        return self.sigma / self.clip

    @property
    def max_norm_squared(self) -> int:
        """The largest squared L2 norm a client's rounded integer vector may have.

        min((c g + sqrt(d'))^2, c^2 g^2 + d'/4 + sqrt(2 log(1/beta)) (c g + sqrt(d')/2)): the
        first holds always (no coordinate moves by 1 or more), the second with probability
        >= 1 - beta for a vector of norm <= c g (Kairouz et al. 2021, Proposition 22).
        """
        scaled, d = self.clip * self.gamma, self.padded_dimension
        bound = (scaled + math.sqrt(d)) ** 2
        if self.beta > 0:
            likely = (
                scaled**2
                + d / 4
                + math.sqrt(2 * math.log(1 / self.beta)) * (scaled + math.sqrt(d) / 2)
            )
            bound = min(bound, likely)
        return math.floor(bound)


def rotation_signs(rotation_seed: bytes, size: int) -> np.ndarray:
    """``size`` signs (+-1.0) from ChaCha20 keyed by HKDF-SHA256(``rotation_seed``)."""
    if not isinstance(rotation_seed, bytes) or len(rotation_seed) < MIN_SEED_BYTES:
        raise ValueError(f"rotation_seed must be at least {MIN_SEED_BYTES} bytes")
    key = HKDF(hashes.SHA256(), 32, salt=None, info=_ROTATION_INFO).derive(rotation_seed)
    stream = Cipher(algorithms.ChaCha20(key, bytes(16)), None).encryptor()
    bits = np.unpackbits(np.frombuffer(stream.update(bytes(-(-size // 8))), np.uint8))[:size]
    return 1.0 - 2.0 * bits


def _hadamard(x: np.ndarray) -> np.ndarray:
    """The normalised Walsh-Hadamard transform of a power-of-two-long vector (its own inverse)."""
    n = x.size
    out = x.astype(np.float64, copy=True)
    h = 1
    while h < n:
        pairs = out.reshape(-1, 2, h)
        top, bottom = pairs[:, 0, :].copy(), pairs[:, 1, :]
        pairs[:, 0, :] += bottom
        pairs[:, 1, :] = top - bottom
        h *= 2
    return out / math.sqrt(n)


def _rotate(x: np.ndarray, rotation_seed: bytes) -> np.ndarray:
    return _hadamard(x * rotation_signs(rotation_seed, x.size))


def _unrotate(y: np.ndarray, rotation_seed: bytes) -> np.ndarray:
    return _hadamard(y) * rotation_signs(rotation_seed, y.size)


def _clipped(vector: np.ndarray, clip: float) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector * (clip / norm) if norm > clip else vector


def conditional_round(
    scaled: np.ndarray,
    max_norm_squared: int,
    rng: SecureRandom,
    max_tries: int = MAX_ROUNDING_TRIES,
) -> np.ndarray:
    """Unbiased stochastic rounding of ``scaled`` to int64, retried until the squared L2 norm
    is at most ``max_norm_squared`` (checked in exact integer arithmetic)."""
    floor = np.floor(scaled)
    fraction = scaled - floor
    base = floor.astype(np.int64)
    for _ in range(max_tries):
        rounded = base + (rng.uniform(scaled.size) < fraction)
        if sum(v * v for v in rounded.tolist()) <= max_norm_squared:
            return rounded
    raise RoundingError(
        f"stochastic rounding exceeded its squared-norm bound {max_norm_squared} in "
        f"{max_tries} tries; the input was not clipped to clip * gamma"
    )


def _check_seed(params: DistributedNoiseParams, rotation_seed: bytes | None) -> None:
    if params.rotate and rotation_seed is None:
        raise ValueError("rotate=True needs the cohort's rotation_seed")


def encode(
    vector: np.ndarray,
    params: DistributedNoiseParams,
    rng: SecureRandom,
    rotation_seed: bytes | None = None,
) -> np.ndarray:
    """A client's vector clipped, rotated, scaled, rounded, noised: uint64 residues mod 2^bits."""
    _check_seed(params, rotation_seed)
    values = np.asarray(vector, dtype=np.float64).ravel()
    if values.size != params.dimension:
        raise ValueError(f"vector has {values.size} values, params say {params.dimension}")
    if not np.isfinite(values).all():
        raise ValueError("vector holds NaN or inf; nothing may be released from it")
    padded = np.zeros(params.padded_dimension)
    padded[: values.size] = _clipped(values, params.clip)
    if params.rotate:
        padded = _rotate(padded, rotation_seed)
    rounded = conditional_round(padded * params.gamma, params.max_norm_squared, rng)
    noisy = rounded + discrete_gaussian(rng, params.client_sigma, rounded.size)
    return noisy.view(np.uint64) & np.uint64((1 << params.bits) - 1)


def modular_sum(encoded: list[np.ndarray], params: DistributedNoiseParams) -> np.ndarray:
    """What secure aggregation reveals: the encoded vectors' sum mod 2^bits (uint64)."""
    if not encoded:
        raise ValueError("nothing to sum")
    total = np.zeros(params.padded_dimension, dtype=np.uint64)
    for part in encoded:
        total += _checked_residues(part, params)  # uint64 wraps mod 2^64, a multiple of 2^bits
    return total & np.uint64((1 << params.bits) - 1)


def _checked_residues(values: np.ndarray, params: DistributedNoiseParams) -> np.ndarray:
    values = np.asarray(values)
    if values.dtype != np.uint64 or values.shape != (params.padded_dimension,):
        raise ValueError(
            f"expected {params.padded_dimension} uint64 residues, got {values.dtype} {values.shape}"
        )
    if values.size and int(values.max()) >= 1 << params.bits:
        raise ValueError(f"residues must lie below 2^{params.bits}")
    return values


def decode(
    total: np.ndarray, params: DistributedNoiseParams, rotation_seed: bytes | None = None
) -> np.ndarray:
    """The float64 sum from a sum of residues: centred, divided by gamma, unrotated, cropped."""
    _check_seed(params, rotation_seed)
    centred = _checked_residues(total, params).astype(np.int64)
    centred[centred >= 1 << (params.bits - 1)] -= 1 << params.bits
    values = centred / params.gamma
    if params.rotate:
        values = _unrotate(values, rotation_seed)
    return values[: params.dimension]


def wrap_probability_bound(params: DistributedNoiseParams, clients: int) -> float:
    """An upper bound on the probability that any coordinate of the sum of ``clients``
    encodings leaves [-2^(bits-1), 2^(bits-1)) (then decoding is off by a multiple of 2^bits).

    Per coordinate the sum is signal + rounding error + noise. Rounding moves each client's
    coordinate by less than 1 (|error| < clients). The noise is subgaussian with variance proxy
    clients * client_sigma^2 (a discrete Gaussian is sigma^2-subgaussian: Canonne, Kamath and
    Steinke 2020). The signal: without rotation at most clients * clip * gamma; with it, a
    Rademacher sum with variance proxy (clients * clip * gamma)^2 / d' (the signs are
    independent of the data). A union bound over the d' coordinates, two tails each. Assumes
    the seed is drawn independently of the clients' vectors.
    """
    _check_int("clients", clients, 1)
    margin = 2.0 ** (params.bits - 1) - clients
    signal = clients * params.clip * params.gamma
    proxy = clients * params.client_sigma**2
    if params.rotate:
        proxy += signal**2 / params.padded_dimension
    else:
        margin -= signal
    if margin <= 0:
        return 1.0
    return min(1.0, 2 * params.padded_dimension * math.exp(-(margin**2) / (2 * proxy)))


@dataclass(frozen=True)
class Calibration:
    """Calibrated parameters and the wrap-around bound they meet for ``max_clients``."""

    params: DistributedNoiseParams
    max_clients: int
    wrap_probability: float


def calibrate(
    clip: float,
    dimension: int,
    bits: int,
    m_min: int,
    noise_multiplier: float,
    beta: float,
    *,
    max_clients: int | None = None,
    colluders: int = 0,
    rotate: bool = True,
    max_wrap_probability: float = DEFAULT_WRAP_PROBABILITY,
) -> Calibration:
    """The largest gamma whose sum of up to ``max_clients`` (default m_min) encodings wraps
    with probability <= ``max_wrap_probability`` by ``wrap_probability_bound``.

    Central noise std sigma = noise_multiplier * clip (float units). The bound is solved in
    closed form: with L = log(2 d' / p) and margin M = 2^(bits-1) - n, gamma =
    M / sqrt(2 L ((n c)^2 / d' + n (z c)^2 / h)) rotated, M / (n c + z c sqrt(2 L n / h)) not
    (h = m_min - colluders). A conservative cousin of Kairouz et al.'s choice (a fixed number of
    standard deviations per coordinate): this one bounds every coordinate at once.
    """
    n = m_min if max_clients is None else max_clients
    _check_int("m_min", m_min, 1)
    _check_int("max_clients", n, m_min)
    _check_int("colluders", colluders, 0, m_min - 1)
    _check_positive("noise_multiplier", noise_multiplier)
    if not 0 < max_wrap_probability < 1:
        raise ValueError(f"max_wrap_probability must lie in (0, 1), got {max_wrap_probability!r}")
    _check_int("bits", bits, 2, MAX_BITS)
    _check_int("dimension", dimension, 1)
    d = padded_size(dimension, rotate)
    margin = 2.0 ** (bits - 1) - n
    if margin <= 0:
        raise ValueError(f"2^{bits - 1} cannot hold the rounding error of {n} clients")
    log_term = 2 * math.log(2 * d / max_wrap_probability)
    noise = noise_multiplier * clip * math.sqrt(n / (m_min - colluders))
    if rotate:
        gamma = margin / math.sqrt(log_term * ((n * clip) ** 2 / d + noise**2))
    else:
        gamma = margin / (n * clip + noise * math.sqrt(log_term))
    gamma *= 1 - 1e-12  # float rounding must not put the bound above the target
    params = DistributedNoiseParams(
        dimension, clip, bits, gamma, beta, noise_multiplier * clip, m_min, colluders, rotate
    )
    return Calibration(params, n, wrap_probability_bound(params, n))
