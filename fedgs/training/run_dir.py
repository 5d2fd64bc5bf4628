"""The run directory: where every run writes its config, metrics, samples and privacy report.

Files are written atomically (temp file + rename) so a crash never leaves a torn file, and the
metrics CSV is appended one row per logged step so nothing already measured is lost.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class RunDirectory:
    """Paths and writers for one run's outputs."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.samples = self.root / "samples"
        self.samples.mkdir(exist_ok=True)
        self.metrics_csv = self.root / "metrics.csv"
        self.config_json = self.root / "config.json"
        self.privacy_json = self.root / "privacy.json"
        self.generator_pt = self.root / "generator.pt"
        self._metric_fields: list[str] | None = None

    def write_json(self, path: Path, payload: dict[str, Any]) -> None:
        write_atomic(path, (json.dumps(payload, indent=2, sort_keys=True) + "\n").encode())

    def append_metrics(self, row: dict[str, Any]) -> None:
        """Append one row; the first row fixes the columns."""
        new_file = self._metric_fields is None
        if new_file:
            self._metric_fields = list(row)
        with self.metrics_csv.open("w" if new_file else "a", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=self._metric_fields, extrasaction="ignore")
            if new_file:
                writer.writeheader()
            writer.writerow(row)
