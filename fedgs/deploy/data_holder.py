"""``fedgs deploy node``: a data holder's own files to join an operator's SuperLink, and nothing of
the operator's.

A data holder runs a SuperNode and the SuperExec of its ClientApps on its own machine. It holds:
its node's key pair (the private key 0600, it never leaves the machine; the public key goes to
the operator, who registers it with ``fedgs deploy register``), the secret its SuperNode and
SuperExec share, its allowlist of apps (the hash of fedgs' app, ``fedgs deploy app-hash``: the one
app its node runs) and the operator's CA certificate ``ca.crt``, which it receives. It never holds
the CA's key, the SuperLink's server key or the SuperLink's SuperExec secret: whoever held the CA
key could impersonate the SuperLink to every data holder. Those are ``fedgs deploy init``'s, the
operator's.

The folder ``OUT``::

    OUT/keys/NAME.key                  the node's private key (0600, in a 0700 folder)
    OUT/keys/NAME.pub                  its public key, for the operator
    OUT/nodes/NAME/superexec.secret    the SuperNode's and SuperExec's shared secret (0600)
    OUT/nodes/NAME/allowed-fabs.txt    FAB hashes the SuperExec runs (0400): fedgs'
    OUT/nodes/NAME/state               the node's critic and privacy ledger (0700; default)
    OUT/ca.crt                         the operator's CA certificate (given with --ca-cert)

Run again at will: the key pair, the secret and the allowlist's entries are kept.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fedgs.deploy import topology
from fedgs.private_files import PRIVATE_FILE, private_dir

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
NODE_PORT = 9094  # the SuperNode's runtime API, on 127.0.0.1: what its SuperExec dials
FLEET_PORT = 9093  # the SuperLink's public port (the Fleet API) in fedgs' deployments
SUPERLINK_PLACEHOLDER = f"SUPERLINK-HOST:{FLEET_PORT}"
READ_ONLY = 0o400  # the allowlist: a task's code that writes to it gets EACCES


class NodeSetupError(ValueError):
    """The data holder's input cannot make a node folder; the message says why."""


@dataclass(frozen=True)
class NodeFolder:
    """Where a data holder's files lie."""

    out: Path
    name: str

    @property
    def private_key(self) -> Path:
        return self.out / "keys" / f"{self.name}.key"

    @property
    def public_key(self) -> Path:
        return self.out / "keys" / f"{self.name}.pub"

    @property
    def node_dir(self) -> Path:
        return self.out / "nodes" / self.name

    @property
    def secret(self) -> Path:
        return self.node_dir / "superexec.secret"

    @property
    def allowlist(self) -> Path:
        return self.node_dir / "allowed-fabs.txt"

    @property
    def default_state_dir(self) -> Path:
        return self.node_dir / "state"

    @property
    def ca_cert(self) -> Path:
        return self.out / "ca.crt"


@dataclass(frozen=True)
class Prepared:
    """What :func:`prepare_node` did: whether it made the key pair, what it did with the
    operator's certificate (``copied``, ``replaced``, ``kept``, ``missing``) and the app hash."""

    new_key: bool
    ca_cert: str
    app_hash: str


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise NodeSetupError(
            f"--name {name!r}: letters, digits, '.', '_' and '-' only (at most 64, not starting "
            "with '.', '_' or '-'): it names the node's key files and its registration"
        )
    return name


def check_out(out: Path) -> None:
    """``out`` is a folder or nothing yet; a file, or a path through a file, is refused."""
    for path in (out, *out.parents):
        if path.exists() and not path.is_dir():
            raise NodeSetupError(f"{path} exists and is not a folder (--out {out})")


def read_ca_certificate(path: Path) -> bytes:
    """The operator's CA certificate(s) in ``path`` as they are, checked: PEM certificates of a CA
    only. A file with a private key in it (the CA's key sent by mistake) is refused, so that it
    is not copied into the node's folder; the message says what to do."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise NodeSetupError(f"--ca-cert {path}: {error.strerror or error}") from error
    if b"PRIVATE KEY" in data:
        raise NodeSetupError(
            f"--ca-cert {path} holds a private key: a data holder takes the operator's CA "
            "certificate (ca.crt) only, never a key. Delete that file and tell the operator; a "
            "CA key that left the operator lets its holder impersonate the SuperLink"
        )
    from cryptography import x509

    try:
        certificates = x509.load_pem_x509_certificates(data)
    except ValueError as error:
        raise NodeSetupError(f"--ca-cert {path} is not a PEM certificate") from error
    for certificate in certificates:
        try:
            is_ca = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            is_ca = False
        if not is_ca:
            raise NodeSetupError(
                f"--ca-cert {path} holds a certificate that is not a CA's "
                f"({certificate.subject.rfc4514_string()}): ask the operator for ca.crt, the "
                "certificate that signed the SuperLink's"
            )
    return data


def _write_public_key(private_key: Path, public_key: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_ssh_private_key(private_key.read_bytes(), password=None)
    public_key.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
        )
        + b"\n"
    )


def _ensure_key_pair(folder: NodeFolder) -> bool:
    """The node's key pair, made once (True: made now). A private key already there is kept, and
    made the owner's alone if it was not; a missing public key is derived from it."""
    from fedgs.deploy.certs import generate_node_keys

    private_dir(folder.private_key.parent)
    if not folder.private_key.exists():
        generate_node_keys(folder.private_key.parent, folder.name)
        return True
    folder.private_key.chmod(PRIVATE_FILE)
    if not folder.public_key.exists():
        _write_public_key(folder.private_key, folder.public_key)
    return False


