"""Secure aggregation, client side (issue 42): four nodes through the real ClientApp, one server.

Each node is a ClientApp call with its own Flower ``Context`` kept between messages, as a
SuperNode keeps it; a ``fedgs.secagg.ServerSession`` plays the server, its setup riding on a
GS-WGAN query (``fedgs.protocols.secagg``) and its later stages as ``train.secagg`` messages.
The decoded sum is the sum of the clients' clipped gradients; each ledger pays one secure step;
a reply carries no array outside the masked input; every refusal leaves the ledger and the
context untouched.
"""

from __future__ import annotations

import math
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Context, Message, Metadata, RecordDict
from flwr.common import serde
from privacy_boundary_apps import fakes, state_hashes

from fedgs.algorithms import WARM_START
from fedgs.client import secure_node
from fedgs.client.app import ERROR_BAD_REQUEST, ERROR_REFUSED, build_client_app
from fedgs.client.gswgan_session import GSWGANSession
from fedgs.models.losses import generator_upstream_gradient
from fedgs.privacy.distributed_accounting import step_event
from fedgs.privacy.distributed_noise import DistributedNoiseParams, calibrate, decode
from fedgs.privacy.policy import NodePolicy, PolicyViolation
from fedgs.privacy.sanitizer import clip_rows
from fedgs.privacy.threat_models import REPLACE_ONE
from fedgs.protocols import common, gswgan, secagg
from fedgs.run_config import RunConfig
from fedgs.run_data import state_dir_for
from fedgs.secagg import SecAggParams, ServerSession

BATCH = 4
SIGMA = 1e-4  # the run's (and so the simulated nodes' minimum) noise multiplier: a readable sum
RUN = {
    "batch-size": BATCH,
    "critic-steps": 1,
    "critic-width": 4,
    "generator-width": 4,
    "warm-start-steps": 0,
    "noise-multiplier": SIGMA,
}
NODES = tuple(2**63 + 11 + 3 * i for i in range(4))  # Flower node ids are 64-bit
SEED = b"r" * 32


def _noise(
    *, m_min: int = 3, colluders: int = 1, sigma: float = SIGMA, clip: float = 1.0, extra: int = 0
) -> DistributedNoiseParams:
    """Noise of central multiplier ``sigma`` in GS-WGAN terms (std 2 C sigma on the sum), its
    multiplier nudged up by float ulps as the server's is (the client checks exactly)."""
    multiplier = 2 * sigma / math.sqrt(BATCH)
    while True:
        noise = calibrate(
            clip=clip * math.sqrt(BATCH),
            dimension=BATCH * common.PIXELS + extra,
            bits=32,
            m_min=m_min,
            noise_multiplier=multiplier,
            beta=math.exp(-0.5),
            max_clients=len(NODES),
            colluders=colluders,
        ).params
        if noise.sigma / (2 * clip) >= sigma:
            return noise
        multiplier = math.nextafter(multiplier, math.inf)


def _params(noise: DistributedNoiseParams, threshold: int = 2) -> SecAggParams:
    return SecAggParams(
        step=1,
        cohort=NODES,
        modulus_bits=noise.bits,
        threshold=threshold,
        min_survivors=noise.m_min,
        vector_length=noise.padded_dimension,
        degree=len(NODES) - 1,
    )


def _message(node: int, message_type: str, content: RecordDict) -> Message:
    metadata = Metadata(
        run_id=1,
        message_id=uuid.uuid4().hex,
        src_node_id=1,
        dst_node_id=node,
        reply_to_message_id="",
        group_id="",
        created_at=time.time(),
        ttl=3600.0,
        message_type=message_type,
    )
    return Message(content=content, metadata=metadata)


def _query(
    node: int, server: ServerSession, noise: DistributedNoiseParams, seed: int
) -> RecordDict:
    """A secure GS-WGAN query: the fakes plus the server's setup message for ``node``."""
    content = fakes(BATCH, seed=seed)
    setup = {k: v for k, v in server.messages()[node].items() if k != "stage"}
    for name, record in secagg.setup_records(setup, noise, SEED).items():
        content[name] = record
    return content


