"""The distributed discrete Gaussian's encoding: parameters, rotation, conditional rounding,
round trips through a modular sum, the noise's calibration and the wrap-around bound."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedgs.privacy.distributed_noise import (
    DistributedNoiseParams,
    RoundingError,
    calibrate,
    conditional_round,
    decode,
    encode,
    modular_sum,
    rotation_signs,
    wrap_probability_bound,
)
from fedgs.privacy.randomness import SecureRandom

SEED = bytes(range(32))
BETA = math.exp(-0.5)


def params(**changes: object) -> DistributedNoiseParams:
    fields: dict[str, object] = dict(
        dimension=1000, clip=1.0, bits=32, gamma=2.0**16, beta=BETA, sigma=1.0, m_min=5
    )
    return DistributedNoiseParams(**(fields | changes))  # type: ignore[arg-type]


def vectors(count: int, dimension: int, scale: float = 0.05) -> list[np.ndarray]:
    """Test inputs (numpy's generator is fine here: these are data, not a mechanism's coins)."""
    gen = np.random.default_rng(7)
    return [gen.normal(scale=scale, size=dimension) for _ in range(count)]


def clipped(x: np.ndarray, clip: float) -> np.ndarray:
    norm = np.linalg.norm(x)
    return x * min(1.0, clip / norm)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"dimension": 0}, "dimension"),
        ({"clip": 0.0}, "clip"),
        ({"clip": math.inf}, "clip"),
        ({"bits": 1}, "bits"),
        ({"bits": 63}, "bits"),
        ({"gamma": -1.0}, "gamma"),
        ({"beta": 1.0}, "beta"),
        ({"sigma": math.nan}, "sigma"),
        ({"m_min": 0}, "m_min"),
        ({"colluders": 5}, "colluders"),
        ({"rotate": 1}, "rotate"),
        ({"gamma": 2.0**61}, "int64"),
        ({"dimension": 2.5}, "dimension"),
    ],
)
def test_bad_parameters_are_refused_by_name(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        params(**change)


def test_derived_quantities() -> None:
    p = params(colluders=1)
    assert p.padded_dimension == 1024 and params(rotate=False).padded_dimension == 1000
    assert p.noisy_clients == 4
    assert p.client_sigma == pytest.approx(2.0**16 / 2)
    scaled = 2.0**16
    likely = scaled**2 + 1024 / 4 + math.sqrt(2 * 0.5) * (scaled + 32 / 2)
    assert p.max_norm_squared == math.floor(min((scaled + 32) ** 2, likely))
    assert params(beta=0.0).max_norm_squared == math.floor((scaled + 32) ** 2)


def test_rotation_signs_come_from_the_seed() -> None:
    signs = rotation_signs(SEED, 4096)
    assert set(np.unique(signs)) == {-1.0, 1.0}
    assert abs(signs.mean()) < 0.1
    assert np.array_equal(signs, rotation_signs(SEED, 4096))
    assert not np.array_equal(signs, rotation_signs(bytes(32), 4096))
    with pytest.raises(ValueError, match="rotation_seed"):
        rotation_signs(b"short", 8)


def test_encode_needs_a_seed_to_rotate_and_a_sound_vector() -> None:
    rng = SecureRandom()
    with pytest.raises(ValueError, match="rotation_seed"):
        encode(np.zeros(1000), params(), rng)
    with pytest.raises(ValueError, match="1000"):
        encode(np.zeros(999), params(), rng, SEED)
    with pytest.raises(ValueError, match="NaN"):
        encode(np.full(1000, np.nan), params(), rng, SEED)


def test_encodings_are_residues_and_use_no_numpy_randomness() -> None:
    state = np.random.get_state()[1].copy()
    p = params(bits=20)
    out = encode(vectors(1, 1000)[0], p, SecureRandom(), SEED)
    assert out.dtype == np.uint64 and out.shape == (1024,)
    assert int(out.max()) < 2**20
    assert np.array_equal(np.random.get_state()[1], state)


def test_conditional_rounding_is_unbiased_and_bounded() -> None:
    rng = SecureRandom()
    x = np.linspace(-3.0, 3.0, 4001)
    mean = np.mean([conditional_round(x, 10**9, rng) for _ in range(200)], axis=0)
    assert np.abs(mean - x).max() < 0.5 and abs((mean - x).mean()) < 0.01
    whole = np.arange(-5.0, 6.0)
    assert np.array_equal(conditional_round(whole, 110, rng), whole.astype(np.int64))
    bound = 5
    rounded = conditional_round(np.full(10, 0.5), bound, rng)
    assert int((rounded**2).sum()) <= bound
    with pytest.raises(RoundingError, match="3 tries"):
        conditional_round(np.full(10, 0.5), 0, rng, max_tries=3)


@pytest.mark.parametrize("rotate", [True, False])
def test_noise_off_round_trip_is_within_the_rounding(rotate: bool) -> None:
    """A client sigma of 1e-4 draws no nonzero noise (P(+-1) ~ exp(-5e7)): what is left of
    the decoded error is rounding, below m * sqrt(d') / gamma in L2."""
    m = 6
    p = params(rotate=rotate, m_min=m, sigma=1e-4 * math.sqrt(m) / 2.0**16)
    assert p.client_sigma == pytest.approx(1e-4)
    xs = vectors(m, 1000)
    xs[0] = xs[0] * 100  # norm ~158: clipped to 1
    total = modular_sum([encode(x, p, SecureRandom(), SEED) for x in xs], p)
    decoded = decode(total, p, SEED)
    expected = sum(clipped(x, p.clip) for x in xs)
    error = np.linalg.norm(decoded - expected)
    assert error <= m * math.sqrt(p.padded_dimension) / p.gamma
    assert error > 0  # the rounding did happen


@pytest.mark.parametrize("colluders", [0, 2])
def test_decoded_noise_has_the_calibrated_variance(colluders: int) -> None:
    """m_min clients' noise adds up to sigma^2 * m_min / (m_min - colluders) per coordinate;
    rounding adds at most m / (4 gamma^2), 1e-4 of it here."""
    m = 5
    p = params(dimension=8192, m_min=m, colluders=colluders, sigma=0.01, gamma=1000.0)
    xs = vectors(m, 8192, scale=0.005)
    total = modular_sum([encode(x, p, SecureRandom(), SEED) for x in xs], p)
    noise = decode(total, p, SEED) - sum(clipped(x, p.clip) for x in xs)
    target = p.sigma**2 * m / (m - colluders)
    assert abs(noise.mean()) < 4 * math.sqrt(target / noise.size)
    assert noise.var() == pytest.approx(target, rel=0.06)  # 4.5 standard errors


def test_decode_centres_the_residues() -> None:
    p = params(bits=8, rotate=False, dimension=4, gamma=1.0)
    total = np.array([0, 127, 128, 255], dtype=np.uint64)
    assert decode(total, p).tolist() == [0.0, 127.0, -128.0, -1.0]


def test_sums_refuse_foreign_residues() -> None:
    p = params(bits=8, rotate=False, dimension=4, gamma=1.0)
    with pytest.raises(ValueError, match="uint64"):
        modular_sum([np.zeros(4, dtype=np.int64)], p)
    with pytest.raises(ValueError, match="below 2"):
        decode(np.array([0, 0, 0, 256], dtype=np.uint64), p)
    with pytest.raises(ValueError, match="nothing"):
        modular_sum([], p)


def test_calibration_meets_its_wrap_bound() -> None:
    cal = calibrate(1.0, 25_088, 32, 10, 1.0, BETA, max_clients=20)
    p = cal.params
    assert p.padded_dimension == 32_768 and p.sigma == 1.0 and p.m_min == 10
    assert cal.max_clients == 20
    assert cal.wrap_probability <= 1e-6
    assert cal.wrap_probability == wrap_probability_bound(p, 20)
    assert cal.wrap_probability > 0.5e-6  # gamma is the largest that meets it, not far below
    assert wrap_probability_bound(params(gamma=p.gamma * 1.01, sigma=1.0, m_min=10), 20) > 1e-6
    unrotated = calibrate(1.0, 25_088, 32, 10, 1.0, BETA, max_clients=20, rotate=False)
    assert unrotated.wrap_probability <= 1e-6
    assert unrotated.params.gamma < p.gamma / 2  # rotation buys range
    with pytest.raises(ValueError, match="rounding error"):
        calibrate(1.0, 10, 3, 4, 1.0, BETA)
    with pytest.raises(ValueError, match="max_clients"):
        calibrate(1.0, 10, 32, 4, 1.0, BETA, max_clients=3)


@pytest.mark.parametrize("rotate", [True, False])
def test_few_bits_decode_without_wrapping_at_the_calibrated_gamma(rotate: bool) -> None:
    m = 8
    cal = calibrate(1.0, 2000, 18, m, 0.5, BETA, rotate=rotate, max_wrap_probability=1e-3)
    p = cal.params
    xs = [clipped(x, 1.0) for x in vectors(m, 2000, scale=0.5)]  # every vector at the clip
    total = modular_sum([encode(x, p, SecureRandom(), SEED) for x in xs], p)
    noise = decode(total, p, SEED) - sum(xs)
    assert np.abs(noise).max() < 6 * p.sigma  # no coordinate off by 2^18 / gamma


def test_too_large_a_gamma_wraps() -> None:
    m = 8
    p = calibrate(1.0, 2000, 18, m, 0.5, BETA, rotate=False).params
    wide = DistributedNoiseParams(2000, 1.0, 18, p.gamma * 40, BETA, 0.5, m, rotate=False)
    assert wrap_probability_bound(wide, m) == 1.0
    xs = [np.full(2000, 1 / math.sqrt(2000))] * m  # every coordinate at m * c / sqrt(d)
    total = modular_sum([encode(x, wide, SecureRandom()) for x in xs], wide)
    assert np.abs(decode(total, wide) - sum(xs)).max() > 2**17 / wide.gamma
