"""docker-compose.yml and `fedgs deploy local` run the same processes with the same flags.

The compose file is checked as data here (tests/test_deploy_compose_up.py runs it): it is the
rendering of fedgs.deploy.topology, every container's command line matches the launcher's once
addresses and file locations are set aside, TLS and node authentication are on, the Control API
is on a network no SuperNode joins, and each data holder mounts only its own key, state, data,
secret and allowlist.
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from fedgs.deploy import compose, topology
from fedgs.deploy.app_bundle import fab_hash, read_allowlist
from fedgs.deploy.launcher import LocalDeployment, LocalOptions

ROOT = Path(__file__).resolve().parents[1]
ENTRYPOINTS = {"flwr/superlink": ["flower-superlink"], "flwr/supernode": ["flower-supernode"]}
ADDRESS = re.compile(r"^[\w.-]+:\d+$")


@pytest.fixture(scope="module")
def document() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _argv(service: dict) -> list[str]:
    """What the container runs: its entrypoint (or the Flower image's) and its command."""
    image = service["image"].split(":")[0]
    return [*service.get("entrypoint", ENTRYPOINTS.get(image, [])), *service["command"]]


PRIVATE_PLANE = {"--private-socket": 1, "--private-host": 1, "--private-port": 1}


def _private_plane(argv: list[str]) -> list[str]:
    """The SuperLink's private-plane flags as one token: a Unix socket locally, a port on the
    `control` network in compose (the one place the two differ)."""
    if not any(flag in argv for flag in PRIVATE_PLANE):
        return argv
    kept, skip = [], 0
    for token in argv:
        if skip:
            skip -= 1
        elif token in PRIVATE_PLANE:
            skip = PRIVATE_PLANE[token]
        else:
            kept.append(token)
    return [*kept[:3], "<private plane>", *kept[3:]]


def _skeleton(argv: list[str]) -> list[str]:
    """The command line with addresses, ports and folders set aside: what must agree."""
    if argv[:3] == ["python", "-m", "fedgs.deploy.supernode"]:  # runs it, patient
        argv = ["python", "-m", topology.PROMPT_SUPERNODE, *argv[3:]]
    argv = _private_plane(argv)
    out = ["python" if argv[0] in ("python", sys.executable) else argv[0]]
    for previous, token in zip(argv, argv[1:], strict=False):
        if previous in ("--host", "--port") or ADDRESS.match(token) or token.startswith("unix:"):
            token = "<address>"  # unix:PATH: the local SuperLink's Control socket
        elif previous == "--node-config":
            token = re.sub(r'state-dir="[^"]*"', 'state-dir="<state>"', token)
        elif "/" in token:
            token = Path(token).name
        out.append(token)
    return out


def test_committed_file_is_the_rendering_of_the_topology() -> None:
    assert (ROOT / "docker-compose.yml").read_text() == compose.dump(2), (
        "docker-compose.yml is stale: run `fedgs deploy compose --nodes 2 -o docker-compose.yml`"
    )


# what compose shares with `fedgs deploy local`: not the launcher's doorbells (they need one host
# and network namespace) nor its in-memory SuperLink state (compose's SuperLink restarts alone)
LIKE_COMPOSE = LocalOptions(nodes=2, in_memory_state=False, doorbell=False)


def test_every_container_runs_what_the_launcher_runs(document: dict, tmp_path: Path) -> None:
    launcher = LocalDeployment(tmp_path, LIKE_COMPOSE).commands()
    services = document["services"]
    assert set(launcher) <= set(services)
    assert set(services) - set(launcher) == {"register"}  # compose's stand-in for the launcher
    for name, argv in launcher.items():
        assert _skeleton(_argv(services[name])) == _skeleton(argv), name


def test_clientapp_containers_poll_for_tasks_as_the_local_launcher_does(
    document: dict, tmp_path: Path
) -> None:
    launcher = LocalDeployment(tmp_path, LIKE_COMPOSE)
    for i in range(2):
        name = topology.executor_name(i)
        environment = document["services"][name]["environment"]
        for key, value in topology.WARM_EXECUTOR_ENV.items():
            assert environment[key] == launcher.env(name)[key] == value


def test_tls_and_node_authentication_are_on(document: dict) -> None:
    services = document["services"]
    superlink = services["superlink"]["command"]
    assert "--insecure" not in superlink and "--enable-supernode-auth" in superlink
    for flag in ("--ssl-ca-certfile", "--ssl-certfile", "--ssl-keyfile"):
        assert flag in superlink
    assert "--disable-runtime-dependency-installation" in superlink
    assert "--root-certificates" in services["serverapp"]["command"]
    for i in range(2):
        node = services[topology.node_name(i)]["command"]
        assert "--insecure" not in node
        assert node[node.index("--auth-supernode-private-key") + 1] == (
            f"/app/keys/supernode-{i}.key"
        )
    registered = services["register"]["command"]
    assert [k for k in registered if k.endswith(".pub")] == [
        "/app/keys/supernode-0.pub",
        "/app/keys/supernode-1.pub",
    ]


def test_each_data_holder_mounts_only_its_own_key_state_and_data(document: dict) -> None:
    services, mounted = document["services"], []
    for i in range(2):
        name = topology.node_name(i)
        node, executor = services[name], services[topology.executor_name(i)]
        own = f"./deploy/nodes/{name}:/app/node:ro"  # its secret and its allowlist
        assert node["volumes"] == [
            "./deploy/certificates/ca.crt:/app/certificates/ca.crt:ro",
            f"./deploy/keys/{name}.key:/app/keys/{name}.key:ro",
            own,
        ]
        assert executor["volumes"] == [
            f"{name}-state:/app/state",
            f"./deploy/data/{name}:/app/data:ro",
            own,
        ]
        assert node["depends_on"]["register"]["condition"] == "service_completed_successfully"
        assert executor["depends_on"][name]["condition"] == "service_healthy"
        private = compose.private_alias(i)
        assert executor["networks"] == [f"{name}-net"]
        assert node["networks"][f"{name}-net"] == {"aliases": [private]}
        assert document["networks"][f"{name}-net"] == {"internal": True}
        # the node's ClientApp API listens on its private network's address, not 0.0.0.0
        assert node["command"][node["command"].index("--host") + 1] == private
        assert executor["command"][executor["command"].index("--runtime-api-address") + 1] == (
            f"{private}:{compose.NODE_PORT}"
        )
        assert "--allowed-fabs=/app/node/allowed-fabs.txt" in executor["command"]
        mounted += executor["volumes"][:2]
    assert len(set(mounted)) == len(mounted)
    assert {"superlink-state", "runs", "supernode-0-state", "supernode-1-state"} == set(
        document["volumes"]
    )


def test_only_the_superlink_publishes_ports_on_loopback(document: dict) -> None:
    services = document["services"]
    published = {name: s["ports"] for name, s in services.items() if "ports" in s}
    command = services["superlink"]["command"]
    port, private = (command[command.index(flag) + 1] for flag in ("--port", "--private-port"))
    assert published == {
        "superlink": [f"127.0.0.1:{port}:{port}", f"127.0.0.1:{private}:{private}"]
    }


def test_control_api_is_on_a_network_no_supernode_joins(document: dict) -> None:
    services = document["services"]
    command = services["superlink"]["command"]
    private_host = command[command.index("--private-host") + 1]
    assert services["superlink"]["networks"]["control"] == {"aliases": [private_host]}
    on_control = {name for name, s in services.items() if "control" in s["networks"]}
    assert on_control == {"superlink", "serverapp", "register"}
    serverapp = services["serverapp"]["command"]
    assert serverapp[serverapp.index("--runtime-api-address") + 1] == (
        f"{private_host}:{compose.PRIVATE_PORT}"
    )
    assert services["superlink"]["healthcheck"]["test"][0] == "CMD"
    for name in ("serverapp", "register"):
        assert services[name]["depends_on"]["superlink"]["condition"] == "service_healthy"


def test_the_serverapp_container_runs_only_the_operators_apps(document: dict) -> None:
    """Issue 46: any app submitted to the Control API ran its ServerApp on the operator's
    SuperExec. It runs only the apps on deploy/control/allowed-fabs.txt, as the local
    launcher's does."""
    serverapp = document["services"]["serverapp"]
    assert serverapp["entrypoint"] == ["python", "-m", "fedgs.deploy.superexec"]
    assert "--allowed-fabs=/app/control/allowed-fabs.txt" in serverapp["command"]
    assert "./deploy/control:/app/control:ro" in serverapp["volumes"]


def test_no_top_level_name_for_compose_1_29(document: dict) -> None:
    assert set(document) == {"services", "networks", "volumes"}


def test_more_nodes_are_one_command_away() -> None:
    services = compose.render(3)["services"]
    assert {"supernode-2", "clientapp-2"} <= set(services)
    assert 'num-partitions=3 state-dir="/app/state"' in " ".join(services["supernode-2"]["command"])
    assert "/app/keys/supernode-2.pub" in services["register"]["command"]


def test_the_image_installs_every_source_folder_of_the_package() -> None:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    folders = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"
    ].values()
    for folder in folders:
        assert f"COPY --chown=app:app {folder} {folder}" in dockerfile
        assert f"!{folder}/" in (ROOT / ".dockerignore").read_text()
    assert "flwr/superexec:${FLWR_VERSION}" in dockerfile
    assert f"ARG FLWR_VERSION={topology.FLOWER_VERSION}" in dockerfile


