"""One teacher's side of DataLens: critic steps on the server's fakes, then top-k sign votes.

The teacher keeps a private critic like GS-WGAN's client (on disk, warm start, ``CriticSession``);
instead
of a clipped-and-noised gradient it answers with the signs of each sample's k largest upstream
gradient coordinates. The votes are not noised here: DataLens' guarantee needs the server to add
the noise (trusted aggregator), so a client configured with an untrusted-server budget
(``client-budget-epsilon``) refuses.
"""

from __future__ import annotations

import logging

import torch
from flwr.app import RecordDict

from fedgs.client.common import RequestRefused
from fedgs.client.critic_session import CriticSession
from fedgs.models.losses import generator_upstream_gradient
from fedgs.privacy.sanitizer import NonFiniteGradientError
from fedgs.privacy.topagg import top_k_signs
from fedgs.protocols import common, datalens
from fedgs.run_config import RunConfig

logger = logging.getLogger(__name__)


class DataLensTeacher:
    strategy = "datalens"  # the policy a reply says it applied

    def __init__(self, config: RunConfig, partition_id: int) -> None:
        if config.client_budget_epsilon > 0:
            raise RequestRefused(
                "this client has an untrusted-server privacy budget and DataLens sends unnoised "
                "votes (its guarantee needs a trusted aggregator)"
            )
        self.config = config
        self.session = CriticSession(config, partition_id)

    def answer(self, content: RecordDict) -> RecordDict:
        session = self.session
        fakes = common.decode_fakes(
            common.required(content, common.FAKES, "query"), session.dataset.num_classes
        )
        session.critic.train_on(fakes.pairs())
        gradient = generator_upstream_gradient(
            session.critic.critic, fakes.images[-1], fakes.labels[-1]
        )
        try:
            votes = top_k_signs(gradient, self.config.datalens_top_k)
        except NonFiniteGradientError as error:  # a diverged critic abstains, same wire shape
            failures = session.store.count_failure(session.client_id)
            logger.warning(
                "teacher %s: diverged critic (%s), abstained (%d so far)",
                session.client_id,
                error,
                failures,
            )
            votes = torch.zeros(gradient.flatten(1).shape, dtype=torch.int8)
        session.save()
        packed = datalens.encode_votes(votes, self.config.datalens_top_k)
        used = {"strategy": self.strategy, "batch-size": int(fakes.labels.shape[1])}
        return session.reply({datalens.VOTES: packed}, used)
