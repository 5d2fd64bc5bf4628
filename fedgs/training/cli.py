"""``fedgs centralized``: GS-WGAN in one process on K virtual clients (no Flower).

Data loading and training import torch, so only the handler imports them, not ``--help``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fedgs.data.errors import DataError
from fedgs.data.names import DATASET_NAMES, LABEL_MODES
from fedgs.training.hparams import GSWGANConfig


def add_gswgan_arguments(parser: argparse.ArgumentParser) -> None:
    """GS-WGAN hyper-parameters, shared by every runner's command."""
    d = GSWGANConfig()
    g = parser.add_argument_group("GS-WGAN")
    g.add_argument(
        "--batch-size", type=int, default=d.batch_size, help="fake batch size B (%(default)s)"
    )
    g.add_argument(
        "--critic-steps",
        type=int,
        default=d.critic_steps,
        help="critic steps per generator step, n_dis (%(default)s)",
    )
    g.add_argument(
        "--noise-multiplier",
        type=float,
        default=d.noise_multiplier,
        help="sigma; noise std is 2*C*sigma (%(default)s)",
    )
    g.add_argument(
        "--clip-norm",
        type=float,
        default=d.clip_norm,
        help="per-sample clipping bound C (%(default)s)",
    )
    g.add_argument(
        "--lr-generator",
        type=float,
        default=d.lr_generator,
        help="Adam learning rate of G (%(default)s)",
    )
    g.add_argument(
        "--lr-critic",
        type=float,
        default=d.lr_critic,
        help="Adam learning rate of each D_k (%(default)s)",
    )
    g.add_argument(
        "--generator-width",
        type=int,
        default=d.generator_width,
        help="G channel width; 64 = paper size (%(default)s)",
    )
    g.add_argument(
        "--critic-width",
        type=int,
        default=d.critic_width,
        help="D channel width; 64 = paper size (%(default)s)",
    )
    g.add_argument(
        "--ema-decay",
        type=float,
        default=d.ema_decay,
        help="EMA decay of G for samples (%(default)s)",
    )


def config_from_args(args: argparse.Namespace) -> GSWGANConfig:
    return GSWGANConfig(
        batch_size=args.batch_size,
        critic_steps=args.critic_steps,
        noise_multiplier=args.noise_multiplier,
        clip_norm=args.clip_norm,
        lr_generator=args.lr_generator,
        lr_critic=args.lr_critic,
        generator_width=args.generator_width,
        critic_width=args.critic_width,
        ema_decay=args.ema_decay,
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "centralized",
        help="GS-WGAN in one process on K virtual clients (no Flower)",
        description=(
            "Runs GS-WGAN in a single process: the data are cut into clients, each with its own "
            "private critic; every generator step queries clients-per-step critics and applies "
            "their sanitized gradients. With no options: a short smoke run on the embedded "
            "5,000 MNIST digits (small models)."
        ),
    )
    parser.add_argument("--dataset", choices=DATASET_NAMES, default="embedded")
    parser.add_argument("--data-dir", type=Path, help="LEAF output or MNIST IDX folder")
    parser.add_argument("--labels", choices=LABEL_MODES, default="digits")
    parser.add_argument("--clients", type=int, help="number of virtual clients (embedded/mnist)")
    parser.add_argument(
        "--steps", type=int, default=200, help="private generator steps (%(default)s)"
    )
    parser.add_argument(
        "--warm-start-steps",
        type=int,
        default=20,
        help="non-private critic pre-training steps per client (%(default)s)",
    )
    parser.add_argument(
        "--clients-per-step",
        type=int,
        default=1,
        help="critics queried per generator step (%(default)s)",
    )
    parser.add_argument(
        "--delta",
        type=float,
        default=1e-5,
        help="delta of the reported (epsilon, delta) (%(default)s)",
    )
    parser.add_argument(
        "--accountant", default="autodp-rdp", help="privacy accountant (%(default)s)"
    )
    parser.add_argument(
        "--eval-every",
        type=int,
        default=100,
        help="score and save samples every N steps (%(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", type=Path, default=Path("runs/centralized"), help="run directory (%(default)s)"
    )
    add_gswgan_arguments(parser)
    parser.set_defaults(handler=_run, generator_width=8, critic_width=16)


def _run(args: argparse.Namespace) -> int:
    from fedgs.data.load import load_federated
    from fedgs.training.local_loop import LocalRunOptions, run_local_gswgan
    from fedgs.training.run_dir import summarize

    try:
        dataset = load_federated(
            args.dataset, args.data_dir, labels=args.labels, num_clients=args.clients
        )
        config = config_from_args(args)
        options = LocalRunOptions(
            steps=args.steps,
            warm_start_steps=args.warm_start_steps,
            clients_per_step=args.clients_per_step,
            eval_every=args.eval_every,
            delta=args.delta,
            accountant=args.accountant,
            seed=args.seed,
        )
        result = run_local_gswgan(dataset, config, options, args.out)
    except (DataError, ValueError) as error:
        print(f"fedgs centralized: error: {error}", flush=True)
        return 2
    s0, s1 = result.initial_scores, result.final_scores
    print(f"\n{dataset.num_clients} clients of '{dataset.name}', single process (no Flower)")
    print(f"  domain FID {s0.fid_domain:.1f} -> {s1.fid_domain:.1f} (untrained -> trained)")
    print(summarize(result.run_dir))
    return 0
