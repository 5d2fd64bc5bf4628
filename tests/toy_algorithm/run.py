"""The toy run: the shared loop (``FederatedRun`` through ``TeacherRun``) with the toy strategy.

Its ledger (``teacher_ledger.json``), privacy.json (the shared writer, ``write_privacy``),
checkpoints and generator come from the shared loop; the run names only its mechanism."""

from typing import Any

from fedgs.server.datalens_run import DataLensRun
from toy_algorithm.strategy import ToyStrategy


class ToyRun(DataLensRun):
    name = "Toy"
    strategy_class = ToyStrategy

    def mechanism(self) -> dict[str, Any]:
        return super().mechanism() | {"name": "toy: DataLens TopAgg under another name"}
