"""Framework overhead: the same GS-WGAN steps as a plain PyTorch loop and through Flower.

Usage: python benchmarks/flower_overhead.py --clients 1000 --m 1 8 32 --steps 80 30 12 --repeats 3
For each repeat and each m (clients per step) it runs, one after the other on the same data and
settings (models, B, n_dis, sanitizer; no warm start, no evaluation):
  plain      ``fedgs centralized``: one process, every critic in memory;
  flower-0.1 ``fedgs simulate`` with Flower's own 0.1 s engine and grid polls;
  flower     ``fedgs simulate`` with fedgs' pending-node sweep (``--poll-seconds 0.01``).
Each run gives the median seconds per step over the second half of its steps (start-up and
first-touch excluded). It prints one JSON line per run, then per (m, path) the median over
repeats of steps/s and of the ratio to the plain run of the same repeat (side by side), and
the load average before and after. Every process runs with ``--threads`` torch threads.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

PATHS = (("plain", None), ("flower-0.1", 0.1), ("flower", 0.01))


def median_step(metrics_csv: Path) -> float:
    """Median step time over the second half of a run (steady state)."""
    with metrics_csv.open(newline="") as handle:
        seconds = [float(r["seconds"]) for r in csv.DictReader(handle)]
    steps = [b - a for a, b in zip(seconds, seconds[1:], strict=False)]
    return statistics.median(steps[len(steps) // 2 :])


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _common(a: argparse.Namespace, m: int, out: Path) -> list[str]:
    steps = a.steps[a.m.index(m)] if len(a.steps) > 1 else a.steps[0]
    return [
        "--dataset", a.dataset, "--num-clients", str(a.clients), "--batch-size", str(a.B),
        "--critic-steps", str(a.ndis), "--generator-width", str(a.width),
        "--critic-width", str(a.width), "--eval-every", "0", "--warm-start-steps", "0",
        "--steps", str(steps), "--clients-per-step", str(m), "--out", str(out),
    ] + (["--data-dir", a.data_dir] if a.data_dir else [])  # fmt: skip


def command(a: argparse.Namespace, m: int, out: Path, poll: float | None) -> list[str]:
    """The fedgs command of one run: ``poll`` None is the plain loop."""
    if poll is None:
        return [sys.executable, "-m", "fedgs.cli", "centralized", *_common(a, m, out)]
    return [
        sys.executable, "-m", "fedgs.cli", "simulate", *_common(a, m, out),
        "--poll-seconds", str(poll), "--ray-cpus", str(a.cpus),
        "--checkpoint-every", "100000",
    ]  # fmt: skip


def run(a: argparse.Namespace, m: int, out: Path, poll: float | None) -> float:
    env = os.environ | {"OMP_NUM_THREADS": str(a.threads), "MKL_NUM_THREADS": str(a.threads)}
    done = subprocess.run(command(a, m, out, poll), capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"run failed ({out}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return median_step(out / "metrics.csv")


def summarize(rows: list[dict]) -> list[dict]:
    """Per (m, path): medians over repeats of s/step and of the side-by-side ratio."""
    table = []
    for m in sorted({r["m"] for r in rows}):
        for path, _ in PATHS:
            mine = [r for r in rows if r["m"] == m and r["path"] == path]
            if not mine:
                continue
            table.append(
                {
                    "m": m,
                    "path": path,
                    "runs": len(mine),
                    "s_per_step": statistics.median(r["s_per_step"] for r in mine),
                    "steps_per_s": statistics.median(1 / r["s_per_step"] for r in mine),
                    "ratio_to_plain": statistics.median(r["ratio_to_plain"] for r in mine),
                }
            )
    return table


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="mnist")
    p.add_argument("--data-dir", default="../shared/data/mnist")
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--m", type=int, nargs="+", default=[1, 8, 32], help="clients per step")
    p.add_argument(
        "--steps", type=int, nargs="+", default=[80, 30, 12], help="steps, one per m (or one)"
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--B", type=int, default=32)
    p.add_argument("--ndis", type=int, default=2)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--cpus", type=int, default=2, help="Ray CPUs (actors of one CPU each)")
    p.add_argument("--threads", type=int, default=1, help="torch threads of every process")
    p.add_argument(
        "--paths", nargs="+", default=[p for p, _ in PATHS], choices=[p for p, _ in PATHS]
    )
    p.add_argument("--out", default="runs/overhead")
    a = p.parse_args()
    if len(a.steps) not in (1, len(a.m)):
        p.error("--steps takes one value or one per --m")
    out = Path(a.out)
    load_before, rows = load_average(), []
    for repeat in range(a.repeats):
        for m in a.m:
            plain = None
            for path, poll in PATHS:
                if path not in a.paths and path != "plain":
                    continue
                seconds = run(a, m, out / f"r{repeat}" / f"{path}-m{m}", poll)
                plain = seconds if poll is None else plain
                row = {"repeat": repeat, "m": m, "path": path, "s_per_step": seconds}
                row |= {"ratio_to_plain": plain / seconds, "load": load_average()}
                rows.append(row)
                print(json.dumps(row), flush=True)
    table = summarize(rows)
    result = {
        "rows": rows,
        "table": table,
        "load_before": load_before,
        "load_after": load_average(),
    }
    (out / "overhead.json").write_text(json.dumps(result, indent=1))
    print(f"\nload average before {load_before}, after {result['load_after']}")
    print("| m | path | runs | s/step | steps/s | steps/s vs plain |")
    print("| ---: | --- | ---: | ---: | ---: | ---: |")
    for r in table:
        print(
            f"| {r['m']} | {r['path']} | {r['runs']} | {r['s_per_step']:.3f} | "
            f"{r['steps_per_s']:.2f} | {r['ratio_to_plain']:.0%} |"
        )


if __name__ == "__main__":
    main()
