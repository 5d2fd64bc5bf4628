"""The PATE-GAN strategy: teachers vote real/fake, noisy counts label the student's data.

Per step: n_T fake batches for the teachers' training steps and n_S ballot batches, the same for
m uniformly sampled teachers; their votes are counted per sample, Lap(b) is added to both counts
and the larger noisy count labels the sample (``fedgs.privacy.pate``); the student trains on the
labelled ballot and G against the student (PATE-GAN's Algorithm 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from dp_accounting import dp_event
from flwr.app import ArrayRecord, Message

from fedgs.privacy.pate import noisy_labels
from fedgs.privacy.teacher_events import pate_step_event
from fedgs.protocols import common, pate_gan
from fedgs.run_config import RunConfig
from fedgs.server.teacher_strategy import TeacherStrategy
from fedgs.training.pate_gan import PateGANTrainer


@dataclass(frozen=True)
class PateSettings:
    teachers_per_step: int
    laplace_scale: float
    teacher_steps: int
    student_steps: int

    @classmethod
    def from_run_config(cls, config: RunConfig) -> PateSettings:
        return cls(
            config.teachers_per_step,
            config.pate_laplace_scale,
            config.pate_teacher_steps,
            config.pate_student_steps,
        )

    def __post_init__(self) -> None:
        if self.teacher_steps < 1 or self.student_steps < 1:
            raise ValueError("pate-gan teacher and student steps must be >= 1")


class PateGANStrategy(TeacherStrategy):
    message_type = pate_gan.QUERY
    name = "PATE-GAN"
    strategy = "pate-gan"
    trainer: PateGANTrainer
    settings: PateSettings

    @property
    def ballot_size(self) -> int:
        return self.settings.student_steps * self.trainer.config.batch_size

    def query(self, server_round: int) -> dict[str, ArrayRecord]:
        s = self.settings
        training, ballot = self.trainer.propose(s.teacher_steps, s.student_steps)
        return {
            key: common.encode_fakes(batches.images, batches.labels, self.wire_dtype)
            for key, batches in ((common.FAKES, training), (pate_gan.BALLOT, ballot))
        }

    def decode(self, reply: Message) -> np.ndarray:
        record = common.required(reply.content, pate_gan.VOTES, "reply")
        return pate_gan.decode_real_votes(record, self.ballot_size)

    def step_event(self) -> dp_event.DpEvent:
        return pate_step_event(self.settings.laplace_scale, self.ballot_size)

    def aggregate(self, votes: list[np.ndarray], sampled: int) -> dict[str, float | None]:
        real = np.sum(votes, axis=0)
        labels = noisy_labels(real, len(votes), self.settings.laplace_scale)
        stats = self.trainer.apply(torch.from_numpy(labels))
        if stats is None:
            return {}
        return {
            "student_loss": stats.student_loss,
            "generator_loss": stats.generator_loss,
            "real_fraction": stats.real_fraction,
        }

    def skip(self) -> dict[str, float | None]:
        self.trainer.apply(None)
        return {}
