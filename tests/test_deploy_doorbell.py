"""The doorbells of a local deployment (SuperLink to SuperNode, SuperNode to its ClientApp
SuperExec): a ring wakes the waiting loop at once, silence lets it sleep its interval, and the
patches refuse Flower internals they were not written for."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fake_modules import module_from_source
from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState
from flwr.server.superlink.linkstate.sql_linkstate import SqlLinkState
from flwr.supercore.superexec import run_superexec
from flwr.supernode import start_client_internal

from fedgs.deploy import doorbell, topology
from fedgs.deploy.flower_waits import FlowerInternalsChanged
from fedgs.deploy.launcher import LocalDeployment, LocalOptions
from fedgs.deploy.topology import Security

pytestmark = pytest.mark.skipif(not doorbell.available(), reason="abstract sockets: Linux only")


def _name() -> str:
    return uuid.uuid4().hex


def test_a_ring_wakes_the_waiter_and_silence_lets_it_sleep() -> None:
    name = _name()
    bell = doorbell.Doorbell(name)
    try:
        started = time.monotonic()
        bell.wait(0.3)
        assert time.monotonic() - started >= 0.29  # nobody rang: the whole interval
        threading.Timer(0.05, doorbell.ring, (name,)).start()
        started = time.monotonic()
        bell.wait(30)
        assert time.monotonic() - started < 20  # woken by the ring, not the timeout
        for _ in range(3):
            doorbell.ring(name)
        bell.wait(30)  # the first ring wakes it and the two after it are drained
        started = time.monotonic()
        bell.wait(0.3)
        assert time.monotonic() - started >= 0.29
    finally:
        bell.close()


def test_ringing_with_nobody_listening_is_fine() -> None:
    doorbell.ring(_name())


def test_the_supernode_rings_when_it_stored_a_message_and_pulls_its_objects(
    tmp_path: Path,
) -> None:
    source = (
        "def pull_objects(ids):\n    return dict.fromkeys(ids, b'')\n\n"
        "def receive(message, state):\n    state.store_message(message)\n"
        "    obj_contents = pull_objects([message])\n    return obj_contents\n\n"
        "def idle():\n    return None\n"
    )
    module = module_from_source(tmp_path, source)
    name = _name()
    bell = doorbell.Doorbell(name)
    try:
        doorbell.ring_on_arrival(name, module)
        assert module.idle() is None  # nothing pulled: no ring
        started = time.monotonic()
        bell.wait(0.3)
        assert time.monotonic() - started >= 0.29
        stored = []
        state = SimpleNamespace(store_message=stored.append)
        assert module.receive("m", state) == {"m": b""}  # Flower's pull still runs
        assert stored == ["m"]
        started = time.monotonic()
        bell.wait(30)
        assert time.monotonic() - started < 20
    finally:
        bell.close()


def test_patches_refused_on_other_internals(tmp_path: Path) -> None:
    no_pull = module_from_source(tmp_path, "def loop():\n    return None\n")
    with pytest.raises(FlowerInternalsChanged, match="pull_objects"):
        doorbell.ring_on_arrival(_name(), no_pull)
    other_sleep = module_from_source(tmp_path, "import time\n\ndef loop():\n    time.sleep(1)\n")
    with pytest.raises(FlowerInternalsChanged, match="task_poll_interval"):
        doorbell.answer_rings(_name(), other_sleep)
    assert other_sleep.time is time


def test_patches_apply_to_the_installed_flower(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_superexec, "time", run_superexec.time)
    monkeypatch.setattr(start_client_internal, "pull_objects", start_client_internal.pull_objects)
    bell = doorbell.answer_rings(_name())
    try:
        doorbell.ring_on_arrival(_name())
        assert run_superexec.time.monotonic() > 0  # the rest of time is untouched
    finally:
        bell.close()


def test_a_warm_deployment_rings_and_polls_only_as_a_fallback(tmp_path: Path) -> None:
    deployment = LocalDeployment(tmp_path, LocalOptions(nodes=2))
    commands = deployment.commands()
    for partition_id in range(2):
        name = deployment.doorbell_name(partition_id)
        assert name is not None
        node = commands[topology.node_name(partition_id)]
        executor = commands[topology.executor_name(partition_id)]
        assert f"--doorbell={name}" in node and f"--doorbell={name}" in executor
        env = deployment.env(topology.executor_name(partition_id))
        assert "FLWR_SUPEREXEC_TASK_POLL_INTERVAL" not in env  # Flower's 1 s: the fallback
    polling = LocalDeployment(tmp_path / "poll", LocalOptions(nodes=2, doorbell=False))
    assert polling.doorbell_name(0) is None
    assert not any("--doorbell" in arg for args in polling.commands().values() for arg in args)
    assert topology.WARM_EXECUTOR_ENV.items() <= polling.env(topology.executor_name(0)).items()


class _LinkState:
    """The LinkState methods the SuperLink's rings use: messages for nodes 1 and 2 are stored,
    for node 3 refused; node 1 has a key, node 2 none (node authentication off); replies of
    run 5 are stored, of run 6 refused."""

    def store_message_ins(self, message: Any) -> str | None:
        return None if message.metadata.dst_node_id == 3 else "message-id"

    def store_message_res(self, message: Any) -> str | None:
        return None if message.metadata.run_id == 6 else "reply-id"

    def get_node_info(self, *, node_ids: list[int]) -> list[SimpleNamespace]:
        keys = {1: b"key-of-node-1", 2: b"", 3: b"key-of-node-3"}
        return [SimpleNamespace(public_key=keys[n]) for n in node_ids]


def _message(node_id: int = 0, run_id: int = 0) -> SimpleNamespace:
    return SimpleNamespace(metadata=SimpleNamespace(dst_node_id=node_id, run_id=run_id))


def _rang(bell: doorbell.Doorbell) -> bool:
    started = time.monotonic()
    bell.wait(0.3)
    return time.monotonic() - started < 0.29


def test_the_superlink_rings_the_node_a_message_was_stored_for() -> None:
    prefix = _name()
    doorbell.ring_nodes_on_store(prefix, _LinkState)
    state = _LinkState()
    bells = {
        k: doorbell.Doorbell(doorbell.node_bell(prefix, f"key-of-node-{k}".encode()))
        for k in (1, 3)
    }
    try:
        assert state.store_message_ins(_message(3)) is None
        assert not _rang(bells[3])  # refused: nothing to pull
        assert state.store_message_ins(_message(1)) == "message-id"
        assert _rang(bells[1]) and not _rang(bells[3])
        assert state.store_message_ins(_message(2)) == "message-id"  # no key: no bell, no error
    finally:
        for bell in bells.values():
            bell.close()


def test_the_superlink_rings_the_serverapp_of_the_run_a_reply_was_stored_for() -> None:
    prefix = _name()
    doorbell.ring_nodes_on_store(prefix, _LinkState)
    state = _LinkState()
    bells = {run: doorbell.Doorbell(doorbell.run_bell(prefix, run)) for run in (5, 6)}
    try:
        assert state.store_message_res(_message(run_id=6)) is None
        assert not _rang(bells[6])
        assert state.store_message_res(_message(run_id=5)) == "reply-id"
        assert _rang(bells[5]) and not _rang(bells[6])
    finally:
        for bell in bells.values():
            bell.close()


def test_the_supernode_pulls_when_its_bell_rings(tmp_path: Path) -> None:
    source = (
        "import time\n\ndef empty_pull():\n    time.sleep(3)\n\n"
        "def other():\n    time.sleep(0.01)\n"
    )
    module = module_from_source(tmp_path, source)
    prefix = _name()
    bell = doorbell.wake_on_link_ring(prefix, b"node-key", module)
    try:
        started = time.monotonic()
        module.empty_pull()  # silence: the fallback, not Flower's 3 s
        assert doorbell.LINK_BELL_FALLBACK - 0.01 <= time.monotonic() - started < 2.9
        threading.Timer(0.05, doorbell.ring, (doorbell.node_bell(prefix, b"node-key"),)).start()
        started = time.monotonic()
        module.empty_pull()
        assert time.monotonic() - started < doorbell.LINK_BELL_FALLBACK - 0.01
        module.other()  # other sleeps are the previous time module's
        assert module.time.monotonic() > 0
    finally:
        bell.close()


def test_link_patches_refused_on_other_internals(tmp_path: Path) -> None:
    other_sleep = module_from_source(tmp_path, "import time\n\ndef loop():\n    time.sleep(1)\n")
    with pytest.raises(FlowerInternalsChanged, match="sleeps 3 s"):
        doorbell.wake_on_link_ring(_name(), b"key", other_sleep)
    assert other_sleep.time is time
    with pytest.raises(FlowerInternalsChanged, match="store_message_ins"):
        doorbell.ring_nodes_on_store(_name(), SimpleNamespace)


def test_link_patches_apply_to_the_installed_flower(monkeypatch: pytest.MonkeyPatch) -> None:
    for state_class in (InMemoryLinkState, SqlLinkState):
        for method in ("store_message_ins", "store_message_res"):
            monkeypatch.setattr(state_class, method, getattr(state_class, method))
    monkeypatch.setattr(start_client_internal, "time", start_client_internal.time)
    doorbell.ring_nodes_on_store(_name())
    bell = doorbell.wake_on_link_ring(_name(), b"key")
    bell.close()


def test_the_link_rings_only_nodes_with_keys(tmp_path: Path) -> None:
    authenticated = LocalDeployment(tmp_path, LocalOptions(nodes=1))
    prefix = authenticated.link_doorbells
    assert prefix is not None
    commands = authenticated.commands()
    assert f"--node-doorbells={prefix}" in commands[topology.SUPERLINK]
    assert f"--link-doorbell={prefix}" in commands[topology.node_name(0)]
    serverapp_env = authenticated.env(topology.SERVERAPP_EXECUTOR)
    assert serverapp_env[doorbell.RUN_BELL_ENV] == prefix
    insecure = LocalOptions(nodes=1, security=Security(tls=False, node_auth=False))
    open_deployment = LocalDeployment(tmp_path / "insecure", insecure)
    assert open_deployment.link_doorbells is None
    assert doorbell.RUN_BELL_ENV not in open_deployment.env(topology.SERVERAPP_EXECUTOR)
    assert open_deployment.doorbell_name(0) is not None  # the node still rings its SuperExec
    args = [arg for argv in open_deployment.commands().values() for arg in argv]
    assert not any(arg.startswith(("--node-doorbells", "--link-doorbell")) for arg in args)
