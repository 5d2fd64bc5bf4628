"""Downstream utility: classifiers trained on synthetic data, tested on the real test split.

The calibrated accuracy divides by the same classifier's accuracy when trained on as many real
training images (the paper's "relative to training on real data"), so it says how much of the
real data's usefulness the generator kept. Each result is cached: synthetic results by the
generator's hash and options, real-data baselines by the dataset's fingerprint.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import torch
from tqdm.auto import tqdm

from fedgs.evaluation.cache import ResultCache
from fedgs.evaluation.classifiers import Arrays, fit_predict

COLUMNS = (
    "classifier",
    "synthetic_accuracy",
    "real_accuracy",
    "calibrated_accuracy",
    "train_samples",
    "real_train_samples",
)


@dataclass(frozen=True)
class UtilityRow:
    classifier: str
    synthetic_accuracy: float
    real_accuracy: float
    train_samples: int  # synthetic images the classifier was trained on
    real_train_samples: int  # real images of the baseline (fewer when the split is smaller)

    @property
    def calibrated_accuracy(self) -> float:
        return self.synthetic_accuracy / self.real_accuracy if self.real_accuracy > 0 else 0.0

    def to_dict(self) -> dict[str, float | int | str]:
        return asdict(self) | {"calibrated_accuracy": self.calibrated_accuracy}


def real_subset(train: Arrays, count: int, seed: int) -> Arrays:
    """``count`` real training images drawn without replacement (all of them if fewer)."""
    if count >= train[0].shape[0]:
        return train
    idx = torch.randperm(train[0].shape[0], generator=torch.Generator().manual_seed(seed))[:count]
    return train[0][idx], train[1][idx]


def accuracy_of(
    name: str, train: Arrays, test: Arrays, num_classes: int, epochs: int, seed: int
) -> dict[str, float]:
    started = time.perf_counter()
    predicted = fit_predict(name, train, test[0], num_classes, epochs, seed)
    correct = (torch.from_numpy(predicted).long() == test[1].long()).float().mean()
    return {"accuracy": float(correct), "seconds": time.perf_counter() - started}


@dataclass(frozen=True)
class UtilitySetup:
    """Everything a table depends on besides the classifiers; the cache keys are built here."""

    num_classes: int
    samples: int
    epochs: int
    seed: int
    generator_sha256: str
    dataset_fingerprint: str

    def synthetic_key(self, name: str) -> dict:
        return {
            "what": "synthetic",
            "classifier": name,
            "generator": self.generator_sha256,
            "dataset": self.dataset_fingerprint,
            "samples": self.samples,
            "epochs": self.epochs,
            "seed": self.seed,
        }

    def real_key(self, name: str, count: int) -> dict:
        return {
            "what": "real",
            "classifier": name,
            "dataset": self.dataset_fingerprint,
            "samples": count,
            "epochs": self.epochs,
            "seed": self.seed,
        }


def utility_table(
    classifiers: list[str],
    setup: UtilitySetup,
    synthetic: Callable[[], Arrays],
    real_train: Arrays,
    real_test: Arrays,
    run_cache: ResultCache,
    baseline_cache: ResultCache,
) -> list[UtilityRow]:
    """One row per classifier; ``synthetic()`` is called only if some result is not cached."""
    real = real_subset(real_train, setup.samples, setup.seed)
    count = int(real[0].shape[0])
    synthetic = cache(synthetic)  # drawn once, and only if needed
    rows = []
    for name in tqdm(classifiers, desc="utility", unit="classifier"):
        entries = {}
        for kind, key, train in (
            ("synthetic", setup.synthetic_key(name), synthetic),
            ("real", setup.real_key(name, count), lambda: real),
        ):
            store = run_cache if kind == "synthetic" else baseline_cache
            entry = store.get(key)
            if entry is None:
                entry = accuracy_of(
                    name, train(), real_test, setup.num_classes, setup.epochs, setup.seed
                )
                store.put(key, entry)
            entries[kind] = entry
        rows.append(
            UtilityRow(
                classifier=name,
                synthetic_accuracy=entries["synthetic"]["accuracy"],
                real_accuracy=entries["real"]["accuracy"],
                train_samples=setup.samples,
                real_train_samples=count,
            )
        )
    return rows


def write_csv(rows: list[UtilityRow], path: Path) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow(row.to_dict())


def to_markdown(rows: list[UtilityRow]) -> str:
    """The table as in the paper's Table A1, with the mean over classifiers as the last row."""
    lines = [
        "| classifier | synthetic → real test | real → real test | calibrated |",
        "| --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r.classifier} | {r.synthetic_accuracy:.4f} | {r.real_accuracy:.4f} "
            f"| {r.calibrated_accuracy:.4f} |"
        )
    if rows:
        n = len(rows)
        lines.append(
            f"| **mean** | {sum(r.synthetic_accuracy for r in rows) / n:.4f} "
            f"| {sum(r.real_accuracy for r in rows) / n:.4f} "
            f"| {sum(r.calibrated_accuracy for r in rows) / n:.4f} |"
        )
    return "\n".join(lines) + "\n"
