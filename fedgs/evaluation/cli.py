"""``fedgs evaluate`` and ``fedgs report``: argparse only here; the handlers import the rest.

Exit codes: 0 done, 2 bad input (not a run directory, no generator.pt, data or weights not
found, unknown classifier, --json over runs of several data splits).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from fedgs.evaluation.names import CLASSIFIER_NAMES


def _at_least(low: int):
    """An argparse type for integers >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}")
        return value

    return parse


_positive, _count = _at_least(1), _at_least(0)


def register(subparsers: argparse._SubParsersAction) -> None:
    evaluate = subparsers.add_parser(
        "evaluate",
        help="downstream utility table, scores, figures and epsilons of finished runs",
        description=(
            "Scores each RUN_DIR's generator with the evaluation instrument on the run's own "
            "data split (the dataset, data folder, labels, clients and seed its config.json "
            "records), next to controls (real training-writer images, lookup tables of 1 and 5 "
            "real images per class, the font digits public pretraining uses ('public fonts', "
            "digit splits only), an untrained generator, a flat grey image): CNN and MLP "
            "trained on --samples synthetic images and tested on real images of evaluation "
            "writers (never clients), absolute and calibrated by the same classifier trained on "
            "as many real training images; precision, recall, density, coverage, per-class FID "
            "and intra-class diversity on the evaluation writers' domain classifier; the share "
            "of near-copies of training images. A figure means something only where it beats "
            "the 5-per-class lookup table (marked otherwise). More --classifiers add Table A1 "
            "rows; Inception-v3 FID when --inception-weights is given; training curves and the "
            "gradient-norm figure. Writes RUN_DIR/evaluation/ per run and prints one table of "
            "the runs and the controls per data split. The controls and the real-data "
            "baselines are computed once per data split and settings and cached under "
            "$FEDGS_CACHE (default ~/.cache/fedgs); a run's own results per generator.pt and "
            "options under RUN_DIR/evaluation/cache."
        ),
    )
    evaluate.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    evaluate.add_argument(
        "--samples",
        type=_positive,
        default=10_000,
        help="downstream training set size (10000; 60000 = the GS-WGAN paper's setting)",
    )
    evaluate.add_argument(
        "--classifiers",
        nargs="+",
        choices=CLASSIFIER_NAMES,
        metavar="NAME",
        help=f"Table A1 classifiers, of: {', '.join(CLASSIFIER_NAMES)} (default: cnn mlp)",
    )
    evaluate.add_argument(
        "--epochs", type=_positive, default=5, help="epochs of the MLP and CNN (5)"
    )
    evaluate.add_argument(
        "--inception-weights",
        type=Path,
        help="torchvision inception_v3 state dict on disk; adds Inception-v3 FID (never "
        "downloaded)",
    )
    evaluate.add_argument(
        "--inception-samples", type=_positive, default=2000, help="images per side (2000)"
    )
    evaluate.add_argument(
        "--score-samples",
        type=_positive,
        default=2_000,
        help="samples for precision/recall, FID, label agreement, memorisation (2000)",
    )
    evaluate.add_argument(
        "--grad-norm-samples",
        type=_count,
        default=1024,
        help="samples of the gradient-norm figure, GS-WGAN only (1024; 0 = skip)",
    )
    evaluate.add_argument(
        "--grad-norm-warm-start",
        type=_count,
        help="critic warm-start steps for that figure (default: the run's own)",
    )
    evaluate.add_argument(
        "--data-dir",
        help="where the runs' data are now, if not where each run recorded (default: the "
        "folder in the run's config.json; the embedded data need none)",
    )
    evaluate.add_argument("--seed", type=int, default=0, help="seed of latents and splits (0)")
    evaluate.add_argument(
        "--controls",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="score the controls next to the runs (default; computed once per data split and "
        "settings, then cached); --no-controls scores the runs only",
    )
    evaluate.add_argument(
        "--json",
        type=Path,
        metavar="FILE",
        help="also write every row (runs, then controls; per-class figures, each run's epsilon "
        'as text and numbers) and the instrument\'s record here, as {"instrument", "rows"}; the '
        "runs must share one data split",
    )
    evaluate.set_defaults(handler=_evaluate)

    report = subparsers.add_parser(
        "report",
        help="one self-contained HTML page for one run or a comparison of runs",
        description=(
            "Config, every epsilon with its threat model, sample grids, training curves and, "
            "after `fedgs evaluate`, the utility table and gradient-norm figure, in one HTML "
            "file with embedded images; several runs add a comparison and a privacy-utility "
            "figure and table. The figures also go to FILE_files/ as PNG + CSV, and the "
            "privacy-utility points and controls as a record (privacy_utility_points.json) that "
            "--recorded reads back: a grid of runs made over days, on machines that did not "
            "keep every run folder, is drawn from its record plus the new runs."
        ),
    )
    report.add_argument("run_dirs", type=Path, nargs="*", metavar="RUN_DIR")
    report.add_argument("--out", type=Path, required=True, metavar="FILE.html")
    report.add_argument(
        "--recorded",
        type=Path,
        metavar="RECORD.json",
        help="an earlier report's privacy_utility_points.json: its points join the "
        "privacy-utility figure and table (a run given again here replaces its recorded point; "
        "the record's controls serve when no run brings its evaluation's)",
    )
    report.set_defaults(handler=_report)


