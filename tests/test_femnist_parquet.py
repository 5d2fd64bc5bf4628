"""FEMNIST from Parquet shards (fedgs.data.femnist_parquet): clients, labels, split, cache, errors.

Unit tests use a small set of Parquet shards written here (random 28x28 PNGs, a few writers).
The tests on the real set read ../shared/data/femnist_full (the whole LEAF population, 3,597
writers) and compare with the LEAF JSON copies in ../shared/data/femnist_leaf; they skip when
those folders are absent.
"""

from __future__ import annotations

import io
from pathlib import Path

import datasets
import numpy as np
import pytest
from PIL import Image

from fedgs.data import DataError, FederatedDataset, load_federated, writer_split
from fedgs.data import femnist_parquet as fp
from fedgs.data.femnist_parquet import read_index
from fedgs.data.leaf import read_shard

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
FULL = SHARED / "femnist_full"
LEAF = SHARED / "femnist_leaf"
FEATURES = datasets.Features(
    {
        "writer_id": datasets.Value("string"),
        "character": datasets.Value("int8"),
        "image": datasets.Image(),
    }
)
Row = tuple[str, int, np.ndarray]  # writer id, LEAF label, stored 28x28 pixels (255 = white)


def _ids(role: str, n: int) -> list[str]:
    """The first ``n`` fixture writer ids with a given role under writer_split's rule."""

    def role_of(w: str) -> str:
        if not writer_split.is_evaluation_writer(w):
            return "training"
        return "classifier" if writer_split.is_classifier_writer(w) else "reference"

    return [w for w in (f"f{k:04d}_00" for k in range(200)) if role_of(w) == role][:n]


TRAINING = _ids("training", 3)
CLASSIFIER = _ids("classifier", 1)
REFERENCE = _ids("reference", 1)


def _png(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels, "L").save(out, format="PNG")
    return out.getvalue()


def write_shard(
    path: Path,
    rows: list[Row],
    features: datasets.Features = FEATURES,
    pngs: list[bytes] | None = None,
) -> None:
    """``rows`` as one Parquet shard, the way ``datasets`` writes an ``Image()`` column
    (``pngs``: image bytes to store instead of the rows' pixels)."""
    columns = {
        "writer_id": [w for w, _, _ in rows],
        "character": [y for _, y, _ in rows],
        "image": [{"bytes": b, "path": None} for b in pngs or [_png(p) for _, _, p in rows]],
    }
    keep = {name: columns[name] for name in features}
    datasets.Dataset.from_dict(keep, features=features).to_parquet(str(path))


def make_rows(seed: int = 0) -> list[Row]:
    """Writers in shuffled order: training writer 2 has letters only (no digits)."""
    rng = np.random.default_rng(seed)
    labels = {
        TRAINING[0]: [3, 40, 7, 12, 3],
        TRAINING[1]: [0, 1, 61, 36],
        TRAINING[2]: [10, 35, 20],
        CLASSIFIER[0]: [5, 50, 9],
        REFERENCE[0]: [2, 11],
    }
    rows = [
        (w, y, rng.integers(0, 256, (28, 28), dtype=np.uint8))
        for w in (TRAINING[1], REFERENCE[0], TRAINING[0], CLASSIFIER[0], TRAINING[2])
        for y in labels[w]
    ]
    return rows


def _expected(rows: list[Row], writers: list[str], mode_keep: object) -> np.ndarray:
    """MNIST-polarity rows of ``writers`` in writer order, source order within a writer."""
    return np.array(
        [255 - p.reshape(-1) for w in writers for wr, y, p in rows if wr == w and mode_keep(y)]
    )


def _uint8(x: object) -> np.ndarray:
    """[-1, 1] floats back to the stored uint8 (exact: x = u / 127.5 - 1)."""
    return np.rint((np.asarray(x).reshape(len(x), -1) + 1.0) * 127.5).astype(np.uint8)


@pytest.fixture()
def one_shard(tmp_path: Path) -> tuple[Path, list[Row]]:
    rows = make_rows()
    folder = tmp_path / "femnist"
    folder.mkdir()
    write_shard(folder / "femnist-00000-of-00001.parquet", rows)
    return folder, rows


def test_one_client_per_training_writer(one_shard: tuple[Path, list[Row]], tmp_path: Path) -> None:
    folder, rows = one_shard
    ds = load_federated("femnist", folder, labels="all62", cache_dir=tmp_path / "cache")
    assert ds.name == "femnist" and ds.num_classes == 62
    assert ds.client_ids == sorted(TRAINING)  # sorted by writer id, evaluation writers out
    assert list(ds.train_counts().values()) == [
        sum(w == c for w, _, _ in rows) for c in sorted(TRAINING)
    ]
    x, y = ds.train_arrays()
    assert np.array_equal(_uint8(x), _expected(rows, sorted(TRAINING), lambda _: True))
    assert y.tolist() == [lab for w in sorted(TRAINING) for wr, lab, _ in rows if wr == w]
    # every image of the evaluation writers, classifier half first
    x, y = ds.test_arrays()
    assert np.array_equal(_uint8(x), _expected(rows, CLASSIFIER + REFERENCE, lambda _: True))
    assert not ds.has_client_test
    assert ds.info["source"] == "parquet" and ds.info["images_in_source"] == len(rows)


