"""A ClientApp for the warm-start tests: the real one, logging when each warm start ran where.

In an importable module (not a test file) so Ray actors can load it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from fedgs.client.app import build_client_app


def timing_client_app(overrides: Mapping[str, Any], log_dir: Path) -> ClientApp:
    """Every warm start writes {partition, pid, start, end} to ``log_dir`` (one file each)."""
    real = build_client_app(overrides)
    app = ClientApp()

    @app.train("warmstart")
    def warm_start(message: Message, context: Context) -> Message:
        start = time.time()
        reply = real(message, context)
        partition = int(context.node_config["partition-id"])
        record = {"partition": partition, "pid": os.getpid(), "start": start, "end": time.time()}
        (Path(log_dir) / f"{partition}-{message.metadata.message_id}.json").write_text(
            json.dumps(record)
        )
        return reply

    @app.train("gswgan")
    def query(message: Message, context: Context) -> Message:
        return real(message, context)

    return app


def overlapping_pairs(records: list[dict]) -> int:
    """Pairs of warm starts that ran at the same time in different processes."""
    return sum(
        1
        for i, a in enumerate(records)
        for b in records[i + 1 :]
        if a["pid"] != b["pid"] and a["start"] < b["end"] and b["start"] < a["end"]
    )
