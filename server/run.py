"""One federated GS-WGAN run on a Flower grid: warm start, private steps, outputs, resume.

Writes the run directory (config, metrics CSV per step, privacy report, sample grids at
checkpoints, final generator) and checkpoints every ``checkpoint-every`` steps so ``resume=true``
continues a killed run with its ledger intact. The loop is shared by both strategies; each names
its epsilon column after its threat model (GS-WGAN: ``epsilon_untrusted``, max over clients;
Fed-Avg GAN: ``epsilon_trusted_server``). Scores use the dataset's real data on the server:
a measurement convenience of simulation, never an input to training.
"""

from __future__ import annotations

import logging
import math
import time
from abc import ABC, abstractmethod
from dataclasses import asdict

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp import Grid
from tqdm.auto import tqdm

from fedgs.client.session import dataset_for
from fedgs.comm import message_bytes
from fedgs.device import resolve_device
from fedgs.metrics import GeneratorScores, save_class_grid
from fedgs.metrics.evaluator import GeneratorEvaluator
from fedgs.privacy import PrivacyLedger
from fedgs.run_config import RunConfig
from fedgs.server.checkpoint import ServerState, load_checkpoint, save_checkpoint, save_ledger
from fedgs.server.fedavg_strategy import FedAvgGANStrategy
from fedgs.server.replies import StepOutcome
from fedgs.server.strategy import GSWGANStrategy
from fedgs.server.warm_start import warm_start_clients
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.run_dir import RunDirectory

logger = logging.getLogger("fedgs.server")

METRIC_COLUMNS = (
    "step",
    "sampled",
    "answered",
    "dropped",
    "critic_loss",
    "wasserstein",
    "clipped_fraction",
    "bytes_down",
    "bytes_up",
    "seconds",
    "inception_score",
    "fid_domain",
    "label_agreement",
)


def wait_for_nodes(grid: Grid, count: int, timeout: float) -> list[int]:
    """Nodes register asynchronously (simulation engine or SuperNodes connecting): poll until
    ``count`` are there, or fail with a clear error after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while len(nodes := sorted(grid.get_node_ids())) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"only {len(nodes)} of {count} required nodes connected in {timeout:g} s"
            )
        time.sleep(0.2)
    return nodes


class FederatedRun(ABC):
    """The loop both strategies share: nodes, steps, metrics rows, samples, checkpoints, outputs.

    A subclass provides the strategy and trainer, its privacy state and what a checkpoint holds.
    """

    name = ""
    columns: tuple[str, ...] = ()
    epsilon_column = ""  # the run's headline guarantee, named after its threat model

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.out = RunDirectory(config.run_dir)
        self.dataset = dataset_for(config)
        self.sampler = np.random.default_rng(config.seed + 1)
        self.step = 0
        self.evaluator = (
            GeneratorEvaluator.for_dataset(self.dataset, config.eval_samples)
            if config.eval_every > 0
            else None
        )
        self.initial_scores: GeneratorScores | None = None
        self.final_scores: GeneratorScores | None = None

    # --- what a strategy provides
    strategy: GSWGANStrategy | FedAvgGANStrategy

    @abstractmethod
    def sample(self, labels: torch.Tensor) -> torch.Tensor:
        """Images of the given labels from the generator the run reports on."""

    @abstractmethod
    def prepare_clients(self, grid: Grid) -> None:
        """Anything clients must do before the first step (GS-WGAN: warm start)."""

    def would_pass_target(self) -> bool:
        return False

    @abstractmethod
    def privacy_row(self) -> dict:
        """Epsilon columns of a step's metrics row (cheap: computed every step)."""

    @abstractmethod
    def save_privacy_state(self) -> None:
        """What was paid is on disk after every step, before anything else."""

    @abstractmethod
    def checkpoint(self) -> dict:
        """Save the checkpoint and the privacy report; return the columns to log with it."""

    @abstractmethod
    def load_checkpoint(self) -> bool:
        """Restore the run from its directory (resume); False when there is no checkpoint."""

    @abstractmethod
    def final_payload(self) -> dict:
        """What generator.pt holds at the end."""

    # --- the shared loop
    def _score(self, step: int) -> GeneratorScores | None:
        num_classes = self.dataset.num_classes
        save_class_grid(self.sample, num_classes, self.out.samples / f"step_{step:06d}.png")
        return self.evaluator.score(self.sample) if self.evaluator else None

    def _step(self, grid: Grid, step: int, started: float, last: bool) -> dict:
        """One generator step (round); returns its metrics row. The last one is always scored
        and checkpointed."""
        c = self.config
        messages = list(self.strategy.configure_train(step, ArrayRecord(), ConfigRecord(), grid))
        bytes_down = sum(message_bytes(m) for m in messages)
        replies = list(grid.send_and_receive(messages, timeout=c.reply_timeout))
        bytes_up = sum(message_bytes(r) for r in replies)
        self.strategy.aggregate_train(step, replies)
        self.save_privacy_state()
        self.step = step
        outcome = self.strategy.last_outcome
        row = dict.fromkeys(self.columns) | {
            "step": step,
            "sampled": outcome.sampled,
            "answered": outcome.answered,
            "dropped": outcome.dropped,
            "critic_loss": outcome.mean("critic-loss"),
            "wasserstein": outcome.mean("wasserstein"),
            "clipped_fraction": outcome.mean("clipped-fraction"),
            "bytes_down": bytes_down,
            "bytes_up": bytes_up,
            "seconds": time.perf_counter() - started,
        }
        row |= self.step_metrics(outcome) | self.privacy_row()
        if c.eval_every > 0 and (step % c.eval_every == 0 or last):
            scores = self._score(step)
            if scores is not None:
                self.final_scores = scores
                row |= {k: v for k, v in scores.to_dict().items() if k in row}
        if step % c.checkpoint_every == 0 or last:
            row |= self.checkpoint()
        self.out.append_metrics(row)
        return row

    def step_metrics(self, outcome: StepOutcome) -> dict:
        """Strategy-specific columns of a step's row."""
        return {}

    def run(self, grid: Grid) -> None:
        c = self.config
        # the wall-clock budget counts from here: waiting for nodes and the warm start included
        deadline = time.monotonic() + 60 * c.max_minutes if c.max_minutes > 0 else math.inf
        resumed = c.resume and self.load_checkpoint()
        wait_for_nodes(grid, max(c.min_nodes, 1), c.reply_timeout)
        if not resumed:
            self.out.write_json(
                self.out.config_json,
                c.to_user_config() | {"num_nodes": len(list(grid.get_node_ids()))},
            )
        self.prepare_clients(grid)
        if self.evaluator is not None:
            self.initial_scores = self.evaluator.score(self.sample)
            if not resumed:  # the untrained generator: what training has to beat, the
                # instrument's accuracy on real images, which bounds what it can read, and the
                # writer split its real images come from
                self.out.write_json(
                    self.out.initial_scores_json,
                    self.initial_scores.to_dict() | self.evaluator.record(),
                )
        started, first_step = time.perf_counter(), self.step + 1
        with tqdm(total=c.steps, initial=self.step, desc=self.name, unit="step") as bar:
            for step in range(first_step, c.steps + 1):
                if self.would_pass_target():
                    logger.warning(
                        "stopping before step %d: target epsilon %g reached", step, c.target_epsilon
                    )
                    if self.step % c.checkpoint_every != 0:
                        self.checkpoint()  # keep what was done
                    break
                last = step == c.steps or time.monotonic() >= deadline
                row = self._step(grid, step, started, last)
                loss = row["critic_loss"]
                bar.set_postfix(
                    eps=f"{row[self.epsilon_column]:.3g}",
                    loss="-" if loss is None else f"{loss:.2f}",
                )
                bar.update()
                if last:
                    break
        if self.step < c.steps and time.monotonic() >= deadline:
            logger.warning(
                "stopped after step %d: %g-minute budget spent", self.step, c.max_minutes
            )
        torch.save(self.final_payload(), self.out.generator_pt)


