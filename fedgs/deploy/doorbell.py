"""Doorbells in a local deployment: the SuperLink rings a SuperNode when it has a message for
it, and the SuperNode rings its ClientApp SuperExec when that message has arrived.

Flower 1.41's SuperExec asks its SuperNode for a task every ``FLWR_SUPEREXEC_TASK_POLL_INTERVAL``
seconds (1 s by default). A short interval brings a message to its ClientApp sooner but costs
every node a steady stream of requests (with three nodes on two cores at 50 ms: ~60 a second,
each through the SuperNode's HTTP stack, while the critic trains on the same cores). With the
doorbell the SuperNode, once it has stored a message and its task (and begins to fetch the
message's objects from the SuperLink), sends one datagram to a socket the SuperExec waits on;
the SuperExec then asks for the task at once and otherwise falls back to its interval. Lost or
early rings cost nothing but that fallback.

The SuperNode, likewise, pulls the SuperLink for messages every ``EMPTY_PULL_WAIT`` s
(fedgs.deploy.flower_waits): on average half that interval passes between a query's arrival at
the SuperLink and its pull, and the pulls of idle nodes load the SuperLink. With the link's bell
(node authentication on, so the SuperLink knows each node's public key and the node its own),
the SuperLink rings the node's bell after it stored a message for it, and the node pulls at
once; without a ring it pulls after ``LINK_BELL_FALLBACK`` s. The SuperLink also rings the
run's ServerApp when a reply arrives (``RUN_BELL_ENV`` names the bells' prefix in its
environment; fedgs.server.deploy_app waits on it between its checks for replies).

A bell is a Linux abstract-namespace Unix datagram socket (no file, no path-length limit;
reachable only from the same host and network namespace). It carries no data: only the fact
that a message arrived, which the waiter learns from its next poll anyway. Any process on the
host may ring a bell: a ring makes the waiter poll once, nothing more. Names carry the
deployment's random marker, so no other process can take a bell's name before it is bound.
"""

from __future__ import annotations

import hashlib
import inspect
import socket
import sys
import time
from types import ModuleType
from typing import Any

from fedgs.deploy.flower_waits import SleepsReplaced, require

LINK_BELL_FALLBACK = 1.0  # s between a SuperNode's pulls when its bell stays silent
RUN_BELL_ENV = "FEDGS_RUN_DOORBELLS"  # the bells' prefix, in the ServerApp's environment


def available() -> bool:
    """Abstract Unix sockets exist on Linux only; elsewhere the SuperExec polls."""
    return sys.platform.startswith("linux")


def address(name: str) -> str:
    """The abstract socket address of bell ``name`` (a NUL byte, then the name)."""
    return "\0fedgs-doorbell-" + name


def ring(name: str) -> None:
    """Ring bell ``name``; nobody listening (the SuperExec not started yet) is fine."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as bell:
        try:
            # never blocks: a full queue (10 rings unanswered) blocked the SuperLink's thread
            bell.sendto(b"\0", socket.MSG_DONTWAIT, address(name))
        except OSError:  # no listener, or its queue is full: it has rings to answer already
            pass


class Doorbell:
    """The SuperExec's end: ``wait(seconds)`` returns on a ring or after ``seconds``."""

    def __init__(self, name: str) -> None:
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.bind(address(name))

    def wait(self, seconds: float) -> None:
        if seconds > 0:
            self._socket.settimeout(seconds)
            try:
                self._socket.recv(16)
            except TimeoutError:
                return
        self._socket.setblocking(False)
        try:
            while self._socket.recv(16):  # rings that came meanwhile: one poll answers all
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        self._socket.close()


def answer_rings(name: str, module: ModuleType | None = None) -> Doorbell:
    """Make the SuperExec's task loop (``flwr.supercore.superexec.run_superexec`` unless
    ``module`` is given) wait for bell ``name`` instead of sleeping its poll interval."""
    if module is None:
        from flwr.supercore.superexec import run_superexec as module
    require(getattr(module, "time", None) is time, f"{module.__name__} imports time")
    require(
        "time.sleep(task_poll_interval)" in inspect.getsource(module),
        f"{module.__name__} sleeps time.sleep(task_poll_interval) between polls",
    )
    doorbell = Doorbell(name)
    module.time = SleepsReplaced(doorbell.wait)  # type: ignore[attr-defined]
    return doorbell


