"""Shamir sharing of SecAgg+'s secrets over Z_q (fedgs.secagg.shamir): t shares rebuild the
seed and the mask key, t - 1 say nothing, malformed shares are refused, q is the curve's order,
and the mask key a dropped client's neighbours rebuild is the one it advertised."""

from __future__ import annotations

import itertools
import os

import pytest
from Crypto.Util.number import isPrime
from cryptography.hazmat.primitives.asymmetric import ec
from scipy import stats

from fedgs.secagg import keys, shamir

P384 = 2**384 - 2**128 - 2**96 + 2**32 - 1  # SECP384R1's field prime


def test_q_is_the_prime_order_of_secp384r1() -> None:
    """q prime, q - 1 is a valid scalar and q is not, and (q - 1) G = -G: so q G = O, the
    group's order is q, and every private scalar (and every 32-byte seed) is an element of Z_q."""
    assert isPrime(shamir.Q) and shamir.Q.bit_length() == 384 and 2**256 < shamir.Q
    with pytest.raises(ValueError):
        ec.derive_private_key(shamir.Q, keys.CURVE)
    g = ec.derive_private_key(1, keys.CURVE).public_key().public_numbers()
    minus_g = ec.derive_private_key(shamir.Q - 1, keys.CURVE).public_key().public_numbers()
    assert minus_g.x == g.x and minus_g.y == (-g.y) % P384


@pytest.mark.parametrize("t,n", [(2, 2), (2, 5), (3, 5), (26, 50)])
def test_any_t_shares_rebuild_the_secret(t: int, n: int) -> None:
    secret = int.from_bytes(os.urandom(48), "big") % shamir.Q
    shares = shamir.split(secret, t, n)
    assert len(shares) == n and all(len(s) == shamir.SHARE_LEN for s in shares)
    assert [shamir.share_index(s) for s in shares] == list(range(1, n + 1))
    subsets = list(itertools.islice(itertools.combinations(shares, t), 20))
    subsets.append(tuple(reversed(shares[-t:])))
    for subset in subsets:
        assert shamir.combine(list(subset)) == secret


def test_the_edges_of_the_field_survive() -> None:
    for secret in (0, 1, 2**256 - 1, shamir.Q - 1):
        assert shamir.combine(shamir.split(secret, 3, 4)[1:]) == secret


def test_t_minus_one_shares_are_uniform_whatever_the_secret() -> None:
    """With t = 3, the 2 shares at x = 1, 2 of the secret 0 and of the secret q - 1 both look
    uniform (the top byte of each value, chi-squared), and combining them gives no secret."""
    for secret in (0, shamir.Q - 1):
        tops = []
        for _ in range(800):
            shares = shamir.split(secret, 3, 3)[:2]
            assert shamir.combine(shares) != secret  # overwhelmingly: 2^-384 otherwise
            tops += [s[shamir.INDEX_LEN] >> 4 for s in shares]  # top 4 bits of each value
        counts = [tops.count(v) for v in range(16)]
        assert stats.chisquare(counts).pvalue > 1e-4, counts


def test_t_minus_one_shares_fit_every_secret() -> None:
    """Information-theoretically hidden: for t - 1 shares and any candidate secret, the
    polynomial through them and (0, candidate) is one of degree t - 1, and its value at the
    missing index is a valid share that rebuilds the candidate with the others."""
    t, secret = 4, 123456789
    shares = shamir.split(secret, t, 5)
    known = shares[: t - 1]
    for candidate in (0, 42, shamir.Q - 1):
        points = [(0, candidate)] + [
            (shamir.share_index(s), int.from_bytes(s[4:], "big")) for s in known
        ]
        x4, y4 = 4, 0
        for j, (x_j, y_j) in enumerate(points):
            num = den = 1
            for m, (x_m, _) in enumerate(points):
                if m != j:
                    num = num * (x4 - x_m) % shamir.Q
                    den = den * (x_j - x_m) % shamir.Q
            y4 = (y4 + y_j * num * pow(den, -1, shamir.Q)) % shamir.Q
        forged = x4.to_bytes(4, "little") + y4.to_bytes(48, "big")
        assert shamir.combine(known + [forged]) == candidate


def test_coefficients_come_fresh_from_the_os() -> None:
    """Two sharings of one secret differ (fresh coefficients), and the drawn elements lie in
    Z_q and spread over it."""
    assert shamir.split(5, 2, 3) != shamir.split(5, 2, 3)
    draws = [shamir.uniform_element() for _ in range(2000)]
    assert all(0 <= d < shamir.Q for d in draws)
    counts = [0] * 16
    for d in draws:
        counts[d * 16 // shamir.Q] += 1
    assert stats.chisquare(counts).pvalue > 1e-4, counts


def test_bad_splits_and_shares_are_refused() -> None:
    for secret, t, n in [(-1, 2, 3), (shamir.Q, 2, 3), (1, 1, 3), (1, 4, 3), (b"x", 2, 3)]:
        with pytest.raises(ValueError):
            shamir.split(secret, t, n)  # type: ignore[arg-type]
    shares = shamir.split(77, 3, 4)
    too_big = shares[0][:4] + (shamir.Q).to_bytes(48, "big")
    index_zero = bytes(4) + shares[0][4:]
    for bad in [
        shares[:1],
        [shares[0], shares[0], shares[1]],
        [shares[0][:-1], shares[1], shares[2]],
        [too_big, shares[1], shares[2]],
        [index_zero, shares[1], shares[2]],
        [shares[0], shares[1], "text"],
    ]:
        with pytest.raises(ValueError):
            shamir.combine(bad)  # type: ignore[arg-type]


def test_the_mask_key_rebuilds_to_the_advertised_key() -> None:
    """The client's form: the 48-byte scalar as an integer; t of its shares give back the key
    whose public point the client advertised, t - 1 plus a foreign share do not."""
    key = keys.new_private_key()
    scalar = int.from_bytes(keys.private_to_bytes(key), "big")
    shares = shamir.split(scalar, 5, 9)
    rebuilt = keys.private_from_bytes(shamir.combine(shares[2:7]).to_bytes(48, "big"))
    assert keys.public_to_bytes(rebuilt) == keys.public_to_bytes(key)
    foreign = shamir.split(scalar, 5, 9)[6]  # same index, another sharing
    assert shamir.combine(shares[2:6] + [foreign]) != scalar
