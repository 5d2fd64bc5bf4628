"""The debugging scenario's parts: bug injection, writer selection, scoring and split, detection."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedgs.data.federated import ClientArrays
from fedgs.debugging.bug import buggy_count, choose_buggy, invert_pixels
from fedgs.debugging.detection import (
    border_mean,
    frame_profile,
    inverted_share,
    legibility,
    looks_inverted,
    margin_rule,
)
from fedgs.debugging.report import privacy_digest, ratio_text
from fedgs.debugging.scoring import (
    NORMAL,
    SUSPECTED,
    UNASSIGNED,
    Thresholds,
    assign_groups,
    choose_thresholds,
    confusion,
    confusion_markdown,
    writer_accuracies,
)
from fedgs.debugging.writers import holdout_images, select_writers, split_holdout


@pytest.mark.parametrize("writers", [1, 7, 10, 396])
@pytest.mark.parametrize("fraction", [0.0, 0.25, 0.5, 1.0])
def test_bug_hits_an_exact_seeded_share_of_writers(writers: int, fraction: float) -> None:
    mask = choose_buggy(writers, fraction, seed=3)
    assert mask.dtype == bool and mask.shape == (writers,)
    assert mask.sum() == buggy_count(writers, fraction) == int(np.floor(fraction * writers + 0.5))
    assert np.array_equal(mask, choose_buggy(writers, fraction, seed=3))


def test_bug_draw_depends_on_the_seed_and_rounds_halves_up() -> None:
    assert not np.array_equal(choose_buggy(100, 0.5, 0), choose_buggy(100, 0.5, 1))
    assert buggy_count(5, 0.5) == 3 and buggy_count(3, 0.5) == 2  # round() would give 2 and 2
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        choose_buggy(10, 1.5, 0)


def test_inverting_stored_pixels_negates_the_served_images() -> None:
    pixels = np.array([[0, 1, 127, 128, 254, 255]], dtype=np.uint8)
    flipped = invert_pixels(pixels)
    as_float = pixels.astype(np.float64) / 127.5 - 1
    assert np.allclose(flipped.astype(np.float64) / 127.5 - 1, -as_float)
    assert np.array_equal(invert_pixels(flipped), pixels)
    with pytest.raises(TypeError, match="uint8"):
        invert_pixels(pixels.astype(np.float32))


def _arrays(
    train_counts: list[int], test_counts: list[int] | None, orphans: int = 0
) -> ClientArrays:
    """Writer k's pixels are all k (train) or 100 + k (test); orphan test rows are 200."""
    train = np.repeat(np.arange(len(train_counts)), train_counts).astype(np.uint8)
    if test_counts is None:
        test = np.full(4, 250, np.uint8)
    else:
        test = np.concatenate(
            [np.repeat(100 + np.arange(len(test_counts)), test_counts), np.full(orphans, 200)]
        ).astype(np.uint8)
    return ClientArrays(
        client_ids=[f"w{k}" for k in range(len(train_counts))],
        train_pixels=np.repeat(train[:, None], 784, axis=1),
        train_labels=train.astype(np.int64),
        train_counts=np.array(train_counts, np.int64),
        test_pixels=np.repeat(test[:, None], 784, axis=1),
        test_labels=test.astype(np.int64),
        test_counts=None if test_counts is None else np.array(test_counts, np.int64),
    )


def test_select_writers_keeps_order_and_inverts_only_flagged_writers() -> None:
    arrays = _arrays([2, 1, 3], [1, 2, 1], orphans=2)
    picked = select_writers(arrays, np.array([2, 0]), invert=np.array([True, False]))
    assert picked.client_ids == ["w2", "w0"]
    assert picked.train_counts.tolist() == [3, 2] and picked.test_counts.tolist() == [1, 1]
    assert picked.train_pixels[:, 0].tolist() == [255 - 2] * 3 + [0, 0]
    assert picked.train_labels.tolist() == [2, 2, 2, 0, 0]  # labels are never touched
    assert picked.test_pixels[:, 0].tolist() == [255 - 102, 100]  # orphans dropped
    assert arrays.train_pixels[0, 0] == 0  # the source arrays are not modified


def test_global_test_set_stays_clean_and_whole() -> None:
    arrays = _arrays([2, 2], None)
    picked = select_writers(arrays, np.array([1]), invert=np.array([True]))
    assert picked.test_counts is None and picked.test_pixels[:, 0].tolist() == [250] * 4


