"""Seconds per GS-WGAN step with and without secure aggregation (issue 42), at m clients per step.

Usage: python benchmarks/secagg_step_time.py --m 10 50 100 --repeats 3 --sim-m 10 50 --out DIR
Two measurements, side by side in one invocation (``--parts`` picks either):

protocol    In one process, no Flower: for each m, one secure step's cryptography and encoding
            for the whole cohort. m gradients of B x ``--row-length`` (default 32 x 784) are
            made up front (not timed); the secure path times each client's ``clip_rows`` and
            ``distributed_noise.encode`` (its distributed-noise share), the four SecAgg+ stages
            of every ``ClientSession`` (each restored from and stored to its plain-dict state,
            as a node keeps it in Flower's context.state) and of the ``ServerSession``
            (``messages()`` and ``receive()``), and the server's ``decode``; the plain path
            times each client's ``fedgs.privacy.sanitizer.sanitize`` of the same gradient.
            SecAgg+ parameters follow RunConfig's rules for clients-per-step m: complete graph,
            t = (m - 1) // 2 + 1, m_min = max(3, m - m // 10), k = 32 bits, noise calibrated as
            ``RunConfig.secure_noise`` does. No client drops. Everything runs one after the
            other on one core, so "cohort s" adds up all m clients' work and the server's.
simulation  ``fedgs simulate`` (the CLI, one subprocess per run) on the embedded default data
            with ``--sim-clients`` clients, clients-per-step m, small models (widths 4, one
            critic step, no warm start, no evaluation), ``--sim-steps`` steps, secure
            aggregation off and on, ``--ray-cpus``. Seconds per step come from metrics.csv's
            cumulative ``seconds`` column; the first step (Ray's actors starting) is left out.

One untimed protocol step at the smallest m warms up first. Each figure is the median over
``--repeats`` (protocol) or ``--sim-repeats`` (simulation) repeats, with the range (min-max)
beside the totals. The load average is printed before and after each part. Times are what this
machine gave under its load at the time: nothing here asserts a time. Results also go to
OUT/secagg_step_time.json when ``--out`` is given.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

STAGES = ("setup", "share_keys", "masked_input", "unmask")


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def timed(fn: Callable[[], object]) -> tuple[object, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


# --- part 1: the protocol in one process -----------------------------------------------------


def noise_params(m: int, batch_size: int, row_length: int, bits: int):
    """(SecAgg+ settings, distributed-noise params) of a secure step of m clients by RunConfig's
    rules; a row length other than 784 is calibrated with the same arguments."""
    from fedgs.data.federated import PIXELS
    from fedgs.privacy.distributed_noise import calibrate
    from fedgs.run_config import RunConfig

    config = RunConfig(
        clients_per_step=m, batch_size=batch_size, secure_aggregation=True, secagg_bits=bits
    )
    settings = config.secagg_settings()
    if row_length == PIXELS:
        return config, settings, config.secure_noise().params
    b, c, sigma = batch_size, config.clip_norm, config.noise_multiplier
    calibration = calibrate(
        c * math.sqrt(b),
        b * row_length,
        bits,
        settings.min_survivors,
        2 * sigma / math.sqrt(b),
        math.exp(-0.5),
        max_clients=m,
        colluders=settings.threshold - 1,
        rotate=True,
    )
    return config, settings, calibration.params


def protocol_step(m: int, gradients: list, config, settings, noise) -> dict:
    """One secure step and the plain path for the same m gradients: seconds per part."""
    import numpy as np

    from fedgs.privacy.distributed_noise import decode, encode
    from fedgs.privacy.randomness import SecureRandom
    from fedgs.privacy.sanitizer import clip_rows, sanitize
    from fedgs.secagg import ClientSession, SecAggParams, ServerSession

    clip, sigma = config.clip_norm, config.noise_multiplier
    times = {"plain_client": 0.0, "encode_client": 0.0, "server": 0.0, "decode": 0.0}
    times |= {f"{stage}_client": 0.0 for stage in STAGES}
    for rows in gradients:
        _, seconds = timed(lambda rows=rows: sanitize(rows, clip, sigma))
        times["plain_client"] += seconds

    nodes = list(range(1, m + 1))
    params = SecAggParams(
        step=1,
        cohort=tuple(nodes),
        modulus_bits=settings.bits,
        threshold=settings.threshold,
        min_survivors=settings.min_survivors,
        vector_length=noise.padded_dimension,
        degree=settings.degree,
    )
    rotation_seed = os.urandom(32)
    values: dict[int, np.ndarray] = {}
    for node, rows in zip(nodes, gradients, strict=True):

        def contribution(rows=rows) -> np.ndarray:
            clipped, _ = clip_rows(rows, clip)
            vector = clipped.double().flatten().numpy()
            return encode(vector, noise, SecureRandom(), rotation_seed)

        values[node], seconds = timed(contribution)
        times["encode_client"] += seconds

    server, seconds = timed(lambda: ServerSession(params))
    times["server"] += seconds
    states = {
        node: ClientSession(
            node, min_cohort=settings.min_survivors, min_threshold=settings.threshold
        ).to_dict()
        for node in nodes
    }
    for stage in STAGES:
        messages, seconds = timed(server.messages)
        times["server"] += seconds
        replies = {}
        for node, message in messages.items():

            def answer(node=node, message=message, stage=stage) -> dict:
                session = ClientSession.from_dict(states[node])
                masked = values.pop(node) if stage == "masked_input" else None
                reply = session.handle(message, masked)
                states[node] = session.to_dict()
                return reply

            replies[node], seconds = timed(answer)
            times[f"{stage}_client"] += seconds
        _, seconds = timed(lambda replies=replies: server.receive(replies))
        times["server"] += seconds
    (total, survivors), seconds = timed(server.result)
    times["server"] += seconds
    if survivors != nodes:
        raise RuntimeError(f"the step lost clients: {sorted(set(nodes) - set(survivors))}")
    _, times["decode"] = timed(lambda: decode(total, noise, rotation_seed))
    times["secure_cohort"] = sum(v for k, v in times.items() if k != "plain_client")
    return times


def run_protocol(a: argparse.Namespace) -> list[dict]:
    import torch

    if a.threads > 0:
        torch.set_num_threads(a.threads)
    rows_out = []
    warm_up = min(a.m)  # first-call allocations and lazy initialisation, not timed
    config, settings, noise = noise_params(warm_up, a.batch_size, a.row_length, a.bits)
    rows = [torch.randn(a.batch_size, a.row_length) * 0.05 for _ in range(warm_up)]
    protocol_step(warm_up, rows, config, settings, noise)
    for m in a.m:
        config, settings, noise = noise_params(m, a.batch_size, a.row_length, a.bits)
        generator = torch.Generator().manual_seed(m)
        gradients = [
            torch.randn(a.batch_size, a.row_length, generator=generator) * 0.05 for _ in range(m)
        ]
        repeats = [protocol_step(m, gradients, config, settings, noise) for _ in range(a.repeats)]
        median = {key: statistics.median(r[key] for r in repeats) for key in repeats[0]}
        row = {
            "m": m,
            "t": settings.threshold,
            "m_min": settings.min_survivors,
            "length": noise.padded_dimension,
            "repeats": a.repeats,
            "plain_ms_per_client": 1000 * median["plain_client"] / m,
            "encode_ms_per_client": 1000 * median["encode_client"] / m,
            **{f"{s}_ms_per_client": 1000 * median[f"{s}_client"] / m for s in STAGES},
            "server_s": median["server"],
            "decode_ms": 1000 * median["decode"],
            "plain_cohort_s": median["plain_client"],
            "plain_cohort_range": [min(r["plain_client"] for r in repeats),
                                   max(r["plain_client"] for r in repeats)],
            "secure_cohort_s": median["secure_cohort"],
            "secure_cohort_range": [min(r["secure_cohort"] for r in repeats),
                                    max(r["secure_cohort"] for r in repeats)],
        }  # fmt: skip
        rows_out.append(row)
        print(f"  m={m}: secure {row['secure_cohort_s']:.2f} s, plain "
              f"{row['plain_cohort_s']:.3f} s (load {load_average()})", flush=True)  # fmt: skip
    return rows_out


def protocol_table(rows: list[dict]) -> str:
    head = (
        "| m | t | m_min | plain: sanitize ms/client | secure: encode ms/client | setup | "
        "share keys | masked input | unmask (ms/client) | server s (4 stages) | decode ms | "
        "plain cohort s (range) | secure cohort s (range) | secure / plain |"
    )
    lines = [head, "| " + " | ".join(["---"] * (head.count("|") - 1)) + " |"]
    for r in rows:
        pr, sr = r["plain_cohort_range"], r["secure_cohort_range"]
        lines.append(
            f"| {r['m']} | {r['t']} | {r['m_min']} | {r['plain_ms_per_client']:.2f} | "
            f"{r['encode_ms_per_client']:.1f} | {r['setup_ms_per_client']:.1f} | "
            f"{r['share_keys_ms_per_client']:.1f} | {r['masked_input_ms_per_client']:.1f} | "
            f"{r['unmask_ms_per_client']:.2f} | {r['server_s']:.2f} | {r['decode_ms']:.1f} | "
            f"{r['plain_cohort_s']:.3f} ({pr[0]:.3f}-{pr[1]:.3f}) | "
            f"{r['secure_cohort_s']:.2f} ({sr[0]:.2f}-{sr[1]:.2f}) | "
            f"{r['secure_cohort_s'] / r['plain_cohort_s']:.0f}x |"
        )
    return "\n".join(lines)


# --- part 2: real steps through the simulation engine ----------------------------------------


def simulate_command(a: argparse.Namespace, m: int, secure: bool, out: Path) -> list[str]:
    return [
        sys.executable, "-m", "fedgs.cli", "simulate", "--dataset", "embedded",
        "--num-clients", str(a.sim_clients), "--clients-per-step", str(m),
        "--batch-size", str(a.batch_size), "--critic-steps", "1", "--generator-width", "4",
        "--critic-width", "4", "--warm-start-steps", "0", "--eval-every", "0",
        "--steps", str(a.sim_steps), "--checkpoint-every", "100000",
        "--ray-cpus", str(a.ray_cpus), "--out", str(out),
    ] + (["--secure-aggregation"] if secure else [])  # fmt: skip


def step_seconds(metrics_csv: Path) -> list[float]:
    """Each step's seconds: differences of the cumulative ``seconds`` column."""
    with metrics_csv.open(newline="") as handle:
        cumulative = [float(r["seconds"]) for r in csv.DictReader(handle)]
    return [b - a for a, b in zip([0.0, *cumulative], cumulative, strict=False)]


