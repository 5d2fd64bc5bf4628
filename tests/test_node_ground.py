"""The node's ground is its own, and its gate refuses before it touches anything (issue 40).

Each request goes through the real ClientApp (``fedgs.client.app``) as a SuperNode hands it
over: a Flower message and a context with the node config (the data holder's) and the run config
(the server's). The server's run config tries to pick the node's device or data folder, to move
its state (and so reset its privacy ledger), to slip a NaN noise multiplier, another clip norm
or malformed arrays past the gate; a deployed node that did not pin its state directory refuses.
The default policy's budget is one a data holder can defend, and the README's deployment
examples fit it. An error reply blames the right party: a bad request is one the server got
wrong, a node config the node cannot run with is refused, and a fault inside the node is an
internal error whose reason quotes nothing from the node.
"""

from __future__ import annotations

import logging
import math
import re
import shlex
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from flwr.app import Array, ConfigRecord, Context, Message, Metadata, RecordDict
from flwr.clientapp import ClientApp
from privacy_boundary_apps import fakes

from fedgs import run_data
from fedgs.client import critic_session
from fedgs.client.app import ERROR_BAD_REQUEST, ERROR_INTERNAL, ERROR_REFUSED, build_client_app
from fedgs.privacy import PrivacyLedger
from fedgs.privacy.policy import DEFAULT_EPSILON_BUDGET, NodePolicy
from fedgs.protocols import common, datalens, fedavg_gan, gswgan, pate_gan
from fedgs.run_config import RunConfig

ROOT = Path(__file__).resolve().parents[1]
SIGMA = 12.0  # inside the default budget for a few queries of 8 rows
RUN = {
    "batch-size": 8,
    "critic-steps": 2,
    "critic-width": 4,
    "generator-width": 4,
    "warm-start-steps": 0,
    "noise-multiplier": SIGMA,
}
DEPLOYED = build_client_app()  # no runner overrides: a deployed node


def _message(message_type: str, content: RecordDict) -> Message:
    """A request as a SuperNode hands it to its ClientApp."""
    metadata = Metadata(
        run_id=1,
        message_id=uuid.uuid4().hex,
        src_node_id=0,
        dst_node_id=1,
        reply_to_message_id="",
        group_id="",
        created_at=time.time(),
        ttl=3600.0,
        message_type=message_type,
    )
    return Message(content=content, metadata=metadata)


def _ask(
    node_config: Mapping[str, Any],
    run_config: Mapping[str, Any],
    content: RecordDict | None = None,
    message_type: str = gswgan.QUERY,
    app: ClientApp = DEPLOYED,
) -> Message:
    context = Context(
        run_id=1,
        node_id=1,
        node_config=dict(node_config),
        state=RecordDict(),
        run_config=dict(run_config),
    )
    return app(_message(message_type, content if content is not None else fakes(8)), context)


def _answered(reply: Message) -> bool:
    return not reply.has_error()


def _refusal(reply: Message) -> tuple[int, str]:
    assert reply.has_error(), "the node answered"
    return reply.error.code, reply.error.reason


def _budget_for(queries: int, sigma: float = SIGMA, batch: int = 8) -> float:
    """A budget that allows exactly ``queries`` queries of this size."""
    ledger = PrivacyLedger()
    for _ in range(queries):
        ledger.record_query("c", sigma, batch)
    return ledger.epsilon_untrusted("c", RunConfig.delta, RunConfig.accountant) * 1.0001


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


# --- the node's ground ---------------------------------------------------------------------


def test_the_server_cannot_pick_a_nodes_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def record(name: str) -> torch.device:
        asked.append(name)
        return torch.device("cpu")

    monkeypatch.setattr(critic_session, "resolve_device", record)
    node = {"partition-id": 0, "state-dir": str(tmp_path / "state")}
    # a node that set no device computes on its own default, whatever the server names
    assert _answered(_ask(node, RUN | {"device": "cuda"}))
    assert _answered(_ask(node, RUN | {"device": "cpu"}))
    # a node that set one computes there
    assert _answered(_ask(node | {"device": "cpu"}, RUN | {"device": "cuda"}))
    assert asked == ["auto", "auto", "cpu"]


