"""The client's one entry point: every request passes the node's privacy policy first.

In order: the message type must be the policy's strategy (or its warm start), the requested
noise multiplier and batch must lie inside the policy; only then is the client's lock taken and
its state loaded, and the handler runs under that lock (budget check, training, sanitizing,
ledger, save), so concurrent requests to one client are served one after the other. A refusal
happens before any state is read: it costs nothing and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from flwr.app import RecordDict

from fedgs import protocol, protocol_datalens, protocol_fedavg, protocol_pate
from fedgs.client.datalens_session import DataLensTeacher
from fedgs.client.fedavg_session import FedAvgClient
from fedgs.client.pate_session import PateTeacher, teacher_session
from fedgs.client.session import ClientSession, client_id_of, state_dir_for
from fedgs.client.state_store import ClientStateStore
from fedgs.privacy.policy import NodePolicy, PolicyViolation
from fedgs.run_config import RunConfig

# (run config with the policy applied, partition id, request content) -> reply content
Handler = Callable[[RunConfig, int, RecordDict], RecordDict]

QUERY_TYPES = {
    "gswgan": protocol.QUERY,
    "fedavg-gan": protocol_fedavg.QUERY,
    "datalens": protocol_datalens.QUERY,
    "pate-gan": protocol_pate.QUERY,
}
WARM_STARTED = ("gswgan", "datalens", "pate-gan")  # Fed-Avg GAN's clients keep no critic


def _warm_start(config: RunConfig, partition_id: int, content: RecordDict) -> RecordDict:
    """PATE-GAN teachers warm-start their classifier; every other client its WGAN critic."""
    if config.strategy == "pate-gan":
        return teacher_session(config, partition_id).warm_start(content)
    return ClientSession(config, partition_id).warm_start(content)


HANDLERS: dict[str, Handler] = {
    protocol.QUERY: lambda c, p, r: ClientSession(c, p).answer(r),
    protocol_fedavg.QUERY: lambda c, p, r: FedAvgClient(c, p).answer(r),
    protocol_datalens.QUERY: lambda c, p, r: DataLensTeacher(c, p).answer(r),
    protocol_pate.QUERY: lambda c, p, r: PateTeacher(c, p).answer(r),
    protocol.WARM_START: _warm_start,
}
MESSAGE_TYPES = tuple(HANDLERS)


def allowed_message_types(policy: NodePolicy) -> tuple[str, ...]:
    warm = (protocol.WARM_START,) if policy.strategy in WARM_STARTED else ()
    return (QUERY_TYPES[policy.strategy], *warm)


def requested_batch(message_type: str, content: RecordDict) -> int:
    """The largest batch a query asks about, read from its arrays' shapes before decoding."""
    keys = (protocol.FAKES, protocol_pate.BALLOT) if message_type == protocol_pate.QUERY else ()
    batches = []
    for key in keys or (protocol.FAKES,):
        if key not in content.array_records:
            raise protocol.ProtocolError(f"query is missing the '{key}' ArrayRecord")
        record = content.array_records[key]
        if protocol.LABELS not in record or len(record[protocol.LABELS].shape) != 2:
            raise protocol.ProtocolError(f"'{key}' needs a {protocol.LABELS} array (n_dis, B)")
        batches.append(int(record[protocol.LABELS].shape[1]))
    return max(batches)


def serve(
    message_type: str,
    content: RecordDict,
    config: RunConfig,
    policy: NodePolicy,
    partition_id: int,
) -> RecordDict:
    """Answer one request within ``policy``, or raise (PolicyViolation, RequestRefused,
    ProtocolError) before anything private is touched."""
    allowed = allowed_message_types(policy)
    if message_type not in allowed:
        raise PolicyViolation(
            f"this node serves only {policy.strategy} ({', '.join(allowed)}; its privacy "
            f"policy), not '{message_type}'"
        )
    config = policy.applied_to(config)
    if message_type != protocol.WARM_START:
        batch = requested_batch(message_type, content)
        policy.check_request(config.noise_multiplier, batch)
    client_id = client_id_of(config, partition_id)
    with ClientStateStore(state_dir_for(config)).locked(client_id):
        return HANDLERS[message_type](config, partition_id, content)
