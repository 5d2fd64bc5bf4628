"""Fed-Avg GAN under secure aggregation (issue 42): DP-FedAvg with distributed noise. A round's
cohort answers through SecAgg+ (in-process clients behind a stand-in grid), the server applies the
decoded mean of their clipped deltas, the ledger charges one add/remove-one secure step per query
sent, a node's policy refuses what it does not accept, the report labels its figures, and one run
goes through Flower's real simulation engine."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from flower_apps import simulate
from flwr.app import ArrayRecord, ConfigRecord, Context, Error, Message
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.task_identity import TaskIdentity

from fedgs.client import gate
from fedgs.client.app import build_client_app
from fedgs.privacy import PrivacyLedger
from fedgs.privacy.accountants import get_accountant
from fedgs.privacy.client_ledger import signature_epsilon
from fedgs.privacy.distributed_accounting import step_event
from fedgs.privacy.distributed_noise import encode
from fedgs.privacy.policy import NodePolicy, PolicyViolation
from fedgs.privacy.randomness import SecureRandom
from fedgs.privacy.threat_models import ADD_REMOVE, SECURE_AGGREGATION, UNTRUSTED_SERVER
from fedgs.protocols import common, fedavg_gan, secagg
from fedgs.run_config import RunConfig
from fedgs.secagg import ClientSession
from fedgs.server.fedavg_gan_run import FedAvgGANRun
from fedgs.server.fedavg_gan_strategy import SecureFedAvgGANStrategy
from fedgs.training.fedavg_gan import FedAvgGANTrainer
from fedgs.training.run_dir import summarize

NODES = [101, 102, 103, 104, 105]
QUERY = "query"
SMALL = {
    "strategy": "fedavg-gan",
    "fedavg-models": "gswgan",
    "num-clients": 6,
    "batch-size": 8,
    "generator-width": 4,
    "critic-width": 4,
    "fedavg-critic-steps": 1,
    "fedavg-generator-steps": 1,
    "fedavg-clients-per-round": 5,
    "fedavg-noise-multiplier": 1e-3,  # a readable sum
    "secure-aggregation": True,
    "secagg-min-survivors": 3,
    "eval-every": 0,
    "min-nodes": 6,
}


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a ServerApp process sets before any Message is made."""
    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


def _config(**settings: object) -> RunConfig:
    return RunConfig.from_user_config(SMALL, settings)


class SecureGrid:
    """In-process SecAgg+ clients behind a grid; each sends a random delta clipped to S (kept,
    to check the decoded mean). ``silent``: node -> the stage it stops answering at."""

    def __init__(self, clip: float, silent: dict[int, str] | None = None) -> None:
        self.clip, self.silent = clip, silent or {}
        self.sessions: dict[int, ClientSession] = {}
        self.inputs: dict[int, np.ndarray] = {}
        self.vectors: dict[int, np.ndarray] = {}
        self.queries: dict[int, Message] = {}

    def get_node_ids(self) -> list[int]:
        return list(NODES)

    def send_and_receive(self, messages: list[Message], timeout: float) -> list[Message]:
        return [r for m in messages if (r := self._answer(m)) is not None]

    def _answer(self, message: Message) -> Message | None:
        node = message.metadata.dst_node_id
        is_query = message.metadata.message_type == fedavg_gan.QUERY
        stage = QUERY if is_query else secagg.read_stage(message.content)["stage"]
        if self.silent.get(node) == stage:
            return None
        if stage == QUERY:
            self.queries[node] = message
            setup, noise, seed = secagg.read_setup(message.content)
            session = ClientSession(node, min_cohort=2, min_threshold=2)
            keys = session.handle(setup)
            vector = np.random.default_rng(node).normal(size=noise.dimension)
            vector *= self.clip / np.linalg.norm(vector)  # on the bound S
            self.vectors[node] = vector
            self.inputs[node] = encode(vector, noise, SecureRandom(), seed)
            self.sessions[node] = session
            used = {"strategy": "fedavg-gan", "noise-multiplier": noise.sigma / self.clip}
            reply = common.reply_content({}, f"client-{node}", 0, used | {"batch-size": 8})
            for name, record in secagg.stage_content(keys).items():
                reply[name] = record
            return Message(reply, reply_to=message)
        values = self.inputs[node] if stage == "masked_input" else None
        answer = self.sessions[node].handle(secagg.read_stage(message.content), values)
        return Message(secagg.stage_content(answer), reply_to=message)


