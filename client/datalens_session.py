"""One teacher's side of DataLens: critic steps on the server's fakes, then top-k sign votes.

The teacher is GS-WGAN's client (private critic on disk, warm start, ``ClientSession``); instead
of a clipped-and-noised gradient it answers with the signs of each sample's k largest upstream
gradient coordinates. The votes are not noised here: DataLens' guarantee needs the server to add
the noise (trusted aggregator), so a client configured with an untrusted-server budget
(``client-budget-epsilon``) refuses.
"""

from __future__ import annotations

import logging

import torch
from flwr.app import Array, ArrayRecord, RecordDict

from fedgs import protocol, protocol_datalens
from fedgs.client.session import ClientSession, RequestRefused
from fedgs.models.losses import generator_upstream_gradient
from fedgs.privacy.sanitizer import NonFiniteGradientError
from fedgs.privacy.topagg import top_k_signs
from fedgs.run_config import RunConfig

logger = logging.getLogger(__name__)


class DataLensTeacher:
    def __init__(self, config: RunConfig, partition_id: int) -> None:
        if config.client_budget_epsilon > 0:
            raise RequestRefused(
                "this client has an untrusted-server privacy budget and DataLens sends unnoised "
                "votes (its guarantee needs a trusted aggregator)"
            )
        self.config = config
        self.session = ClientSession(config, partition_id)

    def answer(self, content: RecordDict) -> RecordDict:
        if protocol.FAKES not in content:
            raise protocol.ProtocolError(f"query is missing the '{protocol.FAKES}' ArrayRecord")
        session = self.session
        fakes = protocol.decode_fakes(
            {k: a.numpy() for k, a in content[protocol.FAKES].items()},
            session.dataset.num_classes,
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
        packed = protocol_datalens.encode_votes(votes, self.config.datalens_top_k)
        used = {"strategy": "datalens", "batch-size": int(fakes.labels.shape[1])}
        payload = {protocol_datalens.VOTES: ArrayRecord({k: Array(v) for k, v in packed.items()})}
        return session.reply(payload, used)
