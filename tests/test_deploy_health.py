"""The SuperLink container's health check (fedgs.deploy.health) means "serving", not "bound".

Compose's SuperLink was "healthy" once its port accepted a TCP connection, which a bound socket
does before the server answers anything. The check now asks both sockets for ``/health`` over
TLS verified with the CA: a real SuperLink with TLS, its Control plane on a Unix socket as in
compose, passes; sockets that are bound and listening but never answer fail, as does nothing at
all, and a CA that did not issue the server's certificate.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from deploy_support import wait_for

from fedgs.deploy import health, topology
from fedgs.deploy.certs import generate_tls
from fedgs.deploy.launcher import HOST, SUPERLINK_READY, free_port


def _probe(ca: Path, sock: Path, port: int) -> subprocess.CompletedProcess[str]:
    """What compose's health check runs."""
    argv = [sys.executable, "-m", "fedgs.deploy.health", "--ca-cert", str(ca)]
    argv += ["--socket", str(sock), "--port", str(port), "--timeout", "2"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_bound_but_silent_sockets_are_not_healthy(tmp_path: Path) -> None:
    tls = generate_tls(tmp_path / "certificates")
    sock, port = tmp_path / "control" / "superlink.sock", free_port()
    assert health.problems(str(tls.ca_cert), str(sock), port, timeout=2) == [
        f"Control socket {sock}: FileNotFoundError: [Errno 2] No such file or directory",
        f"Fleet API localhost:{port}: ConnectionRefusedError: [Errno 111] Connection refused",
    ]
    sock.parent.mkdir(mode=0o700)
    with (
        socket.socket(socket.AF_UNIX) as private,
        socket.create_server(("127.0.0.1", port)),
    ):
        private.bind(str(sock))
        private.listen()  # a TCP connect to `public` succeeds: the old check said healthy
        socket.create_connection(("127.0.0.1", port), 2).close()
        done = _probe(tls.ca_cert, sock, port)
    assert done.returncode == 1, done
    assert f"unhealthy: Control socket {sock}: TimeoutError" in done.stderr
    assert f"unhealthy: Fleet API localhost:{port}: TimeoutError" in done.stderr


def test_a_serving_superlink_is_healthy_through_both_sockets(tmp_path: Path) -> None:
    tls = generate_tls(tmp_path / "certificates", ca_key=tmp_path / "ca.key")
    secret = tmp_path / "superlink.secret"
    secret.write_bytes(os.urandom(32))
    sock, port, log = tmp_path / "control" / "superlink.sock", free_port(), tmp_path / "log"
    argv = topology.superlink_args(
        host=HOST,
        port=port,
        private=str(sock),
        security=topology.Security(),  # TLS and node authentication, as in compose
        tls=topology.TlsPaths(str(tls.ca_cert), str(tls.server_cert), str(tls.server_key)),
        database=topology.IN_MEMORY_DATABASE,
        superexec_secret=str(secret),
        python=sys.executable,
    )
    with log.open("ab") as handle:
        superlink = subprocess.Popen(
            argv,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, **topology.environment()},
        )
    try:
        wait_for(
            lambda: SUPERLINK_READY in log.read_text() or superlink.poll() is not None,
            "the SuperLink to serve",
            timeout=120,
        )
        assert superlink.poll() is None, log.read_text()[-3000:]
        wait_for(lambda: _probe(tls.ca_cert, sock, port).returncode == 0, "healthy", 60)
        done = _probe(tls.ca_cert, sock, port)
        assert "healthy: Control socket and Fleet API answered /health" in done.stdout, done

        other = generate_tls(tmp_path / "other", ca_key=tmp_path / "other.key")  # not its CA
        refused = health.problems(str(other.ca_cert), str(sock), port, timeout=5)
        assert len(refused) == 2 and all("CERTIFICATE_VERIFY_FAILED" in p for p in refused)
    finally:
        superlink.terminate()
        superlink.wait(timeout=60)
