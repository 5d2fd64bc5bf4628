"""Flower's and Ray's own output during a simulation goes to ``RUN_DIR/flower.log``.

On a normal run they print a deprecation notice for ``run_simulation``, Ray's FutureWarning about
accelerator environment variables and, for every failed client message, a full traceback (one run
with a broken install printed 598): the terminal is for fedgs' progress bars, warnings and
summary, and the log file keeps everything else. Ray's workers do not forward their output to the
terminal (``log_to_driver`` off in :func:`fedgs.simulations.simulate.backend_config`); a client
failure still reaches the server as an error reply, with its reason.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fedgs.log_files import file_handler

FLOWER_LOG_NAME = "flower.log"
ROUTED_LOGGERS = ("flwr", "ray", "py.warnings")  # py.warnings: Python warnings, once captured


@contextmanager
def engine_output_to(path: Path) -> Iterator[Path]:
    """Route Flower's logger, Ray's driver-side logger and Python warnings to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = file_handler(path)
    saved = {}
    for name in ROUTED_LOGGERS:
        logger = logging.getLogger(name)
        saved[name] = (logger.handlers[:], logger.propagate)
        logger.handlers[:] = [handler]
        logger.propagate = False
    logging.captureWarnings(True)
    try:
        yield path
    finally:
        logging.captureWarnings(False)
        for name, (handlers, propagate) in saved.items():
            logger = logging.getLogger(name)
            logger.handlers[:] = handlers
            logger.propagate = propagate
        handler.close()
