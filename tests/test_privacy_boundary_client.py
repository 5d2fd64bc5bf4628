"""Privacy boundary, client side: nothing but the accounted payload leaves a client, and the node
(not the server) decides what it answers.

(a) differential replay: the same client seeds on neighbouring datasets D, D' (one writer's
    images changed) at sigma 1e6: every reply field other than the payload is bitwise equal;
(b) requests outside the node's policy (sigma below its minimum, batch above its maximum, a
    foreign strategy, a budget-breaking query) are refused and the state file is unchanged;
(c) concurrent requests to one client cannot pass its budget (threads; processes: slow);
(e) (b) through Flower's simulation engine and through ``fedgs deploy local`` (slow).
The server side (ledger at send, reports) is tests/test_privacy_boundary_server.py.
"""

from __future__ import annotations

import json
import multiprocessing
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, RecordDict
from privacy_boundary_apps import fakes, serve_in_worker

from fedgs.client import gate
from fedgs.client.common import RequestRefused
from fedgs.client.critic_session import CriticSession
from fedgs.client.datalens_session import DataLensTeacher
from fedgs.client.fedavg_gan_session import FedAvgClient
from fedgs.client.gswgan_session import GSWGANSession
from fedgs.client.pate_gan_session import PateTeacher, teacher_session
from fedgs.client.state_store import ClientStateStore
from fedgs.data.federated import ClientArrays, save_federated
from fedgs.privacy import PrivacyLedger
from fedgs.privacy.policy import NodePolicy, PolicyViolation
from fedgs.protocols import common, datalens, fedavg_gan, gswgan, pate_gan
from fedgs.run_config import RunConfig
from fedgs.run_data import state_dir_for
from fedgs.training.fedavg_gan import build_critic

TINY = {"generator_width": 4, "critic_width": 4, "batch_size": 8, "critic_steps": 2}
PAYLOAD = {
    "gswgan": gswgan.SANITIZED,
    "fedavg-gan": fedavg_gan.DELTA,
    "datalens": datalens.VOTES,
    "pate-gan": pate_gan.VOTES,
}


# --- (a) differential replay ---------------------------------------------------------------


def _neighbours(root: Path) -> tuple[Path, Path]:
    """Two saved datasets that differ only in writer w0's images (replace-one neighbours)."""
    rng = np.random.default_rng(0)
    counts = np.array([40, 40, 40], np.int64)
    arrays = ClientArrays(
        client_ids=["w0", "w1", "w2"],
        train_pixels=rng.integers(0, 256, (120, 784), dtype=np.uint8),
        train_labels=rng.integers(0, 10, 120).astype(np.int64),
        train_counts=counts,
        test_pixels=rng.integers(0, 256, (3, 784), dtype=np.uint8),
        test_labels=rng.integers(0, 10, 3).astype(np.int64),
        test_counts=np.array([1, 1, 1], np.int64),
    )
    save_federated(root / "D", "group", 10, arrays, {"labels": "digits"})
    arrays.train_pixels[:40] = 255 - arrays.train_pixels[:40]
    save_federated(root / "D-prime", "group", 10, arrays, {"labels": "digits"})
    return root / "D", root / "D-prime"


def _public(reply: RecordDict, strategy: str) -> dict:
    """Every record of a reply except the mechanism's payload, as comparable values; of the
    payload only its wire shape (names, shapes, dtypes)."""
    out: dict = {}
    for name, record in reply.items():
        if isinstance(record, ArrayRecord):
            arrays = common.record_arrays(record)
            if name == PAYLOAD[strategy]:
                out[name] = {k: (v.shape, str(v.dtype)) for k, v in arrays.items()}
            else:
                out[name] = {k: v.tobytes() for k, v in arrays.items()}
        else:
            out[name] = dict(record)
    return out


def _fedavg_query(config: RunConfig) -> RecordDict:
    critic = build_critic(config.fedavg_gan(), 10)
    weights = {k: v.numpy() for k, v in critic.state_dict().items()}
    content = fakes(config.batch_size)
    content[fedavg_gan.CRITIC] = fedavg_gan.encode_arrays(weights, "float32")
    return content


def _pate_query(config: RunConfig) -> RecordDict:
    content = fakes(config.batch_size)
    content[pate_gan.BALLOT] = fakes(config.batch_size, seed=7)[common.FAKES]
    return content


