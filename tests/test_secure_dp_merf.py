"""DP-MERF under secure aggregation (issue 43): each cohort of writers answers through SecAgg+
behind the real ClientApp (one Flower ``Context`` per node, kept between messages as a SuperNode
keeps it). The server adds the decoded sum of the cohort's clipped embeddings with the
survivors' count, every writer is asked once and pays one replace-one secure step, a node's
policy refuses what it does not accept (noise, clip, dimension), cohorts are sized so that no
small last cohort falls below m_min, and one run goes through Flower's real simulation engine.
"""

from __future__ import annotations

import csv
import json
import math
import time
import uuid
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from flower_apps import simulate
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, Metadata, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.task_identity import TaskIdentity

from fedgs.client import gate
from fedgs.client.app import build_client_app
from fedgs.client.dp_merf_session import DpMerfSession
from fedgs.privacy.distributed_accounting import step_event
from fedgs.privacy.mean_embedding import clip, writer_embedding
from fedgs.privacy.policy import NodePolicy, PolicyViolation
from fedgs.privacy.random_features import FeatureSpec, RandomFeatures
from fedgs.privacy.release_ledger import ReleaseLedger
from fedgs.privacy.threat_models import REPLACE_ONE, SECURE_AGGREGATION
from fedgs.protocols import common, dp_merf, secagg
from fedgs.run_config import RunConfig
from fedgs.server.dp_merf_run import DpMerfRun
from fedgs.server.dp_merf_strategy import SecureDpMerfStrategy
from fedgs.training.dp_merf import MerfTrainer

