"""The noise source attacked: seeds to brute-force, streams to replay, floating-point patterns to
read, and the samplers' distributions checked against their exact laws."""

from __future__ import annotations

import ast
import inspect
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedgs.privacy import discrete_noise, randomness
from fedgs.privacy.discrete_noise import (
    add_discrete_gaussian,
    discrete_gaussian,
    discrete_laplace,
    grid_step,
)
from fedgs.privacy.randomness import SecureRandom
from fedgs.privacy.sanitizer import clip_rows, noise_std, sanitize

ROOT = Path(__file__).resolve().parents[1]
P_FLOOR = 1e-6  # a correct sampler fails a test one time in a million


def _old_scheme_reply(rows: torch.Tensor, clip: float, sigma: float, seed: int) -> torch.Tensor:
    """The sanitizer as it was at cfba070: torch's generator seeded with secret bits."""
    clipped, _ = clip_rows(rows, clip)
    noise = torch.randn(clipped.shape, generator=torch.Generator().manual_seed(seed))
    return clipped + noise * noise_std(clip, sigma)


def _seeds_explaining(reply: torch.Tensor, clip: float, sigma: float, seeds: range) -> list[int]:
    """A hostile server's search: the seeds whose first 16 normals leave a residual on row 0 of
    norm <= C (the clipped row's bound); a wrong seed leaves ~8 * 2C * sigma."""
    head = reply[0, :16].double()
    found = []
    for seed in seeds:
        guess = torch.randn(16, generator=torch.Generator().manual_seed(seed)).double()
        if float((head - guess * noise_std(clip, sigma)).norm()) <= clip:
            found.append(seed)
    return found


def test_the_old_seeding_kept_32_bits_and_a_server_strips_its_noise() -> None:
    # torch keeps the low 32 bits of a seed: 2^32 candidates, whatever secrets.randbits(63) gave
    a = torch.randn(8, generator=torch.Generator().manual_seed(2**40 + 5))
    assert torch.equal(a, torch.randn(8, generator=torch.Generator().manual_seed(5)))
    # on a key range cut to 2^12 the attack runs in a second and recovers the clipped rows
    rows, clip, sigma = torch.randn(4, 784) * 0.01, 1.0, 100.0
    secret = 2**40 + 3_141
    reply = _old_scheme_reply(rows, clip, sigma, secret)
    (seed,) = _seeds_explaining(reply, clip, sigma, range(2**12))
    noise = torch.randn(reply.shape, generator=torch.Generator().manual_seed(seed))
    recovered = reply - noise * noise_std(clip, sigma)
    assert torch.allclose(recovered, clip_rows(rows, clip)[0], atol=1e-3)


def test_the_sanitizer_has_no_seed_to_find() -> None:
    assert "generator" not in inspect.signature(sanitize).parameters
    assert not inspect.signature(SecureRandom).parameters  # nothing to pass a seed through
    rows, clip, sigma = torch.randn(4, 784) * 0.01, 1.0, 100.0
    reply = sanitize(rows, clip, sigma).values
    assert _seeds_explaining(reply, clip, sigma, range(2**12)) == []
    assert not torch.equal(reply, sanitize(rows, clip, sigma).values)  # no replay either


def test_the_key_comes_from_os_urandom_and_only_from_it(monkeypatch) -> None:
    fresh = [SecureRandom().words(4) for _ in range(2)]
    assert not np.array_equal(*fresh)
    monkeypatch.setattr(randomness.os, "urandom", lambda n: bytes(n))  # a broken OS, for the test
    fixed = [SecureRandom().words(4) for _ in range(2)]
    assert np.array_equal(*fixed)  # nothing but os.urandom keys the stream