def _strategy(config: RunConfig) -> SecureFedAvgGANStrategy:
    trainer = FedAvgGANTrainer(10, config.fedavg_gan(), seed=0)
    dimension = sum(p.numel() for p in trainer.critic.parameters())
    noise = config.secure_noise(config.secure_vector(dimension)).params
    secure = (config.secagg_settings(), noise)
    return SecureFedAvgGANStrategy(
        trainer, PrivacyLedger(), np.random.default_rng(0), secure, node_wait=1
    )


def _round(strategy: SecureFedAvgGANStrategy, grid: SecureGrid) -> tuple[dict, list[dict]]:
    """One secure round; its metrics and the mean deltas D was given."""
    given: list[dict] = []
    apply = strategy.trainer.apply
    strategy.trainer.apply = lambda mean: given.append(dict(mean)) or apply(mean)  # type: ignore[method-assign]
    messages = list(strategy.configure_train(1, ArrayRecord(), ConfigRecord(), grid))  # type: ignore[arg-type]
    exchanged = strategy.exchange(grid, messages, 1.0)  # type: ignore[arg-type]
    _, metrics = strategy.aggregate_train(1, exchanged.replies)
    return dict(metrics), given


def _flat(mean: dict, strategy: SecureFedAvgGANStrategy) -> np.ndarray:
    return np.concatenate([mean[name].ravel() for name in strategy._shapes])


def test_the_noise_is_dp_fedavgs_central_noise_on_the_critics_parameters() -> None:
    config = _config(**{"fedavg-noise-multiplier": 0.7})
    strategy = _strategy(config)
    noise = strategy._steps.noise
    s = config.fedavg_clip_norm
    assert noise.sigma / s >= 0.7 and noise.sigma == pytest.approx(0.7 * s)  # std z*S on the sum
    assert noise.clip == pytest.approx(s)
    assert noise.dimension == sum(p.numel() for p in strategy.trainer.critic.parameters())
    assert (noise.m_min, noise.colluders) == (3, 2)  # t = 5 // 2 + 1 = 3 for 4 neighbours
    with pytest.raises(ValueError, match="fedavg-clients-per-round >= 3"):
        _config(**{"fedavg-clients-per-round": 2, "secagg-min-survivors": 0})
    with pytest.raises(ValueError, match="needs fedavg-noise-multiplier > 0"):
        _config(**{"fedavg-noise-multiplier": 0.0})


def test_a_secure_round_applies_the_mean_of_the_clipped_deltas_and_charges_each_client() -> None:
    config = _config()
    strategy, grid = _strategy(config), SecureGrid(config.fedavg_clip_norm)
    metrics, given = _round(strategy, grid)
    assert (metrics["sampled"], metrics["answered"], metrics["dropped"]) == (5, 5, 0)
    expected = np.mean([grid.vectors[n] for n in NODES], axis=0)
    # five shares, each of the variance the m_min - (t - 1) = 1 honest survivor must carry: std
    # sqrt(5) z S on the sum, 4.5e-5 on the mean (atol ~ 8 std); coordinates ~ S / sqrt(d)
    assert np.allclose(_flat(given[0], strategy), expected, atol=3.5e-4)
    assert np.corrcoef(_flat(given[0], strategy), expected)[0, 1] > 0.95
    # every query carries D's weights and the secure records; no one sees another's delta
    assert all(fedavg_gan.CRITIC in m.content.array_records for m in grid.queries.values())
    event = step_event(strategy._steps.noise, ADD_REMOVE)
    assert all(strategy.ledger.signature(f"client-{n}") == ((event, 1),) for n in NODES)


def test_a_silent_client_stays_paid_and_the_others_mean_is_applied() -> None:
    config = _config()
    strategy = _strategy(config)
    grid = SecureGrid(config.fedavg_clip_norm, silent={103: QUERY})
    metrics, given = _round(strategy, grid)
    survivors = [n for n in NODES if n != 103]
    assert (metrics["answered"], metrics["no_reply"]) == (4, 1)
    expected = np.mean([grid.vectors[n] for n in survivors], axis=0)
    assert np.allclose(_flat(given[0], strategy), expected, atol=3.5e-4)
    assert strategy.ledger.unattributed_count() == 1  # node 103's query: paid, its client unknown


def test_an_abort_below_m_min_applies_nothing() -> None:
    strategy = _strategy(_config(**{"secagg-min-survivors": 4}))
    grid = SecureGrid(0.1, silent={101: "share_keys", 102: "masked_input"})
    before = [p.detach().clone() for p in strategy.trainer.critic.parameters()]
    metrics, given = _round(strategy, grid)
    assert given == [] and metrics["answered"] == 0
    after = list(strategy.trainer.critic.parameters())
    assert all(bool((a == b).all()) for a, b in zip(before, after, strict=True))
    assert any("aborted, nothing released" in r for r in strategy.last_outcome.drop_reasons)


