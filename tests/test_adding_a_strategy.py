"""docs/architecture.md "Adding a strategy" proven: a strategy that lives only under
``tests/toy_algorithm`` is registered through ``FEDGS_ALGORITHMS`` and runs end to end through
Flower's real simulation engine (driver and Ray workers each read the registry at import); the node
gate serves it only to nodes whose policy names it. Without the registration the same command
fails."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from toy_algorithm import entry

from fedgs.algorithms import ALGORITHMS, ENV_VAR, IDENTIFY, WARM_START, registered
from fedgs.privacy.teacher_ledger import TeacherLedger

TESTS = Path(__file__).resolve().parent
TOY = "toy_algorithm.entry:TOY"
SMALL = {
    "num-clients": 3,
    "batch-size": 8,
    "generator-width": 4,
    "critic-width": 4,
    "critic-steps": 2,
    "warm-start-steps": 0,
    "eval-every": 0,
    "teachers-per-step": 3,
    "datalens-top-k": 20,
    "datalens-noise-std": 1.0,
}


def _env(algorithms: str | None) -> dict[str, str]:
    """This process's environment with ``tests/`` and the checkout first on the import path
    (inherited by the simulation's Ray workers) and FEDGS_ALGORITHMS set or removed."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    paths = [str(TESTS), str(TESTS.parent), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.pop(ENV_VAR, None)
    if algorithms is not None:
        env[ENV_VAR] = algorithms
    return env


def _python(args: list[str], algorithms: str | None, cwd: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, *args]
    return subprocess.run(
        command, env=_env(algorithms), cwd=cwd, capture_output=True, text=True, timeout=600
    )


# --- the registration, unit by unit


def test_registered_reads_module_attr_entries() -> None:
    assert registered("", ALGORITHMS) == {}
    assert registered(f" {TOY} , ", ALGORITHMS) == {"toy": entry.TOY}
    assert "toy" not in ALGORITHMS  # nothing registered in this process


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("toy_algorithm.entry", "expected 'module:attr'"),
        ("toy_algorithm.entry:TOY:x", "expected 'module:attr'"),
        (":TOY", "expected 'module:attr'"),
        ("no_such_module_fedgs:TOY", "cannot load it.*no_such_module_fedgs"),
        ("toy_algorithm.entry:MISSING", "cannot load it.*MISSING"),
        ("toy_algorithm.entry:NOT_AN_ALGORITHM", "not a fedgs.algorithms.Algorithm"),
        ("toy_algorithm.entry:CLASHING_NAME", "strategy name 'datalens' is already registered"),
        ("toy_algorithm.entry:CLASHING_QUERY", "'train.datalens' is already datalens's"),
        ("toy_algorithm.entry:BAD_QUERY", "must be 'train.<name>'"),
        (f"{TOY},{TOY}", "strategy name 'toy' is already registered"),
    ],
)
def test_a_bad_entry_fails_clearly(spec: str, error: str) -> None:
    with pytest.raises(ValueError, match=f"{ENV_VAR} entry .*{error}"):
        registered(spec, ALGORITHMS)


def test_the_warm_start_and_the_identification_are_no_queries() -> None:
    assert entry.WARM_CLASH.query == WARM_START
    with pytest.raises(ValueError, match="already the warm start's"):
        registered("toy_algorithm.entry:WARM_CLASH", ALGORITHMS)
    assert entry.IDENTIFY_CLASH.query == IDENTIFY
    with pytest.raises(ValueError, match="already the identification's"):
        registered("toy_algorithm.entry:IDENTIFY_CLASH", ALGORITHMS)


PROBE_IMPORT = """
from fedgs.algorithms import STRATEGIES
from fedgs.client import gate
from fedgs.privacy.policy import NodePolicy
from fedgs.run_config import RunConfig
policy = NodePolicy.deployment_default("toy")
print(STRATEGIES, gate.MESSAGE_TYPES, RunConfig(strategy="toy").strategy, policy.epsilon_budget,
      gate.allowed_message_types(policy))
"""


