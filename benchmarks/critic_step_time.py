"""Step time of goal 2's recipe as the critic steps grow, and what cuts it on a 2-core CPU.

Usage: python benchmarks/critic_step_time.py --clients 20 --steps 60 --repeats 3
For each repeat it runs, one after the other (side by side, so the ratios share the machine's
load), ``fedgs simulate`` on FEMNIST writers with goal 2's options (results/SUMMARY.md) and,
per variant:
  cs4           --critic-steps 4 (the recipe measured on 308 writers)
  cs8           --critic-steps 8
  cs8-t2        --critic-steps 8 --server-threads 2 (G's work on both cores while clients wait)
  cs8-fb2-t2    the same with --fake-batches 2 (two fake batches cycled over the 8 steps)
Each run gives the median seconds per step over the second half of its steps (start-up, warm
start and first-touch excluded). It prints one JSON line per run, then per variant the median
over repeats of s/step and of its ratio to cs4 of the same repeat, and the load averages.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from flower_overhead import load_average, median_step

VARIANTS = {
    "cs4": ["--critic-steps", "4"],
    "cs8": ["--critic-steps", "8"],
    "cs8-t2": ["--critic-steps", "8", "--server-threads", "2"],
    "cs8-fb2-t2": ["--critic-steps", "8", "--fake-batches", "2", "--server-threads", "2"],
}
RECIPE = [
    "--eval-every", "0", "--warm-start-steps", "1", "--lr-critic", "1e-3",
    "--lr-generator", "5e-4", "--beta1", "0.5", "--gradient-smoothing", "1.0",
    "--label-mismatch-weight", "2.0", "--clients-per-step", "2",
    "--client-sampling", "least-queried", "--noise-multiplier", "0.8797", "--ray-cpus", "2",
]  # fmt: skip


def run(name: str, args: argparse.Namespace, repeat: int) -> float:
    out = args.out / f"{name}-r{repeat}"
    command = [
        sys.executable, "-m", "fedgs.cli", "simulate", "--dataset", "femnist",
        "--data-dir", str(args.data_dir), "--clients", str(args.clients),
        "--steps", str(args.steps), "--seed", str(repeat), "--out", str(out),
        *RECIPE, *VARIANTS[name],
    ]  # fmt: skip
    env = os.environ | {"OMP_NUM_THREADS": "1"}
    subprocess.run(command, check=True, env=env, capture_output=True)
    return median_step(out / "metrics.csv")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", type=Path, default=Path("../shared/data/femnist_leaf"))
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("runs/critic_step_time"))
    args = p.parse_args()
    loads = [load_average()]
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for repeat in range(args.repeats):
        for name in VARIANTS:
            seconds = run(name, args, repeat)
            times[name].append(seconds)
            print(json.dumps({"variant": name, "repeat": repeat, "s_per_step": seconds}))
    loads.append(load_average())
    print("| variant | s/step (median) | ratio to cs4 (median of per-repeat ratios) |")
    print("| --- | ---: | ---: |")
    for name, values in times.items():
        ratios = [v / base for v, base in zip(values, times["cs4"], strict=True)]
        print(f"| {name} | {statistics.median(values):.3f} | {statistics.median(ratios):.2f} |")
    print(f"load average before {loads[0]}, after {loads[1]}")


if __name__ == "__main__":
    main()
