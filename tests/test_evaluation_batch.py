"""`fedgs evaluate` of several runs, with the controls cached per data split and settings.

The controls and the real-data baselines depend only on the data split and the evaluation
settings: a second evaluation on the same split must not retrain them (counted, not timed), and a
different split or different settings must. Small settings (200 downstream samples, one epoch) on
the embedded digits keep it quick; the baselines go to a cache folder of each test's own.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch
from evaluation_runs import make_run

from fedgs.cli import build_parser, main
from fedgs.evaluation import evaluate as evaluate_module
from fedgs.evaluation import instrument as instrument_module
from fedgs.evaluation.cache import ResultCache
from fedgs.evaluation.classifiers import fit_torch
from fedgs.evaluation.evaluate import EvaluationOptions, evaluate_runs
from fedgs.evaluation.run_files import RunFiles
from fedgs.metrics import controls as controls_module
from fedgs.metrics.controls import FLOOR, PUBLIC_FONTS

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"samples": 200, "epochs": 1, "score_samples": 100, "grad_norm_samples": 0}
SMALL_FLAGS = ["--samples", "200", "--epochs", "1", "--score-samples", "100"]
SMALL_FLAGS += ["--grad-norm-samples", "0"]
CONTROL_NAMES = [FLOOR, "lookup k=1", "lookup k=5", PUBLIC_FONTS, "untrained generator"]
CONTROL_NAMES += ["flat grey"]
PUBLIC_FONT_IMAGES = 200  # the public fonts control's set, rendered in seconds (10,000: a minute)


@pytest.fixture
def counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """Baselines cached in tmp_path/baselines; every downstream training (classifier and
    training-set size) and every scoring of controls (the split's fingerprint) is recorded,
    and the controls scored (their names) under "scored"."""
    calls: dict[str, list] = {"trained": [], "controls": [], "scored": []}
    folder = tmp_path / "baselines"
    monkeypatch.setattr(evaluate_module, "baselines_cache", lambda: ResultCache(folder))
    accuracy_of = instrument_module.accuracy_of

    def counting_accuracy_of(name, train, *args, **kwargs):
        calls["trained"].append((name, int(train[0].shape[0])))
        return accuracy_of(name, train, *args, **kwargs)

    controls = instrument_module.Instrument.controls

    def counting_controls(self, named):
        calls["controls"].append(self.dataset.fingerprint)
        calls["scored"] += list(named)
        return controls(self, named)

    monkeypatch.setattr(instrument_module, "accuracy_of", counting_accuracy_of)
    monkeypatch.setattr(instrument_module.Instrument, "controls", counting_controls)
    monkeypatch.setattr(controls_module, "PUBLIC_FONT_IMAGES", PUBLIC_FONT_IMAGES)
    return calls


def _with_clients(run: Path, clients: int) -> Path:
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps(config | {"num-clients": clients}))
    return run


@pytest.mark.slow
def test_controls_are_cached_per_split_and_settings(tmp_path: Path, counted) -> None:
    first, second = make_run(tmp_path / "first"), make_run(tmp_path / "second")
    options = EvaluationOptions(**SMALL)
    [result] = evaluate_runs([first], options)
    assert [r["name"] for r in result.quality["controls"]] == CONTROL_NAMES
    assert len(counted["controls"]) == 1
    # CNN and MLP on 200 images each: the run, the real baseline, the six controls
    assert sorted(counted["trained"]) == sorted([("cnn", 200), ("mlp", 200)] * 8)
    keys = [json.loads(p.read_text())["key"] for p in _baseline_files(tmp_path)]
    assert sorted(k["what"] for k in keys) == ["controls"] * 6 + ["real-baseline"]
    assert sorted(k["control"] for k in keys if "control" in k) == sorted(CONTROL_NAMES)

    # another run on the same split: the controls and the real baseline come from the cache
    counted["trained"].clear()
    [again] = evaluate_runs([second], options)
    assert len(counted["controls"]) == 1  # not scored again
    assert counted["trained"] == [("cnn", 200), ("mlp", 200)]  # the run's own classifiers only
    assert again.quality["controls"] == result.quality["controls"]
    assert again.quality["instrument"] == result.quality["instrument"]
    assert len(_baseline_files(tmp_path)) == 7

    # other settings: computed afresh, and cached beside the first ones
    counted["trained"].clear()
    evaluate_runs([second], EvaluationOptions(**SMALL | {"epochs": 2}))
    assert len(counted["controls"]) == 2 and len(counted["trained"]) == 16
    assert len(_baseline_files(tmp_path)) == 14

    # another split (the run's own 25 clients of the embedded digits): computed afresh
    counted["trained"].clear()
    other = _with_clients(make_run(tmp_path / "other"), 25)
    assert RunFiles.open(other).data_spec().num_clients == 25
    [split25] = evaluate_runs([other], options)
    assert len(counted["controls"]) == 3 and len(counted["trained"]) == 16
    assert counted["controls"][2] != counted["controls"][0]  # another data fingerprint
    assert split25.quality["instrument"]["split"]["clients"] == 25
    assert len(_baseline_files(tmp_path)) == 21


@pytest.mark.slow
def test_a_changed_domain_classifier_invalidates_the_controls(tmp_path: Path, counted) -> None:
    """The controls' feature figures come from the domain classifier: other weights, other key."""
    run = make_run(tmp_path / "run")
    options = EvaluationOptions(**SMALL)
    evaluate_runs([run], options)
    shutil.rmtree(tmp_path / "run" / "evaluation")
    digest = instrument_module.Instrument.classifier_digest

    def other_digest(self) -> str:
        return "0" * 64

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(instrument_module.Instrument, "classifier_digest", property(other_digest))
        evaluate_runs([run], options)
    assert len(counted["controls"]) == 2
    assert instrument_module.Instrument.classifier_digest is digest


def test_no_controls_scores_the_runs_only(tmp_path: Path, counted) -> None:
    run = make_run(tmp_path / "run")
    [result] = evaluate_runs([run], EvaluationOptions(**SMALL | {"controls": False}))
    assert result.quality["controls"] == [] and counted["controls"] == []
    assert "real" in result.quality["instrument"]  # the calibration still has its baseline
    summary = json.loads((run / "evaluation" / "summary.json").read_text())
    assert summary["quality"]["controls"] == [] and summary["options"]["controls"] is False


def test_two_runs_in_one_call(tmp_path: Path, counted, capsys) -> None:
    runs = [make_run(tmp_path / "gs-a"), make_run(tmp_path / "fa-b", "fedavg-gan")]
    rows_file = tmp_path / "rows.json"
    args = ["evaluate", *map(str, runs), *SMALL_FLAGS, "--json", str(rows_file)]
    assert main(args) == 0
    assert len(counted["controls"]) == 1  # one split, its controls scored once
    for run in runs:
        summary = json.loads((run / "evaluation" / "summary.json").read_text())
        assert summary["run"] == str(run) and len(summary["quality"]["controls"]) == 6
    written = json.loads(rows_file.read_text())
    assert [r["name"] for r in written["rows"]] == ["gs-a", "fa-b", *CONTROL_NAMES]
    gs, fa = written["rows"][:2]
    assert (gs["strategy"], gs["threat_model"]) == ("gswgan", "untrusted-server")
    assert (fa["strategy"], fa["threat_model"]) == ("fedavg-gan", "trusted-server")
    assert gs["epsilon_value"] > 0 and "cnn_accuracy" in gs
    assert written["instrument"]["options"]["samples"] == 200
    out = capsys.readouterr().out
    assert out.count("| sampler | seed | epsilon |") == 1 and "| gs-a | 0 |" in out
    assert "| fa-b |" in out and "| lookup k=5 |" in out

    # --json over runs of two data splits is refused before anything is scored
    other = _with_clients(make_run(tmp_path / "other"), 25)
    args = ["evaluate", str(runs[0]), str(other), "--json", str(tmp_path / "mixed.json")]
    assert main(args) == 2
    assert "2 data splits" in capsys.readouterr().err and not (tmp_path / "mixed.json").exists()


def _baseline_files(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "baselines").glob("*.json"))


