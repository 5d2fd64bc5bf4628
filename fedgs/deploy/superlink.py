"""``python -m fedgs.deploy.superlink``: Flower's SuperLink, its Control API off the public port.

Flower 1.41 serves the Fleet API (SuperNodes), the Control API (``flwr run``, ``flwr supernode
register``) and the ServerApp runtime API on one HTTPS port, and its open-source Control API has
no authentication (account login is OIDC, Flower Enterprise only). SuperNode authentication
therefore stopped no one: anyone who could reach the port with the public ``ca.crt`` could
register their own node key and submit an app that ran on the data holders' SuperNodes.

This entry point is ``flower-superlink`` with the same flags and the same FastAPI app, served on
two sockets: the public one (``--host``/``--port``) answers only the Fleet API and the health
check; every other route (Control, ServerApp runtime) answers only on the private socket, and
a request for one on the public socket gets 403 and is logged. The private socket is either a
Unix socket (``--private-socket PATH``: a 0600 file in a 0700 folder, so only the operator's
user reaches it; fedgs.deploy.unix_socket dials it) or a TCP one (``--private-host``/
``--private-port``, loopback by default: every local user reaches that one, so it is for a
container's own network only).
``--node-doorbells PREFIX``: ring each node's bell when a message for it is stored (a local
deployment's nodes then pull at once instead of on their next poll; fedgs.deploy.doorbell).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import json
import logging
import os
import socket
import stat
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import uvicorn
from flwr.common.logger import log

from fedgs.deploy.unix_socket import MAX_PATH, unix_address
from fedgs.private_files import PRIVATE_DIR, PRIVATE_FILE

PUBLIC_PREFIXES = ("/v1/fleet/", "/health")  # what SuperNodes need; nothing else is public

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class PrivateRoutesGate:
    """ASGI middleware: routes outside ``PUBLIC_PREFIXES`` answer only on a Unix socket or on
    ``private_port`` (None: on a Unix socket only)."""

    def __init__(self, app: ASGIApp, private_port: int | None) -> None:
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
        server = scope.get("server") or ("", 0)
        if server[1] is None:  # uvicorn's (path, None): a Unix socket, the owner's alone
            return True
        if self.private_port is not None and server[1] == self.private_port:
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


def _private_folder(folder: Path) -> None:
    """The socket's folder: made 0700 if missing; one already there must be this user's alone
    (a socket file's own mode is not checked by every kernel, its folder's is)."""
    if not folder.exists():
        folder.mkdir(parents=True, mode=PRIVATE_DIR)
        folder.chmod(PRIVATE_DIR)
    info = folder.stat()
    if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o077:
        sys.exit(f"fedgs: {folder} must be a folder of this user's alone (mode 0700)")


def _listen_unix(path: Path) -> socket.socket:
    """A listening Unix socket at ``path`` that only this user can connect to (0600 in a 0700
    folder). A live socket there ends the process; a stale one (a killed SuperLink's) goes."""
    if len(os.fsencode(path)) > MAX_PATH:
        sys.exit(f"fedgs: socket path {path} is longer than {MAX_PATH} bytes")
    _private_folder(path.parent)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if path.exists():
        if sock.connect_ex(str(path)) == 0:
            sock.close()
            sys.exit(f"fedgs: another SuperLink serves {unix_address(path)} (a live socket)")
        path.unlink()
        sock.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)  # the file is 0600 from its first moment
    try:
        sock.bind(str(path))
    finally:
        os.umask(umask)
    path.chmod(PRIVATE_FILE)
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _private_listener(ours: argparse.Namespace) -> tuple[socket.socket, str]:
    """The private socket and how the log names it."""
    if ours.private_socket is not None:
        return _listen_unix(ours.private_socket), unix_address(ours.private_socket)
    if ours.private_port is None:
        sys.exit("fedgs: give --private-socket PATH or --private-port PORT")
    sock = _listen(ours.private_host, ours.private_port)
    return sock, f"{ours.private_host}:{ours.private_port}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m fedgs.deploy.superlink",
        description="flower-superlink, with the Control and runtime APIs on a private socket; "
        "every other flag is flower-superlink's",
        add_help=False,
    )
    private = parser.add_mutually_exclusive_group()
    private.add_argument("--private-socket", type=Path)
    private.add_argument("--private-port", type=int)
    parser.add_argument("--private-host", default="127.0.0.1")
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
    public = _listen(config.host, config.port)
    private, private_name = _private_listener(ours)
    log(
        logging.INFO,
        "Fleet API on %s:%s; Control and runtime APIs only on %s",
        config.host,
        config.port,
        private_name,
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
    try:
        server.run(sockets=[public, private])
    finally:
        if ours.private_socket is not None:
            ours.private_socket.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
