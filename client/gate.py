"""The client's one entry point: every request passes the node's privacy policy first.

In order: the message type must be the policy's strategy (or its warm start), the requested
noise multiplier and batch must lie inside the policy; only then is the client's lock taken and
its state loaded, and the handler runs under that lock (budget check, training, sanitizing,
ledger, save), so concurrent requests to one client are served one after the other. A refusal
happens before any state is read: it costs nothing and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flwr.app import RecordDict

from fedgs.algorithms import ALGORITHMS, WARM_START, algorithm
from fedgs.client.common import client_id_of
from fedgs.client.state_store import ClientStateStore
from fedgs.privacy.policy import NodePolicy, PolicyViolation
from fedgs.protocols import common
from fedgs.run_config import RunConfig
from fedgs.run_data import state_dir_for

# (run config with the policy applied, partition id, request content) -> reply content
Handler = Callable[[RunConfig, int, RecordDict], RecordDict]


def _answering(session: Callable[[RunConfig, int], Any]) -> Handler:
    """The handler of one strategy's query: its session, built for the request, answers."""
    return lambda config, partition_id, content: session(config, partition_id).answer(content)


# Sessions resolved from the registry once, at import: a wrong "module:attr" fails here, and a
# SuperExec that preloads this module forks ClientApps with every session imported.
WARM_START_SESSIONS = {
    name: entry.warm_start_factory() for name, entry in ALGORITHMS.items() if entry.warm_started
}


def _warm_start(config: RunConfig, partition_id: int, content: RecordDict) -> RecordDict:
    """The strategy's warm-start session (a WGAN critic, or PATE-GAN's classifier) trains; the
    policy set ``config.strategy``."""
    return WARM_START_SESSIONS[config.strategy](config, partition_id).warm_start(content)


HANDLERS: dict[str, Handler] = {
    **{entry.query: _answering(entry.session_factory()) for entry in ALGORITHMS.values()},
    WARM_START: _warm_start,
}
MESSAGE_TYPES = tuple(HANDLERS)
QUERIES = {entry.query: entry for entry in ALGORITHMS.values()}


def allowed_message_types(policy: NodePolicy) -> tuple[str, ...]:
    served = algorithm(policy.strategy)
    return (served.query, *((WARM_START,) if served.warm_started else ()))


def requested_batch(message_type: str, content: RecordDict) -> int:
    """The largest batch a query asks about, read from its arrays' shapes before decoding."""
    keys = QUERIES[message_type].batch_records
    return max(common.fake_batch_size(content, key) for key in keys)


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
    if message_type != WARM_START:
        batch = requested_batch(message_type, content)
        policy.check_request(config.noise_multiplier, batch)
    client_id = client_id_of(config, partition_id)
    with ClientStateStore(state_dir_for(config)).locked(client_id):
        return HANDLERS[message_type](config, partition_id, content)
