"""DataLens and PATE-GAN through Flower's real simulation engine: replies, server-side validation,
privacy cost, bytes on the wire, and the CLI with resume."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from flower_apps import simulate
from teacher_apps import TAMPERED, recording_teacher_server_app, tampering_teacher_app

from fedgs.comm import datalens_protocol_bytes, message_bytes, pate_protocol_bytes
from fedgs.evaluation.generator_loader import load_generator
from fedgs.privacy.teacher_ledger import TeacherLedger
from fedgs.protocols import common, datalens, pate_gan
from fedgs.run_config import RunConfig

pytestmark = pytest.mark.slow

SMALL = {
    "num-clients": 5,
    "batch-size": 8,
    "generator-width": 4,
    "critic-width": 4,
    "critic-steps": 2,
    "warm-start-steps": 0,
    "eval-every": 0,
    "teachers-per-step": 5,
    "datalens-top-k": 20,
    "datalens-noise-std": 1.0,
    "pate-teacher-steps": 1,
    "pate-student-steps": 2,
}
VOTES = {"datalens": datalens.VOTES, "pate-gan": pate_gan.VOTES}


def _partition(reply) -> int:
    return int(reply.content[common.CLIENT]["partition-id"])


@pytest.mark.parametrize("strategy", ["datalens", "pate-gan"])
def test_votes_are_validated_paid_for_and_compact(strategy: str, tmp_path) -> None:
    config = RunConfig.from_user_config(
        SMALL, {"strategy": strategy, "min-nodes": 5, "run-dir": str(tmp_path)}
    )
    record: list[dict] = []
    simulate(
        recording_teacher_server_app(config, 2, record),
        tampering_teacher_app(config.to_user_config()),
        nodes=5,
    )
    assert len(record) == 2
    for step, seen in enumerate(record, start=1):
        outcome = seen["outcome"]
        # every sampled teacher answered; the three corrupted votes are dropped on the server
        assert outcome.sampled == 5 and outcome.answered == 2 and outcome.dropped == 3
        assert len(outcome.drop_reasons) == 3
        assert seen["generator_changed"]
        # every teacher asked is charged when the query is sent, dropped votes included
        honest = [r for r in seen["replies"] if _partition(r) not in TAMPERED]
        ids = {str(r.content[common.CLIENT][common.CLIENT_ID]) for r in seen["replies"]}
        assert len(ids) == 5 and seen["ledger"] == dict.fromkeys(ids, step)
        for reply in honest:
            assert set(reply.content.array_records) == {VOTES[strategy]}
            assert set(reply.content.config_records) == {common.CLIENT, common.POLICY_USED}
            assert not reply.content.metric_records  # no statistic of the teacher's data
    # bytes on the wire: the analytic payload plus a bounded framing cost per array
    first = record[0]
    if strategy == "datalens":
        analytic = datalens_protocol_bytes(8, 20, critic_steps=2)
    else:
        analytic = pate_protocol_bytes(8, teacher_steps=1, student_steps=2)
    honest = next(r for r in first["replies"] if _partition(r) not in TAMPERED)
    for message, payload in ((first["messages"][0], analytic["down"]), (honest, analytic["up"])):
        arrays = sum(len(record) for record in message.content.array_records.values())
        assert 0 <= message_bytes(message) - payload <= 256 * arrays + 2048
    assert analytic["up"] < 8 * 784 * 4 / 10  # a tenth of one float32 gradient batch, or less


def _cli(run_dir: Path, strategy: str, *args: str) -> subprocess.CompletedProcess:
    options = [f"--{k}={v}" for k, v in SMALL.items()]
    command = [sys.executable, "-m", "fedgs.cli", "simulate", "--strategy", strategy, *options]
    command += ["--ray-cpus", "2", "--object-store-mb", "256", "--out", str(run_dir), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("strategy", ["datalens", "pate-gan"])
def test_simulate_then_resume(strategy: str, tmp_path) -> None:
    run_dir = tmp_path / "run"
    first = _cli(run_dir, strategy, "--steps", "2", "--checkpoint-every", "1")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "trusted aggregator" in first.stdout
    second = _cli(run_dir, strategy, "--steps", "3", "--checkpoint-every", "1", "--resume")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    with (run_dir / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["step"]) for r in rows] == [1, 2, 3]
    assert all(int(r["answered"]) == 5 and int(r["bytes_up"]) > 0 for r in rows)
    epsilons = [float(r["epsilon_trusted_aggregator"]) for r in rows]
    assert epsilons == sorted(epsilons) and epsilons[0] > 0

    # every teacher voted in all three steps; the report's epsilon is that count's, recomputed
    ledger = TeacherLedger.from_json((run_dir / "teacher_ledger.json").read_text())
    assert set(ledger.step_counts().values()) == {3}
    privacy = json.loads((run_dir / "privacy.json").read_text())
    aggregator = privacy["trusted_aggregator"]
    assert aggregator["threat_model"] == "trusted-aggregator"
    assert privacy["strategy"] == strategy and privacy["steps"] == 3
    assert aggregator["epsilon"] == pytest.approx(epsilons[-1])
    client = aggregator["client_id"]
    fresh = TeacherLedger()
    for _ in range(3):
        fresh.record(client, ledger.signature(client)[0][0])
    assert aggregator["epsilon"] == pytest.approx(fresh.epsilon(client, 1e-5, "autodp-rdp"))
    assert "sensitivity" in privacy["mechanism"]
    if strategy == "pate-gan":
        assert "not reported" in privacy["mechanism"]["data_dependent_epsilon"]

    assert load_generator(run_dir).strategy == strategy  # fedgs evaluate reads it like GS-WGAN's
