"""A node's part in secure aggregation: the SecAgg+ stages around a secure contribution.

A secure query (``fedgs.protocols.secagg``) passes the gate's checks (``fedgs.client.gate``),
then SecAgg+'s own check of its setup (this node in the cohort, its neighbours, the node's
floors); only then does the strategy's session train and encode (GS-WGAN's clipped rows, Fed-Avg
GAN's clipped critic delta: ``fedgs.client.gate.SECURE_QUERIES``). Its
encoded values stay on the node: they are stored with the SecAgg+ session in Flower's
``context.state`` (kept by the SuperNode between this run's messages to this node), and the
reply carries the public records and this node's advertised keys (ConfigRecord ``secagg``).
Each later stage (message type ``train.secagg``) restores the session, answers, and stores the
new state before the reply leaves; the values are dropped once the masked input is sent, the
whole state when the step is done. One step per node at a time: a new secure query replaces a
stale session. A refused or malformed message (SecAggError, ProtocolError, RequestRefused)
changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict

from fedgs.client import gate
from fedgs.client.common import RequestRefused, SecureContribution
from fedgs.privacy.policy import NodePolicy
from fedgs.protocols import secagg
from fedgs.protocols.common import ProtocolError, array_values
from fedgs.run_config import RunConfig
from fedgs.secagg import ClientSession
from fedgs.secagg.client import DONE
from fedgs.secagg.messages import MASKED_INPUT

# context.state records: the SecAgg+ session, and the contribution until it is masked
SESSION, INPUT = "secagg-session", "secagg-input"
VALUES = "values"


def serve(
    message: Message,
    context: Context,
    config: RunConfig,
    policy: NodePolicy,
    partition_id: int,
    answer: Callable[[gate.Admitted, int], gate.Reply] | None = None,
) -> RecordDict:
    """The reply content of any request: SecAgg+ stages here, queries through the gate.
    ``answer`` serves an admitted query (``gate.answer``, the node's data, unless given: the
    communication measurement's stand-in answers a secure query without any data)."""
    answer = answer or gate.answer
    message_type, content = message.metadata.message_type, message.content
    if message_type == secagg.SECAGG:
        gate.check_message_type(message_type, policy)
        return _next_stage(context.state, content)
    request = gate.admit(message_type, content, config, policy)
    if not secagg.is_secure(content):
        reply = answer(request, partition_id)
        if not isinstance(reply, RecordDict):
            raise TypeError("a plain query was answered with a secure contribution")
        return reply
    node = message.metadata.dst_node_id
    return _contribute(node, context.state, policy, request, partition_id, answer)


def _contribute(
    node_id: int,
    state: RecordDict,
    policy: NodePolicy,
    request: gate.Admitted,
    partition_id: int,
    answer: Callable[[gate.Admitted, int], gate.Reply],
) -> RecordDict:
    """A secure query: the SecAgg+ setup first (its keys), then the contribution; the session
    and the values are stored before the reply (identity, policy used, keys) is returned."""
    session = ClientSession(
        node_id, min_cohort=policy.min_cohort, min_threshold=policy.min_threshold
    )
    setup, _, _ = secagg.read_setup(request.content)
    keys = session.handle(setup)
    contribution = answer(request, partition_id)
    if not isinstance(contribution, SecureContribution):
        raise TypeError("a secure query was answered in the clear")
    state[SESSION] = ConfigRecord(session.to_dict())
    state[INPUT] = ArrayRecord({VALUES: Array(contribution.values.astype(np.int64))})
    reply = contribution.reply
    for name, record in secagg.stage_content(keys).items():
        reply[name] = record
    return reply


def _next_stage(state: RecordDict, content: RecordDict) -> RecordDict:
    """A later SecAgg+ stage, answered by the stored session; the new state is stored first."""
    if SESSION not in state.config_records:
        raise RequestRefused(
            "no secure-aggregation step is under way on this node: a train.secagg message "
            "follows a secure query"
        )
    message = secagg.read_stage(content)
    session = ClientSession.from_dict(dict(state.config_records[SESSION]))
    masking = message.get("stage") == MASKED_INPUT
    values = None
    if masking:
        if INPUT not in state.array_records:
            raise RequestRefused("this node's secure contribution is no longer held")
        try:
            values = array_values(state.array_records[INPUT][VALUES]).astype(np.uint64)
        except ProtocolError as error:  # the node's own record, not the server's message
            raise RuntimeError("this node's stored contribution does not decode") from error
    reply = session.handle(message, values)
    if session.stage == DONE:
        del state[SESSION]
    else:
        state[SESSION] = ConfigRecord(session.to_dict())
    if masking:
        del state[INPUT]  # masked and sent: it is needed no longer
    return secagg.stage_content(reply)
