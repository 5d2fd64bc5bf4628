"""Wall time per generator step: real deployment vs Flower's simulation engine vs pure compute.

Usage: python benchmarks/deploy_latency.py --nodes 3 --steps 12 --out runs/latency
Runs, one after the other, the same GS-WGAN steps (embedded data in one client per node, no
warm start, no evaluation, one client per step; every process with ``--threads`` torch threads):
  compute      the step's computation in this process: G's fakes through the wire format,
               the node's critic (in memory) trains and answers, G applies the reply; no
               messages, no disk;
  simulation   fedgs simulate (Ray, in-memory messages; critics on disk between messages);
  deploy       fedgs deploy local: TLS, node authentication, ClientApp processes forked from a
               SuperExec that imported the app once when its SuperNode rings
               (fedgs.deploy.doorbell), 50 ms reply polls, the SuperLink's state in memory
               (Flower's in-memory LinkState);
  deploy-poll  the deploy mode without doorbells: the SuperExecs ask for a task every 50 ms;
  deploy-file  the deploy mode with the SuperLink's state in its SQLite file (what compose
               uses; `fedgs deploy local --superlink-state file`; before 2026-11-25 this was
               the deploy mode, and the in-memory one was called deploy-memory);
  deploy-cold  the same deployment with Flower's defaults: a fresh `flwr-clientapp` interpreter
               per message (imports Flower, torch, the app), 1 s task and 3 s reply polls.
Each mode gives the median, min and max wall seconds per step over steps 2..N (the first step
pays one-off start-up) and its median's ratio to the compute medians of the same invocation,
wall and CPU (compute-cpu: the process's CPU seconds, what the step costs without waiting for a
core) and, where simulation ran, to the simulation's median (the deployment's goal: within 2x).
It prints one JSON line per row and a table, and writes OUT/latency.json; the load average is
recorded before and after each mode, since the machine may be shared.
  --idle-seconds N   before the deployed run, the warm deployment's CPU seconds per second
                     while idle for N s (every process of it: the price of its short polls);
  --trace-http       every deployed process logs its Flower HTTP requests
                     (benchmarks/http_trace), and the steps are cut into phases
                     (benchmarks/deploy_phases.py): OUT/deploy/http-trace.log, phases.json.
  --loads 0 6        run the modes once per load: N busy-looping processes (each wants a whole
                     core) run beside the modes, a load known and equal for every mode, instead
                     of whatever else the machine runs;
  --invocations K    repeat all of it K times (the loads' order alternating), each invocation in
                     OUT/i<k>-load<N>, and print the median over invocations of each mode's
                     ratio to the simulation at each load (OUT/series.json).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from deploy_phases import PHASES, summary

from fedgs.deploy import processes
from fedgs.deploy.launcher import LocalDeployment, LocalOptions
from fedgs.protocols import common, gswgan
from fedgs.run_config import RunConfig
from fedgs.run_data import dataset_for
from fedgs.training.critic import PrivateCritic
from fedgs.training.generator import GeneratorTrainer


def _step_seconds(run_dir: Path) -> list[float]:
    with (run_dir / "metrics.csv").open(newline="") as handle:
        seconds = [float(r["seconds"]) for r in csv.DictReader(handle)]
    return _differences(seconds)


def _settings(a: argparse.Namespace) -> dict[str, object]:
    return {
        "num-clients": a.nodes,
        "min-nodes": a.nodes,
        "steps": a.steps,
        "batch-size": a.batch_size,
        "critic-steps": a.critic_steps,
        "generator-width": a.width,
        "critic-width": a.width,
        "warm-start-steps": 0,
        "eval-every": 0,
        "checkpoint-every": a.steps,
    }


def _fedgs(a: argparse.Namespace, command: list[str], out: Path) -> list[float]:
    env = os.environ | {"OMP_NUM_THREADS": str(a.threads), "MKL_NUM_THREADS": str(a.threads)}
    argv = [sys.executable, "-m", "fedgs.cli", *command, "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return _step_seconds(out)


def _options(settings: dict[str, object]) -> list[str]:
    return [token for key, value in settings.items() for token in (f"--{key}", str(value))]


def _differences(seconds: list[float]) -> list[float]:
    return [later - earlier for earlier, later in zip(seconds, seconds[1:], strict=False)]


def run_compute(a: argparse.Namespace, out: Path) -> dict[str, list[float]]:
    """The step's computation alone, in this process: G proposes, the wire format encodes and
    checks both ways, the node's critic (in memory, no disk) trains and answers, G applies.
    Wall and CPU seconds: on a shared machine the wall time includes waiting for a core."""
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    config = RunConfig.from_user_config(_settings(a))
    settings, device = config.gswgan(), torch.device("cpu")
    dataset = dataset_for(config)
    trainer = GeneratorTrainer(dataset.num_classes, settings, seed=config.seed, device=device)
    critics = [
        PrivateCritic(*dataset.client_train(k), dataset.num_classes, settings, k, device)
        for k in range(dataset.num_clients)
    ]
    bound = gswgan.plausible_magnitude(settings.clip_norm, settings.noise_multiplier)
    wall, cpu = [], []
    started, cpu_started = time.perf_counter(), time.process_time()
    for step in range(a.steps):
        (query,) = trainer.propose(1)
        fakes = common.decode_fakes(
            common.encode_fakes(query.images, query.labels), dataset.num_classes
        )
        critic = critics[step % len(critics)]
        critic.train_on(fakes.pairs())
        sanitized = critic.answer(fakes.images[-1], fakes.labels[-1])
        reply = gswgan.encode_gradient(sanitized)
        trainer.apply([gswgan.decode_gradient(reply, settings.batch_size, bound)])
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
    return {"compute": _differences(wall), "compute-cpu": _differences(cpu)}


def run_simulation(a: argparse.Namespace, out: Path) -> list[float]:
    return _fedgs(a, ["simulate", *_options(_settings(a)), "--ray-cpus", str(a.cpus)], out)


TRACE_SITE = Path(__file__).resolve().parent / "http_trace"  # its sitecustomize logs requests


def idle_cpu(marker: str, seconds: float) -> float:
    """CPU seconds per second that the processes of a deployment spend while it is idle."""
    tick = os.sysconf("SC_CLK_TCK")

    def cpu_seconds() -> dict[int, float]:
        used = {}
        for pid in processes.marked(marker):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            used[pid] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        return used

    before = cpu_seconds()
    time.sleep(seconds)
    after = cpu_seconds()
    return sum(after[pid] - before[pid] for pid in after.keys() & before.keys()) / seconds


def run_deployment(
    a: argparse.Namespace,
    out: Path,
    warm: bool,
    in_memory_state: bool = True,
    doorbell: bool = True,
) -> dict[str, list[float]]:
    options = LocalOptions(
        nodes=a.nodes,
        warm=warm,
        threads=a.threads,
        in_memory_state=in_memory_state,
        doorbell=doorbell,
        # a timing run at the paper's sigma: its nodes set no budget (the default one, epsilon
        # 10, refuses a query at sigma 1.07 from the first), so any --steps runs to its end
        policy={"policy-epsilon-budget": 0.0},
    )
    trace = out.resolve() / "http-trace.log"  # components run in their own directories
    if a.trace_http:
        trace.unlink(missing_ok=True)
        path = os.pathsep.join(filter(None, [str(TRACE_SITE), os.environ.get("PYTHONPATH")]))
        os.environ.update(PYTHONPATH=path, FEDGS_HTTP_TRACE=str(trace))
    measured: dict[str, list[float]] = {}
    with LocalDeployment(out, options) as deployment:  # components run in `out`: absolute paths
        if a.idle_seconds > 0:
            deployment.wait_for_nodes(a.nodes)
            measured["idle-cpu-per-s"] = [idle_cpu(deployment.marker, a.idle_seconds)]
        result = deployment.run(_settings(a) | {"run-dir": str(deployment.run_dir)})
    if not result.ok:
        raise RuntimeError(f"the {out.name} run did not complete: {result}")
    measured[out.name] = _step_seconds(deployment.run_dir)
    if a.trace_http:
        phases = summary(trace)
        (out / "phases.json").write_text(json.dumps(phases, indent=1))
        for phase in PHASES:
            print(f"  {out.name} {phase}: median {phases['phases'][phase]['median_s']:.3f} s")
    return measured


@contextlib.contextmanager
def busy_processes(count: int) -> Iterator[None]:
    """``count`` processes that each spin on a core until the block ends: a controlled load."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def measure(
    a: argparse.Namespace,
    out: Path,
    runners: dict[str, Callable[[Path], dict[str, list[float]]]],
) -> list[dict[str, object]]:
    """One invocation: every mode in turn under ``out``; rows with ratios; OUT/latency.json."""
    rows: list[dict[str, object]] = []
    for mode in a.modes:
        before = load_average()
        measured = runners[mode](out / mode)
        after = load_average()
        for name, steps in measured.items():
            row = {
                "mode": name,
                "median_s": statistics.median(steps),
                "min_s": min(steps),
                "max_s": max(steps),
                "steps": len(steps),
                "load_before": before,
                "load_after": after,
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    medians = {r["mode"]: r["median_s"] for r in rows}
    for row in rows:
        for reference in ("compute", "compute-cpu", "simulation"):
            if reference in medians and not str(row["mode"]).startswith("idle"):
                row[f"x_{reference}"] = row["median_s"] / medians[reference]
    out.mkdir(parents=True, exist_ok=True)
    (out / "latency.json").write_text(
        json.dumps({"args": vars(a) | {"out": str(out)}, "rows": rows}, indent=1)
    )
    print(
        "| mode | median s/step | min | max | x compute | x compute CPU | x simulation "
        "| load before; after |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        columns = ("x_compute", "x_compute-cpu", "x_simulation")
        ratios = [f"{r[k]:.2f}" if k in r else "-" for k in columns]
        print(
            f"| {r['mode']} | {r['median_s']:.3f} | {r['min_s']:.3f} | {r['max_s']:.3f} | "
            f"{' | '.join(ratios)} | {r['load_before']}; {r['load_after']} |",
            flush=True,
        )
    return rows


def series(a: argparse.Namespace, runs: dict[tuple[int, int], list[dict[str, object]]]) -> None:
    """Per load and mode: the median over invocations of the step median and of its ratio to
    the simulation of the same invocation (OUT/series.json)."""
    summary = []
    for load in a.loads:
        for mode in a.modes:
            rows = [
                row
                for (_, run_load), rows in runs.items()
                if run_load == load
                for row in rows
                if row["mode"] == mode
            ]
            ratios = [float(r["x_simulation"]) for r in rows if "x_simulation" in r]
            summary.append(
                {
                    "load": load,
                    "mode": mode,
                    "invocations": len(rows),
                    "median_s": statistics.median(float(r["median_s"]) for r in rows),
                    "x_simulation_median": statistics.median(ratios) if ratios else None,
                    "x_simulation_range": [min(ratios), max(ratios)] if ratios else None,
                }
            )
    (a.out / "series.json").write_text(json.dumps(summary, indent=1))
    print("| busy processes | mode | invocations | median s/step | x simulation: median (range) |")
    print("| ---: | --- | ---: | ---: | --- |")
    for r in summary:
        ratio = "-"
        if r["x_simulation_median"] is not None:
            low, high = r["x_simulation_range"]
            ratio = f"{r['x_simulation_median']:.2f} ({low:.2f}-{high:.2f})"
        print(f"| {r['load']} | {r['mode']} | {r['invocations']} | {r['median_s']:.3f} | {ratio} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--critic-steps", type=int, default=5)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--threads", type=int, default=1, help="torch threads of every process")
    p.add_argument("--cpus", type=int, default=2, help="Ray CPUs of the simulation")
    p.add_argument("--modes", nargs="+", default=["compute", "simulation", "deploy", "deploy-cold"])
    p.add_argument("--idle-seconds", type=float, default=0.0)
    p.add_argument("--trace-http", action="store_true")
    p.add_argument("--loads", type=int, nargs="+", help="busy processes beside the modes")
    p.add_argument("--invocations", type=int, default=1)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    if a.steps < 3:
        p.error("--steps must be at least 3 (the first step is left out of the statistics)")
    if a.invocations < 1 or any(load < 0 for load in a.loads or []):
        p.error("--invocations must be at least 1 and --loads at least 0")
    runners: dict[str, Callable[[Path], dict[str, list[float]]]] = {
        "compute": lambda out: run_compute(a, out),
        "simulation": lambda out: {"simulation": run_simulation(a, out)},
        "deploy": lambda out: run_deployment(a, out, warm=True),
        "deploy-file": lambda out: run_deployment(a, out, warm=True, in_memory_state=False),
        "deploy-poll": lambda out: run_deployment(a, out, warm=True, doorbell=False),
        "deploy-cold": lambda out: run_deployment(a, out, warm=False),
    }
    unknown = set(a.modes) - set(runners)
    if unknown:
        p.error(f"unknown modes {sorted(unknown)}; choose from {sorted(runners)}")
    if a.loads is None and a.invocations == 1:
        used = [str(a.out / mode) for mode in a.modes if (a.out / mode).exists()]
        if used:  # a run directory appended to would mix two invocations' steps
            p.error(f"{', '.join(used)} exist(s) already; give a new --out")
        measure(a, a.out, runners)
        return
    if a.out.exists() and any(a.out.iterdir()):
        p.error(f"{a.out} is not empty; give a new --out")
    a.loads = a.loads or [0]
    runs: dict[tuple[int, int], list[dict[str, object]]] = {}
    for invocation in range(a.invocations):
        order = a.loads if invocation % 2 == 0 else a.loads[::-1]
        for load in order:
            print(f"# invocation {invocation + 1}/{a.invocations}, load {load}", flush=True)
            with busy_processes(load):
                runs[invocation, load] = measure(a, a.out / f"i{invocation}-load{load}", runners)
    series(a, runs)


if __name__ == "__main__":
    main()
