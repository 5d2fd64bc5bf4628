"""The run directory: where every run writes its config, metrics, samples and privacy report.

Files are written atomically (temp file + rename) so a crash never leaves a torn file, and the
metrics CSV is appended one row per logged step so nothing already measured is lost.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedgs.algorithms import algorithm
from fedgs.privacy.client_sampling import FIXED_SEED_REASON
from fedgs.privacy.report import load_privacy, privacy_report
from fedgs.privacy.threat_models import SECURE_AGGREGATION, TRUSTED_AGGREGATOR, TRUSTED_SERVER
from fedgs.private_files import PRIVATE_FILE, private_dir, private_open

if TYPE_CHECKING:
    from torch import nn


def write_atomic(path: Path, data: bytes) -> None:
    """Temp file, fsync, rename: a crash mid-write leaves the previous version readable. The
    file is the owner's alone (0600)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb", opener=private_open) as handle:
        os.fchmod(handle.fileno(), PRIVATE_FILE)  # a temp file left by a crash had its own
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class RunDirectory:
    """Paths and writers for one run's outputs."""

    def __init__(self, root: str | Path) -> None:
        self.root = private_dir(Path(root), existing=False)
        self.samples = private_dir(self.root / "samples", existing=False)
        self.metrics_csv = self.root / "metrics.csv"
        self.config_json = self.root / "config.json"
        self.privacy_json = self.root / "privacy.json"
        self.initial_scores_json = self.root / "initial_scores.json"  # the untrained generator
        self.generator_pt = self.root / "generator.pt"
        self._metric_fields: list[str] | None = None

    def write_json(self, path: Path, payload: dict[str, Any]) -> None:
        write_atomic(path, (json.dumps(payload, indent=2, sort_keys=True) + "\n").encode())

    def save_generator(
        self,
        strategy: str,
        generator: nn.Module,
        num_classes: int,
        settings: dict[str, dict[str, Any]],
        ema: nn.Module | None = None,
    ) -> None:
        """generator.pt, the one payload every run writes (``fedgs.evaluation.generator_loader``
        reads it back): G, its EMA copy when the strategy keeps one, and ``settings`` (one key:
        ``gswgan`` or ``fedavg_gan``, the hyperparameters G is rebuilt from)."""
        payload = {
            "strategy": strategy,
            "generator": generator.state_dict(),
            "num_classes": num_classes,
        } | settings
        if ema is not None:
            payload["ema"] = ema.state_dict()
        import torch  # here: summaries and caches use this module without torch

        buffer = io.BytesIO()
        torch.save(payload, buffer)
        write_atomic(self.generator_pt, buffer.getvalue())

    def append_metrics(self, row: dict[str, Any]) -> None:
        """Append one row; the file's first row fixes the columns (a resumed run keeps them)."""
        if self._metric_fields is None and self.metrics_csv.exists():
            with self.metrics_csv.open(newline="") as handle:
                self._metric_fields = next(csv.reader(handle), None)
        new_file = self._metric_fields is None
        if new_file:
            self._metric_fields = list(row)
        mode = "w" if new_file else "a"
        with open(self.metrics_csv, mode, newline="", opener=private_open) as handle:
            writer = csv.DictWriter(handle, fieldnames=self._metric_fields, extrasaction="ignore")
            if new_file:
                writer.writeheader()
            writer.writerow(row)

    def write_privacy_report(
        self,
        strategy: str,
        summary: dict[str, Any],
        details: dict[str, Any],
        sampling: dict[str, Any],
    ) -> dict[str, Any]:
        """The one privacy.json writer (``fedgs.privacy.report``'s schema, every strategy)."""
        report = privacy_report(strategy, summary, details, sampling)
        self.write_json(self.privacy_json, report)
        return report


def _amplified(figure: dict, sampling: dict, text: str) -> str:
    """An amplified figure, or why it does not hold (fixed sampling seed)."""
    if figure.get("epsilon") is None:
        return "n/a"
    if not sampling.get("amplified_figures_hold", True):
        return f"{text} (does NOT hold: {sampling.get('why_void', FIXED_SEED_REASON)})"
    return text


