"""docker-compose.yml and `fedgs deploy local` run the same processes with the same flags.

The compose file is checked as data here (tests/test_deploy_compose_up.py runs it): it is the
rendering of fedgs.deploy.topology, every container's command line matches the launcher's once
addresses and file locations are set aside, TLS and node authentication are on, the Control API
is a Unix socket in a volume that only the operator's containers mount (no port, no network
reaches it; issue 46), health checks mean "ready" rather than "a port is open", and each data
holder mounts only its own key, state, data, secret and allowlist.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from flwr.common.config import parse_config_args

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


# a container's readiness markers, which its health check tests; the launcher has its own waits
READINESS = {"--activated-file": 1, "--ready-file": 1}


def _without(argv: list[str], flags: dict[str, int]) -> list[str]:
    kept, skip = [], 0
    for token in argv:
        if skip:
            skip -= 1
        elif token in flags:
            skip = flags[token]
        else:
            kept.append(token)
    return kept


def _skeleton(argv: list[str]) -> list[str]:
    """The command line with addresses, ports and folders set aside: what must agree."""
    if argv[:3] == ["python", "-m", "fedgs.deploy.supernode"]:  # runs it, patient
        argv = ["python", "-m", topology.PROMPT_SUPERNODE, *argv[3:]]
    argv = _private_plane(_without(argv, READINESS))
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
    stale = (
        "docker-compose.yml is stale: run `fedgs deploy compose --nodes 2 -o docker-compose.yml`"
    )
    committed = (ROOT / "docker-compose.yml").read_text()
    assert committed == compose.dump(2), stale
    written = subprocess.run(
        [sys.executable, "-m", "fedgs.cli", "deploy", "compose", "--nodes", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert written.stdout == committed, stale


# what compose shares with `fedgs deploy local`: not the launcher's doorbells (they need one host
# and network namespace) nor its in-memory SuperLink state (compose's SuperLink restarts alone)
LIKE_COMPOSE = LocalOptions(nodes=2, in_memory_state=False, doorbell=False)


def test_every_container_runs_what_the_launcher_runs(document: dict, tmp_path: Path) -> None:
    launcher = LocalDeployment(tmp_path, LIKE_COMPOSE).commands()
    services = document["services"]
    assert set(launcher) <= set(services)
    # compose's stand-ins for the launcher's key registration and the operator's `flwr`
    assert set(services) - set(launcher) == {"register", compose.OPERATOR}
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
    assert {
        "superlink-state",
        "runs",
        "control-plane",
        "supernode-0-state",
        "supernode-1-state",
    } == set(document["volumes"])


def test_a_node_reads_its_own_data_mount_only_where_its_node_config_says(
    document: dict,
) -> None:
    """The committed file serves the embedded dataset: no node config names a data folder (the
    embedded dataset refuses one). With --node-data each node's names its own mount; the run
    config's data-dir is the ServerApp's, which a node never reads."""

    def data_dirs(doc: dict) -> list[object]:
        found = []
        for i in range(2):
            command = doc["services"][topology.node_name(i)]["command"]
            config = command[command.index("--node-config") + 1]
            found.append(parse_config_args([config]).get("data-dir"))
        return found

    assert data_dirs(document) == [None, None]
    assert data_dirs(compose.render(2, node_data=True)) == [compose.DATA, compose.DATA]
    assert compose.render(2, node_data=True)["volumes"] == document["volumes"]


def test_only_the_fleet_port_is_published_on_loopback(document: dict) -> None:
    """Issue 46 (1): 9091, the Control and runtime APIs, was published on the host's loopback,
    where every local user could list nodes, register a key and run an app."""
    services = document["services"]
    published = {name: s["ports"] for name, s in services.items() if "ports" in s}
    command = services["superlink"]["command"]
    port = command[command.index("--port") + 1]
    assert published == {"superlink": [f"127.0.0.1:{port}:{port}"]}
    assert not [name for name, s in services.items() if "expose" in s]
    assert "--private-port" not in command and "--private-host" not in command


def _mounts(service: dict, source: str) -> list[str]:
    return [v for v in service.get("volumes", []) if v.split(":")[0] == source]


def test_control_plane_is_a_socket_in_a_volume_only_the_operators_side_mounts(
    document: dict, tmp_path: Path
) -> None:
    services = document["services"]
    command = services["superlink"]["command"]
    sock = command[command.index("--private-socket") + 1]
    assert sock == compose.CONTROL_SOCKET and Path(sock).parent == Path(compose.CONTROL_PLANE)
    volume = f"{compose.CONTROL_VOLUME}:{compose.CONTROL_PLANE}"
    mounting = {name for name, s in services.items() if volume in s.get("volumes", [])}
    assert mounting == {"superlink", "serverapp", "register", compose.OPERATOR}
    assert {n for n, s in services.items() if _mounts(s, compose.CONTROL_VOLUME)} == mounting
    assert compose.CONTROL_VOLUME in document["volumes"]
    address = f"unix:{sock}"
    serverapp, register = services["serverapp"]["command"], services["register"]["command"]
    assert serverapp[serverapp.index("--runtime-api-address") + 1] == address
    assert register[register.index("--superlink") + 1] == address
    # the containers that talk to the Control plane reach it through the volume alone
    for name in ("serverapp", "register", compose.OPERATOR):
        assert services[name]["network_mode"] == "none" and "networks" not in services[name]
    for name in ("serverapp", "register"):
        assert services[name]["depends_on"]["superlink"]["condition"] == "service_healthy"

    # the operator's `flwr`: started only by `docker compose run`, its connection the socket
    flwr = services[compose.OPERATOR]
    assert flwr["profiles"] == ["operator"] and "command" not in flwr
    assert flwr["entrypoint"] == ["python", "-m", "fedgs.deploy.unix_socket", "flwr"]
    home = flwr["environment"]["FLWR_HOME"]
    assert f"./deploy/flwr-home/config.toml:{home}/config.toml:ro" in flwr["volumes"]
    assert f"./deploy/app:{compose.APP}:ro" in flwr["volumes"]
    compose.prepare_host(tmp_path, 2)
    config = tomllib.loads((tmp_path / "flwr-home" / "config.toml").read_text())
    assert config["superlink"]["default"] == "fedgs"
    assert config["superlink"]["fedgs"] == {
        "address": address,
        "root-certificates": "/app/certificates/ca.crt",
    }
    assert "./deploy/certificates/ca.crt:/app/certificates/ca.crt:ro" in flwr["volumes"]


def test_only_the_superlink_joins_a_network_with_a_gateway(document: dict) -> None:
    """Issue 46 (7): `control` was not internal. Every network is internal but `public`, which
    the published Fleet port needs (a port needs a network with a gateway)."""
    networks, services = document["networks"], document["services"]
    assert {name for name, n in networks.items() if not n.get("internal")} == {"public"}
    assert networks["link"] == {"internal": True}
    joined = {
        name
        for name, s in services.items()
        if "public" in s.get("networks", []) or s.get("network_mode") == "bridge"
    }
    assert joined == {"superlink"}
    assert sorted(services["superlink"]["networks"]) == ["link", "public"]
    assert "control" not in networks  # the Control plane needs no network at all now


def test_register_mounts_only_the_public_keys(document: dict) -> None:
    """Issue 46 (7): `register` mounted all of deploy/keys, the nodes' private keys too."""
    register = document["services"]["register"]
    keys = [v for v in register["volumes"] if v.startswith("./deploy/keys")]
    assert keys == [
        f"./deploy/keys/supernode-{i}.pub:/app/keys/supernode-{i}.pub:ro" for i in range(2)
    ]
    assert not [v for v in register["volumes"] if ".key" in v or v.startswith("./deploy/keys:")]
    pubs = [token for token in register["command"] if token.endswith(".pub")]
    assert pubs == [v.split(":")[1] for v in keys]


