"""The --target-epsilon stop counts what the reported epsilon counts (issue 40).

A query to a node whose client the server does not know yet stays unattributed when its reply is
lost (a timeout, a crash), and the report counts it for every client. Every outcome of the next
step is enumerated here (which nodes the rule may ask, which of the unknown ones never answer):
when the stop lets the step go, no outcome takes the reported epsilon past the target.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from dp_accounting import dp_event
from privacy_boundary_server_apps import SMALL

from fedgs.privacy import PrivacyLedger, gswgan_query_event
from fedgs.privacy.client_ledger import ClientLedger
from fedgs.run_config import RunConfig
from fedgs.server.datalens_run import DataLensRun
from fedgs.server.federated_run import FederatedRun
from fedgs.server.gswgan_run import GSWGANRun
from fedgs.server.replies import NodeIdentities

NODES = [1, 2, 3, 4, 5]
KNOWN = {1: "writer-1", 2: "writer-2"}  # nodes 3-5 never answered: their clients are unknown
PAID = {1: 2, 2: 1, 3: 1}  # queries sent so far; node 3's reply was lost (unattributed)


def _epsilons(config: RunConfig, event: dp_event.DpEvent, most: int) -> list[float]:
    """Epsilon of 1..most charges of ``event`` to one client."""
    ledger = PrivacyLedger()
    found = []
    for _ in range(most):
        ledger.record("one", event)
        found.append(ledger.epsilon("one", config.delta, config.accountant))
    return found


def _targets(config: RunConfig, event: dp_event.DpEvent) -> list[float]:
    """Targets between k and k + 1 charges' epsilon, k = 1..7."""
    epsilons = _epsilons(config, event, 8)
    return [(low + high) / 2 for low, high in itertools.pairwise(epsilons)]


def _charge_history(ledger: ClientLedger, identities: NodeIdentities, event: dp_event.DpEvent):
    for node, paid in PAID.items():
        for _ in range(paid):
            client = identities.client_of(node)
            if client is None:
                ledger.record_unattributed(identities.label(node), event)
            else:
                ledger.record(client, event)


def _reported_after(
    run: FederatedRun, event: dp_event.DpEvent, chosen: tuple[int, ...], lost: set[int]
) -> float:
    """The run's reported epsilon after a step that asked ``chosen``, the replies of the
    unknown nodes in ``lost`` never arriving (the others name a new client each)."""
    probe = type(run.ledger).from_json(run.ledger.to_json())
    for node in chosen:
        client = run.identities.client_of(node)
        if client is not None:
            probe.record(client, event)
        else:
            probe.record_unattributed(run.identities.label(node), event)
            if node not in lost:
                probe.attribute(run.identities.label(node), f"new-{node}")
    return probe.epsilon_max(run.config.delta, run.config.accountant)[0]


def _outcomes(
    run: FederatedRun, event: dp_event.DpEvent, choices: Iterator[tuple[int, ...]]
) -> Iterator[float]:
    for chosen in choices:
        unknown = [n for n in chosen if run.identities.client_of(n) is None]
        for size in range(len(unknown) + 1):
            for lost in itertools.combinations(unknown, size):
                yield _reported_after(run, event, chosen, set(lost))


def _check_every_target(
    run: FederatedRun,
    event: dp_event.DpEvent,
    choices: Callable[[], Iterator[tuple[int, ...]]],
    exact: bool,
) -> list[bool]:
    """For each target: the stop's answer; a step it allows never passes the target (and with
    ``exact`` a step it stops could)."""
    grid = SimpleNamespace(get_node_ids=lambda: list(NODES))
    worst = max(_outcomes(run, event, choices()))
    answers = []
    for target in _targets(run.config, event):
        run.config = run.config.with_updates(target_epsilon=target)
        stops = run.would_pass_target(grid)  # type: ignore[arg-type]
        assert stops or worst <= target, f"target {target}: a step could report {worst}"
        if exact:
            assert not stops or worst > target, f"target {target}: stopped, worst {worst}"
        answers.append(stops)
    return answers


def _gswgan_run(tmp_path: Path, rule: str, known: dict[int, str]) -> GSWGANRun:
    settings = {"run-dir": str(tmp_path / rule), "clients-per-step": 2, "client-sampling": rule}
    run = GSWGANRun(RunConfig.from_user_config(SMALL, settings))
    run.identities._clients = dict(known)
    return run


@pytest.mark.parametrize("known", [KNOWN, {}], ids=["some-known", "none-known"])
def test_uniform_sampling_stops_before_lost_replies_pass_the_target(
    tmp_path: Path, known: dict[int, str]
) -> None:
    """Uniform sampling may ask any 2 of the 5 nodes: the stop is the worst of those draws,
    exactly (the secret draw itself never decides it)."""
    run = _gswgan_run(tmp_path, "uniform", known)
    query = gswgan_query_event(run.config.noise_multiplier, run.config.batch_size)
    _charge_history(run.ledger, run.identities, query)
    answers = _check_every_target(run, query, lambda: itertools.combinations(NODES, 2), exact=True)
    assert answers[0] and not answers[-1]  # the targets straddle the stop