def test_the_server_cannot_move_a_nodes_state(tmp_path: Path) -> None:
    state, elsewhere, run_dir = tmp_path / "state", tmp_path / "elsewhere", tmp_path / "run"
    node = {"partition-id": 0, "state-dir": str(state)}
    moved = RUN | {"state-dir": str(elsewhere), "run-dir": str(run_dir)}
    code, reason = _refusal(_ask(node, moved))
    assert code == ERROR_REFUSED and "'state-dir'" in reason, reason
    assert str(state) not in reason  # the node's own path is not the server's business
    assert _files(elsewhere) == [] and _files(run_dir) == [] and _files(state) == []
    # repeating the node's own folder is fine; the run's run-dir is the server's alone
    assert _answered(_ask(node, RUN | {"state-dir": str(state), "run-dir": str(run_dir)}))
    assert _files(run_dir) == [] and any(p.suffix == ".pt" for p in _files(state))


def test_the_server_cannot_pick_the_data_a_node_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run config's data-dir is the server's copy: a node reads its own folder (node config
    or, in a simulation, the runner's), whatever the server names. Each load is recorded, then
    served from the embedded dataset (which takes no folder)."""
    real = run_data._dataset
    asked: list[str] = []

    def record(name: str, data_dir: str, labels: str, num_clients: int, seed: int) -> object:
        asked.append(data_dir)
        return real("embedded", "", labels, num_clients, seed)

    monkeypatch.setattr(run_data, "_dataset", record)
    node = {"partition-id": 0, "state-dir": str(tmp_path / "state")}
    server = RUN | {"data-dir": str(tmp_path / "elsewhere")}
    assert _answered(_ask(node, server))  # a node that names no folder reads none
    assert _answered(_ask(node | {"data-dir": str(tmp_path / "mine")}, server))
    runner = RunConfig.from_user_config(RUN | {"run-dir": str(tmp_path / "runner")})
    simulated = build_client_app(runner.to_user_config() | {"data-dir": str(tmp_path / "sim")})
    assert _answered(_ask({"partition-id": 0}, server, app=simulated))
    assert set(asked) == {"", str(tmp_path / "mine"), str(tmp_path / "sim")}, asked


def test_an_unpinned_deployed_node_refuses_and_a_new_run_dir_resets_no_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A budget of 2 queries, three runs of 2 queries, each with its own run-dir: a node
    that kept its ledger under the run's run-dir answered all 6."""
    monkeypatch.chdir(tmp_path)
    unpinned = {"partition-id": 0, "policy-epsilon-budget": _budget_for(2)}
    replies = [
        _ask(unpinned, RUN | {"run-dir": str(tmp_path / f"run-{run}")}, fakes(8, seed=query))
        for run in range(3)
        for query in range(2)
    ]
    assert sum(_answered(r) for r in replies) == 0
    for reply in replies:
        code, reason = _refusal(reply)
        assert code == ERROR_REFUSED and "node-config key 'state-dir'" in reason, reason
    assert _files(tmp_path) == []  # no state, no lock file anywhere

    pinned = unpinned | {"state-dir": str(tmp_path / "state")}
    replies = [
        _ask(pinned, RUN | {"run-dir": str(tmp_path / f"run-{run}")}, fakes(8, seed=query))
        for run in range(3)
        for query in range(2)
    ]
    assert [_answered(r) for r in replies] == [True, True] + [False] * 4
    assert all("privacy budget exhausted" in _refusal(r)[1] for r in replies[2:])


def test_a_simulation_runner_speaks_for_its_nodes(tmp_path: Path) -> None:
    """Without a state-dir in the node config, a simulated node keeps its state where the
    runner says (its run-dir), not where the run config says."""
    runner = RunConfig.from_user_config(RUN | {"run-dir": str(tmp_path / "runner")})
    app = build_client_app(runner.to_user_config())
    server = RUN | {"run-dir": str(tmp_path / "server")}
    assert _answered(_ask({"partition-id": 0}, server, app=app))
    assert _files(tmp_path / "server") == []
    assert _files(tmp_path / "runner" / "client-state")


# --- the gate: values, then arrays, then data and state -------------------------------------


@pytest.fixture()
def untouched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A pinned state folder; loading any dataset or opening any client state is an error."""

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("the gate touched the node's data or state")

    monkeypatch.setattr("fedgs.run_data._dataset", forbidden)
    monkeypatch.setattr("fedgs.client.gate.ClientStateStore", forbidden)
    state = tmp_path / "state"
    state.mkdir()
    return state


@pytest.mark.parametrize(
    "key, value",
    [
        ("noise-multiplier", math.nan),
        ("noise-multiplier", math.inf),
        ("clip-norm", math.nan),
        ("lr-critic", math.inf),
        ("client-budget-epsilon", math.nan),
    ],
)
def test_non_finite_values_are_refused_before_data_and_state(
    untouched: Path, key: str, value: float
) -> None:
    node = {"partition-id": 0, "state-dir": str(untouched)}
    code, reason = _refusal(_ask(node, RUN | {key: value}))
    assert code == ERROR_REFUSED and (key in reason or "noise multiplier" in reason), reason
    assert _files(untouched) == []


def test_another_clip_norm_is_refused_not_replaced(tmp_path: Path) -> None:
    node = {"partition-id": 0, "state-dir": str(tmp_path / "state"), "policy-clip-norm": 0.5}
    code, reason = _refusal(_ask(node, RUN | {"clip-norm": 10.0}))
    assert code == ERROR_REFUSED and "clip-norm 10" in reason and "clip-norm=0.5" in reason
    assert _files(tmp_path / "state") == []
    reply = _ask(node, RUN | {"clip-norm": 0.5})
    assert reply.content[common.POLICY_USED]["clip-norm"] == 0.5

    fedavg = {"partition-id": 0, "state-dir": str(tmp_path / "f"), "policy-strategy": "fedavg-gan"}
    code, reason = _refusal(
        _ask(fedavg, RUN | {"strategy": "fedavg-gan", "fedavg-clip-norm": 1.0}, fakes(8),
             fedavg_gan.QUERY)
    )  # fmt: skip
    assert code == ERROR_REFUSED and "fedavg-clip-norm 1" in reason, reason


def _malformed(name: str) -> tuple[str, RecordDict]:
    """A request whose arrays break the protocol in one way, by name."""
    valid = common.record_arrays(fakes(8)[common.FAKES])
    images, labels = valid[common.IMAGES], valid[common.LABELS]

    def query(arrays: dict[str, np.ndarray]) -> RecordDict:
        return RecordDict({common.FAKES: common.arrays_record(arrays)})

    cases = {
        "missing-fakes": (gswgan.QUERY, RecordDict()),
        "wrong-shape": (gswgan.QUERY, query(valid | {common.IMAGES: images[:, :, :-1]})),
        "nan-images": (gswgan.QUERY, query(valid | {common.IMAGES: images * np.nan})),
        "int-images": (gswgan.QUERY, query(valid | {common.IMAGES: images.astype(np.int64)})),
        "float-labels": (gswgan.QUERY, query(valid | {common.LABELS: labels * 1.0})),
        "negative-labels": (gswgan.QUERY, query(valid | {common.LABELS: labels - 99})),
        "images-out-of-range": (gswgan.QUERY, query(valid | {common.IMAGES: images * 3})),
        "bad-warm-start": (
            "train.warmstart",
            RecordDict({common.WARM_START_CONFIG: ConfigRecord({common.STEPS: -5})}),
        ),
    }
    return cases[name]


@pytest.mark.parametrize(
    "name",
    [
        "missing-fakes",
        "wrong-shape",
        "nan-images",
        "int-images",
        "float-labels",
        "negative-labels",
        "images-out-of-range",
        "bad-warm-start",
    ],
)
def test_malformed_arrays_are_refused_before_data_and_state(untouched: Path, name: str) -> None:
    message_type, content = _malformed(name)
    node = {"partition-id": 0, "state-dir": str(untouched)}
    code, reason = _refusal(_ask(node, RUN, content, message_type))
    assert code == ERROR_BAD_REQUEST and reason.startswith("bad request"), reason
    assert _files(untouched) == []


def test_teacher_queries_are_checked_whole_before_data_and_state(untouched: Path) -> None:
    """PATE-GAN's ballot and Fed-Avg GAN's critic weights are arrays the gate checks too."""
    pate = {"partition-id": 0, "state-dir": str(untouched), "policy-strategy": "pate-gan"}
    code, reason = _refusal(_ask(pate, RUN | {"strategy": "pate-gan"}, fakes(8), pate_gan.QUERY))
    assert code == ERROR_BAD_REQUEST and "'ballot'" in reason, reason
    fedavg = {"partition-id": 0, "state-dir": str(untouched), "policy-strategy": "fedavg-gan"}
    content = fakes(8)
    content[fedavg_gan.CRITIC] = fedavg_gan.encode_arrays(
        {"layer.weight": np.full((3, 3), np.nan, np.float32)}, "float32"
    )
    code, reason = _refusal(
        _ask(fedavg, RUN | {"strategy": "fedavg-gan"}, content, fedavg_gan.QUERY)
    )
    assert code == ERROR_BAD_REQUEST and "non-finite" in reason, reason
    assert _files(untouched) == []


def test_unknown_labels_are_refused_before_the_lock(tmp_path: Path) -> None:
    """The class bound needs the dataset's class count: checked once it is open, before the
    client's lock and state."""
    valid = common.record_arrays(fakes(8)[common.FAKES])
    content = RecordDict(
        {common.FAKES: common.arrays_record(valid | {common.LABELS: valid[common.LABELS] + 10})}
    )
    state = tmp_path / "state"
    code, reason = _refusal(_ask({"partition-id": 0, "state-dir": str(state)}, RUN, content))
    assert code == ERROR_BAD_REQUEST and "[0, 10)" in reason, reason
    assert _files(state) == []


# --- whose fault: bad request, refusal, or the node's own --------------------------------------


def _with_images(**fields: Any) -> RecordDict:
    """A valid query whose images Array has some of its fields (dtype, shape, stype, data)
    replaced."""
    content = fakes(8)
    array = content[common.FAKES][common.IMAGES]
    parts = {"dtype": array.dtype, "shape": array.shape, "stype": array.stype, "data": array.data}
    content[common.FAKES][common.IMAGES] = Array(**(parts | fields))
    return content


def _with_step(step: object) -> RecordDict:
    content = fakes(8)
    content[common.CONFIG] = ConfigRecord({common.STEP: step})
    return content


SERVER_MISTAKES = {  # name -> (run config, content): what the server got wrong
    "run-config-type": (RUN | {"batch-size": "eight"}, None),
    "run-config-overflow": (RUN | {"batch-size": math.inf}, None),
    "run-config-unknown-key": (RUN | {"batch-sise": 8}, None),
    "run-config-dataset": (RUN | {"dataset": "cifar10"}, None),
    "run-config-seed": (RUN | {"seed": -1}, None),
    "run-config-state-dir": (RUN | {"state-dir": "/srv/\x00state"}, None),
    "step-type": (RUN, _with_step("seven")),
    "step-negative": (RUN, _with_step(-1)),
    "array-bytes": (RUN, _with_images(data=b"not an array")),
    "array-stype": (RUN, _with_images(stype="torch")),
    "array-stated-shape": (RUN, _with_images(shape=(2, 4, 784))),
}


@pytest.mark.parametrize("name", sorted(SERVER_MISTAKES))
def test_what_the_server_got_wrong_is_a_bad_request_in_the_parsers_words(
    untouched: Path, name: str
) -> None:
    """Each comes from a parser (ProtocolError), not from an exception that reached the node's
    boundary: the reason says what was wrong, not which Python error it raised."""
    run_config, content = SERVER_MISTAKES[name]
    node = {"partition-id": 0, "state-dir": str(untouched)}
    code, reason = _refusal(_ask(node, run_config, content))
    assert code == ERROR_BAD_REQUEST and reason.startswith("bad request: "), reason
    assert "Error:" not in reason, reason
    assert _files(untouched) == []


@pytest.mark.parametrize(
    "asked, bound",
    [
        ({"critic-width": 10**5}, "critic_width must be at most 256"),  # tens of GB
        ({"strategy": "fedavg-gan", "fedavg-critic-steps": 10**9}, "at most 64"),  # days of SGD
        ({"warm-start-steps": 10**9}, "warm-start-steps must lie in [0, 10000]"),
        ({"batch-size": 10**8}, "batch_size must be at most 4096"),  # a real batch of 313 GB
        ({"z-dim": 10**8}, "z_dim must be at most 1024"),  # the warm start's local G
    ],
)
def test_the_server_cannot_make_a_node_allocate_or_train_without_bound(
    untouched: Path, asked: dict, bound: str
) -> None:
    node = {"partition-id": 0, "state-dir": str(untouched)}
    code, reason = _refusal(_ask(node, RUN | asked))
    assert code == ERROR_BAD_REQUEST and bound in reason, reason


def test_a_nodes_parse_of_a_huge_secure_cohort_builds_no_graph(
    untouched: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every node parses the run config at every message: checking a cohort of m nodes must not
    build the m-node SecAgg+ graph (O(m^2): 24 s and 0.9 GB at m = 6,000, measured)."""

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("the run config's check built the neighbour graph")

    monkeypatch.setattr("fedgs.secagg.graph.neighbour_graph", forbidden)
    monkeypatch.setattr("fedgs.secagg.graph._neighbours", forbidden)
    huge = {"secure-aggregation": True, "clients-per-step": 10**6, "noise-multiplier": SIGMA}
    assert RunConfig.from_user_config(RUN | huge).secagg_settings().degree == 10**6 - 1
    node = {"partition-id": 0, "state-dir": str(untouched)}
    assert _ask(node, RUN | huge).has_error()  # no cohort: refused, before data and state


def test_a_partition_the_node_lacks_is_refused_without_its_count(tmp_path: Path) -> None:
    node = {"partition-id": 999, "state-dir": str(tmp_path / "state")}
    code, reason = _refusal(_ask(node, RUN | {"num-clients": 7}))
    assert code == ERROR_REFUSED and "partition 999 does not exist" in reason, reason
    assert "num-clients 7" in reason


@pytest.mark.parametrize(
    "node_config, match",
    [
        ({"partition-id": "zero"}, "'partition-id' must be an integer"),
        ({"device": "tpu"}, "this node's config: unknown device 'tpu'"),
        ({"stat-dir": "/srv/state"}, "this node's config: unknown run-config key 'stat-dir'"),
        ({"policy-max-batch-size": math.inf}, "'policy-max-batch-size' must be a int"),
    ],
)
def test_a_node_config_the_node_cannot_run_with_is_refused_not_a_bad_request(
    untouched: Path, caplog: pytest.LogCaptureFixture, node_config: dict, match: str
) -> None:
    node = {"partition-id": 0, "state-dir": str(untouched)} | node_config
    with caplog.at_level(logging.WARNING, logger="fedgs.client.app"):
        code, reason = _refusal(_ask(node, RUN))
    assert code == ERROR_REFUSED and reason.startswith("refused: ") and match in reason, reason
    assert match in caplog.text  # its operator, who alone can fix it, reads it on the node
    assert _files(untouched) == []


@pytest.mark.parametrize(
    "node_config, run_config, logged",
    [
        # more clients than the embedded dataset's 5,000 images: the server's count
        ({}, {"num-clients": 6000}, "between 1 and 5000"),
        # a data folder the node named and does not have: the node's path stays on the node
        ({"data-dir": "/nonexistent/private-folder"}, {"dataset": "mnist"}, "does not exist"),
    ],
)
def test_data_that_cannot_serve_the_run_is_refused_naming_the_run_not_the_node(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    node_config: dict,
    run_config: dict,
    logged: str,
) -> None:
    node = {"partition-id": 0, "state-dir": str(tmp_path / "state")} | node_config
    with caplog.at_level(logging.WARNING, logger="fedgs.client.app"):
        code, reason = _refusal(_ask(node, RUN | run_config))
    assert code == ERROR_REFUSED and "this node's data cannot serve dataset" in reason, reason
    assert str(run_config.get("num-clients", run_config.get("dataset"))) in reason
    assert "private-folder" not in reason and "5000" not in reason  # the node's own facts
    assert logged in caplog.text  # its operator reads why on the node


def test_a_run_config_the_nodes_policy_cannot_apply_is_refused(untouched: Path) -> None:
    """Valid as the server sent it (GS-WGAN's own z-dim), not under a DataLens node's policy."""
    node = {"partition-id": 0, "state-dir": str(untouched), "policy-strategy": "datalens"}
    code, reason = _refusal(_ask(node, RUN | {"z-dim": 20}, fakes(8), datalens.QUERY))
    assert code == ERROR_REFUSED and "z-dim is implemented for gswgan only" in reason, reason


@pytest.mark.parametrize(
    "target",
    [
        "fedgs.privacy.sanitizer.add_discrete_gaussian",  # the noise source
        "fedgs.data.FederatedDataset.client_train",  # the data loader
    ],
)
def test_a_fault_inside_the_node_is_an_internal_error_that_quotes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, target: str
) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise ValueError("secret 0.123")

    node = {"partition-id": 0, "state-dir": str(tmp_path / "state")}
    with monkeypatch.context() as patched, caplog.at_level(logging.ERROR, "fedgs.client.app"):
        patched.setattr(target, fail)
        code, reason = _refusal(_ask(node, RUN))
    assert code == ERROR_INTERNAL, reason
    assert reason == "internal error on this node: ValueError (see the node's log)"
    assert "secret" not in reason and "0.123" not in reason
    assert "secret 0.123" in caplog.text and "Traceback" in caplog.text  # the node's log has it
    assert _answered(_ask(node, RUN))  # and the node goes on serving


def test_a_simulations_node_faults_reach_its_own_log_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One process serving two simulations in turn (as the tests and a notebook do): each run's
    log gets its own nodes' faults, not the next run's."""

    def fail(*args: object, **kwargs: object) -> None:
        raise ValueError("a fault")

    monkeypatch.setattr("fedgs.data.FederatedDataset.client_train", fail)
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    for n, log in enumerate(logs):
        node = {"partition-id": 0, "state-dir": str(tmp_path / f"state{n}")}
        app = build_client_app(RUN, log_file=log)
        assert _refusal(_ask(node, RUN, app=app))[0] == ERROR_INTERNAL
    first, second = (log.read_text() for log in logs)
    assert first.count("Traceback") == 1 and second.count("Traceback") == 1, (first, second)
    assert "fedgs.client.app ERROR: internal error serving train.gswgan" in second


# --- the default budget --------------------------------------------------------------------


def _epsilon(queries: int, sigma: float, batch: int) -> float:
    ledger = PrivacyLedger()
    for _ in range(queries):
        ledger.record_query("c", sigma, batch)
    return ledger.epsilon_untrusted("c", RunConfig.delta, RunConfig.accountant)


def _fits(config: RunConfig, nodes: int) -> float:
    """The untrusted-server epsilon of the busiest node (least-queried sampling: every node
    within one query of the others), checked against the default policy."""
    assert config.client_sampling == "least-queried"
    policy = NodePolicy.deployment_default()
    policy.check_values(config)
    policy.check_batch(config.batch_size)
    queries = math.ceil(config.steps * config.clients_per_step / nodes)
    epsilon = _epsilon(queries, config.noise_multiplier, config.batch_size)
    assert epsilon <= policy.epsilon_budget, (queries, epsilon)
    return epsilon


def test_the_default_budget_is_one_a_data_holder_can_defend() -> None:
    assert DEFAULT_EPSILON_BUDGET <= 10
    assert NodePolicy.deployment_default().epsilon_budget <= 10
    assert NodePolicy.from_node_config({"partition-id": 0}).epsilon_budget <= 10


def test_the_readme_deployment_examples_fit_the_default_budget() -> None:
    from fedgs.cli import build_parser
    from fedgs.deploy.cli import _local_run_config

    readme = (ROOT / "README.md").read_text()
    (local,) = re.findall(r"^fedgs deploy local --nodes .*$", readme, re.M)
    args = build_parser().parse_args(shlex.split(local)[1:])
    config = RunConfig.from_user_config(_local_run_config(args))
    epsilon = _fits(config, args.nodes)
    assert f"epsilon {epsilon:.2f} per node" in readme, epsilon

    (compose,) = re.findall(r"--run-config '(steps=[^']*)'", readme)
    values = dict(pair.split("=", 1) for pair in shlex.split(compose))
    config = RunConfig.from_user_config(values)
    epsilon = _fits(config, nodes=2)  # docker-compose.yml's data holders
    assert f"epsilon {epsilon:.2f} per node" in readme, epsilon


def test_a_run_past_the_default_budget_is_refused_naming_it(tmp_path: Path) -> None:
    """The paper's sigma at a default node: refused from the first query, with the budget in
    the reason the server's run stops with (server/silence.py)."""
    from fedgs.server.replies import StepOutcome
    from fedgs.server.silence import AnswerWatch, ClientsFailed

    node = {"partition-id": 0, "state-dir": str(tmp_path / "state")}
    code, reason = _refusal(_ask(node, RUN | {"noise-multiplier": 1.07}))
    assert code == ERROR_REFUSED and f"its budget of {DEFAULT_EPSILON_BUDGET:g}" in reason
    watch = AnswerWatch(limit=1)
    outcome = StepOutcome(sampled=1, dropped=1)
    outcome.drop(7, reason)
    with pytest.raises(ClientsFailed, match=r"would pass its budget of 10\b"):
        watch.record(1, outcome)


def test_deploy_local_pins_each_nodes_device_and_defaults_to_a_run_that_fits(
    tmp_path: Path,
) -> None:
    from fedgs.cli import build_parser
    from fedgs.deploy import topology
    from fedgs.deploy.cli import _local_run_config, local_options
    from fedgs.deploy.launcher import LocalDeployment

    parse = build_parser().parse_args
    args = parse(["deploy", "local", "--out", str(tmp_path), "--node-device", "cpu"])
    commands = LocalDeployment(tmp_path, local_options(args)).commands()
    for partition in range(args.nodes):
        argv = commands[topology.node_name(partition)]
        rendered = argv[argv.index("--node-config") + 1]
        assert 'device="cpu"' in rendered and "state-dir=" in rendered
    config = RunConfig.from_user_config(_local_run_config(args))
    _fits(config, args.nodes)
    teachers = parse(["deploy", "local", "--out", str(tmp_path), "--run-config",
                      "strategy='datalens'"])  # fmt: skip
    assert RunConfig.from_user_config(_local_run_config(teachers)).client_sampling == "uniform"


@pytest.mark.slow
def test_a_deployed_run_past_the_default_budget_stops_naming_it(tmp_path: Path) -> None:
    """`fedgs deploy local` with the nodes' default policy and the paper's sigma: the run
    stops and the operator's last line names the node's budget."""
    import subprocess
    import sys

    from deploy_support import SMALL

    run_config = SMALL | {"noise-multiplier": 1.07, "max-unanswered-steps": 2}
    done = subprocess.run(
        [sys.executable, "-m", "fedgs.cli", "deploy", "local", "--nodes", "1", "--steps", "4",
         "--run-config", " ".join(f"{k}={v}" for k, v in run_config.items()),
         "--out", str(tmp_path / "deployment")],
        capture_output=True, text=True, timeout=1200, start_new_session=True,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("fedgs deploy local: the run did not complete"), last
    assert "privacy budget exhausted" in last and "its budget of 10" in last, last
