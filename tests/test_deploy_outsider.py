"""An outsider against a real deployment (TLS, node authentication, one data holder, 127.0.0.1).

The outsider holds what every data holder is given, the public ca.crt, and reaches the
SuperLink's public address (the port SuperNodes dial). With Flower 1.41 alone that was enough to
register a node key of their own and to run their own app on the data holder's SuperNode. Here
the public port serves the Fleet API only, and the data holder's node runs only the apps on its
allowlist, even when the SuperLink's own operator submits another one.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_support import SMALL, rows, wait_for

from fedgs.deploy import control
from fedgs.deploy.app_bundle import Components, write_app
from fedgs.deploy.certs import generate_node_keys
from fedgs.deploy.launcher import STARTED, LocalDeployment, LocalOptions
from fedgs.deploy.superexec import ERROR_REFUSED

pytestmark = pytest.mark.slow

OUTSIDER_APP = Path(__file__).with_name("outsider_app.py")
COMPONENTS = Components("outsider_app:server", "outsider_app:client")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalDeployment]:
    with LocalDeployment(tmp_path_factory.mktemp("outsider"), LocalOptions(nodes=1)) as d:
        yield d


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
        ["flwr", "run", str(_app(tmp_path / "app")), control.CONNECTION, "--run-config",
         f"run-dir='{run_dir}'"],
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
        ["fedgs", "deploy", "register", "--superlink", deployment.private_address,
         "--root-certificates", str(deployment.tls.ca_cert.relative_to(deployment.out)),
         str(deployment.keys(0).public)],
        capture_output=True, text=True, env=deployment.env(), timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "registered before" in done.stdout
