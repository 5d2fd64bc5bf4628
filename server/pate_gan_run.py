"""One PATE-GAN run: the teacher loop with a student discriminator and G on the server."""

from __future__ import annotations

from typing import Any

from dp_accounting import dp_event

from fedgs.server.federated_run import METRIC_COLUMNS
from fedgs.server.pate_gan_strategy import PateGANStrategy, PateSettings
from fedgs.server.teacher_run import TeacherRun
from fedgs.training.generator import GeneratorTrainer
from fedgs.training.pate_gan import PateGANTrainer

DATA_DEPENDENT_NOTE = (
    "not reported: PATE's data-dependent moments bound (PATE-GAN appendix, Theorem 5) is smaller "
    "when the teachers agree, but it depends on the vote counts and would itself need a private "
    "release; the epsilon above is the data-independent bound"
)


def _per_sample_epsilon(step: dp_event.DpEvent) -> tuple[int, float]:
    """(samples voted on, pure epsilon per sample) of a step: two discrete Laplace counts per
    sample (``teacher_events.pate_step_event``), or one continuous Laplace release per sample
    (ledgers written before the discrete Laplace)."""
    count = step.count if isinstance(step, dp_event.SelfComposedDpEvent) else 1
    release = step.event if isinstance(step, dp_event.SelfComposedDpEvent) else step
    if isinstance(release, dp_event.DiscreteLaplaceDpEvent):
        return count // 2, 2 * release.noise_parameter * release.sensitivity
    return count, 1.0 / release.noise_multiplier


class PateGANRun(TeacherRun):
    """PATE-GAN: clients' teacher discriminators vote, the server trains a student and G."""

    name = "PATE-GAN"
    settings_class = PateSettings
    trainer_class = PateGANTrainer
    strategy_class = PateGANStrategy
    columns = (
        *METRIC_COLUMNS,
        "student_loss",
        "generator_loss",
        "real_fraction",
        TeacherRun.epsilon_column,
    )

    @property
    def generator_trainer(self) -> GeneratorTrainer:
        return self.trainer.generator

    def mechanism(self) -> dict[str, Any]:
        s = self.settings
        queries, per_sample = _per_sample_epsilon(self.step_event())
        multiplier = 1.0 / per_sample  # Laplace scale / L1 sensitivity of a sample's votes
        return {
            "name": "PATE LNMax: discrete Laplace noise on the real/fake vote counts of every "
            "sample",
            "laplace_scale": s.laplace_scale,
            "teacher_steps": s.teacher_steps,
            "student_steps": s.student_steps,
            "samples_voted_per_step": queries,
            "neighbouring": "replace one client (all of a writer's data)",
            "sensitivity": "L1 2 per sample (one vote moves from one count to the other)",
            "laplace_noise_multiplier": multiplier,
            "epsilon_per_sample": 1.0 / multiplier,
            "data_dependent_epsilon": DATA_DEPENDENT_NOTE,
        }
