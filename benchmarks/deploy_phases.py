"""Cut deployed GS-WGAN steps into phases from an HTTP trace (benchmarks/http_trace).

Every Flower process of the deployment logged its requests (``pid start end path``). Roles
come from what a process asks for: the ServerApp pushes one query per step
(``/v1/runtime/push-messages``, the most of any process), each ClientApp process pulls its task
input once, SuperNodes pull from the Fleet API. With one client per step, step k's ClientApp is
the k-th ClientApp process. Phases of step k, end to end (they add up to the step):
  query to node     ServerApp pushes the query, a SuperNode polls and fetches it (confirm)
  query to app      the forked ClientApp starts and pulls the message from its SuperNode
  client compute    the critic trains and answers (the ClientApp between its confirm and push)
  reply to link     ClientApp pushes the reply, its SuperNode forwards it to the SuperLink
  reply to server   the ServerApp polls and fetches the reply (confirm)
  server compute    the ServerApp applies the gradient, saves, proposes the next query
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import NamedTuple

PHASES = (
    "query to node",
    "query to app",
    "client compute",
    "reply to link",
    "reply to server",
    "server compute",
)


class Request(NamedTuple):
    pid: int
    start: float
    end: float
    path: str


def read_trace(path: Path) -> list[Request]:
    rows = (line.split() for line in path.read_text().splitlines() if line.strip())
    return sorted(
        (Request(int(p), float(s), float(e), u) for p, s, e, u in rows), key=lambda r: r.start
    )


def _first(requests: list[Request], pid: int | set[int], path: str, after: float) -> Request:
    pids = {pid} if isinstance(pid, int) else pid
    return next(r for r in requests if r.pid in pids and r.path.endswith(path) and r.start >= after)


def step_phases(requests: list[Request]) -> list[dict[str, float]]:
    """Seconds per phase for every complete step but the first (start-up) and the last."""
    pushes = Counter(r.pid for r in requests if r.path == "/v1/runtime/push-messages")
    server = pushes.most_common(1)[0][0]
    apps = [
        pid
        for pid in dict.fromkeys(r.pid for r in requests if r.path.endswith("pull-task-input"))
        if pid != server
    ]
    nodes = {r.pid for r in requests if r.path == "/v1/fleet/pull-messages"}
    queries = [r.start for r in requests if r.pid == server and r.path.endswith("push-messages")]
    steps = []
    for k in range(1, min(len(queries) - 1, len(apps))):
        app, sent, next_sent = apps[k], queries[k], queries[k + 1]
        app_has = _first(requests, app, "confirm-message-received", sent).end
        # the ClientApp may read the message from its SuperNode before that confirms it upstream
        node_confirms = _first(requests, nodes, "/v1/fleet/confirm-message-received", sent)
        node_has = min(node_confirms.end, app_has)
        app_sends = _first(requests, app, "push-messages", app_has).start
        app_done = _first(requests, app, "push-task-output", app_sends).end
        forwarded = [
            r.end
            for r in requests
            if r.pid in nodes and r.path == "/v1/fleet/push-object" and app_sends <= r.start
        ]
        link_has = max([app_done, *(end for end in forwarded if end < next_sent)])
        server_has = _first(requests, server, "confirm-message-received", app_sends).end
        bounds = (sent, node_has, app_has, app_sends, link_has, server_has, next_sent)
        steps.append({p: b - a for p, a, b in zip(PHASES, bounds, bounds[1:], strict=False)})
    return steps


def http_counts(requests: list[Request]) -> dict[str, int]:
    """Requests per path over the whole trace (polls included)."""
    return dict(Counter(r.path for r in requests).most_common())


def summary(path: Path) -> dict[str, object]:
    """Median and range of each phase over the traced steps, and the request counts."""
    requests = read_trace(path)
    steps = step_phases(requests)
    by_phase: dict[str, list[float]] = defaultdict(list)
    for step in steps:
        for phase, seconds in step.items():
            by_phase[phase].append(seconds)
    phases = {
        p: {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v)}
        for p, v in by_phase.items()
    }
    return {"steps": len(steps), "phases": phases, "requests": http_counts(requests)}
