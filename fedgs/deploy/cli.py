"""``fedgs deploy``: the same ServerApp and ClientApps as real Flower processes.

``local`` runs a SuperLink and N SuperNodes on 127.0.0.1 and the app on them; ``flwr`` is
Flower's CLI able to reach its Control socket; ``init``, ``compose`` and ``register`` prepare and
serve docker-compose.yml (the operator's); ``node`` prepares a data holder's machine to join an
operator's SuperLink. Only the handlers import Flower, torch or cryptography.
"""

from __future__ import annotations

import argparse
import itertools
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from fedgs.deploy.launcher import LocalOptions

DEFAULT_NODES = 3
# `fedgs deploy local`'s run config under the user's own: a GS-WGAN run that fits every node's
# default privacy budget (epsilon 10, fedgs.privacy.policy). With 3 nodes and least-queried
# sampling each node answers 7 of the 20 queries, at sigma 12 and batch 32: epsilon 6.76 per
# node (untrusted server, autodp-rdp, delta 1e-5; docs/privacy.md, "Node privacy policy").
DEPLOY_RUN_DEFAULTS: dict[str, Any] = {"steps": 20, "noise-multiplier": 12.0}
GSWGAN_DEPLOY_DEFAULTS: dict[str, Any] = {"client-sampling": "least-queried"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "deploy",
        help="real multi-process deployment: local processes or docker compose",
        description=(
            "Run fedgs as a Flower deployment: a SuperLink, one SuperNode per data holder and "
            "the SuperExecs that run the ServerApp and ClientApps, with TLS and SuperNode "
            "authentication by default."
        ),
    )
    commands = parser.add_subparsers(dest="deploy_command", metavar="WHAT", required=True)
    _local(commands)
    _init(commands)
    _compose(commands)
    _register(commands)
    _node(commands)
    _app_hash(commands)
    _flwr(commands)


def _local(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "local",
        help="SuperLink + N SuperNodes on 127.0.0.1, run the app, stop everything",
        description=(
            "Starts a SuperLink and N SuperNodes as processes bound to 127.0.0.1, registers "
            "each node's key, runs the app with `flwr run --stream` and stops every process "
            "at the end or on Ctrl-C. Node i serves partition i and keeps its critic and "
            "privacy ledger in OUT/nodes/supernode-i/state; outputs land in OUT/run (a later "
            "run in the same OUT: OUT/run-2, OUT/run-3, ...; resume=true continues the latest)."
        ),
    )
    parser.add_argument("--out", type=Path, required=True, help="deployment directory")
    parser.add_argument("--nodes", type=int, default=DEFAULT_NODES, help="SuperNodes (%(default)s)")
    security = parser.add_mutually_exclusive_group()
    security.add_argument(
        "--tls",
        dest="tls",
        action="store_true",
        default=True,
        help="TLS and SuperNode authentication (default)",
    )
    security.add_argument(
        "--insecure",
        dest="tls",
        action="store_false",
        help="no TLS; SuperNode authentication needs TLS, so any node may join",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="Flower's defaults: a fresh interpreter per ClientApp message, 1 s and 3 s polls",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads per ServerApp/ClientApp process; 0: the inherited OMP_NUM_THREADS "
        "or one per core (%(default)s)",
    )
    parser.add_argument(
        "--superlink-state",
        choices=("memory", "file"),
        default="memory",
        help="where the SuperLink keeps nodes, runs and messages: in memory (faster steps; "
        "the nodes' keys are registered again at every start) or OUT/superlink.db "
        "(%(default)s)",
    )
    parser.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="every node's privacy policy, a policy-* node-config key (repeatable), e.g. "
        "--policy policy-min-noise-multiplier=1.5 --policy policy-epsilon-budget=50; absent "
        "keys take the safe defaults (docs/privacy.md, 'Node privacy policy')",
    )
    parser.add_argument(
        "--node-device",
        default="auto",
        choices=("auto", "cpu", "cuda"),
        help="what every node computes on (node-config 'device'; the run config's 'device' "
        "is the server's own) (%(default)s)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="the data folder every node reads (node-config 'data-dir') and, unless the run "
        "config names another, the server's copy for its scores (run-config 'data-dir'): for "
        "femnist or mnist; omit for the embedded dataset",
    )
    parser.add_argument(
        "--steps",
        type=int,
        help=f"generator steps (run-config 'steps'; {DEPLOY_RUN_DEFAULTS['steps']})",
    )
    parser.add_argument(
        "--run-config",
        default="",
        help="more run config, as for `flwr run`: \"noise-multiplier=12.0 dataset='femnist'\" "
        "(with --data-dir: the nodes' data folder is theirs, not the run config's); defaults: "
        "noise-multiplier 12, GS-WGAN's client-sampling least-queried (a default run fits each "
        "node's default budget)",
    )
    parser.set_defaults(handler=_run_local)


