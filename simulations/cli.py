"""``fedgs simulate``: options generated from RunConfig, so CLI and run-config stay in step.

Running imports Flower, Ray and torch, so only the handler does; ``--help`` needs none of them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fedgs.run_config import add_arguments, from_namespace
from fedgs.simulations.simulate import EngineOptions, run_simulation


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="federated GS-WGAN on Flower's simulation engine (Ray)",
        description=(
            "Runs the fedgs ServerApp and ClientApp on Flower's simulation engine: one virtual "
            "SuperNode per client, each with a private critic kept on disk. With no options: a "
            "quick run on the embedded default data (5,000 real MNIST digits in 50 clients)."
        ),
    )
    add_arguments(parser)
    parser.add_argument("--clients", dest="num_clients", type=int, help="alias of --num-clients")
    parser.add_argument("--out", dest="run_dir", help="alias of --run-dir")
    engine = parser.add_argument_group("simulation engine")
    defaults = EngineOptions()
    engine.add_argument(
        "--cpus-per-client",
        type=float,
        default=defaults.cpus_per_client,
        help="Ray CPUs per virtual client (%(default)s)",
    )
    engine.add_argument(
        "--gpus-per-client",
        type=float,
        default=defaults.gpus_per_client,
        help="GPU fraction per virtual client (%(default)s)",
    )
    engine.add_argument(
        "--ray-cpus",
        type=int,
        default=defaults.ray_cpus,
        help="CPUs Ray may use; 0 = all (%(default)s)",
    )
    engine.add_argument(
        "--object-store-mb",
        type=int,
        default=defaults.object_store_mb,
        help="cap on Ray's object store (%(default)s)",
    )
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from fedgs.training.run_dir import summarize

    try:
        config = from_namespace(args)
    except (TypeError, ValueError) as error:
        print(f"fedgs simulate: error: {error}")
        return 2
    options = EngineOptions(
        args.cpus_per_client, args.gpus_per_client, args.ray_cpus, args.object_store_mb
    )
    run_dir = run_simulation(config, options)
    if not (Path(run_dir) / "privacy.json").exists():
        print(
            f"fedgs simulate: the run ended without results; see the log above (run dir {run_dir})"
        )
        return 1
    print(summarize(Path(run_dir)))
    return 0
