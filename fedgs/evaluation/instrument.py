"""The evaluation instrument: every quality figure of one sampler, on evaluation writers only.

One `Instrument` per dataset holds what all scores share: the domain classifier (trained on the
classifier half of the evaluation images), the real reference (the other half), the downstream
test set (all evaluation images), the clients' training images (for the real baseline, the
controls and the memorisation check) and the real-data baselines. `Instrument.score` turns any
``labels -> images`` sampler (a run's generator or a control) into one row:

- downstream utility (primary): CNN and MLP trained on ``samples`` synthetic images, tested on
  the evaluation writers' real images, absolute and divided by the same classifier trained on as
  many real training-writer images (calibrated);
- precision, recall, density, coverage (overall and per class), per-class and overall FID,
  intra-class diversity, label agreement, on the domain classifier's features;
- the memorisation check (`fedgs.metrics.memorisation`).

What depends only on the dataset split and the settings, not on the sampler being scored (the
real-data baselines the calibration divides by and the control rows), is cached on disk when the
instrument is given a `ResultCache` (``fedgs evaluate`` passes one under $FEDGS_CACHE): keyed by
the split's fingerprint (the stored data's content hash and the clients picked), the options,
the domain classifier's weights (controls only) and `INSTRUMENT_VERSION`, so a change of any of
them computes them afresh and an unchanged split never retrains them. Each control's row is
cached on its own (its name and `provenance` join the key), so a control added later, or a
new public font set, scores that row alone; rows cached in the older layout (one entry of all
rows under the controls' key, e.g. the complete FEMNIST split's, ~30 minutes of work) are read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tqdm.auto import tqdm

from fedgs.evaluation.cache import ResultCache
from fedgs.evaluation.synthetic import balanced_labels
from fedgs.evaluation.utility import accuracy_of, real_subset
from fedgs.metrics.classifier import accuracy, predict_in_batches
from fedgs.metrics.controls import Sampler, controls, provenance
from fedgs.metrics.evaluator import evaluation_classifier, evaluation_halves, split_record
from fedgs.metrics.fidelity import RealFeatures, feature_scores
from fedgs.metrics.memorisation import Memorisation, memorisation, nearest
from fedgs.metrics.scores import frechet_distance, label_agreement

if TYPE_CHECKING:
    from fedgs.data import FederatedDataset

DOWNSTREAM = ("cnn", "mlp")
# bump when a figure's definition changes: cached rows are then stale (2: the downstream CNN's
# dropout masks drawn from the seed, not from whatever state the global generator was in)
INSTRUMENT_VERSION = 2


@dataclass(frozen=True)
class InstrumentOptions:
    samples: int = 10_000  # downstream training set (60,000 = the GS-WGAN paper's setting)
    feature_samples: int = 2_000  # for PRDC, FID, label agreement and memorisation
    epochs: int = 5  # of the downstream CNN and MLP
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("samples", "feature_samples", "epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '-')} must be >= 1")


@dataclass
class Score:
    """One sampler's row and its closest sample/training-image pairs (for the figure)."""

    name: str
    row: dict[str, Any]
    closest: list[tuple[torch.Tensor, torch.Tensor, float]] = field(default_factory=list)


