"""The parameters of one SecAgg+ step, fixed by the server at setup and checked by each client.

A frozen, validated dataclass with a plain-dict form: the setup message carries it, and the
client keeps it in its state, so both ends agree on every quantity the masks depend on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from fedgs.secagg import messages as m
from fedgs.secagg.graph import checked_ids, neighbour_count, neighbour_graph, neighbours_of

MAX_MODULUS_BITS = 62
MAX_STEP = 2**63 - 1


@dataclass(frozen=True)
class SecAggParams:
    """One step of SecAgg+: who takes part, the modulus, the threshold and the graph.

    - ``step``: the step's number, bound into every encrypted share (no replay across steps).
    - ``cohort``: the node ids asked to take part, sorted.
    - ``modulus_bits``: k; inputs and the sum live in Z_{2^k}, k <= 62.
    - ``threshold``: t, shares needed to rebuild a secret; 2 <= t <= neighbours and 2t > the
      neighbour count, so the server cannot get t seed shares and t key shares of one client
      from two disjoint halves of its neighbours.
    - ``min_survivors``: m_min, the fewest clients whose inputs a released sum may cover.
    - ``vector_length``: the length of every input vector.
    - ``degree``: neighbours per client in the Harary graph; cohort - 1 or more: complete.
    """

    step: int
    cohort: tuple[int, ...]
    modulus_bits: int
    threshold: int
    min_survivors: int
    vector_length: int
    degree: int

    def __post_init__(self) -> None:
        m.integer(self.step, "step", 0, MAX_STEP)
        if not isinstance(self.cohort, tuple):
            raise m.SecAggError("the cohort must be a tuple of node ids")
        cohort = m.id_list(self.cohort, "cohort")
        if cohort != sorted(cohort) or len(cohort) < 3:
            raise m.SecAggError("the cohort must list at least 3 node ids, sorted")
        m.integer(self.modulus_bits, "modulus_bits", 1, MAX_MODULUS_BITS)
        m.integer(self.vector_length, "vector_length", 1, 2**31)
        m.integer(self.degree, "degree", 2, 2**31)
        checked_ids(cohort, self.degree)  # raises if no such regular graph exists
        d = self.neighbours_per_client
        m.integer(self.threshold, "threshold", d // 2 + 1, d)  # >= 2 as d >= 2
        m.integer(self.min_survivors, "min_survivors", 2, len(cohort))

    @property
    def neighbours_per_client(self) -> int:
        """How many neighbours each client shares its secrets with."""
        return neighbour_count(len(self.cohort), self.degree)

    def graph(self) -> dict[int, tuple[int, ...]]:
        """Each node id -> its neighbours."""
        return neighbour_graph(self.cohort, self.degree)

    def neighbours(self, node: int) -> tuple[int, ...]:
        """The neighbours of ``node`` alone (what a client needs): ``graph()[node]``."""
        return neighbours_of(self.cohort, self.degree, node)

    def to_dict(self) -> dict[str, int | list[int]]:
        """The parameters as plain ints and a list of ints."""
        values = asdict(self)
        values["cohort"] = list(self.cohort)
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, object]) -> SecAggParams:
        """The parameters from :meth:`to_dict`'s form; SecAggError if anything is off."""
        values = m.fields(values, None, set(cls.__dataclass_fields__))
        cohort = values["cohort"]
        if not isinstance(cohort, (list, tuple)):
            raise m.SecAggError("the cohort must be a list of node ids")
        return cls(**{**values, "cohort": tuple(cohort)})  # type: ignore[arg-type]