class Cohort:
    """Four nodes, each with its own context, answering through one ClientApp."""

    def __init__(self, tmp_path: Path, node_configs: dict[int, dict[str, Any]] | None = None):
        self.run = RUN | {"run-dir": str(tmp_path / "run")}
        self.app = build_client_app(self.run)
        self.config = RunConfig.from_user_config(self.run)
        configs = node_configs or {}
        self.contexts = {
            node: Context(
                run_id=1,
                node_id=node,
                node_config={"partition-id": i, **configs.get(i, {})},
                state=RecordDict(),
                run_config=dict(RUN),
            )
            for i, node in enumerate(NODES)
        }

    def ask(self, node: int, message_type: str, content: RecordDict) -> Message:
        return self.app(_message(node, message_type, content), self.contexts[node])

    def state_bytes(self, node: int) -> bytes:
        return serde.recorddict_to_proto(self.contexts[node].state).SerializeToString()

    def ledger(self, partition: int) -> GSWGANSession:
        return GSWGANSession(self.config, partition)


def _answers(cohort: Cohort, server: ServerSession, replies: dict[int, Message]) -> None:
    for reply in replies.values():
        assert not reply.has_error(), reply.error.reason
    server.receive({node: secagg.read_stage(reply.content) for node, reply in replies.items()})


def _stage(cohort: Cohort, server: ServerSession) -> None:
    replies = {
        node: cohort.ask(node, secagg.SECAGG, secagg.stage_content(message))
        for node, message in server.messages().items()
    }
    _answers(cohort, server, replies)


def _clipped_gradient(cohort: Cohort, partition: int, seed: int) -> np.ndarray:
    """What the client's saved critic gives for the last fake batch, rows clipped to C (in eval
    mode: its spectral norms use the power iteration's vectors as the client's forward left
    them, instead of taking one more step)."""
    session = cohort.ledger(partition)
    session.critic.critic.eval()
    batch = common.decode_fakes(fakes(BATCH, seed=seed)[common.FAKES])
    upstream = generator_upstream_gradient(
        session.critic.critic, batch.images[-1], batch.labels[-1]
    )
    return clip_rows(upstream, cohort.config.clip_norm)[0].double().flatten().numpy()


def test_four_nodes_sum_their_clipped_gradients_and_pay_one_secure_step(tmp_path: Path) -> None:
    cohort, noise = Cohort(tmp_path), _noise()
    server = ServerSession(_params(noise))
    replies = {
        node: cohort.ask(node, gswgan.QUERY, _query(node, server, noise, seed=i))
        for i, node in enumerate(NODES)
    }
    for i, (node, reply) in enumerate(replies.items()):
        content = reply.content if not reply.has_error() else None
        assert content is not None, reply.error.reason
        assert not content.array_records  # the contribution stays on the node
        assert set(content.config_records) == {common.CLIENT, common.POLICY_USED, secagg.STAGE}
        assert dict(content.config_records[common.POLICY_USED]) == {
            "strategy": "gswgan",
            "noise-multiplier": pytest.approx(SIGMA),
            "batch-size": BATCH,
            "delta": cohort.config.delta,
            "m-min": 3,
        }
        state = cohort.contexts[node].state
        assert set(state) == {secure_node.SESSION, secure_node.INPUT}
        ledger = cohort.ledger(i).ledger
        client = cohort.ledger(i).client_id
        assert ledger.signature(client) == ((step_event(noise, REPLACE_ONE), 1),)
    _answers(cohort, server, replies)
    _stage(cohort, server)  # share keys
    _stage(cohort, server)  # masked input: the values leave the context
    assert all(secure_node.INPUT not in c.state for c in cohort.contexts.values())
    _stage(cohort, server)  # unmask: nothing is left
    assert all(not c.state for c in cohort.contexts.values())
    total, survivors = server.result()
    assert survivors == list(NODES)
    expected = sum(_clipped_gradient(cohort, i, seed=i) for i in range(len(NODES)))
    got = decode(total, noise, SEED)
    # four clients' noise shares: std 2 C sigma sqrt(4 / (m_min - colluders)) = 2.8e-4 a
    # coordinate, against a signal of norm ~0.75; the rounding adds ~1e-9
    std = noise.sigma * math.sqrt(len(NODES) / noise.noisy_clients)
    error = got - expected
    assert np.abs(error).max() < 6 * std
    assert (
        np.linalg.norm(error) < 1.2 * std * math.sqrt(error.size) < 0.05 * np.linalg.norm(expected)
    )


# --- refusals: nothing paid, nothing stored -------------------------------------------------


def _refused(
    tmp_path: Path,
    node_config: dict[str, Any],
    make: Callable[[Cohort, ServerSession], tuple[str, RecordDict]],
    noise: DistributedNoiseParams | None = None,
    threshold: int = 2,
) -> tuple[int, str]:
    """Ask node 0 (configured with ``node_config``) what ``make`` builds; check that its
    refusal changed neither its state files nor its context."""
    cohort = Cohort(tmp_path, {0: node_config})
    server = ServerSession(_params(noise or _noise(), threshold))
    node = NODES[0]
    before_files = state_hashes(state_dir_for(cohort.config))
    before_state = cohort.state_bytes(node)
    reply = cohort.ask(node, *make(cohort, server))
    assert reply.has_error(), "the node answered"
    assert state_hashes(state_dir_for(cohort.config)) == before_files
    assert cohort.state_bytes(node) == before_state
    return reply.error.code, reply.error.reason


