"""An outsider against a real deployment (TLS, node authentication, one data holder, 127.0.0.1).

The outsider holds what every data holder is given, the public ca.crt, and reaches the
SuperLink's public address (the port SuperNodes dial). With Flower 1.41 alone that was enough to
register a node key of their own and to run their own app on the data holder's SuperNode. Here
the public port serves the Fleet API only, the Control plane is a Unix socket only the
operator's user reaches (another local user, simulated as uid nobody, reaches neither), the
operator's SuperExec runs only the ServerApps the operator allowed, and the data holder's node
runs only the apps on its allowlist, even when the SuperLink's own operator submits another one.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from deploy_support import SMALL, console_script, rows, wait_for

from fedgs.deploy import control
from fedgs.deploy.app_bundle import Components, write_app
from fedgs.deploy.certs import generate_node_keys
from fedgs.deploy.launcher import STARTED, LocalDeployment, LocalOptions
from fedgs.deploy.superexec import ERROR_REFUSED

pytestmark = pytest.mark.slow
NOBODY = 65534  # the uid and gid another local user is simulated with

OUTSIDER_APP = Path(__file__).with_name("outsider_app.py")
COMPONENTS = Components("outsider_app:server", "outsider_app:client")


@pytest.fixture(scope="module")
def deployment() -> Iterator[LocalDeployment]:
    """In a folder every local user may enter (0755, as a home or project folder often is):
    only what fedgs makes private keeps another user out, not pytest's private temp folder."""
    folder = Path(tempfile.mkdtemp(prefix="fedgs-outsider-"))
    folder.chmod(0o755)
    try:
        with LocalDeployment(folder / "deployment", LocalOptions(nodes=1)) as d:
            d.out.chmod(0o755)
            yield d
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _outsider_env(deployment: LocalDeployment, home: Path) -> dict[str, str]:
    """A Flower config of the outsider's own: the public address and the public ca.crt."""
    control.write_flwr_home(home, deployment.address, deployment.tls.ca_cert)
    return deployment.env() | {"FLWR_HOME": str(home)}


def _app(folder: Path) -> Path:
    return write_app(folder, COMPONENTS, modules=[OUTSIDER_APP])


def _stolen(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in run_dir.glob("stolen-*.json")]


def _codes(run_dir: Path) -> list[int | None]:
    """The error code of each reply the outsider's ServerApp got (None: a normal reply)."""
    replies = json.loads((run_dir / "replies.json").read_text())["replies"]
    return [reply["code"] for reply in replies]


def test_outsider_cannot_register_a_node_key(deployment: LocalDeployment, tmp_path: Path) -> None:
    env = _outsider_env(deployment, tmp_path / "flwr-home")
    keys = generate_node_keys(tmp_path, "outsider")
    with pytest.raises(control.ControlError, match="403|only the Fleet API"):
        control.register_node(keys.public, env, "outsider")
    assert len(control.online_nodes(deployment.env())) == 1  # the data holder, nobody else


def test_outsider_cannot_run_an_app(deployment: LocalDeployment, tmp_path: Path) -> None:
    env = _outsider_env(deployment, tmp_path / "flwr-home")
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [console_script("flwr"), "run", str(_app(tmp_path / "app")), control.CONNECTION,
         "--run-config", f"run-dir='{run_dir}'"],
        capture_output=True, text=True, env=env, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    output = done.stdout + done.stderr
    started = STARTED.search(output)
    if started:  # what Flower alone allowed: let it finish, then look at what it saw
        run_id = int(started.group(1))
        wait_for(
            lambda: control.run_status(run_id, deployment.env())[0].startswith("finished"),
            "the outsider's run to finish",
        )
    assert _stolen(run_dir) == [], "the outsider's ClientApp ran on the data holder's node"
    assert started is None, output[-2000:]
    assert "403" in output or "only the Fleet API" in output, output[-2000:]
    assert "refused /v1/control/start-run" in deployment.log("superlink").read_text()


