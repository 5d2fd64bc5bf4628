"""docker-compose.yml for real: a SuperLink and two SuperNodes in containers, TLS and node
authentication on, a few GS-WGAN steps; `down`, `up` again, and the next run finds each data
holder's critic and privacy ledger where the first left them (the named state volumes).

The operator reaches the Control API only as the README says: `docker compose run --rm flwr ...`
(the socket in the control-plane volume; no host port serves it). After `up` every service
with a health check is healthy (the SuperLink answered /health on both sockets, each SuperNode
was activated, each SuperExec's runtime API answered), and the socket is uid 49999's alone.

Opt-in with FEDGS_COMPOSE_TEST=1: the first run builds the registry-free base image
(deploy/local-base-image.sh: debootstrap, ~2.3 GB, ~10 minutes) and every run builds fedgs' image
and runs containers for several minutes on a 2-core machine, too much for each CI run. Needs a
Docker engine (here: `dockerd --iptables=false --bridge=none`), Compose 1.29+ (`docker-compose`)
or v2 (`docker compose`), and root (debootstrap; handing the deployment files to the
containers' uid).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_support import SMALL, console_script, wait_for

from fedgs.deploy import compose, control

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
BASE = "fedgs-local-base:bookworm"
NODES = 2
STEP = SMALL | {"num-clients": NODES, "min-nodes": NODES, "clients-per-step": NODES}
TIMEOUT = 900.0


def _ok(argv: list[str], timeout: float = 60) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=timeout).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _compose_command() -> list[str] | None:
    if _ok(["docker", "compose", "version"]):
        return ["docker", "compose"]
    if shutil.which("docker-compose") and _ok(["docker-compose", "version"]):
        return ["docker-compose"]
    return None


def _skip_reason() -> str | None:
    if os.environ.get("FEDGS_COMPOSE_TEST") != "1":
        return (
            "opt-in: FEDGS_COMPOSE_TEST=1 (builds a 2.3 GB base image the first time and runs "
            "containers for minutes)"
        )
    if not _ok(["docker", "info"]):
        return "no Docker engine answers (start one, e.g. dockerd --iptables=false --bridge=none)"
    if _compose_command() is None:
        return "neither `docker compose` nor `docker-compose` is installed"
    if os.geteuid() != 0:
        return "needs root (debootstrap, and handing the deployment files to uid 49999)"
    return None


def _run(
    argv: list[str],
    cwd: Path | None = None,
    timeout: float = TIMEOUT,
    env: dict[str, str] | None = None,
) -> str:
    done = subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def _build_images() -> None:
    """The local base once (kept between runs), then fedgs' image on it, offline."""
    if not _ok(["docker", "image", "inspect", BASE]):
        _run([str(ROOT / "deploy" / "local-base-image.sh"), BASE], timeout=3600)
    _run(
        ["docker", "build", "--network", "none", "-f", "deploy/Dockerfile",
         "--build-arg", f"BASE_IMAGE={BASE}", "--build-arg", "TORCH=preinstalled",
         "-t", compose.IMAGE, "."],
        cwd=ROOT,
    )  # fmt: skip


