"""``fedgs privacy`` through its own ``register`` (independent of the other subcommands)."""

from __future__ import annotations

import argparse
import json

import pytest
from autodp import rdp_acct, rdp_bank

from fedgs.privacy import cli, get_accountant, simulate_query_counts, untrusted_client_event

PAPER_FEDERATED = [
    "--clients",
    "866",
    "--steps",
    "30000",
    "--batch-size",
    "32",
    "--noise-multiplier",
    "1.07",
    "--delta",
    "1.15e-3",
]


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fedgs")
    cli.register(parser.add_subparsers(dest="command", required=True))
    try:
        args = parser.parse_args(["privacy", *argv])
    except SystemExit as exit_:
        return int(exit_.code)
    return args.handler(args)


def test_json_reports_every_threat_model(capsys):
    assert run([*PAPER_FEDERATED, "--json", "--seed", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in (
        "epsilon_untrusted_expected",
        "epsilon_untrusted_worst_client",
        "epsilon_trusted_sampler",
        "epsilon_paper",
        "accountant",
        "worst_client_queries",
        "expected_queries",
        "threat_models",
    ):
        assert key in out
    assert out["accountant"] == "autodp-rdp"
    assert out["epsilon_paper"] == pytest.approx(598.6, abs=1.0)
    assert out["expected_queries"] == pytest.approx(30000 / 866)
    worst = int(simulate_query_counts(866, 30000, 1, seed=5).max())
    assert out["worst_client_queries"] == worst
    acct = rdp_acct.anaRDPacct()
    acct.compose_mechanism(lambda a: rdp_bank.RDP_gaussian({"sigma": 1.07}, a), coeff=32 * worst)
    assert out["epsilon_untrusted_worst_client"] == pytest.approx(acct.get_eps(1.15e-3))
    assert out["epsilon_untrusted_worst_client"] > out["epsilon_untrusted_expected"]
    assert out["threat_models"]["epsilon_untrusted_worst_client"] == "untrusted-server"
    assert out["threat_models"]["epsilon_trusted_sampler"] == "trusted-sampler"


def test_centralized_setting_reports_the_papers_ten(capsys):
    argv = [
        "--clients",
        "1000",
        "--steps",
        "20000",
        "--batch-size",
        "32",
        "--noise-multiplier",
        "1.07",
        "--delta",
        "1e-5",
        "--setting",
        "centralized",
        "--json",
    ]
    assert run(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["epsilon_paper"] == pytest.approx(9.99, abs=0.05)


def test_text_output_labels_each_number(capsys):
    assert run([*PAPER_FEDERATED, "--accountant", "dp-accounting-rdp"]) == 0
    text = capsys.readouterr().out
    assert text.count("[dp-accounting-rdp]") == 3 and "[autodp-rdp]" in text
    assert "untrusted-server, most-queried client" in text and "trusted-sampler" in text
    # the trusted-sampler line names the bound it reports (here the untrusted-server one)
    assert "tightest valid bound: untrusted-server bound [dp-accounting-rdp]" in text
    assert "trusted-sampler bounds (the smallest is reported): autodp-rdp" in text


ISSUE_40 = ["--clients", "3400", "--steps", "2000", "--batch-size", "32"]
ISSUE_40 += ["--noise-multiplier", "1.5", "--delta", "1e-5"]
FIRST_RUN = ["--clients", "50", "--steps", "200", "--batch-size", "32"]
FIRST_RUN += ["--noise-multiplier", "1.07", "--delta", "1e-5"]
STRONG_NOISE = ["--clients", "50", "--steps", "400", "--batch-size", "1"]
STRONG_NOISE += ["--noise-multiplier", "8", "--delta", "1e-5"]


@pytest.mark.parametrize("plan", [ISSUE_40, FIRST_RUN, STRONG_NOISE])
def test_the_trusted_sampler_figure_is_the_tightest_valid_bound(plan, capsys):
    """Never above the untrusted-server figure (issue 40: 473.5 was printed beside 76, and
    4,175 beside 165): the smallest of each RDP accountant's amplified bound and that figure."""
    from fedgs.privacy.events import trusted_sampler_event

    assert run([*plan, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    untrusted = out["epsilon_untrusted_worst_client"]
    p = out["parameters"]
    event = trusted_sampler_event(
        p["steps"], p["clients"], p["clients_per_step"], p["noise_multiplier"], p["batch_size"]
    )
    bounds = {
        name: get_accountant(name).epsilon(event, 1e-5)
        for name in ("autodp-rdp", "dp-accounting-rdp")
    } | {"untrusted-server bound": untrusted}
    assert out["epsilon_trusted_sampler"] <= untrusted
    assert out["epsilon_trusted_sampler"] == pytest.approx(min(bounds.values()))
    assert out["epsilon_trusted_sampler_bounds"] == pytest.approx(bounds)
    assert out["epsilon_trusted_sampler_tightest"] == min(bounds, key=bounds.__getitem__)
    if plan is STRONG_NOISE:  # amplification pays off: an RDP bound wins
        assert out["epsilon_trusted_sampler"] < untrusted


def test_target_epsilon_calibrates_for_the_worst_client(capsys):
    argv = [
        "--clients",
        "100",
        "--steps",
        "500",
        "--batch-size",
        "4",
        "--delta",
        "1e-5",
        "--target-epsilon",
        "8",
        "--accountant",
        "dp-accounting-rdp",
        "--json",
    ]
    assert run(argv) == 0
    out = json.loads(capsys.readouterr().out)
    worst = int(simulate_query_counts(100, 500, 1, seed=0).max())
    assert out["worst_client_queries"] == worst and out["threat_model"] == "untrusted-server"
    acct = get_accountant("dp-accounting-rdp")

    def eps(sigma: float) -> float:
        return acct.epsilon(untrusted_client_event({(sigma, 4): worst}), 1e-5)

    assert eps(out["noise_multiplier"]) <= 8 < eps(out["noise_multiplier"] - out["tolerance"])


@pytest.mark.parametrize(
    "change",
    [
        {"--clients": "-3"},
        {"--steps": "0"},
        {"--batch-size": "zero"},
        {"--noise-multiplier": "0"},
        {"--delta": "1"},
        {"--delta": "0"},
        {"--clients-per-step": "900"},
        {"--accountant": "moments"},
        {"--noise-multiplier": None},
        {"--seed": "-1"},
    ],
)
def test_bad_arguments_exit_2(change, capsys):
    args = dict(zip(PAPER_FEDERATED[::2], PAPER_FEDERATED[1::2], strict=True))
    args.update(change)
    argv = [part for key, value in args.items() if value is not None for part in (key, value)]
    assert run(argv) == 2
    assert "error" in capsys.readouterr().err


def test_help_explains_the_threat_models(capsys):
    assert run(["--help"]) == 0
    text = capsys.readouterr().out
    assert "untrusted-server" in text and "trusted-sampler" in text and "--target-epsilon" in text


PLAN = [
    "--clients",
    "100",
    "--clients-per-step",
    "10",
    "--batch-size",
    "8",
    "--noise-multiplier",
    "5",
    "--delta",
    "1e-5",
    "--target-epsilon",
    "10",
    "--accountant",
    "dp-accounting-rdp",
]


def test_plan_gives_the_most_queries_per_client_and_the_steps_that_fit(capsys):
    assert run([*PLAN, "--steps", "60", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    acct = get_accountant("dp-accounting-rdp")

    def eps(queries: int) -> float:
        return acct.epsilon(untrusted_client_event({(5.0, 8): queries}), 1e-5)

    q = out["max_queries_per_client"]
    assert q >= 1 and eps(q) <= 10 < eps(q + 1)
    assert out["epsilon_at_max_queries"] == pytest.approx(eps(q))
    steps = out["max_steps"]
    assert simulate_query_counts(100, steps, 10, seed=0).max() <= q
    assert simulate_query_counts(100, steps + 1, 10, seed=0).max() > q
    assert out["expected_queries_at_max_steps"] == pytest.approx(steps * 10 / 100)
    assert out["threat_model"] == "untrusted-server" and out["neighbouring"] == "replace-one"
    worst = int(simulate_query_counts(100, 60, 10, seed=0).max())
    assert out["worst_client_queries"] == worst and out["fits"] == (worst <= q)
    assert out["epsilon_untrusted_worst_client"] == pytest.approx(eps(worst))


def test_plan_text_and_optional_steps(capsys):
    assert run(PLAN) == 0  # --steps is optional when planning
    text = capsys.readouterr().out
    assert "queries per client within epsilon 10" in text and "untrusted-server" in text
    assert "[dp-accounting-rdp]" in text and "--target-epsilon 10" in text


def test_plan_refuses_a_single_query_past_the_target(capsys):
    argv = [*PLAN]
    argv[argv.index("--noise-multiplier") + 1] = "0.5"
    assert run(argv) == 1
    assert "already costs epsilon" in capsys.readouterr().err


def test_steps_still_required_without_planning(capsys):
    args = dict(zip(PAPER_FEDERATED[::2], PAPER_FEDERATED[1::2], strict=True))
    del args["--steps"]
    assert run([part for item in args.items() for part in item]) == 2
    assert "--steps" in capsys.readouterr().err


@pytest.mark.parametrize("missing", ["--clients", "--batch-size"])
def test_clients_and_batch_size_still_required_for_gswgan(missing, capsys):
    # fails if making them optional for dp-merf let a GS-WGAN plan run without them
    args = dict(zip(PAPER_FEDERATED[::2], PAPER_FEDERATED[1::2], strict=True))
    del args[missing]
    assert run([part for item in args.items() for part in item]) == 2
    assert missing in capsys.readouterr().err


def test_dp_merf_local_plan_is_one_release_whatever_the_population(capsys):
    # one Gaussian release per writer: fails if the plan composed K, T, M or B into it, or
    # calibrated a sigma that misses the target (or is not the smallest within tolerance)
    from fedgs.privacy.events import mean_embedding_event

    acct = get_accountant("autodp-rdp")
    assert run(["--strategy", "dp-merf", "--delta", "1e-5", "--target-epsilon", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    sigma, tolerance = out["noise_multiplier"], out["tolerance"]
    assert (out["threat_model"], out["neighbouring"], out["releases_per_writer"]) == (
        "untrusted-server",
        "replace-one",
        1,
    )
    assert acct.epsilon(mean_embedding_event(sigma), 1e-5) <= 3
    assert acct.epsilon(mean_embedding_event(sigma - tolerance), 1e-5) > 3
    given = ["--clients", "50", "--steps", "9", "--clients-per-step", "5", "--batch-size", "7"]
    argv = ["--strategy", "dp-merf", "--delta", "1e-5", "--noise-multiplier", str(sigma)]
    assert run([*argv, *given, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["epsilon"] == pytest.approx(out["epsilon"])


@pytest.mark.parametrize(
    "extra",
    [["--cohort", "30"], ["--secagg-degree", "4"], []],
    ids=["cohort", "secure-key", "neither-noise-nor-target"],
)
def test_dp_merf_local_plan_refuses_secure_options_and_needs_one_noise_input(extra, capsys):
    argv = ["--strategy", "dp-merf", "--delta", "1e-5", *extra]
    if extra:
        argv += ["--target-epsilon", "1"]
    assert run(argv) == 2
    assert "error" in capsys.readouterr().err


FEDAVG_TRUSTED = ["--strategy", "fedavg-gan", "--clients", "100", "--clients-per-step", "10"]
FEDAVG_TRUSTED += ["--steps", "60", "--delta", "1e-5"]


def test_fedavg_trusted_plan_is_what_the_runs_ledger_reports(capsys):
    # the plan must be the ledger's own figure after the same rounds (fails if it planned a
    # GS-WGAN query, forgot the sampling or the rounds) and its z the smallest within tolerance
    from fedgs.privacy.fedavg_ledger import FedAvgLedger

    assert run([*FEDAVG_TRUSTED, "--target-epsilon", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["threat_model"], out["neighbouring"]) == ("trusted-server", "add-remove")
    assert (out["rounds"], out["sampling_rate"]) == (60, 0.1)

    def ledger_epsilon(z: float) -> float:
        ledger = FedAvgLedger(z)
        for _ in range(60):
            ledger.record_round(10, 100)
        return ledger.epsilon(1e-5)

    z, tolerance = out["noise_multiplier"], out["tolerance"]
    assert ledger_epsilon(z) == pytest.approx(out["epsilon"]) and out["epsilon"] <= 5
    assert ledger_epsilon(z - tolerance) > 5
    assert run([*FEDAVG_TRUSTED, "--noise-multiplier", str(z)]) == 0
    text = capsys.readouterr().out
    assert "trusted-server threat model only" in text and "add-remove" in text


@pytest.mark.parametrize(
    "change",
    [
        ["--cohort", "20"],
        ["--clients-per-step", "101"],
        ["--target-epsilon", "5", "--noise-multiplier", "2"],
    ],
    ids=["secure-option", "more-per-round-than-clients", "both-noise-inputs"],
)
def test_fedavg_trusted_plan_refuses_bad_input(change, capsys):
    argv = [*FEDAVG_TRUSTED, *change]
    if "--target-epsilon" not in change and "--noise-multiplier" not in change:
        argv += ["--target-epsilon", "5"]
    assert run(argv) == 2
    assert "error" in capsys.readouterr().err
