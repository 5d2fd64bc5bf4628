"""Who shares secrets with whom: the SecAgg+ neighbour graph, recomputed by server and clients.

SecAgg+ (Bell et al., CCS 2020) replaces the complete graph of SecAgg (Bonawitz et al., CCS
2017) by a sparse regular one, so each client does O(degree) key agreements and shares instead
of O(cohort). Here the graph is a deterministic Harary graph over the sorted node ids: node i
is joined to the nodes i +- 1 .. i +- degree/2 (mod n) and, for an odd degree, to i + n/2. Both
sides compute it from the setup parameters, so a client can check the neighbours it is given.
It is not the random graph of Bell et al.: whoever picks the cohort's ids picks the graph, so
its guarantee against clients colluding with the server rests on the threshold alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from fedgs.secagg.errors import SecAggError


def neighbour_count(cohort_size: int, degree: int) -> int:
    """How many neighbours each client has: ``degree``, or everyone else for a larger one."""
    return min(degree, cohort_size - 1)


def neighbour_graph(cohort: Sequence[int], degree: int) -> dict[int, tuple[int, ...]]:
    """Each node id -> its neighbours (sorted, never itself); complete when degree >= n - 1."""
    ids = checked_ids(cohort, degree)
    return {node: _neighbours(ids, degree, i) for i, node in enumerate(ids)}


def neighbours_of(cohort: Sequence[int], degree: int, node: int) -> tuple[int, ...]:
    """The neighbours of ``node`` alone, as in :func:`neighbour_graph` (O(n), not O(n^2))."""
    ids = checked_ids(cohort, degree)
    if node not in ids:
        raise SecAggError(f"node {node} is not in the cohort")
    return _neighbours(ids, degree, ids.index(node))


def check_degree(n: int, degree: int) -> None:
    """SecAggError unless a ``degree``-regular graph joins ``n`` nodes: arithmetic only, so a
    node can check a run config's cohort size without building anything of that size."""
    if degree < 2:
        raise SecAggError(f"the neighbour degree must be at least 2, got {degree}")
    if degree < n - 1 and degree * n % 2:
        raise SecAggError(f"no {degree}-regular graph on {n} nodes: make degree or cohort even")


def checked_ids(cohort: Sequence[int], degree: int) -> list[int]:
    """The cohort's ids sorted; SecAggError unless a ``degree``-regular graph joins them."""
    ids = sorted(cohort)
    if len(set(ids)) != len(ids):
        raise SecAggError("the cohort lists a node id twice")
    check_degree(len(ids), degree)
    return ids


def _neighbours(ids: list[int], degree: int, i: int) -> tuple[int, ...]:
    """The neighbours of ``ids[i]`` in the graph of the sorted, checked ``ids``."""
    n, node = len(ids), ids[i]
    if degree >= n - 1:
        return tuple(other for other in ids if other != node)
    offsets = [k for o in range(1, degree // 2 + 1) for k in (o, -o)]
    if degree % 2:
        offsets.append(n // 2)
    return tuple(sorted(ids[(i + offset) % n] for offset in offsets))
