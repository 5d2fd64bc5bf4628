"""The "public fonts" control: what public data alone gives, scored next to every digit run.

The control draws the font digits public pretraining trains on (`fedgs.data.public_digits`); a
private result is worth something only above it. It exists where the classes are the 10 digits
and nowhere else, its images are the rendered digits of the requested labels, and its row is
cached on its own: an evaluation cache written before it existed (the controls' rows in one
entry, ~30 minutes of work on the complete FEMNIST split) gains that row alone. The rendered set
is shrunk to 60 images here (seconds to render; the control's own 10,000 take a minute).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from evaluation_runs import make_run

from fedgs.data import load_federated
from fedgs.data.leaf import relabel
from fedgs.data.names import LABEL_CLASSES
from fedgs.data.public_digits import render_digits
from fedgs.evaluation import evaluate as evaluate_module
from fedgs.evaluation import instrument as instrument_module
from fedgs.evaluation.cache import ResultCache
from fedgs.evaluation.evaluate import EvaluationOptions, evaluate_runs
from fedgs.evaluation.instrument import Instrument, InstrumentOptions, Score
from fedgs.metrics import controls as controls_module
from fedgs.metrics.controls import FLOOR, PUBLIC_FONTS, controls, public_fonts_sampler

SMALL_SET = 60
TABLE_ORDER = [FLOOR, "lookup k=1", "lookup k=5", PUBLIC_FONTS, "untrained generator"]
TABLE_ORDER += ["flat grey"]


@pytest.fixture
def small_set(monkeypatch: pytest.MonkeyPatch) -> tuple[torch.Tensor, torch.Tensor]:
    """The control draws from a 60-image set; returned as `render_digits` renders it."""
    monkeypatch.setattr(controls_module, "PUBLIC_FONT_IMAGES", SMALL_SET)
    return render_digits(SMALL_SET, controls_module.PUBLIC_FONT_SEED)


def _training(num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    labels = torch.arange(3 * num_classes) % num_classes
    return torch.zeros(len(labels), 1, 28, 28), labels


def test_the_control_exists_where_the_classes_are_the_digits() -> None:
    # fails if the control is missing on a digit split, placed elsewhere than after the lookup
    # tables, or offered on the 36- or 62-class splits (whose labels are not all digits)
    assert list(controls(_training(10), 10)) == TABLE_ORDER
    for num_classes in (36, 62):
        assert PUBLIC_FONTS not in controls(_training(num_classes), num_classes)


def test_ten_classes_mean_the_digits_labelled_by_digit() -> None:
    # the control keys on num_classes == 10: fails if a FEMNIST label mode other than digits
    # gets 10 classes, if the digits mode renumbers LEAF's classes 0-9 (the digits '0'-'9'),
    # or if the embedded MNIST digits stop being a 10-class split
    assert [mode for mode, count in LABEL_CLASSES.items() if count == 10] == ["digits"]
    keep, labels = relabel(np.arange(62), "digits")
    assert labels[keep].tolist() == list(range(10))
    assert load_federated("embedded").num_classes == 10


def test_samples_are_the_public_digits_of_the_requested_labels(small_set) -> None:
    # fails if a sample is not a rendered digit of its requested label (labels ignored or
    # mixed up, another set drawn), leaves the instrument's (N, 1, 28, 28) frame in [-1, 1],
    # repeats an image before its class's set is used up, or changes between two draws
    rendered, rendered_labels = small_set
    requested = torch.randperm(150, generator=torch.Generator().manual_seed(1)) % 10
    images = public_fonts_sampler(SMALL_SET)(requested)
    assert images.shape == (150, 1, 28, 28) and images.dtype == torch.float32
    assert images.min() >= -1.0 and images.max() <= 1.0
    for digit in range(10):
        drawn = images[requested == digit]
        pool = rendered[rendered_labels == digit]
        assert all(any(torch.equal(image, p) for p in pool) for image in drawn), digit
        first = drawn[: len(pool)].flatten(1)
        assert len(torch.unique(first, dim=0)) == len(pool), digit
    assert torch.equal(public_fonts_sampler(SMALL_SET)(requested), images)


@pytest.fixture
def instrument(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_set) -> Instrument:
    """An instrument on the embedded digits whose scoring only records the names it scores
    (under ``instrument.scored``), with its baselines cached in tmp_path/baselines."""
    made = _instrument(tmp_path)
    made.scored = []

    def recorded(name: str, sample) -> Score:
        made.scored.append(name)
        return Score(name, {"name": name, "ink": float(sample(torch.arange(20) % 10).mean())})

    monkeypatch.setattr(made, "score", recorded)
    return made


def _instrument(tmp_path: Path) -> Instrument:
    dataset = load_federated("embedded")
    baselines = ResultCache(tmp_path / "baselines")
    return Instrument(dataset, InstrumentOptions(100, 100, 1), baselines=baselines)


def test_a_second_evaluation_reads_every_row_from_the_cache(
    instrument: Instrument, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fails if a cached row is scored again, a row is cached under another key than it is
    # read with, or a cached public fonts row still loads (or renders) the public set
    rows = instrument.control_rows()
    assert [r["name"] for r in rows] == TABLE_ORDER and instrument.scored == TABLE_ORDER

    def unavailable(*args, **kwargs):
        raise AssertionError("the public set was loaded for a cached row")

    monkeypatch.setattr(controls_module, "cached_digits", unavailable)
    again = _instrument(tmp_path)
    monkeypatch.setattr(again, "score", instrument.score)
    assert again.control_rows() == rows and instrument.scored == TABLE_ORDER


def test_a_cache_written_before_the_control_gains_its_row_alone(instrument: Instrument) -> None:
    # fails if the controls' older one-entry layout is no longer read (all rows scored again)
    # or its rows are replaced, reordered or dropped
    older = [{"name": n, "ink": 123.0} for n in TABLE_ORDER if n != PUBLIC_FONTS]
    instrument.baselines.put(instrument.baseline_key("controls"), older)
    rows = instrument.control_rows()
    assert instrument.scored == [PUBLIC_FONTS]
    assert [r["name"] for r in rows] == TABLE_ORDER
    assert [r for r in rows if r["name"] != PUBLIC_FONTS] == older
    instrument.control_rows()
    assert instrument.scored == [PUBLIC_FONTS]  # its own row is cached now


def test_another_public_set_scores_the_public_row_alone(
    instrument: Instrument, monkeypatch: pytest.MonkeyPatch
) -> None:
    # fails if the public fonts row's key misses the set it was drawn from (a stale row), or
    # if that set keys the other controls' rows too (all rescored)
    instrument.control_rows()
    monkeypatch.setattr(controls_module, "PUBLIC_FONT_IMAGES", SMALL_SET + 10)
    instrument.control_rows()
    assert instrument.scored == [*TABLE_ORDER, PUBLIC_FONTS]


@pytest.mark.slow
def test_fedgs_evaluate_adds_the_row_to_an_older_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_set
) -> None:
    # end to end (downstream classifiers counted): fails if evaluating a run on a split whose
    # cache holds the five older controls' rows trains anything but the public fonts row's CNN
    # and MLP, if that row differs from the one scored afresh, or if a third evaluation trains
    folder = tmp_path / "baselines"
    monkeypatch.setattr(evaluate_module, "baselines_cache", lambda: ResultCache(folder))
    trained: list[str] = []
    accuracy_of = instrument_module.accuracy_of

    def counting(name, *args, **kwargs):
        trained.append(name)
        return accuracy_of(name, *args, **kwargs)

    monkeypatch.setattr(instrument_module, "accuracy_of", counting)
    run = make_run(tmp_path / "run")
    options = EvaluationOptions(samples=200, epochs=1, score_samples=100, grad_norm_samples=0)
    [fresh] = evaluate_runs([run], options)
    _to_older_layout(folder)
    trained.clear()
    [gained] = evaluate_runs([run], options)
    assert trained == ["cnn", "mlp"]  # the run's own row comes from its cache
    assert gained.quality["controls"] == fresh.quality["controls"]
    trained.clear()
    evaluate_runs([run], options)
    assert trained == []


def _to_older_layout(folder: Path) -> None:
    """The controls' rows as fedgs wrote them before the public fonts control: one entry of
    the five rows under the controls' key, no entry per control."""
    entries = [json.loads(path.read_text()) | {"path": path} for path in folder.glob("*.json")]
    per_control = [e for e in entries if "control" in e["key"]]
    for entry in per_control:
        entry["path"].unlink()
    older = {e["key"]["control"]: e for e in per_control if e["key"]["control"] != PUBLIC_FONTS}
    key = {k: v for k, v in older[FLOOR]["key"].items() if k != "control"}
    ResultCache(folder).put(key, [older[n]["value"] for n in TABLE_ORDER if n in older])