def test_holdout_split_is_seeded_disjoint_and_complete() -> None:
    held, population = split_holdout(10, 0.2, seed=0)
    assert len(held) == 2 and len(population) == 8
    assert sorted([*held, *population]) == list(range(10))
    again = split_holdout(10, 0.2, seed=0)
    assert np.array_equal(held, again[0]) and np.array_equal(population, again[1])
    with pytest.raises(ValueError, match="too few"):
        split_holdout(3, 0.5, seed=0)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        split_holdout(10, 0.0, seed=0)


def test_classifier_gets_held_out_writers_and_orphan_test_rows_only() -> None:
    arrays = _arrays([2, 1, 3], [1, 2, 1], orphans=2)
    pixels, labels = holdout_images(arrays, np.array([1]))
    assert sorted(pixels[:, 0].tolist()) == [1, 101, 101, 200, 200]
    assert len(labels) == 5


class _FixedClassifier(torch.nn.Module):
    """Predicts class 1 for bright-centred images, class 0 otherwise (no training)."""

    feature_dim = 1

    def features(self, images: torch.Tensor) -> torch.Tensor:
        return images[:, :, 14, 14].reshape(-1, 1)

    def head(self, h: torch.Tensor) -> torch.Tensor:
        return torch.cat([-h, h], dim=1)


def test_writer_accuracies_per_writer() -> None:
    images = torch.full((5, 1, 28, 28), -1.0)
    images[[0, 1, 4], :, 14, 14] = 1.0
    labels = torch.tensor([1, 1, 1, 0, 1])  # writer 0: rows 0-1 right; writer 1: 1 of 3
    accuracies = writer_accuracies(_FixedClassifier(), images, labels, np.array([2, 3]))
    assert accuracies == pytest.approx([1.0, 2 / 3])
    with pytest.raises(ValueError, match="add up"):
        writer_accuracies(_FixedClassifier(), images, labels, np.array([2, 2]))


def test_quantile_split_and_confusion_table() -> None:
    accuracies = np.array([0.02, 0.05, 0.1, 0.5, 0.7, 0.8, 0.85, 0.9, 0.95, 0.97])
    buggy = np.array([1, 1, 1, 1, 0, 0, 0, 1, 0, 0], dtype=bool)
    thresholds = choose_thresholds(accuracies, 0.3, 0.7)
    groups = assign_groups(accuracies, thresholds)
    assert (groups == SUSPECTED).sum() == 3 and (groups == NORMAL).sum() == 3
    assert groups.tolist()[:3] == [SUSPECTED] * 3 and groups.tolist()[-3:] == [NORMAL] * 3
    table = confusion(groups, buggy)
    assert table == {
        SUSPECTED: {"with bug": 3, "without bug": 0, "total": 3},
        UNASSIGNED: {"with bug": 1, "without bug": 3, "total": 4},
        NORMAL: {"with bug": 1, "without bug": 2, "total": 3},
    }
    markdown = confusion_markdown(table)
    assert "| normal | 1 | 2 | 3 |" in markdown and "| all writers | 5 | 5 | 10 |" in markdown


def test_given_accuracies_override_quantiles_and_bad_bounds_are_refused() -> None:
    accuracies = np.array([0.1, 0.88, 0.9, 0.95])
    thresholds = choose_thresholds(accuracies, 0.4, 0.6, suspect_max=0.882, normal_min=0.939)
    assert (thresholds.suspect_max, thresholds.normal_min) == (0.882, 0.939)
    assert "given" in thresholds.source
    assert assign_groups(accuracies, thresholds).tolist() == [
        SUSPECTED,
        SUSPECTED,
        UNASSIGNED,
        NORMAL,
    ]
    with pytest.raises(ValueError, match="must be below"):
        Thresholds(0.9, 0.5, "given")
    with pytest.raises(ValueError, match="quantiles"):
        choose_thresholds(accuracies, 0.6, 0.4)
    with pytest.raises(ValueError, match="no writer falls in the normal group"):
        assign_groups(accuracies, Thresholds(0.5, 0.99, "given"))


def _digit_like(n: int) -> torch.Tensor:
    """Dark images with a bright stroke in the middle, like MNIST-polarity characters."""
    images = torch.full((n, 1, 28, 28), -1.0)
    images[:, :, 6:22, 12:16] = 1.0
    return images + 0.05 * torch.randn(n, 1, 28, 28, generator=torch.Generator().manual_seed(0))