def _allow(path: Path, digest: str, note: str) -> None:
    """Add ``digest`` to the allowlist at ``path`` (entries there are kept), left read-only."""
    from fedgs.deploy.app_bundle import write_allowlist

    if path.exists():
        path.chmod(PRIVATE_FILE)
    write_allowlist(path, {digest: note})
    path.chmod(READ_ONLY)


def _install_ca_cert(folder: NodeFolder, ca_cert: Path | None) -> str:
    if ca_cert is None:
        return "kept" if folder.ca_cert.exists() else "missing"
    data = read_ca_certificate(ca_cert)
    before = folder.ca_cert.read_bytes() if folder.ca_cert.exists() else None
    if before == data:
        return "kept"
    folder.ca_cert.write_bytes(data)
    folder.ca_cert.chmod(0o644)  # public: the certificate the SuperLink is checked against
    return "copied" if before is None else "replaced"


def prepare_node(folder: NodeFolder, state_dir: Path, ca_cert: Path | None = None) -> Prepared:
    """Write (or complete) the data holder's folder; input is checked before anything is
    written. ``state_dir`` is made the owner's alone (0700), as the node's state store makes it
    at its first run."""
    from fedgs import __version__
    from fedgs.deploy.app_bundle import fab_hash, write_app
    from fedgs.deploy.certs import ensure_secret

    check_name(folder.name)
    check_out(folder.out)
    check_out(state_dir)
    if ca_cert is not None:
        read_ca_certificate(ca_cert)
    private_dir(folder.out, existing=False)  # a folder the user named keeps its mode
    new_key = _ensure_key_pair(folder)
    private_dir(folder.out / "nodes")
    private_dir(folder.node_dir)
    ensure_secret(folder.secret)
    with tempfile.TemporaryDirectory() as scratch:
        digest = fab_hash(write_app(Path(scratch) / "app"))
    note = f"fedgs {__version__}, the app `fedgs deploy app-hash` prints"
    _allow(folder.allowlist, digest, note)
    private_dir(state_dir)
    return Prepared(new_key, _install_ca_cert(folder, ca_cert), digest)


def node_config(
    partition_id: int,
    state_dir: Path,
    device: str = "auto",
    policy: Mapping[str, str | float] | None = None,
    data_dir: Path | None = None,
) -> str:
    """The node's ``--node-config``: which client it is, where its state lives (required: a
    node without it refuses to serve), where its data lie (``data_dir``; None: the embedded
    dataset only), what it computes on and its privacy policy."""
    if partition_id < 0:
        raise NodeSetupError(f"--partition-id must be 0 or more, got {partition_id}")
    for option, path in (("--state-dir", state_dir), ("--data-dir", data_dir)):
        if path is not None:
            topology.check_unquoted(option, path)
    if data_dir is not None and not data_dir.is_dir():
        raise NodeSetupError(f"--data-dir {data_dir}: no such folder on this machine")
    return topology.node_config(
        partition_id, None, str(state_dir), policy, device, str(data_dir) if data_dir else ""
    )


def python_command() -> str:
    """``python`` where that is this interpreter (the same folder on PATH: the same virtual
    environment), else this interpreter's path."""
    found = shutil.which("python")
    same = found is not None and Path(found).absolute().parent == Path(sys.executable).parent
    return "python" if same else sys.executable


@dataclass(frozen=True)
class NodeCommands:
    """The data holder's two processes: each an environment and a command line."""

    supernode_env: dict[str, str]
    supernode: list[str]
    superexec_env: dict[str, str]
    superexec: list[str]


def node_commands(
    folder: NodeFolder, superlink: str, port: int, config: str, python: str = "python"
) -> NodeCommands:
    """The SuperNode through ``python -m fedgs.deploy.supernode`` (fedgs' waits; started again
    while the SuperLink still counts a restarted node online) and its ClientApp SuperExec
    (fedgs', running only the apps on the node's allowlist), with the flags fedgs' own
    deployments give them (fedgs.deploy.topology)."""
    out = folder.out.absolute()
    folder = NodeFolder(out, folder.name)
    runtime = f"127.0.0.1:{port}"
    flower_supernode = topology.supernode_args(
        superlink=superlink,
        host="127.0.0.1",
        port=port,
        security=topology.Security(),
        ca_cert=str(folder.ca_cert),
        private_key=str(folder.private_key),
        config=config,
        superexec_secret=str(folder.secret),
    )
    superexec = topology.superexec_args(
        runtime_api=runtime,
        ca_cert=None,  # a link on the node's loopback
        superexec_secret=str(folder.secret),
        python=python,
        preload=topology.CLIENTAPP_PRELOAD,
        allowed_fabs=str(folder.allowlist),
    )
    return NodeCommands(
        topology.environment(),
        [python, "-m", "fedgs.deploy.supernode", *flower_supernode[1:]],
        topology.environment(topology.WARM_EXECUTOR_ENV),
        superexec,
    )


