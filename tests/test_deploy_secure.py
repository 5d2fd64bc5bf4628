"""Secure aggregation through a real deployment (issue 42): 3 SuperNodes over TLS with node
authentication on 127.0.0.1, each step's query and SecAgg+'s three later round trips as real
Flower messages. A node keeps its SecAgg+ session in Flower's ``context.state`` between them
(client/secure_node.py), which the SuperNode holds between the ClientApp processes of a run's
messages: a step that every node answered shows the session survived all four.

One deployment serves the module; the nodes' state directories (critics, ledgers) persist
across its tests, so ledgers are compared before and after each run.
"""

from __future__ import annotations

import itertools
import json
import signal
from collections import Counter
from pathlib import Path

import pytest
from deploy_support import (
    SMALL,
    bring_every_node_online,
    client_state,
    module_deployment,
    restart_node_with_policy,
    rows,
    server_ledger,
)
from dp_accounting import dp_event

from fedgs.deploy.launcher import LocalDeployment
from fedgs.privacy import PrivacyLedger
from fedgs.privacy.distributed_accounting import step_event
from fedgs.privacy.threat_models import REPLACE_ONE
from fedgs.run_config import RunConfig
from fedgs.run_data import dataset_for

pytestmark = pytest.mark.slow

NODES = 3
STEPS = 3
# every node in every step's cohort: SecAgg+ with m = 3, m_min = 3, t = 2 (the defaults for 3)
BASE = SMALL | {
    "num-clients": NODES,
    "min-nodes": NODES,
    "clients-per-step": NODES,
    "checkpoint-every": 100,
    "reply-timeout": 60.0,
}
SECURE = BASE | {"secure-aggregation": True}
CLIENTS = dataset_for(RunConfig.from_user_config(BASE)).client_ids  # node i serves CLIENTS[i]
# what the server charges each client of a secure step's cohort (server/gswgan_run.py)
SECURE_EVENT = step_event(RunConfig.from_user_config(SECURE).secure_noise().params, REPLACE_ONE)
_SUBMITTED = itertools.count()


deployment = module_deployment("secure", NODES)


@pytest.fixture(autouse=True)
def every_node_online(deployment: LocalDeployment) -> None:
    bring_every_node_online(deployment, NODES)


def _run(deployment: LocalDeployment, run_dir: Path, settings: dict) -> str:
    """Run the app to its end with ``settings`` into ``run_dir``; its streamed log."""
    log = run_dir.parent / f"flwr-run-{next(_SUBMITTED)}.log"
    flwr_run = deployment.submit(settings | {"run-dir": str(run_dir)}, log=log)
    flwr_run.wait(timeout=1200)
    result = deployment.outcome(flwr_run, log.read_text())
    assert result.ok, f"{result}\n{log.read_text()[-4000:]}"
    return log.read_text()


def _charges(deployment: LocalDeployment) -> list[Counter[dp_event.DpEvent]]:
    """Each node's own ledger (its state directory): the events its client paid, counted."""
    charges = []
    for partition_id, client in enumerate(CLIENTS[:NODES]):
        if not list(deployment.state_dir(partition_id).glob("*.pt")):
            charges.append(Counter())
            continue
        ledger = PrivacyLedger.from_json(client_state(deployment.state_dir(partition_id))["ledger"])
        charges.append(Counter(dict(ledger.signature(client))))
    return charges


def _paid_since(
    before: list[Counter[dp_event.DpEvent]], after: list[Counter[dp_event.DpEvent]]
) -> list[Counter[dp_event.DpEvent]]:
    return [a - b for b, a in zip(before, after, strict=True)]


def _step_seconds(run_dir: Path) -> list[float]:
    """Each step's wall time (metrics.csv's ``seconds`` counts from the run's start)."""
    seconds = [0.0] + [float(r["seconds"]) for r in rows(run_dir)]
    return [b - a for a, b in itertools.pairwise(seconds)]