class Project:
    """One compose project in a folder of its own: the committed file plus `fedgs deploy init`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.name = f"fedgs-test-{os.getpid()}"
        compose_file = folder / "docker-compose.yml"
        self.command = [*(_compose_command() or []), "-f", str(compose_file), "-p", self.name]
        shutil.copyfile(ROOT / "docker-compose.yml", compose_file)
        _run(
            [console_script("fedgs"), "deploy", "init", "--out", "deploy", "--nodes", str(NODES)],
            cwd=folder,
        )
        mounted = ("certificates", "keys", "secrets", "nodes", "data", "control", "app")
        for name in (*mounted, "flwr-home"):
            _run(["chown", "-R", f"{compose.CONTAINER_UID}", str(folder / "deploy" / name)])
        # the operator's flwr: a container on the Control socket, as the README has it
        self.flwr = [*self.command, "run", "--rm", "-T", compose.OPERATOR]
        self.env = dict(os.environ)

    def compose(self, *args: str) -> str:
        return _run([*self.command, *args], cwd=self.folder)

    def online(self) -> list[int]:
        return control.online_nodes(self.env, flwr_command=self.flwr)

    def up(self) -> None:
        self.compose("up", "-d")
        wait_for(lambda: len(self.online()) == NODES, "both SuperNodes online", TIMEOUT)
        wait_for(self.all_healthy, "every health check to pass", TIMEOUT)

    def health(self) -> dict[str, str]:
        """Each running container's health status (those with a health check)."""
        found = {}
        for container in self.compose("ps", "-q").split():
            state = json.loads(
                _run(["docker", "inspect", "--format", "{{json .State}}", container])
            )
            name = _run(["docker", "inspect", "--format", "{{.Name}}", container]).strip()
            if "Health" in state:
                found[name.strip("/")] = state["Health"]["Status"]
        return found

    def all_healthy(self) -> bool:
        statuses = self.health()
        return len(statuses) == 2 + 2 * NODES and set(statuses.values()) == {"healthy"}

    def run(self, run_dir: str, stream: bool = False, **config: object) -> str:
        settings = STEP | {"run-dir": run_dir} | config
        args = " ".join(
            f"{k}={json.dumps(v) if isinstance(v, str) else v}" for k, v in settings.items()
        )
        command = ["run", compose.APP, control.CONNECTION, "--run-config", args]
        if stream:  # what the README's operator types: logs until the run ends
            out = _run([*self.flwr, *command, "--stream"], env=self.env)
            run_id = int(re.findall(r"Successfully started run (\d+)", out)[0])
        else:
            out = _run([*self.flwr, *command, "--format", "json"], env=self.env)
            run_id = int(json.loads(out[out.index("{") :])["run-id"])
        poll = lambda: control.run_status(run_id, self.env, flwr_command=self.flwr)  # noqa: E731
        wait_for(lambda: poll()[0].startswith("finished"), f"run {run_id}", TIMEOUT)
        status, details = poll()
        assert status == "finished:completed", (
            status,
            details,
            self.compose("logs", "--tail", "80"),
        )
        return run_dir

    def node_state(self, partition_id: int) -> dict[str, int]:
        """Queries the node's client paid for and its critic's Adam step count, read from the
        node's state volume by a throwaway container."""
        probe = (
            "import glob, json, torch; from fedgs.privacy import PrivacyLedger; "
            "(p,) = glob.glob('/state/*.pt'); s = torch.load(p, weights_only=True); "
            "print(json.dumps({'paid': sum(PrivacyLedger.from_json(s['ledger'])"
            ".query_counts().values()), 'adam': int(s['critic_state']['optimizer']['state'][0]"
            "['step'])}))"
        )
        volume = f"{self.name}_supernode-{partition_id}-state:/state:ro"
        out = _run(
            ["docker", "run", "--rm", "--network", "none", "-v", volume, "--entrypoint",
             "python", compose.IMAGE, "-c", probe]
        )  # fmt: skip
        return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    _build_images()
    project = Project(tmp_path_factory.mktemp("compose"))
    try:
        yield project
    finally:
        subprocess.run([*project.command, "down", "-v"], cwd=project.folder, capture_output=True)


def test_compose_runs_gswgan_and_resumes_each_node_after_down_and_up(project: Project) -> None:
    project.up()
    # the Control socket: the SuperLink user's alone, in a folder of its alone (the volume took
    # the image folder's owner and mode)
    modes = project.compose(
        "exec", "-T", "superlink", "stat", "-c", "%a %u %F", compose.CONTROL_PLANE,
        compose.CONTROL_SOCKET,
    )  # fmt: skip
    uid = compose.CONTAINER_UID
    assert modes.split("\n")[:2] == [f"700 {uid} directory", f"600 {uid} socket"], modes
    assert "9091" not in project.compose("ps")  # no Control port published
    project.run("/app/runs/first", steps=2, **{"warm-start-steps": 1})
    before = [project.node_state(i) for i in range(NODES)]
    assert all(state["paid"] >= 1 for state in before), before

    project.compose("down")  # containers and networks go; the named volumes stay
    project.up()  # keys registered before: `register` still succeeds, nodes start
    project.run("/app/runs/second", stream=True, steps=1)
    after = [project.node_state(i) for i in range(NODES)]
    # each node answered the one query of the second run from the critic and ledger it kept
    for old, new in zip(before, after, strict=True):
        assert new["paid"] == old["paid"] + 1, (before, after)
        assert new["adam"] == old["adam"] + STEP["critic-steps"], (before, after)
