"""One step's secure aggregation over a Flower grid: the query round trip, then SecAgg+'s three.

The strategy's secure queries carry the SecAgg+ setup (``fedgs.protocols.secagg``); each reply
that passes the strategy's checks (its node's client, the policy used) gives its node's
advertised keys. Then share keys, masked input and unmask travel as ``train.secagg`` messages to
the nodes still alive, each round trip bounded by the reply timeout: exactly four per step, so a
step never waits longer than four timeouts. A node that does not answer a stage, answers with
an error, or answers something malformed drops out with a logged reason, and SecAgg+ takes its
masks off. Too few survivors (below m_min) abort the step: no sum is released, and every query
stays paid (it was charged when sent).

``SecureSteps`` is what a strategy's secure mode shares (GS-WGAN's and Fed-Avg GAN's): the
cohort's SecAgg+ setup and noise records on its queries, this exchange, the released sum
decoded; ``secure_summary`` and ``secagg_details`` are its run's privacy report.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from dp_accounting import dp_event
from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

from fedgs.comm import message_bytes
from fedgs.privacy.accountants import get_accountant
from fedgs.privacy.client_ledger import ClientLedger
from fedgs.privacy.distributed_accounting import distributed_epsilon, local_share_event
from fedgs.privacy.distributed_noise import Calibration, DistributedNoiseParams, decode
from fedgs.privacy.threat_models import (
    NEIGHBOURING,
    SECURE_AGGREGATION,
    THREAT_MODELS,
    UNTRUSTED_SERVER,
)
from fedgs.protocols import common, secagg
from fedgs.run_config import RunConfig, SecAggSettings
from fedgs.secagg import SecAggAbort, SecAggError, SecAggParams, ServerSession
from fedgs.secagg.server import DONE
from fedgs.server.replies import Exchange, StepOutcome, expected_replies

logger = logging.getLogger("fedgs.server")


@dataclass
class SecureSum:
    """What a secure step released: the sum mod 2^k of the survivors' inputs (None when the
    step aborted) and the survivors."""

    total: np.ndarray | None
    survivors: list[int]
    aborted: str = ""


class SecureExchange:
    """Drive one ``ServerSession`` through a step's four round trips.

    ``check``: the strategy's checks of a query reply (its client, the policy it used), raising
    ProtocolError, ValueError or TypeError to drop it; ``outcome`` gathers every drop's reason.
    """

    def __init__(
        self,
        session: ServerSession,
        check: Callable[[Message], None],
        outcome: StepOutcome,
        step: int,
    ) -> None:
        self.session = session
        self.check = check
        self.outcome = outcome
        self.step = step
        self.silent: set[int] = set()  # nodes that did not answer a round trip
        self._logged: set[int] = set()  # nodes whose SecAgg+ rejection is in ``outcome``

    def run(self, grid: Grid, queries: list[Message], timeout: float) -> tuple[Exchange, SecureSum]:
        """The query replies and the bytes of all round trips; the sum, or why there is none."""
        down = sum(message_bytes(m) for m in queries)
        replies = list(grid.send_and_receive(queries, timeout=timeout))
        up = sum(message_bytes(r) for r in replies)
        try:
            self._receive(
                self._read(replies, {m.metadata.dst_node_id for m in queries}, query=True)
            )
            while self.session.stage != DONE:
                messages = [
                    Message(
                        secagg.stage_content(message), dst_node_id=node, message_type=secagg.SECAGG
                    )
                    for node, message in self.session.messages().items()
                ]
                down += sum(message_bytes(m) for m in messages)
                answers = list(grid.send_and_receive(messages, timeout=timeout))
                up += sum(message_bytes(r) for r in answers)
                self._receive(self._read(answers, {m.metadata.dst_node_id for m in messages}))
        except SecAggAbort as abort:
            for node in self.session.alive:
                self.outcome.drop(node, f"secure aggregation aborted, nothing released: {abort}")
            self.outcome.close(self.silent, self.step)
            return Exchange(replies, down, up), SecureSum(None, [], str(abort))
        total, survivors = self.session.result()
        # a survivor silent at the unmask still has its input in the sum: no drop
        for node in sorted(self.silent & set(survivors)):
            logger.warning(
                "step %d: node %d sent no unmask reply (its input is in the sum)", self.step, node
            )
        self.outcome.close(self.silent - set(survivors), self.step)
        return Exchange(replies, down, up), SecureSum(total, survivors)

    def _read(
        self, replies: Iterable[Message], asked: set[int], query: bool = False
    ) -> dict[int, object]:
        """Each reply's stage message (a query reply's: its advertised keys, once it passed the
        strategy's checks); an error reply or a malformed one drops its node."""
        read: dict[int, object] = {}
        pending = set(asked)
        for reply in expected_replies(replies, pending, self.outcome):
            node = reply.metadata.src_node_id
            try:
                if query:
                    self.check(reply)
                read[node] = secagg.read_stage(reply.content)
            except (common.ProtocolError, ValueError, TypeError) as error:
                reason = error if query else f"secure aggregation {self.session.stage}: {error}"
                self.outcome.drop(node, reason)
        self.silent |= pending
        return read

    def _receive(self, replies: dict[int, object]) -> None:
        """Hand the stage's replies to SecAgg+ and log the ones it rejected."""
        try:
            self.session.receive(replies)
        finally:
            for node, reason in self.session.rejected.items():
                if node not in self._logged:
                    self._logged.add(node)
                    self.outcome.drop(node, f"secure aggregation rejected {reason}")