# --- the node's policy ----------------------------------------------------------------------


def _secure_query(config: RunConfig) -> Message:
    """A real secure query of the strategy (the grid's first)."""
    strategy, grid = _strategy(config), SecureGrid(config.fedavg_clip_norm)
    messages = list(strategy.configure_train(1, ArrayRecord(), ConfigRecord(), grid))  # type: ignore[arg-type]
    return messages[0]


def test_a_node_accepts_its_own_terms_and_refuses_others() -> None:
    config = _config()
    content = _secure_query(config).content
    policy = NodePolicy.from_run_config(config)
    assert policy.min_noise_multiplier == config.fedavg_noise_multiplier
    gate.check_secure(fedavg_gan.QUERY, content, policy.applied_to(config), policy)
    refusals = [
        (NodePolicy.from_run_config(config.with_updates(fedavg_clip_norm=0.2)), "clip 0.1"),
        (NodePolicy.from_run_config(config.with_updates(fedavg_noise_multiplier=0.01)), "minimum"),
        (NodePolicy.from_run_config(config.with_updates(secagg_min_survivors=4)), "cohort of 4"),
    ]
    for strict, reason in refusals:
        with pytest.raises(PolicyViolation, match=reason):
            gate.check_secure(fedavg_gan.QUERY, content, strict.applied_to(config), strict)
    # a run that asks less noise on the sum than its own fedavg-noise-multiplier
    louder = config.with_updates(fedavg_noise_multiplier=0.01)
    with pytest.raises(PolicyViolation, match="below the run's fedavg-noise-multiplier 0.01"):
        gate.check_secure(fedavg_gan.QUERY, content, louder, NodePolicy.from_run_config(config))
    # a node that answers only through secure aggregation refuses the plain query
    only = NodePolicy(strategy="fedavg-gan", clip_norm=0.1, secagg_only=True)
    plain = common.query_content({}, 1)
    with pytest.raises(PolicyViolation, match="only through secure aggregation"):
        gate.check_secure(fedavg_gan.QUERY, plain, config, only)
    assert secagg.SECAGG in gate.allowed_message_types(policy)


# --- the report -----------------------------------------------------------------------------


def test_the_report_labels_every_secure_figure(tmp_path: Path) -> None:
    run = FedAvgGANRun(_config(**{"run-dir": str(tmp_path)}))
    assert run.epsilon_column == "epsilon_secure_aggregation"
    assert run.epsilon_label() == "eps(secure-aggregation,autodp-rdp,delta=1e-05,add-remove)"
    metrics, _ = _round(run.strategy, SecureGrid(run.fedavg.clip_norm))
    assert metrics["answered"] == 5
    row = run.privacy_row() | run.privacy_report()
    report = json.loads((tmp_path / "privacy.json").read_text())
    secure, ddg, local = (
        report["secure_aggregation"],
        report["secure_aggregation_ddg_rdp"],
        report["untrusted_server"],
    )
    assert report["headline"] == SECURE_AGGREGATION
    assert (secure["threat_model"], secure["accountant"], secure["steps"]) == (
        SECURE_AGGREGATION,
        "autodp-rdp",
        1,
    )
    assert (ddg["threat_model"], ddg["accountant"]) == (SECURE_AGGREGATION, "ddg-rdp")
    assert (local["threat_model"], local["local_noise_only"]) == (UNTRUSTED_SERVER, True)
    for block in (secure, ddg, local):
        assert (block["delta"], block["neighbouring"]) == (1e-5, ADD_REMOVE)
    assert row["epsilon_secure_aggregation"] == secure["epsilon"] > 0
    assert 0 < ddg["epsilon"] <= secure["epsilon"] * 1.01
    assert local["epsilon"] >= secure["epsilon"]
    assert "no amplification" in report["cohort_sampling"]
    # the summary a run prints at its end: secure rounds, with the secure figures' models
    (tmp_path / "metrics.csv").write_text("step,sampled,answered\n1,5,5\n")
    lines = summarize(tmp_path).splitlines()
    assert "private rounds through secure aggregation" in lines[0]
    assert f"{secure['epsilon']:.2f}" in lines[1] and "add-remove" in lines[1]
    assert "trusted server" not in "\n".join(lines)


