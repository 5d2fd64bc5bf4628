"""Sample-quality scores computed with the domain classifier.

- Inception Score: exp(E_x KL(p(y|x) || p(y))), with p from the domain classifier.
- FID on the classifier's penultimate features: a *domain-classifier FID*, not Inception-v3 FID.
- Label agreement: the classifier's accuracy on conditional samples w.r.t. the labels they were
  generated for; a generator that ignores its label scores about 1/classes. FID and IS can both
  improve while samples are label-independent blobs, so this is the bar that matters.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from fedgs.metrics.classifier import DomainClassifier, predict_in_batches


def inception_score(probs: torch.Tensor, splits: int = 10) -> float:
    """Mean IS over ``splits`` chunks of the softmax outputs (the usual protocol)."""
    probs = probs.double().clamp_min(1e-12)
    scores = []
    for chunk in probs.chunk(splits):
        marginal = chunk.mean(0, keepdim=True)
        kl = (chunk * (chunk.log() - marginal.log())).sum(1).mean()
        scores.append(float(kl.exp()))
    return float(np.mean(scores))


def frechet_distance(features_a: torch.Tensor, features_b: torch.Tensor) -> float:
    """||mu_a - mu_b||^2 + Tr(S_a + S_b - 2 (S_a S_b)^(1/2)) between two feature sets."""
    a = features_a.double().numpy()
    b = features_b.double().numpy()
    mu_a, mu_b = a.mean(0), b.mean(0)
    cov_a, cov_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    # Tr((S_a S_b)^(1/2)) = sum of sqrt(eigenvalues of S_a S_b), which are real and >= 0 (the
    # product is similar to a PSD matrix); this avoids sqrtm's trouble with singular covariances
    # (dead ReLU features).
    eigenvalues = np.linalg.eigvals(cov_a @ cov_b).real.clip(min=0.0)
    trace_covmean = np.sqrt(eigenvalues).sum()
    return float(
        ((mu_a - mu_b) ** 2).sum() + np.trace(cov_a) + np.trace(cov_b) - 2.0 * trace_covmean
    )


INK_LEVEL = 0.0  # in [-1, 1]: a pixel above mid-gray is ink (or paper, for inverted images)


def has_ink(samples: torch.Tensor) -> torch.Tensor:
    """Per sample: whether any pixel is above mid-gray, i.e. the image shows something at all."""
    return samples.flatten(1).amax(dim=1) > INK_LEVEL


def label_hits(
    probs: torch.Tensor, requested_labels: torch.Tensor, samples: torch.Tensor
) -> torch.Tensor:
    """Per sample: the classifier reads it as its requested label and it is not blank.

    A classifier has to put a blank image somewhere (FEMNIST's reads it as a "1"), so a generator
    that draws nothing for one class would earn that class's agreement; a blank counts as a miss.
    """
    return (probs.argmax(1) == requested_labels) & has_ink(samples).to(probs.device)


def label_agreement(
    probs: torch.Tensor, requested_labels: torch.Tensor, samples: torch.Tensor
) -> float:
    """Share of samples the classifier reads as their requested label, blank samples excluded."""
    return float(label_hits(probs, requested_labels, samples).float().mean())


@dataclass(frozen=True)
class GeneratorScores:
    inception_score: float
    fid_domain: float
    label_agreement: float
    num_samples: int

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def score_generator(
    classifier: DomainClassifier,
    samples: torch.Tensor,
    requested_labels: torch.Tensor,
    real_images: torch.Tensor,
) -> GeneratorScores:
    """IS, domain FID against ``real_images`` and label agreement of conditional samples."""
    probs, features = predict_in_batches(classifier, samples)
    _, real_features = predict_in_batches(classifier, real_images)
    return GeneratorScores(
        inception_score=inception_score(probs),
        fid_domain=frechet_distance(features, real_features),
        label_agreement=label_agreement(probs, requested_labels, samples),
        num_samples=int(samples.shape[0]),
    )
