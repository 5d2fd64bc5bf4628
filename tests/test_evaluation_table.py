"""The utility table, its cache, the generator loader and the run-directory reader (fast)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from evaluation_runs import FORMATS, make_run

from fedgs.evaluation.cache import ResultCache
from fedgs.evaluation.generator_loader import load_generator
from fedgs.evaluation.privacy_figures import all_figures, headline
from fedgs.evaluation.run_files import RunError, RunFiles
from fedgs.evaluation.synthetic import synthesize
from fedgs.evaluation.utility import (
    COLUMNS,
    UtilitySetup,
    to_markdown,
    utility_table,
    write_csv,
)


def _blobs(count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Separable fake 'digits': class c lights up row band c (easy for every classifier)."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(count) % 10
    images = torch.full((count, 1, 28, 28), -1.0) + 0.1 * torch.rand(
        count, 1, 28, 28, generator=generator
    )
    for c in range(10):
        images[labels == c, :, 2 * c + 4, :] = 1.0
    return images, labels


@pytest.mark.parametrize("kind", FORMATS)
def test_loader_rebuilds_every_runner_format(tmp_path: Path, kind: str) -> None:
    run = make_run(tmp_path / kind, kind)
    loaded = load_generator(run)
    assert loaded.strategy == (kind if kind in ("fedavg-gan", "pate-gan") else "gswgan")
    assert loaded.num_classes == 10 and len(loaded.sha256) == 64
    images, labels = synthesize(loaded, 25, seed=1)
    assert images.shape == (25, 1, 28, 28) and images.abs().max() <= 1.0
    assert torch.bincount(labels, minlength=10).tolist() == [3] * 5 + [2] * 5
    assert torch.equal(images, synthesize(loaded, 25, seed=1)[0])  # latents from the seed
    spec = RunFiles.open(run).data_spec()
    assert (spec.dataset, spec.data_dir, spec.num_clients) == (
        "embedded",
        None,
        50 if kind.startswith("centralized") else None,
    )


def test_missing_or_broken_generator_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="no generator.pt"):
        load_generator(tmp_path)
    (tmp_path / "generator.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(RunError, match="not a readable generator checkpoint"):
        load_generator(tmp_path)
    with pytest.raises(RunError, match="no such run directory"):
        RunFiles.open(tmp_path / "missing")


def test_epsilons_carry_their_threat_models(tmp_path: Path) -> None:
    gswgan = RunFiles.open(make_run(tmp_path / "g", "simulate"))
    models = {f.threat_model: f for f in all_figures(gswgan)}
    assert set(models) == {"untrusted-server", "trusted-sampler", "paper"}
    assert headline(gswgan).epsilon == models["untrusted-server"].epsilon > 0
    fedavg = RunFiles.open(make_run(tmp_path / "f", "fedavg-gan"))
    figures = {f.threat_model: f.epsilon for f in all_figures(fedavg)}
    assert figures["untrusted-server"] is None  # no guarantee: reported with a note, no number
    assert headline(fedavg).epsilon == figures["trusted-server"] > 0
    teachers = RunFiles.open(make_run(tmp_path / "p", "pate-gan"))
    assert headline(teachers).threat_model == "trusted-aggregator"
    assert headline(teachers).epsilon == 3.0


def test_table_shape_columns_and_cache(tmp_path: Path) -> None:
    classifiers = ["mlp", "gaussian-nb", "lda"]
    setup = UtilitySetup(
        10, samples=300, epochs=2, seed=0, generator_sha256="g", dataset_fingerprint="d"
    )
    calls = []

    def synthetic() -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(1)
        return _blobs(300, seed=1)

    caches = ResultCache(tmp_path / "run"), ResultCache(tmp_path / "baselines")
    real_train, real_test = _blobs(500, seed=2), _blobs(200, seed=3)
    rows = utility_table(classifiers, setup, synthetic, real_train, real_test, *caches)
    assert [r.classifier for r in rows] == classifiers
    for row in rows:
        assert 0.9 <= row.synthetic_accuracy <= 1.0 and 0.9 <= row.real_accuracy <= 1.0
        assert row.calibrated_accuracy == pytest.approx(row.synthetic_accuracy / row.real_accuracy)
        assert (row.train_samples, row.real_train_samples) == (300, 300)

    write_csv(rows, tmp_path / "utility.csv")
    with (tmp_path / "utility.csv").open(newline="") as handle:
        table = list(csv.DictReader(handle))
    assert tuple(table[0]) == COLUMNS and len(table) == len(classifiers)
    markdown = to_markdown(rows).splitlines()
    assert len(markdown) == 2 + len(classifiers) + 1 and markdown[-1].startswith("| **mean**")

    again = utility_table(classifiers, setup, synthetic, real_train, real_test, *caches)
    assert calls == [1] and again == rows  # every result came from the cache
