"""Fewer live nodes than teachers-per-step (issue 46): a DataLens or PATE-GAN step asks every live
node and the run goes on, as GS-WGAN's does (``test_shrunk_steps``); it failed with "5 teachers
per step requested, 3 nodes available". A teacher's cost does not depend on how many teachers
vote (its own vote's sensitivity against noise of a fixed scale on the sum), so the shrunk step is
charged to the teachers asked, at the same event, and the report is that of what ran. Fed-Avg GAN
with no node online waits for one as GS-WGAN does, instead of failing at once."""

from __future__ import annotations

import csv
import json
import logging
from pathlib import Path

import numpy as np
import pytest
from flower_apps import simulate
from teacher_apps import _strategy, shrinking_teacher_run_app

from fedgs.client.app import build_client_app
from fedgs.privacy import FedAvgLedger
from fedgs.privacy.teacher_ledger import TeacherLedger
from fedgs.run_config import RunConfig
from fedgs.server.fedavg_gan_strategy import FedAvgGANStrategy
from fedgs.training.fedavg_gan import FedAvgGANTrainer
from fedgs.training.run_dir import _shrunk_step_lines, summarize

TEACHERS = ["datalens", "pate-gan"]
SMALL = {
    "num-clients": 5,
    "batch-size": 8,
    "generator-width": 4,
    "critic-width": 4,
    "critic-steps": 2,
    "warm-start-steps": 0,
    "eval-every": 0,
    "datalens-top-k": 20,
    "datalens-noise-std": 1.0,
    "pate-teacher-steps": 1,
    "pate-student-steps": 2,
}


class Grid:
    """The node list a grid reports (``online``: what successive calls return)."""

    def __init__(self, *online: list[int]) -> None:
        self.online = list(online)

    def get_node_ids(self) -> list[int]:
        return self.online.pop(0) if len(self.online) > 1 else self.online[0]


def _config(tmp_path: Path, strategy: str, **settings: object) -> RunConfig:
    user = {"strategy": strategy, "run-dir": str(tmp_path), "teachers-per-step": 5}
    return RunConfig.from_user_config(SMALL, user | settings)


@pytest.mark.parametrize("strategy", TEACHERS)
def test_a_teacher_step_with_fewer_nodes_online_asks_them_all(
    tmp_path: Path, strategy: str, caplog: pytest.LogCaptureFixture
) -> None:
    """(What the asked teachers pay, and the report: the simulation test below.)"""
    teacher, _ = _strategy(_config(tmp_path, strategy), TeacherLedger())
    with caplog.at_level(logging.WARNING, logger="fedgs.server"):
        nodes = teacher.sample_nodes(Grid([11, 12, 13]), 4)  # type: ignore[arg-type]
    assert sorted(nodes) == [11, 12, 13]
    assert "step 4: 3 node(s) online, fewer than teachers-per-step = 5: asking 3" in caplog.text
    assert len(set(teacher.sample_nodes(Grid(list(range(8))), 5))) == 5  # type: ignore[arg-type]


@pytest.mark.parametrize("strategy", TEACHERS)
def test_a_teacher_step_with_no_node_online_waits_bounded_for_one(
    tmp_path: Path, strategy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("fedgs.server.online.NODE_POLL", 0.01)
    teacher, _ = _strategy(_config(tmp_path, strategy), TeacherLedger())
    teacher.node_wait = 5
    assert teacher.sample_nodes(Grid([], [], [7]), 1) == [7]  # type: ignore[arg-type]
    teacher.node_wait = 0.05
    with pytest.raises(RuntimeError, match="no node online for 0.05 s"):
        teacher.sample_nodes(Grid([]), 2)  # type: ignore[arg-type]


def test_the_teacher_run_waits_reply_timeout_for_a_node(tmp_path: Path) -> None:
    from fedgs.server.datalens_run import DataLensRun

    run = DataLensRun(_config(tmp_path, "datalens", **{"reply-timeout": 7.5}))
    assert run.strategy.node_wait == 7.5


def test_a_fedavg_round_with_no_node_online_waits_bounded_for_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("fedgs.server.online.NODE_POLL", 0.01)
    config = _config(tmp_path, "fedavg-gan", **{"teachers-per-step": 10})
    trainer = FedAvgGANTrainer(10, config.fedavg_gan(), seed=0)
    ledger = FedAvgLedger(config.fedavg_noise_multiplier)
    strategy = FedAvgGANStrategy(trainer, ledger, np.random.default_rng(0), node_wait=5)
    strategy.sample_nodes(Grid([], [7]))  # type: ignore[arg-type]
    assert strategy.population == 1  # q = 1 over the one node online
    strategy.node_wait = 0.05
    with pytest.raises(RuntimeError, match="no node online for 0.05 s"):
        strategy.sample_nodes(Grid([]))  # type: ignore[arg-type]


@pytest.mark.parametrize("strategy", TEACHERS)
def test_the_summary_names_the_shrunk_teacher_steps(strategy: str) -> None:
    rows = [{"step": str(s), "sampled": str(n)} for s, n in ((1, 5), (2, 3), (3, 4))]
    config = {"strategy": strategy, "teachers-per-step": 5, "clients-per-step": 1}
    assert _shrunk_step_lines(rows, config) == [
        "  steps with fewer nodes online than teachers-per-step = 5: 2, each asked every node "
        "online (3 to 4; each query paid when sent)"
    ]
    assert _shrunk_step_lines(rows[:1], config) == []


@pytest.mark.slow
@pytest.mark.parametrize("strategy", TEACHERS)
def test_a_teacher_run_goes_on_when_nodes_leave(tmp_path: Path, strategy: str) -> None:
    """Flower's simulation engine, the real teacher run and client app: 5 teachers per step of
    5 nodes, 2 of which leave after step 1. Steps 2 and 3 ask the 3 left; the ledger charges
    each teacher the steps it was asked in, and the report's epsilon is 3 steps'."""
    config = _config(tmp_path, strategy, steps=3, **{"min-nodes": 5, "checkpoint-every": 1})
    seen: dict = {}
    simulate(
        shrinking_teacher_run_app(config, 2, seen),
        build_client_app(config.to_user_config()),
        nodes=5,
    )
    with (tmp_path / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(int(r["sampled"]), int(r["answered"])) for r in rows] == [(5, 5), (3, 3), (3, 3)]
    run, gone = seen["run"], seen["grid"].gone
    left = {run.identities.client_of(node) for node in gone}
    counts = run.ledger.step_counts()
    assert len(left) == 2 and None not in left and len(counts) == 5
    assert counts == {client: 1 if client in left else 3 for client in counts}
    by_hand = TeacherLedger()
    for _ in range(3):
        by_hand.record("c", run.strategy.step_event())
    privacy = json.loads((tmp_path / "privacy.json").read_text())
    assert privacy["steps"] == 3 and privacy["teachers_per_step"] == 5
    assert privacy["trusted_aggregator"]["epsilon"] == pytest.approx(
        by_hand.epsilon("c", config.delta, config.accountant)
    )
    assert privacy["trusted_aggregator"]["client_id"] not in left
    assert (
        "steps with fewer nodes online than teachers-per-step = 5: 2, each asked every node "
        "online (3 to 3; each query paid when sent)" in summarize(tmp_path)
    )
