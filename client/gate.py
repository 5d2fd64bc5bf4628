"""The client's one entry point: every request passes the node's privacy policy first.

In order, each before anything private is touched: the message type must be the policy's
strategy (or its warm start, or the identification: the client's name, nothing else); every
value the run config asks the node to apply must be finite and inside the policy (noise
multiplier at or above its minimum, its own clip norm, a batch at or below its maximum); the
request's arrays must have the protocol's shapes, dtypes and finite values. Only then does the
node read its dataset (which writer it holds, how many classes it has, against the labels asked
about), take the client's lock and load its state, and the handler runs under that lock (budget
check, training, sanitizing, ledger, save), so concurrent requests to one client are served one
after the other. A refusal costs nothing and changes nothing; a node whose config lacks its own
state directory never gets this far (``fedgs.client.node``).

A GS-WGAN, Fed-Avg GAN or DP-MERF query may ask for an answer through secure aggregation
(``fedgs.protocols.secagg``): its SecAgg+ setup and distributed noise are checked against the
policy with the arrays (the vector the node would encode: its length read from the query, its
clip and the sum's noise from ``RunConfig.secure_vector``), and the session returns a
``SecureContribution`` that ``fedgs.client.secure_node`` masks. Checking
(:func:`admit`) and answering (:func:`answer`) are two calls, so that layer can check the
SecAgg+ setup in between, still before anything private; :func:`serve` is both.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import RecordDict

from fedgs.algorithms import ALGORITHMS, IDENTIFY, WARM_START, algorithm
from fedgs.client.common import SecureContribution, client_id_of
from fedgs.client.state_store import ClientStateStore
from fedgs.privacy.policy import NodePolicy, PolicyViolation
from fedgs.protocols import common, dp_merf, fedavg_gan, gswgan, secagg
from fedgs.run_config import RunConfig
from fedgs.run_data import dataset_for, state_dir_for
from fedgs.training.fedavg_gan import build_critic, parameter_names
from fedgs.training.hparams import FedAvgGANConfig

Reply = RecordDict | SecureContribution
# (run config with the policy applied, partition id, request content) -> reply content
Handler = Callable[[RunConfig, int, RecordDict], Reply]


def _gswgan_length(config: RunConfig, content: RecordDict) -> int:
    """The gradient of the query's last fake batch: B rows of 784."""
    return common.fake_batch_size(content, common.FAKES) * common.PIXELS


@functools.cache
def _critic_parameters(config: FedAvgGANConfig) -> frozenset[str]:
    """The names of the critic's parameters (its buffers are not trained): they do not depend
    on the number of classes, so a one-class shell names them without the node's data."""
    return frozenset(parameter_names(build_critic(config, 1)))


def _fedavg_length(config: RunConfig, content: RecordDict) -> int:
    """The critic's parameters, all of them: the query's critic record less its buffers (the
    session then checks every array against its own network)."""
    record = common.required(content, fedavg_gan.CRITIC, "query")
    names = _critic_parameters(config.fedavg_gan())
    return sum(int(np.prod(record[name].shape)) for name in record if name in names)


def _merf_length(config: RunConfig, content: RecordDict) -> int:
    """The release: (D + 1) x classes, D from the query's feature map, the classes from the
    run's label mode (the session checks them against the node's data before encoding)."""
    spec = dp_merf.decode_query(content)
    try:  # the run config's checks again, at the query's D (its secure noise must fit it)
        return config.with_updates(merf_features=spec.features).merf_dimension
    except (ValueError, ArithmeticError) as error:
        raise common.ProtocolError(f"query '{dp_merf.FEATURES}': {error}") from error


# the queries a node may answer through secure aggregation (those whose registry entry names a
# cohort key), each with the length of the vector its answer encodes, read from the query alone
SECURE_LENGTHS: dict[str, Callable[[RunConfig, RecordDict], int]] = {
    gswgan.QUERY: _gswgan_length,
    fedavg_gan.QUERY: _fedavg_length,
    dp_merf.QUERY: _merf_length,
}
SECURE_QUERIES = tuple(SECURE_LENGTHS)


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


def _identify(config: RunConfig, partition_id: int, content: RecordDict) -> RecordDict:
    """Which client this node holds, and nothing else: every reply names it anyway, this one
    before any query is paid (no payload, no policy record, nothing read from the data)."""
    return common.reply_content({}, client_id_of(config, partition_id), partition_id, {})


