"""Shorter fixed waits inside a deployment's Flower 1.41 processes, patched at process start.

A deployed GS-WGAN step exchanges one small message per node, so Flower's fixed waits, not
compute, made up most of its wall time (results/log/deployment.md):
  * the SuperNode sleeps 3 s after a pull that found no message, and 0.5 s per check while it
    waits for the ClientApp's reply (``flwr.supernode.start_client_internal``, ``time.sleep(3)``
    and ``time.sleep(0.5)``): a message arriving just after an empty pull waited up to 3 s;
  * ``pull_objects`` (``flwr.supercore.inflatable.inflatable_utils``; SuperNode and ServerApp)
    and ``pull_and_inflate_object_from_tree`` (the ClientApp process pulling its message from
    the SuperNode) wait 1 s (``PULL_INITIAL_BACKOFF``, bound as each one's ``initial_backoff``
    default) before retrying an object that is listed before its content has arrived: the
    SuperNode stores a message before its content, so a ClientApp forked at once often waits.
  * a SuperNode declares a heartbeat interval of 30 s (``HEARTBEAT_DEFAULT_INTERVAL``, read by
    ``flwr.supernode.fleet_http_connection`` and ``flwr.supercore.heartbeat``) and the SuperLink
    counts it online for 2 intervals after each heartbeat: a killed node stayed "online", and
    was asked, for up to 60 s. At the SuperLink's smallest accepted interval (10 s; a heartbeat
    every ~4 s) a dead node is offline within 20 s, and a query sent to it is answered by the
    SuperLink with an error (node unavailable) from then on: the step goes on without it.
Flower 1.41 offers no setting for any of them. Each patch is one name in one Flower module, checked
first: if the Flower internals it expects are not there (another Flower version),
:class:`FlowerInternalsChanged` is raised and the process does not start, so an upgrade cannot
silently drop the patch. The cost is idle polling: an idle SuperNode pulls every
``EMPTY_PULL_WAIT`` s instead of every 3 s (measured in results/log/deployment.md).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from flwr.supercore.version import package_version

FLOWER_VERSION = "1.41."  # the release whose internals these patches were written against
EMPTY_PULL_WAIT = 0.25  # s after a SuperNode pull that found no message (Flower: 3)
REPLY_WAIT = 0.02  # s between a SuperNode's checks for its ClientApp's reply (Flower: 0.5)
PULL_INITIAL_BACKOFF = 0.02  # s before an unavailable object is pulled again (Flower: 1)
HEARTBEAT_INTERVAL = 10.0  # s a SuperNode declares (Flower: 30; the SuperLink's minimum: 10)


class FlowerInternalsChanged(RuntimeError):
    """The installed Flower lacks an internal that a wait patch replaces."""


class SleepsReplaced:
    """The ``time`` module as one Flower module sees it (``previous``: what it saw before),
    its ``sleep`` replaced by ``sleep``; every other name is ``previous``'s."""

    def __init__(self, sleep: Callable[[float], None], previous: Any = time) -> None:
        self.sleep = sleep
        self._previous = previous

    def __getattr__(self, name: str) -> Any:
        return getattr(self._previous, name)


class _ShortSleeps(SleepsReplaced):
    """``time`` with some fixed sleeps shortened (``replacements``: Flower's s -> ours)."""

    def __init__(self, replacements: dict[float, float]) -> None:
        super().__init__(lambda seconds: time.sleep(replacements.get(seconds, seconds)))


def require(condition: bool, what: str) -> None:
    if not condition:
        raise FlowerInternalsChanged(
            f"fedgs.deploy.flower_waits expects Flower {FLOWER_VERSION}x internals: {what}; "
            f"installed Flower is {package_version}. Review the patch for this version."
        )


