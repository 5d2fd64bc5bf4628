"""`fedgs deploy node`: a data holder's machine set up without anything of the operator's.

A data holder holds its node's key pair (the private key 0600, never sent), its node's SuperExec
secret, its allowlist (fedgs' app hash) and the operator's ca.crt, which it receives; never the CA
key, the server key or the SuperLink's secret (issue 46). The end-to-end test joins a node set up
with this command alone (plus the operator's ca.crt) to a real SuperLink on 127.0.0.1: the
operator registers its public key over the Control socket, the node starts from the command lines
the command printed, and answers a run.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_support import SMALL, client_ledger, console_script, rows

from fedgs.cli import main
from fedgs.deploy import processes, topology
from fedgs.deploy.app_bundle import fab_hash, read_allowlist, write_app
from fedgs.deploy.certs import ensure_secret, ensure_tls, fingerprint
from fedgs.deploy.launcher import LocalDeployment, LocalOptions, free_port

NAME = "hospital-a"
NOBODY = 65534
ENV_ASSIGNMENT = re.compile(r"[A-Z_][A-Z0-9_]*=")


@pytest.fixture(scope="module")
def operator(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `fedgs deploy init` gives an operator: a CA with its key, a server certificate and
    key, the SuperLink's secret. The data holder receives certificates/ca.crt only."""
    folder = tmp_path_factory.mktemp("operator")
    ensure_tls(folder / "certificates", folder / "ca" / "ca.key")
    ensure_secret(folder / "secrets" / "superlink.secret")
    return folder


@pytest.fixture(scope="module")
def app_hash() -> str:
    """What `fedgs deploy app-hash` prints."""
    with tempfile.TemporaryDirectory() as folder:
        return fab_hash(write_app(Path(folder) / "app"))


