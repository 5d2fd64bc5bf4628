"""Where a local deployment's SuperLink keeps its state: Flower's in-memory LinkState by
default, its SQLite file in the deployment directory when asked (``--superlink-state file``)."""

from __future__ import annotations

from pathlib import Path

from flwr.supercore.constant import FLWR_IN_MEMORY_DB_NAME

from fedgs.cli import build_parser
from fedgs.deploy import topology
from fedgs.deploy.cli import local_options
from fedgs.deploy.launcher import LocalDeployment, LocalOptions


def _database(out: Path, options: LocalOptions) -> str:
    args = LocalDeployment(out, options).commands()[topology.SUPERLINK]
    return args[args.index("--database") + 1]


def test_in_memory_name_is_flowers() -> None:
    assert topology.IN_MEMORY_DATABASE == FLWR_IN_MEMORY_DB_NAME


def test_superlink_state_in_memory_unless_asked(tmp_path: Path) -> None:
    assert _database(tmp_path, LocalOptions(nodes=2)) == FLWR_IN_MEMORY_DB_NAME
    on_disk = LocalOptions(nodes=2, in_memory_state=False)
    assert _database(tmp_path, on_disk) == str(tmp_path / "superlink.db")


def test_cli_flag_selects_the_state(tmp_path: Path) -> None:
    def options(*extra: str) -> LocalOptions:
        return local_options(build_parser().parse_args(["deploy", "local", "--out", "x", *extra]))

    assert options().in_memory_state
    assert not options("--superlink-state", "file").in_memory_state
