"""``fedgs simulate``: federated GS-WGAN on Flower's simulation engine (Ray) on one machine.

Every client is a virtual SuperNode running the real ClientApp; the real ServerApp drives them.
Ray is bound to 127.0.0.1 (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0) and its object
store is capped. Ray starts its workers at nice 15; here the worker actors are the clients' whole
workload, so they run at the driver's priority (RAY_worker_niceness=0): niced, any other job on
the machine starves the simulation. With ``ray-address`` the run joins a running Ray cluster
instead, whose nodes run the ClientApps (``fedgs.simulations.cluster`` checks first that they all
see the state directory); each node's own ``ray start`` then sets its CPUs, object store and
niceness.

Ctrl-C and SIGTERM stop a run cleanly (``fedgs.stopping``): Flower's engine keeps the main thread,
so the signal only requests the stop, and the ServerApp's loops end at their next unit of work and
save what was done. ``ray.init`` (inside Flower's engine) would take SIGTERM for itself (exit at
once, which left the ServerApp thread running on, as Ctrl-C did) and Ray's C++ core would answer it
with a stack dump: both are kept off (:func:`_sigterm_left_to_fedgs`,
RAY_DISABLE_FAILURE_SIGNAL_HANDLER=1). Ray's own processes block SIGINT, so a Ctrl-C sent to the
terminal's whole process group reaches the driver only and the clients answer the step in flight.

``ray.init`` starts Ray's head processes by ``fork()`` and a Python ``preexec_fn`` (the slow path
of ``subprocess``), so every native fork handler of the driver runs in each child before its
``exec``. gRPC (grpcio 1.85, loaded by Flower and Ray) installs such handlers by default, and a
child held up in them never reaches ``exec``: the driver then waits in ``ray.init`` for good
(seen once in CI, in the GCS server's start, after a dozen simulations in one process). A process
that only forks to ``exec`` needs none of them, so the driver runs with
``GRPC_ENABLE_FORK_SUPPORT=false`` (:func:`grpc_fork_handlers_off`); Ray's processes inherit it.
The deployment's SuperExec, which forks ClientApps that go on using gRPC without ``exec``, keeps
gRPC's default.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fedgs import stopping
from fedgs.run_config import RunConfig

logger = logging.getLogger(__name__)
GRPC_FORK_SUPPORT = "GRPC_ENABLE_FORK_SUPPORT"


@dataclass(frozen=True)
class EngineOptions:
    """Resources of the simulation engine, not of the run."""

    cpus_per_client: float = 1.0
    ray_cpus: int = 0  # 0 = all cores
    object_store_mb: int = 512
    poll_seconds: float = 0.01  # engine and grid polling (Flower's own: 0.1, see fast_engine)
    # torch threads of this (the ServerApp's) process: G's forwards and backward run while the
    # clients wait for their next query, so the server may use the cores they leave idle
    server_threads: int = 0  # 0 = inherited (OMP_NUM_THREADS or torch's default)

    def __post_init__(self) -> None:
        if self.poll_seconds <= 0:
            raise ValueError(f"poll seconds must be positive, got {self.poll_seconds}")
        if self.server_threads < 0:
            raise ValueError(f"server threads must be >= 0, got {self.server_threads}")


def backend_config(
    options: EngineOptions, gpus_per_client: float = 0.0, ray_address: str = ""
) -> dict:
    """Ray resources: ``gpus_per_client`` is the run config's ``client-num-gpus`` (a fraction
    lets several clients share one GPU; Ray hides the GPUs from clients that ask for none).
    With ``ray_address`` Flower's engine joins that cluster (``ray.init(address=...)``)."""
    init_args: dict = {
        "log_to_driver": False,  # workers' output stays in Ray's session logs (engine_log)
    }
    if ray_address:
        refuse_local_ray_options(options)
        init_args["address"] = ray_address
    else:
        init_args["object_store_memory"] = options.object_store_mb * 1024**2
        if options.ray_cpus > 0:
            init_args["num_cpus"] = options.ray_cpus
    return {
        "client_resources": {
            "num_cpus": options.cpus_per_client,
            "num_gpus": gpus_per_client,
        },
        "init_args": init_args,
    }


def refuse_local_ray_options(options: EngineOptions) -> None:
    """``ray.init`` cannot size a cluster it joins: each node's ``ray start --num-cpus`` and
    ``--object-store-memory`` did, so a local-Ray option with a cluster is an error, not ignored."""
    given = []
    if options.ray_cpus != EngineOptions.ray_cpus:
        given.append("ray-cpus")
    if options.object_store_mb != EngineOptions.object_store_mb:
        given.append("object-store-mb")
    if given:
        raise ValueError(
            f"{' and '.join(given)} size a local Ray, not a cluster joined with ray-address: "
            "each node's `ray start --num-cpus N --object-store-memory BYTES` sets its own"
        )