RUN = {
    "strategy": "dp-merf",
    "num-clients": 8,
    "clients-per-step": 4,
    "merf-features": 32,
    "merf-noise-multiplier": 1e-3,  # a readable sum
    "merf-generator-steps": 2,
    "merf-batch-size": 8,
    "generator-width": 4,
    "secure-aggregation": True,
    "secagg-min-survivors": 3,
    "eval-every": 0,
}
NODES = tuple(2**63 + 7 + 5 * i for i in range(8))  # Flower node ids are 64-bit


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a ServerApp process sets before any Message is made."""
    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


def _run(tmp_path: Path, **changes: object) -> dict[str, object]:
    return RUN | {"run-dir": str(tmp_path / "run")} | changes


def _addressed(message: Message) -> Message:
    """The message as a SuperNode hands it to the ClientApp: with its full metadata."""
    metadata = Metadata(
        run_id=1,
        message_id=uuid.uuid4().hex,
        src_node_id=1,
        dst_node_id=message.metadata.dst_node_id,
        reply_to_message_id="",
        group_id="",
        created_at=time.time(),
        ttl=3600.0,
        message_type=message.metadata.message_type,
    )
    return Message(content=message.content, metadata=metadata)


class AppGrid:
    """Nodes behind the real ClientApp, one Context each; ``silent`` nodes never answer."""

    def __init__(self, run: dict[str, object], silent: frozenset[int] = frozenset()) -> None:
        self.app = build_client_app(run)
        self.silent = silent
        self.query_replies: list[Message] = []  # what each node sent in the clear
        self.contexts = {
            node: Context(
                run_id=1,
                node_id=node,
                node_config={"partition-id": i},
                state=RecordDict(),
                run_config=dict(run),
            )
            for i, node in enumerate(NODES)
        }

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def send_and_receive(self, messages: list[Message], timeout: float) -> list[Message]:
        replies = [
            (
                m.metadata.message_type,
                self.app(_addressed(m), self.contexts[m.metadata.dst_node_id]),
            )
            for m in messages
            if m.metadata.dst_node_id not in self.silent
        ]
        self.query_replies += [r for kind, r in replies if kind == dp_merf.QUERY]
        return [reply for _, reply in replies]


def _strategy(config: RunConfig) -> SecureDpMerfStrategy:
    merf = config.dp_merf()
    trainer = MerfTrainer(10, merf, merf.feature_spec(5))
    noise = config.secure_noise(config.secure_vector(trainer.spec.dimension * 10)).params
    secure = (config.secagg_settings(), noise)
    return SecureDpMerfStrategy(
        trainer, ReleaseLedger(), np.random.default_rng(0), config.clients_per_step, secure
    )


def _round(strategy: SecureDpMerfStrategy, grid: AppGrid, step: int) -> tuple[dict, list[int]]:
    """One secure round: its metrics and the nodes asked."""
    messages = list(strategy.configure_train(step, ArrayRecord(), ConfigRecord(), grid))  # type: ignore[arg-type]
    exchanged = strategy.exchange(grid, messages, 1.0)  # type: ignore[arg-type]
    _, metrics = strategy.aggregate_train(step, exchanged.replies)
    return dict(metrics), sorted(m.metadata.dst_node_id for m in messages)


def _clipped(config: RunConfig, partition: int, strategy: SecureDpMerfStrategy) -> np.ndarray:
    """What the writer of ``partition`` encodes: its mean embedding clipped to C."""
    session = DpMerfSession(config, partition)
    images, labels = session.dataset.client_train(partition)
    matrix = writer_embedding(RandomFeatures(strategy.trainer.spec), images, labels, 10)
    return clip(matrix, config.merf_clip_norm)


def test_the_cohort_sum_of_clipped_embeddings_is_released_and_each_writer_pays_once(
    tmp_path: Path,
) -> None:
    run = _run(tmp_path)
    config, grid = RunConfig.from_user_config(run), AppGrid(run)
    strategy = _strategy(config)
    event = step_event(strategy._steps.noise, REPLACE_ONE)
    metrics, asked = _round(strategy, grid, 1)
    assert metrics["answered"] == 4 and len(asked) == 4
    # in the clear a node sends its identity, the policy it applied and its SecAgg+ keys: its
    # release stays in its Flower context until it leaves masked
    for reply in grid.query_replies:
        assert not reply.has_error() and not reply.content.array_records
        assert set(reply.content.config_records) == {
            common.CLIENT,
            common.POLICY_USED,
            *secagg.stage_content({"stage": "x"}).config_records,
        }
    partitions = [NODES.index(node) for node in asked]
    expected = sum(_clipped(config, p, strategy) for p in partitions)
    # the noise on the sum is 2 C sigma = 0.002 per coordinate: the sum reads through it
    assert np.abs(strategy.trainer.total - expected).max() < 0.02
    assert np.abs(expected).max() > 0.1
    assert strategy.trainer.replies == 4
    # the second round asks the other four; a third asks no one (every writer asked once)
    strategy.final = True
    metrics, second = _round(strategy, grid, 2)
    assert metrics["answered"] == 4 and not set(second) & set(asked)
    assert metrics["generator_loss"] > 0
    assert _round(strategy, grid, 3)[1] == []
    ledger = strategy.ledger
    assert sorted(ledger.counts().values()) == [1] * 8
    assert {ledger.signature(client) for client in ledger.counts()} == {((event, 1),)}
    # each node's own ledger paid the same one secure step, and refuses a second release
    for partition in range(8):
        session = DpMerfSession(config, partition)
        assert session.ledger.signature(session.client_id) == ((event, 1),)


def test_a_silent_writer_stays_paid_and_the_survivors_sum_is_released(tmp_path: Path) -> None:
    run = _run(tmp_path)
    config = RunConfig.from_user_config(run)
    strategy = _strategy(config)
    asked_first = strategy.cohort(list(NODES))
    grid = AppGrid(run, silent=frozenset(asked_first[:1]))
    strategy.sampler = np.random.default_rng(0)  # the same draw again
    metrics, asked = _round(strategy, grid, 1)
    assert asked == asked_first
    assert metrics["answered"] == 3 and strategy.trainer.replies == 3
    assert strategy.ledger.unattributed_count() == 1  # the silent node: paid, for every writer


def test_cohorts_split_the_writers_evenly_above_m_min(tmp_path: Path) -> None:
    """2,824 writers at clients-per-step 100 (m_min 90): 29 cohorts of 97-98, none left out;
    where even cohorts would fall below m_min, full cohorts (the last writers never asked)."""
    full = {"clients-per-step": 100, "secagg-min-survivors": 0}  # 0: the default, 90
    config = RunConfig.from_user_config(_run(tmp_path, **full))
    strategy = _strategy(config)
    left, sizes = list(range(2824)), []
    while left:
        cohort = strategy.cohort(left)
        if len(cohort) < strategy._steps.settings.min_survivors:
            break
        sizes.append(len(cohort))
        left = sorted(set(left) - set(cohort))
    assert len(sizes) == 29 and sum(sizes) == 2824 and set(sizes) == {97, 98}
    five = {"clients-per-step": 5, "secagg-min-survivors": 0}
    small = _strategy(RunConfig.from_user_config(_run(tmp_path, **five)))
    m_min = small._steps.settings.min_survivors
    assert m_min == 5 and len(small.cohort(list(range(12)))) == 5  # 12 = 5 + 5 + 2 left out
    assert len(small.cohort(list(range(10)))) == 5 and len(small.cohort(list(range(2)))) == 2


def _secure_query(config: RunConfig, strategy: SecureDpMerfStrategy) -> Message:
    """A secure query as the strategy sends it to the first node (setup, noise, seed)."""
    nodes = strategy._steps.start(1, list(NODES[:4]))
    contents = {node: dp_merf.encode_query(strategy.trainer.spec, 1) for node in nodes}
    return strategy._steps.queries(contents, dp_merf.QUERY)[0]


def test_a_node_accepts_its_own_terms_and_refuses_others(tmp_path: Path) -> None:
    config = RunConfig.from_user_config(_run(tmp_path))
    query = _secure_query(config, _strategy(config))
    policy = NodePolicy.from_run_config(config)
    gate.admit(dp_merf.QUERY, query.content, config, policy)  # its own terms: admitted
    # a node that wants more noise on the sum than the run asks for refuses
    with pytest.raises(PolicyViolation, match="below this node's minimum"):
        gate.admit(dp_merf.QUERY, query.content, config, replace(policy, min_noise_multiplier=0.01))
    # a node that clips elsewhere refuses before anything is computed
    with pytest.raises(PolicyViolation, match="clips at 2"):
        gate.admit(dp_merf.QUERY, query.content, config, replace(policy, clip_norm=2.0))
    # noise for another feature map (D = 64) than the query's: refused by the dimension check
    other = _strategy(config.with_updates(merf_features=64))
    wrong = _secure_query(config, other).content
    wrong["features"] = query.content["features"]
    with pytest.raises(PolicyViolation, match="dimension"):
        gate.admit(dp_merf.QUERY, wrong, config, policy)


def test_the_node_floor_binds_dp_merfs_noise_in_the_clear_too(tmp_path: Path) -> None:
    """policy-min-noise-multiplier binds merf-noise-multiplier (DP-MERF is noised on the
    client), and the node's own clip norm is the one applied."""
    plain = _run(tmp_path, **{"secure-aggregation": False})
    del plain["secagg-min-survivors"]
    config = RunConfig.from_user_config(plain)
    policy = NodePolicy.deployment_default("dp-merf")
    content = dp_merf.encode_query(FeatureSpec(32, 20.0, 1), 1)
    with pytest.raises(PolicyViolation, match="merf-noise-multiplier 0.001 is below"):
        gate.admit(dp_merf.QUERY, content, config, policy)
    loud = config.with_updates(merf_noise_multiplier=policy.min_noise_multiplier)
    admitted = gate.admit(dp_merf.QUERY, content, loud, policy)
    assert admitted.config.merf_clip_norm == policy.clip_norm
    plain_only = NodePolicy(strategy="dp-merf", secagg_only=True)
    with pytest.raises(PolicyViolation, match="only through secure aggregation"):
        gate.admit(dp_merf.QUERY, content, loud, plain_only)


