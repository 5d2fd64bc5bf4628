"""GS-WGAN with secure aggregation, the server side (issue 42): the run config's checks, the
four round trips of a secure step against in-process SecAgg+ clients (drops at every stage, an
abort below m_min), what the ledger charges, and the privacy report's labelled figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, Error, Message
from flwr.supercore.task_identity import TaskIdentity
from privacy_boundary_server_apps import SMALL

from fedgs.privacy import PrivacyLedger
from fedgs.privacy.distributed_accounting import step_event
from fedgs.privacy.distributed_noise import encode
from fedgs.privacy.randomness import SecureRandom
from fedgs.privacy.threat_models import REPLACE_ONE, SECURE_AGGREGATION, UNTRUSTED_SERVER
from fedgs.protocols import common, gswgan, secagg
from fedgs.run_config import RunConfig
from fedgs.secagg import ClientSession
from fedgs.server.gswgan_run import GSWGANRun
from fedgs.server.gswgan_strategy import GSWGANStrategy
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.run_dir import summarize

NODES = [101, 102, 103, 104, 105]
QUERY = "query"


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a ServerApp process sets before any Message is made."""
    for name in ("_run_id", "_node_id", "_task_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


def _config(**settings: object) -> RunConfig:
    user = {"secure-aggregation": True, "clients-per-step": 5} | settings
    return RunConfig.from_user_config(SMALL | {"num-clients": 6}, user)


class SecureGrid:
    """In-process SecAgg+ clients behind a grid. ``silent``: node -> the stage (``query`` or a
    SecAgg+ stage) it stops answering at; ``failing``: node -> the stage it answers with an
    error; ``used``: policy-used overrides per node. Each client's float vector is kept, to
    check the decoded sum."""

    def __init__(
        self,
        silent: dict[int, str] | None = None,
        failing: dict[int, str] | None = None,
        used: dict[int, dict] | None = None,
    ) -> None:
        self.silent, self.failing, self.used = silent or {}, failing or {}, used or {}
        self.sessions: dict[int, ClientSession] = {}
        self.inputs: dict[int, np.ndarray] = {}
        self.vectors: dict[int, np.ndarray] = {}
        self.round_trips = 0

    def get_node_ids(self) -> list[int]:
        return list(NODES)

    def send_and_receive(self, messages: list[Message], timeout: float) -> list[Message]:
        self.round_trips += 1
        return [r for m in messages if (r := self._answer(m)) is not None]

    def _answer(self, message: Message) -> Message | None:
        node = message.metadata.dst_node_id
        if message.metadata.message_type == gswgan.QUERY:
            stage, content = QUERY, message.content
        else:
            stage = secagg.read_stage(message.content)["stage"]
        if self.silent.get(node) == stage:
            return None
        if self.failing.get(node) == stage:
            return Message(Error(code=4403, reason=f"refused at {stage}"), reply_to=message)
        if stage == QUERY:
            setup, noise, seed = secagg.read_setup(content)
            session = ClientSession(node, min_cohort=2, min_threshold=2)
            keys = session.handle(setup)
            rng = np.random.default_rng(node)
            rows = rng.normal(size=(noise.dimension // common.PIXELS, common.PIXELS))
            rows /= np.maximum(1.0, np.linalg.norm(rows, axis=1, keepdims=True))  # clip to C = 1
            self.vectors[node] = rows.ravel()
            self.inputs[node] = encode(rows.ravel(), noise, SecureRandom(), seed)
            self.sessions[node] = session
            used = {"strategy": "gswgan", "noise-multiplier": noise.sigma / 2, "batch-size": 8}
            reply = common.reply_content({}, f"client-{node}", 0, used | self.used.get(node, {}))
            for name, record in secagg.stage_content(keys).items():
                reply[name] = record
            return Message(reply, reply_to=message)
        read = secagg.read_stage(message.content)
        values = self.inputs[node] if stage == "masked_input" else None
        answer = self.sessions[node].handle(read, values)
        return Message(secagg.stage_content(answer), reply_to=message)


def _strategy(config: RunConfig) -> GSWGANStrategy:
    trainer = GeneratorTrainer(10, config.gswgan(), seed=0)
    secure = (config.secagg_settings(), config.secure_noise().params)
    return GSWGANStrategy(
        trainer, PrivacyLedger(), np.random.default_rng(0), 5, secure=secure, node_wait=1
    )


def _step(strategy: GSWGANStrategy, grid: SecureGrid) -> tuple[dict, list[torch.Tensor]]:
    """One secure step; the metrics and the gradients G was given."""
    given: list[torch.Tensor] = []
    apply = strategy.trainer.apply
    strategy.trainer.apply = lambda g: given.extend(x for x in g if x is not None) or apply(g)  # type: ignore[method-assign]
    messages = list(strategy.configure_train(1, ArrayRecord(), ConfigRecord(), grid))  # type: ignore[arg-type]
    exchanged = strategy.exchange(grid, messages, 1.0)  # type: ignore[arg-type]
    _, metrics = strategy.aggregate_train(1, exchanged.replies)
    assert (exchanged.bytes_down > 0) == bool(messages)
    return dict(metrics), given


def _weights(strategy: GSWGANStrategy) -> list[torch.Tensor]:
    return [p.detach().clone() for p in strategy.trainer.generator.parameters()]


# --- the run config -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"clients-per-step": 2}, "clients-per-step >= 3"),
        ({"secagg-threshold": 1}, r"secagg-threshold must lie in \[3, 4\]"),
        ({"secagg-min-survivors": 6}, r"secagg-min-survivors must lie in \[3, 5\]"),
        ({"secagg-min-survivors": 2}, r"secagg-min-survivors must lie in \[3, 5\]"),
        ({"secagg-degree": 3}, "no 3-regular graph on 5 nodes"),
        ({"secagg-degree": 1}, "secagg-degree must be 0"),
        ({"secagg-bits": 2}, "cannot hold the rounding error"),
        ({"accountant": "dp-accounting-pld"}, "needs an RDP accountant"),
        ({"client-code-dims": 2}, "client-code-dims 0"),
    ],
)
def test_the_run_config_refuses_what_no_secure_step_could_run(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _config(**settings)


def test_secagg_keys_need_secure_aggregation_and_a_strategy_that_serves_it() -> None:
    with pytest.raises(ValueError, match="secagg-bits is set but secure-aggregation is off"):
        RunConfig(secagg_bits=40)
    with pytest.raises(
        ValueError, match="secure-aggregation is implemented for gswgan, fedavg-gan, dp-merf only"
    ):
        RunConfig(strategy="datalens", secure_aggregation=True)


def test_the_defaults_resolve_and_the_noise_keeps_noise_multiplier_meaning() -> None:
    config = _config(**{"noise-multiplier": 1.07, "clients-per-step": 20})
    settings = config.secagg_settings()
    assert (settings.min_survivors, settings.threshold, settings.degree) == (18, 10, 19)
    noise = config.secure_noise().params
    assert noise.sigma / (2 * config.clip_norm) >= config.noise_multiplier  # std 2*C*sigma
    assert noise.sigma == pytest.approx(2 * config.clip_norm * 1.07)
    assert noise.clip == pytest.approx(config.clip_norm * np.sqrt(8))
    assert (noise.dimension, noise.m_min, noise.colluders) == (8 * 784, 18, 9)


# --- the exchange ---------------------------------------------------------------------------


def test_a_secure_step_gives_g_the_survivors_mean_in_four_round_trips() -> None:
    config = _config(**{"noise-multiplier": 1e-3, "secagg-min-survivors": 3})
    strategy, grid = _strategy(config), SecureGrid()
    before = _weights(strategy)
    metrics, given = _step(strategy, grid)
    assert grid.round_trips == 4
    assert (metrics["sampled"], metrics["answered"], metrics["dropped"]) == (5, 5, 0)
    expected = np.mean([grid.vectors[n] for n in NODES], axis=0)
    assert np.allclose(given[0].numpy().ravel(), expected, atol=0.02)
    assert any(not torch.equal(a, b) for a, b in zip(before, _weights(strategy), strict=True))


@pytest.mark.parametrize("stage", [QUERY, "share_keys", "masked_input", "unmask"])
@pytest.mark.parametrize("how", ["silent", "failing"])
def test_a_client_dropping_at_any_stage_leaves_the_others_sum(stage: str, how: str) -> None:
    config = _config(**{"noise-multiplier": 1e-3, "secagg-min-survivors": 3})
    strategy = _strategy(config)
    grid = SecureGrid(**{how: {103: stage}})
    metrics, given = _step(strategy, grid)
    survivors = NODES if stage == "unmask" else [n for n in NODES if n != 103]  # input in
    assert metrics["answered"] == len(survivors)
    assert metrics["no_reply"] == (1 if how == "silent" and stage != "unmask" else 0)
    expected = np.mean([grid.vectors[n] for n in survivors], axis=0)
    assert np.allclose(given[0].numpy().ravel(), expected, atol=0.02)
    reasons = strategy.last_outcome.drop_reasons
    assert any(r.startswith("node 103") for r in reasons) == (how == "failing" or stage != "unmask")


def test_a_reply_claiming_less_noise_is_dropped_and_stays_paid() -> None:
    strategy = _strategy(_config(**{"secagg-min-survivors": 3}))
    grid = SecureGrid(used={102: {"noise-multiplier": 0.5}})
    metrics, _ = _step(strategy, grid)
    assert metrics["answered"] == 4
    assert any(
        "node 102: reply used noise multiplier 0.5" in r for r in strategy.last_outcome.drop_reasons
    )
    assert strategy.ledger.counts()["client-102"] == 1  # bound and paid


def test_an_abort_below_m_min_releases_nothing_and_every_query_stays_paid() -> None:
    config = _config(**{"secagg-min-survivors": 4})
    strategy = _strategy(config)
    before = _weights(strategy)
    grid = SecureGrid(silent={101: "share_keys", 102: "masked_input"})
    metrics, given = _step(strategy, grid)
    assert given == [] and (metrics["answered"], metrics["dropped"]) == (0, 5)
    assert all(torch.equal(a, b) for a, b in zip(before, _weights(strategy), strict=True))
    assert any("aborted, nothing released" in r for r in strategy.last_outcome.drop_reasons)
    event = step_event(config.secure_noise().params, REPLACE_ONE)
    assert strategy.ledger.counts() == {f"client-{n}": 1 for n in NODES}  # bound at the query
    assert all(strategy.ledger.signature(f"client-{n}") == ((event, 1),) for n in NODES)
    assert strategy.trainer._pending is None  # the proposal was let go


def test_too_few_nodes_online_ask_none_and_say_why() -> None:
    strategy = _strategy(_config(**{"secagg-min-survivors": 4}))
    grid = SecureGrid()
    grid.get_node_ids = lambda: NODES[:3]  # type: ignore[method-assign]
    metrics, given = _step(strategy, grid)
    assert grid.round_trips == 0 and given == [] and metrics["sampled"] == 0
    assert (
        "asked none: 3 node(s) online, fewer than secagg-min-survivors 4"
        in (strategy.last_outcome.drop_reasons[0])
    )
    assert strategy.ledger.counts() == {} and strategy.ledger.unattributed_count() == 0


# --- the run's privacy report ---------------------------------------------------------------


def test_the_report_labels_every_secure_figure(tmp_path: Path) -> None:
    config = _config(**{"run-dir": str(tmp_path), "secagg-min-survivors": 3})
    run = GSWGANRun(config)
    assert run.epsilon_column == "epsilon_secure_aggregation"
    assert run.epsilon_label() == "eps(secure-aggregation,autodp-rdp,delta=1e-05,replace-one)"
    grid = SecureGrid()
    metrics, _ = _step(run.strategy, grid)
    assert metrics["answered"] == 5
    row = run.privacy_row() | run.privacy_report()
    report = json.loads((tmp_path / "privacy.json").read_text())
    secure, ddg, local = (
        report["secure_aggregation"],
        report["secure_aggregation_ddg_rdp"],
        report["untrusted_server"],
    )
    assert (secure["threat_model"], secure["accountant"]) == (SECURE_AGGREGATION, "autodp-rdp")
    assert (ddg["threat_model"], ddg["accountant"], ddg["steps"]) == (
        SECURE_AGGREGATION,
        "ddg-rdp",
        1,
    )
    assert (local["threat_model"], local["local_noise_only"]) == (UNTRUSTED_SERVER, True)
    for block in (secure, ddg, local):
        assert (block["delta"], block["neighbouring"]) == (1e-5, REPLACE_ONE)
    assert report["headline"] == SECURE_AGGREGATION
    assert row["epsilon_secure_aggregation"] == secure["epsilon"] > 0
    assert 0 < ddg["epsilon"] <= secure["epsilon"] * 1.01  # the least of the three bounds
    # one share is never more noise than the m_min - colluders honest ones (here: one)
    assert local["epsilon"] >= secure["epsilon"]
    assert report["queries"]["total"] == 5
    # the summary a run prints at its end quotes the three figures with their models
    (tmp_path / "metrics.csv").write_text("step,sampled,answered\n1,5,5\n")
    lines = summarize(tmp_path).splitlines()
    assert "private generator steps through secure aggregation (SecAgg+" in lines[0]
    assert f"max over clients): {secure['epsilon']:.2f}" in lines[1]
    assert "at most 2 colluding clients" in lines[1] and "ddg-rdp" in lines[2]
    assert lines[3].startswith("  epsilon (local noise only") and "trusted sampler" not in lines
