"""One DP-MERF run: the shared loop with one release per writer and G fitted at the end.

The loop's steps are query rounds: min(steps, ceil(writers / clients-per-step)) of them, each
asking writers never asked before, so with enough rounds every writer is asked exactly once. The
ledger (``ledger.json``, per writer, charged when sent) and privacy.json are on disk before and
after each round's messages, as in every run. After the last round's replies the released mean
embedding is saved (``release.npz``: G can be refitted from it by ``python -m
fedgs.training.dp_merf`` without asking anyone again) and G is fitted to it, so the last step's
scores, checkpoint and generator.pt are the fitted G's. The headline is the untrusted-server
epsilon (autodp RDP by default, replace-one, max over writers): each writer's one Gaussian
release, noised on the client.

With ``secure-aggregation`` (``SecureDpMerfStrategy``) each round is one cohort whose sum alone
the server sees, noised by the survivors' shares of a distributed discrete Gaussian of std
2*C*sigma on the sum; every writer is still asked once, so its epsilon is that of one secure
step. The report is GS-WGAN's secure one (``secure_exchange.secure_summary``): the headline
secure-aggregation epsilon, the ``ddg-rdp`` figure and the local-noise-only one.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
from flwr.serverapp import Grid

from fedgs.device import resolve_device
from fedgs.privacy.release_ledger import ReleaseLedger
from fedgs.privacy.threat_models import REPLACE_ONE, SECURE_AGGREGATION
from fedgs.protocols.dp_merf import feature_seed
from fedgs.run_config import RunConfig
from fedgs.server.checkpoint import LEDGER_NAME
from fedgs.server.dp_merf_strategy import DpMerfStrategy, SecureDpMerfStrategy
from fedgs.server.federated_run import METRIC_COLUMNS, FederatedRun
from fedgs.server.secure_exchange import (
    SECURE_COLUMN,
    SECURE_COLUMNS,
    secagg_details,
    secure_columns,
    secure_summary,
)
from fedgs.training.dp_merf import RELEASE_FILE, MerfTrainer, save_release
from fedgs.training.run_dir import RunDirectory

logger = logging.getLogger("fedgs.server")


class DpMerfRun(FederatedRun):
    """DP-MERF: every writer's noised mean embedding once, then G on the server."""

    name = "DP-MERF"
    epsilon_column = "epsilon_untrusted"
    threat_model, neighbouring = "untrusted", REPLACE_ONE
    ledger_file = LEDGER_NAME
    columns = (*METRIC_COLUMNS, "received_norm_mean", "generator_loss", epsilon_column)

    def __init__(self, config: RunConfig) -> None:
        super().__init__(config)
        rounds = min(config.steps, math.ceil(self.dataset.num_clients / config.clients_per_step))
        if rounds < config.steps:
            logger.info("dp-merf: %d query rounds ask every writer once", rounds)
        self.config = config = config.with_updates(steps=rounds)
        self.merf = config.dp_merf()
        self.spec = self.merf.feature_spec(feature_seed(config))
        self.trainer = MerfTrainer(
            self.dataset.num_classes,
            self.merf,
            self.spec,
            seed=config.seed,
            device=resolve_device(config.device),
        )
        self.ledger = ReleaseLedger()
        if config.secure_aggregation:
            self._secure_strategy(config)
            return
        self.strategy = DpMerfStrategy(
            self.trainer,
            self.ledger,
            self.sampler,
            config.clients_per_step,
            config.wire_dtype,
            self.identities,
            node_wait=config.reply_timeout,
            on_release=self._save_release,
        )

    def _secure_strategy(self, config: RunConfig) -> None:
        """Secure aggregation: the noise calibrated for the release's (D + 1) x classes values,
        cohorts through SecAgg+, the secure-aggregation headline."""
        dimension = self.spec.dimension * self.dataset.num_classes
        self.calibration = config.secure_noise(config.secure_vector(dimension))
        self.epsilon_column, self.threat_model = SECURE_COLUMN, SECURE_AGGREGATION
        self.columns = (*METRIC_COLUMNS, "generator_loss", *SECURE_COLUMNS)
        self.strategy = SecureDpMerfStrategy(
            self.trainer,
            self.ledger,
            self.sampler,
            config.clients_per_step,
            (config.secagg_settings(), self.calibration.params),
            config.wire_dtype,
            self.identities,
            node_wait=config.reply_timeout,
            on_release=self._save_release,
        )

    def _save_release(self, release: np.ndarray) -> None:
        save_release(self.out.root / RELEASE_FILE, release, self.trainer.replies, self.spec)

    def prepare_clients(self, grid: Grid) -> None:
        """Nothing: DP-MERF clients keep no model to warm-start (the loop waited for
        min-nodes)."""

    def _step(self, grid: Grid, step: int, started: float, last: bool) -> dict:
        self.strategy.final = last  # G is fitted after the last round's replies
        return super()._step(grid, step, started, last)

    def privacy_row(self) -> dict:
        c = self.config
        return {self.epsilon_column: self.ledger.epsilon_max(c.delta, c.accountant)[0]}

    def privacy_report(self) -> dict:
        c = self.config
        details: dict[str, Any] = {
            "steps": self.step,
            "noise_multiplier": self.merf.noise_multiplier,
            "clip_norm": self.merf.clip_norm,
            "features": self.spec.features,
            "bandwidth": self.spec.bandwidth,
            "features_seed": self.spec.seed,
            "releases_received": self.trainer.replies,
        }
        if c.secure_aggregation:
            summary = secure_summary(self.ledger, self.calibration.params, REPLACE_ONE, c)
            details |= {
                "cohort_sampling": "each writer in one cohort, drawn uniformly among those never "
                "asked: no amplification claimed",
                "secagg": secagg_details(c, self.calibration),
            }
            self.write_privacy(summary, details)
            return secure_columns(summary)
        self.write_privacy(self.ledger.summary(c.delta, c.accountant), details)
        return {}

    def save_generator(self, out: RunDirectory) -> None:
        self.trainer.save_generator(out)