def _replies(config: RunConfig, strategy: str) -> tuple[list[RecordDict], dict]:
    """What one client (writer w0) sends for a warm start and two queries, and its critic."""
    if strategy == "gswgan":
        warm = GSWGANSession(config, 0).warm_start(RecordDict())
        answers = [GSWGANSession(config, 0).answer(fakes(8, seed=s)) for s in (1, 2)]
        return [warm, *answers], GSWGANSession(config, 0).critic.critic.state_dict()
    if strategy == "datalens":
        warm = CriticSession(config, 0).warm_start(RecordDict())
        answers = [DataLensTeacher(config, 0).answer(fakes(8, seed=s)) for s in (1, 2)]
        return [warm, *answers], CriticSession(config, 0).critic.critic.state_dict()
    if strategy == "pate-gan":
        warm = teacher_session(config, 0).warm_start(RecordDict())
        answers = [PateTeacher(config, 0).answer(_pate_query(config)) for _ in range(2)]
        return [warm, *answers], teacher_session(config, 0).critic.critic.state_dict()
    client = FedAvgClient(config, 0)
    reply = client.answer(_fedavg_query(config))
    return [reply], common.record_arrays(reply[fedavg_gan.DELTA])


@pytest.mark.parametrize("strategy", ["gswgan", "datalens", "pate-gan", "fedavg-gan"])
def test_replies_on_neighbouring_data_differ_only_in_the_payload(
    tmp_path: Path, strategy: str
) -> None:
    data, data_prime = _neighbours(tmp_path)
    settings = TINY | {"strategy": strategy, "noise_multiplier": 1e6, "warm_start_steps": 2}
    settings |= {"dataset": "saved", "fedavg_models": "gswgan", "datalens_top_k": 20}
    replies, trained = _replies(
        RunConfig(**settings, data_dir=str(data), run_dir=str(tmp_path / "run")), strategy
    )
    replies_prime, trained_prime = _replies(
        RunConfig(**settings, data_dir=str(data_prime), run_dir=str(tmp_path / "run-prime")),
        strategy,
    )
    # the neighbouring writer's data did reach what the client computed ...
    assert any(
        not np.array_equal(np.asarray(trained[k]), np.asarray(trained_prime[k])) for k in trained
    )
    # ... and nothing of it is in the reply outside the payload
    for reply, reply_prime in zip(replies, replies_prime, strict=True):
        assert _public(reply, strategy) == _public(reply_prime, strategy)
        assert not reply.metric_records


# --- (b) the node's policy -----------------------------------------------------------------


@pytest.fixture()
def config(tmp_path: Path) -> RunConfig:
    return RunConfig(**TINY, run_dir=str(tmp_path / "run"), warm_start_steps=0)


def _state_file(config: RunConfig) -> Path:
    client_id = GSWGANSession(config, 0).client_id
    return ClientStateStore(state_dir_for(config)).path(client_id)


def _epsilon_of(queries: int, config: RunConfig, sigma: float) -> float:
    ledger = PrivacyLedger()
    for _ in range(queries):
        ledger.record_query("c", sigma, config.batch_size)
    return ledger.epsilon_untrusted("c", config.delta, config.accountant)


def test_requests_outside_the_policy_are_refused_and_change_nothing(config: RunConfig) -> None:
    sigma = 2.0
    budget = _epsilon_of(2, config, sigma) * 1.0001  # two queries of this size
    policy = NodePolicy(min_noise_multiplier=sigma, max_batch_size=8, epsilon_budget=budget)
    asked = config.with_updates(noise_multiplier=sigma)
    gate.serve(gswgan.QUERY, fakes(8), asked, policy, 0)
    path = _state_file(config)
    before = path.read_bytes()
    refused = [
        (gswgan.QUERY, fakes(8), config.with_updates(noise_multiplier=1.0), "below"),
        (gswgan.QUERY, fakes(9), asked, "above this node's maximum"),
        (datalens.QUERY, fakes(8), asked, "serves only gswgan"),
        (fedavg_gan.QUERY, fakes(8), asked, "serves only gswgan"),
        (pate_gan.QUERY, fakes(8), asked, "serves only gswgan"),
        ("train.nonsense", fakes(8), asked, "serves only gswgan"),
    ]
    for message_type, content, run_config, reason in refused:
        with pytest.raises(PolicyViolation, match=reason):
            gate.serve(message_type, content, run_config, policy, 0)
        assert path.read_bytes() == before, reason
    gate.serve(gswgan.QUERY, fakes(8, seed=1), asked, policy, 0)  # the second allowed query
    paid = path.read_bytes()
    with pytest.raises(RequestRefused, match="privacy budget exhausted"):
        gate.serve(gswgan.QUERY, fakes(8, seed=2), asked, policy, 0)
    assert path.read_bytes() == paid  # ledger and critic untouched by the refusal


