"""When a run gives up on its clients (server/silence.py); the end-to-end cases, through the real
engine and CLI, are in test_simulate_cli.py."""

from __future__ import annotations

import pytest

from fedgs.server.replies import StepOutcome
from fedgs.server.silence import AnswerWatch, ClientsFailed, require_warm_clients


def _failed(sampled: int, reason: str) -> StepOutcome:
    outcome = StepOutcome(sampled=sampled, dropped=sampled)
    outcome.drop(7, reason)
    return outcome


def test_a_streak_of_unanswered_steps_stops_with_its_first_error() -> None:
    watch = AnswerWatch(limit=3)
    watch.record(1, _failed(2, "first"))
    watch.record(2, StepOutcome(sampled=0))  # Poisson sampling asked nobody: not a failure
    watch.record(3, _failed(2, "second"))
    with pytest.raises(ClientsFailed, match=r"3 consecutive steps .*step 4.*node 7: first"):
        watch.record(4, _failed(2, "third"))


def test_one_answer_resets_the_streak() -> None:
    watch = AnswerWatch(limit=2)
    watch.record(1, _failed(1, "first"))
    watch.record(2, StepOutcome(sampled=2, answered=1, dropped=1))  # partial failure goes on
    watch.record(3, _failed(1, "later"))
    with pytest.raises(ClientsFailed, match="node 7: later"):
        watch.record(4, _failed(1, "last"))


def test_limit_zero_never_stops() -> None:
    watch = AnswerWatch(limit=0)
    for step in range(1, 50):
        watch.record(step, _failed(1, "always"))


def test_a_warm_start_with_no_warm_client_stops() -> None:
    require_warm_clients(warm=1, asked=50, first_error="node 3: x")  # one is enough
    with pytest.raises(ClientsFailed, match="none of 50 clients answered.*node 3: x"):
        require_warm_clients(warm=0, asked=50, first_error="node 3: x")