def test_node_runs_only_the_apps_its_holder_allowed(
    deployment: LocalDeployment, tmp_path: Path
) -> None:
    """Even a run the SuperLink's operator submits (through the private Control API) does not
    reach the data holder's data unless the holder listed that app; once listed, it does (so
    the refusal above is the allowlist's doing, not a broken app)."""
    app = _app(tmp_path / "app")
    deployment.allow_server_app(app)  # the operator runs it; the data holder has not listed it
    refused = deployment.run({"run-dir": str(tmp_path / "refused")}, app=app)
    assert refused.ok, refused  # the ServerApp ran and gave up waiting for replies
    assert _stolen(tmp_path / "refused") == []
    assert _codes(tmp_path / "refused") == [ERROR_REFUSED]  # the node said no, and why
    assert "not on this node's allowlist" in deployment.log("clientapp-0").read_text()

    deployment.allow_app(app)  # the data holder adds the app's hash to its allowlist
    allowed = deployment.run({"run-dir": str(tmp_path / "allowed")}, app=app)
    assert allowed.ok, allowed
    (seen,) = _stolen(tmp_path / "allowed")
    assert seen["node-config"]["partition-id"] == "0"


def test_a_refused_app_does_not_silence_the_node(
    deployment: LocalDeployment, tmp_path: Path
) -> None:
    """Flower's SuperNode waits for a reply to each message before it takes the next; a task
    its SuperExec only declined went back to pending and was declined again forever, so after
    one foreign run the node never answered a legitimate one. A refusal is an error reply now,
    and the next run gets every reply. (The foreign app's own run config gives it a hash no
    other test here allowlists.)"""
    foreign = write_app(
        tmp_path / "foreign", COMPONENTS, modules=[OUTSIDER_APP], config={"foreign": "yes"}
    )
    deployment.allow_server_app(foreign)
    refused = deployment.run({"run-dir": str(tmp_path / "foreign-run")}, app=foreign)
    assert refused.ok, refused
    assert _codes(tmp_path / "foreign-run") == [ERROR_REFUSED]
    assert _stolen(tmp_path / "foreign-run") == []

    run_dir = tmp_path / "legitimate"
    config = {"num-clients": 1, "min-nodes": 1, "steps": 2, "reply-timeout": 60}
    legitimate = deployment.run(SMALL | config | {"run-dir": str(run_dir)})
    assert legitimate.ok, legitimate
    assert [(r["step"], r["answered"]) for r in rows(run_dir)] == [("1", "1"), ("2", "1")]