def test_every_node_answers_every_secure_step(deployment: LocalDeployment, tmp_path: Path) -> None:
    before = _charges(deployment)
    run_dir = tmp_path / "secure"
    _run(deployment, run_dir, SECURE | {"steps": STEPS})

    # every step's cohort answered all four round trips: the sessions kept in context.state
    # lived from the query through the unmask, on every node
    metrics = rows(run_dir)
    assert [int(r["step"]) for r in metrics] == list(range(1, STEPS + 1))
    for row in metrics:
        assert (row["sampled"], row["answered"], row["dropped"]) == ("3", "3", "0"), row
        assert float(row["epsilon_secure_aggregation"]) > 0
    # the local-noise-only figure (and ddg-rdp's) beside the headline, computed at the run's end
    last = metrics[-1]
    assert float(last["epsilon_local_noise_only"]) > float(last["epsilon_secure_aggregation"])
    assert (run_dir / "generator.pt").stat().st_size > 0

    report = json.loads((run_dir / "privacy.json").read_text())
    assert report["headline"] == "secure-aggregation"
    secure = report["secure_aggregation"]
    assert (secure["threat_model"], secure["accountant"], secure["neighbouring"]) == (
        "secure-aggregation",
        RunConfig.from_user_config(SECURE).accountant,
        REPLACE_ONE,
    )
    assert secure["delta"] == report["delta"] == RunConfig.from_user_config(SECURE).delta
    assert report["neighbouring_relation"] and secure["steps"] == STEPS
    assert secure["epsilon"] == float(metrics[-1]["epsilon_secure_aggregation"])
    local = report["untrusted_server"]
    assert local["local_noise_only"] is True and local["epsilon"] > secure["epsilon"]
    assert report["queries"]["total"] == NODES * STEPS

    # the server charged each client one secure event per step as it sent the query, and each
    # node's own ledger paid exactly that event once per step, nothing else
    assert server_ledger(run_dir) == dict.fromkeys(CLIENTS[:NODES], STEPS)
    paid = _paid_since(before, _charges(deployment))
    assert paid == [Counter({SECURE_EVENT: STEPS})] * NODES

    # the same deployment, the same settings in the clear, right after: the step times compared
    plain_dir = tmp_path / "plain"
    _run(deployment, plain_dir, BASE | {"steps": STEPS})
    assert [r["answered"] for r in rows(plain_dir)] == ["3"] * STEPS
    secure_steps, plain_steps = _step_seconds(run_dir), _step_seconds(plain_dir)
    print(
        "\nstep seconds, secure:", " ".join(f"{s:.2f}" for s in secure_steps),
        "| plain:", " ".join(f"{s:.2f}" for s in plain_steps),
    )  # fmt: skip


def test_a_node_whose_policy_refuses_the_cohort_pays_nothing(
    deployment: LocalDeployment, tmp_path: Path
) -> None:
    """Node 2 asks for a cohort of at least 10 (policy-min-cohort): it refuses each secure
    query before paying; the two left are fewer than m_min = 3, so every step aborts and
    releases nothing, while every query sent stays paid on the server's side."""
    refusing = 2
    restart_node_with_policy(deployment, refusing, {"policy-min-cohort": 10})
    try:
        deployment.wait_for_nodes(NODES)
        before = _charges(deployment)
        run_dir = tmp_path / "refused"
        log = _run(deployment, run_dir, SECURE | {"steps": 2})
        metrics = rows(run_dir)
        assert [(r["sampled"], r["answered"], r["dropped"]) for r in metrics] == [
            ("3", "0", "3")
        ] * 2
        assert "policy-min-cohort" in log and "aborted, nothing released" in log
        paid = _paid_since(before, _charges(deployment))
        # the refusing node paid nothing; the others paid for the contributions they encoded
        # (charged when computed, before the abort: nothing was released, nothing refunded)
        assert paid == [Counter({SECURE_EVENT: 2})] * 2 + [Counter()]
        # the server charged all three each step as it sent the queries: the two who answered
        # bound to their clients, node 2's left unattributed (its refusal names no client)
        assert server_ledger(run_dir) == dict.fromkeys(CLIENTS[:2], 2)
        ledger = PrivacyLedger.from_json((run_dir / "ledger.json").read_text())
        assert ledger.unattributed_count() == 2
    finally:
        deployment.kill_node(refusing, signal.SIGTERM)
        deployment.start_node(refusing)  # its usual policy again
        deployment.wait_for_nodes(NODES)
