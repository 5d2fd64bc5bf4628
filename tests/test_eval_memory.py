"""The instrument's neighbour searches in blocks give the full matrices' results at a bounded peak.

`fedgs.metrics.neighbours` and `fedgs.metrics.memorisation.nearest` walk row blocks instead of
holding one pairwise matrix (FEMNIST's complete split needed 15 GB for prdc's reference matrix).
These tests shrink the block so that small inputs span many blocks and compare with the direct
computation: the ``prdc`` package itself, and the one-matrix nearest search the memorisation
check used before.
"""

from __future__ import annotations

import contextlib
import io
import tracemalloc

import numpy as np
import pytest
import torch
from prdc import compute_prdc
from prdc.prdc import compute_nearest_neighbour_distances

from fedgs.metrics import memorisation as memorisation_module
from fedgs.metrics import neighbours
from fedgs.metrics.fidelity import PRDC_KEYS, RealFeatures, feature_scores, prdc
from fedgs.metrics.memorisation import memorisation, nearest


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of a few rows, so that every search below spans many of them."""
    monkeypatch.setattr(neighbours, "BLOCK_BYTES", 4096)


def features(rows: int, seed: int, dim: int = 16) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(rows, dim))


def package_prdc(real: np.ndarray, fake: np.ndarray, k: int) -> dict[str, float]:
    with contextlib.redirect_stdout(io.StringIO()):  # prdc prints its sample counts
        values = compute_prdc(real, fake, nearest_k=k)
    return {key: float(values[key]) for key in PRDC_KEYS}


@pytest.mark.parametrize("k", [1, 3, 5])
def test_kth_neighbour_distances_are_prdcs_radii(small_blocks, k: int) -> None:
    x = features(300, 0)
    x[10] = x[20] = x[30]  # exact duplicates: neighbours at distance 0
    assert neighbours.rows_per_block(len(x)) < len(x)
    expected = compute_nearest_neighbour_distances(x, k)
    # float64 rounding of |x|^2 - 2 x.y + |y|^2 differs between block shapes: ~1e-15, so a
    # duplicate's distance is 0 or ~1e-8 (prdc's own result depends on its column split too)
    np.testing.assert_allclose(
        neighbours.kth_neighbour_distances(x, k), expected, rtol=1e-12, atol=1e-6
    )


@pytest.mark.parametrize(
    ("shift", "fake_rows"), [(0.0, 120), (0.7, 120), (3.0, 50), (0.0, 400)], ids=str
)
def test_prdc_blocks_equal_the_prdc_package(small_blocks, shift: float, fake_rows: int) -> None:
    real, fake = features(300, 1), features(fake_rows, 2) + shift
    assert neighbours.prdc_blocks(real, fake, 5) == package_prdc(real, fake, 5)


def test_prdc_of_a_lookup_table_equals_the_package(small_blocks) -> None:
    """Many identical fakes (a lookup table's features): radii of rounding noise."""
    real = features(200, 3)
    fake = np.repeat(real[:4], 30, axis=0)
    assert neighbours.prdc_blocks(real, fake, 5) == package_prdc(real, fake, 5)


def test_real_features_score_like_the_package_and_reuse_radii(small_blocks) -> None:
    real, labels = torch.from_numpy(features(240, 4)).float(), torch.arange(240) % 3
    fake, fake_labels = torch.from_numpy(features(90, 5)).float(), torch.arange(90) % 3
    reference = RealFeatures(real, labels, 3)
    scores = feature_scores(fake, fake_labels, reference)
    overall = package_prdc(real.double().numpy(), fake.double().numpy(), 5)
    assert {k: scores[k] for k in PRDC_KEYS} == overall
    for c in range(3):
        r, f = real[labels == c].double().numpy(), fake[fake_labels == c].double().numpy()
        expected = package_prdc(r, f, 5)
        assert [scores[f"{k}_per_class"][c] for k in PRDC_KEYS] == list(expected.values())
    radii = reference.radii(None, 5)
    assert feature_scores(fake, fake_labels, reference) == scores
    assert reference.radii(None, 5) is radii  # computed once for every sampler scored
    assert prdc(real, fake) == {k: scores[k] for k in PRDC_KEYS}


def test_prdc_never_holds_the_reference_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    """4,000 reference rows: prdc's N x N float64 matrix is 128 MB; the blocks stay small."""
    monkeypatch.setattr(neighbours, "BLOCK_BYTES", 2**20)
    real, fake = features(4000, 6, dim=8), features(500, 7, dim=8)
    tracemalloc.start()
    try:
        neighbours.prdc_blocks(real, fake, 5)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20


def direct_nearest(
    queries: torch.Tensor, pool: torch.Tensor, chunk: int
) -> tuple[np.ndarray, np.ndarray]:
    """The memorisation check's earlier search: each query chunk against the whole pool."""
    p = pool.flatten(1).float()
    distances, indices = [], []
    for part in queries.flatten(1).float().split(chunk):
        squared = (part**2).sum(1, keepdim=True) - 2.0 * part @ p.T + (p**2).sum(1)
        best, where = squared.min(dim=1)
        distances.append(best.clamp_min(0.0).sqrt())
        indices.append(where)
    return torch.cat(distances).numpy(), torch.cat(indices).numpy()


def images(count: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(count, 1, 28, 28, generator=generator) * 2.0 - 1.0


def queries_and_pool() -> tuple[torch.Tensor, torch.Tensor]:
    pool = images(700, 0)
    pool[500] = pool[100]  # a tie: the earlier row wins, as in one minimum
    queries = torch.cat([images(37, 1), pool[[100, 3, 699]]])
    queries[5] = float("nan")  # a diverged sample stays NaN, as before
    return queries, pool


@pytest.mark.parametrize("block_bytes", [50_000, 2**26])
def test_nearest_in_one_block_is_the_earlier_search_bit_for_bit(monkeypatch, block_bytes) -> None:
    monkeypatch.setattr(neighbours, "BLOCK_BYTES", block_bytes)
    queries, pool = queries_and_pool()
    assert neighbours.rows_per_block(16, itemsize=4) >= len(pool)
    distance, index = nearest(queries, pool, chunk=16)
    expected_distance, expected_index = direct_nearest(queries, pool, chunk=16)
    np.testing.assert_array_equal(distance, expected_distance)
    np.testing.assert_array_equal(index, expected_index)


def test_nearest_in_blocks_equals_the_earlier_search(small_blocks) -> None:
    """Across blocks only the matrix products' rounding differs (float32: the squared distance
    to ~1e-4, so an exact copy's distance is 0 or ~0.01); the neighbours are the same."""
    queries, pool = queries_and_pool()
    assert neighbours.rows_per_block(16, itemsize=4) < len(pool)
    distance, index = nearest(queries, pool, chunk=16)
    expected_distance, expected_index = direct_nearest(queries, pool, chunk=16)
    np.testing.assert_allclose(distance, expected_distance, rtol=1e-6, atol=0.02)
    np.testing.assert_array_equal(np.delete(index, 5), np.delete(expected_index, 5))
    assert np.isnan(distance[5]) and index[-3] == 100 and index[-2] == 3


def test_memorisation_unchanged_by_blocks(monkeypatch) -> None:
    pool, heldout = images(400, 2), images(60, 3)
    samples = torch.cat([images(50, 4), pool[:6]])
    whole = memorisation(samples, pool, heldout)
    monkeypatch.setattr(memorisation_module, "rows_per_block", lambda *_, **__: 7)
    blocks = memorisation(samples, pool, heldout)
    assert blocks.to_dict() == pytest.approx(whole.to_dict(), rel=1e-6)
    # the six training images among the samples: near-copies, closest, whatever their order
    assert whole.near_copy_share >= 6 / 56
    copies = {(i, j) for i, j, _ in whole.closest[:6]}
    assert {(i, j) for i, j, _ in blocks.closest[:6]} == copies == {(50 + n, n) for n in range(6)}
