"""The one source of randomness for every privacy mechanism: a ChaCha20 keystream, keyed by the OS.

Why not a seeded PRNG: a server that reads a noisy reply knows the noise's scale, so it can try
every seed a generator could have had and keep the one whose noise explains the reply. torch's
CPU generator keeps only 32 bits of its seed (2^32 candidates: minutes on one core), and even a
well-seeded PCG64 or Mersenne Twister can have its state recovered from enough outputs. A stream
cipher is built to make its output unpredictable without the key: each :class:`SecureRandom`
takes a fresh 256-bit key and 96-bit nonce from ``os.urandom`` and never exposes, saves or
accepts them, so there is no seed to find and no parameter by which anyone could pass one. Make
one per reply (or per server aggregation): keys are cheap and then no two releases share one.
The 32-bit block counter in front of the nonce starts at zero, not at random: a random start
leaves a stream 2^32 - start blocks, so a reply that needs n blocks failed with probability
~n / 2^32 (discrete Gaussian noise reads ~16 words a value: a Fed-Avg GAN update failed in 2 of
16,660 replies); from zero a stream gives 256 GiB.

The stream is turned into numbers without floating-point shortcuts that could bias them: uniform
integers by rejection (no modulo bias), and 53-bit uniforms only for comparisons against
probabilities of at least e^-1 (``fedgs.privacy.discrete_noise`` keeps it that way).
"""

from __future__ import annotations

import math
import os

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

KEY_BYTES = 32  # ChaCha20's 256-bit key
NONCE_BYTES = 12  # the random part of cryptography's 16-byte ChaCha20 nonce
_COUNTER_START = bytes(4)  # its 32-bit little-endian block counter, first: from block 0
_UNIT = 2.0**-53
_E_INV = math.exp(-1.0)


class SecureRandom:
    """Random words, uniforms, integers and client samples from one fresh ChaCha20 key.

    Offers the two ``numpy.random.Generator`` methods the server's client samplers call
    (``random`` and ``choice`` without replacement), so a strategy takes either this or a
    reproducible numpy generator.
    """

    def __init__(self) -> None:
        nonce = _COUNTER_START + os.urandom(NONCE_BYTES)
        cipher = Cipher(algorithms.ChaCha20(os.urandom(KEY_BYTES), nonce), None)
        self._stream = cipher.encryptor()

    def words(self, count: int) -> np.ndarray:
        """``count`` independent uniform 64-bit words (uint64)."""
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count}")
        keystream = self._stream.update(bytes(8 * count))
        return np.frombuffer(keystream, dtype="<u8").astype(np.uint64, copy=False)

    def uniform(self, count: int) -> np.ndarray:
        """``count`` uniforms on the grid {0, 2^-53, ..., 1 - 2^-53} (float64, exact)."""
        return (self.words(count) >> np.uint64(11)).astype(np.float64) * _UNIT

    def integers_below(self, bound: int, count: int) -> np.ndarray:
        """``count`` uniform integers in [0, bound) (int64), by rejection: no modulo bias."""
        if not 1 <= bound <= 2**62:
            raise ValueError(f"bound must lie in [1, 2^62], got {bound}")
        if bound & (bound - 1) == 0:  # a power of two: the top bits of a word, nothing rejected
            shift = np.uint64(64 - (bound.bit_length() - 1))
            words = self.words(count)
            return np.zeros(count, np.int64) if bound == 1 else (words >> shift).astype(np.int64)
        limit = (2**64 // bound) * bound  # words below it fall evenly on the residues
        out = np.empty(0, dtype=np.int64)
        while out.size < count:
            need = count - out.size
            words = self.words(need + need // 8 + 8)
            if limit < 2**64:
                words = words[words < np.uint64(limit)]
            out = np.concatenate([out, (words % np.uint64(bound)).astype(np.int64)[:need]])
        return out

    def bernoulli_exp(self, gamma: np.ndarray) -> np.ndarray:
        """Independent coins, True with probability exp(-gamma) for each gamma >= 0.

        exp(-gamma) is written as e^-1 ... e^-1 * e^-frac(gamma): floor(gamma) coins of
        probability e^-1 and one of e^-frac, so no coin compares a uniform with a probability
        below e^-1 and every probability, tails included, is off by a relative 2^-53 per coin
        at most (a plain ``uniform < exp(-gamma)`` would round tail probabilities to 2^-53).
        """
        gamma = np.asarray(gamma, dtype=np.float64)
        if not gamma.size:
            return np.zeros(0, dtype=bool)
        if not (np.isfinite(gamma).all() and gamma.min() >= 0):
            raise ValueError("bernoulli_exp needs finite gamma >= 0")
        whole = np.floor(gamma)
        heads = self.uniform(gamma.size) < np.exp(whole - gamma)
        if whole.max() == 0:  # every probability is at least e^-1 already
            return heads
        active = np.flatnonzero(heads & (whole > 0))
        remaining = whole[active]
        while active.size:  # each survivor tosses its next e^-1 coin
            won = self.uniform(active.size) < _E_INV
            heads[active[~won]] = False
            remaining = remaining[won] - 1
            active = active[won]
            active, remaining = active[remaining > 0], remaining[remaining > 0]
        return heads

    def random(self, size: int) -> np.ndarray:
        """``numpy.random.Generator.random``: uniforms in [0, 1)."""
        return self.uniform(int(size))

    def choice(self, a: int, size: int, replace: bool = False) -> np.ndarray:
        """``numpy.random.Generator.choice(a, size, replace=False)``: ``size`` distinct indices of
        ``range(a)``, uniformly at random and in random order (a partial Fisher-Yates shuffle
        with unbiased indices, so its cost grows with ``size``, not ``a``)."""
        if replace:
            raise ValueError("SecureRandom.choice samples without replacement only")
        if not 0 <= size <= a:
            raise ValueError(f"cannot choose {size} of {a} without replacement")
        order = np.arange(a, dtype=np.int64)
        for i in range(size):
            j = i + int(self.integers_below(a - i, 1)[0])
            order[i], order[j] = order[j], order[i]
        return order[:size]
