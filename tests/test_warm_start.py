"""Warm start at scale through the real engine: nodes in flight at once, and a killed run's
finished clients are kept, not warm-started again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from warm_start_apps import overlapping_pairs, timing_client_app

from fedgs.privacy import PrivacyLedger
from fedgs.run_config import RunConfig
from fedgs.server.app import build_server_app
from fedgs.server.warm_start import WARM_START_JSON, WarmStartProgress, warm_start_clients
from fedgs.simulations.simulate import EngineOptions, backend_config

pytestmark = pytest.mark.slow

SMALL = {
    "num-clients": 8,
    "batch-size": 8,
    "critic-steps": 1,
    "generator-width": 4,
    "critic-width": 4,
    "warm-start-steps": 6,
    "eval-every": 0,
    "steps": 1,
}


def test_warm_starts_run_in_parallel_on_the_actors(tmp_path: Path) -> None:
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from flwr.simulation import run_simulation

    config = RunConfig.from_user_config(SMALL, {"run-dir": str(tmp_path / "run"), "min-nodes": 8})
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    overrides = config.to_user_config()
    run_simulation(
        server_app=build_server_app(overrides, grid_poll_seconds=0.01),
        client_app=timing_client_app(overrides, log_dir),
        num_supernodes=8,
        backend_config=backend_config(EngineOptions(ray_cpus=2, object_store_mb=256)),
    )
    records = [json.loads(p.read_text()) for p in log_dir.glob("*.json")]
    assert sorted(r["partition"] for r in records) == list(range(8))  # each node once
    assert len({r["pid"] for r in records}) == 2  # both actors served warm starts...
    assert overlapping_pairs(records) >= 1  # ...at the same time
    progress = WarmStartProgress.load(tmp_path / "run")
    assert progress is not None and progress.complete and len(progress.trained) == 8
    assert progress.failed == 0 and progress.seconds > 0


def _command(run_dir: Path, *args: str) -> list[str]:
    options = [f"--{k}={v}" for k, v in (SMALL | {"warm-start-steps": 40}).items()]
    return [sys.executable, "-m", "fedgs.cli", "simulate", *options, "--out", str(run_dir),
            "--ray-cpus", "1", "--object-store-mb", "256", *args]  # fmt: skip


def test_a_killed_warm_start_keeps_its_finished_clients(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    state_dir = run_dir / "client-state"
    process = subprocess.Popen(
        _command(run_dir),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 600
        while len(list(state_dir.glob("*.pt"))) < 3:
            assert process.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no client finished its warm start"
            time.sleep(0.05)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the driver and every Ray process it started
        process.wait(timeout=60)
    finished = {p.name: p.read_bytes() for p in state_dir.glob("*.pt")}
    assert 3 <= len(finished) < 8, "kill the run mid warm start"
    saved = run_dir / WARM_START_JSON  # what the server had recorded when it was killed
    recorded = json.loads(saved.read_text())["trained"] if saved.exists() else []

    done = subprocess.run(
        _command(run_dir, "--resume"), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    progress = json.loads((run_dir / WARM_START_JSON).read_text())
    assert progress["complete"] and len(progress["trained"]) == 8
    # the clients the killed attempt recorded answered again (without training: see below)
    assert progress["already_warm"] == len(recorded) <= len(finished)
    for name, before in finished.items():
        state = torch.load(state_dir / name, weights_only=True)
        assert state["warm_started"]
        if not PrivacyLedger.from_json(state["ledger"]).query_counts():
            assert (state_dir / name).read_bytes() == before  # untouched since the kill


class _NoGrid:
    """A grid that must not be used: a completed warm start is not asked for again."""

    def __getattr__(self, name: str):
        raise AssertionError(f"grid.{name} used")


def test_a_completed_warm_start_is_skipped(tmp_path: Path) -> None:
    config = RunConfig.from_user_config(SMALL, {"run-dir": str(tmp_path), "resume": True})
    done = WarmStartProgress(6, str((tmp_path / "client-state").resolve()), ["a"], complete=True)
    done.save(tmp_path)
    assert warm_start_clients(_NoGrid(), config) == done
    for other in (config.with_updates(warm_start_steps=7), config.with_updates(resume=False)):
        with pytest.raises(AssertionError, match="grid"):  # the clients are asked again
            warm_start_clients(_NoGrid(), other)