def _flag(service: dict, flag: str) -> str:
    command = service["command"]
    return command[command.index(flag) + 1]


def test_health_checks_mean_ready_not_a_port_open(document: dict) -> None:
    """Issue 46 (7): a SuperNode's runtime port opens before its activation at the SuperLink, so
    a TCP connect said "healthy" before the node had joined; the SuperExec containers had no
    health check at all."""
    services = document["services"]
    for service in services.values():
        assert "socket.create_connection" not in " ".join(
            service.get("healthcheck", {}).get("test", [])
        )
    superlink = services["superlink"]
    assert superlink["healthcheck"]["test"] == [
        "CMD", "python", "-m", "fedgs.deploy.health",
        "--ca-cert", _flag(superlink, "--ssl-ca-certfile"),
        "--socket", _flag(superlink, "--private-socket"),
        "--port", _flag(superlink, "--port"),
    ]  # fmt: skip
    for i in range(2):
        node = services[topology.node_name(i)]
        marker = _flag(node, "--activated-file")
        assert node["command"][:2] == ["--activated-file", marker]  # the wrapper's, first
        assert node["healthcheck"]["test"] == ["CMD", "test", "-f", marker]
        assert marker.startswith("/tmp/")  # the container's own, not a mounted volume's
    for name in ("serverapp", *(topology.executor_name(i) for i in range(2))):
        marker = _flag(services[name], "--ready-file")
        assert services[name]["healthcheck"]["test"] == ["CMD", "test", "-f", marker], name
        assert marker.startswith("/tmp/")
    for name in (topology.executor_name(i) for i in range(2)):
        node = name.replace("clientapp", "supernode")
        assert services[name]["depends_on"][node]["condition"] == "service_healthy"
    # every long-running service has one; `register` exits, `flwr` is the operator's command
    assert {n for n, s in services.items() if "healthcheck" not in s} == {"register", "flwr"}


