"""SecAgg+ run by hand, in-process: the sum, dropouts, aborts, refusals and what the server sees.

Every client's state goes through ``to_dict`` / ``from_dict`` between stages, as it would through
Flower's ``context.state``; each state and message is checked to hold plain values only.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats

from fedgs.secagg import ClientSession, SecAggAbort, SecAggError, SecAggParams, ServerSession, keys

BASE_ID = 2**63 + 11  # Flower node ids are random 64-bit integers
PLAIN = (bytes, int, str)


def make_params(
    n: int = 6,
    *,
    k: int = 16,
    t: int | None = None,
    m_min: int = 3,
    length: int = 12,
    degree: int | None = None,
    step: int = 7,
) -> SecAggParams:
    degree = n - 1 if degree is None else degree
    d = min(degree, n - 1)
    return SecAggParams(
        step=step,
        cohort=tuple(BASE_ID + 3 * i for i in range(n)),
        modulus_bits=k,
        threshold=d // 2 + 1 if t is None else t,
        min_survivors=m_min,
        vector_length=length,
        degree=degree,
    )


def is_plain(value: object) -> bool:
    if isinstance(value, PLAIN) and not isinstance(value, bool):
        return True
    return isinstance(value, list) and all(is_plain(v) and not isinstance(v, list) for v in value)


class Step:
    """The server and the clients' stored states; clients restored fresh for every message."""

    def __init__(self, params: SecAggParams, inputs: dict[int, np.ndarray] | None = None) -> None:
        self.params = params
        self.server = ServerSession(params)
        self.states = {
            v: ClientSession(v, min_cohort=2, min_threshold=2).to_dict() for v in params.cohort
        }
        rng = np.random.default_rng(3)  # test inputs only; the protocol uses no numpy randomness
        self.inputs = inputs or {
            v: rng.integers(0, 2**params.modulus_bits, params.vector_length, dtype=np.uint64)
            for v in params.cohort
        }

    def client(self, node: int) -> ClientSession:
        state = self.states[node]
        assert all(isinstance(key, str) and is_plain(value) for key, value in state.items())
        return ClientSession.from_dict(state)

    def answer(self, node: int, message: dict) -> dict:
        session = self.client(node)
        values = self.inputs[node] if message["stage"] == "masked_input" else None
        reply = session.handle(message, values)
        self.states[node] = session.to_dict()
        assert ClientSession.from_dict(self.states[node]).to_dict() == self.states[node]
        return reply

    def stage(
        self, skip: tuple[int, ...] = (), edit: Callable[[dict[int, dict]], None] | None = None
    ) -> dict[int, dict]:
        """One stage: messages out, replies of everyone not in ``skip`` back to the server."""
        messages = self.server.messages()
        for message in messages.values():
            assert all(is_plain(v) for v in message.values())
        replies = {v: self.answer(v, msg) for v, msg in messages.items() if v not in skip}
        if edit:
            edit(replies)
        self.server.receive(replies)
        return replies

    def expected(self, survivors: list[int]) -> np.ndarray:
        total = sum(self.inputs[v].astype(object) for v in survivors) % 2**self.params.modulus_bits
        return total.astype(np.uint64)


def run_all(
    step: Step, drop_before_masked=(), drop_before_unmask=()
) -> tuple[np.ndarray, list[int]]:
    step.stage()
    step.stage()
    step.stage(skip=drop_before_masked)
    step.stage(skip=drop_before_unmask)
    return step.server.result()


# --- the sum ------------------------------------------------------------------------------------


@pytest.mark.parametrize("n,degree", [(6, None), (10, 4), (10, 5)])
def test_the_sum_of_the_inputs_mod_2k(n: int, degree: int | None) -> None:
    step = Step(make_params(n, degree=degree))
    total, survivors = run_all(step)
    assert survivors == list(step.params.cohort)
    assert total.dtype == np.uint64
    np.testing.assert_array_equal(total, step.expected(survivors))
    assert step.server.rejected == {}
    d = min(n - 1, degree or n)
    for node in step.params.cohort:  # each client shared with exactly its graph neighbours
        assert ClientSession.from_dict(step.states[node]).stage == "done"
    assert all(len(step.params.graph()[v]) == d for v in step.params.cohort)


