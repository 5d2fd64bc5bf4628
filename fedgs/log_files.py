"""The log files fedgs writes beside a run (``RUN_DIR/flower.log``).

Flower's and Ray's output (``fedgs.simulations.engine_log``) and a simulation's node faults
(``fedgs.client.app``) land in the same file, so they share one line format.
"""

from __future__ import annotations

import logging
from pathlib import Path

LINE_FORMAT = "%(asctime)s %(name)s %(levelname)s: %(message)s"


def file_handler(path: Path | str) -> logging.FileHandler:
    """A handler appending ``LINE_FORMAT`` lines to ``path`` (UTF-8)."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(LINE_FORMAT))
    return handler