def shorten_supernode_waits(module: ModuleType | None = None) -> None:
    """Replace the SuperNode's 3 s empty-pull sleep and 0.5 s reply-wait sleep (``module``:
    ``flwr.supernode.start_client_internal`` unless given, for tests; then its heartbeats are
    shortened too)."""
    default = module is None
    if module is None:
        from flwr.supernode import start_client_internal as module
    source = inspect.getsource(module)
    require(package_version.startswith(FLOWER_VERSION), "its version")
    require(getattr(module, "time", None) is time, f"{module.__name__} imports time")
    for call in ("time.sleep(3)", "time.sleep(0.5)"):
        require(call in source, f"{module.__name__} calls {call}")
    module.time = _ShortSleeps({3: EMPTY_PULL_WAIT, 0.5: REPLY_WAIT})  # type: ignore[attr-defined]
    if default:
        shorten_heartbeats()  # the same SuperNode process: a dead node leaves within seconds


def shorten_heartbeats(*modules: ModuleType) -> None:
    """Declare (and send) heartbeats every ``HEARTBEAT_INTERVAL`` s, so that the SuperLink stops
    offering a dead node within 2 intervals. ``modules``: those that read Flower's interval; by
    default the SuperNode's HTTP connection and the heartbeat sender."""
    if not modules:
        from flwr.supercore import heartbeat
        from flwr.supernode import fleet_http_connection

        modules = (fleet_http_connection, heartbeat)
    from flwr.common.constant import HEARTBEAT_MIN_INTERVAL

    require(package_version.startswith(FLOWER_VERSION), "its version")
    require(HEARTBEAT_MIN_INTERVAL <= HEARTBEAT_INTERVAL, "a heartbeat interval of 10 s accepted")
    for module in modules:
        name = "HEARTBEAT_DEFAULT_INTERVAL"
        require(isinstance(getattr(module, name, None), int | float), f"{module.__name__}.{name}")
    for module in modules:
        module.HEARTBEAT_DEFAULT_INTERVAL = HEARTBEAT_INTERVAL  # type: ignore[attr-defined]


def shorten_object_pulls(*pulls: object) -> None:
    """Make Flower's object pulls retry an unavailable object after ``PULL_INITIAL_BACKOFF`` s
    (they still back off exponentially up to Flower's cap). ``pulls``: the functions whose
    ``initial_backoff`` default to shorten; by default ``pull_objects`` and
    ``pull_and_inflate_object_from_tree`` (which passes its own default on)."""
    if not pulls:
        from flwr.supercore.inflatable import inflatable_utils

        pulls = (inflatable_utils.pull_objects, inflatable_utils.pull_and_inflate_object_from_tree)
    require(package_version.startswith(FLOWER_VERSION), "its version")
    for pull in pulls:
        defaults = getattr(pull, "__kwdefaults__", None) or {}
        name = getattr(pull, "__name__", repr(pull))
        require("initial_backoff" in defaults, f"{name} has a keyword initial_backoff")
    for pull in pulls:
        pull.__kwdefaults__["initial_backoff"] = PULL_INITIAL_BACKOFF  # type: ignore[attr-defined]


def bound_object_pulls(seconds: float, pull: object = None) -> float:
    """Make Flower's ``pull_objects`` give up on an unavailable object after ``seconds``
    (Flower: ``PULL_MAX_TIME`` = 7,200 s). Why: a node killed after its reply message reached
    the SuperLink but before the message's objects did leaves the ServerApp's pull retrying
    until the SuperLink's object-push session expires (180 s), past the run's reply timeout; a
    pull bounded by the time left turns that reply into Flower's "objects unavailable" error
    reply within the timeout. ``pull``: the function to bound (tests); default Flower's.
    Returns the bound it replaced, for the caller to put back."""
    if pull is None:
        from flwr.supercore.inflatable import inflatable_utils

        pull = inflatable_utils.pull_objects
    defaults = getattr(pull, "__kwdefaults__", None) or {}
    require("max_time" in defaults, "pull_objects has a keyword max_time")
    previous = defaults["max_time"]
    pull.__kwdefaults__["max_time"] = seconds  # type: ignore[attr-defined]
    return previous
