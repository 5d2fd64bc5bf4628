"""Flower's HTTP clients through a Unix socket: a Control plane that only its owner reaches.

Flower 1.41 reaches every SuperLink API with httpx over TCP, and every local user can connect
to a loopback port: with the public ``ca.crt`` alone, any of them could list the nodes, register
a node key and run an app on the operator's SuperExec. fedgs' SuperLink can serve its Control
and ServerApp runtime APIs on a Unix socket instead (fedgs.deploy.superlink
``--private-socket``): a 0600 file in a 0700 folder, which the kernel lets only its owner (and
root) connect to. An address ``unix:PATH`` names such a socket; :func:`route_unix_addresses`
teaches Flower's protobuf-over-HTTP client to dial it, TLS still on, the URL's host
``localhost`` (which the deployment's server certificate names). What talks to that plane runs
through here: ``python -m fedgs.deploy.unix_socket flwr ARGS`` (the ``flwr`` CLI),
``... flwr-serverapp ARGS`` (a ServerApp process) and fedgs' SuperExec.
"""

from __future__ import annotations

import importlib
import ssl
import sys
from pathlib import Path
from typing import Any

PREFIX = "unix:"
URL_HOST = "localhost"  # the host the URL names: a name the server certificate holds
MAX_PATH = 107  # sun_path is 108 bytes with its terminating NUL (Linux)
COMMANDS = {  # Flower's entry points this module runs with the route in place
    "flwr": "flwr.cli.app:app",
    "flwr-serverapp": "flwr.superlink.cli:flwr_serverapp",
    "flwr-clientapp": "flwr.supernode.cli:flwr_clientapp",
}


def unix_address(path: Path | str) -> str:
    """The address that names the Unix socket at ``path``."""
    return f"{PREFIX}{path}"


def socket_path(address: str) -> str | None:
    """The socket path an address ``unix:PATH`` names; None for a TCP address."""
    return address[len(PREFIX) :] if address.startswith(PREFIX) else None


def _verify(insecure: bool, root_certificates: bytes | str | None) -> ssl.SSLContext | bool:
    """What Flower's client verifies the server with (flwr.supercore.protobuf.client)."""
    if insecure:
        return False
    if isinstance(root_certificates, bytes):
        return ssl.create_default_context(cadata=root_certificates.decode("ascii"))
    if isinstance(root_certificates, str):
        return ssl.create_default_context(cafile=root_certificates)
    return ssl.create_default_context()


def _dial_unix(client: Any, path: str, insecure: bool, root: bytes | str | None) -> None:
    """Point a Flower ``ProtobufClient`` built for ``URL_HOST`` at the socket ``path``."""
    import httpx

    tcp = client._client
    client._client = httpx.Client(
        transport=httpx.HTTPTransport(uds=path, verify=_verify(insecure, root)),
        timeout=tcp.timeout,
        follow_redirects=True,
    )
    tcp.close()


def route_unix_addresses() -> None:
    """From now on, every Flower HTTP client of this process dials ``unix:PATH`` addresses
    through that socket (other addresses as before). Idempotent."""
    from flwr.supercore.protobuf.client import ProtobufClient

    if getattr(ProtobufClient, "_fedgs_unix_route", False):
        return
    tcp_factory = ProtobufClient.from_server_address.__func__  # type: ignore[attr-defined]

    def from_server_address(
        cls: type,
        server_address: str,
        insecure: bool,
        root_certificates: bytes | str | None,
        interceptors: Any,
        *,
        retry_invoker: Any = None,
    ) -> Any:
        path = socket_path(server_address)
        address = server_address if path is None else URL_HOST
        client = tcp_factory(
            cls, address, insecure, root_certificates, interceptors, retry_invoker=retry_invoker
        )
        if path is not None:
            _dial_unix(client, path, insecure, root_certificates)
        return client

    ProtobufClient.from_server_address = classmethod(from_server_address)  # type: ignore
    ProtobufClient._fedgs_unix_route = True  # type: ignore[attr-defined]


def command(name: str, python: str = sys.executable) -> list[str]:
    """The command line that runs Flower's ``name`` (a key of COMMANDS) with the route."""
    if name not in COMMANDS:
        raise ValueError(f"no Flower command {name!r} here; known: {', '.join(COMMANDS)}")
    return [python, "-m", "fedgs.deploy.unix_socket", name]


def main(argv: list[str] | None = None) -> None:
    name, *args = sys.argv[1:] if argv is None else argv
    module, attribute = COMMANDS[name].split(":")
    route_unix_addresses()
    sys.argv = [name, *args]
    entry = getattr(importlib.import_module(module), attribute)
    entry(prog_name=name) if name == "flwr" else entry()  # flwr's usage lines name `flwr`


if __name__ == "__main__":
    main()
