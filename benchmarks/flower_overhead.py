"""Framework overhead: the same GS-WGAN steps as a plain PyTorch loop and through Flower.

Usage: python benchmarks/flower_overhead.py --clients 1000 --steps 60 --m 1 8 32 --out runs/overhead
For each m (clients per step) it runs, one after the other on the same data and settings
(models, B, n_dis, sanitizer; no warm start, no evaluation):
  plain      fedgs.training.local_loop: one process, every critic in memory;
  flower-0.1 fedgs simulate with Flower's own 0.1 s engine and grid polls;
  flower     fedgs simulate with fedgs' pending-node sweep (--poll-seconds 0.01).
It prints one JSON line per run (median seconds per step over the second half of the steps,
steps/s, ratio to the plain loop of the same m) and a table at the end.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path


def _median_step(metrics_csv: Path) -> float:
    with metrics_csv.open(newline="") as handle:
        seconds = [float(r["seconds"]) for r in csv.DictReader(handle)]
    steps = [b - a for a, b in zip(seconds, seconds[1:], strict=False)]
    return statistics.median(steps[len(steps) // 2 :])


def _common(a: argparse.Namespace) -> list[str]:
    return [
        "--dataset", a.dataset, "--num-clients", str(a.clients), "--batch-size", str(a.B),
        "--critic-steps", str(a.ndis), "--generator-width", str(a.width),
        "--critic-width", str(a.width), "--eval-every", "0", "--warm-start-steps", "0",
        "--steps", str(a.steps),
    ] + (["--data-dir", a.data_dir] if a.data_dir else [])  # fmt: skip


def run_plain(a: argparse.Namespace, m: int, out: Path) -> float:
    command = [sys.executable, "-m", "fedgs.cli", "centralized", *_common(a)]
    command += ["--clients-per-step", str(m), "--out", str(out)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return _median_step(out / "metrics.csv")


def run_flower(a: argparse.Namespace, m: int, out: Path, poll: float) -> float:
    command = [sys.executable, "-m", "fedgs.cli", "simulate", *_common(a)]
    command += ["--clients-per-step", str(m), "--out", str(out), "--poll-seconds", str(poll)]
    command += ["--ray-cpus", str(a.cpus), "--checkpoint-every", str(a.steps)]
    subprocess.run(command, check=True, capture_output=True, text=True)
    return _median_step(out / "metrics.csv")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="mnist")
    p.add_argument("--data-dir", default="../shared/data/mnist")
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--m", type=int, nargs="+", default=[1, 8, 32], help="clients per step")
    p.add_argument("--B", type=int, default=32)
    p.add_argument("--ndis", type=int, default=2)
    p.add_argument("--width", type=int, default=16)
    p.add_argument(
        "--cpus", type=int, default=2, help="Ray CPUs; the plain loop uses torch threads"
    )
    p.add_argument("--out", default="runs/overhead")
    a = p.parse_args()
    out = Path(a.out)
    rows = []
    for m in a.m:
        plain = run_plain(a, m, out / f"plain-m{m}")
        for label, poll in (("flower-0.1", 0.1), ("flower", 0.01)):
            flower = run_flower(a, m, out / f"{label}-m{m}", poll)
            row = {
                "m": m,
                "path": label,
                "plain_s_per_step": plain,
                "flower_s_per_step": flower,
                "plain_steps_per_s": 1 / plain,
                "flower_steps_per_s": 1 / flower,
                "ratio": plain / flower,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| m | path | plain s/step | Flower s/step | Flower / plain steps/s |")
    print("| --- | --- | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r['m']} | {r['path']} | {r['plain_s_per_step']:.3f} | "
            f"{r['flower_s_per_step']:.3f} | {r['ratio']:.0%} |"
        )


if __name__ == "__main__":
    main()
