"""benchmarks/deploy_phases.py: a deployed step cut into phases from an HTTP trace."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("deploy_phases", BENCHMARKS / "deploy_phases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SERVER, NODE, OTHER_NODE = 10, 20, 21


def _step(t: float, app: int) -> list[str]:
    """One step's requests at known times (s after t): ServerApp 10, SuperNode 20, app ``app``."""
    rows = [
        (SERVER, 0.0, 0.1, "/v1/runtime/push-messages"),
        (SERVER, 0.1, 0.3, "/v1/runtime/push-object"),
        (OTHER_NODE, 0.2, 0.25, "/v1/fleet/pull-messages"),  # an idle node's poll
        (NODE, 0.3, 0.4, "/v1/fleet/pull-messages"),
        (NODE, 0.4, 0.6, "/v1/fleet/pull-object"),
        (NODE, 0.6, 0.7, "/v1/fleet/confirm-message-received"),
        (app, 0.8, 0.85, "/v1/runtime/pull-task-input"),
        (app, 0.85, 0.95, "/v1/runtime/pull-object"),
        (app, 0.95, 1.0, "/v1/runtime/confirm-message-received"),
        (app, 1.5, 1.55, "/v1/runtime/push-messages"),  # 0.5 s of client compute before it
        (app, 1.55, 1.6, "/v1/runtime/push-task-output"),
        (NODE, 1.6, 1.7, "/v1/fleet/push-messages"),
        (NODE, 1.7, 1.9, "/v1/fleet/push-object"),
        (SERVER, 1.9, 2.0, "/v1/runtime/pull-messages"),
        (SERVER, 2.0, 2.1, "/v1/runtime/confirm-message-received"),
    ]
    return [f"{pid} {t + start:.4f} {t + end:.4f} {path}" for pid, start, end, path in rows]


def test_phases_add_up_to_the_step_and_land_where_the_requests_say(tmp_path: Path) -> None:
    phases = _module()
    step = 2.4  # the ServerApp computes 0.3 s after its confirm at 2.1
    lines = [line for k in range(4) for line in _step(100 + k * step, app=30 + k)]
    trace = tmp_path / "trace.log"
    trace.write_text("\n".join(reversed(lines)) + "\n")  # order in the file does not matter
    result = phases.summary(trace)
    assert result["steps"] == 2  # the first (start-up) and the last (no next query) left out
    medians = {name: v["median_s"] for name, v in result["phases"].items()}
    expected = {
        "query to node": 0.7,
        "query to app": 0.3,
        "client compute": 0.5,
        "reply to link": 0.4,
        "reply to server": 0.2,
        "server compute": 0.3,
    }
    assert medians == pytest.approx(expected, abs=1e-3)
    assert sum(medians.values()) == pytest.approx(step, abs=1e-3)
    assert result["requests"]["/v1/runtime/push-messages"] == 8