def simulate_once(a: argparse.Namespace, m: int, secure: bool, out: Path) -> dict:
    command = simulate_command(a, m, secure, out)
    env = os.environ | {"OMP_NUM_THREADS": str(a.threads), "MKL_NUM_THREADS": str(a.threads)}
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    metrics = out / "metrics.csv"
    steps = step_seconds(metrics) if metrics.exists() else []
    if len(steps) != a.sim_steps:
        sys.exit(f"run failed ({out}, exit {done.returncode}):\n{done.stdout[-2000:]}\n"
                 f"{done.stderr[-4000:]}")  # fmt: skip
    note = ""
    if done.returncode != 0:  # every step is in metrics.csv; say what failed after them
        tail = (done.stderr or done.stdout).strip().splitlines()
        note = f"exit {done.returncode} after the steps: {tail[-1] if tail else '?'}"
        print(f"    note: {note}", flush=True)
    timed_steps = steps[1:] if len(steps) > 1 else steps
    return {
        "m": m,
        "secure": secure,
        "steps": steps,
        "s_per_step": statistics.median(timed_steps),
        "wall_s": wall,
        "note": note,
        "command": shlex.join(command),
    }


def run_simulation(a: argparse.Namespace, out: Path) -> tuple[list[dict], list[dict]]:
    runs = []
    for repeat in range(a.sim_repeats):
        for m in a.sim_m:
            for secure in (False, True):
                name = f"m{m}-{'secure' if secure else 'plain'}-r{repeat}"
                run = simulate_once(a, m, secure, out / name)
                run["repeat"] = repeat
                runs.append(run)
                print(f"  {name}: {run['s_per_step']:.2f} s/step (steps "
                      f"{', '.join(f'{s:.2f}' for s in run['steps'])}; wall {run['wall_s']:.0f} s;"
                      f" load {load_average()})", flush=True)  # fmt: skip
    table = []
    for m in a.sim_m:
        row = {"m": m}
        for secure in (False, True):
            mine = [r["s_per_step"] for r in runs if r["m"] == m and r["secure"] == secure]
            key = "secure" if secure else "plain"
            row[f"{key}_s_per_step"] = statistics.median(mine)
            row[f"{key}_range"] = [min(mine), max(mine)]
            row["runs"] = len(mine)
        table.append(row)
    return runs, table


