"""One DataLens run: the teacher loop with G trained on the noisy top-k sign votes."""

from __future__ import annotations

import math
from typing import Any

from fedgs.server.datalens_strategy import DataLensSettings, DataLensStrategy
from fedgs.server.federated_run import METRIC_COLUMNS
from fedgs.server.teacher_run import TeacherRun
from fedgs.training.generator import GeneratorTrainer


class DataLensRun(TeacherRun):
    """DataLens TopAgg: warm-started private critics as teachers, G on the server."""

    name = "DataLens"
    settings_class = DataLensSettings
    trainer_class = GeneratorTrainer
    strategy_class = DataLensStrategy
    columns = (*METRIC_COLUMNS, "agreed_fraction", TeacherRun.epsilon_column)

    @property
    def generator_trainer(self) -> GeneratorTrainer:
        return self.trainer

    def mechanism(self) -> dict[str, Any]:
        s, batch = self.settings, self.config.batch_size
        multiplier = self.step_event().noise_multiplier  # a Gaussian per voting teacher
        return {
            "name": "DataLens TopAgg (deterministic top-k signs, Gaussian noise on the vote sum)",
            "top_k": s.top_k,
            "batch_size": batch,
            "noise_std": s.noise_std,
            "threshold": s.threshold,
            "neighbouring": "replace one client (all of a writer's data)",
            "sensitivity": f"L2 2*sqrt(k*B) = {2 * math.sqrt(s.top_k * batch):.4g} per voting "
            "teacher and step (a B x 784 vote with at most k entries of +-1 per row)",
            "noise_multiplier_per_step": multiplier,
        }
