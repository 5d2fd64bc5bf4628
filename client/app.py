"""The fedgs ClientApp: one Flower node = one writer with a private critic.

Settings come from, in increasing priority: RunConfig defaults, the run config, the node config
(``flower-supernode --node-config "partition-id=0 state-dir=/state ..."``) and the overrides a
simulation runner passes to :func:`build_client_app`. A request the client cannot or will not
serve gets an error reply with the reason; the node never crashes on bad input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp

from fedgs import protocol
from fedgs.client.datalens_session import DataLensTeacher
from fedgs.client.fedavg_session import FedAvgClient
from fedgs.client.pate_session import PateTeacher, teacher_session
from fedgs.client.session import ClientSession, RequestRefused
from fedgs.privacy.dp_fedavg import NonFiniteDeltaError
from fedgs.privacy.sanitizer import NonFiniteGradientError
from fedgs.run_config import RunConfig

# Error codes of fedgs replies (Flower reserves small numbers for its own).
ERROR_BAD_REQUEST = 4400
ERROR_REFUSED = 4403
ERROR_INTERNAL = 4500


# (run config, partition id, request content) -> reply content
Handler = Callable[[RunConfig, int, RecordDict], RecordDict]


def _serve(
    message: Message, context: Context, overrides: Mapping[str, Any], handler: Handler
) -> Message:
    try:
        config = RunConfig.from_user_config(context.run_config, context.node_config, overrides)
        if "partition-id" not in context.node_config:
            raise RequestRefused("node config has no 'partition-id': which client is this node?")
        content = handler(config, int(context.node_config["partition-id"]), message.content)
    except protocol.ProtocolError as error:
        return Message(
            Error(code=ERROR_BAD_REQUEST, reason=f"bad request: {error}"), reply_to=message
        )
    except RequestRefused as error:
        return Message(Error(code=ERROR_REFUSED, reason=f"refused: {error}"), reply_to=message)
    except (NonFiniteGradientError, NonFiniteDeltaError) as error:  # a diverged critic
        reason = f"client failure, nothing released: {error}"
        return Message(Error(code=ERROR_INTERNAL, reason=reason), reply_to=message)
    except (KeyError, TypeError, ValueError) as error:
        reason = f"bad request: {type(error).__name__}: {error}"
        return Message(Error(code=ERROR_BAD_REQUEST, reason=reason), reply_to=message)
    return Message(content, reply_to=message)


def _warm_start(config: RunConfig, partition_id: int, content: RecordDict) -> RecordDict:
    """PATE-GAN teachers warm-start their classifier; every other client its WGAN critic."""
    if config.strategy == "pate-gan":
        return teacher_session(config, partition_id).warm_start(content)
    return ClientSession(config, partition_id).warm_start(content)


def build_client_app(overrides: Mapping[str, Any] | None = None) -> ClientApp:
    """A ClientApp whose settings are overridden by ``overrides`` (Flower run-config keys)."""
    fixed = dict(overrides or {})
    app = ClientApp()

    @app.train("gswgan")
    def gswgan_query(message: Message, context: Context) -> Message:
        return _serve(message, context, fixed, lambda c, p, r: ClientSession(c, p).answer(r))

    @app.train("fedavggan")
    def fedavg_query(message: Message, context: Context) -> Message:
        return _serve(message, context, fixed, lambda c, p, r: FedAvgClient(c, p).answer(r))

    @app.train("datalens")
    def datalens_query(message: Message, context: Context) -> Message:
        return _serve(message, context, fixed, lambda c, p, r: DataLensTeacher(c, p).answer(r))

    @app.train("pategan")
    def pate_query(message: Message, context: Context) -> Message:
        return _serve(message, context, fixed, lambda c, p, r: PateTeacher(c, p).answer(r))

    @app.train("warmstart")
    def warm_start(message: Message, context: Context) -> Message:
        return _serve(message, context, fixed, _warm_start)

    return app


app = build_client_app()
