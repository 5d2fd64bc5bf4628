"""``fedgs data``: text and JSON summaries, exit code 2 on bad data."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

from fedgs.data.cli import register

KEYS = {"num_clients", "num_train_images", "num_test_images", "num_classes", "train_counts"}


@pytest.fixture(autouse=True)
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("FEDGS_CACHE", str(tmp_path_factory.getbasetemp() / "fedgs-cli-cache"))


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fedgs")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


def test_json_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["data", "--dataset", "embedded", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert KEYS <= set(out)
    assert out["num_clients"] == 50 and out["num_classes"] == 10
    assert out["num_train_images"] == sum(out["train_counts"].values()) == 4500
    assert out["num_test_images"] == 500


def test_text_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["data", "--clients", "20"]) == 0
    out = capsys.readouterr().out
    assert "clients            20" in out and "min 225 / median 225 / max 225" in out


def test_data_error_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert run(["data", "--dataset", "femnist", "--data-dir", str(tmp_path / "none")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "does not exist" in captured.err


@pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("fedgs.privacy.cli", "fedgs.training.cli")),
    reason="fedgs.cli also needs fedgs.privacy.cli and fedgs.training.cli",
)
def test_through_fedgs_main(capsys: pytest.CaptureFixture[str]) -> None:
    from fedgs.cli import main

    assert main(["data", "--dataset", "embedded", "--json"]) == 0
    assert KEYS <= set(json.loads(capsys.readouterr().out))
