"""SecAgg+ parameters and neighbour graph: validation, the plain-dict form, the Harary graph."""

from __future__ import annotations

import pytest

from fedgs.secagg import SecAggError, SecAggParams, neighbour_graph
from fedgs.secagg.graph import neighbours_of

GOOD = dict(
    step=3,
    cohort=(4, 9, 20, 31, 40, 52),
    modulus_bits=32,
    threshold=3,
    min_survivors=3,
    vector_length=10,
    degree=5,
)


@pytest.mark.parametrize("n,degree", [(10, 2), (10, 4), (10, 3), (9, 4), (12, 7), (7, 6), (7, 50)])
def test_the_graph_is_regular_symmetric_and_loop_free(n: int, degree: int) -> None:
    ids = [1000 - 7 * i for i in range(n)]  # unsorted on purpose
    graph = neighbour_graph(ids, degree)
    assert set(graph) == set(ids)
    for node, peers in graph.items():
        assert len(peers) == min(degree, n - 1) == len(set(peers))
        assert node not in peers and list(peers) == sorted(peers)
        assert all(node in graph[peer] for peer in peers)
    assert graph == neighbour_graph(sorted(ids), degree)  # a function of the set of ids
    for node in ids:  # what a client computes alone is its row of the server's graph
        assert neighbours_of(ids, degree, node) == graph[node]
    with pytest.raises(SecAggError, match="not in the cohort"):
        neighbours_of(ids, degree, 5)


def test_impossible_graphs_are_refused() -> None:
    with pytest.raises(SecAggError, match="regular"):
        neighbour_graph(range(9), 3)
    with pytest.raises(SecAggError, match="at least 2"):
        neighbour_graph(range(9), 1)
    with pytest.raises(SecAggError, match="twice"):
        neighbour_graph([1, 1, 2, 3], 2)


def test_params_round_trip_through_plain_values() -> None:
    params = SecAggParams(**GOOD)
    plain = params.to_dict()
    assert plain["cohort"] == list(GOOD["cohort"])
    assert all(type(v) is int or type(v) is list for v in plain.values())
    assert SecAggParams.from_dict(plain) == params
    assert params.neighbours_per_client == 5
    assert params.graph() == neighbour_graph(GOOD["cohort"], 5)
    assert all(params.neighbours(v) == params.graph()[v] for v in params.cohort)


@pytest.mark.parametrize(
    "change",
    [
        {"step": -1},
        {"cohort": [4, 9, 20, 31, 40, 52]},  # a list, not a tuple
        {"cohort": (9, 4, 20, 31, 40, 52)},  # not sorted
        {"cohort": (4, 9)},
        {"cohort": (4, 9, 9, 31)},
        {"cohort": (4, 9, 2**64)},
        {"modulus_bits": 63},
        {"modulus_bits": 0},
        {"modulus_bits": True},
        {"threshold": 2},  # 2t <= 5 neighbours: two disjoint halves could rebuild both secrets
        {"threshold": 6},  # more than the neighbours
        {"min_survivors": 1},
        {"min_survivors": 7},
        {"vector_length": 0},
        {"degree": 1},
        {"degree": 3.0},
        {"cohort": (1, 2, 3, 4, 5, 6, 7), "degree": 3},  # no 3-regular graph on 7 nodes
    ],
)
def test_bad_params_are_refused(change: dict) -> None:
    with pytest.raises(SecAggError):
        SecAggParams(**(GOOD | change))


def test_from_dict_wants_exactly_the_fields() -> None:
    plain = SecAggParams(**GOOD).to_dict()
    with pytest.raises(SecAggError):
        SecAggParams.from_dict({**plain, "extra": 1})
    with pytest.raises(SecAggError):
        SecAggParams.from_dict({k: v for k, v in plain.items() if k != "degree"})
    with pytest.raises(SecAggError):
        SecAggParams.from_dict({**plain, "cohort": "4,9,20"})
