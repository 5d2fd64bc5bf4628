"""Fed-Avg GAN through Flower's real simulation engine: replies, clipping, drops, bytes, CLI."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from flower_apps import (
    TAMPERED,
    recording_fedavg_server_app,
    simulate,
    tampering_fedavg_client_app,
)

from fedgs.comm import fedavg_protocol_bytes, message_bytes
from fedgs.protocols import common, fedavg_gan
from fedgs.run_config import RunConfig

pytestmark = pytest.mark.slow

SMALL = {
    "strategy": "fedavg-gan",
    "fedavg-models": "gswgan",
    "num-clients": 5,
    "batch-size": 8,
    "generator-width": 4,
    "critic-width": 4,
    "fedavg-critic-steps": 2,
    "fedavg-generator-steps": 1,
    "fedavg-clients-per-round": 5,  # q = 1: every node every round
    "fedavg-noise-multiplier": 0.0,  # no noise, so the critic's change can be checked exactly
    "fedavg-lr-client": 0.05,  # large enough that honest deltas get clipped too
    "eval-every": 0,
    "min-nodes": 5,
}


def test_rounds_clip_every_delta_and_drop_bad_ones(tmp_path) -> None:
    config = RunConfig.from_user_config(SMALL, {"run-dir": str(tmp_path)})
    record: list[dict] = []
    simulate(
        recording_fedavg_server_app(config, 2, record),
        tampering_fedavg_client_app(config.to_user_config()),
        nodes=5,
    )
    assert [r["rounds"] for r in record] == [1, 2]
    s, m = config.fedavg_clip_norm, config.fedavg_clients_per_round
    for rnd in record:
        outcome = rnd["outcome"]
        assert outcome.sampled == 5
        # NaN and wrong-shape deltas are dropped; the huge one is clipped to S, not dropped
        assert outcome.answered == 5 - 2 and outcome.dropped == 2
        assert sum("non-finite" in r for r in outcome.drop_reasons) == 1
        assert sum("shape" in r for r in outcome.drop_reasons) == 1
        # without noise, D moves by at most (answered clients) * S / m
        assert 0 < rnd["critic_change"] <= outcome.answered * s / m * (1 + 1e-5)
        for reply in rnd["replies"]:
            partition = int(reply.content[common.CLIENT]["partition-id"])
            if partition in TAMPERED:
                continue
            assert set(reply.content.keys()) == {
                fedavg_gan.DELTA,
                common.CLIENT,
                common.POLICY_USED,
            }  # no loss or delta norm of private data
            delta = common.record_arrays(reply.content[fedavg_gan.DELTA])
            assert list(delta) == rnd["parameters"]
            norm = math.sqrt(sum(float((v.astype(np.float64) ** 2).sum()) for v in delta.values()))
            assert norm <= s * (1 + 1e-5)  # the client clips before it replies
    # bytes on the wire vs the analytic float32 payload
    messages, replies = record[0]["messages"], record[0]["replies"]
    critic = messages[0].content[fedavg_gan.CRITIC]
    values = sum(a.numpy().size for a in critic.values())
    parameters = sum(
        a.numpy().size
        for a in next(r for r in replies if r.has_content()).content[fedavg_gan.DELTA].values()
    )
    analytic = fedavg_protocol_bytes(values, parameters, 8, 2)
    honest = next(r for r in replies if r.has_content())
    # the measured size is the payload plus a bounded framing cost per array (.npy header, key)
    for message, payload in ((messages[0], analytic["down"]), (honest, analytic["up"])):
        arrays = sum(len(record) for record in message.content.array_records.values())
        assert 0 <= message_bytes(message) - payload <= 256 * arrays + 2048


def test_fedavg_client_with_an_untrusted_server_budget_refuses(tmp_path) -> None:
    from fedgs.client.common import RequestRefused
    from fedgs.client.fedavg_gan_session import FedAvgClient

    config = RunConfig.from_user_config(
        SMALL, {"run-dir": str(tmp_path), "client-budget-epsilon": 10.0}
    )
    with pytest.raises(RequestRefused, match="trusted server"):
        FedAvgClient(config, 0).answer(None)


def _cli(run_dir: Path, *args: str) -> subprocess.CompletedProcess:
    options = [f"--{k}={v}" for k, v in SMALL.items() if k not in ("min-nodes",)]
    command = [sys.executable, "-m", "fedgs.cli", "simulate", *options, "--ray-cpus", "2"]
    command += ["--object-store-mb", "256", "--out", str(run_dir), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=900)


def test_simulate_fedavg_gan_then_resume(tmp_path) -> None:
    run_dir = tmp_path / "run"
    first = _cli(run_dir, "--steps", "2", "--checkpoint-every", "1", "--wire-dtype", "float16")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "epsilon (trusted server, DP-FedAvg" in first.stdout and "add-remove" in first.stdout
    second = _cli(
        run_dir, "--steps", "3", "--checkpoint-every", "1", "--resume", "--wire-dtype", "float16"
    )
    assert second.returncode == 0, second.stdout + second.stderr
    with (run_dir / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["step"]) for r in rows] == [1, 2, 3]
    assert all(int(r["bytes_down"]) > 0 and int(r["bytes_up"]) > 0 for r in rows)
    privacy = json.loads((run_dir / "privacy.json").read_text())
    assert privacy["rounds"] == 3 and privacy["trusted_server"]["threat_model"] == "trusted-server"
    assert privacy["neighbouring"] == privacy["trusted_server"]["neighbouring"] == "add-remove"
    assert privacy["sampling"]["amplified_figures_hold"]  # secret Poisson sampling by default
    assert (run_dir / "generator.pt").exists()
