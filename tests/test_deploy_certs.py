"""Deployment secrets: a CA-signed server certificate for every address dialled, node keys in the
formats Flower reads, private files readable by their owner only."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_ssh_private_key

from fedgs.deploy.certs import (
    CertificateError,
    ensure_tls,
    generate_node_keys,
    generate_tls,
    server_names,
)


def test_server_certificate_is_signed_by_the_ca_for_every_host(tmp_path: Path) -> None:
    files = generate_tls(tmp_path, hosts=("127.0.0.1", "localhost", "superlink", "superlink"))
    ca = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    server = x509.load_pem_x509_certificate(files.server_cert.read_bytes())
    server.verify_directly_issued_by(ca)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost", "superlink"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert stat.S_IMODE(files.server_key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "ca.key").stat().st_mode) == 0o600


def test_new_host_names_reissue_the_server_certificate_under_the_same_ca(tmp_path: Path) -> None:
    """A data holder keeps its ca.crt when the SuperLink gains a name (``init --san``)."""
    folder, ca_key = tmp_path / "certificates", tmp_path / "ca" / "ca.key"
    first = ensure_tls(folder, ca_key)
    ca_before = first.ca_cert.read_bytes()
    assert "superlink.example.org" not in server_names(first.server_cert)
    again = ensure_tls(folder, ca_key, ["superlink.example.org", "203.0.113.7"])
    assert again.ca_cert.read_bytes() == ca_before
    assert {"superlink.example.org", "203.0.113.7", "127.0.0.1"} <= server_names(again.server_cert)
    ca = x509.load_pem_x509_certificate(ca_before)
    x509.load_pem_x509_certificate(again.server_cert.read_bytes()).verify_directly_issued_by(ca)
    assert not (folder / "ca.key").exists()  # the CA key is not in the folder containers mount

    ca_key.unlink()
    with pytest.raises(CertificateError, match="CA key"):
        ensure_tls(folder, ca_key, ["another.example.org"])


def test_node_keys_are_what_flower_loads(tmp_path: Path) -> None:
    from flwr.cli.supernode.register import try_load_public_key

    keys = generate_node_keys(tmp_path, "supernode-0")
    private = load_ssh_private_key(keys.private.read_bytes(), password=None)
    assert isinstance(private, ec.EllipticCurvePrivateKey)
    assert private.curve.name == "secp384r1"
    assert stat.S_IMODE(keys.private.stat().st_mode) == 0o600
    assert keys.public.read_text().startswith("ecdsa-sha2-nistp384 ")
    assert try_load_public_key(keys.public)  # what `flwr supernode register` accepts
    assert generate_node_keys(tmp_path, "supernode-1").public.read_bytes() != (
        keys.public.read_bytes()
    )