def _init(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "init",
        help="certificates, node keys, Flower config and app directory for docker compose",
        description=(
            "Writes OUT/certificates (a CA certificate and the SuperLink's certificate and "
            "key), OUT/ca/ca.key (the CA's key: keep it, never mount it; it re-issues the "
            "server certificate for new names), OUT/keys (one key pair per SuperNode), "
            "OUT/secrets and OUT/nodes/<node>/superexec.secret (SuperExec authentication), "
            "OUT/nodes/<node>/allowed-fabs.txt (the apps a node runs: fedgs'), "
            "OUT/control/allowed-fabs.txt (the ServerApps the operator's SuperExec runs: "
            "fedgs'), OUT/flwr-home "
            "(the Flower config of compose's `flwr` service: a `fedgs` connection to the Control "
            "socket in the control-plane volume) and OUT/app (the app "
            "`flwr run` ships). Run it again at will: existing certificates, keys, secrets and "
            "allowlist entries are kept. Nothing here is committed."
        ),
    )
    parser.add_argument("--out", type=Path, default=Path("deploy"), help="(%(default)s)")
    parser.add_argument("--nodes", type=int, default=2, help="SuperNodes (%(default)s)")
    parser.add_argument(
        "--san",
        action="append",
        default=[],
        metavar="HOST",
        help="a host name or IP address data holders dial the SuperLink by, added to the "
        "server certificate (repeat for several; 127.0.0.1, localhost and the compose names "
        "are always in it)",
    )
    parser.set_defaults(handler=_run_init)


def _node(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "node",
        help="a data holder's files to join an operator's SuperLink from another machine",
        description=(
            "Run by a data holder, on the machine that holds the data (the operator runs "
            "`init`). Writes OUT/keys/NAME.key (the node's private key, 0600: it never leaves "
            "this machine) and OUT/keys/NAME.pub (for the operator, who registers it with "
            "`fedgs deploy register`), OUT/nodes/NAME/superexec.secret (shared by the node's "
            "SuperNode and SuperExec), OUT/nodes/NAME/allowed-fabs.txt (the one app the node "
            "runs: fedgs', the hash `fedgs deploy app-hash` prints) and the node's state folder; "
            "copies the operator's CA certificate given with --ca-cert to OUT/ca.crt. Nothing "
            "of the operator's: no CA key, server key or SuperLink secret. Then prints the next "
            "steps: what to send the operator and the two commands that start the node. Run it "
            "again at will: the key pair, the secret and the allowlist are kept."
        ),
    )
    parser.add_argument("--out", type=Path, required=True, help="the data holder's folder")
    parser.add_argument(
        "--partition-id",
        type=int,
        default=0,
        help="which client this node is, as the operator assigned (%(default)s)",
    )
    parser.add_argument(
        "--name",
        help="the node's name: its key files and its registration (default: "
        "supernode-PARTITION_ID)",
    )
    parser.add_argument(
        "--ca-cert",
        type=Path,
        metavar="PATH",
        help="the operator's ca.crt, copied to OUT/ca.crt (a file holding a key is refused)",
    )
    parser.add_argument(
        "--superlink",
        metavar="HOST:PORT",
        help="the SuperLink's public address the operator gave, for the printed commands "
        "(default: a placeholder, SUPERLINK-HOST:9093)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="where the node keeps its critic and privacy ledger (default: OUT/nodes/NAME/state)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="the folder of this node's data (node-config 'data-dir'; a server's run config "
        "cannot name another); omit for the embedded dataset",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=9094,
        help="the SuperNode's runtime API on 127.0.0.1, which its SuperExec dials (%(default)s)",
    )
    parser.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cpu", "cuda"),
        help="what the node computes on (%(default)s)",
    )
    parser.add_argument(
        "--policy",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="the node's privacy policy, a policy-* node-config key (repeatable; docs/privacy.md, "
        "'Node privacy policy'); absent keys take the safe defaults",
    )
    parser.set_defaults(handler=_run_node)


