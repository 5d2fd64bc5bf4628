"""One federated GS-WGAN run on a Flower grid: warm start, private steps, outputs, resume.

Writes the run directory (config, metrics CSV per step, privacy report, sample grids at
checkpoints, final generator) and checkpoints every ``checkpoint-every`` steps so ``resume=true``
continues a killed run with its ledger intact. Scores use the dataset's real data on the server:
a measurement convenience of simulation, never an input to training.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid
from tqdm.auto import tqdm

from fedgs import protocol
from fedgs.client.session import dataset_for
from fedgs.metrics import GeneratorScores, save_class_grid
from fedgs.metrics.evaluator import GeneratorEvaluator
from fedgs.privacy import PrivacyLedger
from fedgs.run_config import RunConfig
from fedgs.server.checkpoint import ServerState, load_checkpoint, save_checkpoint, save_ledger
from fedgs.server.strategy import GSWGANStrategy
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
    "grad_norm_mean",
    "clipped_fraction",
    "epsilon_untrusted",
    "epsilon_trusted_sampler",
    "seconds",
    "inception_score",
    "fid_domain",
    "label_agreement",
)
WARM_START_CHUNK = 32


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


def warm_start_clients(grid: Grid, config: RunConfig) -> dict[str, int]:
    """Ask every node to warm-start its critic (idempotent on the client side)."""
    nodes = sorted(grid.get_node_ids())
    done = failed = 0
    with tqdm(total=len(nodes), desc="warm start", unit="client") as bar:
        for start in range(0, len(nodes), WARM_START_CHUNK):
            messages = [
                Message(
                    RecordDict(
                        {
                            protocol.WARM_START_CONFIG: ConfigRecord(
                                {protocol.STEPS: config.warm_start_steps}
                            )
                        }
                    ),
                    dst_node_id=node,
                    message_type=protocol.WARM_START,
                )
                for node in nodes[start : start + WARM_START_CHUNK]
            ]
            for reply in grid.send_and_receive(messages, timeout=config.reply_timeout):
                if reply.has_error():
                    failed += 1
                    logger.warning(
                        "warm start failed on node %s: %s",
                        reply.metadata.src_node_id,
                        reply.error.reason,
                    )
                else:
                    done += 1
            bar.update(len(messages))
    return {"warm_started": done, "warm_start_failed": failed}


class GSWGANRun:
    """Holds a run's state and writes its outputs; :meth:`run` drives it on a grid."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.out = RunDirectory(config.run_dir)
        self.dataset = dataset_for(config)
        gswgan = config.gswgan()
        trainer = GeneratorTrainer(self.dataset.num_classes, gswgan, seed=config.seed)
        self.state = ServerState(
            0, trainer, PrivacyLedger(), np.random.default_rng(config.seed + 1)
        )
        self.resumed = config.resume and load_checkpoint(self.out.root, self.state)
        self.strategy = GSWGANStrategy(
            trainer, self.state.ledger, self.state.sampler, config.clients_per_step
        )
        self.evaluator = (
            GeneratorEvaluator.for_dataset(
                self.dataset.fingerprint,
                self.dataset.train_arrays(),
                self.dataset.test_arrays(),
                self.dataset.num_classes,
                config.eval_samples,
            )
            if config.eval_every > 0
            else None
        )
        self.initial_scores: GeneratorScores | None = None
        self.final_scores: GeneratorScores | None = None

    @property
    def trainer(self) -> GeneratorTrainer:
        return self.state.trainer

    def _would_pass_target(self) -> bool:
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

    def _score(self, step: int) -> GeneratorScores | None:
        save_class_grid(
            self.trainer.sample, self.trainer.num_classes, self.out.samples / f"step_{step:06d}.png"
        )
        return self.evaluator.score(self.trainer.sample) if self.evaluator else None

    def _checkpoint(self) -> dict:
        """Save the checkpoint and the privacy report; returns the report."""
        save_checkpoint(self.out.root, self.state)
        c = self.config
        return self.out.write_privacy_report(
            self.state.ledger,
            c.delta,
            c.accountant,
            self.state.step,
            c.noise_multiplier,
            c.batch_size,
        )

    def _step(self, grid: Grid, step: int, started: float) -> dict:
        """One generator step; returns its metrics row."""
        c = self.config
        replies = grid.send_and_receive(
            self.strategy.configure_train(step, ArrayRecord(), ConfigRecord(), grid),
            timeout=c.reply_timeout,
        )
        self.strategy.aggregate_train(step, replies)
        save_ledger(self.out.root, self.state.ledger)  # paid queries are on disk every step
        self.state.step = step
        outcome = self.strategy.last_outcome
        row = dict.fromkeys(METRIC_COLUMNS) | {
            "step": step,
            "sampled": outcome.sampled,
            "answered": outcome.answered,
            "dropped": outcome.dropped,
            "critic_loss": outcome.mean("critic-loss"),
            "wasserstein": outcome.mean("wasserstein"),
            "grad_norm_mean": outcome.mean("grad-norm-mean"),
            "clipped_fraction": outcome.mean("clipped-fraction"),
            "epsilon_untrusted": self.state.ledger.epsilon_untrusted_max(c.delta, c.accountant)[0],
            "seconds": time.perf_counter() - started,
        }
        if c.eval_every > 0 and (step % c.eval_every == 0 or step == c.steps):
            scores = self._score(step)
            if scores is not None:
                self.final_scores = scores
                row |= {k: v for k, v in scores.to_dict().items() if k in row}
        if step % c.checkpoint_every == 0 or step == c.steps:
            # the trusted-sampler figure costs ~0.2 s (subsampled RDP): computed at checkpoints
            row["epsilon_trusted_sampler"] = self._checkpoint()["trusted_sampler"]["epsilon"]
        self.out.append_metrics(row)
        return row

    def run(self, grid: Grid) -> None:
        c = self.config
        wait_for_nodes(grid, max(c.min_nodes, c.clients_per_step), c.reply_timeout)
        if not self.resumed:
            self.out.write_json(
                self.out.config_json,
                c.to_user_config() | {"num_nodes": len(list(grid.get_node_ids()))},
            )
        if c.warm_start_steps > 0:
            warm_start_clients(grid, c)
        if self.evaluator is not None:
            self.initial_scores = self.evaluator.score(self.trainer.sample)
        started, first_step = time.perf_counter(), self.state.step + 1
        with tqdm(total=c.steps, initial=self.state.step, desc="GS-WGAN", unit="step") as bar:
            for step in range(first_step, c.steps + 1):
                if self._would_pass_target():
                    logger.warning(
                        "stopping before step %d: target epsilon %g reached", step, c.target_epsilon
                    )
                    break
                row = self._step(grid, step, started)
                loss = row["critic_loss"]
                bar.set_postfix(
                    eps=f"{row['epsilon_untrusted']:.1f}",
                    loss="-" if loss is None else f"{loss:.2f}",
                )
                bar.update()
        if self.state.step % c.checkpoint_every != 0 and self.state.step != c.steps:
            self._checkpoint()  # stopped early (target epsilon): keep what was done
        torch.save(
            {
                "generator": self.trainer.generator.state_dict(),
                "ema": self.trainer.ema.module.state_dict(),
                "gswgan": asdict(c.gswgan()),
                "num_classes": self.trainer.num_classes,
            },
            self.out.generator_pt,
        )