class Instrument:
    """Everything the scores of one dataset share; see the module docstring."""

    def __init__(
        self,
        dataset: FederatedDataset,
        options: InstrumentOptions | None = None,
        cache_dir: Path | None = None,
        baselines: ResultCache | None = None,
    ) -> None:
        self.dataset = dataset
        self.baselines = baselines  # None: the split's baselines and controls are not cached
        self.options = options or InstrumentOptions()
        self.num_classes = dataset.num_classes
        self.test = dataset.test_arrays()  # read once: the halves below are views of it
        self.classifier = evaluation_classifier(dataset, cache_dir, self.test)
        _, self.reference = evaluation_halves(dataset, self.test)
        self.training = dataset.train_arrays()
        self.split = split_record(dataset) | {
            "classifier_test_accuracy": accuracy(self.classifier, *self.reference)
        }
        _, self.reference_features = predict_in_batches(self.classifier, self.reference[0])
        self.real_features = RealFeatures(
            self.reference_features, self.reference[1], self.num_classes
        )

    def baseline_key(self, what: str) -> dict[str, Any]:
        """The cache key of a result that depends on the split and the settings only."""
        o = self.options
        key = {
            "what": what,
            "dataset": self.dataset.fingerprint,
            "samples": o.samples,
            "epochs": o.epochs,
            "seed": o.seed,
            "version": INSTRUMENT_VERSION,
        }
        if what == "controls":  # their feature figures come from the domain classifier
            key |= {"feature_samples": o.feature_samples, "classifier": self.classifier_digest}
        return key

    @cached_property
    def classifier_digest(self) -> str:
        """SHA-256 of the domain classifier's weights (part of the controls' cache key)."""
        digest = hashlib.sha256()
        for name, tensor in sorted(self.classifier.state_dict().items()):
            digest.update(name.encode())
            digest.update(tensor.detach().contiguous().numpy().tobytes())
        return digest.hexdigest()

    def _split_cached(self, what: str, compute: Callable[[], Any]) -> Any:
        if self.baselines is None:
            return compute()
        key = self.baseline_key(what)
        value = self.baselines.get(key)
        if value is None:
            value = compute()
            self.baselines.put(key, value)
        return value

    @cached_property
    def real_accuracy(self) -> dict[str, float]:
        """Each downstream classifier trained on ``samples`` real training-writer images."""
        o = self.options

        def compute() -> dict[str, float]:
            real = real_subset(self.training, o.samples, o.seed)
            return {
                name: accuracy_of(name, real, self.test, self.num_classes, o.epochs, o.seed)[
                    "accuracy"
                ]
                for name in DOWNSTREAM
            }

        return self._split_cached("real-baseline", compute)

    @cached_property
    def heldout(self) -> torch.Tensor:
        """Held-out real images of the memorisation check (reference half, evaluation writers)."""
        return self.reference[0][: self.options.feature_samples]

    @cached_property
    def heldout_distances(self) -> Any:
        distances, _ = nearest(self.heldout, self.training[0])
        return distances

    def score(self, name: str, sample: Sampler) -> Score:
        """All figures of ``sample(labels) -> images`` (images in [-1, 1])."""
        o = self.options
        labels = balanced_labels(max(o.samples, o.feature_samples), self.num_classes)
        images = sample(labels).float().clamp(-1.0, 1.0)
        row: dict[str, Any] = {"name": name}
        for classifier in DOWNSTREAM:
            train = (images[: o.samples], labels[: o.samples])
            result = accuracy_of(classifier, train, self.test, self.num_classes, o.epochs, o.seed)
            row[f"{classifier}_accuracy"] = result["accuracy"]
            row[f"{classifier}_calibrated"] = result["accuracy"] / self.real_accuracy[classifier]
        few, few_labels = images[: o.feature_samples], labels[: o.feature_samples]
        probs, features = predict_in_batches(self.classifier, few)
        row["label_agreement"] = label_agreement(probs, few_labels, few)
        row["fid_domain"] = frechet_distance(features, self.reference_features)
        row |= feature_scores(features, few_labels, self.real_features)
        copies = memorisation(few, self.training[0], self.heldout, self.heldout_distances)
        row |= copies.to_dict()
        return Score(name, row, self._pairs(few, copies))

    def _pairs(
        self, samples: torch.Tensor, copies: Memorisation
    ) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
        return [(samples[i], self.training[0][j], d) for i, j, d in copies.closest]

    def controls(self, named: dict[str, Sampler]) -> list[Score]:
        """The controls ``named`` (samplers of `fedgs.metrics.controls`), scored like a run
        (never cached)."""
        return [self.score(n, s) for n, s in tqdm(named.items(), desc="controls", unit="control")]

    def control_key(self, name: str) -> dict[str, Any]:
        """One control row's cache key: the controls' key, its name and its `provenance`."""
        return self.baseline_key("controls") | {"control": name} | provenance(name)

    def control_rows(self) -> list[dict[str, Any]]:
        """The controls' rows in table order; only those this split and these settings have no
        cached row for are scored (and cached)."""
        named = controls(self.training, self.num_classes)
        if self.baselines is None:
            return [c.row for c in self.controls(named)]
        rows = self._cached_control_rows(self.baselines, list(named))
        missing = {n: s for n, s in named.items() if n not in rows}
        if missing:
            for scored in self.controls(missing):
                self.baselines.put(self.control_key(scored.name), scored.row)
                rows[scored.name] = scored.row
        return [rows[n] for n in named]

    def _cached_control_rows(
        self, cache: ResultCache, names: list[str]
    ) -> dict[str, dict[str, Any]]:
        """The cached rows of ``names``: each from its own entry, else (a control without
        `provenance`) from the older layout, one entry of all rows under the controls' key."""
        older = cache.get(self.baseline_key("controls")) or []
        rows = {r["name"]: r for r in older if not provenance(r["name"])}
        for name in names:
            if (row := cache.get(self.control_key(name))) is not None:
                rows[name] = row
        return rows

    def record(self) -> dict[str, Any]:
        """The instrument's settings, for a run's summary and report."""
        return {"options": asdict(self.options), "split": self.split, "real": self.real_accuracy}