def _node(*args: object) -> tuple[int, str, str]:
    """`fedgs deploy node ARGS` in this process: exit status, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["deploy", "node", *map(str, args)])
    return code, out.getvalue(), err.getvalue()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _printed_commands(output: str) -> dict[str, tuple[dict[str, str], list[str]]]:
    """The command lines the output tells the data holder to run, by module: each its
    environment and its argv, as a shell would read them."""
    commands = {}
    for line in output.replace("\\\n", " ").splitlines():
        found = re.search(r" -m (fedgs\.deploy\.super(node|exec)) ", line)
        if found is None:
            continue
        tokens = shlex.split(line)
        env = {}
        while ENV_ASSIGNMENT.match(tokens[0]):
            key, _, value = tokens.pop(0).partition("=")
            env[key] = value
        commands[found.group(1)] = (env, tokens)
    return commands


def _option(argv: list[str], flag: str) -> str:
    for n, token in enumerate(argv):
        if token == flag:
            return argv[n + 1]
        if token.startswith(flag + "="):
            return token.split("=", 1)[1]
    raise AssertionError(f"{flag} not in {argv}")


def test_the_folder_holds_the_data_holders_files_and_nothing_of_the_operators(
    tmp_path: Path, operator: Path, app_hash: str
) -> None:
    out = tmp_path / "mynode"
    code, printed, err = _node("--out", out, "--name", NAME, "--ca-cert",
                               operator / "certificates" / "ca.crt")  # fmt: skip
    assert code == 0, err
    files = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert files == {
        f"keys/{NAME}.key",
        f"keys/{NAME}.pub",
        f"nodes/{NAME}/superexec.secret",
        f"nodes/{NAME}/allowed-fabs.txt",
        "ca.crt",
    }
    assert (out / "nodes" / NAME / "state").is_dir()
    # by name: no CA key, server certificate or key, SuperLink secret
    for forbidden in ("ca.key", "server.key", "server.pem", "superlink.secret"):
        assert not list(out.rglob(forbidden)), forbidden
    # by content: the node's own key is the one private key; none of the operator's secrets
    with_keys = [p for p in out.rglob("*") if p.is_file() and b"PRIVATE KEY" in p.read_bytes()]
    assert with_keys == [out / "keys" / f"{NAME}.key"]
    operator_secrets = [
        operator / "ca" / "ca.key",
        operator / "certificates" / "server.key",
        operator / "secrets" / "superlink.secret",
    ]
    for path in out.rglob("*"):
        if path.is_file():
            assert all(path.read_bytes() != secret.read_bytes() for secret in operator_secrets)
    assert (out / "ca.crt").read_bytes() == (operator / "certificates" / "ca.crt").read_bytes()
    assert "no CA key, no server key, no SuperLink secret" in printed

    # modes: private folders 0700, private files 0600, the allowlist read-only
    node_dir = out / "nodes" / NAME
    for folder in (out, out / "keys", out / "nodes", node_dir, node_dir / "state"):
        assert _mode(folder) == 0o700, folder
    assert _mode(out / "keys" / f"{NAME}.key") == 0o600
    assert _mode(out / "nodes" / NAME / "superexec.secret") == 0o600
    assert _mode(out / "nodes" / NAME / "allowed-fabs.txt") == 0o400
    assert len((out / "nodes" / NAME / "superexec.secret").read_bytes()) == 32

    # the allowlist: fedgs' app hash, and a comment saying what it is
    allowlist = out / "nodes" / NAME / "allowed-fabs.txt"
    assert read_allowlist(allowlist) == {app_hash}
    assert any(
        line.startswith("#") and "ClientApps this node runs" in line
        for line in allowlist.read_text().splitlines()
    )
    assert f"{app_hash}  # fedgs " in allowlist.read_text()
    assert fingerprint(out / "keys" / f"{NAME}.pub") in printed


def test_a_second_run_keeps_the_key_the_secret_and_the_allowlist(
    tmp_path: Path, operator: Path
) -> None:
    out = tmp_path / "mynode"
    assert _node("--out", out, "--name", NAME)[0] == 0
    key, pub = out / "keys" / f"{NAME}.key", out / "keys" / f"{NAME}.pub"
    secret = out / "nodes" / NAME / "superexec.secret"
    allowlist = out / "nodes" / NAME / "allowed-fabs.txt"
    before = {path: path.read_bytes() for path in (key, pub, secret, allowlist)}
    code, printed, _ = _node("--out", out, "--name", NAME)
    assert code == 0 and "(0600, kept)" in printed
    assert {path: path.read_bytes() for path in before} == before
    assert _mode(allowlist) == 0o400

    pub.unlink()  # a lost public key is derived again from the kept private key
    key.chmod(0o644)  # and a key others could read is made the owner's alone again
    assert _node("--out", out, "--name", NAME)[0] == 0
    assert pub.read_bytes() == before[pub] and key.read_bytes() == before[key]
    assert _mode(key) == 0o600


def test_the_printed_commands_start_the_node_from_its_own_files(tmp_path: Path) -> None:
    out = tmp_path / "mynode"
    code, printed, err = _node("--out", out, "--name", NAME, "--partition-id", 7,
                               "--superlink", "superlink.example.org:9093")  # fmt: skip
    assert code == 0, err
    assert "MISSING" in printed and "--ca-cert" in printed  # ca.crt not given yet
    commands = _printed_commands(printed)
    env, supernode = commands["fedgs.deploy.supernode"]
    assert supernode[1:3] == ["-m", "fedgs.deploy.supernode"]  # fedgs' wrapper, not Flower's
    assert _option(supernode, "--superlink") == "superlink.example.org:9093"
    assert _option(supernode, "--root-certificates") == str(out / "ca.crt")
    assert _option(supernode, "--auth-supernode-private-key") == str(out / "keys" / f"{NAME}.key")
    assert _option(supernode, "--isolation") == "process"
    assert _option(supernode, "--host") == "127.0.0.1" and _option(supernode, "--port") == "9094"
    secret = str(out / "nodes" / NAME / "superexec.secret")
    assert _option(supernode, "--superexec-auth-secret-file") == secret
    from flwr.common.config import parse_config_args

    node_config = parse_config_args([_option(supernode, "--node-config")])
    assert node_config["partition-id"] == 7
    assert node_config["state-dir"] == str(out / "nodes" / NAME / "state")
    assert env["FLWR_TELEMETRY_ENABLED"] == "0"

    env, superexec = commands["fedgs.deploy.superexec"]
    assert "--preload=fedgs.client.app" in superexec
    assert _option(superexec, "--allowed-fabs") == str(out / "nodes" / NAME / "allowed-fabs.txt")
    assert _option(superexec, "--runtime-api-address") == "127.0.0.1:9094"
    assert _option(superexec, "--superexec-auth-secret-file") == secret
    assert "--insecure" in superexec  # the node's loopback link, no TLS there
    assert env["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] == "0.05"
    # the operator's side of it: register the .pub over its Control API
    assert "fedgs deploy register --superlink unix:CONTROL-SOCKET" in printed
    assert "flwr supernode register /app/key.pub fedgs" in printed  # the compose way


def test_state_dir_and_policy_go_to_the_node_config(tmp_path: Path) -> None:
    state = tmp_path / "srv" / "state"
    policy = "policy-epsilon-budget=5"
    code, printed, err = _node(
        "--out", tmp_path / "mynode", "--state-dir", state, "--policy", policy, "--device", "cpu"
    )
    assert code == 0, err
    from flwr.common.config import parse_config_args

    _, supernode = _printed_commands(printed)["fedgs.deploy.supernode"]
    config = parse_config_args([_option(supernode, "--node-config")])
    assert config["state-dir"] == str(state) and config["device"] == "cpu"
    assert config["policy-epsilon-budget"] == 5.0
    assert state.is_dir() and _mode(state) == 0o700
    assert "data-dir" not in config  # none given: the embedded dataset only
    assert _node("--out", tmp_path / "other", "--policy", "epsilon=5")[0] == 2


def test_the_data_folder_goes_to_the_node_config_and_must_exist(tmp_path: Path) -> None:
    from flwr.common.config import parse_config_args

    data = tmp_path / "srv" / "data"
    code, _, err = _node("--out", tmp_path / "mynode", "--data-dir", data)
    assert code == 2 and f"--data-dir {data}: no such folder" in err
    assert not (tmp_path / "mynode").exists()
    data.mkdir(parents=True)
    code, printed, err = _node("--out", tmp_path / "mynode", "--data-dir", data)
    assert code == 0, err
    _, supernode = _printed_commands(printed)["fedgs.deploy.supernode"]
    assert parse_config_args([_option(supernode, "--node-config")])["data-dir"] == str(data)
    quoted = tmp_path / "it's"
    quoted.mkdir()
    code, _, err = _node("--out", tmp_path / "other", "--data-dir", quoted)
    assert code == 2 and "no quotes" in err


def test_bad_input_is_refused_before_anything_is_written(tmp_path: Path, operator: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for out in (a_file, a_file / "mynode"):
        code, _, err = _node("--out", out)
        assert code == 2 and f"{a_file} exists and is not a folder" in err
    out = tmp_path / "mynode"
    code, _, err = _node("--out", out, "--ca-cert", operator / "ca" / "ca.key")
    assert code == 2 and "holds a private key" in err and "never a key" in err
    code, _, err = _node("--out", out, "--ca-cert", operator / "certificates" / "server.pem")
    assert code == 2 and "not a CA's" in err
    code, _, err = _node("--out", out, "--ca-cert", tmp_path / "missing.crt")
    assert code == 2 and "missing.crt" in err
    code, _, err = _node("--out", out, "--name", "../elsewhere")
    assert code == 2 and "--name" in err
    code, _, err = _node("--out", out, "--partition-id", -1)
    assert code == 2 and "--partition-id" in err
    assert not out.exists()


def _in_child(uid: int | None, *args: object) -> tuple[int, str]:
    """`fedgs deploy node ARGS` in a forked child (as ``uid`` if given): status and stderr."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 70
        try:
            os.close(read)
            os.dup2(write, 2)
            if uid is not None:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
            sys.stderr = os.fdopen(2, "w", closefd=False)
            code = main(["deploy", "node", *map(str, args)])
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        err = pipe.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), err


