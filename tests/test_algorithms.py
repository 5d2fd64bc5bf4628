"""The algorithm registry is the one place strategies are named (issue 19): every layer that
serves, drives or reports a strategy reads its entry, and an unknown name fails clearly."""

from __future__ import annotations

import pytest

from fedgs.algorithms import ALGORITHMS, IDENTIFY, STRATEGIES, WARM_START, algorithm
from fedgs.client import gate
from fedgs.privacy.policy import NodePolicy
from fedgs.privacy.threat_models import NEIGHBOURING, THREAT_MODELS, UNTRUSTED_SERVER
from fedgs.protocols.secagg import SECAGG
from fedgs.run_config import RunConfig
from fedgs.server.federated_run import FederatedRun


@pytest.mark.parametrize("name", STRATEGIES)
def test_every_entry_is_served_driven_and_reported(name: str) -> None:
    entry = algorithm(name)
    assert issubclass(entry.run_class(), FederatedRun)  # the server drives it
    assert entry.query in gate.HANDLERS  # a client session answers its query
    assert gate.QUERIES[entry.query] is entry
    # the gate checks the batch of every fake-batch record; dp-merf's query carries none
    assert entry.batch_records or name == "dp-merf"
    served = gate.allowed_message_types(NodePolicy.deployment_default(name))
    secure = (SECAGG,) if entry.query in gate.SECURE_QUERIES else ()
    warm = (WARM_START,) if entry.warm_started else ()
    assert served == (entry.query, IDENTIFY, *warm, *secure)
    assert entry.threat_model in THREAT_MODELS and entry.neighbouring in NEIGHBOURING
    assert entry.noise_key.replace("-", "_") in RunConfig.__dataclass_fields__
    assert all(k.replace("-", "_") in RunConfig.__dataclass_fields__ for k in entry.own_options)
    assert RunConfig(strategy=name).strategy == name
    budget = NodePolicy.deployment_default(name).epsilon_budget
    assert (budget > 0) == (entry.threat_model == UNTRUSTED_SERVER)
    cost = entry.update_bytes_of(RunConfig(strategy=name))  # the communication table's column
    assert cost is not None and cost["down"] > 0 and cost["up"] > 0


def test_message_types_are_distinct_and_the_warm_start_is_shared() -> None:
    queries = [a.query for a in ALGORITHMS.values()]
    assert len(set(queries)) == len(queries) and not {WARM_START, IDENTIFY} & set(queries)
    assert set(gate.MESSAGE_TYPES) == {*queries, WARM_START, IDENTIFY, SECAGG}
    # the SecAgg+ stages: the queries of the strategies whose entry names a cohort key
    assert set(gate.SECURE_QUERIES) == {a.query for a in ALGORITHMS.values() if a.secure}
    secure = ("gswgan", "fedavg-gan", "dp-merf")
    assert gate.SECURE_QUERIES == tuple(algorithm(name).query for name in secure)


def test_an_unknown_strategy_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown strategy 'gan2'.*gswgan, fedavg-gan"):
        algorithm("gan2")
    with pytest.raises(ValueError, match="unknown strategy"):
        RunConfig(strategy="gan2")


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("public_pretrain_steps", 10),
        ("client_sampling", "least-queried"),
        ("diversity_weight", 1.0),
        ("z_dim", 32),
        ("client_code_dims", 5),
        ("label_mismatch_until", 100),
        ("fake_batches", 2),
    ],
)
def test_a_key_gswgan_owns_is_refused_under_other_strategies(key: str, value: object) -> None:
    assert getattr(RunConfig(strategy="gswgan", **{key: value}), key) == value
    for other in STRATEGIES:
        if other != "gswgan":
            with pytest.raises(ValueError, match=f"implemented for gswgan only, not '{other}'"):
                RunConfig(strategy=other, **{key: value})
