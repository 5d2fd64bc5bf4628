"""The SecAgg+ masks: ChaCha20 keyed through HKDF, exact uniform integers mod 2^k, no seeded RNG."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import fedgs.secagg
from fedgs.secagg.prg import PAIR_MASK, SELF_MASK, derive_key, mask_vector

SEED = bytes(range(32))


def test_a_mask_is_a_function_of_its_key() -> None:
    key = derive_key(SEED, SELF_MASK)
    np.testing.assert_array_equal(mask_vector(key, 100, 32), mask_vector(key, 100, 32))
    assert mask_vector(key, 100, 32)[:10].tolist() == mask_vector(key, 10, 32).tolist()


def test_any_one_bit_change_of_the_seed_changes_the_mask() -> None:
    base = mask_vector(derive_key(SEED, SELF_MASK), 8, 32)
    seen = {base.tobytes()}
    for bit in range(8 * len(SEED)):
        flipped = bytearray(SEED)
        flipped[bit // 8] ^= 1 << (bit % 8)
        mask = mask_vector(derive_key(bytes(flipped), SELF_MASK), 8, 32)
        assert not np.array_equal(mask, base)
        seen.add(mask.tobytes())
    assert len(seen) == 8 * len(SEED) + 1


def test_the_label_separates_self_and_pairwise_masks() -> None:
    assert derive_key(SEED, SELF_MASK) != derive_key(SEED, PAIR_MASK)


@pytest.mark.parametrize("bits", [1, 7, 32, 62])
def test_values_lie_in_0_2k_as_uint64(bits: int) -> None:
    mask = mask_vector(derive_key(os.urandom(32), SELF_MASK), 20_000, bits)
    assert mask.dtype == np.uint64 and mask.shape == (20_000,)
    assert int(mask.max()) < 2**bits
    assert int(mask.max()) >= (2**bits - 1) * 0.99  # the top of the range is reached
    assert np.mean(mask >> np.uint64(bits - 1)) == pytest.approx(0.5, abs=0.02)  # top bit fair


def test_values_are_uniform_mod_2k() -> None:
    mask = mask_vector(derive_key(SEED, PAIR_MASK), 256 * 200, 8)
    assert stats.chisquare(np.bincount(mask.astype(np.int64), minlength=256)).pvalue > 1e-6
    wide = mask_vector(derive_key(SEED, SELF_MASK), 20_000, 62).astype(float) / 2**62
    assert stats.kstest(wide, "uniform").pvalue > 1e-6


def test_bad_keys_and_moduli_are_refused() -> None:
    with pytest.raises(ValueError):
        mask_vector(bytes(31), 4, 8)
    with pytest.raises(ValueError):
        mask_vector(bytes(32), 4, 0)
    with pytest.raises(ValueError):
        derive_key(b"", SELF_MASK)


def test_the_package_uses_no_seeded_generator() -> None:
    """No numpy / torch / random-module generator and no Flower pseudo_rand_gen in the code."""
    banned = {"random", "RandomState", "default_rng", "pseudo_rand_gen", "torch", "secrets"}
    for path in Path(fedgs.secagg.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Attribute):
                names = [node.attr]
            elif isinstance(node, ast.Name):
                names = [node.id]
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name.split(".")[-1] for a in node.names] + (
                    (node.module or "").split(".") if isinstance(node, ast.ImportFrom) else []
                )
            assert not banned & set(names), f"{path.name}: {banned & set(names)}"
