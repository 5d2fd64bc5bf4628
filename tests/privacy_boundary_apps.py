"""Pieces of the client-side privacy-boundary tests that other processes import (Ray actors,
deployed ServerApps, spawned workers): request builders, a probe server, a worker function.

The probe sends named requests one at a time and records, for each, the reply (error code and
reason, or the payload's record names) and a hash of the client state files after it, so a
test can check that a refused request changed nothing on disk.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedgs.client.app import build_client_app
from fedgs.privacy.policy import NodePolicy
from fedgs.protocols import common, datalens, fedavg_gan, gswgan
from fedgs.run_config import RunConfig
from fedgs.run_data import state_dir_for
from fedgs.server.federated_run import wait_for_nodes


def fakes(batch: int, n_dis: int = 2, seed: int = 0, key: str = common.FAKES) -> RecordDict:
    """A valid request body: ``n_dis`` batches of ``batch`` fake images in [-1, 1]."""
    rng = torch.Generator().manual_seed(seed)
    images = [torch.rand(batch, 1, 28, 28, generator=rng) * 2 - 1 for _ in range(n_dis)]
    labels = [torch.randint(10, (batch,), generator=rng) for _ in range(n_dis)]
    return RecordDict({key: common.encode_fakes(images, labels)})


def state_hashes(state_dir: Path) -> dict[str, str]:
    """sha256 of every client state file (critic, optimizer, ledger) in ``state_dir``."""
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(state_dir.glob("*.pt"))
    }


def probe_requests(batch: int) -> Iterator[tuple[str, str, RecordDict]]:
    """(name, message type, content) in order; run config sets the sigma the node is asked."""
    yield "valid", gswgan.QUERY, fakes(batch)
    yield "big-batch", gswgan.QUERY, fakes(batch * 4)
    yield "foreign-datalens", datalens.QUERY, fakes(batch)
    yield "foreign-fedavg", fedavg_gan.QUERY, fakes(batch)
    for i in range(3):
        yield f"again-{i}", gswgan.QUERY, fakes(batch, seed=i + 1)


def probe(grid: Grid, config: RunConfig) -> None:
    """Send every probe request to every node, one request at a time; write probe.json."""
    nodes = wait_for_nodes(grid, config.min_nodes, config.reply_timeout)
    state_dir = state_dir_for(config)
    record = []
    for name, message_type, content in probe_requests(config.batch_size):
        messages = [Message(content, dst_node_id=n, message_type=message_type) for n in nodes]
        replies = grid.send_and_receive(messages, timeout=config.reply_timeout)
        for reply in replies:
            entry: dict[str, Any] = {"request": name, "node": reply.metadata.src_node_id}
            if reply.has_error():
                entry |= {"code": reply.error.code, "reason": reply.error.reason}
            else:
                entry |= {"records": sorted(reply.content.keys())}
                entry |= {"client": dict(reply.content[common.CLIENT])}
            record.append(entry)
        record.append({"request": name, "state": state_hashes(state_dir)})
    out = Path(config.run_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "probe.json").write_text(json.dumps(record))


def probe_server_app(config: RunConfig) -> ServerApp:
    """The probe for a simulation (the test hands it the run config)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        probe(grid, config)

    return app


deployed_probe = ServerApp()


@deployed_probe.main()
def _deployed_probe(grid: Grid, context: Context) -> None:
    probe(grid, RunConfig.from_user_config(context.run_config))


def per_node_policy_app(
    overrides: Mapping[str, Any], policies: Mapping[int, NodePolicy]
) -> ClientApp:
    """The real ClientApp with a different node policy per partition (what each data holder's
    node config sets in a deployment; a simulation's nodes otherwise share the runner's)."""
    apps = {p: build_client_app(overrides, policy) for p, policy in policies.items()}
    app = ClientApp()

    def handle(message: Message, context: Context) -> Message:
        return apps[int(context.node_config["partition-id"])](message, context)

    for action in ("gswgan", "datalens", "fedavggan", "pategan", "warmstart"):
        app.train(action)(handle)
    return app


def serve_in_worker(args: tuple[str, str, dict[str, Any], int]) -> str:
    """A spawned process's request to one client: 'answered' or the refusal's text."""
    from fedgs.client import gate
    from fedgs.client.common import RequestRefused
    from fedgs.privacy.policy import PolicyViolation

    message_type, policy_json, config_values, seed = args
    config = RunConfig(**config_values)
    policy = NodePolicy(**json.loads(policy_json))
    torch.set_num_threads(1)
    try:
        gate.serve(message_type, fakes(config.batch_size, seed=seed), config, policy, 0)
    except (RequestRefused, PolicyViolation) as error:
        return str(error)
    return "answered"
