"""The evaluation instrument cannot be fooled by a lookup table or a flat grey image.

Done-means of issue 17: on real FEMNIST (evaluation writers only) the 5-images-per-class lookup
table and a flat grey image both fail every quality bar (`fedgs.metrics.bars.BARS`, the bars
docs/evaluation.md and results/ use), while real images of the training writers pass them all,
so the bars are reachable and the test can fail. Kept lean: 2,000 downstream samples, 2 epochs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fedgs.data import load_federated
from fedgs.evaluation.instrument import Instrument, InstrumentOptions
from fedgs.evaluation.quality_table import NOT_BEATING, markdown
from fedgs.metrics.bars import BARS, passes
from fedgs.metrics.controls import FLOOR, controls

FEMNIST = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "femnist_leaf"


def _rows(instrument: Instrument, names: tuple[str, ...]) -> dict[str, dict]:
    named = controls(instrument.training, instrument.num_classes)
    return {name: instrument.score(name, named[name]).row for name in names}


def test_controls_on_embedded_digits(tmp_path: Path) -> None:
    dataset = load_federated("embedded", cache_dir=tmp_path)
    instrument = Instrument(dataset, InstrumentOptions(400, 200, 1), cache_dir=tmp_path)
    rows = _rows(instrument, (FLOOR, "lookup k=5", "flat grey"))
    floor, lookup, grey = rows[FLOOR], rows["lookup k=5"], rows["flat grey"]
    # a lookup table of training images is all near-copies; grey and held-out-like images not
    assert lookup["near_copy_share"] == 1.0 and grey["near_copy_share"] == 0.0
    assert floor["coverage"] > lookup["coverage"] and floor["recall"] > lookup["recall"]
    assert floor["intra_class_diversity"] > lookup["intra_class_diversity"] > 0.0
    assert grey["intra_class_diversity"] == 0.0
    assert not any(passes(grey).values())
    table = markdown(list(rows.values()))
    assert table.count("\n| ") == 4 and NOT_BEATING in table  # header + 3 rows, marks


@pytest.mark.slow
@pytest.mark.skipif(not FEMNIST.is_dir(), reason=f"real FEMNIST data not found at {FEMNIST}")
def test_lookup_table_and_grey_fail_every_bar_on_femnist(tmp_path: Path) -> None:
    dataset = load_federated("femnist", FEMNIST, labels="digits")
    instrument = Instrument(dataset, InstrumentOptions(2_000, 1_000, 2), cache_dir=tmp_path)
    rows = _rows(instrument, (FLOOR, "lookup k=5", "flat grey"))
    for name in ("lookup k=5", "flat grey"):
        passed = passes(rows[name])
        assert set(passed) == set(BARS) and not any(passed.values()), (name, rows[name])
    assert all(passes(rows[FLOOR]).values()), rows[FLOOR]
