"""The run config: one set of keys for Flower's --run-config, pyproject and `fedgs simulate`."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from fedgs.cli import build_parser
from fedgs.run_config import RunConfig

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_flower_config_mirrors_run_config_defaults() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    flower = pyproject["tool"]["flwr"]["app"]
    defaults = RunConfig().to_user_config()
    assert flower["config"] == defaults  # every key of each is a key of the other, same default
    # of the same TOML type too (an int default written 1.0 would compare equal above); the
    # table's text and grouping: tests/test_options_reference.py
    assert {k: type(v) for k, v in flower["config"].items()} == {
        k: type(v) for k, v in defaults.items()
    }
    assert flower["components"] == {
        "serverapp": "fedgs.server.app:app",
        "clientapp": "fedgs.client.app:app",
    }


def test_layers_merge_in_order_and_coerce_types() -> None:
    config = RunConfig.from_user_config(
        {"steps": 10, "noise-multiplier": 2}, {"steps": "20", "resume": "true", "partition-id": 3}
    )
    assert config.steps == 20 and config.noise_multiplier == 2.0 and config.resume is True
    assert RunConfig.from_user_config(config.to_user_config()) == config


@pytest.mark.parametrize("layer", [{"stepz": 1}, {"steps": "many"}, {"resume": "maybe"}])
def test_bad_keys_and_values_are_named(layer: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(layer))):
        RunConfig.from_user_config(layer)


def test_simulate_options_cover_every_run_config_key() -> None:
    args = build_parser().parse_args(["simulate", "--steps", "7", "--clients", "12", "--out", "x"])
    assert args.steps == 7 and args.num_clients == 12 and args.run_dir == "x"
    for key in RunConfig().to_user_config():
        assert hasattr(args, key.replace("-", "_")), key


def test_simulate_names_bad_data_without_a_traceback(tmp_path: Path, capsys) -> None:
    from fedgs.cli import main

    missing = tmp_path / "no-such-folder"
    code = main(["simulate", "--dataset", "femnist", "--data-dir", str(missing),
                 "--out", str(tmp_path / "run")])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 2 and out.startswith("fedgs simulate: error:") and str(missing) in out
    assert not (tmp_path / "run").exists()  # refused before anything was started or written


def test_ray_address_needs_an_absolute_state_dir_and_a_head_address() -> None:
    """A cluster runs each client on any node: without one shared state dir its ledger forks."""
    assert RunConfig().ray_address == ""
    RunConfig(ray_address="auto", state_dir="/shared/state")
    RunConfig(ray_address="10.0.0.5:6379", state_dir="/shared/state")
    for state_dir in ("", "runs/state"):
        with pytest.raises(ValueError, match="ray-address needs state-dir"):
            RunConfig(ray_address="10.0.0.5:6379", state_dir=state_dir)
    for address in ("ray://10.0.0.5:10001", "10.0.0.5", "host:port"):
        with pytest.raises(ValueError, match="ray-address must be HOST:PORT"):
            RunConfig(ray_address=address, state_dir="/shared/state")


def test_ray_address_joins_without_sizing_the_cluster(tmp_path: Path, capsys) -> None:
    from fedgs.cli import main
    from fedgs.simulations.simulate import EngineOptions, backend_config

    joined = backend_config(EngineOptions(), 0.0, "127.0.0.1:6379")["init_args"]
    assert joined == {"log_to_driver": False, "address": "127.0.0.1:6379"}
    local = backend_config(EngineOptions(ray_cpus=2))["init_args"]
    assert local["num_cpus"] == 2 and "address" not in local
    with pytest.raises(ValueError, match="object-store-mb size a local Ray"):
        backend_config(EngineOptions(object_store_mb=256), 0.0, "auto")

    run = ["simulate", "--ray-address", "127.0.0.1:1", "--out", str(tmp_path / "run")]
    assert main([*run, "--state-dir", "state"]) == 2
    assert "ray-address needs state-dir: an absolute path" in capsys.readouterr().out
    assert main([*run, "--state-dir", str(tmp_path), "--ray-cpus", "2"]) == 2
    assert "ray-cpus size a local Ray" in capsys.readouterr().out
    assert not (tmp_path / "run").exists()  # refused before Ray or anything else started
