"""One Fed-Avg GAN run: the shared loop of ``server.run`` with DP-FedAvg's state and accounting.

The privacy state is the count of rounds per sampling rate (``FedAvgLedger``), a round counted
when its messages are sent and saved before they leave; a checkpoint holds G, D, G's optimizer
and the RNG states (the client sampler's only with a fixed sampling seed). The headline figure
rests on secret Poisson sampling: with a fixed sampling seed the report says it does not hold.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict
from pathlib import Path

import torch
from flwr.serverapp import Grid

from fedgs.privacy import FedAvgLedger
from fedgs.privacy.threat_models import ADD_REMOVE
from fedgs.run_config import RunConfig
from fedgs.server.checkpoint import CHECKPOINT_NAME, restore_sampler
from fedgs.server.fedavg_gan_strategy import FedAvgGANStrategy
from fedgs.server.replies import StepOutcome
from fedgs.server.run import METRIC_COLUMNS, FederatedRun
from fedgs.training.fedavg_gan import FedAvgGANTrainer
from fedgs.training.run_dir import write_atomic

ROUNDS_NAME = "rounds.json"


class FedAvgGANRun(FederatedRun):
    """Fed-Avg GAN: trusted server, DP-FedAvg on the critic, G trained on the server."""

    name = "Fed-Avg GAN"
    epsilon_column = "epsilon_trusted_server"
    threat_model, neighbouring = "trusted-server", ADD_REMOVE
    columns = (
        *METRIC_COLUMNS,
        "received_delta_norm_mean",
        "received_delta_clipped_fraction",
        epsilon_column,
    )

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        self.fedavg = config.fedavg_gan()
        self.trainer = FedAvgGANTrainer(self.dataset.num_classes, self.fedavg, seed=config.seed)
        self.ledger = FedAvgLedger(self.fedavg.noise_multiplier)
        self.strategy = FedAvgGANStrategy(
            self.trainer, self.ledger, self.sampler, config.wire_dtype, self.identities
        )

    def sample(self, labels: torch.Tensor) -> torch.Tensor:
        return self.trainer.sample(labels)

    def prepare_clients(self, grid: Grid) -> None:
        """Nothing: Fed-Avg GAN clients keep no state between rounds."""

    def would_pass_target(self) -> bool:
        target, c = self.config.target_epsilon, self.config
        if target <= 0:
            return False
        probe = FedAvgLedger.from_dict(self.ledger.to_dict())
        probe.record_round(self.fedavg.clients_per_round, max(self.strategy.population, 1))
        return probe.epsilon(c.delta, c.accountant) > target

    def step_metrics(self, outcome: StepOutcome) -> dict:
        return {
            "received_delta_norm_mean": outcome.mean("received-delta-norm"),
            "received_delta_clipped_fraction": outcome.mean("received-delta-clipped"),
        }

    def privacy_row(self) -> dict:
        c = self.config
        return {self.epsilon_column: self.ledger.epsilon(c.delta, c.accountant)}

    def save_privacy_state(self) -> None:
        write_atomic(self.out.root / ROUNDS_NAME, json.dumps(self.ledger.to_dict()).encode())

    def checkpoint(self) -> dict:
        payload = {
            "step": self.step,
            "trainer": self.trainer.state_dict(),
            "sampler": self.sampling.saved_state(self.sampler),
        }
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        write_atomic(self.out.root / CHECKPOINT_NAME, buffer.getvalue())
        self.save_privacy_state()
        c = self.config
        sampling = self.sampling.report()
        report = self.ledger.summary(c.delta, c.accountant) | {
            "steps": self.step,
            "clip_norm": self.fedavg.clip_norm,
            "clients_per_round": self.fedavg.clients_per_round,
            "sampling": sampling,
        }
        if not sampling["amplified_figures_hold"]:
            report["trusted_server"] |= {"holds": False, "note": sampling["note"]}
        self.out.write_json(self.out.privacy_json, report)
        return {}

    def load_checkpoint(self) -> bool:
        path = Path(self.out.root) / CHECKPOINT_NAME
        if not path.exists():
            return False
        payload = torch.load(path, map_location="cpu", weights_only=True)
        self.step = int(payload["step"])
        self.trainer.load_state_dict(payload["trainer"])
        restore_sampler(self.sampler, payload.get("sampler"))
        return True

    def load_privacy_state(self) -> None:
        path = self.out.root / ROUNDS_NAME
        if path.exists():
            rounds = json.loads(path.read_text())
            self.ledger = self.strategy.ledger = FedAvgLedger.from_dict(rounds)

    def final_payload(self) -> dict:
        return {
            "strategy": "fedavg-gan",
            "generator": self.trainer.generator.state_dict(),
            "fedavg_gan": asdict(self.fedavg),
            "num_classes": self.trainer.num_classes,
        }
