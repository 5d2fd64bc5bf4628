"""Key pairs, key agreement and the sealed share envelope of SecAgg+, on `cryptography`.

Each client makes two SECP384R1 key pairs per step: ``c`` to encrypt shares between neighbours
(ECDH + HKDF + Fernet via Flower's ``symmetric_encryption``, which authenticates), ``s`` to
agree the pairwise masks. Private keys travel only inside the client's own state (as the raw
48-byte scalar) and, for ``s``, as Shamir shares of that scalar (``shamir.py``); public keys as
uncompressed X9.62 points (97 bytes), which parsing checks to lie on the curve. The share
envelope names the step, sender and receiver inside the ciphertext, so a share the server
redirects or replays is refused on decryption.
"""

from __future__ import annotations

import struct

from cryptography.exceptions import InvalidKey
from cryptography.fernet import InvalidToken
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from flwr.common.secure_aggregation.crypto.symmetric_encryption import (
    decrypt,
    encrypt,
    generate_shared_key,
)

from fedgs.secagg import shamir
from fedgs.secagg.errors import SecAggError

CURVE = ec.SECP384R1()
PRIVATE_LEN = 48
PUBLIC_LEN = 97
SEED_LEN = 32
# a Shamir share of the seed (b) and of the mask key (s): one element of Z_q each (shamir.py)
B_SHARE_LEN = shamir.SHARE_LEN
S_SHARE_LEN = shamir.SHARE_LEN
_MAGIC = b"fedgs-secagg-shares/2"  # /1: Flower's GF(2^128) shares of the padded secrets
_HEADER = struct.Struct("<QQQ")  # step, sender, receiver
ENVELOPE_LEN = len(_MAGIC) + _HEADER.size + B_SHARE_LEN + S_SHARE_LEN


def new_private_key() -> ec.EllipticCurvePrivateKey:
    """A fresh key pair; the randomness comes from the OS through `cryptography`."""
    return ec.generate_private_key(CURVE)


def private_to_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
    """The private scalar, 48 bytes big-endian."""
    return key.private_numbers().private_value.to_bytes(PRIVATE_LEN, "big")


def private_from_bytes(data: bytes) -> ec.EllipticCurvePrivateKey:
    """The key whose scalar ``data`` holds; SecAggError if it is no valid scalar."""
    if not isinstance(data, bytes) or len(data) != PRIVATE_LEN:
        raise SecAggError("a private key is 48 bytes")
    try:
        return ec.derive_private_key(int.from_bytes(data, "big"), CURVE)
    except ValueError as err:
        raise SecAggError(f"not a SECP384R1 private key: {err}") from None


def public_to_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
    """The public point of ``key``, uncompressed X9.62."""
    return key.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )


def public_from_bytes(data: object) -> ec.EllipticCurvePublicKey:
    """The public key ``data`` encodes; SecAggError unless it is a point on the curve."""
    if not isinstance(data, bytes) or len(data) != PUBLIC_LEN:
        raise SecAggError(f"a public key is {PUBLIC_LEN} bytes")
    try:
        return ec.EllipticCurvePublicKey.from_encoded_point(CURVE, data)
    except ValueError:
        raise SecAggError("a public key is not a SECP384R1 point") from None


def agree(private: ec.EllipticCurvePrivateKey, public: bytes) -> bytes:
    """The raw ECDH shared secret with the peer's public key (bytes)."""
    try:
        return private.exchange(ec.ECDH(), public_from_bytes(public))
    except InvalidKey:
        raise SecAggError("key agreement failed") from None


def seal_shares(
    private_c: ec.EllipticCurvePrivateKey,
    peer_c: bytes,
    step: int,
    sender: int,
    receiver: int,
    b_share: bytes,
    s_share: bytes,
) -> bytes:
    """The sender's two shares for ``receiver``, encrypted and authenticated for it alone."""
    if len(b_share) != B_SHARE_LEN or len(s_share) != S_SHARE_LEN:
        raise SecAggError("shares of unexpected length")
    plaintext = _MAGIC + _HEADER.pack(step, sender, receiver) + b_share + s_share
    return encrypt(generate_shared_key(private_c, public_from_bytes(peer_c)), plaintext)


def open_shares(
    private_c: ec.EllipticCurvePrivateKey,
    peer_c: bytes,
    ciphertext: object,
    step: int,
    sender: int,
    receiver: int,
) -> tuple[bytes, bytes]:
    """(b share, s share) from ``sender`` to ``receiver``; SecAggError if forged or misaddressed."""
    if not isinstance(ciphertext, bytes):
        raise SecAggError(f"the ciphertext from {sender} is not bytes")
    try:
        plaintext = decrypt(generate_shared_key(private_c, public_from_bytes(peer_c)), ciphertext)
    except (InvalidToken, ValueError):
        raise SecAggError(f"the shares from {sender} do not decrypt: tampered or foreign") from None
    if len(plaintext) != ENVELOPE_LEN or not plaintext.startswith(_MAGIC):
        raise SecAggError(f"the shares from {sender} are malformed")
    body = plaintext[len(_MAGIC) :]
    if _HEADER.unpack_from(body) != (step, sender, receiver):
        raise SecAggError(f"the shares from {sender} name another step, sender or receiver")
    shares = body[_HEADER.size :]
    return shares[:B_SHARE_LEN], shares[B_SHARE_LEN:]
