"""``python -m fedgs.deploy.supernode``: ``flower-supernode`` with shorter fixed waits
(fedgs.deploy.prompt_supernode), started again while the SuperLink refuses it as still online.

After the whole deployment restarts (``docker compose down`` then ``up``) the SuperLink's
database may count a node online until its heartbeat expires (~60-90 s), and Flower's SuperNode
exits with code 305 ("Failed to activate SuperNode"). This runs the SuperNode with the same
arguments and starts it again every 10 s while it exits that way, for up to 5 minutes; any other
exit passes through. SIGTERM and SIGINT go to the SuperNode, which then deactivates itself at the
SuperLink as Flower's does (a container's PID 1 must pass them on).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Any

from fedgs.deploy.topology import PROMPT_SUPERNODE

ACTIVATION_REFUSED = 305  # Flower's exit code when the SuperLink does not activate the node
RETRY_SECONDS = 10.0
PATIENCE_SECONDS = 300.0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
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
        node = subprocess.Popen([sys.executable, "-m", PROMPT_SUPERNODE, *args])
        code = node.wait()
        if stopping or code != ACTIVATION_REFUSED or time.monotonic() > deadline:
            return code
        print(
            f"fedgs: the SuperLink still counts this node online; again in {RETRY_SECONDS:g} s",
            flush=True,
        )
        time.sleep(RETRY_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
