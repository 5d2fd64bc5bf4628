"""Warm start of every client's critic: many nodes in flight at once, resumable, timed.

The server keeps a sliding window of warm-start messages in flight (``fedgs.server.every_node``).
Resuming: a client records in its own state file that it is warm-started and answers a second
request at once without training (``CriticSession.warm_start``); the server writes its progress
to ``warm_start.json`` (clients trained, time spent) while it runs; a resumed run skips the
phase when an earlier attempt with the same steps and state directory completed it. A stop
(``fedgs.stopping``) saves the progress and leaves the requests in flight to their clients. A reply
carries no statistic of the client's data (no loss, no step count): the server learns only that
the node answered and which client it holds (``NodeIdentities``), which names the ledger's
entries for that node's later queries.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid
from tqdm.auto import tqdm

from fedgs import stopping
from fedgs.algorithms import WARM_START
from fedgs.protocols import common
from fedgs.run_config import RunConfig
from fedgs.run_data import state_dir_for
from fedgs.server.every_node import IN_FLIGHT, ask_every_node
from fedgs.server.replies import NodeIdentities
from fedgs.server.silence import require_warm_clients
from fedgs.training.run_dir import write_atomic

logger = logging.getLogger("fedgs.server")

WARM_START_JSON = "warm_start.json"
SAVE_EVERY_SECONDS = 1.0


@dataclass
class WarmStartProgress:
    """What ``warm_start.json`` holds: the clients trained so far, over every attempt."""

    steps: int
    state_dir: str
    trained: list[str] = field(default_factory=list)  # client ids, in order of completion
    already_warm: int = 0  # replies (this attempt) from clients an earlier attempt recorded
    failed: int = 0  # this attempt
    first_error: str = ""  # this attempt's first failure, logged once
    seconds: float = 0.0  # wall time of every attempt together
    complete: bool = False

    def save(self, run_dir: Path) -> None:
        write_atomic(
            run_dir / WARM_START_JSON, (json.dumps(asdict(self), indent=1) + "\n").encode()
        )

    @classmethod
    def load(cls, run_dir: Path) -> WarmStartProgress | None:
        path = run_dir / WARM_START_JSON
        if not path.exists():
            return None
        saved = json.loads(path.read_text())
        return cls(**{f.name: saved[f.name] for f in fields(cls) if f.name in saved})


def _request(node: int, steps: int) -> Message:
    content = RecordDict({common.WARM_START_CONFIG: ConfigRecord({common.STEPS: steps})})
    return Message(content, dst_node_id=node, message_type=WARM_START)


def _fail(progress: WarmStartProgress, reason: str) -> None:
    """Count a failed client; only the first failure is logged (the rest usually repeat it)."""
    progress.failed += 1
    if not progress.first_error:
        progress.first_error = reason
        logger.warning("warm start failed on %s", reason)


def _record(
    reply: Message, progress: WarmStartProgress, trained: set[str], identities: NodeIdentities
) -> None:
    node = reply.metadata.src_node_id
    if reply.has_error():
        _fail(progress, f"node {node}: {reply.error.reason}")
        return
    try:
        client = identities.learn(reply)
    except common.ProtocolError as error:
        _fail(progress, f"node {node}: dropped reply: {error}")
        return
    if client in trained:  # an earlier attempt recorded it (replies carry no step counts)
        progress.already_warm += 1
    else:
        trained.add(client)
        progress.trained.append(client)


def warm_start_clients(
    grid: Grid,
    config: RunConfig,
    identities: NodeIdentities | None = None,
    in_flight: int = IN_FLIGHT,
) -> WarmStartProgress:
    """Ask every node to warm-start its critic, ``in_flight`` requests at a time; each reply
    binds its node to its client in ``identities``."""
    identities = identities if identities is not None else NodeIdentities()
    run_dir = Path(config.run_dir)
    progress = WarmStartProgress(config.warm_start_steps, str(state_dir_for(config).resolve()))
    previous = WarmStartProgress.load(run_dir) if config.resume else None
    if previous is not None and (previous.steps, previous.state_dir) == (
        progress.steps,
        progress.state_dir,
    ):
        if previous.complete:
            logger.info(
                "warm start: done by an earlier attempt (%d clients)", len(previous.trained)
            )
            return previous
        progress.trained, progress.seconds = previous.trained, previous.seconds
    earlier, started, saved = progress.seconds, time.monotonic(), 0.0
    trained = set(progress.trained)
    nodes, steps = sorted(grid.get_node_ids()), progress.steps
    with tqdm(total=len(nodes), desc="warm start", unit="client") as bar:
        for settled in ask_every_node(
            grid, nodes, lambda node: _request(node, steps), config.reply_timeout, in_flight
        ):
            if stopping.requested():
                progress.save(run_dir)  # a client that finishes later is warm: resume asks again
                raise stopping.StopRequested("stopped in the warm start")
            progress.failed += settled.refused
            for reply in settled.replies:
                _record(reply, progress, trained, identities)
            for _ in range(settled.expired):
                _fail(progress, f"a node: no reply in {config.reply_timeout:g} s")
            if settled.count:
                bar.update(settled.count)  # not update(0): it redraws the bar on every 10 ms poll
            progress.seconds = earlier + time.monotonic() - started
            if time.monotonic() - saved > SAVE_EVERY_SECONDS:
                progress.save(run_dir)
                saved = time.monotonic()
    progress.complete = progress.failed == 0
    progress.seconds = earlier + time.monotonic() - started
    progress.save(run_dir)
    logger.info(
        "warm start: %d clients warm, %d failed, %.1f s",
        len(progress.trained),
        progress.failed,
        progress.seconds,
    )
    require_warm_clients(
        len(progress.trained), len(progress.trained) + progress.failed, progress.first_error
    )
    return progress
