"""fedgs' SuperExec writes ``--ready-file`` only once its runtime API has answered a task poll.

Compose's health checks of the ServerApp and ClientApp containers test that file, so "healthy"
must mean "this SuperExec reached its SuperLink (or SuperNode) and was let in", not "the process
started". A real SuperExec against a real SuperLink whose runtime API is on a Unix socket (as in
compose; no TLS here, the compose run adds it): a file left from before is removed at start, no
file appears while nothing answers at the socket, it appears once a SuperLink serves there, and
a SuperExec holding the wrong secret (refused by the runtime API) never writes it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_support import socket_superlink_args, wait_for

from fedgs.deploy import topology
from fedgs.deploy.launcher import SUPERLINK_READY
from fedgs.deploy.unix_socket import unix_address

pytestmark = pytest.mark.slow
INSECURE = topology.Security(tls=False, node_auth=False)
ENV = {**os.environ, **topology.environment()}


def _secret(path: Path) -> Path:
    path.write_bytes(os.urandom(32))
    return path


def _superlink(tmp_path: Path, socket: Path, secret: Path) -> subprocess.Popen:
    argv = socket_superlink_args(socket, secret)
    log = tmp_path / "superlink.log"
    with log.open("ab") as handle:
        process = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=ENV)
    wait_for(
        lambda: SUPERLINK_READY in log.read_text() or process.poll() is not None,
        "the SuperLink to serve",
        timeout=120,
    )
    assert process.poll() is None, log.read_text()[-3000:]
    return process


def _superexec(socket: Path, secret: Path, ready: Path, log: Path) -> subprocess.Popen:
    argv = topology.superexec_args(
        runtime_api=unix_address(socket),
        ca_cert=None,
        superexec_secret=str(secret),
        python=sys.executable,
        ready_file=str(ready),
    )
    with log.open("ab") as handle:
        return subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=ENV)


def _stop(*processes: subprocess.Popen | None) -> None:
    for process in processes:
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)


@pytest.fixture
def paths(tmp_path: Path) -> Iterator[dict[str, Path]]:
    folder = tmp_path / "control"
    folder.mkdir(mode=0o700)
    yield {
        "socket": folder / "superlink.sock",
        "secret": _secret(tmp_path / "superlink.secret"),
        "ready": tmp_path / "tmp" / "ready",
        "log": tmp_path / "superexec.log",
    }


def _stale(ready: Path) -> None:
    ready.parent.mkdir(exist_ok=True)
    ready.write_text("left by the container's previous start\n")


def test_ready_only_after_the_runtime_api_answered(tmp_path: Path, paths: dict[str, Path]) -> None:
    socket, secret, ready, log = paths["socket"], paths["secret"], paths["ready"], paths["log"]
    _stale(ready)
    superexec = _superexec(socket, secret, ready, log)
    superlink = None
    try:
        wait_for(lambda: not ready.exists(), "the stale ready file to go", timeout=60)
        # nothing serves the socket yet: Flower's poll fails and is retried
        wait_for(
            lambda: "Connection attempt failed" in log.read_text() or superexec.poll() is not None,
            "the SuperExec's first failed poll",
            timeout=120,
        )
        time.sleep(2)
        assert superexec.poll() is None, log.read_text()[-3000:]
        assert not ready.exists()
        superlink = _superlink(tmp_path, socket, secret)
        wait_for(
            lambda: ready.exists() or superexec.poll() is not None,
            "the ready file once the SuperLink answers",
            timeout=120,
        )
        assert ready.exists(), log.read_text()[-3000:]
    finally:
        _stop(superexec, superlink)
    assert not ready.exists()  # stopped: no longer ready


def test_never_ready_when_the_runtime_api_refuses_the_secret(
    tmp_path: Path, paths: dict[str, Path]
) -> None:
    socket, secret, ready, log = paths["socket"], paths["secret"], paths["ready"], paths["log"]
    superlink = _superlink(tmp_path, socket, secret)
    superexec = None
    try:
        ready.parent.mkdir()
        wrong = _secret(tmp_path / "another.secret")
        superexec = _superexec(socket, wrong, ready, log)
        seen, deadline = set(), time.monotonic() + 120
        while superexec.poll() is None:  # Flower's SuperExec stops itself on a 401 (SIGINT)
            assert time.monotonic() < deadline, "the refused SuperExec did not stop"
            seen.add(ready.exists())
            time.sleep(0.02)
        assert seen == {False}, log.read_text()[-3000:]  # at no time while it ran
    finally:
        _stop(superexec, superlink)
