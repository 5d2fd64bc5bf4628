"""The evaluation's figures: a PNG and the CSV of exactly the data it shows, side by side.

- training curves of one run: domain FID, IS, label agreement, every epsilon column, and the
  logged gradient statistics when the runner recorded them;
- privacy-utility across runs: downstream CNN and MLP accuracy against each run's epsilon, one
  line per strategy and threat model, the controls as levels and the non-private upper bound;
- gradient norms before and after clipping (Figure A1; see ``gradnorms`` for what is measured);
- the memorisation check's closest sample / training-image pairs.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
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
    ("epsilon_trusted_sampler", "epsilon, trusted sampler (replace-one; tightest valid bound)"),
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


@dataclass(frozen=True)
class CurvePoint:
    """One run on the privacy-utility figure; ``series`` groups runs of one strategy under one
    threat model (only those are one curve), ``epsilon`` inf = trained without noise.
    Points of one series with the same ``setting`` (default: the same ``run`` name, e.g.
    folders OUT_SEED0/gs-e10 and OUT_SEED1/gs-e10) are seeds of one setting: the curve goes
    through their mean and marks each."""

    run: str
    series: str
    threat_model: str
    epsilon: float
    cnn: float | None
    mlp: float | None
    setting: str = ""


@dataclass(frozen=True)
class Control:
    """A control's downstream accuracies: a reference level, not a point (it has no epsilon)."""

    name: str
    cnn: float | None
    mlp: float | None


# the controls drawn as reference lines (flat grey sits with the untrained generator at chance;
# public fonts only where the run's classes are the digits)
CURVE_CONTROLS = (
    "real training writers",
    "lookup k=5",
    "lookup k=1",
    "public fonts",
    "untrained generator",
)
NON_PRIVATE = "non-private (no DP)"
_CURVE_HEADER = ("kind", "series", "threat_model", "name", "epsilon", "cnn", "mlp")
_PANELS = (("cnn", "downstream CNN accuracy"), ("mlp", "downstream MLP accuracy"))


def privacy_utility(
    points: Sequence[CurvePoint], controls: Sequence[Control], stem: Path
) -> Path | None:
    """``stem``.png and ``stem``.csv: downstream accuracy against epsilon (log x), one line per
    series, the controls in CURVE_CONTROLS as dashed levels and runs without noise at the right
    edge as the non-private upper bound; None when no run has an accuracy to draw."""
    ordered = sorted(points, key=lambda p: (p.series, p.epsilon))
    drawn = [c for name in CURVE_CONTROLS for c in controls if c.name == name]
    panels = [(k, t) for k, t in _PANELS if any(_finite(getattr(p, k)) for p in ordered)]
    if not panels:
        return None
    _write_csv(stem.with_suffix(".csv"), _CURVE_HEADER, _curve_rows(ordered, drawn))
    fig, axes = plt.subplots(
        1, len(panels), figsize=(6.5 * len(panels), 4.6), squeeze=False, sharey=True
    )
    for ax, (key, title) in zip(axes[0], panels, strict=True):
        _curve_panel(ax, ordered, drawn, key)
        ax.set_title(title + " vs privacy (train on synthetic, test on real)", fontsize=9)
    axes[0][0].set_ylabel("accuracy on the evaluation writers")
    axes[0][0].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    return _save(fig, stem.with_suffix(".png"))


def _curve_rows(points: Sequence[CurvePoint], controls: Sequence[Control]) -> list[list[object]]:
    """The CSV: every run (private, or non-private with epsilon inf), then every control."""
    rows: list[list[object]] = [
        [
            "run" if _finite(p.epsilon) else "non-private",
            p.series,
            p.threat_model,
            p.run,
            p.epsilon,
            _cell(p.cnn),
            _cell(p.mlp),
        ]
        for p in points
    ]
    return rows + [["control", "", "", c.name, "", _cell(c.cnn), _cell(c.mlp)] for c in controls]


def _cell(value: float | None) -> object:
    return "" if value is None else value


def _uncell(cell: str) -> float | None:
    """What ``_cell`` wrote, read back: an empty cell is None."""
    return float(cell) if cell else None


