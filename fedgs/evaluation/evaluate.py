"""``fedgs evaluate``: score finished runs and write their tables and figures.

Writes RUN_DIR/evaluation/ for each run: ``quality.md`` (the instrument's table: this run next
to the controls, `fedgs.evaluation.instrument`), ``utility.csv`` and ``utility.md`` (the Table
A1-style table), ``summary.json`` (every figure, the writer split, every epsilon with its threat
model, options, file list) and ``plots/`` (PNG + CSV each, the closest sample/training pairs
among them). Each run is scored on its own data split (the dataset, data folder, labels, clients
and seed its config.json records). Runs on the same split share one instrument, so the controls
and the real-data baselines are computed once per split and settings and cached under
$FEDGS_CACHE/evaluation-baselines (`Split`); a run's own results are cached under its
``evaluation/cache`` keyed by the generator.pt hash and the options, so evaluating the same
checkpoint again only redraws.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch

from fedgs.data import load_federated
from fedgs.data.cache import cache_root
from fedgs.data.files import file_sha256
from fedgs.evaluation import plots
from fedgs.evaluation.cache import ResultCache
from fedgs.evaluation.classifiers import available
from fedgs.evaluation.generator_loader import LoadedGenerator, load_generator
from fedgs.evaluation.gradnorms import GradNorms, gradient_norms
from fedgs.evaluation.instrument import (
    DOWNSTREAM,
    INSTRUMENT_VERSION,
    Instrument,
    InstrumentOptions,
)
from fedgs.evaluation.names import CLASSIFIER_NAMES
from fedgs.evaluation.privacy_figures import all_figures
from fedgs.evaluation.quality_table import markdown
from fedgs.evaluation.run_files import DataSpec, RunFiles
from fedgs.evaluation.synthetic import synthesize
from fedgs.evaluation.utility import UtilityRow, UtilitySetup, to_markdown, utility_table, write_csv


def baselines_cache() -> ResultCache:
    """Where the results that depend on a data split only are kept (controls, real baselines)."""
    return ResultCache(cache_root() / "evaluation-baselines")


@dataclass(frozen=True)
class EvaluationOptions:
    samples: int = 10_000  # downstream training set (60,000 = the GS-WGAN paper's setting)
    classifiers: tuple[str, ...] = DOWNSTREAM  # more of CLASSIFIER_NAMES add Table A1 rows
    epochs: int = 5  # of the torch MLP and CNN
    seed: int = 0
    score_samples: int = 2_000  # PRDC / FID / label agreement / memorisation samples
    inception_weights: Path | None = None
    inception_samples: int = 2_000
    grad_norm_samples: int = 1_024  # 0 = no gradient-norm figure
    grad_norm_warm_start: int | None = None  # None: the run's own warm-start steps
    data_dir: str | None = None  # where the run's data are now, if not where it recorded
    num_clients: int | None = None  # None: the run's own clients; 0: all of the dataset's
    controls: bool = True  # score the controls next to the runs (cached per split)

    def __post_init__(self) -> None:
        unknown = [c for c in self.classifiers if c not in CLASSIFIER_NAMES]
        if unknown:
            raise ValueError(
                f"unknown classifier(s) {', '.join(unknown)}; known: {', '.join(CLASSIFIER_NAMES)}"
            )
        missing = [c for c in self.classifiers if not available(c)]
        if missing:
            raise ValueError(f"not installed: {', '.join(missing)} (pip install {missing[0]})")
        for name in ("samples", "epochs", "score_samples", "inception_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '-')} must be >= 1")
        if self.num_clients is not None and self.num_clients < 0:
            raise ValueError("num-clients must be >= 0 (0: all of the dataset's clients)")


@dataclass
class EvaluationResult:
    run: RunFiles
    rows: list[UtilityRow]
    scores: dict[str, Any]
    epsilons: list[dict[str, Any]]
    quality: dict[str, Any]  # the instrument's rows: {"run", "controls", "instrument"}
    files: dict[str, Path] = field(default_factory=dict)
    split: Split | None = None  # the data split it was scored on (shared with other runs)

    def summary(self) -> dict[str, Any]:
        return {
            "run": str(self.run.root),
            "scores": self.scores,
            "quality": self.quality,
            "utility": [r.to_dict() for r in self.rows],
            "epsilons": self.epsilons,
            "files": {k: str(v.relative_to(self.run.root)) for k, v in self.files.items()},
        }


class Split:
    """One data split and its instrument, shared by every run evaluated on it.

    The controls' rows and the real-data baselines depend on the split and the settings only;
    the instrument caches them in `baselines_cache` (see `fedgs.evaluation.instrument`).
    """

    def __init__(self, spec: DataSpec, options: EvaluationOptions) -> None:
        self.spec, self.options = spec, options
        self.dataset = load_federated(
            spec.dataset,
            spec.data_dir,
            labels=spec.labels,
            num_clients=spec.num_clients,
            seed=spec.seed,
        )

    @cached_property
    def instrument(self) -> Instrument:
        o = self.options
        options = InstrumentOptions(o.samples, o.score_samples, o.epochs, o.seed)
        return Instrument(self.dataset, options, baselines=baselines_cache())

    @cached_property
    def controls(self) -> list[dict[str, Any]]:
        """The controls' rows (cached per split and settings); none with ``controls=False``."""
        return self.instrument.control_rows() if self.options.controls else []

    def record(self) -> dict[str, Any]:
        return self.instrument.record()