def test_a_folder_it_cannot_write_in_is_a_clear_error() -> None:
    import fedgs.deploy.data_holder  # noqa: F401  (imported before a child drops its rights)
    import fedgs.privacy.policy  # noqa: F401

    folder = Path(tempfile.mkdtemp(prefix="fedgs-node-"))
    try:
        folder.chmod(0o755)  # the owner's: another user may enter, not write
        uid = NOBODY if os.geteuid() == 0 else None  # root writes anywhere: be someone else
        if uid is None:
            folder.chmod(0o555)
        code, err = _in_child(uid, "--out", folder / "mynode")
        assert code == 1, err
        assert f"fedgs deploy node: cannot write {folder / 'mynode'}: Permission denied" in err
        assert not (folder / "mynode").exists()
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder)


def test_help_says_who_runs_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fedgs.cli", "deploy", "node", "--help"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    text = " ".join(done.stdout.split())
    assert "Run by a data holder" in text and "the operator runs `init`" in text
    assert "no CA key, server key or SuperLink secret" in text


@pytest.fixture
def superlink(tmp_path: Path) -> Iterator[LocalDeployment]:
    """The operator's side of `fedgs deploy local`, without its own nodes: a SuperLink (TLS,
    node authentication, Control on its Unix socket) and the ServerApp's SuperExec."""
    deployment = LocalDeployment(tmp_path / "operator", LocalOptions(nodes=1, doorbell=False))
    try:
        deployment.prepare()
        deployment._start_superlink()
        deployment.start_component(topology.SERVERAPP_EXECUTOR)
        yield deployment
    finally:
        deployment.stop()
    assert processes.marked(deployment.marker) == []


