"""Score a finished run's generator (EMA and raw copy) per class, with the domain classifier of a
chosen set of FEMNIST writers.

A run scores itself with the classifier of its own clients' data; this re-scores the final
generator with another one (by default every FEMNIST digit writer's), so runs on different writer
subsets can be compared with one instrument, and says which classes carry the label agreement.

Usage: python benchmarks/score_run.py runs/x [--clients 0] [--samples 1000]
Prints a markdown table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import torch

from fedgs.data import load_federated
from fedgs.evaluation.generator_loader import load_generator
from fedgs.metrics.classifier import predict_in_batches
from fedgs.metrics.evaluator import GeneratorEvaluator
from fedgs.metrics.scores import has_ink, label_hits, score_generator


def per_class_agreement(
    evaluator: GeneratorEvaluator, samples: torch.Tensor
) -> tuple[list[float], list[int]]:
    """Label agreement of each requested class (blanks as misses) and blank samples per class."""
    probs, _ = predict_in_batches(evaluator.classifier, samples)
    hits = label_hits(probs, evaluator.labels, samples)
    inked = has_ink(samples)
    agreement, blanks = [], []
    for c in range(evaluator.num_classes):
        rows = evaluator.labels == c
        agreement.append(round(float(hits[rows].float().mean()), 3))
        blanks.append(int((~inked[rows]).sum()))
    return agreement, blanks


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir")
    p.add_argument("--data-dir", default="../shared/data/femnist_leaf")
    p.add_argument(
        "--clients", type=int, default=0, help="classifier of the first N writers (0 = all)"
    )
    p.add_argument("--samples", type=int, default=1000, help="samples scored per generator")
    a = p.parse_args()
    dataset = load_federated("femnist", a.data_dir, labels="digits", num_clients=a.clients or None)
    evaluator = GeneratorEvaluator.for_dataset(dataset, a.samples)
    loaded = load_generator(a.run_dir)
    report = {
        "run_dir": a.run_dir,
        "classifier_writers": dataset.num_clients,
        "classifier_test_accuracy": evaluator.classifier_test_accuracy,
    }
    print("| generator | FID | IS | label agreement | per class 0-9 | blanks |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, model in (("ema", loaded.model), ("raw", loaded.raw)):
        samples = replace(loaded, model=model).sample(evaluator.labels)
        scores = score_generator(
            evaluator.classifier, samples, evaluator.labels, evaluator.real_images
        )
        agreement, blanks = per_class_agreement(evaluator, samples)
        report[name] = {**scores.to_dict(), "per_class": agreement, "blanks": blanks}
        print(
            f"| {name} | {scores.fid_domain:.1f} | {scores.inception_score:.2f} | "
            f"{scores.label_agreement:.3f} | {' '.join(f'{x:.2f}' for x in agreement)} | "
            f"{sum(blanks)} |"
        )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
