"""`fedgs simulate --ray-address` on a real two-node Ray cluster started on this machine.

Both nodes are `ray start` processes bound to 127.0.0.1, each with its own --temp-dir (Ray supports
a temp dir per node) and one CPU, so Flower's pool has one client actor per node. Two details keep
the cluster on loopback: `ray start` turns a --node-ip-address or --address of 127.0.0.1 into the
machine's routable address (then every Ray server listens on all interfaces) unless
RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which in turn refuses a second node; so the nodes run Ray's
own CLI with that one translation kept off (:data:`RAY_START`), and the driver (fedgs simulate)
runs with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, so that it too dials 127.0.0.1. Teardown ends the
processes of this cluster alone, found by its temp dir: `ray stop` would end every Ray on the
machine, other users' included.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fedgs.simulations.cluster import client_nodes, missing

pytestmark = pytest.mark.slow

# Ray's CLI with 127.0.0.1 kept as given (see the module docstring)
RAY_START = [
    sys.executable,
    "-c",
    "import sys, ray._private.services as services; "
    "services.resolve_ip_for_localhost = lambda host: host; "
    "from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()",
    "start",
]

SMALL = [
    "--num-clients",
    "4",
    "--clients-per-step",
    "2",
    "--steps",
    "3",
    "--batch-size",
    "8",
    "--critic-steps",
    "2",
    "--generator-width",
    "4",
    "--critic-width",
    "4",
    "--warm-start-steps",
    "1",
    "--eval-every",
    "0",
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Cluster:
    root: Path  # root/head and root/worker: each node's --temp-dir
    address: str

    def node_logs(self, node: str) -> Path:
        return self.root / node / "session_latest" / "logs"


def _node_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)  # Linux's default: clusters allowed
    env["RAY_worker_niceness"] = "0"  # as fedgs' local Ray: clients at the driver's priority
    return env


def start_cluster(root: Path, cpus_per_node: int = 1, object_store_mb: int = 256) -> Cluster:
    """A head and a worker node on 127.0.0.1, each with its own temp dir under ``root``."""
    port = free_port()
    common = [
        "--node-ip-address",
        "127.0.0.1",
        "--num-cpus",
        str(cpus_per_node),
        "--object-store-memory",
        str(object_store_mb * 1024**2),
        "--dashboard-agent-listen-port",
        "0",
        "--disable-usage-stats",
    ]
    head = [
        *RAY_START,
        "--head",
        "--port",
        str(port),
        "--temp-dir",
        str(root / "head"),
        "--include-dashboard",
        "false",
        "--dashboard-port",
        str(free_port()),
        "--ray-client-server-port",
        str(free_port()),
        *common,
    ]
    worker = [*RAY_START, "--address", f"127.0.0.1:{port}", "--temp-dir", str(root / "worker")]
    for command in (head, worker + common):
        done = subprocess.run(command, env=_node_env(), capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return Cluster(root, f"127.0.0.1:{port}")


def _processes() -> dict[int, tuple[int, bytes, list[str]]]:
    """pid -> (parent, command line, /proc/PID/stat fields after the name) of every process."""
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            command = (proc / "cmdline").read_bytes()
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            found[int(proc.name)] = (int(fields[1]), command, fields)
        except (OSError, ValueError, IndexError):
            continue
    return found


def _cluster_processes(root: Path, processes: dict | None = None) -> set[int]:
    """This cluster's Ray processes (their command line names its temp dir) and their children
    (the workers, which do not)."""
    processes = _processes() if processes is None else processes
    pids = {
        pid
        for pid, (_, command, _) in processes.items()
        if str(root).encode() in command and b"site-packages/ray" in command
    }
    pids.discard(os.getpid())
    return pids | {pid for pid, (parent, _, _) in processes.items() if parent in pids}


class NodeSampler:
    """Samples, per node of a cluster, the RSS summed over its Ray processes and workers, and
    the CPU seconds of its ClientAppActor workers (the processes that run the ClientApps)."""

    def __init__(self, root: Path, nodes: tuple[str, ...] = ("head", "worker")) -> None:
        self.root, self.nodes = root, nodes
        self.peak_rss_mib = dict.fromkeys(nodes, 0.0)
        self.actor_cpu_s: dict[str, dict[int, tuple[float, float]]] = {n: {} for n in nodes}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> NodeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def actor_cpu_used(self, node: str) -> float:
        """CPU seconds the node's client actors used while sampled (last minus first sample)."""
        return sum(last - first for first, last in self.actor_cpu_s[node].values())

    def _run(self) -> None:
        tick, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
        while not self._stop.wait(0.25):
            processes = _processes()
            for node in self.nodes:
                pids = _cluster_processes(self.root / node, processes)
                rss = sum(int(processes[pid][2][21]) for pid in pids if pid in processes)
                self.peak_rss_mib[node] = max(self.peak_rss_mib[node], rss * page / 2**20)
                for pid in pids:
                    parent, command, fields = processes[pid]
                    if b"ClientAppActor" in command:
                        cpu = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
                        first = self.actor_cpu_s[node].get(pid, (cpu, cpu))[0]
                        self.actor_cpu_s[node][pid] = (first, cpu)


