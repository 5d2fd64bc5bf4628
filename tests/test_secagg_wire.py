"""The secure-aggregation wire format: stage messages and secure queries through Flower records."""

from __future__ import annotations

import math

import numpy as np
import pytest
from flwr.app import ConfigRecord, RecordDict
from flwr.common import serde

from fedgs.privacy.distributed_accounting import distributed_epsilon, step_event
from fedgs.privacy.distributed_noise import calibrate
from fedgs.privacy.threat_models import REPLACE_ONE
from fedgs.protocols import secagg
from fedgs.protocols.common import ProtocolError


def _through_the_wire(content: RecordDict) -> RecordDict:
    return serde.recorddict_from_proto(serde.recorddict_to_proto(content))


def _noise():
    return calibrate(
        clip=math.sqrt(4),
        dimension=4 * 784,
        bits=32,
        m_min=5,
        noise_multiplier=2.0,
        beta=math.exp(-0.5),
        colluders=2,
    ).params


def test_stage_messages_survive_serialization_with_64_bit_ids_and_a_vector() -> None:
    message = {
        "stage": "masked_input",
        "ids": [2**64 - 1, 7],
        "ciphertexts": [b"a", b"bc"],
        "empty": [],
        "masked": np.arange(5, dtype=np.uint64) + 2**31,
    }
    back = secagg.read_stage(_through_the_wire(secagg.stage_content(message)))
    assert back["ids"] == [2**64 - 1, 7] and back["ciphertexts"] == [b"a", b"bc"]
    assert back["empty"] == [] and back["stage"] == "masked_input"
    np.testing.assert_array_equal(back["masked"].astype(np.uint64), message["masked"])


def test_malformed_stage_messages_are_refused() -> None:
    with pytest.raises(ProtocolError, match="'secagg' ConfigRecord"):
        secagg.read_stage(RecordDict({"other": ConfigRecord({"stage": "unmask"})}))
    content = secagg.stage_content({"stage": "x", "masked": np.zeros(3, dtype=np.int64)})
    vectors = content.array_records[secagg.VECTOR_RECORD]
    vectors["extra"] = vectors["masked"]
    with pytest.raises(ProtocolError, match="exactly one array"):
        secagg.read_stage(content)
    with pytest.raises(ValueError, match="one vector"):
        secagg.stage_content({"a": np.zeros(2), "b": np.zeros(2)})


def test_a_secure_query_carries_its_setup_and_noise() -> None:
    noise, seed = _noise(), b"s" * 32
    setup = {"step": 3, "cohort": (1, 2, 3), "neighbours": [2, 3]}
    content = RecordDict(secagg.setup_records(setup, noise, seed))
    assert secagg.is_secure(content) and not secagg.is_secure(RecordDict())
    got_setup, got_noise, got_seed = secagg.read_setup(_through_the_wire(content))
    assert got_setup == {"step": 3, "cohort": [1, 2, 3], "neighbours": [2, 3], "stage": "setup"}
    assert got_noise == noise and got_seed == seed


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda r: r.__setitem__("rotation-seed", b"short"), "rotation-seed"),
        (lambda r: r.__delitem__("m-min"), "must hold exactly"),
        (lambda r: r.__setitem__("sigma", float("nan")), "not finite"),
        (lambda r: r.__setitem__("bits", 99), "secagg-noise"),
    ],
)
def test_a_bad_noise_record_is_refused(change, match) -> None:
    records = secagg.setup_records({"step": 1}, _noise(), b"s" * 32)
    change(records[secagg.NOISE])
    with pytest.raises(ProtocolError, match=match):
        secagg.read_setup(RecordDict(records))


def test_the_ledger_event_of_a_secure_step_never_undercuts_the_accountant() -> None:
    """step_event is the zCDP bound as a Gaussian: its RDP at every order is at least the
    accountant's least-of-three bound, so its epsilon under the same conversion is not lower;
    and with noise multiplier sigma / sqrt(B) it matches the local mechanism's strength."""
    from fedgs.privacy.distributed_accounting import rdp_to_epsilon

    noise = _noise()
    event = step_event(noise, REPLACE_ONE)
    own = distributed_epsilon(noise, 10, 1e-5, REPLACE_ONE).epsilon
    as_gaussian, _ = rdp_to_epsilon(lambda a: 10 * a / (2 * event.noise_multiplier**2), 1e-5)
    assert as_gaussian >= own and as_gaussian < own * 1.01
    # clip C sqrt(B) with B = 4 rows, central multiplier 2.0 of c: the replace-one multiplier
    # of the whole reply is half of it, up to the rounding's slack
    assert event.noise_multiplier == pytest.approx(1.0, rel=1e-6)
    assert event.noise_multiplier <= 1.0
