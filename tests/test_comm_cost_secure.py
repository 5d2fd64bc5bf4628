"""`fedgs comm-cost`'s secure-aggregation rows (issue 42): one secure GS-WGAN step's four round
trips on real serialized Flower messages (the strategy's queries and driver, fedgs' node code),
the masked vector's bytes, share keys growing with the cohort, the epsilon's threat model, the
table, the CSVs and the CLI's --secagg-cohorts."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from fedgs.cli import main
from fedgs.comm import gswgan_protocol_bytes
from fedgs.run_config import RunConfig
from fedgs.simulations.comm_cost import (
    FEDGS_PROTOCOL,
    ROUND_TRIPS,
    measure_secure,
    table_lines,
    write_outputs,
)

BASE = RunConfig(batch_size=8, critic_steps=1)  # 6,272 values, padded to 8,192
COHORTS = (3, 8)


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return measure_secure(BASE, COHORTS)


def _trip(row: dict, name: str) -> dict:
    return next(t for t in row["per_round_trip"] if t["round_trip"] == name)


def test_four_round_trips_carry_the_fakes_and_the_masked_vector(rows: list[dict]) -> None:
    fakes = gswgan_protocol_bytes(BASE.batch_size, 1)["down"]
    for row, m in zip(rows, COHORTS, strict=True):
        assert row["cohort"] == m == row["client_updates"]  # every node answered all four
        assert row["round_trips"] == 4
        assert [t["round_trip"] for t in row["per_round_trip"]] == list(ROUND_TRIPS)
        padded = row["secagg"]["padded_dimension"]
        assert padded == 8192
        assert row["up_bytes_per_client"] >= 8 * padded
        assert 8 * padded <= _trip(row, "masked input")["up"] < 8 * padded + 2048
        assert fakes <= _trip(row, "query")["down"] < fakes + 4096  # + setup and noise records
        for trip in row["per_round_trip"]:
            assert trip["down"] > 0 and trip["up"] > 0
        down = sum(t["down"] for t in row["per_round_trip"])
        assert abs(down - row["down_bytes_per_client"]) <= 4  # rounding per trip
        assert row["threat_model"] == "secure-aggregation"
        assert row["neighbouring"] == "replace-one client"
        assert row["accountant"] == BASE.accountant and row["epsilon"] > 0


def test_share_keys_grow_with_the_cohort(rows: list[dict]) -> None:
    """Each client sends an encrypted share to each of its m - 1 neighbours and gets their keys:
    real messages of a bigger cohort are bigger, the masked vector is not."""
    small, large = rows
    for name in ("share keys", "masked input", "unmask"):
        assert _trip(large, name)["down"] > _trip(small, name)["down"]
    grown = _trip(large, "share keys")["up"] - _trip(small, "share keys")["up"]
    per_share = _trip(small, "share keys")["up"] / (COHORTS[0] - 1)
    assert grown > 0.5 * (COHORTS[1] - COHORTS[0]) * per_share  # O(m) per client
    assert _trip(large, "masked input")["up"] == _trip(small, "masked input")["up"]
    assert large["total_bytes_per_client"] > small["total_bytes_per_client"]
    assert small["secagg"]["threshold"] == 2 and large["secagg"]["threshold"] == 4


def test_table_csvs_and_chart(rows: list[dict], tmp_path: Path) -> None:
    plain = {
        "variant": FEDGS_PROTOCOL,
        "strategy": "gswgan",
        "wire_dtype": "float32",
        "models": "fedgs' networks",
        "cohort": "",
        "round_trips": 1,
        "down_bytes_per_client": 25_400,
        "up_bytes_per_client": 25_300,
        "total_bytes_per_client": 50_700,
        "analytic_float32_bytes": 50_432,
        "measured_over_analytic": 1.005,
        "paper_table_bytes": 2.0e5,
        "client_updates": 1,
        "epsilon": 1.0,
        "threat_model": "untrusted-server",
        "accountant": "autodp-rdp",
        "delta": 1e-5,
        "neighbouring": "replace-one client",
    }
    text = "\n".join(table_lines([plain, *rows], BASE))
    for row in rows:
        assert f"| {row['variant']} | {row['models']} | 4 | " in text
        assert f"| {row['epsilon']:.4g} (secure-aggregation; " in text
        assert f"{row['variant']} / {FEDGS_PROTOCOL}: 4 round trips against 1" in text
    assert "| 8 | 4 | share keys |" in text
    paths = write_outputs([plain, *rows], tmp_path, BASE)
    with paths["csv"].open(newline="") as handle:
        table = list(csv.DictReader(handle))
    assert [r["round_trips"] for r in table] == ["1", "4", "4"]
    assert [r["cohort"] for r in table] == ["", "3", "8"]
    with paths["secagg_csv"].open(newline="") as handle:
        trips = list(csv.DictReader(handle))
    assert len(trips) == 4 * len(rows)
    assert paths["png"].stat().st_size > 0


def test_cohorts_below_three_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["comm-cost", "--secagg-cohorts", "10", "2"]) == 2
    assert "--secagg-cohorts sizes must be at least 3" in capsys.readouterr().out
