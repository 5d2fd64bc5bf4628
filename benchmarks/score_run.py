"""Score finished runs and the controls in one table: `fedgs evaluate`, plus what benchmarks need.

A thin wrapper of `fedgs evaluate RUN_DIR... [--no-controls] [--json FILE]` (every run scored
on its own data split, each run's RUN_DIR/evaluation/ written, the controls and real-data
baselines cached per split and settings under $FEDGS_CACHE), kept for the scripts in
benchmarks/ and the commands in results/log/. It adds:

- ``--clients N``: score on the first N training writers instead of each run's own clients
  (0 = all), and with ``--data-dir`` and no run, the controls of FEMNIST digits alone;
- ``--rows EARLIER.json ...``: the rows of earlier ``--json`` files join the table (refused when
  another instrument scored them), so runs scored in batches make one table;
- ``--curve FILE.png [--curve-from EARLIER.csv]``: the privacy-utility figure of every row with
  `fedgs report`'s plotting function, PNG and CSV side by side; runs whose folders share a name
  (e.g. OUT_SEED0/gs-e10 and OUT_SEED1/gs-e10) are seeds of one setting: the curve goes through
  their mean and marks each seed. --curve-from adds the points of an earlier figure's CSV (and
  its controls where this invocation scores none).
The public font digits are one of the instrument's own controls ("public fonts") on digit splits.

Usage: python benchmarks/score_run.py [RUN_DIR ...] [--data-dir DIR] [--clients N]
       [--samples 10000] [--feature-samples 2000] [--epochs 5] [--no-controls]
       [--rows EARLIER.json ...] [--json rows.json] [--curve curve.png [--curve-from EARLIER.csv]]
There is no default data folder: each run's own (its config.json), or --data-dir.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `fedgs evaluate`: before torch loads

import argparse  # noqa: E402
from pathlib import Path  # noqa: E402

from fedgs.evaluation.batch import (  # noqa: E402
    CONTROL,
    control_rows,
    curve,
    earlier_rows,
    epsilon_text,
    privacy_fields,
    run_row,
    table,
    write_json,
)
from fedgs.evaluation.evaluate import EvaluationOptions, Split, evaluate_runs  # noqa: E402
from fedgs.evaluation.run_files import DataSpec  # noqa: E402

__all__ = ["CONTROL", "curve", "earlier_rows", "epsilon_text", "main", "privacy_fields"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dirs", nargs="*", type=Path)
    p.add_argument(
        "--data-dir",
        help="the runs' data folder, if not where each run recorded; without runs, the FEMNIST "
        "(LEAF) folder whose controls to score (no default)",
    )
    p.add_argument(
        "--clients", type=int, help="first N training writers (0 = all; default: each run's own)"
    )
    p.add_argument("--samples", type=int, default=10_000, help="downstream training set size")
    p.add_argument("--feature-samples", type=int, default=2_000)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--no-controls", action="store_true", help="score the runs only")
    p.add_argument("--rows", type=Path, nargs="+", default=[], help="earlier --json files")
    p.add_argument("--json", type=Path, help="write every row here")
    p.add_argument("--curve", type=Path, help="draw the privacy-utility figure here (PNG)")
    p.add_argument(
        "--curve-from", type=Path, help="with --curve: an earlier figure's CSV, its points added"
    )
    return p


def main(argv: list[str] | None = None) -> None:
    p = parser()
    a = p.parse_args(argv)
    if a.curve_from and not a.curve:
        p.error("--curve-from needs --curve (where to draw)")
    if not a.run_dirs and not a.data_dir:
        p.error("no run and no --data-dir: nothing says which data to score on")
    options = EvaluationOptions(
        samples=a.samples,
        epochs=a.epochs,
        score_samples=a.feature_samples,
        data_dir=a.data_dir,
        num_clients=a.clients,
        controls=not a.no_controls,
    )
    if a.run_dirs:
        results = evaluate_runs(a.run_dirs, options)
        if len({id(r.split) for r in results}) > 1:
            raise SystemExit("these runs are on several data splits: score each split apart")
        split = results[0].split
        rows = [run_row(result) for result in results]
    else:  # the controls of FEMNIST digits alone
        spec = DataSpec("femnist", a.data_dir, "digits", a.clients or None, 0)
        split, rows = Split(spec, options), []
    record = split.record()
    try:
        rows = [row for path in a.rows for row in earlier_rows(path, record)] + rows
    except ValueError as error:
        raise SystemExit(str(error)) from None
    rows += control_rows(split.controls)
    if a.json:
        write_json(a.json, record, rows)
    print(table(rows))
    if a.curve:
        drawn = curve(rows, a.curve, a.curve_from)
        print(f"--curve: {drawn or 'nothing to draw (no run with an epsilon)'}")


if __name__ == "__main__":
    main()
