"""Shared test set-up: the two tiers of the suite, one cache folder per session, and gRPC's fork
handlers off in this process, which starts Ray in-process (fedgs.simulations.simulate says why;
the processes tests start inherit the setting, and the deployment's pass with it as without).

Tiers: a plain ``python -m pytest -q`` runs the fast tier, every test not marked ``slow`` (the
developer loop; real Flower simulations and a real ``fedgs deploy local`` run among them). The
slow tier, the end-to-end runs marked ``slow``, runs with ``python -m pytest -q -m slow`` (CI's
second step); ``--all`` runs both, any ``-m EXPRESSION`` selects as usual, and a test file named
on the command line (``python -m pytest -q tests/test_deploy_local.py``) runs whole.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fedgs.simulations.simulate import grpc_fork_handlers_off

grpc_fork_handlers_off()  # before any test module loads gRPC (through flwr or ray)

SLOW_TIER = "python -m pytest -q -m slow"
_LEFT_OUT = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--all",
        action="store_true",
        dest="fedgs_all",
        help="run the slow tier (tests marked slow) as well as the fast one: the whole suite",
    )


def _named_files(config: pytest.Config) -> set[Path]:
    """Test files named on the command line (a file or a test in it, not a folder)."""
    if config.args_source is not pytest.Config.ArgsSource.ARGS:
        return set()
    named = set()
    for arg in config.args:
        path = (config.invocation_params.dir / arg.split("::")[0]).resolve()
        if path.is_file():
            named.add(path)
    return named


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave the slow tier out unless it was asked for (-m, --all, or its file named)."""
    if config.option.markexpr or config.getoption("fedgs_all"):
        return
    named = _named_files(config)
    slow = [item for item in items if item.get_closest_marker("slow") and item.path not in named]
    if slow:
        left_out = {id(item) for item in slow}
        items[:] = [item for item in items if id(item) not in left_out]
        config.hook.pytest_deselected(items=slow)
        config.stash[_LEFT_OUT] = len(slow)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    left_out = config.stash.get(_LEFT_OUT, 0)
    if left_out:
        terminalreporter.write_line(
            f"fast tier: {left_out} slow tests not run; `{SLOW_TIER}` runs them, --all runs both"
        )


@pytest.fixture(scope="session", autouse=True)
def _fedgs_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Datasets and domain classifiers are cached under FEDGS_CACHE; CI sets it, else a temp dir.

    Subprocesses started by tests inherit it, so a dataset decoded once serves the whole session.
    """
    if "FEDGS_CACHE" not in os.environ:
        os.environ["FEDGS_CACHE"] = str(tmp_path_factory.mktemp("fedgs-cache"))
