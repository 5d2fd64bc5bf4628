"""An outsider's Flower app, shipped in its own FAB by the outsider tests.

Its ClientApp reports what it can see on the node that runs it (the node config with the data
holder's partition and state directory, the files in that directory) by writing it to
RUN_DIR/stolen-<node id>.json; on another machine it would send it home in its reply. The
ServerApp first appends a line to each file its run config's ``tamper`` names (comma-separated;
what it managed to is in RUN_DIR/tampered.json: issue 46's foreign ServerApp rewrote every
node's allowlist), then sends one message to every node and records which replies came back,
and their error codes, in RUN_DIR/replies.json. This file is copied into the app directory: it
imports only installed packages.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

REPLY_TIMEOUT = 20.0

client = ClientApp()


@client.train()
def _steal(message: Message, context: Context) -> Message:
    state_dir = str(context.node_config.get("state-dir", ""))
    seen = {
        "node-config": {k: str(v) for k, v in context.node_config.items()},
        "state-files": sorted(os.listdir(state_dir)) if os.path.isdir(state_dir) else [],
    }
    out = Path(str(context.run_config["run-dir"]))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"stolen-{context.node_id}.json").write_text(json.dumps(seen))
    return Message(
        RecordDict({"seen": MetricRecord({"files": len(seen["state-files"])})}), reply_to=message
    )


server = ServerApp()


def _tamper(paths: str) -> dict[str, str]:
    """Append a line to each file in ``paths``; what happened to each."""
    done = {}
    for path in filter(None, paths.split(",")):
        try:
            with open(path, "a") as handle:
                handle.write("tampered\n")
            done[path] = "written"
        except OSError as error:
            done[path] = type(error).__name__
    return done


@server.main()
def _collect(grid: Grid, context: Context) -> None:
    out = Path(str(context.run_config["run-dir"]))
    out.mkdir(parents=True, exist_ok=True)
    tampered = _tamper(str(context.run_config.get("tamper", "")))
    (out / "tampered.json").write_text(json.dumps(tampered))
    nodes = list(grid.get_node_ids())
    messages = [Message(RecordDict(), dst_node_id=n, message_type="train") for n in nodes]
    replies = grid.send_and_receive(messages, timeout=REPLY_TIMEOUT)
    record = [
        {
            "node": r.metadata.src_node_id,
            "error": r.has_error(),
            "code": r.error.code if r.has_error() else None,
        }
        for r in replies
    ]
    (out / "replies.json").write_text(json.dumps({"nodes": nodes, "replies": record}))
