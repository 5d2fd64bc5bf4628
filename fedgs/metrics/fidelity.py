"""Fidelity and diversity in the domain classifier's feature space, overall and per class.

- Precision, recall, density, coverage (Kynkaanniemi et al. 2019; Naeem et al. 2020), from the
  authors' ``prdc`` package, with real = the evaluation writers' reference images. Precision and
  density reward samples that look real; recall and coverage reward samples that cover the real
  variety, which a lookup table of a few real images per class cannot.
- Per-class FID: the domain-classifier FID between the samples of one class and the real images
  of that class (the overall FID can be low while every class is a single prototype).
- Intra-class diversity: mean pairwise feature distance within a class, relative to the real
  images' (1 = as varied as real handwriting, 0 = one image per class).
"""

from __future__ import annotations

import contextlib
import io
import warnings

import numpy as np
import torch
from prdc import compute_prdc

from fedgs.metrics.scores import frechet_distance

PRDC_KEYS = ("precision", "recall", "density", "coverage")
NEAREST_K = 5  # the prdc paper's default


def prdc(real: torch.Tensor, fake: torch.Tensor, k: int = NEAREST_K) -> dict[str, float]:
    """Precision, recall, density and coverage of ``fake`` features against ``real`` ones."""
    k = min(k, len(real) - 1, len(fake) - 1)
    if k < 1:
        raise ValueError("precision/recall need at least two real and two fake samples")
    # prdc prints its sample counts, and its scikit-learn calls warn about joblib configuration
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        values = compute_prdc(real.double().numpy(), fake.double().numpy(), nearest_k=k)
    return {key: float(values[key]) for key in PRDC_KEYS}


def mean_pairwise_distance(features: torch.Tensor) -> float:
    """Mean Euclidean distance between distinct rows (0 for fewer than two rows)."""
    if len(features) < 2:
        return 0.0
    distances = torch.cdist(features.double(), features.double())
    return float(distances.sum() / (len(features) * (len(features) - 1)))


def feature_scores(
    fake: torch.Tensor,
    fake_labels: torch.Tensor,
    real: torch.Tensor,
    real_labels: torch.Tensor,
    num_classes: int,
) -> dict[str, float | list[float]]:
    """Overall PRDC, per-class PRDC, per-class FID and intra-class diversity."""
    scores: dict[str, float | list[float]] = dict(prdc(real, fake))
    per_class: dict[str, list[float]] = {f"{k}_per_class": [] for k in (*PRDC_KEYS, "fid")}
    diversity = []
    for c in range(num_classes):
        f, r = fake[fake_labels == c], real[real_labels == c]
        if len(f) < 2 or len(r) < 2:
            raise ValueError(f"class {c} has too few samples ({len(f)}) or real images ({len(r)})")
        for key, value in prdc(r, f).items():
            per_class[f"{key}_per_class"].append(value)
        per_class["fid_per_class"].append(frechet_distance(f, r))
        diversity.append(mean_pairwise_distance(f) / max(mean_pairwise_distance(r), 1e-12))
    scores |= per_class
    fids = np.asarray(per_class["fid_per_class"])
    scores["fid_per_class_median"] = float(np.median(fids))
    scores["fid_per_class_max"] = float(fids.max())
    scores["intra_class_diversity"] = float(np.mean(diversity))
    scores["intra_class_diversity_per_class"] = diversity
    return scores
