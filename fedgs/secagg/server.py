"""The server's side of one SecAgg+ step: it relays keys and shares and learns only the sum.

The driver loop of a transport is: ``messages()`` (node id -> message of the current stage),
send them, gather the replies by node id, ``receive(replies)``; four times, then ``result()``.
A node that does not reply, or whose reply is malformed (recorded in ``rejected``), is dropped
from then on and never crashes the session. Too few survivors at any stage (below m_min), or
fewer than t shares of a secret the sum needs, aborts the step with ``SecAggAbort`` and no sum.

Unmasking: the self masks of the survivors are rebuilt from t shares of each seed; for each
client dropped after sharing its keys, its mask key is rebuilt (and checked against the key it
advertised), and the pairwise masks its surviving neighbours added are taken off. The server
assumes the survivor and dropped lists it sends are the same for everyone (honest-but-curious):
there is no consistency round against a server that tells neighbours different lists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NoReturn

import numpy as np
from cryptography.hazmat.primitives.asymmetric import ec

from fedgs.secagg import keys, shamir
from fedgs.secagg import messages as m
from fedgs.secagg.errors import SecAggAbort, SecAggError
from fedgs.secagg.params import SecAggParams
from fedgs.secagg.prg import PAIR_MASK, SELF_MASK, derive_key, mask_vector

DONE, ABORTED = "done", "aborted"
_SEED_BOUND = 2 ** (8 * keys.SEED_LEN)  # a seed rebuilt to this or more comes from a bad share
_NEXT = {
    m.SETUP: m.SHARE_KEYS,
    m.SHARE_KEYS: m.MASKED_INPUT,
    m.MASKED_INPUT: m.UNMASK,
    m.UNMASK: DONE,
}


class ServerSession:
    """One step of SecAgg+ seen from the server."""

    def __init__(self, params: SecAggParams) -> None:
        self.params = params
        self.rejected: dict[int, str] = {}
        self._graph = params.graph()
        self._stage = m.SETUP
        self._alive = list(params.cohort)
        self._c_public: dict[int, bytes] = {}
        self._s_public: dict[int, bytes] = {}
        self._recipients: dict[int, list[int]] = {}
        self._ciphertexts: dict[tuple[int, int], bytes] = {}
        self._sharers: set[int] = set()
        self._total = np.zeros(params.vector_length, dtype=np.uint64)
        self._dropped: list[int] = []
        self._seed_shares: dict[int, list[bytes]] = {}
        self._key_shares: dict[int, list[bytes]] = {}
        self._result: np.ndarray | None = None

    @property
    def stage(self) -> str:
        """The stage whose messages go out next: setup .. unmask, then done (or aborted)."""
        return self._stage

    @property
    def alive(self) -> list[int]:
        """The nodes still in the step, sorted."""
        return list(self._alive)

    def messages(self) -> dict[int, dict[str, object]]:
        """Node id -> the message of the current stage, for every node still alive."""
        if self._stage not in _NEXT:
            raise SecAggError(f"no messages to send: the step is {self._stage}")
        build, _ = self._stage_methods()
        return {node: {"stage": self._stage, **build(node)} for node in self._alive}

    def receive(self, replies: Mapping[int, object]) -> None:
        """Take the current stage's replies (node id -> reply) and move to the next stage.

        Nodes without a valid reply are dropped; SecAggAbort if too few remain or, after the
        unmask replies, if a secret the sum needs has fewer than t shares.
        """
        if self._stage not in _NEXT:
            raise SecAggError(f"no replies expected: the step is {self._stage}")
        _, read = self._stage_methods()
        accepted = []
        for node in self._alive:
            if node not in replies:
                continue
            try:
                read(node, replies[node])
            except SecAggError as err:
                self.rejected[node] = f"{self._stage}: {err}"
            else:
                accepted.append(node)
        if self._stage == m.SETUP:
            accepted = self._without_shared_keys(accepted)
        if self._stage == m.UNMASK:
            self._result = self._unmasked_sum()
        else:
            self._require_survivors(accepted)
        self._stage = _NEXT[self._stage]

    def result(self) -> tuple[np.ndarray, list[int]]:
        """(the sum mod 2^k of the survivors' inputs as uint64, the survivors' ids)."""
        if self._result is None:
            raise SecAggError(f"no sum: the step is {self._stage}")
        return self._result.copy(), list(self._alive)

    def _stage_methods(
        self,
    ) -> tuple[Callable[[int], dict[str, object]], Callable[[int, object], None]]:
        """The current stage's message builder and reply reader."""
        return {
            m.SETUP: (self._setup_message, self._read_keys),
            m.SHARE_KEYS: (self._share_keys_message, self._read_shares),
            m.MASKED_INPUT: (self._masked_input_message, self._read_masked),
            m.UNMASK: (self._unmask_message, self._read_unmask),
        }[self._stage]

    # --- outgoing ---------------------------------------------------------------------------

    def _setup_message(self, node: int) -> dict[str, object]:
        return {**self.params.to_dict(), "neighbours": list(self._graph[node])}

    def _share_keys_message(self, node: int) -> dict[str, object]:
        ids = self._key_peers(node)
        return {
            "ids": ids,
            "c_public": [self._c_public[peer] for peer in ids],
            "s_public": [self._s_public[peer] for peer in ids],
        }

    def _masked_input_message(self, node: int) -> dict[str, object]:
        ids = self._share_peers(node)
        return {"ids": ids, "ciphertexts": [self._ciphertexts[peer, node] for peer in ids]}

    def _unmask_message(self, node: int) -> dict[str, object]:
        dropped = set(self._dropped)
        return {
            "survivors": list(self._alive),
            "dropped": [peer for peer in self._share_peers(node) if peer in dropped],
        }

    def _key_peers(self, node: int) -> list[int]:
        """The neighbours of ``node`` that advertised keys."""
        return [peer for peer in self._graph[node] if peer in self._c_public]

    def _share_peers(self, node: int) -> list[int]:
        """The neighbours of ``node`` that sent their shares: those it masks with."""
        return [peer for peer in self._graph[node] if peer in self._sharers]

    # --- incoming ---------------------------------------------------------------------------

    def _read_keys(self, node: int, reply: object) -> None:
        reply = m.fields(reply, None, {"c_public", "s_public"})
        for name in ("c_public", "s_public"):
            keys.public_from_bytes(reply[name])
        self._c_public[node] = reply["c_public"]
        self._s_public[node] = reply["s_public"]

    def _without_shared_keys(self, accepted: list[int]) -> list[int]:
        """``accepted`` less every node whose public key equals another's."""
        counts: dict[bytes, int] = {}
        for node in accepted:
            for key in {self._c_public[node], self._s_public[node]}:
                counts[key] = counts.get(key, 0) + 1
        clashing = [
            node
            for node in accepted
            if self._c_public[node] == self._s_public[node]
            or counts[self._c_public[node]] > 1
            or counts[self._s_public[node]] > 1
        ]
        for node in clashing:
            self.rejected[node] = f"{m.SETUP}: a public key equal to another"
            del self._c_public[node], self._s_public[node]
        return [node for node in accepted if node not in clashing]

    def _read_shares(self, node: int, reply: object) -> None:
        reply = m.fields(reply, None, {"ids", "ciphertexts"})
        ids = self._key_peers(node)
        if m.id_list(reply["ids"], "ids") != ids:
            raise SecAggError("the shares are not addressed to the neighbours that sent keys")
        for peer, ciphertext in zip(
            ids, m.bytes_list(reply["ciphertexts"], "ciphertexts", len(ids)), strict=True
        ):
            self._ciphertexts[node, peer] = ciphertext
        self._recipients[node] = ids
        self._sharers.add(node)

    def _read_masked(self, node: int, reply: object) -> None:
        reply = m.fields(reply, None, {"masked"})
        p = self.params
        masked = m.vector(reply["masked"], "masked", p.vector_length, p.modulus_bits)
        self._total = (self._total + masked) & self._modulus_mask

    def _read_unmask(self, node: int, reply: object) -> None:
        reply = m.fields(reply, None, {"b_ids", "b_shares", "s_ids", "s_shares"})
        message = self._unmask_message(node)
        survivors = set(self._alive)
        b_ids = [peer for peer in self._share_peers(node) if peer in survivors]
        if m.id_list(reply["b_ids"], "b_ids") != b_ids:
            raise SecAggError("the seed shares are not those of the surviving neighbours")
        s_ids = m.id_list(reply["s_ids"], "s_ids")
        if s_ids != message["dropped"]:
            raise SecAggError("the key shares are not those of the dropped neighbours")
        b_shares = m.bytes_list(reply["b_shares"], "b_shares", len(b_ids), keys.B_SHARE_LEN)
        s_shares = m.bytes_list(reply["s_shares"], "s_shares", len(s_ids), keys.S_SHARE_LEN)
        pairs = list(zip(b_ids, b_shares, strict=True)) + list(zip(s_ids, s_shares, strict=True))
        for owner, share in pairs:
            if int.from_bytes(share[:4], "little") != self._recipients[owner].index(node) + 1:
                raise SecAggError(f"the share of node {owner} has another holder's index")
        for owner, share in zip(b_ids, b_shares, strict=True):
            self._seed_shares.setdefault(owner, []).append(share)
        for owner, share in zip(s_ids, s_shares, strict=True):
            self._key_shares.setdefault(owner, []).append(share)

    # --- checks and the sum -----------------------------------------------------------------

    @property
    def _modulus_mask(self) -> np.uint64:
        return np.uint64((1 << self.params.modulus_bits) - 1)

    def _require_survivors(self, accepted: list[int]) -> None:
        """Keep ``accepted`` alive, or abort when fewer than m_min of them are left."""
        if self._stage == m.MASKED_INPUT:
            self._dropped = sorted(self._sharers - set(accepted))
        self._alive = accepted
        if len(accepted) < self.params.min_survivors:
            self._abort(f"{len(accepted)} clients left after {self._stage}, fewer than m_min")

    def _abort(self, reason: str) -> NoReturn:
        self._stage = ABORTED
        self._total[:] = 0
        raise SecAggAbort(f"SecAgg+ step {self.params.step} aborted, no sum released: {reason}")

    def _rebuild(self, shares: dict[int, list[bytes]], owner: int, what: str, below: int) -> int:
        """The secret of ``owner`` from t of its shares; abort with fewer, with bad ones, or if
        it rebuilds to ``below`` or more (a spoiled share gives a uniform element of Z_q)."""
        have = shares.get(owner, [])
        if len(have) < self.params.threshold:
            self._abort(f"{len(have)} shares of the {what} of node {owner}, fewer than t")
        try:
            secret = shamir.combine(have[: self.params.threshold])
        except ValueError:
            secret = below
        if secret >= below:
            self._abort(f"the shares of the {what} of node {owner} do not combine")
        return secret

    def _rebuild_mask_key(self, node: int) -> ec.EllipticCurvePrivateKey:
        """The dropped ``node``'s mask key, checked against the public key it advertised."""
        scalar = self._rebuild(self._key_shares, node, "mask key", shamir.Q)
        try:
            s_key = keys.private_from_bytes(scalar.to_bytes(keys.PRIVATE_LEN, "big"))
        except SecAggError:
            self._abort(f"the mask key of node {node} rebuilt to no key")
        if keys.public_to_bytes(s_key) != self._s_public[node]:
            self._abort(f"the mask key of node {node} rebuilt to another key")
        return s_key

    def _unmasked_sum(self) -> np.ndarray:
        p, total = self.params, self._total.copy()
        for node in self._alive:
            value = self._rebuild(self._seed_shares, node, "self-mask seed", _SEED_BOUND)
            seed = value.to_bytes(keys.SEED_LEN, "big")
            total -= mask_vector(derive_key(seed, SELF_MASK), p.vector_length, p.modulus_bits)
        survivors = set(self._alive)
        for node in self._dropped:
            s_key = self._rebuild_mask_key(node)
            for peer in self._share_peers(node):
                if peer in survivors:
                    shared = keys.agree(s_key, self._s_public[peer])
                    pair = mask_vector(
                        derive_key(shared, PAIR_MASK), p.vector_length, p.modulus_bits
                    )
                    total = total - pair if peer < node else total + pair
        return total & self._modulus_mask