def test_least_queried_sampling_stops_before_lost_replies_pass_the_target(tmp_path: Path) -> None:
    """Least-queried sampling asks the 2 nodes that paid least (any of a tie): the stop covers
    every such choice with the unknown nodes' replies lost."""
    run = _gswgan_run(tmp_path, "least-queried", KNOWN)
    query = gswgan_query_event(run.config.noise_multiplier, run.config.batch_size)
    _charge_history(run.ledger, run.identities, query)
    paid = dict(zip(NODES, run.strategy._paid(NODES), strict=True))

    def choices() -> Iterator[tuple[int, ...]]:
        for chosen in itertools.combinations(NODES, 2):
            rest = [paid[n] for n in NODES if n not in chosen]
            if max(paid[n] for n in chosen) <= min(rest):
                yield chosen

    answers = _check_every_target(run, query, choices, exact=False)
    assert answers[0] and not answers[-1]


def test_teacher_runs_stop_before_lost_replies_pass_the_target(tmp_path: Path) -> None:
    """DataLens asks 2 of the 5 nodes uniformly: lost votes of unknown nodes count for every
    client in its report, so in its stop too."""
    settings = {
        "strategy": "datalens",
        "run-dir": str(tmp_path),
        "warm-start-steps": 0,
        "teachers-per-step": 2,
        "datalens-top-k": 20,
        "datalens-noise-std": 1.0,
    }
    run = DataLensRun(RunConfig.from_user_config(SMALL, settings))
    run.identities._clients = dict(KNOWN)
    step = run.step_event()
    _charge_history(run.ledger, run.identities, step)
    answers = _check_every_target(run, step, lambda: itertools.combinations(NODES, 2), exact=True)
    assert answers[0] and not answers[-1]


@pytest.mark.slow
def test_a_run_losing_replies_stops_before_its_report_passes_the_target(tmp_path: Path) -> None:
    """4 clients, one asked per step (uniform), the replies of 2 nodes always lost, a target
    between 3 and 4 queries' epsilon. The report counts every lost query for every client; the
    stop that left them out ran all 10 steps to a reported epsilon of ~10 queries."""
    from flower_apps import simulate
    from lossy_apps import losing_server_app

    from fedgs.client.app import build_client_app

    settings = {
        "run-dir": str(tmp_path),
        "steps": 10,
        "checkpoint-every": 100,
        "clients-per-step": 1,
        "warm-start-steps": 0,
        "sampling-seed": 3,
        "reply-timeout": 15,  # the identification waits this long for the silent nodes
    }
    config = RunConfig.from_user_config(SMALL, settings)
    query = gswgan_query_event(config.noise_multiplier, config.batch_size)
    three, four = _epsilons(config, query, 4)[2:]
    config = config.with_updates(target_epsilon=(three + four) / 2)
    simulate(losing_server_app(config, silent=2), build_client_app(config.to_user_config()), 4)
    privacy = json.loads((tmp_path / "privacy.json").read_text())
    queries = privacy["queries"]
    assert queries["unattributed"] >= 1 and queries["outcomes"]["no-reply"] >= 1
    assert privacy["steps"] < 10  # stopped
    assert privacy["untrusted_server"]["epsilon"] <= config.target_epsilon
    # privacy.json shows what the server's ledger holds at the end
    ledger = PrivacyLedger.from_json((tmp_path / "ledger.json").read_text())
    assert ledger.epsilon_max(config.delta, config.accountant)[0] == pytest.approx(
        privacy["untrusted_server"]["epsilon"]
    )
    # the trusted-sampler figure of the same run: never above the untrusted-server one
    trusted = privacy["trusted_sampler"]
    assert trusted["epsilon"] <= privacy["untrusted_server"]["epsilon"]
    assert trusted["epsilon"] == min(trusted["bounds"].values())
    assert trusted["computed_at_step"] == privacy["steps"]


def test_fedavg_stop_prices_the_next_round_at_the_nodes_there_now(tmp_path: Path) -> None:
    """Fed-Avg GAN pays a round when it is sent, replies or not: the stop adds one round at
    q = m / K of the grid's nodes now, the nodes the round samples from (it took the last
    round's K, and K = 1 before the first round; the Poisson bound is not monotone in q)."""
    from fedgs.privacy import FedAvgLedger
    from fedgs.server.fedavg_gan_run import FedAvgGANRun

    settings = {
        "strategy": "fedavg-gan",
        "run-dir": str(tmp_path),
        "warm-start-steps": 0,
        "fedavg-models": "gswgan",
        "fedavg-clients-per-round": 2,
        "fedavg-noise-multiplier": 1.0,
    }
    run = FedAvgGANRun(RunConfig.from_user_config(SMALL, settings))
    c = run.config

    def after(populations: list[int]) -> float:
        ledger = FedAvgLedger(c.fedavg_noise_multiplier)
        for population in populations:
            ledger.record_round(2, population)
        return ledger.epsilon(c.delta, c.accountant)

    def stops(nodes: list[int], target: float) -> bool:
        run.config = c.with_updates(target_epsilon=target)
        return run.would_pass_target(SimpleNamespace(get_node_ids=lambda: nodes))  # type: ignore[arg-type]

    for rounds in ([], [5]):  # before the first round, and after one round over 5 nodes
        run.ledger = FedAvgLedger(c.fedavg_noise_multiplier)
        for population in rounds:
            run.ledger.record_round(2, population)
        for nodes in (NODES, NODES[:3]):  # nodes left: q = 2/3
            expected = after([*rounds, len(nodes)])
            assert stops(nodes, expected * 0.999) and not stops(nodes, expected * 1.001)