def test_a_stream_does_not_end_where_the_os_bytes_put_its_block_counter(monkeypatch) -> None:
    # the counter was once the nonce's first 4 random bytes: from 0xffffffff one block remained,
    # and a long reply (a Fed-Avg GAN update) failed with "the 32-bit counter would overflow"
    monkeypatch.setattr(randomness.os, "urandom", lambda n: b"\xff" * n)
    assert SecureRandom().words(1_000).size == 1_000  # 125 blocks


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.floats(-1.0, 1.0, allow_nan=False, width=32), min_size=8, max_size=8),
    sigma=st.sampled_from([0.5, 1.07, 30.0]),
)
def test_releases_lie_on_one_lattice_whatever_the_input(values: list[float], sigma: float) -> None:
    """Mironov's attack reads which floats a release can be; here every release is an integer
    multiple of a power-of-two step that depends on the public C and row length only."""
    rows = torch.tensor([values], dtype=torch.float32)
    released = sanitize(rows, 1.0, sigma).values.double().numpy()
    step = grid_step(2.0, 8)
    assert step == 2.0 ** math.floor(math.log2(2.0 * discrete_noise.GRID_SLACK / math.sqrt(8)))
    units = released / step
    assert np.array_equal(units, np.rint(units))


def test_rounding_costs_less_noise_than_the_slack_pays_for() -> None:
    # the grid moves a row by at most step * sqrt(d) / 2; the noise is widened by the slack
    step = grid_step(2.0, 784)
    assert step * math.sqrt(784) <= 2.0 * discrete_noise.GRID_SLACK
    zeros = np.zeros((256, 784))  # the std's relative standard error: 0.16%, so 1% is 6.3 SE
    out = add_discrete_gaussian(zeros, 2.0, 2.0, 784)
    assert out.std() == pytest.approx(2.0 * (1 + discrete_noise.ACCOUNTING_SLACK), rel=0.01)


def _chi_square_p(observed: np.ndarray, expected_probability: np.ndarray) -> float:
    """p-value of observed counts against probabilities, tails pooled to expected counts >= 5."""
    expected = expected_probability / expected_probability.sum() * observed.sum()
    keep = expected >= 5
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] < 5:  # fold a small pooled tail into the largest cell
        obs, exp = obs[:-1].copy(), exp[:-1].copy()
        obs[np.argmax(exp)] += observed[~keep].sum()
        exp[np.argmax(exp)] += expected[~keep].sum()
    return float(stats.chisquare(obs, exp).pvalue)


def _counts(samples: np.ndarray, support: np.ndarray) -> np.ndarray:
    assert samples.min() >= support[0] and samples.max() <= support[-1]
    return np.bincount(samples - support[0], minlength=support.size)


@pytest.mark.parametrize("sigma", [0.7, 3.3, 40.0])
def test_discrete_gaussian_follows_its_law(sigma: float) -> None:
    n = 400_000
    samples = discrete_gaussian(SecureRandom(), sigma, n)
    support = np.arange(-int(40 * sigma) - 40, int(40 * sigma) + 41)
    law = np.exp(-(support.astype(float) ** 2) / (2 * sigma**2))
    assert _chi_square_p(_counts(samples, support), law) > P_FLOOR
    # the same samples against a 5% wider law fail: the test can tell
    wider = np.exp(-(support.astype(float) ** 2) / (2 * (1.05 * sigma) ** 2))
    if sigma > 1:
        assert _chi_square_p(_counts(samples, support), wider) < P_FLOOR


@pytest.mark.parametrize("scale", [0.3, 1.0, 7.5])
def test_discrete_laplace_follows_its_law(scale: float) -> None:
    n = 400_000
    samples = discrete_laplace(SecureRandom(), scale, n)
    support = np.arange(-int(60 * scale) - 60, int(60 * scale) + 61)
    law = np.exp(-np.abs(support) / scale)
    assert _chi_square_p(_counts(samples, support), law) > P_FLOOR
    shifted = np.exp(-np.abs(support - 1) / scale)
    assert _chi_square_p(_counts(samples, support), shifted) < P_FLOOR


@pytest.mark.parametrize("bound", [7, 2**40 + 3])
def test_uniform_integers_have_no_modulo_bias(bound: int) -> None:
    draws = SecureRandom().integers_below(bound, 200_000)
    assert draws.min() >= 0 and draws.max() < bound
    cells = np.bincount((draws % 7).astype(np.int64), minlength=7)
    weights = np.array([len(range(r, bound, 7)) for r in range(7)], dtype=float)
    assert _chi_square_p(cells, weights) > P_FLOOR