def _app_hash(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "app-hash",
        help="print the FAB hash of the fedgs app, for a node's allowed-fabs.txt",
        description=(
            "Builds the app directory `fedgs deploy init` writes (from this installed fedgs) "
            "and prints the sha256 of its FAB: the hash a data holder puts in its node's "
            "allowed-fabs.txt so that its SuperNode runs fedgs and nothing else. The hash "
            "changes with the fedgs version (the app carries its run-config defaults)."
        ),
    )
    parser.add_argument("--app", type=Path, help="an app directory to hash instead")
    parser.set_defaults(handler=_run_app_hash)


def _compose(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "compose",
        help="write docker-compose.yml for N SuperNodes",
        description="Renders docker-compose.yml from the topology `fedgs deploy local` runs.",
    )
    parser.add_argument("--nodes", type=int, default=2, help="SuperNodes (%(default)s)")
    parser.add_argument(
        "--node-data",
        action="store_true",
        help="each node reads its dataset from deploy/data/supernode-i (node-config "
        'data-dir="/app/data"): for femnist or mnist; without it, the embedded dataset only',
    )
    parser.add_argument("-o", "--output", type=Path, help="file to write (default: stdout)")
    parser.set_defaults(handler=_run_compose)


def _register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "register",
        help="register SuperNode public keys with a SuperLink (skips known keys)",
        description=(
            "Run by the operator: registers the public keys data holders sent (`fedgs deploy "
            "node` writes them) with the SuperLink, through its Control API: a Unix socket, "
            "unix:PATH (`fedgs deploy local` serves OUT/control/superlink.sock), or HOST:PORT. "
            "Prints each key's SHA256 fingerprint (as `ssh-keygen -lf` does) to compare with "
            "the one the data holder gave. Also what compose's one-shot `register` service runs."
        ),
    )
    parser.add_argument(
        "--superlink", required=True, help="HOST:PORT (or unix:PATH) of the SuperLink's Control API"
    )
    parser.add_argument("--root-certificates", type=Path, help="CA certificate (omit: no TLS)")
    parser.add_argument("public_keys", type=Path, nargs="+", help="OpenSSH public key files")
    parser.set_defaults(handler=_run_register)


def _flwr(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "flwr",
        help="Flower's `flwr` CLI, able to reach a `deploy local` Control socket",
        description=(
            "Runs `flwr ARGS`; a connection whose address is unix:PATH (what `fedgs deploy "
            "local` writes to OUT/flwr-home: its Control API is a Unix socket only its user "
            "reaches) is dialled through that socket, e.g. "
            "`FLWR_HOME=OUT/flwr-home fedgs deploy flwr supernode list fedgs`."
        ),
        add_help=False,  # --help goes to flwr
        prefix_chars="\0",  # every argument is flwr's, --version and --help too
    )
    parser.add_argument("flwr_args", nargs=argparse.REMAINDER, help="flwr's arguments")
    parser.set_defaults(handler=_run_flwr)


def _run_flwr(args: argparse.Namespace) -> int:
    import os

    from fedgs.deploy.unix_socket import command

    argv = [*command("flwr"), *args.flwr_args]
    os.execv(argv[0], argv)  # flwr's own exit status and terminal