def num_supernodes(config: RunConfig) -> int:
    from fedgs.run_data import dataset_for

    return dataset_for(config).num_clients


def grpc_fork_handlers_off() -> None:
    """Keep gRPC's fork handlers out of the ``fork()``-then-``exec`` children of ``ray.init``
    (the module's docstring says why). gRPC reads the setting once, when it is first loaded: in a
    process that loaded it earlier the setting cannot take hold, and a warning says so."""
    if GRPC_FORK_SUPPORT in os.environ:
        return  # the user's own choice
    os.environ[GRPC_FORK_SUPPORT] = "false"
    if "grpc" in sys.modules:
        logger.warning(
            "gRPC was loaded before the simulation: its fork handlers stay on, and ray.init may "
            "hang in a child it forks; set %s=false before importing flwr or ray",
            GRPC_FORK_SUPPORT,
        )


def run_simulation(config: RunConfig, options: EngineOptions) -> Path:
    """Run the ServerApp and ClientApp on Ray; returns the run directory. A stop (Ctrl-C,
    SIGTERM) raises :class:`fedgs.stopping.StopRequested` once the run has saved what it did."""
    grpc_fork_handlers_off()
    if not config.ray_address:  # a local Ray: every Ray port on 127.0.0.1 only
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    os.environ.setdefault("RAY_worker_niceness", "0")  # Ray's default: 15
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")  # SIGTERM is ours
    with stopping.stop_on_signals():
        try:  # the main thread's own work: a signal raises here at once
            nodes = num_supernodes(config)
        except stopping.StopRequested:
            raise stopping.StopRequested(
                "stopped while loading the data, before anything was written"
            ) from None
        if config.ray_address:
            from fedgs.simulations.cluster import check_cluster

            if config.data_dir:  # the clients' workers do not share this process's directory
                config = config.with_updates(data_dir=str(Path(config.data_dir).resolve()))
            check_cluster(config, options.cpus_per_client)
        with stopping.checked_elsewhere():  # Flower's engine has the main thread
            stopped = _run_on_flower(config, options, nodes)
    if stopped is not None:
        raise stopped
    return Path(config.run_dir)


def _run_on_flower(
    config: RunConfig, options: EngineOptions, nodes: int
) -> stopping.StopRequested | None:
    """The run on Flower's simulation engine; the stop that ended it, if one did."""
    from flwr.serverapp import Grid, ServerApp
    from flwr.simulation import run_simulation as flower_run_simulation

    from fedgs.client.app import build_client_app
    from fedgs.server.app import build_server_app
    from fedgs.simulations import fast_engine
    from fedgs.simulations.engine_log import FLOWER_LOG_NAME, engine_output_to

    if options.server_threads > 0:
        import torch

        torch.set_num_threads(options.server_threads)
    if options.poll_seconds < fast_engine.FLOWER_POLL_SECONDS:
        fast_engine.install(options.poll_seconds)

    overrides = config.with_updates(min_nodes=nodes).to_user_config()
    run_app = build_server_app(overrides, grid_poll_seconds=options.poll_seconds)
    stops: list[stopping.StopRequested] = []
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context) -> None:  # type: ignore[no-untyped-def]
        try:
            run_app(grid, context)
        except stopping.StopRequested as stop:  # returned, not raised: Flower then ends at once
            stops.append(stop)

    log = Path(config.run_dir) / FLOWER_LOG_NAME
    with engine_output_to(log), _sigterm_left_to_fedgs():
        flower_run_simulation(
            server_app=server_app,
            client_app=build_client_app(overrides, log_file=log.resolve()),
            num_supernodes=nodes,
            backend_config=backend_config(options, config.client_num_gpus, config.ray_address),
        )
    return stops[0] if stops else None


@contextmanager
def _sigterm_left_to_fedgs() -> Iterator[None]:
    """``ray.init`` and Ray's head node install SIGTERM handlers that exit the main thread (and
    so Flower's engine) at once, through ``ray._private.utils.set_sigterm_handler``: within the
    block that call does nothing, and SIGTERM stays the stop request of ``fedgs.stopping``. Ray's
    processes still end with the run (``ray.shutdown``), or with the driver (Ray's fate sharing)."""
    try:
        from ray._private import utils as ray_utils
    except ImportError:  # another backend, or a Ray without it: nothing to keep off
        yield
        return
    original = getattr(ray_utils, "set_sigterm_handler", None)
    if original is None:
        yield
        return
    ray_utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        ray_utils.set_sigterm_handler = original
