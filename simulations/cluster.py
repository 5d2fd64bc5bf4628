"""Joining a running Ray cluster (``fedgs simulate --ray-address``): what is checked first.

Flower's engine gives each step's messages to whichever actor of its pool is free, so one client
answers on one node at a step and on another the next: its critic and privacy ledger (the state
directory) must be one folder that every node reads and writes at the same path. A node that saw
a folder of its own would keep a second ledger for the same clients, and the epsilon each client
enforces would count only its share of the queries. Before Flower starts, every node that can host
a client is asked, by a task pinned to it, to read a token the driver has just written into the
state directory (and, when the run names one, to find ``data-dir``); the run is refused, naming
the nodes, unless all of them see it. Nodes that join after the check get no clients: Flower sizes
its actor pool once, from the nodes present at the start.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from fedgs.run_config import RunConfig

CHECK_TIMEOUT_S = 120.0  # a node's first task starts a worker process: seconds, not minutes


class ClusterError(RuntimeError):
    """The cluster cannot run this simulation as configured (said why, naming the nodes)."""


def client_nodes(nodes: list[dict], cpus_per_client: float, gpus_per_client: float) -> list[str]:
    """The ids of the alive nodes where Flower places at least one client actor (its own
    per-node count: ``flwr.simulation.ray_transport.ray_actor.pool_size_from_resources``)."""
    found = []
    for node in nodes:
        resources = node.get("Resources") or {}
        if not node.get("Alive") or resources.get("CPU", 0) < cpus_per_client:
            continue
        if gpus_per_client > 0 and resources.get("GPU", 0) < gpus_per_client:
            continue
        found.append(node["NodeID"])
    return found


def missing(token_file: str, token: str, data_dir: str) -> str:
    """What this machine misses of the run's shared files ('' = nothing)."""
    try:
        seen = Path(token_file).read_text()
    except OSError as error:
        return f"cannot read the state directory's check file ({error.strerror})"
    if seen != token:
        return "reads another state directory at that path (the check token differs)"
    if data_dir and not os.path.isdir(data_dir):
        return f"has no data-dir {data_dir}"
    return ""


def node_sees(token_file: str, token: str, data_dir: str) -> tuple[str, str]:
    """Run on one node: its id and what it misses."""
    import ray

    return ray.get_runtime_context().get_node_id(), missing(token_file, token, data_dir)


def check_cluster(config: RunConfig, cpus_per_client: float) -> None:
    """Connect to ``config.ray_address`` and refuse (:class:`ClusterError`) unless every node that
    can host a client sees the state directory (and data-dir); disconnects either way, so that
    Flower's engine connects with its own settings."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    state_dir = Path(config.state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    token_file = state_dir / f".cluster-check-{token[:8]}"
    token_file.write_text(token)
    check = ray.remote(num_cpus=0, max_retries=0)(node_sees)
    try:
        ray.init(address=config.ray_address, log_to_driver=False, logging_level="ERROR")
        nodes = client_nodes(ray.nodes(), cpus_per_client, config.client_num_gpus)
        if not nodes:
            raise ClusterError(
                f"no node of the Ray cluster at {config.ray_address} has {cpus_per_client} CPU(s) "
                f"(and {config.client_num_gpus} GPU) free for a client"
            )
        refs = {
            check.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
            ).remote(str(token_file), token, config.data_dir): node
            for node in nodes
        }
        ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=CHECK_TIMEOUT_S)
        problems = [f"node {refs[ref]} did not answer in {CHECK_TIMEOUT_S:.0f} s" for ref in late]
        for ref in ready:
            try:
                node, missing = ray.get(ref)
            except ray.exceptions.RayError as error:  # e.g. fedgs not importable there
                problems.append(f"node {refs[ref]} failed the check: {error}")
                continue
            if missing:
                problems.append(f"node {node} {missing}")
    finally:
        ray.shutdown()
        token_file.unlink(missing_ok=True)
    if problems:
        raise ClusterError(
            f"the Ray cluster at {config.ray_address} cannot run these clients: "
            + "; ".join(problems)
            + f". state-dir ({state_dir}) must be one folder every node mounts at that path, "
            "and every node needs the same Python environment with fedgs installed"
        )
