"""TLS certificates and SuperNode authentication keys for a deployment, made with ``cryptography``.

One self-signed CA signs one server certificate whose subject alternative names cover every
address a Flower component dials: 127.0.0.1/localhost for the process launcher and the compose
service names. Each SuperNode gets its own EC P-384 key pair in OpenSSH format, the format
``flower-supernode --auth-supernode-private-key`` reads and ``flwr supernode register`` accepts.
Private keys are written with mode 0600.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALID_DAYS = 365
DEFAULT_HOSTS = ("127.0.0.1", "localhost", "superlink")


@dataclass(frozen=True)
class TlsFiles:
    """Where the certificate files of one deployment lie."""

    ca_cert: Path
    server_cert: Path
    server_key: Path

    @classmethod
    def under(cls, folder: Path) -> TlsFiles:
        return cls(folder / "ca.crt", folder / "server.pem", folder / "server.key")


@dataclass(frozen=True)
class NodeKeys:
    """One SuperNode's authentication key pair (OpenSSH format)."""

    private: Path
    public: Path

    @classmethod
    def under(cls, folder: Path, name: str) -> NodeKeys:
        return cls(folder / f"{name}.key", folder / f"{name}.pub")


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _subject_names(hosts: Iterable[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def generate_tls(folder: Path, hosts: Iterable[str] = DEFAULT_HOSTS) -> TlsFiles:
    """A fresh CA and a server certificate valid for ``hosts`` (IP addresses or DNS names)."""
    files = TlsFiles.under(folder)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedgs deployment CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP384R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedgs superlink")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(_subject_names(hosts)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    files.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.server_cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(files.server_key, _pem_key(server_key))
    return files


def generate_node_keys(folder: Path, name: str) -> NodeKeys:
    """A SuperNode key pair: the private key stays with the node, the public key is registered
    with the SuperLink (``flwr supernode register``)."""
    keys = NodeKeys.under(folder, name)
    key = ec.generate_private_key(ec.SECP384R1())
    _write_private(
        keys.private,
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ),
    )
    keys.public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        + b"\n"
    )
    return keys