def _trusted_sampler_figure(trusted: dict, steps: int) -> str:
    """The trusted-sampler epsilon, which bound it is (the tightest valid one) and, when it was
    computed before the report's last step (at a checkpoint), at which step."""
    if trusted.get("epsilon") is None:
        return ""
    text = f"{trusted['epsilon']:.2f}"
    if "tightest" in trusted:
        text += f" (tightest valid bound: {trusted['tightest']})"
    computed = trusted.get("computed_at_step")
    if computed is not None and computed != steps:
        text += f" [computed at step {computed}]"
    return text


def _teacher_privacy_lines(privacy: dict) -> list[str]:
    aggregator, votes = privacy["trusted_aggregator"], privacy["votes"]
    neighbouring = privacy["neighbouring"]
    lines = [
        f"{privacy['steps']} {privacy['strategy']} steps",
        f"  epsilon (trusted aggregator, {aggregator['accountant']}, delta={privacy['delta']:g}, "
        f"{neighbouring}; max over clients): {aggregator['epsilon']:.4g}",
        "  epsilon (untrusted server): none (clients send unnoised votes)",
        f"  steps asked per client: max {votes['max']}, median {votes['median']}"
        f" over {votes['clients_voted']} clients",
    ]
    if "data_dependent_epsilon" in privacy.get("mechanism", {}):  # PATE-GAN's
        lines.append("  data-dependent (PATE moments) epsilon: not reported, see privacy.json")
    return lines


def _privacy_lines(privacy: dict) -> list[str]:
    threat_model = algorithm(privacy["strategy"]).threat_model  # of its headline epsilon
    if threat_model == TRUSTED_AGGREGATOR:  # the teacher ensembles (DataLens, PATE-GAN, ...)
        return _teacher_privacy_lines(privacy)
    sampling = privacy.get("sampling", {})
    delta = f"delta={privacy['delta']:g}"
    if privacy.get("headline") == SECURE_AGGREGATION:  # GS-WGAN or Fed-Avg GAN
        return _secure_privacy_lines(privacy, delta) + _query_lines(privacy)
    if threat_model == TRUSTED_SERVER:  # Fed-Avg GAN
        trusted = privacy["trusted_server"]
        neighbouring = privacy["neighbouring"]
        figure = f"{trusted['epsilon']:.4g}"
        return [
            f"{privacy['rounds']} Fed-Avg GAN rounds",
            f"  epsilon (trusted server, DP-FedAvg with Poisson sampling, "
            f"{trusted['accountant']}, {delta}, {neighbouring}): "
            + _amplified(trusted, sampling, figure),
            "  epsilon (untrusted server): none (clients send unnoised deltas)",
        ]
    untrusted, trusted = privacy["untrusted_server"], privacy["trusted_sampler"]
    neighbouring = privacy["neighbouring"]
    return [
        f"{privacy['steps']} private generator steps",
        f"  epsilon (untrusted server, {untrusted['accountant']}, {delta}, {neighbouring}; "
        f"max over clients): {untrusted['epsilon']:.2f}",
        f"  epsilon (trusted sampler: assumes secret uniform sampling, {trusted['accountant']}, "
        f"{delta}, {neighbouring}): "
        + _amplified(trusted, sampling, _trusted_sampler_figure(trusted, privacy["steps"])),
    ] + _query_lines(privacy)


def _secure_privacy_lines(privacy: dict, delta: str) -> list[str]:
    """A secure-aggregation run: its headline, the tighter ddg-rdp figure and, beside them,
    what the clients' own noise shares guarantee if the secure-aggregation assumptions fail."""
    secure, local = privacy["secure_aggregation"], privacy["untrusted_server"]
    secagg, neighbouring = privacy["secagg"], privacy["neighbouring"]
    model = (
        f"honest-but-curious server, at most {secagg['threshold'] - 1} colluding clients, at "
        f"least {secagg['min_survivors']} survivors"
    )
    lines = [
        f"{privacy['steps']} private {_secure_unit(privacy)} through secure aggregation (SecAgg+, "
        f"cohorts of {secagg['max_clients']}, threshold {secagg['threshold']}, "
        f"{secagg['bits']}-bit sums)",
        f"  epsilon (secure aggregation: {model}; {secure['accountant']}, {delta}, "
        f"{neighbouring}; max over clients): {secure['epsilon']:.2f}",
    ]
    if tighter := privacy.get("secure_aggregation_ddg_rdp"):
        lines.append(
            f"  epsilon (the same, {tighter['accountant']}: the sum of discrete Gaussians' own "
            f"bound): {tighter['epsilon']:.2f}"
        )
    lines.append(
        f"  epsilon (local noise only: a client's own share, if those assumptions fail; "
        f"{local['accountant']}, {delta}, {neighbouring}): {local['epsilon']:.2f}"
    )
    return lines


