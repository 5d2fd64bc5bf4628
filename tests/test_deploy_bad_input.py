"""Bad input at the boundary of a real deployment, through real Flower messages over TLS.

Malformed requests get an error reply and the node goes on serving; corrupted replies (NaN,
wrong shape, absurd values) are dropped and logged, the generator is unchanged by them, and the
queries the clients paid for are still recorded.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from deploy_support import SMALL, client_ledger, rows, server_ledger

from fedgs.client.app import ERROR_BAD_REQUEST
from fedgs.deploy.app_bundle import Components, write_app
from fedgs.deploy.launcher import LocalDeployment, LocalOptions
from fedgs.run_config import RunConfig
from fedgs.training.generator import GeneratorTrainer

pytestmark = pytest.mark.slow

NODES = 3
APPS = Path(__file__).with_name("deploy_apps.py")
BASE = SMALL | {"num-clients": NODES, "min-nodes": NODES, "reply-timeout": 120}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalDeployment]:
    with LocalDeployment(tmp_path_factory.mktemp("bad-input"), LocalOptions(nodes=NODES)) as d:
        yield d


def _run(deployment: LocalDeployment, components: Components, run_dir: Path, **config) -> None:
    app = write_app(run_dir.with_name(run_dir.name + "-app"), components, modules=[APPS])
    deployment.allow_app(app)  # the nodes run only listed apps; these test apps are listed
    result = deployment.run(BASE | {"run-dir": str(run_dir)} | config, app=app)
    assert result.ok, result


def _ledgers(deployment: LocalDeployment) -> list[int]:
    return [sum(client_ledger(deployment.state_dir(i)).values()) for i in range(NODES)]


def test_malformed_requests_get_error_replies_and_nodes_keep_serving(
    deployment: LocalDeployment, tmp_path: Path
) -> None:
    before = _ledgers(deployment)
    run_dir = tmp_path / "probe"
    _run(deployment, Components("deploy_apps:probe_server", "fedgs.client.app:app"), run_dir)

    probe = json.loads((run_dir / "probe.json").read_text())
    replies: dict[str, list[dict]] = {}
    for entry in probe["replies"]:
        replies.setdefault(entry["request"], []).append(entry)
    assert all(len(entries) == NODES for entries in replies.values()), replies
    for request in ("missing-fakes", "wrong-shape", "nan-images", "unknown-labels",
                    "labels-mismatch", "absurd-size"):  # fmt: skip
        for entry in replies[request]:
            assert entry["code"] == ERROR_BAD_REQUEST and "bad request" in entry["reason"], entry
    assert all("nonsense" in entry["reason"] for entry in replies["unknown-type"])
    # every node still serves, and only the valid query cost anything
    assert [entry["shape"] for entry in replies["valid"]] == [[8, 784]] * NODES
    assert all(deployment.components[name].alive() for name in deployment.commands())
    assert [a - b for a, b in zip(_ledgers(deployment), before, strict=True)] == [1] * NODES


def test_corrupted_replies_are_dropped_logged_and_leave_the_generator_unchanged(
    deployment: LocalDeployment, tmp_path: Path
) -> None:
    run_dir = tmp_path / "tampered"
    _run(
        deployment,
        Components("fedgs.server.deploy_app:server_app", "deploy_apps:tampering_client"),
        run_dir,
        steps=2,
        **{"clients-per-step": NODES},
    )
    # every reply of both steps was dropped, and its paid query recorded all the same
    assert [(r["answered"], r["dropped"]) for r in rows(run_dir)] == [("0", "3"), ("0", "3")]
    assert Counter(server_ledger(run_dir).values()) == Counter({2: NODES})
    log = deployment.log("flwr-run").read_text()
    for reason in ("must be finite", "must have shape", "exceed the plausible bound"):
        assert log.count(reason) >= 2, reason  # once per step
    # the generator's weights are those the run started from (its batch-norm statistics moved:
    # they follow the server's own fake batches, not any reply)
    config = RunConfig.from_user_config(BASE)
    initial = GeneratorTrainer(10, config.gswgan(), seed=config.seed).generator
    final = torch.load(run_dir / "generator.pt", weights_only=True)["generator"]
    assert all(torch.equal(final[name], value) for name, value in initial.named_parameters())
