"""Deployment secrets: a CA-signed server certificate for every address dialled, node keys in the
formats Flower reads, private files readable by their owner only."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import load_ssh_private_key

from fedgs.deploy.certs import generate_node_keys, generate_tls


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
