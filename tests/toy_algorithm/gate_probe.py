"""Probe the node gate with the toy strategy registered, through Flower's real simulation engine.

``python -m toy_algorithm.gate_probe RUN_DIR`` (with FEDGS_ALGORITHMS=toy_algorithm.entry:TOY and
``tests/`` on PYTHONPATH): three nodes, partition 0's policy-strategy is gswgan, the others' toy.
The server sends every node the toy query and a DataLens query (a message type no node's policy
serves) and writes each reply's node, message type, error code and reason, or answering
partition and records, to RUN_DIR/probe.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from flower_apps import simulate
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedgs.client.app import build_client_app
from fedgs.privacy.policy import NodePolicy
from fedgs.protocols import common, datalens
from fedgs.run_config import RunConfig
from fedgs.server.federated_run import wait_for_nodes
from toy_algorithm.entry import TOY

NODES = 3
OTHER_POLICY = 0  # the partition whose node's policy-strategy is gswgan


def client_app(config: RunConfig) -> ClientApp:
    toy = build_client_app(config.to_user_config())
    gswgan = build_client_app(config.to_user_config(), NodePolicy.deployment_default("gswgan"))
    app = ClientApp()

    def handle(message: Message, context: Context) -> Message:
        node = gswgan if int(context.node_config["partition-id"]) == OTHER_POLICY else toy
        return node(message, context)

    for message_type in (TOY.query, datalens.QUERY):
        app.train(message_type.split(".", 1)[1])(handle)
    return app


def server_app(config: RunConfig, out: Path) -> ServerApp:
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        nodes = wait_for_nodes(grid, NODES, timeout=120)
        generator = torch.Generator().manual_seed(0)
        images = [torch.rand(config.batch_size, 1, 28, 28, generator=generator) * 2 - 1]
        labels = [torch.randint(0, 10, (config.batch_size,), generator=generator)]
        query = {common.FAKES: common.encode_fakes(images, labels)}
        messages = [
            Message(common.query_content(query, 1), dst_node_id=node, message_type=kind)
            for kind in (TOY.query, datalens.QUERY)
            for node in nodes
        ]
        replies = grid.send_and_receive(messages, timeout=300)
        seen = []
        for reply in replies:
            row = {"node": reply.metadata.src_node_id, "type": reply.metadata.message_type}
            if reply.has_error():
                row |= {"code": reply.error.code, "reason": reply.error.reason}
            else:
                row |= {
                    "partition": int(reply.content[common.CLIENT][common.PARTITION_ID]),
                    "records": sorted(reply.content.array_records),
                    "policy_used": dict(reply.content[common.POLICY_USED]),
                }
            seen.append(row)
        (out / "probe.json").write_text(json.dumps(seen, indent=1))

    return app


def main(run_dir: str) -> None:
    out = Path(run_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = RunConfig.from_user_config(
        {
            "strategy": TOY.name,
            "num-clients": NODES,
            "batch-size": 8,
            "critic-width": 4,
            "generator-width": 4,
            "critic-steps": 1,
            "datalens-top-k": 20,
            "run-dir": str(out),
        }
    )
    simulate(server_app(config, out), client_app(config), nodes=NODES)


if __name__ == "__main__":
    main(sys.argv[1])
