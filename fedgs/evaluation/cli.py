"""``fedgs evaluate`` and ``fedgs report``: argparse only here; the handlers import the rest.

Exit codes: 0 done, 2 bad input (not a run directory, no generator.pt, data or weights not
found, unknown classifier).
"""

from __future__ import annotations

import argparse
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
        help="downstream utility table, scores, figures and epsilons of a finished run",
        description=(
            "Scores RUN_DIR's generator with the evaluation instrument, next to controls (real "
            "training-writer images, lookup tables of 1 and 5 real images per class, an "
            "untrained generator, a flat grey image): CNN and MLP trained on --samples synthetic "
            "images and tested on real images of evaluation writers (never clients), absolute "
            "and calibrated by the same classifier trained on as many real training images; "
            "precision, recall, density, coverage, per-class FID and intra-class diversity on "
            "the evaluation writers' domain classifier; the share of near-copies of training "
            "images. A figure means something only where it beats the 5-per-class lookup table "
            "(marked otherwise). More --classifiers add Table A1 rows; Inception-v3 FID when "
            "--inception-weights is given; training curves and the gradient-norm figure. "
            "Writes RUN_DIR/evaluation/; results are cached per generator.pt and options."
        ),
    )
    evaluate.add_argument("run_dir", type=Path, metavar="RUN_DIR")
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
        "--data-dir", help="where the run's data are now, if not where the run recorded"
    )
    evaluate.add_argument("--seed", type=int, default=0, help="seed of latents and splits (0)")
    evaluate.set_defaults(handler=_evaluate)

    report = subparsers.add_parser(
        "report",
        help="one self-contained HTML page for one run or a comparison of runs",
        description=(
            "Config, every epsilon with its threat model, sample grids, training curves and, "
            "after `fedgs evaluate`, the utility table and gradient-norm figure, in one HTML "
            "file with embedded images; several runs add a comparison and a privacy-utility "
            "figure. The figures also go to FILE_files/ as PNG + CSV."
        ),
    )
    report.add_argument("run_dirs", type=Path, nargs="+", metavar="RUN_DIR")
    report.add_argument("--out", type=Path, required=True, metavar="FILE.html")
    report.set_defaults(handler=_report)


def _fail(command: str, error: Exception) -> int:
    print(f"fedgs {command}: error: {error}", file=sys.stderr)
    return 2


def _evaluate(args: argparse.Namespace) -> int:
    from fedgs.data.errors import DataError
    from fedgs.evaluation.evaluate import EvaluationOptions, evaluate_run
    from fedgs.evaluation.quality_table import markdown
    from fedgs.evaluation.run_files import RunError
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
        )
        if args.inception_weights is not None and not args.inception_weights.is_file():
            raise FileNotFoundError(f"Inception-v3 weights not found: {args.inception_weights}")
        result = evaluate_run(args.run_dir, options)
    except (RunError, DataError, ValueError, FileNotFoundError) as error:
        return _fail("evaluate", error)
    scores, quality = result.scores, result.quality
    split = quality["instrument"]["split"]
    print(f"\n{result.run.root}: real images from {split['evaluation_images']}")
    print(markdown([quality["run"], *quality["controls"]]))
    print(f"Table A1: {len(result.rows)} classifiers on {options.samples} samples")
    print(to_markdown(result.rows))
    if "fid_inception" in scores:
        print(f"Inception FID {scores['fid_inception']:.2f}")
    for figure in result.epsilons:
        epsilon = "n/a" if figure["epsilon"] is None else f"{figure['epsilon']:.4g}"
        print(
            f"epsilon {epsilon} ({figure['label']}; {figure['threat_model']}, "
            f"{figure['accountant']}, delta {figure['delta']:g}, {figure['neighbouring']})"
        )
    for path in result.files.values():
        print(f"  {path}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from fedgs.evaluation.report import write_report
    from fedgs.evaluation.run_files import RunError

    try:
        path = write_report(args.run_dirs, args.out)
    except RunError as error:
        return _fail("report", error)
    print(f"report: {path}")
    return 0
