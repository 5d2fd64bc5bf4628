"""Fewer live nodes than clients-per-step (issue 46): the GS-WGAN step asks every live node and
the run goes on, paying each query sent; it failed with "3 clients per step requested, 2 nodes
available". A dead node leaves the SuperLink's list within seconds (shorter heartbeats)."""

from __future__ import annotations

import csv
import os
import threading
from pathlib import Path

import pytest
from privacy_boundary_server_apps import SMALL

from fedgs.deploy import doorbell, flower_waits
from fedgs.run_config import RunConfig
from fedgs.server.gswgan_run import GSWGANRun
from fedgs.server.online import online_nodes
from fedgs.training.run_dir import RunDirectory, _shrunk_step_lines


class Grid:
    """The node list a grid reports (``online``: what successive calls return)."""

    def __init__(self, *online: list[int]) -> None:
        self.online = list(online)

    def get_node_ids(self) -> list[int]:
        return self.online.pop(0) if len(self.online) > 1 else self.online[0]


def _run(tmp_path: Path, **settings: object) -> GSWGANRun:
    user = {"run-dir": str(tmp_path), "clients-per-step": 3} | settings
    return GSWGANRun(RunConfig.from_user_config(SMALL, user))


@pytest.mark.parametrize("sampling", ["uniform", "least-queried"])
def test_a_step_with_fewer_nodes_online_asks_them_all_and_pays_each(
    tmp_path: Path, sampling: str
) -> None:
    run = _run(tmp_path, **{"client-sampling": sampling})
    nodes = run.strategy.sample_nodes(Grid([11, 12]), 1)  # type: ignore[arg-type]
    assert sorted(nodes) == [11, 12]
    run.strategy.record_sent(nodes)  # what configure_train records as it sends
    labels = [run.identities.label(node) for node in (11, 12)]
    assert [run.ledger.paid(None, label) for label in labels] == [1, 1]  # paid when sent
    assert run.ledger.unattributed_count() == 2


def test_the_target_stop_still_prices_m_queries(tmp_path: Path) -> None:
    """The stop's worst case asks clients-per-step nodes: never less than a shrunk step."""
    run = _run(tmp_path, **{"target-epsilon": 1e-3})
    assert run.would_pass_target(Grid([11, 12]))  # type: ignore[arg-type]
    assert not _run(tmp_path / "b", **{"target-epsilon": 1e6}).would_pass_target(Grid([11]))  # type: ignore[arg-type]


def test_no_node_online_waits_bounded_for_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fedgs.server.online.NODE_POLL", 0.01)
    assert online_nodes(Grid([], [], [7]), timeout=5) == [7]  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="no node online for 0.05 s"):
        online_nodes(Grid([]), timeout=0.05)  # type: ignore[arg-type]


def test_the_summary_names_the_shrunk_steps(tmp_path: Path) -> None:
    out = RunDirectory(tmp_path)
    config = {"strategy": "gswgan", "clients-per-step": 3}
    for step, sampled in ((1, 3), (2, 2), (3, 1)):
        out.append_metrics({"step": step, "sampled": sampled, "answered": sampled})
    with out.metrics_csv.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert _shrunk_step_lines(rows, config) == [
        "  steps with fewer nodes online than clients-per-step = 3: 2, each asked every node "
        "online (1 to 2; each query paid when sent)"
    ]
    assert _shrunk_step_lines(rows[:1], config) == []
    assert _shrunk_step_lines(rows, config | {"strategy": "fedavg_gan"}) == []


def test_supernodes_declare_the_shortest_heartbeat(tmp_path: Path) -> None:
    from flwr.common.constant import HEARTBEAT_MIN_INTERVAL
    from flwr.supercore import heartbeat

    class Connection:
        __name__ = "fake_connection"
        HEARTBEAT_DEFAULT_INTERVAL = 30

    class Sender:
        __name__ = "fake_heartbeat"
        HEARTBEAT_DEFAULT_INTERVAL = 30

    flower_waits.shorten_heartbeats(Connection, Sender)  # type: ignore[arg-type]
    assert Connection.HEARTBEAT_DEFAULT_INTERVAL == Sender.HEARTBEAT_DEFAULT_INTERVAL == 10
    assert flower_waits.HEARTBEAT_INTERVAL >= HEARTBEAT_MIN_INTERVAL
    assert isinstance(heartbeat.HEARTBEAT_DEFAULT_INTERVAL, int | float)  # what it patches

    class Other:
        __name__ = "other"

    with pytest.raises(flower_waits.FlowerInternalsChanged, match="HEARTBEAT_DEFAULT_INTERVAL"):
        flower_waits.shorten_heartbeats(Other)  # type: ignore[arg-type]


def test_a_ring_never_blocks_on_a_bell_nobody_answers() -> None:
    """The SuperLink rings a bell per message stored; a bell whose owner does not drain it (a
    node busy or dying, a ServerApp between steps) filled its queue (10 datagrams) and the next
    ring blocked a SuperLink thread for good: the deployment stopped answering mid-run."""
    bell = doorbell.Doorbell(f"issue46-{os.getpid()}")
    try:
        ringer = threading.Thread(
            target=lambda: [doorbell.ring(f"issue46-{os.getpid()}") for _ in range(100)],
            daemon=True,  # a blocked ring must fail the test, not hang it
        )
        ringer.start()
        ringer.join(timeout=5)
        assert not ringer.is_alive(), "a ring blocked on the full bell"
    finally:
        bell.close()
