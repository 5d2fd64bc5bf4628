"""The instrument's table: one row per sampler (runs and controls), every figure marked where it
does not beat the 5-images-per-class lookup table, and the quality bars each row passes.

Shared by ``fedgs evaluate`` (markdown on the terminal), ``fedgs report`` (HTML) and
benchmarks/score_run.py (results/log/), so every place prints the same columns.
"""

from __future__ import annotations

from typing import Any

from fedgs.metrics.bars import BARS, beats, passes

LOOKUP = "lookup k=5"
NOT_BEATING = "°"  # marks a figure that does not beat the lookup table
COLUMNS: tuple[tuple[str, str], ...] = (
    ("cnn_accuracy", "CNN acc."),
    ("cnn_calibrated", "CNN calibr."),
    ("mlp_accuracy", "MLP acc."),
    ("mlp_calibrated", "MLP calibr."),
    ("precision", "precision"),
    ("recall", "recall"),
    ("density", "density"),
    ("coverage", "coverage"),
    ("fid_per_class_median", "per-class FID median"),
    ("fid_per_class_max", "per-class FID max"),
    ("intra_class_diversity", "intra-class diversity"),
    ("label_agreement", "label agr."),
    ("near_copy_share", "near-copy share"),
)
LEGEND = (
    f"{NOT_BEATING} = does not beat the {LOOKUP} control on this figure (it then says nothing "
    "about the generator). Bars: "
    + ", ".join(f"{k} {'>=' if d == 'max' else '<='} {v:g}" for k, (d, v) in BARS.items())
    + ". Downstream: trained on the sampler's images, tested on the evaluation writers' real "
    "images; calibrated = divided by the same classifier trained on as many real images of the "
    "training writers. Features: the domain classifier of the evaluation writers. Near-copy share: "
    "samples closer to a training image than 99% of held-out real images are (real held-out "
    "images: 0.01)."
)


def cells(row: dict[str, Any], lookup: dict[str, Any] | None) -> list[str]:
    """The row's figures as text, marked where they do not beat ``lookup``."""
    won = beats(row, lookup) if lookup is not None and row is not lookup else {}
    out = []
    for key, _ in COLUMNS:
        value = row[key]
        marked = lookup is not None and row is not lookup and key in won and not won[key]
        if value >= 100:
            out.append(f"{value:.0f}" + (NOT_BEATING if marked else ""))
        else:
            out.append(f"{value:.3f}" + (NOT_BEATING if marked else ""))
    passed = passes(row)
    out.append(f"{sum(passed.values())}/{len(passed)}")
    return out


def header(extra: tuple[str, ...] = ()) -> list[str]:
    return ["sampler", *extra, *(h for _, h in COLUMNS), "bars passed"]


def rows_text(rows: list[dict[str, Any]], extra: tuple[str, ...] = ()) -> list[list[str]]:
    """Cells of every row; ``extra`` keys (e.g. epsilon) go after the name as they are."""
    lookup = next((r for r in rows if r["name"] == LOOKUP), None)
    return [[r["name"], *(str(r.get(k, "")) for k in extra), *cells(r, lookup)] for r in rows]


def markdown(rows: list[dict[str, Any]], extra: tuple[str, ...] = ()) -> str:
    head = header(extra)
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    lines += ["| " + " | ".join(cells_) + " |" for cells_ in rows_text(rows, extra)]
    return "\n".join(lines) + "\n\n" + LEGEND + "\n"