def read_curve_csv(path: Path) -> tuple[list[CurvePoint], list[Control]]:
    """The points and controls of a figure's CSV as ``privacy_utility`` wrote it, so a later
    scoring can redraw that figure with more runs."""
    points: list[CurvePoint] = []
    controls: list[Control] = []
    with Path(path).open(newline="") as handle:
        for row in csv.DictReader(handle):
            cnn, mlp = _uncell(row["cnn"]), _uncell(row["mlp"])
            if row["kind"] == "control":
                controls.append(Control(row["name"], cnn, mlp))
            else:
                epsilon = float(row["epsilon"])
                points.append(
                    CurvePoint(row["name"], row["series"], row["threat_model"], epsilon, cnn, mlp)
                )
    return points, controls


def _curve_panel(
    ax: plt.Axes, points: Sequence[CurvePoint], controls: Sequence[Control], key: str
) -> None:
    """One accuracy panel: a line per series through each setting's mean over its seeds (every
    seed a small dot when a setting has several), no-noise settings as stars at the right edge."""
    finite = sorted({p.epsilon for p in points if _finite(p.epsilon)})
    if len(finite) > 1:
        ax.set_xscale("log")
    edge = _right_edge(finite)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, series in enumerate(dict.fromkeys(p.series for p in points)):
        colour = colours[index % len(colours)]
        mine = [p for p in points if p.series == series and _finite(getattr(p, key))]
        means = _seed_means(mine, key)
        label = series
        if len(means) < len(mine):
            seeds = [(p.epsilon if _finite(p.epsilon) else edge, getattr(p, key)) for p in mine]
            ax.plot(*zip(*seeds, strict=True), ".", color=colour, alpha=0.45)
            label = f"{series}, mean of seeds (dots: each seed)"
        private = sorted((e, a) for e, a in means if _finite(e))
        if private:
            ax.plot(*zip(*private, strict=True), marker="o", color=colour, label=label)
        for level in [a for e, a in means if not _finite(e)]:
            ax.plot(
                edge,
                level,
                marker="*",
                markersize=13,
                color=colour,
                linestyle="none",
                label=f"{label}: {NON_PRIVATE}",
            )
            ax.annotate(
                NON_PRIVATE,
                (edge, level),
                fontsize=7,
                ha="right",
                xytext=(-6, 5),
                textcoords="offset points",
            )
    for control in controls:
        _reference(ax, control.name, getattr(control, key))
    ax.set_ylim(0.0, 1.0)
    ax.set_xlabel("epsilon of each run's own guarantee (threat model: legend)", fontsize=8)
    ax.grid(alpha=0.3)


def _seed_means(points: Sequence[CurvePoint], key: str) -> list[tuple[float, float]]:
    """(epsilon, accuracy) of each setting in ``points``, the means over its seeds (their
    epsilons differ where a run is stopped by its wall-clock budget; inf stays inf)."""
    settings: dict[str, list[CurvePoint]] = {}
    for point in points:
        settings.setdefault(point.setting or point.run, []).append(point)
    return [
        (
            sum(p.epsilon for p in seeds) / len(seeds),
            sum(getattr(p, key) for p in seeds) / len(seeds),
        )
        for seeds in settings.values()
    ]


def _right_edge(finite: Sequence[float]) -> float:
    """Where a run without noise is drawn: right of every finite epsilon (x4 on a log axis)."""
    if not finite:
        return 1.0
    return finite[-1] * (4.0 if len(finite) > 1 else 2.0) if finite[-1] > 0 else 1.0


def _reference(ax: plt.Axes, name: str, level: float | None) -> None:
    """A control's accuracy as a dashed level, labelled at the left end of the line."""
    if not _finite(level):
        return
    ax.axhline(level, color="0.45", linestyle="--", linewidth=0.9)
    ax.annotate(
        f"{name} ({level:.2f})",
        (0.01, level),
        xycoords=("axes fraction", "data"),
        fontsize=7,
        color="0.3",
        xytext=(0, 2),
        textcoords="offset points",
    )


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
