"""Stopping a run (fedgs.stopping) and refusing to write a new run over an old one: no engine.

The real processes (Ctrl-C in public pretraining and in the steps, then --resume) are in
tests/test_simulate_cli.py.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from fedgs import stopping
from fedgs.cli import main
from fedgs.simulations.cli import existing_run


def test_a_signal_raises_in_the_main_thread_once_then_only_requests() -> None:
    before = signal.getsignal(signal.SIGINT)
    with stopping.stop_on_signals():
        assert not stopping.requested()
        with pytest.raises(stopping.StopRequested):
            signal.raise_signal(signal.SIGINT)
        assert stopping.requested()
        signal.raise_signal(signal.SIGINT)  # a second Ctrl-C: nothing more
        signal.raise_signal(signal.SIGTERM)
        with pytest.raises(stopping.StopRequested, match="where"):
            stopping.check("where")
    assert signal.getsignal(signal.SIGINT) is before
    assert not stopping.requested()  # what the process does next is not stopped
    stopping.check()


def test_while_others_check_a_signal_only_requests_the_stop() -> None:
    before = signal.getsignal(signal.SIGTERM)  # an earlier test's Ray may have left its own
    with stopping.stop_on_signals():  # a new block: no stop requested yet
        stopping.check()
        with stopping.checked_elsewhere():
            signal.raise_signal(signal.SIGTERM)  # Flower's engine is not interrupted
            assert stopping.requested()
    assert signal.getsignal(signal.SIGTERM) is before  # the handler it found is back


def test_an_inherited_ignored_sigint_still_stops() -> None:
    """A script's background job starts with SIGINT ignored; Ctrl-C must still stop it."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stopping.stop_on_signals(), pytest.raises(stopping.StopRequested):
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def _state(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(path.relative_to(folder)): (path.read_bytes(), path.stat().st_mtime_ns)
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _old_run(folder: Path) -> Path:
    (folder / "samples").mkdir(parents=True)
    for name in ("privacy.json", "metrics.csv", "checkpoint.pt", "samples/step_000001.png"):
        (folder / name).write_bytes(f"the old run's {name}\n".encode())
    return folder


def test_simulate_refuses_an_out_that_holds_a_run(tmp_path: Path, capsys) -> None:
    run_dir = _old_run(tmp_path / "run")
    before = _state(run_dir)
    assert main(["simulate", "--steps", "2", "--out", str(run_dir)]) == 2
    out = capsys.readouterr().out
    assert f"{run_dir} is not empty" in out and "--resume" in out and "new --out" in out
    assert "privacy.json" in out
    assert _state(run_dir) == before  # not a byte, not a timestamp


def test_a_missing_or_empty_out_is_a_new_run(tmp_path: Path) -> None:
    assert existing_run(tmp_path / "missing") == []
    (tmp_path / "empty").mkdir()
    assert existing_run(tmp_path / "empty") == []
    assert existing_run(_old_run(tmp_path / "run"))[:2] == ["checkpoint.pt", "metrics.csv"]


def test_debug_scenario_refuses_a_used_out_before_any_work(tmp_path: Path, capsys) -> None:
    out = _old_run(tmp_path / "scenario")
    before = _state(out)
    assert main(["debug-scenario", "--out", str(out)]) == 2
    assert "not empty" in capsys.readouterr().out
    assert _state(out) == before
