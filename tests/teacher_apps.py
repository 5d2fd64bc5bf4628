"""Flower apps for the teacher-strategy simulation tests: a client app whose teachers corrupt
their votes, a server app that drives the real DataLens / PATE-GAN strategy step by step, and one
that runs the real teacher run on a grid some of whose nodes leave after step 1.

They live in an importable module (not a test file) so Ray actors can load them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedgs.algorithms import ALGORITHMS
from fedgs.client.app import build_client_app
from fedgs.privacy.teacher_ledger import TeacherLedger
from fedgs.protocols import common, datalens, pate_gan
from fedgs.run_config import RunConfig
from fedgs.server.datalens_strategy import DataLensSettings, DataLensStrategy
from fedgs.server.federated_run import wait_for_nodes
from fedgs.server.pate_gan_strategy import PateGANStrategy, PateSettings
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.pate_gan import PateGANTrainer

Corruption = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def _set(arrays: dict[str, np.ndarray], key: str, value: np.ndarray) -> dict[str, np.ndarray]:
    return {**arrays, key: value}


# partition id -> how its votes are corrupted, per message type
DATALENS_TAMPERED: dict[int, Corruption] = {
    2: lambda a: _set(a, datalens.MASK, np.full_like(a[datalens.MASK], 0xFF)),
    3: lambda a: _set(a, datalens.SIGNS, a[datalens.SIGNS] | 1),  # padding
    4: lambda a: _set(a, datalens.SIGNS, a[datalens.SIGNS][:-1]),
}
PATE_TAMPERED: dict[int, Corruption] = {
    2: lambda a: _set(a, pate_gan.REAL, np.append(a[pate_gan.REAL], 0).astype(np.uint8)),
    3: lambda a: _set(a, pate_gan.REAL, a[pate_gan.REAL].astype(np.int32)),
    4: lambda a: _set(a, "logits", np.zeros(3, dtype=np.float32)),
}
TAMPERED = set(DATALENS_TAMPERED)


def tampering_teacher_app(overrides: Mapping[str, Any]) -> ClientApp:
    """The real ClientApp, except that partitions in TAMPERED corrupt their votes."""
    honest = build_client_app(overrides)
    app = ClientApp()

    def corrupt(message: Message, context: Context, table: dict[int, Corruption]) -> Message:
        reply = honest(message, context)
        how = table.get(int(context.node_config["partition-id"]))
        if how is None or reply.has_error():
            return reply
        key = datalens.VOTES  # the same record name in both protocols
        arrays = how(common.record_arrays(reply.content[key]))
        content = RecordDict(
            {
                key: common.arrays_record(arrays),
                common.POLICY_USED: reply.content[common.POLICY_USED],
                common.CLIENT: reply.content[common.CLIENT],
            }
        )
        return Message(content, reply_to=message)

    @app.train("datalens")
    def datalens_query(message: Message, context: Context) -> Message:
        return corrupt(message, context, DATALENS_TAMPERED)

    @app.train("pategan")
    def pate_query(message: Message, context: Context) -> Message:
        return corrupt(message, context, PATE_TAMPERED)

    return app


def _strategy(config: RunConfig, ledger: TeacherLedger) -> tuple[Any, torch.nn.Module]:
    """The real strategy of ``config.strategy`` and the generator it trains."""
    rng = np.random.default_rng(0)
    if config.strategy == "datalens":
        trainer = GeneratorTrainer(10, config.gswgan(), seed=0)
        settings = DataLensSettings.from_run_config(config)
        return DataLensStrategy(trainer, ledger, rng, settings), trainer.generator
    pate = PateGANTrainer(10, config.gswgan(), seed=0)
    settings = PateSettings.from_run_config(config)
    return PateGANStrategy(pate, ledger, rng, settings), pate.generator.generator


def recording_teacher_server_app(config: RunConfig, steps: int, record: list[dict]) -> ServerApp:
    """Runs ``steps`` steps of the configured teacher strategy and appends what it saw."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        wait_for_nodes(grid, config.min_nodes, timeout=60)
        ledger = TeacherLedger()
        strategy, generator = _strategy(config, ledger)
        for step in range(1, steps + 1):
            messages = list(strategy.configure_train(step, ArrayRecord(), ConfigRecord(), grid))
            before = [p.detach().clone() for p in generator.parameters()]
            replies = list(grid.send_and_receive(messages, timeout=600))
            strategy.aggregate_train(step, replies)
            record.append(
                {
                    "messages": messages,
                    "replies": replies,
                    "outcome": strategy.last_outcome,
                    "generator_changed": any(
                        not torch.equal(a, b)
                        for a, b in zip(before, generator.parameters(), strict=True)
                    ),
                    "ledger": ledger.step_counts(),
                }
            )

    return app


class NodesLeaving:
    """The real grid, except that ``leaving`` of its nodes (the lowest ids) are offline from the
    first step's replies on: they died or left after step 1 (``gone`` names them)."""

    def __init__(self, grid: Grid, leaving: int) -> None:
        self._grid = grid
        self._leaving = leaving
        self._sent = False
        self.gone: set[int] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._grid, name)

    def get_node_ids(self) -> list[int]:
        nodes = sorted(self._grid.get_node_ids())
        if self._sent and not self.gone:
            self.gone = set(nodes[: self._leaving])
        return [node for node in nodes if node not in self.gone]

    def send_and_receive(self, messages: Iterable[Message], timeout: float | None = None):
        replies = list(self._grid.send_and_receive(messages, timeout=timeout))
        self._sent = True
        return replies


def shrinking_teacher_run_app(config: RunConfig, leaving: int, seen: dict[str, Any]) -> ServerApp:
    """The real teacher run of ``config.strategy`` on a grid whose ``leaving`` nodes leave after
    step 1; ``seen`` gets the run and the grid."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        seen["grid"] = NodesLeaving(grid, leaving)
        seen["run"] = ALGORITHMS[config.strategy].run_class()(config)
        seen["run"].run(seen["grid"])

    return app
