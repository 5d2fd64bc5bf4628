"""Tiny finished run directories built in-process, in each runner's file formats.

Training a real run takes minutes; evaluation only needs the files, so tests write them here
with an untrained width-4 generator: the same keys as server/gswgan_run.py (``fedgs simulate``),
server/fedavg_gan_run.py (Fed-Avg GAN) and fedgs/training/local_loop.py (``fedgs centralized``,
including the older payload that kept the config under ``config``).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import torch

from fedgs.evaluation.quality_table import COLUMNS
from fedgs.metrics import save_class_grid
from fedgs.metrics.bars import DIRECTIONS
from fedgs.models import ConditionalResNetGenerator
from fedgs.privacy import FedAvgLedger, PrivacyLedger
from fedgs.privacy.client_sampling import SECRET, ClientSampling
from fedgs.training.fedavg_gan import build_models
from fedgs.training.hparams import FedAvgGANConfig, GSWGANConfig
from fedgs.training.run_dir import RunDirectory

# control levels (CNN accuracy) of a fabricated evaluation, in the instrument's table order
CONTROL_LEVELS = {
    "real training writers": 0.94,
    "lookup k=1": 0.40,
    "lookup k=5": 0.62,
    "public fonts": 0.55,
    "untrained generator": 0.12,
    "flat grey": 0.11,
}

CONFIG = GSWGANConfig(batch_size=8, generator_width=4, critic_width=4, critic_steps=1)
STEPS = 3
FORMATS = ("simulate", "centralized", "centralized-v0", "fedavg-gan", "pate-gan")


def _payload(kind: str) -> dict:
    if kind == "fedavg-gan":
        config = FedAvgGANConfig(models="gswgan", generator_width=4, critic_width=4)
        generator, _ = build_models(config, 10)
        return {
            "strategy": "fedavg-gan",
            "generator": generator.state_dict(),
            "fedavg_gan": config.to_dict(),
            "num_classes": 10,
        }
    torch.manual_seed(0)
    generator = ConditionalResNetGenerator(10, CONFIG.z_dim, CONFIG.generator_width)
    payload = {
        "generator": generator.state_dict(),
        "ema": generator.state_dict(),
        "num_classes": 10,
    }
    if kind == "centralized-v0":
        return payload | {"config": CONFIG.to_dict()}
    strategy = "pate-gan" if kind == "pate-gan" else "gswgan"
    return payload | {"strategy": strategy, "gswgan": CONFIG.to_dict()}


def _config(kind: str) -> dict:
    data = {"dataset": "embedded", "data-dir": "", "labels": "digits", "seed": 0}
    if kind.startswith("centralized"):
        return {
            "runner": "local",
            "dataset": "embedded",
            "num_clients": 50,
            "gswgan": CONFIG.to_dict(),
            "options": {"seed": 0, "warm_start_steps": 2, "clients_per_step": 1},
        }
    strategy = kind if kind in ("fedavg-gan", "pate-gan") else "gswgan"
    return data | {
        "strategy": strategy,
        "num-clients": 0,
        "num_nodes": 50,
        "warm-start-steps": 2,
        "clients-per-step": 1,
        "steps": STEPS,
    }


def make_run(root: Path, kind: str = "simulate") -> Path:
    """A finished ``kind`` run (one of FORMATS) of STEPS steps under ``root``."""
    out = RunDirectory(root)
    out.write_json(out.config_json, _config(kind))
    payload = _payload(kind)
    torch.save(payload, out.generator_pt)
    if kind == "fedavg-gan":
        ledger = FedAvgLedger(0.01)
        for _ in range(STEPS):
            ledger.record_round(10, 50)
        # a version-1 privacy.json (no version field), as Fed-Avg GAN runs wrote it
        v1 = {"strategy": "fedavg-gan"} | ledger.summary(1e-5) | {"steps": STEPS}
        out.write_json(out.privacy_json, v1)
        epsilon_column = "epsilon_trusted_server"
    elif kind == "pate-gan":  # a version-1 teacher layout, without the strategy tag
        block = {"threat_model": "trusted-aggregator", "assumption": "-", "epsilon": 3.0}
        untrusted = {"epsilon": None, "note": "clients send unnoised votes"}
        privacy = {"delta": 1e-5, "accountant": "autodp-rdp", "steps": STEPS}
        privacy |= {"trusted_aggregator": block, "untrusted_server": untrusted}
        out.write_json(out.privacy_json, privacy)
        epsilon_column = "epsilon_trusted_aggregator"
    else:
        ledger = PrivacyLedger()
        for step in range(STEPS):
            ledger.record_query(f"client-{step % 2}", CONFIG.noise_multiplier, CONFIG.batch_size)
            ledger.record_step(1, 50, CONFIG.noise_multiplier, CONFIG.batch_size)
        out.write_privacy_report(
            "gswgan",
            ledger.summary(1e-5, "autodp-rdp"),
            {
                "steps": STEPS,
                "noise_multiplier": CONFIG.noise_multiplier,
                "batch_size": CONFIG.batch_size,
            },
            ClientSampling(SECRET).report(),
        )
        epsilon_column = "epsilon_untrusted"
    with out.metrics_csv.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "step",
                "no_reply",
                epsilon_column,
                "received_row_norm_mean",
                "fid_domain",
                "inception_score",
                "label_agreement",
            ]
        )
        for step in range(1, STEPS + 1):
            scored = step == STEPS
            writer.writerow(
                [
                    step,
                    0,
                    0.5 * step,
                    0.2,
                    800.0 if scored else "",
                    1.05 if scored else "",
                    0.1 if scored else "",
                ]
            )
    generator = ConditionalResNetGenerator(10, CONFIG.z_dim, 4)  # any grid will do
    save_class_grid(
        lambda y: generator.eval()(torch.randn(y.shape[0], CONFIG.z_dim), y),
        10,
        out.samples / f"step_{STEPS:06d}.png",
    )
    return out.root


def quality_row(name: str, cnn: float, mlp: float) -> dict:
    """An instrument row (every figure the quality table prints) with the given accuracies."""
    row = dict.fromkeys(DIRECTIONS, 0.5) | {key: 0.5 for key, _ in COLUMNS}
    return row | {"name": name, "cnn_accuracy": cnn, "mlp_accuracy": mlp}


def write_evaluation(run: Path, cnn: float, mlp: float, controls: dict[str, float]) -> None:
    """A ``fedgs evaluate`` summary.json without training anything: the run's accuracies and
    each control's (``controls``: name -> accuracy, CNN and MLP alike)."""
    quality = {
        "run": quality_row("this run", cnn, mlp),
        "controls": [quality_row(n, a, a) for n, a in controls.items()],
        "instrument": {"split": {"clients": 3}, "real": {"cnn": 0.9, "mlp": 0.8}},
    }
    utility = [
        {
            "classifier": name,
            "synthetic_accuracy": value,
            "real_accuracy": 0.9,
            "calibrated_accuracy": value / 0.9,
            "train_samples": 200,
        }
        for name, value in (("mlp", mlp), ("cnn", cnn))
    ]
    summary = {"scores": {"fid_domain": 500.0}, "quality": quality, "utility": utility}
    (run / "evaluation").mkdir(exist_ok=True)
    (run / "evaluation" / "summary.json").write_text(json.dumps(summary))


def without_noise(run: Path) -> Path:
    """Turn a Fed-Avg GAN run into one trained with noise multiplier 0: its privacy.json as the
    ledger writes it then (epsilon infinite, JSON ``Infinity``)."""
    ledger = FedAvgLedger(0.0)
    for _ in range(STEPS):
        ledger.record_round(10, 50)
    out = RunDirectory(run)
    privacy = {"strategy": "fedavg-gan"} | ledger.summary(1e-5) | {"steps": STEPS}
    out.write_json(out.privacy_json, privacy)
    return run