def _interrupt(signum: int, frame: Any) -> NoReturn:
    raise KeyboardInterrupt


def _local_run_config(args: argparse.Namespace) -> dict[str, Any]:
    """The user's run config on top of the deployment's: one partition per node, the run
    directory inside OUT, the server waiting for every node, a run within the nodes' default
    budget (DEPLOY_RUN_DEFAULTS)."""
    import click
    from flwr.common.config import parse_config_args

    from fedgs.run_config import RunConfig

    if args.nodes < 1:
        raise ValueError(f"--nodes must be at least 1, got {args.nodes}")
    try:
        user = parse_config_args([args.run_config]) if args.run_config else {}
    except click.ClickException as error:
        raise ValueError(f"--run-config: {error.message}") from error
    if args.steps is not None:
        user["steps"] = args.steps
    if args.data_dir is not None:
        user.setdefault("data-dir", str(args.data_dir.resolve()))
    elif "data-dir" in user:
        raise ValueError(
            "the run config's data-dir is the server's copy, which no node reads: give the "
            "nodes' folder with --data-dir (the server's copy defaults to it)"
        )
    resume = str(user.get("resume", False)).lower() == "true"
    config = {
        "num-clients": args.nodes,
        "min-nodes": args.nodes,
        "run-dir": str(_run_dir(args.out, user.get("run-dir"), resume)),
        **DEPLOY_RUN_DEFAULTS,
    }
    if user.get("strategy", RunConfig.strategy) == "gswgan":
        config |= GSWGAN_DEPLOY_DEFAULTS
    config |= user
    RunConfig.from_user_config(config)  # unknown keys and bad values fail here, not remotely
    return config


def holds_run(folder: Path) -> bool:
    """Whether ``folder`` has anything in it: a run's config, ledger, metrics or checkpoint."""
    return folder.is_dir() and any(folder.iterdir())


def _run_dir(out: Path, named: object, resume: bool) -> Path:
    """Every run of a deployment folder gets its own run directory: OUT/run, then OUT/run-2,
    OUT/run-3, ... (a run never writes over another's generator, ledger and privacy report, nor
    appends to its metrics). ``resume``: the latest of them, as ``fedgs simulate --resume``
    continues its run directory. A run directory the user ``named`` is taken as it is, and
    refused if a run is in it already and ``resume`` is off."""
    if named is not None:
        folder = Path(str(named)).resolve()
        if holds_run(folder) and not resume:
            raise ValueError(
                f"run directory {folder} holds a run already; add resume=true to --run-config "
                "to continue it, or name another run-dir"
            )
        return folder
    folders = (out.resolve() / ("run" if n == 1 else f"run-{n}") for n in itertools.count(1))
    latest = None
    for folder in folders:
        if not holds_run(folder):
            return latest if resume and latest is not None else folder
        latest = folder
    raise AssertionError("unreachable")


def _node_policy(pairs: list[str]) -> dict[str, str | float]:
    """``--policy KEY=VALUE`` options as node-config entries (numbers as numbers)."""
    policy: dict[str, str | float] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("policy-"):
            raise ValueError(f"--policy takes policy-KEY=VALUE, got {pair!r}")
        try:
            policy[key] = float(value)
        except ValueError:
            policy[key] = value
    return policy


def local_options(args: argparse.Namespace) -> LocalOptions:
    """The deployment `fedgs deploy local` starts for these arguments."""
    from fedgs.deploy.launcher import LocalOptions
    from fedgs.deploy.topology import Security

    return LocalOptions(
        args.nodes,
        Security(args.tls, args.tls),
        warm=not args.cold,
        threads=args.threads,
        policy=_node_policy(args.policy),
        in_memory_state=args.superlink_state == "memory",
        device=args.node_device,
        data_dir=str(args.data_dir.resolve()) if args.data_dir is not None else "",
    )