def _secure_unit(privacy: dict) -> str:
    """What a secure run's steps are called: Fed-Avg GAN's are rounds."""
    return "rounds" if privacy["strategy"] == "fedavg-gan" else "generator steps"


def _query_lines(privacy: dict) -> list[str]:
    """What GS-WGAN's server sent and what became of it."""
    queries = privacy["queries"]
    lines = [
        f"  queries per client (paid when sent): max {queries['max']}, median "
        f"{queries['median']} over {queries['clients_queried']} clients",
    ]
    outcomes = queries.get("outcomes")
    if outcomes:
        lines.append(
            f"  queries sent: {outcomes['answered']} answered, {outcomes['dropped']} dropped, "
            f"{outcomes['no-reply']} without a reply (all paid)"
        )
    if silent_nodes := queries.get("unattributed_nodes"):
        lines.append(
            f"  nodes that never answered: {silent_nodes} (dead, refusing or unreachable); their "
            f"{queries['unattributed']} queries count for every client"
        )
    if public := privacy.get("public_data"):
        lines.append(
            f"  public data: G pre-trained for {public['pretrain_steps']} steps on "
            f"{public['source']} before any query (no privacy cost; results are not from "
            "client data alone)"
        )
    return lines


def _reply_lines(rows: list[dict[str, str]]) -> list[str]:
    """Partial failure goes on: how many asked clients answered, and steps nobody answered
    (federated runs; the centralized one asks nobody)."""
    if not rows or "sampled" not in rows[0]:
        return []
    asked = sum(int(r["sampled"] or 0) for r in rows)
    answered = sum(int(r["answered"] or 0) for r in rows)
    silent = sum(1 for r in rows if int(r["sampled"] or 0) > 0 and int(r["answered"] or 0) == 0)
    return [
        f"  client replies: {answered:,} answered, {asked - answered:,} dropped of {asked:,} asked"
        f" ({silent} steps with no answer)"
    ]


# strategy -> the option naming how many nodes a step asks (Fed-Avg GAN's Poisson rounds vary)
_NODES_PER_STEP = {
    "gswgan": "clients-per-step",
    "datalens": "teachers-per-step",
    "pate-gan": "teachers-per-step",
}


def _shrunk_step_lines(rows: list[dict[str, str]], config: dict[str, Any]) -> list[str]:
    """GS-WGAN and teacher steps that asked fewer nodes than ``clients-per-step`` /
    ``teachers-per-step``: fewer were online (a node died or left), so the step asked every one,
    and paid for each (the run went on)."""
    option = _NODES_PER_STEP.get(str(config.get("strategy")))
    if option is None or not rows or "sampled" not in rows[0]:
        return []
    m = int(config.get(option, 0))
    shrunk = [int(r["sampled"] or 0) for r in rows if int(r["sampled"] or 0) < m]
    if not shrunk:
        return []
    return [
        f"  steps with fewer nodes online than {option} = {m}: {len(shrunk)}, each "
        f"asked every node online ({min(shrunk)} to {max(shrunk)}; each query paid when sent)"
    ]


def summarize(run_dir: Path) -> str:
    """The short human-readable summary printed at the end of a run."""
    privacy = load_privacy(run_dir / "privacy.json")
    with (run_dir / "metrics.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    scored = [r for r in rows if r.get("fid_domain")]
    lines = _privacy_lines(privacy) + _reply_lines(rows)
    config_json = run_dir / "config.json"
    if config_json.exists():
        lines += _shrunk_step_lines(rows, json.loads(config_json.read_text()))
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
