"""One DataLens run: the teacher loop with G trained on the noisy top-k sign votes."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from fedgs.server.datalens_strategy import DataLensSettings, DataLensStrategy
from fedgs.server.replies import StepOutcome
from fedgs.server.run import METRIC_COLUMNS
from fedgs.server.teacher_run import TeacherRun, generator_state, load_generator_state
from fedgs.training.generator import GeneratorTrainer


class DataLensRun(TeacherRun):
    """DataLens TopAgg: warm-started private critics as teachers, G on the server."""

    name = "DataLens"
    settings_class = DataLensSettings
    trainer_class = GeneratorTrainer
    strategy_class = DataLensStrategy
    columns = (*METRIC_COLUMNS, "agreed_fraction", TeacherRun.epsilon_column)

    def step_metrics(self, outcome: StepOutcome) -> dict:
        return {"agreed_fraction": self.strategy.last_agreed_fraction}

    def trainer_state(self) -> dict[str, Any]:
        return generator_state(self.trainer)

    def load_trainer_state(self, state: dict[str, Any]) -> None:
        load_generator_state(self.trainer, state)

    def mechanism(self) -> dict[str, Any]:
        s, batch = self.settings, self.config.batch_size
        _, multiplier, _ = self.step_kind()
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

    def final_payload(self) -> dict:
        return {
            "strategy": "datalens",
            "generator": self.trainer.generator.state_dict(),
            "ema": self.trainer.ema.module.state_dict(),
            "gswgan": asdict(self.config.gswgan()),
            "num_classes": self.trainer.num_classes,
        }
