"""``fedgs privacy --secure-aggregation``: the plan charges what a real run's ledger would.

Each figure is recomputed here the way a run computes it: a RunConfig with the run-config keys,
its calibrated noise, ``step_event`` charged once per query into a ``PrivacyLedger`` and the
run's own report (``secure_exchange.secure_summary``), or the step events composed through the
project's accountant.
"""

from __future__ import annotations

import argparse
import json
import math

import pytest
from dp_accounting import dp_event

from fedgs.privacy import PrivacyLedger, cli, get_accountant, simulate_query_counts
from fedgs.privacy.calibration import DEFAULT_TOLERANCE
from fedgs.privacy.distributed_accounting import step_event
from fedgs.privacy.threat_models import ADD_REMOVE, REPLACE_ONE, SECURE_AGGREGATION
from fedgs.run_config import RunConfig

K, T, B, DELTA = 300, 120, 32, 1e-5
BASE = ["--secure-aggregation", "--clients", str(K), "--batch-size", str(B), "--delta", str(DELTA)]


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fedgs")
    cli.register(parser.add_subparsers(dest="command", required=True))
    try:
        args = parser.parse_args(["privacy", *argv])
    except SystemExit as exit_:
        return int(exit_.code)
    return args.handler(args)


def plan(capsys, *argv: str) -> dict:
    assert run([*BASE, *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def gswgan_config(cohort: int, sigma: float, **keys: object) -> RunConfig:
    """The run config a real secure GS-WGAN run would start with."""
    values = {"secure-aggregation": True, "clients-per-step": cohort, "noise-multiplier": sigma}
    return RunConfig.from_user_config(values | {"batch-size": B, "delta": DELTA} | keys)


def ledger_summary(config: RunConfig, params, relation: str, queries: int) -> dict:
    """What the run reports after charging one client ``queries`` secure steps."""
    from fedgs.server.secure_exchange import secure_summary

    ledger = PrivacyLedger()
    for _ in range(queries):
        ledger.record("client-0", step_event(params, relation))
    ledger.record("client-1", step_event(params, relation))  # a less-queried client
    return secure_summary(ledger, params, relation, config)


def composed(params, relation: str, queries: int) -> float:
    event = dp_event.SelfComposedDpEvent(step_event(params, relation), queries)
    return get_accountant("autodp-rdp").epsilon(event, DELTA)


@pytest.mark.parametrize("rule", ["uniform", "least-queried"])
def test_gswgan_plan_equals_what_the_run_charges(rule, capsys):
    out = plan(
        capsys,
        *("--cohort", "10", "--steps", str(T), "--noise-multiplier", "6"),
        *("--client-sampling", rule, "--seed", "3", "--threshold", "6"),
    )
    worst = int(simulate_query_counts(K, T, 10, seed=3, rule=rule).max())
    if rule == "least-queried":
        assert worst == math.ceil(T * 10 / K)
    assert out["worst_client_queries"] == worst
    config = gswgan_config(10, 6.0, **{"secagg-threshold": 6, "client-sampling": rule})
    params = config.secure_noise().params
    summary = ledger_summary(config, params, REPLACE_ONE, worst)
    assert out["epsilon_secure_aggregation"] == summary["secure_aggregation"]["epsilon"]
    assert out["epsilon_secure_aggregation"] == pytest.approx(composed(params, REPLACE_ONE, worst))
    assert (
        out["epsilon_secure_aggregation_ddg_rdp"]
        == summary["secure_aggregation_ddg_rdp"]["epsilon"]
    )
    assert out["epsilon_local_noise_only"] == summary["untrusted_server"]["epsilon"]
    assert out["secagg"]["threshold"] == 6 and out["secagg"]["colluders"] == 5
    assert out["secagg"]["min_survivors"] == config.secagg_settings().min_survivors == 9
    assert out["secagg"]["honest_survivors"] == 9 - 5
    assert out["secagg"]["survivor_noise_multiplier"] == pytest.approx(6 / math.sqrt(4), 1e-6)
    assert out["neighbouring"] == REPLACE_ONE and out["threat_model"] == SECURE_AGGREGATION
    assert 0 < out["epsilon_secure_aggregation_ddg_rdp"] < out["epsilon_secure_aggregation"]
    assert out["epsilon_local_noise_only"] > out["epsilon_secure_aggregation"]


def test_fedavg_plan_uses_the_run_critic_and_add_remove(capsys):
    from fedgs.training.fedavg_gan import FedAvgGANTrainer

    argv = ["--strategy", "fedavg-gan", "--fedavg-models", "gswgan", "--cohort", "5"]
    out = plan(capsys, *argv, "--steps", str(T), "--noise-multiplier", "1.5")
    values = {"strategy": "fedavg-gan", "secure-aggregation": True, "fedavg-models": "gswgan"}
    values |= {"fedavg-clients-per-round": 5, "fedavg-noise-multiplier": 1.5, "delta": DELTA}
    config = RunConfig.from_user_config(values)
    trainer = FedAvgGANTrainer(10, config.fedavg_gan(), seed=0)  # as FedAvgGANRun builds it
    dimension = sum(p.numel() for p in trainer.critic.parameters())
    params = config.secure_noise(config.secure_vector(dimension)).params
    worst = int(simulate_query_counts(K, T, 5, seed=0).max())
    summary = ledger_summary(config, params, ADD_REMOVE, worst)
    assert out["neighbouring"] == ADD_REMOVE
    assert out["epsilon_secure_aggregation"] == summary["secure_aggregation"]["epsilon"]
    assert (
        out["epsilon_secure_aggregation_ddg_rdp"]
        == summary["secure_aggregation_ddg_rdp"]["epsilon"]
    )
    assert out["epsilon_local_noise_only"] == summary["untrusted_server"]["epsilon"]
    assert out["bytes"]["up_per_query"] == 8 * params.padded_dimension


def test_dp_merf_plan_counts_one_release_per_writer_as_its_run_charges(capsys):
    """DP-MERF asks each writer once: one secure step for every writer, whatever the steps,
    with the noise calibrated for its (D + 1) x 10 release."""
    from fedgs.privacy.release_ledger import ReleaseLedger
    from fedgs.server.secure_exchange import secure_summary

    argv = ["--strategy", "dp-merf", "--cohort", "30", "--steps", "10"]
    out = plan(capsys, *argv, "--target-epsilon", "10")
    assert out["worst_client_queries"] == 1
    values = {"strategy": "dp-merf", "secure-aggregation": True, "clients-per-step": 30}
    values |= {"merf-noise-multiplier": out["noise_multiplier"], "delta": DELTA}
    config = RunConfig.from_user_config(values)
    params = config.secure_noise(config.secure_vector(config.merf_dimension)).params
    ledger = ReleaseLedger()
    ledger.record("writer-0", step_event(params, REPLACE_ONE))
    summary = secure_summary(ledger, params, REPLACE_ONE, config)
    assert out["epsilon_secure_aggregation"] == summary["secure_aggregation"]["epsilon"]
    assert out["epsilon_secure_aggregation"] <= 10 < composed(params, REPLACE_ONE, 2)
    assert out["bytes"]["up_per_query"] == 8 * params.padded_dimension


def test_calibration_meets_the_target_and_a_slightly_smaller_multiplier_does_not(capsys):
    out = plan(capsys, "--cohort", "20", "--steps", str(T), "--target-epsilon", "2")
    sigma, worst = out["noise_multiplier"], out["worst_client_queries"]
    assert worst == int(simulate_query_counts(K, T, 20, seed=0).max())

    def epsilon(multiplier: float) -> float:
        params = gswgan_config(20, multiplier).secure_noise().params
        return composed(params, REPLACE_ONE, worst)

    assert epsilon(sigma) <= 2 < epsilon(sigma - DEFAULT_TOLERANCE)
    assert out["epsilon_secure_aggregation"] == pytest.approx(epsilon(sigma))


def test_plan_gives_the_most_queries_and_steps_within_the_target(capsys):
    out = plan(capsys, "--cohort", "10", "--noise-multiplier", "20", "--target-epsilon", "3")
    q, steps = out["max_queries_per_client"], out["max_steps"]
    params = gswgan_config(10, 20.0).secure_noise().params
    assert composed(params, REPLACE_ONE, q) <= 3 < composed(params, REPLACE_ONE, q + 1)
    assert simulate_query_counts(K, steps, 10, seed=0).max() <= q
    assert simulate_query_counts(K, steps + 1, 10, seed=0).max() > q


def test_json_keys(capsys):
    out = plan(capsys, "--cohort", "10", "--steps", str(T), "--noise-multiplier", "6")
    for key in (
        "strategy",
        "cohort",
        "noise_multiplier",
        "delta",
        "neighbouring",
        "threat_model",
        "accountant",
        "threat_models",
        "worst_client_queries",
        "expected_queries",
        "epsilon_secure_aggregation",
        "epsilon_secure_aggregation_ddg_rdp",
        "epsilon_local_noise_only",
        "secagg",
        "bytes",
    ):
        assert key in out, key
    from fedgs.server.secure_exchange import SECURE_COLUMNS

    assert set(SECURE_COLUMNS) <= set(out["threat_models"])  # the run's metrics columns
    assert out["bytes"]["up_per_query"] == 8 * 32768  # B * 784 values padded to 2^15, int64
    several = plan(capsys, "--cohort", "10", "20", "--steps", str(T), "--noise-multiplier", "6")
    assert [row["cohort"] for row in several["cohorts"]] == [10, 20]


def test_table_prints_one_line_per_cohort(capsys):
    cohorts = ["10", "20", "50"]
    assert run([*BASE, "--cohort", *cohorts, "--steps", str(T), "--target-epsilon", "5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split() for line in lines if line.split()[0].isdigit()]
    assert [row[0] for row in rows] == cohorts
    for cohort, row in zip(cohorts, rows, strict=True):
        single = plan(capsys, "--cohort", cohort, "--steps", str(T), "--target-epsilon", "5")
        assert float(row[4]) == pytest.approx(single["noise_multiplier"], abs=1e-4)
        assert float(row[6]) == pytest.approx(single["noise_multiplier"] / int(cohort), abs=1e-4)
        assert int(row[8]) == single["worst_client_queries"]
        assert float(row[9]) == pytest.approx(single["epsilon_secure_aggregation"], abs=1e-4)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cohort", "10", "--min-survivors", "11"], "secagg-min-survivors must lie in [5, 10]"),
        (["--cohort", "10", "--secagg-threshold", "4"], "secagg-threshold must lie in [5, 9]"),
        (["--cohort", "2"], "clients-per-step >= 3"),
        (["--cohort", "400"], "--cohort 400 > --clients 300"),
        ([], "needs --cohort"),
        (["--cohort", "10", "--accountant", "dp-accounting-pld"], "needs an RDP accountant"),
        (["--cohort", "10", "--clients-per-step", "5"], "the cohort is --cohort"),
        (["--cohort", "10", "--fedavg-models", "gswgan"], "--strategy fedavg-gan"),
        (
            ["--cohort", "10", "--strategy", "fedavg-gan", "--client-sampling", "least-queried"],
            "client-sampling is implemented for gswgan only",
        ),
    ],
)
def test_bad_inputs_exit_2_with_the_reason(argv, message, capsys):
    assert run([*BASE, *argv, "--steps", str(T), "--noise-multiplier", "6"]) == 2
    assert message in capsys.readouterr().err


def test_secure_options_need_secure_aggregation(capsys):
    argv = ["--clients", "300", "--batch-size", "32", "--delta", "1e-5", "--steps", "10"]
    assert run([*argv, "--noise-multiplier", "6", "--cohort", "10", "--bits", "20"]) == 2
    assert "--cohort, --secagg-bits: for a secure-aggregation plan" in capsys.readouterr().err


def test_unreachable_targets_exit_1(capsys):
    assert run([*BASE, "--cohort", "10", "--steps", str(T), "--target-epsilon", "0.05",
                "--bits", "8"]) == 1  # fmt: skip
    assert "raise secagg-bits" in capsys.readouterr().err
    assert run([*BASE, "--cohort", "3", "--noise-multiplier", "0.5", "--target-epsilon", "1"]) == 1
    assert "one secure step" in capsys.readouterr().err


def test_help_explains_the_secure_threat_model(capsys):
    assert run(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for phrase in (
        "honest-but-curious server",
        "at most t-1 clients colluding",
        "at least m_min surviving",
        "Sybil",
        "ddg-rdp",
        "local noise only",
        "--secagg-min-survivors SECAGG_MIN_SURVIVORS, --min-survivors",
    ):
        assert phrase in text, phrase
