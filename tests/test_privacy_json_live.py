"""privacy.json is never behind the clients' own ledgers, even after a SIGKILL (issue 40).

It was written at checkpoints only, so a run killed between them showed fewer queries than its
clients had paid (6 where three clients' ledgers held 7). Now it is rewritten atomically with
the ledger before each step's messages leave and after its replies: whenever the run dies, it
counts at least every query a client answered. A real ``fedgs simulate`` process (Flower's
simulation engine) is killed with SIGKILL mid-run, far from any checkpoint.
"""

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

from fedgs.privacy import PrivacyLedger

pytestmark = pytest.mark.slow

SMALL = ["--num-clients", "4", "--batch-size", "8", "--critic-steps", "1"]
SMALL += ["--generator-width", "4", "--critic-width", "4", "--warm-start-steps", "1"]
SMALL += ["--clients-per-step", "2", "--eval-every", "0", "--ray-cpus", "2"]
SMALL += ["--object-store-mb", "256", "--steps", "60", "--checkpoint-every", "1000"]


def _server_total(run_dir: Path) -> int:
    path = run_dir / "ledger.json"
    if not path.exists():
        return 0
    return sum(PrivacyLedger.from_json(path.read_text()).query_counts().values())


def _client_ledgers(state_dir: Path) -> dict[str, PrivacyLedger]:
    ledgers = {}
    for path in state_dir.glob("*.pt"):
        state = torch.load(path, weights_only=True)
        ledgers[path.stem] = PrivacyLedger.from_json(state["ledger"])
    return ledgers


def _kill_after(run_dir: Path, queries: int) -> None:
    """Start the run; SIGKILL it and every Ray process it started once ``queries`` are paid."""
    command = [sys.executable, "-m", "fedgs.cli", "simulate", *SMALL, "--out", str(run_dir)]
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 600
        while _server_total(run_dir) < queries:
            assert process.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "the run made no progress"
            time.sleep(0.05)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)


def test_privacy_json_after_a_sigkill_counts_every_query_a_client_paid(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _kill_after(run_dir, queries=7)  # past step 3, no checkpoint before step 1000
    privacy = json.loads((run_dir / "privacy.json").read_text())
    clients = _client_ledgers(run_dir / "client-state")
    paid = {client: sum(ledger.query_counts().values()) for client, ledger in clients.items()}
    assert sum(paid.values()) >= 6, paid  # the clients answered queries before the kill
    queries = privacy["queries"]
    assert queries["total"] + queries["unattributed"] >= sum(paid.values())
    assert queries["max"] + queries["unattributed"] >= max(paid.values())
    delta, accountant = privacy["delta"], privacy["accountant"]
    worst_client = max(ledger.epsilon_max(delta, accountant)[0] for ledger in clients.values())
    assert privacy["untrusted_server"]["epsilon"] >= worst_client
    # the trusted-sampler figure says when it was computed (at the run's first write here)
    trusted = privacy["trusted_sampler"]
    assert trusted["computed_at_step"] <= privacy["steps"]
    assert trusted["epsilon"] <= privacy["untrusted_server"]["epsilon"]
