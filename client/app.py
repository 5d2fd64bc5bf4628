"""The fedgs ClientApp: one Flower node = one writer with a private critic.

Run settings come from, in increasing priority: RunConfig defaults, the run config, the node
config (``flower-supernode --node-config "partition-id=0 state-dir=/state ..."``) and the
overrides a simulation runner passes to :func:`build_client_app`. What the node owns (its
``state-dir`` and ``device``, ``fedgs.client.node``) never comes from the run config, and a
deployed node must pin its state directory. The node's privacy policy (``policy-*`` node-config
keys, ``fedgs.privacy.policy``) wins over all of them: the run config may only ask for more
privacy. Every message goes through one gate (``fedgs.client.gate``); a request the client
cannot or will not serve gets an error reply with the reason, and the node never crashes on bad
input. Secure queries and the SecAgg+ stages after them (``train.secagg``) are served by
``fedgs.client.secure_node``, which keeps the step's state in the context.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flwr.app import Context, Error, Message
from flwr.clientapp import ClientApp

from fedgs.client import gate, secure_node
from fedgs.client.common import RequestRefused
from fedgs.client.node import client_config
from fedgs.privacy.policy import NodePolicy, PolicyViolation
from fedgs.protocols.common import ProtocolError
from fedgs.run_config import RunConfig
from fedgs.secagg import SecAggError

# Error codes of fedgs replies (Flower reserves small numbers for its own).
ERROR_BAD_REQUEST = 4400
ERROR_REFUSED = 4403


def _serve(
    message: Message, context: Context, overrides: Mapping[str, Any], base: NodePolicy | None
) -> Message:
    try:
        if "partition-id" not in context.node_config:
            raise RequestRefused("node config has no 'partition-id': which client is this node?")
        policy = NodePolicy.from_node_config(context.node_config, base)
        config = client_config(context.run_config, context.node_config, overrides)
        partition_id = int(context.node_config["partition-id"])
        content = secure_node.serve(message, context, config, policy, partition_id)
    except ProtocolError as error:
        return Message(
            Error(code=ERROR_BAD_REQUEST, reason=f"bad request: {error}"), reply_to=message
        )
    except (RequestRefused, PolicyViolation) as error:
        return Message(Error(code=ERROR_REFUSED, reason=f"refused: {error}"), reply_to=message)
    except SecAggError as error:  # malformed, foreign, out of order or below the node's floors
        reason = f"refused: secure aggregation: {error}"
        return Message(Error(code=ERROR_REFUSED, reason=reason), reply_to=message)
    except (KeyError, TypeError, ValueError) as error:
        reason = f"bad request: {type(error).__name__}: {error}"
        return Message(Error(code=ERROR_BAD_REQUEST, reason=reason), reply_to=message)
    return Message(content, reply_to=message)


def build_client_app(
    overrides: Mapping[str, Any] | None = None, policy: NodePolicy | None = None
) -> ClientApp:
    """A ClientApp whose settings are overridden by ``overrides`` (Flower run-config keys).

    The nodes' privacy policy is ``policy`` if given, else, with ``overrides`` (a simulation
    runner's user settings), those settings; without either (a deployment), each node's
    ``policy-*`` node-config keys over the safe defaults of ``NodePolicy.deployment_default``.
    ``policy-*`` node-config keys always win. Without ``overrides`` the app serves as a
    deployed node: one whose node config has no ``state-dir`` refuses every request.
    """
    fixed = dict(overrides or {})
    base = policy
    if base is None and fixed:
        base = NodePolicy.from_run_config(RunConfig.from_user_config(fixed))
    app = ClientApp()

    def handle(message: Message, context: Context) -> Message:
        return _serve(message, context, fixed, base)

    for message_type in gate.MESSAGE_TYPES:  # "train.gswgan" -> @app.train("gswgan")
        app.train(message_type.split(".", 1)[1])(handle)
    return app


app = build_client_app()
