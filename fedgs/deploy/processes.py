"""Starting and stopping a deployment's processes without leaving any behind.

Every process is started in its own session (a terminal's Ctrl-C reaches only the launcher, which
then stops the rest in order) with a marker in its environment. Flower starts more processes
itself, some detached into their own sessions (the SuperLink's SuperExec, the ServerApp and
ClientApp processes, fedgs' per-node workers); they inherit the marker, so :func:`marked` finds
every process of a deployment by reading ``/proc/*/environ``, whoever its parent is now.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

MARKER = "FEDGS_DEPLOYMENT"


@dataclass
class Component:
    """One started process (its session holds the processes it started without detaching)."""

    name: str
    process: subprocess.Popen
    log: Path
    log_offset: int = 0  # the log's size when this process started

    def alive(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        """What this process (not an earlier one with the same log) wrote to its log."""
        try:
            with self.log.open("rb") as handle:
                handle.seek(self.log_offset)
                return handle.read().decode(errors="replace")
        except OSError:
            return ""

    def signal_group(self, signum: int) -> None:
        try:
            os.killpg(self.process.pid, signum)
        except ProcessLookupError:
            pass


def start(
    name: str, argv: Sequence[str], log: Path, env: Mapping[str, str], cwd: Path | None = None
) -> Component:
    """Start ``argv`` in a new session, stdout and stderr to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    offset = log.stat().st_size if log.exists() else 0
    with log.open("ab") as handle:
        process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )
    return Component(name, process, log, offset)


def _is_live(pid: int) -> bool:
    """Running and not a zombie (an exited child nobody reaped yet holds no resources)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def marked(marker: str) -> list[int]:
    """Live processes whose environment carries ``MARKER=marker`` (Linux ``/proc``)."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and _is_live(int(entry.name)):
            found.append(int(entry.name))
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def _kill(pids: Sequence[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def stop(components: Sequence[Component], marker: str, grace: float = 10.0) -> list[int]:
    """SIGTERM each component's session (in the order given), then every marked process; after
    ``grace`` seconds SIGKILL what is left. Returns the pids that had to be killed."""
    for component in components:
        component.signal_group(signal.SIGTERM)
    _kill(marked(marker), signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and (any(c.alive() for c in components) or marked(marker)):
        time.sleep(0.1)
    leftovers = marked(marker)
    for component in components:
        if component.alive():
            component.signal_group(signal.SIGKILL)
    _kill(leftovers, signal.SIGKILL)
    for component in components:
        try:
            component.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            leftovers.append(component.process.pid)
    deadline = time.monotonic() + 5
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return leftovers