class SecureSteps:
    """A strategy's secure steps: SecAgg+ over the step's cohort, each query made secure with
    the setup, the noise and the step's rotation seed; the four round trips; the sum decoded.

    Per step: :meth:`start` (the cohort, or none and ``skipped`` says why), the strategy charges
    the cohort and builds each node's content, :meth:`queries`, :meth:`exchange`, then
    :meth:`released` (the outcome and the decoded sum over the survivors, or None)."""

    def __init__(self, settings: SecAggSettings, noise: DistributedNoiseParams) -> None:
        self.settings, self.noise = settings, noise
        self.skipped = ""  # why the step asked no node
        self._session: ServerSession | None = None
        self._rotation_seed = b""
        self._sum: SecureSum | None = None
        self._outcome: StepOutcome | None = None

    def start(self, step: int, nodes: list[int]) -> tuple[int, ...]:
        """The step's cohort (sorted), or () when SecAgg+ cannot run with these nodes (fewer
        online than m_min, or a threshold the smaller graph cannot have): ``skipped`` says why,
        logged."""
        settings = self.settings
        self.skipped, self._session, self._sum, self._outcome = "", None, None, None
        if len(nodes) < settings.min_survivors:
            self.skipped = (
                f"{len(nodes)} node(s) online, fewer than secagg-min-survivors "
                f"{settings.min_survivors}: no secure sum could be released"
            )
            logger.warning("step %d: asked no node: %s", step, self.skipped)
            return ()
        try:
            params = SecAggParams(
                step=step,
                cohort=tuple(sorted(nodes)),
                modulus_bits=settings.bits,
                threshold=settings.threshold,
                min_survivors=settings.min_survivors,
                vector_length=self.noise.padded_dimension,
                degree=settings.degree,
            )
        except SecAggError as error:
            self.skipped = (
                f"no secure step with the {len(nodes)} node(s) online (secagg-min-survivors "
                f"{settings.min_survivors}, secagg-threshold {settings.threshold}): {error}"
            )
            logger.warning("step %d: asked no node: %s", step, self.skipped)
            return ()
        self._session = ServerSession(params)
        self._rotation_seed = os.urandom(32)  # public, fresh each step: the cohort's rotation
        return params.cohort

    def queries(self, contents: dict[int, RecordDict], message_type: str) -> list[Message]:
        """Each cohort node's query: its content with its SecAgg+ setup and the noise records."""
        if self._session is None:
            return []
        messages = []
        for node, setup in self._session.messages().items():
            content = contents[node]
            setup = {k: v for k, v in setup.items() if k != "stage"}
            records = secagg.setup_records(setup, self.noise, self._rotation_seed)
            for name, record in records.items():
                content[name] = record
            messages.append(Message(content, dst_node_id=node, message_type=message_type))
        return messages

    def exchange(
        self, grid: Grid, messages: list[Message], timeout: float, check: Callable[[Message], None]
    ) -> Exchange:
        """The four round trips of ``SecureExchange`` (none when the step asked no one)."""
        if self._session is None:
            return Exchange([], 0, 0)
        self._outcome = StepOutcome(sampled=len(self._session.params.cohort))
        step = self._session.params.step
        run = SecureExchange(self._session, check, self._outcome, step)
        exchanged, self._sum = run.run(grid, messages, timeout)
        self._session = None
        return exchanged

    def released(self) -> tuple[StepOutcome, SecureSum | None, np.ndarray | None]:
        """The step's outcome (why none was asked among its drops), what was released (None:
        no exchange) and the decoded sum of the survivors' float vectors (None: nothing
        released)."""
        outcome = self._outcome or StepOutcome(sampled=0)
        released, self._sum, self._outcome = self._sum, None, None
        if self.skipped:
            outcome.drop_reasons.append(f"asked none: {self.skipped}")
        total = None
        if released is not None and released.total is not None:
            total = decode(released.total, self.noise, self._rotation_seed)
        return outcome, released, total


