"""Ports of ``fedgs deploy local``: reserved so that two launchers on one host never share one,
and a process whose port another program took meanwhile started again on fresh ports.

The reservation tests force collisions by drawing candidates from a few dozen ports: without
the locks, launchers probing at the same moment would pick the same free ports.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_support import live_processes_of

from fedgs.deploy import ports, topology
from fedgs.deploy.launcher import HOST, DeploymentError, LocalDeployment, LocalOptions, free_port

INSECURE = topology.Security(tls=False, node_auth=False)


@pytest.fixture
def locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A lock folder of the test's own (subprocesses inherit it through the environment)."""
    folder = tmp_path / "locks"
    monkeypatch.setenv(ports.LOCK_DIR_ENV, str(folder))
    return folder


def _few_ports(count: int) -> list[int]:
    base = random.randrange(20000, 30000 - count)
    return list(range(base, base + count))


@pytest.fixture
def narrow(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Candidates drawn from 40 ports only."""
    pool = _few_ports(40)
    monkeypatch.setattr(ports, "candidate", lambda host: random.choice(pool))
    return pool


def _listening(port: int) -> socket.socket:
    sock = socket.socket()
    sock.bind((HOST, port))
    sock.listen()
    return sock


# --- reservation --------------------------------------------------------------------------


def test_reservations_in_parallel_threads_never_overlap(locks: Path, narrow: list[int]) -> None:
    launchers, per_launcher = 8, 4
    reservations = [ports.PortReservation(HOST) for _ in range(launchers)]
    start = threading.Barrier(launchers)
    errors: list[BaseException] = []

    def reserve(reservation: ports.PortReservation) -> None:
        try:
            start.wait()
            for _ in range(per_launcher):
                reservation.reserve()
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=reserve, args=(r,)) for r in reservations]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    held = [port for r in reservations for port in r.ports]
    assert len(held) == launchers * per_launcher == len(set(held))
    assert set(held) <= set(narrow)
    for reservation in reservations:
        reservation.release_all()
    assert list(locks.iterdir()) == []


_CHILD = """
import random, sys
from fedgs.deploy import ports
pool = list(range(int(sys.argv[1]), int(sys.argv[1]) + int(sys.argv[2])))
ports.candidate = lambda host: random.choice(pool)
reservation = ports.PortReservation("127.0.0.1")
print(" ".join(str(reservation.reserve()) for _ in range(int(sys.argv[3]))), flush=True)
sys.stdin.read()  # held until the parent closes stdin
reservation.release_all()
"""


def _children(count: int, *args: int) -> list[subprocess.Popen]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, *map(str, args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        for _ in range(count)
    ]


def test_reservations_of_launcher_processes_never_overlap(locks: Path) -> None:
    """Five processes reserve five ports each at the same time out of 30 candidates."""
    pool = _few_ports(30)
    children = _children(5, pool[0], len(pool), 5)
    try:
        held = [int(port) for child in children for port in child.stdout.readline().split()]
        assert len(held) == 25 == len(set(held)), held
        assert len(list(locks.glob("*.lock"))) == 25
    finally:
        for child in children:
            child.communicate(timeout=60)  # closes stdin: each releases and exits
    assert [child.returncode for child in children] == [0] * 5
    assert list(locks.iterdir()) == []  # released: no lock file left behind


def test_a_port_another_live_launcher_holds_is_skipped(locks: Path) -> None:
    port = _few_ports(1)[0]
    (child,) = _children(1, port, 1, 1)
    try:
        assert child.stdout.readline().split() == [str(port)]
        reservation = ports.PortReservation(HOST)
        with pytest.raises(ports.PortError):
            _only(port, reservation.reserve)
    finally:
        child.communicate(timeout=60)


def _only(port: int, call: object) -> int:
    saved = ports.candidate
    ports.candidate = lambda host: port
    try:
        return call()  # type: ignore[operator]
    finally:
        ports.candidate = saved


def test_the_lock_of_a_killed_launcher_blocks_nothing(locks: Path) -> None:
    port = _few_ports(1)[0]
    (child,) = _children(1, port, 1, 1)
    assert child.stdout.readline().split() == [str(port)]
    child.send_signal(signal.SIGKILL)  # no clean-up: its lock file stays, its flock goes
    child.wait(timeout=30)
    assert (locks / f"{port}.lock").exists()
    reservation = ports.PortReservation(HOST)
    assert _only(port, reservation.reserve) == port
    reservation.release_all()
    assert list(locks.iterdir()) == []

    (child,) = _children(1, port, 1, 1)  # and once more, swept this time
    child.stdout.readline()
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert ports.sweep() == 1 and list(locks.iterdir()) == []


def test_a_port_in_use_is_never_reserved(locks: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The chooser offers a port a socket holds first: the reservation takes the next one."""
    busy = _listening(0)
    offers = iter([busy.getsockname()[1], *_few_ports(100)])
    monkeypatch.setattr(ports, "candidate", lambda host: next(offers))
    try:
        reservation = ports.PortReservation(HOST)
        port = reservation.reserve()
        assert port != busy.getsockname()[1]
        assert ports.is_free(HOST, port)
        reservation.release_all()
    finally:
        busy.close()


# --- a process that could not bind --------------------------------------------------------


@pytest.mark.parametrize(
    ("output", "port"),
    [
        (  # Flower 1.41's SuperNode (uvicorn serves its runtime API)
            "INFO:     Application startup complete.\n"
            "ERROR:    [Errno 98] error while attempting to bind on address "
            "('127.0.0.1', 41843): address already in use\n",
            41843,
        ),
        ("Port in server address 127.0.0.1:9092 is already in use.\n", 9092),  # Flower's gRPC
        ("fedgs: cannot listen on 127.0.0.1:20117: address already in use\n", 20117),
        ("OSError: [Errno 98] Address already in use\n", 0),  # no port named
        ("Failed to activate SuperNode\n", None),
        ("", None),
    ],
)
def test_taken_port_reads_what_flower_prints(output: str, port: int | None) -> None:
    assert ports.taken_port(output) == port


def _secret(tmp_path: Path) -> str:
    (tmp_path / "secret").write_text("s" * 32)
    return str(tmp_path / "secret")


def _run_busy(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, **topology.environment()},
    )