class GSWGANRun(FederatedRun):
    """Federated GS-WGAN: untrusted server, per-client ledger, warm-started private critics."""

    name = "GS-WGAN"
    epsilon_column = "epsilon_untrusted"
    columns = (*METRIC_COLUMNS, "grad_norm_mean", epsilon_column, "epsilon_trusted_sampler")

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        gswgan = config.gswgan()
        trainer = GeneratorTrainer(
            self.dataset.num_classes, gswgan, seed=config.seed, device=resolve_device(config.device)
        )
        self.state = ServerState(0, trainer, PrivacyLedger(), self.sampler)
        self.strategy = GSWGANStrategy(
            trainer, self.state.ledger, self.sampler, config.clients_per_step, config.wire_dtype
        )

    @property
    def trainer(self) -> GeneratorTrainer:
        return self.state.trainer

    def sample(self, labels: torch.Tensor) -> torch.Tensor:
        return self.trainer.sample(labels)

    def load_checkpoint(self) -> bool:
        if not load_checkpoint(self.out.root, self.state):
            return False
        self.step = self.state.step
        self.strategy.ledger = self.state.ledger
        return True

    def prepare_clients(self, grid: Grid) -> None:
        c = self.config
        wait_for_nodes(grid, max(c.min_nodes, c.clients_per_step), c.reply_timeout)
        if c.warm_start_steps > 0:
            warm_start_clients(grid, c)

    def would_pass_target(self) -> bool:
        """Whether one more step could take the run epsilon past the target (worst case: the
        most-queried client is sampled again)."""
        target, c = self.config.target_epsilon, self.config
        if target <= 0:
            return False
        ledger = self.state.ledger
        _, worst = ledger.epsilon_untrusted_max(c.delta, c.accountant)
        client = worst if worst is not None else "any"
        return ledger.would_exceed(
            client, c.noise_multiplier, c.batch_size, target, c.delta, c.accountant
        )

    def step_metrics(self, outcome: StepOutcome) -> dict:
        return {"grad_norm_mean": outcome.mean("grad-norm-mean")}

    def privacy_row(self) -> dict:
        c = self.config
        epsilon = self.state.ledger.epsilon_untrusted_max(c.delta, c.accountant)[0]
        return {self.epsilon_column: epsilon}

    def save_privacy_state(self) -> None:
        save_ledger(self.out.root, self.state.ledger)  # paid queries are on disk every step

    def checkpoint(self) -> dict:
        self.state.step = self.step
        save_checkpoint(self.out.root, self.state)
        c = self.config
        report = self.out.write_privacy_report(
            self.state.ledger, c.delta, c.accountant, self.step, c.noise_multiplier, c.batch_size
        )
        # the trusted-sampler figure costs ~0.2 s (subsampled RDP): computed at checkpoints
        return {"epsilon_trusted_sampler": report["trusted_sampler"]["epsilon"]}

    def final_payload(self) -> dict:
        return {
            "strategy": "gswgan",
            "generator": self.trainer.generator.state_dict(),
            "ema": self.trainer.ema.module.state_dict(),
            "gswgan": asdict(self.config.gswgan()),
            "num_classes": self.trainer.num_classes,
        }