def simulation_table(rows: list[dict], steps: int) -> str:
    lines = [
        "| m | runs | plain s/step (range) | secure s/step (range) | secure / plain |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        pr, sr = r["plain_range"], r["secure_range"]
        lines.append(
            f"| {r['m']} | {r['runs']} | {r['plain_s_per_step']:.2f} ({pr[0]:.2f}-{pr[1]:.2f}) | "
            f"{r['secure_s_per_step']:.2f} ({sr[0]:.2f}-{sr[1]:.2f}) | "
            f"{r['secure_s_per_step'] / r['plain_s_per_step']:.1f}x |"
        )
    lines.append(f"(median over runs of each run's median of steps 2..{steps})")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--parts",
        nargs="+",
        default=["protocol", "simulation"],
        choices=["protocol", "simulation"],
        help="which measurements to run",
    )
    p.add_argument(
        "--m",
        type=int,
        nargs="+",
        default=[10, 50, 100],
        help="protocol: clients per step (cohort sizes), each >= 3",
    )
    p.add_argument("--repeats", type=int, default=3, help="protocol: timed steps per m")
    p.add_argument("--batch-size", type=int, default=32, help="B: gradient rows (both parts)")
    p.add_argument(
        "--row-length",
        type=int,
        default=784,
        help="protocol: values per row (784 = MNIST; smaller for a quick check)",
    )
    p.add_argument("--bits", type=int, default=32, help="protocol: secagg-bits k")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads here and OMP threads of each simulation (0 = torch's)",
    )
    p.add_argument(
        "--sim-m", type=int, nargs="+", default=[10, 50], help="simulation: clients per step"
    )
    p.add_argument(
        "--sim-clients",
        type=int,
        default=100,
        help="simulation: num-clients (>= every --sim-m), embedded data",
    )
    p.add_argument(
        "--sim-steps",
        type=int,
        default=4,
        help="simulation: steps per run; the first is left out of the median",
    )
    p.add_argument("--sim-repeats", type=int, default=2, help="simulation: runs per (m, path)")
    p.add_argument("--ray-cpus", type=int, default=2, help="simulation: Ray CPUs")
    p.add_argument("--out", default="", help="folder for run dirs and the JSON (simulation "
                   "needs it; it must not hold runs of the same names)")  # fmt: skip
    a = p.parse_args()
    if min(a.m) < 3 or min(a.sim_m) < 3:
        p.error("secure aggregation needs m >= 3")
    if "simulation" in a.parts and (not a.out or a.sim_clients < max(a.sim_m)):
        p.error("the simulation part needs --out and --sim-clients >= every --sim-m")
    print("$ " + shlex.join([Path(sys.executable).name, *sys.argv]), flush=True)
    print("no GPU used: both parts run on the CPU (device cpu)", flush=True)
    result: dict = {"command": shlex.join(sys.argv), "load_before": load_average()}
    if "protocol" in a.parts:
        print(f"protocol, one process: B={a.batch_size} x {a.row_length}, k={a.bits}, "
              f"{a.repeats} repeat(s), torch threads {a.threads}; load {load_average()}",
              flush=True)  # fmt: skip
        result["load_before_protocol"] = load_average()
        result["protocol"] = run_protocol(a)
        result["load_after_protocol"] = load_average()
        print(protocol_table(result["protocol"]))
        print(f"load average before {result['load_before_protocol']}, after "
              f"{result['load_after_protocol']}\n", flush=True)  # fmt: skip
    if "simulation" in a.parts:
        out = Path(a.out)
        print(f"simulation, fedgs simulate: {a.sim_clients} embedded clients, B={a.batch_size}, "
              f"{a.sim_steps} steps, {a.sim_repeats} run(s) per (m, path), --ray-cpus "
              f"{a.ray_cpus}; load {load_average()}", flush=True)  # fmt: skip
        print("  e.g. " + shlex.join(simulate_command(a, a.sim_m[0], True, out / "RUN")))
        result["load_before_simulation"] = load_average()
        result["runs"], result["simulation"] = run_simulation(a, out)
        result["load_after_simulation"] = load_average()
        print(simulation_table(result["simulation"], a.sim_steps))
        print(f"load average before {result['load_before_simulation']}, after "
              f"{result['load_after_simulation']}")  # fmt: skip
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        path = Path(a.out) / "secagg_step_time.json"
        path.write_text(json.dumps(result, indent=1))
        print(f"json: {path}")


if __name__ == "__main__":
    main()