def _fail(command: str, error: Exception) -> int:
    print(f"fedgs {command}: error: {error}", file=sys.stderr)
    return 2


def _evaluate(args: argparse.Namespace) -> int:
    # idle OpenMP threads sleep instead of spinning: on a busy machine a spinning thread takes
    # the core its sibling needs (measured: a CNN epoch 2x slower at load 7); read when torch
    # loads, so only where the caller set nothing and torch is not loaded yet
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from fedgs.data.errors import DataError
    from fedgs.evaluation import batch
    from fedgs.evaluation.evaluate import EvaluationOptions, evaluate_runs
    from fedgs.evaluation.run_files import RunError, RunFiles
    from fedgs.evaluation.utility import to_markdown

    try:
        defaults = EvaluationOptions()
        options = EvaluationOptions(
            samples=args.samples,
            classifiers=tuple(args.classifiers or defaults.classifiers),
            epochs=args.epochs,
            seed=args.seed,
            score_samples=args.score_samples,
            inception_weights=args.inception_weights,
            inception_samples=args.inception_samples,
            grad_norm_samples=args.grad_norm_samples,
            grad_norm_warm_start=args.grad_norm_warm_start,
            data_dir=args.data_dir,
            controls=args.controls,
        )
        if args.inception_weights is not None and not args.inception_weights.is_file():
            raise FileNotFoundError(f"Inception-v3 weights not found: {args.inception_weights}")
        if args.json is not None:
            specs = {RunFiles.open(d).data_spec(args.data_dir) for d in args.run_dirs}
            if len(specs) > 1:
                raise ValueError(
                    f"--json holds one instrument's rows, but these runs are on {len(specs)} "
                    "data splits; evaluate each split's runs in a call of its own"
                )
        results = evaluate_runs(args.run_dirs, options)
    except (RunError, DataError, ValueError, FileNotFoundError) as error:
        return _fail("evaluate", error)
    for result in results:
        print(
            f"\n{result.run.root}: Table A1, {len(result.rows)} classifiers on "
            f"{options.samples} samples"
        )
        print(to_markdown(result.rows))
        if "fid_inception" in result.scores:
            print(f"Inception FID {result.scores['fid_inception']:.2f}")
        for figure in result.epsilons:
            epsilon = "n/a" if figure["epsilon"] is None else f"{figure['epsilon']:.4g}"
            print(
                f"epsilon {epsilon} ({figure['label']}; {figure['threat_model']}, "
                f"{figure['accountant']}, delta {figure['delta']:g}, {figure['neighbouring']})"
            )
        for path in result.files.values():
            print(f"  {path}")
    for record, rows in batch.batches(results):
        print(f"\nreal images from {record['split']['evaluation_images']}")
        print(batch.table(rows))
        if args.json is not None:
            batch.write_json(args.json, record, rows)
            print(f"rows: {args.json}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from fedgs.evaluation.privacy_utility_table import RecordError
    from fedgs.evaluation.report import write_report
    from fedgs.evaluation.run_files import RunError

    try:
        path = write_report(args.run_dirs, args.out, args.recorded)
    except (RunError, RecordError) as error:
        return _fail("report", error)
    print(f"report: {path}")
    return 0
