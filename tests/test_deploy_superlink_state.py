"""Where a local deployment's SuperLink keeps its state: its SQLite file, or (for measurement
only) Flower's in-memory LinkState."""

from __future__ import annotations

from pathlib import Path

from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME

from fedgs.deploy import topology
from fedgs.deploy.launcher import LocalDeployment, LocalOptions


def _database(out: Path, options: LocalOptions) -> str:
    args = LocalDeployment(out, options).commands()[topology.SUPERLINK]
    return args[args.index("--database") + 1]


def test_in_memory_name_is_flowers() -> None:
    assert topology.IN_MEMORY_DATABASE == FLWR_IN_MEMORY_DB_NAME


def test_superlink_state_on_disk_unless_asked(tmp_path: Path) -> None:
    assert _database(tmp_path, LocalOptions(nodes=2)) == str(tmp_path / "superlink.db")
    in_memory = LocalOptions(nodes=2, in_memory_state=True)
    assert _database(tmp_path, in_memory) == FLWR_IN_MEMORY_DB_NAME
