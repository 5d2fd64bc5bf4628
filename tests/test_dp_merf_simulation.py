"""DP-MERF end to end through Flower's real simulation engine (Ray on 127.0.0.1): every writer
asked once, the release saved, G fitted and loadable by ``fedgs evaluate``'s loader, and the
privacy report labelled; then G refitted from the saved release without asking anyone."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from dp_accounting import dp_event

from fedgs.evaluation.generator_loader import load_generator
from fedgs.evaluation.privacy_figures import run_figures
from fedgs.evaluation.run_files import RunFiles
from fedgs.privacy.accountants import get_accountant
from fedgs.privacy.events import mean_embedding_event
from fedgs.privacy.release_ledger import ReleaseLedger
from fedgs.training.dp_merf import RELEASE_FILE, load_release

pytestmark = pytest.mark.slow

SMALL = {
    "strategy": "dp-merf",
    "num-clients": 5,
    "clients-per-step": 3,  # two rounds: 3 writers, then the other 2
    "merf-features": 32,
    "merf-noise-multiplier": 2.0,
    "merf-generator-steps": 3,
    "merf-batch-size": 16,
    "generator-width": 4,
    "eval-every": 0,
}


def _python(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_every_writer_releases_once_and_g_is_fitted(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    options = [f"--{k}={v}" for k, v in SMALL.items()]
    args = ["-m", "fedgs.cli", "simulate", *options, "--ray-cpus", "2"]
    done = _python([*args, "--object-store-mb", "256", "--out", str(run_dir)], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "epsilon (untrusted server, autodp-rdp, delta=1e-05, replace-one" in done.stdout

    with (run_dir / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(int(r["sampled"]), int(r["answered"])) for r in rows] == [(3, 3), (2, 2)]
    assert not rows[0]["generator_loss"] and float(rows[1]["generator_loss"]) > 0

    ledger = ReleaseLedger.from_json((run_dir / "ledger.json").read_text())
    assert sorted(ledger.counts().values()) == [1] * 5 and ledger.unattributed_count() == 0
    assert {ledger.signature(c) for c in ledger.counts()} == {((mean_embedding_event(2.0), 1),)}

    privacy = json.loads((run_dir / "privacy.json").read_text())
    untrusted = privacy["untrusted_server"]
    expected = get_accountant("autodp-rdp").epsilon(dp_event.GaussianDpEvent(2.0), 1e-5)
    assert privacy["strategy"] == "dp-merf" and privacy["version"] == 2
    assert untrusted["threat_model"] == "untrusted-server"
    assert untrusted["accountant"] == "autodp-rdp" and privacy["delta"] == 1e-5
    assert untrusted["neighbouring"] == privacy["neighbouring"] == "replace-one"
    assert untrusted["epsilon"] == pytest.approx(expected)
    assert float(rows[-1]["epsilon_untrusted"]) == pytest.approx(expected)
    assert privacy["releases_received"] == 5 and privacy["queries"]["max"] == 1
    figures = {f.threat_model: f for f in run_figures(RunFiles.open(run_dir))}
    assert figures["untrusted-server"].epsilon == pytest.approx(expected)

    release, replies, spec = load_release(run_dir / RELEASE_FILE)
    assert release.shape == (33, 10) and replies == 5 and spec.features == 32
    generator = load_generator(run_dir)  # what `fedgs evaluate` rebuilds
    assert generator.strategy == "dp-merf" and generator.num_classes == 10

    refit = tmp_path / "refit"
    again = _python(
        ["-m", "fedgs.training.dp_merf", str(run_dir), str(refit), "--generator-steps", "2"],
        tmp_path,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert load_generator(refit).strategy == "dp-merf"
    assert json.loads((refit / "config.json").read_text())["merf-generator-steps"] == 2
    assert (refit / "privacy.json").read_bytes() == (run_dir / "privacy.json").read_bytes()