def stop_cluster(root: Path) -> None:
    """End this cluster's processes, by id: SIGTERM, then SIGKILL what is left after 10 s."""
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 2.0)):
        for pid in _cluster_processes(root):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while _cluster_processes(root) and time.monotonic() < deadline:
            time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # short: Ray's unix sockets live under the temp dir (107 bytes at most)
    root = Path(tempfile.mkdtemp(prefix="fedgs-ray-", dir="/tmp"))
    try:
        yield start_cluster(root)
    finally:
        stop_cluster(root)
        shutil.rmtree(root, ignore_errors=True)


def simulate(cluster: Cluster, run_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")  # dial 127.0.0.1 as given
    command = [sys.executable, "-m", "fedgs.cli", "simulate", *SMALL, "--out", str(run_dir)]
    return subprocess.run(
        [*command, "--ray-address", cluster.address, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def actor_logs(cluster: Cluster, node: str) -> list[Path]:
    """The worker logs of a node that hosted one of Flower's client actors."""
    return [
        path
        for path in cluster.node_logs(node).glob("worker-*")
        if ":actor_name:ClientAppActor" in path.read_text(errors="replace")
    ]


def test_clients_run_on_both_nodes_of_a_cluster(cluster: Cluster, tmp_path: Path) -> None:
    run_dir, state_dir = tmp_path / "run", tmp_path / "shared" / "client-state"
    started = time.monotonic()
    with NodeSampler(cluster.root) as nodes:
        done = simulate(cluster, run_dir, "--state-dir", str(state_dir))
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "client replies: 6 answered, 0 dropped of 6 asked" in done.stdout, done.stdout[-2000:]
    privacy = json.loads((run_dir / "privacy.json").read_text())
    assert privacy["steps"] == 3 and privacy["queries"]["total"] == 6
    assert len(list(state_dir.glob("*.pt"))) == 4  # every client's critic and ledger, one folder
    assert not list(state_dir.glob(".cluster-check-*"))  # the check left nothing behind
    assert not (run_dir / "client-state").exists()
    # Flower's pool: one actor per node (one CPU each), each a worker of its own node, and each
    # ran ClientApps: its first message alone imports fedgs and torch (seconds of CPU), where an
    # actor that got none sits idle after its start
    for node in ("head", "worker"):
        assert actor_logs(cluster, node), f"no client actor on the {node} node"
        assert nodes.actor_cpu_used(node) > 1.0, (node, nodes.actor_cpu_s)
    print(
        f"two-node run: {elapsed:.1f} s; client actors' CPU s "
        + ", ".join(f"{n} {nodes.actor_cpu_used(n):.1f}" for n in nodes.nodes)
        + "; peak RSS MiB "
        + ", ".join(f"{n} {nodes.peak_rss_mib[n]:.0f}" for n in nodes.nodes)
    )


def test_the_check_sees_only_the_token_just_written(tmp_path: Path) -> None:
    token_file = tmp_path / ".cluster-check-1"
    assert "cannot read" in missing(str(token_file), "abc", "")
    token_file.write_text("abc")
    assert missing(str(token_file), "abc", "") == ""
    assert "another state directory" in missing(str(token_file), "xyz", "")
    assert "has no data-dir" in missing(str(token_file), "abc", str(tmp_path / "absent"))


def test_client_nodes_are_those_where_flower_places_an_actor() -> None:
    nodes = [
        {"NodeID": "a", "Alive": True, "Resources": {"CPU": 1.0}},
        {"NodeID": "b", "Alive": True, "Resources": {"CPU": 0.0}},  # a head that runs no tasks
        {"NodeID": "c", "Alive": False, "Resources": {"CPU": 4.0}},
        {"NodeID": "d", "Alive": True, "Resources": {"CPU": 2.0, "GPU": 1.0}},
    ]
    assert client_nodes(nodes, 1.0, 0.0) == ["a", "d"]
    assert client_nodes(nodes, 2.0, 0.0) == ["d"]
    assert client_nodes(nodes, 1.0, 0.5) == ["d"]
    assert client_nodes(nodes, 1.0, 2.0) == []
