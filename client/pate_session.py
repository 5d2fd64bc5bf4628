"""One teacher's side of PATE-GAN: classifier steps on its data vs the fakes, then real/fake votes.

The teacher keeps its discriminator on disk like a GS-WGAN client (``ClientSession`` with a
``TeacherDiscriminator``, same warm start). Votes leave unnoised: PATE-GAN's guarantee needs the
server to add the noise (trusted aggregator), so a client configured with an untrusted-server
budget (``client-budget-epsilon``) refuses.
"""

from __future__ import annotations

import torch
from flwr.app import Array, ArrayRecord, RecordDict

from fedgs import protocol, protocol_pate
from fedgs.client.session import ClientSession, RequestRefused
from fedgs.run_config import RunConfig
from fedgs.training.pate_gan import TeacherDiscriminator


def teacher_session(config: RunConfig, partition_id: int) -> ClientSession:
    """The client's state with a PATE-GAN teacher as its private discriminator."""
    return ClientSession(config, partition_id, TeacherDiscriminator)


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
        batches = {}
        for key in (protocol.FAKES, protocol_pate.BALLOT):
            if key not in content:
                raise protocol.ProtocolError(f"query is missing the '{key}' ArrayRecord")
            arrays = {k: a.numpy() for k, a in content[key].items()}
            batches[key] = protocol.decode_fakes(arrays, num_classes)
        session.critic.train_on(batches[protocol.FAKES].pairs())
        ballot = batches[protocol_pate.BALLOT]
        votes = torch.cat([session.critic.vote(x, y) for x, y in ballot.pairs()])
        session.save()
        packed = protocol_pate.encode_real_votes(votes.numpy())
        used = {
            "strategy": "pate-gan",
            "batch-size": int(batches[protocol.FAKES].labels.shape[1]),
        }
        payload = {protocol_pate.VOTES: ArrayRecord({k: Array(v) for k, v in packed.items()})}
        return session.reply(payload, used)
