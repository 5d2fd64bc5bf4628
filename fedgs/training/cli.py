"""``fedgs centralized``: GS-WGAN in one process on K virtual clients (no Flower).

It takes the run-config options that make sense without Flower, so a setting means the same in
``fedgs centralized`` and ``fedgs simulate``. Data loading and training import torch, so only
the handler imports them, not ``--help``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fedgs.data.errors import DataError
from fedgs.run_config import add_arguments, from_namespace

# RunConfig fields the single-process runner uses (no nodes, no per-client state on disk)
LOCAL_KEYS = (
    "dataset",
    "data_dir",
    "labels",
    "num_clients",
    "steps",
    "warm_start_steps",
    "clients_per_step",
    "batch_size",
    "critic_steps",
    "noise_multiplier",
    "clip_norm",
    "lr_generator",
    "lr_critic",
    "generator_width",
    "critic_width",
    "beta1",
    "ema_decay",
    "delta",
    "accountant",
    "eval_every",
    "eval_samples",
    "seed",
    "sampling_seed",
    "device",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "centralized",
        help="GS-WGAN in one process on K virtual clients (no Flower)",
        description=(
            "Runs GS-WGAN in a single process: the data are cut into clients, each with its own "
            "private critic; every generator step queries clients-per-step critics and applies "
            "their sanitized gradients. The paper's centralized setting (MNIST cut into K "
            "subsets) and the plain-PyTorch reference of the Flower runner."
        ),
    )
    add_arguments(parser, LOCAL_KEYS)
    parser.add_argument("--clients", dest="num_clients", type=int, help="alias of --num-clients")
    parser.add_argument(
        "--out", type=Path, default=Path("runs/centralized"), help="run directory (%(default)s)"
    )
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from fedgs.data.load import load_federated
    from fedgs.training.local_loop import LocalRunOptions, run_local_gswgan
    from fedgs.training.run_dir import summarize

    try:
        config = from_namespace(args)
        dataset = load_federated(
            config.dataset,
            config.data_dir or None,
            labels=config.labels,
            num_clients=config.num_clients or None,
            seed=config.seed,
        )
        options = LocalRunOptions(
            steps=config.steps,
            warm_start_steps=config.warm_start_steps,
            clients_per_step=config.clients_per_step,
            eval_every=config.eval_every,
            eval_samples=config.eval_samples,
            delta=config.delta,
            accountant=config.accountant,
            seed=config.seed,
            sampling_seed=config.sampling_seed,
            device=config.device,
        )
        settings = {k.replace("_", "-"): getattr(config, k) for k in LOCAL_KEYS}
        result = run_local_gswgan(dataset, config.gswgan(), options, args.out, settings)
    except (DataError, ValueError) as error:
        print(f"fedgs centralized: error: {error}", flush=True)
        return 2
    s0, s1 = result.initial_scores, result.final_scores
    print(f"\n{dataset.num_clients} clients of '{dataset.name}', single process (no Flower)")
    if s0 is not None and s1 is not None:
        print(f"  domain FID {s0.fid_domain:.1f} -> {s1.fid_domain:.1f} (untrained -> trained)")
    print(summarize(result.run_dir))
    return 0