def shell_lines(env: Mapping[str, str], argv: Sequence[str], indent: str = "    ") -> str:
    """``argv`` as a shell command a user copies: the environment on the first line, then the
    program, then one option (with its value) a line, joined by backslash-newlines."""
    head = 3 if argv[1:2] == ["-m"] else 1
    groups: list[list[str]] = [list(argv[:head])]
    for token in argv[head:]:
        previous = groups[-1]
        if token.startswith("-") or len(groups) == 1 or len(previous) > 1 or "=" in previous[0]:
            groups.append([token])
        else:
            previous.append(token)  # the value of the option before it
    lines = [" ".join(f"{key}={shlex.quote(value)}" for key, value in env.items())] if env else []
    lines += [" ".join(shlex.quote(token) for token in group) for group in groups]
    return " \\\n".join(indent + ("  " if n else "") + line for n, line in enumerate(lines))


def instructions(
    folder: NodeFolder,
    prepared: Prepared,
    commands: NodeCommands,
    state_dir: Path,
    superlink: str,
) -> str:
    """What the command prints: the files, then the next steps with the commands to copy."""
    from fedgs.deploy.certs import fingerprint

    out = folder.out.absolute()
    folder = NodeFolder(out, folder.name)
    key_state = "made now" if prepared.new_key else "kept"

    def shown(path: Path) -> str:
        return str(path.relative_to(out) if path.is_relative_to(out) else path)

    paths = [folder.private_key, folder.public_key, folder.secret, folder.allowlist, state_dir]
    width = max(len(shown(path)) for path in paths)

    def row(path: Path, what: str) -> str:
        return f"  {shown(path):<{width}}  {what}"

    ca_note = {
        "copied": "the operator's CA certificate (copied from --ca-cert)",
        "replaced": "the operator's CA certificate (REPLACED by --ca-cert's)",
        "kept": "the operator's CA certificate",
        "missing": "MISSING: the operator's CA certificate goes here (step 2)",
    }[prepared.ca_cert]
    lines = [
        f"fedgs deploy node: data holder {folder.name!r} in {out}",
        row(folder.private_key, f"private key (0600, {key_state}): it never leaves this machine"),
        row(folder.public_key, "public key: the operator registers it"),
        row(folder.secret, "secret the SuperNode and its SuperExec share (0600)"),
        row(folder.allowlist, f"the apps this node runs (0400): fedgs {prepared.app_hash[:12]}..."),
        row(state_dir, "the node's critic and privacy ledger (0700)"),
        row(folder.ca_cert, ca_note),
        "Nothing here is the operator's: no CA key, no server key, no SuperLink secret.",
        "",
        "Next steps",
        "1. Send the public key to the SuperLink's operator (it is not secret), e.g.",
        f"     scp {shlex.quote(str(folder.public_key))} OPERATOR@SUPERLINK-HOST:",
        "   and read them its fingerprint over another channel (phone, video call):",
        f"     {fingerprint(folder.public_key)}",
        "   On the SuperLink's host the operator checks it (ssh-keygen -lf FILE) and registers it",
        "   through the Control socket (fedgs deploy local: OUT/control/superlink.sock):",
        "     fedgs deploy register --superlink unix:CONTROL-SOCKET \\",
        f"       --root-certificates deploy/certificates/ca.crt {folder.name}.pub",
        "   or, with compose, through its flwr service:",
        f'     docker compose -p fedgs run --rm -v "$PWD/{folder.name}.pub:/app/key.pub:ro" \\',
        "       flwr supernode register /app/key.pub fedgs",
    ]
    step = 2
    if prepared.ca_cert == "missing":
        lines += [
            f"{step}. Get the operator's ca.crt (the certificate only; never ca.key) and run this",
            f"   again with --ca-cert PATH, or copy it to {folder.ca_cert}.",
        ]
        step += 1
    lines += [
        f"{step}. Start the SuperNode (it dials the SuperLink; its runtime API listens on "
        "127.0.0.1 only):",
        shell_lines(commands.supernode_env, commands.supernode),
    ]
    if superlink == SUPERLINK_PLACEHOLDER:
        lines.append(
            "   SUPERLINK-HOST: the SuperLink's address from the operator (or run this again "
            "with --superlink HOST:PORT)."
        )
    lines += [
        f"{step + 1}. In a second terminal, the SuperExec that runs its ClientApps (only the "
        "apps on allowed-fabs.txt):",
        shell_lines(commands.superexec_env, commands.superexec),
        "Stop both with Ctrl-C. Run this command again at will: it keeps the key, the secret and",
        "the allowlist, and prints these steps again.",
    ]
    return "\n".join(lines) + "\n"
