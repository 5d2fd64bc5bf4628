"""Score finished runs and the controls with the evaluation instrument, on FEMNIST digits.

One table: each run's generator next to the controls (real training-writer images, lookup tables
of 1 and 5 real images per class, an untrained generator, a flat grey image), every figure from
`fedgs.evaluation.instrument` (evaluation writers only), each run with its headline epsilon and
threat model. The table is what results/log/ quotes.

Usage: python benchmarks/score_run.py [RUN_DIR ...] [--clients N] [--samples 10000]
       [--feature-samples 2000] [--epochs 5] [--no-controls] [--rows EARLIER.json ...]
       [--json rows.json] [--curve curve.png [--curve-from EARLIER.csv]]
Prints the markdown table; --json also writes every row (per-class figures included): a run's
row carries its epsilon as text and as numbers (epsilon_value, inf for a run without noise;
threat_model; strategy). --curve draws the privacy-utility figure of every row (runs, controls,
--rows files) with `fedgs report`'s plotting function, PNG and CSV side by side; runs whose
folders share a name (e.g. OUT_SEED0/gs-e10 and OUT_SEED1/gs-e10) are seeds of one setting: the
curve goes through their mean and marks each seed. --curve-from adds the points of an earlier
figure's CSV (and its controls where this invocation scores none), to redraw it with new runs.
--no-controls scores the runs only and --rows adds the rows of earlier --json files, so runs
scored in batches (and one scoring of the controls) make one table; an earlier file whose
instrument record differs from this invocation's is refused.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from fedgs.data import load_federated
from fedgs.data.public_digits import cached_digits
from fedgs.evaluation.generator_loader import load_generator
from fedgs.evaluation.instrument import Instrument, InstrumentOptions
from fedgs.evaluation.plots import Control, CurvePoint, privacy_utility, read_curve_csv
from fedgs.evaluation.privacy_figures import curve_epsilon, headline, series_label
from fedgs.evaluation.quality_table import markdown
from fedgs.evaluation.run_files import RunFiles
from fedgs.metrics.controls import real_sampler
from fedgs.training.public_pretraining import PUBLIC_IMAGES

PUBLIC_CONTROL = "public font digits"

CONTROL = "— (control)"  # a control row's epsilon text


def epsilon_text(run: RunFiles) -> str:
    figure = headline(run)
    if figure is None or figure.epsilon is None:
        return "none"
    return f"{figure.epsilon:.4g} ({figure.threat_model}, {figure.accountant}, δ {figure.delta:g})"


def privacy_fields(run_dir: str) -> dict:
    """A run row's privacy columns: the text the table prints and the numbers --curve places
    the run by (epsilon_value None when no epsilon of the run holds, inf without noise)."""
    run = RunFiles.open(run_dir)
    placed = curve_epsilon(run)
    model, value = placed if placed else (None, None)
    text = "∞ (no noise: non-private)" if value == math.inf else epsilon_text(run)
    fields = {"epsilon": text, "epsilon_value": value, "threat_model": model}
    return fields | {"strategy": run.strategy, "seed": run.setting("seed")}


def curve(rows: list[dict], out: Path, earlier: Path | None = None) -> Path | None:
    """--curve: the privacy-utility figure of ``rows`` (and of the ``earlier`` figure's CSV); a
    run row without a numeric epsilon (none holds, or an --rows file written before rows carried
    one) is left out, said so."""
    points, controls = read_curve_csv(earlier) if earlier else ([], [])
    if any(row["epsilon"] == CONTROL for row in rows):  # this invocation's controls win
        controls = []
    for row in rows:
        if row["epsilon"] == CONTROL:
            controls.append(Control(row["name"], row["cnn_accuracy"], row["mlp_accuracy"]))
        elif row.get("epsilon_value") is None:
            print(f"--curve: {row['name']} left out (no numeric epsilon)", flush=True)
        else:
            series = series_label(row["strategy"], row["threat_model"])
            point = (row["epsilon_value"], row["cnn_accuracy"], row["mlp_accuracy"])
            points.append(CurvePoint(row["name"], series, row["threat_model"], *point))
    return privacy_utility(points, controls, out.with_suffix(""))


def earlier_rows(path: Path, record: dict) -> list[dict]:
    """The rows of an earlier --json file, if the same instrument scored them: same options and
    writer split (its "real" calibration accuracies are retrained per invocation and may differ
    in the last digits; each row keeps the calibration it was scored with)."""
    earlier = json.loads(path.read_text())
    if any(earlier["instrument"][key] != record[key] for key in ("options", "split")):
        raise SystemExit(f"{path}: scored by another instrument ({earlier['instrument']})")
    return earlier["rows"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", nargs="*")
    p.add_argument("--data-dir", default="../shared/data/femnist_leaf")
    p.add_argument("--clients", type=int, default=0, help="first N training writers (0 = all)")
    p.add_argument("--samples", type=int, default=10_000, help="downstream training set size")
    p.add_argument("--feature-samples", type=int, default=2_000)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--no-controls", action="store_true", help="score the runs only")
    p.add_argument(
        "--public-control",
        action="store_true",
        help="also score the public font digits that --public-pretrain-steps trains G on: what "
        "public data alone reaches, for runs that used it",
    )
    p.add_argument("--rows", type=Path, nargs="+", default=[], help="earlier --json files")
    p.add_argument("--json", type=Path, help="write every row here")
    p.add_argument("--curve", type=Path, help="draw the privacy-utility figure here (PNG)")
    p.add_argument(
        "--curve-from", type=Path, help="with --curve: an earlier figure's CSV, its points added"
    )
    a = p.parse_args()
    if a.curve_from and not a.curve:
        p.error("--curve-from needs --curve (where to draw)")
    dataset = load_federated("femnist", a.data_dir, labels="digits", num_clients=a.clients or None)
    instrument = Instrument(dataset, InstrumentOptions(a.samples, a.feature_samples, a.epochs))
    print(json.dumps(instrument.record()), flush=True)
    rows = [row for path in a.rows for row in earlier_rows(path, instrument.record())]
    for run_dir in a.run_dirs:
        loaded = load_generator(run_dir)
        row = instrument.score(Path(run_dir).name, loaded.sample).row
        rows.append(row | privacy_fields(run_dir))
        print(json.dumps(rows[-1]), flush=True)
    for score in [] if a.no_controls else instrument.controls():
        rows.append(score.row | {"epsilon": CONTROL})
        print(json.dumps(rows[-1]), flush=True)
    if a.public_control:
        public = real_sampler(*cached_digits(PUBLIC_IMAGES), dataset.num_classes)
        rows.append(instrument.score(PUBLIC_CONTROL, public).row | {"epsilon": CONTROL})
        print(json.dumps(rows[-1]), flush=True)
    if a.json:
        a.json.write_text(json.dumps({"instrument": instrument.record(), "rows": rows}, indent=1))
    print(markdown(rows, extra=("seed", "epsilon")))
    if a.curve:
        drawn = curve(rows, a.curve, a.curve_from)
        print(f"--curve: {drawn or 'nothing to draw (no run with an epsilon)'}")


if __name__ == "__main__":
    main()
