"""``fedgs simulate``: options generated from RunConfig, so CLI and run-config stay in step.

Running imports Flower, Ray and torch, so only the handler does; ``--help`` needs none of them.
A new run goes to a new or empty ``--out`` (a run there is continued with ``--resume``, never
overwritten); Ctrl-C or SIGTERM stops a run with what it did saved, and exit status 130.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from pathlib import Path

from fedgs import recipes, stopping
from fedgs.run_config import add_arguments, from_namespace
from fedgs.simulations.simulate import (
    EngineOptions,
    grpc_fork_handlers_off,
    refuse_local_ray_options,
    run_simulation,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="federated GS-WGAN on Flower's simulation engine (Ray)",
        description=(
            "Runs the fedgs ServerApp and ClientApp on Flower's simulation engine: one virtual "
            "SuperNode per client, each with a private critic kept on disk. With no options: a "
            "quick run on the embedded default data (5,000 real MNIST digits in 50 clients)."
        ),
        epilog=RUN_CONFIG_EPILOG,
    )
    recipes.add_option(parser)
    groups = add_arguments(parser)
    groups["data"].add_argument(
        "--clients", dest="num_clients", type=int, help="alias of --num-clients"
    )
    groups["outputs"].add_argument("--out", dest="run_dir", help="alias of --run-dir")
    _add_engine_options(groups["engine"])
    parser.set_defaults(handler=_run)
    _register_comm_cost(subparsers)


RUN_CONFIG_EPILOG = (
    "Every option in the groups above is a Flower run-config key, except the aliases --clients "
    "and --out and the engine's --cpus-per-client, --ray-cpus, --object-store-mb, "
    "--poll-seconds and --server-threads (this command's own): the same keys work in a recipe "
    '(--config FILE) and in `flwr run . --run-config "key=value"`; docs/options.md lists them.'
)

COMM_COST_KEYS = (
    "dataset",
    "data_dir",
    "labels",
    "num_clients",
    "batch_size",
    "critic_steps",
    "generator_width",
    "critic_width",
    "fedavg_clients_per_round",
    "fedavg_critic_steps",
    "fedavg_generator_steps",
    "teachers_per_step",
    "datalens_top_k",
    "pate_teacher_steps",
    "pate_student_steps",
    "seed",
)


def _register_comm_cost(subparsers: argparse._SubParsersAction) -> None:
    from fedgs.simulations.comm_cost import SECAGG_COHORTS

    parser = subparsers.add_parser(
        "comm-cost",
        help="bytes per generator update of every strategy, measured on real messages",
        description=(
            "Runs every strategy (and float16 / bfloat16 wire variants; Fed-Avg GAN with the "
            "paper's networks and with fedgs') for one step each on Flower's simulation engine "
            "on the same data, measures the serialized size of every message, and writes a "
            "table (markdown + CSV) and a log-scale bar chart to --out. A message's size does "
            "not depend on how long anything trained: --steps N averages over N steps. GS-WGAN "
            "with secure aggregation (SecAgg+'s four round trips) is measured on one secure "
            "step in this process per --secagg-cohorts size m; m = 100 alone takes about a "
            "minute of one core."
        ),
    )
    groups = add_arguments(parser, COMM_COST_KEYS)
    parser.add_argument("--steps", type=int, default=1, help="steps per variant (%(default)s)")
    parser.add_argument(
        "--secagg-cohorts",
        type=int,
        nargs="*",
        default=list(SECAGG_COHORTS),
        metavar="M",
        help="cohort sizes of the secure-aggregation rows, each >= 3; none: no secure rows "
        f"(default: {' '.join(map(str, SECAGG_COHORTS))})",
    )
    parser.add_argument("--out", default="runs/comm-cost", help="output folder (%(default)s)")
    _add_engine_options(groups["engine"])
    parser.set_defaults(handler=_run_comm_cost)


def _add_engine_options(engine: argparse._ArgumentGroup) -> None:
    """The simulation engine's own options (not run-config keys), in the engine group."""
    defaults = EngineOptions()
    engine.add_argument(
        "--cpus-per-client",
        type=float,
        default=defaults.cpus_per_client,
        help="Ray CPUs per virtual client (%(default)s)",
    )
    engine.add_argument(
        "--ray-cpus",
        type=int,
        default=defaults.ray_cpus,
        help="CPUs the local Ray may use; 0 = all; refused with --ray-address, where each "
        "node's `ray start --num-cpus` sets its own (%(default)s)",
    )
    engine.add_argument(
        "--object-store-mb",
        type=int,
        default=defaults.object_store_mb,
        help="cap on the local Ray's object store; refused with --ray-address, where each "
        "node's `ray start --object-store-memory` sets its own (%(default)s)",
    )
    engine.add_argument(
        "--poll-seconds",
        type=float,
        default=defaults.poll_seconds,
        help="polling interval of the engine and grid; Flower's own is 0.1 (%(default)s)",
    )
    engine.add_argument(
        "--server-threads",
        type=int,
        default=defaults.server_threads,
        help="torch threads of the server process, whose generator work runs while the clients "
        "wait (e.g. 2 beside OMP_NUM_THREADS=1 on a 2-core machine); 0 = inherited (%(default)s)",
    )


