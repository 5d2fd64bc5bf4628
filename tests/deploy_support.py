"""Shared pieces of the deployment tests: small settings, bounded waits, what lies on disk.

Every wait is bounded; a test that times out says what it waited for.
"""

from __future__ import annotations

import csv
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
import torch

from fedgs.deploy import processes, topology
from fedgs.deploy.launcher import LocalDeployment, LocalOptions
from fedgs.privacy import PrivacyLedger

# tiny models and batches (the embedded data, one client per node): seconds per step; sigma 12
# keeps a node inside its default budget (epsilon 10) for ~50 queries of 8 rows, more than a
# module's deployment asks of one node
SMALL = {
    "noise-multiplier": 12.0,
    "batch-size": 8,
    "critic-steps": 2,
    "generator-width": 8,
    "critic-width": 8,
    "warm-start-steps": 0,
    "eval-every": 0,
}
WAIT = 600.0  # a cold start on a loaded 2-core machine; runs normally take well under this


def console_script(name: str) -> str:
    """A console script (`fedgs`, Flower's `flwr`) of the interpreter under test, as an operator
    types it: the first one on PATH may belong to another install (a fresh clone's tests then
    ran the other checkout's code) or be absent when the environment is not activated."""
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else name


def wait_for(condition: Callable[[], object], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"gave up after {timeout:g} s waiting for {what}"
        time.sleep(0.5)


def rows(run_dir: Path) -> list[dict[str, str]]:
    path = run_dir / "metrics.csv"
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def server_ledger(run_dir: Path) -> dict[str, int]:
    """Queries per client the server recorded as paid (ledger.json, saved every step)."""
    path = run_dir / "ledger.json"
    return PrivacyLedger.from_json(path.read_text()).query_counts() if path.exists() else {}


def client_state(state_dir: Path) -> dict:
    """The one client's saved state in a node's state directory (critic, ledger, warm start)."""
    (path,) = state_dir.glob("*.pt")
    return torch.load(path, weights_only=True)


def client_ledger(state_dir: Path) -> dict[str, int]:
    """The queries the client itself recorded as paid; {} before its first answer."""
    if not list(state_dir.glob("*.pt")):
        return {}
    return PrivacyLedger.from_json(client_state(state_dir)["ledger"]).query_counts()


def live_processes_of(out: Path) -> list[str]:
    """Command lines of live processes started for the deployment in ``out`` (every one of them
    inherits FLWR_HOME=out/flwr-home, whoever its parent is now)."""
    needle = f"FLWR_HOME={out.resolve() / 'flwr-home'}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if needle in environ and stat.rsplit(")", 1)[1].split()[0] != "Z":
            found.append(processes.command_line(int(entry.name)))
    return found


def socket_superlink_args(socket: Path, secret: Path) -> list[str]:
    """A SuperLink without TLS whose Control and runtime APIs answer on the Unix socket
    ``socket`` (the deployment tests add TLS); its SuperExec secret is the file ``secret``."""
    from fedgs.deploy.launcher import HOST, free_port

    return topology.superlink_args(
        host=HOST,
        port=free_port(),
        private=str(socket),
        security=topology.Security(tls=False, node_auth=False),
        tls=None,
        database=topology.IN_MEMORY_DATABASE,
        superexec_secret=str(secret),
        python=sys.executable,
    )


def restart_node_with_policy(
    deployment: LocalDeployment, partition_id: int, policy: Mapping[str, str | int | float]
) -> None:
    """Restart node ``partition_id`` (SuperNode and SuperExec) with ``policy`` over the
    deployment's own: its ``--node-config`` holds those ``policy-*`` keys, nothing else
    changes (the data holder who chose a stricter policy); ``start_node`` restores it."""
    deployment.kill_node(partition_id, signal.SIGTERM)
    name = topology.node_name(partition_id)
    argv = deployment.commands()[name]
    argv[argv.index("--node-config") + 1] = topology.node_config(
        partition_id,
        deployment.options.nodes,
        str(deployment.state_dir(partition_id)),
        {**deployment.options.policy, **policy},
        deployment.options.device,
    )
    deployment.start_component(name, argv)
    deployment.start_component(topology.executor_name(partition_id))


def module_deployment(name: str, nodes: int) -> Callable[..., Iterator[LocalDeployment]]:
    """A module-scoped ``deployment`` fixture: ``nodes`` SuperNodes under a temp folder named
    ``name``, every process it started gone once the module is done."""

    @pytest.fixture(scope="module")
    def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalDeployment]:
        with LocalDeployment(tmp_path_factory.mktemp(name), LocalOptions(nodes=nodes)) as d:
            yield d
        assert processes.marked(d.marker) == []

    return deployment


def bring_every_node_online(deployment: LocalDeployment, nodes: int) -> None:
    """Restart any node (SuperNode and its SuperExec) a test killed, then wait for all of them:
    each test of a module sharing one deployment starts from every node online."""
    for partition_id in range(nodes):
        node = deployment.components.get(topology.node_name(partition_id))
        if node is None or not node.alive():
            if node is not None:
                deployment.kill_node(partition_id)  # its SuperExec too
            deployment.start_node(partition_id)
    deployment.wait_for_nodes(nodes)
