"""`fedgs deploy local` options that shape every process's environment, checked without
starting a deployment: torch threads per process, and the warm SuperExecs' task polls."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fedgs.cli import main
from fedgs.deploy import doorbell, topology
from fedgs.deploy.launcher import LocalDeployment, LocalOptions


def test_threads_set_each_process_s_torch_threads(tmp_path: Path) -> None:
    assert LocalDeployment(tmp_path, LocalOptions(threads=2)).env()["OMP_NUM_THREADS"] == "2"
    inherited = LocalDeployment(tmp_path, LocalOptions(threads=0)).env()
    assert inherited.get("OMP_NUM_THREADS") == os.environ.get("OMP_NUM_THREADS")
    with pytest.raises(ValueError, match="threads"):
        LocalOptions(threads=-1)


def test_negative_threads_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    argv = ["deploy", "local", "--threads", "-1", "--steps", "1", "--out", str(tmp_path / "d")]
    assert main(argv) == 2
    assert "threads must be 0" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()  # refused before anything starts


def test_only_a_warm_deployment_without_doorbells_polls_for_tasks_every_50_ms(
    tmp_path: Path,
) -> None:
    executor = topology.executor_name(0)
    polling = LocalDeployment(tmp_path, LocalOptions(doorbell=False)).env(executor)
    ringing = LocalDeployment(tmp_path, LocalOptions()).env(executor)
    cold = LocalDeployment(tmp_path, LocalOptions(warm=False)).env(executor)
    for key, value in topology.WARM_EXECUTOR_ENV.items():
        assert polling[key] == value
        assert cold.get(key) is None  # Flower's default (1 s), as --cold promises
        # with doorbells, Flower's 1 s is only the fallback (tests/test_deploy_doorbell.py)
        assert ringing.get(key) == (None if doorbell.available() else value)


def test_data_dir_is_every_nodes_node_config_and_the_servers_default(tmp_path: Path) -> None:
    """`--data-dir` puts the folder in each node's node config (a node never reads the run
    config's) and, unless the run config names another, in the run config for the server."""
    from flwr.common.config import parse_config_args

    from fedgs.cli import build_parser
    from fedgs.deploy.cli import _local_run_config, local_options

    data = tmp_path / "data"
    data.mkdir()
    argv = ["deploy", "local", "--out", str(tmp_path / "d"), "--data-dir", str(data)]
    args = build_parser().parse_args(argv)
    commands = LocalDeployment(tmp_path / "d", local_options(args)).commands()
    for i in range(args.nodes):
        argv = commands[topology.node_name(i)]
        config = parse_config_args([argv[argv.index("--node-config") + 1]])
        assert config["data-dir"] == str(data), config
    assert _local_run_config(args)["data-dir"] == str(data)
    args.run_config = "data-dir='/srv/server-copy'"
    assert _local_run_config(args)["data-dir"] == "/srv/server-copy"
    args.data_dir = None  # a run config's data-dir alone would reach no node
    with pytest.raises(ValueError, match="no node reads: give the nodes' folder with --data-dir"):
        _local_run_config(args)
    with pytest.raises(ValueError, match="no such folder"):
        LocalOptions(data_dir=str(tmp_path / "missing"))