def _engine(args: argparse.Namespace) -> EngineOptions:
    return EngineOptions(
        args.cpus_per_client,
        args.ray_cpus,
        args.object_store_mb,
        args.poll_seconds,
        args.server_threads,
    )


def _run_comm_cost(args: argparse.Namespace) -> int:
    grpc_fork_handlers_off()  # before the imports below load gRPC
    from fedgs.data import DataError
    from fedgs.simulations.comm_cost import measure, measure_secure, write_outputs

    if args.steps < 1:
        print("fedgs comm-cost: error: --steps must be at least 1")
        return 2
    if any(m < 3 for m in args.secagg_cohorts):
        print("fedgs comm-cost: error: --secagg-cohorts sizes must be at least 3")
        return 2
    try:
        base, engine = from_namespace(args), _engine(args)
    except (TypeError, ValueError) as error:
        print(f"fedgs comm-cost: error: {error}")
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        rows = measure(base, out, engine)
        rows += measure_secure(base, tuple(args.secagg_cohorts))
    except DataError as error:
        print(f"fedgs comm-cost: error: {error}")
        return 2
    except stopping.StopRequested as stop:
        return exit_stopped("fedgs comm-cost", f"{stop}; nothing of the table was written")
    paths = write_outputs(rows, out, base)
    print(paths["md"].read_text())
    print(f"table: {paths['md']}  csv: {paths['csv']}  chart: {paths['png']}")
    return 0


def existing_run(run_dir: Path) -> list[str]:
    """What ``run_dir`` already holds (a few names; none: missing or empty, a new run's)."""
    if not run_dir.is_dir():
        return []
    return sorted(entry.name for entry in run_dir.iterdir())


def exit_stopped(command: str, message: str) -> int:
    """The one line of a stopped run; a further Ctrl-C is not needed and interrupts nothing."""
    for signum in stopping.SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    print(f"{command}: {message}", file=sys.stderr, flush=True)
    return stopping.EXIT_CODE


def _run(args: argparse.Namespace) -> int:
    grpc_fork_handlers_off()  # before the imports below load gRPC
    from fedgs.data import DataError
    from fedgs.server.silence import ClientsFailed
    from fedgs.simulations.cluster import ClusterError
    from fedgs.simulations.engine_log import FLOWER_LOG_NAME
    from fedgs.training.run_dir import summarize

    try:
        config, engine = from_namespace(args), _engine(args)
        if config.ray_address:
            refuse_local_ray_options(engine)
    except (TypeError, ValueError) as error:
        print(f"fedgs simulate: error: {error}")
        return 2
    run_dir = Path(config.run_dir)
    if not config.resume and (found := existing_run(run_dir)):
        shown = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
        print(
            f"fedgs simulate: error: {run_dir} is not empty ({shown}): --resume continues the "
            "run there; a new run needs a new --out"
        )
        return 2
    try:
        run_simulation(config, engine)
    except stopping.StopRequested as stop:
        return exit_stopped(
            "fedgs simulate",
            f"{stop}; `fedgs simulate --resume --out {shlex.quote(str(run_dir))}` (same "
            "options) goes on",
        )
    except (DataError, ClusterError) as error:  # raised before Ray's engine starts
        print(f"fedgs simulate: error: {error}")
        return 2
    except ClientsFailed as error:
        log = run_dir / FLOWER_LOG_NAME
        print(f"fedgs simulate: error: the run stopped: {error}\n  every failure in full: {log}")
        return 1
    if not (run_dir / "privacy.json").exists():
        print(
            f"fedgs simulate: the run ended without results; see the log above (run dir {run_dir})"
        )
        return 1
    print(summarize(run_dir))
    return 0
