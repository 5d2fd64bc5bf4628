"""The deployment's processes and their flags, described once.

The local launcher (processes on 127.0.0.1) and docker-compose.yml (containers) run the same
processes with the same flags: a SuperLink, a SuperExec for the ServerApp, and per data holder a
SuperNode plus the SuperExec that runs its ClientApp processes (Flower's "process" isolation).
Only addresses and file locations differ. Both build their command lines here, so a flag added
for one is added for the other (tests/test_deploy_compose.py checks the committed compose file).

Security defaults: TLS on every SuperLink API; SuperNode authentication (only registered public
keys may connect; registration is ``flwr supernode register``); the SuperLink's public port serves
only the Fleet API, its Control and ServerApp runtime APIs answer on a private address only
(fedgs.deploy.superlink: Flower 1.41 serves all three on one port and its Control API has no
authentication): a Unix socket only the operator's user reaches here, a port on a network of its
own in compose; every SuperExec authenticates to the runtime API it pulls tasks from with a
shared secret (Flower's ``--superexec-auth-secret-file``); the ServerApp's SuperExec runs only the
apps the operator's allowlist names, each data holder's ClientApp SuperExec only those its own
allowlist names (fedgs.deploy.superexec ``--allowed-fabs``). A SuperNode's own runtime API, which
its ClientApp processes dial, stays on a private link: loopback here, a per-node network in
compose.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

FLOWER_VERSION = "1.41.0"
PROCESS = "process"  # isolation mode: separate SuperExec processes (containers) run the apps


@dataclass(frozen=True)
class TlsPaths:
    """Certificate files as the process that reads them sees them."""

    ca_cert: str
    server_cert: str
    server_key: str


@dataclass(frozen=True)
class Security:
    """TLS and SuperNode authentication, both on unless a user turns them off."""

    tls: bool = True
    node_auth: bool = True

    def __post_init__(self) -> None:
        if self.node_auth and not self.tls:
            raise ValueError(
                "SuperNode authentication needs TLS (Flower refuses node keys over an insecure "
                "connection): use --tls, or --no-node-auth with --insecure"
            )


# A SuperExec checks for new tasks every second by default: up to 1 s of every message's
# latency. The warm ClientApp SuperExecs check every 50 ms (a local request to their SuperNode).
WARM_EXECUTOR_ENV = {"FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.05"}

SUPERLINK = "superlink"
SERVERAPP_EXECUTOR = "serverapp"  # the SuperExec that runs the ServerApp
# torch._dynamo: torch.optim imports it lazily, on the first optimizer (~3 s)
CLIENTAPP_PRELOAD = ("fedgs.client.app", "torch._dynamo")


def node_name(partition_id: int) -> str:
    return f"supernode-{partition_id}"


def executor_name(partition_id: int) -> str:
    """The SuperExec that runs SuperNode ``partition_id``'s ClientApp processes."""
    return f"clientapp-{partition_id}"


def check_unquoted(option: str, path: object) -> None:
    """A path written into ``--node-config`` between double quotes: no quote or backslash may
    end it early or escape into another key."""
    if any(quote in str(path) for quote in "\"'\\"):
        raise ValueError(f"{option} {path}: no quotes or backslashes in its path")


def node_config(
    partition_id: int,
    num_partitions: int | None,
    state_dir: str,
    policy: Mapping[str, str | int | float] | None = None,
    device: str = "auto",
    data_dir: str = "",
) -> str:
    """``--node-config``: which client this node is (of ``num_partitions``; None: the run
    config's num-clients), where its private state lives, where its data lie (``data_dir``;
    empty: none, for the embedded dataset), what it computes on (the node's, never the
    server's to choose: fedgs.client.node) and its privacy policy (``policy-*`` keys; absent
    ones take ``NodePolicy``'s safe defaults)."""
    config = f"partition-id={partition_id}"
    if num_partitions is not None:
        config += f" num-partitions={num_partitions}"
    config += f' state-dir="{state_dir}"'
    if data_dir:
        config += f' data-dir="{data_dir}"'
    config += f' device="{device}"'
    for key, value in (policy or {}).items():
        config += f' {key}="{value}"' if isinstance(value, str) else f" {key}={value!r}"
    return config


# flwr.supercore.constant.FLWR_IN_MEMORY_DB_NAME, spelled out: importing flwr costs the CLI ~0.7 s
IN_MEMORY_DATABASE = ":flwr-in-memory:"


