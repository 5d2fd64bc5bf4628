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

from fedgs.privacy import PrivacyLedger


def write_atomic(path: Path, data: bytes) -> None:
    """Temp file, fsync, rename: a crash mid-write leaves the previous version readable."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
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
        self.initial_scores_json = self.root / "initial_scores.json"  # the untrained generator
        self.generator_pt = self.root / "generator.pt"
        self._metric_fields: list[str] | None = None

    def write_json(self, path: Path, payload: dict[str, Any]) -> None:
        write_atomic(path, (json.dumps(payload, indent=2, sort_keys=True) + "\n").encode())

    def append_metrics(self, row: dict[str, Any]) -> None:
        """Append one row; the file's first row fixes the columns (a resumed run keeps them)."""
        if self._metric_fields is None and self.metrics_csv.exists():
            with self.metrics_csv.open(newline="") as handle:
                self._metric_fields = next(csv.reader(handle), None)
        new_file = self._metric_fields is None
        if new_file:
            self._metric_fields = list(row)
        with self.metrics_csv.open("w" if new_file else "a", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=self._metric_fields, extrasaction="ignore")
            if new_file:
                writer.writeheader()
            writer.writerow(row)

    def write_privacy_report(
        self,
        ledger: PrivacyLedger,
        delta: float,
        accountant: str,
        steps: int,
        noise_multiplier: float,
        batch_size: int,
    ) -> None:
        """Both epsilons with their threat models and accountant, plus the run's parameters."""
        report = ledger.summary(delta, accountant) | {
            "steps": steps,
            "noise_multiplier": noise_multiplier,
            "batch_size": batch_size,
        }
        self.write_json(self.privacy_json, report)
        return report


def _teacher_privacy_lines(privacy: dict) -> list[str]:
    aggregator, votes = privacy["trusted_aggregator"], privacy["votes"]
    lines = [
        f"{privacy['steps']} {privacy['strategy']} steps; delta = {privacy['delta']:g}",
        f"  epsilon, trusted aggregator (max over clients, {aggregator['accountant']}): "
        f"{aggregator['epsilon']:.4g}",
        "  epsilon, untrusted server: none (clients send unnoised votes)",
        f"  steps voted per client: max {votes['max']}, median {votes['median']}"
        f" over {votes['clients_voted']} clients",
    ]
    if privacy["strategy"] == "pate-gan":
        lines.append("  data-dependent (PATE moments) epsilon: not reported, see privacy.json")
    return lines


def _privacy_lines(privacy: dict) -> list[str]:
    if privacy.get("strategy") in ("datalens", "pate-gan"):
        return _teacher_privacy_lines(privacy)
    if privacy.get("strategy") == "fedavg-gan":
        trusted = privacy["trusted_server"]
        return [
            f"{privacy['rounds']} Fed-Avg GAN rounds; delta = {privacy['delta']:g}",
            f"  epsilon, trusted server (DP-FedAvg, {trusted['accountant']}): "
            f"{trusted['epsilon']:.4g}",
            "  epsilon, untrusted server: none (clients send unnoised deltas)",
        ]
    untrusted, trusted = privacy["untrusted_server"], privacy["trusted_sampler"]
    queries = privacy["queries"]
    return [
        f"{privacy['steps']} private generator steps; delta = {privacy['delta']:g}",
        f"  epsilon, untrusted server (max over clients, {untrusted['accountant']}): "
        f"{untrusted['epsilon']:.2f}",
        f"  epsilon, trusted sampler (assumes secret uniform sampling, {trusted['accountant']}): "
        + ("n/a" if trusted.get("epsilon") is None else f"{trusted['epsilon']:.2f}"),
        f"  queries per client: max {queries['max']}, median {queries['median']}"
        f" over {queries['clients_queried']} clients",
    ]


def summarize(run_dir: Path) -> str:
    """The short human-readable summary printed at the end of a run."""
    privacy = json.loads((run_dir / "privacy.json").read_text())
    with (run_dir / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    scored = [r for r in rows if r.get("fid_domain")]
    lines = _privacy_lines(privacy)
    if rows and rows[-1].get("bytes_down"):
        down = sum(float(r["bytes_down"]) for r in rows) / len(rows)
        up = sum(float(r["bytes_up"]) for r in rows) / len(rows)
        lines.append(f"  bytes per step (serialized messages): {down:,.0f} down, {up:,.0f} up")
    initial = run_dir / "initial_scores.json"
    if scored and initial.exists():
        untrained = json.loads(initial.read_text())
        lines.append(
            f"  domain FID: {untrained['fid_domain']:.1f} untrained -> "
            f"{float(scored[-1]['fid_domain']):.1f}"
        )
        if untrained.get("classifier_test_accuracy") is not None:
            lines.append(
                "  domain classifier (FID, IS, label agreement): accuracy "
                f"{untrained['classifier_test_accuracy']:.3f} on real evaluation-writer images"
            )
    if scored:
        last = scored[-1]
        lines.append(
            f"  last evaluation (step {last['step']}): domain FID {float(last['fid_domain']):.1f}, "
            f"IS {float(last['inception_score']):.2f}, "
            f"label agreement {float(last['label_agreement']):.3f}"
        )
    if any((run_dir / "samples").glob("*.png")):
        lines.append(f"  samples:  {run_dir / 'samples'}")
    lines += [
        f"  metrics:  {run_dir / 'metrics.csv'}",
        f"  privacy:  {run_dir / 'privacy.json'}",
        f"  generator: {run_dir / 'generator.pt'}",
    ]
    return "\n".join(lines)