def test_the_node_policy_wins_over_the_run_config(config: RunConfig) -> None:
    node = {"partition-id": 0, "policy-min-noise-multiplier": 1.5, "policy-clip-norm": 0.5}
    policy = NodePolicy.from_node_config(node | {"policy-epsilon-budget": 500.0})
    # a clip norm other than the node's is refused (tests/test_node_ground.py); the server asks
    # for a looser delta and budget: the node applies its own
    loose = config.with_updates(noise_multiplier=3.0, clip_norm=0.5, delta=0.1)
    reply = gate.serve(gswgan.QUERY, fakes(8), loose, policy, 0)
    assert dict(reply[common.POLICY_USED]) == {
        "strategy": "gswgan",
        "noise-multiplier": 3.0,  # asking for more noise is allowed
        "clip-norm": 0.5,
        "batch-size": 8,
        "delta": 1e-5,
    }
    assert (
        policy.applied_to(loose.with_updates(client_budget_epsilon=1e9)).client_budget_epsilon
        == 500
    )
    assert policy.applied_to(loose.with_updates(client_budget_epsilon=5)).client_budget_epsilon == 5


def test_deployment_defaults_are_finite_and_bad_policies_are_clear_errors() -> None:
    default = NodePolicy.from_node_config({"partition-id": 0})
    assert default == NodePolicy.deployment_default("gswgan")
    assert default.epsilon_budget > 0 and default.min_noise_multiplier >= 1.0
    # the paper's sigma and batch are inside its bounds (its budget then refuses such a query:
    # tests/test_node_ground.py)
    default.check_request(RunConfig().noise_multiplier, RunConfig().batch_size)
    teacher = NodePolicy.from_node_config({"policy-strategy": "datalens"})
    assert teacher.strategy == "datalens" and teacher.epsilon_budget == 0  # no client noise
    for node, reason in (
        ({"policy-min-noise-multiplier": "lots"}, "must be a float"),
        ({"policy-max-batch-size": 0}, "max-batch-size must be >= 1"),
        ({"policy-delta": 1.5}, "delta must lie in"),
        ({"policy-strategy": "fedprox"}, "policy-strategy must be one of"),
        ({"policy-accountant": "guess"}, "accountant must be one of"),
        ({"policy-epsilon-budget": -1}, "epsilon-budget must be >= 0"),
        ({"policy-noise": 2}, "unknown node-config key"),
    ):
        with pytest.raises(PolicyViolation, match=reason):
            NodePolicy.from_node_config(node)
    keys = {"policy-" + f.name.replace("_", "-") for f in fields(NodePolicy)}
    assert keys == {
        "policy-strategy",
        "policy-min-noise-multiplier",
        "policy-clip-norm",
        "policy-max-batch-size",
        "policy-delta",
        "policy-epsilon-budget",
        "policy-accountant",
        "policy-secagg-only",
        "policy-min-cohort",
        "policy-min-threshold",
    }