def test_k62_and_a_sparse_graph_with_large_values() -> None:
    params = make_params(8, k=62, degree=4, length=5)
    inputs = {v: np.full(5, 2**62 - 1 - i, dtype=np.uint64) for i, v in enumerate(params.cohort)}
    step = Step(params, inputs)
    total, survivors = run_all(step)
    np.testing.assert_array_equal(total, step.expected(survivors))


# --- dropouts and aborts -----------------------------------------------------------------------


@pytest.mark.parametrize("degree", [None, 6])
def test_a_dropout_after_share_keys_is_recovered(degree: int | None) -> None:
    step = Step(make_params(10, degree=degree))
    gone = step.params.cohort[2]
    total, survivors = run_all(step, drop_before_masked=(gone,))
    assert gone not in survivors and len(survivors) == 9
    np.testing.assert_array_equal(total, step.expected(survivors))


@pytest.mark.parametrize("degree", [None, 6])
def test_a_dropout_after_the_masked_input_is_recovered(degree: int | None) -> None:
    step = Step(make_params(10, degree=degree))
    gone = step.params.cohort[4]
    total, survivors = run_all(step, drop_before_unmask=(gone,))
    assert gone in survivors  # its input is in the sum; its seed was rebuilt from shares
    np.testing.assert_array_equal(total, step.expected(survivors))


def test_dropouts_at_every_stage_together() -> None:
    step = Step(make_params(10, t=5))  # each seed keeps 9 - 4 = 5 share holders
    c = step.params.cohort
    step.stage(skip=(c[0],))
    step.stage(skip=(c[3],))
    step.stage(skip=(c[6],))
    step.stage(skip=(c[8],))
    total, survivors = step.server.result()
    assert survivors == [v for v in c if v not in (c[0], c[3], c[6])]
    np.testing.assert_array_equal(total, step.expected(survivors))


def test_fewer_survivors_than_m_min_aborts() -> None:
    step = Step(make_params(6, m_min=5))
    step.stage()
    step.stage()
    with pytest.raises(SecAggAbort, match="fewer than m_min"):
        step.stage(skip=step.params.cohort[:2])
    assert step.server.stage == "aborted"
    with pytest.raises(SecAggError):
        step.server.result()
    with pytest.raises(SecAggError):
        step.server.messages()


def test_fewer_than_m_min_at_setup_aborts() -> None:
    step = Step(make_params(6, m_min=6))
    with pytest.raises(SecAggAbort):
        step.stage(skip=step.params.cohort[:1])


def test_fewer_than_t_unmask_replies_aborts() -> None:
    step = Step(make_params(6, t=4))
    step.stage()
    step.stage()
    step.stage()
    with pytest.raises(SecAggAbort, match="fewer than t"):
        step.stage(skip=step.params.cohort[:3])
    with pytest.raises(SecAggError):
        step.server.result()


# --- what the server sees of one client --------------------------------------------------------


def masked_of_first(x: np.ndarray, params: SecAggParams) -> np.ndarray:
    inputs = {v: np.zeros(params.vector_length, dtype=np.uint64) for v in params.cohort}
    inputs[params.cohort[0]] = x
    step = Step(params, inputs)
    step.stage()
    step.stage()
    return step.stage()[params.cohort[0]]["masked"]


def test_a_masked_input_looks_uniform_whatever_the_input() -> None:
    params = make_params(5, k=8, length=8192)
    x = np.zeros(8192, dtype=np.uint64)
    x_other = np.random.default_rng(1).integers(0, 256, 8192, dtype=np.uint64)
    y, y_other = masked_of_first(x, params), masked_of_first(x_other, params)
    for masked in (y, y_other):
        counts = np.bincount(masked.astype(np.int64), minlength=256)
        assert len(counts) == 256
        assert stats.chisquare(counts).pvalue > 1e-6
    table = np.stack([np.bincount(v.astype(np.int64), minlength=256) for v in (y, y_other)])
    assert stats.chi2_contingency(table).pvalue > 1e-6  # same distribution for x and x'
    assert abs(stats.pearsonr(y_other.astype(float), x_other.astype(float)).statistic) < 0.06
    assert abs(stats.pearsonr(y.astype(float), x_other.astype(float)).statistic) < 0.06