def test_a_supernode_on_a_busy_port_says_which(tmp_path: Path) -> None:
    """What Flower's SuperNode prints is what taken_port reads (a Flower upgrade that changes
    it fails here, not in a user's deployment)."""
    with _listening(0) as busy:
        port = busy.getsockname()[1]
        done = _run_busy(
            [sys.executable, "-m", topology.PROMPT_SUPERNODE, "--superlink", "127.0.0.1:1"]
            + ["--insecure", "--isolation", "process", "--host", HOST, "--port", str(port)]
            + ["--superexec-auth-secret-file", _secret(tmp_path)],
            tmp_path,
        )
    assert done.returncode != 0
    assert ports.taken_port(done.stdout + done.stderr) == port, done.stderr[-2000:]


def test_the_superlink_on_a_busy_port_says_which(tmp_path: Path) -> None:
    with _listening(0) as busy:
        port = busy.getsockname()[1]
        args = topology.superlink_args(
            host=HOST,
            port=free_port(),
            private=(HOST, port),
            security=INSECURE,
            tls=None,
            database=":flwr-in-memory:",  # Flower's in-memory database: no file
            superexec_secret=_secret(tmp_path),
            python=sys.executable,
        )
        done = _run_busy(args, tmp_path)
    assert done.returncode == 1
    assert f"cannot listen on {HOST}:{port}: address already in use" in done.stderr
    assert ports.taken_port(done.stderr) == port


# --- the launcher -------------------------------------------------------------------------


@pytest.fixture
def intruder(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[int]]:
    """Another program listens on the ports of the reservations whose numbers (1, 2, ... in
    the order the launcher reserves) the test adds, right after the launcher reserved them."""
    taking: set[int] = set()
    taken: list[socket.socket] = []
    original = ports.PortReservation.reserve
    calls = itertools.count(1)

    def reserve(self: ports.PortReservation) -> int:
        port = original(self)
        if next(calls) in taking or 0 in taking:
            taken.append(_listening(port))
        return port

    monkeypatch.setattr(ports.PortReservation, "reserve", reserve)
    yield taking
    for sock in taken:
        sock.close()


@pytest.mark.slow
def test_the_launcher_moves_a_process_whose_port_was_taken(
    tmp_path: Path, locks: Path, intruder: set[int], capsys: pytest.CaptureFixture[str]
) -> None:
    intruder.update({1, 2})  # the Fleet API's port and the SuperNode's
    out = tmp_path / "deployment"
    with LocalDeployment(out, LocalOptions(nodes=1, security=INSECURE, warm=False)) as d:
        assert len(d.wait_for_nodes(1)) == 1
        assert ports.is_free(HOST, d.port) is False  # its own listeners now
        held = {d.port, *d.node_ports}
        assert {int(p.stem) for p in locks.glob("*.lock")} == held
    err = capsys.readouterr().err
    assert "superlink could not listen on 127.0.0.1:" in err and "start 2 of at most 3" in err
    assert "supernode-0 could not listen on 127.0.0.1:" in err
    assert list(locks.iterdir()) == []  # every reservation released
    assert live_processes_of(out) == []


@pytest.mark.slow
def test_the_launcher_names_the_port_when_every_start_fails(
    tmp_path: Path, locks: Path, intruder: set[int]
) -> None:
    intruder.add(0)  # every port the launcher reserves
    out = tmp_path / "deployment"
    deployment = LocalDeployment(out, LocalOptions(nodes=1, security=INSECURE, warm=False))
    with pytest.raises(DeploymentError) as failed:
        with deployment:
            pass
    message = str(failed.value).splitlines()[0]
    assert f"superlink could not listen on 127.0.0.1:{deployment.port}" in message
    assert "address already in use" in message and "3 starts" in message
    assert list(locks.iterdir()) == []
    assert live_processes_of(out) == []
