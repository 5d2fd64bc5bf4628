"""``python -m fedgs.deploy.health``: the SuperLink container's health check.

Healthy means both of the SuperLink's sockets answer an HTTPS ``GET /health`` (Flower's health
route) with 200, the server verified with the deployment's CA as a client verifies it: the
Control and runtime APIs' Unix socket (what the ServerApp's SuperExec, the key registration and
the operator's ``flwr`` dial; fedgs.deploy.superlink ``--private-socket``) and the Fleet API's
port (what SuperNodes dial). A TCP connect, the previous check, succeeds as soon as a port is
bound, before the server answers anything. Standard library only: it runs every few seconds.
"""

from __future__ import annotations

import argparse
import http.client
import socket
import ssl
import sys

URL_HOST = "localhost"  # the name the server certificate holds (fedgs.deploy.unix_socket's too)
PATH = "/health"


class _UnixHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to ``URL_HOST`` through the Unix socket at ``path``."""

    def __init__(self, path: str, context: ssl.SSLContext, timeout: float) -> None:
        super().__init__(URL_HOST, context=context, timeout=timeout)
        self.socket_path = path
        self.tls = context

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
            self.sock = self.tls.wrap_socket(sock, server_hostname=URL_HOST)
        except BaseException:
            sock.close()
            raise


def _answer(connection: http.client.HTTPSConnection) -> str | None:
    """None if ``GET /health`` answered 200, else what went wrong."""
    try:
        connection.request("GET", PATH, headers={"Connection": "close"})
        response = connection.getresponse()
        response.read()
        return None if response.status == 200 else f"status {response.status}"
    except (OSError, http.client.HTTPException) as error:
        return f"{type(error).__name__}: {error}"
    finally:
        connection.close()


def problems(ca_cert: str, socket_path: str, port: int, timeout: float = 5.0) -> list[str]:
    """What keeps the SuperLink from being healthy; [] when both sockets answered."""
    context = ssl.create_default_context(cafile=ca_cert)
    found = []
    private = _answer(_UnixHTTPSConnection(socket_path, context, timeout))
    if private is not None:
        found.append(f"Control socket {socket_path}: {private}")
    public = _answer(http.client.HTTPSConnection(URL_HOST, port, context=context, timeout=timeout))
    if public is not None:
        found.append(f"Fleet API {URL_HOST}:{port}: {public}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fedgs.deploy.health",
        description="exit 0 once the SuperLink answers GET /health on its Control socket and "
        "on its Fleet API port, over TLS verified with the CA",
    )
    parser.add_argument("--ca-cert", required=True)
    parser.add_argument("--socket", required=True, help="the SuperLink's --private-socket")
    parser.add_argument("--port", type=int, required=True, help="its Fleet API port (--port)")
    parser.add_argument("--timeout", type=float, default=5.0, help="s per request (%(default)s)")
    args = parser.parse_args(argv)
    found = problems(args.ca_cert, args.socket, args.port, args.timeout)
    for problem in found:
        print(f"unhealthy: {problem}", file=sys.stderr)
    if not found:
        print("healthy: Control socket and Fleet API answered /health")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