def _secure(noise: DistributedNoiseParams | None = None):
    def make(cohort: Cohort, server: ServerSession) -> tuple[str, RecordDict]:
        return gswgan.QUERY, _query(NODES[0], server, noise or _noise(), seed=0)

    return make


@pytest.mark.parametrize(
    "node_config, noise, threshold, match",
    [
        ({"policy-min-cohort": 4}, None, 2, "below this node's minimum cohort of 4"),
        ({"policy-min-threshold": 3}, None, 2, "threshold 2 is below this node's minimum of 3"),
        ({}, _noise(colluders=0), 2, "assumes 0 colluders"),
        ({}, _noise(colluders=1), 3, "assumes 1 colluders, but SecAgg\\+ with threshold 3"),
        ({"policy-min-noise-multiplier": 2 * SIGMA}, None, 2, "below this node's minimum"),
        (
            {"policy-min-noise-multiplier": SIGMA / 4},
            _noise(sigma=SIGMA / 2),
            2,
            "below the run's noise-multiplier",
        ),
        ({}, _noise(clip=2.0), 2, "the noise.s clip 4 is not the 2 this node clips its vector to"),
        ({}, _noise(extra=1), 2, "the noise's dimension 3137"),
    ],
)
def test_a_secure_query_outside_the_policy_is_refused(
    tmp_path: Path,
    node_config: dict[str, Any],
    noise: DistributedNoiseParams | None,
    threshold: int,
    match: str,
) -> None:
    code, reason = _refused(tmp_path, node_config, _secure(noise), noise, threshold)
    assert code == ERROR_REFUSED
    assert re.search(match, reason), reason


def test_a_secagg_only_node_refuses_a_plain_query_and_serves_a_warm_start(
    tmp_path: Path,
) -> None:
    code, reason = _refused(
        tmp_path, {"policy-secagg-only": True}, lambda c, s: (gswgan.QUERY, fakes(BATCH))
    )
    assert code == ERROR_REFUSED and "only through secure aggregation" in reason
    cohort = Cohort(tmp_path / "again", {0: {"policy-secagg-only": True}})
    assert not cohort.ask(NODES[0], WARM_START, RecordDict()).has_error()


def test_a_setup_that_leaves_this_node_out_is_refused_before_anything_private(
    tmp_path: Path,
) -> None:
    def make(cohort: Cohort, server: ServerSession) -> tuple[str, RecordDict]:
        return gswgan.QUERY, _query(NODES[1], server, _noise(), seed=0)  # node 1's neighbours

    code, reason = _refused(tmp_path, {}, make)
    assert code == ERROR_REFUSED and "neighbours" in reason, reason


def test_setup_and_noise_that_disagree_are_a_bad_request(tmp_path: Path) -> None:
    noise = _noise()
    wider = SecAggParams(**{**_params(noise).to_dict(), "cohort": NODES, "modulus_bits": 40})

    def make(cohort: Cohort, server: ServerSession) -> tuple[str, RecordDict]:
        return gswgan.QUERY, _query(NODES[0], ServerSession(wider), noise, seed=0)

    code, reason = _refused(tmp_path, {}, make)
    assert code == ERROR_BAD_REQUEST and "mod 2^40" in reason, reason


def test_stage_messages_need_a_step_in_order_and_addressed_to_this_node(tmp_path: Path) -> None:
    cohort, noise = Cohort(tmp_path), _noise()
    node, other = NODES[0], NODES[1]
    stage = {"stage": "share_keys", "ids": [], "c_public": [], "s_public": []}
    reply = cohort.ask(node, secagg.SECAGG, secagg.stage_content(stage))
    assert reply.error.code == ERROR_REFUSED and "no secure-aggregation step" in reply.error.reason

    server = ServerSession(_params(noise))
    replies = {n: cohort.ask(n, gswgan.QUERY, _query(n, server, noise, 0)) for n in NODES}
    _answers(cohort, server, replies)
    paid = cohort.ledger(0).ledger.signature(cohort.ledger(0).client_id)
    before = cohort.state_bytes(node)
    messages = server.messages()
    attempts = {
        "out of order": {"stage": "masked_input", "ids": [other], "ciphertexts": [b"x"]},
        "not a SecAgg\\+ stage": {"stage": "hello"},
        "unknown nodes": messages[other],  # another node's share_keys names this node
        "setup message while keys_sent": {"stage": "setup"},
    }
    for match, message in attempts.items():
        reply = cohort.ask(node, secagg.SECAGG, secagg.stage_content(message))
        assert reply.error.code == ERROR_REFUSED, reply.error.reason
        assert re.search(match, reply.error.reason), reply.error.reason
        assert cohort.state_bytes(node) == before
    reply = cohort.ask(node, secagg.SECAGG, RecordDict())
    assert reply.error.code == ERROR_BAD_REQUEST and "'secagg' ConfigRecord" in reply.error.reason
    assert cohort.state_bytes(node) == before
    # the stored step goes on as if nothing had happened
    _stage(cohort, server)
    assert cohort.ledger(0).ledger.signature(cohort.ledger(0).client_id) == paid


