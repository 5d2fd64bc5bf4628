"""The identification (``train.identify``): every node names the client it holds, and nothing
else, before a run's first paid query, so a target stop on a per-client ledger can run from the
first step. Attacker's view: the reply carries no array, no metric and no record computed from
the data; a request with arrays or a run config below the node's policy is refused; the
identification charges no budget."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from fedgs.algorithms import IDENTIFY, STRATEGIES
from fedgs.client import gate
from fedgs.client.dp_merf_session import DpMerfSession
from fedgs.privacy.policy import NodePolicy, PolicyViolation
from fedgs.protocols import common
from fedgs.run_config import RunConfig
from fedgs.run_data import dataset_for
from fedgs.server.identify import identify_clients
from fedgs.server.replies import NodeIdentities


def _config(tmp_path: Path, strategy: str) -> RunConfig:
    return RunConfig(strategy=strategy, run_dir=str(tmp_path / "run"))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_node_names_its_client_and_nothing_else(tmp_path: Path, strategy: str) -> None:
    config = _config(tmp_path, strategy)
    reply = gate.serve(IDENTIFY, RecordDict(), config, NodePolicy.from_run_config(config), 2)
    assert isinstance(reply, RecordDict)
    assert not reply.array_records and not reply.metric_records
    assert set(reply.config_records) == {common.CLIENT, common.POLICY_USED}
    assert common.claimed_client(reply) == dataset_for(config).client_ids[2]
    assert dict(reply.config_records[common.POLICY_USED]) == {}
    other = gate.serve(IDENTIFY, RecordDict(), config, NodePolicy.from_run_config(config), 3)
    assert common.claimed_client(other) != common.claimed_client(reply)


def test_an_identification_charges_no_budget(tmp_path: Path) -> None:
    config = _config(tmp_path, "dp-merf")
    gate.serve(IDENTIFY, RecordDict(), config, NodePolicy.from_run_config(config), 1)
    assert DpMerfSession(config, 1).ledger.counts() == {}


def test_an_identification_with_arrays_is_refused(tmp_path: Path) -> None:
    config = _config(tmp_path, "gswgan")
    smuggled = RecordDict({"fakes": ArrayRecord({"x": Array(np.zeros((1, 784), np.float32))})})
    with pytest.raises(common.ProtocolError, match="carries no arrays"):
        gate.serve(IDENTIFY, smuggled, config, NodePolicy.from_run_config(config), 0)


def test_an_identification_below_the_nodes_policy_is_refused(tmp_path: Path) -> None:
    config = _config(tmp_path, "dp-merf")
    policy = NodePolicy.from_run_config(config)
    louder = config.with_updates(merf_noise_multiplier=config.merf_noise_multiplier / 2)
    with pytest.raises(PolicyViolation, match="merf-noise-multiplier"):
        gate.serve(IDENTIFY, RecordDict(), louder, policy, 0)


# --- the server side: every unbound node asked once ------------------------------------------


class _Nodes:
    """A grid whose nodes answer an identification at once: ``clients`` maps a node to the
    client its reply names, or to None for an error reply."""

    def __init__(self, clients: dict[int, str | None]) -> None:
        self.clients, self.asked, self._sent = clients, [], {}

    def get_node_ids(self) -> list[int]:
        return list(self.clients)

    def push_messages(self, messages: list) -> list[str]:
        ids = []
        for message in messages:
            assert message.metadata.message_type == IDENTIFY and not message.content.array_records
            node = message.metadata.dst_node_id
            self.asked.append(node)
            ids.append(f"m{node}")
            self._sent[f"m{node}"] = node
        return ids

    def pull_messages(self, message_ids: list[str]) -> list:
        return [self._reply(self._sent.pop(i), i) for i in message_ids]

    def _reply(self, node: int, message_id: str) -> SimpleNamespace:
        client = self.clients[node]
        record = ConfigRecord({common.CLIENT_ID: client or ""})
        return SimpleNamespace(
            metadata=SimpleNamespace(src_node_id=node, reply_to_message_id=message_id),
            content=RecordDict({common.CLIENT: record}),
            has_error=lambda: client is None,
            error=SimpleNamespace(reason="refused: no state dir"),
        )


def test_the_server_asks_every_unbound_node_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)
    nodes = _Nodes({1: "writer-a", 2: "writer-b", 3: None, 4: "writer-d"})
    identities = NodeIdentities()
    identities._clients[4] = "writer-d"  # bound by an earlier reply: not asked again
    unbound = identify_clients(nodes, identities, reply_timeout=5.0)  # type: ignore[arg-type]
    assert unbound == 1 and sorted(nodes.asked) == [1, 2, 3]
    assert [identities.client_of(n) for n in (1, 2, 3, 4)] == [
        "writer-a",
        "writer-b",
        None,  # an error reply binds nothing: its queries count as an unknown node's
        "writer-d",
    ]
