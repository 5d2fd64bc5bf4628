"""The SuperLink's Control plane on a Unix socket only its owner reaches (issue 46).

A SuperLink (no TLS here: the deployment tests run it with TLS) serves its Control and runtime
APIs on ``--private-socket``; ``flwr`` reaches it through fedgs.deploy.unix_socket. The socket
is 0600 in a 0700 folder, a folder another user could enter is refused, a live socket is never
taken over and a killed SuperLink's stale one is.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_support import console_script, socket_superlink_args, wait_for

from fedgs.deploy import control, topology
from fedgs.deploy.launcher import SUPERLINK_READY
from fedgs.deploy.unix_socket import socket_path, unix_address

INSECURE = topology.Security(tls=False, node_auth=False)


def _superlink(tmp_path: Path, socket: Path) -> list[str]:
    secret = tmp_path / "superlink.secret"
    if not secret.exists():
        secret.write_bytes(os.urandom(32))
    return socket_superlink_args(socket, secret)


def _start(tmp_path: Path, socket: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, **topology.environment()}
    with log.open("ab") as handle:
        return subprocess.Popen(
            _superlink(tmp_path, socket), stdout=handle, stderr=subprocess.STDOUT, env=env
        )


def _wait_ready(process: subprocess.Popen, log: Path, starts: int = 1) -> None:
    """Until the ``starts``-th SuperLink logged in ``log`` serves; it must still run."""
    wait_for(
        lambda: log.read_text().count(SUPERLINK_READY) >= starts or process.poll() is not None,
        "the SuperLink to serve",
        timeout=120,
    )
    assert process.poll() is None, log.read_text()[-3000:]


@pytest.fixture
def superlink(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, Path, Path]]:
    """A serving SuperLink, its Control socket and its log."""
    socket, log = tmp_path / "control" / "superlink.sock", tmp_path / "superlink.log"
    process = _start(tmp_path, socket, log)
    try:
        _wait_ready(process, log)
        yield process, socket, log
    finally:
        process.terminate()
        process.wait(timeout=60)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_addresses_name_a_socket_or_not() -> None:
    assert socket_path(unix_address("/run/x.sock")) == "/run/x.sock"
    assert socket_path("127.0.0.1:9091") is None


def test_flwr_reaches_the_owners_socket_and_nothing_else_listens_there(
    superlink: tuple[subprocess.Popen, Path, Path], tmp_path: Path
) -> None:
    process, socket, log = superlink
    assert socket.is_socket() and _mode(socket) == 0o600 and _mode(socket.parent) == 0o700
    assert f"Control and runtime APIs only on {unix_address(socket)}" in log.read_text()
    env = {
        **os.environ,
        **topology.environment(),
        "FLWR_HOME": str(control.write_flwr_home(tmp_path / "home", unix_address(socket), None)),
    }
    assert control.online_nodes(env) == []  # the Control API answered through the socket
    typed = ["deploy", "flwr", "supernode", "list", control.CONNECTION, "--format", "json"]
    by_hand = subprocess.run(  # what the operator types in another terminal
        [console_script("fedgs"), *typed],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert by_hand.returncode == 0 and '"success": true' in by_hand.stdout, by_hand

    second = subprocess.run(
        _superlink(tmp_path, socket), capture_output=True, text=True, timeout=120
    )
    assert second.returncode != 0
    assert f"another SuperLink serves {unix_address(socket)}" in second.stderr
    assert process.poll() is None and socket.is_socket()  # the live one kept its socket


def test_a_killed_superlinks_socket_is_replaced(tmp_path: Path) -> None:
    socket, log = tmp_path / "control" / "superlink.sock", tmp_path / "superlink.log"
    for start in range(2):
        process = _start(tmp_path, socket, log)
        try:
            _wait_ready(process, log, starts=start + 1)
        finally:
            process.kill()  # no clean-up: the socket file stays
            process.wait(timeout=60)
        assert socket.exists()


def test_a_socket_folder_another_user_may_enter_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    done = subprocess.run(
        _superlink(tmp_path, folder / "superlink.sock"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert f"{folder} must be a folder of this user's alone (mode 0700)" in done.stderr
    assert not (folder / "superlink.sock").exists()
