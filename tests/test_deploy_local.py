"""`fedgs deploy local` as a user runs it: 3 SuperNodes over TLS with node authentication, a few
generator steps, progress streamed, every process gone afterwards; Ctrl-C stops it cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_support import SMALL, live_processes_of, rows, wait_for

from fedgs.deploy import ports, topology
from fedgs.deploy.launcher import LocalDeployment, LocalOptions


def _command(out: Path, steps: int) -> list[str]:
    run_config = " ".join(
        f"{key}={value}" for key, value in (SMALL | {"warm-start-steps": 1}).items()
    )
    return [
        sys.executable, "-m", "fedgs.cli", "deploy", "local", "--nodes", "3",
        "--steps", str(steps), "--run-config", run_config, "--out", str(out),
    ]  # fmt: skip


def test_three_supernodes_with_tls_and_authentication_end_to_end(tmp_path: Path) -> None:
    """In the fast tier on purpose (not marked slow): the real deployment a plain
    `python -m pytest -q` runs; the other tests here are the slow tier's."""
    out = tmp_path / "deployment"
    done = subprocess.run(
        _command(out, steps=3), capture_output=True, text=True, timeout=1200, start_new_session=True
    )
    log = done.stdout[-4000:] + done.stderr[-4000:]
    assert done.returncode == 0, log
    assert "3 SuperNodes online" in done.stdout and "node authentication" in done.stdout
    assert "Successfully started run" in done.stdout and "GS-WGAN" in done.stdout  # streamed
    assert "finished:completed" in done.stdout and str(out / "run" / "privacy.json") in log

    # the run: 3 steps, every one answered, one paid query each
    assert [(r["step"], r["answered"]) for r in rows(out / "run")] == [
        ("1", "1"),
        ("2", "1"),
        ("3", "1"),
    ]
    privacy = json.loads((out / "run" / "privacy.json").read_text())
    assert privacy["steps"] == 3 and privacy["queries"]["total"] == 3
    config = json.loads((out / "run" / "config.json").read_text())
    assert config["num-clients"] == 3 and config["min-nodes"] == 3  # one partition per node
    # every node warm-started its own critic in its own state directory
    for i in range(3):
        assert len(list((out / "nodes" / f"supernode-{i}" / "state").glob("*.pt"))) == 1

    # TLS on the SuperLink's public (Fleet-only) port, Control on the operator's Unix socket,
    # nodes authenticated, nothing on another interface
    superlink_log = (out / "logs" / "superlink.log").read_text()
    assert "Fleet API on 127.0.0.1:" in superlink_log
    assert "Control and runtime APIs only on unix:/" in superlink_log
    superlink = LocalDeployment(out, LocalOptions(nodes=3)).commands()[topology.SUPERLINK]
    assert "--ssl-certfile" in superlink and "--insecure" not in superlink
    assert "SuperNode authentication is disabled" not in superlink_log
    for i in range(3):
        assert "Starting secure HTTPS channel" in (
            out / "logs" / f"supernode-{i}.log"
        ).read_text() or ("SuperNode ID" in (out / "logs" / f"supernode-{i}.log").read_text())
    assert live_processes_of(out) == []


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.slow
def test_ctrl_c_stops_every_process(tmp_path: Path) -> None:
    """The launcher starts with SIGINT ignored, as a CI script's background job (`cmd &`) does
    to its commands: the launcher must take Ctrl-C all the same (it once ran on and exited 0
    there, tests/test_deploy_interrupts.py)."""
    out = tmp_path / "deployment"
    locks = tmp_path / "port-locks"
    launcher = subprocess.Popen(
        _command(out, steps=200),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_ignore_sigint,
        env={**os.environ, ports.LOCK_DIR_ENV: str(locks)},
    )
    try:
        wait_for(lambda: rows(out / "run") or launcher.poll() is not None, "the first step")
        assert launcher.poll() is None, "the launcher ended before it could be interrupted"
        assert len(live_processes_of(out)) >= 8  # SuperLink, 2+2x3 SuperExecs/SuperNodes, apps
        assert len(list(locks.glob("*.lock"))) == 4  # SuperLink's public port, 1 per node
        launcher.send_signal(signal.SIGINT)  # what Ctrl-C sends (to the launcher only: own session)
        assert launcher.wait(timeout=120) == 130
        assert list(locks.iterdir()) == []  # its port reservations went with it
    finally:
        if launcher.poll() is None:
            launcher.kill()
    wait_for(lambda: not live_processes_of(out), "every process to exit", timeout=30)


@pytest.mark.slow
def test_a_second_deployment_in_the_same_directory_starts(tmp_path: Path) -> None:
    """Same certificates, keys and SuperLink database: the keys are known already and the
    nodes were left online in the database only as long as a clean stop lets them be."""
    out = tmp_path / "deployment"
    for _ in range(2):
        with LocalDeployment(out, LocalOptions(nodes=1)) as deployment:
            assert len(deployment.wait_for_nodes(1)) == 1
    assert live_processes_of(out) == []


def _one_node_run(out: Path, *run_config: str) -> subprocess.CompletedProcess:
    settings = " ".join(f"{key}={value}" for key, value in SMALL.items())
    command = [
        sys.executable, "-m", "fedgs.cli", "deploy", "local", "--nodes", "1", "--steps", "2",
        "--run-config", " ".join((settings, *run_config)), "--out", str(out),
    ]  # fmt: skip
    return subprocess.run(
        command, capture_output=True, text=True, timeout=1200, start_new_session=True
    )


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.slow
def test_a_second_run_in_the_same_out_gets_its_own_run_directory(tmp_path: Path) -> None:
    """Issue 46: the second run overwrote the first's generator, ledger and privacy report and
    appended its steps to the first's metrics (1, 2, 1, 2)."""
    out = tmp_path / "deployment"
    first = _one_node_run(out)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    kept = {name: (out / "run" / name).read_bytes() for name in ("privacy.json", "ledger.json")}
    second = _one_node_run(out)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    for run_dir in (out / "run", out / "run-2"):
        assert [r["step"] for r in rows(run_dir)] == ["1", "2"], run_dir
    assert {name: (out / "run" / name).read_bytes() for name in kept} == kept
    assert "2 answered, 0 dropped of 2 asked" in second.stdout
    assert str(out / "run-2" / "generator.pt") in second.stdout

    # a run directory named by the user that holds a run is refused before anything starts
    named = _one_node_run(out, f"run-dir='{out / 'run'}'")
    assert named.returncode == 2 and "holds a run already" in named.stderr
    assert [r["step"] for r in rows(out / "run")] == ["1", "2"]

    # private state is the owner's alone (issue 46): critic and ledgers, secrets, keys, the
    # Control plane; allowlists only the launcher changes (read-only)
    node = out / "nodes" / "supernode-0"
    for folder in (node, node / "state", out / "keys", out / "secrets", out / "run"):
        assert _mode(folder) == 0o700, folder
    assert _mode(out / "control") == 0o700
    for allowlist in (node / "allowed-fabs.txt", out / "control" / "allowed-fabs.txt"):
        assert _mode(allowlist) == 0o400, allowlist
    private = [
        *(node / "state").glob("*.pt"),
        node / "superexec.secret",
        out / "run" / "ledger.json",
    ]
    for path in (*private, out / "keys" / "supernode-0.key", out / "secrets" / "superlink.secret"):
        assert _mode(path) == 0o600, path
    assert live_processes_of(out) == []
