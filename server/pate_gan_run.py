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
        step = self.step_event()  # Laplace releases, one per sample voted on
        queries = step.count if isinstance(step, dp_event.SelfComposedDpEvent) else 1
        multiplier = (step.event if queries > 1 else step).noise_multiplier
        return {
            "name": "PATE LNMax: Laplace noise on the real/fake vote counts of every sample",
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
