"""One client's side of GS-WGAN: critic steps on the server's fakes, then a sanitized gradient.

A request is served in this order (under the client's lock, see ``fedgs.client.gate``): validate
it, check the client's own privacy budget, train the critic, sanitize, record the query in the
client's ledger and persist critic and ledger, and only then hand the reply back. The reply holds
the SanitizedGradient's values, the client's identity and the public policy values it applied:
no loss, norm or other statistic of the private data.
"""

from __future__ import annotations

import logging

import torch
from flwr.app import RecordDict

from fedgs.client.common import RequestRefused
from fedgs.client.critic_session import CriticSession
from fedgs.privacy.events import gswgan_query_event
from fedgs.privacy.sanitizer import NonFiniteGradientError, SanitizedGradient, sanitize
from fedgs.protocols import common, gswgan

logger = logging.getLogger(__name__)


class GSWGANSession(CriticSession):
    """The client's private critic, answering GS-WGAN queries on the configured device."""

    def compute_device(self) -> str:
        return self.config.device

    def answer(self, content: RecordDict) -> RecordDict:
        """Critic steps on the server's fakes, then the sanitized gradient of the last batch."""
        fakes = common.decode_fakes(
            common.required(content, common.FAKES, "query"), self.dataset.num_classes
        )
        batch_size = int(fakes.labels.shape[1])
        sigma, delta, accountant = (
            self.gswgan.noise_multiplier,
            self.config.delta,
            self.config.accountant,
        )
        budget = self.config.client_budget_epsilon
        query = gswgan_query_event(sigma, batch_size)
        if budget > 0 and self.ledger.would_exceed(
            self.client_id, query, budget, delta, accountant
        ):
            spent = self.ledger.epsilon_untrusted(self.client_id, delta, accountant)
            raise RequestRefused(
                f"privacy budget exhausted: this client has spent epsilon {spent:.3f} (untrusted "
                f"server, {accountant}, delta={delta:g}) and one more "
                f"query would pass its budget of {budget:g}"
            )
        self.critic.train_on(fakes.pairs(), common.query_step(content), self.gswgan.critic_steps)
        sanitized = self._sanitized(fakes.images[-1], fakes.labels[-1])
        self.ledger.record(self.client_id, query)
        self.save()  # the cost is on disk before anything is released
        used = {
            "strategy": "gswgan",
            "noise-multiplier": sanitized.noise_multiplier,
            "clip-norm": sanitized.clip_norm,
            "batch-size": batch_size,
            "delta": delta,
        }
        gradient = gswgan.encode_gradient(sanitized, self.config.wire_dtype)
        return self.reply({gswgan.SANITIZED: gradient}, used)

    def _sanitized(self, fake: torch.Tensor, labels: torch.Tensor) -> SanitizedGradient:
        """The critic's sanitized gradient; a diverged critic (NaN/inf) releases a zero signal
        with the same noise, so the wire does not tell the two apart. Counted here only."""
        try:
            return self.critic.answer(fake, labels)
        except NonFiniteGradientError as error:
            failures = self.store.count_failure(self.client_id)
            logger.warning(
                "client %s: diverged critic (%s), released zero signal plus noise (%d so far)",
                self.client_id,
                error,
                failures,
            )
            zeros = torch.zeros(fake.shape[0], common.PIXELS, device=self.device)
            return sanitize(zeros, self.gswgan.clip_norm, self.gswgan.noise_multiplier)
