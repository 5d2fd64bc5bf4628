"""DP-MERF's quality ceiling, offline: which feature map and generator settings raise the
downstream accuracy of G fitted to the released mean embedding, noiseless and under secure
aggregation's noise.

SIMULATION, not a release: each training writer's mean embedding is computed here (once per
feature map, cached under runs/merf-ceiling/; clipped and summed per clip norm), and the
secure-aggregation mechanism is simulated with numpy noise: cohorts of m writers, each
cohort's sum noised once with N(0, (2 C sigma)^2) per coordinate, so the total over K writers
carries ceil(K / m) such draws and mu_hat = total / K. Noise is independent of who is in which
cohort, so the sum of the clipped embeddings is all the simulation needs. sigma is the Gaussian
multiplier whose single release has the asked epsilon at delta 1e-5 (autodp RDP, as ``fedgs
privacy`` computes it).

G is fitted by the project's ``MerfTrainer`` (its ``features`` swapped for the map under test)
and scored by the project's downstream CNN and MLP
(``fedgs.evaluation.utility.accuracy_of``, 5 epochs) trained on N synthetic samples with balanced
labels, tested on every evaluation writer's digits (never clients), next to the five-image-per-
class lookup table (``fedgs.metrics.controls``) built from the first 300 training writers.

    OMP_NUM_THREADS=2 nice -n 10 python benchmarks/merf_ceiling.py --features 1000 \
        --settings none e10:100 e10:500 e1:100 --classifiers mlp cnn --control
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from fedgs.data import load_federated
from fedgs.evaluation.synthetic import balanced_labels
from fedgs.evaluation.utility import accuracy_of
from fedgs.metrics.controls import lookup_sampler
from fedgs.privacy.accountants import get_accountant
from fedgs.privacy.events import mean_embedding_event
from fedgs.privacy.mean_embedding import clip
from fedgs.privacy.random_features import FeatureSpec, RandomFeatures, mean_embedding
from fedgs.training.dp_merf import MerfConfig, MerfTrainer

OUT = Path("runs/merf-ceiling")
DATA_DIR = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "femnist_full"
CLASSES = 10
DELTA = 1e-5
CONTROL_WRITERS = 300  # the lookup table's pool: the first training writers


def sigma_for(epsilon: float) -> float:
    """The smallest Gaussian multiplier (to 1e-4) whose one release has ``epsilon`` at DELTA."""
    accountant = get_accountant("autodp-rdp")
    low, high = 0.01, 1000.0
    while high - low > 1e-5:
        middle = (low + high) / 2
        if accountant.epsilon(mean_embedding_event(middle), DELTA) <= epsilon:
            high = middle
        else:
            low = middle
    return math.ceil(high * 1e4) / 1e4


def feature_map(args: argparse.Namespace) -> RandomFeatures:
    return RandomFeatures(FeatureSpec(args.features, args.bandwidth, args.seed))


def map_key(features: RandomFeatures) -> str:
    return hashlib.sha256(repr(features.spec).encode()).hexdigest()[:16]


def writer_embeddings(features: RandomFeatures) -> np.ndarray:
    """Every training writer's mean embedding, unclipped (writers x (D + 1) x classes, cached
    per feature map as float32), so that any clip norm is a cheap sum over it."""
    path = OUT / f"writers-{map_key(features)}.npy"
    if path.is_file():
        return np.load(path)
    data = load_federated("femnist", DATA_DIR, labels="digits")
    stacked = np.empty((data.num_clients, features.spec.dimension, CLASSES), np.float32)
    with torch.no_grad():
        for k in range(data.num_clients):
            images, labels = data.client_train(k)
            rows = torch.cat([features(x).double() for x in images.split(2000)])
            stacked[k] = mean_embedding(rows, labels, CLASSES).numpy()
    OUT.mkdir(parents=True, exist_ok=True)
    np.save(path, stacked)
    return stacked


def clipped_sum(embeddings: np.ndarray, clip_norm: float) -> np.ndarray:
    """The sum over writers of their embeddings clipped to ``clip_norm`` (float64)."""
    return sum(clip(matrix.astype(np.float64), clip_norm) for matrix in embeddings)


def norm_quantiles(embeddings: np.ndarray) -> dict[str, float]:
    """Where the writers' embedding norms lie: the clip norm's scale."""
    norms = np.linalg.norm(embeddings.reshape(len(embeddings), -1).astype(np.float64), axis=1)
    levels = {"min": 0.0, "q10": 0.1, "median": 0.5, "q90": 0.9, "max": 1.0}
    return {f"writer_norm_{k}": round(float(np.quantile(norms, q)), 4) for k, q in levels.items()}


def released_mean(
    total: np.ndarray, writers: int, setting: str, clip_norm: float, seed: int
) -> tuple[np.ndarray, dict]:
    """mu_hat for ``setting`` ("none", or "eEPS:M" with M a cohort size or "K")."""
    if setting == "none":
        return total / writers, {"epsilon": None}
    epsilon_text, cohort_text = setting[1:].split(":")
    cohort = writers if cohort_text == "K" else int(cohort_text)
    sigma = sigma_for(float(epsilon_text))
    cohorts = math.ceil(writers / cohort)
    rng = np.random.default_rng(seed)
    noise = rng.normal(0.0, 2 * clip_norm * sigma, (cohorts, *total.shape)).sum(0)
    record = {"epsilon": float(epsilon_text), "sigma": sigma, "m": cohort, "cohorts": cohorts}
    record["noise_norm_of_mean"] = float(np.linalg.norm(noise) / writers)
    return (total + noise) / writers, record


def fitted_sampler(args: argparse.Namespace, features: RandomFeatures, target: np.ndarray):
    """G fitted to ``target`` by MerfTrainer with ``features`` as its map; labels -> images."""
    config = MerfConfig(
        generator_steps=args.steps,
        lr=args.lr,
        batch_size=args.batch_size,
        generator_width=args.width,
    )
    trainer = MerfTrainer(CLASSES, config, config.feature_spec(args.seed), args.seed)
    trainer.features = features
    loss = trainer.fit(target)

    @torch.no_grad()
    def sample(labels: torch.Tensor) -> torch.Tensor:
        chunks = labels.split(1000)
        return torch.cat([trainer.generator.sample(y, seed=i) for i, y in enumerate(chunks)])

    return sample, loss


def scores(sample, test, classifiers: list[str], samples: int) -> dict[str, float]:
    labels = balanced_labels(samples, CLASSES)
    with torch.no_grad():
        train = (sample(labels), labels)
    return {name: accuracy_of(name, train, test, CLASSES, 5, 0)["accuracy"] for name in classifiers}


def control_pool() -> tuple[torch.Tensor, torch.Tensor]:
    data = load_federated("femnist", DATA_DIR, labels="digits")
    parts = [data.client_train(k) for k in range(CONTROL_WRITERS)]
    return torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--features", type=int, default=1000, help="random Fourier features D")
    parser.add_argument("--bandwidth", type=float, default=20.0)
    parser.add_argument("--settings", nargs="+", default=["none"], help="none or eEPS:M|K")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--width", type=int, default=8, help="G's width")
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--classifiers", nargs="+", default=["mlp"])
    parser.add_argument("--control", action="store_true", help="also score lookup k=5")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--clip-norm", type=float, default=1.0, help="C: the sensitivity and noise scale with it"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    features = feature_map(args)
    embeddings = writer_embeddings(features)
    total, writers = clipped_sum(embeddings, args.clip_norm), len(embeddings)
    test = load_federated("femnist", DATA_DIR, labels="digits").test_arrays()
    head = {"map": repr(features.spec), "dimension": int(total.shape[0]), "writers": writers}
    head |= {"clip_norm": args.clip_norm} | norm_quantiles(embeddings)
    head["signal_norm_of_mean"] = float(np.linalg.norm(total) / writers)
    head |= {k: getattr(args, k) for k in ("steps", "batch_size", "lr", "width", "samples")}
    if args.control:
        lookup = lookup_sampler(*control_pool(), CLASSES, 5)
        row = {"setting": "lookup k=5"} | scores(lookup, test, args.classifiers, args.samples)
        print(json.dumps(row), flush=True)
    for setting in args.settings:
        started = time.perf_counter()
        target, record = released_mean(total, writers, setting, args.clip_norm, args.seed)
        sample, loss = fitted_sampler(args, features, target)
        row = {"setting": setting, **record, **head, "loss": loss}
        row |= scores(sample, test, args.classifiers, args.samples)
        print(json.dumps(row | {"wall_s": round(time.perf_counter() - started)}), flush=True)


if __name__ == "__main__":
    main()
