"""``python -m fedgs.deploy.supernode``: ``flower-supernode`` with shorter fixed waits
(fedgs.deploy.prompt_supernode), started again while the SuperLink refuses it as still online.

After the whole deployment restarts (``docker compose down`` then ``up``) the SuperLink's
database may count a node online until its heartbeat expires (~60-90 s), and Flower's SuperNode
stops with its exit code 305 ("Failed to activate SuperNode"). Flower prints that code but ends
the process with status 1, as it does for every error, so the code is read from the SuperNode's
output, which passes through unchanged. This starts the SuperNode again with the same arguments
every 10 s while it stops that way, for up to 5 minutes, so its container stays up (and its
health check pending) instead of exiting: Compose 1.29 fails ``up`` when a container its
dependants wait on exits. Any other exit passes through. SIGTERM and SIGINT go to the
SuperNode, which then deactivates itself at the SuperLink as Flower's does (a container's PID 1
must pass them on).

``--activated-file PATH`` (this wrapper's, not passed to Flower): written when the SuperNode logs
``SuperNode ID: <id>``, which Flower's SuperNode does right after the SuperLink activated it,
and removed before every (re)start and at the end. Compose's health check tests that it exists:
healthy means joined, not merely started (the runtime API's port opens before activation).
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

from fedgs.deploy.topology import PROMPT_SUPERNODE

ACTIVATION_REFUSED = "Exit Code: 305"  # Flower's line when the SuperLink does not activate it
ACTIVATED = "SuperNode ID: "  # Flower's line once the SuperLink activated the node
RETRY_SECONDS = 10.0
PATIENCE_SECONDS = 300.0


def pass_through(
    lines: Iterable[str], out: TextIO, activated: Callable[[], None] | None = None
) -> bool:
    """Copy the SuperNode's output line by line, calling ``activated`` once it says the
    SuperLink activated it; whether it said its activation was refused."""
    refused = False
    for line in lines:
        out.write(line)
        out.flush()
        refused = refused or ACTIVATION_REFUSED in line  # after Flower's log-level prefix
        if activated is not None and ACTIVATED in line:
            activated()
            activated = None
    return refused


def _marker(path: Path | None) -> tuple[Callable[[], None], Callable[[], None]]:
    """Write and remove the activated file (neither does anything without a path)."""
    if path is None:
        return (lambda: None), (lambda: None)

    def write() -> None:
        path.write_text("activated\n")

    return write, lambda: path.unlink(missing_ok=True)


def main(argv: list[str] | None = None, command: list[str] | None = None) -> int:
    """Run the SuperNode (``command``, default fedgs' prompt SuperNode) until it stops for any
    reason but a refused activation, or the patience runs out; its exit status."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--activated-file", type=Path)
    ours, args = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    activated, not_activated = _marker(ours.activated_file)
    command = [sys.executable, "-m", PROMPT_SUPERNODE] if command is None else command
    stopping = False
    node: subprocess.Popen | None = None

    def forward(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True
        if node is not None and node.poll() is None:
            node.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    deadline = time.monotonic() + PATIENCE_SECONDS
    try:
        while True:
            not_activated()  # a file from before a restart says nothing about this start
            node = subprocess.Popen(
                [*command, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            assert node.stdout is not None
            refused = pass_through(node.stdout, sys.stdout, activated)
            code = node.wait()
            if stopping or code == 0 or not refused or time.monotonic() > deadline:
                return code
            print(
                f"fedgs: the SuperLink still counts this node online; again in {RETRY_SECONDS:g} s",
                flush=True,
            )
            time.sleep(RETRY_SECONDS)
    finally:
        not_activated()


if __name__ == "__main__":
    sys.exit(main())
