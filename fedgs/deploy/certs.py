"""TLS certificates and SuperNode authentication keys for a deployment, made with ``cryptography``.

One self-signed CA signs one server certificate whose subject alternative names cover every
address a Flower component dials: 127.0.0.1/localhost for the process launcher, the compose
service names, and the host names or addresses data holders on other machines dial (``--san``).
The CA's private key is kept in its own file (mode 0600, never mounted into a container): with
it the server certificate is re-issued for new names while every data holder keeps its
``ca.crt``. Each SuperNode gets its own EC P-384 key pair in OpenSSH format, the format
``flower-supernode --auth-supernode-private-key`` reads and ``flwr supernode register`` accepts.
Private keys are written with mode 0600.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import ipaddress
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fedgs.private_files import PRIVATE_FILE, private_dir

VALID_DAYS = 365
DEFAULT_HOSTS = ("127.0.0.1", "localhost", "superlink")  # loopback, the Unix socket, compose


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
    """0600 in a 0700 folder (fedgs.private_files): no other user of the host reads it."""
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    with os.fdopen(fd, "wb") as handle:
        os.fchmod(handle.fileno(), PRIVATE_FILE)  # a file already there keeps its mode else
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


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _generate_ca(cert_path: Path, key_path: Path) -> None:
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = _name("fedgs deployment CA")
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
    _write_private(key_path, _pem_key(ca_key))
    cert_path.parent.mkdir(parents=True, exist_ok=True)
    cert_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))


def _issue_server_cert(files: TlsFiles, ca_key_path: Path, hosts: Iterable[str]) -> None:
    now = dt.datetime.now(dt.UTC)
    ca_cert = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    server_key = ec.generate_private_key(ec.SECP384R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("fedgs superlink"))
        .issuer_name(ca_cert.subject)
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
    _write_private(files.server_key, _pem_key(server_key))
    files.server_cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))


def server_names(cert_path: Path) -> set[str]:
    """The host names and addresses a server certificate is valid for."""
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return {str(n.value) for n in names}


def generate_tls(
    folder: Path, hosts: Iterable[str] = DEFAULT_HOSTS, ca_key: Path | None = None
) -> TlsFiles:
    """A fresh CA and a server certificate valid for ``hosts`` (IP addresses or DNS names).
    The CA key goes to ``ca_key`` (default: next to the certificates; keep it elsewhere where
    the certificate folder is mounted into a container)."""
    files = TlsFiles.under(folder)
    key_path = ca_key or folder / "ca.key"
    _generate_ca(files.ca_cert, key_path)
    _issue_server_cert(files, key_path, hosts)
    return files


class CertificateError(RuntimeError):
    """The certificates on disk cannot serve the requested host names; the message says why."""


def ensure_tls(folder: Path, ca_key: Path, extra_hosts: Iterable[str] = ()) -> TlsFiles:
    """Certificates in ``folder`` valid for the default names plus ``extra_hosts``: made once;
    an existing server certificate missing a requested name is re-issued by the kept CA (the
    CA itself, so every data holder's ca.crt, stays)."""
    hosts = list(dict.fromkeys([*DEFAULT_HOSTS, *extra_hosts]))
    files = TlsFiles.under(folder)
    if not files.ca_cert.exists():
        return generate_tls(folder, hosts, ca_key)
    if set(hosts) <= server_names(files.server_cert):
        return files
    if not ca_key.exists():
        missing = sorted(set(hosts) - server_names(files.server_cert))
        raise CertificateError(
            f"{files.server_cert} does not name {missing} and the CA key {ca_key} that could "
            "re-issue it is missing"
        )
    _issue_server_cert(files, ca_key, sorted(set(hosts) | server_names(files.server_cert)))
    return files


def ensure_secret(path: Path) -> Path:
    """A random 32-byte shared secret at ``path`` (mode 0600), made once: what a SuperLink or
    SuperNode and the SuperExecs pulling tasks from it share (``--superexec-auth-secret-file``)."""
    if not path.exists():
        _write_private(path, secrets.token_bytes(32))
    return path


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


def fingerprint(public_key: Path) -> str:
    """An OpenSSH public key file's SHA256 fingerprint, as ``ssh-keygen -lf`` prints it: what a
    data holder reads to the operator over another channel, so that the operator registers the
    key the data holder sent and no other."""
    blob = base64.b64decode(public_key.read_text().split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
