"""Flower apps the deployment tests ship in a FAB next to fedgs' own components.

``tampering_client``: the real ClientApp, except that every partition corrupts its sanitized
rows as TAMPER says (after paying for them). ``probe_server``: sends each node malformed
queries, then one valid query, and writes what came back to RUN_DIR/probe.json.
This file is copied into the app directory, so it imports only installed packages.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedgs.client.app import app as honest
from fedgs.protocols import common, gswgan
from fedgs.run_config import RunConfig
from fedgs.server.deploy_app import PromptGrid
from fedgs.server.federated_run import wait_for_nodes

TAMPER = {0: "nan", 1: "shape", 2: "huge"}  # partition id -> how its replies are corrupted


def _tamper(gradient: np.ndarray, mode: str) -> np.ndarray:
    if mode == "nan":
        return np.full_like(gradient, np.nan)
    if mode == "shape":
        return gradient[:-1]
    return gradient * 1e6


tampering_client = ClientApp()


@tampering_client.train("warmstart")
def _warm_start(message: Message, context: Context) -> Message:
    return honest(message, context)


@tampering_client.train("gswgan")
def _query(message: Message, context: Context) -> Message:
    reply = honest(message, context)
    if reply.has_error():
        return reply
    mode = TAMPER[int(context.node_config["partition-id"])]
    gradient = reply.content[gswgan.SANITIZED][gswgan.GRADIENT].numpy()
    content = RecordDict(
        {
            gswgan.SANITIZED: ArrayRecord({gswgan.GRADIENT: Array(_tamper(gradient, mode))}),
            common.POLICY_USED: reply.content[common.POLICY_USED],
            common.CLIENT: reply.content[common.CLIENT],
        }
    )
    return Message(content, reply_to=message)


def _fakes(arrays: dict[str, np.ndarray]) -> RecordDict:
    return RecordDict({common.FAKES: common.arrays_record(arrays)})


def requests(config: RunConfig) -> Iterator[tuple[str, str, RecordDict]]:
    """(name, message type, content): the malformed requests, the valid one last."""
    n_dis, batch = config.critic_steps, config.batch_size
    images = [torch.rand(batch, 1, 28, 28) * 2 - 1 for _ in range(n_dis)]
    labels = [torch.randint(10, (batch,)) for _ in range(n_dis)]
    valid = common.record_arrays(common.encode_fakes(images, labels))
    pixels, classes = valid[common.IMAGES], valid[common.LABELS]
    yield "missing-fakes", gswgan.QUERY, RecordDict()
    yield "wrong-shape", gswgan.QUERY, _fakes(valid | {common.IMAGES: pixels[:, :, :-1]})
    yield "nan-images", gswgan.QUERY, _fakes(valid | {common.IMAGES: pixels * np.nan})
    yield "unknown-labels", gswgan.QUERY, _fakes(valid | {common.LABELS: classes + 99})
    yield "labels-mismatch", gswgan.QUERY, _fakes(valid | {common.LABELS: classes[:, 1:]})
    absurd = np.zeros((common.MAX_CRITIC_BATCHES + 1, batch, common.PIXELS), np.float32)
    labels_absurd = np.zeros(absurd.shape[:2], np.int64)
    yield (
        "absurd-size",
        gswgan.QUERY,
        _fakes({common.IMAGES: absurd, common.LABELS: labels_absurd}),
    )
    yield "unknown-type", "train.nonsense", _fakes(valid)
    yield "valid", gswgan.QUERY, _fakes(valid)


probe_server = ServerApp()


@probe_server.main()
def _probe(grid: Grid, context: Context) -> None:
    config = RunConfig.from_user_config(context.run_config)
    grid = PromptGrid(grid)
    nodes = wait_for_nodes(grid, config.min_nodes, config.reply_timeout)
    record = []
    for name, message_type, content in requests(config):
        messages = [Message(content, dst_node_id=n, message_type=message_type) for n in nodes]
        for reply in grid.send_and_receive(messages, timeout=config.reply_timeout):
            entry = {"request": name, "node": reply.metadata.src_node_id}
            if reply.has_error():
                entry |= {"code": reply.error.code, "reason": reply.error.reason}
            else:
                gradient = reply.content[gswgan.SANITIZED][gswgan.GRADIENT].numpy()
                entry |= {"shape": list(gradient.shape)}
            record.append(entry)
    out = Path(config.run_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "probe.json").write_text(json.dumps({"nodes": nodes, "replies": record}))
