"""One teacher's side of PATE-GAN: classifier steps on its data vs the fakes, then real/fake votes.

The teacher keeps its discriminator on disk like a GS-WGAN client (``CriticSession`` with a
``TeacherDiscriminator``, same warm start). Votes leave unnoised: PATE-GAN's guarantee needs the
server to add the noise (trusted aggregator), so a client configured with an untrusted-server
budget (``client-budget-epsilon``) refuses.
"""

from __future__ import annotations

import torch
from flwr.app import RecordDict

from fedgs.client.common import RequestRefused
from fedgs.client.critic_session import CriticSession
from fedgs.protocols import common, pate_gan
from fedgs.run_config import RunConfig
from fedgs.training.pate_gan import TeacherDiscriminator


def teacher_session(config: RunConfig, partition_id: int) -> CriticSession:
    """The client's state with a PATE-GAN teacher as its private discriminator."""
    return CriticSession(config, partition_id, TeacherDiscriminator)


class PateTeacher:
    def __init__(self, config: RunConfig, partition_id: int) -> None:
        self.config = config
        if config.client_budget_epsilon > 0:
            raise RequestRefused(
                "this client has an untrusted-server privacy budget and PATE-GAN sends unnoised "
                "votes (its guarantee needs a trusted aggregator)"
            )
        self.session = teacher_session(config, partition_id)

    def answer(self, content: RecordDict) -> RecordDict:
        session = self.session
        num_classes = session.dataset.num_classes
        training, ballot = (
            common.decode_fakes(common.required(content, key, "query"), num_classes)
            for key in (common.FAKES, pate_gan.BALLOT)
        )
        session.critic.train_on(training.pairs())
        votes = torch.cat([session.critic.vote(x, y) for x, y in ballot.pairs()])
        session.save()
        packed = pate_gan.encode_real_votes(votes.numpy())
        used = {"strategy": "pate-gan", "batch-size": int(training.labels.shape[1])}
        return session.reply({pate_gan.VOTES: packed}, used)
