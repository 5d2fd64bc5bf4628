"""``python -m fedgs.deploy.superlink``: Flower's SuperLink, its Control API off the public port.

Flower 1.41 serves the Fleet API (SuperNodes), the Control API (``flwr run``, ``flwr supernode
register``) and the ServerApp runtime API on one HTTPS port, and its open-source Control API has
no authentication (account login is OIDC, Flower Enterprise only). SuperNode authentication
therefore stopped no one: anyone who could reach the port with the public ``ca.crt`` could
register their own node key and submit an app that ran on the data holders' SuperNodes.

This entry point is ``flower-superlink`` with the same flags and the same FastAPI app, served on
two sockets: the public one (``--host``/``--port``) answers only the Fleet API and the health
check; every other route (Control, ServerApp runtime) answers only on the private socket
(``--private-host``/``--private-port``, loopback by default), which only the operator's own
machine reaches. A request for a private route on the public socket gets 403 and is logged.
``--node-doorbells PREFIX``: ring each node's bell when a message for it is stored (a local
deployment's nodes then pull at once instead of on their next poll; fedgs.deploy.doorbell).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import logging
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn
from flwr.common.logger import log

PUBLIC_PREFIXES = ("/v1/fleet/", "/health")  # what SuperNodes need; nothing else is public

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class PrivateRoutesGate:
    """ASGI middleware: routes outside ``PUBLIC_PREFIXES`` answer only on ``private_port``."""

    def __init__(self, app: ASGIApp, private_port: int) -> None:
        self.app = app
        self.private_port = private_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not self._allowed(scope):
            client = scope.get("client") or ("?", 0)
            log(
                logging.WARNING,
                "refused %s from %s:%s: only the Fleet API is served on this port",
                scope.get("path"),
                *client,
            )
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            body = json.dumps(
                {"detail": "only the Fleet API is served on this port; the Control API is not"}
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 403,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)

    def _allowed(self, scope: Scope) -> bool:
        server = scope.get("server") or (None, None)
        if server[1] == self.private_port:
            return True
        return str(scope.get("path", "")).startswith(PUBLIC_PREFIXES)


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``; a port in use ends the process with a line naming
    it (what fedgs.deploy.ports.taken_port reads)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            sys.exit(f"fedgs: cannot listen on {host}:{port}: address already in use")
        raise
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m fedgs.deploy.superlink",
        description="flower-superlink, with the Control and runtime APIs on a private socket; "
        "every other flag is flower-superlink's",
        add_help=False,
    )
    parser.add_argument("--private-host", default="127.0.0.1")
    parser.add_argument("--private-port", type=int, required=True)
    parser.add_argument("--node-doorbells", metavar="PREFIX")
    ours, flower_args = parser.parse_known_args(argv)
    if ours.node_doorbells:  # ring a node when a message for it is stored
        from fedgs.deploy.doorbell import ring_nodes_on_store

        ring_nodes_on_store(ours.node_doorbells)

    # Flower's own parsing, checks, app and lifespan; only the sockets differ from
    # flower_superlink._run_superlink_http_api.
    from flwr.supercore.http_logging import get_uvicorn_log_config
    from flwr.supercore.logger import console_handler
    from flwr.superlink.main import create_app

    # the module, not the function of the same name that flwr.superlink.cli exports
    flower_superlink = importlib.import_module("flwr.superlink.cli.flower_superlink")

    sys.argv = ["flower-superlink", *flower_args]
    config = flower_superlink._parse_superlink_lifespan_config()
    app = create_app(config, flower_superlink.SuperLinkLifespan)
    sockets = [_listen(config.host, config.port), _listen(ours.private_host, ours.private_port)]
    log(
        logging.INFO,
        "Fleet API on %s:%s; Control and runtime APIs only on %s:%s",
        config.host,
        config.port,
        ours.private_host,
        ours.private_port,
    )
    server = uvicorn.Server(
        uvicorn.Config(
            app=PrivateRoutesGate(app, ours.private_port),
            reload=False,
            access_log=True,
            log_config=get_uvicorn_log_config(console_handler.level),
            ssl_keyfile=config.ssl_keyfile,
            ssl_certfile=config.ssl_certfile,
            workers=1,
            lifespan="on",
        )
    )
    server.run(sockets=sockets)


if __name__ == "__main__":
    main()