def test_label_modes(one_shard: tuple[Path, list[Row]], tmp_path: Path) -> None:
    folder, rows = one_shard
    digits = load_federated("femnist", folder, labels="digits", cache_dir=tmp_path / "cache")
    assert digits.num_classes == 10
    assert digits.client_ids == sorted(TRAINING[:2])  # the letters-only writer is no client
    assert digits.info["writers_dropped_by_labels"] == 1
    x, y = digits.train_arrays()
    assert np.array_equal(_uint8(x), _expected(rows, sorted(TRAINING[:2]), lambda c: c < 10))
    assert int(y.max()) < 10
    _, test_y = digits.test_arrays()
    assert test_y.tolist() == [5, 9, 2]
    merged = load_federated("femnist", folder, labels="merged36", cache_dir=tmp_path / "cache")
    _, y = merged.train_arrays()
    assert merged.num_classes == 36 and int(y.max()) == 35  # 61 (z) -> 35 (Z)
    merged_labels = [
        c - 26 if c >= 36 else c for w in sorted(TRAINING) for wr, c, _ in rows if wr == w
    ]
    assert y.tolist() == merged_labels


def test_writer_split_is_recorded_as_for_leaf(
    one_shard: tuple[Path, list[Row]], tmp_path: Path
) -> None:
    folder, rows = one_shard
    ds = load_federated("femnist", folder, labels="all62", cache_dir=tmp_path / "cache")
    split = ds.info["writer_split"]
    expected = writer_split.record(sorted({w for w, _, _ in rows}))
    assert {k: split[k] for k in expected} == expected
    assert split["rule"] == writer_split.RULE
    assert split["classifier_writer_ids"] == CLASSIFIER
    assert split["reference_writer_ids"] == REFERENCE
    assert (split["classifier_rows"], split["reference_rows"]) == (3, 2)


