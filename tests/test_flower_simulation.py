"""Real Flower simulations (Ray engine, no mocks): a few GS-WGAN steps with a handful of clients.

In the fast tier on purpose (not marked slow): a plain `python -m pytest -q` runs the real
simulation engine here."""

from __future__ import annotations

from flower_apps import TAMPERED, recording_server_app, simulate, tampering_client_app

from fedgs.client.gswgan_session import GSWGANSession
from fedgs.protocols import common, gswgan
from fedgs.run_config import RunConfig

SMALL = {
    "num-clients": 5,
    "batch-size": 8,
    "critic-steps": 2,
    "generator-width": 4,
    "critic-width": 4,
    "warm-start-steps": 0,
    "eval-every": 0,
    "min-nodes": 5,
}


def test_replies_budgets_and_bad_clients_through_the_real_engine(tmp_path) -> None:
    base = RunConfig.from_user_config(SMALL, {"run-dir": str(tmp_path)})
    # a budget that allows exactly three queries of this size per client
    probe = GSWGANSession(base.with_updates(run_dir=str(tmp_path / "probe")), 0)
    for _ in range(3):
        probe.ledger.record_query(probe.client_id, base.noise_multiplier, base.batch_size)
    three = probe.ledger.epsilon_untrusted(probe.client_id, base.delta, base.accountant)
    config = base.with_updates(client_budget_epsilon=three * 1.0001)
    overrides = config.to_user_config()
    plan = ["all", "all", "tampered", "all", "honest"]
    record: list[dict] = []
    simulate(recording_server_app(config, plan, record), tampering_client_app(overrides), nodes=5)
    assert [r["which"] for r in record] == plan

    # steps 1-2: every honest reply carries the B x 784 sanitized matrix, who answered and the
    # public policy it applied, nothing else;
    # tampered replies are dropped but their (paid) queries are recorded
    for step in record[:2]:
        honest = [
            r
            for r in step["replies"]
            if step["partition_of"][r.metadata.src_node_id] not in TAMPERED
        ]
        assert len(step["replies"]) == 5 and len(honest) == 2
        for reply in honest:
            content = reply.content
            assert set(content.array_records) == {gswgan.SANITIZED}
            assert list(content[gswgan.SANITIZED].keys()) == [gswgan.GRADIENT]
            assert content[gswgan.SANITIZED][gswgan.GRADIENT].numpy().shape == (8, 784)
            assert set(content.config_records) == {common.CLIENT, common.POLICY_USED}
            assert set(content[common.CLIENT].keys()) == {common.CLIENT_ID, "partition-id"}
            assert not content.metric_records  # no statistic of the private data
        assert step["outcome"].answered == 2 and step["outcome"].dropped == 3
        assert step["generator_changed"]
    assert sum(record[1]["ledger"].values()) == 10

    # step 3: only tampered clients answer; the generator must not move, their cost is recorded
    assert record[2]["outcome"].answered == 0 and not record[2]["generator_changed"]
    assert sum(record[2]["ledger"].values()) == 13

    # step 4: honest clients answer their third query, tampered ones refuse their fourth
    refusals = [r for r in record[3]["replies"] if r.has_error()]
    assert len(refusals) == 3
    assert all("privacy budget exhausted" in r.error.reason for r in refusals)
    # the server charged every query it sent, refused ones included (it cannot know in advance)
    assert record[3]["outcome"].answered == 2 and sum(record[3]["ledger"].values()) == 18

    # step 5: the honest clients are at their budget too: nothing answered, the two sent
    # queries charged all the same
    assert all(r.has_error() for r in record[4]["replies"])
    assert not record[4]["generator_changed"]
    assert set(record[4]["ledger"].values()) == {4}

    # every client's own ledger (on disk) is at or below the server's (conservative) count
    for partition in range(5):
        session = GSWGANSession(config, partition)
        assert session.ledger.query_counts() == {session.client_id: 3}
        assert record[4]["ledger"][session.client_id] == 4
