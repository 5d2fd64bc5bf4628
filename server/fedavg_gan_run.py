"""One Fed-Avg GAN run: the shared loop (``federated_run``) with DP-FedAvg's state and accounting.

The privacy state is the count of rounds per sampling rate (``FedAvgLedger``), a round counted
when its messages are sent and saved before they leave; a checkpoint holds G, D, G's optimizer
and the RNG states (the client sampler's only with a fixed sampling seed). The headline figure
rests on secret Poisson sampling: with a fixed sampling seed the report says it does not hold.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from flwr.serverapp import Grid

from fedgs.privacy import FedAvgLedger
from fedgs.privacy.threat_models import ADD_REMOVE
from fedgs.run_config import RunConfig
from fedgs.server.fedavg_gan_strategy import FedAvgGANStrategy
from fedgs.server.federated_run import METRIC_COLUMNS, FederatedRun
from fedgs.training.fedavg_gan import FedAvgGANTrainer
from fedgs.training.run_dir import RunDirectory


class FedAvgGANRun(FederatedRun):
    """Fed-Avg GAN: trusted server, DP-FedAvg on the critic, G trained on the server."""

    name = "Fed-Avg GAN"
    epsilon_column = "epsilon_trusted_server"
    threat_model, neighbouring = "trusted-server", ADD_REMOVE
    ledger_file = "rounds.json"
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
        self._summary_of: tuple[str, dict[str, Any]] | None = None  # (ledger JSON, summary)
        self.strategy = FedAvgGANStrategy(
            self.trainer,
            self.ledger,
            self.sampler,
            config.wire_dtype,
            self.identities,
            node_wait=config.reply_timeout,
        )

    def prepare_clients(self, grid: Grid) -> None:
        """Nothing: Fed-Avg GAN clients keep no state between rounds."""

    def would_pass_target(self, grid: Grid) -> bool:
        """Whether one more round could take the reported epsilon past the target: a round is
        paid when sent, replies or not, at the q of the nodes there now (the round samples
        from them)."""
        target, c = self.config.target_epsilon, self.config
        if target <= 0:
            return False
        probe = FedAvgLedger.from_dict(self.ledger.to_dict())
        population = max(len(list(grid.get_node_ids())), 1)
        probe.record_round(self.fedavg.clients_per_round, population)
        return probe.epsilon(c.delta, c.accountant) > target

    def _summary(self) -> dict[str, Any]:
        """The ledger's summary, recomputed only when a round was recorded: privacy.json is
        written twice a step and the Poisson-subsampled RDP costs ~40 ms a time."""
        key = self.ledger.to_json()
        if self._summary_of is None or self._summary_of[0] != key:
            c = self.config
            self._summary_of = (key, self.ledger.summary(c.delta, c.accountant))
        return self._summary_of[1]

    def privacy_row(self) -> dict:
        return {self.epsilon_column: self._summary()["trusted_server"]["epsilon"]}

    def privacy_report(self) -> dict:
        details = {
            "steps": self.step,
            "clip_norm": self.fedavg.clip_norm,
            "clients_per_round": self.fedavg.clients_per_round,
        }
        self.write_privacy(self._summary(), details)
        return {}

    def save_generator(self, out: RunDirectory) -> None:
        t = self.trainer
        settings = {"fedavg_gan": asdict(self.fedavg)}
        out.save_generator("fedavg-gan", t.generator, t.num_classes, settings)
