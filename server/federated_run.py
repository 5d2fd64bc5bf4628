"""The loop every federated run shares on a Flower grid: steps, outputs, checkpoints, resume.

Writes the run directory (config, metrics CSV per step, privacy report, sample grids at
checkpoints, final generator; with ``snapshot-every``, the generator on the way) and checkpoints
every ``checkpoint-every`` steps so ``resume=true`` continues a killed run with its ledger intact.
Every step's queries are paid for in the ledger, and the ledger and privacy.json are on disk
*before* the messages are sent (and again after the replies), so a kill at any point leaves the
server's ledger and report at or above every client's own. A stop (Ctrl-C or SIGTERM in
``fedgs simulate``: ``fedgs.stopping``) ends the run at its next unit of work: the step in flight
finishes, the steps done are checkpointed, and ``StopRequested`` goes on with where the run stands.
A step's
metrics row is what the strategy's ``aggregate_train`` returns (as Flower's own strategies report),
plus the bytes and time the loop measured; each run names its epsilon column after its threat model
(GS-WGAN: ``epsilon_untrusted``, max over clients; Fed-Avg GAN: ``epsilon_trusted_server``). Every
metrics column is computed on the server, from what it sent and the payloads it received: no client
statistic is ever read. Scores use the dataset's real data on the server: a measurement convenience
of simulation, never an input to training.
"""

from __future__ import annotations

import logging
import math
import time
from abc import ABC, abstractmethod
from typing import Any

import torch
from dp_accounting.dp_event import DpEvent
from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp import Grid
from tqdm.auto import tqdm

from fedgs import stopping
from fedgs.metrics import GeneratorScores, save_class_grid
from fedgs.metrics.evaluator import GeneratorEvaluator
from fedgs.privacy.client_ledger import ClientLedger
from fedgs.privacy.client_sampling import ClientSampling
from fedgs.run_config import RunConfig
from fedgs.run_data import dataset_for
from fedgs.server.checkpoint import load_checkpoint, restore_sampler, save_checkpoint
from fedgs.server.identify import identify_clients
from fedgs.server.replies import NodeIdentities
from fedgs.server.silence import AnswerWatch
from fedgs.server.target_stop import would_pass
from fedgs.server.warm_start import warm_start_clients
from fedgs.training.run_dir import RunDirectory, write_atomic

logger = logging.getLogger("fedgs.server")
SNAPSHOTS = "snapshots"  # the run directory's folder of generators released on the way

METRIC_COLUMNS = (
    "step",
    "sampled",
    "answered",
    "dropped",
    "no_reply",
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
        stopping.check("stopped while waiting for the nodes")
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"only {len(nodes)} of {count} required nodes connected in {timeout:g} s"
            )
        time.sleep(0.2)
    return nodes


