"""The fedgs ClientApp: one Flower node = one writer with a private critic.

Run settings come from, in increasing priority: RunConfig defaults, the run config, the node
config (``flower-supernode --node-config "partition-id=0 state-dir=/state ..."``) and the
overrides a simulation runner passes to :func:`build_client_app`. What the node owns (its
``state-dir`` and ``device``, ``fedgs.client.node``) never comes from the run config, and a
deployed node must pin its state directory. The node's privacy policy (``policy-*`` node-config
keys, ``fedgs.privacy.policy``) wins over all of them: the run config may only ask for more
privacy. Every message goes through one gate (``fedgs.client.gate``); a request the client
cannot or will not serve gets an error reply with the reason, and the node never crashes on bad
input. The reply's code says whose the fault is: ``ERROR_BAD_REQUEST`` (the server's message
or run config breaks the protocol: ``ProtocolError``), ``ERROR_REFUSED`` (the node's policy,
budget, own config or data will not serve it) or ``ERROR_INTERNAL`` (anything else: a fault of the
node, whose reason names only the exception's type; the traceback is in the node's log). Secure
queries and the SecAgg+ stages after them (``train.secagg``) are served by
``fedgs.client.secure_node``, which keeps the step's state in the context.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flwr.app import Context, Error, Message
from flwr.clientapp import ClientApp

from fedgs.client import gate, secure_node
from fedgs.client.common import DataRefused, NodeConfigError, RequestRefused
from fedgs.client.node import client_config, node_settings
from fedgs.log_files import file_handler
from fedgs.privacy.policy import NodePolicy, PolicyViolation
from fedgs.protocols.common import ProtocolError
from fedgs.run_config import RunConfig
from fedgs.secagg import SecAggError

logger = logging.getLogger(__name__)

# Error codes of fedgs replies (Flower reserves small numbers for its own).
ERROR_BAD_REQUEST = 4400  # the server's message or run config breaks the protocol
ERROR_REFUSED = 4403  # the node will not serve it: its policy, its budget, its own config
ERROR_INTERNAL = 4500  # the node failed serving it (a fault of the node, in the node's log)


def _error(message: Message, code: int, reason: str) -> Message:
    return Message(Error(code=code, reason=reason), reply_to=message)


def _serve(
    message: Message, context: Context, overrides: Mapping[str, Any], base: NodePolicy | None
) -> Message:
    try:
        policy, partition_id = node_settings(context.node_config, base)
        config = client_config(context.run_config, context.node_config, overrides)
        content = secure_node.serve(message, context, config, policy, partition_id)
    except ProtocolError as error:  # only the parsers' verdict on the server's input
        return _error(message, ERROR_BAD_REQUEST, f"bad request: {error}")
    except NodeConfigError as error:  # the operator's to fix: say so on the node too
        logger.warning("this node's config cannot serve requests: %s", error)
        return _error(message, ERROR_REFUSED, f"refused: {error}")
    except DataRefused as error:  # the data error may name the node's paths: its log only
        logger.warning("this node's data cannot serve the run: %s", error.__cause__)
        return _error(message, ERROR_REFUSED, f"refused: {error}")
    except (RequestRefused, PolicyViolation) as error:
        return _error(message, ERROR_REFUSED, f"refused: {error}")
    except SecAggError as error:  # malformed, foreign, out of order or below the node's floors
        return _error(message, ERROR_REFUSED, f"refused: secure aggregation: {error}")
    except Exception as error:  # anything else is a fault of the node: never a crash
        # the message may quote private values (data, noise, paths): it stays in the node's log
        logger.exception("internal error serving %s", message.metadata.message_type)
        reason = f"internal error on this node: {type(error).__name__} (see the node's log)"
        return _error(message, ERROR_INTERNAL, reason)
    return Message(content, reply_to=message)


_fault_log: logging.FileHandler | None = None  # this process's copy of its node faults
_fault_log_lock = threading.Lock()


def _log_node_faults_to(path: str) -> None:
    """This module's records (the node's faults, with their tracebacks) are appended to
    ``path`` (absolute) as well, where a simulation's nodes, Ray workers whose own output goes
    nowhere the user looks, would otherwise keep them. One file per process, the latest
    simulation's: a process that serves several in turn writes each one's faults to its own
    log only."""
    global _fault_log
    if _fault_log is not None and _fault_log.baseFilename == path:
        return  # every message after the first: no lock, no path work
    with _fault_log_lock:
        if _fault_log is not None and _fault_log.baseFilename == path:
            return
        if _fault_log is not None:
            logger.removeHandler(_fault_log)
            _fault_log.close()
        _fault_log = file_handler(path)
        logger.addHandler(_fault_log)


def build_client_app(
    overrides: Mapping[str, Any] | None = None,
    policy: NodePolicy | None = None,
    log_file: Path | None = None,
) -> ClientApp:
    """A ClientApp whose settings are overridden by ``overrides`` (Flower run-config keys).

    The nodes' privacy policy is ``policy`` if given, else, with ``overrides`` (a simulation
    runner's user settings), those settings; without either (a deployment), each node's
    ``policy-*`` node-config keys over the safe defaults of ``NodePolicy.deployment_default``.
    ``policy-*`` node-config keys always win. Without ``overrides`` the app serves as a
    deployed node: one whose node config has no ``state-dir`` refuses every request.
    ``log_file`` (a simulation runner's, on this machine): where every process serving the
    app also writes the node's faults; a deployed node logs them to its own output.
    """
    fixed = dict(overrides or {})
    base = policy
    if base is None and fixed:
        base = NodePolicy.from_run_config(RunConfig.from_user_config(fixed))
    app = ClientApp()
    log_path = os.path.abspath(log_file) if log_file is not None else None

    def handle(message: Message, context: Context) -> Message:
        if log_path is not None:
            _log_node_faults_to(log_path)
        return _serve(message, context, fixed, base)

    for message_type in gate.MESSAGE_TYPES:  # "train.gswgan" -> @app.train("gswgan")
        app.train(message_type.split(".", 1)[1])(handle)
    return app


app = build_client_app()