def test_the_target_stop_counts_a_secure_round_for_any_node(tmp_path: Path) -> None:
    """Any node may be in the next cohort (the draw is secret): one more secure step for the
    most-charged client decides the stop."""
    grid = SecureGrid(0.1)
    noise = {"fedavg-noise-multiplier": 1.0}
    run = FedAvgGANRun(_config(**noise, **{"run-dir": str(tmp_path), "target-epsilon": 100}))
    _round(run.strategy, grid)
    spent = run.privacy_row()["epsilon_secure_aggregation"]
    assert not run.would_pass_target(grid)  # type: ignore[arg-type]
    tight = FedAvgGANRun(
        _config(**noise, **{"run-dir": str(tmp_path / "t"), "target-epsilon": spent})
    )
    _round(tight.strategy, grid)
    assert tight.privacy_row()["epsilon_secure_aggregation"] == spent
    assert tight.would_pass_target(grid)  # type: ignore[arg-type]  # a second step passes it


# --- through the real engine ----------------------------------------------------------------


def _server_app(config: RunConfig, kept: dict) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        run = FedAvgGANRun(config)
        kept["before"] = [p.detach().clone() for p in run.trainer.critic.parameters()]
        run.run(grid)
        kept["after"] = [p.detach().clone() for p in run.trainer.critic.parameters()]

    return app


@pytest.mark.slow
def test_a_secure_fedavg_run_through_the_real_engine(tmp_path: Path) -> None:
    config = _config(**{"run-dir": str(tmp_path), "steps": 2, "fedavg-noise-multiplier": 1.0})
    kept: dict = {}
    simulate(_server_app(config, kept), build_client_app(config.to_user_config()), nodes=6)
    with (tmp_path / "metrics.csv").open() as rows:
        rounds = list(csv.DictReader(rows))
    assert [int(r["step"]) for r in rounds] == [1, 2]
    for row in rounds:
        assert (row["sampled"], row["answered"], row["dropped"]) == ("5", "5", "0")
    changed = zip(kept["before"], kept["after"], strict=True)
    assert any(not bool((a == b).all()) for a, b in changed)
    report = json.loads((tmp_path / "privacy.json").read_text())
    assert report["headline"] == SECURE_AGGREGATION
    secure = report["secure_aggregation"]
    assert (secure["threat_model"], secure["accountant"], secure["neighbouring"]) == (
        SECURE_AGGREGATION,
        "autodp-rdp",
        ADD_REMOVE,
    )
    assert secure["epsilon"] == float(rounds[-1]["epsilon_secure_aggregation"]) > 0
    assert report["secure_aggregation_ddg_rdp"]["accountant"] == "ddg-rdp"
    assert report["untrusted_server"]["local_noise_only"] is True
    assert report["queries"]["total"] == 10  # five paid per round, all bound to their clients


@pytest.mark.slow
def test_a_target_stop_runs_from_the_first_round_once_the_nodes_are_identified(
    tmp_path: Path,
) -> None:
    """Before its first round the run asks every node which client it holds: a node it had not
    heard from could hold anyone, so the stop would count all five of a cohort's queries for one
    client and refuse the first round. Identified, the target fits two rounds and stops the third
    (five of six nodes a round: some client is asked twice)."""
    probe = FedAvgGANRun(_config(**{"run-dir": str(tmp_path / "probe"), "steps": 3}))
    event = step_event(probe.calibration.params, ADD_REMOVE)
    accountant = get_accountant(probe.config.accountant)

    def epsilon(queries: int) -> float:
        return signature_epsilon(((event, queries),), probe.config.delta, accountant)

    target = epsilon(2) * (1 + 1e-9)
    assert epsilon(3) > target and epsilon(5) > target  # unidentified, round 1 would pass it
    settings = {"run-dir": str(tmp_path / "run"), "steps": 3, "target-epsilon": target}
    config = _config(**settings)
    simulate(_server_app(config, {}), build_client_app(config.to_user_config()), nodes=6)
    with (tmp_path / "run" / "metrics.csv").open() as rows:
        assert [int(r["step"]) for r in csv.DictReader(rows)] == [1, 2]
    report = json.loads((tmp_path / "run" / "privacy.json").read_text())
    assert report["secure_aggregation"]["epsilon"] <= target


def test_error_replies_are_dropped() -> None:
    """A node answering its query with an error drops out; the rest's sum is applied."""
    config = _config()
    strategy, grid = _strategy(config), SecureGrid(config.fedavg_clip_norm)
    answer = grid._answer

    def failing(message: Message) -> Message | None:
        if message.metadata.dst_node_id == 104 and message.metadata.message_type != secagg.SECAGG:
            return Message(Error(code=4403, reason="refused"), reply_to=message)
        return answer(message)

    grid._answer = failing  # type: ignore[method-assign]
    metrics, given = _round(strategy, grid)
    assert metrics["answered"] == 4 and len(given) == 1
