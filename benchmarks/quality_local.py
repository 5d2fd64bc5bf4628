"""GS-WGAN quality diagnostics on real FEMNIST writers with the single-process loop (no Flower).

Usage: python benchmarks/quality_local.py --writers 100 --steps 3000 --warm 30 --lrg 5e-4 \
           --beta1 0.9 --ndis 2 --out runs/quality-a
Prints one JSON line with the settings, wall time and the initial/final scores; the run
directory holds the metrics CSV (scores every --eval steps) and the sample grids.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from fedgs.data import load_federated
from fedgs.training.hparams import GSWGANConfig
from fedgs.training.local_loop import LocalRunOptions, run_local_gswgan


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default="../shared/data/femnist_leaf")
    p.add_argument("--writers", type=int, default=100, help="first N digit writers")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--warm", type=int, default=30, help="warm-start steps per client")
    p.add_argument("--m", type=int, default=1, help="clients per step")
    p.add_argument("--B", type=int, default=32, help="batch size")
    p.add_argument("--ndis", type=int, default=5, help="critic steps per generator step")
    p.add_argument("--gw", type=int, default=16, help="generator width")
    p.add_argument("--dw", type=int, default=16, help="critic width")
    p.add_argument("--lrg", type=float, default=1e-4)
    p.add_argument("--lrd", type=float, default=1e-4)
    p.add_argument("--beta1", type=float, default=0.5)
    p.add_argument("--sigma", type=float, default=1.07)
    p.add_argument("--clip", type=float, default=1.0, help="per-sample clipping bound C")
    p.add_argument("--smooth", type=float, default=0.0, help="server-side gradient blur sigma")
    p.add_argument("--mismatch", type=float, default=0.0, help="critic label-mismatch weight")
    p.add_argument("--eval", type=int, default=500)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dataset = load_federated("femnist", a.data_dir, labels="digits").subset(range(a.writers))
    config = GSWGANConfig(
        batch_size=a.B,
        critic_steps=a.ndis,
        noise_multiplier=a.sigma,
        clip_norm=a.clip,
        gradient_smoothing=a.smooth,
        label_mismatch_weight=a.mismatch,
        lr_generator=a.lrg,
        lr_critic=a.lrd,
        generator_width=a.gw,
        critic_width=a.dw,
        beta1=a.beta1,
    )
    options = LocalRunOptions(
        steps=a.steps,
        warm_start_steps=a.warm,
        clients_per_step=a.m,
        eval_every=a.eval,
        eval_samples=1000,
    )
    started = time.time()
    result = run_local_gswgan(dataset, config, options, a.out)
    print(
        json.dumps(
            {
                "settings": vars(a),
                "seconds": time.time() - started,
                "initial": result.initial_scores.to_dict(),
                "final": result.final_scores.to_dict(),
            }
        )
    )


if __name__ == "__main__":
    main()