def test_init_writes_what_compose_mounts(tmp_path: Path) -> None:
    written = compose.prepare_host(tmp_path, 2)
    assert [p.name for p in written] == ["ca.crt", "supernode-0.pub", "supernode-1.pub"]
    for mount in (
        "certificates/server.key",
        "keys/supernode-1.key",
        "data/supernode-1",
        "secrets/superlink.secret",
        "nodes/supernode-1/superexec.secret",
        "nodes/supernode-1/allowed-fabs.txt",
        "control/allowed-fabs.txt",
        "ca/ca.key",
    ):
        assert (tmp_path / mount).exists(), mount
    assert not (tmp_path / "certificates" / "ca.key").exists()  # the mounted folder lacks it
    allowlist = tmp_path / "nodes" / "supernode-0" / "allowed-fabs.txt"
    assert read_allowlist(allowlist) == {fab_hash(tmp_path / "app")}
    assert read_allowlist(tmp_path / "control" / "allowed-fabs.txt") == read_allowlist(allowlist)
    allowlist.write_text(allowlist.read_text() + "ab" * 32 + "  # the holder's own entry\n")
    kept = {
        path: (tmp_path / path).read_bytes()
        for path in ("keys/supernode-0.key", "certificates/ca.crt", "secrets/superlink.secret")
    }
    compose.prepare_host(tmp_path, 3)  # again, one node more: what exists is kept
    assert {path: (tmp_path / path).read_bytes() for path in kept} == kept
    assert read_allowlist(allowlist) == {fab_hash(tmp_path / "app"), "ab" * 32}
    config = tomllib.loads((tmp_path / "flwr-home" / "config.toml").read_text())
    assert config["superlink"]["fedgs"]["address"] == f"127.0.0.1:{compose.PRIVATE_PORT}"
    app = tomllib.loads((tmp_path / "app" / "pyproject.toml").read_text())
    assert app["tool"]["flwr"]["app"]["components"]["clientapp"] == "fedgs.client.app:app"
