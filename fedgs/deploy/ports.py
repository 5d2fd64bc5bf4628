"""Ports for ``fedgs deploy local`` that no other fedgs launcher on the host takes meanwhile.

The launcher chooses every port before the Flower process that binds it starts, seconds later.
Probing that a port is free (bind, read, close) says nothing about those seconds: a second
launcher probing at the same moment finds the same ports free. So a chosen port is also
*reserved*: the launcher holds an exclusive ``flock`` on ``<lock dir>/<port>.lock`` for the
deployment's life, and skips every port whose lock another live launcher holds. ``flock`` dies
with its process, so a lock file left by a killed launcher blocks nothing (the next launcher to
come across it takes it over, then removes it); a launcher that ends normally or on Ctrl-C
removes its own.

Removing a lock file while others may open it is safe as done here: the holder unlinks the
file before it lets go of the lock, and whoever acquires a lock checks afterwards that the path
still names the file it locked (else it lost a race with a release and tries again).

Other programs do not look at these locks: a port can still be taken between the choice and
the bind by anything else. The launcher therefore also recognizes a process that could not bind
(:func:`taken_port`) and starts it again on fresh ports. Candidates are drawn below the kernel's
ephemeral range where it leaves room, so the outgoing connections of this very deployment (each
holds an ephemeral port on 127.0.0.1) do not take them.
"""

from __future__ import annotations

import errno
import fcntl
import os
import random
import re
import socket
import tempfile
import threading
from pathlib import Path

LOCK_DIR_ENV = "FEDGS_PORT_LOCK_DIR"
LOWEST = 20000  # candidates below the ephemeral range start here (fewer well-known services)
ATTEMPTS = 500  # candidates tried for one reservation before giving up


class PortError(RuntimeError):
    """No port could be reserved."""


def lock_dir() -> Path:
    """Where reservations are held: ``$FEDGS_PORT_LOCK_DIR``, else a per-user folder in the
    system's temporary directory."""
    configured = os.environ.get(LOCK_DIR_ENV)
    default = Path(tempfile.gettempdir()) / f"fedgs-ports-{os.getuid()}"
    path = Path(configured) if configured else default
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _ephemeral_range() -> tuple[int, int] | None:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return None


def candidate(host: str) -> int:
    """A port to try: random below the ephemeral range (when at least 1,000 ports lie between
    ``LOWEST`` and its start), else one the kernel picks as free."""
    ephemeral = _ephemeral_range()
    if ephemeral is not None and ephemeral[0] - LOWEST >= 1000:
        return random.randrange(LOWEST, ephemeral[0])
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def is_free(host: str, port: int) -> bool:
    """Whether a socket can bind ``host:port`` now (no SO_REUSEADDR: a port some socket still
    holds in any state counts as taken)."""
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _lock(directory: Path, port: int) -> int | None:
    """An open descriptor holding the exclusive lock of ``port``, or None if a live process
    holds it."""
    path = directory / f"{port}.lock"
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                return None
            raise
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        os.close(fd)  # its holder released (and removed) it meanwhile: lock the new file


def _unlock(directory: Path, port: int, fd: int) -> None:
    try:
        os.unlink(directory / f"{port}.lock")  # before the lock goes: see the module's note
    except FileNotFoundError:
        pass
    os.close(fd)


def sweep(directory: Path | None = None) -> int:
    """Remove lock files no live process holds (left by killed launchers); how many."""
    directory = directory or lock_dir()
    removed = 0
    for path in directory.glob("*.lock"):
        try:
            port = int(path.stem)
        except ValueError:
            continue
        fd = _lock(directory, port)
        if fd is not None:
            _unlock(directory, port, fd)
            removed += 1
    return removed


class PortReservation:
    """Ports reserved by this process until released (``release``, ``release_all`` or the
    process's end). Thread-safe; two reservations, in one process or in two, never hold the
    same port."""

    def __init__(self, host: str = "127.0.0.1", directory: Path | None = None) -> None:
        self.host = host
        self.directory = directory or lock_dir()
        self._held: dict[int, int] = {}  # port -> descriptor holding its lock
        self._mutex = threading.Lock()

    @property
    def ports(self) -> list[int]:
        with self._mutex:
            return sorted(self._held)

    def reserve(self) -> int:
        """A port no other reservation holds and nothing binds now; held until released."""
        for _ in range(ATTEMPTS):
            port = candidate(self.host)
            with self._mutex:
                if port in self._held:
                    continue
            fd = _lock(self.directory, port)
            if fd is None:
                continue  # another live launcher's
            if not is_free(self.host, port):  # checked under the lock: still free now
                _unlock(self.directory, port, fd)
                continue
            with self._mutex:
                self._held[port] = fd
            return port
        raise PortError(
            f"no free port on {self.host} after {ATTEMPTS} tries (locks in {self.directory})"
        )

    def replace(self, port: int) -> int:
        """Release ``port`` and reserve another; the new one."""
        new = self.reserve()
        self.release(port)
        return new

    def release(self, port: int) -> None:
        with self._mutex:
            fd = self._held.pop(port, None)
        if fd is not None:
            _unlock(self.directory, port, fd)

    def release_all(self) -> None:
        for port in self.ports:
            self.release(port)


# What a process that could not listen prints, with the port it named.
_ADDRESS_IN_USE = (
    # uvicorn, which serves Flower 1.41's HTTP APIs (the SuperNode's runtime API)
    re.compile(r"bind on address \('[^']*', (\d+)\)[^\n]*address already in use", re.I),
    # Flower's gRPC servers (flwr.supercore.grpc)
    re.compile(r"Port in server address \S*:(\d+) is already in use"),
    # fedgs.deploy.superlink
    re.compile(r"cannot listen on \S*:(\d+): address already in use"),
)
_UNNAMED = re.compile(r"address already in use", re.I)


def taken_port(output: str) -> int | None:
    """The port a process's ``output`` says it could not bind because it is in use; 0 if it
    says so without naming a port; None if it does not say so."""
    for pattern in _ADDRESS_IN_USE:
        match = pattern.search(output)
        if match:
            return int(match.group(1))
    return 0 if _UNNAMED.search(output) else None
