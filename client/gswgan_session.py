"""One client's side of GS-WGAN: critic steps on the server's fakes, then a sanitized gradient.

A request is served in this order (under the client's lock, see ``fedgs.client.gate``): validate
it, check the client's own privacy budget, train the critic, sanitize, record the query in the
client's ledger and persist critic and ledger, and only then hand the reply back. The reply holds
the SanitizedGradient's values, the client's identity and the public policy values it applied:
no loss, norm or other statistic of the private data.

A secure query (``fedgs.protocols.secagg``) is served the same way, but the gradient's rows are
only clipped, and the whole batch is encoded with this client's share of the distributed
discrete Gaussian (``fedgs.privacy.distributed_noise``); the ledger pays the secure step's event.
The encoded values go back as a ``SecureContribution``, never in a RecordDict: the node's
secure-aggregation layer (``fedgs.client.secure_node``) sends them only masked.
"""

from __future__ import annotations

import logging

import numpy as np
import torch
from dp_accounting import dp_event
from flwr.app import RecordDict

from fedgs.client.common import RequestRefused, SecureContribution
from fedgs.client.critic_session import CriticSession
from fedgs.privacy import distributed_noise
from fedgs.privacy.distributed_accounting import step_event
from fedgs.privacy.distributed_noise import DistributedNoiseParams
from fedgs.privacy.events import gswgan_query_event
from fedgs.privacy.randomness import SecureRandom
from fedgs.privacy.sanitizer import (
    NonFiniteGradientError,
    SanitizedGradient,
    clip_rows,
    sanitize,
)
from fedgs.privacy.threat_models import REPLACE_ONE
from fedgs.protocols import common, gswgan, secagg

logger = logging.getLogger(__name__)


class GSWGANSession(CriticSession):
    """The client's private critic, answering GS-WGAN queries on the configured device."""

    def compute_device(self) -> str:
        return self.config.device

    def answer(self, content: RecordDict) -> RecordDict | SecureContribution:
        """Critic steps on the server's fakes, then the last batch's gradient: sanitized, or
        (a secure query) clipped and encoded for secure aggregation."""
        fakes = common.decode_fakes(
            common.required(content, common.FAKES, "query"), self.dataset.num_classes
        )
        batch_size = int(fakes.labels.shape[1])
        secure = secagg.read_setup(content) if secagg.is_secure(content) else None
        if secure is None:
            query = gswgan_query_event(self.gswgan.noise_multiplier, batch_size)
        else:
            query = step_event(secure[1], REPLACE_ONE)
        self._check_budget(query)
        self.critic.train_on(fakes.pairs(), common.query_step(content), self.gswgan.critic_steps)
        fake, labels = fakes.images[-1], fakes.labels[-1]
        used: dict[str, str | int | float] = {
            "strategy": "gswgan",
            "batch-size": batch_size,
            "delta": self.config.delta,
        }
        reply: RecordDict | SecureContribution
        if secure is None:
            sanitized = self._sanitized(fake, labels)
            used |= {
                "noise-multiplier": sanitized.noise_multiplier,
                "clip-norm": sanitized.clip_norm,
            }
            gradient = gswgan.encode_gradient(sanitized, self.config.wire_dtype)
            reply = self.reply({gswgan.SANITIZED: gradient}, used)
        else:
            _, noise, rotation_seed = secure
            values = self._secure_input(fake, labels, noise, rotation_seed)
            used |= {
                "noise-multiplier": noise.sigma / (2 * self.gswgan.clip_norm),  # on the sum
                "m-min": noise.m_min,
            }
            reply = SecureContribution(values, self.reply({}, used))
        self.ledger.record(self.client_id, query)
        self.save()  # the cost is on disk before anything is released
        return reply

    def _check_budget(self, query: dp_event.DpEvent) -> None:
        """Refuse a query whose event would take the client past its budget."""
        budget, delta, accountant = (
            self.config.client_budget_epsilon,
            self.config.delta,
            self.config.accountant,
        )
        if budget > 0 and self.ledger.would_exceed(
            self.client_id, query, budget, delta, accountant
        ):
            spent = self.ledger.epsilon_untrusted(self.client_id, delta, accountant)
            raise RequestRefused(
                f"privacy budget exhausted: this client has spent epsilon {spent:.3f} (untrusted "
                f"server, {accountant}, delta={delta:g}) and one more "
                f"query would pass its budget of {budget:g}"
            )

    def _sanitized(self, fake: torch.Tensor, labels: torch.Tensor) -> SanitizedGradient:
        """The critic's sanitized gradient; a diverged critic (NaN/inf) releases a zero signal
        with the same noise, so the wire does not tell the two apart. Counted here only."""
        try:
            return self.critic.answer(fake, labels)
        except NonFiniteGradientError as error:
            self._diverged(error)
            zeros = torch.zeros(fake.shape[0], common.PIXELS, device=self.device)
            return sanitize(zeros, self.gswgan.clip_norm, self.gswgan.noise_multiplier)

    def _secure_input(
        self,
        fake: torch.Tensor,
        labels: torch.Tensor,
        noise: DistributedNoiseParams,
        rotation_seed: bytes,
    ) -> np.ndarray:
        """The critic's gradient with rows clipped to C (no local noise: the cohort's shares
        carry it), flattened and encoded with this client's noise share; a diverged critic
        contributes zeros with the same noise. ``encode`` clips the whole vector to C sqrt(B)
        too, so a row's float32 rounding above C cannot raise the sensitivity."""
        try:
            rows, _ = clip_rows(self.critic.upstream_gradient(fake, labels), self.gswgan.clip_norm)
            vector = rows.double().flatten().cpu().numpy()
        except NonFiniteGradientError as error:
            self._diverged(error)
            vector = np.zeros(noise.dimension)
        return distributed_noise.encode(vector, noise, SecureRandom(), rotation_seed)

    def _diverged(self, error: NonFiniteGradientError) -> None:
        failures = self.store.count_failure(self.client_id)
        logger.warning(
            "client %s: diverged critic (%s), released zero signal plus noise (%d so far)",
            self.client_id,
            error,
            failures,
        )
