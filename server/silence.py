"""When a run gives up on its clients: training on nobody's answers is not a run.

A run whose clients all fail (a broken install, unreadable data, a refused policy) would otherwise
go on for every step with an untrained generator and end like a successful one. Partial failure
is normal in federated learning and goes on; a streak of steps in which clients were asked and
none answered, or a warm start that left no client warm, stops the run with the first client
error, once.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedgs.server.replies import StepOutcome


class ClientsFailed(RuntimeError):
    """No client answered for too long: the run stops with the first client error."""


@dataclass
class AnswerWatch:
    """Counts consecutive steps in which clients were asked and none answered."""

    limit: int  # 0 = never stop
    silent_steps: int = 0
    first_error: str = ""  # the first drop reason of the current streak

    def record(self, step: int, outcome: StepOutcome) -> None:
        """Raise :class:`ClientsFailed` once ``limit`` consecutive steps went unanswered."""
        if outcome.answered > 0:
            self.silent_steps, self.first_error = 0, ""
            return
        if outcome.sampled == 0:  # nobody was asked (Poisson sampling): no evidence either way
            return
        self.silent_steps += 1
        self.first_error = self.first_error or next(iter(outcome.drop_reasons), "")
        if 0 < self.limit <= self.silent_steps:
            raise ClientsFailed(
                f"no client answered in {self.silent_steps} consecutive steps (up to step "
                f"{step}; max-unanswered-steps = {self.limit}); first client error: "
                f"{self.first_error or 'none reported'}"
            )


def require_warm_clients(warm: int, asked: int, first_error: str) -> None:
    """The warm start must leave at least one client able to answer."""
    if asked > 0 and warm == 0:
        raise ClientsFailed(
            f"warm start: none of {asked} clients answered; first client error: "
            f"{first_error or 'none reported'}"
        )