def test_detection_statistic_on_known_inverted_and_normal_images() -> None:
    normal = _digit_like(50)
    assert inverted_share(normal) == 0.0
    assert inverted_share(-normal) == 1.0
    mixed = torch.cat([normal[:30], -normal[30:]])
    assert inverted_share(mixed) == pytest.approx(0.4)
    assert looks_inverted(mixed).tolist() == [False] * 30 + [True] * 20
    assert border_mean(normal).mean() < -0.9 and border_mean(-normal).mean() > 0.9


def test_detection_statistic_ignores_the_centre_and_refuses_bad_shapes() -> None:
    images = torch.full((1, 1, 28, 28), -1.0)
    images[:, :, 2:-2, 2:-2] = 1.0  # everything bright except the 2-pixel frame
    assert inverted_share(images) == 0.0
    with pytest.raises(ValueError, match="shape"):
        border_mean(torch.zeros(3, 28, 28))
    with pytest.raises(ValueError, match="no images"):
        inverted_share(torch.zeros(0, 1, 28, 28))


def test_grey_and_untrained_generators_are_neither_inverted_nor_normal() -> None:
    """With the old threshold at 0 a flat grey image scored 100% inverted and an untrained
    generator 0% or 100% by its seed; the margin calls both undecided."""
    from fedgs.metrics.controls import grey_sampler, untrained_sampler

    labels = torch.arange(10).repeat(20)
    grey = frame_profile(grey_sampler(labels))
    assert grey["inverted"] == grey["normal"] == 0.0 and grey["undecided"] == 1.0
    for seed in (0, 1, 2):
        untrained = untrained_sampler(10, seed=seed)(labels)
        assert inverted_share(untrained) < 0.05, seed
    assert inverted_share(torch.full((4, 1, 28, 28), 0.4)) == 0.0  # bright-ish, not by margin


def test_legibility_reads_characters_of_either_polarity() -> None:
    from fedgs.metrics.classifier import train_classifier

    images = torch.cat([_digit_like(40), torch.full((40, 1, 28, 28), -1.0)])
    labels = torch.cat([torch.ones(40), torch.zeros(40)]).long()
    model = train_classifier(images, labels, 2, epochs=3)
    drawn = legibility(model, images[:40], labels[:40])
    flipped = legibility(model, -images[:40], labels[:40])
    assert drawn["as_drawn"] == drawn["polarity_normalised"] == 1.0
    assert flipped["polarity_normalised"] == 1.0


def test_real_images_of_the_embedded_data_are_classified_by_polarity() -> None:
    from fedgs.data import load_federated

    images, _ = load_federated("embedded", num_clients=5).client_train(0)
    assert inverted_share(images) == 0.0 and inverted_share(-images) == 1.0


def test_ratio_text_and_privacy_digest() -> None:
    assert ratio_text(0.9, 0.1) == "9.00x"
    assert ratio_text(0.5, 0.0).startswith("inf") and ratio_text(0.0, 0.0).startswith("undefined")
    fedavg = {
        "strategy": "fedavg-gan",
        "delta": 1e-5,
        "steps": 3,
        "trusted_server": {"epsilon": 12.5, "accountant": "autodp-rdp"},
        "untrusted_server": {"epsilon": float("inf"), "note": "unnoised deltas"},
    }
    digest = privacy_digest(fedavg)
    assert digest["epsilons"]["trusted_server"]["epsilon"] == 12.5
    assert digest["epsilons"]["trusted_server"]["neighbouring"] == "add-remove"
    assert digest["epsilons"]["untrusted_server"] == {
        "epsilon": None,
        "accountant": None,
        "neighbouring": "add-remove",
        "note": "unnoised deltas",
    }
    # a fixed sampling seed voids the Poisson-amplified figure: no number, the note says why
    fedavg["trusted_server"] |= {"holds": False, "note": "fixed seed"}
    void = privacy_digest(fedavg)["epsilons"]["trusted_server"]
    assert void["epsilon"] is None and void["note"] == "fixed seed"


def _profile(inverted: float, normal: float) -> dict[str, float]:
    return {"inverted": inverted, "normal": normal, "undecided": 1 - inverted - normal}


def test_margin_rule_needs_both_sides_and_undecided_controls() -> None:
    inverted, normal, grey = _profile(0.9, 0.0), _profile(0.0, 0.8), _profile(0.05, 0.05)
    assert margin_rule(inverted, normal, [grey, grey]) == "met"
    assert margin_rule(_profile(0.73, 0.0), _profile(0.0, 0.23), [grey]) == "half"
    assert margin_rule(normal, inverted, [grey]) == "not met"  # both the wrong way round
    assert margin_rule(inverted, normal, [grey, _profile(0.6, 0.0)]) == "not met"
    assert margin_rule(grey, grey, [grey]) == "not met"