def test_the_report_labels_every_secure_figure(tmp_path: Path) -> None:
    config = RunConfig.from_user_config(_run(tmp_path))
    run = DpMerfRun(config)
    assert isinstance(run.strategy, SecureDpMerfStrategy)
    assert run.epsilon_column == "epsilon_secure_aggregation"
    run.ledger.record("embedded-000", step_event(run.calibration.params, REPLACE_ONE))
    run.privacy_report()
    report = json.loads((tmp_path / "run" / "privacy.json").read_text())
    assert report["headline"] == SECURE_AGGREGATION
    secure = report["secure_aggregation"]
    assert secure["accountant"] == "autodp-rdp" and secure["neighbouring"] == REPLACE_ONE
    assert secure["steps"] == 1 and secure["epsilon"] > 0
    assert report["untrusted_server"]["local_noise_only"] is True
    assert report["secagg"]["min_survivors"] == 3


def _server_app(config: RunConfig) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        DpMerfRun(config).run(grid)

    return app


@pytest.mark.slow
def test_a_secure_dp_merf_run_through_the_real_engine(tmp_path: Path) -> None:
    config = RunConfig.from_user_config(_run(tmp_path, **{"run-dir": str(tmp_path)}))
    simulate(_server_app(config), build_client_app(config.to_user_config()), nodes=8)
    with (tmp_path / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [(int(r["sampled"]), int(r["answered"])) for r in rows] == [(4, 4), (4, 4)]
    assert float(rows[-1]["generator_loss"]) > 0
    ledger = ReleaseLedger.from_json((tmp_path / "ledger.json").read_text())
    assert sorted(ledger.counts().values()) == [1] * 8
    report = json.loads((tmp_path / "privacy.json").read_text())
    assert report["headline"] == SECURE_AGGREGATION
    secure = report["secure_aggregation"]
    assert (secure["accountant"], secure["neighbouring"], secure["steps"]) == (
        "autodp-rdp",
        REPLACE_ONE,
        1,
    )
    assert math.isclose(secure["epsilon"], float(rows[-1]["epsilon_secure_aggregation"]))
    assert report["releases_received"] == 8
    assert (tmp_path / "release.npz").exists() and (tmp_path / "generator.pt").exists()