def ring_on_arrival(name: str, module: ModuleType | None = None) -> None:
    """Make the SuperNode (``flwr.supernode.start_client_internal`` unless ``module`` is given)
    ring bell ``name`` each time it has stored a message and its task and begins to pull the
    message's objects: the ClientApp starts meanwhile, and waits for the objects as it would
    for a slow SuperNode (Flower's object pulls retry)."""
    if module is None:
        from flwr.supernode import start_client_internal as module
    pull = getattr(module, "pull_objects", None)
    source = inspect.getsource(module)
    require(callable(pull), f"{module.__name__} imports pull_objects")
    stored, pulled = "state.store_message(message)", "obj_contents = pull_objects("
    require(
        stored in source and pulled in source and source.index(stored) < source.index(pulled),
        f"{module.__name__} stores a message before it pulls its objects with pull_objects",
    )

    def ring_and_pull(*args: Any, **kwargs: Any) -> Any:
        ring(name)
        return pull(*args, **kwargs)

    module.pull_objects = ring_and_pull  # type: ignore[attr-defined]


def node_bell(prefix: str, public_key: bytes) -> str:
    """The bell of the SuperNode whose public key (Flower's bytes of it) is ``public_key``."""
    return f"{prefix}-node-{hashlib.sha256(public_key).hexdigest()[:16]}"


def wake_on_link_ring(prefix: str, public_key: bytes, module: ModuleType | None = None) -> Doorbell:
    """Make the SuperNode's loop (``flwr.supernode.start_client_internal`` unless ``module`` is
    given) wait for its bell after a pull that found nothing, instead of sleeping."""
    if module is None:
        from flwr.supernode import start_client_internal as module
    require("time.sleep(3)" in inspect.getsource(module), f"{module.__name__} sleeps 3 s")
    require(hasattr(module, "time"), f"{module.__name__} imports time")
    doorbell = Doorbell(node_bell(prefix, public_key))
    previous = module.time

    def sleep(seconds: float) -> None:  # Flower's empty-pull sleep waits for the bell instead
        if seconds == 3:
            doorbell.wait(LINK_BELL_FALLBACK)
        else:
            previous.sleep(seconds)

    module.time = SleepsReplaced(sleep, previous)  # type: ignore[attr-defined]
    return doorbell


def run_bell(prefix: str, run_id: int) -> str:
    """The bell of run ``run_id``'s ServerApp, which waits for its replies."""
    return f"{prefix}-run-{run_id}"


def ring_nodes_on_store(prefix: str, *state_classes: type) -> None:
    """Make the SuperLink ring a node's bell each time its LinkState stored a message for that
    node, and the run's ServerApp's bell each time it stored a reply (``state_classes``:
    Flower's in-memory and SQLite LinkStates unless given)."""
    if not state_classes:
        from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState
        from flwr.server.superlink.linkstate.sql_linkstate import SqlLinkState

        state_classes = (InMemoryLinkState, SqlLinkState)
    for state_class in state_classes:
        require(
            all(
                callable(getattr(state_class, method, None))
                for method in ("store_message_ins", "store_message_res", "get_node_info")
            ),
            f"{state_class.__name__} has store_message_ins, store_message_res, get_node_info",
        )
    for state_class in state_classes:
        store_query, store_reply = state_class.store_message_ins, state_class.store_message_res

        def query_and_ring(self: Any, message: Any, _store: Any = store_query) -> Any:
            message_id = _store(self, message)
            if message_id is not None:
                for node in self.get_node_info(node_ids=[message.metadata.dst_node_id]):
                    if node.public_key:
                        ring(node_bell(prefix, node.public_key))
            return message_id

        def reply_and_ring(self: Any, message: Any, _store: Any = store_reply) -> Any:
            message_id = _store(self, message)
            if message_id is not None:
                ring(run_bell(prefix, message.metadata.run_id))
            return message_id

        state_class.store_message_ins = query_and_ring
        state_class.store_message_res = reply_and_ring