def test_cache_is_reused(
    one_shard: tuple[Path, list[Row]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, _ = one_shard
    first = load_federated("femnist", folder, labels="digits", cache_dir=tmp_path / "cache")

    def no_decode(*args: object) -> None:
        raise AssertionError("decoded again despite the cache")

    monkeypatch.setattr(fp, "read_parquet", no_decode)
    second = load_federated("femnist", folder, labels="digits", cache_dir=tmp_path / "cache")
    assert second.path == first.path and second.fingerprint == first.fingerprint
    assert load_federated(
        "femnist", folder, labels="digits", num_clients=1, cache_dir=tmp_path / "cache"
    ).client_ids == [first.client_ids[0]]


def test_a_writer_across_two_shards_is_one_client(tmp_path: Path) -> None:
    """Two shards (one process each); a writer split over both stays one client."""
    rows = make_rows(seed=1)
    folder = tmp_path / "femnist"
    folder.mkdir()
    write_shard(folder / "a.parquet", rows[:6])
    write_shard(folder / "b.parquet", rows[6:])
    ds = load_federated("femnist", folder, labels="all62", cache_dir=tmp_path / "cache")
    assert ds.client_ids == sorted(TRAINING)
    x, _ = ds.train_arrays()
    assert np.array_equal(_uint8(x), _expected(rows, sorted(TRAINING), lambda _: True))
    assert ds.info["shards"] == 2


def test_default_folder(
    one_shard: tuple[Path, list[Row]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, _ = one_shard
    monkeypatch.setenv(fp.FEMNIST_ENV, str(folder))
    ds = load_federated("femnist", labels="all62", cache_dir=tmp_path / "cache")
    assert ds.client_ids == sorted(TRAINING)
    monkeypatch.delenv(fp.FEMNIST_ENV)
    with pytest.raises(DataError, match=f"--data-dir.*{fp.FEMNIST_ENV}"):
        load_federated("femnist", cache_dir=tmp_path / "cache")


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("no_character", "column.s. character missing"),
        ("not_parquet", "cannot read as Parquet"),
        ("not_png", "row 1 is not a readable image"),
        ("wrong_size", "row 0 is a L 27x28 image"),
        ("bad_label", "labels must lie in 0..61"),
    ],
)
def test_bad_shard_is_a_data_error_naming_it(tmp_path: Path, case: str, message: str) -> None:
    folder = tmp_path / "femnist"
    folder.mkdir()
    shard = folder / "femnist-00000-of-00001.parquet"
    rows = make_rows()[:4]
    if case == "no_character":
        features = datasets.Features({k: v for k, v in FEATURES.items() if k != "character"})
        write_shard(shard, rows, features)
    elif case == "not_parquet":
        shard.write_bytes(b"PAR1 this is not a Parquet file")
    elif case == "not_png":
        pngs = [_png(p) for _, _, p in rows]
        write_shard(shard, rows, pngs=[pngs[0], b"not a png", *pngs[2:]])
    elif case == "wrong_size":
        write_shard(shard, [(rows[0][0], 1, np.zeros((28, 27), np.uint8))])
    else:
        write_shard(shard, [(w, 70, p) for w, _, p in rows])
    with pytest.raises(DataError, match=message) as err:
        load_federated("femnist", folder, labels="all62", cache_dir=tmp_path / "cache")
    assert str(shard) in str(err.value)


needs_full = pytest.mark.skipif(
    not FULL.is_dir(), reason=f"the whole FEMNIST Parquet set not found at {FULL}"
)


@needs_full
def test_full_set_counts_and_split() -> None:
    """PROVENANCE.md's totals, from the writer and label columns alone (no image decoded)."""
    shards = fp.find_shards(FULL)
    assert len(shards) == 12
    ids: list[str] = []
    labels = []
    for shard in shards:
        shard_ids, shard_labels = read_index(shard)
        ids.extend(shard_ids.to_pylist())
        labels.append(shard_labels)
    y = np.concatenate(labels)
    writers = sorted(set(ids))
    assert len(writers) == 3_597 and len(y) == 817_851
    assert int((y < 10).sum()) == 404_045 and set(y.tolist()) == set(range(62))
    split = writer_split.record(writers)
    assert split["training_writers"] + split["evaluation_writers"] == 3_597
    assert 0.17 < split["evaluation_writers"] / 3_597 < 0.23


@needs_full
@pytest.mark.skipif(not LEAF.is_dir(), reason=f"LEAF JSON copies not found at {LEAF}")
def test_same_pixels_as_the_leaf_json_loader() -> None:
    """Writers of one LEAF JSON shard: their LEAF digit rows (train + test) are among the
    Parquet loader's rows for the same writer, bit for bit after both loaders' polarity flip
    (as sets: LEAF's per-writer duplicate differs between copies, see PROVENANCE.md there)."""
    name = "all_data_0_niid_05_keep_0_{}_9.json.gz"
    copy = LEAF / "slz-ai__leaf-torch"
    train, test = (read_shard(copy / split / name.format(split)) for split in ("train", "test"))
    writers = sorted(w for w in train if not writer_split.is_evaluation_writer(w))[:2]
    shard = next(
        s for s in fp.find_shards(FULL) if set(writers) <= set(read_index(s)[0].to_pylist())
    )
    arrays, _ = fp.read_parquet([shard], "digits")
    offsets = np.concatenate([[0], np.cumsum(arrays.train_counts)])
    for writer in writers:
        k = arrays.client_ids.index(writer)
        rows = slice(offsets[k], offsets[k + 1])
        ours = {
            (p.tobytes(), int(y))
            for p, y in zip(arrays.train_pixels[rows], arrays.train_labels[rows], strict=True)
        }
        leaf_rows = [
            (p.tobytes(), int(y))
            for part in (train, test)
            if writer in part
            for p, y in zip(*part[writer], strict=True)
            if y < 10
        ]
        assert len(leaf_rows) > 50 and set(leaf_rows) <= ours


@needs_full
@pytest.mark.slow
def test_full_set_loads_and_caches(tmp_path: Path) -> None:
    """Digits of all 3,597 writers: decoded once, then opened from the cache."""
    ds = load_federated("femnist", FULL, labels="digits", cache_dir=tmp_path)
    split = ds.info["writer_split"]
    assert ds.num_train_images + ds.num_test_images == 404_045
    assert split["training_writers"] + split["evaluation_writers"] == 3_597
    assert ds.num_clients == split["training_writers"] - ds.info["writers_dropped_by_labels"]
    assert ds.num_test_images == split["classifier_rows"] + split["reference_rows"]
    again = load_federated("femnist", FULL, labels="digits", cache_dir=tmp_path)
    assert again.path == ds.path and again.fingerprint == ds.fingerprint
    assert isinstance(again, FederatedDataset)


def test_fedgs_data_summary(one_shard: tuple[Path, list[Row]], tmp_path: Path) -> None:
    from fedgs.data.summary import format_summary, summarize

    folder, rows = one_shard
    ds = load_federated("femnist", folder, labels="digits", cache_dir=tmp_path / "cache")
    summary = summarize(ds)
    assert sum(summary["train_images_per_class"]) == ds.num_train_images
    assert summary["test_images_per_class"][5] == 1 and len(summary["test_images_per_class"]) == 10
    text = format_summary(summary)
    assert f"writers in source  5 ({len(rows)} images in 1 Parquet shards)" in text
    assert "evaluation writers 2 " in text and "1 without train images in label mode digits" in text
    assert "train per class    0:1 1:1 2:0 3:2" in text
