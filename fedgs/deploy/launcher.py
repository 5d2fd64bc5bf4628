"""``fedgs deploy local``: one SuperLink and N SuperNodes as real processes on 127.0.0.1.

The deployment directory holds everything of the deployment: certificates and node keys, the
Flower config ``flwr`` uses (``flwr-home/``), the app directory shipped as a FAB, the SuperLink
database, each node's private state directory, one log per process, and the run directory.
The SuperLink's Control and ServerApp runtime APIs answer only on a Unix socket in ``control/``
(0600 in a 0700 folder: no other local user reaches it; fedgs.deploy.unix_socket), and the
ServerApp's SuperExec runs only the apps on ``control/allowed-fabs.txt``, as each node's
ClientApp SuperExec runs only those on its own ``allowed-fabs.txt`` (read-only files the
launcher writes).
Processes are stopped on exit, on an error and on Ctrl-C; none is left behind (see
:mod:`fedgs.deploy.processes`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import tomli_w

from fedgs.deploy import control, doorbell, ports, processes, topology
from fedgs.deploy.app_bundle import PLAIN, PROMPT, fab_hash, write_allowlist, write_app
from fedgs.deploy.certs import (
    NodeKeys,
    TlsFiles,
    ensure_secret,
    ensure_tls,
    generate_node_keys,
)
from fedgs.deploy.unix_socket import MAX_PATH, command, unix_address
from fedgs.private_files import PRIVATE_FILE, private_dir

HOST = "127.0.0.1"
STARTUP_TIMEOUT = 180.0
NODE_STOP_GRACE = 10.0
ACTIVATED = "SuperNode ID:"  # what a SuperNode logs once the SuperLink accepted it
STALE_NODE = "Failed to activate SuperNode"
SUPERLINK_READY = "Control and runtime APIs only on"  # fedgs.deploy.superlink, both sockets bound
PORT_ATTEMPTS = 3  # starts of a component on fresh ports when its port was taken meanwhile
READ_ONLY = 0o400  # an allowlist: the launcher's to change (a same-user process can chmod it)


@dataclass(frozen=True)
class LocalOptions:
    """``warm``: ClientApp processes forked from a SuperExec that imported the app once, task
    and reply polls every 50 ms; off: Flower's defaults (a fresh interpreter per message, 1 s
    task and 3 s reply polls), for comparison. ``threads``: torch threads per process (0: the
    inherited OMP_NUM_THREADS, else torch's default of one per core). The nodes of a local
    deployment share one machine's cores, and several multi-threaded processes on the same
    cores wait on each other: on 2 busy cores a critic query took 10 s with 2 threads, 2.4 s
    with 1 (the simulation engine gives each client one CPU the same way). ``policy``: every
    node's privacy policy, ``policy-*`` node-config keys (fedgs.privacy.policy). ``device``:
    what every node computes on (its node-config ``device``; the run config's is the server's).
    ``data_dir``: the folder every node reads its data from (its node-config ``data-dir``; the
    run config's is the server's copy; empty: the embedded dataset, which needs none).
    ``in_memory_state``: the SuperLink keeps its state (nodes, runs, messages) in memory
    instead of a SQLite file in ``out`` (a deployed step took 0.55-0.65 of the time,
    results/log/deployment.md). Nothing of a local deployment outlives its SuperLink but that state:
    the nodes' keys are registered again at every start, critics and ledgers live in the nodes'
    state directories and the run's checkpoint in the run directory. Off: the file, which a
    SuperLink restarted on its own (compose) needs to remember the registered nodes.
    ``doorbell`` (warm, Linux): each SuperNode rings its SuperExec when a message has arrived
    instead of the SuperExec asking every 50 ms, and (with node authentication) the SuperLink
    rings a SuperNode when it has a message for it (fedgs.deploy.doorbell)."""

    nodes: int = 3
    security: topology.Security = field(default_factory=topology.Security)
    warm: bool = True
    threads: int = 1
    policy: Mapping[str, str | int | float] = field(default_factory=dict)
    in_memory_state: bool = True
    doorbell: bool = True
    device: str = "auto"
    data_dir: str = ""

    def __post_init__(self) -> None:
        from fedgs.privacy.policy import NodePolicy
        from fedgs.run_config import RunConfig

        if self.threads < 0:
            raise ValueError(
                f"threads must be 0 (the inherited setting) or more, got {self.threads}"
            )
        NodePolicy.from_node_config(self.policy)  # a bad policy fails here, not on every node
        RunConfig(device=self.device)  # so does an unknown device
        if self.data_dir and not Path(self.data_dir).is_dir():
            raise ValueError(f"data_dir {self.data_dir}: no such folder")
        topology.check_unquoted("data_dir", self.data_dir)


def free_port() -> int:
    """A port free now and not reserved by any fedgs launcher; nothing keeps it free (tests
    use it for a process of their own). A deployment reserves its ports
    (fedgs.deploy.ports)."""
    reservation = ports.PortReservation(HOST)
    try:
        return reservation.reserve()
    finally:
        reservation.release_all()


STARTED = re.compile(r"Successfully started run (\d+)")


@dataclass(frozen=True)
class RunResult:
    """How a run ended, as the SuperLink reports it (``flwr run`` exits 0 even when the
    ServerApp failed)."""

    run_id: int | None
    status: str
    details: str

    @property
    def ok(self) -> bool:
        return self.status == "finished:completed"


class DeploymentError(RuntimeError):
    """A component did not start or the run could not be submitted; the message says why."""


class LocalDeployment:
    """Start with ``with LocalDeployment(out, options) as deployment:``; stopped on exit."""

    def __init__(self, out: Path, options: LocalOptions | None = None) -> None:
        self.options = options or LocalOptions()
        if self.options.nodes < 1:
            raise ValueError(f"a deployment needs at least one SuperNode, got {self.options.nodes}")
        self.out = out.resolve()
        self.marker = uuid.uuid4().hex
        # Every port stays reserved until stop(): no other fedgs launcher on this host takes
        # one meanwhile (fedgs.deploy.ports); one another program takes is replaced at start.
        ports.sweep()  # lock files of launchers that were killed
        self._ports = ports.PortReservation(HOST)
        weakref.finalize(self, self._ports.release_all)  # a deployment never started or stopped
        self.port = self._ports.reserve()  # public: the Fleet API, what SuperNodes dial
        self.control_socket = _control_socket(self.control_dir, self.marker)  # Control, runtime
        self.node_ports = [self._ports.reserve() for _ in range(self.options.nodes)]
        self._port_attempts: dict[str, int] = {}
        self.tls = TlsFiles.under(self.out / "certs")
        self.components: dict[str, processes.Component] = {}
        self._runs = 0

    # --- layout -----------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The SuperLink's public address (Fleet API only)."""
        return f"{HOST}:{self.port}"

    @property
    def private_address(self) -> str:
        """Where ``flwr`` and the ServerApp's SuperExec reach the SuperLink: its Unix socket."""
        return unix_address(self.control_socket)

    @property
    def control_dir(self) -> Path:
        """The operator's: the Control socket (when its path fits) and the ServerApp allowlist."""
        return self.out / "control"

    @property
    def server_allowlist(self) -> Path:
        """FAB hashes the ServerApp's SuperExec runs (fedgs.deploy.superexec)."""
        return self.control_dir / "allowed-fabs.txt"

    def keys(self, partition_id: int) -> NodeKeys:
        return NodeKeys.under(self.out / "keys", topology.node_name(partition_id))

    def node_dir(self, partition_id: int) -> Path:
        """What data holder ``partition_id`` keeps: its state, secret and app allowlist."""
        return self.out / "nodes" / topology.node_name(partition_id)

    def state_dir(self, partition_id: int) -> Path:
        return self.node_dir(partition_id) / "state"

    def allowlist(self, partition_id: int) -> Path:
        """FAB hashes the node's ClientApp SuperExec runs (fedgs.deploy.superexec)."""
        return self.node_dir(partition_id) / "allowed-fabs.txt"

    def log(self, name: str) -> Path:
        return self.out / "logs" / f"{name}.log"

    @property
    def run_dir(self) -> Path:
        return self.out / "run"

    @property
    def doorbells(self) -> bool:
        """Whether the SuperNodes ring their SuperExecs (fedgs.deploy.doorbell)."""
        return self.options.warm and self.options.doorbell and doorbell.available()

    @property
    def link_doorbells(self) -> str | None:
        """The prefix of the bells the SuperLink rings for its nodes (they need node keys)."""
        return self.marker if self.doorbells and self.options.security.node_auth else None

    def doorbell_name(self, partition_id: int) -> str | None:
        """The name of node ``partition_id``'s doorbell (unique to this deployment)."""
        return f"{self.marker}-{partition_id}" if self.doorbells else None

    def env(self, component: str | None = None) -> dict[str, str]:
        """The environment of ``component`` (of ``flwr`` commands when None). Warm without
        doorbells: the ClientApp SuperExecs ask for a task every 50 ms. The ServerApp's
        SuperExec keeps Flower's 1 s (one task per run: a faster poll only loads the SuperLink
        during the steps), as do SuperExecs with a doorbell (their fallback)."""
        extra = {"FLWR_HOME": str(self.out / "flwr-home"), processes.MARKER: self.marker}
        fast_poll = self.options.warm and not self.doorbells
        if fast_poll and component != topology.SERVERAPP_EXECUTOR:
            extra |= topology.WARM_EXECUTOR_ENV
        if component == topology.SERVERAPP_EXECUTOR and self.link_doorbells:
            extra[doorbell.RUN_BELL_ENV] = self.link_doorbells  # its ServerApps wait on bells
        if self.options.threads > 0:
            extra["OMP_NUM_THREADS"] = str(self.options.threads)
        return {**os.environ, **topology.environment(extra)}

    def commands(self) -> dict[str, list[str]]:
        """Every component's command line, in start order."""
        security, ca_cert = self.options.security, str(self.tls.ca_cert)
        superlink_secret = str(self.out / "secrets" / "superlink.secret")
        commands = {
            topology.SUPERLINK: topology.superlink_args(
                host=HOST,
                port=self.port,
                private=str(self.control_socket),
                security=security,
                tls=topology.TlsPaths(ca_cert, str(self.tls.server_cert), str(self.tls.server_key)),
                database=(
                    topology.IN_MEMORY_DATABASE
                    if self.options.in_memory_state
                    else str(self.out / "superlink.db")
                ),
                superexec_secret=superlink_secret,
                python=sys.executable,
                node_doorbells=self.link_doorbells,
            ),
            topology.SERVERAPP_EXECUTOR: topology.superexec_args(
                runtime_api=self.private_address,
                ca_cert=ca_cert if security.tls else None,
                superexec_secret=superlink_secret,
                python=sys.executable,
                allowed_fabs=str(self.server_allowlist),
            ),
        }
        for partition_id, port in enumerate(self.node_ports):
            node_secret = str(self.node_dir(partition_id) / "superexec.secret")
            commands[topology.node_name(partition_id)] = topology.supernode_args(
                superlink=self.address,
                host=HOST,
                port=port,
                security=security,
                ca_cert=ca_cert,
                private_key=str(self.keys(partition_id).private),
                config=topology.node_config(
                    partition_id,
                    self.options.nodes,
                    str(self.state_dir(partition_id)),
                    self.options.policy,
                    self.options.device,
                    self.options.data_dir,
                ),
                superexec_secret=node_secret,
                python=sys.executable if self.options.warm else None,
                doorbell=self.doorbell_name(partition_id),
                link_doorbell=self.link_doorbells,
            )
            commands[topology.executor_name(partition_id)] = topology.superexec_args(
                runtime_api=f"{HOST}:{port}",
                ca_cert=None,
                superexec_secret=node_secret,
                python=sys.executable,
                preload=topology.CLIENTAPP_PRELOAD if self.options.warm else (),
                allowed_fabs=str(self.allowlist(partition_id)),
                spawn=not self.options.warm,
                doorbell=self.doorbell_name(partition_id),
            )
        return commands

    # --- lifecycle ----------------------------------------------------------------------------

    def __enter__(self) -> LocalDeployment:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def prepare(self) -> None:
        """Certificates, node keys, secrets, Flower config, app directory and each node's
        allowlist of that app, the operator's ServerApp allowlist of it (certificates, keys and
        secrets are kept if already there). What is private is the owner's alone: 0600 files in
        0700 folders (fedgs.private_files)."""
        security = self.options.security
        for folder in (self.out / "nodes", self.out / "logs", self.control_dir):
            private_dir(folder)  # critics, ledgers, secrets; logs that quote them; Control
        private_dir(self.control_socket.parent)
        if security.tls:
            ensure_tls(self.tls.ca_cert.parent, self.out / "ca" / "ca.key")
        ensure_secret(self.out / "secrets" / "superlink.secret")
        app = write_app(self.out / "app", PROMPT if self.options.warm else PLAIN)
        for partition_id in range(self.options.nodes):
            if security.node_auth and not self.keys(partition_id).private.exists():
                generate_node_keys(self.out / "keys", topology.node_name(partition_id))
            private_dir(self.node_dir(partition_id))
            private_dir(self.state_dir(partition_id))
            ensure_secret(self.node_dir(partition_id) / "superexec.secret")
        self.allow_app(app)
        self._write_flwr_home()

    def _write_flwr_home(self) -> None:
        control.write_flwr_home(
            self.out / "flwr-home",
            self.private_address,
            self.tls.ca_cert if self.options.security.tls else None,
        )

    def allow_app(self, app: Path) -> str:
        """Let the operator's SuperExec run the app in ``app`` and every node run it too (what
        each data holder does by adding its hash to its allowlist); returns the hash."""
        digest = self.allow_server_app(app)
        for partition_id in range(self.options.nodes):
            _write_read_only(self.allowlist(partition_id), {digest: str(app)})
        return digest

    def allow_server_app(self, app: Path) -> str:
        """Let the operator's SuperExec run the ServerApp of the app in ``app`` (nodes still
        refuse it unless they list it); returns the hash."""
        digest = fab_hash(app)
        _write_read_only(self.server_allowlist, {digest: str(app)})
        return digest

    def start_component(self, name: str, argv: list[str] | None = None) -> processes.Component:
        """Start (or restart) one component; ``argv`` replaces its usual command line."""
        component = processes.start(
            name, argv or self.commands()[name], self.log(name), self.env(name), self.out
        )
        self.components[name] = component
        return component

    def start(self) -> None:
        self.prepare()
        self._start_superlink()
        self.start_component(topology.SERVERAPP_EXECUTOR)
        if self.options.security.node_auth:
            for partition_id in range(self.options.nodes):
                control.register_node(  # known already: a deployment restarted in ``out``
                    self.keys(partition_id).public,
                    self.env(),
                    topology.node_name(partition_id),
                    exist_ok=True,
                )
        for partition_id in range(self.options.nodes):
            self.start_node(partition_id)
        self.wait_for_nodes(self.options.nodes)

    def start_node(self, partition_id: int) -> None:
        """Start (or restart) SuperNode ``partition_id`` and the SuperExec of its ClientApps."""
        self.start_component(topology.node_name(partition_id))
        self.start_component(topology.executor_name(partition_id))

    def kill_node(self, partition_id: int, signum: int = signal.SIGKILL) -> None:
        """Take data holder ``partition_id`` down: its SuperNode, SuperExec and ClientApps."""
        for name in (topology.executor_name(partition_id), topology.node_name(partition_id)):
            component = self.components.pop(name)
            component.signal_group(signum)
            component.process.wait(timeout=30)

    def _start_superlink(self) -> None:
        """Start the SuperLink and wait until it serves; a port of its that something else
        took since it was reserved is replaced and the SuperLink started again."""
        while True:
            component = self.start_component(topology.SUPERLINK)
            taken = self._wait_for_superlink(component)
            if taken is None:
                return
            failure = self._count_port_failure(component, taken, (self.port,))
            old = self.port
            self.port = self._ports.replace(self.port)
            _say_restart(failure, (old,), (self.port,))

    def _wait_for_superlink(self, component: processes.Component) -> int | None:
        """None once the SuperLink serves on its own sockets (it logged that it bound both and
        the private one answers); the port it found in use if it could not bind one."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if not component.alive():
                taken = ports.taken_port(component.output())
                if taken is not None:
                    return taken
                raise DeploymentError(
                    f"{component.name} exited ({component.process.returncode}); "
                    f"log {component.log}:\n{_tail(component.log)}"
                )
            if SUPERLINK_READY in component.output():
                with socket.socket(socket.AF_UNIX) as probe:
                    if probe.connect_ex(str(self.control_socket)) == 0:
                        return None
            if time.monotonic() > deadline:
                raise DeploymentError(f"{component.name} did not listen on {self.private_address}")
            time.sleep(0.2)

    def _count_port_failure(
        self, component: processes.Component, taken: int, own: tuple[int, ...]
    ) -> str:
        """``component`` could not bind ``taken`` (0: a port it did not name; ``own``: its
        ports): fails, naming the port, if that is not its port or PORT_ATTEMPTS starts have
        now failed so; else says so (the caller replaces the port and starts it again)."""
        named = f"{HOST}:{taken}" if taken else "one of " + ", ".join(f"{HOST}:{p}" for p in own)
        if taken not in (0, *own):
            raise DeploymentError(
                f"{component.name} could not listen on {named}, not a port of its own; "
                f"log {component.log}:\n{_tail(component.log)}"
            )
        attempts = self._port_attempts[component.name] = (
            self._port_attempts.get(component.name, 0) + 1
        )
        if attempts >= PORT_ATTEMPTS:
            raise DeploymentError(
                f"{component.name} could not listen on {named}: address already in use "
                f"(another program took the port after fedgs reserved it; {attempts} starts, "
                f"each on fresh ports, failed so); log {component.log}:\n{_tail(component.log)}"
            )
        return (
            f"{component.name} could not listen on {named}: address already in use (another "
            f"program took it); start {attempts + 1} of at most {PORT_ATTEMPTS}"
        )

    def wait_for_nodes(self, count: int, timeout: float = STARTUP_TIMEOUT) -> list[int]:
        """Wait until ``count`` SuperNodes are online at the SuperLink and every SuperNode of
        this deployment has activated; their ids. A SuperNode whose key the SuperLink still
        counts online (a previous session's node stopped without saying so: its heartbeat
        expires within ~90 s) is refused with "Failed to activate" and restarted here."""
        deadline = time.monotonic() + timeout
        while True:
            self._restart_refused_nodes()
            online = control.online_nodes(self.env())
            if len(online) >= count and all(
                ACTIVATED in self.components[name].output() for name in self._node_names()
            ):
                return online
            if time.monotonic() > deadline:
                raise DeploymentError(f"only {len(online)} of {count} SuperNodes came online")
            time.sleep(0.5)

    def _node_names(self) -> list[str]:
        return list(self._node_names_by_id())

    def _node_names_by_id(self) -> dict[str, int]:
        """Started SuperNodes' names, each with its partition id."""
        return {
            topology.node_name(i): i
            for i in range(self.options.nodes)
            if topology.node_name(i) in self.components
        }

    def _restart_refused_nodes(self) -> None:
        for name, component in list(self.components.items()):
            if component.alive() or self.components.get(name) is not component:
                continue  # running, or replaced meanwhile (a node moved to another port)
            if name in self._node_names() and STALE_NODE in component.output():
                time.sleep(5)  # the stale entry expires on the SuperLink's clock
                self.start_component(name)
                continue
            taken = ports.taken_port(component.output())
            if name in self._node_names() and taken is not None:
                partition_id = self._node_names_by_id()[name]
                old = self.node_ports[partition_id]
                failure = self._count_port_failure(component, taken, (old,))
                self.kill_node(partition_id)  # its SuperExec too: it dials the old port
                self.node_ports[partition_id] = self._ports.replace(old)
                self.start_node(partition_id)
                _say_restart(failure, (old,), (self.node_ports[partition_id],))
                continue
            raise DeploymentError(
                f"{name} exited ({component.process.returncode}); log {component.log}:\n"
                f"{_tail(component.log)}"
            )

    def stop(self) -> list[int]:
        """Stop every process of the deployment; returns pids that needed SIGKILL. The
        SuperNodes go first, while the SuperLink can still mark them offline (a node left
        marked online is refused at its next start until its heartbeat expires)."""
        with deferred_interrupts():  # a Ctrl-C must not interrupt the clean-up
            try:
                nodes = [self.components[name] for name in self._node_names()]
                for node in nodes:
                    node.signal_group(signal.SIGTERM)
                deadline = time.monotonic() + NODE_STOP_GRACE
                while any(node.alive() for node in nodes) and time.monotonic() < deadline:
                    time.sleep(0.1)
                return processes.stop(list(reversed(self.components.values())), self.marker)
            finally:
                self._ports.release_all()  # every process that used them is gone
                self._remove_socket_folder()

    def _remove_socket_folder(self) -> None:
        """A Control socket's temporary folder (a path too long for ``control/``) goes."""
        folder = self.control_socket.parent
        if folder != self.control_dir:
            self.control_socket.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                folder.rmdir()

    # --- runs ---------------------------------------------------------------------------------

    def submit(
        self, run_config: Mapping[str, object], app: Path | None = None, log: Path | None = None
    ) -> subprocess.Popen:
        """Start ``flwr run APP --stream`` with ``run_config`` (output to ``log`` if given, else
        a pipe). The app directory defaults to the deployment's."""
        self._runs += 1
        overrides = self.out / f"run-config-{self._runs}.toml"
        overrides.write_text(tomli_w.dumps(dict(run_config)))
        argv = [
            *command("flwr"),
            "run",
            str(app or self.out / "app"),
            control.CONNECTION,
            "--run-config",
            str(overrides),
            "--stream",
        ]
        output = log.open("ab") if log else subprocess.PIPE
        try:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env=self.env(),
                start_new_session=True,
            )
        finally:
            if log:
                output.close()

    def run(
        self,
        run_config: Mapping[str, object],
        app: Path | None = None,
        stream: TextIO | None = None,
    ) -> RunResult:
        """Run the app to its end, copying its streamed log to ``stream``."""
        flwr_run = self.submit(run_config, app)
        assert flwr_run.stdout is not None
        head = ""  # the start of the output, where `flwr run` names the run
        try:
            with self.log("flwr-run").open("ab") as record:
                while chunk := flwr_run.stdout.read1(4096):
                    record.write(chunk)
                    if len(head) < 4096:
                        head += chunk.decode(errors="replace")
                    if stream is not None:
                        stream.write(chunk.decode(errors="replace"))
                        stream.flush()
            flwr_run.wait()
        finally:
            if flwr_run.poll() is None:
                os.killpg(flwr_run.pid, signal.SIGTERM)
                flwr_run.wait(timeout=30)
        return self.outcome(flwr_run, head)

    def outcome(self, flwr_run: subprocess.Popen, output: str) -> RunResult:
        """How the run of a finished ``flwr run`` ended, given (the start of) its output."""
        started = STARTED.search(output)
        if flwr_run.returncode != 0 or started is None:
            return RunResult(None, "not started", f"`flwr run` exited {flwr_run.returncode}")
        run_id = int(started.group(1))
        return RunResult(run_id, *control.run_status(run_id, self.env()))


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """SIGINT and SIGTERM wait for the block's end, then act as they would have (the first of
    them: a KeyboardInterrupt where Ctrl-C raises one). Ignored during the clean-up, a Ctrl-C
    that came as a finished run's deployment stopped was lost and the launcher exited 0."""
    pending: list[int] = []
    signums = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.signal(signum, lambda n, _: pending.append(n)) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if pending:
        signal.raise_signal(pending[0])


