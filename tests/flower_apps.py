"""Flower apps for the simulation tests: a client that tampers with its replies, and a server
that drives the real GS-WGAN strategy step by step and records what it saw.

They live in an importable module (not a test file) so Ray actors can load them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedgs.client.app import build_client_app
from fedgs.privacy import FedAvgLedger, PrivacyLedger
from fedgs.protocols import common, fedavg_gan, gswgan
from fedgs.run_config import RunConfig
from fedgs.server.fedavg_gan_strategy import FedAvgGANStrategy
from fedgs.server.federated_run import wait_for_nodes
from fedgs.server.gswgan_strategy import GSWGANStrategy
from fedgs.training.fedavg_gan import FedAvgGANTrainer
from fedgs.training.generator import GeneratorTrainer

# (honest reply, request, partition id) -> the reply sent
ReplyRewrite = Callable[[Message, Message, int], Message]
TAMPERED = {2: "nan", 3: "shape", 4: "huge"}  # partition id -> how its replies are corrupted


def simulate(server_app: ServerApp, client_app: ClientApp, nodes: int) -> None:
    """Flower's real simulation engine (Ray) on 127.0.0.1, sized for this machine."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    from flwr.simulation import run_simulation

    from fedgs.simulations.simulate import EngineOptions, backend_config

    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=nodes,
        backend_config=backend_config(EngineOptions(ray_cpus=2, object_store_mb=256)),
    )


def _tamper(gradient: np.ndarray, mode: str) -> np.ndarray:
    if mode == "nan":
        return np.full_like(gradient, np.nan)
    if mode == "shape":
        return gradient[:-1]
    return gradient * 1e6


def rewriting_client_app(overrides: Mapping[str, Any], rewrite: ReplyRewrite) -> ClientApp:
    """The real ClientApp, except that each answered GS-WGAN query's reply passes through
    ``rewrite(reply, request, partition id)`` (warm starts and error replies pass unchanged)."""
    honest = build_client_app(overrides)
    app = ClientApp()

    @app.train("warmstart")
    def warm_start(message: Message, context: Context) -> Message:
        return honest(message, context)

    @app.train("gswgan")
    def query(message: Message, context: Context) -> Message:
        reply = honest(message, context)
        if reply.has_error():
            return reply
        return rewrite(reply, message, int(context.node_config["partition-id"]))

    return app


def _tampered(reply: Message, request: Message, partition_id: int) -> Message:
    mode = TAMPERED.get(partition_id)
    if mode is None:
        return reply
    gradient = reply.content[gswgan.SANITIZED][gswgan.GRADIENT].numpy()
    content = RecordDict(
        {
            gswgan.SANITIZED: ArrayRecord({gswgan.GRADIENT: Array(_tamper(gradient, mode))}),
            common.POLICY_USED: reply.content[common.POLICY_USED],
            common.CLIENT: reply.content[common.CLIENT],
        }
    )
    return Message(content, reply_to=request)


def tampering_client_app(overrides: Mapping[str, Any]) -> ClientApp:
    """The real ClientApp, except that partitions in TAMPERED corrupt their sanitized rows."""
    return rewriting_client_app(overrides, _tampered)


class SteeredStrategy(GSWGANStrategy):
    """The real strategy, except that a test picks which nodes a step queries."""

    keep: set[int] | None = None  # None: every node

    def choose(self, nodes: list[int]) -> list[int]:
        return [n for n in nodes if self.keep is None or n in self.keep]


def recording_server_app(config: RunConfig, plan: list[str], record: list[dict]) -> ServerApp:
    """Runs one GS-WGAN step per plan entry ('all', 'honest' or 'tampered' nodes) and appends
    what it saw to ``record``: the replies, the outcome and the generator before/after."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        nodes = wait_for_nodes(grid, config.min_nodes, timeout=60)
        trainer = GeneratorTrainer(10, config.gswgan(), seed=0)
        ledger = PrivacyLedger()
        strategy = SteeredStrategy(trainer, ledger, np.random.default_rng(0), len(nodes))
        partition_of: dict[int, int] = {}
        for step, which in enumerate(plan, start=1):
            tampered = which == "tampered"
            strategy.keep = (
                None
                if which == "all"
                else {n for n, p in partition_of.items() if (p in TAMPERED) == tampered}
            )
            messages = list(strategy.configure_train(step, ArrayRecord(), ConfigRecord(), grid))
            before = [p.detach().clone() for p in trainer.generator.parameters()]
            replies = list(grid.send_and_receive(messages, timeout=600))
            for reply in replies:
                if reply.has_content():
                    client = reply.content[common.CLIENT]
                    partition_of[reply.metadata.src_node_id] = int(client["partition-id"])
            strategy.aggregate_train(step, replies)
            after = list(trainer.generator.parameters())
            record.append(
                {
                    "which": which,
                    "replies": replies,
                    "partition_of": dict(partition_of),
                    "outcome": strategy.last_outcome,
                    "generator_changed": any(
                        not torch.equal(a, b) for a, b in zip(before, after, strict=True)
                    ),
                    "ledger": ledger.query_counts(),
                }
            )

    return app


def tampering_fedavg_client_app(overrides: Mapping[str, Any]) -> ClientApp:
    """The real Fed-Avg GAN ClientApp, except that partitions in TAMPERED corrupt their delta."""
    honest = build_client_app(overrides)
    app = ClientApp()

    @app.train("fedavggan")
    def query(message: Message, context: Context) -> Message:
        reply = honest(message, context)
        mode = TAMPERED.get(int(context.node_config["partition-id"]))
        if mode is None or reply.has_error():
            return reply
        delta = reply.content[fedavg_gan.DELTA]
        first = next(iter(delta))
        arrays = common.record_arrays(delta)
        arrays[first] = _tamper(arrays[first], mode)
        content = RecordDict(
            {
                fedavg_gan.DELTA: common.arrays_record(arrays),
                common.POLICY_USED: reply.content[common.POLICY_USED],
                common.CLIENT: reply.content[common.CLIENT],
            }
        )
        return Message(content, reply_to=message)

    return app


def recording_fedavg_server_app(config: RunConfig, rounds: int, record: list[dict]) -> ServerApp:
    """Runs Fed-Avg GAN rounds with the real strategy and records replies, outcome and D."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        wait_for_nodes(grid, config.min_nodes, timeout=60)
        trainer = FedAvgGANTrainer(10, config.fedavg_gan(), seed=0)
        strategy = FedAvgGANStrategy(
            trainer, FedAvgLedger(config.fedavg_noise_multiplier), np.random.default_rng(0)
        )
        for step in range(1, rounds + 1):
            messages = list(strategy.configure_train(step, ArrayRecord(), ConfigRecord(), grid))
            before = {n: p.detach().clone() for n, p in trainer.critic.named_parameters()}
            replies = list(grid.send_and_receive(messages, timeout=600))
            strategy.aggregate_train(step, replies)
            change = torch.sqrt(
                sum(
                    ((p.detach() - before[n]) ** 2).sum()
                    for n, p in trainer.critic.named_parameters()
                )
            )
            record.append(
                {
                    "messages": messages,
                    "replies": replies,
                    "outcome": strategy.last_outcome,
                    "critic_change": float(change),
                    "rounds": strategy.ledger.rounds,
                    "parameters": [n for n, _ in trainer.critic.named_parameters()],
                }
            )

    return app