def test_register_succeeds_on_keys_the_superlink_knows(
    deployment: LocalDeployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What compose's `register` service runs on every `up`, with a relative CA path."""
    monkeypatch.chdir(deployment.out)
    done = subprocess.run(
        [console_script("fedgs"), "deploy", "register", "--superlink", deployment.private_address,
         "--root-certificates", str(deployment.tls.ca_cert.relative_to(deployment.out)),
         str(deployment.keys(0).public)],
        capture_output=True, text=True, env=deployment.env(), timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "registered before" in done.stdout


def test_a_serverapp_the_operator_did_not_allow_never_runs(
    deployment: LocalDeployment, tmp_path: Path
) -> None:
    """Issue 46: a foreign run's ServerApp ran on the operator's SuperExec, as the operator's
    user in the deployment folder, and rewrote every node's allowlist. The operator's SuperExec
    runs only the ServerApps on its own allowlist: a run of another app ends failed, saying
    why, before any of its code is loaded (no file of its run directory, no allowlist
    touched, no message to a node)."""
    lists = [deployment.allowlist(0), deployment.server_allowlist]
    before = [path.read_text() for path in lists]
    foreign = write_app(
        tmp_path / "foreign",
        COMPONENTS,
        modules=[OUTSIDER_APP],
        config={"tamper": ",".join(map(str, lists))},
    )
    clientapp_log = deployment.log("clientapp-0").read_text()
    result = deployment.run({"run-dir": str(tmp_path / "run")}, app=foreign)
    assert result.status == "finished:failed", result
    assert "not on the operator's allowlist" in result.details, result
    assert not (tmp_path / "run").exists()  # its ServerApp never started
    assert [path.read_text() for path in lists] == before
    assert "Refused ServerApp task" in deployment.log("serverapp").read_text()
    assert deployment.log("clientapp-0").read_text() == clientapp_log  # no task reached it


def _listening_tcp_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (its sockets' inodes in /proc/net/tcp*)."""
    fd_dir = Path(f"/proc/{pid}/fd")
    inodes = set()
    for fd in fd_dir.iterdir():
        target = os.readlink(fd) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.add(int(fields[1].rsplit(":", 1)[1], 16))
    return found


def _status(port: int, path: str) -> str:
    """The status line a POST of an empty protobuf to ``path`` gets on 127.0.0.1:``port``
    (over TLS, the server unverified: an attacker needs no certificate for that)."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    request = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/protobuf\r\n"
        "Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), 20) as raw:
        with context.wrap_socket(raw) as tls:
            tls.sendall(request.encode())
            return tls.recv(256).decode(errors="replace").split("\r\n")[0]


def _connect_unix(path: Path) -> str:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(20)
        try:
            sock.connect(str(path))
        except OSError as error:
            return type(error).__name__
    return "connected"


def _as_nobody(probe: Callable[[], dict[str, str]]) -> dict[str, str]:
    """``probe()``'s answer, computed in a child process running as uid and gid nobody."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(write, json.dumps(probe()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        answer = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and answer, "the probe as nobody failed"
    return json.loads(answer)


@pytest.mark.skipif(os.geteuid() != 0, reason="simulating another local user needs root (setuid)")
def test_another_local_user_reaches_no_control_plane(deployment: LocalDeployment) -> None:
    """Issue 46: as uid nobody, the SuperLink's "private" TCP port (shown in `ps`) answered the
    Control API with 200 (list nodes; register a key; run an app). Now the SuperLink listens on
    one TCP port, the public one, which refuses the Control API to anyone, and its Control plane
    is a Unix socket (0600 in a 0700 folder, the operator's) that another user cannot connect
    to, while the operator can."""
    ports = _listening_tcp_ports(deployment.components["superlink"].process.pid)
    assert ports == {deployment.port}, ports
    socket_path = deployment.control_socket
    assert socket_path.is_socket()
    for path, mode in ((socket_path, 0o600), (socket_path.parent, 0o700)):
        info = path.stat()
        assert (info.st_uid, info.st_mode & 0o777) == (os.geteuid(), mode), path

    def probe() -> dict[str, str]:
        answers = {str(p): _status(p, "/v1/control/list-nodes") for p in sorted(ports)}
        return answers | {"unix": _connect_unix(socket_path)}

    seen = _as_nobody(probe)
    assert seen.pop("unix") == "PermissionError", seen
    assert all(" 403 " in line for line in seen.values()), seen
    assert _connect_unix(socket_path) == "connected"  # the operator's user does
    assert len(control.online_nodes(deployment.env())) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="simulating another local user needs root (setuid)")
def test_another_local_user_takes_no_task_and_reads_no_private_file(
    deployment: LocalDeployment,
) -> None:
    """A SuperNode's runtime API listens on a loopback TCP port, which every local user can
    reach: it hands out tasks only to requests signed with the node's SuperExec secret (Flower's
    SuperExec authentication), which that user cannot read; nor can they read a key, a secret,
    an allowlist, a critic or a ledger of the deployment."""
    node = deployment.components["supernode-0"].process.pid
    (runtime_port,) = _listening_tcp_ports(node)
    private = [
        path
        for path in deployment.out.rglob("*")
        if path.is_file()
        and (
            path.suffix in (".key", ".secret", ".txt", ".pt", ".json")
            or path.parent.name in ("state", "keys", "ca")
        )
    ]
    assert any(p.suffix == ".key" for p in private) and any(p.suffix == ".secret" for p in private)

    def probe() -> dict[str, str]:
        answers = {"acquire-task": _plain_status(runtime_port, "/v1/runtime/acquire-task")}
        for path in private:
            try:
                path.read_bytes()
                answers[str(path)] = "read"
            except OSError as error:
                answers[str(path)] = type(error).__name__
        return answers

    seen = _as_nobody(probe)
    status = seen.pop("acquire-task")
    assert status.startswith("HTTP/1.1 ") and not status.startswith("HTTP/1.1 2"), status
    assert "read" not in seen.values(), [path for path, how in seen.items() if how == "read"]


def _plain_status(port: int, path: str) -> str:
    """The status line a POST of an empty protobuf to ``path`` gets on 127.0.0.1:``port``
    without TLS (a SuperNode's runtime API speaks plain HTTP on loopback)."""
    request = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/protobuf\r\n"
        "Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), 20) as raw:
        raw.sendall(request.encode())
        return raw.recv(256).decode(errors="replace").split("\r\n")[0]
