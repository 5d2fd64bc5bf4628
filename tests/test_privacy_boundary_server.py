"""Privacy boundary, server side: what the server pays, trusts and draws.

(d) After a run is killed between sending a step and saving anything, the server's ledger on
disk is at or above every client's own ledger, and stays so after the run resumes. A reply that
claims a weaker noise multiplier, another batch size or another client changes nothing in the
server's accounting: the step goes on and the ledger charges what the server sent. Client
sampling is secret (not reproducible from the run seed) unless a sampling seed is set, and then
the report says the amplified figure does not hold. Through Flower's real simulation engine.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from flower_apps import simulate
from privacy_boundary_server_apps import CLAIMS, SMALL, claiming_client_app, gswgan_server_app

from fedgs.client.app import build_client_app
from fedgs.client.state_store import ClientStateStore
from fedgs.privacy import PrivacyLedger, gswgan_query_event
from fedgs.run_config import RunConfig
from fedgs.run_data import dataset_for, state_dir_for
from fedgs.server.checkpoint import LEDGER_NAME
from fedgs.server.fedavg_gan_run import FedAvgGANRun
from fedgs.server.gswgan_run import GSWGANRun
from fedgs.training.run_dir import summarize


def _server_ledger(config: RunConfig) -> PrivacyLedger:
    return PrivacyLedger.from_json((Path(config.run_dir) / LEDGER_NAME).read_text())


def _client_counts(config: RunConfig) -> dict[str, int]:
    """Queries each client's own ledger (its state file) says it answered."""
    store = ClientStateStore(state_dir_for(config))
    counts = {}
    for client in dataset_for(config).client_ids:
        state = store.load(client)
        ledger = PrivacyLedger.from_json(state["ledger"]) if state else PrivacyLedger()
        counts[client] = ledger.query_counts().get(client, 0)
    return counts


def _assert_server_covers_every_client(config: RunConfig) -> dict[str, int]:
    server = _server_ledger(config)
    clients = _client_counts(config)
    paid = server.query_counts()
    assert server.unattributed_count() == 0  # the warm start named every node's client
    for client, answered in clients.items():
        assert paid.get(client, 0) >= answered, (client, paid, clients)
    return clients


@pytest.mark.slow
def test_a_run_killed_between_send_and_save_never_shows_fewer_queries_than_the_clients(
    tmp_path: Path,
) -> None:
    config = RunConfig.from_user_config(
        SMALL,
        {"run-dir": str(tmp_path), "clients-per-step": 2, "steps": 4, "checkpoint-every": 2},
    )
    clients = build_client_app(config.to_user_config())
    # step 3's replies are in (the two clients paid and saved their ledgers), then the server dies
    simulate(gswgan_server_app(config, kill_at=3), clients, nodes=4)
    answered = _assert_server_covers_every_client(config)
    assert sum(answered.values()) == 3 * 2  # the killed step was answered
    assert sum(_server_ledger(config).query_counts().values()) == 3 * 2

    # the resumed run repeats step 3 from the step-2 checkpoint: what was paid stays paid
    resumed = config.with_updates(resume=True)
    simulate(gswgan_server_app(resumed), build_client_app(resumed.to_user_config()), nodes=4)
    answered = _assert_server_covers_every_client(resumed)
    # 3 steps before the kill and steps 3-4 again: 5 steps of 2 queries, on both sides
    assert sum(answered.values()) == sum(_server_ledger(resumed).query_counts().values()) == 10
    privacy = json.loads((tmp_path / "privacy.json").read_text())
    assert privacy["steps"] == 4 and privacy["queries"]["total"] == 10


@pytest.mark.slow
def test_claims_in_a_reply_never_change_what_the_server_charges(tmp_path: Path) -> None:
    config = RunConfig.from_user_config(
        SMALL,
        {
            "run-dir": str(tmp_path),
            "clients-per-step": 4,
            "steps": 2,
            "checkpoint-every": 1,
            "sampling-seed": 5,
        },
    )
    simulate(gswgan_server_app(config), claiming_client_app(config.to_user_config()), nodes=4)
    with (tmp_path / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    # the steps went on with the honest client; the three claiming replies were dropped
    assert [(r["answered"], r["dropped"]) for r in rows] == [("1", "3"), ("1", "3")]
    assert float(rows[-1]["received_row_norm_mean"]) > 0
    ledger = _server_ledger(config)
    ids = dataset_for(config).client_ids
    # every client is charged what the server sent: 2 queries at the run's sigma and batch
    assert ledger.query_counts() == dict.fromkeys(ids, 2)
    for client in ids:
        query = gswgan_query_event(config.noise_multiplier, config.batch_size)
        assert ledger.signature(client) == ((query, 2),)
    assert "someone-else" not in ledger.query_counts() and len(CLAIMS) == 3
    _assert_server_covers_every_client(config)

    # a fixed sampling seed: the report says the amplified figure does not hold
    privacy = json.loads((tmp_path / "privacy.json").read_text())
    assert privacy["sampling"]["amplified_figures_hold"] is False
    assert privacy["trusted_sampler"]["holds"] is False
    assert privacy["neighbouring"] == privacy["untrusted_server"]["neighbouring"] == "replace-one"
    assert "does NOT hold" in summarize(tmp_path)


def test_client_sampling_is_secret_unless_a_sampling_seed_is_set(tmp_path: Path) -> None:
    config = RunConfig.from_user_config(
        SMALL, {"run-dir": str(tmp_path), "clients-per-step": 10, "seed": 3}
    )
    nodes = list(range(1000))
    # the same run seed: two runs ask different clients (GS-WGAN) and draw different Poisson
    # samples (Fed-Avg GAN); the sampler's state is not written to a checkpoint
    first, second = GSWGANRun(config), GSWGANRun(config)
    assert first.strategy.choose(nodes) != second.strategy.choose(nodes)
    assert first.sampling.saved_state(first.sampler) is None
    fedavg = config.with_updates(strategy="fedavg-gan")
    assert list(FedAvgGANRun(fedavg).sampler.random(8)) != list(
        FedAvgGANRun(fedavg).sampler.random(8)
    )
    # a sampling seed makes them reproducible, and the report says what that costs
    fixed = config.with_updates(sampling_seed=11)
    a, b = GSWGANRun(fixed), GSWGANRun(fixed)
    assert a.strategy.choose(nodes) == b.strategy.choose(nodes)
    assert a.sampling.report()["amplified_figures_hold"] is False
    with pytest.raises(ValueError, match="sampling-seed"):
        config.with_updates(sampling_seed=-2)
