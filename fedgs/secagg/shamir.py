"""Shamir secret sharing of one SecAgg+ secret as one element of a 384-bit prime field.

The field is Z_q, q the (prime) order of SECP384R1's group: a self-mask seed (32 bytes, so below
2^256 < q) and a mask key's private scalar (in [1, q)) are each one field element. ``split``
draws a polynomial f of degree t - 1 with f(0) = the secret and its t - 1 other coefficients
uniform in Z_q, by rejection from ``os.urandom`` (the OS's randomness, no other generator), and
hands out (x, f(x)) for x = 1 .. num. Any t - 1 shares are uniform and independent of the
secret (for any secret there is exactly one such f through them), any t rebuild it by Lagrange
interpolation at 0. A share is a 4-byte little-endian index x, as in Flower's shares (the
server checks it against the holder's place), then f(x) as 48 bytes big-endian.

Why not Flower's ``create_shares`` / ``combine_shares``: they pad the secret (PKCS#7, so a
32-byte seed becomes 3 blocks and a 48-byte key 4) and share every 16-byte block on its own over
GF(2^128) with pycryptodome's pure-Python field arithmetic (a bit loop per multiplication), which
made share keys 439 ms a client and the server's unmask 20.6 s at m = 100 (t = 50). Here the
arithmetic is Python's integers mod q: one element per secret, same threshold guarantee.
Neither is constant-time (both are Python integers); the shares' values never leave an
authenticated envelope except to the server in the unmask, as before.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

# the order of SECP384R1's base point, a prime (tests check it against the curve)
Q = int(
    "ffffffffffffffffffffffffffffffffffffffffffffffffc7634d81f4372ddf581a0db248b0a77aecec196accc52973",
    16,
)
VALUE_LEN = 48
INDEX_LEN = 4
SHARE_LEN = INDEX_LEN + VALUE_LEN
MAX_SHARES = 2**32 - 1


def uniform_element() -> int:
    """A uniform element of Z_q from the OS's randomness (rejection: no modulo bias)."""
    while True:
        value = int.from_bytes(os.urandom(VALUE_LEN), "big")
        if value < Q:
            return value


def split(secret: int, threshold: int, num: int) -> list[bytes]:
    """``num`` shares of ``secret`` (0 <= secret < q), any ``threshold`` of which rebuild it."""
    if not isinstance(secret, int) or not 0 <= secret < Q:
        raise ValueError("the secret must be an integer in [0, q)")
    if not 2 <= threshold <= num <= MAX_SHARES:
        raise ValueError(f"need 2 <= threshold <= num <= {MAX_SHARES}")
    # f(x) = secret + c_1 x + ... + c_{t-1} x^{t-1}, highest coefficient first for Horner
    coefficients = [uniform_element() for _ in range(threshold - 1)] + [secret]
    shares = []
    for x in range(1, num + 1):
        y = 0
        for coefficient in coefficients:
            y = (y * x + coefficient) % Q
        shares.append(x.to_bytes(INDEX_LEN, "little") + y.to_bytes(VALUE_LEN, "big"))
    return shares


def share_index(share: bytes) -> int:
    """The index x of a share."""
    return int.from_bytes(share[:INDEX_LEN], "little")


def combine(shares: Sequence[bytes]) -> int:
    """The secret through all of ``shares`` (pass exactly t of them); ValueError if malformed.

    With fewer than t shares the result is unrelated to the secret: the caller must count them.
    """
    if len(shares) < 2:
        raise ValueError("at least two shares are needed")
    points = []
    for share in shares:
        if not isinstance(share, bytes) or len(share) != SHARE_LEN:
            raise ValueError(f"a share is {SHARE_LEN} bytes")
        x, y = share_index(share), int.from_bytes(share[INDEX_LEN:], "big")
        if x == 0 or y >= Q:
            raise ValueError("a share has index 0 or a value outside the field")
        points.append((x, y))
    xs = [x for x, _ in points]
    if len(set(xs)) != len(xs):
        raise ValueError("two shares have the same index")
    # f(0) = sum_j y_j * prod_{m != j} x_m / (x_m - x_j), one inversion per share
    secret = 0
    for j, (x_j, y_j) in enumerate(points):
        numerator, denominator = 1, 1
        for m, x_m in enumerate(xs):
            if m != j:
                numerator = numerator * x_m % Q
                denominator = denominator * (x_m - x_j) % Q
        secret = (secret + y_j * numerator * pow(denominator, -1, Q)) % Q
    return secret
