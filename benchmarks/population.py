"""A whole population on one machine: K clients warm-started, then T generator steps on Flower.

Usage: python benchmarks/population.py --clients 3400 --warm-start-steps 3 --steps 200 \
           --out runs/population
Runs ``fedgs simulate`` under ``peak_memory.py`` (RSS of every process of the run, summed) and
prints one JSON line: peak memory, wall time, warm-start time and clients (``warm_start.json``),
median s/step of the generator steps (second half), and the disk used by the clients' state.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from flower_overhead import load_average, median_step

from fedgs.client.state_store import ClientStateStore


def simulate_command(a: argparse.Namespace) -> list[str]:
    return [
        sys.executable, "-m", "fedgs.cli", "simulate", "--dataset", a.dataset,
        "--num-clients", str(a.clients), "--warm-start-steps", str(a.warm_start_steps),
        "--steps", str(a.steps), "--critic-steps", str(a.ndis), "--eval-every", "0",
        "--checkpoint-every", str(max(a.steps // 4, 1)), "--ray-cpus", str(a.cpus),
        "--out", str(a.out),
    ] + (["--data-dir", a.data_dir] if a.data_dir else []) + (
        ["--labels", a.labels] if a.labels else []
    )  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="mnist")
    p.add_argument("--data-dir", default="../shared/data/mnist")
    p.add_argument("--labels", default=None, help="femnist: digits (default), merged36, all62")
    p.add_argument("--clients", type=int, default=3400)
    p.add_argument("--warm-start-steps", type=int, default=3)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--ndis", type=int, default=2)
    p.add_argument("--cpus", type=int, default=2, help="Ray CPUs")
    p.add_argument("--out", type=Path, default=Path("runs/population"))
    a = p.parse_args()
    load_before = load_average()
    monitor = [sys.executable, str(Path(__file__).with_name("peak_memory.py")), "--"]
    done = subprocess.run(monitor + simulate_command(a), capture_output=True, text=True)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if done.returncode != 0 or not last.startswith("peak memory"):
        sys.exit(f"run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    # "peak memory (all processes): 3.11 GiB; wall 88 s; exit 0"
    peak_gib = float(last.split(":")[1].split("GiB")[0])
    wall = float(last.split("wall")[1].split("s;")[0])
    warm = json.loads((a.out / "warm_start.json").read_text()) if a.warm_start_steps else {}
    state = ClientStateStore(a.out / "client-state")
    files = list(state.root.glob("*.pt"))
    result = {
        "clients": a.clients,
        "warm_start_steps": a.warm_start_steps,
        "steps": a.steps,
        "peak_memory_gib": peak_gib,
        "wall_s": wall,
        "warm_start_s": warm.get("seconds"),
        "warm_started_clients": len(warm.get("trained", [])),
        "s_per_step": median_step(a.out / "metrics.csv"),
        "client_state_files": len(files),
        "client_state_mib": state.disk_bytes() / 2**20,
        "client_state_file_kib_median": statistics.median(f.stat().st_size for f in files) / 1024
        if files
        else 0.0,
        "load_before": load_before,
        "load_after": load_average(),
    }
    (a.out / "population.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
