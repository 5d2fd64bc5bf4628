"""The shared loop (``federated_run``) for the teacher ensembles (DataLens, PATE-GAN).

Privacy state: the teacher ledger (steps each client was asked in, counted when the query is
sent), saved before and after every step's messages; epsilon is the trusted-aggregator figure,
the maximum over clients. A checkpoint holds the
server's models, optimizers and RNG states; the privacy report names threat model, accountant
and the mechanism with its sensitivity.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import asdict
from typing import Any

from dp_accounting import dp_event
from flwr.serverapp import Grid

from fedgs.privacy.teacher_ledger import TeacherLedger
from fedgs.privacy.threat_models import REPLACE_ONE
from fedgs.run_config import RunConfig
from fedgs.server.federated_run import FederatedRun
from fedgs.server.teacher_strategy import TeacherStrategy
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.run_dir import RunDirectory


class TeacherRun(FederatedRun):
    """A teacher-ensemble run: trusted aggregator, per-client teacher ledger."""

    epsilon_column = "epsilon_trusted_aggregator"
    threat_model, neighbouring = "trusted-aggregator", REPLACE_ONE
    stop_names_clients = True
    ledger_file = "teacher_ledger.json"
    # what each teacher strategy plugs in: its settings, its server-side trainer, its strategy
    settings_class: type
    trainer_class: type
    strategy_class: type[TeacherStrategy]

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        self.ledger = TeacherLedger()
        self.settings = self.settings_class.from_run_config(config)
        self.trainer = self.trainer_class(
            self.dataset.num_classes, config.gswgan(), seed=config.seed
        )
        self.strategy = self.strategy_class(
            self.trainer,
            self.ledger,
            self.sampler,
            self.settings,
            config.wire_dtype,
            self.identities,
        )
        self.strategy.node_wait = config.reply_timeout  # a step with no node online waits

    # --- what a teacher strategy's run provides
    @property
    @abstractmethod
    def generator_trainer(self) -> GeneratorTrainer:
        """The trainer of the G the run reports on."""

    @abstractmethod
    def mechanism(self) -> dict[str, Any]:
        """The noisy aggregation and its sensitivity, for the privacy report."""

    def step_event(self) -> dp_event.DpEvent:
        return self.strategy.step_event()

    # --- shared
    def prepare_clients(self, grid: Grid) -> None:
        self.wait_and_warm_start(grid, self.config.teachers_per_step)

    def would_pass_target(self, grid: Grid) -> bool:
        """Whether one more step could take the reported epsilon past the target: any node may
        be drawn, and a lost reply of a node whose client is unknown counts for every client
        (``target_stop``)."""
        c = self.config
        if c.target_epsilon <= 0:
            return False
        askable = [self.identities.client_of(node) for node in sorted(grid.get_node_ids())]
        return self.next_step_passes(self.ledger, self.step_event(), askable, c.teachers_per_step)

    def privacy_row(self) -> dict:
        c = self.config
        return {self.epsilon_column: self.ledger.epsilon_max(c.delta, c.accountant)[0]}

    def privacy_report(self) -> dict:
        c = self.config
        details = {
            "steps": self.step,
            "teachers_per_step": c.teachers_per_step,
            "mechanism": self.mechanism(),
        }
        self.write_privacy(self.ledger.summary(c.delta, c.accountant), details)
        return {}

    def save_generator(self, out: RunDirectory) -> None:
        g, c = self.generator_trainer, self.config
        settings = {"gswgan": asdict(c.gswgan())}
        out.save_generator(c.strategy, g.generator, g.num_classes, settings, g.ema.module)