class _Evaluation:
    """One run's evaluation: the run, its generator, its split and its own result cache."""

    def __init__(
        self, run: RunFiles, options: EvaluationOptions, generator: LoadedGenerator, split: Split
    ) -> None:
        self.run, self.options, self.split = run, options, split
        self.generator = generator
        self.dataset = split.dataset
        self.cache = ResultCache(run.evaluation_dir / "cache")
        self.key = {
            "generator": self.generator.sha256,
            "dataset": self.dataset.fingerprint,
            "seed": options.seed,
        }

    @property
    def train(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.split.instrument.training

    @property
    def test(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.split.instrument.test

    @cached_property
    def synthetic(self) -> tuple[torch.Tensor, torch.Tensor]:
        return synthesize(self.generator, self.options.samples, self.options.seed)

    def _cached(self, what: str, extra: dict[str, Any], compute) -> Any:
        key = self.key | {"what": what} | extra
        value = self.cache.get(key)
        if value is None:
            value = compute()
            self.cache.put(key, value)
        return value

    def quality(self, figures: Path) -> dict[str, Any]:
        """The run's instrument row, the controls' rows and the instrument's record.

        The run's row is cached per generator; the controls and the real-data baselines per
        split and settings (they do not depend on the run), so a second run on the same data
        only scores itself.
        """
        o = self.options
        settings = {"samples": o.samples, "feature_samples": o.score_samples, "epochs": o.epochs}

        def sample(labels: torch.Tensor) -> torch.Tensor:
            return self.generator.sample(labels, o.seed)

        def run_row() -> dict[str, Any]:
            score = self.split.instrument.score("this run", sample)
            plots.closest_pairs(score.closest, figures / "closest_pairs")
            return score.row

        row = self._cached("quality", settings | {"version": INSTRUMENT_VERSION}, run_row)
        return {"run": row, "controls": self.split.controls, "instrument": self.split.record()}

    def inception_fid(self) -> dict[str, float | int]:
        from fedgs.evaluation.inception import inception_fid, load_inception

        weights = Path(self.options.inception_weights)
        count = min(self.options.inception_samples, self.options.samples, self.test[0].shape[0])

        def compute() -> dict[str, float | int]:
            model = load_inception(weights)
            fid = inception_fid(model, self.synthetic[0][:count], self.test[0][:count])
            return {"fid_inception": fid, "fid_inception_samples": count}

        return self._cached(
            "inception-fid", {"weights": file_sha256(weights), "count": count}, compute
        )

    def utility(self, quality: dict[str, Any]) -> list[UtilityRow]:
        """Table A1: CNN and MLP from the instrument, other classifiers trained here."""
        o = self.options
        real = quality["instrument"]["real"]
        count = min(o.samples, int(self.train[1].shape[0]))
        downstream = {
            c: UtilityRow(c, quality["run"][f"{c}_accuracy"], real[c], o.samples, count)
            for c in DOWNSTREAM
        }
        setup = UtilitySetup(
            num_classes=self.dataset.num_classes,
            samples=o.samples,
            epochs=o.epochs,
            seed=o.seed,
            generator_sha256=self.generator.sha256,
            dataset_fingerprint=self.dataset.fingerprint,
        )
        baselines = baselines_cache()
        others = utility_table(
            [c for c in o.classifiers if c not in downstream],
            setup,
            lambda: self.synthetic,
            self.train,
            self.test,
            self.cache,
            baselines,
        )
        trained = {r.classifier: r for r in others} | downstream
        return [trained[c] for c in o.classifiers]

    def gradient_norms(self) -> GradNorms | None:
        o = self.options
        if self.generator.strategy != "gswgan" or o.grad_norm_samples < 1:
            return None  # per-sample clipping of the upstream gradient is GS-WGAN's alone
        warm = o.grad_norm_warm_start
        if warm is None:
            warm = int(self.run.setting("warm-start-steps", 0))
        client = self.dataset.client_train(0)
        extra = {"samples": o.grad_norm_samples, "warm_start": warm}

        def compute() -> dict[str, list[float]]:
            norms = gradient_norms(self.generator, client, warm, o.grad_norm_samples, o.seed)
            return {"before": norms.before.tolist(), "after": norms.after.tolist()}

        values = self._cached("grad-norms", extra, compute)
        return GradNorms(
            torch.tensor(values["before"]),
            torch.tensor(values["after"]),
            self.generator.config.clip_norm,
            warm,
            int(client[0].shape[0]),
        )


class Splits:
    """The data splits of one invocation, each loaded once (runs on one split share it)."""

    def __init__(self, options: EvaluationOptions) -> None:
        self.options = options
        self._loaded: dict[DataSpec, Split] = {}

    def of(self, run: RunFiles) -> Split:
        return self.for_spec(run.data_spec(self.options.data_dir, self.options.num_clients))

    def for_spec(self, spec: DataSpec) -> Split:
        if spec not in self._loaded:
            self._loaded[spec] = Split(spec, self.options)
        return self._loaded[spec]


def evaluate_run(run_dir: str | Path, options: EvaluationOptions) -> EvaluationResult:
    """Scores, utility table, figures and epsilons of one run; files under RUN_DIR/evaluation."""
    return evaluate_runs([run_dir], options)[0]


def evaluate_runs(run_dirs: list[str | Path], options: EvaluationOptions) -> list[EvaluationResult]:
    """`evaluate_run` of each run. Every run's directory, generator and data are checked before
    any is scored; runs on the same split share its instrument (its controls scored once)."""
    runs = [RunFiles.open(path) for path in run_dirs]
    generators = [load_generator(run.root) for run in runs]
    splits = Splits(options)
    pending = deque(
        _Evaluation(run, options, generator, splits.of(run))
        for run, generator in zip(runs, generators, strict=True)
    )
    # popped: a scored run's synthetic images are let go, not kept until the last run is scored
    return [_evaluate(pending.popleft()) for _ in range(len(pending))]


def _evaluate(evaluation: _Evaluation) -> EvaluationResult:
    run, options = evaluation.run, evaluation.options
    scores: dict[str, Any] = {
        "generator_sha256": evaluation.generator.sha256,
        "strategy": evaluation.generator.strategy,
    }
    out = run.evaluation_dir
    figures = out / "plots"
    figures.mkdir(parents=True, exist_ok=True)
    quality = evaluation.quality(figures)
    scores |= {k: v for k, v in quality["run"].items() if not isinstance(v, list) and k != "name"}
    scores["num_samples"] = options.score_samples
    if options.inception_weights is not None:
        scores |= evaluation.inception_fid()
    rows = evaluation.utility(quality)
    epsilons = [f.to_dict() for f in all_figures(run)]
    result = EvaluationResult(run, rows, scores, epsilons, quality, split=evaluation.split)
    (out / "quality.md").write_text(markdown([quality["run"], *quality["controls"]]))
    result.files["quality_md"] = out / "quality.md"
    write_csv(rows, out / "utility.csv")
    (out / "utility.md").write_text(to_markdown(rows))
    result.files |= {"utility_csv": out / "utility.csv", "utility_md": out / "utility.md"}
    if curves := plots.training_curves(run, figures / "training_curves"):
        result.files["training_curves"] = curves
    if (figures / "closest_pairs.png").exists():
        result.files["closest_pairs"] = figures / "closest_pairs.png"
    if norms := evaluation.gradient_norms():
        result.files["gradient_norms"] = plots.gradient_norms(norms, figures / "gradient_norms")
    summary = result.summary() | {"options": _jsonable(asdict(options))}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    result.files["summary"] = out / "summary.json"
    return result


def _jsonable(options: dict[str, Any]) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in options.items()}