def test_deploy_local_renders_the_node_policy_and_refuses_a_bad_one(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from fedgs.cli import main
    from fedgs.deploy import topology
    from fedgs.deploy.launcher import LocalDeployment, LocalOptions

    policy = {"policy-min-noise-multiplier": 1.5, "policy-strategy": "gswgan"}
    commands = LocalDeployment(tmp_path, LocalOptions(nodes=2, policy=policy)).commands()
    for partition in range(2):
        argv = commands[topology.node_name(partition)]
        rendered = argv[argv.index("--node-config") + 1]
        assert 'policy-min-noise-multiplier=1.5 policy-strategy="gswgan"' in rendered
    out = tmp_path / "d"
    argv = ["deploy", "local", "--policy", "policy-delta=2", "--steps", "1", "--out", str(out)]
    assert main(argv) == 2
    assert "delta must lie in (0, 1)" in capsys.readouterr().err
    assert main([*argv[:2], "--policy", "delta=0.1", *argv[4:]]) == 2
    assert "--policy takes policy-KEY=VALUE" in capsys.readouterr().err
    assert not out.exists()  # refused before anything starts


# --- (c) concurrency -----------------------------------------------------------------------


def test_concurrent_threads_cannot_pass_the_budget(config: RunConfig) -> None:
    allowed, fired = 3, 7
    policy = NodePolicy(
        min_noise_multiplier=config.noise_multiplier,
        epsilon_budget=_epsilon_of(allowed, config, config.noise_multiplier) * 1.0001,
    )

    def one(seed: int) -> str:
        try:
            gate.serve(gswgan.QUERY, fakes(8, seed=seed), config, policy, 0)
        except RequestRefused as error:
            return str(error)
        return "answered"

    with ThreadPoolExecutor(max_workers=fired) as pool:
        outcomes = list(pool.map(one, range(fired)))
    assert outcomes.count("answered") == allowed, outcomes
    assert all("budget exhausted" in o for o in outcomes if o != "answered")
    session = GSWGANSession(config, 0)
    assert session.ledger.query_counts() == {session.client_id: allowed}


@pytest.mark.slow
def test_concurrent_processes_cannot_pass_the_budget(config: RunConfig) -> None:
    allowed, fired = 2, 4
    policy = NodePolicy(
        min_noise_multiplier=config.noise_multiplier,
        epsilon_budget=_epsilon_of(allowed, config, config.noise_multiplier) * 1.0001,
    )
    values = {f.name: getattr(config, f.name) for f in fields(RunConfig)}
    jobs = [(gswgan.QUERY, json.dumps(asdict(policy)), values, seed) for seed in range(fired)]
    with multiprocessing.get_context("spawn").Pool(fired) as pool:
        outcomes = pool.map(serve_in_worker, jobs)
    assert outcomes.count("answered") == allowed, outcomes
    session = GSWGANSession(config, 0)
    assert session.ledger.query_counts() == {session.client_id: allowed}


# --- a diverged critic ---------------------------------------------------------------------


def test_a_diverged_critic_answers_like_a_healthy_one_and_pays(config: RunConfig) -> None:
    policy = NodePolicy.from_run_config(config)
    healthy = gate.serve(gswgan.QUERY, fakes(8), config, policy, 0)
    session = GSWGANSession(config, 0)
    with torch.no_grad():
        for parameter in session.critic.critic.parameters():
            parameter.fill_(float("nan"))
    session.save()
    diverged = gate.serve(gswgan.QUERY, fakes(8, seed=1), config, policy, 0)
    assert _public(diverged, "gswgan") == _public(healthy, "gswgan")
    values = diverged[gswgan.SANITIZED][gswgan.GRADIENT].numpy()
    assert np.isfinite(values).all()
    std = 2 * config.clip_norm * config.noise_multiplier  # zero signal plus the same noise
    assert abs(values.std() / std - 1) < 0.1 and abs(values.mean()) < 0.1 * std
    after = GSWGANSession(config, 0)
    assert after.ledger.query_counts() == {after.client_id: 2}  # paid like any answer
    assert after.store.failures(after.client_id) == 1  # counted locally, never sent


# --- (e) through the real engines ----------------------------------------------------------


def _probe_outcomes(run_dir: Path) -> tuple[dict[int, dict[str, str]], list[dict[str, str]]]:
    """Per node: request name -> 'answered' or the refusal's reason; and the state hashes
    after each request."""
    entries = json.loads((run_dir / "probe.json").read_text())
    outcomes: dict[int, dict[str, str]] = {}
    for entry in entries:
        if "node" in entry:
            outcome = entry.get("reason", "answered")
            if outcome == "answered":
                assert entry["records"] == sorted(
                    [gswgan.SANITIZED, common.CLIENT, common.POLICY_USED]
                )
            outcomes.setdefault(entry["node"], {})[entry["request"]] = outcome
    return outcomes, [entry["state"] for entry in entries if "state" in entry]


def _assert_policy_held(outcome: dict[str, str], states: list[dict[str, str]]) -> None:
    """The probe against a node allowing two queries at its sigma and batches up to 8."""
    assert outcome["valid"] == "answered" and outcome["again-0"] == "answered", outcome
    assert "above this node's maximum of 8" in outcome["big-batch"]
    assert "serves only gswgan" in outcome["foreign-datalens"]
    assert "serves only gswgan" in outcome["foreign-fedavg"]
    assert all("privacy budget exhausted" in outcome[f"again-{i}"] for i in (1, 2))
    # state after: valid, big-batch, datalens, fedavg, again-0, again-1, again-2
    assert states[0] == states[1] == states[2] == states[3]  # refusals changed nothing
    assert states[4] != states[3] and states[4] == states[5] == states[6]


@pytest.mark.slow
def test_policy_refusals_through_the_simulation_engine(tmp_path: Path) -> None:
    import os

    from flwr.simulation import run_simulation
    from privacy_boundary_apps import per_node_policy_app, probe_server_app

    from fedgs.simulations.simulate import EngineOptions, backend_config

    config = RunConfig(
        **TINY, num_clients=2, min_nodes=2, warm_start_steps=0, run_dir=str(tmp_path / "run")
    )
    sigma = config.noise_multiplier
    budget = _epsilon_of(2, config, sigma) * 1.0001
    policies = {
        0: NodePolicy(min_noise_multiplier=sigma * 2, max_batch_size=8, epsilon_budget=budget),
        1: NodePolicy(min_noise_multiplier=sigma, max_batch_size=8, epsilon_budget=budget),
    }
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    run_simulation(
        server_app=probe_server_app(config),
        client_app=per_node_policy_app(config.to_user_config(), policies),
        num_supernodes=2,
        backend_config=backend_config(EngineOptions(ray_cpus=2, object_store_mb=256)),
    )
    outcomes, states = _probe_outcomes(Path(config.run_dir))
    (strict,) = [o for o in outcomes.values() if o["valid"] != "answered"]
    (served,) = [o for o in outcomes.values() if o["valid"] == "answered"]
    assert all("below this node's minimum" in strict[r] for r in ("valid", "big-batch", "again-0"))
    _assert_policy_held(served, states)
    session = GSWGANSession(config, 0)  # the strict node's writer never paid anything
    assert session.ledger.query_counts() == {}
    assert sum(GSWGANSession(config, 1).ledger.query_counts().values()) == 2


@pytest.mark.slow
def test_policy_refusals_through_fedgs_deploy_local(tmp_path: Path) -> None:
    from deploy_support import SMALL, client_ledger

    from fedgs.deploy.app_bundle import Components, write_app
    from fedgs.deploy.launcher import LocalDeployment, LocalOptions

    base = RunConfig.from_user_config(SMALL)
    sigma = 2.0
    budget = _epsilon_of(2, base, sigma) * 1.0001
    policy = {
        "policy-min-noise-multiplier": sigma,
        "policy-max-batch-size": 8,
        "policy-epsilon-budget": budget,
    }
    apps = Path(__file__).with_name("privacy_boundary_apps.py")
    components = Components("privacy_boundary_apps:deployed_probe", "fedgs.client.app:app")
    options = LocalOptions(nodes=1, policy=policy)
    with LocalDeployment(tmp_path / "deployment", options) as deployment:
        state_dir = deployment.state_dir(0)
        run = SMALL | {"num-clients": 1, "min-nodes": 1, "state-dir": str(state_dir)}
        results = {}
        for name, asked in (("low", sigma / 2), ("ok", sigma)):
            run_dir = tmp_path / name
            app = write_app(tmp_path / f"{name}-app", components, modules=[apps])
            deployment.allow_app(app)  # the node runs only apps its owner listed
            config = run | {"run-dir": str(run_dir), "noise-multiplier": asked}
            result = deployment.run(config, app=app)
            assert result.ok, result
            results[name] = _probe_outcomes(run_dir)
            if name == "low":  # the server asked for less noise than the node allows
                (outcome,), states = results[name][0].values(), results[name][1]
                below = [r for r in outcome if not r.startswith("foreign")]
                assert all("below this node's minimum" in outcome[r] for r in below), outcome
                assert all(state == {} for state in states) and client_ledger(state_dir) == {}
        (outcome,), states = results["ok"][0].values(), results["ok"][1]
        _assert_policy_held(outcome, states)
        assert sum(client_ledger(state_dir).values()) == 2