@pytest.mark.slow
def test_a_node_set_up_with_this_command_joins_and_answers_a_run(
    superlink: LocalDeployment, tmp_path: Path
) -> None:
    holder = tmp_path / "holder"
    code, printed, err = _node(
        "--out", holder, "--name", NAME, "--partition-id", 0,
        "--ca-cert", superlink.tls.ca_cert, "--superlink", superlink.address,
        "--port", free_port(),
    )  # fmt: skip
    assert code == 0, err
    commands = _printed_commands(printed)
    for _, argv in commands.values():  # nothing of the operator's but the copied ca.crt
        assert not any(str(superlink.out) in token for token in argv), argv

    # the operator registers the public key it received, over its Control socket
    public_key = tmp_path / "received" / f"{NAME}.pub"
    public_key.parent.mkdir()
    shutil.copyfile(holder / "keys" / f"{NAME}.pub", public_key)
    registered = subprocess.run(
        [console_script("fedgs"), "deploy", "register", "--superlink", superlink.private_address,
         "--root-certificates", str(superlink.tls.ca_cert), str(public_key)],
        capture_output=True, text=True, env=superlink.env(), timeout=120,
    )  # fmt: skip
    assert registered.returncode == 0, registered.stdout + registered.stderr
    assert superlink.private_address.startswith("unix:")
    assert re.search(rf"\({re.escape(fingerprint(public_key))}\): node \d+", registered.stdout)

    # the data holder starts its SuperNode and SuperExec as printed, in an environment that
    # names nothing of the operator's (the marker only lets the test stop them)
    base = {key: value for key, value in os.environ.items() if not key.startswith("FLWR_")}
    for name, module in (
        (topology.node_name(0), "fedgs.deploy.supernode"),
        (topology.executor_name(0), "fedgs.deploy.superexec"),
    ):
        env, argv = commands[module]
        env = base | env | {processes.MARKER: superlink.marker, "OMP_NUM_THREADS": "1"}
        env["FLWR_HOME"] = str(tmp_path / "holder-flwr-home")
        superlink.components[name] = processes.start(name, argv, superlink.log(name), env, holder)
    superlink.wait_for_nodes(1)

    run_dir = tmp_path / "run"
    config = {"num-clients": 1, "min-nodes": 1, "steps": 2, "reply-timeout": 60}
    result = superlink.run(SMALL | config | {"run-dir": str(run_dir)})
    assert result.ok, f"{result}\n{superlink.log('clientapp-0').read_text()[-3000:]}"
    assert [(r["step"], r["answered"]) for r in rows(run_dir)] == [("1", "1"), ("2", "1")]
    # the node kept its critic and ledger where its own node config says
    assert sum(client_ledger(holder / "nodes" / NAME / "state").values()) == 2
    privacy = json.loads((run_dir / "privacy.json").read_text())
    assert privacy["queries"]["total"] == 2
