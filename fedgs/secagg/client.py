"""One client's side of one SecAgg+ step, as a state machine whose state is a plain dict.

In a deployment every stage reaches the client as a new message, often in a fresh process, so
the session lives in Flower's ``context.state`` between stages: :meth:`ClientSession.to_dict`
gives ints, strings, bytes and lists of ints, and :meth:`ClientSession.from_dict` checks and
restores them. The client refuses (``SecAggError``) anything malformed, foreign or out of order,
parameters below the node's own minimums, and any unmask request that would reveal both
secrets of one client; :meth:`ClientSession.handle` is atomic, so a refusal changes nothing.

The state keeps only what later stages need: after the masked input it holds no key of this
client and no self-mask seed, only the neighbours' shares; after the unmask, nothing secret.
Since keys and seeds are fresh each step and a step's unmask is answered once, no request can
get both the seed share and the key share of one neighbour. The transport must store the new
state before it sends the reply.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import numpy as np

from fedgs.secagg import keys, shamir
from fedgs.secagg import messages as m
from fedgs.secagg.errors import SecAggError
from fedgs.secagg.params import SecAggParams
from fedgs.secagg.prg import PAIR_MASK, SELF_MASK, derive_key, mask_vector

StateValue = bytes | int | str | list[int]
Message = Mapping[str, object]

NEW, KEYS_SENT, SHARES_SENT, MASKED_SENT, DONE = (
    "new",
    "keys_sent",
    "shares_sent",
    "masked_sent",
    "done",
)
_BASE = {"stage", "node_id", "min_cohort", "min_threshold"}
_PARAM = "param_"
_PARAM_KEYS = {_PARAM + name for name in SecAggParams.__dataclass_fields__}
# the fields of the state at each client stage
_STATE_FIELDS: dict[str, set[str]] = {
    NEW: _BASE,
    KEYS_SENT: _BASE | _PARAM_KEYS | {"c_private", "s_private"},
    SHARES_SENT: _BASE
    | _PARAM_KEYS
    | {"c_private", "s_private", "self_seed", "key_ids", "c_publics", "s_publics"},
    MASKED_SENT: _BASE | _PARAM_KEYS | {"held_ids", "b_shares", "s_shares"},
    DONE: _BASE,
}
# message stage -> the client stage that may answer it
_ANSWERS = {
    m.SETUP: NEW,
    m.SHARE_KEYS: KEYS_SENT,
    m.MASKED_INPUT: SHARES_SENT,
    m.UNMASK: MASKED_SENT,
}


class ClientSession:
    """A node's part in one step: :meth:`handle` each server message, keep :meth:`to_dict`.

    ``min_cohort`` and ``min_threshold`` are the node's own floors: a setup asking for fewer
    survivors (m_min) or a lower threshold than these is refused.
    """

    def __init__(self, node_id: int, *, min_cohort: int, min_threshold: int) -> None:
        self._state: dict[str, StateValue] = {
            "stage": NEW,
            "node_id": m.integer(node_id, "node_id", 0, m.MAX_NODE_ID),
            "min_cohort": m.integer(min_cohort, "min_cohort", 2, m.MAX_NODE_ID),
            "min_threshold": m.integer(min_threshold, "min_threshold", 2, m.MAX_NODE_ID),
        }

    @property
    def stage(self) -> str:
        """Where the session stands: new, keys_sent, shares_sent, masked_sent or done."""
        return str(self._state["stage"])

    def handle(self, message: Message, values: np.ndarray | None = None) -> dict[str, object]:
        """The reply to a server message; ``values`` (the quantized input) with masked_input only.

        Raises SecAggError, leaving the session unchanged, for anything the client refuses.
        """
        stage = message.get("stage") if isinstance(message, Mapping) else None
        if stage not in _ANSWERS:
            raise SecAggError(f"not a SecAgg+ stage message: stage {stage!r}")
        if self.stage != _ANSWERS[stage]:
            raise SecAggError(f"a {stage} message while {self.stage}: out of order or repeated")
        if (values is None) != (stage != m.MASKED_INPUT):
            raise SecAggError("the input values go with the masked_input message, and only there")
        handlers: dict[str, Callable[..., tuple[dict[str, object], dict[str, StateValue]]]] = {
            m.SETUP: self._setup,
            m.SHARE_KEYS: self._share_keys,
            m.MASKED_INPUT: self._masked_input,
            m.UNMASK: self._unmask,
        }
        args = (message,) if values is None else (message, values)
        reply, state = handlers[stage](*args)
        self._state = {key: self._state[key] for key in _BASE} | state
        return reply

    def to_dict(self) -> dict[str, StateValue]:
        """The session as plain values for Flower's ``context.state`` (secrets included)."""
        return {k: list(v) if isinstance(v, list) else v for k, v in self._state.items()}

    @classmethod
    def from_dict(cls, state: Mapping[str, object]) -> ClientSession:
        """The session :meth:`to_dict` gave; SecAggError if the state is malformed."""
        stage = state.get("stage") if isinstance(state, Mapping) else None
        if stage not in _STATE_FIELDS:
            raise SecAggError(f"not a SecAgg+ client state: stage {stage!r}")
        m.fields(state, None, _STATE_FIELDS[stage])
        session = cls(
            state["node_id"], min_cohort=state["min_cohort"], min_threshold=state["min_threshold"]
        )
        session._state = {k: list(v) if isinstance(v, list) else v for k, v in state.items()}
        session._check()
        return session

    # --- stages -----------------------------------------------------------------------------

    def _setup(self, message: Message) -> tuple[dict[str, object], dict[str, StateValue]]:
        names = set(SecAggParams.__dataclass_fields__)
        message = m.fields(message, m.SETUP, names | {"neighbours"})
        params = SecAggParams.from_dict({name: message[name] for name in names})
        node = self._node
        if node not in params.cohort:
            raise SecAggError(f"node {node} is not in the cohort")
        if params.threshold < self._state["min_threshold"]:
            raise SecAggError(f"threshold {params.threshold} is below this node's minimum")
        if params.min_survivors < self._state["min_cohort"]:
            raise SecAggError(f"min_survivors {params.min_survivors} is below this node's minimum")
        if tuple(m.id_list(message["neighbours"], "neighbours")) != params.neighbours(node):
            raise SecAggError("the neighbours given differ from the graph of the parameters")
        c_key, s_key = keys.new_private_key(), keys.new_private_key()
        reply = {"c_public": keys.public_to_bytes(c_key), "s_public": keys.public_to_bytes(s_key)}
        state = _params_state(params) | {
            "stage": KEYS_SENT,
            "c_private": keys.private_to_bytes(c_key),
            "s_private": keys.private_to_bytes(s_key),
        }
        return reply, state

    def _share_keys(self, message: Message) -> tuple[dict[str, object], dict[str, StateValue]]:
        params = self._params()
        message = m.fields(message, m.SHARE_KEYS, {"ids", "c_public", "s_public"})
        ids = m.id_list(message["ids"], "ids", set(params.neighbours(self._node)))
        if len(ids) < params.threshold:
            raise SecAggError(f"{len(ids)} neighbours advertised keys, fewer than the threshold")
        c_pubs = m.bytes_list(message["c_public"], "c_public", len(ids), keys.PUBLIC_LEN)
        s_pubs = m.bytes_list(message["s_public"], "s_public", len(ids), keys.PUBLIC_LEN)
        for public in c_pubs + s_pubs:
            keys.public_from_bytes(public)
        c_key = keys.private_from_bytes(self._state["c_private"])
        s_key = keys.private_from_bytes(self._state["s_private"])
        all_keys = c_pubs + s_pubs + [keys.public_to_bytes(c_key), keys.public_to_bytes(s_key)]
        if len(set(all_keys)) != len(all_keys):
            raise SecAggError("two public keys are equal")
        seed = os.urandom(keys.SEED_LEN)
        b_shares = shamir.split(int.from_bytes(seed, "big"), params.threshold, len(ids))
        s_private = int.from_bytes(self._state["s_private"], "big")
        s_shares = shamir.split(s_private, params.threshold, len(ids))
        ciphertexts = [
            keys.seal_shares(c_key, c_pub, params.step, self._node, peer, b_share, s_share)
            for peer, c_pub, b_share, s_share in zip(ids, c_pubs, b_shares, s_shares, strict=True)
        ]
        state = _params_state(params) | {
            "stage": SHARES_SENT,
            "c_private": self._state["c_private"],
            "s_private": self._state["s_private"],
            "self_seed": seed,
            "key_ids": ids,
            "c_publics": b"".join(c_pubs),
            "s_publics": b"".join(s_pubs),
        }
        return {"ids": ids, "ciphertexts": ciphertexts}, state

    def _masked_input(
        self, message: Message, values: np.ndarray
    ) -> tuple[dict[str, object], dict[str, StateValue]]:
        params = self._params()
        message = m.fields(message, m.MASKED_INPUT, {"ids", "ciphertexts"})
        key_ids = self._state["key_ids"]
        ids = m.id_list(message["ids"], "ids", set(key_ids))
        if len(ids) < params.threshold:
            raise SecAggError(f"{len(ids)} neighbours sent shares, fewer than the threshold")
        ciphertexts = m.bytes_list(message["ciphertexts"], "ciphertexts", len(ids))
        x = m.vector(values, "values", params.vector_length, params.modulus_bits)
        c_key = keys.private_from_bytes(self._state["c_private"])
        s_key = keys.private_from_bytes(self._state["s_private"])
        c_publics = dict(
            zip(key_ids, _chunks(self._state["c_publics"], keys.PUBLIC_LEN), strict=True)
        )
        s_publics = dict(
            zip(key_ids, _chunks(self._state["s_publics"], keys.PUBLIC_LEN), strict=True)
        )
        held = [
            keys.open_shares(c_key, c_publics[peer], ct, params.step, peer, self._node)
            for peer, ct in zip(ids, ciphertexts, strict=True)
        ]
        k, length = params.modulus_bits, params.vector_length
        masked = x + mask_vector(derive_key(self._state["self_seed"], SELF_MASK), length, k)
        for peer in ids:
            secret = keys.agree(s_key, s_publics[peer])
            pair = mask_vector(derive_key(secret, PAIR_MASK), length, k)
            masked = masked + pair if self._node < peer else masked - pair
        masked &= np.uint64((1 << k) - 1)
        state = _params_state(params) | {
            "stage": MASKED_SENT,
            "held_ids": ids,
            "b_shares": b"".join(b for b, _ in held),
            "s_shares": b"".join(s for _, s in held),
        }
        return {"masked": masked}, state

    def _unmask(self, message: Message) -> tuple[dict[str, object], dict[str, StateValue]]:
        params = self._params()
        message = m.fields(message, m.UNMASK, {"survivors", "dropped"})
        held_ids = self._state["held_ids"]
        survivors = m.id_list(message["survivors"], "survivors", set(params.cohort))
        dropped = m.id_list(message["dropped"], "dropped", set(held_ids))
        if self._node not in survivors:
            raise SecAggError("this node is not listed among the survivors")
        if len(survivors) < params.min_survivors:
            raise SecAggError(f"{len(survivors)} survivors, fewer than min_survivors")
        if set(survivors) & set(dropped):
            raise SecAggError("a node is listed both as survivor and as dropped")
        b_shares = dict(
            zip(held_ids, _chunks(self._state["b_shares"], keys.B_SHARE_LEN), strict=True)
        )
        s_shares = dict(
            zip(held_ids, _chunks(self._state["s_shares"], keys.S_SHARE_LEN), strict=True)
        )
        alive = set(survivors)
        b_ids = [peer for peer in held_ids if peer in alive]
        reply = {
            "b_ids": b_ids,
            "b_shares": [b_shares[peer] for peer in b_ids],
            "s_ids": dropped,
            "s_shares": [s_shares[peer] for peer in dropped],
        }
        return reply, {"stage": DONE}

    # --- state helpers ----------------------------------------------------------------------

    @property
    def _node(self) -> int:
        return int(self._state["node_id"])

    def _params(self) -> SecAggParams:
        return SecAggParams.from_dict(
            {key[len(_PARAM) :]: value for key, value in self._state.items() if key in _PARAM_KEYS}
        )

    def _check(self) -> None:
        """Every field of a restored state has its type and length."""
        state = self._state
        for key in _STATE_FIELDS[self.stage] - _BASE - _PARAM_KEYS:
            ids = key.endswith("_ids")
            if not isinstance(state[key], list if ids else bytes):
                raise SecAggError(f"state field {key} has the wrong type")
        if self.stage in (NEW, DONE):
            return
        params = self._params()
        if self._node not in params.cohort:
            raise SecAggError("the state's node is not in its cohort")
        neighbours = set(params.neighbours(self._node))
        if "c_private" in state:
            keys.private_from_bytes(state["c_private"])
            keys.private_from_bytes(state["s_private"])
        if "key_ids" in state:
            count = len(m.id_list(state["key_ids"], "key_ids", neighbours))
            if len(state["self_seed"]) != keys.SEED_LEN or not (
                len(state["c_publics"]) == len(state["s_publics"]) == count * keys.PUBLIC_LEN
            ):
                raise SecAggError("the state's seed or public keys have the wrong length")
        if "held_ids" in state:
            count = len(m.id_list(state["held_ids"], "held_ids", neighbours))
            if (
                len(state["b_shares"]) != count * keys.B_SHARE_LEN
                or len(state["s_shares"]) != count * keys.S_SHARE_LEN
            ):
                raise SecAggError("the state's shares have the wrong length")


def _params_state(params: SecAggParams) -> dict[str, StateValue]:
    return {_PARAM + key: value for key, value in params.to_dict().items()}


def _chunks(data: object, size: int) -> list[bytes]:
    assert isinstance(data, bytes)
    return [data[i : i + size] for i in range(0, len(data), size)]