def test_a_new_secure_query_replaces_a_stale_step(tmp_path: Path) -> None:
    cohort, noise = Cohort(tmp_path), _noise()
    node = NODES[0]
    first = ServerSession(_params(noise))
    assert not cohort.ask(node, gswgan.QUERY, _query(node, first, noise, 0)).has_error()
    stale = cohort.state_bytes(node)
    second = ServerSession(SecAggParams(**{**_params(noise).to_dict(), "cohort": NODES, "step": 2}))
    assert not cohort.ask(node, gswgan.QUERY, _query(node, second, noise, 1)).has_error()
    assert cohort.state_bytes(node) != stale
    session = cohort.contexts[node].state.config_records[secure_node.SESSION]
    assert session["param_step"] == 2
    assert cohort.ledger(0).ledger.query_counts() == {cohort.ledger(0).client_id: 2}


def test_only_gswgan_nodes_serve_secagg_stages(tmp_path: Path) -> None:
    cohort = Cohort(tmp_path, {0: {"policy-strategy": "datalens"}})
    stage = {"stage": "unmask", "survivors": [], "dropped": []}
    reply = cohort.ask(NODES[0], secagg.SECAGG, secagg.stage_content(stage))
    assert reply.error.code == ERROR_REFUSED and "not 'train.secagg'" in reply.error.reason


# --- the policy's new keys -------------------------------------------------------------------


def test_a_simulated_secure_run_accepts_the_users_own_floors() -> None:
    user = {"secure-aggregation": True, "clients-per-step": 3, "secagg-min-survivors": 2}
    policy = NodePolicy.from_run_config(RunConfig.from_user_config(user))
    assert (policy.min_cohort, policy.min_threshold) == (2, 2)
    assert NodePolicy.from_run_config(RunConfig()).min_cohort == 3  # not secure: the default


def test_the_policy_reads_and_checks_its_secure_aggregation_keys() -> None:
    policy = NodePolicy.from_node_config(
        {"policy-secagg-only": "true", "policy-min-cohort": "5", "policy-min-threshold": 3}
    )
    assert (policy.secagg_only, policy.min_cohort, policy.min_threshold) == (True, 5, 3)
    defaults = NodePolicy()
    assert (defaults.secagg_only, defaults.min_cohort, defaults.min_threshold) == (False, 3, 2)
    with pytest.raises(PolicyViolation, match="min-cohort must be an integer >= 2"):
        NodePolicy(min_cohort=1)
    with pytest.raises(PolicyViolation, match="min-threshold must be an integer >= 2"):
        NodePolicy(min_threshold=1)
    with pytest.raises(PolicyViolation, match="secagg-only binds nodes of a strategy answered"):
        NodePolicy.from_node_config({"policy-strategy": "datalens", "policy-secagg-only": 1})
    setup, run = {"min_survivors": 3, "threshold": 2}, RunConfig(noise_multiplier=SIGMA)
    vector = run.secure_vector(BATCH * common.PIXELS)
    strict = NodePolicy(min_noise_multiplier=2 * SIGMA)  # its check_values refuses such a run
    with pytest.raises(PolicyViolation, match="sum's noise multiplier 0.0001 .* below this node"):
        strict.check_secure(setup, _noise(), run, vector)
    exact = NodePolicy(min_noise_multiplier=SIGMA)  # std 2 C sigma on the sum: not refused
    exact.check_secure(setup, _noise(), run, vector)
    with pytest.raises(PolicyViolation, match="never answered through secure aggregation"):
        NodePolicy.deployment_default("datalens").check_secure(
            {"min_survivors": 3, "threshold": 2}, _noise(), RunConfig(), vector
        )