def test_the_server_view_besides_the_masked_input_does_not_depend_on_the_input() -> None:
    params = make_params(6, k=16, length=50)
    step = Step(params)
    node = params.cohort[1]
    keys_reply = step.stage()[node]  # made before any input exists (the API takes none)
    shares_reply = step.stage()[node]
    assert set(keys_reply) == {"c_public", "s_public"} and set(shares_reply) == {
        "ids",
        "ciphertexts",
    }
    before = dict(step.states[node])
    masked_message = step.server.messages()[node]
    step.stage()
    unmask_message = step.server.messages()[node]
    views = []
    for x in (np.zeros(50, dtype=np.uint64), np.arange(50, dtype=np.uint64) * 1000):
        session = ClientSession.from_dict(before)
        masked = session.handle(masked_message, x)["masked"]
        views.append((masked, session.handle(unmask_message)))
    (y0, unmask0), (y1, unmask1) = views
    assert unmask0 == unmask1  # the shares revealed are the same for x and x'
    np.testing.assert_array_equal((y1 - y0) % 2**16, np.arange(50) * 1000 % 2**16)


# --- what a client refuses ---------------------------------------------------------------------


def step_at_unmask(n: int = 6, **kwargs) -> tuple[Step, int, dict]:
    step = Step(make_params(n, **kwargs))
    step.stage()
    step.stage()
    step.stage()
    node = step.params.cohort[0]
    return step, node, step.server.messages()[node]


def refused(step: Step, node: int, message: object, values=None, match: str | None = None) -> None:
    session = step.client(node)
    before = session.to_dict()
    with pytest.raises(SecAggError, match=match):
        session.handle(message, values)
    assert session.to_dict() == before  # a refusal changes nothing


def test_an_unmask_naming_a_client_survivor_and_dropped_is_refused() -> None:
    step, node, message = step_at_unmask()
    other = step.params.cohort[3]
    refused(step, node, {**message, "dropped": [other]}, match="both")


def test_a_repeated_unmask_is_refused() -> None:
    step, node, message = step_at_unmask()
    session = step.client(node)
    session.handle(message)
    state = session.to_dict()
    assert set(state) == {"stage", "node_id", "min_cohort", "min_threshold"}  # secrets gone
    with pytest.raises(SecAggError, match="out of order or repeated"):
        ClientSession.from_dict(state).handle(message)


def test_an_unmask_with_fewer_survivors_than_m_min_is_refused() -> None:
    step, node, message = step_at_unmask(m_min=4)
    refused(step, node, {**message, "survivors": message["survivors"][:3]}, match="min_survivors")


def test_an_unmask_not_naming_the_client_or_naming_strangers_is_refused() -> None:
    step, node, message = step_at_unmask()
    refused(step, node, {**message, "survivors": message["survivors"][1:]}, match="not listed")
    refused(step, node, {**message, "survivors": message["survivors"] + [5]}, match="unknown")
    refused(step, node, {**message, "dropped": [node]}, match="unknown")


@pytest.mark.parametrize("floor", ["min_threshold", "min_cohort"])
def test_a_setup_below_the_nodes_own_minimums_is_refused(floor: str) -> None:
    params = make_params(6, t=3, m_min=3)
    message = ServerSession(params).messages()[params.cohort[0]]
    minimums = {"min_threshold": 2, "min_cohort": 2} | {floor: 4}
    with pytest.raises(SecAggError, match="below this node's minimum"):
        ClientSession(params.cohort[0], **minimums).handle(message)
    ClientSession(params.cohort[0], min_threshold=3, min_cohort=3).handle(message)


@pytest.mark.parametrize(
    "change",
    [
        {"modulus_bits": True},
        {"modulus_bits": 63},
        {"threshold": 2},  # 2t <= the 5 neighbours
        {"cohort": ["1", "2", "3"]},
        {"vector_length": 0},
        {"neighbours": [1, 2, 3]},
        {"stage": "unmask"},
        {"extra": 1},
    ],
)
def test_a_malformed_or_foreign_setup_is_refused(change: dict) -> None:
    params = make_params(6)
    node = params.cohort[0]
    message = {**ServerSession(params).messages()[node], **change}
    with pytest.raises(SecAggError):
        ClientSession(node, min_cohort=2, min_threshold=2).handle(message)


