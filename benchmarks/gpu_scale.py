"""GS-WGAN at 1,000 and 3,400 clients on a GPU: steps/s, GPU memory, ratio to the plain loop.

Usage (one command on a GPU machine, from the repository root):
    python benchmarks/gpu_scale.py --out runs/gpu-scale
For each population K and clients per step m it runs, side by side on the same settings:
  plain   ``fedgs centralized --device cuda``: one process, all K critics on the GPU;
  flower  ``fedgs simulate --device cuda --client-num-gpus F``: the real ServerApp and
          ClientApps on Ray, 1/F clients sharing the GPU at once, critics on disk.
It samples the GPU memory in use (``nvidia-smi``, every process on the GPU) while each run is
going and prints one JSON line per run and a table (median s/step over the second half of the
steps, steps/s, peak GPU memory, Flower / plain steps/s). ``--device cpu`` runs the same code
on a machine without a GPU (memory then reads "-"): what the test suite's smoke test does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from flower_overhead import load_average, median_step


def gpu_memory_mib() -> int | None:
    """Memory in use on every GPU, summed (MiB); None without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    done = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return None
    return sum(int(line) for line in done.stdout.split())


class PeakGpuMemory:
    """Samples ``gpu_memory_mib`` every half second in a thread while a run is going."""

    def __init__(self) -> None:
        self.peak: int | None = gpu_memory_mib()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            used = gpu_memory_mib()
            if used is not None:
                self.peak = max(self.peak or 0, used)

    def __enter__(self) -> PeakGpuMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def command(a: argparse.Namespace, clients: int, m: int, steps: int, path: str, out: Path):
    common = [
        "--dataset", a.dataset, "--num-clients", str(clients), "--batch-size", str(a.B),
        "--critic-steps", str(a.ndis), "--generator-width", str(a.width),
        "--critic-width", str(a.width), "--eval-every", "0", "--warm-start-steps",
        str(a.warm_start_steps), "--steps", str(steps), "--clients-per-step", str(m),
        "--device", a.device, "--out", str(out),
    ] + (["--data-dir", a.data_dir] if a.data_dir else [])  # fmt: skip
    if path == "plain":
        return [sys.executable, "-m", "fedgs.cli", "centralized", *common]
    return [
        sys.executable, "-m", "fedgs.cli", "simulate", *common,
        "--client-num-gpus", str(a.client_num_gpus if a.device != "cpu" else 0),
        "--ray-cpus", str(a.cpus), "--checkpoint-every", "100000",
    ]  # fmt: skip


def run(a: argparse.Namespace, clients: int, m: int, steps: int, path: str, out: Path) -> dict:
    env = os.environ | {"OMP_NUM_THREADS": str(a.threads)}
    started = time.monotonic()
    with PeakGpuMemory() as memory:
        done = subprocess.run(
            command(a, clients, m, steps, path, out), capture_output=True, text=True, env=env
        )
    if done.returncode != 0:
        sys.exit(f"run failed ({out}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    seconds = median_step(out / "metrics.csv")
    return {
        "clients": clients,
        "m": m,
        "path": path,
        "s_per_step": seconds,
        "steps_per_s": 1 / seconds,
        "peak_gpu_mib": memory.peak,
        "wall_s": time.monotonic() - started,
        "load": load_average(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="mnist")
    p.add_argument("--data-dir", default="../shared/data/mnist")
    p.add_argument("--clients", type=int, nargs="+", default=[1000, 3400])
    p.add_argument("--m", type=int, nargs="+", default=[1, 8], help="clients per step")
    p.add_argument("--steps", type=int, nargs="+", default=[100, 40], help="one per m (or one)")
    p.add_argument("--warm-start-steps", type=int, default=0)
    p.add_argument("--B", type=int, default=32)
    p.add_argument("--ndis", type=int, default=2)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--client-num-gpus", type=float, default=0.125, help="GPU share per client")
    p.add_argument("--cpus", type=int, default=os.cpu_count() or 1, help="Ray CPUs")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads per process")
    p.add_argument("--out", type=Path, default=Path("runs/gpu-scale"))
    a = p.parse_args()
    if len(a.steps) not in (1, len(a.m)):
        p.error("--steps takes one value or one per --m")
    rows = []
    for clients in a.clients:
        for i, m in enumerate(a.m):
            steps = a.steps[i] if len(a.steps) > 1 else a.steps[0]
            pair = {}
            for path in ("plain", "flower"):
                row = run(a, clients, m, steps, path, a.out / f"k{clients}-m{m}-{path}")
                pair[path] = row
                rows.append(row)
            pair["flower"]["ratio_to_plain"] = (
                pair["plain"]["s_per_step"] / pair["flower"]["s_per_step"]
            )
            for row in pair.values():
                print(json.dumps(row), flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "gpu_scale.json").write_text(json.dumps({"device": a.device, "rows": rows}, indent=1))
    print(f"\ndevice {a.device}, client GPU share {a.client_num_gpus}, Ray CPUs {a.cpus}")
    print("| clients | m | path | s/step | steps/s | peak GPU memory (MiB) | Flower / plain |")
    print("| ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        ratio = f"{r['ratio_to_plain']:.0%}" if "ratio_to_plain" in r else ""
        memory = "-" if r["peak_gpu_mib"] is None else str(r["peak_gpu_mib"])
        print(
            f"| {r['clients']} | {r['m']} | {r['path']} | {r['s_per_step']:.3f} | "
            f"{r['steps_per_s']:.2f} | {memory} | {ratio} |"
        )


if __name__ == "__main__":
    main()