HANDLERS: dict[str, Handler] = {
    **{entry.query: _answering(entry.session_factory()) for entry in ALGORITHMS.values()},
    WARM_START: _warm_start,
    IDENTIFY: _identify,
}
MESSAGE_TYPES = (*HANDLERS, secagg.SECAGG)  # the SecAgg+ stages: fedgs.client.secure_node
QUERIES = {entry.query: entry for entry in ALGORITHMS.values()}


def allowed_message_types(policy: NodePolicy) -> tuple[str, ...]:
    """The query of the policy's strategy, its warm start, the SecAgg+ stages if its query may
    be answered securely, and the identification every node serves."""
    served = algorithm(policy.strategy)
    return (
        served.query,
        IDENTIFY,
        *((WARM_START,) if served.warm_started else ()),
        *((secagg.SECAGG,) if served.query in SECURE_QUERIES else ()),
    )


def requested_batch(message_type: str, content: RecordDict) -> int:
    """The largest batch a query asks about, read from its arrays' shapes before decoding (0
    for a query without fake batches)."""
    keys = QUERIES[message_type].batch_records
    return max((common.fake_batch_size(content, key) for key in keys), default=0)


def check_message_type(message_type: str, policy: NodePolicy) -> None:
    """Refuse a message type the node's policy does not serve."""
    allowed = allowed_message_types(policy)
    if message_type not in allowed:
        raise PolicyViolation(
            f"this node serves only {policy.strategy} ({', '.join(allowed)}; its privacy "
            f"policy), not '{message_type}'"
        )


def validated_arrays(
    message_type: str, content: RecordDict, policy: NodePolicy
) -> list[common.FakeBatches]:
    """The request's fake batches, checked without any of the node's data (the batch against
    the policy first, from the shapes alone) and its step; a warm start carries only its step
    count, an identification nothing."""
    if message_type == WARM_START:
        common.warm_start_steps(content)
        return []
    if message_type == IDENTIFY:
        if content.array_records:
            raise common.ProtocolError("an identification request carries no arrays")
        return []
    policy.check_batch(requested_batch(message_type, content))
    common.query_step(content)
    entry = QUERIES[message_type]
    for key in entry.float_records:
        common.check_floats(common.required(content, key, "query"), key)
    return [
        common.decode_fakes(common.required(content, key, "query")) for key in entry.batch_records
    ]


def check_secure(
    message_type: str, content: RecordDict, config: RunConfig, policy: NodePolicy
) -> None:
    """A secure query's setup and noise within the policy; a plain query where the policy
    allows one (a warm start or an identification releases nothing and needs neither)."""
    if not secagg.is_secure(content):
        if message_type in SECURE_QUERIES:
            policy.check_plain()
        return
    if message_type not in SECURE_QUERIES:
        raise PolicyViolation(f"'{message_type}' cannot be answered through secure aggregation")
    setup, noise, _ = secagg.read_setup(content)
    params = secagg.setup_params(setup, noise)
    vector = config.secure_vector(SECURE_LENGTHS[message_type](config, content))
    policy.check_secure(params.to_dict(), noise, config, vector)


@dataclass(frozen=True)
class Admitted:
    """A request that passed every check made without the node's data: what :func:`answer`
    serves (``config`` with the policy applied)."""

    message_type: str
    content: RecordDict
    config: RunConfig
    batches: list[common.FakeBatches]


def admit(
    message_type: str, content: RecordDict, config: RunConfig, policy: NodePolicy
) -> Admitted:
    """Check a request within ``policy``, or raise (PolicyViolation, ProtocolError), touching
    nothing private."""
    check_message_type(message_type, policy)
    policy.check_values(config)
    config = policy.applied_to(config)
    batches = validated_arrays(message_type, content, policy)
    check_secure(message_type, content, config, policy)
    return Admitted(message_type, content, config, batches)


def answer(request: Admitted, partition_id: int) -> Reply:
    """Serve an admitted request: the node's dataset (its writer, its classes against the
    fakes' labels; RequestRefused), then the handler under the client's lock."""
    client_id = client_id_of(request.config, partition_id)
    num_classes = dataset_for(request.config).num_classes
    for fakes in request.batches:
        common.check_classes(fakes, num_classes)
    with ClientStateStore(state_dir_for(request.config)).locked(client_id):
        return HANDLERS[request.message_type](request.config, partition_id, request.content)


def serve(
    message_type: str,
    content: RecordDict,
    config: RunConfig,
    policy: NodePolicy,
    partition_id: int,
) -> Reply:
    """Answer one request within ``policy``, or raise (PolicyViolation, RequestRefused,
    ProtocolError) before anything private is touched."""
    return answer(admit(message_type, content, config, policy), partition_id)