def test_a_setup_for_a_cohort_without_the_node_is_refused() -> None:
    params = make_params(6)
    message = ServerSession(params).messages()[params.cohort[0]]
    with pytest.raises(SecAggError, match="not in the cohort"):
        ClientSession(17, min_cohort=2, min_threshold=2).handle(message)


def test_malformed_share_keys_messages_are_refused() -> None:
    step = Step(make_params(6, degree=4, t=3))
    step.stage()
    node = step.params.cohort[0]
    message = step.server.messages()[node]
    ids, c_pub = message["ids"], message["c_public"]
    stranger = step.params.cohort[3]  # in the cohort, not a neighbour of the first node
    assert stranger not in step.params.graph()[node]
    refused(step, node, {**message, "ids": [stranger] + ids[1:]}, match="unknown")
    refused(step, node, {**message, "ids": ids + [999]}, match="unknown")
    refused(step, node, {**message, "ids": [str(v) for v in ids]}, match="int")
    refused(step, node, {**message, "c_public": c_pub[:-1]}, match="list of")
    refused(step, node, {**message, "c_public": [p[:-1] for p in c_pub]}, match="bytes")
    refused(step, node, {**message, "c_public": [b"\x04" + bytes(96)] + c_pub[1:]}, match="point")
    refused(step, node, {**message, "s_public": c_pub}, match="equal")
    refused(
        step,
        node,
        {k: v[:2] if k != "stage" else v for k, v in message.items()},
        match="fewer than the threshold",
    )
    refused(step, node, {**message, "stage": "masked_input"}, values=np.zeros(12, np.uint64))
    refused(step, node, message, values=np.zeros(12, np.uint64), match="values")


def test_a_wrong_input_vector_is_refused() -> None:
    step = Step(make_params(6, k=8))
    step.stage()
    step.stage()
    node = step.params.cohort[0]
    message = step.server.messages()[node]
    refused(step, node, message, values=np.zeros(11, np.uint64), match="length")
    refused(step, node, message, values=np.full(12, 256, np.uint64), match="outside")
    refused(step, node, message, values=np.full(12, -1, np.int64), match="outside")
    refused(step, node, message, values=np.zeros(12), match="integer")
    refused(step, node, message, match="values")


# --- tampered and misaddressed shares ----------------------------------------------------------


def masked_input_message(n: int = 6) -> tuple[Step, int, dict]:
    step = Step(make_params(n))
    step.stage()
    step.stage()
    node = step.params.cohort[0]
    return step, node, step.server.messages()[node]


def test_a_tampered_ciphertext_is_rejected() -> None:
    step, node, message = masked_input_message()
    x = step.inputs[node]
    cts = list(message["ciphertexts"])
    token = bytearray(cts[1])
    token[60] ^= 1 if token[60] != ord("A") else 2
    refused(step, node, {**message, "ciphertexts": [cts[0], bytes(token)] + cts[2:]}, x, "decrypt")


def test_a_share_for_someone_else_or_from_someone_else_is_rejected() -> None:
    step, node, message = masked_input_message()
    x = step.inputs[node]
    cts = list(message["ciphertexts"])
    swapped = [cts[1], cts[0]] + cts[2:]  # sender relabelled
    refused(step, node, {**message, "ciphertexts": swapped}, x, "decrypt")
    other = step.params.cohort[1]
    foreign = step.server.messages()[other]["ciphertexts"][1]  # addressed to another node
    refused(step, node, {**message, "ciphertexts": [cts[0], foreign] + cts[2:]}, x, "decrypt")


def test_a_share_whose_envelope_names_another_receiver_is_rejected() -> None:
    step, node, message = masked_input_message()
    sender = message["ids"][0]
    sender_c = keys.private_from_bytes(step.states[sender]["c_private"])
    own_c = keys.public_to_bytes(keys.private_from_bytes(step.states[node]["c_private"]))
    shares = bytes(keys.B_SHARE_LEN), bytes(keys.S_SHARE_LEN)
    for step_no, src, dst in [(7, sender, node + 1), (8, sender, node), (7, node, node)]:
        forged = keys.seal_shares(sender_c, own_c, step_no, src, dst, *shares)
        cts = [forged] + list(message["ciphertexts"][1:])
        refused(step, node, {**message, "ciphertexts": cts}, step.inputs[node], "another step")


