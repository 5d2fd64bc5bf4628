"""One stop request per process: Ctrl-C or SIGTERM, and a run's long loops end at their next unit.

Flower's ``flwr.simulation.run_simulation`` runs the ServerApp in a non-daemon thread and its
simulation engine in the main thread. A Ctrl-C raises KeyboardInterrupt in the main thread only:
the engine stops, but a ServerApp busy computing (public pretraining, training the evaluation's
classifier, rendering public digits) never looks at the engine's stop event, and the interpreter
waits for that thread at exit; a second Ctrl-C then breaks that wait mid-shutdown. So
``fedgs simulate`` takes SIGINT and SIGTERM itself (:func:`stop_on_signals`): the first one
*requests* a stop, and every long loop of a run calls :func:`check` between its units of work (a
pretraining step, a warm-start poll, a generator step, a classifier batch), which raises
:class:`StopRequested`. The run's driver (``FederatedRun.run``) saves what was done and raises it
again with where the run stands; ``fedgs simulate`` prints that and exits with :data:`EXIT_CODE`.

Nothing here imports Flower or torch: the training loops of the core check it too.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

EXIT_CODE = 130  # 128 + SIGINT: what a shell reports for an interrupted command (and deploy local)
SIGNALS = (signal.SIGINT, signal.SIGTERM)

_requested = threading.Event()
_raise_in_main = True  # False while other threads do the checking (Flower's engine has main)


class StopRequested(Exception):
    """A stop was asked for (Ctrl-C, SIGTERM); the message says where the run stood."""


def requested() -> bool:
    return _requested.is_set()


def request() -> None:
    """Ask every loop that checks to stop (what the signal handler does)."""
    _requested.set()


def check(where: str = "stopped") -> None:
    """Raise :class:`StopRequested` if a stop was requested; otherwise nothing (one flag read)."""
    if _requested.is_set():
        raise StopRequested(where)


def _handle(signum: int, frame: FrameType | None) -> None:
    first = not _requested.is_set()
    _requested.set()
    if first:
        # os.write, not print: the main thread may be inside a write to stderr right now
        if signum == signal.SIGINT:
            note = "\nCtrl-C: stopping the run, saving what was done (one Ctrl-C is enough)\n"
        else:
            note = f"\n{signal.Signals(signum).name}: stopping the run, saving what was done\n"
        os.write(sys.stderr.fileno(), note.encode())
        if _raise_in_main:
            raise StopRequested("stopped")


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, the first SIGINT or SIGTERM requests a stop and raises
    :class:`StopRequested` in the main thread (outside :func:`checked_elsewhere`); later ones are
    ignored. SIGINT is taken even where it was inherited ignored (a script's background job).
    The request ends with the block: what runs after it in the process is not stopped."""
    global _raise_in_main
    _requested.clear()
    _raise_in_main = True
    previous = {signum: signal.signal(signum, _handle) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _requested.clear()


@contextmanager
def checked_elsewhere() -> Iterator[None]:
    """Within the block a signal only requests the stop: the main thread runs code that must not
    be interrupted (Flower's engine), and the threads doing the work check :func:`check`."""
    global _raise_in_main
    _raise_in_main = False
    try:
        yield
    finally:
        _raise_in_main = True