class FederatedRun(ABC):
    """The loop every strategy shares: nodes, steps, metrics rows, samples, checkpoints, outputs.

    A subclass provides the strategy, the server's trainer, the ledger and its privacy report.
    """

    name = ""
    columns: tuple[str, ...] = ()
    epsilon_column = ""  # the run's headline guarantee, named after its threat model
    # whether the target stop reads a per-client ledger, so needs every node's client before the
    # first step (``fedgs.server.identify``)
    stop_names_clients = False

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.out = RunDirectory(config.run_dir)
        self.dataset = dataset_for(config)
        self.sampling = ClientSampling(config.sampling_seed, config.client_sampling)
        self.sampler = self.sampling.generator()
        self.identities = NodeIdentities()  # node -> client, learned from replies
        self.step = 0
        self.checkpointed = -1  # the step of the run's checkpoint on disk (-1: none)
        self.phase = "starting"  # where the run is, for the message of a stop
        self.in_flight: int | None = None  # a step sent whose replies are not in yet
        self.evaluator = (
            GeneratorEvaluator.for_dataset(self.dataset, config.eval_samples)
            if config.eval_every > 0
            else None
        )
        self.initial_scores: GeneratorScores | None = None
        self.final_scores: GeneratorScores | None = None
        self.answers = AnswerWatch(config.max_unanswered_steps)

    # --- what a run provides: its strategy (with the ledger it pays into) and server trainer
    strategy: Any  # a Flower Strategy of fedgs.server; its ``ledger`` is the run's
    trainer: Any  # .sample(labels), .state_dict(), .load_state_dict(state)
    ledger: Any  # .to_json() / .from_json(text): the privacy state, saved every step
    ledger_file = ""  # its file in the run directory
    threat_model = ""
    neighbouring = ""

    def sample(self, labels: torch.Tensor) -> torch.Tensor:
        """Images of the given labels from the generator the run reports on."""
        return self.trainer.sample(labels)

    def prepare_generator(self) -> bool:
        """Server-side work on G before the first private step of a new run; True when it did
        some: its result is then kept as the step-0 checkpoint, so a resumed run skips it.
        Default: none."""
        return False

    @abstractmethod
    def prepare_clients(self, grid: Grid) -> None:
        """Anything clients must do before the first step (GS-WGAN: warm start)."""

    def wait_and_warm_start(self, grid: Grid, per_step: int) -> None:
        """``prepare_clients`` of a strategy with private critics: wait for the nodes a step
        asks (``per_step``, min-nodes at least), then warm-start the critics when
        warm-start-steps asks for it."""
        c = self.config
        wait_for_nodes(grid, max(c.min_nodes, per_step), c.reply_timeout)
        if c.warm_start_steps > 0:
            warm_start_clients(grid, c, self.identities)

    def would_pass_target(self, grid: Grid) -> bool:
        """Whether the next step could take the run past its target epsilon (default: no
        target)."""
        return False

    def next_step_passes(
        self, ledger: ClientLedger, event: DpEvent, askable: list[str | None], asked: int
    ) -> bool:
        """``target_stop.would_pass`` at the run's target, delta and accountant."""
        c = self.config
        return would_pass(ledger, event, askable, asked, c.target_epsilon, c.delta, c.accountant)

    @abstractmethod
    def privacy_row(self) -> dict:
        """Epsilon columns of a step's metrics row (cheap: computed every step)."""

    @abstractmethod
    def privacy_report(self) -> dict:
        """Write privacy.json (``write_privacy``); return the columns to log with it."""

    @abstractmethod
    def save_generator(self, out: RunDirectory) -> None:
        """generator.pt in ``out`` (``RunDirectory.save_generator``): the run's own directory at
        the end, a snapshot's folder on the way."""

    def epsilon_label(self) -> str:
        """The progress bar's name for the headline epsilon: threat model, accountant, delta
        and neighbouring relation."""
        c = self.config
        return f"eps({self.threat_model},{c.accountant},delta={c.delta:g},{self.neighbouring})"

    # --- privacy state, checkpoints and the privacy report
    def step_privacy_report(self) -> None:
        """privacy.json as it stands now, written every step (before the messages leave and
        after the replies): cheap figures only. Default: the full ``privacy_report``."""
        self.privacy_report()

    def _save_ledger(self) -> None:
        write_atomic(self.out.root / self.ledger_file, self.ledger.to_json().encode())

    def save_privacy_state(self) -> None:
        """What was paid is on disk before a step's messages are sent, and again after: the
        ledger, then privacy.json (so a kill never leaves the report below a client's ledger)."""
        self._save_ledger()
        self.step_privacy_report()

    def load_privacy_state(self) -> None:
        """Resume what was paid, checkpoint or not: a run killed before its first checkpoint
        restarts its steps, never its ledger."""
        path = self.out.root / self.ledger_file
        if path.exists():
            self.ledger = self.strategy.ledger = type(self.ledger).from_json(path.read_text())

    def checkpoint(self) -> dict:
        """Save the checkpoint, the ledger and the privacy report; return the columns to log."""
        self._save_trainer()
        self._save_ledger()
        return self.privacy_report()

    def _save_trainer(self) -> None:
        saved_sampler = self.sampling.saved_state(self.sampler)
        save_checkpoint(self.out.root, self.step, self.trainer.state_dict(), saved_sampler)
        self.checkpointed = self.step

    def snapshot(self) -> None:
        """The generator as it could be released now, at what was paid so far: a run directory
        of its own under snapshots/ (G, config, this step's privacy report and metrics, a class
        grid), so that ``fedgs evaluate`` and the benchmarks score it as they score a run. One
        run then gives the utility of every epsilon it passes through."""
        folder = RunDirectory(self.out.root / SNAPSHOTS / f"step_{self.step:06d}")
        self.save_generator(folder)
        for name in ("config.json", "privacy.json", "metrics.csv"):
            write_atomic(folder.root / name, (self.out.root / name).read_bytes())
        self._save_grid(folder, self.step)

    def load_checkpoint(self) -> bool:
        """Restore the run from its directory (resume); False when there is no checkpoint."""
        saved = load_checkpoint(self.out.root)
        if saved is None:
            return False
        self.step, trainer, sampler = saved
        self.checkpointed = self.step
        self.trainer.load_state_dict(trainer)
        restore_sampler(self.sampler, sampler)
        return True

    def write_privacy(self, summary: dict, details: dict) -> dict:
        """privacy.json through the one writer: a ledger's summary and the run's details (and
        the step whose queries are out, paid, while its replies are awaited)."""
        if self.in_flight is not None:
            details = details | {"step_in_flight": self.in_flight}
        return self.out.write_privacy_report(
            self.config.strategy, summary, details, self.sampling.report()
        )

    # --- the shared loop
    def _save_grid(self, out: RunDirectory, step: int) -> None:
        """The class grid of ``step`` (a row per class) in ``out``'s samples/."""
        path = out.samples / f"step_{step:06d}.png"
        save_class_grid(self.sample, self.dataset.num_classes, path)

    def _score(self, step: int) -> GeneratorScores | None:
        self._save_grid(self.out, step)
        return self.evaluator.score(self.sample) if self.evaluator else None

    def _step(self, grid: Grid, step: int, started: float, last: bool) -> dict:
        """One generator step (round); returns its metrics row. The last one is always scored
        and checkpointed."""
        c = self.config
        messages = list(self.strategy.configure_train(step, ArrayRecord(), ConfigRecord(), grid))
        self.in_flight = step
        self.save_privacy_state()  # paid when sent: on disk before anything leaves
        exchanged = self.strategy.exchange(grid, messages, c.reply_timeout)
        _, metrics = self.strategy.aggregate_train(step, exchanged.replies)
        self.step, self.in_flight = step, None
        self.save_privacy_state()  # the replies' outcomes and the clients they named
        measured = {
            "step": step,
            "bytes_down": exchanged.bytes_down,
            "bytes_up": exchanged.bytes_up,
            "seconds": time.perf_counter() - started,
        }
        reported = {k: v for k, v in (metrics or {}).items() if k in self.columns}
        row = dict.fromkeys(self.columns) | reported | measured | self.privacy_row()
        if c.eval_every > 0 and (step % c.eval_every == 0 or last):
            scores = self._score(step)
            if scores is not None:
                self.final_scores = scores
                row |= {k: v for k, v in scores.to_dict().items() if k in row}
        snapshot = c.snapshot_every > 0 and step % c.snapshot_every == 0
        # a snapshot copies privacy.json, so the report is written at its step
        if step % c.checkpoint_every == 0 or last or snapshot:
            row |= self.checkpoint()
        self.out.append_metrics(row)
        if snapshot:
            self.snapshot()
        return row

    def run(self, grid: Grid) -> None:
        """The whole run. A stop (``fedgs.stopping``) ends it at its next unit of work with every
        step done checkpointed, and raises ``StopRequested`` saying where the run stands."""
        try:
            self._run(grid)
        except stopping.StopRequested:
            raise stopping.StopRequested(self._save_stopped()) from None

    def _save_stopped(self) -> str:
        """Checkpoint the steps done since the last checkpoint; where the run stopped."""
        if self.step > 0:
            if self.step > self.checkpointed:
                self.checkpoint()  # the step in flight, if any, finished: its state is whole
            return f"stopped after step {self.step} of {self.config.steps} (checkpoint saved)"
        where = "stopped before step 1"
        if self.phase != "the steps":
            where = f"stopped in {self.phase}, before step 1"
        if self.phase == "public pretraining":
            return where + " (pretraining starts again on resume)"
        if self.checkpointed == 0:
            return where + " (public pretraining saved)"
        return where

    def _run(self, grid: Grid) -> None:
        c = self.config
        # the wall-clock budget counts from here: waiting for nodes and the warm start included
        deadline = time.monotonic() + 60 * c.max_minutes if c.max_minutes > 0 else math.inf
        if c.resume:
            self.load_privacy_state()
        resumed = c.resume and self.load_checkpoint()
        self.phase = "the wait for nodes"
        wait_for_nodes(grid, max(c.min_nodes, 1), c.reply_timeout)
        if not resumed:
            self.out.write_json(
                self.out.config_json,
                c.to_user_config() | {"num_nodes": len(list(grid.get_node_ids()))},
            )
            self.phase = "public pretraining"
            if self.prepare_generator():
                self._save_trainer()  # step 0: a stop from here on does not repeat it
        self.phase = "the warm start"
        self.prepare_clients(grid)
        if c.target_epsilon > 0 and self.stop_names_clients:
            self.phase = "the identification"
            identify_clients(grid, self.identities, c.reply_timeout)
        if self.evaluator is not None:
            self.phase = "the first evaluation"
            self.initial_scores = self.evaluator.score(self.sample)
            if self.step == 0:  # the untrained (or only pre-trained) generator: what training
                # has to beat, the instrument's accuracy on real images, which bounds what it can
                # read, and the writer split its real images come from
                self.out.write_json(
                    self.out.initial_scores_json,
                    self.initial_scores.to_dict() | self.evaluator.record(),
                )
        self.phase = "the steps"
        started, first_step = time.perf_counter(), self.step + 1
        with tqdm(total=c.steps, initial=self.step, desc=self.name, unit="step") as bar:
            for step in range(first_step, c.steps + 1):
                stopping.check()  # between steps: the last one finished, its replies kept
                if self.would_pass_target(grid):
                    logger.warning(
                        "stopping before step %d: target epsilon %g reached", step, c.target_epsilon
                    )
                    if self.step % c.checkpoint_every != 0:
                        self.checkpoint()  # keep what was done
                    break
                last = step == c.steps or time.monotonic() >= deadline
                row = self._step(grid, step, started, last)
                bar.set_postfix(
                    {self.epsilon_label(): f"{row[self.epsilon_column]:.3g}"},
                    answered=f"{row['answered']}/{row['sampled']}",
                )
                bar.update()
                # the drop reasons: a MetricRecord carries numbers only
                self.answers.record(step, self.strategy.last_outcome)
                if last:
                    break
        if self.step < c.steps and time.monotonic() >= deadline:
            logger.warning(
                "stopped after step %d: %g-minute budget spent", self.step, c.max_minutes
            )
        self.phase = "the final outputs"
        self.save_generator(self.out)
