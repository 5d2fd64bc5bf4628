"""`fedgs comm-cost`: real serialized messages on Flower's engine, both comparisons, and every
epsilon naming its threat model, accountant, delta and neighbouring relation (issues 17, 18)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedgs.run_config import RunConfig
from fedgs.simulations.comm_cost import (
    FEDAVG_FEDGS,
    PAPER_PROTOCOL,
    VARIANTS,
    measure,
    table_lines,
)
from fedgs.simulations.simulate import EngineOptions

pytestmark = pytest.mark.slow


def test_one_step_per_variant_measures_the_protocols_and_names_every_epsilon(
    tmp_path: Path,
) -> None:
    base = RunConfig(
        num_clients=4,
        batch_size=8,
        critic_steps=2,
        fedavg_clients_per_round=4,  # q = 1: every client in the round
        fedavg_critic_steps=2,
        fedavg_generator_steps=1,
        steps=1,
    )
    wanted = (PAPER_PROTOCOL, FEDAVG_FEDGS)  # one per threat model and neighbouring relation
    variants = tuple(v for v in VARIANTS if v.label in wanted)
    rows = measure(base, tmp_path, EngineOptions(ray_cpus=2, object_store_mb=256), variants)

    by_label = {r["variant"]: r for r in rows}
    for row in rows:  # the serialized messages carry the protocol's payload plus framing
        assert 1.0 <= row["measured_over_analytic"] < 1.05, row
        assert row["client_updates"] > 0
    assert by_label[FEDAVG_FEDGS]["neighbouring"] == "add/remove-one client"
    assert by_label[FEDAVG_FEDGS]["threat_model"] == "trusted-server"
    assert by_label[PAPER_PROTOCOL]["neighbouring"] == "replace-one client"
    assert by_label[PAPER_PROTOCOL]["threat_model"] == "untrusted-server"

    text = "\n".join(table_lines(rows, base))
    assert "Like-for-like (the networks fedgs trains)" in text
    for row in rows:
        assert f"delta {base.delta:g}; {row['neighbouring']})" in text
        assert row["accountant"] and f"; {row['accountant']}; " in text