def test_the_environment_registers_in_every_layer(tmp_path) -> None:
    done = _python(["-c", PROBE_IMPORT], TOY, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "'toy')" in done.stdout and "'train.toy'" in done.stdout
    # a trusted-aggregator strategy: no untrusted-server budget; its query, the identification
    # and the warm start
    assert "toy 0.0 ('train.toy', 'train.identify', 'train.warmstart')" in done.stdout
    bad = _python(["-c", PROBE_IMPORT], "toy_algorithm.entry:CLASHING_NAME", tmp_path)
    assert bad.returncode != 0 and "already registered" in bad.stderr


# --- end to end, through Flower's real simulation engine


def _simulate(run_dir: Path, algorithms: str | None) -> subprocess.CompletedProcess:
    options = [f"--{k}={v}" for k, v in SMALL.items()]
    args = ["-m", "fedgs.cli", "simulate", "--strategy", "toy", "--steps", "2", *options]
    args += ["--ray-cpus", "2", "--object-store-mb", "256", "--out", str(run_dir)]
    return _python(args, algorithms, run_dir.parent)


@pytest.mark.slow
def test_a_registered_strategy_runs_and_reports(tmp_path) -> None:
    run_dir = tmp_path / "run"
    unregistered = _simulate(run_dir, None)
    assert unregistered.returncode != 0
    assert "unknown strategy 'toy'" in unregistered.stdout + unregistered.stderr

    done = _simulate(run_dir, TOY)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 toy steps" in done.stdout
    with (run_dir / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["step"]) for r in rows] == [1, 2]
    assert all(int(r["answered"]) == 3 == int(r["sampled"]) for r in rows)
    assert all(int(r["bytes_up"]) > 0 for r in rows)

    # paid in the shared teacher ledger, reported by the one privacy.json writer
    ledger = TeacherLedger.from_json((run_dir / "teacher_ledger.json").read_text())
    assert sorted(ledger.step_counts().values()) == [2, 2, 2]
    privacy = json.loads((run_dir / "privacy.json").read_text())
    assert privacy["version"] == 2 and privacy["strategy"] == "toy" and privacy["steps"] == 2
    aggregator = privacy["trusted_aggregator"]
    assert aggregator["threat_model"] == "trusted-aggregator"
    assert privacy["neighbouring"] == "replace-one"
    assert aggregator["epsilon"] == pytest.approx(float(rows[-1]["epsilon_trusted_aggregator"]))
    assert aggregator["epsilon"] > 0
    assert privacy["mechanism"]["name"].startswith("toy")
    assert json.loads((run_dir / "config.json").read_text())["strategy"] == "toy"


@pytest.mark.slow
def test_the_gate_serves_it_only_where_the_policy_names_it(tmp_path) -> None:
    done = _python(["-m", "toy_algorithm.gate_probe", str(tmp_path / "probe")], TOY, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads((tmp_path / "probe" / "probe.json").read_text())
    toy = [r for r in seen if r["type"] == "train.toy"]
    foreign = [r for r in seen if r["type"] == "train.datalens"]
    assert len(toy) == 3 and len(foreign) == 3
    # the toy nodes answer with votes under the toy policy
    answered = [r for r in toy if "code" not in r]
    assert sorted(r["partition"] for r in answered) == [1, 2]
    for reply in answered:
        assert reply["records"] == ["votes"] and reply["policy_used"]["strategy"] == "toy"
    # the node whose policy-strategy is gswgan refuses the toy query
    (refused,) = [r for r in toy if "code" in r]
    assert refused["code"] == 4403 and "serves only gswgan" in refused["reason"]
    # a message type no node's policy names is refused everywhere
    assert all(r["code"] == 4403 and "not 'train.datalens'" in r["reason"] for r in foreign)
    assert sum("serves only toy" in r["reason"] for r in foreign) == 2
