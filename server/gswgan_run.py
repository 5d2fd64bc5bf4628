"""One federated GS-WGAN run: untrusted server, per-client ledger, warm-started private critics.

With ``secure-aggregation`` the run's headline is the secure-aggregation epsilon (the ledger's
RDP accountant over each client's secure-step events, max over clients), reported beside the
distributed discrete Gaussian's own accountant (``ddg-rdp``) at the most-charged client's step
count, and the figure a client's own noise share guarantees if the secure-aggregation assumption
fails (the server then sees each encoded vector: an untrusted-server figure). Each names its
threat model, accountant, delta and neighbouring relation (replace one client).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from flwr.serverapp import Grid

from fedgs.device import resolve_device
from fedgs.privacy import PrivacyLedger
from fedgs.privacy.client_sampling import LEAST_QUERIED
from fedgs.privacy.distributed_accounting import step_event
from fedgs.privacy.events import gswgan_query_event
from fedgs.privacy.threat_models import REPLACE_ONE, SECURE_AGGREGATION
from fedgs.run_config import RunConfig
from fedgs.server.checkpoint import LEDGER_NAME
from fedgs.server.federated_run import METRIC_COLUMNS, FederatedRun
from fedgs.server.gswgan_strategy import GSWGANStrategy
from fedgs.server.secure_exchange import (
    SECURE_COLUMN,
    SECURE_COLUMNS,
    secagg_details,
    secure_columns,
    secure_summary,
)
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.public_pretraining import pretrain_on_public_digits, public_data_record
from fedgs.training.run_dir import RunDirectory


class GSWGANRun(FederatedRun):
    """Federated GS-WGAN: the server proposes fakes, sampled clients answer sanitized rows."""

    name = "GS-WGAN"
    epsilon_column = "epsilon_untrusted"
    threat_model, neighbouring = "untrusted", REPLACE_ONE
    stop_names_clients = True
    ledger_file = LEDGER_NAME
    columns = (
        *METRIC_COLUMNS,
        "received_row_norm_mean",
        epsilon_column,
        "epsilon_trusted_sampler",
    )

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        self.trainer = GeneratorTrainer(
            self.dataset.num_classes,
            config.gswgan(),
            seed=config.seed,
            device=resolve_device(config.device),
        )
        self.ledger = PrivacyLedger()
        self.trusted: dict[str, Any] | None = None  # the last trusted-sampler block computed
        secure = None
        if config.secure_aggregation:
            self.calibration = config.secure_noise()
            secure = (config.secagg_settings(), self.calibration.params)
            self.epsilon_column, self.threat_model = SECURE_COLUMN, SECURE_AGGREGATION
            self.columns = (*METRIC_COLUMNS, *SECURE_COLUMNS)
        self.strategy = GSWGANStrategy(
            self.trainer,
            self.ledger,
            self.sampler,
            config.clients_per_step,
            config.wire_dtype,
            self.identities,
            least_queried=config.client_sampling == LEAST_QUERIED,
            node_wait=config.reply_timeout,
            secure=secure,
        )

    def prepare_generator(self) -> bool:
        steps = self.config.public_pretrain_steps
        if steps <= 0:
            return False
        done = pretrain_on_public_digits(self.trainer, steps, seed=self.config.seed)
        self.out.write_json(self.out.root / "public_pretraining.json", done.to_dict())
        return True

    def prepare_clients(self, grid: Grid) -> None:
        self.wait_and_warm_start(grid, self.config.clients_per_step)

    def would_pass_target(self, grid: Grid) -> bool:
        """Whether one more step could take the reported epsilon past the target
        (``target_stop``: lost replies of nodes whose client is unknown count for every client).
        Least-queried sampling: the nodes the rule's next step can ask (the rule is public, so
        its choice may decide the stop). Uniform sampling: any node; the secret draw must not
        decide the stop, or the stop would tell who was drawn."""
        c = self.config
        if c.target_epsilon <= 0:
            return False
        nodes = sorted(grid.get_node_ids())
        if c.client_sampling == LEAST_QUERIED:
            nodes = self.strategy.least_queried_worst_case(nodes)
        askable = [self.identities.client_of(node) for node in nodes]
        query = (
            step_event(self.calibration.params, REPLACE_ONE)
            if c.secure_aggregation
            else gswgan_query_event(c.noise_multiplier, c.batch_size)
        )
        return self.next_step_passes(self.ledger, query, askable, c.clients_per_step)

    def privacy_row(self) -> dict:
        c = self.config
        epsilon = self.ledger.epsilon_untrusted_max(c.delta, c.accountant)[0]
        return {self.epsilon_column: epsilon}

    def privacy_report(self) -> dict:
        """privacy.json with the trusted-sampler figure computed now (~0.2 s: subsampled RDP
        with every RDP accountant, so at checkpoints only)."""
        c = self.config
        if c.secure_aggregation:
            summary = self._secure_summary()
            self._write_secure_report(summary)
            return secure_columns(summary)
        trusted = self.ledger.trusted_sampler_summary(c.delta, c.accountant)
        self.trusted = trusted | {"computed_at_step": self.step}
        self._write_report()
        return {"epsilon_trusted_sampler": trusted["epsilon"]}

    def step_privacy_report(self) -> None:
        """privacy.json every step: the untrusted-server figure and the query counts of now, the
        trusted-sampler figure of its last checkpoint (``computed_at_step`` says which)."""
        if self.config.secure_aggregation:
            self.privacy_report()  # cheap: no subsampled accounting
            return
        if self.trusted is None:  # a new or resumed run's first write: computed once
            self.privacy_report()
            return
        self._write_report()

    def _write_report(self) -> dict:
        c = self.config
        return self.write_privacy(
            self.ledger.summary(c.delta, c.accountant, self.trusted),
            {
                "steps": self.step,
                "noise_multiplier": c.noise_multiplier,
                "batch_size": c.batch_size,
            }
            | public_data_record(c.public_pretrain_steps),
        )

    def _secure_summary(self) -> dict[str, Any]:
        return secure_summary(self.ledger, self.calibration.params, REPLACE_ONE, self.config)

    def _write_secure_report(self, summary: dict[str, Any]) -> dict:
        c = self.config
        return self.write_privacy(
            summary,
            {
                "steps": self.step,
                "noise_multiplier": c.noise_multiplier,
                "batch_size": c.batch_size,
                "secagg": secagg_details(c, self.calibration),
            }
            | public_data_record(c.public_pretrain_steps),
        )

    def save_generator(self, out: RunDirectory) -> None:
        t = self.trainer
        settings = {"gswgan": asdict(t.config)}
        out.save_generator("gswgan", t.generator, t.num_classes, settings, t.ema.module)