def _control_socket(folder: Path, marker: str) -> Path:
    """Where the SuperLink's Control socket goes: ``folder/superlink.sock`` if that path fits a
    Unix socket's, else a folder named after the deployment's random ``marker`` in the
    temporary directory (made 0700 by ``prepare``; the SuperLink refuses one not its user's
    alone)."""
    path = folder / "superlink.sock"
    if len(os.fsencode(path)) <= MAX_PATH:
        return path
    return Path(tempfile.gettempdir()) / f"fedgs-control-{marker}" / "superlink.sock"


def _write_read_only(path: Path, hashes: Mapping[str, str]) -> None:
    """Add ``hashes`` to an allowlist and leave it read-only (0400): a task's code that writes
    to it gets EACCES, though a process of the same user could chmod it first."""
    if path.exists():
        path.chmod(PRIVATE_FILE)
    write_allowlist(path, hashes)
    path.chmod(READ_ONLY)


def _say_restart(failure: str, before: tuple[int, ...], after: tuple[int, ...]) -> None:
    pairs = zip(before, after, strict=True)
    moved = ", ".join(f"{old} -> {new}" for old, new in pairs if old != new)
    print(f"fedgs deploy: {failure}, on port(s) {moved}", file=sys.stderr, flush=True)


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def run_local(
    out: Path, options: LocalOptions, run_config: Mapping[str, object], stream: TextIO = sys.stdout
) -> RunResult:
    """Start the deployment, run the app once, stop everything."""
    with LocalDeployment(out, options) as deployment:
        print(
            f"fedgs deploy: SuperLink on {deployment.address} "
            f"({'TLS' if options.security.tls else 'no TLS'}, "
            f"{'node authentication' if options.security.node_auth else 'any node may join'}), "
            f"{options.nodes} SuperNodes online; logs in {deployment.out / 'logs'}",
            file=stream,
            flush=True,
        )
        result = deployment.run(run_config, stream=stream)
        print(f"fedgs deploy: run {result.run_id} {result.status} {result.details}", file=stream)
        return result
