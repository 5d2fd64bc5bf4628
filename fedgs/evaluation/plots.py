"""The evaluation's figures: a PNG and the CSV of exactly the data it shows, side by side.

- training curves of one run: domain FID, IS, label agreement, every epsilon column, and the
  logged gradient statistics when the runner recorded them;
- privacy-utility across runs: FID and downstream accuracy against the run's epsilon;
- gradient norms before and after clipping (Figure A1; see ``gradnorms`` for what is measured);
- the memorisation check's closest sample / training-image pairs.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402

from fedgs.evaluation.gradnorms import GradNorms  # noqa: E402
from fedgs.evaluation.run_files import RunFiles  # noqa: E402

# (metrics column, panel title); a panel is drawn only when its column has values
CURVES = (
    ("fid_domain", "domain-classifier FID (lower is better)"),
    ("inception_score", "Inception Score (domain classifier)"),
    ("label_agreement", "label agreement"),
    ("epsilon_untrusted", "epsilon, untrusted server (replace-one; run's accountant, delta)"),
    ("epsilon_trusted_sampler", "epsilon, trusted sampler (replace-one; run's accountant, delta)"),
    ("epsilon_trusted_server", "epsilon, trusted server (Fed-Avg GAN, add/remove-one)"),
    ("epsilon_trusted_aggregator", "epsilon, trusted aggregator (teachers, replace-one)"),
    ("received_row_norm_mean", "mean L2 norm of the received sanitized rows (server-side)"),
    ("received_delta_norm_mean", "mean L2 norm of the received deltas (Fed-Avg GAN, server-side)"),
)


def _write_csv(path: Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def training_curves(run: RunFiles, stem: Path) -> Path | None:
    """``stem``.png and ``stem``.csv: the run's logged metrics over steps; None if none logged."""
    rows = run.metrics
    panels = [(c, t) for c, t in CURVES if any(_finite(r.get(c)) for r in rows)]
    if not panels:
        return None
    columns = [c for c, _ in panels]
    _write_csv(
        stem.with_suffix(".csv"),
        ["step", *columns],
        [[int(r["step"]), *("" if r.get(c) is None else r[c] for c in columns)] for r in rows],
    )
    cols = min(3, len(panels))
    fig, axes = plt.subplots(
        math.ceil(len(panels) / cols),
        cols,
        figsize=(4.2 * cols, 3.0 * math.ceil(len(panels) / cols)),
    )
    flat = axes.ravel() if hasattr(axes, "ravel") else [axes]
    for ax, (column, title) in zip(flat, panels, strict=False):
        points = [(r["step"], r[column]) for r in rows if _finite(r.get(column))]
        ax.plot(*zip(*points, strict=True), marker="." if len(points) < 50 else None)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("generator step")
        ax.grid(alpha=0.3)
    for ax in flat[len(panels) :]:
        ax.axis("off")
    fig.suptitle(f"{run.name}: training curves", fontsize=10)
    return _save(fig, stem.with_suffix(".png"))


def privacy_utility(points: Sequence[dict], stem: Path) -> Path | None:
    """FID and accuracy against epsilon, one point per run. ``points``: dicts with ``run``,
    ``epsilon`` and any of ``fid_domain``, ``fid_inception``, ``mlp``, ``cnn``."""
    usable = [p for p in points if _finite(p.get("epsilon"))]
    if not usable:
        return None
    candidates = ("fid_domain", "fid_inception", "mlp", "cnn")
    keys = [k for k in candidates if any(_finite(p.get(k)) for p in usable)]
    _write_csv(
        stem.with_suffix(".csv"),
        ["run", "epsilon", *keys],
        [[p["run"], p["epsilon"], *(p.get(k, "") for k in keys)] for p in usable],
    )
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for key, label in (("fid_domain", "domain FID"), ("fid_inception", "Inception FID")):
        _scatter(left, usable, key, label)
    for key, label in (("mlp", "MLP accuracy"), ("cnn", "CNN accuracy")):
        _scatter(right, usable, key, label)
    left.set_title("sample quality vs privacy", fontsize=9)
    right.set_title("downstream accuracy vs privacy", fontsize=9)
    for ax in (left, right):
        ax.set_xlabel("epsilon (each run's guarantee; threat model, accountant, delta: table)")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    return _save(fig, stem.with_suffix(".png"))


def _scatter(ax: plt.Axes, points: Sequence[dict], key: str, label: str) -> None:
    chosen = sorted((p["epsilon"], p[key], p["run"]) for p in points if _finite(p.get(key)))
    if not chosen:
        return
    xs, ys, names = zip(*chosen, strict=True)
    ax.plot(xs, ys, marker="o", linestyle="none", label=label)  # runs are not a series
    for x, y, name in chosen:
        ax.annotate(name, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    if max(xs) / max(min(xs), 1e-12) > 100:
        ax.set_xscale("log")


def gradient_norms(norms: GradNorms, stem: Path) -> Path:
    """Histograms of per-sample upstream gradient norms before and after clipping to C."""
    before, after = norms.before.tolist(), norms.after.tolist()
    _write_csv(
        stem.with_suffix(".csv"),
        ["sample", "norm_before_clipping", "norm_after_clipping"],
        [[i, b, a] for i, (b, a) in enumerate(zip(before, after, strict=True))],
    )
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    top = max(max(before), norms.clip_norm) * 1.05
    for ax, values, title in ((left, before, "before clipping"), (right, after, "after clipping")):
        ax.hist(values, bins=40, range=(0.0, top), color="tab:blue")
        ax.axvline(
            norms.clip_norm, color="tab:red", linestyle="--", label=f"C = {norms.clip_norm:g}"
        )
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("L2 norm of a sample's upstream gradient")
        ax.legend(fontsize=8)
    left.set_ylabel("samples")
    fig.suptitle(
        f"gradient norms: final generator vs a critic warm-started for "
        f"{norms.warm_start_steps} steps on one client ({norms.client_images} images)",
        fontsize=9,
    )
    return _save(fig, stem.with_suffix(".png"))


def closest_pairs(pairs: Sequence[tuple[object, object, float]], stem: Path) -> Path | None:
    """``stem``.png (top: the samples closest to a training image; bottom: that training image)
    and ``stem``.csv (their pixel distances); None when there are no pairs."""
    if not pairs:
        return None
    fig, axes = plt.subplots(2, len(pairs), figsize=(1.1 * len(pairs), 2.5), squeeze=False)
    for column, (sample, training, distance) in enumerate(pairs):
        for row, image in enumerate((sample, training)):
            axis = axes[row][column]
            axis.imshow(image.reshape(28, 28).numpy(), cmap="gray", vmin=-1.0, vmax=1.0)
            axis.set_xticks([])
            axis.set_yticks([])
        axes[0][column].set_title(f"{distance:.2f}", fontsize=8)
    axes[0][0].set_ylabel("sample", fontsize=8)
    axes[1][0].set_ylabel("nearest\ntraining", fontsize=8)
    distances = [(i, d) for i, (*_, d) in enumerate(pairs)]
    _write_csv(stem.with_suffix(".csv"), ("pair", "pixel_distance"), distances)
    return _save(fig, stem.with_suffix(".png"))
