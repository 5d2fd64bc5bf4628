"""One Fed-Avg GAN run: the shared loop (``federated_run``) with DP-FedAvg's state and accounting.

The privacy state is the count of rounds per sampling rate (``FedAvgLedger``), a round counted
when its messages are sent and saved before they leave; a checkpoint holds G, D, G's optimizer
and the RNG states (the client sampler's only with a fixed sampling seed). The headline figure
rests on secret Poisson sampling: with a fixed sampling seed the report says it does not hold.

With ``secure-aggregation`` (``SecureFedAvgGANStrategy``) no server is trusted: the ledger is
per client (each cohort member charged one secure step, add/remove-one, when the round is sent),
and the report is GS-WGAN's secure one (``secure_exchange.secure_summary``): the headline
secure-aggregation epsilon, the ``ddg-rdp`` figure and the local-noise-only one. Fed-Avg GAN
clients keep no ledger: the server's is the record, and each node's policy bounds what it
accepts (clip S, the sum's noise, m_min, t).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from flwr.serverapp import Grid

from fedgs.privacy import FedAvgLedger, PrivacyLedger
from fedgs.privacy.distributed_accounting import step_event
from fedgs.privacy.threat_models import ADD_REMOVE, SECURE_AGGREGATION
from fedgs.run_config import RunConfig
from fedgs.server.checkpoint import LEDGER_NAME
from fedgs.server.fedavg_gan_strategy import FedAvgGANStrategy, SecureFedAvgGANStrategy
from fedgs.server.federated_run import METRIC_COLUMNS, FederatedRun
from fedgs.server.secure_exchange import (
    SECURE_COLUMN,
    SECURE_COLUMNS,
    secagg_details,
    secure_columns,
    secure_summary,
)
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
        self._summary_of: tuple[str, dict[str, Any]] | None = None  # (ledger JSON, summary)
        if config.secure_aggregation:
            self._secure_run(config)
            return
        self.ledger = FedAvgLedger(self.fedavg.noise_multiplier)
        self.strategy = FedAvgGANStrategy(
            self.trainer,
            self.ledger,
            self.sampler,
            config.wire_dtype,
            self.identities,
            node_wait=config.reply_timeout,
        )

    def _secure_run(self, config: RunConfig) -> None:
        """Secure aggregation: the noise calibrated for the critic's parameters, a per-client
        ledger, the secure-aggregation headline."""
        dimension = sum(p.numel() for p in self.trainer.critic.parameters())
        self.calibration = config.secure_noise(config.secure_vector(dimension))
        self.epsilon_column, self.threat_model = SECURE_COLUMN, SECURE_AGGREGATION
        self.columns = (*METRIC_COLUMNS, *SECURE_COLUMNS)
        self.ledger_file = LEDGER_NAME
        self.ledger = PrivacyLedger()
        self.stop_names_clients = True  # a per-client ledger (the trusted one counts rounds)
        self.strategy = SecureFedAvgGANStrategy(
            self.trainer,
            self.ledger,
            self.sampler,
            (config.secagg_settings(), self.calibration.params),
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
        if c.secure_aggregation:  # any node may be drawn: the secret draw must not decide
            askable = [self.identities.client_of(node) for node in grid.get_node_ids()]
            event = step_event(self.calibration.params, ADD_REMOVE)
            return self.next_step_passes(self.ledger, event, askable, self.fedavg.clients_per_round)
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
        c = self.config
        if c.secure_aggregation:
            return {self.epsilon_column: self.ledger.epsilon_max(c.delta, c.accountant)[0]}
        return {self.epsilon_column: self._summary()["trusted_server"]["epsilon"]}

    def privacy_report(self) -> dict:
        details: dict[str, Any] = {
            "steps": self.step,
            "clip_norm": self.fedavg.clip_norm,
            "clients_per_round": self.fedavg.clients_per_round,
        }
        if self.config.secure_aggregation:
            c = self.config
            summary = secure_summary(self.ledger, self.calibration.params, ADD_REMOVE, c)
            sampling = "a fixed cohort, uniform without replacement: no amplification claimed"
            details |= {
                "noise_multiplier": self.fedavg.noise_multiplier,
                "cohort_sampling": sampling,
                "secagg": secagg_details(c, self.calibration),
            }
            self.write_privacy(summary, details)
            return secure_columns(summary)
        self.write_privacy(self._summary(), details)
        return {}

    def save_generator(self, out: RunDirectory) -> None:
        t = self.trainer
        settings = {"fedavg_gan": asdict(self.fedavg)}
        out.save_generator("fedavg-gan", t.generator, t.num_classes, settings)
