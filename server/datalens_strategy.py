"""The DataLens strategy: teachers vote top-k gradient signs, the server aggregates them noisily.

Per step: one fake query (n_dis batches, the last voted on) for m uniformly sampled teachers;
their votes are summed, noised with N(0, s^2) per coordinate, thresholded at +-beta * m (m: the
teachers asked, fewer than teachers-per-step when fewer nodes are online), and the resulting
{-1, 0, +1} direction is back-propagated through G like GS-WGAN's gradient
(``GeneratorTrainer.apply``), followed by an Adam step (the paper's TopAgg).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from dp_accounting import dp_event
from flwr.app import ArrayRecord, Message

from fedgs.privacy.teacher_events import datalens_step_event
from fedgs.privacy.topagg import aggregate_votes
from fedgs.protocols import common, datalens
from fedgs.protocols.common import PIXELS
from fedgs.run_config import RunConfig
from fedgs.server.teacher_strategy import TeacherStrategy
from fedgs.training.generator import GeneratorTrainer


@dataclass(frozen=True)
class DataLensSettings:
    teachers_per_step: int
    top_k: int
    noise_std: float
    threshold: float

    @classmethod
    def from_run_config(cls, config: RunConfig) -> DataLensSettings:
        return cls(
            config.teachers_per_step,
            config.datalens_top_k,
            config.datalens_noise_std,
            config.datalens_threshold,
        )

    def __post_init__(self) -> None:
        if not 1 <= self.top_k <= PIXELS:
            raise ValueError(f"datalens top-k must lie in [1, {PIXELS}], got {self.top_k}")
        if self.threshold < 0:
            raise ValueError(f"datalens threshold must be >= 0, got {self.threshold}")


class DataLensStrategy(TeacherStrategy):
    message_type = datalens.QUERY
    name = "DataLens"
    strategy = "datalens"
    trainer: GeneratorTrainer
    settings: DataLensSettings

    def query(self, server_round: int) -> dict[str, ArrayRecord]:
        (query,) = self.trainer.propose(1)
        return {common.FAKES: common.encode_fakes(query.images, query.labels, self.wire_dtype)}

    def decode(self, reply: Message) -> torch.Tensor:
        record = common.required(reply.content, datalens.VOTES, "reply")
        return datalens.decode_votes(record, self.trainer.config.batch_size, self.settings.top_k)

    def step_event(self) -> dp_event.DpEvent:
        s = self.settings
        return datalens_step_event(s.noise_std, s.top_k, self.trainer.config.batch_size)

    def aggregate(self, votes: list[torch.Tensor], sampled: int) -> dict[str, float | None]:
        s = self.settings
        vote = aggregate_votes(votes, s.noise_std, s.threshold, sampled)
        self.trainer.apply([vote.direction])
        return {"agreed_fraction": vote.agreed_fraction}

    def skip(self) -> dict[str, float | None]:
        self.trainer.apply([None])
        return {}