def superlink_args(
    *,
    host: str,
    port: int,
    private: tuple[str, int] | str,
    security: Security,
    tls: TlsPaths | None,
    database: str,
    superexec_secret: str,
    python: str = "python",
    node_doorbells: str | None = None,
) -> list[str]:
    """``flower-superlink`` through fedgs.deploy.superlink: the Fleet API on ``host:port``, the
    Control and runtime APIs on ``private``: a Unix socket's path (only its owner reaches it)
    or (host, port) on a network of their own (compose). Runtime dependency installation is
    always off (it would fetch a CUDA torch); the app's code is already installed where it
    runs. ``node_doorbells``: the prefix of the nodes' bells it rings (fedgs.deploy.doorbell)."""
    args = [python, "-m", "fedgs.deploy.superlink"]
    if isinstance(private, str):
        args += ["--private-socket", private]
    else:
        args += ["--private-host", private[0], "--private-port", str(private[1])]
    if node_doorbells is not None:
        if not security.node_auth:
            raise ValueError("node doorbells need node authentication (a bell per node key)")
        args.append(f"--node-doorbells={node_doorbells}")
    if security.tls:
        if tls is None:
            raise ValueError("TLS is on but no certificate paths were given")
        args += [
            "--ssl-ca-certfile",
            tls.ca_cert,
            "--ssl-certfile",
            tls.server_cert,
            "--ssl-keyfile",
            tls.server_key,
        ]
    else:
        args.append("--insecure")
    if security.node_auth:
        args.append("--enable-supernode-auth")
    return args + [
        "--isolation",
        PROCESS,
        "--disable-runtime-dependency-installation",
        "--superexec-auth-secret-file",
        superexec_secret,
        "--database",
        database,
        "--host",
        host,
        "--port",
        str(port),
    ]


PROMPT_SUPERNODE = "fedgs.deploy.prompt_supernode"


def supernode_args(
    *,
    superlink: str,
    host: str,
    port: int,
    security: Security,
    ca_cert: str | None,
    private_key: str | None,
    config: str,
    superexec_secret: str,
    python: str | None = None,
    doorbell: str | None = None,
    link_doorbell: str | None = None,
) -> list[str]:
    """``flower-supernode``: dials the SuperLink over TLS and signs its requests with its key.
    With ``python``, under that interpreter with Flower's fixed waits shortened
    (fedgs.deploy.prompt_supernode), ringing ``doorbell`` (if given) when a message has arrived
    and pulling when the SuperLink rings its bell under ``link_doorbell`` (a prefix;
    fedgs.deploy.doorbell); else Flower's own."""
    args = ["flower-supernode"] if python is None else [python, "-m", PROMPT_SUPERNODE]
    if doorbell is not None or link_doorbell is not None:
        if python is None:
            raise ValueError("doorbells need fedgs' SuperNode (python=...)")
        args += [f"--doorbell={doorbell}"] if doorbell else []
        if link_doorbell is not None:
            if not security.node_auth:
                raise ValueError("the link's doorbell needs node authentication (its key)")
            args.append(f"--link-doorbell={link_doorbell}")
    args += ["--superlink", superlink]
    if security.tls:
        if ca_cert is None:
            raise ValueError("TLS is on but no CA certificate was given")
        args += ["--root-certificates", ca_cert]
    else:
        args.append("--insecure")
    if security.node_auth:
        if private_key is None:
            raise ValueError("node authentication is on but no private key was given")
        args += ["--auth-supernode-private-key", private_key]
    return args + [
        "--node-config",
        config,
        "--isolation",
        PROCESS,
        "--superexec-auth-secret-file",
        superexec_secret,
        "--host",
        host,
        "--port",
        str(port),
    ]


def superexec_args(
    *,
    runtime_api: str,
    ca_cert: str | None,
    superexec_secret: str,
    python: str | None = None,
    preload: Sequence[str] = (),
    allowed_fabs: str | None = None,
    spawn: bool = False,
    doorbell: str | None = None,
    ready_file: str | None = None,
) -> list[str]:
    """A SuperExec for process isolation: runs the ServerApp (``runtime_api`` is the SuperLink's
    private address, verified with ``ca_cert``) or a node's ClientApp processes (that SuperNode's
    private runtime API; ``ca_cert`` None: no TLS on that link). With ``python``, fedgs'
    SuperExec under that interpreter (fedgs.deploy.superexec): ClientApp processes forked after
    importing ``preload`` once (``spawn``: fresh ones, as Flower), only for apps listed in
    ``allowed_fabs``, a task asked for as soon as ``doorbell`` rings, ``ready_file`` written once
    the runtime API answered a poll (a container's health check); else Flower's."""
    if python is None:
        if doorbell is not None or ready_file is not None:
            raise ValueError("the doorbell and the ready file need fedgs' SuperExec (python=...)")
        args = ["flower-superexec"]
    else:
        args = [python, "-m", "fedgs.deploy.superexec"]
        args += [f"--preload={module}" for module in preload]
        args += ["--spawn"] if spawn else []
        args += [f"--allowed-fabs={allowed_fabs}"] if allowed_fabs else []
        args += [f"--doorbell={doorbell}"] if doorbell else []
        args += ["--ready-file", ready_file] if ready_file else []
    args += ["--runtime-api-address", runtime_api]
    args += ["--superexec-auth-secret-file", superexec_secret]
    return args + (["--root-certificates", ca_cert] if ca_cert else ["--insecure"])


def environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment of every component: no telemetry and no update check (machines may be
    offline), plus ``extra``."""
    return {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1", **(extra or {})}
