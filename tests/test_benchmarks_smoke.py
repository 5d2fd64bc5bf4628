"""CI-sized runs of every benchmark script: they finish and their outputs are complete and
consistent. Never a speed assertion: timings on CI machines mean nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
TINY = ["--dataset", "embedded", "--data-dir", ""]


def _run(script: str, *args: str, timeout: int = 300) -> str:
    env = os.environ | {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_flower_overhead(tmp_path: Path) -> None:
    out = _run("flower_overhead.py", *TINY, "--clients", "4", "--m", "1", "--steps", "4",
               "--repeats", "1", "--paths", "flower", "--width", "4", "--B", "8",
               "--out", str(tmp_path))  # fmt: skip
    result = json.loads((tmp_path / "overhead.json").read_text())
    assert [(r["m"], r["path"], r["runs"]) for r in result["table"]] == [
        (1, "plain", 1),
        (1, "flower", 1),
    ]
    plain, flower = result["table"]
    assert plain["ratio_to_plain"] == 1.0 and plain["s_per_step"] > 0
    assert flower["ratio_to_plain"] == pytest.approx(plain["s_per_step"] / flower["s_per_step"])
    assert "| 1 | flower | 1 |" in out and result["load_before"]


def test_profile_step(tmp_path: Path) -> None:
    overhead = tmp_path / "overhead.json"
    table = [
        {"m": 1, "path": "plain", "s_per_step": 0.2},
        {"m": 1, "path": "flower", "s_per_step": 0.3},
    ]
    overhead.write_text(json.dumps({"table": table}))
    out = _run("profile_step.py", *TINY, "--clients", "4", "--repeats", "2", "--width", "4",
               "--B", "8", "--overhead", str(overhead), "--out", str(tmp_path))  # fmt: skip
    result = json.loads((tmp_path / "profile.json").read_text())
    parts = {r["part"]: r for r in result["rows"]}
    assert len(parts) >= 15 and all(r["ms"] > 0 and r["calls"] >= 1 for r in parts.values())
    assert parts["critic step (WGAN-GP, Adam)"]["calls"] == 2  # n_dis critic steps per query
    assert "Flower round trip" in out and "measured step: flower" in out
    assert not list(tmp_path.glob("tmp*"))  # the scratch client state is removed


def test_gpu_scale_runs_its_code_on_the_cpu(tmp_path: Path) -> None:
    _run("gpu_scale.py", *TINY, "--device", "cpu", "--clients", "4", "--m", "1", "--steps", "4",
         "--width", "4", "--B", "8", "--cpus", "2", "--out", str(tmp_path))  # fmt: skip
    result = json.loads((tmp_path / "gpu_scale.json").read_text())
    plain, flower = result["rows"]
    assert (plain["path"], flower["path"]) == ("plain", "flower") and result["device"] == "cpu"
    assert flower["ratio_to_plain"] == pytest.approx(plain["s_per_step"] / flower["s_per_step"])
    config = json.loads((tmp_path / "k4-m1-flower" / "config.json").read_text())
    assert config["device"] == "cpu" and config["client-num-gpus"] == 0.0


def test_population(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _run("population.py", *TINY, "--clients", "6", "--warm-start-steps", "1", "--steps", "4",
         "--ndis", "1", "--out", str(out))  # fmt: skip
    result = json.loads((out / "population.json").read_text())
    assert result["warm_started_clients"] == 6 and result["client_state_files"] == 6
    assert result["peak_memory_gib"] > 0 and result["client_state_mib"] > 0
    assert result["warm_start_s"] > 0 and result["s_per_step"] > 0


FEMNIST = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "femnist_leaf"


@pytest.mark.skipif(not FEMNIST.is_dir(), reason=f"real FEMNIST data not found at {FEMNIST}")
def test_score_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "fedgs.cli", "centralized", "--dataset", "femnist",
         "--data-dir", str(FEMNIST), "--num-clients", "3", "--steps", "2",
         "--warm-start-steps", "1", "--batch-size", "8", "--critic-steps", "1",
         "--generator-width", "4", "--critic-width", "4", "--eval-every", "0",
         "--out", str(run)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    # in two batches, as results/log/quality.md's table was made: the run alone, then the
    # controls with it
    instrument = ["--data-dir", str(FEMNIST), "--clients", "3", "--feature-samples", "100",
                  "--epochs", "1"]  # fmt: skip
    run_rows, rows = tmp_path / "run_rows.json", tmp_path / "rows.json"
    _run("score_run.py", str(run), *instrument, "--samples", "200", "--no-controls",
         "--json", str(run_rows), timeout=900)  # fmt: skip
    curve = tmp_path / "curve.png"
    out = _run("score_run.py", *instrument, "--samples", "200", "--rows", str(run_rows),
               "--json", str(rows), "--curve", str(curve), timeout=900)  # fmt: skip
    other = subprocess.run(
        [sys.executable, str(BENCHMARKS / "score_run.py"), *instrument, "--samples", "300",
         "--no-controls", "--rows", str(run_rows)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert other.returncode != 0 and "scored by another instrument" in other.stderr
    result = json.loads(rows.read_text())
    names = [r["name"] for r in result["rows"]]
    assert names == ["run", "real training writers", "lookup k=1", "lookup k=5",
                     "public fonts", "untrained generator", "flat grey"]  # fmt: skip
    assert result["instrument"]["split"]["clients"] == 3
    assert result["rows"][0]["epsilon"] != "none"  # with its threat model and accountant
    run_row = result["rows"][0]
    assert run_row["epsilon_value"] > 0 and run_row["threat_model"] == "untrusted-server"
    assert run_row["strategy"] == "gswgan" and curve.stat().st_size > 0
    drawn = curve.with_suffix(".csv").read_text().splitlines()
    assert drawn[1].startswith("run,GS-WGAN (untrusted server),untrusted-server,run,")
    assert sum(line.startswith("control,") for line in drawn) == 5
    assert len(result["rows"][0]["coverage_per_class"]) == 10
    assert "| run |" in out and "bars passed" in out


def test_noise_cost() -> None:
    out = _run("noise_cost.py", "--repeats", "2")
    rows = [line for line in out.splitlines() if line.startswith("sanitizer ")]
    assert len(rows) == 2 and "of a step" in out
    assert all(float(line.split(":")[1].split()[0]) > 0 for line in rows)


def test_cohort_critic_batching_paths_agree() -> None:
    """The batched (vmap) and one-after-the-other updates must give the same critics, or the
    script's timing compares two different computations."""
    out = _run("cohort_critic_batching.py", "--critics", "2", "--critic-steps", "2",
               "--repeats", "1")  # fmt: skip
    first, *_ = out.splitlines()
    assert json.loads(first)["max_abs_parameter_difference"] < 1e-4
    summary = json.loads(out[out.index("{\n") :])
    assert summary["critics"] == 2 and summary["median_loop_over_vmap"] > 0