@pytest.mark.parametrize("gamma", [0.0, 0.4, 2.7, 6.0])
def test_exp_coins_land_with_probability_e_to_the_minus_gamma(gamma: float) -> None:
    n = 1_000_000
    heads = int(SecureRandom().bernoulli_exp(np.full(n, gamma)).sum())
    p = math.exp(-gamma)
    assert stats.binomtest(heads, n, p).pvalue > P_FLOOR or p == 1.0 and heads == n


def test_secure_choice_is_uniform_without_replacement() -> None:
    rng = SecureRandom()
    picks = np.array([rng.choice(6, 2) for _ in range(30_000)])
    assert (picks[:, 0] != picks[:, 1]).all()
    firsts = np.bincount(picks[:, 0], minlength=6)
    assert _chi_square_p(firsts, np.ones(6)) > P_FLOOR
    with pytest.raises(ValueError):
        rng.choice(3, 4)


# Where a mechanism's randomness lives: none of these may call a seedable generator.
MECHANISM_FILES = [
    "fedgs/privacy/sanitizer.py",
    "fedgs/privacy/topagg.py",
    "fedgs/privacy/pate.py",
    "fedgs/privacy/dp_fedavg.py",
    "fedgs/privacy/discrete_noise.py",
    "fedgs/privacy/randomness.py",
    "fedgs/privacy/client_sampling.py",
    "client/gswgan_session.py",
    "client/datalens_session.py",
    "client/pate_gan_session.py",
    "server/gswgan_strategy.py",
    "server/datalens_strategy.py",
    "server/pate_gan_strategy.py",
    "server/fedavg_gan_strategy.py",
    "server/teacher_strategy.py",
]
SEEDABLE = {
    "manual_seed", "seed", "Generator", "default_rng", "RandomState", "randn", "rand",
    "randint", "randperm", "normal", "laplace", "randbits", "random", "shuffle", "choice",
}  # fmt: skip
# The one allowed use: a reproducible run's client sampler, which voids amplified figures.
ALLOWED = {("fedgs/privacy/client_sampling.py", "np.random.default_rng")}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else "?"


def _random_calls(path: str, root: Path = ROOT) -> list[str]:
    tree = ast.parse((root / path).read_text(), path)
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
            name = _dotted(node.func)
            module = name.split(".")[0]
            if name.split(".")[-1] in SEEDABLE and module in {"torch", "np", "numpy", "random"}:
                calls.append(name)
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] + [getattr(node, "module", "") or ""]
            calls += [f"import {n}" for n in names if n in {"random", "secrets"}]
    return [c for c in calls if (path, c) not in ALLOWED]


@pytest.mark.parametrize("path", MECHANISM_FILES)
def test_no_mechanism_calls_a_seedable_generator(path: str) -> None:
    assert _random_calls(path) == []


def test_the_ast_check_finds_what_it_looks_for(tmp_path) -> None:
    bad = "import secrets\nimport torch\nx = torch.randn(3, generator=torch.Generator())\n"
    (tmp_path / "bad.py").write_text(bad)
    found = _random_calls("bad.py", tmp_path)
    assert "torch.randn" in found and "torch.Generator" in found and "import secrets" in found


def test_a_large_draw_split_over_threads_keeps_its_law_and_fresh_keys() -> None:
    count = 4 * discrete_noise.PARALLEL_MIN_CHUNK  # DP-FedAvg-sized: split over threads
    out = add_discrete_gaussian(np.zeros(count), 1.0, 1.0, count)
    step = grid_step(1.0, count)
    units = out / step
    assert np.array_equal(units, np.rint(units))
    assert out.std() == pytest.approx(1.0 + discrete_noise.ACCOUNTING_SLACK, rel=0.005)
    quarter = count // 4  # each thread's share drew from its own key: no two shares repeat
    shares = [units[i * quarter : (i + 1) * quarter][:64] for i in range(4)]
    assert len({tuple(share) for share in shares}) == 4
