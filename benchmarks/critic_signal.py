"""What a GS-WGAN query's signal is made of, measured on a finished run's own critics.

Usage: python benchmarks/critic_signal.py RUN_DIR [--clients 8] [--reference-steps 200]

Two questions the levers "adaptive clipping" and "better critics" rest on:
1. Clipping: the pre-clip L2 norm of each upstream-gradient row a critic would release, after
   the query's critic steps. When (nearly) every row is above C, every released row is a unit
   direction times C, so a lower or adaptive C cannot raise the signal-to-noise ratio.
2. Critic quality: the cosine of those rows with the rows of a reference critic trained
   ``--reference-steps`` steps on the same fakes (the direction a fully trained critic gives),
   for the run's critic steps and learning rate and for variants of both.

The critics are the run's saved client states (a simulation keeps them on this machine; nothing
here is, or could be, sent to a server), queried with fakes of the run's final raw generator
(the training copy the server queries with), at the run's last step.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from fedgs.client.state_store import ClientStateStore
from fedgs.evaluation.generator_loader import load_generator
from fedgs.evaluation.run_files import RunFiles
from fedgs.models.losses import generator_upstream_gradient
from fedgs.run_config import RunConfig
from fedgs.run_data import dataset_for, state_dir_for
from fedgs.training.critic import PrivateCritic
from fedgs.training.hparams import GSWGANConfig

Fakes = list[tuple[torch.Tensor, torch.Tensor]]


def released_rows(
    images: tuple[torch.Tensor, torch.Tensor],
    num_classes: int,
    config: GSWGANConfig,
    saved: dict,
    fakes: Fakes,
    step: int,
    lr: float,
    steps: int,
) -> torch.Tensor:
    """The clean upstream-gradient rows after ``steps`` critic steps at ``lr`` from ``saved``."""
    critic = PrivateCritic(*images, num_classes, config, seed=0)
    critic.load_state_dict(saved)
    for group in critic.optimizer.param_groups:  # the saved optimizer state carries the run's lr
        group["lr"] = lr
    critic.train_on(fakes, step=step, steps=steps)
    return generator_upstream_gradient(critic.critic, *fakes[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path)
    p.add_argument("--clients", type=int, default=8, help="the first N clients with a state")
    p.add_argument("--reference-steps", type=int, default=200)
    p.add_argument("--lr-factors", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    p.add_argument("--steps-factors", type=float, nargs="+", default=[1.0, 2.0])
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    run = RunFiles.open(a.run)
    settings = {k: v for k, v in run.config.items() if k != "num_nodes"}  # num_nodes: the grid's
    run_config = RunConfig.from_user_config(settings)
    config, dataset = run_config.gswgan(), dataset_for(run_config)
    generator = load_generator(a.run)
    model = generator.raw.train()  # queries are generated in training mode
    store = ClientStateStore(state_dir_for(run_config))
    step = int(run.metrics[-1]["step"])
    variants = {(1.0, 1.0)} | {(f, 1.0) for f in a.lr_factors} | {(1.0, f) for f in a.steps_factors}
    cosines: dict[tuple[float, float], list[float]] = {v: [] for v in sorted(variants)}
    norms = []
    clients = [k for k, cid in enumerate(dataset.client_ids) if store.path(cid).exists()]
    if not clients:
        raise SystemExit(f"{a.run}: no saved client state under {store.root}")
    for k in clients[: a.clients]:
        saved = store.load(dataset.client_ids[k])["critic_state"]
        labels = [
            torch.randint(generator.num_classes, (config.batch_size,))
            for _ in range(config.fake_batches or config.critic_steps)  # 0: one per critic step
        ]
        with torch.no_grad():
            fakes = [(model(torch.randn(len(y), config.z_dim), y), y) for y in labels]
        args = (dataset.client_train(k), generator.num_classes, config, saved, fakes, step)
        reference = released_rows(*args, config.lr_critic, a.reference_steps)
        for lr_factor, steps_factor in cosines:
            lr, steps = config.lr_critic * lr_factor, round(config.critic_steps * steps_factor)
            rows = released_rows(*args, lr, steps)
            if (lr_factor, steps_factor) == (1.0, 1.0):
                norms.append(rows.norm(dim=1))
            cosine = torch.nn.functional.cosine_similarity(rows, reference, dim=1).mean()
            cosines[(lr_factor, steps_factor)].append(float(cosine))
    norm = torch.cat(norms)
    clipping = {
        "run": str(a.run),
        "clients": len(norms),
        "rows": int(norm.numel()),
        "clip_norm": config.clip_norm,
        "pre_clip_norm_median": round(float(norm.median()), 3),
        "pre_clip_norm_q10": round(float(norm.quantile(0.1)), 3),
        "share_below_clip": round(float((norm < config.clip_norm).float().mean()), 4),
    }
    print(json.dumps(clipping))
    for (lr_factor, steps_factor), values in cosines.items():
        quality = {
            "lr_critic": config.lr_critic * lr_factor,
            "critic_steps": round(config.critic_steps * steps_factor),
            "reference_steps": a.reference_steps,
            "cosine_with_reference_mean": round(sum(values) / len(values), 3),
        }
        print(json.dumps(quality))


if __name__ == "__main__":
    main()
