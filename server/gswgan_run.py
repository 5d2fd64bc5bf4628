"""One federated GS-WGAN run: untrusted server, per-client ledger, warm-started private critics."""

from __future__ import annotations

from dataclasses import asdict

from flwr.serverapp import Grid

from fedgs.device import resolve_device
from fedgs.privacy import PrivacyLedger
from fedgs.privacy.client_sampling import LEAST_QUERIED
from fedgs.privacy.events import gswgan_query_event
from fedgs.privacy.threat_models import REPLACE_ONE
from fedgs.run_config import RunConfig
from fedgs.server.checkpoint import LEDGER_NAME
from fedgs.server.federated_run import METRIC_COLUMNS, FederatedRun, wait_for_nodes
from fedgs.server.gswgan_strategy import GSWGANStrategy
from fedgs.server.warm_start import warm_start_clients
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.public_pretraining import pretrain_on_public_digits, public_data_record
from fedgs.training.run_dir import RunDirectory


class GSWGANRun(FederatedRun):
    """Federated GS-WGAN: the server proposes fakes, sampled clients answer sanitized rows."""

    name = "GS-WGAN"
    epsilon_column = "epsilon_untrusted"
    threat_model, neighbouring = "untrusted", REPLACE_ONE
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
        self.strategy = GSWGANStrategy(
            self.trainer,
            self.ledger,
            self.sampler,
            config.clients_per_step,
            config.wire_dtype,
            self.identities,
            least_queried=config.client_sampling == LEAST_QUERIED,
        )

    def prepare_generator(self) -> None:
        steps = self.config.public_pretrain_steps
        if steps > 0:
            done = pretrain_on_public_digits(self.trainer, steps, seed=self.config.seed)
            self.out.write_json(self.out.root / "public_pretraining.json", done.to_dict())

    def prepare_clients(self, grid: Grid) -> None:
        c = self.config
        wait_for_nodes(grid, max(c.min_nodes, c.clients_per_step), c.reply_timeout)
        if c.warm_start_steps > 0:
            warm_start_clients(grid, c, self.identities)

    def would_pass_target(self, grid: Grid) -> bool:
        """Whether one more step could take the run epsilon past the target. Least-queried
        sampling: the worst the rule's next step can charge, on a copy of the ledger, its
        replies assumed to arrive (the rule is public, so its choice may decide the stop).
        Uniform sampling: the worst case, the most-queried client asked again; the secret draw
        must not decide the stop, or the stop would tell who was drawn."""
        target, c = self.config.target_epsilon, self.config
        if target <= 0:
            return False
        if c.client_sampling == LEAST_QUERIED:
            probe = PrivacyLedger.from_json(self.ledger.to_json())
            nodes = sorted(grid.get_node_ids())
            worst_case = self.strategy.least_queried_worst_case(nodes)
            self.strategy.charge(worst_case, probe, answered=True)
            return probe.epsilon_untrusted_max(c.delta, c.accountant)[0] > target
        _, worst = self.ledger.epsilon_untrusted_max(c.delta, c.accountant)
        client = worst if worst is not None else "any"
        query = gswgan_query_event(c.noise_multiplier, c.batch_size)
        return self.ledger.would_exceed(client, query, target, c.delta, c.accountant)

    def privacy_row(self) -> dict:
        c = self.config
        epsilon = self.ledger.epsilon_untrusted_max(c.delta, c.accountant)[0]
        return {self.epsilon_column: epsilon}

    def privacy_report(self) -> dict:
        c = self.config
        report = self.write_privacy(
            self.ledger.summary(c.delta, c.accountant),
            {
                "steps": self.step,
                "noise_multiplier": c.noise_multiplier,
                "batch_size": c.batch_size,
            }
            | public_data_record(c.public_pretrain_steps),
        )
        # the trusted-sampler figure costs ~0.2 s (subsampled RDP): computed at checkpoints
        return {"epsilon_trusted_sampler": report["trusted_sampler"]["epsilon"]}

    def save_generator(self, out: RunDirectory) -> None:
        t = self.trainer
        settings = {"gswgan": asdict(t.config)}
        out.save_generator("gswgan", t.generator, t.num_classes, settings, t.ema.module)