SECURE_COLUMN = "epsilon_secure_aggregation"  # a secure run's headline column
SECURE_COLUMNS = (SECURE_COLUMN, "epsilon_secure_aggregation_ddg_rdp", "epsilon_local_noise_only")
LOCAL_NOISE_ONLY = (
    "if the secure-aggregation assumption fails (the server sees a client's encoded vector): "
    "only the client's own noise share protects it, a discrete Gaussian of client_sigma over "
    "its rounded vector's sensitivity, composed over the steps it took part in"
)


def secure_summary(
    ledger: ClientLedger, noise: DistributedNoiseParams, relation: str, config: RunConfig
) -> dict[str, Any]:
    """A secure run's three figures, each with its threat model, accountant, delta and
    neighbouring relation: the ledger's RDP accountant over each client's secure-step events
    (max over clients, the headline), the distributed discrete Gaussian's own accountant
    (``ddg-rdp``) at the most-charged client's step count, and what a client's own noise share
    guarantees if the secure-aggregation assumption fails; and the ledger's queries block."""
    acct = get_accountant(config.accountant)
    epsilon, worst = ledger.epsilon_max(config.delta, acct)
    # the most-charged client's steps, every unattributed one counted for it (as the maximum)
    steps = max(ledger.counts().values(), default=0) + ledger.unattributed_count()
    ddg = distributed_epsilon(noise, steps, config.delta, relation)
    local = local_share_event(noise, relation)
    local_epsilon = (
        acct.epsilon(dp_event.SelfComposedDpEvent(local, steps), config.delta) if steps else 0.0
    )
    base = {"delta": config.delta, "neighbouring": relation}
    return {
        "delta": config.delta,
        "accountant": acct.name,
        "neighbouring": relation,
        "neighbouring_relation": NEIGHBOURING[relation],
        "headline": SECURE_AGGREGATION,
        "secure_aggregation": base
        | {
            "threat_model": SECURE_AGGREGATION,
            "assumption": THREAT_MODELS[SECURE_AGGREGATION],
            "accountant": acct.name,
            "epsilon": epsilon,
            "client_id": worst,
            "steps": steps,
            "note": "each secure step charged as distributed_accounting.step_event",
        },
        "secure_aggregation_ddg_rdp": base | ddg.to_json() | {"client_id": worst},
        "untrusted_server": base
        | {
            "threat_model": UNTRUSTED_SERVER,
            "assumption": LOCAL_NOISE_ONLY,
            "accountant": acct.name,
            "epsilon": local_epsilon,
            "client_id": worst,
            "steps": steps,
            "local_noise_only": True,
            "client_noise_multiplier": local.noise_multiplier,
        },
        "queries": ledger.queries_block(),
    }


def secure_columns(summary: dict[str, Any]) -> dict[str, float]:
    """The metrics columns of a ``secure_summary`` beside the headline (logged at checkpoints)."""
    return {
        "epsilon_secure_aggregation_ddg_rdp": summary["secure_aggregation_ddg_rdp"]["epsilon"],
        "epsilon_local_noise_only": summary["untrusted_server"]["epsilon"],
    }


def secagg_details(config: RunConfig, calibration: Calibration) -> dict[str, Any]:
    """The SecAgg+ settings and the calibrated noise of a secure run, for privacy.json."""
    settings = config.secagg_settings()
    return settings.report() | {
        "noise": asdict(calibration.params) | {"client_sigma": calibration.params.client_sigma},
        "max_clients": calibration.max_clients,
        "wrap_probability": calibration.wrap_probability,
    }
