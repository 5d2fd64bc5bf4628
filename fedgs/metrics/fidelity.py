"""Fidelity and diversity in the domain classifier's feature space, overall and per class.

- Precision, recall, density, coverage (Kynkaanniemi et al. 2019; Naeem et al. 2020): the
  authors' ``prdc`` package's figures, computed in blocks (`fedgs.metrics.neighbours`), with
  real = the evaluation writers' reference images. Precision and density reward samples that
  look real; recall and coverage reward samples that cover the real variety, which a lookup
  table of a few real images per class cannot.
- Per-class FID: the domain-classifier FID between the samples of one class and the real images
  of that class (the overall FID can be low while every class is a single prototype).
- Intra-class diversity: mean pairwise feature distance within a class, relative to the real
  images' (1 = as varied as real handwriting, 0 = one image per class).
"""

from __future__ import annotations

import numpy as np
import torch

from fedgs.metrics.neighbours import kth_neighbour_distances, prdc_blocks
from fedgs.metrics.scores import frechet_distance

PRDC_KEYS = ("precision", "recall", "density", "coverage")
NEAREST_K = 5  # the prdc paper's default


def prdc_k(real: int, fake: int, k: int = NEAREST_K) -> int:
    """The neighbour count prdc can use with ``real`` and ``fake`` samples (k, or fewer)."""
    k = min(k, real - 1, fake - 1)
    if k < 1:
        raise ValueError("precision/recall need at least two real and two fake samples")
    return k


def prdc(
    real: torch.Tensor,
    fake: torch.Tensor,
    k: int = NEAREST_K,
    real_radii: np.ndarray | None = None,
) -> dict[str, float]:
    """Precision, recall, density and coverage of ``fake`` features against ``real`` ones.

    The ``prdc`` package's figures, computed in blocks (`fedgs.metrics.neighbours`): its N x N
    matrix of the real features does not fit in memory for FEMNIST's 43,000 reference images.
    ``real_radii``: the real features' k-NN radii, when already computed.
    """
    k = prdc_k(len(real), len(fake), k)
    return prdc_blocks(real.double().numpy(), fake.double().numpy(), k, real_radii)


def mean_pairwise_distance(features: torch.Tensor) -> float:
    """Mean Euclidean distance between distinct rows (0 for fewer than two rows)."""
    if len(features) < 2:
        return 0.0
    distances = torch.cdist(features.double(), features.double())
    return float(distances.sum() / (len(features) * (len(features) - 1)))


class RealFeatures:
    """The real reference's features, overall and per class, and what every score compares
    with them: the k-NN radii and the mean pairwise distance, each computed once for all the
    samplers an instrument scores."""

    def __init__(self, features: torch.Tensor, labels: torch.Tensor, num_classes: int) -> None:
        self.features, self.labels, self.num_classes = features, labels, num_classes
        self._radii: dict[tuple[int | None, int], np.ndarray] = {}
        self._spread: dict[int, float] = {}

    def of_class(self, c: int | None) -> torch.Tensor:
        """All features (``None``) or those of class ``c``."""
        return self.features if c is None else self.features[self.labels == c]

    def radii(self, c: int | None, k: int) -> np.ndarray:
        """The k-NN radii of the real features (of class ``c``), computed once."""
        if (c, k) not in self._radii:
            self._radii[(c, k)] = kth_neighbour_distances(self.of_class(c).double().numpy(), k)
        return self._radii[(c, k)]

    def spread(self, c: int) -> float:
        """The mean pairwise distance of class ``c``'s real features, computed once."""
        if c not in self._spread:
            self._spread[c] = mean_pairwise_distance(self.of_class(c))
        return self._spread[c]

    def prdc(self, fake: torch.Tensor, c: int | None = None) -> dict[str, float]:
        """`prdc` of ``fake`` against the real features (of class ``c``)."""
        real = self.of_class(c)
        k = prdc_k(len(real), len(fake))
        return prdc(real, fake, k, self.radii(c, k))


def feature_scores(
    fake: torch.Tensor, fake_labels: torch.Tensor, real: RealFeatures
) -> dict[str, float | list[float]]:
    """Overall PRDC, per-class PRDC, per-class FID and intra-class diversity."""
    scores: dict[str, float | list[float]] = dict(real.prdc(fake))
    per_class: dict[str, list[float]] = {f"{k}_per_class": [] for k in (*PRDC_KEYS, "fid")}
    diversity = []
    for c in range(real.num_classes):
        f, r = fake[fake_labels == c], real.of_class(c)
        if len(f) < 2 or len(r) < 2:
            raise ValueError(f"class {c} has too few samples ({len(f)}) or real images ({len(r)})")
        for key, value in real.prdc(f, c).items():
            per_class[f"{key}_per_class"].append(value)
        per_class["fid_per_class"].append(frechet_distance(f, r))
        diversity.append(mean_pairwise_distance(f) / max(real.spread(c), 1e-12))
    scores |= per_class
    fids = np.asarray(per_class["fid_per_class"])
    scores["fid_per_class_median"] = float(np.median(fids))
    scores["fid_per_class_max"] = float(fids.max())
    scores["intra_class_diversity"] = float(np.mean(diversity))
    scores["intra_class_diversity_per_class"] = diversity
    return scores