def _run_local(args: argparse.Namespace) -> int:
    from fedgs.deploy.launcher import DeploymentError, run_local
    from fedgs.training.run_dir import summarize

    try:
        run_config = _local_run_config(args)
        options = local_options(args)
    except (TypeError, ValueError) as error:
        print(f"fedgs deploy local: error: {error}", file=sys.stderr)
        return 2
    # Ctrl-C raises KeyboardInterrupt even where the launcher was started with SIGINT ignored
    # (a non-interactive shell's background job, as CI scripts run it; Python keeps an inherited
    # SIG_IGN): ignored, it let an interrupted deployment run on and exit 0
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)  # stop the deployment as Ctrl-C does
    try:
        result = run_local(args.out, options, run_config)
    except KeyboardInterrupt:
        print("fedgs deploy local: interrupted; every process stopped", file=sys.stderr)
        return 130
    except DeploymentError as error:
        print(f"fedgs deploy local: {error}", file=sys.stderr)
        return 1
    if not result.ok:
        print(f"fedgs deploy local: the run did not complete: {result.details}", file=sys.stderr)
        return 1
    print(summarize(Path(run_config["run-dir"])))
    return 0


def _run_init(args: argparse.Namespace) -> int:
    from fedgs.deploy.certs import CertificateError
    from fedgs.deploy.compose import prepare_host

    if args.nodes < 1:
        print(
            f"fedgs deploy init: error: --nodes must be at least 1, got {args.nodes}",
            file=sys.stderr,
        )
        return 2
    try:
        written = prepare_host(args.out, args.nodes, args.san)
    except CertificateError as error:
        print(f"fedgs deploy init: {error}", file=sys.stderr)
        return 1
    for path in written:
        print(path)
    return 0


def _run_app_hash(args: argparse.Namespace) -> int:
    import tempfile

    from fedgs.deploy.app_bundle import fab_hash, write_app

    if args.app is not None:
        if not (args.app / "pyproject.toml").is_file():
            print(
                f"fedgs deploy app-hash: error: {args.app} has no pyproject.toml", file=sys.stderr
            )
            return 2
        print(fab_hash(args.app))
        return 0
    with tempfile.TemporaryDirectory() as folder:
        print(fab_hash(write_app(Path(folder) / "app")))
    return 0


def _run_compose(args: argparse.Namespace) -> int:
    from fedgs.deploy.compose import dump

    text = dump(args.nodes, args.node_data)
    if args.output:
        args.output.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def _run_register(args: argparse.Namespace) -> int:
    from fedgs.deploy.control import ControlError, register_keys

    try:
        register_keys(args.superlink, args.root_certificates, args.public_keys)
    except ControlError as error:
        print(f"fedgs deploy register: {error}", file=sys.stderr)
        return 1
    return 0


def _run_node(args: argparse.Namespace) -> int:
    from fedgs.deploy import data_holder
    from fedgs.privacy.policy import NodePolicy

    name = args.name or f"supernode-{args.partition_id}"
    folder = data_holder.NodeFolder(args.out, name)
    state_dir = (args.state_dir or folder.default_state_dir).absolute()
    superlink = args.superlink or data_holder.SUPERLINK_PLACEHOLDER
    try:
        data_holder.check_name(name)
        if not 0 < args.port < 65536:
            raise ValueError(f"--port must be a port number, got {args.port}")
        policy = _node_policy(args.policy)
        NodePolicy.from_node_config(policy)
        data_dir = args.data_dir.absolute() if args.data_dir is not None else None
        config = data_holder.node_config(
            args.partition_id, state_dir, args.device, policy, data_dir
        )
        prepared = data_holder.prepare_node(folder, state_dir, args.ca_cert)
    except (TypeError, ValueError) as error:
        print(f"fedgs deploy node: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        where = f" {error.filename}" if error.filename else ""
        print(f"fedgs deploy node: cannot write{where}: {error.strerror or error}", file=sys.stderr)
        return 1
    commands = data_holder.node_commands(
        folder, superlink, args.port, config, data_holder.python_command()
    )
    print(data_holder.instructions(folder, prepared, commands, state_dir, superlink), end="")
    return 0