def _score_run_parser():
    path = ROOT / "benchmarks" / "score_run.py"
    spec = importlib.util.spec_from_file_location("score_run_help", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.parser()


def _evaluate_parser():
    parser = build_parser()
    [subparsers] = [a for a in parser._actions if a.dest == "command"]
    return subparsers.choices["evaluate"]


@pytest.mark.parametrize("which", ["fedgs evaluate", "benchmarks/score_run.py"])
def test_no_default_path_points_outside_the_repository(which: str) -> None:
    parser = _evaluate_parser() if which == "fedgs evaluate" else _score_run_parser()
    for action in parser._actions:
        default = action.default
        if isinstance(default, str | Path) and default != "==SUPPRESS==":
            text = str(default)
            assert not Path(text).is_absolute() and ".." not in Path(text).parts, (which, action)
    help_text = parser.format_help()
    assert "../" not in help_text and "shared/" not in help_text


def test_a_downstream_classifier_does_not_depend_on_what_ran_before() -> None:
    """The CNN's dropout masks come from the seed, not from the global generator's state, so a
    control read from the cache and one scored afresh (after other work) agree."""
    images = torch.rand(256, 1, 28, 28) * 2 - 1
    labels = torch.arange(256) % 10
    fitted = []
    for before in (1, 2):
        torch.manual_seed(before)  # whatever ran before left the global generator here
        model = fit_torch("cnn", (images, labels), 10, epochs=1, seed=0)
        fitted.append(torch.cat([p.flatten() for p in model.parameters()]))
    assert torch.equal(fitted[0], fitted[1])
