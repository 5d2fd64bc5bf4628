"""What a user needs to know about a federated dataset before starting a run.

Client counts and per-client sizes decide the DP sampling rate and how many rounds make sense,
and images per class show how skewed the labels are, so they are shown up front, both as text
and as one JSON object for scripts.
"""

from __future__ import annotations

import textwrap
from typing import Any

import numpy as np

from fedgs.data.federated import FederatedDataset


def summarize(ds: FederatedDataset) -> dict[str, Any]:
    """Plain-JSON summary: sizes, classes, per-client train counts and the loader's report."""
    counts = np.diff(ds.train_offsets)
    train_classes, test_classes = ds.class_counts()
    per_client = {
        "min": int(counts.min()) if counts.size else 0,
        "median": float(np.median(counts)) if counts.size else 0.0,
        "max": int(counts.max()) if counts.size else 0,
    }
    return {
        "dataset": ds.name,
        "num_clients": ds.num_clients,
        "num_train_images": ds.num_train_images,
        "num_test_images": ds.num_test_images,
        "num_classes": ds.num_classes,
        "test_split": "per-client" if ds.has_client_test else "global",
        "train_images_per_client": per_client,
        "train_images_per_class": train_classes.tolist(),
        "test_images_per_class": test_classes.tolist(),
        "fingerprint": ds.fingerprint,
        "cache_path": str(ds.path),
        "details": ds.info,
        "train_counts": ds.train_counts(),
    }


def format_summary(summary: dict[str, Any]) -> str:
    """Human-readable lines for `summarize`'s output (without the per-client table)."""
    per_client = summary["train_images_per_client"]
    lines = [
        f"dataset            {summary['dataset']}",
        f"clients            {summary['num_clients']}",
        f"classes            {summary['num_classes']}",
        f"train images       {summary['num_train_images']}",
        f"test images        {summary['num_test_images']} ({summary['test_split']})",
        "train per client   "
        f"min {per_client['min']} / median {per_client['median']:g} / max {per_client['max']}",
    ]
    details = summary["details"]
    if "writer_split" in details:
        split = details["writer_split"]
        lines += [
            f"writers in source  {split['training_writers'] + split['evaluation_writers']} "
            + (
                f"({details['images_in_source']} images in {details['shards']} Parquet shards)"
                if details.get("source") == "parquet"
                else f"({details['duplicate_writer_copies_skipped']} duplicate copies skipped)"
            ),
            f"evaluation writers {split['evaluation_writers']} (never clients; all their images "
            f"are the test set: {split['classifier_rows']} train the domain classifier, "
            f"{split['reference_rows']} are its reference)",
            f"training writers   {split['training_writers']}: {details['writers_test_only']} "
            f"without a train split, {details['writers_dropped_by_labels']} without train images "
            f"in label mode {details['labels']}, the rest are the clients",
        ]
    else:
        options = ", ".join(f"{k}={v}" for k, v in details.items())
        lines.append(f"options            {options}")
    for split_name in ("train", "test"):
        per_class = " ".join(
            f"{label}:{n}" for label, n in enumerate(summary[f"{split_name}_images_per_class"])
        )
        lines.append(
            textwrap.fill(
                per_class,
                width=100,
                initial_indent=f"{split_name} per class".ljust(19),
                subsequent_indent=" " * 19,
            )
        )
    lines += [
        f"fingerprint        {summary['fingerprint'][:16]}",
        f"cache              {summary['cache_path']}",
    ]
    return "\n".join(lines)