def test_the_image_makes_the_control_plane_folder_apps_alone() -> None:
    """A new named volume takes the owner and mode of the image's folder: the SuperLink refuses
    a socket folder that is not its user's alone (mode 0700)."""
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    run = dockerfile[dockerfile.index("RUN mkdir -p") :].split("\nUSER app")[0]
    assert compose.CONTROL_PLANE in run.split("&&")[0] and "/app/flwr-home" in run.split("&&")[0]
    assert compose.CONTROL_PLANE in run.split("&&")[1] and "chown -R app:app" in run
    assert f"chmod 0700 {compose.CONTROL_PLANE}" in run


def test_compose_1_29_accepts_the_file() -> None:
    """Debian's Compose 1.29 validates the file (profiles need 1.28+; no top-level name)."""
    if shutil.which("docker-compose") is None:
        pytest.skip("docker-compose (1.29) is not installed")
    # the system's Python tool, run without this test run's environment (a virtualenv's or a
    # test's PYTHONPATH once gave it a foreign `cryptography`)
    env = {"PATH": os.defpath, "HOME": os.environ.get("HOME", "/")}
    version = subprocess.run(
        ["docker-compose", "version"], capture_output=True, text=True, timeout=120, env=env
    )
    if version.returncode != 0:
        pytest.skip(f"docker-compose does not start here: {version.stderr.strip()[-300:]}")
    done = subprocess.run(
        ["docker-compose", "-f", str(ROOT / "docker-compose.yml"), "-p", "fedgs", "config", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr


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
    assert config["superlink"]["fedgs"]["address"] == f"unix:{compose.CONTROL_SOCKET}"
    # every host path the compose file mounts is there (bind mounts of missing files would
    # become root-owned folders)
    for service in compose.render(3)["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./deploy/"):
                assert (tmp_path / source.removeprefix("./deploy/")).exists(), source
    app = tomllib.loads((tmp_path / "app" / "pyproject.toml").read_text())
    assert app["tool"]["flwr"]["app"]["components"]["clientapp"] == "fedgs.client.app:app"
