"""The masks of SecAgg+: uniform integers mod 2^k from a 32-byte secret, via ChaCha20.

Why not Flower's ``pseudo_rand_gen``: it XOR-folds the seed to 32 bits and seeds numpy's
``RandomState`` (a Mersenne Twister), so a server holding a masked vector could try all 2^32
seeds and strip a self mask, and the generator is not cryptographic anyway. Here a secret (a
self-mask seed or an ECDH shared secret) goes through HKDF-SHA256 with a domain label to a
256-bit ChaCha20 key, and the keystream is read as little-endian 64-bit words whose low k bits
are kept: exactly uniform mod 2^k, since 2^k divides 2^64. Each key is derived for one mask
only, so the fixed all-zero nonce is never reused under a key. No numpy or torch generator.
"""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

SELF_MASK = b"self-mask"
PAIR_MASK = b"pairwise-mask"
_DOMAIN = b"fedgs-secagg/"
_NONCE = bytes(16)  # ChaCha20 in `cryptography`: 4-byte counter + 12-byte nonce


def derive_key(secret: bytes, label: bytes) -> bytes:
    """A 32-byte ChaCha20 key for one use of ``secret``, separated by ``label``."""
    if not secret:
        raise ValueError("an empty secret")
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_DOMAIN + label)
    return hkdf.derive(secret)


def mask_vector(key: bytes, length: int, modulus_bits: int) -> np.ndarray:
    """``length`` uniform integers in [0, 2^modulus_bits) as uint64, a function of ``key``."""
    if len(key) != 32:
        raise ValueError("a ChaCha20 key is 32 bytes")
    if not 1 <= modulus_bits <= 64:
        raise ValueError(f"modulus bits must lie in [1, 64], got {modulus_bits}")
    encryptor = Cipher(algorithms.ChaCha20(key, _NONCE), mode=None).encryptor()
    stream = encryptor.update(bytes(8 * length)) + encryptor.finalize()
    words = np.frombuffer(stream, dtype="<u8").astype(np.uint64)
    return words & np.uint64((1 << modulus_bits) - 1)
