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
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from typing import Any, TextIO

from fedgs.deploy.topology import PROMPT_SUPERNODE

ACTIVATION_REFUSED = "Exit Code: 305"  # Flower's line when the SuperLink does not activate it
RETRY_SECONDS = 10.0
PATIENCE_SECONDS = 300.0


def pass_through(lines: Iterable[str], out: TextIO) -> bool:
    """Copy the SuperNode's output line by line; whether it said its activation was refused."""
    refused = False
    for line in lines:
        out.write(line)
        out.flush()
        refused = refused or ACTIVATION_REFUSED in line  # after Flower's log-level prefix
    return refused


def main(argv: list[str] | None = None, command: list[str] | None = None) -> int:
    """Run the SuperNode (``command``, default fedgs' prompt SuperNode) until it stops for any
    reason but a refused activation, or the patience runs out; its exit status."""
    args = sys.argv[1:] if argv is None else argv
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
    while True:
        node = subprocess.Popen(
            [*command, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert node.stdout is not None
        refused = pass_through(node.stdout, sys.stdout)
        code = node.wait()
        if stopping or code == 0 or not refused or time.monotonic() > deadline:
            return code
        print(
            f"fedgs: the SuperLink still counts this node online; again in {RETRY_SECONDS:g} s",
            flush=True,
        )
        time.sleep(RETRY_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
