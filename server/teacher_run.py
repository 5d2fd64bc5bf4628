"""The shared loop of ``server.run`` for the teacher ensembles (DataLens, PATE-GAN).

Privacy state: the teacher ledger (steps each client was asked in, counted when the query is
sent), saved before and after every step's messages; epsilon is the trusted-aggregator figure,
the maximum over clients. A checkpoint holds the
server's models, optimizers and RNG states; the privacy report names threat model, accountant
and the mechanism with its sensitivity.
"""

from __future__ import annotations

import io
from abc import abstractmethod
from pathlib import Path
from typing import Any

import torch
from flwr.serverapp import Grid

from fedgs.privacy.teacher_events import TeacherKind
from fedgs.privacy.teacher_ledger import TeacherLedger
from fedgs.privacy.threat_models import REPLACE_ONE
from fedgs.run_config import RunConfig
from fedgs.server.checkpoint import CHECKPOINT_NAME, restore_sampler
from fedgs.server.run import FederatedRun, wait_for_nodes
from fedgs.server.teacher_strategy import TeacherStrategy
from fedgs.server.warm_start import warm_start_clients
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.run_dir import write_atomic

TEACHER_LEDGER_NAME = "teacher_ledger.json"


def generator_state(trainer: GeneratorTrainer) -> dict[str, Any]:
    return {
        "generator": trainer.generator.state_dict(),
        "ema": trainer.ema.state_dict(),
        "optimizer": trainer.optimizer.state_dict(),
        "latent_rng": trainer.rng.get_state(),
    }


def load_generator_state(trainer: GeneratorTrainer, state: dict[str, Any]) -> None:
    trainer.generator.load_state_dict(state["generator"])
    trainer.ema.load_state_dict(state["ema"])
    trainer.optimizer.load_state_dict(state["optimizer"])
    trainer.rng.set_state(state["latent_rng"])


class TeacherRun(FederatedRun):
    """A teacher-ensemble run: trusted aggregator, per-client teacher ledger."""

    epsilon_column = "epsilon_trusted_aggregator"
    threat_model, neighbouring = "trusted-aggregator", REPLACE_ONE
    # what each teacher strategy plugs in: its settings, its server-side trainer, its strategy
    settings_class: type
    trainer_class: type[GeneratorTrainer]
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

    def sample(self, labels: torch.Tensor) -> torch.Tensor:
        return self.trainer.sample(labels)

    # --- what a teacher strategy's run provides
    @abstractmethod
    def trainer_state(self) -> dict[str, Any]:
        """The server's models, optimizers and RNG states."""

    @abstractmethod
    def load_trainer_state(self, state: dict[str, Any]) -> None: ...

    @abstractmethod
    def mechanism(self) -> dict[str, Any]:
        """The noisy aggregation and its sensitivity, for the privacy report."""

    def step_kind(self) -> TeacherKind:
        return self.strategy.step_kind()

    # --- shared
    def prepare_clients(self, grid: Grid) -> None:
        c = self.config
        wait_for_nodes(grid, max(c.min_nodes, c.teachers_per_step), c.reply_timeout)
        if c.warm_start_steps > 0:
            warm_start_clients(grid, c, self.identities)

    def would_pass_target(self) -> bool:
        c = self.config
        if c.target_epsilon <= 0:
            return False
        return self.ledger.would_exceed(self.step_kind(), c.target_epsilon, c.delta, c.accountant)

    def privacy_row(self) -> dict:
        c = self.config
        return {self.epsilon_column: self.ledger.epsilon_max(c.delta, c.accountant)[0]}

    def save_privacy_state(self) -> None:
        write_atomic(self.out.root / TEACHER_LEDGER_NAME, self.ledger.to_json().encode())

    def checkpoint(self) -> dict:
        payload = {
            "step": self.step,
            "trainer": self.trainer_state(),
            "sampler": self.sampling.saved_state(self.sampler),
        }
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        write_atomic(self.out.root / CHECKPOINT_NAME, buffer.getvalue())
        self.save_privacy_state()
        c = self.config
        report = self.ledger.summary(c.delta, c.accountant) | {
            "strategy": c.strategy,
            "steps": self.step,
            "teachers_per_step": c.teachers_per_step,
            "mechanism": self.mechanism(),
            "sampling": self.sampling.report(),
        }
        self.out.write_json(self.out.privacy_json, report)
        return {}

    def load_checkpoint(self) -> bool:
        path = Path(self.out.root) / CHECKPOINT_NAME
        if not path.exists():
            return False
        payload = torch.load(path, map_location="cpu", weights_only=True)
        self.step = int(payload["step"])
        self.load_trainer_state(payload["trainer"])
        restore_sampler(self.sampler, payload.get("sampler"))
        return True

    def load_privacy_state(self) -> None:
        path = self.out.root / TEACHER_LEDGER_NAME
        if path.exists():
            self.ledger = self.strategy.ledger = TeacherLedger.from_json(path.read_text())