# --- the server's own checks -------------------------------------------------------------------


def test_malformed_replies_drop_their_client_and_the_sum_survives() -> None:
    step = Step(make_params(12, t=6))  # every seed keeps 12 - 2 - 4 = 6 share holders
    c = step.params.cohort

    def set_reply(node: int, reply: object) -> Callable[[dict], None]:
        return lambda replies: replies.__setitem__(node, reply)

    step.stage(edit=set_reply(c[0], {"c_public": b"x", "s_public": b"y"}))
    step.stage(edit=set_reply(c[1], {"ids": [], "ciphertexts": []}))
    step.stage(edit=set_reply(c[2], {"masked": np.zeros(11, np.uint64)}))

    def bad_unmask(replies: dict) -> None:
        shares = replies[c[3]]["b_shares"]
        wrong_index = (99).to_bytes(4, "little") + shares[0][4:]
        replies[c[3]] = {**replies[c[3]], "b_shares": [wrong_index] + shares[1:]}
        replies[c[4]] = "garbage"

    step.stage(edit=bad_unmask)
    assert set(step.server.rejected) == {c[0], c[1], c[2], c[3], c[4]}
    total, survivors = step.server.result()
    assert survivors == [v for v in c if v not in c[:3]]  # c[3], c[4]'s inputs still count
    np.testing.assert_array_equal(total, step.expected(survivors))


def test_a_wrong_share_of_a_seed_aborts_the_step() -> None:
    """A holder can spoil a seed share it holds (nothing authenticates shares to the server):
    the rebuilt seed is then a uniform element of Z_q, not below 2^256 (but with chance 2^-128),
    and the step aborts, releasing no sum."""
    step = Step(make_params(6))
    c = step.params.cohort
    step.stage()
    step.stage()
    step.stage()

    def spoil(replies: dict) -> None:
        shares = replies[c[1]]["b_shares"]
        spoiled = shares[0][:4] + bytes(len(shares[0]) - 4)  # right index, wrong value
        replies[c[1]] = {**replies[c[1]], "b_shares": [spoiled] + shares[1:]}

    with pytest.raises(SecAggAbort, match="do not combine"):
        step.stage(edit=spoil)


def test_two_clients_advertising_one_key_are_both_dropped() -> None:
    step = Step(make_params(6))
    c = step.params.cohort

    def clash(replies: dict) -> None:
        replies[c[1]] = {**replies[c[1]], "s_public": replies[c[0]]["c_public"]}

    step.stage(edit=clash)
    assert step.server.alive == list(c[2:])
    assert "equal to another" in step.server.rejected[c[0]]


def test_replies_from_nodes_not_asked_are_ignored() -> None:
    step = Step(make_params(6))
    step.stage(edit=lambda replies: replies.__setitem__(12345, {"c_public": b"", "s_public": b""}))
    assert step.server.alive == list(step.params.cohort)


# --- state -------------------------------------------------------------------------------------


def test_a_malformed_state_is_refused() -> None:
    step = Step(make_params(6))
    step.stage()
    step.stage()
    state = step.states[step.params.cohort[0]]
    for bad in [
        {**state, "stage": "later"},
        {k: v for k, v in state.items() if k != "self_seed"},
        {**state, "self_seed": b"short"},
        {**state, "c_publics": state["c_publics"][:-1]},
        {**state, "key_ids": [1, 2]},
        {**state, "param_threshold": 1},
        {**state, "c_private": bytes(48)},
        "not a mapping",
    ]:
        with pytest.raises(SecAggError):
            ClientSession.from_dict(bad)


# --- cost --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_fifty_clients_25088_values() -> None:
    n, length = 50, 25_088
    params = SecAggParams(
        step=1,
        cohort=tuple(range(1, n + 1)),
        modulus_bits=32,
        threshold=26,
        min_survivors=25,
        vector_length=length,
        degree=n,
    )
    inputs = {v: np.arange(length, dtype=np.uint64) * v % 2**32 for v in params.cohort}
    step = Step(params, inputs)
    start = time.perf_counter()
    total, survivors = run_all(step, drop_before_unmask=(7,))
    print(f"SecAgg+ 50 clients x 25,088 values in-process: {time.perf_counter() - start:.1f} s")
    np.testing.assert_array_equal(total, step.expected(survivors))
